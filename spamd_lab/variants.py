"""Derived mail streams: a corpus rewritten into the shapes of mail nobody tuned on.

Accuracy measured only on the two development corpora overstates what spamd does
on other sites' mail (spamd trailed bogofilter on held-out streams while leading on both).
Each variant rewrites every message of a TREC index the same deterministic way,
standing in for a mail source we do not have: exports without the usual headers,
pasted forwards with no empty line after the header block, CRLF files, mbox
excerpts, HTML-only senders, text in another script or with no spaces between
words. `scripts/accuracy/compare_bogofilter.py --variants` runs spamd and bogofilter on
all of them; `tests/test_accuracy_corpus.py` bounds spamd on some of them.

The rewrite uses the stdlib `email` package to find a message's text, not
spamd's own parser, so a parser defect cannot hide itself in the variants. It
does not score, tokenize or train anything.
"""

from __future__ import annotations

import email
import email.base64mime
import email.header
import email.policy
import hashlib
import html
import re
from collections.abc import Callable
from email.message import Message
from pathlib import Path

from spamd.evaluation.trec import read_index, read_mail

_HEADER_END_RE = re.compile(rb"\r?\n\r?\n")
_FIELD_NAME_RE = re.compile(rb"^([!-9;-~]+):", re.MULTILINE)
_TAG_RE = re.compile(r"<[^>]*>")
_SPACES_RE = re.compile(r"[ \t]+")


def split(raw: bytes) -> tuple[bytes, bytes]:
    """Header block and body at the first empty line (no empty line: all header)."""
    m = _HEADER_END_RE.search(raw)
    return (raw[: m.start()], raw[m.end() :]) if m else (raw, b"")


def header_fields(head: bytes) -> list[bytes]:
    """The header block as whole fields, each with its continuation lines."""
    fields: list[bytes] = []
    for line in head.replace(b"\r\n", b"\n").split(b"\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += b"\n" + line
        elif line:
            fields.append(line)
    return fields


def field_name(field: bytes) -> bytes:
    m = _FIELD_NAME_RE.match(field)
    return m.group(1).lower() if m else b""


def keep_fields(raw: bytes, keep: Callable[[bytes], bool]) -> bytes:
    head, body = split(raw)
    kept = [f for f in header_fields(head) if keep(field_name(f))]
    return b"\n".join(kept) + b"\n\n" + body


def parsed(raw: bytes) -> Message:
    return email.message_from_bytes(raw, policy=email.policy.compat32)


def visible_text(raw: bytes) -> str:
    """The message's readable text: its text/plain parts, else its HTML parts without tags."""
    plain: list[str] = []
    markup: list[str] = []
    try:
        for part in parsed(raw).walk():
            if part.is_multipart():
                continue
            ctype = part.get_content_type()
            if ctype not in ("text/plain", "text/html"):
                continue
            payload = part.get_payload(decode=True)
            if not isinstance(payload, bytes):  # None: nothing to decode
                payload = b""
            charset = part.get_content_charset() or "latin-1"
            try:
                text = payload.decode(charset, "replace")
            except LookupError:
                text = payload.decode("latin-1")
            (plain if ctype == "text/plain" else markup).append(text)
    except Exception:  # the stdlib raises on some broken mail; keep the raw body then
        return split(raw)[1].decode("latin-1")
    if plain:
        return "\n".join(plain)
    return "\n".join(html.unescape(_TAG_RE.sub(" ", m)) for m in markup)


def subject(raw: bytes) -> str:
    value = parsed(raw).get("subject", "")
    try:
        return str(email.header.make_header(email.header.decode_header(str(value))))
    except Exception:
        return str(value)


def _seeded(raw: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(raw, digest_size=4).digest(), "big")


# ---------------------------------------------------------------- the variants


def original(raw: bytes) -> bytes:
    return raw


def subject_only(raw: bytes) -> bytes:
    """Every header dropped but Subject and the MIME fields the body needs to be read."""
    return keep_fields(raw, lambda n: n in (b"subject", b"content-type", b"content-transfer-encoding", b"mime-version"))


def no_empty_line(raw: bytes) -> bytes:
    """Full headers, but the body starts on the line after the last field (a pasted forward)."""
    head, body = split(raw)
    return head + b"\n" + body


def crlf(raw: bytes) -> bytes:
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def mbox_from_toggled(raw: bytes) -> bytes:
    """The mbox `From ` separator line removed where there is one, added where there is none.

    Both development corpora come with one on every message; mail read from a
    Maildir or over SMTP has none.
    """
    if raw.startswith(b"From "):
        return raw[raw.find(b"\n") + 1 :]
    return b"From sender@example.org Mon Apr  9 10:00:00 2007\n" + raw


def no_received(raw: bytes) -> bytes:
    """No trace headers: mail read from a store that dropped them, or a relay that never added any."""
    return keep_fields(raw, lambda n: n not in (b"received", b"x-received", b"return-path", b"delivered-to"))


def html_only(raw: bytes) -> bytes:
    """Headers kept (but the MIME ones), the text rewritten as one text/html part."""
    text = visible_text(raw)
    paragraphs = "".join(f"<p>{html.escape(line)}</p>\n" for line in text.splitlines() if line.strip())
    body = f'<html><head><style>p {{margin:0}}</style></head><body><div class="x">\n{paragraphs}</div></body></html>\n'
    head = keep_fields(raw, lambda n: n not in (b"content-type", b"content-transfer-encoding", b"mime-version"))
    return (
        split(head)[0]
        + b"\nMIME-Version: 1.0\nContent-Type: text/html; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n"
        + body.encode("utf-8")
    )


# A Latin -> Cyrillic letter substitution: the same words, in a script the filter has
# (almost) never seen, the way a Russian or Bulgarian site's mail looks to a model
# trained on English. Bijective, so word statistics are kept.
_CYRILLIC = str.maketrans(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "абцдефгхийклмнопярстужвьызАБЦДЕФГХИЙКЛМНОПЯРСТУЖВЬЫЗ",
)


def _text_message(raw: bytes, subject_text: str, text: str, charset: str = "utf-8") -> bytes:
    keep = keep_fields(
        raw, lambda n: n not in (b"subject", b"content-type", b"content-transfer-encoding", b"mime-version")
    )
    encoded_subject = email.header.Header(subject_text, charset).encode()
    return (
        split(keep)[0]
        + f"\nSubject: {encoded_subject}\nMIME-Version: 1.0\nContent-Type: text/plain; charset={charset}\n"
        "Content-Transfer-Encoding: base64\n\n".encode()
        + email.base64mime.body_encode(text.encode(charset, "replace")).encode()
    )


def cyrillic(raw: bytes) -> bytes:
    """Subject and text in Cyrillic letters, UTF-8, base64: a non-English site."""
    return _text_message(raw, subject(raw).translate(_CYRILLIC), visible_text(raw).translate(_CYRILLIC))


_WORD_RE = re.compile(r"[A-Za-z]+")


def _cjk_word(match: re.Match[str]) -> str:
    """A word -> 1-3 CJK ideographs, always the same ones for the same word (case-folded)."""
    word = match.group(0).lower()
    h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
    n = 1 + (len(word) > 3) + (len(word) > 7)
    return "".join(chr(0x4E00 + (h >> (14 * i)) % 0x5000) for i in range(n))


def _cjk(text: str) -> str:
    # Words become ideographs and the spaces between them go, as in Chinese or Japanese
    # text: word boundaries are no longer marked at all.
    return re.sub(r"(?<=[\u4e00-\u9fff]) (?=[\u4e00-\u9fff])", "", _WORD_RE.sub(_cjk_word, text))


def cjk(raw: bytes) -> bytes:
    """Subject and text as CJK ideographs with no spaces between words: a Chinese site."""
    return _text_message(raw, _cjk(subject(raw)), _cjk(visible_text(raw)))


_PUNCT_RE = re.compile(r"([^\w\s])")


def bare_tokenized(raw: bytes) -> bytes:
    """A preprocessed export: `Subject:` line, then the text lower-cased with punctuation split off, no empty line.

    The shape of research corpora such as Ling-Spam and Enron-Spam, for
    example: "from : jane on 12 / 14 / 99" is body text, not a From field.
    """
    text = _PUNCT_RE.sub(r" \1 ", visible_text(raw).lower())
    lines = [_SPACES_RE.sub(" ", line).strip() for line in text.splitlines()]
    body = "\n".join(line for line in lines if line)
    subject_text = _SPACES_RE.sub(" ", _PUNCT_RE.sub(r" \1 ", subject(raw).lower())).strip()
    return f"Subject: {subject_text}\n{body}\n".encode()


VARIANTS: dict[str, Callable[[bytes], bytes]] = {
    "original": original,
    "subject-only": subject_only,
    "no-empty-line": no_empty_line,
    "crlf": crlf,
    "mbox-from-toggled": mbox_from_toggled,
    "no-received": no_received,
    "html-only": html_only,
    "cyrillic": cyrillic,
    "cjk": cjk,
    "bare-tokenized": bare_tokenized,
}


def write_variant(index: Path, variant: str, out_dir: Path) -> Path:
    """Rewrite every message of `index` into `out_dir/<variant>/` with its own index; returns that index.

    Entries that `read_mail` refuses (unreadable, empty, binary) are left out: a
    variant of no message would be a made-up one. Reuses a complete earlier run
    (its index is written last).
    """
    transform = VARIANTS[variant]
    target = out_dir / variant
    target_index = target / "index"
    if target_index.exists():
        return target_index
    (target / "data").mkdir(parents=True, exist_ok=True)
    lines = []
    for number, entry in enumerate(read_index(index)):
        raw, _ = read_mail(entry.path)  # no stream is derived from what is no message (an empty file)
        if raw is None:
            continue
        name = f"data/{number:06d}"
        (target / name).write_bytes(transform(raw))
        lines.append(f"{entry.label} {name}\n")
    tmp = target / "index.tmp"
    tmp.write_text("".join(lines))
    tmp.replace(target_index)
    return target_index
