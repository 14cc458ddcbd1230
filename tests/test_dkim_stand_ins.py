"""spamd's faster stand-ins for dkimpy's message split and byte helpers give dkimpy's own results."""

from __future__ import annotations

import dkim
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_INT2STR, _DKIMPY_STR2INT, bytes_to_int, int_to_bytes, split_message

# Pieces a head is made of, so that the cases hit folds, "From " lines, bad names and empty lines.
_PIECES = st.sampled_from(
    [b"\n", b"\r\n", b"\r", b"\n\n", b"\r\n\r\n", b"\n\r\n", b" ", b"\t", b":", b"From ", b"Subject: x",
     b"DKIM-Signature: v=1; h=from", b"x\x80y", b"\x00", b"a b:", b"Received: by x"]
)  # fmt: skip
# Examples: 600-1,000 a test, a quarter of the 2,000-4,000 they ran before: the cases are
# short sequences of the pieces above, and a failure hypothesis finds is kept in its database
# and tried first. This file's time alone, 2 cores idle: 97 -> 25 s.
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


@settings(max_examples=800, deadline=None)
@given(_MESSAGES)
def test_the_split_is_dkimpys(raw: bytes) -> None:
    assert ours(raw) == dkimpy_parse(raw)


@settings(max_examples=600, deadline=None)
@given(_MESSAGES)
def test_counting_signatures_is_a_line_by_line_count(raw: bytes) -> None:
    from spamd.mail.auth.dkim import signature_headers

    head = raw.split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    assert signature_headers(raw) == sum(1 for line in head.split(b"\n") if line[:15].lower() == b"dkim-signature:")


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"\r\n", b"\r", b"a", b"\n\n", b"\r\n\r\n", b"\n\r\n"]), max_size=20))
def test_the_head_ends_at_the_first_empty_line_of_either_kind(pieces: list[bytes]) -> None:
    from spamd.mail.auth.dkim import head_end

    raw = b"".join(pieces)
    ends = [found for found in (raw.find(b"\n\n"), raw.find(b"\r\n\r\n")) if found >= 0]
    assert head_end(raw) == (min(ends) if ends else -1)


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


@given(st.lists(st.sampled_from([b" ", b"\t", b"  ", b"\r", b"\n", b"\r\n", b"a", b"\x00"]), max_size=40))
def test_a_relaxed_body_compressed_first_is_dkimpys(pieces: list[bytes]) -> None:
    import re

    from dkim.canonicalization import correct_empty_body, strip_trailing_lines

    from spamd.mail.auth.dkimpy_stand_ins import relaxed_body

    content = b"".join(pieces)
    dkimpys = re.sub(b"[\t ]+", b" ", re.sub(b"[\t ]+\r\n", b"\r\n", content))  # its two steps, in its order
    assert relaxed_body(content) == correct_empty_body(strip_trailing_lines(dkimpys))


# --------------------------------------------------------------- the b= pattern and the head in one pass

_B_TAG_PIECES = st.sampled_from(
    [b"b", b"=", b" ", b"\t", b"\r\n", b"\n", b"\r", b";", b"a", b"Z", b"0", b"+", b"/", b"bh", b":"]
)


@settings(max_examples=800, deadline=None)
@given(st.tuples(st.lists(_B_TAG_PIECES, max_size=40), st.sampled_from([b"", b"\r\n", b"\n", b"a\r\n"])).map(
    lambda parts: b"".join(parts[0]) + parts[1]
))  # fmt: skip
@example(b"v=1; b=abc\r\n")
@example(b"v=1; b = ab\r\n c=;\tb=\n")
def test_the_b_tag_pattern_matches_what_dkimpys_matches(value: bytes) -> None:
    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_B_TAG, B_TAG

    assert [m.span() for m in B_TAG.finditer(value)] == [m.span() for m in _DKIMPY_B_TAG.finditer(value)]
    assert B_TAG.sub(b"\\1", value) == _DKIMPY_B_TAG.sub(b"\\1", value)


_LINES = st.sampled_from(
    [b"Subject: x", b"From: a@b", b"X-A:", b"DKIM-Signature: v=1; b=abc", b" folded", b"\tfolded", b"From a@b Mon",
     b"::x", b"a b: c", b"x\ry: z", b"Received: by x", b"no colon", b"", b"\x80: y"]
)  # fmt: skip


@settings(max_examples=800, deadline=None)
@given(st.lists(_LINES, max_size=12), st.sampled_from([b"\r\n", b"\n"]), st.integers(0, 40), st.binary(max_size=30))
def test_the_split_of_heads_of_whole_lines_is_dkimpys(lines: list[bytes], end: bytes, stray: int, body: bytes) -> None:
    """Heads of fields, folds and mbox lines, every line ending alike (or one line end made the other
    kind): where the split takes each field in one match, and where it must not."""
    raw = b"".join(line + end for line in lines) + end + body
    if stray < len(lines):  # one line's end made the other kind
        raw = raw.replace(end, b"\n" if end == b"\r\n" else b"\r\n", 1) if stray % 2 else raw
    assert ours(raw) == dkimpy_parse(raw)


# --------------------------------------------------------------- one signature's check, as dkimpy's DKIM.verify


@pytest.fixture(scope="module")
def signing_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    import base64
    import subprocess

    from spamd_lab.signing_keys import SigningKey, ed25519_key, rsa_key

    directory = tmp_path_factory.mktemp("keys")
    pem = directory / "small.pem"  # a 512-bit key: its valid signatures pass nothing (RFC 8301)
    subprocess.run(["openssl", "genrsa", "-out", str(pem), "512"], check=True, capture_output=True)
    der = subprocess.run(["openssl", "rsa", "-in", str(pem), "-pubout", "-outform", "DER"], check=True,
                         capture_output=True).stdout  # fmt: skip
    small = SigningKey("shop.example", "small", pem.read_bytes(), b"rsa-sha256",
                       f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}")  # fmt: skip
    return {"rsa": rsa_key(directory, "shop.example", "sel1"), "ed25519": ed25519_key("shop.example", "ed1"),
            "rsa512": small}  # fmt: skip


_HEAD = b"From: Shop <deals@shop.example>\r\nTo: you@example.org\r\nSubject: Deals  of\r\n\tthe week\r\nDate: Mon, 2 Mar 2026 10:00:00 +0000\r\n"
_BODIES = [
    b"Hello,\r\n\r\nour  deals \r\n\r\n\r\n",
    b"",
    b"\r\n",
    b"one line without an end",
    b"a\r\n \t\r\nb  \t c\r\n",
]
_MUTATIONS = st.sampled_from(
    ["none", "body byte", "body appended", "header changed", "header refolded", "second from", "second from above",
     "a=rsa-sha1",
     "a=unknown", "no bh", "bh changed", "b changed", "b broken", "l=3", "l=x", "c=relaxed/relaxed", "c=bad",
     "h without from", "h=from:from", "h names a missing field", "names in capitals", "i= other domain", "x= past", "t= letters", "q=other", "duplicate tag", "key missing",
     "key revoked", "key of the other type", "key malformed", "key tlsrpt", "no semicolons"]
)  # fmt: skip


def _mutated(signed: bytes, mutation: str, signature_end: int) -> bytes:
    import re

    signature, rest = signed[:signature_end], signed[signature_end:]
    head, _, body = rest.partition(b"\r\n\r\n")
    tags = {
        "a=rsa-sha1": (rb"a=[\w-]+", b"a=rsa-sha1"), "a=unknown": (rb"a=[\w-]+", b"a=rsa-md5"),
        "no bh": (rb"bh=[^;]+;", b""), "bh changed": (rb"bh=.", b"bh=A"), "b changed": (rb"\bb=(.)", b"b=A"),
        "b broken": (rb"\bb=", b"b=*"), "l=3": (rb"; ?bh=", b"; l=3; bh="), "l=x": (rb"; ?bh=", b"; l=x; bh="),
        "c=relaxed/relaxed": (rb"c=[\w/]+", b"c=relaxed/relaxed"), "c=bad": (rb"c=[\w/]+", b"c=weird"),
        "h without from": (rb"h=from ?: ?", b"h="), "h=from:from": (rb"h=from", b"h=from : FROM"),
        "h names a missing field": (rb"h=", b"h=x-missing:"), "i= other domain": (rb"; ?bh=", b"; i=@other.example; bh="),
        "x= past": (rb"; ?bh=", b"; x=1000; bh="), "t= letters": (rb"; ?bh=", b"; t=soon; bh="),
        "q=other": (rb"q=[\w/]+", b"q=http"), "duplicate tag": (rb"; ?bh=", b"; d=x.example; bh="),
        "no semicolons": (rb";", b""),
    }  # fmt: skip
    if mutation in tags:
        pattern, replacement = tags[mutation]
        signature = re.sub(pattern, replacement, signature, count=1)
    elif mutation == "body byte" and body:
        body = bytes([body[0] ^ 1]) + body[1:]
    elif mutation == "body appended":
        body += b"appended\r\n"
    elif mutation == "header changed":
        head = head.replace(b"Deals", b"Steals")
    elif mutation == "names in capitals":  # relaxed lowers them; simple does not
        head = head.replace(b"Subject:", b"SUBJECT:")
    elif mutation == "header refolded":
        head = head.replace(b"Deals  of\r\n\tthe", b"Deals of the")
    elif mutation == "second from":
        head += b"\r\nFrom: other@else.example"
    elif mutation == "second from above":  # h= names From once: the lower one is signed, dkimpy hashes both
        head = b"From: other@else.example\r\n" + head
    return signature + head + b"\r\n\r\n" + body


def _outcome(check: object) -> str:
    try:
        return "pass" if check() else "false"  # type: ignore[operator]
    except Exception as e:
        return type(e).__name__


@settings(max_examples=400, deadline=None)
@given(
    key_name=st.sampled_from(["rsa", "ed25519", "rsa512"]),
    canonicalization=st.sampled_from(
        [(b"relaxed", b"simple"), (b"simple", b"simple"), (b"relaxed", b"relaxed"), (b"simple", b"relaxed")]
    ),  # fmt: skip
    length=st.booleans(),
    body=st.sampled_from(_BODIES),
    mutation=_MUTATIONS,
    include=st.sampled_from(
        [
            [b"from", b"to", b"subject", b"date"],
            [b"from", b"subject", b"from", b"x-missing", b"date"],
            [b"subject", b"from", b"to", b"to"],
        ]
    ),  # fmt: skip
)
def test_checking_a_signature_is_dkimpys_verify(
    signing_keys, key_name, canonicalization, length, body, mutation, include
) -> None:
    """Signed mail, then one thing changed in it or in the key's record: `check_signature` says what
    dkimpy's own verify says (pass, fail, or the exception it raises)."""
    from spamd.mail.auth.dkim import _QUIET, CanonicalBodies, check_signature

    key = signing_keys[key_name]
    message = _HEAD + b"\r\n" + body
    signature = dkim.sign(
        message, key.selector.encode(), key.domain.encode(), key.private, signature_algorithm=key.algorithm,
        canonicalize=canonicalization, length=length, include_headers=include,
    )  # fmt: skip
    raw = _mutated(signature + message, mutation, len(signature))
    other = signing_keys["ed25519" if key_name == "rsa" else "rsa"]
    record = {
        "key missing": None, "key revoked": b"v=DKIM1; k=rsa; p=", "key of the other type": other.dns_value.encode(),
        "key malformed": b"v=DKIM1; k=rsa; p=!!!", "key tlsrpt": key.dns_value.encode() + b"; s=tlsrpt",
    }.get(mutation, key.dns_value.encode())  # fmt: skip

    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        return record

    headers, rest = split_message(raw)
    fields = [field for field in headers if field[0].lower() == b"dkim-signature"]
    verifier = dkim.DKIM(b"", logger=_QUIET, minkey=1024)
    verifier.headers, verifier.body = headers, rest
    theirs = _outcome(lambda: verifier.verify(idx=0, dnsfunc=lookup))
    ours = _outcome(lambda: check_signature(headers, CanonicalBodies(rest), fields[0], dkimpys_tags(fields[0]), lookup))
    assert ours == theirs
    if mutation == "none":
        assert theirs == ("KeyFormatError" if key_name == "rsa512" else "pass")


def dkimpys_tags(field: list[bytes]) -> dict[bytes, bytes]:
    """The signature's tags, refused (MessageFormatError) only where dkimpy's verify refuses them."""
    from spamd.mail.auth.dkimpy_stand_ins import parse_tag_value

    try:
        return parse_tag_value(field[1])
    except dkim.util.InvalidTagValueList as e:
        raise dkim.MessageFormatError(e) from e


_TAG_PIECES = st.sampled_from(
    [b"v", b"=", b"1", b";", b" ", b"\t", b"\r\n", b"a", b"A", b"_", b"-", b"0", b"\xc3\xa9", b"b"]
)


@settings(max_examples=800, deadline=None)
@given(st.lists(_TAG_PIECES, max_size=30).map(b"".join))
def test_parsing_tags_is_dkimpys(tag_list: bytes) -> None:
    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_PARSE_TAG_VALUE, parse_tag_value

    def outcome(parse: object) -> object:
        try:
            return parse(tag_list)  # type: ignore[operator]
        except dkim.util.InvalidTagValueList as e:
            return type(e).__name__, e.args

    assert outcome(parse_tag_value) == outcome(_DKIMPY_PARSE_TAG_VALUE)


@settings(max_examples=800, deadline=None)
@given(st.lists(_TAG_PIECES, max_size=30).map(b"".join))
@example(b"v=1; x-y=2")  # a tag name dkimpy takes and RFC 6376 does not
@example(b"")  # no tags at all
@example(b" ; ")
@example(b"v=1;; a=2")  # an empty tag dkimpy refuses
@example(b"v=1; z=" + b"0" * 8200)  # longer than any real signature
def test_a_signatures_tags_are_refused_where_either_parser_refused_them(tag_list: bytes) -> None:
    """Parsed once, a signature's tags are refused where our tag-list parser or dkimpy's refused them
    (each parsed it once before), and give the same d= and s=."""
    from spamd.mail.auth.dkim import signature_tags
    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_PARSE_TAG_VALUE
    from spamd.mail.auth.records import RecordError, parse_tag_list

    try:
        theirs = _DKIMPY_PARSE_TAG_VALUE(tag_list)
        strict = parse_tag_list(tag_list)
    except (dkim.util.InvalidTagValueList, RecordError):
        with pytest.raises(dkim.MessageFormatError):
            signature_tags(tag_list)
        return
    assert signature_tags(tag_list) == theirs
    for name in ("d", "s"):
        assert theirs.get(name.encode(), b"").decode("utf-8", "replace").strip().lower() == strict.get(name, "").lower()


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.sampled_from([b"From", b"from", b"To", b"SUBJECT", b"subject", b"X-A"]), max_size=10),
    st.lists(st.sampled_from([b"from", b"to", b"subject", b"x-a", b"x-missing"]), max_size=8),
)
def test_selecting_header_fields_is_dkimpys(names: list[bytes], include: list[bytes]) -> None:
    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_SELECT_HEADERS, select_headers

    headers = [[name, b"%d\r\n" % number] for number, name in enumerate(names)]
    assert select_headers(headers, list(include)) == _DKIMPY_SELECT_HEADERS(headers, list(include))


def _signature_tags() -> st.SearchStrategy[dict[bytes, bytes]]:
    """A well-formed signature's tags with up to four of them changed or dropped, each to a value one
    of dkimpy's checks refuses or to the edge of its pattern (a trailing line end, 76 and 77 digits,
    times around now, an i= no longer than d=), so that every check is reached."""
    import time

    now = int(time.time())
    base = {b"v": b"1", b"a": b"rsa-sha256", b"b": b"YWJjZA==", b"bh": b"YWJj", b"d": b"shop.example",
            b"h": b"from:to", b"s": b"sel"}  # fmt: skip
    values = {
        b"v": [b"2", b"1\n"],
        b"a": [b"rsa-sha1", b"ed25519-sha256", b"rsa-md5"],
        b"b": [b"YW Jj\r\n ZA==", b"YWJjZ", b"*abc", b"YWJj\n", b"", b"===="],
        b"bh": [b"YWJjZ", b"Y W J j", b"!!!!", b""],
        b"d": [b"SHOP.example", b"sh(op.example", b"\xc3\xa9.example", b"\xc3\xa9(x.example", b"", b"a;b"],
        b"h": [b""],
        b"s": [b""],
        b"i": [b"@shop.example", b"x@mail.shop.example", b"x.shop.example", b"@other.example", b"shop.example",
               b"xshop.example", b""],
        b"l": [b"0", b"123", b"1" * 76, b"1" * 77, b"x", b"12\n", b""],
        b"q": [b"dns/txt", b"http"],
        b"t": [b"%d" % now, b"%d" % (now + 30000), b"%d" % (now + 40000), b"soon", b"%d\n" % now, b"0"],
        b"x": [b"%d" % (now + 100), b"1000", b"%d" % (now - 100), b"%d" % (now - 40000), b"later", b"0"],
        b"cv": [b"pass", b"fail", b"none", b"maybe"],
    }  # fmt: skip
    change = st.sampled_from(sorted(values)).flatmap(
        lambda name: st.tuples(st.just(name), st.one_of(st.none(), st.sampled_from(values[name])))
    )

    def changed(changes: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
        sig = dict(base)
        for name, value in changes:
            if value is None:
                sig.pop(name, None)
            else:
                sig[name] = value
        return sig

    return st.lists(change, max_size=4).map(changed)


@settings(max_examples=1000, deadline=None)
@given(_signature_tags())
def test_validating_a_signatures_tags_is_dkimpys(sig: dict[bytes, bytes]) -> None:
    from spamd.mail.auth.dkimpy_stand_ins import _DKIMPY_VALIDATE_SIGNATURE_FIELDS, validate_signature_fields

    def outcome(validate: object) -> object:
        try:
            return validate(dict(sig))  # type: ignore[operator]
        except Exception as e:
            return type(e).__name__, str(e)

    assert outcome(validate_signature_fields) == outcome(_DKIMPY_VALIDATE_SIGNATURE_FIELDS)


@settings(max_examples=600, deadline=None)
@given(
    st.binary(max_size=60)
    | st.lists(st.sampled_from([b" ", b"\t", b"\r", b"\n", b"\x0b", b"\x0c", b"A", b"\x85"])).map(b"".join)
)
def test_removing_whitespace_is_dkimpys_pattern(value: bytes) -> None:
    import re

    from spamd.mail.auth.dkimpy_stand_ins import without_whitespace

    assert without_whitespace(value) == re.sub(rb"\s+", b"", value)
