"""What spamd learned from each person's move (spamd/people/learned.py), in Redis: every daemon's records in one place.

    <prefix>{u:NAME}:learned   list of JSON records, newest first, the last PER_USER_IN_REDIS (the user's slot)
    <prefix>learned            the same for trainings that name no user, the last UNNAMED_IN_REDIS

Each list expires KEEP_S after its last record. A record is written after its training is
acknowledged by the store: a failure is logged, never raised (the training stands).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import structlog

from spamd.errors import StoreUnavailableError
from spamd.people.learned import PER_USER_IN_REDIS, WHAT, matching
from spamd.store.redis.connect import user_hash_tag
from spamd.store.redis.state import RedisState

log = structlog.get_logger()

UNNAMED_IN_REDIS = 1_000
KEEP_S = 30 * 86400


class RedisLearned:
    """spamd.people.learned.LearningRecords's interface over Redis; `counts` are this process's."""

    def __init__(self, state: RedisState):
        self.state = state
        self.prefix = state.config.redis.prefix
        self.counts: Counter[str] = Counter()

    def _key(self, user: str | None) -> str:
        return self.prefix + ("learned" if user is None else user_hash_tag(user) + ":learned")

    def add(self, record: dict[str, Any]) -> None:
        self.counts[record["what"]] += 1
        key = self._key(record["user"])
        cap = UNNAMED_IN_REDIS if record["user"] is None else PER_USER_IN_REDIS

        def write() -> None:
            pipe = self.state.client.pipeline(transaction=True)
            pipe.lpush(key, json.dumps({k: v for k, v in record.items() if k != "why"}, separators=(",", ":")))
            pipe.ltrim(key, 0, cap - 1)
            pipe.expire(key, KEEP_S)
            pipe.execute()

        try:
            self.state.call(f"keeping a learning record of user {record['user']}", write, where=self.state.node_of(key))
        except StoreUnavailableError as e:
            log.warning("learning_record_not_kept", user_name=record["user"], what=record["what"], error=str(e))

    def find(
        self, user: str | None = None, key: bytes | None = None, message_id: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The latest records of `user` (None: of trainings that named nobody), for the message `key` or `message_id`."""
        where = self._key(user)
        raw = self.state.call(
            "reading learning records", lambda: self.state.client.lrange(where, 0, -1), where=self.state.node_of(where)
        )
        return matching((explained(json.loads(item)) for item in raw), key, message_id, limit)


def explained(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record with its `why`, which is not stored: it follows from `what`."""
    record["why"] = WHAT.get(record["what"], "")
    return record
