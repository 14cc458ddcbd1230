"""Fuzzing the parse -> tokenize -> featurize path: seeds, a MIME-aware mutator, the target.

Shared by tests/test_fuzz.py (a short hypothesis run in CI) and
scripts/robustness/fuzz_parser.py (the long campaign, atheris or plain random mutation).
Seeds are hand-written hostile MIME, the small versions of every slow pattern
found so far, and real messages from ../shared/corpora when it is there.
Not a conftest: nothing here applies itself.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spamd.config import Config
from spamd.evaluation.trec import read_index
from spamd.learning.classifier import Classifier
from spamd.model.bayes import Label, MultinomialNB
from tests import core_helpers as h

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
INDEXES = (CORPORA / "trec07p-dev" / "full" / "index", CORPORA / "spamassassin" / "index")

# Inputs may grow a little past the parser's 512 KiB cap, so truncation is exercised too.
MAX_INPUT = 600 * 1024
# The bound every input must meet (parse + tokenize + featurize + score).
SLOW_SECONDS = 1.0

# Pieces of MIME, HTML and header syntax, so mutations reach the parser's branches,
# and the characters of every quadratic pattern found so far.
FRAGMENTS = [
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b": ",
    b"\n ",
    b"\n\t",
    b"Subject: ",
    b"From: ",
    b"To: ",
    b"Cc: ",
    b"Reply-To: ",
    b"Received: from ",
    b"Message-ID: <",
    b"Content-Type: ",
    b"multipart/mixed",
    b"multipart/alternative",
    b"multipart/digest",
    b"message/rfc822",
    b"text/html",
    b"text/plain",
    b"application/octet-stream",
    b"; boundary=",
    b'; boundary="B"',
    b"B",
    b"--B",
    b"--B--",
    b"--",
    b"; charset=",
    b"utf-8",
    b"koi8-r",
    b"utf-16",
    b"utf-7",
    b"iso-2022-jp",
    b"gb2312",
    b"x-bogus",
    b"idna",
    b"punycode",
    b"unicode-escape",
    b"Content-Transfer-Encoding: ",
    b"base64",
    b"quoted-printable",
    b"8bit",
    b"Content-Disposition: attachment; filename=",
    b"a.exe",
    b"=?utf-8?B?",
    b"=?iso-8859-1?Q?",
    b"=?",
    b"?=",
    b"?q?",
    b"?b?",
    b"=E9",
    b"=\n",
    b"=3D",
    b"<html>",
    b"<body>",
    b"<script>",
    b"</script>",
    b"<style>",
    b"</style>",
    b"<!--",
    b"-->",
    b"<head>",
    b"</head>",
    b"<a href=",
    b'<a href="http://x.example/p?q=1">',
    b"<img src=www.",
    b"&amp;",
    b"&#",
    b"&#x",
    b"&#9999999999",
    b";",
    b"http://",
    b"https://",
    b"www.",
    b".com",
    b"@",
    b"a@b.example",
    b"1,000",
    b"$",
    b"%",
    b"!",
    b"'",
    b"-",
    b".",
    b",",
    b"\\u",
    b"\\",
    b"SGVsbG8gd29ybGQ=",
    b"\x00",
    b"\xff\xfe",
    b"\xc3\xa9",
    b"\xe2\x80\x99",
    b"\xf0\x9f\x98\x80",
    b" ",
    b"\t",
    b"X-Spam-Status: Yes\n",
    b"From spammer@example.com Mon Apr  2 10:00:00 2007\n",
]


# ---------------------------------------------------------------- hostile seeds


def _repeat(unit: bytes, size: int) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


def headers_of(name: bytes, unit: bytes, value_bytes: int = 4000, total: int = 512 * 1024) -> bytes:
    """As many `name: <unit repeated>` header lines as fit in `total` bytes, then a short body."""
    line = name + b": " + _repeat(unit, value_bytes) + b"\n"
    return line * max(1, total // len(line)) + b"\nbody\n"


def text_body(unit: bytes, ctype: bytes = b"text/plain", size: int = 512 * 1024 - 200, extra: bytes = b"") -> bytes:
    """One text part of `size` bytes of `unit` repeated."""
    return b"Subject: x\nContent-Type: " + ctype + b"\n" + extra + b"\n" + _repeat(unit, size)


def text_parts(unit: bytes, ctype: bytes = b"text/plain", parts: int = 4, chars: int = 128 * 1024) -> bytes:
    """A multipart of `parts` text parts, each `chars` bytes of `unit` (each at the per-part text cap)."""
    body = b"".join(b"--P\nContent-Type: " + ctype + b"\n\n" + _repeat(unit, chars) + b"\n" for _ in range(parts))
    return b"Subject: x\nContent-Type: multipart/mixed; boundary=P\n\n" + body + b"--P--\n"


def nested_multipart(depth: int) -> bytes:
    head = b"".join(b"--B%d\nContent-Type: multipart/mixed; boundary=B%d\n\n" % (i, i + 1) for i in range(depth))
    return b"Content-Type: multipart/mixed; boundary=B0\n\n" + head + b"--B%d\n\ndeepest words\n" % depth


# Pathological inputs: (name, raw). Sizes at the parser caps (512 KiB message,
# 128 Ki characters of text per part). Each was, or could have been, slow:
# the ones marked "was" were quadratic before the fix named in its module.
PATHOLOGICAL: list[tuple[str, bytes]] = [
    # Address headers (was: 6.8 s, 4.5 s and 17 s in tokenize._EMAIL_DOMAIN_RE).
    ("from-a-run", headers_of(b"From", b"a")),
    ("from-dot-run", headers_of(b"From", b"a.")),
    ("from-at-run", headers_of(b"From", b"a@")),
    ("from-local-at-domain", headers_of(b"To", b"a" * 2000 + b"@" + b"b" * 2000)),
    ("cc-plus-dash", headers_of(b"Cc", b"+-")),
    # Received (was: 24 s and 11 s in tokenize._HOSTISH_RE).
    ("received-a-run", headers_of(b"Received", b"a")),
    ("received-a-dash-run", headers_of(b"Received", b"a-")),
    ("received-dash-run", headers_of(b"Received", b"-")),
    ("received-dots", headers_of(b"Received", b"a.")),
    ("received-digits", headers_of(b"Received", b"1")),
    # RFC 2047: runs of "=?", unclosed and closed encoded words.
    ("subject-eq-q", headers_of(b"Subject", b"=?")),
    ("subject-unclosed-words", headers_of(b"Subject", b"=?a?q?", 16000)),
    ("subject-many-words", headers_of(b"Subject", b"=?utf-8?q?a?= ", 16000)),
    ("subject-b-words", headers_of(b"Subject", b"=?utf-8?b?", 16000)),
    ("subject-punycode-word", headers_of(b"Subject", b"=?punycode?q?" + b"a" * 15000 + b"?=", 16000)),
    # Content-Type parameters.
    ("ctype-semicolons", headers_of(b"Content-Type", b";a")),
    ("ctype-open-quotes", headers_of(b"Content-Type", b';a="\\')),
    ("ctype-spaces", headers_of(b"Content-Type", b"; ")),
    # Header syntax.
    ("one-long-name", _repeat(b"a", 512 * 1024)),
    ("colons", _repeat(b"a:", 512 * 1024)),
    ("blank-value", b"a:" + _repeat(b" ", 512 * 1024)),
    ("folds", b"a: b\n" + _repeat(b" x\n", 512 * 1024)),
    ("lt-in-headers", headers_of(b"Message-ID", b"<")),
    # Our own header present: strip_own_headers walks every header line in Python,
    # twice per message (key and tokens). Linear; the slowest class known (0.2-0.5 s).
    ("own-header-short-lines", b"X-Spam-Status: Yes\n" + _repeat(b"a\n", 512 * 1024 - 20)),
    ("own-header-cr-lines", b"X-Spam-Status: Yes\n" + _repeat(b"a\r", 512 * 1024 - 20)),
    ("own-header-every-line", _repeat(b"X-Spam-a:\n", 512 * 1024)),
    # HTML.
    ("html-lt", text_body(b"<", b"text/html")),
    ("html-open-tags", text_body(b"<a", b"text/html")),
    ("html-attr-eq", text_body(b"= ", b"text/html")),
    ("html-attr-quote", text_body(b'="', b"text/html")),
    ("html-script", text_body(b"<script", b"text/html")),
    ("html-comment", text_body(b"<!--", b"text/html")),
    ("html-charref", text_body(b"&#", b"text/html")),
    # (was: ValueError from int() past 4,300 digits; the message's text was lost)
    ("html-long-charref", text_body(b"&#" + b"9" * 10000 + b";", b"text/html")),
    ("html-named-refs", text_body(b"&amp", b"text/html")),
    ("html-in-plain", text_body(b"<html>" + b"<a" * 1000)),
    # Tokenizer on plain text, one part at the message cap and four at the text cap.
    *[
        (f"{layout}-{name}", build(unit))
        for layout, build in (("body", text_body), ("parts", text_parts))
        for name, unit in (
            ("www", b"www."),
            ("http", b"http://"),
            ("url-path", b"http://a/"),
            ("dots", b"."),
            ("at", b"@"),
            ("word-at", b"a@"),
            ("digit-commas", b"1,"),
            ("digits-commas", b"11,"),
            ("letters", b"a"),
            ("word-dash", b"a-"),
            ("word-dot", b"a."),
            ("dollars", b"$"),
            ("apostrophes", b"a'"),
            ("non-ascii", b"\xc3\xa9"),
            ("non-ascii-space", b"\xc3\xa9 "),
            ("lt", b"<"),
            ("hyphens", b"-"),
        )
    ],
    # Transfer encodings.
    ("base64-junk", text_body(b"!", extra=b"Content-Transfer-Encoding: base64\n")),
    ("base64-text", text_body(b"QUFB", extra=b"Content-Transfer-Encoding: base64\n")),
    ("qp-equals", text_body(b"=", extra=b"Content-Transfer-Encoding: quoted-printable\n")),
    ("qp-soft-breaks", text_body(b"=\n", extra=b"Content-Transfer-Encoding: quoted-printable\n")),
    # Charsets (was: punycode 3.9 s and 8 s; unicode-escape raised DeprecationWarning).
    ("punycode", text_body(b"a", b"text/plain; charset=punycode")),
    ("punycode-dash-late", text_body(b"a", b"text/plain; charset=punycode", 256 * 1024) + b"-" + b"b" * 255000),
    ("unicode-escape", text_body(b"\\.", b"text/plain; charset=unicode-escape")),
    ("utf-7-plus", text_body(b"+", b"text/plain; charset=utf-7")),
    ("utf-7-base64", text_body(b"+AAAA", b"text/plain; charset=utf-7")),
    ("utf-16", text_body(b"a\x00", b"text/plain; charset=utf-16")),
    # MIME structure.
    ("many-boundaries", b"Content-Type: multipart/mixed; boundary=B\n\n" + _repeat(b"--B\n\nx\n", 512 * 1024)),
    (
        "many-parts-with-headers",
        b"Content-Type: multipart/mixed; boundary=B\n\n"
        + _repeat(b"--B\nContent-Type: text/plain; charset=utf-8\n\nx\n", 512 * 1024 - 100),
    ),
    ("delimiters-only", b"Content-Type: multipart/mixed; boundary=B\n\n" + _repeat(b"--B", 512 * 1024)),
    ("nested-multipart", nested_multipart(20000)[: 512 * 1024]),
    ("nested-rfc822", _repeat(b"Content-Type: message/rfc822\n\n", 512 * 1024)),
]


def _small(raw: bytes, size: int = 2048) -> bytes:
    return raw[:size]


def hostile_seeds() -> list[bytes]:
    """Hand-written messages and the first 2 KiB of each pathological input (mutations regrow them)."""
    return list(h.HAND_MESSAGES) + [h.crlf(m) for m in h.HAND_MESSAGES] + [_small(raw) for _, raw in PATHOLOGICAL]


def corpus_seeds(count: int, max_bytes: int = MAX_INPUT) -> list[bytes]:
    """`count` messages spread evenly over the corpora present (none when they are absent)."""
    entries = [e for index in INDEXES if index.is_file() for e in read_index(index)]
    if not entries:
        return []
    step = max(1, len(entries) // count)
    seeds = []
    for entry in entries[::step][:count]:
        try:
            seeds.append(entry.path.read_bytes()[:max_bytes])
        except OSError:
            continue  # a message missing from the corpus is the corpus's problem, not the parser's
    return seeds


def corpus_present() -> bool:
    return any(index.is_file() for index in INDEXES)


# ---------------------------------------------------------------- the mutator


def mutate(data: bytes, rng: random.Random, seeds: list[bytes], max_size: int = MAX_INPUT) -> bytes:
    """A few edits: byte flips, cuts, inserted fragments, crossover, and long repeats of a slice or fragment.

    The long repeats are what find slow paths (a regex that backtracks over a run
    of one character needs the run); a byte-level mutator rarely grows them.
    """
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randint(0, len(out))
        op = rng.randrange(11)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1:
            del out[at : at + rng.randint(1, 256)]
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op in (3, 4):
            out[at:at] = rng.choice(FRAGMENTS)
        elif op == 5:
            out[at:at] = out[at : at + rng.randint(1, 512)]
        elif op == 6:
            del out[at:]
        elif op == 7:  # a run: one slice or fragment repeated up to the size cap
            unit = bytes(out[at : at + rng.randint(1, 8)]) if rng.random() < 0.5 else rng.choice(FRAGMENTS)
            if unit:
                room = max(0, max_size - len(out))
                out[at:at] = unit * min(rng.choice((10, 100, 1000, 10_000, 100_000)), room // len(unit))
        elif op == 8:  # crossover with another seed
            other = rng.choice(seeds)
            start = rng.randint(0, len(other))
            out[at:at] = other[start : start + rng.randint(1, 4096)]
        elif op == 9:  # line endings
            out = bytearray(
                bytes(out).replace(b"\n", b"\r\n") if rng.random() < 0.5 else bytes(out).replace(b"\r\n", b"\n")
            )
        else:  # a header line at the top
            out[0:0] = rng.choice(FRAGMENTS[4:30]) + rng.randbytes(rng.randint(0, 8)) + b"\n"
        if len(out) > max_size:
            del out[max_size:]
    return bytes(out)


# ---------------------------------------------------------------- the target


def fuzz_classifier(seeds: list[bytes], train: int = 400) -> Classifier:
    """The real classifier on a model trained on some seeds (so scores use real counts)."""
    config = Config()
    model = MultinomialNB(config.model)
    classifier = Classifier(config, model)
    for i, raw in enumerate(seeds[:train]):
        model.learn_one(classifier.analyze(raw).features, Label(i % 2))
    return classifier


def best_of(runs: int, work: Callable[[], object]) -> float:
    """The fastest of `runs` timings of `work`, in seconds: what the code costs, less the machine's stalls."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def run_one(classifier: Classifier, raw: bytes) -> float:
    """Analyze and score one input with warnings as errors; returns seconds. Raises what the path raises."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classifier.score(classifier.analyze(raw))
    return time.perf_counter() - start


@dataclass
class Tally:
    """What a campaign saw: inputs, time, the slowest input, failures."""

    inputs: int = 0
    busy_seconds: float = 0.0
    slowest_seconds: float = 0.0
    slowest_input: bytes = b""
    crashes: list[tuple[bytes, str]] = field(default_factory=list)
    slow: list[tuple[bytes, float]] = field(default_factory=list)

    def record(self, raw: bytes, run: Callable[[bytes], float]) -> None:
        try:
            seconds = run(raw)
        except Exception as e:  # any exception at all is a finding: the path must be total
            self.crashes.append((raw, f"{type(e).__name__}: {e}"))
            self.inputs += 1
            return
        self.inputs += 1
        self.busy_seconds += seconds
        if seconds > self.slowest_seconds:
            self.slowest_seconds, self.slowest_input = seconds, raw
        if seconds > SLOW_SECONDS:
            self.slow.append((raw, seconds))
