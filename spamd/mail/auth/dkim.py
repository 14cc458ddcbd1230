"""DKIM signatures (RFC 6376, RSA and Ed25519 by dkimpy), their keys looked up through our resolver.

Every signature is checked, up to MAX_SIGNATURES. A signature with `l=` vouches for
the body's first l bytes only: with more after them, it passes nothing ("policy").
It does not judge alignment (dmarc.py does).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache

import dkim  # dkimpy ships no type information
import dkim.canonicalization
import dkim.crypto
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils
from dkim.canonicalization import CanonicalizationPolicy

from spamd.mail.auth.dns import Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.records import RecordError, parse_tag_list

MAX_SIGNATURES = 8  # each costs a key look-up; real mail carries one to three

# dkimpy logs each failed signature as an error: a forged message is not our error.
_QUIET = logging.getLogger("spamd.dkimpy")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


# dkimpy's own pure-Python helpers, replaced by faster ones that give the same results
# (tests/test_dkim_stand_ins.py compares them on any input). Each signed trec07p-dev message's
# check turned its RSA result from an int into 128 bytes one byte at a time (0.11 ms of a
# 0.43 ms verification), and parsed the same key record again (0.05 ms).
_DKIMPY_INT2STR, _DKIMPY_STR2INT, _DKIMPY_EVALUATE_PK = dkim.crypto.int2str, dkim.crypto.str2int, dkim.evaluate_pk
_DKIMPY_RSA_VERIFY = dkim.RSASSA_PKCS1_v1_5_verify
_HASHES = {"sha256": hashes.SHA256, "sha1": hashes.SHA1}


def int_to_bytes(n: int, length: int = -1) -> bytearray:
    """dkim.crypto.int2str: big-endian, `length` bytes (the low ones), or as few as hold n (one at least)."""
    if length < 0:
        return bytearray(n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big"))
    return bytearray((n & ((1 << 8 * length) - 1)).to_bytes(length, "big"))


def bytes_to_int(s: bytes) -> int:
    """dkim.crypto.str2int: big-endian."""
    return int.from_bytes(bytearray(s), "big")


@lru_cache(maxsize=1024)
def parsed_key(name: bytes, record: bytes | str | None) -> tuple[object, int | None, bytes | None, bool]:
    """dkim.evaluate_pk, once per key record: a sender's key is the same record message after message
    (dkimpy never changes what it returns; a record it refuses raises each time)."""
    return _DKIMPY_EVALUATE_PK(name, record)


def rsa_verify(hashed: object, signature: bytes, public_key: dict[str, int]) -> bool:
    """dkim.crypto.RSASSA_PKCS1_v1_5_verify by OpenSSL (the `cryptography` package): dkimpy raises the
    signature to the key's exponent in Python, 45 us with a 1024-bit key and about four times that
    with the 2048-bit keys most senders use; OpenSSL, a few us. Keys under 1024 bits (which dkimpy
    then refuses as too small) and hashes it does not know take dkimpy's own path."""
    modulus, exponent = public_key["modulus"], public_key["publicExponent"]
    algorithm = _HASHES.get(str(getattr(hashed, "name", "")).lower())
    if algorithm is None or modulus.bit_length() < 1024:
        return bool(_DKIMPY_RSA_VERIFY(hashed, signature, public_key))
    try:
        key = _openssl_key(modulus, exponent)
    except ValueError:  # not an RSA key OpenSSL takes (an even modulus, say): dkimpy's answer
        return bool(_DKIMPY_RSA_VERIFY(hashed, signature, public_key))
    size = (modulus.bit_length() + 7) // 8
    if len(signature) < size:  # as dkimpy reads it: a number, leading zero bytes or not
        signature = bytes(signature).rjust(size, b"\0")
    try:
        key.verify(bytes(signature), hashed.digest(), padding.PKCS1v15(), utils.Prehashed(algorithm()))  # type: ignore[attr-defined]
    except (InvalidSignature, ValueError):  # ValueError: longer than the key (dkimpy: almost surely no match)
        return False
    return True


# dkimpy's relaxed canonicalization calls re.sub with a pattern each time: the module's pattern
# cache looked up 34 times a signed message. The same patterns, compiled once.
_TRAILING_WHITESPACE = re.compile(b"[\t ]+\r\n")
_WHITESPACE = re.compile(b"[\t ]+")
_LINE_BREAK = re.compile(b"\r?\n")


def strip_trailing_whitespace(content: bytes) -> bytes:
    return _TRAILING_WHITESPACE.sub(b"\r\n", content)


def compress_whitespace(content: bytes) -> bytes:
    return _WHITESPACE.sub(b" ", content)


def unfold_header_value(content: bytes) -> bytes:
    return _LINE_BREAK.sub(b"", content)


@lru_cache(maxsize=1024)
def _openssl_key(modulus: int, exponent: int) -> rsa.RSAPublicKey:
    return rsa.RSAPublicNumbers(exponent, modulus).public_key()


dkim.crypto.int2str, dkim.crypto.str2int, dkim.evaluate_pk = int_to_bytes, bytes_to_int, parsed_key
dkim.RSASSA_PKCS1_v1_5_verify = rsa_verify
dkim.canonicalization.strip_trailing_whitespace = strip_trailing_whitespace
dkim.canonicalization.compress_whitespace = compress_whitespace
dkim.canonicalization.unfold_header_value = unfold_header_value


@dataclass(frozen=True, slots=True)
class SignatureResult:
    """pass, fail, policy (l= left content unsigned), temperror (DNS), permerror (malformed)."""

    domain: str
    selector: str
    result: str


def signature_headers(raw: bytes) -> int:
    """How many DKIM-Signature headers the message's head has (0: nothing to verify, no DNS)."""
    ends = [found for found in (raw.find(b"\n\n"), raw.find(b"\r\n\r\n")) if found >= 0]
    head = raw[: min(ends)].lower() if ends else raw.lower()  # lines by \n, up to the first empty one
    return head.startswith(b"dkim-signature:") + head.count(b"\ndkim-signature:")


def verify_signatures(raw: bytes, resolver: CachingResolver, budget: Budget) -> tuple[SignatureResult, ...]:
    """Each DKIM-Signature of `raw`, verified; an empty tuple when there are none."""
    count = min(signature_headers(raw), MAX_SIGNATURES)
    if not count:
        return ()

    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        records = resolver.txt(name.decode("ascii", "replace"), budget)
        return records[0] if records else None

    try:
        headers, body = split_message(raw)
    except dkim.MessageFormatError:  # a head dkimpy cannot read passes nothing
        return tuple(SignatureResult("", "", "permerror") for _ in range(count))
    signatures = [value for name, value in headers if name.lower() == b"dkim-signature"][:count]
    tags_of: list[dict[str, str] | None] = []
    for value in signatures:
        try:
            tags_of.append(parse_tag_list(value))
        except RecordError:
            tags_of.append(None)
    verifier = dkim.DKIM(b"", logger=_QUIET, minkey=1024)
    verifier.headers, verifier.body = _signed_headers(headers, tags_of), body
    results = []
    for index, tags in enumerate(tags_of):
        if tags is None:
            results.append(SignatureResult("", "", "permerror"))
            continue
        domain, selector = tags.get("d", "").lower(), tags.get("s", "").lower()
        results.append(SignatureResult(domain, selector, _verify_one(verifier, index, tags, lookup)))
    return tuple(results)


_FIELD_NAME = re.compile(rb"([\x21-\x7e]+?):")


def split_message(raw: bytes) -> tuple[list[list[bytes]], bytes]:
    """dkimpy's `rfc822_parse`, the same fields and body, with the body not split into lines.

    dkimpy splits the whole message at every line end and joins the body's lines again with
    CRLF: 130 of the 430 us a signed trec07p-dev message's verification took; this, 40 us
    (tests/test_dkim_stand_ins.py checks the two agree on any bytes). A line of the head that
    is no field raises dkim.MessageFormatError, as there.
    """
    head, body = _head_and_body(raw)
    headers: list[list[bytes]] = []
    lines = head.split(b"\n")
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if number < last and line.endswith(b"\r"):
            line = line[:-1]
        elif number == last and not line:  # the head ended with a line end (no blank line)
            break
        if line[:1] in (b"\t", b" "):
            if not headers:
                raise dkim.MessageFormatError("a continuation line before any header field")
            headers[-1][1] += line + b"\r\n"
        elif found := _FIELD_NAME.match(line):
            headers.append([found.group(1), line[found.end() :] + b"\r\n"])
        elif not line.startswith(b"From "):
            raise dkim.MessageFormatError(f"Unexpected characters in RFC822 header: {line!r}")
    crlf = body.count(b"\r\n")
    if crlf == body.count(b"\n"):  # every line end a CRLF already (mail as SMTP brings it): no copy
        return headers, body
    if crlf:
        return headers, body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    return headers, body.replace(b"\n", b"\r\n")


def _head_and_body(raw: bytes) -> tuple[bytes, bytes]:
    """The head before the first empty line (its line ends kept but the last) and the body after it."""
    if raw.startswith((b"\n", b"\r\n")):
        return b"", raw[raw.index(b"\n") + 1 :]
    ends = [found for found in (raw.find(b"\n\n"), raw.find(b"\n\r\n")) if found >= 0]
    if not ends:
        return raw, b""
    end = min(ends)
    start = end - 1 if raw[end - 1 : end] == b"\r" else end
    return raw[:start], raw[end + (2 if raw[end + 1 : end + 2] == b"\n" else 3) :]


def _signed_headers(headers: list[list[bytes]], tags_of: list[dict[str, str] | None]) -> list[list[bytes]]:
    """Only the header fields some signature's h= names, and the signatures.

    dkimpy canonicalizes every header field of the message for each signature, then hashes
    the ones h= names (picked by name from the bottom, which the fields left out cannot
    change): 0.45 of the 1.1 ms a signed trec07p-dev message cost, most of its fields
    Received lines no signature covers. A signature whose tags do not parse keeps them all.
    """
    names = {b"dkim-signature", b"from"}
    for tags in tags_of:
        if tags is None:
            return headers
        names.update(name.strip().lower().encode("ascii", "replace") for name in tags.get("h", "").split(":"))
    return [field for field in headers if field[0].lower() in names]


def _verify_one(verifier: dkim.DKIM, index: int, tags: dict[str, str], lookup: object) -> str:
    try:
        if not verifier.verify(idx=index, dnsfunc=lookup):
            return "fail"
    except DnsTemporaryError:
        return "temperror"
    except dkim.ValidationError:  # the body hash differs: a changed body
        return "fail"
    except Exception:  # dkim.DKIMException and what a hostile signature makes its parser raise
        return "permerror"
    if "l" in tags:
        try:
            policy = CanonicalizationPolicy.from_c_value(tags.get("c", "simple/simple").encode())
            if len(policy.canonicalize_body(verifier.body)) > int(tags["l"]):
                return "policy"
        except Exception:
            return "permerror"
    return "pass"
