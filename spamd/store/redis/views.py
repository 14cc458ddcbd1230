"""The Engine's model, ledger and trainer over RedisState: every read from Redis, every training one script.

Holds no counts of its own: a training through any daemon is in the next score here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from spamd.learning.classifier import Analyzed, score_as_delivered
from spamd.learning.outcomes import Outcome, left_unlearned
from spamd.model.bayes import (
    Contribution,
    Features,
    Label,
    MultinomialNB,
    Score,
    explain_counts,
    features_of,
    score_counts,
    verdict_of,
)
from spamd.people.users import check_user_name, user_ledger_key
from spamd.store.redis.state import UNTRAINED, Fetched, RedisState
from spamd.store.redis.users import RedisUsers


class RedisModel:
    """The model as the Engine and Classifier use it (score, explain, totals), read from Redis on each call.

    Does not learn: training goes through RedisTrainer's script. Scores with the
    embedded model's own functions (spamd.model.bayes.score_counts), so the numbers are the same.
    """

    def __init__(self, state: RedisState, config: Any):
        self.state = state
        self.config = config  # ModelConfig; Engine.reconfigure replaces it

    def score(self, features: Features) -> Score:
        if len(features) == 0:
            return verdict_of(self.config, 0.0)
        return self._scored(features, self.state.fetch(features.ids))

    def score_beside(self, features: Features, key: str, fields: list[str]) -> tuple[Score, list[Any]]:
        """`score`, and the values of `key`'s hash `fields`, in one round trip (RedisState.fetch_beside:
        a key on the model's server). A user's senders' counts so came with their own round trip
        after the model's: scripts/costs/user_scoring_speed.py --redis, a user's step 1.19-1.33x the
        shared model's (docs/users.md)."""
        if len(features) == 0:
            return verdict_of(self.config, 0.0), self.state.call(
                "scoring", lambda: self.state.client.hmget(key, fields)
            )
        fetched, values = self.state.fetch_beside(features.ids, key, fields)
        return self._scored(features, fetched), values

    def _scored(self, features: Features, fetched: Fetched) -> Score:
        counts, token_totals, doc_totals, distinct = fetched
        if not (doc_totals[0] and doc_totals[1]):
            return verdict_of(self.config, 0.0)
        return score_counts(
            self.config, counts, token_totals, distinct, features.weights, doc_totals, kinds=features.kinds
        )

    def explain(
        self, tokens: list[str], limit: int = 20, weights: np.ndarray | None = None, kinds: np.ndarray | None = None
    ) -> tuple[Score, list[Contribution]]:
        features = features_of(tokens, self.config, weights, kinds)
        counts, token_totals, doc_totals, distinct = self.state.fetch(features.ids)
        return explain_counts(self.config, tokens, features, counts, token_totals, doc_totals, distinct, limit)

    @property
    def doc_totals(self) -> np.ndarray:
        t = self.state.totals_now()
        return np.array([t["docs:0"], t["docs:1"]], dtype=np.int64)

    @property
    def token_totals(self) -> np.ndarray:
        t = self.state.totals_now()
        return np.array([t["tokens:0"], t["tokens:1"]], dtype=np.int64)

    @property
    def distinct(self) -> int:
        return self.state.totals_now()["distinct"]

    @property
    def memory_bytes(self) -> int:
        return 0  # held by Redis (see its INFO memory), not by this process

    def state_equals(self, other: MultinomialNB) -> bool:
        return self.state.load()[0].state_equals(other)


class RedisLedger:
    """The ledger as the trainer's callers read it (get, len, counts); the script alone writes it."""

    def __init__(self, state: RedisState):
        self.state = state

    def get(self, key: bytes) -> tuple[Label, bool] | None:
        value = self.state.call("reading the ledger", lambda: self.state.client.hget(self.state.ledger, key))
        if value is None or int(value) >= UNTRAINED:
            return None
        v = int(value)
        return Label(v & 1), bool(v & 2)

    def __len__(self) -> int:
        return int(self.state.call("reading the ledger", lambda: self.state.client.hlen(self.state.ledger)))

    def counts(self) -> dict[str, int]:
        return self.state.load()[1].counts()

    def as_dict(self) -> dict[bytes, int]:
        return self.state.load()[1].as_dict()


class RedisTrainer:
    """spamd.engine.trainer.Trainer's interface, each training one atomic script in Redis (learned once, across daemons).

    Keeps no ledger of its own: every daemon on the same Redis sees the same one.
    """

    def __init__(self, state: RedisState, model: RedisModel):
        self.state = state
        self.model = model
        self.ledger = RedisLedger(state)
        self.seq = 0  # the seq of this process's last committed training
        # (source, outcome) -> count since start, for `spamctl stats` (<p>outcomes has every daemon's).
        self.events: Counter[tuple[str, str]] = Counter()
        self.users = RedisUsers(state, state.config.users)  # each user's layer on the user's slot

    def train(
        self, analyzed: Analyzed, label: Label, source: str, user: bool = True, user_name: str | None = None
    ) -> Outcome:

        def now_if_new() -> Score | None:
            if self.label_of(analyzed.key, user_name) is not None:
                return None  # trained already: the script decides (repeat, correction)
            if user_name is not None:
                check_user_name(user_name)  # it names Redis keys
            return score_as_delivered(self.model, self.users, self.state.config.users, analyzed.features, user_name)

        if left_unlearned(self.model.config, label, source, now_if_new):
            self.events[(source, Outcome.CONFIDENT.value)] += (
                1  # thick threshold, as spamd.engine.trainer.Trainer (this daemon's count)
            )
            return Outcome.CONFIDENT
        return self._run("train", analyzed, label, user, source, user_name)

    def untrain(self, analyzed: Analyzed, source: str, user_name: str | None = None) -> Outcome:
        return self._run("untrain", analyzed, None, True, source, user_name)

    def label_of(self, key: bytes, user_name: str | None = None) -> Label | None:
        known = self.ledger.get(user_ledger_key(user_name, key))
        return None if known is None else known[0]

    def _run(
        self, op: str, analyzed: Analyzed, label: Label | None, user: bool, source: str, user_name: str | None
    ) -> Outcome:
        """The shared script, then with a user their layer's (spamd.store.redis.users: the order and why)."""
        if user_name is not None:
            check_user_name(user_name)  # it names Redis keys
        self.state.check_replicas_connected("training")
        key = user_ledger_key(user_name, analyzed.key)
        shared = self.state.train(op, analyzed, label, user, source, key, user_name)
        if shared.seq:
            self.seq = shared.seq
        if user_name is not None:
            self.users.finish(user_name, analyzed, label, key, shared)  # StoreUnavailableError: not acknowledged
        # Even a repeat waits: it may be the retry of one whose wait failed.
        self.state.confirm_replicated("training", user_name)
        self.events[(source, shared.outcome)] += 1
        return Outcome(shared.outcome)
