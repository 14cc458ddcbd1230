"""spamd's faster stand-ins for dkimpy's message split and byte helpers give dkimpy's own results."""

from __future__ import annotations

import dkim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.mail.auth.dkim import _DKIMPY_INT2STR, _DKIMPY_STR2INT, bytes_to_int, int_to_bytes, split_message

# Pieces a head is made of, so that the cases hit folds, "From " lines, bad names and empty lines.
_PIECES = st.sampled_from(
    [b"\n", b"\r\n", b"\r", b"\n\n", b"\r\n\r\n", b"\n\r\n", b" ", b"\t", b":", b"From ", b"Subject: x",
     b"DKIM-Signature: v=1; h=from", b"x\x80y", b"\x00", b"a b:", b"Received: by x"]
)  # fmt: skip
_MESSAGES = st.one_of(st.binary(max_size=300), st.lists(_PIECES, max_size=30).map(b"".join))


def dkimpy_parse(raw: bytes) -> tuple[list[list[bytes]], bytes] | str:
    try:
        headers, body = dkim.rfc822_parse(raw)
    except (dkim.MessageFormatError, IndexError):  # IndexError: dkimpy's own on a fold before any field
        return "error"
    return [list(field) for field in headers], body


def ours(raw: bytes) -> tuple[list[list[bytes]], bytes] | str:
    try:
        return split_message(raw)
    except dkim.MessageFormatError:
        return "error"


@settings(max_examples=3000, deadline=None)
@given(_MESSAGES)
def test_the_split_is_dkimpys(raw: bytes) -> None:
    assert ours(raw) == dkimpy_parse(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"From: a@b\nSubject: x\n\nbody\nline\n",
        b"From: a@b\r\nSubject: x\r\n folded\r\n\r\nbody\r\n",
        b"From a@b Mon\nFrom: a@b\n\n",
        b"\nbody only\n",
        b"\r\nbody only\r\n",
        b"From: a@b\n",
        b"From: a@b",
        b"From: a@b\r\r\n\nbody\r",
        b" fold first\n\nbody",
        b"no colon here\n\nbody",
        b"",
    ],
)
def test_the_split_of_chosen_shapes_is_dkimpys(raw: bytes) -> None:
    assert ours(raw) == dkimpy_parse(raw)


@given(st.integers(min_value=0, max_value=1 << 2100), st.integers(min_value=-1, max_value=300))
def test_int_to_bytes_is_dkimpys(n: int, length: int) -> None:
    assert int_to_bytes(n, length) == _DKIMPY_INT2STR(n, length)


@given(st.binary(max_size=300))
def test_bytes_to_int_is_dkimpys(data: bytes) -> None:
    assert bytes_to_int(data) == _DKIMPY_STR2INT(data)
