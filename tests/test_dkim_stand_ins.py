"""spamd's faster stand-ins for dkimpy's message split and byte helpers give dkimpy's own results."""

from __future__ import annotations

import dkim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_INT2STR, _DKIMPY_STR2INT, bytes_to_int, int_to_bytes, split_message

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


@settings(max_examples=2000, deadline=None)
@given(_MESSAGES)
def test_counting_signatures_is_a_line_by_line_count(raw: bytes) -> None:
    from spamd.mail.auth.dkim import signature_headers

    head = raw.split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    assert signature_headers(raw) == sum(1 for line in head.split(b"\n") if line[:15].lower() == b"dkim-signature:")


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


@pytest.fixture(scope="module")
def rsa_keys() -> dict[int, object]:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return {bits: rsa.generate_private_key(public_exponent=65537, key_size=bits) for bits in (1024, 2048)}


def _dkimpy_key(private: object) -> dict[str, int]:
    numbers = private.public_key().public_numbers()  # type: ignore[attr-defined]
    return {"modulus": numbers.n, "publicExponent": numbers.e}


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(max_size=200),
    bits=st.sampled_from([1024, 2048]),
    algorithm=st.sampled_from(["sha256", "sha1"]),
    flip=st.one_of(st.none(), st.integers(min_value=0, max_value=8 * 128 - 1)),
    other_data=st.booleans(),
)
def test_rsa_verify_by_openssl_is_dkimpys(rsa_keys, data: bytes, bits: int, algorithm: str, flip, other_data) -> None:
    """A signature as made, one with a bit flipped, and one over other data: OpenSSL's answer is dkimpy's."""
    import hashlib

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_RSA_VERIFY, rsa_verify

    private = rsa_keys[bits]
    chosen = hashes.SHA256() if algorithm == "sha256" else hashes.SHA1()
    signature = bytearray(private.sign(data, padding.PKCS1v15(), chosen))
    if flip is not None:
        signature[flip // 8 % len(signature)] ^= 1 << flip % 8
    signed = data + b"x" if other_data else data
    key = _dkimpy_key(private)

    def hashed() -> dkim.HashThrough:
        return dkim.HashThrough(hashlib.new(algorithm, signed))

    assert rsa_verify(hashed(), bytes(signature), key) == _DKIMPY_RSA_VERIFY(hashed(), bytes(signature), key)


def test_rsa_verify_takes_a_signature_without_its_leading_zeros_and_refuses_one_past_the_modulus(rsa_keys) -> None:
    """dkimpy reads the signature as a number: its leading zero bytes may be missing. It also reduces a
    number past the modulus, so a valid signature plus the modulus passed there; RFC 8017 (RSAVP1) refuses it."""
    import hashlib

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_RSA_VERIFY, rsa_verify

    private = rsa_keys[1024]
    key = _dkimpy_key(private)
    for n in range(5000):  # bounded: a signature starts with a zero byte one time in 256
        data = str(n).encode()
        signature = private.sign(data, padding.PKCS1v15(), hashes.SHA256())
        if signature[0] == 0:
            break
    else:
        raise AssertionError("no signature with a leading zero byte in 5,000")
    short = signature.lstrip(b"\0")
    assert rsa_verify(dkim.HashThrough(hashlib.sha256(data)), short, key)
    assert _DKIMPY_RSA_VERIFY(dkim.HashThrough(hashlib.sha256(data)), short, key)
    past = int.from_bytes(signature, "big") + key["modulus"]
    malleated = past.to_bytes((past.bit_length() + 7) // 8, "big")
    assert _DKIMPY_RSA_VERIFY(dkim.HashThrough(hashlib.sha256(data)), malleated, key)
    assert not rsa_verify(dkim.HashThrough(hashlib.sha256(data)), malleated, key)


@given(st.lists(st.sampled_from([b" ", b"\t", b"\r", b"\n", b"\r\n", b"a", b"b:", b"\x00", b"\xff"]), max_size=40))
def test_the_canonicalization_patterns_compiled_once_are_dkimpys(pieces: list[bytes]) -> None:
    import re

    from spamd.mail.auth.dkimpy_stand_ins import compress_whitespace, strip_trailing_whitespace, unfold_header_value

    content = b"".join(pieces)
    assert strip_trailing_whitespace(content) == re.sub(b"[\t ]+\r\n", b"\r\n", content)
    assert compress_whitespace(content) == re.sub(b"[\t ]+", b" ", content)
    assert unfold_header_value(content) == re.sub(b"\r?\n", b"", content)
