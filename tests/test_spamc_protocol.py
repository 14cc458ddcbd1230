"""The spamc protocol's request parser and SpamAssassin's score scale, under hypothesis: any bytes
give a request or an EX_ code, and points keep the order of the probabilities they show."""

from __future__ import annotations

import re
import zlib
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.frontends.spamc.answers import sa_score, shown_score, symbol_name
from spamd.frontends.spamc.protocol import Ex, Request, RequestParser, SpamcRequestError
from spamd.model.bayes import Score, Verdict
from tests.spamc_helpers import request

_ANSWER_LINE = re.compile(rb"SPAMD/1\.0 (6[4-9]|7[0-9]) [ -~]+\r\n")
_HEADER_LINES = st.sampled_from([
    b"Content-length: 5", b"Content-length: 0", b"Content-length: 99999999999", b"Content-length: x",
    b"User: alice", b"User: \x01", b"Compress: zlib", b"Compress: lzma", b"Message-class: spam",
    b"Message-class: nope", b"Set: local", b"Remove: local, remote", b"X-Other: 1", b"no colon", b"",
])  # fmt: skip
_NEAR_VALID = st.builds(
    lambda verb, version, headers, body: (
        b"%s SPAMC/%s\r\n%s\r\n%s" % (verb, version, b"".join(h + b"\r\n" for h in headers), body)
    ),
    st.sampled_from(
        [b"CHECK", b"PROCESS", b"HEADERS", b"SYMBOLS", b"REPORT", b"REPORT_IFSPAM", b"TELL", b"PING", b"SKIP", b"NOPE"]
    ),
    st.sampled_from([b"1.0", b"1.2", b"1.3", b"1.5", b"9.99", b"1", b"x"]),
    st.lists(_HEADER_LINES, max_size=6),
    st.binary(max_size=64) | st.just(zlib.compress(b"hello")),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=3000) | _NEAR_VALID, cuts=st.lists(st.integers(0, 3000), max_size=6), eof=st.booleans())
def test_the_parser_answers_any_bytes_with_a_request_or_an_ex_code(data, cuts, eof):
    parser = RequestParser(max_message_bytes=1024)
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    got: Request | None = None
    try:
        for start, end in pairwise(bounds):
            got = parser.feed(data[start:end]) or got
        if got is None and eof:
            got = parser.eof()
    except SpamcRequestError as e:
        assert e.code in Ex and e.code is not Ex.EX_OK
        assert _ANSWER_LINE.fullmatch(e.reply()), e.reply()
        return
    if got is not None:
        assert got.verb in ("CHECK", "PROCESS", "HEADERS", "SYMBOLS", "REPORT", "REPORT_IFSPAM", "TELL", "PING", "SKIP")
        assert len(got.body) <= 1024
    else:
        assert not eof  # at the end of the stream there is always an answer


@given(body=st.binary(max_size=2000), verb=st.sampled_from(["CHECK", "PROCESS", "TELL", "SYMBOLS"]), user=st.text("abc-_1", max_size=8),
       compress=st.booleans())  # fmt: skip
def test_a_request_as_spamc_frames_it_parses_back(body, verb, user, compress):
    sent = zlib.compress(body) if compress else body
    headers = {"User": user} if user else {}
    if compress:
        headers["Compress"] = "zlib"
    parsed = RequestParser(4096).feed(request(verb, sent, headers=headers))
    assert parsed is not None
    assert (parsed.verb, parsed.version, parsed.body, parsed.user, parsed.compress) == (verb, 1.5, body, user, compress)


def _verdict(p: float, ham: float, spam: float) -> Verdict:
    # As the model decides (spamd.model.bayes.MultinomialNB._verdict).
    return Verdict.SPAM if p >= spam else Verdict.HAM if p < ham else Verdict.UNSURE


def test_the_score_scale_puts_spamds_thresholds_where_spamassassin_users_expect_them():
    assert [sa_score(p, 0.25, 0.75) for p in (0.0, 0.25, 0.5, 0.75, 1.0)] == [-5.0, 0.0, 2.5, 5.0, 15.0]
    assert sa_score(0.75, 0.25, 0.75, required=6.5) == 6.5
    just_below = float.fromhex("0x1.7ffffffffffffp-1")  # the float right under 0.75
    assert sa_score(just_below, 0.25, 0.75) < 5.0
    assert shown_score(Score(0.0, just_below, Verdict.UNSURE), 0.25, 0.75, 5.0) == ("4.9", "5.0")
    assert shown_score(Score(0.0, 0.75, Verdict.SPAM), 0.25, 0.75, 5.0) == ("5.0", "5.0")
    assert shown_score(Score(0.0, 0.0, Verdict.HAM), 0.25, 0.75, 5.0) == ("-5.0", "5.0")


thresholds = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted)
probabilities = st.floats(0, 1) | st.sampled_from([0.0, 0.25, 0.75, 1.0, float.fromhex("0x1.7ffffffffffffp-1")])


@given(p=probabilities, q=probabilities, limits=thresholds, required=st.floats(-100, 100) | st.just(5.0))
def test_points_agree_with_the_verdict_and_keep_the_order_of_probabilities(p, q, limits, required):
    ham, spam = limits
    lo, hi = sorted((p, q))
    assert sa_score(lo, ham, spam, required) <= sa_score(hi, ham, spam, required)
    shown = []
    for x in (lo, hi):
        verdict = _verdict(x, ham, spam)
        points, threshold = shown_score(Score(0.0, x, verdict), ham, spam, required)
        # What spamc, Exim and aiospamc do with the two numbers: spam iff points >= threshold.
        assert (float(points) >= float(threshold)) == (verdict is Verdict.SPAM), (x, ham, spam, required, points)
        shown.append(float(points))
    assert shown[0] <= shown[1]


def test_symbol_names_are_safe_ascii():
    assert symbol_name("SPAMMY", "subject:free money") == "SPAMMY_SUBJECT_FREE_MONEY"
    assert re.fullmatch(r"HAMMY_[0-9A-F]{6}", symbol_name("HAMMY", "日本語"))
    assert symbol_name("HAMMY", "caf\u00e9") != symbol_name("HAMMY", "caf\u00e8")
    assert re.fullmatch(r"[A-Z0-9_]+", symbol_name("SPAMMY", "\udcff\x00<>" * 40))
