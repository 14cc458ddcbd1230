"""DKIM signatures (RFC 6376, RSA and Ed25519), checked as dkimpy checks them, their keys looked up through our resolver.

Every signature is checked, up to MAX_SIGNATURES. A signature with `l=` vouches for
the body's first l bytes only: with more after them, it passes nothing ("policy").
It does not judge alignment (dmarc.py does).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable

import dkim  # dkimpy ships no type information
import dkim.util
import nacl.exceptions
from dkim.canonicalization import CanonicalizationPolicy, InvalidCanonicalizationPolicyError

from spamd.mail.auth.authres import SignatureResult
from spamd.mail.auth.dkimpy_stand_ins import (
    parse_tag_value,
    relaxed_body,
    rsa_verify,
    signed_headers_text,
    split_message,
    validate_signature_fields,
    without_whitespace,
)
from spamd.mail.auth.dns import Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.records import MAX_RECORD

MAX_SIGNATURES = 8  # each costs a key look-up; real mail carries one to three
MIN_KEY_BITS = 1024  # RFC 8301: smaller RSA keys pass nothing

DnsFunction = Callable[..., bytes | None]  # dkimpy's dnsfunc: (name, timeout=) -> the TXT record

# dkimpy logs each failed signature as an error: a forged message is not our error.
_QUIET = logging.getLogger("spamd.dkimpy")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def signature_headers(raw: bytes) -> int:
    """How many DKIM-Signature headers the message's head has (0: nothing to verify, no DNS)."""
    end = head_end(raw)
    head = raw[:end].lower() if end >= 0 else raw.lower()  # lines by \n, up to the first empty one
    return head.startswith(b"dkim-signature:") + head.count(b"\ndkim-signature:")


def head_end(raw: bytes) -> int:
    """Where the first LF LF or CRLF CRLF starts (-1: neither), the one the first line's end suggests
    searched first and the other only before it: each search alone scans the whole of a message
    that has none (17 -> 5 us a signed trec07p-dev message in context)."""
    first_line_end = raw.find(b"\n")
    crlf = first_line_end > 0 and raw[first_line_end - 1] == 13
    likely, other = (b"\r\n\r\n", b"\n\n") if crlf else (b"\n\n", b"\r\n\r\n")
    found = raw.find(likely)
    before = raw.find(other, 0, found + len(other) - 1) if found >= 0 else raw.find(other)
    return min(found, before) if found >= 0 and before >= 0 else max(found, before)


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
    names = [field[0].lower() for field in headers]
    fields = [field for field, name in zip(headers, names, strict=True) if name == b"dkim-signature"][:count]
    tags_of: list[dict[bytes, bytes] | None] = []
    for field in fields:
        try:
            tags_of.append(signature_tags(field[1]))
        except dkim.MessageFormatError:
            tags_of.append(None)
    signed, bodies = _signed_headers(headers, names, tags_of), CanonicalBodies(body)
    results = []
    for field, tags in zip(fields, tags_of, strict=True):
        if tags is None:
            results.append(SignatureResult("", "", "permerror"))
            continue
        domain, selector = _text(tags.get(b"d", b"")), _text(tags.get(b"s", b""))
        results.append(SignatureResult(domain, selector, _verify_one(signed, bodies, field, tags, lookup)))
    return tuple(results)


_TAG_NAME = rb"[A-Za-z][A-Za-z0-9_]*"
_TAG_NAMES = re.compile(rb"%s(?:;%s)*" % (_TAG_NAME, _TAG_NAME))  # joined by ";", which no name holds
_H_SEPARATOR = re.compile(rb"\s*:\s*")  # dkimpy's split of h=


def signature_tags(value: bytes) -> dict[bytes, bytes]:
    """A DKIM-Signature's tags, parsed once for the whole check: as dkimpy parses them, and refused
    where RFC 6376 section 3.2 refuses them and dkimpy does not (a tag name is a letter, then
    letters, digits and "_"), and past MAX_RECORD bytes. Raises dkim.MessageFormatError, for a
    permerror. Parsing it a second time with our own tag-list parser cost 15 us a signed
    trec07p-dev message (tests/test_dkim_stand_ins.py: it refuses what the two refused)."""
    if len(value) > MAX_RECORD:
        raise dkim.MessageFormatError(f"a signature of {len(value)} bytes (at most {MAX_RECORD})")
    try:
        tags = parse_tag_value(value)
    except dkim.util.InvalidTagValueList as e:
        raise dkim.MessageFormatError(e) from e
    if tags and _TAG_NAMES.fullmatch(b";".join(tags)) is None:  # one pattern's pass, not one a name
        wrong = next(name for name in tags if not re.fullmatch(_TAG_NAME, name))
        raise dkim.MessageFormatError(f"not a tag name: {wrong[:60]!r}")
    return tags


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace").strip().lower()


def _signed_headers(
    headers: list[list[bytes]], names: list[bytes], tags_of: list[dict[bytes, bytes] | None]
) -> list[list[bytes]]:
    """Only the header fields some signature's h= names, and the signatures (`names`: each field's, lowered).

    dkimpy canonicalizes every header field of the message for each signature, then hashes
    the ones h= names (picked by name from the bottom, which the fields left out cannot
    change): 0.45 of the 1.1 ms a signed trec07p-dev message cost, most of its fields
    Received lines no signature covers. A signature whose tags do not parse keeps them all.
    """
    signed = {b"dkim-signature", b"from"}
    for tags in tags_of:
        if tags is None:
            return headers
        signed.update(name.lower() for name in _H_SEPARATOR.split(tags.get(b"h", b"")))
    return [field for field, name in zip(headers, names, strict=True) if name in signed]


def _verify_one(
    headers: list[list[bytes]],
    bodies: CanonicalBodies,
    field: list[bytes],
    tags: dict[bytes, bytes],
    lookup: DnsFunction,
) -> str:
    try:
        if not check_signature(headers, bodies, field, tags, lookup):
            return "fail"
    except DnsTemporaryError:
        return "temperror"
    except dkim.ValidationError:  # the body hash differs: a changed body
        return "fail"
    except Exception:  # dkim.DKIMException and what a hostile signature makes its parser raise
        return "permerror"
    if b"l" in tags:
        try:
            if leaves_body_unsigned(tags, bodies):
                return "policy"
        except Exception:
            return "permerror"
    return "pass"


def leaves_body_unsigned(tags: dict[bytes, bytes], bodies: CanonicalBodies) -> bool:
    """Whether a signature's l= covers less than the whole canonical body (raises for a malformed c= or l=)."""
    policy = CanonicalizationPolicy.from_c_value(tags.get(b"c", b"simple/simple"))
    return len(bodies.canonical(policy)) > int(tags[b"l"])


_L_TAG = re.compile(rb"(?:^|[;\s])l\s*=")


def length_limited_beyond(raw: bytes) -> list[tuple[str, str, bytes]]:
    """(d=, s=, b= without its spaces) of each DKIM-Signature whose l= leaves part of the body unsigned (or
    does not parse): what a verifier's pass for it does not vouch for. OpenDKIM, trusted through its
    Authentication-Results, passes such a signature with content appended after its l= bytes."""
    if not signature_headers(raw) or not _L_TAG.search(raw, 0, max(head_end(raw), 0)):
        return []  # no l= tag in the head: no signature to parse
    try:
        headers, body = split_message(raw)
    except dkim.MessageFormatError:
        return []
    bodies, found = CanonicalBodies(body), list[tuple[str, str, bytes]]()
    for name, value in headers:
        if name.lower() != b"dkim-signature":  # every one, not MAX_SIGNATURES: junk ones above must not hide it
            continue
        try:
            tags = signature_tags(value)
        except dkim.MessageFormatError:
            continue
        if b"l" not in tags:
            continue
        try:
            beyond = leaves_body_unsigned(tags, bodies)
        except Exception:
            beyond = True
        if beyond:
            found.append(
                (_text(tags.get(b"d", b"")), _text(tags.get(b"s", b"")), without_whitespace(tags.get(b"b", b"")))
            )
    return found


class CanonicalBodies:
    """A message's body, canonicalized once for each body canonicalization its signatures ask for."""

    def __init__(self, body: bytes):
        self.body = body
        self._canonical: dict[object, bytes] = {}

    def canonical(self, policy: CanonicalizationPolicy) -> bytes:
        algorithm = policy.body_algorithm
        if algorithm not in self._canonical:
            relaxed = algorithm is dkim.canonicalization.Relaxed
            self._canonical[algorithm] = relaxed_body(self.body) if relaxed else policy.canonicalize_body(self.body)
        return self._canonical[algorithm]


def check_signature(
    headers: list[list[bytes]],
    bodies: CanonicalBodies,
    field: list[bytes],
    sig: dict[bytes, bytes],
    lookup: DnsFunction,
) -> bool:
    """dkimpy's `DKIM.verify` of one signature `field` of `headers`, its tags `sig` as dkimpy's parser
    gives them (`signature_tags`), with dkimpy's defaults (no TLSRPT, 1024-bit keys at least),
    step by step: dkimpy's key reading, its checks of the tags and its header picking as
    restated in dkimpy_stand_ins, raising what it raises. It does not hash through a debugging
    wrapper, format debug lines that go nowhere, canonicalize the body again for a second
    signature, or canonicalize header fields it will not hash: dkimpy's DKIM object spent 45 of
    the 130 us a signed trec07p-dev message's check took on those (tests/test_dkim_stand_ins.py
    compares the two on signed and altered mail).
    """
    validate_signature_fields(sig)
    include_headers = [name.lower() for name in _H_SEPARATOR.split(sig[b"h"])]
    try:
        key, key_size, key_type, tlsrpt = dkim.load_pk_from_dns(sig[b"s"] + b"._domainkey." + sig[b"d"] + b".", lookup)
    except (dkim.KeyFormatError, binascii.Error, dkim.DnsTimeoutError):
        return False
    if tlsrpt:
        raise dkim.ValidationError("Message is not tlsrpt and Service Type is tlsrpt")
    try:
        policy = CanonicalizationPolicy.from_c_value(sig.get(b"c", b"simple/simple"))
    except InvalidCanonicalizationPolicyError as e:
        raise dkim.MessageFormatError(f"invalid c= value: {e.args[0]}") from e
    hasher = dkim.HASH_ALGORITHMS[sig[b"a"]]
    if b"bh" in sig:
        body = bodies.canonical(policy)
        if b"l" in sig:
            body = body[: int(sig[b"l"])]
        if hasher(body).digest() != base64.b64decode(without_whitespace(sig[b"bh"])):
            raise dkim.ValidationError("body hash mismatch")
    if b"from" in include_headers:  # dkimpy's: a second From field is hashed too
        include_headers.append(b"from")
    hashed = hasher(signed_headers_text(policy, headers, include_headers, field))
    signature = base64.b64decode(without_whitespace(sig[b"b"]))
    if key_type == b"rsa":
        try:
            valid = bool(rsa_verify(hashed, signature, key))
        except (TypeError, dkim.DigestTooLargeError) as e:
            raise dkim.KeyFormatError(f"digest too large for modulus: {e}") from e
        if valid and key_size < MIN_KEY_BITS:
            raise dkim.KeyFormatError(f"public key too small: {key_size}")
        return valid
    if key_type == b"ed25519":
        try:
            key.verify(hashed.digest(), signature)
        except nacl.exceptions.BadSignatureError:
            return False
        return True
    raise dkim.UnknownKeyTypeError(key_type)
