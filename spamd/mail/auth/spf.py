"""SPF (RFC 7208) for the client that spamd sees: the SMTP session's IP, MAIL FROM and HELO.

Only where spamd is the SMTP server or a milter; spamc and Maildir input carry no
session. Evaluated over spamd's resolver (its budget and cache), with the ten-look-up
limit. It does not expand macros beyond %{i,s,l,o,d,h} (others are a permerror), nor
match `ptr` (deprecated: it counts a look-up and never matches), nor build `exp=` text.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import dns.rdatatype

from spamd.mail.auth.dns import Budget, CachingResolver, DnsTemporaryError
from spamd.mail.auth.domains import normalized

MAX_LOOKUPS = 10  # RFC 7208 section 4.6.4
MAX_MX = 10
_QUALIFIERS = {"+": "pass", "-": "fail", "~": "softfail", "?": "neutral"}
_MACRO = re.compile(r"%(?:\{([a-z])\}|(.))")
_HOST_MECHANISM = re.compile(r"(?i)(a|mx)(?::([^/]+))?(?:/(\d{1,3}))?(?://(\d{1,3}))?")
MAX_NAME = 253  # RFC 7208 section 7.3: a longer expanded name loses labels from the left


@dataclass(frozen=True, slots=True)
class SmtpSession:
    """What the SMTP client said: its address, MAIL FROM (may be empty for bounces) and HELO."""

    client_ip: str
    mail_from: str
    helo: str


class SpfPermError(Exception):
    """The domain's record cannot be evaluated (syntax, too many look-ups, an unknown macro)."""


class _Check:
    def __init__(self, session: SmtpSession, sender: str, resolver: CachingResolver, budget: Budget):
        self.ip = ipaddress.ip_address(session.client_ip)
        self.session, self.sender = session, sender
        self.resolver, self.budget = resolver, budget
        self.lookups = 0

    def count(self) -> None:
        self.lookups += 1
        if self.lookups > MAX_LOOKUPS:
            raise SpfPermError("more than 10 DNS-querying terms")

    def expand(self, spec: str, domain: str) -> str:
        local, _, sender_domain = self.sender.rpartition("@")
        values = {"i": str(self.ip), "s": self.sender, "l": local or "postmaster", "o": sender_domain,
                  "d": domain, "h": self.session.helo}  # fmt: skip

        def one(found: re.Match[str]) -> str:
            letter, other = found.group(1), found.group(2)
            if letter is not None:
                if letter not in values:
                    raise SpfPermError(f"macro %{{{letter}}} is not supported")
                return values[letter]
            return {"%": "%", "_": " ", "-": "%20"}.get(other or "", "") or _fail(f"bad macro %{other}")

        return _MACRO.sub(one, spec)

    def addresses(self, name: str) -> list[str]:
        rdtype = dns.rdatatype.A if self.ip.version == 4 else dns.rdatatype.AAAA
        return [str(a) for a in self.resolver.records(name, rdtype, self.budget) or ()]

    def in_network(self, addresses: list[str], cidr4: int, cidr6: int) -> bool:
        prefix = cidr4 if self.ip.version == 4 else cidr6
        for address in addresses:
            network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
            if self.ip in network:
                return True
        return False

    def check_host(self, domain: str, depth: int = 0) -> str:
        if depth > MAX_LOOKUPS:
            raise SpfPermError("include/redirect loop")
        records = [r for r in self.resolver.txt(domain, self.budget) or () if _is_spf(r)]
        if not records:
            return "none"
        if len(records) > 1:
            raise SpfPermError(f"{domain} has {len(records)} SPF records")
        terms = records[0].decode("ascii", "replace").split()[1:]
        redirect = None
        for term in terms:
            name, equals, value = term.partition("=")
            if equals and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.\-]*", name):  # a modifier
                if name.lower() == "redirect":
                    redirect = self.expand(value, domain)
                continue
            qualifier = _QUALIFIERS.get(term[0])
            mechanism = term[1:] if qualifier else term
            if self.matches(mechanism, domain, depth):
                return qualifier or "pass"
        if redirect is not None:
            self.count()
            result = self.check_host(_domain_spec(redirect), depth + 1)
            return "permerror" if result == "none" else result
        return "neutral"

    def matches(self, mechanism: str, domain: str, depth: int) -> bool:
        cidr4, cidr6 = 32, 128
        host = _HOST_MECHANISM.fullmatch(mechanism)
        if host is not None:  # a and mx: a domain and dual CIDR lengths, each optional
            kind, argument = host.group(1).lower(), host.group(2) or ""
            cidr4 = int(host.group(3)) if host.group(3) else 32
            cidr6 = int(host.group(4)) if host.group(4) else 128
            if cidr4 > 32 or cidr6 > 128:
                raise SpfPermError(f"bad CIDR length in {mechanism}")
        else:
            kind, _, argument = mechanism.partition(":")
            kind = kind.lower()
        if kind == "all":
            return True
        if kind in ("ip4", "ip6"):
            try:
                return self.ip in ipaddress.ip_network(argument, strict=False)
            except ValueError as e:
                raise SpfPermError(f"bad {kind}:{argument}") from e
        target = _domain_spec(self.expand(argument, domain)) if argument else domain
        if kind == "include":
            self.count()
            if not argument:
                raise SpfPermError("include: needs a domain")
            result = self.check_host(target, depth + 1)
            if result in ("temperror",):
                raise DnsTemporaryError(f"include:{target}")
            if result in ("permerror", "none"):
                raise SpfPermError(f"include:{target} gave {result}")
            return result == "pass"
        if kind == "a":
            self.count()
            return self.in_network(self.addresses(target), cidr4, cidr6)
        if kind == "mx":
            self.count()
            hosts = [str(h) for h in self.resolver.records(target, dns.rdatatype.MX, self.budget) or ()][:MAX_MX]
            return any(self.in_network(self.addresses(host), cidr4, cidr6) for host in hosts)
        if kind == "exists":
            self.count()
            return bool(self.resolver.records(target, dns.rdatatype.A, self.budget))
        if kind == "ptr":
            self.count()
            return False
        raise SpfPermError(f"unknown mechanism {kind!r}")


def _fail(why: str) -> str:
    raise SpfPermError(why)


def is_domain_name(name: str) -> bool:
    """Whether `name` can be asked of DNS: two labels or more, each of 1 to 63 printable ASCII
    characters (no backslash), 253 in all. What else DNS allows, SPF's look-ups may ask."""
    if not 0 < len(name) <= MAX_NAME or not all("!" <= c <= "~" and c != "\\" for c in name):
        return False
    labels = name.split(".")
    return len(labels) >= 2 and all(0 < len(label) <= 63 for label in labels)


def _domain_spec(expanded: str) -> str:
    """A record's target domain, after its macros: cut to 253 characters from the left; SpfPermError
    if it is not a domain name (section 4.8: a malformed domain-spec is the record's error)."""
    name = normalized(expanded)
    while len(name) > MAX_NAME and "." in name:
        name = name.partition(".")[2]
    if not is_domain_name(name):
        raise SpfPermError(f"not a domain name: {expanded[:60]!r}")
    return name


def _is_spf(record: bytes) -> bool:
    return record[:6].lower() == b"v=spf1" and (len(record) == 6 or record[6:7] == b" ")


def check_spf(session: SmtpSession, resolver: CachingResolver, budget: Budget) -> tuple[str, str]:
    """(the domain checked, the result): MAIL FROM's domain, or HELO's for a bounce (empty MAIL FROM)."""
    mail_from = session.mail_from.strip("<> ").lower()
    sender = mail_from if "@" in mail_from else f"postmaster@{normalized(session.helo)}"
    domain = normalized(sender.rpartition("@")[2])
    if not is_domain_name(domain):  # section 4.3: a malformed or single-label domain is "none"
        return domain, "none"
    try:
        check = _Check(session, sender, resolver, budget)
        return domain, check.check_host(domain)
    except DnsTemporaryError:
        return domain, "temperror"
    except (SpfPermError, ValueError):
        return domain, "permerror"
