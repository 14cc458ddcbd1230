"""Test keys, signed mail and a DNS zone that publishes the keys and DMARC records, for sender authentication tests.

The keys are made once per session (openssl for RSA, PyNaCl for Ed25519) and
published by tests.dns_helpers' loopback server: never the internet's DNS.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from spamd.config import AuthConfig, ParserConfig
from spamd.mail.auth.dns import CachingResolver
from spamd.mail.auth.verify import Authenticator, AuthResult
from spamd.mail.message import parse_message
from spamd.people.senders import from_address
from spamd_lab.signing_keys import SigningKey, ed25519_key, rsa_key
from tests.dns_helpers import ZoneServer


@dataclass(frozen=True)
class SigningKeys:
    shop: SigningKey  # RSA, published at sel1._domainkey.shop.example
    shop_ed25519: SigningKey  # Ed25519, ed1._domainkey.shop.example
    other: SigningKey  # RSA of another domain, other.example
    lists: SigningKey  # RSA of a list's domain, lists.example
    unpublished: SigningKey  # RSA signing as shop.example sel2, whose DNS holds another key
    revoked: SigningKey  # RSA signing as shop.example old1, whose DNS record has an empty p=


@pytest.fixture(scope="session")
def test_keys(tmp_path_factory: pytest.TempPathFactory) -> SigningKeys:
    directory = tmp_path_factory.mktemp("dkim-keys")
    return SigningKeys(
        shop=rsa_key(directory, "shop.example", "sel1"),
        shop_ed25519=ed25519_key("shop.example", "ed1"),
        other=rsa_key(directory, "other.example", "sel1"),
        lists=rsa_key(directory, "lists.example", "sel1"),
        unpublished=rsa_key(directory, "shop.example", "sel2"),
        revoked=rsa_key(directory, "shop.example", "old1"),
    )


def publish(zone: ZoneServer, keys: SigningKeys) -> None:
    """The keys and DMARC records the tests expect (sel2's record holds other.example's key: a wrong key)."""
    for key in (keys.shop, keys.shop_ed25519, keys.other, keys.lists):
        zone.txt(f"{key.selector}._domainkey.{key.domain}", key.dns_value)
    zone.txt("sel2._domainkey.shop.example", keys.other.dns_value)
    zone.txt("old1._domainkey.shop.example", "v=DKIM1; k=rsa; p=")
    zone.txt("_dmarc.shop.example", "v=DMARC1; p=reject; adkim=r")
    zone.txt("_dmarc.other.example", "v=DMARC1; p=none")


@contextlib.contextmanager
def published_zone(keys: SigningKeys) -> Iterator[ZoneServer]:
    """A loopback DNS server of its own publishing `keys` (`publish`), for a module's fixtures; stopped after."""
    zone = ZoneServer()
    zone.start()
    try:
        publish(zone, keys)
        yield zone
    finally:
        zone.stop()


@pytest.fixture
def auth_zone(zone_server: ZoneServer, test_keys: SigningKeys) -> Iterator[ZoneServer]:
    publish(zone_server, test_keys)
    yield zone_server


def authenticator(zone: ZoneServer | str, **settings: object) -> Authenticator:
    """An Authenticator that asks only our loopback server (a ZoneServer, or an address)."""
    address = zone if isinstance(zone, str) else zone.address
    config = AuthConfig(nameservers=(address,), **settings)  # type: ignore[arg-type]
    return Authenticator(config, CachingResolver(config.nameservers))


def mail(
    sender: str = "Deals <deals@shop.example>",
    subject: str = "Your order has shipped",
    body: str = "Hello,\r\n\r\nyour parcel is on its way.\r\n",
    extra: str = "",
) -> bytes:
    return (
        f"From: {sender}\r\nTo: alice@home.example\r\nSubject: {subject}\r\n"
        f"Date: Thu, 26 Nov 2026 10:00:00 +0000\r\nMessage-ID: <{hashlib.sha1((sender + subject + body + extra).encode()).hexdigest()[:16]}@shop.example>\r\n"
        f"{extra}\r\n{body}"
    ).encode()


def verify(auth: Authenticator, raw: bytes) -> AuthResult:
    parsed = parse_message(raw, ParserConfig())
    return auth.verify(raw, parsed.headers, from_address(parsed.header("from")))


def dkim_results(result: AuthResult) -> list[tuple[str, str]]:
    return [(s.domain, s.result) for s in result.dkim]
