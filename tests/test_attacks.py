"""Attacked streams: each attack changes only the spam, keeps MIME valid, and is the same for the same seed."""

from __future__ import annotations

import email
import email.header
import email.policy
import re
from pathlib import Path

import pytest

from spamd.evaluation.trec import read_index
from spamd_lab.attacks import (
    ATTACKS,
    CYRILLIC_LOOKALIKES,
    GREEK_LOOKALIKES,
    HIDING,
    ZERO_WIDTH,
    attacked,
    write_attacked,
)

PLAIN_SPAM = b"""From spammer@example.com Mon Apr  9 10:00:00 2007
From: "Best Pharmacy" <offers@pharma.example>
To: you@example.org
Subject: Cheap meds without prescription
Message-ID: <1@pharma.example>

Buy cheap viagra and cialis today, without prescription.
Click http://pharma.example/buy now for the best prices online.
"""

HTML_SPAM = b"""From: Casino <win@casino.example>
To: you@example.org
Subject: You have won a bonus
MIME-Version: 1.0
Content-Type: text/html; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

<html><head><style>p {color: red}</style></head><body>
<p>Claim your casino bonus of 500 dollars, winners are waiting!</p>
<p>Visit <a href=3D"http://casino.example/">our casino</a> caf=E9 today.</p>
</body></html>
"""

ALTERNATIVE_SPAM = b"""From: Loans <loan@lender.example>
To: you@example.org
Subject: =?utf-8?B?TG93IHJhdGUgbW9ydGdhZ2U=?=
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="xyz"

--xyz
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: base64

TG93IG1vcnRnYWdlIHJhdGVzIGFwcHJvdmVkIGluc3RhbnRseSwgcmVmaW5hbmNlIHlvdXIgaG9t
ZSB0b2RheS4K
--xyz
Content-Type: text/html; charset=utf-8
Content-Transfer-Encoding: base64

PGh0bWw+PGJvZHk+PHA+TG93IG1vcnRnYWdlIHJhdGVzIGFwcHJvdmVkIGluc3RhbnRseSwgcmVm
aW5hbmNlIHlvdXIgaG9tZSB0b2RheS48L3A+PC9ib2R5PjwvaHRtbD4K
--xyz--
"""

HAM = b"""From: Alice <alice@example.org>
To: bob@example.org
Subject: Minutes of the project meeting
Message-ID: <2@example.org>

Hi Bob, the minutes of yesterday's meeting are below. The budget review
moves to Friday; please send your draft of the report by Thursday.
Regards, Alice
"""

STREAM = [("ham", HAM), ("spam", PLAIN_SPAM), ("ham", HAM.replace(b"Bob", b"Carol")), ("spam", HTML_SPAM),
          ("spam", ALTERNATIVE_SPAM)]  # fmt: skip


def texts(raw: bytes) -> list[tuple[str, str]]:
    """(content type, decoded text) of every text leaf, through the stdlib's strict modern parser."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    out = []
    for part in msg.walk():
        assert not part.defects, (part.defects, raw[:400])
        if part.get_content_maintype() == "text":
            out.append((part.get_content_type(), part.get_content()))
    return out


def subject(raw: bytes) -> str:
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    return str(email.header.make_header(email.header.decode_header(str(msg["subject"]))))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_changes_only_spam_keeps_mime_valid_and_is_deterministic(
    attack: str,
) -> None:
    out = list(attacked(STREAM, attack, seed=7))
    assert [label for label, _ in out] == [label for label, _ in STREAM]
    for (label, before), (_, after) in zip(STREAM, out, strict=True):
        if label == "ham":
            assert after is before or after == before
        else:
            assert after != before, attack
            assert texts(after), attack  # still mail with readable text
            assert subject(after).strip()
    assert list(attacked(STREAM, attack, seed=7)) == out
    if attack not in ("encodings",):  # the encodings' random choices can coincide for two seeds
        assert list(attacked(STREAM, attack, seed=8)) != out


def spam_texts(attack: str) -> list[str]:
    return [text for label, raw in attacked(STREAM, attack, seed=3) if label == "spam" for _, text in texts(raw)]


def test_zero_width_puts_an_invisible_character_in_every_word() -> None:
    for text in spam_texts("zero-width"):
        words = re.findall(
            r"[A-Za-z\u200b-\u200d\u2060\ufeff]{4,}",
            re.sub(r"<style>.*?</style>|<[^>]*>", " ", text, flags=re.DOTALL),
        )
        assert words and all(any(c in word for c in ZERO_WIDTH) for word in words), words
    assert set(subject(list(attacked(STREAM, "zero-width", 3))[1][1])) & set(ZERO_WIDTH)


def test_homoglyphs_use_cyrillic_and_greek() -> None:
    joined = "".join(spam_texts("homoglyphs"))
    assert set(joined) & set(CYRILLIC_LOOKALIKES.values())
    assert set(joined) & set(GREEK_LOOKALIKES.values())
    assert "casino" in joined or "bonus" in joined or "cheap" in joined  # about half the words are left alone


def test_split_words_use_tags_comments_soft_hyphens_and_references() -> None:
    out = dict(enumerate(attacked(STREAM, "split-words", seed=3)))
    html_raw = email.message_from_bytes(out[3][1], policy=email.policy.default).get_content()
    assert re.search(r"[a-z]<(b|i|span|font)></\1>[a-z]", html_raw)
    assert re.search(r"[a-z]<!-- \w+ -->[a-z]", html_raw)
    assert "&shy;" in html_raw and re.search(r"&#x?[0-9a-f]+;", html_raw)
    assert "<style>p {color: red}</style>" in html_raw  # styles and tags are not text
    plain = email.message_from_bytes(out[1][1], policy=email.policy.default).get_content()
    assert "\u00ad" in plain


@pytest.mark.parametrize("hiding", list(HIDING))
def test_hidden_words_hide_a_block_of_the_streams_ham_words_in_html(
    hiding: str,
) -> None:
    out = list(attacked(STREAM, f"hidden-{hiding}", seed=3))
    for _, raw in out[1::2] + out[4:]:
        found = texts(raw)
        assert all(ctype == "text/html" for ctype, _ in found)
        style = HIDING[hiding].split('"')[1]
        block = re.search(rf'<div style="{re.escape(style)}">([^<]*)</div>', found[-1][1])
        assert block is not None
        words = block.group(1).split()
        assert len(words) == 150 and set(words) <= set(re.findall(r"[a-z]+", HAM.lower().decode()) + ["carol"])


def test_good_words_blocks_have_their_size_in_plain_sight() -> None:
    for attack, n in (
        ("common-words-50", 50),
        ("common-words-150", 150),
        ("ham-words-400", 400),
    ):
        plain = texts(list(attacked(STREAM, attack, seed=3))[1][1])[0][1]
        assert len(plain.split()) >= n + len(texts(PLAIN_SPAM)[0][1].split())


def test_attachment_and_image_leave_little_text_in_the_body() -> None:
    attached = email.message_from_bytes(list(attacked(STREAM, "attachment", 3))[1][1], policy=email.policy.default)
    parts = list(attached.iter_parts())
    assert parts[0].get_content_type() == "text/plain" and len(parts[0].get_content().split()) <= 8
    assert parts[1].get_content_disposition() == "attachment" and "viagra" in parts[1].get_content()
    image = email.message_from_bytes(list(attacked(STREAM, "image", 3))[1][1], policy=email.policy.default)
    kinds = [p.get_content_type() for p in image.iter_parts()]
    assert kinds == ["text/html", "image/png"]
    assert "prescription" not in next(image.iter_parts()).get_content()


def test_encodings_use_base64_or_qp_and_mixed_charset_words() -> None:
    out = list(attacked(STREAM, "encodings", seed=3))
    for (_, before), (_, after) in zip(STREAM[1::2] + STREAM[4:], out[1::2] + out[4:], strict=True):
        msg = email.message_from_bytes(after, policy=email.policy.compat32)
        for part in msg.walk():
            if part.get_content_maintype() == "text":
                assert part["content-transfer-encoding"] in (
                    "base64",
                    "quoted-printable",
                )
        assert "=?" in str(msg["subject"]) and subject(after) == subject(before)
        assert [re.sub(r"\s+", " ", t).strip() for _, t in texts(after)] == [
            re.sub(r"\s+", " ", t).strip() for _, t in texts(before)
        ]


def test_all_at_once_combines_the_attacks() -> None:
    raw = list(attacked(STREAM, "all", seed=3))[3][1]
    markup = texts(raw)[0][1]
    assert 'style="display:none"' in markup
    assert set(markup) & set(ZERO_WIDTH)
    assert set(markup) & (set(CYRILLIC_LOOKALIKES.values()) | set(GREEK_LOOKALIKES.values()))


def test_write_attacked_writes_an_index_of_the_same_labels(tmp_path: Path) -> None:
    (tmp_path / "mail").mkdir()
    lines = []
    for n, (label, raw) in enumerate(STREAM):
        (tmp_path / "mail" / str(n)).write_bytes(raw)
        lines.append(f"{label} mail/{n}\n")
    (tmp_path / "mail" / "empty").write_bytes(b"")
    lines.append("ham mail/empty\n")
    (tmp_path / "index").write_text("".join(lines))
    index = write_attacked(tmp_path / "index", "zero-width", tmp_path / "out", seed=5)
    entries = read_index(index)
    assert [str(e.label) for e in entries] == [label for label, _ in STREAM]  # the empty file is no message
    assert entries[0].path.read_bytes() == HAM
    assert entries[1].path.read_bytes() == list(attacked(STREAM, "zero-width", 5))[1][1]
    with pytest.raises(KeyError, match="unknown attack"):
        write_attacked(tmp_path / "index", "nonsense", tmp_path / "out")


def test_spam_before_start_is_left_alone_for_first_contact() -> None:
    out = list(attacked(STREAM, "zero-width", seed=3, start=2))
    assert out[:2] == STREAM[:2]
    assert out[3] != STREAM[3] and out[4] != STREAM[4]
    assert out[3:] == list(attacked(STREAM, "zero-width", seed=3))[3:]
