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
from typing import TYPE_CHECKING, Any

import dns.exception
import dns.rdatatype
import structlog

from spamd.config.addresses import parse_nameserver

if TYPE_CHECKING:
    import dns.message

# dnspython's resolver (dns.resolver, dns.nameserver, dns.message and what they import, with dkimpy
# which imports it too) is imported when a process first makes a resolver, not when spamd starts:
# `spamctl eval`, `train` and a bulk `classify` verify nobody unless it counts, and took 130 ms
# more to start with it.

# A negative answer's TTL when the response carries no SOA (RFC 2308 uses the SOA's minimum),
# and the longest any answer is kept: a key that a domain rotates is seen within the hour.
DEFAULT_NEGATIVE_TTL_S = 300
MAX_TTL_S = 3600
# A name whose look-up timed out or failed is not asked again for this long: with a server
# that never answers, each message would otherwise wait out its whole budget in a helper that
# analyzes messages one at a time, and hold up every message queued behind it.
FAILURE_TTL_S = 30
# Nameservers that let this many look-ups in a row (of any names) time out or answer SERVFAIL,
# answering nothing between, are taken as down: a look-up is then a temporary error at once,
# but for one probe at a time every SERVER_PROBE_S, and the first answer of any kind brings
# them back. Per name is not enough: mail from many domains each waits out its budget
# (bench_smtp.py --auth silent: 1 message a second, a median 15 s behind, while each message's
# wait queued behind the last's). A resolver that SERVFAILs at once costs no wait, but each
# message still asks it for every name: down, none is asked. A run of spam domains whose own
# servers are dead can trip it too: then, for seconds, nothing authenticates, which gives no
# one trust (the fail-safe side).
SERVER_DOWN_AFTER = 3
SERVER_PROBE_S = 10.0
# dnspython's first pause between rounds of nameservers that did not answer (it doubles after).
# A budget of 1 s ran out at 1.10 s with a silent server: the pause, then the lifetime's check.
RETRY_PAUSE_S = 0.1
# The cache's bound in bytes, each process's: 10,000 answers of real keys and policies (a
# 2048-bit key's record is about 400 bytes) come to about 8 MB with what holds them.
CACHE_BYTES = 16 << 20
ENTRY_OVERHEAD_BYTES = 400  # the key's tuple and name, the entry's tuples, the dict's node (CPython, 64-bit)


log = structlog.get_logger()

_FAILED: tuple[bytes | str, ...] = ("a look-up that failed",)  # cached as such for FAILURE_TTL_S


class DnsTemporaryError(Exception):
    """No answer in time, or SERVFAIL: nothing can be concluded from this lookup."""


class DnsWouldWait(BaseException):
    """A look-up under a `cached_only` budget that the cache cannot answer: verify the message where it may wait.

    A BaseException, so that no check's `except Exception` (dkimpy's parsers, a hostile
    ARC chain) takes it for a failure of the message's own.
    """


@dataclass
class Budget:
    """What is left of one message's time for DNS; every lookup for the message shares it."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float | None = None  # on `clock`, when the message arrived (None: now)
    # Answers from the cache alone: a look-up that would ask a server raises DnsWouldWait (one
    # that the down nameservers would leave unasked is the temporary error it is anyway).
    cached_only: bool = False
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = (self.clock() if self.started is None else self.started) + self.seconds

    def remaining(self) -> float:
        return self.deadline - self.clock()


class CachingResolver:
    """TXT look-ups through dnspython with the cache and the budget; the cache is shared by a process's threads."""

    def __init__(
        self,
        nameservers: tuple[str, ...] = (),
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = CACHE_BYTES,
    ):
        import dns.nameserver
        import dns.resolver

        self._resolver = dns.resolver.Resolver(configure=not nameservers)
        if nameservers:
            self._resolver.nameservers = [
                dns.nameserver.Do53Nameserver(address, port) for address, port in map(parse_nameserver, nameservers)
            ]
        self._resolver.cache = None  # ours below: it keeps negative answers too
        # One try of a server may take all that is left of the budget: dnspython tries a silent
        # server again after its `timeout` (2 s), not before, so a second try never fit anyway.
        self._resolver.timeout = MAX_TTL_S
        # (name, type) -> (expiry, records, the entry's bytes), least recently stored first
        self._cache: OrderedDict[tuple[str, int], tuple[float, tuple[bytes | str, ...] | None, int]] = OrderedDict()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.cached_bytes = 0
        self.clock = clock
        self.queries = 0  # sent to a server, for tests and counters
        self.unasked = 0  # look-ups answered with a temporary error at once, the nameservers being down
        self.times_down = 0  # how often the nameservers were taken as down
        # Called with True when the nameservers are taken as down, False when they answer again
        # (from the thread whose look-up decided it, outside the lock).
        self.on_change: Callable[[bool], None] = lambda down: _log_change(self, down)
        self._failures_in_row = 0
        self._next_probe: float | None = None  # while the nameservers are down: when one look-up may try them
        self._probing = False  # a probe is out: every other look-up is unasked until it returns
        self._lock = threading.Lock()

    @property
    def servers_down(self) -> bool:
        return self._next_probe is not None

    @property
    def nameservers(self) -> str:
        return " ".join(str(n) for n in self._resolver.nameservers)

    def _servers_down_now(self) -> bool:
        """Whether a look-up now would be unasked (`_may_ask` False), without taking the probe's turn."""
        with self._lock:
            return self._next_probe is not None and (self._probing or self.clock() < self._next_probe)

    def _may_ask(self) -> bool:
        """False while the nameservers are down and this is not the probe's turn (True: this look-up is the probe)."""
        with self._lock:
            if self._next_probe is None:
                return True
            now = self.clock()
            if self._probing or now < self._next_probe:
                self.unasked += 1
                return False
            self._next_probe = now + SERVER_PROBE_S
            self._probing = True
            return True

    def _answered(self) -> None:
        with self._lock:
            self._failures_in_row = 0
            self._probing = False
            back, self._next_probe = self._next_probe is not None, None
        if back:
            self.on_change(False)

    def _failed(self) -> None:
        """A time-out or SERVFAIL: the nameservers' failure, not a name's answer."""
        with self._lock:
            self._probing = False
            self._failures_in_row += 1
            down = self._failures_in_row >= SERVER_DOWN_AFTER and self._next_probe is None
            if down:
                self._next_probe = self.clock() + SERVER_PROBE_S
                self.times_down += 1
        if down:
            self.on_change(True)

    def _ended(self) -> None:
        """A look-up that neither answered nor failed the nameservers (a spent budget): a probe may go again."""
        with self._lock:
            self._probing = False

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
        if budget.cached_only and not self._servers_down_now():
            raise DnsWouldWait(name)
        if not self._may_ask():
            raise DnsTemporaryError(
                f"{name}: the nameservers timed out or failed the last {SERVER_DOWN_AFTER} look-ups or more"
            )
        import dns.resolver  # imported when this resolver was made: here only bound

        self.queries += 1
        try:
            # dnspython sleeps RETRY_PAUSE_S after a round of servers that did not answer before it
            # finds the lifetime spent: the lifetime ends that much before the budget.
            lifetime = left - RETRY_PAUSE_S if left > 2 * RETRY_PAUSE_S else left
            answer = self._resolver.resolve(
                key[0] + ".", rdtype, lifetime=lifetime, raise_on_no_answer=False, search=False
            )
        except dns.resolver.NXDOMAIN as e:
            self._answered()
            self._keep(key, _negative_ttl(e.response(e.qnames()[0]) if e.qnames() else None), None)
            return None
        except (dns.exception.Timeout, dns.resolver.NoNameservers, dns.resolver.LifetimeTimeout) as e:
            # The server's failure, not our budget's end: SERVFAIL or refused (NoNameservers) never waits.
            fair_share = left >= budget.seconds / 2 or isinstance(e, dns.resolver.NoNameservers)
            if fair_share:
                self._keep(key, FAILURE_TTL_S, _FAILED)
                self._failed()
            else:
                self._ended()
            raise DnsTemporaryError(f"{name}: {type(e).__name__}") from e
        except dns.exception.DNSException as e:  # a malformed name or answer: nothing can be concluded
            self._ended()
            raise DnsTemporaryError(f"{name}: {e}") from e
        self._answered()
        if answer.rrset is None:
            self._keep(key, _negative_ttl(answer.response), None)
            return None
        records = tuple(_value(rdata) for rdata in sorted(answer.rrset, key=lambda r: getattr(r, "preference", 0)))
        self._keep(key, min(answer.rrset.ttl, MAX_TTL_S), records)
        return records

    def _keep(self, key: tuple[str, int], ttl: float, records: tuple[bytes | str, ...] | None) -> None:
        """Cache an answer for `ttl`, the oldest dropped past max_entries or max_bytes: a sender publishes
        what it likes under its own names (a TXT record of 60 KB at each of a million selectors), and
        each message may ask for a new one, so entries alone did not bound the cache."""
        if ttl <= 0:
            return
        size = ENTRY_OVERHEAD_BYTES + len(key[0]) + sum(len(r) for r in records or ())
        with self._lock:
            replaced = self._cache.pop(key, None)
            if replaced is not None:
                self.cached_bytes -= replaced[2]
            self._cache[key] = (self.clock() + ttl, records, size)
            self.cached_bytes += size
            while len(self._cache) > self.max_entries or self.cached_bytes > self.max_bytes:
                self.cached_bytes -= self._cache.popitem(last=False)[1][2]


def _log_change(resolver: CachingResolver, down: bool) -> None:
    if down:
        log.warning(
            "nameservers_taken_down", nameservers=resolver.nameservers, failures_in_row=SERVER_DOWN_AFTER,
            action=f"sender authentication is a temporary error at once; one look-up every {SERVER_PROBE_S:g} s tries them",
        )  # fmt: skip
    else:
        log.info("nameservers_answered_again", nameservers=resolver.nameservers)


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
