"""Per-user layers over the shared model: what each person trained, kept sparse, and scoring with it.

A person's training teaches the shared model (everyone's spam teaches the others) and
that person's own layer: the tokens they trained, as sorted bucket ids and a (2, n)
count array (ham row, spam row), with their own class totals. A message for a user is
scored with the shared counts and that user's counts of the same tokens
(`score_for_user`); a user without a layer, or whose layer holds none of the
message's tokens, is scored by the shared model itself, to the last bit.

This module does not journal and keeps no ledger: spamd.training does, and
spamd.store.records applies each record to the shared model and the layer alike.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np

from spamd.config import UsersConfig
from spamd.errors import SpamdError
from spamd.model import (
    Contribution,
    Features,
    Label,
    MultinomialNB,
    Score,
    explain_counts,
    featurize,
    score_counts,
)

# Also the rule of a Maildir user's directory name, an IMAP login and spamc's -u: the
# name goes into log lines, ledger keys and (with Redis) key names, so it is checked
# before it names anything.
USER_NAME_RULE = "1 to 64 characters of A-Z a-z 0-9 . _ @ + -, not starting with '.'"
_USER_NAME = re.compile(r"[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,63}")


class UserNameError(SpamdError):
    """A user name that breaks USER_NAME_RULE."""


def check_user_name(name: object, where: str = "user") -> str:
    """`name` if it is a valid user name, else UserNameError naming `where`."""
    if not isinstance(name, str) or not _USER_NAME.fullmatch(name):
        raise UserNameError(f"{where} {name!r}: a user name is {USER_NAME_RULE}")
    return name


def is_user_name(name: object) -> bool:
    return isinstance(name, str) and _USER_NAME.fullmatch(name) is not None


def user_ledger_key(user_name: str | None, key: bytes) -> bytes:
    """The ledger key of a message trained by `user_name`: the message key itself when no user.

    16 bytes either way, so the ledger's format is unchanged; one entry per (user, message).
    """
    if user_name is None:
        return key
    return hashlib.blake2b(user_name.encode("utf-8") + b"\0" + key, digest_size=16, person=b"spamd-user-key").digest()


def recipients_user(recipients: list[str]) -> str | None:
    """The one user all these envelope recipients name (the local part, without a +extension), or None.

    Several recipients of different users, or a local part that is no valid user name:
    None, and the message is scored with the shared model alone (one copy, one verdict).
    """
    names = {r.rpartition("@")[0].split("+", 1)[0] if "@" in r else r.split("+", 1)[0] for r in recipients}
    if len(names) != 1:
        return None
    [name] = names
    return name if is_user_name(name) else None


class UserLayer:
    """One user's trained tokens: sorted uint32 ids, a (2, n) uint32 count array, class totals."""

    __slots__ = ("ids", "counts", "token_totals", "doc_totals", "last_seq")

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.uint32)
        self.counts = np.zeros((2, 0), dtype=np.uint32)
        self.token_totals = np.zeros(2, dtype=np.int64)
        self.doc_totals = np.zeros(2, dtype=np.int64)
        self.last_seq = 0  # the journal record that last trained it: expiry drops the coldest

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.counts.nbytes + self.token_totals.nbytes + self.doc_totals.nbytes

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted `ids`: their positions in this layer and which of them it holds."""
        pos = np.searchsorted(self.ids, ids)
        found = pos < len(self.ids)
        found[found] = self.ids[pos[found]] == ids[found]
        return pos, found

    def learn(self, features: Features, label: Label, max_tokens: int) -> None:
        stored = MultinomialNB.stored_counts(features.counts)
        pos, found = self.lookup(features.ids)
        self.counts[label, pos[found]] += stored[found]
        new = ~found
        if new.any():
            held = len(self.ids)
            ids = np.concatenate([self.ids, features.ids[new]])
            counts = np.zeros((2, len(ids)), dtype=np.uint32)
            counts[:, :held] = self.counts
            counts[label, held:] = stored[new]
            order = np.argsort(ids, kind="stable")
            self.ids, self.counts = ids[order], counts[:, order]
        self.token_totals[label] += int(stored.sum(dtype=np.int64))
        self.doc_totals[label] += 1
        if len(self.ids) > max_tokens:
            self._trim(max_tokens)

    def unlearn(self, features: Features, label: Label) -> bool:
        """Undo a learn; False (clamped at zero) if the counts were not all there (trimmed, expired)."""
        stored = MultinomialNB.stored_counts(features.counts)
        pos, found = self.lookup(features.ids)
        present = np.zeros(len(stored), dtype=np.uint32)
        present[found] = self.counts[label, pos[found]]
        exact = bool(found.all()) and bool(np.all(present >= stored)) and bool(self.doc_totals[label] > 0)
        removed = np.minimum(present, stored)
        self.counts[label, pos[found]] = present[found] - removed[found]
        self.token_totals[label] -= int(removed.sum(dtype=np.int64))
        self.doc_totals[label] = max(0, int(self.doc_totals[label]) - 1)
        keep = (self.counts[0] | self.counts[1]) != 0
        if not keep.all():
            self.ids, self.counts = self.ids[keep], self.counts[:, keep]
        return exact

    def _trim(self, max_tokens: int) -> None:
        """Keep the `max_tokens` tokens with the largest counts (ties: the larger id), deterministically on replay."""
        total = self.counts[0].astype(np.int64) + self.counts[1]
        drop = np.lexsort((self.ids, total))[: len(self.ids) - max_tokens]
        self.token_totals -= self.counts[:, drop].sum(axis=1, dtype=np.int64)
        keep = np.ones(len(self.ids), dtype=bool)
        keep[drop] = False
        self.ids, self.counts = self.ids[keep], self.counts[:, keep]

    def equals(self, other: "UserLayer") -> bool:
        return (
            np.array_equal(self.ids, other.ids)
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.token_totals, other.token_totals)
            and np.array_equal(self.doc_totals, other.doc_totals)
        )


class UserLayers:
    """Every user's layer, bounded by [users] max_users (the least recently trained go) and max_tokens."""

    def __init__(self, config: UsersConfig):
        self.config = config
        self.layers: dict[str, UserLayer] = {}
        self.expired = 0  # layers dropped for max_users since start

    def __len__(self) -> int:
        return len(self.layers)

    def get(self, user_name: str | None) -> UserLayer | None:
        return None if user_name is None else self.layers.get(user_name)

    def apply(self, user_name: str, features: Features, label: Label | None, previous: Label | None, seq: int) -> bool:
        """A record's change to its user's layer: unlearn `previous`, learn `label`. False if the unlearn clamped."""
        layer = self.layers.get(user_name)
        exact = True
        if layer is None:
            if label is None:
                return previous is None  # the layer expired: nothing left to unlearn from
            layer = self.layers[user_name] = UserLayer()
        if previous is not None:
            exact = layer.unlearn(features, previous)
        if label is not None:
            layer.learn(features, label, self.config.max_tokens)
        layer.last_seq = seq
        if not len(layer) and not layer.doc_totals.any():
            del self.layers[user_name]  # nothing trained any more: no layer, scored as the shared model
        elif len(self.layers) > self.config.max_users:
            self._expire()
        return exact

    def _expire(self) -> None:
        while len(self.layers) > self.config.max_users:
            coldest = min(self.layers, key=lambda name: (self.layers[name].last_seq, name))
            del self.layers[coldest]
            self.expired += 1

    def replace_with(self, other: "UserLayers") -> None:
        """Take over another's layers in place (import: holders of this object see them)."""
        self.layers = other.layers
        other.layers = {}

    @property
    def memory_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())

    def summary(self) -> list[dict[str, Any]]:
        """Per user: trainings, tokens and bytes held (for `spamctl users`), by name."""
        return [
            {
                "user": name,
                "trained_ham": int(layer.doc_totals[Label.HAM]),
                "trained_spam": int(layer.doc_totals[Label.SPAM]),
                "tokens": len(layer),
                "bytes": layer.nbytes,
            }
            for name, layer in sorted(self.layers.items())
        ]

    def equals(self, other: "UserLayers") -> bool:
        return self.layers.keys() == other.layers.keys() and all(
            layer.equals(other.layers[name]) for name, layer in self.layers.items()
        )

    # ------------------------------------------------------------ snapshot form

    def export(self) -> dict[str, Any]:
        """Name -> the layer as little-endian bytes (ids, counts row by row), totals and last_seq."""
        return {
            name: {
                "ids": layer.ids.astype("<u4").tobytes(),
                "counts": layer.counts.astype("<u4").tobytes(),
                "token_totals": [int(v) for v in layer.token_totals],
                "doc_totals": [int(v) for v in layer.doc_totals],
                "last_seq": layer.last_seq,
            }
            for name, layer in self.layers.items()
        }

    @classmethod
    def restore(cls, data: dict[str, Any], config: UsersConfig, n_buckets: int) -> "UserLayers":
        """From `export`; ValueError on anything malformed (the snapshot is then refused)."""
        users = cls(config)
        if not isinstance(data, dict):
            raise ValueError("users section is not a map")
        for name, d in data.items():
            if not is_user_name(name):
                raise ValueError(f"user name {name!r} breaks the rule")
            layer = UserLayer()
            layer.ids = np.frombuffer(d["ids"], dtype="<u4").astype(np.uint32)
            counts = np.frombuffer(d["counts"], dtype="<u4").astype(np.uint32)
            if len(counts) != 2 * len(layer.ids):
                raise ValueError(f"user {name}: ids and counts differ in length")
            if len(layer.ids) and (layer.ids.max() >= n_buckets or np.any(np.diff(layer.ids.astype(np.int64)) <= 0)):
                raise ValueError(f"user {name}: bucket ids out of range or not sorted")
            layer.counts = counts.reshape(2, len(layer.ids))
            layer.token_totals[:] = [int(v) for v in d["token_totals"]]
            layer.doc_totals[:] = [int(v) for v in d["doc_totals"]]
            layer.last_seq = int(d["last_seq"])
            users.layers[name] = layer
        return users


# ---------------------------------------------------------------- scoring with a layer


def combined_counts(model: MultinomialNB, layer: UserLayer, features: Features, weight: float) -> np.ndarray | None:
    """The shared counts of the message's buckets, each moved by the user's counts where the user and the others disagree.

    None if the layer holds none of the message's tokens. Per token only: the class
    totals stay the shared model's, so a token the user never trained keeps exactly its
    shared counts. For a token the user trained, `weight` times the user's counts are
    added, scaled by (a) how much of the token's evidence is other people's (the
    shared counts hold the user's own: a token only this user trained gains nothing)
    and (b) the cube of the difference between the user's spam share of it and the
    others' (0 where they agree, 1 where the user calls spam what everyone else keeps).
    """
    pos, found = layer.lookup(features.ids)
    if not found.any():
        return None
    counts = model.counts.take(features.ids, axis=1).astype(np.float64)
    mine = layer.counts[:, pos[found]].astype(np.float64)
    shared = counts[:, found]
    others = np.maximum(shared - mine, 0.0)  # what everyone else trained (a trimmed layer can hold less)
    n_mine, n_others = mine[0] + mine[1], others[0] + others[1]
    disagreement = np.abs((mine[1] + 1) / (n_mine + 2) - (others[1] + 1) / (n_others + 2))
    counts[:, found] = shared + mine * (weight * n_others / (n_others + n_mine) * disagreement**3)
    return counts


# How a user's counts join the shared ones, measured with scripts/multi_user_stream.py on
# spamassassin dealt at random to three users ("agree") and the same with the copies of
# one list (freshrpms, 397 messages) spam for one user and ham for another ("disagree").
# (1-ROCA)% overall, agree -> disagree; shared model alone 0.0529 -> 0.5515, the disputed
# user's copies filed her way 3% after 5 corrections.
#   the user's counts x20 added per token:                 0.0787 -> 0.1255, 94.2%
#   the same x5:                                           0.0623 -> 0.1083, 72.0%
#   backoff, log-odds interpolated by n_u / (n_u + 4):     0.0987 -> 0.1753, 100%
#   backoff only where the user's and the shared sign differ: 0.0559 -> 0.1459, 8.8%
#   x20 scaled by the others' share of the token:          0.0724 -> 0.1191, 84.8%
#   x300 scaled by that share and disagreement**3 (kept):  0.0642 -> 0.0884, 96.6%
# (disagreement**1 x50: 0.0684 -> 0.1047, 94.2%; **2 x100: 0.0628 -> 0.0894, 94.5%.)
# None keeps users who agree with everyone at the shared model's figure (per user 0.0386 /
# 0.0699 / 0.0487 -> 0.0602 / 0.0714 / 0.0553 for the one kept): see docs/users.md.
def score_for_user(model: MultinomialNB, layer: UserLayer | None, features: Features, config: UsersConfig) -> Score:
    """The message's score for a user: the shared model's where the user trained none of its tokens."""
    if layer is None or len(features) == 0 or not (model.doc_totals[0] and model.doc_totals[1]):
        return model.score(features)
    counts = combined_counts(model, layer, features, config.weight)
    if counts is None:
        return model.score(features)
    return score_counts(model.config, counts, model.token_totals, model.distinct)


def explain_for_user(
    model: MultinomialNB, layer: UserLayer | None, tokens: list[str], config: UsersConfig, limit: int = 20
) -> tuple[Score, list[Contribution]]:
    """`MultinomialNB.explain` with the user's counts joined as `score_for_user` joins them."""
    features = featurize(tokens, model.config.hash_bits)
    counts = None if layer is None else combined_counts(model, layer, features, config.weight)
    if counts is None:
        return model.explain(tokens, limit)
    return explain_counts(model.config, tokens, features, counts, model.token_totals, model.doc_totals, model.distinct, limit)
