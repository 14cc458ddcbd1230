"""Sender authentication against our own DNS server on loopback: DKIM, DMARC, trusted Authentication-Results, the budget."""

from __future__ import annotations

import base64
import dataclasses

import dkim
import pytest
from cryptography.hazmat.primitives import serialization

from spamd.config import ParserConfig
from spamd.mail.auth.authres import parse_authentication_results
from spamd.mail.auth.records import RecordError
from spamd.mail.auth.verify import MAX_ARC_BYTES
from spamd.mail.message import parse_message
from spamd.people.senders import sender_names
from tests.auth_helpers import SigningKey, SigningKeys, authenticator, dkim_results, mail, verify
from tests.dns_helpers import ZoneServer

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
