"""Parsed message -> bag of tokens. Pure functions: no model, no I/O.

A token's prefix says where it came from (`subject:free`, `url:example.com`);
body words carry none. Each rule notes the measurement behind it: TREC online
protocol, (1-ROCA)% on trec07p-dev / spamassassin without the rule -> with it,
measured when the rule was adopted, with the rules before it in place. The
final defaults score 0.0116 / 0.0541; `python scripts/accuracy/ablate_tokenizer.py`
removes each family in turn from the current tokenizer.

Tried and rejected (same protocol, trec / sa):
- word bigrams of the body: 0.0204 / 0.0676 -> 0.0424 / 0.0830;
- every header tokenized generically: 0.0204 / 0.0676 -> 0.0164 / 0.1219;
- markers for words over 30 characters: no change (0.0201 / 0.0679);
- keeping the Subject's case: no change (0.0203 / 0.0664).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable
from itertools import pairwise

from spamd.mail.attachments import attachment_tokens
from spamd.mail.bulk import bulk_tokens
from spamd.mail.links import link_tokens
from spamd.mail.message import ParsedMessage
from spamd.mail.normalize import is_latin1
from spamd.mail.senders_claimed import claimed_sender_tokens
from spamd.runtime import compiled

# The words found by spamd/mail/_words.c, the patterns below in one pass of C, where it is built
# and the build is current (spamd.runtime.compiled); else (None) by the patterns.
words_in: Callable[[str, bool, int], list[str]] | None = None
ascii_shape: Callable[[str], str] | None = None  # whole_shape of an ASCII value, likewise
non_ascii_runs: Callable[[str], list[int]] | None = None  # the lengths of _NON_ASCII_RUN_RE's runs
hosts_in: Callable[[str], list[str]] | None = None  # what _HOSTISH_RE finds in " " + text
urls_in: Callable[[str], list[tuple[str, str]]] | None = None  # what _URL_RE finds
if compiled.COMPILED:
    from spamd.mail import _words

    words_in, ascii_shape = _words.words_in, _words.ascii_shape
    non_ascii_runs, hosts_in, urls_in = _words.non_ascii_runs, _words.hosts_in, _words.urls_in

# Body words, on lower-cased text: two or more letters/digits with inner ' - . ,
# kept ("don't", "e-mail", "1,000"), and $ % ! attached so prices and shouting stay whole.
# (Minimum length in the pattern, not a filter: tokenize 270 -> 210 us/msg.)
_WORD_RE = re.compile(r"[$€£]?[^\W_][^\W_]++(?:['’\-.,][^\W_]++)*+[%!]?")
# The same without the currency prefix, for text with no currency sign (where the two
# find the same words): the optional prefix alone cost 35 us/msg on trec07p-dev.
_PLAIN_WORD_RE = re.compile(r"[^\W_][^\W_]++(?:['’\-.,][^\W_]++)*+[%!]?")
# The same two for ASCII text, where [^\W_] on lower-cased text is [a-z0-9] and a
# plain range is cheaper to test than a negated category: findall 214 -> 158 ms
# over the ASCII texts of 3,000 trec07p-dev messages (same words).
_ASCII_WORD_RE = re.compile(r"\$?[a-z0-9][a-z0-9]++(?:['\-.,][a-z0-9]++)*+[%!]?")
_ASCII_PLAIN_WORD_RE = re.compile(r"[a-z0-9][a-z0-9]++(?:['\-.,][a-z0-9]++)*+[%!]?")
# The same two for Latin-1 text, with [^\W_] spelled as the characters below U+0100 it
# matches there (one bitmap test a character, where [^\W_] asks Unicode's tables; "’" and "€"
# are not Latin-1): body tokens over trec07p-dev's first 300 messages 729 -> 664 k instructions
# a message (callgrind; the same words, tests/test_tokenize.py).
_LATIN1_ALNUM = "".join(c for c in map(chr, range(256)) if c.isalnum())
_LATIN1_WORD_RE = re.compile(rf"[$£]?[{_LATIN1_ALNUM}][{_LATIN1_ALNUM}]++(?:['\-.,][{_LATIN1_ALNUM}]++)*+[%!]?")
_LATIN1_PLAIN_WORD_RE = re.compile(rf"[{_LATIN1_ALNUM}][{_LATIN1_ALNUM}]++(?:['\-.,][{_LATIN1_ALNUM}]++)*+[%!]?")
# All six are possessive (++, *+): nothing after a word's first two characters can
# fail, so giving characters back never finds another match, and the engine stops
# saving the points it would return to. The same matches (tests/test_tokenize.py
# checks them against the backtracking forms; the same tokens for every message of
# both corpora and of scripts/speed/heavy_mail_index.py's stream), and callgrind counts
# 3.1% fewer instructions analysing trec07p-dev's first 1,000 messages, 2.1% fewer
# for heavy HTML mail.
# URL hosts, on lower-cased text (no IGNORECASE: 4x faster over trec07p-dev).
_URL_RE = re.compile(r"(?:https?://|www\.)([^\s/<>\"'()\[\]{}:?#]+)(/[^\s<>\"']*)?")
_URL_PATH_SPLIT_RE = re.compile(r"[/?=&.#_\-+%]+")
# Address domains and relay hosts: each pattern is tried once per run of name
# characters, not once per character of it. "[\w.+\-]+@..." and
# "[a-z0-9][a-z0-9\-]*(?:\..." restarted inside a run that has no "@" (or no
# ".") and rescanned it to its end: quadratic, 6.8 s for a 512 KiB message of
# From: aaa...a headers, 17 s for aaa...a@bbb...b, 24 s for Received: aaa...a;
# now 0.02 s each. Same matches (checked against the old patterns on every
# header of both corpora and on random strings): a run with no "@" matches with
# an empty group, dropped by the caller; a host starts only where a run starts.
_EMAIL_DOMAIN_RE = re.compile(r"[\w.+\-]+(?:@([\w\-]+(?:\.[\w\-]+)+))?")
# A host starts after a character outside [a-z0-9-]: consumed rather than looked
# behind for, so the pattern starts with a character class that the engine can
# skip along (Received hosts 6.2 -> 5.0 us per header, the same hosts on all
# 56,985 Received headers of both corpora); `relay_hosts` puts a space in front.
_HOSTISH_RE = re.compile(r"[^a-z0-9\-]-*+([a-z0-9][a-z0-9\-]*+(?:\.[a-z0-9\-]++)+)")
_NON_ASCII_RUN_RE = re.compile(r"[^\x00-\x7f]{3,}")
_DATE_ZONE_RE = re.compile(r"([+-]\d{4}|\b[A-Z]{2,5}\b)\s*(?:\([^)]*\))?\s*$")
_DATE_ZONE_AT_END_RE = re.compile(r"([+-]\d{4}|\b[A-Z]{2,5}\b)\s*$")  # the same, for values not ending in ")"
_DIGITS_RE = re.compile(r"\d+")
_LETTERS_RE = re.compile(r"[A-Za-z]+")
_HEX_RUN_RE = re.compile(r"\b[0-9A-Fa-f]{6,}\b")

MAX_WORD = 30
MAX_HOST_CHARS = 253  # the DNS limit
MAX_HOST_LABELS = 8

# Address headers: words of the name and address ("from:"), and the address's domain ("from@").
_ADDRESS_HEADERS = {
    name: (f"{name}:", f"{name}@") for name in ("from", "to", "cc", "reply-to", "sender", "return-path")
}
# Free-text headers, tokenized like the body but tagged.
_TEXT_HEADERS = {
    "subject": "subject:",
    "x-mailer": "x-mailer:",
    "user-agent": "x-mailer:",
    "content-type": "content-type:",
    "organization": "org:",
}
# Tokens are built as prefix + word through map(prefix.__add__, ...), which keeps the
# loop in C: the same tokens as an f-string generator at half its cost per token.


def words(text: str) -> list[str]:
    """Lower-cased words of 2..MAX_WORD characters; longer runs are dropped."""
    return lowered_words(text.lower())


def lowered_words(lowered: str) -> list[str]:
    """`words` of text that is already lower-cased."""
    ascii = lowered.isascii()
    if not ascii and not is_latin1(lowered) and _CJK_RE.search(lowered):
        return cjk_words(lowered)
    if words_in is not None:
        return words_in(lowered, ascii, MAX_WORD)  # 799 -> 242 k instructions a message (callgrind; see _words.c)
    found = _found_words(lowered, ascii)
    # map(len): 3x faster than a generator here; a text no longer than MAX_WORD needs no look.
    if len(lowered) > MAX_WORD and found and max(map(len, found)) > MAX_WORD:
        found = [w for w in found if len(w) <= MAX_WORD]
    return found


def _found_words(lowered: str, ascii: bool) -> list[str]:
    """The words the patterns find in `lowered` (not CJK), as words_in finds them in C."""
    if ascii:
        pattern = _ASCII_WORD_RE if "$" in lowered else _ASCII_PLAIN_WORD_RE
    elif is_latin1(lowered):
        pattern = _LATIN1_WORD_RE if "$" in lowered or "£" in lowered else _LATIN1_PLAIN_WORD_RE
    else:
        pattern = _WORD_RE if "$" in lowered or "€" in lowered or "£" in lowered else _PLAIN_WORD_RE
    return pattern.findall(lowered)


# Chinese and Japanese write no spaces between words: a sentence is one run of
# letters, longer than MAX_WORD and dropped whole, or kept as a "word" that never
# recurs. Such runs become character pairs instead. On the derived CJK streams (spamd_lab.variants.cjk; bogofilter 0.190 on sa,
# 0.0215 on trec), (1-ROCA)% sa / trec: the run dropped 0.175 / 0.0092 (only
# trec's strong headers left), single characters 0.227 / 0.136, overlapping pairs
# (Lucene's CJKAnalyzer) 0.075 / 0.038, pairs side by side 0.077 / 0.024: half
# as many tokens, so a page of Chinese outweighs the headers half as much. The
# corpora as they are (a few Chinese spams): sa 0.0541 -> 0.0529, trec 0.0116 ->
# 0.0119 (with the model of that day).
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]+")


def cjk_words(lowered: str) -> list[str]:
    """`lowered_words` of text with CJK runs: the other words, then each run cut into character pairs."""
    runs = _CJK_RE.findall(lowered)
    found = lowered_words(_CJK_RE.sub(" ", lowered))
    for run in runs:
        # An odd run's last character is left out: kept (with lone characters), sa / trec
        # 0.077 / 0.024 -> 0.079 / 0.027, hm% at sm%=0.1 on sa 9.3 -> 11.2.
        found += [run[i : i + 2] for i in range(0, len(run) - 1, 2)]
    return found


def relay_hosts(lowered: str) -> list[str]:
    """Host names and IPv4 addresses in lower-cased text (a Received header's relays)."""
    if hosts_in is not None:
        return hosts_in(lowered)  # the pattern in one pass of C (_words.c says what it saves)
    return _HOSTISH_RE.findall(" " + lowered)


@functools.lru_cache(maxsize=4096)
def _host_tokens(host: str) -> tuple[str, ...]:
    """The host and its parent domains down to two labels: url:a.b.example.com, url:b.example.com, url:example.com.

    URL host tokens: 0.0177 / 0.0642 -> 0.0166 / 0.0647 (hm% at sm%=0.1 on spamassassin
    3.78 -> 4.39: mixed there, kept for trec and for mail whose text hides its links).
    `host` is already stripped of dots and cut to MAX_HOST_CHARS (by `url_tokens`),
    which bounds the cache: at most 4,096 hosts, under 10 MB even if every one is
    253 characters long. Cached because a message repeats its hosts and mail
    repeats the popular ones: 93% of lookups hit in one pass over trec07p-dev's
    first 3,000 messages, url_tokens 6.4 -> 4.9 us per URL.
    """
    # At most the last MAX_HOST_LABELS labels: a "www.www.www..." body of 30,000
    # labels made this quadratic (6.8 s for one message) before the cap.
    labels = host.split(".")[-MAX_HOST_LABELS:]
    return tuple(["url:" + ".".join(labels[i:]) for i in range(max(len(labels) - 1, 1))])


def url_tokens(lowered: str) -> list[str]:
    """Hosts of the URLs in lower-cased text, and the words of their paths."""
    found: list[tuple[str, str]] = _URL_RE.findall(lowered) if urls_in is None else urls_in(lowered)
    tokens: list[str] = []
    for host, _ in found:
        tokens += _host_tokens(host.strip(".")[:MAX_HOST_CHARS])
    # URL path words: 0.0194 / 0.0648 -> 0.0166 / 0.0647. The paths are split in one
    # pass, joined by "/" (itself a separator, so the words are the same as path by
    # path): url_tokens 5.6 -> 5.0 us per URL on trec07p-dev.
    paths = "/".join([path for _, path in found])
    tokens += ["urlpath:" + p for p in _URL_PATH_SPLIT_RE.split(paths) if 1 < len(p) <= MAX_WORD]
    return tokens


# ASCII digits -> "9", ASCII letters -> "a"; then runs of either collapse to one.
# On bytes: an ASCII value's shape is computed on its encoding, where translate
# is a 256-byte table and the regexes run alike (shape 8.9 -> 5.6 us per value,
# ~9 values per message on trec07p-dev; the same shapes on every value of both corpora).
_ASCII_MASK = bytes.maketrans(b"0123456789" + string.ascii_letters.encode(), b"9" * 10 + b"a" * 52)
_HEX_RUN_BYTES_RE = re.compile(rb"\b[0-9A-Fa-f]{6,}\b")
# Two passes with a literal prefix find runs faster than one pass with lookbehinds
# ("(?<=a)a+|(?<=9)9+": 4.5 -> 3.1 us per value).
_LETTER_RUN_RE = re.compile(rb"aa+")
_DIGIT_RUN_RE = re.compile(rb"99+")


# A long ASCII value is shaped first up to a space before its SHAPE_HEAD-th character: the
# runs end at the space, so that head's shape begins the whole value's, and when it is 40
# characters long it is the answer (a Received header's, 150-250 characters, usually is).
# Header tokens over trec07p-dev's first 300 messages: 664 -> 613 k instructions a message
# (callgrind); the same shapes for every header value of the first 3,000 (and
# tests/test_tokenize.py's).
SHAPE_HEAD = 120


def shape(value: str) -> str:
    """A header value with hex runs, digit runs and (ASCII) word runs masked: how a mailer writes it, not what.

    "<3fa9b2c1.2007-04-12@mx7.example.com>" -> "<a.9-9-9@a9.a.a>" (a hex run is masked as a word).
    """
    if ascii_shape is not None and value.isascii():
        return ascii_shape(value)  # 238 -> 25 k instructions a message (callgrind; see _words.c)
    if len(value) > SHAPE_HEAD and value.isascii():
        space = value.rfind(" ", 0, SHAPE_HEAD)
        if space > 0:
            head = whole_shape(value[: space + 1])
            if len(head) == 40:
                return head
    return whole_shape(value)


def whole_shape(value: str) -> str:
    """`shape` of the whole value at once (tests compare the two)."""
    if value.isascii():
        masked = _HEX_RUN_BYTES_RE.sub(b"a", value.encode("ascii")).translate(_ASCII_MASK)
        return _DIGIT_RUN_RE.sub(b"9", _LETTER_RUN_RE.sub(b"a", masked))[:40].decode("ascii")
    # \d also masks non-ASCII digits
    return _LETTERS_RE.sub("a", _DIGITS_RE.sub("9", _HEX_RUN_RE.sub("a", value)))[:40]


def _date_zone(value: str) -> re.Match[str] | None:
    """`_DATE_ZONE_RE.search(value)`, tried only where a match can start.

    A match holds at most one ")", the value's last non-blank character: so it
    starts after the ")" before that one, and with no ")" at the end there is no
    comment to look for. Searched from the start, every zone followed by "("
    rescanned the rest of the value: a 512 KiB message of "Date: AB(AB(AB(..."
    headers took 0.58 s to analyze -> 0.15 s (the search itself 0.025 s). Same
    matches (checked on every Date of both corpora; tests/test_fuzz.py).
    """
    end = len(value.rstrip())
    if value[end - 1 : end] != ")":
        return _DATE_ZONE_AT_END_RE.search(value)
    return _DATE_ZONE_RE.search(value, value.rfind(")", 0, end - 1) + 1)


def date_tokens(value: str) -> list[str]:
    """The Date header's time zone and its shape.

    Mailers each write dates their own way and spamware forges them badly
    ("date-shape:a, 9 a 9 9:9:9 +9"): 0.0166 / 0.0647 -> 0.0161 / 0.0633.
    """
    zone = _date_zone(value)
    return [f"date-zone:{zone.group(1) if zone else 'none'}", f"date-shape:{shape(value)}"]


def header_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens from headers, each tagged with the header it came from."""
    # Header-tagged tokens as a whole: 0.1416 / 0.2274 -> 0.0166 / 0.0647.
    tokens: list[str] = []
    for name, value in msg.headers:
        # Which headers are present at all: 0.0224 / 0.0637 -> 0.0166 / 0.0647
        # (a small loss on spamassassin, hm% at sm%=0.1 4.72 -> 4.39 there, for a large gain on trec).
        tokens.append("header:" + name)
        prefix = _TEXT_HEADERS.get(name)
        if prefix is not None:
            tokens += map(prefix.__add__, words(value))
            continue
        prefixes = _ADDRESS_HEADERS.get(name)
        if prefixes is not None:
            lowered = value.lower()
            tokens += map(prefixes[0].__add__, lowered_words(lowered))
            tokens += [prefixes[1] + d for d in _EMAIL_DOMAIN_RE.findall(lowered) if d]
            continue
        if name == "received":  # relay host names and IPs: 0.0177 / 0.0713 -> 0.0166 / 0.0647
            tokens += map("received:".__add__, relay_hosts(value.lower()))
        elif name == "message-id":  # the generating domain: 0.0167 / 0.0666 -> 0.0166 / 0.0647
            _, _, domain = value.lower().rpartition("@")
            tokens.append("message-id@" + domain.strip("<> "))
            # Its shape (generators differ): 0.0161 / 0.0633 -> 0.0159 / 0.0622.
            tokens.append("message-id-shape:" + shape(value))
        elif name == "date":
            tokens += date_tokens(value)
    # Subject word pairs: 0.0168 / 0.0680 -> 0.0166 / 0.0647.
    subject = words(msg.header("subject"))
    tokens += [f"subject:{a} {b}" for a, b in pairwise(subject)]
    tokens += header_shape_tokens(msg)
    return tokens


# Runs of address characters, with the "@" that may follow: one try per run.
# search(r"([\w.+\-]+)@") restarted at each character of a run with no "@":
# quadratic, 0.084 s for one 4 KiB "From: aaa...a" (the fuzzer's slowest input).
_LOCAL_PART_RE = re.compile(r"[\w.+\-]+(@)?")


def local_part(value: str) -> str | None:
    """The first run of address characters followed by "@": what the search with "@" in the pattern found."""
    for match in _LOCAL_PART_RE.finditer(value):
        if match.group(1):
            return match.group(0)[:-1]
    return None


def header_shape_tokens(msg: ParsedMessage) -> list[str]:
    """How the sending software writes its headers, whatever they say.

    Each alone, against 0.0159 / 0.0622: sender's local part 0.0158 / 0.0610,
    Subject 0.0154 / 0.0619, X-Mailer 0.0157 / 0.0621, number of To addresses
    0.0158 / 0.0619, the first (originating) Received header 0.0155 / 0.0597;
    all five 0.0148 / 0.0583.
    """
    tokens = ["subject-shape:" + shape(msg.header("subject")), f"to-count:{min(msg.header('to').count('@'), 10)}"]
    sender = local_part(msg.header("from"))
    if sender:
        tokens.append("from-local-shape:" + shape(sender))
    mailer = msg.header("x-mailer")
    if mailer:
        tokens.append("x-mailer-shape:" + shape(mailer))
    received = [shape(value) for name, value in msg.headers if name == "received"]
    if received:
        tokens.append("received-first-shape:" + received[-1])
    # Every Received header's shape and the whole From's, on top of the five above:
    # 0.0148 / 0.0583 -> 0.0141 / 0.0558 (hm% at sm%=0.1 on spamassassin 3.69 -> 4.02).
    tokens += map("received-shape:".__add__, received)
    tokens.append("from-shape:" + shape(msg.header("from")))
    # The To shape, and Reply-To's when there is one (scored as mean log-odds of
    # distinct tokens): 0.0121 / 0.0550 -> 0.0116 / 0.0540. Cc, Sender and
    # Return-Path shapes as well: 0.0114 / 0.0552, so not those.
    tokens.append("to-shape:" + shape(msg.header("to")))
    reply_to = msg.header("reply-to")
    if reply_to:
        tokens.append("reply-to-shape:" + shape(reply_to))
    return tokens


def body_tokens(msg: ParsedMessage) -> list[str]:
    """Words of the visible text of every text part, URL hosts and paths, non-ASCII runs."""
    tokens: list[str] = []
    for text in msg.texts:
        lowered = text.lower()
        tokens += lowered_words(lowered)
        if "www." in lowered or "://" in lowered:
            tokens += url_tokens(lowered)
        if not lowered.isascii():
            # Runs of 3+ non-ASCII characters, by length in 4s (mis-declared charsets,
            # look-alike letters): 0.0175 / 0.0648 -> 0.0166 / 0.0647.
            runs = (
                [len(run) for run in _NON_ASCII_RUN_RE.findall(lowered)]
                if non_ascii_runs is None
                else non_ascii_runs(lowered)
            )
            tokens += [f"nonascii:{length // 4}" for length in runs]
    if msg.urls:  # URLs in HTML attributes, invisible in the text; they hold no
        # whitespace, so one pass over them joined finds the same URLs (24 -> 9 us/msg).
        tokens += url_tokens(" ".join(msg.urls).lower())
    return tokens


def structure_tokens(msg: ParsedMessage) -> list[str]:
    """MIME shape: part types, attachment extensions, parser defects."""
    # Structure tokens: 0.0172 / 0.0650 -> 0.0166 / 0.0647.
    tokens = [f"part:{p.content_type}" for p in msg.parts]
    tokens.extend(f"filename-ext:{p.filename.rpartition('.')[2].lower()[:10]}" for p in msg.parts if p.filename)
    tokens.extend(f"defect:{d}" for d in msg.defects)
    return tokens


# Distinct words of hidden text that become `hidden:` tokens: every one of 150 hidden
# words would still dilute the message's mean (each a token of its own).
MAX_HIDDEN_WORDS = 20


def disguise_tokens(msg: ParsedMessage) -> list[str]:
    """Text hidden by CSS and disguised words as evidence of their own, never as ordinary words.

    `hidden:<how>` per way of hiding, `hidden:words:<log2 count>`, and the first
    MAX_HIDDEN_WORDS distinct hidden words as `hidden:<word>`; `obfuscated:<trick>`
    per disguise undone (spamd.mail.normalize); `salad:words:<log2 count>` for word salad
    left out of the text (its words count for nothing). None for a message with none of these.
    """
    if not (msg.hidden_kinds or msg.obfuscations or msg.salad_words):
        return []
    tokens = [f"hidden:{kind}" for kind in dict.fromkeys(msg.hidden_kinds)]
    if msg.hidden:
        hidden_words = words(" ".join(msg.hidden))
        tokens.append(f"hidden:words:{len(hidden_words).bit_length()}")
        tokens += ["hidden:" + w for w in list(dict.fromkeys(hidden_words))[:MAX_HIDDEN_WORDS]]
    tokens += [f"obfuscated:{trick}" for trick in dict.fromkeys(msg.obfuscations)]
    if msg.salad_words:
        tokens.append(f"salad:words:{msg.salad_words.bit_length()}")
    return tokens


def salad_tokens(msg: ParsedMessage) -> list[str]:
    """The words of the message's runs of word salad (spamd.mail.hidden.split_word_salad): ordinary body words,
    last among `tokenize`'s so that the model can weigh them apart ([model] salad_tokens)."""
    return lowered_words(" ".join(msg.salad)) if msg.salad else []


def tokenize(msg: ParsedMessage) -> list[str]:
    """All tokens of a message, repeats kept (the model counts them); the word salad's words last."""
    return header_tokens(msg) + body_tokens(msg) + structure_tokens(msg) + disguise_tokens(msg) + salad_tokens(msg)


# The mail-evidence families, each switched in [model] by this name (spamd.model.families):
# who claims to send the message, where its links go, what is attached, how bulk mail
# announces itself. Each is measured where its default is set (spamd/config/sections.py).
EVIDENCE_FAMILIES = {
    "sender_claims": claimed_sender_tokens,
    "link_targets": link_tokens,
    "attachment_kinds": attachment_tokens,
    "bulk_marks": bulk_tokens,
}


def evidence_tokens(msg: ParsedMessage, families: Iterable[str]) -> list[str]:
    """The tokens of the named mail-evidence families (EVIDENCE_FAMILIES), in that order."""
    tokens: list[str] = []
    for name in families:
        tokens += EVIDENCE_FAMILIES[name](msg)
    return tokens
