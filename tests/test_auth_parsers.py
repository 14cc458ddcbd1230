"""Any bytes in DKIM-Signature, ARC-*, Authentication-Results and DMARC records give a result or a clear error.

No DNS is asked: the resolver's budget is spent before the first look-up, so every
key is a temporary error and the parsers are what runs.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import AuthConfig, ParserConfig
from spamd.mail.auth.authres import parse_authentication_results, trusted_results
from spamd.mail.auth.dkim import verify_signatures
from spamd.mail.auth.dmarc import parse_dmarc_record
from spamd.mail.auth.dns import Budget, CachingResolver
from spamd.mail.auth.records import RecordError, parse_tag_list
from spamd.mail.auth.verify import Authenticator
from spamd.mail.message import parse_message
from spamd.people.senders import from_address

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
    assert len(results) == 1 and results[0].result in ("fail", "permerror", "temperror", "policy")


@settings(max_examples=200)
@given(
    st.sampled_from([b"ARC-Seal", b"ARC-Message-Signature", b"ARC-Authentication-Results", b"DKIM-Signature"]),
    st.one_of(st.binary(max_size=300), TAGGY.map(str.encode)),
)
def test_any_arc_or_dkim_header_through_the_whole_verification_never_raises(name: bytes, value: bytes) -> None:
    config = AuthConfig(nameservers=NOWHERE, dns_budget_s=1e-9, trusted_arc_sealers=("lists.example",))
    auth = Authenticator(config, CachingResolver(NOWHERE))
    raw = message_with(name, value)
    parsed = parse_message(raw, ParserConfig())
    result = auth.verify(raw, parsed.headers, from_address(parsed.header("from")))
    assert result.from_authenticated() == "" and result.arc_sealer == ""
    assert isinstance(result.header(), str)
