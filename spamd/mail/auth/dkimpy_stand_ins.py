"""dkimpy's slow steps, each replaced by a faster one that gives the same result.

dkimpy does DKIM in pure Python; these are the steps a signed message's check spent
most of its time in. At import they are put into dkimpy in place of its own, which are
kept (`_DKIMPY_*`) so that tests/test_dkim_stand_ins.py can compare the two on any input.
`split_message` stands in for dkimpy's `rfc822_parse`, which dkim.py calls no more.
"""

from __future__ import annotations

import re
import time
from functools import lru_cache

import dkim  # dkimpy ships no type information
import dkim.canonicalization
import dkim.crypto
import dkim.util
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils
from dkim.canonicalization import CanonicalizationPolicy

# dkimpy's own pure-Python helpers, replaced by faster ones that give the same results
# (tests/test_dkim_stand_ins.py compares them on any input). Each signed trec07p-dev message's
# check turned its RSA result from an int into 128 bytes one byte at a time (0.11 ms of a
# 0.43 ms verification), and parsed the same key record again (0.05 ms).
_DKIMPY_INT2STR, _DKIMPY_STR2INT, _DKIMPY_EVALUATE_PK = dkim.crypto.int2str, dkim.crypto.str2int, dkim.evaluate_pk
_DKIMPY_RSA_VERIFY = dkim.RSASSA_PKCS1_v1_5_verify
_DKIMPY_SELECT_HEADERS, _DKIMPY_PARSE_TAG_VALUE = dkim.select_headers, dkim.util.parse_tag_value
_DKIMPY_VALIDATE_SIGNATURE_FIELDS = dkim.validate_signature_fields
_PREHASHED = {"sha256": utils.Prehashed(hashes.SHA256()), "sha1": utils.Prehashed(hashes.SHA1())}
_PKCS1 = padding.PKCS1v15()


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


# A key whose public exponent is longer than this is refused (a permerror), as OpenSSL refuses one
# past 64 bits with a modulus over 3072 and any as large as the modulus (so OpenDKIM does too).
# dkimpy raised the signature to it in Python: a key record with a 100,000-bit exponent cost 3.1 s
# of CPU a signature, eight signatures a message. Senders use 65537.
MAX_EXPONENT_BITS = 64


def rsa_verify(hashed: object, signature: bytes, public_key: dict[str, int]) -> bool:
    """dkim.crypto.RSASSA_PKCS1_v1_5_verify by OpenSSL (the `cryptography` package): dkimpy raises the
    signature to the key's exponent in Python, 45 us with a 1024-bit key and about four times that
    with the 2048-bit keys most senders use; OpenSSL, a few us. Keys under 1024 bits (which dkimpy
    then refuses as too small) and hashes it does not know take dkimpy's own path."""
    modulus, exponent = public_key["modulus"], public_key["publicExponent"]
    if exponent.bit_length() > MAX_EXPONENT_BITS:
        raise dkim.KeyFormatError(f"a public exponent of {exponent.bit_length()} bits (at most {MAX_EXPONENT_BITS})")
    algorithm = _PREHASHED.get(str(getattr(hashed, "name", "")).lower())
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
        key.verify(bytes(signature), hashed.digest(), _PKCS1, algorithm)  # type: ignore[attr-defined]
    except (InvalidSignature, ValueError):  # ValueError: longer than the key (dkimpy: almost surely no match)
        return False
    return True


# dkimpy's relaxed canonicalization calls re.sub with a pattern each time: the module's pattern
# cache looked up 34 times a signed message. Where the bytes' own methods give the same result,
# those: re scans a byte at a time, and dkimpy's patterns start a match at every space. A body
# canonicalized relaxed (as 92% of modern-dev's signatures ask) took 160-180 us a trec07p-dev
# message with the patterns, 26 us by these two and 18-23 by `relaxed_body` (one process, 1,000
# messages; bodies 6.6 KB on average).
_SPACE_RUNS = re.compile(b"  +")  # starts with a literal, so re looks for it as str.find does


def strip_trailing_whitespace(content: bytes) -> bytes:
    """re.sub(b"[\\t ]+\\r\\n", b"\\r\\n", content): each line's spaces and tabs before its CRLF removed,
    by bytes.rstrip (84-113 -> 13 us a body), and nothing done where no line has any."""
    if b" \r\n" not in content and b"\t\r\n" not in content:
        return content
    lines = content.split(b"\r\n")
    last = lines.pop()  # what follows the last CRLF ends no line: kept as it is
    return b"\r\n".join([line.rstrip(b" \t") for line in lines] + [last])


def compress_whitespace(content: bytes) -> bytes:
    """re.sub(b"[\\t ]+", b" ", content): tabs made spaces, then each run of two or more spaces one
    (the pattern replaced every single space with itself too: 92-142 -> 11-14 us a body)."""
    if b"\t" in content:
        content = content.replace(b"\t", b" ")
    elif b"  " not in content:
        return content
    return _SPACE_RUNS.sub(b" ", content)


def relaxed_body(content: bytes) -> bytes:
    """dkimpy's Relaxed.canonicalize_body: the runs of spaces and tabs compressed first, so that the one
    before a CRLF is a single space, which one `replace` removes (dkimpy strips them first, then
    compresses: the same result, tests/test_dkim_stand_ins.py; 31-33 -> 18-23 us a body)."""
    compressed = compress_whitespace(content)
    stripped = compressed.replace(b" \r\n", b"\r\n")  # without one, the same object back, as fast as `in`
    return dkim.canonicalization.correct_empty_body(dkim.canonicalization.strip_trailing_lines(stripped))


def unfold_header_value(content: bytes) -> bytes:
    """re.sub(b"\\r?\\n", b"", content): every LF goes, and a CR right before one."""
    return content.replace(b"\r\n", b"").replace(b"\n", b"")


# dkimpy's pattern for a signature's b= value (taken out of the signature before it is hashed)
# tries its folding whitespace, (?:(?:\s*\r?\n)?\s+)?, before each character: 25 us a signed
# trec07p-dev message. That folding whitespace matches what \s* matches, so this is the same
# pattern, matching the same spans (tests/test_dkim_stand_ins.py), in one pass.
_DKIMPY_B_TAG = dkim.RE_BTAG
B_TAG = re.compile(rb"([;\s]b\s*=)(?:[\sa-zA-Z0-9+/=]*[a-zA-Z0-9+/=])?(?:\r?\n\Z)?")


def signed_headers_text(
    policy: CanonicalizationPolicy, headers: list[list[bytes]], include_headers: list[bytes], field: list[bytes]
) -> bytes:
    """What dkimpy's `hash_headers` hashes, in one piece: the fields h= names, picked as dkimpy picks them
    (by name, from the bottom), and the signature `field` without its b= value.

    dkimpy canonicalizes every field it is given and then picks; picking first (a field's name
    from the split is printable with no space, so canonicalization does not change which match)
    and canonicalizing only the picked, then hashing one string: 60 -> 20 us a signed
    trec07p-dev message in context.
    """
    relaxed = policy.header_algorithm is dkim.canonicalization.Relaxed
    canonical = _relaxed_fields if relaxed else policy.canonicalize_headers
    picked = canonical(select_headers(headers, include_headers))
    [(signature_name, signature_value)] = canonical([(field[0], B_TAG.sub(b"\\1", field[1]))])
    parts: list[bytes] = []
    for name, value in picked:
        parts += (name, b":", value)
    parts += (signature_name, b":", signature_value.rstrip())
    return b"".join(parts)


def select_headers(headers: list[list[bytes]], include_headers: list[bytes]) -> list[list[bytes]]:
    """dkim.select_headers (`include_headers` lower-case), each field's name lowered once where dkimpy
    lowers it at every comparison: 85 bytes.lower() calls a signed trec07p-dev message."""
    names = [field[0].lower() for field in headers]
    picked: list[list[bytes]] = []
    last: dict[bytes, int] = {}
    for wanted in include_headers:
        index = last.get(wanted, len(headers))
        while index > 0:
            index -= 1
            if names[index] == wanted:
                picked.append(headers[index])
                break
        last[wanted] = index
    return picked


# dkimpy's patterns for a signature's tags, compiled once: it looks each up by its text at each call.
_BASE64 = re.compile(rb"[\s0-9A-Za-z+/]+[\s=]*$")
_D_SPECIALS = re.compile(rb"[\(\)<>\[\]:;@\\,]")
_L_VALUE = re.compile(rb"\d{,76}$")
_DIGITS = re.compile(rb"\d+$")
_MANDATORY = (b"v", b"a", b"b", b"bh", b"d", b"h", b"s")
_S_CLASS = b" \t\n\r\x0b\x0c"  # what \s matches in a bytes pattern
_CLOCK_SLOP_S = 36000  # dkimpy's 10 hours for signers' clocks


def without_whitespace(value: bytes) -> bytes:
    """re.sub(rb"\\s+", b"", value), which dkimpy applies to b= and bh=: one C pass, not a pattern's."""
    return value.translate(None, _S_CLASS)


def validate_signature_fields(sig: dict[bytes, bytes]) -> None:
    """dkim.validate_signature_fields of a DKIM-Signature (not ARC's), the same checks, in the same order,
    raising the same errors (an IndexError of its i= check included): 7.7 -> 3 us a signed
    trec07p-dev message, its patterns compiled once and whitespace removed by bytes.translate."""
    for field in _MANDATORY:
        if field not in sig:
            raise dkim.ValidationError(f"missing {field!s}=")
    if sig[b"a"] not in dkim.HASH_ALGORITHMS:
        raise dkim.ValidationError(f"unknown signature algorithm: {sig[b'a']!s}")
    if _BASE64.match(sig[b"b"]) is None or len(without_whitespace(sig[b"b"])) % 4 != 0:
        raise dkim.ValidationError(f"b= value is not valid base64 ({sig[b'b']!s})")
    # dkimpy matches b= (not bh=) against the pattern a second time here: passed above.
    if len(without_whitespace(sig[b"bh"])) % 4 != 0:
        raise dkim.ValidationError(f"bh= value is not valid base64 ({sig[b'bh']!s})")
    if b"cv" in sig and sig[b"cv"] not in (dkim.CV_Pass, dkim.CV_Fail, dkim.CV_None):
        raise dkim.ValidationError(f"cv= value is not valid ({sig[b'cv']!s})")
    domain = sig[b"d"]
    if domain.isascii() and _D_SPECIALS.search(domain):
        raise dkim.ValidationError(f"d= value is not valid ({domain!s})")
    if b"i" in sig and (
        # dkimpy's ("@", ".", 64, 46): a byte of bytes is an int, so only its ints ever match
        not sig[b"i"].lower().endswith(domain.lower()) or sig[b"i"][-len(domain) - 1] not in b"@."
    ):
        raise dkim.ValidationError(f"i= domain is not a subdomain of d= (i={sig[b'i']!s} d={domain!s})")
    if b"l" in sig and _L_VALUE.match(sig[b"l"]) is None:
        raise dkim.ValidationError(f"l= value is not a decimal integer ({sig[b'l']!s})")
    if b"q" in sig and sig[b"q"] != b"dns/txt":
        raise dkim.ValidationError(f"q= value is not dns/txt ({sig[b'q']!s})")
    t_sign = None
    if b"t" in sig:
        if _DIGITS.match(sig[b"t"]) is None:
            raise dkim.ValidationError(f"t= value is not a decimal integer ({sig[b't']!s})")
        t_sign = int(sig[b"t"])
        if t_sign > int(time.time()) + _CLOCK_SLOP_S:
            raise dkim.ValidationError(f"t= value is in the future ({sig[b't']!s})")
    if b"v" in sig and sig[b"v"] != b"1":
        raise dkim.ValidationError(f"v= value is not 1 ({sig[b'v']!s})")
    if b"x" in sig:
        if _DIGITS.match(sig[b"x"]) is None:
            raise dkim.ValidationError(f"x= value is not a decimal integer ({sig[b'x']!s})")
        x_sign = int(sig[b"x"])
        if x_sign < int(time.time()) - _CLOCK_SLOP_S:
            raise dkim.ValidationError(f"x= value is past ({sig[b'x']!s})")
        if t_sign and x_sign < t_sign:
            raise dkim.ValidationError(f"x= value is less than t= value (x={sig[b'x']!s} t={sig[b't']!s})")


def parse_tag_value(tag_list: bytes) -> dict[bytes, bytes]:
    """dkim.util.parse_tag_value, the same tags and errors, without a list and a pattern look-up for
    each tag (its name need only start with an ASCII letter there: bytes.isalpha is ASCII's)."""
    tags: dict[bytes, bytes] = {}
    specs = tag_list.strip().split(b";")
    if not specs[-1]:
        specs.pop()
    for spec in specs:
        name, equals, value = spec.partition(b"=")
        name = name.strip()
        if not equals or not name[:1].isalpha():
            raise dkim.util.InvalidTagSpec(spec)
        if name in tags:
            raise dkim.util.DuplicateTag(name)
        tags[name] = value.strip()
    return tags


def _relaxed_fields(fields: list[list[bytes]] | list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """dkimpy's relaxed header canonicalization, its patterns applied where it calls a helper for each."""
    return [
        (name.lower().rstrip(), compress_whitespace(unfold_header_value(value)).strip() + b"\r\n")
        for name, value in fields
    ]


@lru_cache(maxsize=1024)
def _openssl_key(modulus: int, exponent: int) -> rsa.RSAPublicKey:
    return rsa.RSAPublicNumbers(exponent, modulus).public_key()


dkim.crypto.int2str, dkim.crypto.str2int, dkim.evaluate_pk = int_to_bytes, bytes_to_int, parsed_key
dkim.RSASSA_PKCS1_v1_5_verify = rsa_verify
dkim.RE_BTAG = B_TAG
dkim.canonicalization.strip_trailing_whitespace = strip_trailing_whitespace
dkim.canonicalization.compress_whitespace = compress_whitespace
dkim.canonicalization.unfold_header_value = unfold_header_value


_FIELD_NAME = re.compile(rb"([\x21-\x7e]+?):")
_HEAD_END = re.compile(rb"\n\r?\n")
# A head line by line, each line (with the folds after it) the first of: a field, an mbox "From "
# line (which dkimpy passes over), or any other line, which the split of _fields_line_by_line
# must judge (a stray CR, a line no field, a fold after a "From " line or before any field).
# Every line ends in CRLF, or every one in LF. A name is the shortest run of printable
# characters before a colon, as _FIELD_NAME's lazy one: a first character, then no colon.
_LINE = rb"([\x21-\x7e][\x21-\x39\x3b-\x7e]*):([^\r\n]*%(end)s(?:[ \t][^\r\n]*%(end)s)*)|From [^\n]*%(end)s|([^\n]*\n)"
_CRLF_LINE, _LF_LINE = (re.compile(_LINE % {b"end": end}) for end in (rb"\r\n", rb"\n"))


def split_message(raw: bytes) -> tuple[list[list[bytes]], bytes]:
    """dkimpy's `rfc822_parse`, the same fields and body, with the body not split into lines.

    dkimpy splits the whole message at every line end and joins the body's lines again with
    CRLF: 130 of the 430 us a signed trec07p-dev message's verification took; this, 40 us
    line by line, 16 us by a pattern over the head (tests/test_dkim_stand_ins.py checks
    the two agree on any bytes). A line of the head that is no field raises
    dkim.MessageFormatError, as there.
    """
    head, body = _head_and_body(raw)
    headers = _fields_in_one_pass(head)
    if headers is None:
        headers = _fields_line_by_line(head)
    crlf = body.count(b"\r\n")
    if crlf == body.count(b"\n"):  # every line end a CRLF already (mail as SMTP brings it): no copy
        return headers, body
    if crlf:
        return headers, body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    return headers, body.replace(b"\n", b"\r\n")


def _fields_in_one_pass(head: bytes) -> list[list[bytes]] | None:
    """The fields of a head whose lines all end alike and are all fields, their folds or mbox "From "
    lines, in one pass of a pattern; None for any other head."""
    crlf = b"\r" in head
    lines = (_CRLF_LINE if crlf else _LF_LINE).findall(head + (b"\r\n" if crlf else b"\n"))
    if any(other for _name, _value, other in lines):
        return None
    if crlf:
        return [[name, value] for name, value, _ in lines if name]
    return [[name, value.replace(b"\n", b"\r\n")] for name, value, _ in lines if name]


def _fields_line_by_line(head: bytes) -> list[list[bytes]]:
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
    return headers


def _head_and_body(raw: bytes) -> tuple[bytes, bytes]:
    """The head before the first empty line (its line ends kept but the last) and the body after it."""
    if raw.startswith((b"\n", b"\r\n")):
        return b"", raw[raw.index(b"\n") + 1 :]
    found = _HEAD_END.search(raw)  # one pass to the head's end (finding each line end alone scans a CRLF body)
    if found is None:
        return raw, b""
    end = found.start()
    start = end - 1 if raw[end - 1 : end] == b"\r" else end
    return raw[:start], raw[end + (2 if raw[end + 1 : end + 2] == b"\n" else 3) :]
