"""Raw bytes -> parsed message: headers, visible text of text parts, URLs, MIME structure.

The walk over MIME parts is our own, iterative and capped (bytes, parts, depth),
because the stdlib `email` parser recurses once per nesting level (a message
nested 1,000 deep raises RecursionError and loses everything) and ran at 3,900
msgs/s on trec07p-dev before any tokenizing. Decoding itself is the stdlib's:
RFC 2047 (`email.header`), base64 and quoted-printable (`binascii`), charsets
(`codecs`), HTML entities (`html`). Nothing here raises on any input: damage is
recorded in `defects` and parsing carries on with what can be read.

This module does not tokenize; `spamd.mail.tokenize` turns a ParsedMessage into tokens.
"""

from __future__ import annotations

import binascii
import codecs
import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from email.header import decode_header

from spamd.config import ParserConfig
from spamd.mail.hidden import cut_word_salad, split_word_salad
from spamd.mail.markup import html_to_text
from spamd.mail.normalize import normalize

# Headers spamd writes itself. They are stripped before the message is keyed or
# tokenized, so the filter never learns its own verdict and a scored copy of a
# message has the same key as the unscored one.
OWN_HEADER_PREFIX = b"x-spam-"

MAX_HEADERS = 500
MAX_HEADER_VALUE_CHARS = 4096
# An attachment's encoded bytes decoded into Part.head: 32 KiB of base64 is 24 KiB.
ATTACHMENT_HEAD_SOURCE_BYTES = 32 * 1024


@dataclass(slots=True)
class Part:
    """One leaf MIME part as seen by the walk (text or not)."""

    content_type: str
    charset: str
    encoding: str
    filename: str
    size: int
    # An attachment's body as it came (a part with a filename or of a non-text type, images
    # aside), for `head`.
    encoded: bytes = b""

    @property
    def head(self) -> bytes:
        """The attachment's first decoded bytes: what the attachment tokens sniff (magic numbers, zip flags, forms).

        Decoded when asked, so only with [model] attachment_kinds on (decoded at parse time
        instead: parsing trec07p-dev's first 300 messages, no scans, 681 k instructions a
        message -> 655 k).
        """
        return _decode_transfer(self.encoded[:ATTACHMENT_HEAD_SOURCE_BYTES], self.encoding, [])


@dataclass(slots=True)
class ParsedMessage:
    """What the tokenizer needs from a message; everything already decoded to str."""

    # Top-level headers in order: (lower-cased name, decoded value).
    headers: list[tuple[str, str]] = field(default_factory=list)
    # Visible text of each text part (HTML already converted), capped in length.
    texts: list[str] = field(default_factory=list)
    # URLs from HTML attributes (href, src): invisible in the text but telling.
    urls: list[str] = field(default_factory=list)
    # The markup of each HTML text part, as decoded (for link text against its target, pixels).
    html: list[str] = field(default_factory=list)
    # Every leaf part visited, text or not.
    parts: list[Part] = field(default_factory=list)
    # Damage found and caps hit: "truncated", "bad-base64", "depth-cap", ...
    defects: list[str] = field(default_factory=list)
    # Text of HTML elements hidden by inline CSS, and how each was hidden ([parser] hidden_text).
    hidden: list[str] = field(default_factory=list)
    hidden_kinds: list[str] = field(default_factory=list)
    # Disguises undone in the text ([parser] normalize): "split", "invisible", "mixed-script", "compatibility".
    obfuscations: list[str] = field(default_factory=list)
    # Words in runs of word salad left out of the text ([parser] word_salad).
    salad_words: int = 0
    # Runs of word salad kept apart from `texts` (word_salad off): their words are
    # tokens as any, weighing at most [model] salad_tokens tokens in the score.
    salad: list[str] = field(default_factory=list)

    # The first value of each header, by lower-cased name (what `header` answers from).
    first: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str:
        """The first value of a header (name lower-case), or ''."""
        return self.first.get(name, "")


# ---------------------------------------------------------------- reading


def read_message_file(path: str | os.PathLike[str]) -> bytes:
    """A message file's bytes, read unbuffered: 18-20 -> 7-9 us a file over trec07p-dev.

    `Path.read_bytes` wraps the file in a BufferedReader and asks its size twice;
    `readall` of the raw file asks once and reads it in one go. Bulk commands read a
    file per message (eval and classify 10,000 of them), as bogofilter -b does.
    """
    with open(path, "rb", buffering=0) as f:
        return f.readall()


# ---------------------------------------------------------------- headers


def split_head_body(raw: bytes) -> tuple[bytes, bytes]:
    """Split a message (or MIME part) into its header block, without the line break ending it, and its body.

    The header block ends at the first line that is neither a field (a legal field
    name and a colon, no space before it) nor a continuation: normally the empty
    line, which is dropped; otherwise that line starts the body, as in Python's
    `email` and bogofilter's lexer. Exports and pasted forwards come without the
    empty line ("Subject: hi" followed at once by the text), and reading on to the
    first empty line took their whole text for headers: the message had no body
    tokens at all. On the derived stream of spamassassin with no empty line
    (spamd_lab.variants), (1-ROCA)% 0.0973 -> 0.0555 (bogofilter 0.1105); no message
    of either corpus as it is splits differently.
    A first line that is not a field (nor an mbox "From " line) means no headers.
    """
    head_end, body_start = _header_bounds(raw)
    return raw[:head_end], raw[body_start:]


# The line break before a line that is neither a field nor a continuation. A pattern
# that starts with a literal is tried only at newlines (a memchr between them).
# An mbox "From " line is no field, but mail converted between mbox files more than once
# carries two or three of them at the top: they stay in the header block (as Python's
# `email` keeps them), where no field pattern matches them.
_NOT_A_FIELD_AFTER_RE = re.compile(rb"\n(?![!-9;-~]+:|[ \t]|From )")
_FIELD_START_RE = re.compile(rb"[!-9;-~]+:|From ")


def _header_bounds(raw: bytes) -> tuple[int, int]:
    """(end of the header block without its final line break, start of the body)."""
    if not _FIELD_START_RE.match(raw):
        # No header block: an empty first line is dropped, any other line is text.
        return 0, 2 if raw.startswith(b"\r\n") else 1 if raw.startswith(b"\n") else 0
    m = _NOT_A_FIELD_AFTER_RE.search(raw)
    if m is None:
        return len(raw), len(raw)
    newline = m.start()
    head_end = newline - 1 if raw.endswith(b"\r", 0, newline) else newline
    if raw.startswith(b"\n", newline + 1):
        return head_end, newline + 2
    if raw.startswith(b"\r\n", newline + 1):
        return head_end, newline + 3
    return head_end, newline + 1  # no empty line: this line is the body's first


_FOLD_RE = re.compile(r"\n[ \t]+")  # applied after CRLF -> LF
# A field name is printable ASCII but colon (RFC 5322 2.2); lines that are not fields
# (an mbox "From " line, garbage) simply do not match.
# The value runs to the end of the line and is right-stripped in Python: a lazy
# "(.*?)[ \t\r]*$" is quadratic in a run of blanks (a 40 kB one took 4.6 s).
_FIELD_RE = re.compile(r"^([!-9;-~]+)[ \t]*:[ \t]*([^\n]*)", re.MULTILINE)


def _header_fields(head: bytes) -> tuple[list[tuple[str, str]], bool]:
    """Unfold and decode header lines: ([(lower-cased name, value)], whether a value has 8-bit bytes).

    At most MAX_HEADERS fields, each value at most MAX_HEADER_VALUE_CHARS.
    """
    # Two regex passes instead of a Python loop per line: 0.46 s -> 0.1 s over trec07p-dev;
    # CRLF -> LF first, so the fold pattern needs no optional "\r": 43 -> 20 us/msg.
    # On the header decoded once as latin-1 (one character per byte, so the same
    # fields) rather than on bytes with each name and value decoded apart: a head
    # of ASCII without encoded words (96% of trec07p-dev) needs nothing more
    # (headers 48 -> 32 us/msg).
    # Two-character substrings are looked for only where their rarer character occurs
    # at all (one-character searches are a memchr, the others several times slower):
    # "\r\n" where there is a "\r" and "=?" where there is a "?" (4.2 -> 0.9 us/msg on trec07p-dev).
    text = head.decode("latin-1")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    found = _FIELD_RE.findall(_FOLD_RE.sub(" ", text))[:MAX_HEADERS]
    fields = [(name.lower(), value.rstrip(" \t\r")) for name, value in found]
    if head.isascii() and ("?" not in text or "=?" not in text):
        if len(text) > MAX_HEADER_VALUE_CHARS:  # else no value is that long (1.4 us/msg on trec07p-dev)
            fields = [(name, value[:MAX_HEADER_VALUE_CHARS]) for name, value in fields]
        return fields, False
    eight_bit = not all(value.isascii() for _, value in fields)
    return [(name, decode_header_value(value.encode("latin-1"))) for name, value in fields], eight_bit


def _bytes_to_text(data: bytes, charset: str = "") -> str:
    """Decode with the declared charset if known, else UTF-8, else windows-1252; never raises."""
    if charset:
        try:
            codec = _codec_name(charset)
            if codec in _ASCII_TABLE_CODECS and data.isascii():
                return data.decode("ascii")
            return data.decode(codec, errors="replace")
        except (LookupError, UnicodeError):
            pass  # unknown label, or a codec that refuses errors="replace" (idna, undefined)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # cp1252 with replace: every byte maps somewhere, undefined ones to U+FFFD.
        return data.decode("cp1252", errors="replace")


# Single-byte table codecs whose lower half is ASCII, the charsets of most mail:
# ASCII bytes decode alike through any of them, and the "ascii" decoder runs
# at memory speed where the table decoders look up every byte (text parts
# 6.3 -> 4.1 us/msg on trec07p-dev, most of them ASCII labelled us-ascii or windows-125x).
_ASCII_TABLE_CODECS = frozenset(
    [f"cp125{n}" for n in range(9)] + [f"iso8859-{n}" for n in range(2, 17) if n != 12] + ["koi8-r", "koi8-u"]
)

_CHARSET_ALIASES = {
    "unknown-8bit": "cp1252",
    "x-unknown": "cp1252",
    "iso-8859-8-i": "iso-8859-8",
    "ks_c_5601-1987": "cp949",
    "x-sjis": "shift_jis",
    "gb2312": "gb18030",  # gb18030 is a superset; mislabelled GBK text is common
    "gbk": "gb18030",
    "ascii": "cp1252",  # "us-ascii" mail routinely carries 8-bit text
    "us-ascii": "cp1252",
}


@functools.lru_cache(maxsize=64)  # a dozen labels make most mail: 0.53 -> 0.12 us a call on trec07p-dev
def _codec_name(charset: str) -> str:
    """Map a MIME charset label to a Python codec, or raise LookupError (every time: only results are cached)."""
    label = charset.strip().strip("\"'").lower()
    label = _CHARSET_ALIASES.get(label, label)
    try:
        info = codecs.lookup(label)  # raises LookupError on unknown labels
    except ValueError:
        raise LookupError(label) from None  # a NUL byte in the label
    if info.name in _NOT_CHARSETS:
        raise LookupError(label)
    return info.name


# Codecs Python knows that are not MIME charsets. Bytes-to-bytes codecs; punycode,
# whose pure-Python decoder is quadratic (a 512 KiB text part labelled
# charset=punycode took 3.9 to 8 s; refused, it reads as UTF-8 in 0.01 s); and
# the Python-literal escape codecs, of which unicode-escape warns
# (DeprecationWarning, an exception under -W error) on an invalid escape.
_NOT_CHARSETS = frozenset(
    ("base64", "hex", "zlib", "bz2", "uu", "quopri", "rot-13", "punycode", "unicode-escape", "raw-unicode-escape")
)


def decode_header_value(value: bytes) -> str:
    """Raw header bytes -> text, decoding RFC 2047 encoded words and 8-bit bytes."""
    if b"=?" not in value and value.isascii():  # most values: nothing to decode
        return value[:MAX_HEADER_VALUE_CHARS].decode("ascii")
    text = _bytes_to_text(value[: MAX_HEADER_VALUE_CHARS * 4])
    if "=?" not in text:
        return text[:MAX_HEADER_VALUE_CHARS]
    try:
        chunks = decode_header(text)
    except Exception:  # the stdlib raises assorted errors on malformed encoded words
        return text[:MAX_HEADER_VALUE_CHARS]
    out = []
    for chunk, charset in chunks:
        if isinstance(chunk, str):
            out.append(chunk)
        else:
            out.append(_bytes_to_text(chunk, charset or ""))
    return "".join(out)[:MAX_HEADER_VALUE_CHARS]


# A quoted value as an unrolled loop, "[^"\\]*(?:\\.[^"\\]*)*", not one alternation per
# character, "(?:[^"\\]|\\.)*" (the same match; each is linear): with findall rather
# than finditer, parse_content_type 3.9 -> 1.6 us/msg on trec07p-dev.
_PARAM_RE = re.compile(r';\s*([\w\-*]+)\s*=\s*(?:"([^"\\]*(?:\\.[^"\\]*)*)"?|([^;\s]*))')


def parse_content_type(value: str) -> tuple[str, dict[str, str]]:
    """'Text/HTML; charset="utf-8"' -> ('text/html', {'charset': 'utf-8'}); lenient."""
    main, semicolon, _ = value.partition(";")
    ctype = main.strip().lower()
    if not semicolon:  # every parameter starts at a ";"
        return ctype, {}
    params: dict[str, str] = {}
    for name, quoted, bare in _PARAM_RE.findall(value):  # an unmatched group is ""
        params.setdefault(name.lower().rstrip("*"), quoted or bare)
    return ctype, params


def _disposition_filename(disposition: str) -> str:
    """The filename parameter of a Content-Disposition value, or ''."""
    _, semicolon, parameters = disposition.partition(";")
    return parse_content_type("x/x;" + parameters)[1].get("filename", "") if semicolon else ""


# ---------------------------------------------------------------- bodies


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_NOT_BASE64 = bytes(b for b in range(256) if b not in _BASE64_ALPHABET)


def _decode_transfer(body: bytes, encoding: str, defects: list[str]) -> bytes:
    if encoding == "base64":
        compact = body.translate(None, _NOT_BASE64)  # drop line breaks and junk (C speed, unlike re.sub)
        # The "=" padding was stripped with the junk: restore it, or the last one or
        # two bytes of every part whose length is not a multiple of 3 are lost.
        # A lone trailing character (length % 4 == 1) holds no whole byte.
        extra = len(compact) % 4
        compact = compact[:-1] if extra == 1 else compact + b"=" * ((4 - extra) % 4)
        try:
            return binascii.a2b_base64(compact)
        except binascii.Error:
            defects.append("bad-base64")
            return b""
    if encoding == "quoted-printable":
        try:
            return binascii.a2b_qp(body)
        except (binascii.Error, ValueError):
            defects.append("bad-qp")
            return body
    return body


# ---------------------------------------------------------------- the walk


def _split_multipart(body: bytes, boundary: bytes, max_parts: int) -> list[bytes] | None:
    """The first `max_parts` body parts between boundary delimiters; None when the boundary never occurs.

    The walk visits at most `max_parts` parts, so later ones are not split out: each
    child's header is parsed here, and 131,072 empty parts ("--B\n" repeated to 512 KiB)
    took 0.61 s for the 100 visited -> 0.005 s.
    """
    delimiter = b"--" + boundary
    pieces = body.split(delimiter)
    if len(pieces) < 2:
        return None
    parts: list[bytes] = []
    for piece in pieces[1:]:
        if piece.startswith(b"--") or len(parts) == max_parts:
            break  # close delimiter, or as many parts as the walk can visit
        newline = piece.find(b"\n")
        if newline == -1:
            continue
        # The rest of the delimiter line and the line break before the next delimiter are cut
        # off in one slice (one copy of each part, not two: 6.1 -> 5.6 us/msg on trec07p-dev).
        end = len(piece) - (2 if piece.endswith(b"\r\n") else 1 if piece.endswith(b"\n") else 0)
        # Never a slice that ends before it starts ("\n" alone): compiled by mypyc such a slice of
        # bytes raises SystemError instead of giving b"" (setup.py).
        parts.append(piece[newline + 1 : end] if end > newline else b"")
    return parts


def _looks_like_html(text: str) -> bool:
    """Whether "<html" (any case) is in the first 2,048 characters of a text/plain part."""
    # lower() makes no "<", so text without one is spared it (_walk 1 us/msg faster on trec07p-dev).
    opening = text[:2048]
    return "<" in opening and "<html" in opening.lower()


def parse_message(raw: bytes, limits: ParserConfig) -> ParsedMessage:
    """Parse raw RFC 5322 bytes; never raises, records damage and caps in `defects`."""
    parsed = ParsedMessage()
    if len(raw) > limits.max_bytes:
        raw = raw[: limits.max_bytes]
        parsed.defects.append("truncated")
    if b"\x00" in raw:
        parsed.defects.append("nul-bytes")
    head, body = split_head_body(raw)
    parsed.headers, eight_bit = _header_fields(head)
    if eight_bit:
        parsed.defects.append("8bit-header")
    top_fields = dict(reversed(parsed.headers))  # the first value of each name wins
    if limits.normalize and not top_fields.get("subject", "").isascii():
        top_fields = _normalize_subject(parsed)
    parsed.first = top_fields
    try:
        _walk(parsed, top_fields, body, limits)
    except (RecursionError, MemoryError, ValueError, TypeError, IndexError) as error:
        # Belt and braces: the walk is meant to be total; keep what it found.
        parsed.defects.append(f"parser-error:{type(error).__name__}")
    return parsed


def _normalize_subject(parsed: ParsedMessage) -> dict[str, str]:
    """The Subject as a reader sees it (spamd.mail.normalize), its disguises recorded as the text's are;
    returns the first value of each header anew."""
    for number, (name, value) in enumerate(parsed.headers):
        if name == "subject" and not value.isascii():
            value, tricks = normalize(value)
            parsed.headers[number] = (name, value)
            parsed.obfuscations.extend(tricks)
    return dict(reversed(parsed.headers))


def _walk(parsed: ParsedMessage, top_fields: dict[str, str], body: bytes, limits: ParserConfig) -> None:
    """Depth-first over MIME parts with an explicit stack, honouring the part and depth caps."""
    stack: list[tuple[dict[str, str], bytes, int, str]] = [(top_fields, body, 0, "text/plain")]
    visited = 0
    while stack:
        fields, part_body, depth, default_type = stack.pop()
        visited += 1
        if visited > limits.max_parts:
            parsed.defects.append("parts-cap")
            return
        ctype, params = (
            parse_content_type(fields.get("content-type", "")) if "content-type" in fields else (default_type, {})
        )
        if "/" not in ctype:
            ctype = default_type
        encoding = fields.get("content-transfer-encoding", "").strip().lower()
        if ctype.startswith("multipart/"):
            boundary = params.get("boundary", "")
            if depth >= limits.max_depth:
                parsed.defects.append("depth-cap")
                continue
            delimiter = boundary.encode("utf-8", "replace")
            children = _split_multipart(part_body, delimiter, limits.max_parts) if boundary else None
            if children is None:
                # A missing or lying boundary: read the body as text rather than lose it.
                parsed.defects.append("boundary-missing")
                ctype = "text/plain"
            else:
                child_default = "message/rfc822" if ctype == "multipart/digest" else "text/plain"
                for child in reversed(children):
                    head, child_body = split_head_body(child)
                    child_fields = dict(reversed(_header_fields(head)[0]))
                    stack.append((child_fields, child_body, depth + 1, child_default))
                continue
        if ctype == "message/rfc822" and depth < limits.max_depth:
            head, inner_body = split_head_body(_decode_transfer(part_body, encoding, parsed.defects))
            inner, _ = _header_fields(head)
            parsed.texts.append(" ".join(v for n, v in inner if n in ("subject", "from")))
            stack.append((dict(reversed(inner)), inner_body, depth + 1, "text/plain"))
            continue
        if ctype == "message/rfc822":
            parsed.defects.append("depth-cap")  # too deep to open: described below, not read
        filename = params.get("name") or _disposition_filename(fields.get("content-disposition", ""))
        charset = params.get("charset", "")
        part = Part(ctype, charset.lower(), encoding, filename, len(part_body))
        parsed.parts.append(part)
        if (filename or not ctype.startswith("text/")) and (not ctype.startswith("image/") or "svg" in ctype):
            part.encoded = part_body
        if not ctype.startswith("text/") or filename and not ctype.startswith("text/html"):
            continue  # attachments are described (type, name, first bytes), not decoded
        data = _decode_transfer(part_body, encoding, parsed.defects)
        if charset:
            try:
                _codec_name(charset)
            except LookupError:
                parsed.defects.append("unknown-charset")
        text = _bytes_to_text(data, charset)[: limits.max_text_chars]
        if ctype == "text/html" or ctype == "text/plain" and _looks_like_html(text):
            parsed.html.append(text)
            text, urls = html_to_text(text, parsed, limits)
            parsed.urls.extend(urls[:200])
        if limits.normalize:
            text, tricks = normalize(text)
            parsed.obfuscations.extend(tricks)
        if limits.word_salad:
            text, salad = cut_word_salad(text)
            parsed.salad_words += salad
        else:
            text, runs = split_word_salad(text)
            parsed.salad.extend(runs)
        parsed.texts.append(text)


# ---------------------------------------------------------------- identity and own headers


# One X-Spam-* field with its continuation lines. A regex pass rather than a Python
# loop over header lines: a message of 262,000 header lines plus one X-Spam header
# took 0.2-0.5 s to strip before.
# Matched with the newline before the field, which leaves the one after it to end
# the line before: a pattern that starts with a newline is tried only at newlines,
# one that starts with "^" at every byte (21 -> 7.5 us for each message with such
# headers on trec07p-dev, 553 in 3,000).
_OWN_FIELD_AFTER_NEWLINE_RE = re.compile(rb"\nx-spam-[^\n]*(?:\n[ \t][^\n]*)*", re.IGNORECASE)
# The field with the newline after it, or the end: for a header block that does not
# end in a newline (a message with no empty line), whose last field may run to the end.
_OWN_FIELD_RE = re.compile(rb"^x-spam-[^\n]*(?:\n[ \t][^\n]*)*(?:\n|\Z)", re.IGNORECASE | re.MULTILINE)


def strip_own_headers(raw: bytes) -> bytes:
    """The message without the X-Spam-* headers spamd (or an earlier filter run) added."""
    head_end = _header_block_end(raw)
    head = raw[:head_end]
    if OWN_HEADER_PREFIX not in head.lower():
        return raw
    if not head.endswith(b"\n"):
        return _OWN_FIELD_RE.sub(b"", head) + raw[head_end:]
    return _OWN_FIELD_AFTER_NEWLINE_RE.sub(b"", b"\n" + head)[1:] + raw[head_end:]


def _header_block_end(raw: bytes) -> int:
    """Where the header block (with its line endings) ends: the start of the empty line, or of the body."""
    head_end, body_start = _header_bounds(raw)
    if head_end == body_start:  # all header, or none
        return head_end
    return head_end + (2 if raw.startswith(b"\r\n", head_end) else 1)


# A header field name and its colon: "Subject:", "Received:", "X-Original-To:".
_LEADING_FIELD_RE = re.compile(rb"[!-9;-~]{1,100}:")


def looks_like_message(raw: bytes) -> bool:
    """Does this start like mail (a header field first, after an mbox "From " line if any)?

    Training asks it (spamctl, spamc TELL), so a stray JPEG or an empty file does not
    teach the model; scoring accepts any bytes. It checks nothing past the first field.
    """
    lines = raw[:4096].split(b"\n", 2)
    first = lines[1] if lines[0].startswith(b"From ") and len(lines) > 1 else lines[0]
    return _LEADING_FIELD_RE.match(first) is not None


def message_key(raw: bytes) -> bytes:
    """Stable 16-byte digest of a message, blind to spamd's own headers and to CRLF vs LF.

    The same mail delivered over SMTP (CRLF) and later read from a Maildir file (LF),
    scored or not, gets the same key; that is what lets the ledger recognise it.
    """
    return stripped_message_key(strip_own_headers(raw))


def stripped_message_key(stripped: bytes) -> bytes:
    """message_key of a message whose own headers `strip_own_headers` already removed."""
    # The CRLF -> LF pass only where there is a CR (a one-byte search is a memchr,
    # the two-byte one is not): key 24 -> 14 us/msg on trec07p-dev.
    normalized = (stripped.replace(b"\r\n", b"\n") if b"\r" in stripped else stripped).rstrip(b"\n")
    return hashlib.blake2b(normalized, digest_size=16).digest()


def with_own_headers(raw: bytes, headers: list[tuple[str, str]]) -> bytes:
    """The message with spamd's headers replaced by `headers`, prepended, in its own line ending."""
    body = strip_own_headers(raw)
    newline = b"\r\n" if b"\r\n" in body[:4096] else b"\n"
    block = b"".join(f"{name}: {value}".encode("ascii", "replace") + newline for name, value in headers)
    return block + body
