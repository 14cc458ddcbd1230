"""Any bytes in DKIM-Signature, ARC-*, Authentication-Results, SPF and DMARC records give a result or a clear error.

No DNS is asked but for SPF records: the resolver's budget is spent before the first
look-up, so every key is a temporary error and the parsers are what runs. An SPF record
is evaluated as it is published, by our DNS server on loopback (tests/dns_helpers.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import AuthConfig, ParserConfig
from spamd.mail.auth.authres import parse_authentication_results, trusted_results
from spamd.mail.auth.dkim import (
    MAX_SIGNATURES,
    SignatureResult,
    length_limited_beyond,
    signature_headers,
    verify_signatures,
)
from spamd.mail.auth.dmarc import DmarcResult, evaluate, parse_dmarc_record
from spamd.mail.auth.dns import Budget, CachingResolver
from spamd.mail.auth.records import RecordError, parse_tag_list
from spamd.mail.auth.spf import SmtpSession, check_spf
from spamd.mail.auth.verify import Authenticator, AuthResult, report_token, reported_results, sealed_dkim_passes
from spamd.mail.message import parse_message
from spamd.people.senders import from_address
from tests.auth_helpers import SigningKey, SigningKeys
from tests.dns_helpers import ZoneServer

NOWHERE = ("127.0.0.1:9",)  # never asked: the budgets below are spent
TAGGY = st.text(alphabet=st.sampled_from('abdhilpsvx=;: \t\r\n/.-_0123456789AZ+"()@\x00é'), max_size=300)
ANY_TEXT = st.one_of(st.text(max_size=400), TAGGY)


@given(st.one_of(ANY_TEXT, st.binary(max_size=400)))
def test_any_tag_list_parses_or_is_a_record_error(text: str | bytes) -> None:
    try:
        tags = parse_tag_list(text)
    except RecordError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())


@given(ANY_TEXT)
def test_any_dmarc_record_parses_or_is_a_record_error(text: str) -> None:
    try:
        policy = parse_dmarc_record(text)
    except RecordError:
        return
    assert policy.policy in ("none", "quarantine", "reject")


@given(st.one_of(ANY_TEXT, st.builds(lambda a, b: f"mx.example; {a}={b}", TAGGY, TAGGY)))
def test_any_authentication_results_parse_or_are_a_record_error(text: str) -> None:
    try:
        parsed = parse_authentication_results(text)
    except RecordError:
        return
    assert parsed.authserv_id and all(r.method and r.result for r in parsed.results)


@given(
    st.one_of(
        st.binary(max_size=400),
        TAGGY.map(str.encode),
        st.builds(lambda a, b: f"i=1; mx.example; dkim=pass header.d={a}; {b}".encode(), TAGGY, TAGGY),
    )
)
def test_any_arc_authentication_results_give_domains_or_none(value: bytes) -> None:
    passes = sealed_dkim_passes(value)
    assert isinstance(passes, tuple) and all(isinstance(d, str) and d for d in passes)


def test_the_dkim_passes_a_sealer_recorded_are_read() -> None:
    value = b"i=2; mx.fwd.example;\r\n dkim=pass header.d=Lists.Example; dkim=fail header.d=x.example; dkim=pass header.i=@y.example"
    assert sealed_dkim_passes(value) == ("lists.example", "y.example")
    assert sealed_dkim_passes(b"mx.fwd.example; dkim=pass header.d=lists.example") == ()  # no instance


@given(st.lists(st.tuples(st.sampled_from(["received", "authentication-results", "from"]), ANY_TEXT), max_size=8))
def test_trusted_results_never_raise(headers: list[tuple[str, str]]) -> None:
    for found in trusted_results(headers, ["mx.example"], 2):
        assert found.authserv_id == "mx.example"


def message_with(name: bytes, value: bytes, body: bytes = b"body\r\n") -> bytes:
    return b"From: a@shop.example\r\n" + name + b": " + value + b"\r\nSubject: x\r\n\r\n" + body


@settings(max_examples=200)
@given(st.one_of(st.binary(max_size=300), TAGGY.map(str.encode)), st.binary(max_size=200))
def test_any_dkim_signature_gives_a_result_per_signature(value: bytes, body: bytes) -> None:
    raw = message_with(b"DKIM-Signature", value, body)
    results = verify_signatures(raw, CachingResolver(NOWHERE), Budget(0.0))
    # A value with a line break can start another DKIM-Signature field ("\ndkim-signature:"): one each.
    assert len(results) == min(signature_headers(raw), MAX_SIGNATURES) >= 1
    assert all(r.result in ("fail", "permerror", "temperror", "policy") for r in results)


@settings(max_examples=200)
@given(st.one_of(st.binary(max_size=300), TAGGY.map(str.encode)), st.binary(max_size=200))
def test_any_dkim_signature_gives_its_length_limit_or_nothing(value: bytes, body: bytes) -> None:
    """What the trusted path reads of a message's own signatures (their l=) never raises, whatever they hold."""
    found = length_limited_beyond(message_with(b"DKIM-Signature", b"l=1; " + value, body))
    assert all(isinstance(d, str) and isinstance(s, str) and isinstance(b, bytes) for d, s, b in found)


@settings(max_examples=200)
@given(
    st.sampled_from([b"ARC-Seal", b"ARC-Message-Signature", b"ARC-Authentication-Results", b"DKIM-Signature"]),
    st.one_of(
        st.binary(max_size=300),
        TAGGY.map(str.encode),
        # A seal naming the trusted sealer, so that the chain is checked whatever else it holds.
        TAGGY.map(lambda text: f"i=1; a=rsa-sha256; d=lists.example; s=sel1; {text}".encode()),
    ),
)
def test_any_arc_or_dkim_header_through_the_whole_verification_never_raises(name: bytes, value: bytes) -> None:
    config = AuthConfig(nameservers=NOWHERE, dns_budget_s=1e-9, trusted_arc_sealers=("lists.example",))
    auth = Authenticator(config, CachingResolver(NOWHERE))
    raw = message_with(name, value)
    parsed = parse_message(raw, ParserConfig())
    result = auth.verify(raw, parsed.headers, from_address(parsed.header("from")))
    assert result.from_authenticated() == "" and result.arc_sealer == ""
    assert isinstance(result.header(), str)


# Results and domains as a message, an SMTP client or an MTA's header may put them: words of
# Authentication-Results' own syntax, line breaks, any character.
CLAIMED = st.one_of(st.text(max_size=60), st.sampled_from(["pass", "x; dkim=pass header.d=bank.example", "a\r\n b"]))


@given(
    st.lists(st.tuples(CLAIMED, CLAIMED), max_size=4),
    st.none() | st.tuples(CLAIMED, CLAIMED),
    st.none() | st.tuples(CLAIMED, CLAIMED, CLAIMED),
    st.tuples(CLAIMED, CLAIMED),
    st.sampled_from(["spamd", "authserv-id "]),
    CLAIMED,
)
def test_the_report_is_one_line_whose_results_are_the_verified_ones_whatever_the_claims(
    dkim: list[tuple[str, str]],
    spf: tuple[str, str] | None,
    dmarc: tuple[str, str, str] | None,
    arc: tuple[str, str],
    source: str,
    authserv_id: str,
) -> None:
    """X-Spam-Auth carries each result spamd holds, in order, and nothing a claimed value writes."""
    result = AuthResult(
        "shop.example",
        tuple(SignatureResult(domain, "s", verdict) for domain, verdict in dkim),
        spf,
        DmarcResult(*dmarc) if dmarc is not None else None,
        arc[0] or "fail",  # "none" is no ARC result at all
        arc[1],
        source + authserv_id if source != "spamd" else source,
    )
    report = result.header()
    assert report.isascii() and report.isprintable(), report
    expected = [("dkim", report_token(v)) for _, v in dkim]
    expected += [("spf", report_token(spf[1]))] if spf is not None else []
    expected += [("dmarc", report_token(dmarc[1]))] if dmarc is not None else []
    expected += [("arc", report_token(result.arc))] if result.arc != "none" else []
    if not expected:
        assert report == "" and reported_results(report) == ("none", [])
        return
    assert reported_results(report) == (source.strip(), expected), report


SPF_RESULTS = ("pass", "fail", "softfail", "neutral", "none", "temperror", "permerror")
# Records made of SPF's own words as often as of anything printable.
SPF_WORDS = st.sampled_from(
    ["v=spf1", "-all", "~all", "?all", "+all", "a", "mx", "ptr", "ip4:", "ip6:", "include:", "exists:", "redirect=",
     "exp=", "/24", "//64", "%{d}", "%{i}", "%{s}", "%{l}", "%{o}", "%{h}", "%{x}", "%%", "%_", "%-", "%",
     "fuzz.example", "192.0.2.1", "2001:db8::1", "0/0", ":", "/", ".", "..", " ", "\t", "=", '"', "\\",
     "a:foo..example", "a:é.example", "exists:%{h}%{h}%{h}%{h}%{h}%{h}%{h}%{h}%{h}%{h}", "x" * 64, "-"]
)  # fmt: skip
SPF_RECORD = st.one_of(
    st.lists(SPF_WORDS, max_size=14).map(lambda words: "v=spf1 " + " ".join(words)),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=200).map(lambda s: "v=spf1 " + s),
)


@pytest.fixture(scope="module")
def spf_fuzz_zone() -> Iterator[ZoneServer]:
    zone = ZoneServer()
    zone.start()
    zone.record("fuzz.example", "A", "192.0.2.1")
    zone.record("fuzz.example", "MX", "10 fuzz.example.")
    yield zone
    zone.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPF_RECORD, st.sampled_from(["192.0.2.1", "198.51.100.7", "2001:db8::1"]))
def test_any_spf_record_gives_a_result(spf_fuzz_zone: ZoneServer, record: str, client: str) -> None:
    spf_fuzz_zone.clear("fuzz.example")
    spf_fuzz_zone.txt("fuzz.example", record)
    session = SmtpSession(client, "someone@fuzz.example", "helo.fuzz.example")
    domain, result = check_spf(session, CachingResolver((spf_fuzz_zone.address,)), Budget(10.0))
    assert domain == "fuzz.example" and result in SPF_RESULTS
    assert result != "temperror", record  # the server answered everything: nothing was temporary


@settings(max_examples=300)
@given(ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_any_smtp_session_gives_a_result(client: str, mail_from: str, helo: str) -> None:
    """Whatever the client's address and what it said: a result, never an exception (no DNS: the budget is spent)."""
    _, result = check_spf(SmtpSession(client, mail_from, helo), CachingResolver(NOWHERE), Budget(0.0))
    assert result in SPF_RESULTS


KEY_WORDS = st.sampled_from(
    ["v=DKIM1", "k=rsa", "k=ed25519", "p=", "p=MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQ", "h=sha256", "t=y", "t=s",
     "s=email", "s=*", "n=", ";", " ", "=", "==", "\\", '"', "é"]
)  # fmt: skip
KEY_RECORD = st.one_of(
    st.lists(KEY_WORDS, max_size=10).map("".join),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=200),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(KEY_RECORD)
def test_any_published_dkim_key_gives_a_result(spf_fuzz_zone: ZoneServer, test_keys: SigningKeys, record: str) -> None:
    spf_fuzz_zone.clear("fz._domainkey.fuzz.example")
    spf_fuzz_zone.txt("fz._domainkey.fuzz.example", record)
    signer = SigningKey("fuzz.example", "fz", test_keys.shop.private, test_keys.shop.algorithm, record)
    raw = signer.sign(message_with(b"X-Fuzz", b"1").replace(b"a@shop.example", b"a@fuzz.example"))
    [result] = verify_signatures(raw, CachingResolver((spf_fuzz_zone.address,)), Budget(10.0))
    assert result.result in ("fail", "permerror"), record  # only the shop's own key record would pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(ANY_TEXT.map(lambda s: "v=DMARC1; " + s), TAGGY))
def test_any_published_dmarc_record_gives_a_result(spf_fuzz_zone: ZoneServer, record: str) -> None:
    spf_fuzz_zone.clear("_dmarc.fuzz.example")
    spf_fuzz_zone.txt("_dmarc.fuzz.example", record)
    result = evaluate("fuzz.example", ["fuzz.example"], None, CachingResolver((spf_fuzz_zone.address,)), Budget(10.0))
    assert result.result in ("pass", "none", "permerror"), record  # never a temperror: the server answered
