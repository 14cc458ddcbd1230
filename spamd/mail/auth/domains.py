"""Organizational domains and DMARC alignment, on the registrable domains the token families use too."""

from __future__ import annotations

from spamd.mail.domains import clean_host, registrable_domain


def normalized(domain: str) -> str:
    return domain.strip().rstrip(".").lower()


def organizational_domain(domain: str) -> str:
    """The registrable domain (RFC 7489 section 3.2): the public suffix and one label more."""
    domain = normalized(domain)
    return registrable_domain(clean_host(domain)) or domain


def aligned(domain: str, from_domain: str, strict: bool = False) -> bool:
    """Whether an authenticated `domain` (DKIM d=, SPF's) aligns with the From domain (RFC 7489 3.1)."""
    domain, from_domain = normalized(domain), normalized(from_domain)
    if not domain or not from_domain:
        return False
    if strict:
        return domain == from_domain
    return organizational_domain(domain) == organizational_domain(from_domain)
