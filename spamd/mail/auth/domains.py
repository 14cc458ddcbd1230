"""Organizational domains (the public suffix list that publicsuffixlist ships: no network) and alignment."""

from __future__ import annotations

from functools import lru_cache

from publicsuffixlist import PublicSuffixList

_PSL = PublicSuffixList()


def normalized(domain: str) -> str:
    return domain.strip().rstrip(".").lower()


@lru_cache(maxsize=4096)
def organizational_domain(domain: str) -> str:
    """The registrable domain (RFC 7489 section 3.2): the public suffix and one label more."""
    domain = normalized(domain)
    return _PSL.privatesuffix(domain) or domain


def aligned(domain: str, from_domain: str, strict: bool = False) -> bool:
    """Whether an authenticated `domain` (DKIM d=, SPF's) aligns with the From domain (RFC 7489 3.1)."""
    domain, from_domain = normalized(domain), normalized(from_domain)
    if not domain or not from_domain:
        return False
    if strict:
        return domain == from_domain
    return organizational_domain(domain) == organizational_domain(from_domain)
