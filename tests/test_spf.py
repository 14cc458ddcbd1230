"""SPF over our own DNS server on loopback: the mechanisms, the limits, and DMARC passing through aligned SPF."""

from __future__ import annotations

import pytest

from spamd.config import ParserConfig
from spamd.mail.auth.dns import Budget, CachingResolver
from spamd.mail.auth.spf import SmtpSession, check_spf
from spamd.mail.message import parse_message
from spamd.people.senders import from_address
from tests.auth_helpers import authenticator, mail
from tests.dns_helpers import ZoneServer

SHOP_MX = "192.0.2.25"


@pytest.fixture
def spf_zone(zone_server: ZoneServer) -> ZoneServer:
    z = zone_server
    z.txt("shop.example", "v=spf1 mx a:out.shop.example ip4:198.51.100.0/24 include:relay.example ~all")
    z.record("shop.example", "MX", "10 mail.shop.example.")
    z.record("mail.shop.example", "A", SHOP_MX)
    z.record("out.shop.example", "A", "192.0.2.26")
    z.txt("relay.example", "v=spf1 ip6:2001:db8::/32 -all")
    z.txt("strict.example", "v=spf1 ip4:192.0.2.1 -all")
    z.txt("moved.example", "v=spf1 redirect=strict.example")
    z.txt("_dmarc.shop.example", "v=DMARC1; p=reject")
    z.txt("loop.example", "v=spf1 include:loop1.example -all")
    for n in range(1, 12):
        z.txt(f"loop{n}.example", f"v=spf1 include:loop{n + 1}.example -all")
    z.txt("loop12.example", "v=spf1 +all")
    z.txt("bad.example", "v=spf1 ip4:not-an-address -all")
    z.txt("two.example", "v=spf1 -all")
    z.txt("two.example", "v=spf1 +all")
    z.txt("empty-label.example", "v=spf1 a:foo..example -all")
    z.txt("long-label.example", f"v=spf1 a:{'x' * 64}.example -all")
    z.txt("not-ascii.example", "v=spf1 exists:\u00e9.example -all")
    z.txt("long-macro.example", "v=spf1 exists:" + "%{s}." * 12 + "example -all")
    return z


@pytest.mark.parametrize(
    ("client", "mail_from", "expected"),
    [
        (SHOP_MX, "bounce@shop.example", "pass"),  # mx
        ("192.0.2.26", "bounce@shop.example", "pass"),  # a:out.shop.example
        ("198.51.100.77", "bounce@shop.example", "pass"),  # ip4 CIDR
        ("2001:db8::5", "bounce@shop.example", "pass"),  # include: relay.example's ip6
        ("203.0.113.9", "bounce@shop.example", "softfail"),  # ~all
        ("203.0.113.9", "x@strict.example", "fail"),  # -all
        ("192.0.2.1", "x@moved.example", "pass"),  # redirect=
        ("203.0.113.9", "x@moved.example", "fail"),
        ("203.0.113.9", "x@nothing.example", "none"),  # no record
        ("203.0.113.9", "x@loop.example", "permerror"),  # more than ten look-ups
        ("203.0.113.9", "x@bad.example", "permerror"),
        ("203.0.113.9", "x@two.example", "permerror"),  # two SPF records
        # A name in the record that is no domain name is the record's error, not a temporary one.
        ("203.0.113.9", "x@empty-label.example", "permerror"),
        ("203.0.113.9", "x@long-label.example", "permerror"),
        ("203.0.113.9", "x@not-ascii.example", "permerror"),
        # Past 253 characters an expanded name loses labels from the left, and is asked (no such name).
        ("203.0.113.9", "x@long-macro.example", "fail"),
    ],
)
def test_spf_mechanisms(spf_zone: ZoneServer, client: str, mail_from: str, expected: str) -> None:
    session = SmtpSession(client, mail_from, "helo.example")
    domain, result = check_spf(session, CachingResolver((spf_zone.address,)), Budget(5.0))
    assert (domain, result) == (mail_from.rpartition("@")[2], expected)


def test_a_bounce_is_checked_for_its_helo(spf_zone: ZoneServer) -> None:
    session = SmtpSession(SHOP_MX, "", "shop.example")
    assert check_spf(session, CachingResolver((spf_zone.address,)), Budget(5.0)) == ("shop.example", "pass")


@pytest.mark.parametrize("mail_from", ["x@foo..example", "x@localhost", f"x@{'x' * 64}.example", "x@"])
def test_a_mail_from_domain_that_is_no_domain_name_has_no_spf(spf_zone: ZoneServer, mail_from: str) -> None:
    session = SmtpSession("203.0.113.9", mail_from, "h")
    assert check_spf(session, CachingResolver((spf_zone.address,)), Budget(5.0))[1] == "none"
    assert spf_zone.queries == 0


def test_servfail_and_silence_are_temporary(spf_zone: ZoneServer, silent_nameserver: str) -> None:
    spf_zone.servfail.add("shop.example")
    session = SmtpSession(SHOP_MX, "bounce@shop.example", "h")
    assert check_spf(session, CachingResolver((spf_zone.address,)), Budget(5.0))[1] == "temperror"
    assert check_spf(session, CachingResolver((silent_nameserver,)), Budget(0.2))[1] == "temperror"


def test_unsigned_mail_from_the_domains_own_server_passes_dmarc_through_aligned_spf(spf_zone: ZoneServer) -> None:
    raw = mail()
    parsed = parse_message(raw, ParserConfig())
    auth = authenticator(spf_zone)
    sender = from_address(parsed.header("from"))
    own = auth.verify(raw, parsed.headers, sender, SmtpSession(SHOP_MX, "bounce@shop.example", "mail.shop.example"))
    assert own.spf == ("shop.example", "pass") and own.from_authenticated() == "dmarc"
    forged = auth.verify(raw, parsed.headers, sender, SmtpSession("203.0.113.9", "x@attacker.example", "a"))
    assert forged.from_authenticated() == "" and forged.dmarc is not None and forged.dmarc.result == "fail"
    assert forged.dmarc_rejects()
    # Without a session (spamc, Maildir), nothing is asked.
    asked = spf_zone.queries
    assert auth.verify(raw, parsed.headers, sender).from_authenticated() == ""
    assert spf_zone.queries == asked
