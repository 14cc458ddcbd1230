"""The MIME parser: every decoding path on hand-written mail, hostile input, and never raising."""

from __future__ import annotations

import base64
import codecs
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import ParserConfig
from spamd.mail.message import (
    _ASCII_TABLE_CODECS,
    ParsedMessage,
    decode_header_value,
    html_to_text,
    parse_content_type,
    parse_message,
    split_head_body,
)
from tests import core_helpers as h
from tests.core_helpers import DEFAULT_LIMITS


def parse(raw: bytes, limits: ParserConfig = DEFAULT_LIMITS) -> ParsedMessage:
    return parse_message(raw, limits)


def all_text(parsed: ParsedMessage) -> str:
    return " ".join(parsed.texts)


def check_shape(parsed: ParsedMessage, limits: ParserConfig) -> None:
    """What the tokenizer relies on, whatever the input."""
    assert all(isinstance(n, str) and isinstance(v, str) for n, v in parsed.headers)
    assert all(isinstance(t, str) for t in parsed.texts)
    assert all(isinstance(u, str) for u in parsed.urls)
    assert all(isinstance(d, str) for d in parsed.defects)
    assert len(parsed.parts) <= limits.max_parts
    assert not [d for d in parsed.defects if d.startswith("parser-error")], parsed.defects


# ---------------------------------------------------------------- headers


def test_plain_message_headers_and_body():
    parsed = parse(h.PLAIN)
    assert parsed.header("subject") == "Lunch on Friday?"
    assert parsed.header("from") == "Alice Example <alice@example.org>"
    assert [n for n, _ in parsed.headers] == ["from", "to", "subject", "message-id", "date"]
    assert "lunch on Friday at noon" in all_text(parsed)
    assert parsed.defects == []


def test_rfc2047_b_and_q_words_are_decoded():
    parsed = parse(h.RFC2047_HEADERS)
    assert parsed.header("from") == "Jürgen Müller <jm@example.de>"
    assert parsed.header("subject") == "café au lait and été"


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"=?utf-8?q?hello_world?=", "hello world"),
        (b"=?UTF-8?Q?=E2=82=AC100?=", "€100"),
        (b"=?koi8-r?B?8NLJ18XU?=", "Привет"),
        (b"=?x-no-such-charset?Q?caf=C3=A9?=", "café"),  # unknown label: UTF-8 fallback
        (b"=?undefined?q?abc?=", "abc"),  # a Python codec that refuses errors="replace"
        (b"=?idna?q?abc?=", "abc"),
        (b"=?base64?q?abc?=", "abc"),  # bytes-to-bytes codecs are not charsets
        (b"=?a\x00b?q?abc?=", "abc"),
        (b"=?utf-8?B?not base64!?=", None),  # malformed: kept as written or partly decoded
        (b"=?utf-8?Q?unterminated", None),
    ],
)
def test_encoded_words_of_every_kind(raw, expected):
    value = decode_header_value(raw)
    assert isinstance(value, str)
    if expected is not None:
        assert value == expected


def test_ascii_table_codecs_decode_ascii_as_ascii():
    # The fast path decodes ASCII data as "ascii" for these: right only for codecs that
    # map byte by byte through a table whose lower half is ASCII, under their canonical names.
    for codec in _ASCII_TABLE_CODECS:
        assert codecs.lookup(codec).name == codec
        table = importlib.import_module("encodings." + codec.replace("-", "_")).decoding_table
        assert len(table) == 256 and table[:128] == bytes(range(128)).decode("ascii")


def test_8bit_headers_are_decoded_and_flagged():
    raw = "Subject: Grüße für Sie\nFrom: Zoë <z@example.com>\n\nbody\n".encode()
    latin = "Subject: caf\xe9\n\nbody\n".encode("latin-1")
    parsed = parse(raw)
    assert parsed.header("subject") == "Grüße für Sie"
    assert "8bit-header" in parsed.defects
    assert parse(latin).header("subject") == "café"  # not UTF-8: cp1252


def test_folded_headers_are_unfolded_and_a_line_that_is_no_field_starts_the_body():
    raw = b"From nobody Mon Apr  2 10:00:00 2007\nSubject: one\n two\n\tthree\nnot a header line\nX-A:b\n\nbody"
    parsed = parse(raw)
    assert parsed.header("subject") == "one two three"
    assert parsed.header("x-a") == ""  # after the first non-field line: body text, as in Python's email
    assert "not a header line" in all_text(parsed) and "body" in all_text(parsed)


def test_a_header_block_without_the_empty_line_after_it_keeps_the_body():
    # Exports and pasted forwards have no empty line; every line was read as a
    # header, "from : jane" became a From field and the message had no text at all.
    raw = b"Subject: meeting moved\nhi all, the meeting moved to 3pm\nfrom : jane on 12 / 14 / 99\nthanks\n"
    parsed = parse(raw)
    assert parsed.header("subject") == "meeting moved"
    assert parsed.header("from") == ""  # a space before the colon: not a field name
    assert "meeting moved to 3pm" in all_text(parsed) and "thanks" in all_text(parsed)
    assert split_head_body(raw.replace(b"\n", b"\r\n"))[1].startswith(b"hi all")


def test_a_message_that_starts_with_text_has_no_headers():
    assert split_head_body(b"hello there\nSubject: x\n\nmore") == (b"", b"hello there\nSubject: x\n\nmore")
    assert split_head_body(b"From a@b Mon\nhello\n") == (b"From a@b Mon", b"hello\n")


def test_long_runs_of_blanks_in_a_header_are_linear():
    # The field regex once backtracked quadratically over trailing blanks.
    raw = b"Subject: a" + b" " * 400_000 + b"x  \nTo: t@example.com\n\nbody"
    parsed = parse(raw)
    assert parsed.header("to") == "t@example.com"


def test_content_type_parameters_are_lenient():
    assert parse_content_type('Text/HTML; Charset="UTF-8"; name=a.html') == (
        "text/html",
        {"charset": "UTF-8", "name": "a.html"},
    )
    assert parse_content_type('multipart/mixed; boundary="unterminated') == (
        "multipart/mixed",
        {"boundary": "unterminated"},
    )
    assert parse_content_type("") == ("", {})


def test_split_head_body_handles_lf_crlf_and_no_body():
    assert split_head_body(b"A: b\n\nbody") == (b"A: b", b"body")
    assert split_head_body(b"A: b\r\n\r\nbody") == (b"A: b", b"body")
    assert split_head_body(b"A: b") == (b"A: b", b"")
    assert split_head_body(b"\nbody only") == (b"", b"body only")


# ---------------------------------------------------------------- transfer encodings


def test_base64_text_is_decoded_whole():
    # Every byte, including the final group whose "=" padding the cleaner strips.
    assert h.BASE64_TEXT.rstrip().endswith(b"E=")
    assert all_text(parse(h.BASE64_TEXT)) == "Grüße aus München, prices from $99!"


@pytest.mark.parametrize("length", range(0, 10))
def test_base64_every_padding_length(length):
    payload = "ab€d"[: length % 4].encode() + b"x" * length
    raw = b"Content-Transfer-Encoding: base64\nContent-Type: text/plain; charset=utf-8\n\n" + h.b64(payload)
    assert all_text(parse(raw)) == payload.decode()


def test_bad_base64_never_raises_and_keeps_what_decodes():
    raw = b"Content-Transfer-Encoding: base64\n\n" + b"SGVsbG8g!!!d29y\x00bGQ=\n====\n%%%%\nQ"
    parsed = parse(raw)
    assert "Hello world" in all_text(parsed)


def test_quoted_printable_with_soft_breaks_and_charset():
    text = all_text(parse(h.QP_TEXT))
    assert "Un café très crème, s'il vous plaît." in text
    assert "soft-broken here" in text


def test_broken_quoted_printable_is_kept():
    raw = b"Content-Transfer-Encoding: quoted-printable\n\nbad =ZZ escape =\nand =E"
    assert "escape" in all_text(parse(raw))


def test_unknown_transfer_encoding_reads_raw():
    raw = b"Content-Transfer-Encoding: x-uuencode-ish\n\nraw words"
    assert "raw words" in all_text(parse(raw))


# ---------------------------------------------------------------- charsets


@pytest.mark.parametrize(
    "charset, body, expected, defect",
    [
        ("koi8-r", "Привет мир".encode("koi8-r"), "Привет мир", None),
        ("windows-1251", "Привет".encode("cp1251"), "Привет", None),
        ("shift_jis", "こんにちは".encode("shift_jis"), "こんにちは", None),
        ("gb2312", "你好世界".encode("gb18030"), "你好世界", None),
        ('"ISO-8859-1"', "café".encode("latin-1"), "café", None),
        # Wrong label: "us-ascii" with 8-bit text is read as windows-1252.
        ("us-ascii", "café".encode("cp1252"), "café", None),
        # Wrong label: "utf-8" with Latin-1 bytes: replacement character, no error.
        ("utf-8", "café".encode("latin-1"), "caf\ufffd", None),
        # Unknown labels fall back to UTF-8, then windows-1252, and are flagged.
        ("x-made-up", "café".encode(), "café", "unknown-charset"),
        ("x-made-up", "café".encode("cp1252"), "café", "unknown-charset"),
        ("base64", b"plain words", "plain words", "unknown-charset"),
        ("undefined", b"plain words", "plain words", None),
        ("idna", b"plain words", "plain words", None),
        ("utf-16", b"\xff\xfe" + "hi".encode("utf-16-le") + b"\x00", "hi\ufffd", None),
    ],
)
def test_charsets_known_unknown_and_wrong(charset, body, expected, defect):
    raw = f"Content-Type: text/plain; charset={charset}\n\n".encode() + body
    parsed = parse(raw)
    assert all_text(parsed) == expected
    if defect:
        assert defect in parsed.defects


# ---------------------------------------------------------------- HTML


def test_html_visible_text_only():
    parsed = parse(h.HTML)
    text = all_text(parsed)
    for hidden in ("hiddenscript", "hiddenstyle", "hiddencomment", "hidden title", "color"):
        assert hidden not in text
    assert "Visible & bold café €5 <tag>" in " ".join(text.split())
    assert "click here" in text
    assert parsed.urls == ["http://click.example.com/buy?id=1", "https://img.example.net/pixel.gif"]


def test_html_unclosed_script_hides_the_rest_and_entities_do_not_open_tags():
    text, _ = html_to_text("<p>before</p><script>hidden forever <p>also hidden")
    assert "before" in text and "hidden" not in text
    text, _ = html_to_text("&lt;script&gt;shown&lt;/script&gt; &#x41;&#66; &nbsp;&bogus;")
    assert "<script>shown</script>" in text and "AB" in text and "&bogus;" in text


def test_html_in_text_plain_is_detected():
    raw = b"Content-Type: text/plain\n\n<html><body><style>x{}</style>shown</body></html>"
    assert all_text(parse(raw)).split() == ["shown"]


# ---------------------------------------------------------------- MIME structure


def test_multipart_alternative_visits_both_parts():
    parsed = parse(h.ALTERNATIVE)
    assert [p.content_type for p in parsed.parts] == ["text/plain", "text/html"]
    assert [t.split() for t in parsed.texts] == [["plainversion", "words"], ["htmlversion", "words"]]
    assert "preamble" not in all_text(parsed) and "epilogue" not in all_text(parsed)


def test_message_rfc822_inner_headers_and_body():
    parsed = parse(h.RFC822)
    text = all_text(parsed)
    assert "outerwords" in text and "innersubject" in text and "innerbodywords" in text


def test_multipart_digest_children_default_to_message_rfc822():
    raw = b"""Content-Type: multipart/digest; boundary=D

--D

Subject: digested
Content-Type: text/plain

digestbody
--D--
"""
    text = all_text(parse(raw))
    assert "digested" in text and "digestbody" in text


def test_part_without_headers_keeps_its_first_paragraph():
    raw = b"Content-Type: multipart/mixed; boundary=B\n\n--B\n\nfirst paragraph\n\nsecond paragraph\n--B--\n"
    parsed = parse(raw)
    assert parsed.texts == ["first paragraph\n\nsecond paragraph"]
    assert [p.content_type for p in parsed.parts] == ["text/plain"]


def test_attachment_described_not_decoded():
    parsed = parse(h.ATTACHMENT)
    assert "attachmentwords" not in all_text(parsed)
    pdf = parsed.parts[1]
    assert (pdf.content_type, pdf.filename, pdf.encoding) == ("application/pdf", "report.pdf", "base64")


def test_missing_boundary_reads_the_body_as_text():
    parsed = parse(h.MISSING_BOUNDARY)
    assert "boundary-missing" in parsed.defects
    assert "strandedwords" in all_text(parsed)


def test_lying_boundary_reads_the_body_as_text():
    parsed = parse(h.LYING_BOUNDARY)
    assert "boundary-missing" in parsed.defects
    assert "liarwords" in all_text(parsed)


def test_truncated_multipart_keeps_the_complete_parts():
    parsed = parse(h.TRUNCATED)
    assert parsed.texts[0] == "firstpart complete"
    assert parsed.texts[1].startswith("secondpar")


def test_crlf_and_lf_parse_alike():
    for raw in h.HAND_MESSAGES:
        lf, crlf = parse(raw), parse(h.crlf(raw))
        assert lf.headers == crlf.headers
        assert [t.split() for t in lf.texts] == [t.split() for t in crlf.texts]
        assert lf.defects == crlf.defects


def test_max_bytes_cap_truncates_and_says_so():
    limits = ParserConfig(max_bytes=len(h.PLAIN))
    parsed = parse(h.PLAIN + b"x" * 1000, limits)
    assert "truncated" in parsed.defects
    assert parse(h.PLAIN, limits).defects == []


def test_text_chars_cap():
    limits = ParserConfig(max_text_chars=50)
    parsed = parse(b"Subject: s\n\n" + b"word " * 1000, limits)
    assert len(parsed.texts[0]) == 50


# ---------------------------------------------------------------- hostile input


def nested_multipart(depth: int) -> bytes:
    head = b"".join(b"--B%d.\nContent-Type: multipart/mixed; boundary=B%d.\n\n" % (i, i + 1) for i in range(depth))
    tail = b"".join(b"\n--B%d.--\n" % i for i in reversed(range(depth)))
    return (
        b"Subject: deep\nContent-Type: multipart/mixed; boundary=B0.\n\n"
        + head
        + b"--B%d.\n\ndeepest words" % depth
        + tail
    )


def nested_rfc822(depth: int) -> bytes:
    return b"Subject: s0\nContent-Type: message/rfc822\n\n" * depth + b"Subject: bottom\n\nbottom words\n"


def many_parts(count: int) -> bytes:
    parts = b"".join(b"--P\nContent-Type: text/plain\n\npart %d\n" % i for i in range(count))
    return b"Subject: parts\nContent-Type: multipart/mixed; boundary=P\n\n" + parts + b"--P--\n"


@pytest.mark.slow
def test_50_megabyte_attachment():
    blob = base64.encodebytes(bytes(range(256)) * (50 * 1024 * 1024 // 256))
    raw = h.ATTACHMENT.replace(
        b"--MIX--\n",
        b"--MIX\nContent-Type: application/zip\nContent-Transfer-Encoding: base64\n\n" + blob + b"--MIX--\n",
    )
    assert len(raw) > 50 * 1024 * 1024
    parsed = parse(raw)
    assert "truncated" in parsed.defects
    assert parsed.texts[0] == "see the attachment"
    # With the byte cap lifted the attachment is still only described, not decoded.
    parsed = parse(raw, ParserConfig(max_bytes=len(raw)))
    assert parsed.parts[-1].content_type == "application/zip" and parsed.parts[-1].size > 50 * 1024 * 1024
    check_shape(parsed, DEFAULT_LIMITS)


def test_50_megabyte_text_part_with_caps_lifted():
    raw = b"Content-Type: text/plain\n\n" + b"spam words " * (50 * 1024 * 1024 // 11)
    limits = ParserConfig(max_bytes=len(raw), word_salad=False)
    parsed = parse(raw, limits)
    # Lower-case words and nothing else: word salad, kept apart from the text (weighed as [model] salad_tokens).
    assert parsed.texts == [" "] and len(parsed.salad[0]) == limits.max_text_chars
    # Left out as word salad (lower-case words and nothing else), the text is its count alone.
    salad = parse(raw, ParserConfig(max_bytes=len(raw), word_salad=True))
    assert len(salad.texts[0].strip()) < 11 and salad.salad_words > limits.max_text_chars // 6


def test_10000_parts():
    raw = many_parts(10_000)
    parsed = parse(raw)
    assert "parts-cap" in parsed.defects or "truncated" in parsed.defects
    assert len(parsed.parts) <= DEFAULT_LIMITS.max_parts
    # All of them, with the caps lifted: the walk is linear in parts.
    limits = ParserConfig(max_bytes=len(raw), max_parts=20_000)
    parsed = parse(raw, limits)
    assert len(parsed.texts) == 10_000 and parsed.texts[-1] == "part 9999"
    check_shape(parsed, limits)


def test_multipart_nested_1000_deep():
    parsed = parse(nested_multipart(1000))
    assert "depth-cap" in parsed.defects
    check_shape(parsed, DEFAULT_LIMITS)
    # Deeper than the cap allows: still no recursion, the innermost text is reached.
    limits = ParserConfig(max_depth=2000, max_parts=5000)
    parsed = parse(nested_multipart(1000), limits)
    assert "deepest words" in all_text(parsed)
    check_shape(parsed, limits)


def test_message_rfc822_nested_1000_deep():
    parsed = parse(nested_rfc822(1000))
    assert "depth-cap" in parsed.defects
    check_shape(parsed, DEFAULT_LIMITS)
    limits = ParserConfig(max_depth=2000, max_parts=5000)
    assert "bottom words" in all_text(parse(nested_rfc822(1000), limits))


def test_nul_bytes_everywhere():
    raw = (
        b'Sub\x00ject: a\x00b\nContent-Type: multipart/mixed; boundary="N\x00"\n\n--N\x00\n\ntext\x00more\n--N\x00--\n'
    )
    parsed = parse(raw)
    assert "nul-bytes" in parsed.defects
    assert "text\x00more" in all_text(parsed)
    check_shape(parsed, DEFAULT_LIMITS)


@pytest.mark.parametrize("raw", [b"", b"\n", b"\r\n\r\n", b"\x00" * 100, b":", b"--", b"=?", b"\xff" * 50])
def test_degenerate_inputs(raw):
    check_shape(parse(raw), DEFAULT_LIMITS)


# ---------------------------------------------------------------- never raises (properties)

# Pieces of MIME syntax, so random messages reach the interesting branches.
FRAGMENTS = [
    b"\n",
    b"\r\n",
    b"\n\n",
    b": ",
    b"Subject: ",
    b"From: ",
    b"Content-Type: ",
    b"multipart/mixed",
    b"multipart/alternative",
    b"multipart/digest",
    b"message/rfc822",
    b"text/html",
    b"text/plain",
    b"; boundary=",
    b'"B"',
    b"B",
    b"--B",
    b"--B--",
    b"; charset=",
    b"utf-8",
    b"koi8-r",
    b"utf-16",
    b"x-bogus",
    b"idna",
    b"Content-Transfer-Encoding: ",
    b"base64",
    b"quoted-printable",
    b"=?utf-8?B?",
    b"=?iso-8859-1?Q?",
    b"?=",
    b"=E9",
    b"=\n",
    b"<html>",
    b"<script>",
    b"</script>",
    b"<!--",
    b"-->",
    b"<style",
    b"&amp;",
    b"&#x",
    b"<a href=http://x.example/",
    b"SGVsbG8=",
    b"\x00",
    b"\xff\xfe",
    b"\xc3\xa9",
    b" ",
    b"\t",
    b"Content-Disposition: attachment; filename=",
    b"a.exe",
]

fragment_messages = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=8)), max_size=80).map(b"".join)

SMALL_LIMITS = ParserConfig(max_bytes=4096, max_parts=8, max_depth=3, max_text_chars=512)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=2048))
def test_never_raises_on_arbitrary_bytes(raw):
    check_shape(parse(raw), DEFAULT_LIMITS)


@settings(max_examples=400, deadline=None)
@given(raw=fragment_messages, small=st.booleans())
def test_never_raises_on_mime_shaped_noise(raw, small):
    limits = SMALL_LIMITS if small else DEFAULT_LIMITS
    check_shape(parse(raw, limits), limits)


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    """A seed message with a few byte-level edits: flips, cuts, insertions, duplications."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "delete", "insert", "fragment", "duplicate", "truncate"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "fragment":
            data[at:at] = draw(st.sampled_from(FRAGMENTS))
        elif op == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 200))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(raw=mutated(h.HAND_MESSAGES), small=st.booleans())
def test_never_raises_on_mutated_hand_written_messages(raw, small):
    limits = SMALL_LIMITS if small else DEFAULT_LIMITS
    check_shape(parse(raw, limits), limits)


_corpus_seeds: list[bytes] = []


def corpus_seeds() -> list[bytes]:
    if not _corpus_seeds:
        _corpus_seeds.extend(m[: 64 * 1024] for m in h.corpus_sample(200))
    return _corpus_seeds


@pytest.mark.corpus
@h.requires_corpus
def test_never_raises_on_mutated_corpus_messages():
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(raw=mutated(corpus_seeds()), small=st.booleans())
    def check(raw, small):
        limits = SMALL_LIMITS if small else DEFAULT_LIMITS
        check_shape(parse(raw, limits), limits)

    check()


@pytest.mark.corpus
@h.requires_corpus
def test_corpus_messages_parse_without_parser_errors():
    for raw in corpus_seeds():
        check_shape(parse(raw), DEFAULT_LIMITS)
