"""What a training is (a journal record) and the ledger that keeps each (user, message) trained once; applying a record to model, user layer and ledger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from spamd.model.bayes import Features, Label, MultinomialNB
from spamd.model.families import UNRECORDED_COUNT_SETTINGS
from spamd.people.users import UserLayers, check_user_name, user_ledger_key


@dataclass(frozen=True, slots=True)
class TrainingRecord:
    """One atomic change to model and ledger: unlearn `previous` (if any), learn `label` (if any)."""

    seq: int
    key: bytes
    label: Label | None
    previous: Label | None
    user: bool  # a person's decision (a move, spamctl) rather than autolearn
    source: str
    features: Features
    time: float
    # The bucket space the ids live in; replay into another one is refused.
    hash_bits: int
    # Whose training (spamd/people/users.py): it teaches that user's layer as well as the
    # shared model. None: the shared model alone, as before users existed.
    user_name: str | None = None
    # What the counts mean (spamd.model.families.count_settings): replay under other
    # [model] families is refused, but for the mail-evidence families. None: the settings
    # before they were kept, no family on (UNRECORDED_COUNT_SETTINGS).
    count_settings: dict[str, Any] | None = None
    # Who the message is from (spamd/people/senders.py), kept with a user's training so a
    # replay counts it where that user's mail from those senders goes.
    senders: tuple[int, ...] = ()

    @property
    def ledger_key(self) -> bytes:
        return user_ledger_key(self.user_name, self.key)

    def to_msgpack(self) -> bytes:
        # A record without a user is written as before users existed, byte for byte;
        # an older spamd reading one with a user ignores the key (and the user's layer).
        extra: dict[str, Any] = {} if self.user_name is None else {"user_name": self.user_name}
        if self.user_name is not None and self.senders:
            extra["senders"] = list(self.senders)
        # Likewise the count settings, written only when they are not those before they were kept.
        if self.count_settings is not None and self.count_settings != _DEFAULT_COUNT_SETTINGS:
            extra["count_settings"] = self.count_settings
        return msgpack.packb(
            {
                "seq": self.seq,
                "key": self.key,
                "label": None if self.label is None else int(self.label),
                "previous": None if self.previous is None else int(self.previous),
                "user": self.user,
                "source": self.source,
                "ids": self.features.ids.astype("<u4").tobytes(),
                "counts": self.features.counts.astype("<u4").tobytes(),
                "time": self.time,
                "hash_bits": self.hash_bits,
                **extra,
            },
            use_bin_type=True,
        )

    @classmethod
    def from_msgpack(cls, data: bytes) -> TrainingRecord:
        d = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=False)
        ids = np.frombuffer(d["ids"], dtype="<u4").astype(np.uint32)
        counts = np.frombuffer(d["counts"], dtype="<u4").astype(np.uint32)
        if len(ids) != len(counts):
            raise ValueError("ids and counts differ in length")
        return cls(
            seq=int(d["seq"]),
            key=bytes(d["key"]),
            label=None if d["label"] is None else Label(d["label"]),
            previous=None if d["previous"] is None else Label(d["previous"]),
            user=bool(d["user"]),
            source=str(d["source"]),
            features=Features(ids, counts),
            time=float(d["time"]),
            hash_bits=int(d["hash_bits"]),
            user_name=None if d.get("user_name") is None else check_user_name(d["user_name"], "journal record user"),
            count_settings=d.get("count_settings"),
            senders=_senders(d.get("senders", ())),
        )

    @property
    def counts_built_with(self) -> Any:
        """The count settings the record was made under (those before they were kept when it does not say)."""
        return _DEFAULT_COUNT_SETTINGS if self.count_settings is None else self.count_settings


_DEFAULT_COUNT_SETTINGS = UNRECORDED_COUNT_SETTINGS


def _senders(value: Any) -> tuple[int, ...]:
    senders = tuple(int(s) for s in value)
    if len(senders) > 8 or any(not 0 <= s < 2**64 for s in senders):
        raise ValueError("a record's senders: at most 8 keys of 64 bits")
    return senders


class Ledger:
    """Message key -> how it was trained (label, and whether a person decided it).

    Bounded: past `max_entries` the oldest entries are forgotten (a forgotten
    message trained again counts twice; at the default cap that is mail trained
    more than two million messages ago).
    """

    _USER_BIT = 2

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._entries: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> tuple[Label, bool] | None:
        value = self._entries.get(key)
        if value is None:
            return None
        return Label(value & 1), bool(value & self._USER_BIT)

    def set(self, key: bytes, label: Label, user: bool) -> None:
        self._entries.pop(key, None)  # re-insert: most recent last
        self._entries[key] = int(label) | (self._USER_BIT if user else 0)
        if len(self._entries) > self.max_entries * 1.05 + 16:
            keep = list(self._entries.items())[-self.max_entries :]
            self._entries = dict(keep)

    def remove(self, key: bytes) -> None:
        self._entries.pop(key, None)

    def apply(self, record: TrainingRecord) -> None:
        if record.label is None:
            self.remove(record.ledger_key)
        else:
            self.set(record.ledger_key, record.label, record.user)

    def counts(self) -> dict[str, int]:
        values = np.fromiter(self._entries.values(), dtype=np.uint8, count=len(self._entries))
        return {"ham": int(np.count_nonzero((values & 1) == 0)), "spam": int(np.count_nonzero(values & 1))}

    def export(self) -> dict[str, bytes]:
        keys = b"".join(self._entries.keys())
        values = bytes(self._entries.values())
        return {"keys": keys, "values": values}

    @classmethod
    def restore(cls, data: dict[str, bytes], max_entries: int) -> Ledger:
        ledger = cls(max_entries)
        keys, values = data["keys"], data["values"]
        if len(keys) != 16 * len(values):
            raise ValueError("ledger keys and values differ in length")
        ledger._entries = {keys[16 * i : 16 * i + 16]: v for i, v in enumerate(values)}
        return ledger

    def replace_with(self, other: Ledger) -> None:
        """Take over another ledger's entries in place (for import: holders of this object see them)."""
        self._entries = other._entries
        other._entries = {}

    def as_dict(self) -> dict[bytes, int]:
        """Key -> label | 2 if a person decided, oldest first (a copy)."""
        return dict(self._entries)

    def equals(self, other: Ledger) -> bool:
        return self._entries == other._entries


def apply_record(model: MultinomialNB, ledger: Ledger, record: TrainingRecord, users: UserLayers | None = None) -> None:
    """The one way a record changes the state, live and on replay alike: shared model, user's layer, ledger."""
    if record.previous is not None:
        model.unlearn_one(record.features, record.previous)
    if record.label is not None:
        model.learn_one(record.features, record.label)
    if record.user_name is not None and users is not None:
        users.apply(
            record.user_name, record.features, record.label, record.previous, record.seq, model.config.stored_counts
        )
    ledger.apply(record)
