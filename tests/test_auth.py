"""Sender authentication against our own DNS server on loopback: DKIM, DMARC, trusted Authentication-Results, the budget."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import sys
from pathlib import Path

import dkim
import pytest
from cryptography.hazmat.primitives import serialization

from spamd.config import AuthConfig, Config, ParserConfig
from spamd.engine.engine import Engine
from spamd.learning.classifier import Classifier
from spamd.mail.auth.authres import parse_authentication_results
from spamd.mail.auth.dns import SERVER_DOWN_AFTER, SERVER_PROBE_S, Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.records import RecordError
from spamd.mail.auth.verify import MAX_ARC_BYTES, Authenticator, AuthResult
from spamd.mail.message import parse_message
from spamd.model.bayes import Label, Verdict
from spamd.people.senders import from_address, sender_names
from tests.auth_helpers import SigningKey, SigningKeys, authenticator, mail
from tests.cli_helpers import run_spamctl
from tests.dns_helpers import ZoneServer


def verify(auth: Authenticator, raw: bytes) -> AuthResult:
    parsed = parse_message(raw, ParserConfig())
    return auth.verify(raw, parsed.headers, from_address(parsed.header("from")))


def dkim_results(result: AuthResult) -> list[tuple[str, str]]:
    return [(s.domain, s.result) for s in result.dkim]


# ---------------------------------------------------------------- DKIM


def test_a_signed_message_passes_and_authenticates_its_from_domain(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    result = verify(authenticator(auth_zone), test_keys.shop.sign(mail()))
    assert dkim_results(result) == [("shop.example", "pass")]
    assert result.dmarc is not None and (result.dmarc.result, result.dmarc.policy) == (
        "pass",
        "reject",
    )
    assert result.from_authenticated() == "dmarc"


def test_ed25519_signature_passes(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    result = verify(authenticator(auth_zone), test_keys.shop_ed25519.sign(mail()))
    assert dkim_results(result) == [("shop.example", "pass")]
    assert result.from_authenticated() == "dmarc"


def test_a_changed_body_fails(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    signed = test_keys.shop.sign(mail())
    result = verify(
        authenticator(auth_zone),
        signed.replace(b"on its way", b"held at customs, pay here"),
    )
    assert dkim_results(result) == [("shop.example", "fail")]
    assert result.dmarc is not None and result.dmarc.result == "fail"
    assert result.from_authenticated() == ""
    assert result.dmarc_rejects()


def test_a_changed_signed_header_fails(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    signed = test_keys.shop.sign(mail())
    result = verify(
        authenticator(auth_zone),
        signed.replace(b"Subject: Your order", b"Subject: URGENT your order"),
    )
    assert dkim_results(result) == [("shop.example", "fail")]
    assert result.from_authenticated() == ""


def test_a_length_limited_signature_does_not_vouch_for_appended_content(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    signed = test_keys.shop.sign(mail(), length=True)
    auth = authenticator(auth_zone)
    assert dkim_results(verify(auth, signed)) == [("shop.example", "pass")]
    appended = verify(auth, signed + b"\r\nClick http://phish.example/login to keep your account.\r\n")
    assert dkim_results(appended) == [("shop.example", "policy")]
    assert appended.from_authenticated() == ""


def test_a_wrong_key_fails(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    result = verify(authenticator(auth_zone), test_keys.unpublished.sign(mail()))
    assert dkim_results(result) == [("shop.example", "fail")]
    assert result.from_authenticated() == ""


def _der(tag: int, content: bytes) -> bytes:
    length = len(content)
    size = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([tag]) + (bytes([length]) if length < 128 else bytes([0x80 | len(size)]) + size) + content


def _der_integer(n: int) -> bytes:
    return _der(0x02, n.to_bytes(n.bit_length() // 8 + 1, "big"))


def huge_exponent_record(key: SigningKey) -> str:
    """`key`'s modulus published with a 100,000-bit public exponent: a 17 KB record, fetched over TCP."""
    private = serialization.load_pem_private_key(key.private, None)
    modulus = private.public_key().public_numbers().n  # type: ignore[union-attr]
    rsa_encryption = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010101")) + _der(0x05, b""))
    public = _der(0x30, _der_integer(modulus) + _der_integer((1 << 100_000) | 1))
    return "v=DKIM1; k=rsa; p=" + base64.b64encode(_der(0x30, rsa_encryption + _der(0x03, b"\0" + public))).decode()


def test_a_key_with_a_huge_public_exponent_is_refused_before_any_arithmetic(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """OpenSSL refuses such a key, and dkimpy raised the signature to it in Python, seconds of CPU a
    signature; spamd refuses the key, a permerror, as for any key it cannot use (dkimpy: fail)."""
    record = huge_exponent_record(test_keys.shop)
    auth_zone.txt("huge._domainkey.shop.example", record)
    huge = dataclasses.replace(test_keys.shop, selector="huge", dns_value=record)
    result = verify(authenticator(auth_zone), huge.sign(mail()))
    assert dkim_results(result) == [("shop.example", "permerror")]


def test_a_revoked_key_fails(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    result = verify(authenticator(auth_zone), test_keys.revoked.sign(mail()))
    assert dkim_results(result) == [("shop.example", "fail")]
    assert result.from_authenticated() == ""


def test_two_signatures_are_each_verified(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    twice = test_keys.other.sign(test_keys.shop.sign(mail()))
    result = verify(authenticator(auth_zone), twice)
    assert sorted(dkim_results(result)) == [
        ("other.example", "pass"),
        ("shop.example", "pass"),
    ]
    assert result.from_authenticated() == "dmarc"


def test_a_valid_signature_of_another_domain_does_not_authenticate_a_forged_from(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    result = verify(authenticator(auth_zone), test_keys.other.sign(mail()))
    assert dkim_results(result) == [("other.example", "pass")]
    assert result.dmarc is not None and result.dmarc.result == "fail"
    assert result.from_authenticated() == ""


def test_dmarc_checks_the_from_address_not_an_address_in_the_display_name(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    # The shop's own mail, whose display name carries another domain's address.
    result = verify(
        authenticator(auth_zone), test_keys.shop.sign(mail(sender='"help@bank.example" <deals@shop.example>'))
    )
    assert result.from_domain == "shop.example" and result.from_authenticated() == "dmarc"
    # Another domain's mail that names the shop in its display name is that domain's, never the shop's.
    forged = test_keys.other.sign(mail(sender='"deals@shop.example" <news@other.example>'))
    result = verify(authenticator(auth_zone), forged)
    assert result.from_domain == "other.example"
    assert "header.from=shop.example" not in result.header()
    assert sender_names(parse_message(forged, ParserConfig())) == ["from=news@other.example"]


def test_a_subdomain_signature_aligns_relaxed(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    result = verify(
        authenticator(auth_zone),
        test_keys.shop.sign(mail(sender="news@mail.shop.example")),
    )
    assert result.dmarc is not None and (result.dmarc.result, result.dmarc.policy) == (
        "pass",
        "reject",
    )
    assert result.from_authenticated() == "dmarc"


def test_an_unsigned_message_authenticates_nothing_and_asks_no_dns(auth_zone: ZoneServer) -> None:
    result = verify(authenticator(auth_zone), mail())
    assert result.dkim == () and result.from_authenticated() == "" and result.header() == ""
    assert auth_zone.queries == 0


def test_a_list_is_authenticated_by_its_own_domains_signature(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    posted = mail(
        sender="someone@elsewhere.example",
        extra="List-Id: Gardening <garden.lists.example>\r\n",
    )
    result = verify(authenticator(auth_zone), test_keys.lists.sign(posted))
    assert result.list_authenticated("garden.lists.example") == "dkim:lists.example"
    assert result.list_authenticated("garden.other.example") == ""
    assert result.from_authenticated() == ""


def test_off_authenticates_nothing_and_asks_no_dns(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    result = verify(authenticator(auth_zone, enabled=False), test_keys.shop.sign(mail()))
    assert result.from_authenticated() == "" and auth_zone.queries == 0


# ---------------------------------------------------------------- ARC


def sealed(raw: bytes, sealer: SigningKey, selector: str = "") -> bytes:
    """`raw` as an ARC sealer passes it on: its MTA's Authentication-Results, then an ARC set (dkimpy's arc_sign)."""
    seal = dkim.arc_sign(raw, (selector or sealer.selector).encode(), sealer.domain.encode(), sealer.private,
                         sealer.domain.encode())  # fmt: skip
    return b"".join(seal) + raw


def through_the_list(test_keys: SigningKeys, footer: bytes = b"-- \r\nthe news list\r\n") -> bytes:
    """The shop's signed mail as a mailing list at lists.example passes it on: verified there, its Subject
    tagged, a List-Id and a footer added (the shop's signature broken), then sealed by the list."""
    verified = b"Authentication-Results: lists.example; dkim=pass header.d=shop.example\r\n" + test_keys.shop.sign(
        mail()
    )
    head, body = verified.split(b"\r\n\r\n", 1)
    head = head.replace(b"Subject: ", b"Subject: [news] ") + b"\r\nList-Id: Shop news <news.lists.example>"
    return sealed(head + b"\r\n\r\n" + body + footer, test_keys.lists)


@pytest.mark.parametrize(
    ("sealers", "arc", "sealer"),
    [((), "none", ""), (("lists.example",), "pass", "lists.example"), (("other.example",), "none", "")],
)
def test_a_list_that_breaks_dkim_and_seals_is_vouched_for_only_by_a_trusted_sealer(
    auth_zone: ZoneServer, test_keys: SigningKeys, sealers: tuple[str, ...], arc: str, sealer: str
) -> None:
    """ARC is checked only with trusted sealers set, and only a chain whose newest seal names one of them
    (no other could vouch for anything); a passing chain vouches for the List-Id only when its newest
    sealer is one of them. The From stays unauthenticated: the list broke the shop's DKIM."""
    result = verify(authenticator(auth_zone, trusted_arc_sealers=sealers), through_the_list(test_keys))
    assert dkim_results(result) == [("shop.example", "fail")] and result.from_authenticated() == ""
    assert (result.arc, result.arc_sealer) == (arc, sealer)
    assert result.list_authenticated("news.lists.example") == (f"arc:{sealer}" if sealer else "")
    assert ("; arc=pass header.d=lists.example" in result.header()) == bool(sealer), result.header()


def test_a_chain_changed_after_its_seal_fails(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    changed = through_the_list(test_keys).replace(b"the news list", b"the news list, pay here")
    result = verify(authenticator(auth_zone, trusted_arc_sealers=("lists.example",)), changed)
    assert (result.arc, result.arc_sealer, result.list_authenticated("news.lists.example")) == ("fail", "", "")


def test_a_forgers_seal_on_top_of_a_trusted_chain_vouches_for_nothing(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """A forger passes the list's sealed mail on with a List-Id of its choosing and seals it itself: the
    chain is whole, and its newest sealer is the forger's domain, which no one trusts (so it is not even
    checked); a seal that names the trusted sealer, signed by the forger's key, is checked and fails."""
    relisted = through_the_list(test_keys).replace(b"<news.lists.example>", b"<deals.lists.example>")
    forged = sealed(b"Authentication-Results: other.example; arc=pass\r\n" + relisted, test_keys.other)
    trusting = authenticator(auth_zone, trusted_arc_sealers=("lists.example",))
    result = verify(trusting, forged)
    assert (result.arc, result.arc_sealer, result.list_authenticated("deals.lists.example")) == ("none", "", "")
    posing = dataclasses.replace(test_keys.other, domain="lists.example")  # the forger's key, the list's name
    result = verify(trusting, sealed(b"Authentication-Results: lists.example; arc=pass\r\n" + relisted, posing))
    assert (result.arc, result.arc_sealer, result.list_authenticated("deals.lists.example")) == ("fail", "", "")


def test_only_a_chain_a_trusted_sealer_closed_and_not_too_big_is_checked(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """dkimpy hashes the body again for every ARC set: a chain that could vouch for nothing, or whose sets
    times the message's size pass MAX_ARC_BYTES, asks no DNS and costs no hashing. The list's key
    domain answers nothing here, so a chain that was checked would be a temperror."""
    auth_zone.silent.add("_domainkey.lists.example")
    quick = authenticator(auth_zone, trusted_arc_sealers=("lists.example",), dns_budget_s=0.3)
    assert verify(quick, through_the_list(test_keys)).arc == "temperror"  # checked: the key look-up is asked
    big = through_the_list(test_keys, footer=(b"x" * 76 + b"\r\n") * (MAX_ARC_BYTES // 78))
    assert verify(quick, big).arc == "none"
    assert verify(authenticator(auth_zone, trusted_arc_sealers=("other.example",), dns_budget_s=0.3),
                  through_the_list(test_keys)).arc == "none"  # fmt: skip


def forwarded(raw: bytes, forwarder: SigningKey, recorded: str) -> bytes:
    """`raw` as a forwarder passes it on: its MTA recorded `recorded`, a footer added, then sealed."""
    head, body = (f"Authentication-Results: {forwarder.domain}; {recorded}\r\n".encode() + raw).split(b"\r\n\r\n", 1)
    return sealed(head + b"\r\n\r\n" + body + b"-- \r\nforwarded\r\n", forwarder)


def test_a_trusted_forwarder_vouches_for_no_list_id_written_into_the_mail_it_sealed(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """Anyone can send mail through a forwarder whose seal is trusted (a big mailbox provider's
    forwarding, say) with the List-Id of a list someone rescued: the seal says the forwarder passed
    it on, not that the list sent it."""
    spam = mail(sender="Deals <deals@other.example>", extra="List-Id: Shop news <news.lists.example>\r\n")
    result = verify(
        authenticator(auth_zone, trusted_arc_sealers=("other.example",)),
        forwarded(test_keys.other.sign(spam), test_keys.other, "dkim=pass header.d=other.example"),
    )
    assert (result.arc, result.arc_sealer) == ("pass", "other.example")
    assert result.list_authenticated("news.lists.example") == ""


def test_a_trusted_forwarder_vouches_for_the_list_whose_signature_it_verified(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """The list's own signed mail, changed by a trusted forwarder after it recorded the list's DKIM pass."""
    listed = test_keys.lists.sign(mail(extra="List-Id: Shop news <news.lists.example>\r\n"))
    trusting = authenticator(auth_zone, trusted_arc_sealers=("other.example",))
    result = verify(trusting, forwarded(listed, test_keys.other, "dkim=pass header.d=lists.example"))
    assert dkim_results(result) == [("lists.example", "fail")]  # the forwarder's footer broke it
    assert result.list_authenticated("news.lists.example") == "arc:other.example"
    unverified = verify(trusting, forwarded(listed, test_keys.other, "dkim=fail header.d=lists.example"))
    assert unverified.list_authenticated("news.lists.example") == ""


# ---------------------------------------------------------------- trusted Authentication-Results


TRUSTED = (
    "Authentication-Results: mx.home.example; dkim=pass header.d=shop.example; dmarc=pass header.from=shop.example\r\n"
)
RECEIVED = "Received: from relay.far.example by mx.home.example with ESMTP; Thu, 26 Nov 2026 10:00:01 +0000\r\n"


def test_trusting_the_mtas_results_a_trusted_sealers_chain_still_vouches_for_the_list(
    auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """Our MTA's arc=pass names no sealer, so with its results trusted spamd checks the chain itself for
    trusted sealers; everything else is the MTA's (its dkim=fail of the shop's broken signature)."""
    mta = "Authentication-Results: mx.home.example; dkim=fail header.d=shop.example; arc=pass\r\n" + RECEIVED
    raw = mta.encode() + through_the_list(test_keys)
    trusting = {"trusted_authserv_ids": ("mx.home.example",)}
    result = verify(authenticator(auth_zone, trusted_arc_sealers=("lists.example",), **trusting), raw)
    assert result.source == "authserv-id mx.home.example" and dkim_results(result) == [("shop.example", "fail")]
    assert (result.arc, result.list_authenticated("news.lists.example")) == ("pass", "arc:lists.example")
    # Without trusted sealers the MTA's word stands, and nothing is vouched for.
    result = verify(authenticator(auth_zone, **trusting), raw)
    assert (result.arc, result.list_authenticated("news.lists.example")) == ("pass", "")
    # A chain changed after its seal fails, whatever the MTA wrote.
    changed = raw.replace(b"the news list", b"the news list, pay here")
    result = verify(authenticator(auth_zone, trusted_arc_sealers=("lists.example",), **trusting), changed)
    assert (result.arc, result.list_authenticated("news.lists.example")) == ("fail", "")


def test_results_our_mta_added_are_used_as_they_are(zone_server: ZoneServer) -> None:
    raw = (TRUSTED + RECEIVED).encode() + mail()
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw)
    assert result.source == "authserv-id mx.home.example"
    assert result.from_authenticated() == "dmarc"
    assert zone_server.queries == 0  # nothing left to look up


def test_results_below_the_trusted_hop_are_a_forgery(zone_server: ZoneServer) -> None:
    raw = (RECEIVED + TRUSTED).encode() + mail()  # brought in from outside, under our MTA's Received
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw)
    assert result.source == "spamd" and result.from_authenticated() == ""


def test_results_of_another_authserv_id_are_not_trusted(
    zone_server: ZoneServer,
) -> None:
    raw = (TRUSTED.replace("mx.home.example", "mx.attacker.example") + RECEIVED).encode() + mail()
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw)
    assert result.source == "spamd" and result.from_authenticated() == ""


def test_trusted_results_that_failed_authenticate_nothing(
    zone_server: ZoneServer,
) -> None:
    raw = (TRUSTED.replace("=pass", "=fail") + RECEIVED).encode() + mail()
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw)
    assert result.source == "authserv-id mx.home.example" and result.from_authenticated() == ""


def test_a_dmarc_policy_opendmarc_wrote_in_a_comment_is_read(zone_server: ZoneServer) -> None:
    # OpenDMARC 1.4's form; OpenDKIM's comment holds a semicolon, which does not end its statement.
    trusted = (
        "Authentication-Results: mx.home.example; dmarc=fail (p=reject dis=none) header.from=shop.example\r\n"
        "Authentication-Results: mx.home.example;\r\n\tdkim=fail (1024-bit key; unprotected) header.d=shop.example\r\n"
    )
    result = verify(
        authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), (trusted + RECEIVED).encode() + mail()
    )
    assert result.dmarc is not None and (result.dmarc.result, result.dmarc.policy) == ("fail", "reject")
    assert result.dmarc_rejects() and [s.result for s in result.dkim] == ["fail"]
    assert "policy.published-domain-policy=reject" in result.header()


@pytest.mark.parametrize("header_b", [True, False])
def test_a_trusted_pass_of_a_length_limited_signature_vouches_only_for_what_it_signed(
    zone_server: ZoneServer, test_keys: SigningKeys, header_b: bool
) -> None:
    """OpenDKIM passes an l= signature whatever follows its l= bytes, and OpenDMARC passes DMARC on it: trusted
    as they are, a phish appended to the shop's signed mail was the shop's. The pass is "policy", as spamd's
    own check makes it, and the DMARC pass that rested on it a fail; with nothing appended both stand."""
    signed = test_keys.shop.sign(mail(), length=True)
    b_value = signed.split(b" b=", 1)[1][:8].decode() if header_b else ""
    dkim_result = "dkim=pass header.d=shop.example header.s=sel1" + (f" header.b={b_value}" if header_b else "")
    mta = f"Authentication-Results: mx.home.example; {dkim_result}; dmarc=pass (p=reject) header.from=shop.example\r\n"
    auth = authenticator(zone_server, trusted_authserv_ids=("mx.home.example",))
    whole = verify(auth, (mta + RECEIVED).encode() + signed)
    assert dkim_results(whole) == [("shop.example", "pass")] and whole.from_authenticated() == "dmarc"
    appended = signed + b"\r\nClick http://phish.example/login to keep your account.\r\n"
    result = verify(auth, (mta + RECEIVED).encode() + appended)
    assert result.source == "authserv-id mx.home.example" and dkim_results(result) == [("shop.example", "policy")]
    assert result.dmarc is not None and (result.dmarc.result, result.dmarc.policy) == ("fail", "reject")
    assert result.from_authenticated() == "" and result.dmarc_rejects()
    # Signatures of the shop's name and selector put above it (junk, l= each) do not hide it.
    junk = b"".join(b"DKIM-Signature: v=1; d=shop.example; s=sel1; l=0; b=junk%d\r\n" % i for i in range(12))
    result = verify(auth, (mta + RECEIVED).encode() + junk + appended)
    assert dkim_results(result) == [("shop.example", "policy")] and result.from_authenticated() == ""
    # The same MTA's pass of another signature of the shop (another selector) is not touched.
    other = mta.replace("header.s=sel1", "header.s=sel9").replace(f" header.b={b_value}", "")
    assert dkim_results(verify(auth, (other + RECEIVED).encode() + appended)) == [("shop.example", "pass")]


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        ("mx.home.example; dmarc=fail (sp=reject p=none) header.from=shop.example", "none"),  # sp= is not p=
        ("mx.home.example; dmarc=fail policy.dmarc=quarantine (p=reject) header.from=shop.example", "quarantine"),
        ("mx.home.example; dmarc=fail (nothing (nested p=reject)) header.from=shop.example", "reject"),
        ("mx.home.example; dmarc=fail header.from=shop.example", ""),
        # rspamd's milter_headers, word for word: the policy in a comment after header.from
        (
            'mx.home.example; dmarc=fail reason="No valid SPF, No valid DKIM" header.from=shop.example (policy=reject)',
            "reject",
        ),
        (
            'mx.home.example; dmarc=fail reason="No valid SPF" header.from=shop.example (policy=quarantine)',
            "quarantine",
        ),
        ("mx.home.example; dmarc=pass (policy=reject) header.from=shop.example", "reject"),
        ("mx.home.example; dmarc=fail (subpolicy=reject) header.from=shop.example", ""),
    ],
)
def test_which_policy_a_trusted_dmarc_result_names(zone_server: ZoneServer, value: str, policy: str) -> None:
    raw = f"Authentication-Results: {value}\r\n{RECEIVED}".encode() + mail()
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw)
    assert result.dmarc is not None and result.dmarc.policy == policy


def test_rspamds_header_with_a_quoted_reason_is_read_whole() -> None:
    """rspamd writes a DMARC failure's reason as a quoted string with spaces and commas, its policy in a
    comment after header.from; split at each space, the reason's words were no ptype.property=value and
    the whole header, its DKIM pass with it, counted for nothing."""
    value = (
        "mx.home.example; dkim=pass header.d=lists.example header.s=sel header.b=fA8VVvJ8; "
        'dmarc=fail reason="No valid SPF, No valid DKIM; (really)" header.from=shop.example (policy=reject); '
        "spf=softfail (mx.home.example: domain of a@shop.example is not allowed) smtp.mailfrom=a@shop.example"
    )
    parsed = parse_authentication_results(value)
    assert [(r.method, r.result) for r in parsed.results] == [("dkim", "pass"), ("dmarc", "fail"), ("spf", "softfail")]
    assert parsed.results[1].get("header.from") == "shop.example" and parsed.results[1].comment == "policy=reject"
    assert (
        parse_authentication_results('mx.home.example; dkim=pass header.d="a \\"b\\" c"').results[0].get("header.d")
        == 'a "b" c'
    )
    with pytest.raises(RecordError, match="left open"):
        parse_authentication_results('mx.home.example; dmarc=fail reason="open; dkim=pass header.d=bank.example')


def test_a_comment_left_open_makes_the_header_count_for_nothing(zone_server: ZoneServer) -> None:
    raw = ("Authentication-Results: mx.home.example; dkim=pass (open header.d=shop.example\r\n" + RECEIVED).encode()
    result = verify(authenticator(zone_server, trusted_authserv_ids=("mx.home.example",)), raw + mail())
    assert result.source == "spamd" and result.from_authenticated() == ""


# ---------------------------------------------------------------- DNS: budget, cache, temporary errors


def test_a_server_that_never_answers_costs_the_budget_and_authenticates_nothing(
    silent_nameserver: str, test_keys: SigningKeys
) -> None:
    auth = authenticator(silent_nameserver, dns_budget_s=0.3)
    result = verify(auth, test_keys.shop.sign(mail()))
    assert dkim_results(result) == [("shop.example", "temperror")]
    assert result.dmarc is not None and result.dmarc.result == "temperror"
    assert result.from_authenticated() == "" and not result.dmarc_rejects()
    asked = auth.resolver.queries
    again = verify(auth, test_keys.shop.sign(mail(subject="another")))
    # The key that timed out is not asked again; only the policy, which the first message had no time left for.
    assert dkim_results(again) == [("shop.example", "temperror")] and auth.resolver.queries == asked + 1


def test_servfail_is_a_temporary_error_not_a_failure(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    auth_zone.servfail.add("sel1._domainkey.shop.example")
    result = verify(authenticator(auth_zone), test_keys.shop.sign(mail()))
    assert dkim_results(result) == [("shop.example", "temperror")]
    assert result.dmarc is not None and result.dmarc.result == "fail"  # the policy exists; nothing passed
    assert result.from_authenticated() == ""


def test_answers_are_cached_for_their_ttl_negative_ones_too(
    zone_server: ZoneServer,
) -> None:
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    zone_server.txt("k._domainkey.shop.example", "v=DKIM1; p=abc")
    budget = Budget(5.0)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    assert resolver.txt("nothing.shop.example", budget) is None
    asked = zone_server.queries
    zone_server.clear("k._domainkey.shop.example")
    zone_server.txt("nothing.shop.example", "now there is")
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    assert resolver.txt("nothing.shop.example", budget) is None
    assert zone_server.queries == asked
    now[0] += 61  # past the SOA's negative TTL (60 s), not the answer's (300 s)
    assert resolver.txt("nothing.shop.example", budget) == (b"now there is",)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    now[0] += 300
    assert resolver.txt("k._domainkey.shop.example", budget) is None


def test_a_senders_large_records_cannot_grow_the_cache_past_its_bytes(zone_server: ZoneServer) -> None:
    """A sender publishes what it likes under its own names: 30 records of 20 KB (fetched over TCP, as
    truncated over UDP), each asked once, as a new selector in each message would be. Each is answered
    whole; the cache keeps to its bytes, the newest kept, the oldest dropped."""
    zone_server.txt("k._domainkey.shop.example", "v=DKIM1; p=abc")
    big = {f"s{n}._domainkey.big.example": f"v=DKIM1; p={n:02d}" + "A" * 20_000 for n in range(30)}
    for name, value in big.items():
        zone_server.txt(name, value)
    resolver, budget = CachingResolver((zone_server.address,), max_bytes=100_000), Budget(30.0)
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)
    for name, value in big.items():
        assert resolver.txt(name, budget) == (value.encode(),)
        assert resolver.cached_bytes <= 100_000
    asked = zone_server.queries
    assert resolver.txt(list(big)[-1], budget) == (list(big.values())[-1].encode(),)  # the newest: cached
    assert zone_server.queries == asked
    assert resolver.txt("k._domainkey.shop.example", budget) == (b"v=DKIM1; p=abc",)  # the oldest: asked again
    assert zone_server.queries == asked + 1


def test_dkimpy_and_dnspythons_resolver_are_imported_by_who_verifies_not_at_every_start() -> None:
    # 130 ms of every start of spamctl eval, train and bulk classify, which verify nobody unless it counts;
    # a process that makes an Authenticator (a daemon's helper, with its configuration) imports them then.
    probe = (
        "import sys\n"
        "import spamd.cli.classify, spamd.cli.evaluate, spamd.cli.training, spamd.daemon\n"
        "print(sorted(m for m in ('dkim', 'dns.resolver', 'nacl', 'cryptography') if m in sys.modules))\n"
        "from spamd.config import AuthConfig\n"
        "from spamd.mail.auth.verify import Authenticator\n"
        "authenticator = Authenticator(AuthConfig(nameservers=('127.0.0.1:9',), dns_budget_s=0.0))\n"
        "print('dkim' in sys.modules and 'dns.resolver' in sys.modules)\n"
        "raw = b'DKIM-Signature: v=1; a=rsa-sha256; d=shop.example; s=s1; h=from; bh=x; b=y\\r\\n"
        "From: a@shop.example\\r\\n\\r\\nbody\\r\\n'\n"
        "print(len(authenticator.verify(raw, [('from', 'a@shop.example')], 'a@shop.example').dkim))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "True", "1"]  # the signature was verified, with dkimpy


def test_a_spent_budget_asks_nothing() -> None:
    resolver = CachingResolver(("127.0.0.1:9",))
    with pytest.raises(DnsTemporaryError):
        resolver.txt("x.shop.example", Budget(0.0))
    assert resolver.queries == 0


@pytest.mark.parametrize(("action", "verdict"), [("score", Verdict.UNSURE), ("spam", Verdict.SPAM)])
def test_a_dmarc_reject_failure_is_reported_and_filed_as_configured(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys, action: str, verdict: Verdict
) -> None:
    auth = AuthConfig(nameservers=(auth_zone.address,), dmarc_reject_action=action)
    engine = Engine.open(Config(data_dir=tmp_path, auth=auth), durable=False)
    try:
        forged = test_keys.shop.sign(mail()).replace(b"on its way", b"held at customs, pay here")
        classified = engine.classify(forged)
        assert classified.analyzed.dmarc_reject
        assert (
            "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
            in classified.analyzed.auth_report
        )
        assert classified.score.verdict is verdict  # an untrained model: unsure unless the action files it
        assert not engine.classify(test_keys.shop.sign(mail())).analyzed.dmarc_reject
    finally:
        engine.close()


# ---------------------------------------------------------------- evaluation


def test_a_batchs_scores_are_each_messages_own_score(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """`scores_many` (spamctl classify) leaves out the key and senders where nothing reads them: the same scores,
    a DMARC p=reject failure filed as configured among them."""
    auth = AuthConfig(nameservers=(auth_zone.address,), dmarc_reject_action="spam")
    engine = Engine.open(Config(data_dir=tmp_path, auth=auth), durable=False)
    try:
        for n in range(6):
            engine.train(mail(subject=f"Order {n}"), Label.HAM, "test")
            engine.train(mail(sender=f"win@prize{n}.example", body="claim your prize now\r\n"), Label.SPAM, "test")
        raws = [
            test_keys.shop.sign(mail(subject="Order 9")),
            test_keys.shop.sign(mail()).replace(b"on its way", b"held at customs, pay here"),  # DMARC fails
            mail(sender="win@prize9.example", body="claim your prize today\r\n"),
            mail(sender="friend@other.example", subject="lunch?"),
        ]
        classifier = engine.classifier
        one_by_one = [classifier.score(classifier.analyze(raw)) for raw in raws]
        assert classifier.scores_many(raws) == one_by_one
        assert [score.verdict for score in one_by_one][:3] == [Verdict.HAM, Verdict.SPAM, Verdict.SPAM]
        assert classifier.scores_many(raws, "alice") == [classifier.score(classifier.analyze(r), "alice") for r in raws]
    finally:
        engine.close()
    # A DMARC failure only reported (the default): no score reads the verification, so nothing is asked.
    auth_zone.queries = 0
    reporting = Engine.open(Config(data_dir=tmp_path / "reporting", auth=AuthConfig(nameservers=(auth_zone.address,))))
    try:
        classifier = reporting.classifier
        scores = classifier.scores_many(raws)
        assert auth_zone.queries == 0
        assert scores == [classifier.score(classifier.analyze(raw)) for raw in raws]
        assert auth_zone.queries > 0  # analyze verifies each message, for its X-Spam-Auth report
    finally:
        reporting.close()


def test_spamctl_eval_asks_dns_only_with_dns(auth_zone: ZoneServer, test_keys: SigningKeys, tmp_path: Path) -> None:
    """A corpus's records of years ago are gone: eval verifies from what the message carries unless --dns."""
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for n in range(4):
        raw = test_keys.shop.sign(mail(subject=f"Order {n}", body=f"Hello,\r\n\r\nparcel {n} is on its way.\r\n"))
        (data / f"m{n}").write_bytes(raw)
        lines.append(f"{'ham' if n % 2 else 'spam'} data/m{n}\n")
    (tmp_path / "index").write_text("".join(lines))
    config = tmp_path / "spamd.toml"
    config.write_text(f'[auth]\nnameservers = ["{auth_zone.address}"]\n')

    offline = run_spamctl("--config", config, "eval", "--json", "--jobs", "1", tmp_path / "index")
    assert offline.returncode == 0, offline.stderr
    assert auth_zone.queries == 0
    online = run_spamctl("--config", config, "eval", "--json", "--jobs", "1", "--dns", tmp_path / "index")
    assert online.returncode == 0, online.stderr
    assert auth_zone.queries > 0  # the shop's key and DMARC record, at least


def test_a_batchs_look_ups_wait_together_not_one_behind_another(auth_zone: ZoneServer, test_keys: SigningKeys) -> None:
    """A resolver that takes its time (0.3 s an answer): the messages of a batch (`spamctl eval` and
    `classify` analyze 64 at a time) verify their senders at the same time, each as it would alone."""
    raws = [
        test_keys.shop.sign(mail(sender=f"news@s{n}.shop.example", subject=f"Order {n}")) for n in range(12)
    ]  # each From a host of its own: a DMARC look-up of its own, after the shop's key
    auth_zone.delay = 0.3
    config = Config(auth=AuthConfig(nameservers=(auth_zone.address,)))
    batch = Classifier(config, None).analyze_many(raws)  # type: ignore[arg-type]  # analysis only
    assert auth_zone.most_in_flight >= 6  # one behind another, it would be 1
    auth_zone.delay = 0.0
    alone = Classifier(config, None)  # type: ignore[arg-type]
    for raw, analyzed in zip(raws, batch, strict=True):
        assert analyzed.auth_report == alone.analyze(raw).auth_report
        assert "dkim=pass header.d=shop.example" in analyzed.auth_report and "dmarc=pass" in analyzed.auth_report


def test_nameservers_that_answer_nothing_are_not_waited_for_by_every_message(zone_server: ZoneServer) -> None:
    """Three look-ups in a row timing out: the next ones are temporary errors at once, but for a probe
    every SERVER_PROBE_S; any answer brings the servers back. Counted in queries sent, not in seconds."""
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    zone_server.txt("a.shop.example", "up")
    zone_server.silent.add("dead.example")
    for n in range(SERVER_DOWN_AFTER):
        with pytest.raises(DnsTemporaryError):  # each a name of its own: the per-name cache does not help
            resolver.txt(f"s{n}.dead.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER and resolver.servers_down
    for n in range(20):  # mail from twenty other domains: none waits, none is asked
        with pytest.raises(DnsTemporaryError, match="timed out or failed"):
            resolver.txt(f"x{n}.other.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER and resolver.unasked == 20
    now[0] += SERVER_PROBE_S  # the probe's turn: it is asked, times out, and the servers stay down
    with pytest.raises(DnsTemporaryError):
        resolver.txt("s9.dead.example", Budget(0.2))
    with pytest.raises(DnsTemporaryError, match="timed out or failed"):
        resolver.txt("a.shop.example", Budget(0.2))
    assert resolver.queries == SERVER_DOWN_AFTER + 1
    now[0] += SERVER_PROBE_S  # the next probe is answered: every look-up is asked again
    assert resolver.txt("a.shop.example", Budget(5.0)) == (b"up",)
    assert not resolver.servers_down
    assert resolver.txt("b.shop.example", Budget(5.0)) is None


def test_look_ups_cut_short_by_a_spent_budget_do_not_count_the_servers_down(zone_server: ZoneServer) -> None:
    resolver = CachingResolver((zone_server.address,))
    zone_server.silent.add("dead.example")
    for n in range(SERVER_DOWN_AFTER * 2):
        budget = Budget(0.4)
        budget.deadline -= 0.3  # most of the message's time already spent elsewhere
        with pytest.raises(DnsTemporaryError):
            resolver.txt(f"s{n}.dead.example", budget)
    assert not resolver.servers_down and resolver.unasked == 0
