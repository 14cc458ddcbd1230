"""RedisState: one Redis connection and the keys of one model; failures become StoreUnavailableError, with backoff.

Knows the keys and the scripts' calling conventions, not the Engine's interfaces
(spamd.store.redis.views and spamd.store.redis.store build those over it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis
import structlog
from redis.exceptions import ClusterError, MovedError

from spamd.config import Config
from spamd.config.addresses import redact_url
from spamd.errors import CorruptStateError, StoreError, StoreUnavailableError
from spamd.learning.classifier import Analyzed
from spamd.model.bayes import Label, MultinomialNB
from spamd.model.families import (
    UNRECORDED_COUNT_SETTINGS,
    EvidenceHistory,
    count_settings,
    evidence_families,
    evidence_in,
)
from spamd.store.local import log_evidence_switch
from spamd.store.records import Ledger
from spamd.store.redis.connect import (
    NOT_UNAVAILABLE,
    UNAVAILABLE,
    Script,
    connect,
    is_cluster,
    is_sentinel,
    model_keys,
    user_hash_tag,
)
from spamd.store.redis.scripts import CLAIM_LUA, SCORE_LUA, TRAIN_LUA
from spamd.store.snapshot import check_count_settings

log = structlog.get_logger()

T = TypeVar("T")

# Backoff after Redis failed: every call in the meantime fails at once (no stall per
# message), then one call tries again; doubling from 0.1 s up to 5 s.
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0

_TOTAL_FIELDS = ("tokens:0", "tokens:1", "docs:0", "docs:1", "distinct")
# The totals hash's fields that are JSON, not numbers.
_NOT_COUNTS = (b"count_settings", b"evidence_since")

# The key WAIT's marker write touches (one per slot that needs confirming): SET with a
# short expiry, so it costs nothing at rest; the write makes the connection's WAIT
# cover everything the node holds up to now, whichever connection wrote it.
REPLICATED_MARK = "replicated"
REPLICATED_MARK_TTL_MS = 60_000

# A ledger value at or above this is an untraining whose user's layer is not yet told
# (spamd.store.redis.scripts TRAIN_LUA): the message is not held.
UNTRAINED = 32


@dataclass(frozen=True, slots=True)
class SharedTraining:
    """The training script's reply: the outcome, its seq, and what a user's layer has yet to apply."""

    outcome: str
    seq: int  # 0: nothing committed
    apply: bool  # the user's layer has this change to apply (new, or left by an attempt that failed)
    previous: Label | None  # the label the layer held before, as the model's ledger knows it
    ledger_value: str  # to acknowledge the layer's change with (ACK_LUA)
    expired: list[str]  # users past [users] max_users: their keys go


class _Backoff:
    """After a failure, every call to that place fails at once until `retry_at`; doubling up to BACKOFF_MAX_S."""

    def __init__(self, now: float):
        self.down_since = now
        self.failures = 0
        self.retry_at = now
        self.last_error = ""

    def failed(self, now: float, error: str) -> None:
        self.failures += 1
        self.retry_at = now + min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self.failures - 1))
        self.last_error = error


class RedisState:
    """One Redis connection pool and the keys of one model; every call fails as StoreUnavailableError when Redis does.

    Does not cache anything: each score reads the counts as they are now, so a
    training through any daemon is used by the next score everywhere.
    """

    def __init__(self, config: Config):
        self.config = config
        r = config.redis
        self.url = redact_url(r.url)
        self.cluster = is_cluster(r.url)
        self.sentinel = is_sentinel(r.url)
        self.keys = model_keys(r.prefix, self.cluster)
        self.mark = (f"{{{r.prefix}}}" if self.cluster else r.prefix) + REPLICATED_MARK
        self.ham, self.spam, self.totals, self.ledger, self.order, self.events, self.outcomes, self.users = self.keys
        self.client = connect(r, self.url)
        self._train = Script(self.client, TRAIN_LUA)
        self._score = Script(self.client, SCORE_LUA)
        self._claim = Script(self.client, CLAIM_LUA)
        # Backoff per place that failed: "model" (the model's slot; on plain Redis,
        # everything), or on a cluster the node of a user's slot, so that one node down
        # stops only the users it holds.
        self._backoffs: dict[str, _Backoff] = {}
        self.primary: tuple[str, int] | None = None  # under Sentinel: where the primary was last reached
        self.replicas_short = False  # the last WAIT found fewer than [redis] replicas_acked replicas

    # ---------------------------------------------------------- connection

    def call(self, what: str, fn: Callable[[], T], where: str = "model") -> T:
        """Run one Redis exchange; on failure back off (bounded, per `where`) and raise StoreUnavailableError."""
        now = time.monotonic()
        backoff = self._backoffs.get(where)
        place = self.url if where == "model" else f"{self.url} (node {where})"
        if backoff is not None and now < backoff.retry_at:
            raise StoreUnavailableError(
                f"Redis at {place} is unreachable ({backoff.last_error}); {what} not done, retrying by itself"
            )
        try:
            result = fn()
        except NOT_UNAVAILABLE:
            raise  # keys in two slots: a bug, not an outage
        except UNAVAILABLE as e:
            if backoff is None:
                backoff = self._backoffs[where] = _Backoff(now)
                log.error("redis_unreachable", url=self.url, node=where, error=f"{type(e).__name__}: {e}",
                          action="answering temporary failures; retrying")  # fmt: skip
            backoff.failed(now, f"{type(e).__name__}: {e}")
            raise StoreUnavailableError(
                f"Redis at {place} is unreachable ({backoff.last_error}); {what} not done, retrying by itself"
            ) from None
        except redis.ResponseError as e:
            raise StoreError(f"Redis at {place} refused {what}: {e}") from None
        if self.sentinel:
            self._note_primary(backoff)
        if backoff is not None:
            del self._backoffs[where]
            log.info(
                "redis_reconnected",
                url=self.url,
                node=where,
                down_s=round(now - backoff.down_since, 2),
                failures=backoff.failures,
            )
        return result

    def _note_primary(self, backoff: _Backoff | None) -> None:
        """Log `redis_failover` when Sentinel's primary is another than before, with how long this daemon had none.

        "Without a primary" runs from this daemon's first request that failed to its first
        that succeeded on the new one (0 when no request came in between).
        """
        address = self.client.connection_pool.master_address
        if address is None or address == self.primary:
            return
        if self.primary is not None:
            log.warning(
                "redis_failover", url=self.url, old_primary=f"{self.primary[0]}:{self.primary[1]}",
                new_primary=f"{address[0]}:{address[1]}",
                without_primary_s=round(time.monotonic() - backoff.down_since, 2) if backoff is not None else 0.0,
            )  # fmt: skip
        self.primary = address

    def confirm_replicated(self, what: str, user_name: str | None = None) -> None:
        """Return once `[redis] replicas_acked` replicas hold all written so far; else StoreUnavailableError.

        On plain Redis and Sentinel one node holds everything, so one WAIT covers the
        model's and the user's keys; on a cluster the user's slot is confirmed on its own
        node too. A shortfall is not an outage: no backoff (scoring goes on), only this
        request fails, and its retry (a repeat to the ledgers) waits again.
        """
        wanted = self.config.redis.replicas_acked
        if not wanted:
            return
        marks = [self.mark]
        if self.cluster and user_name is not None:
            marks.append(self.config.redis.prefix + user_hash_tag(user_name) + ":" + REPLICATED_MARK)
        for mark in marks:
            acked = self.call(
                f"{what} (waiting for replicas)", functools.partial(self._wait, mark, wanted), where=self.node_of(mark)
            )
            if acked < wanted:
                if not self.replicas_short:
                    log.error("redis_replicas_behind", url=self.url, replicas_acked=acked, wanted=wanted,
                              action="answering temporary failures for trainings")  # fmt: skip
                self.replicas_short = True
                raise StoreUnavailableError(
                    f"Redis at {self.url}: {acked} of {wanted} replicas confirmed within "
                    f"{self.config.redis.replica_timeout_s} s; {what} not acknowledged, retry it"
                )
        if self.replicas_short:
            log.info("redis_replicas_caught_up", url=self.url, wanted=wanted)
            self.replicas_short = False

    def check_replicas_connected(self, what: str) -> None:
        """After a WAIT came short: refuse at once, before writing, while fewer replicas than wanted are connected.

        Spares every training the replica_timeout_s wait (the daemon's loop waits with it)
        while a replica is down; one INFO per training, only in that state.
        """
        if not self.replicas_short:
            return
        wanted = self.config.redis.replicas_acked

        def connected() -> int:
            if self.cluster:
                info = self.client.info("replication", target_nodes=self.client.get_node_from_key(self.mark))
            else:
                info = self.client.info("replication")
            return int(info.get("connected_slaves", 0))

        have = self.call(f"{what} (counting replicas)", connected, where=self.node_of(self.mark))
        if have < wanted:
            raise StoreUnavailableError(
                f"Redis at {self.url}: {have} of {wanted} replicas connected; {what} not done, retry it"
            )

    def _wait(self, mark: str, wanted: int) -> int:
        """SET the mark and WAIT on one connection (WAIT counts the replicas that hold that connection's last write)."""
        client = self.client
        if self.cluster:
            client = self.client.get_redis_connection(self.client.get_node_from_key(mark))
        pipe = client.pipeline(transaction=False)
        pipe.set(mark, 1, px=REPLICATED_MARK_TTL_MS)
        pipe.execute_command("WAIT", wanted, int(self.config.redis.replica_timeout_s * 1000))
        try:
            return int(pipe.execute()[1])
        except MovedError as e:  # the slot failed over: read the map again; the retry goes to its new master
            with contextlib.suppress(*UNAVAILABLE):
                self.client.nodes_manager.initialize()
            raise ClusterError(f"slot moved: {e}") from None

    def node_of(self, key: str) -> str:
        """Where a key's calls back off: "model" on plain Redis, else the node that holds its slot (or the key itself)."""
        if not self.cluster:
            return "model"
        try:
            return str(self.client.get_node_from_key(key).name)
        except UNAVAILABLE:
            return key

    def check_hash_bits(self) -> None:
        """Claim the model's bucket space and count settings, or refuse one built with another `model.hash_bits` or families."""
        model = self.config.model
        bits = model.hash_bits
        mine = json.dumps(count_settings(model), sort_keys=True)
        defaults = json.dumps(UNRECORDED_COUNT_SETTINGS, sort_keys=True)
        stored, settings = self.call(
            "the start-up check", lambda: self._claim(keys=[self.totals], args=[bits, mine, defaults])
        )
        where = f"Redis at {self.url} (prefix {self.config.redis.prefix!r})"
        if int(stored) != bits:
            raise CorruptStateError(
                f"{where} holds a model with model.hash_bits = {stored.decode()}, the config says {bits}; "
                "set it back, or use another [redis] prefix"
            )
        stored_settings = json.loads(settings)
        check_count_settings(stored_settings, model, where, "use another [redis] prefix")
        if stored_settings != json.loads(mine):  # only the mail-evidence families differ: record the switch
            self._switch_evidence(stored_settings, mine, where)

    def _switch_evidence(self, stored_settings: dict[str, Any], mine: str, where: str) -> None:
        """The config switched a mail-evidence family on or off: the model keeps its counts and says so from now.

        Not atomic with other daemons' starts: two with different families flip the
        setting each time one starts, which changes no count (each makes its own tokens).
        """
        seq, kept = self.call("the start-up check", lambda: self.client.hmget(self.totals, ["seq", "evidence_since"]))
        evidence = EvidenceHistory.restore(json.loads(kept) if kept else {}, evidence_in(stored_settings))
        first = int(seq or 0) + 1
        on, off = evidence.follow(evidence_families(self.config.model), first, time.time())
        self.call(
            "the start-up check",
            lambda: self.client.hset(
                self.totals, mapping={"count_settings": mine, "evidence_since": json.dumps(evidence.export())}
            ),
        )
        log_evidence_switch(on, off, first, where)

    def evidence_now(self) -> EvidenceHistory:
        """Since when the model learns each mail-evidence family on, as Redis holds it now."""
        settings, kept = self.call(
            "reading the totals", lambda: self.client.hmget(self.totals, ["count_settings", "evidence_since"])
        )
        families = evidence_in(json.loads(settings)) if settings else ()
        return EvidenceHistory.restore(json.loads(kept) if kept else {}, families)

    def close(self) -> None:
        self.client.close()

    def info_memory(self) -> dict[str, Any]:
        """INFO memory of the Redis (on a cluster: of the node that holds the model's slot)."""
        if not self.cluster:
            return self.call("reading INFO", lambda: self.client.info("memory"))
        return self.call(
            "reading INFO", lambda: self.client.info("memory", target_nodes=self.client.get_node_from_key(self.totals))
        )

    # ---------------------------------------------------------- reads

    def fetch(self, ids: np.ndarray) -> Fetched:
        """The buckets' counts (2, n) and the class totals, in one atomic round trip (a read-only script)."""
        text = " ".join(map(str, ids.tolist()))
        return _fetched(self.call("scoring", lambda: self._score(keys=self.keys[:3], args=[text])), len(ids))

    def fetch_beside(self, ids: np.ndarray, key: str, fields: list[str]) -> tuple[Fetched, list[Any]]:
        """`fetch`, and an HMGET of `key`'s `fields`, in one round trip (a pipeline): for a key on the
        model's server, so on plain Redis or Sentinel's primary, not a cluster (where a user's slot is
        on a node of its own, whose failure must stop only that user's mail).

        The HMGET is not atomic with the script: as two requests, one after the other.
        """
        text = " ".join(map(str, ids.tolist()))

        def read() -> list[Any]:
            return self._score.pipelined([(self.keys[:3], [text])], lambda pipe: pipe.hmget(key, fields))

        reply, values = self.call("scoring", read)
        return _fetched(reply, len(ids)), values

    def totals_now(self) -> dict[str, int]:
        values = self.call("reading the totals", lambda: self.client.hmget(self.totals, [*_TOTAL_FIELDS, "seq"]))
        return dict(zip([*_TOTAL_FIELDS, "seq"], (int(v) if v else 0 for v in values), strict=True))

    # ---------------------------------------------------------- training

    def train(
        self, op: str, analyzed: Analyzed, label: Label | None, user: bool, source: str,
        ledger_key: bytes | None = None, user_name: str | None = None,
    ) -> SharedTraining:  # fmt: skip
        """Run the training script on the model's slot. Acknowledged only once Redis has applied it.

        With `user_name`, `ledger_key` is the (user, message) entry and the reply says
        what the user's layer has yet to apply (spamd.store.redis.users does it).
        """
        features = analyzed.features
        stored = MultinomialNB.stored_counts(features.counts, self.config.model.stored_counts)
        args = [
            op, analyzed.key if ledger_key is None else ledger_key, 0 if label is None else int(label), int(user),
            source, repr(time.time()), self.config.store.ledger_max_entries, self.config.redis.events_max,
            user_name or "", self.config.users.max_users, *features.ids.tolist(), *stored.tolist(),
        ]  # fmt: skip
        outcome, seq, apply, previous, value, expired = self.call(
            "training", lambda: self._train(keys=self.keys, args=args)
        )
        return SharedTraining(
            outcome.decode(),
            int(seq),
            bool(apply),
            None if int(previous) < 0 else Label(int(previous)),
            value.decode() if isinstance(value, bytes) else str(value),
            [bytes(n).decode() for n in expired],
        )

    # ---------------------------------------------------------- whole state

    def load(self) -> tuple[MultinomialNB, Ledger, int]:
        """The whole model and ledger as embedded objects (for export and tests); one atomic read."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.ham)
            pipe.hgetall(self.spam)
            pipe.hgetall(self.totals)
            pipe.zrange(self.order, 0, -1)
            pipe.hgetall(self.ledger)
            return pipe.execute()

        ham, spam, totals, order, entries = self.call("reading the whole model", read)
        model = MultinomialNB(self.config.model)
        for label, row in ((Label.HAM, ham), (Label.SPAM, spam)):
            if row:
                ids = np.fromiter((int(k) for k in row), dtype=np.int64, count=len(row))
                model.counts[label, ids] = np.fromiter((int(v) for v in row.values()), dtype=np.uint32, count=len(row))
        t = {k.decode(): int(v) for k, v in totals.items() if k not in _NOT_COUNTS}  # checked at start
        model.token_totals[:] = [t.get("tokens:0", 0), t.get("tokens:1", 0)]
        model.doc_totals[:] = [t.get("docs:0", 0), t.get("docs:1", 0)]
        model.distinct = t.get("distinct", 0)
        ledger = Ledger(self.config.store.ledger_max_entries)
        for key in order:  # oldest first, as the embedded ledger keeps them
            value = entries.get(key)
            if (
                value is not None and int(value) < UNTRAINED
            ):  # (an untrained entry whose layer is not yet told: not held)
                ledger.set(bytes(key), Label(int(value) & 1), bool(int(value) & 2))
        return model, ledger, t.get("seq", 0)

    def replace(self, model: MultinomialNB, ledger: Ledger, seq: int, evidence: EvidenceHistory | None = None) -> None:
        """Make Redis hold exactly this model and ledger, in one MULTI/EXEC (other daemons see all or nothing)."""
        chunk = 10_000

        def write() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self.ham, self.spam, self.ledger, self.order, self.users)
            for label, key in ((Label.HAM, self.ham), (Label.SPAM, self.spam)):
                row = model.counts[label]
                ids = np.flatnonzero(row)
                for start in range(0, len(ids), chunk):
                    part = ids[start : start + chunk]
                    pipe.hset(key, mapping=dict(zip(part.tolist(), row[part].tolist(), strict=True)))
            pipe.hset(self.totals, mapping={
                "tokens:0": int(model.token_totals[0]), "tokens:1": int(model.token_totals[1]),
                "docs:0": int(model.doc_totals[0]), "docs:1": int(model.doc_totals[1]),
                "distinct": int(model.distinct), "seq": seq, "hash_bits": model.config.hash_bits,
                "count_settings": json.dumps(count_settings(model.config), sort_keys=True),
                "evidence_since": json.dumps((evidence or EvidenceHistory()).export()),
            })  # fmt: skip
            items = list(ledger.as_dict().items())
            for start in range(0, len(items), chunk):
                entries = items[start : start + chunk]
                pipe.hset(self.ledger, mapping=dict(entries))
                # Recency as in the embedded ledger, oldest first, and all below any seq a
                # training will write from now on (scores < 0), so new entries are the newest.
                pipe.zadd(self.order, {k: start + i - len(items) for i, (k, _) in enumerate(entries)})
            pipe.execute()

        self.call("the import", write)


# SCORE_LUA's reply made arrays: the buckets' counts (2, n), token totals, document totals, distinct buckets.
Fetched = tuple[np.ndarray, np.ndarray, np.ndarray, int]


def _fetched(reply: bytes, n: int) -> Fetched:
    values = np.array(reply.split(), dtype=np.int64)
    return (
        values[: 2 * n].reshape(2, n).astype(np.uint32),
        values[2 * n : 2 * n + 2],
        values[2 * n + 2 : 2 * n + 4],
        int(values[-1]),
    )
