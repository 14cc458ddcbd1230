"""RedisStore (what the Engine asks of a store besides training) and open_redis, which builds the Engine's parts.

No snapshots or journal: Redis is the store; export and import go through RedisState.
"""

from __future__ import annotations

import time
from typing import Any

from spamd.config import Config
from spamd.errors import CorruptStateError, StoreError, StoreUnavailableError
from spamd.model.bayes import Label
from spamd.model.families import evidence_families
from spamd.store.local import Recovery, Store, log_evidence_switch
from spamd.store.redis.senders import RedisSenders
from spamd.store.redis.state import RedisState
from spamd.store.redis.users import RedisUsers
from spamd.store.redis.views import RedisModel, RedisTrainer
from spamd.store.snapshot import decode_snapshot, encode_snapshot


class RedisStore:
    """What the Engine asks of a store, for the Redis one: the local lock, no snapshots, export/import.

    Holds the state directory's lock only so that two processes do not share one
    data directory (its Maildir index and control socket); the model is in Redis.
    """

    keeps_snapshots = False

    def __init__(self, config: Config, state: RedisState):
        self.config = config
        self.state = state
        self.local = Store(config.state_dir, config.model, config.store)
        self.state_dir = config.state_dir
        self.last_snapshot_seq = 0
        self.last_snapshot_time: float | None = None
        self.journal_records = 0
        self.journal_bytes = 0
        self.users: RedisUsers | None = None  # the trainer's, set by open_redis

    def lock(self) -> None:
        self.local.lock()

    def close(self) -> None:
        self.local.close()
        self.state.close()

    def export_snapshot(self, counters: dict[str, int]) -> bytes:
        model, ledger, seq = self.state.load()
        users = self.users.load() if self.users is not None else None
        return encode_snapshot(model, ledger, seq, counters, None, users, self.state.evidence_now())

    def import_snapshot(self, data: bytes, where: str) -> dict[str, Any]:
        try:
            imported = decode_snapshot(
                data, self.config.model, self.config.store.ledger_max_entries, where, self.config.users
            )
        except CorruptStateError as e:
            raise StoreError(f"import refused, nothing changed: {e}") from None
        seq = self.state.totals_now()["seq"] + 1
        before = self.users.names() if self.users is not None else []
        evidence = imported.evidence  # the import's families, then this config's from here on
        on, off = evidence.follow(evidence_families(self.config.model), seq + 1, time.time())
        self.state.replace(imported.model, imported.ledger, seq, evidence)
        log_evidence_switch(on, off, seq + 1, where)
        if self.users is not None:
            self.users.replace(
                imported.users, before
            )  # each on its own slot, after the model (spamd.store.redis.users)
        return {
            "redis": self.state.url,
            "seq": seq,
            "trained_ham": int(imported.model.doc_totals[Label.HAM]),
            "trained_spam": int(imported.model.doc_totals[Label.SPAM]),
            "ledger_entries": len(imported.ledger),
            "users": len(imported.users),
        }

    def stats(self) -> dict[str, Any]:
        info = self.state.info_memory()
        outcomes = self.state.call("reading outcomes", lambda: self.state.client.hgetall(self.state.outcomes))
        return {
            "store": "redis",
            "redis_url": self.state.url,
            "redis_prefix": self.config.redis.prefix,
            "redis_used_memory_bytes": info.get("used_memory"),
            "training_events_all_daemons": {k.decode(): int(v) for k, v in outcomes.items()},
        }


def open_redis(config: Config) -> tuple[RedisStore, RedisTrainer, Recovery, None, None, RedisSenders]:
    """Connect, check the bucket space, lock the local data directory: the Engine's parts for Redis."""
    try:
        state = RedisState(config)  # a cluster client reads the slot map here
    except StoreUnavailableError as e:
        raise StoreUnavailableError(f"{e}; start Redis or check [redis] url / --redis") from None
    store = RedisStore(config, state)
    try:
        state.check_hash_bits()
    except StoreUnavailableError as e:
        state.close()
        raise StoreUnavailableError(f"{e}; start Redis or check [redis] url / --redis") from None
    except BaseException:
        state.close()
        raise
    try:
        store.lock()
    except BaseException:
        state.close()
        raise
    model = RedisModel(state, config.model)
    trainer = RedisTrainer(state, model)
    store.users = trainer.users
    trainer.seq = state.totals_now()["seq"]
    # The Engine's counters and live accuracy stay in this process; where users' mail goes is in Redis.
    return store, trainer, Recovery(), None, None, RedisSenders(state, config.users)
