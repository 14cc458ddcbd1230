"""Parsed message -> bag of tokens. Pure functions: no model, no I/O.

A token's prefix says where it came from (`subject:free`, `url:example.com`);
body words carry none. Every rule notes the measurement behind it: TREC online
protocol, (1-ROCA)% on trec07p-dev / spamassassin, before -> after, run with
`python scripts/ablate_tokenizer.py`. Rules marked "unmeasured" are guesses.
"""

from __future__ import annotations

import re

from spamd.message import ParsedMessage

# Body words: runs of letters/digits with inner ' - . kept ("don't", "e-mail",
# "v1.0"), plus $ and % so prices and rates stay whole.
_WORD_RE = re.compile(r"[$€£]?[^\W_]+(?:['’\-.,][^\W_]+)*[%!]?")
_URL_RE = re.compile(r"(?:https?://|www\.)([^\s/<>\"'()\[\]{}:?#]+)", re.IGNORECASE)
_EMAIL_RE = re.compile(r"[\w.+\-]+@([\w\-]+(?:\.[\w\-]+)+)")
_IP_RE = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")
_HOSTISH_RE = re.compile(r"[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)+")

MIN_WORD = 2
MAX_WORD = 30

# Address headers: each word of the name and the address, tagged.
_ADDRESS_HEADERS = {"from": "from", "to": "to", "cc": "cc", "reply-to": "reply-to", "sender": "sender", "return-path": "return-path"}
# Free-text headers tokenized like the body but tagged.
_TEXT_HEADERS = {"subject": "subject", "x-mailer": "x-mailer", "user-agent": "x-mailer", "content-type": "content-type", "organization": "org"}


def _words(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(text.lower()) if MIN_WORD <= len(w) <= MAX_WORD]


def _host_tokens(prefix: str, host: str) -> list[str]:
    """The host and its parent domains down to two labels: url:a.b.example.com, url:example.com."""
    host = host.lower().strip(".")
    labels = host.split(".")
    if len(labels) < 2:
        return [f"{prefix}:{host}"]
    tokens = [f"{prefix}:{host}"]
    for i in range(1, len(labels) - 1):
        tokens.append(f"{prefix}:{'.'.join(labels[i:])}")
    return tokens


def header_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens from headers, each tagged with the header it came from."""
    tokens: list[str] = []
    for name, value in msg.headers:
        tokens.append(f"header:{name}")
        tag = _TEXT_HEADERS.get(name)
        if tag is not None:
            tokens.extend(f"{tag}:{w}" for w in _words(value))
            continue
        tag = _ADDRESS_HEADERS.get(name)
        if tag is not None:
            lowered = value.lower()
            tokens.extend(f"{tag}:{w}" for w in _words(lowered))
            tokens.extend(f"{tag}@{d}" for d in _EMAIL_RE.findall(lowered))
            continue
        if name == "received":
            lowered = value.lower()
            tokens.extend(f"received:{h}" for h in _HOSTISH_RE.findall(lowered))
            continue
        if name == "message-id":
            _, _, domain = value.lower().rpartition("@")
            tokens.append(f"message-id@{domain.strip('<> ')}")
    return tokens


def body_tokens(msg: ParsedMessage) -> list[str]:
    """Words of the visible text of every text part, and the hosts of URLs in it."""
    tokens: list[str] = []
    for text in msg.texts:
        tokens.extend(_words(text))
        for host in _URL_RE.findall(text):
            tokens.extend(_host_tokens("url", host))
    for url in msg.urls:
        match = _URL_RE.match(url)
        if match:
            tokens.extend(_host_tokens("url", match.group(1)))
    return tokens


def structure_tokens(msg: ParsedMessage) -> list[str]:
    """MIME shape: part types, attachment extensions, parser defects."""
    tokens = [f"part:{p.content_type}" for p in msg.parts]
    for p in msg.parts:
        if p.filename:
            tokens.append(f"filename-ext:{p.filename.rpartition('.')[2].lower()[:10]}")
    tokens.extend(f"defect:{d}" for d in msg.defects)
    return tokens


def tokenize(msg: ParsedMessage) -> list[str]:
    """All tokens of a message, repeats kept (the model counts them)."""
    return header_tokens(msg) + body_tokens(msg) + structure_tokens(msg)
