"""spamd/mail/_words.c finds the words tokenize's patterns find, and shapes a value as they do: its pure-Python twin.

CI builds it (.ci/run) and fails here if it does not run; a checkout that runs as source
(spamd.runtime.compiled) skips, saying so. tests/test_analysis_digest.py compares the
two on every message of the corpora.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.mail import tokenize
from spamd.runtime import compiled

NOT_BUILT = None if tokenize.words_in is not None else f"the words are found by the patterns: {compiled.REASON}"
pytestmark = pytest.mark.real_program(NOT_BUILT)

# Text dense in what the patterns turn on: word characters of each kind, separators (ASCII and
# the typographic apostrophe), currency signs, the endings, runs of them, and the underscore.
_EDGES = st.lists(
    st.tuples(
        st.sampled_from(["ab", "x9", "Zé", "é", "9", "q", "ёж", "Ab", "_", "²", "½", "µ", "世界", "٣٤", "ǅx"]),
        st.sampled_from(["", " ", "\n", "'", "’", "-", "--", ".", ",", ".,", "$", "€", "£", "%", "!", "%!", "_", "$$"]),
    ),
    max_size=60,
).map(lambda pairs: "".join(fragment + separator for fragment, separator in pairs))
# Any code point, lone surrogates included (text decoded with surrogateescape can hold them).
_ANY = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=()), max_size=300)


def _both(text: str, ascii: bool, max_chars: int = 1000) -> tuple[list[str], list[str]]:
    assert tokenize.words_in is not None
    matched = [word for word in tokenize._found_words(text, ascii) if len(word) <= max_chars]
    return tokenize.words_in(text, ascii, max_chars), matched


@settings(max_examples=600, deadline=None)
@given(_EDGES | _ANY)
def test_the_scanner_finds_what_the_patterns_find(text):
    for sample in (text, text.lower()):
        scanned, matched = _both(sample, sample.isascii())
        assert scanned == matched
        assert _both(sample, sample.isascii(), 3)[0] == _both(sample, sample.isascii(), 3)[1]


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("aZz09_'-.,$%! \t£é"), max_size=80))
def test_ascii_mode_takes_only_lower_case_letters_and_digits_as_the_ascii_patterns_do(text):
    ascii_only = text.encode("ascii", "ignore").decode("ascii")
    scanned, matched = _both(ascii_only, True)
    assert scanned == matched


def words(text: str, ascii: bool) -> list[str]:
    assert tokenize.words_in is not None
    return tokenize.words_in(text, ascii, tokenize.MAX_WORD)


def test_words_at_the_edges_of_the_text():
    assert words("", True) == []
    assert words("a", True) == []
    assert words("ab", True) == ["ab"]
    assert words("$ab!", True) == ["$ab!"]
    assert words("ab-", True) == ["ab"]
    assert words("a" * 30 + " " + "b" * 31 + " cd", True) == ["a" * 30, "cd"]  # longer than MAX_WORD: left out
    assert words("don't e-mail 1,000 $5 $55 50%", True) == ["don't", "mail", "000", "$55", "50%"]
    assert words("l’été €12 £3,50 £35,50", False) == ["été", "€12", "50", "£35,50"]


def test_anything_but_text_a_flag_and_a_length_is_refused():
    assert tokenize.words_in is not None
    with pytest.raises(TypeError):
        tokenize.words_in(b"bytes", True, 30)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tokenize.words_in("text", True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        tokenize.words_in("text", True, "30")  # type: ignore[arg-type]


# Header-like ASCII: hex, digit and letter runs of every length around six, word characters that
# are not hex (g, _), the separators a shape keeps, and long values (past SHAPE_HEAD and 40 masked).
_SHAPE_TEXT = st.lists(
    st.sampled_from(
        ["3fa9b2c1", "abcdef", "ABCDE", "abcde", "a1b2c3d", "20070412", "mx7", "g", "_", "example", "9",
         " ", ".", "@", "<", ">", "-", "a", "aa", "99", "0x1f", "deadbeef_", "12345"]
    ),
    max_size=150,
).map("".join) | st.text(st.characters(max_codepoint=127), max_size=400)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(_SHAPE_TEXT)
def test_an_ascii_value_is_shaped_as_the_patterns_shape_it(value):
    assert tokenize.ascii_shape is not None
    assert tokenize.ascii_shape(value) == tokenize.whole_shape(value)


def test_shapes_of_header_values():
    assert tokenize.ascii_shape is not None
    assert tokenize.ascii_shape("<3fa9b2c1.2007-04-12@mx7.example.com>") == "<a.9-9-9@a9.a.a>"
    assert tokenize.ascii_shape("") == ""
    assert tokenize.ascii_shape("abcdef abcdeg ABCDE1 ABCDEG1 a_cdef 12345") == "a a a a9 a_a 9"
    assert len(tokenize.ascii_shape("a. " * 100)) == 40
    with pytest.raises(TypeError):
        tokenize.ascii_shape("é")
    with pytest.raises(TypeError):
        tokenize.ascii_shape(b"abc")  # type: ignore[arg-type]


# Text dense in what the URL, relay-host and non-ASCII patterns turn on: their prefixes, host and
# path characters, the characters that end each, whitespace beyond ASCII, and runs beyond ASCII.
_LINKISH = st.lists(
    st.sampled_from(
        ["http://", "https://", "http:/", "https:", "www.", "ww.", "h", "w", "example", "co", "-", "--", ".", "..",
         "/", "//", "?", "#", ":", "a=1&b", "<", ">", '"', "'", "(", ")", "[", "]", "{", "}", " ", "\n", "\t",
         "\u00a0", "\u2003", "\u3000", "10.0.0.1", "mx-1", "é", "éé", "ééé", "世界世界", "\U0001f600", "_", "@"]
    ),
    max_size=60,
).map("".join)  # fmt: skip


@settings(max_examples=800, deadline=None)
@given(_LINKISH | _ANY)
def test_urls_relay_hosts_and_runs_beyond_ascii_are_found_as_the_patterns_find_them(text):
    assert tokenize.urls_in is not None and tokenize.hosts_in is not None and tokenize.non_ascii_runs is not None
    for sample in (text, text.lower()):
        assert tokenize.urls_in(sample) == tokenize._URL_RE.findall(sample)
        assert tokenize.hosts_in(sample) == tokenize._HOSTISH_RE.findall(" " + sample)
        assert tokenize.non_ascii_runs(sample) == [len(run) for run in tokenize._NON_ASCII_RUN_RE.findall(sample)]


def test_urls_relay_hosts_and_runs_beyond_ascii_at_their_edges():
    assert tokenize.urls_in is not None and tokenize.hosts_in is not None and tokenize.non_ascii_runs is not None
    assert tokenize.urls_in("see http://a.example/x?y=1 and www.b.example, https://c/ http:// www.") == [
        ("a.example", "/x?y=1"), ("b.example,", ""), ("c", "/"),
    ]  # fmt: skip
    assert tokenize.urls_in("http://(www.x.com") == [("x.com", "")]
    assert tokenize.hosts_in("from mx-1.example.com ([10.0.0.1]) by -a.b. c..d -") == [
        "mx-1.example.com", "10.0.0.1", "a.b",
    ]  # fmt: skip
    assert tokenize.hosts_in("a.b") == ["a.b"] and tokenize.hosts_in("") == []
    assert tokenize.non_ascii_runs("ab ééé é éééé 世界世界世界") == [3, 4, 6]
    assert tokenize.non_ascii_runs("plain") == []
    for scan in (tokenize.urls_in, tokenize.hosts_in, tokenize.non_ascii_runs):
        with pytest.raises(TypeError):
            scan(b"bytes")  # type: ignore[arg-type]
