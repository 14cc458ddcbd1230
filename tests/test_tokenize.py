"""Tokenizer: each token family on hand-written mail, bounds on hostile input, totality under hypothesis."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import ParserConfig
from spamd.mail.message import parse_message
from spamd.mail.tokenize import MAX_HOST_LABELS, MAX_WORD, tokenize, words
from spamd.model.bayes import featurize

LIMITS = ParserConfig()


def tokens_of(raw: bytes) -> list[str]:
    return tokenize(parse_message(raw, LIMITS))


MAIL = b"""From: "Cheap Meds" <offers@pharma.example.net>
To: alice@work.example
Reply-To: sales@other.example
Subject: Save 80% on Meds today
Message-ID: <abc123@mailer.pharma.example.net>
Received: from relay.pharma.example.net (relay.pharma.example.net [192.0.2.7]) by mx.work.example
X-Mailer: BulkMail Pro 5.0
Content-Type: multipart/mixed; boundary="b1"

--b1
Content-Type: text/html; charset=utf-8

<html><head><style>p {color: red}</style></head><body>
<p>Don't miss it: $99 only! Visit <a href="http://shop.deals.example.com/buy/now?id=7">here</a>
or www.pills.example.org today. Caf\xc3\xa9 \xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82</p>
<script>var hidden = "scriptword";</script></body></html>
--b1
Content-Type: application/pdf; name="invoice.pdf"
Content-Transfer-Encoding: base64

JVBERi0xLjQK
--b1--
"""


def test_each_token_family_appears():
    tokens = set(tokens_of(MAIL))
    expected = {
        "subject:save",
        "subject:80%",
        "subject:save 80%",  # subject words and pairs
        "from:cheap",
        "from@pharma.example.net",
        "to@work.example",
        "reply-to@other.example",
        "received:relay.pharma.example.net",
        "received:192.0.2.7",
        "message-id@mailer.pharma.example.net",
        "x-mailer:bulkmail",
        "content-type:multipart",
        "header:x-mailer",
        "don't",
        "$99",
        "only!",  # body words keep inner ' and attached $ !
        "url:shop.deals.example.com",
        "url:deals.example.com",
        "url:example.com",  # attribute URL hosts
        "urlpath:buy",
        "urlpath:now",
        "url:pills.example.org",  # a bare www. host in the text
        "part:text/html",
        "part:application/pdf",
        "filename-ext:pdf",
        "nonascii:1",  # the Cyrillic run
    }
    assert expected <= tokens, expected - tokens
    assert "scriptword" not in tokens and "color" not in tokens  # invisible HTML is not text


def test_own_verdict_headers_do_not_become_tokens():
    from spamd.mail.message import strip_own_headers

    scored = b"X-Spam-Status: Yes, score=0.99\nX-Spam-Flag: YES\n" + MAIL
    assert tokens_of(strip_own_headers(scored)) == tokens_of(MAIL)


def test_words_longer_than_the_cap_are_dropped():
    tokens = tokens_of(b"Subject: s\n\nshort " + b"x" * (MAX_WORD + 1) + b" " + b"y" * MAX_WORD)
    assert "short" in tokens and "y" * MAX_WORD in tokens
    assert all(len(t) <= MAX_WORD + len("subject:") for t in tokens)


def test_hostile_host_is_bounded():
    # 30,000 labels in one "host" was quadratic (6.8 s) before the label cap.
    raw = b"Subject: x\n\nhttp://" + b"www." * 30_000 + b"com/ tail"
    started = time.perf_counter()
    tokens = tokens_of(raw)
    assert time.perf_counter() - started < 1.0
    assert sum(t.startswith("url:") for t in tokens) <= MAX_HOST_LABELS


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=3000), st.text(max_size=200))
def test_tokenize_is_total_and_bounded(body, subject):
    raw = f"Subject: {subject}\nContent-Type: text/html\n\n{body}".encode("utf-8", "surrogatepass")
    tokens = tokens_of(raw)
    assert all(isinstance(t, str) and t for t in tokens)
    assert len(tokens) <= 12 * (len(raw) + 50)
    featurize(tokens, 12)  # every token hashes (no encoding errors)


def test_unsegmented_cjk_text_becomes_character_pairs():
    # A Chinese sentence is one run with no spaces: dropped whole as a word over
    # MAX_WORD before; now its overlapping pairs, beside the other words.
    assert words("Hello 世界你好吗 foo 中 bar") == ["hello", "foo", "bar", "世界", "你好"]
    sentence = "我们公司提供最优惠的价格和最好的服务请联系我们获取更多信息" * 2
    assert "".join(words(sentence)) == sentence and len(words(sentence)) == len(sentence) // 2


# The word patterns as they were before they were made possessive: the possessive
# ones must find exactly the same words.
_BACKTRACKING_WORD_PATTERNS = {
    "_WORD_RE": r"[$€£]?[^\W_][^\W_]+(?:['’\-.,][^\W_]+)*[%!]?",
    "_PLAIN_WORD_RE": r"[^\W_][^\W_]+(?:['’\-.,][^\W_]+)*[%!]?",
    "_ASCII_WORD_RE": r"\$?[a-z0-9][a-z0-9]+(?:['\-.,][a-z0-9]+)*[%!]?",
    "_ASCII_PLAIN_WORD_RE": r"[a-z0-9][a-z0-9]+(?:['\-.,][a-z0-9]+)*[%!]?",
}
# Text dense in what the patterns turn on: separators, signs, runs of them, letters of other scripts.
_WORD_EDGE_TEXT = st.lists(
    st.tuples(
        st.sampled_from(["ab", "x9", "Zé", "é", "9", "q", "ёж", "Ab", "_"]),
        st.sampled_from(["", " ", "\n", "'", "’", "-", "--", ".", ",", ".,", "$", "€", "£", "%", "!", "%!", "_"]),
    ),
    max_size=60,
).map(lambda pairs: "".join(fragment + separator for fragment, separator in pairs)) | st.text(max_size=300)


@settings(max_examples=400, deadline=None)
@given(_WORD_EDGE_TEXT)
def test_possessive_word_patterns_find_what_backtracking_ones_did(text):
    import re

    import spamd.mail.tokenize as tokenize_module

    for name, backtracking in _BACKTRACKING_WORD_PATTERNS.items():
        for sample in (text, text.lower()):
            assert getattr(tokenize_module, name).findall(sample) == re.findall(backtracking, sample), name


# Header-like values: runs of hex, digits and letters between the separators a shape keeps.
_SHAPE_TEXT = st.lists(
    st.sampled_from(
        ["3fa9b2c1", "20070412", "mx7", "example", "ab", "9", "_", " ", "  ", ".", "@", "<", ">", "é", "-"]
    ),
    max_size=120,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_SHAPE_TEXT)
def test_shape_from_the_head_of_a_long_value_is_the_whole_values(value):
    from spamd.mail.tokenize import shape, whole_shape

    assert shape(value) == whole_shape(value)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(["ab", "é", "ß", "x9", "µ", "ª", "²", "½", "×", "÷", "_", "'", "-", ".,", "$", "£", "%!", " "]),
        max_size=60,
    ).map("".join)
)
def test_latin1_word_patterns_find_what_unicode_ones_do(text):
    import spamd.mail.tokenize as tokenize_module

    for latin1, unicode in (("_LATIN1_WORD_RE", "_WORD_RE"), ("_LATIN1_PLAIN_WORD_RE", "_PLAIN_WORD_RE")):
        for sample in (text, text.lower()):
            found = getattr(tokenize_module, latin1).findall(sample)
            assert found == getattr(tokenize_module, unicode).findall(sample), latin1
