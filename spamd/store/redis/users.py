"""Per-user layers in Redis: each user's keys on the user's own slot, trained by a second script, read to score.

Keys of one user (all with the hash tag `{u:NAME}`, so one slot; users spread over the
nodes of a cluster):

    <prefix>{u:NAME}:ham, :spam   hashes bucket id -> the user's stored count (sparse)
    <prefix>{u:NAME}:totals       hash: tokens:0/1, docs:0/1, distinct, trained_at
    <prefix>{u:NAME}:rank         sorted set: each bucket's total count (for max_tokens; from the cap on)
    <prefix>{u:NAME}:ledger       hash message key -> the label this layer holds

and, on the model's slot, `<p>users`: a sorted set user -> seq of their last change,
for [users] max_users and `spamctl users`.

A training that names a user is two scripts, in this order (a cluster runs a script
on one slot only, and the model and the user are on two):

1. TRAIN_LUA on the model's slot, ledger key `user_ledger_key(user, message)` (as the
   embedded store's ledger): the shared counts change once per (user, message), and
   the entry records that the user's layer has yet to apply the change ("pending").
2. USER_LUA on the user's slot: reads the label its own ledger says the layer holds
   for the message, unlearns it and learns the new one, unless it already holds it.
3. ACK_LUA on the model's slot: the entry is no longer pending.

The shared step goes first because it decides (learned, corrected, repeat, declined)
and is what every other user's score reads. If the user's node fails after step 1,
the request fails (StoreUnavailableError: 451, tempfail, exit 75) and the change stays
pending; the client's retry finds the shared entry already there (a repeat, counted
once) but pending, and runs step 2 again, which its own ledger makes apply exactly
once. So retries converge whichever step failed, and nothing is acknowledged before
both slots hold it. (Two different trainings of one user's same message racing through
two daemons may leave the layer with either label; the shared counts stay exact.)
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import structlog

from spamd.config import UsersConfig
from spamd.errors import StoreUnavailableError
from spamd.learning.classifier import Analyzed
from spamd.model.bayes import Contribution, Features, Label, MultinomialNB, Score, features_of
from spamd.people.users import (
    SharedCounts,
    UserLayer,
    UserLayers,
    explain_counts_for_user,
    score_counts_for_user,
    scoring_table,
)
from spamd.store.redis.connect import Script, user_keys
from spamd.store.redis.listing import list_user_columns, list_users
from spamd.store.redis.scripts import ACK_LUA, FORGET_LUA, LAYER_SUMMARY_LUA, SCORE_LUA, USER_LUA
from spamd.store.redis.state import RedisState, SharedTraining
from spamd.store.redis.summary import summary_key

log = structlog.get_logger()


class RedisUsers:
    """The users' layers held in Redis: apply a training's change, score with a layer, list, export and import.

    Holds nothing of a layer between calls: a score reads the user's counts of the
    message's tokens (one round trip on the user's slot) as they are now.
    """

    def __init__(self, state: RedisState, config: UsersConfig):
        self.state = state
        self.config = config  # [users]; Engine.reconfigure replaces it
        self.prefix = state.config.redis.prefix
        self.expired = 0  # layers this process deleted for [users] max_users
        self._user = Script(state.client, USER_LUA)
        self._score = Script(state.client, SCORE_LUA)
        self._ack = Script(state.client, ACK_LUA)
        self._forget_layer = Script(state.client, FORGET_LUA)
        self._layer_summary = Script(state.client, LAYER_SUMMARY_LUA)

    def keys(self, user_name: str) -> list[str]:
        return user_keys(self.prefix, user_name)

    def summary_key(self, user_name: str) -> str:
        """The hash of the user's summary line (spamd.store.redis.summary), on the user's slot."""
        return summary_key(self.prefix, self.keys(user_name)[0], self.state.cluster)

    def _call(self, user_name: str, what: str, fn: Any) -> Any:
        keys = self.keys(user_name)
        return self.state.call(f"{what} of user {user_name}", fn, where=self.state.node_of(keys[0]))

    # ---------------------------------------------------------- training

    def finish(
        self, user_name: str, analyzed: Analyzed, label: Label | None, ledger_key: bytes, shared: SharedTraining
    ) -> None:
        """Steps 2 and 3 of a training (module docstring); StoreUnavailableError if the user's node is down."""
        self._forget(shared.expired)
        if not shared.apply:
            return
        if not self.config.token_moves:
            # A layer that does not score is not built. The change stays pending, not acknowledged:
            # a daemon with token_moves on (a mixed set-up, or this one after a restart) applies it.
            return
        stored = MultinomialNB.stored_counts(analyzed.features.counts, self.state.config.model.stored_counts)
        args = [
            analyzed.key, "" if label is None else int(label), -1 if shared.previous is None else int(shared.previous),
            self.config.max_tokens, repr(time.time()), user_name,
            *analyzed.features.ids.tolist(), *stored.tolist(),
        ]  # fmt: skip
        keys = [*self.keys(user_name), self.summary_key(user_name)]
        result = self._call(user_name, "training the layer", lambda: self._user(keys=keys, args=args))
        self.state.call(
            "acknowledging a user's training",
            lambda: self._ack(keys=[self.state.ledger, self.state.order], args=[ledger_key, shared.ledger_value]),
        )
        if result == b"gone":  # nothing trained any more: no layer, not counted towards max_users
            self.state.call("forgetting a user", lambda: self.state.client.zrem(self.state.users, user_name))

    def _forget(self, names: list[str]) -> None:
        """Delete the layers of users past max_users (they left `<p>users` in the training script)."""
        for name in names:
            try:
                self._call(name, "expiring the layer", functools.partial(self._drop, name))
                self.expired += 1
            except StoreUnavailableError as e:
                # Not in <p>users any more: its keys stay until the user trains and expires again.
                log.warning("user_layer_expiry_failed", user_name=name, error=str(e))

    def _drop(self, name: str) -> None:
        """Delete the user's layer keys and its part of their summary line, in one script on their slot."""
        self._forget_layer(keys=[*self.keys(name), self.summary_key(name)], args=[name])

    # ---------------------------------------------------------- scoring

    def fetch(self, user_name: str, ids: np.ndarray) -> tuple[UserLayer, int]:
        """The user's layer restricted to `ids` (sorted) and the number of tokens of the whole layer; one round trip."""
        text = " ".join(map(str, ids.tolist()))
        keys = self.keys(user_name)[:3]
        reply = self._call(user_name, "scoring with the layer", lambda: self._score(keys=keys, args=[text]))
        values = np.array(reply.split(), dtype=np.int64)
        n = len(ids)
        counts = values[: 2 * n].reshape(2, n)
        held = (counts[0] | counts[1]) != 0
        layer = UserLayer()
        layer.ids = ids[held].astype(np.uint32)
        layer.counts = counts[:, held].astype(np.uint32)
        layer.token_totals[:] = values[2 * n : 2 * n + 2]
        layer.doc_totals[:] = values[2 * n + 2 : 2 * n + 4]
        return layer, int(values[-1])

    def _joined(
        self, model: Any, user_name: str, features: Features
    ) -> tuple[SharedCounts, UserLayer, np.ndarray | None]:
        counts, token_totals, doc_totals, distinct = model.state.fetch(features.ids)
        shared = SharedCounts(model.config, counts, token_totals, doc_totals, distinct)
        layer, layer_tokens = self.fetch(user_name, features.ids)
        return shared, layer, scoring_table(layer, model.config, self.config.backoff, layer_tokens)

    def score_for(self, model: Any, user_name: str, features: Features) -> Score:
        """`user_name`'s score (spamd.people.users.score_for_user's rule): the shared counts and theirs of the message's tokens."""
        if len(features) == 0:
            return model.score(features)
        return score_counts_for_user(*self._joined(model, user_name, features), features)

    def explain_for(
        self, model: Any, user_name: str, tokens: list[str], limit: int, weights: np.ndarray | None = None,
        kinds: np.ndarray | None = None,
    ) -> tuple[Score, list[Contribution]]:  # fmt: skip
        features = features_of(tokens, model.config, weights, kinds)
        if len(features) == 0:
            return model.explain(tokens, limit, weights, kinds)
        return explain_counts_for_user(*self._joined(model, user_name, features), tokens, features, limit)

    # ---------------------------------------------------------- listing

    def names(self) -> list[str]:
        """The users with a layer, least recently trained first."""
        return [
            bytes(n).decode()
            for n in self.state.call("listing users", lambda: self.state.client.zrange(self.state.users, 0, -1))
        ]

    def __len__(self) -> int:
        return int(self.state.call("counting users", lambda: self.state.client.zcard(self.state.users)))

    @property
    def memory_bytes(self) -> None:
        return None  # held by Redis (its INFO memory, MEMORY USAGE of a user's keys), not by this process

    table_bytes = 0  # no scoring tables kept: each score reads the user's counts of its tokens

    def summary(self) -> list[dict[str, Any]]:
        """Per user with a layer: trainings, tokens and estimated bytes (spamd.store.redis.listing), by name."""
        layered = set(self.names())
        return [
            {key: row[key] for key in ("user", "trained_ham", "trained_spam", "tokens", "bytes")}
            for row in list_users(self.state, self.config.sender_moves, self.config.sender_share)
            if row["user"] in layered
        ]

    def listing(self, moves: int, share: float, memory: bool = False) -> dict[str, list[Any]]:
        """`spamctl users`' columns: users with a layer or with senders their moves turned, by name (one read of the
        users' summary lines); bytes estimated from the counts, or their keys' MEMORY USAGE with `memory`."""
        return list_user_columns(self.state, moves, share, memory)

    # ---------------------------------------------------------- export / import

    def load(self) -> UserLayers:
        """Every layer as the embedded store holds them (for export): ids sorted, last_seq their last change's seq."""
        users = UserLayers(self.config)
        order = self.state.call(
            "listing users", lambda: self.state.client.zrange(self.state.users, 0, -1, withscores=True)
        )
        for raw_name, seq in order:
            name = bytes(raw_name).decode()
            keys = self.keys(name)

            def read(keys: list[str] = keys) -> list[Any]:
                return [
                    self.state.client.hgetall(keys[0]),
                    self.state.client.hgetall(keys[1]),
                    self.state.client.hgetall(keys[2]),
                ]

            ham, spam, totals = self._call(name, "reading the layer", read)
            ids = np.array(sorted({int(k) for k in ham} | {int(k) for k in spam}), dtype=np.uint32)
            if not len(ids) and not totals:
                continue
            layer = UserLayer()
            layer.ids = ids
            layer.counts = np.array([[int(row.get(str(i).encode(), 0)) for i in ids.tolist()] for row in (ham, spam)],
                                    dtype=np.uint32).reshape(2, len(ids))  # fmt: skip
            t = {k.decode(): int(v) for k, v in totals.items() if k != b"trained_at"}
            layer.token_totals[:] = [t.get("tokens:0", 0), t.get("tokens:1", 0)]
            layer.doc_totals[:] = [t.get("docs:0", 0), t.get("docs:1", 0)]
            layer.last_seq = int(seq)
            users.layers[name] = layer
        return users

    def replace(self, imported: UserLayers, before: list[str]) -> None:
        """Make Redis hold exactly these layers: every user's keys written on their own slot, then `<p>users`.

        Not one transaction across slots: a failure midway leaves some users imported
        (the import then fails with StoreUnavailableError; run it again). `before`: the
        users listed before, whose keys go unless imported. The layers' own ledgers are empty afterwards: the (user, message) entries of the model's
        ledger say what was trained, and a correction unlearns from there.
        """
        for name in before:  # the users listed before the import (the model's step emptied the list)
            if name not in imported.layers:
                self._call(name, "deleting the layer", functools.partial(self._drop, name))
        for name, layer in imported.layers.items():
            keys = self.keys(name)

            def write(keys: list[str] = keys, layer: UserLayer = layer, name: str = name) -> None:
                pipe = self.state.client.pipeline(transaction=True)
                pipe.delete(*keys)
                ids = layer.ids.tolist()
                for label, key in ((Label.HAM, keys[0]), (Label.SPAM, keys[1])):
                    row = {i: c for i, c in zip(ids, layer.counts[label].tolist(), strict=True) if c}
                    if row:
                        pipe.hset(key, mapping=row)
                pipe.hset(keys[2], mapping={
                    "tokens:0": int(layer.token_totals[0]), "tokens:1": int(layer.token_totals[1]),
                    "docs:0": int(layer.doc_totals[0]), "docs:1": int(layer.doc_totals[1]), "distinct": len(layer),
                })  # fmt: skip
                pipe.execute()  # (no :rank: the layer's script builds it when the layer passes max_tokens)
                self._layer_summary(keys=[self.summary_key(name)], args=[
                    name, int(layer.doc_totals[0]), int(layer.doc_totals[1]), len(layer)])  # fmt: skip

            self._call(name, "importing the layer", write)
        # Their recency as exported, below any seq a training will write from now on.
        order = sorted(imported.layers, key=lambda name: (imported.layers[name].last_seq, name))

        def index() -> None:
            pipe = self.state.client.pipeline(transaction=True)
            pipe.delete(self.state.users)
            if order:
                pipe.zadd(self.state.users, {name: i - len(order) for i, name in enumerate(order)})
            pipe.execute()

        self.state.call("importing the users", index)
