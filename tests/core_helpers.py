"""Shared helpers for the classifier-core tests (message, model, store, training).

Hand-written messages, the corpus location and small configs. Not a conftest:
nothing here is a fixture that applies itself.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spamd.config import Config, ModelConfig, ParserConfig, StoreConfig
from spamd.model.bayes import Features, MultinomialNB, featurize
from spamd.people.users import UserLayers
from spamd.store import Ledger

if TYPE_CHECKING:
    from spamd.engine.engine import Engine

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
TREC_INDEX = CORPORA / "trec07p-dev" / "full" / "index"

requires_corpus = pytest.mark.skipif(
    not TREC_INDEX.is_file(), reason=f"corpus absent: {TREC_INDEX} (the shared corpora live at ../shared/corpora)"
)

DEFAULT_LIMITS = ParserConfig()


# An Engine types its model, ledger and users' layers as what either store gives; with the
# embedded store they are these classes, which a test that compares them in full needs.


def local_model(engine: Engine) -> MultinomialNB:
    """The embedded store's model of `engine`."""
    assert isinstance(engine.model, MultinomialNB)
    return engine.model


def local_ledger(engine: Engine) -> Ledger:
    """The embedded store's ledger of `engine`."""
    assert isinstance(engine.trainer.ledger, Ledger)
    return engine.trainer.ledger


def local_users(engine: Engine) -> UserLayers:
    """The embedded store's users' layers of `engine`."""
    assert isinstance(engine.users, UserLayers)
    return engine.users


def read_index(index: Path) -> list[tuple[str, Path]]:
    """(label, path) per line of a TREC-format index, paths relative to the index's directory."""
    rows = []
    for line in index.read_text().splitlines():
        label, _, rel = line.partition(" ")
        if rel:
            rows.append((label, (index.parent / rel).resolve()))
    return rows


def corpus_sample(count: int) -> list[bytes]:
    """`count` messages spread evenly over trec07p-dev (raw bytes)."""
    rows = read_index(TREC_INDEX)
    step = max(1, len(rows) // count)
    return [path.read_bytes() for _, path in rows[::step][:count]]


def small_config(data_dir: Path, hash_bits: int = 12, **store: int) -> Config:
    """A config with a small model (fast to copy and snapshot) under `data_dir`."""
    return Config(
        data_dir=data_dir,
        model=ModelConfig(hash_bits=hash_bits),
        store=dataclasses.replace(StoreConfig(), **store),
    )


def features(tokens: list[str], hash_bits: int = 12) -> Features:
    return featurize(tokens, hash_bits)


# ---------------------------------------------------------------- hand-written messages


def b64(data: bytes) -> bytes:
    return base64.encodebytes(data)


PLAIN = b"""From: Alice Example <alice@example.org>
To: bob@example.net
Subject: Lunch on Friday?
Message-ID: <123@mail.example.org>
Date: Mon, 2 Apr 2007 10:00:00 +0000

Hi Bob, shall we meet for lunch on Friday at noon?
Alice
"""

BASE64_TEXT = b"""From: sender@example.com
Subject: base64 body
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: base64

""" + b64("Grüße aus München, prices from $99!".encode())

QP_TEXT = b"""From: sender@example.com
Subject: qp body
MIME-Version: 1.0
Content-Type: text/plain; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

Un caf=E9 tr=E8s cr=E8me, s'il vous pla=EEt. This line is soft-=
broken here.
"""

RFC2047_HEADERS = b"""From: =?utf-8?B?SsO8cmdlbiBNw7xsbGVy?= <jm@example.de>
Subject: =?iso-8859-1?Q?caf=E9_au_lait?= and =?utf-8?B?w6l0w6k=?=
To: plain@example.com

body
"""

HTML = b"""From: shop@example.com
Subject: html
MIME-Version: 1.0
Content-Type: text/html; charset=utf-8

<html><head><title>hidden title</title>
<style>.x { color: red } hiddenstyle</style></head>
<body><script type="text/javascript">var hiddenscript = 1;</script>
<!-- hiddencomment -->
<p>Visible &amp; <b>bold</b> caf&eacute; &#8364;5 &lt;tag&gt;</p>
<a href="http://click.example.com/buy?id=1">click here</a>
<img src="https://img.example.net/pixel.gif">
</body></html>
"""

ALTERNATIVE = b"""From: news@example.com
Subject: alternative
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="ALT"

preamble is ignored
--ALT
Content-Type: text/plain; charset=us-ascii

plainversion words
--ALT
Content-Type: text/html; charset=us-ascii

<p>htmlversion words</p>
--ALT--
epilogue is ignored
"""

RFC822 = b"""From: forwarder@example.com
Subject: Fwd: inner
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="OUTER"

--OUTER
Content-Type: text/plain

outerwords see attached
--OUTER
Content-Type: message/rfc822

From: original@example.org
Subject: innersubject
Content-Type: text/plain

innerbodywords
--OUTER--
"""

ATTACHMENT = (
    b"""From: a@example.com
Subject: report
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="MIX"

--MIX
Content-Type: text/plain

see the attachment
--MIX
Content-Type: application/pdf; name="report.pdf"
Content-Disposition: attachment; filename="report.pdf"
Content-Transfer-Encoding: base64

"""
    + b64(b"%PDF-1.4 attachmentwords " * 20)
    + b"--MIX--\n"
)

MISSING_BOUNDARY = b"""From: a@example.com
Subject: no boundary
Content-Type: multipart/mixed

--whatever
Content-Type: text/plain

strandedwords in a multipart without a boundary
"""

LYING_BOUNDARY = b"""From: a@example.com
Subject: lying boundary
Content-Type: multipart/mixed; boundary="DECLARED"

--ACTUAL
Content-Type: text/plain

liarwords behind the wrong boundary
--ACTUAL--
"""

TRUNCATED = b"""From: a@example.com
Subject: cut short
Content-Type: multipart/mixed; boundary="CUT"

--CUT
Content-Type: text/plain

firstpart complete
--CUT
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: base64

""" + b64(b"secondpart partial")[:14]

HAND_MESSAGES = [
    PLAIN,
    BASE64_TEXT,
    QP_TEXT,
    RFC2047_HEADERS,
    HTML,
    ALTERNATIVE,
    RFC822,
    ATTACHMENT,
    MISSING_BOUNDARY,
    LYING_BOUNDARY,
    TRUNCATED,
]


def crlf(raw: bytes) -> bytes:
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def numbered_message(i: int, words: str = "") -> bytes:
    """A distinct small message (for training tests)."""
    return (
        f"From: user{i}@example.com\nSubject: message {i} {words}\nMessage-ID: <{i}@example.com>\n\n"
        f"body number {i} {words} token{i % 7} shared words\n"
    ).encode()
