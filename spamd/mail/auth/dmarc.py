"""DMARC (RFC 7489): the From domain's policy record and the alignment of DKIM's and SPF's passes with it.

It reports what the domain asks (p=, sp=); what spamd does with a failure is
the caller's (`[auth] dmarc_reject_action`). No reports are sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spamd.mail.auth.dns import Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.domains import aligned, normalized, organizational_domain
from spamd.mail.auth.records import RecordError, parse_tag_list

_POLICIES = ("none", "quarantine", "reject")


@dataclass(frozen=True, slots=True)
class DmarcPolicy:
    policy: str  # none, quarantine, reject: for the domain itself, or sp= for a subdomain
    strict_dkim: bool = False
    strict_spf: bool = False


@dataclass(frozen=True, slots=True)
class DmarcResult:
    """pass, fail, none (no record), temperror, permerror; with the policy asked and what aligned."""

    from_domain: str
    result: str
    policy: str = ""
    aligned_by: str = ""  # "dkim:DOMAIN" or "spf:DOMAIN" when it passed


def parse_dmarc_record(text: str | bytes, subdomain: bool = False) -> DmarcPolicy:
    """A `v=DMARC1; p=...` record; RecordError if it is not one."""
    tags = parse_tag_list(text)
    if next(iter(tags), None) != "v" or tags["v"] != "DMARC1":
        raise RecordError("a DMARC record starts with v=DMARC1")
    policy = tags.get("p", "").lower()
    if policy not in _POLICIES:
        raise RecordError(f"DMARC p={policy!r} is not none, quarantine or reject")
    if subdomain and tags.get("sp", "").lower() in _POLICIES:
        policy = tags["sp"].lower()
    return DmarcPolicy(
        policy,
        tags.get("adkim", "r").lower() == "s",
        tags.get("aspf", "r").lower() == "s",
    )


def find_policy(from_domain: str, resolver: CachingResolver, budget: Budget) -> DmarcPolicy | None:
    """The From domain's record, else its organizational domain's (with sp=); None if neither has one.

    DnsTemporaryError passes through; a malformed record raises RecordError.
    """
    domain = normalized(from_domain)
    organizational = organizational_domain(domain)
    for name, subdomain in ((domain, False), (organizational, True)):
        if subdomain and name == domain:
            break
        records = [r for r in resolver.txt("_dmarc." + name, budget) or () if r[:8].lower() == b"v=dmarc1"]
        if len(records) == 1:
            return parse_dmarc_record(records[0], subdomain)
        if len(records) > 1:
            raise RecordError(f"_dmarc.{name} has {len(records)} DMARC records")
    return None


def evaluate(
    from_domain: str,
    dkim_passes: Iterable[str],
    spf_pass: str | None,
    resolver: CachingResolver,
    budget: Budget,
) -> DmarcResult:
    """The From domain's DMARC result given the domains whose DKIM signatures passed and SPF's passing domain."""
    try:
        policy = find_policy(from_domain, resolver, budget)
    except DnsTemporaryError:
        return DmarcResult(from_domain, "temperror")
    except RecordError:
        return DmarcResult(from_domain, "permerror")
    if policy is None:
        return DmarcResult(from_domain, "none")
    for domain in dkim_passes:
        if aligned(domain, from_domain, policy.strict_dkim):
            return DmarcResult(from_domain, "pass", policy.policy, "dkim:" + domain)
    if spf_pass and aligned(spf_pass, from_domain, policy.strict_spf):
        return DmarcResult(from_domain, "pass", policy.policy, "spf:" + spf_pass)
    return DmarcResult(from_domain, "fail", policy.policy)
