"""Fuzzing bytes -> parse -> tokenize -> featurize -> score: total (no exception at all) and under a second.

Targeted inputs at the parser caps for every slow pattern found, the fixes'
equivalence with the patterns they replaced, and a short mutation campaign from
hand-written hostile MIME and corpus seeds (the long one: scripts/fuzz_parser.py).
"""

from __future__ import annotations

import html

from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import ParserConfig
from spamd.message import html_to_text, parse_message

LIMITS = ParserConfig()


# ---------------------------------------------------------------- fixed: message.py


def test_a_huge_decimal_character_reference_keeps_the_text():
    # int() refuses more than 4,300 digits; the ValueError used to end the walk and lose every text.
    raw = b"Content-Type: text/html\n\nhello world &#" + b"9" * 5000 + b"; &#" + b"0" * 5000 + b"65; more words"
    parsed = parse_message(raw, LIMITS)
    assert parsed.defects == []
    assert parsed.texts == ["hello world \ufffd A more words"]


@settings(max_examples=300, deadline=None)
@given(digits=st.text(alphabet="0000123456789", min_size=1, max_size=40), tail=st.sampled_from(["", ";", "x;"]))
def test_long_decimal_references_unescape_as_html_does(digits, tail):
    markup = f"a&#{digits}{tail}b &#{digits}"
    assert html_to_text(markup)[0] == html.unescape(markup)


def test_python_only_codecs_are_not_charsets():
    # punycode's decoder is quadratic (8 s for 512 KiB); unicode-escape warns on "\.".
    for charset in (b"punycode", b"unicode-escape", b"raw-unicode-escape"):
        raw = b"Subject: =?" + charset + b"?q?sub\\.ject?=\nContent-Type: text/plain; charset=" + charset + b"\n\nbody \\. words-"
        parsed = parse_message(raw, LIMITS)
        assert parsed.texts == ["body \\. words-"]
        assert "unknown-charset" in parsed.defects
