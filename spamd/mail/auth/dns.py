"""DNS for sender authentication: a per-message time budget, a cache that honours TTLs, negative answers too.

A timeout or SERVFAIL raises DnsTemporaryError: the caller then authenticates
nothing and fails nothing. It does not validate DNSSEC, nor follow search domains.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.message
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver

from spamd.config.addresses import parse_nameserver

# A negative answer's TTL when the response carries no SOA (RFC 2308 uses the SOA's minimum),
# and the longest any answer is kept: a key that a domain rotates is seen within the hour.
DEFAULT_NEGATIVE_TTL_S = 300
MAX_TTL_S = 3600
# A name whose look-up timed out or failed is not asked again for this long: with a server
# that never answers, each message would otherwise wait out its whole budget in a helper that
# analyzes messages one at a time, and hold up every message queued behind it.
FAILURE_TTL_S = 30


_FAILED: tuple[bytes | str, ...] = ("a look-up that failed",)  # cached as such for FAILURE_TTL_S


class DnsTemporaryError(Exception):
    """No answer in time, or SERVFAIL: nothing can be concluded from this lookup."""


@dataclass
class Budget:
    """What is left of one message's time for DNS; every lookup for the message shares it."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.seconds

    def remaining(self) -> float:
        return self.deadline - self.clock()


class CachingResolver:
    """TXT look-ups through dnspython with the cache and the budget; the cache is shared by a process's threads."""

    def __init__(
        self,
        nameservers: tuple[str, ...] = (),
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._resolver = dns.resolver.Resolver(configure=not nameservers)
        if nameservers:
            self._resolver.nameservers = [
                dns.nameserver.Do53Nameserver(address, port) for address, port in map(parse_nameserver, nameservers)
            ]
        self._resolver.cache = None  # ours below: it keeps negative answers too
        self._cache: OrderedDict[tuple[str, int], tuple[float, tuple[bytes | str, ...] | None]] = OrderedDict()
        self.max_entries = max_entries
        self.clock = clock
        self.queries = 0  # sent to a server, for tests and counters
        self._lock = threading.Lock()

    def txt(self, name: str, budget: Budget) -> tuple[bytes, ...] | None:
        """The TXT strings of `name`, each record's strings joined; None if there is no such record."""
        return self.records(name, dns.rdatatype.TXT, budget)  # type: ignore[return-value]

    def records(self, name: str, rdtype: dns.rdatatype.RdataType, budget: Budget) -> tuple[bytes | str, ...] | None:
        """`name`'s records of `rdtype`: TXT as bytes, A and AAAA as addresses, MX as host names (by
        preference); None if there are none. DnsTemporaryError on a timeout, SERVFAIL or a spent budget."""
        key = (name.lower().rstrip("."), rdtype)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > self.clock():
            if cached[1] is _FAILED:
                raise DnsTemporaryError(f"{name}: failed within the last {FAILURE_TTL_S} s")
            return cached[1]
        left = budget.remaining()
        if left <= 0:
            raise DnsTemporaryError(f"{name}: no time left for DNS")
        self.queries += 1
        try:
            answer = self._resolver.resolve(key[0] + ".", rdtype, lifetime=left, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN as e:
            self._keep(key, _negative_ttl(e.response(e.qnames()[0]) if e.qnames() else None), None)
            return None
        except (dns.exception.Timeout, dns.resolver.NoNameservers, dns.resolver.LifetimeTimeout) as e:
            if left >= budget.seconds / 2:  # a fair share of time: the server's failure, not our budget's end
                self._keep(key, FAILURE_TTL_S, _FAILED)
            raise DnsTemporaryError(f"{name}: {type(e).__name__}") from e
        except dns.exception.DNSException as e:  # a malformed name or answer: nothing can be concluded
            raise DnsTemporaryError(f"{name}: {e}") from e
        if answer.rrset is None:
            self._keep(key, _negative_ttl(answer.response), None)
            return None
        records = tuple(_value(rdata) for rdata in sorted(answer.rrset, key=lambda r: getattr(r, "preference", 0)))
        self._keep(key, min(answer.rrset.ttl, MAX_TTL_S), records)
        return records

    def _keep(self, key: tuple[str, int], ttl: float, records: tuple[bytes | str, ...] | None) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._cache[key] = (self.clock() + ttl, records)
            self._cache.move_to_end(key)
            if len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)


def _value(rdata: Any) -> bytes | str:
    if rdata.rdtype == dns.rdatatype.TXT:
        return b"".join(rdata.strings)
    if rdata.rdtype == dns.rdatatype.MX:
        return str(rdata.exchange.to_text(omit_final_dot=True)).lower()
    return str(rdata.to_text())


def _negative_ttl(response: dns.message.Message | None) -> float:
    """RFC 2308: the SOA's own TTL or its minimum, whichever is less; the default without a SOA."""
    if response is not None:
        for rrset in response.authority:
            if rrset.rdtype == dns.rdatatype.SOA:
                return min(rrset.ttl, rrset[0].minimum, MAX_TTL_S)
    return DEFAULT_NEGATIVE_TTL_S
