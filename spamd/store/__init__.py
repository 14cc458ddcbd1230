"""Where the model, the ledger and training live: the interface, and the embedded store's names.

Two stores implement it:

- `spamd.store.local` (the default): msgpack snapshots (`snapshot`) plus an fsynced
  journal (`journal`) of training records (`records`) in the state directory; `spamd.engine.trainer.Trainer` over `MultinomialNB` and `Ledger`.
- `spamd.store.redis` (`[redis] url`): one Redis shared by many daemons;
  `RedisTrainer` over `RedisModel` and `RedisLedger`, every training one Lua script.

The Engine, the daemon and the frontends use only what the Protocols below name, so
either store serves them; tests/test_training.py runs the trainer's semantics against
both. The local store's names are re-exported so `from spamd.store import Ledger`
keeps working. This package knows nothing of SMTP or Maildir.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spamd.model.bayes import ModelView
from spamd.store.durable import fsync_directory, remove_stale_temps, write_atomically
from spamd.store.journal import (
    JOURNAL_MAGIC,
    MAX_RECORD_BYTES,
    JournalScan,
    frame_record,
    scan_journal,
)
from spamd.store.local import LoadedState, Recovery, Store
from spamd.store.records import Ledger, TrainingRecord, apply_record
from spamd.store.snapshot import (
    SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
)

if TYPE_CHECKING:
    from spamd.learning.classifier import Analyzed
    from spamd.learning.outcomes import Outcome
    from spamd.model.bayes import Label
    from spamd.people.users import UsersView


class LedgerView(Protocol):
    """What callers read from a ledger (Ledger, RedisLedger); only training writes it."""

    def get(self, key: bytes) -> tuple[Label, bool] | None: ...
    def __len__(self) -> int: ...
    def counts(self) -> dict[str, int]: ...
    def as_dict(self) -> dict[bytes, int]: ...


class TrainerLike(Protocol):
    """Learn, correct, skip repeats, untrain (spamd.engine.trainer.Trainer, RedisTrainer): same outcomes for the same history."""

    seq: int
    events: Counter[tuple[str, str]]

    # Read-only here, so that each trainer's own kinds (MultinomialNB, RedisModel, ...) fit.
    @property
    def model(self) -> ModelView: ...
    @property
    def ledger(self) -> LedgerView: ...
    @property
    def users(self) -> UsersView: ...  # per-user layers (spamd/people/users.py): UserLayers, or RedisUsers

    def train(
        self, analyzed: Analyzed, label: Label, source: str, user: bool = True, user_name: str | None = None
    ) -> Outcome: ...
    def untrain(self, analyzed: Analyzed, source: str, user_name: str | None = None) -> Outcome: ...
    def label_of(self, key: bytes, user_name: str | None = None) -> Label | None: ...


class StateStore(Protocol):
    """What the Engine asks of a store besides training (Store, RedisStore).

    `keeps_snapshots` False (Redis) means no snapshot timer, no journal, and export /
    import through the store's own `export_snapshot` / `import_snapshot`.
    """

    keeps_snapshots: bool
    state_dir: Path
    last_snapshot_seq: int
    last_snapshot_time: float | None

    @property
    def journal_records(self) -> int: ...  # 0 without a journal (Redis)
    @property
    def journal_bytes(self) -> int: ...

    def lock(self) -> None: ...
    def close(self) -> None: ...


__all__ = [
    "ModelView", "LedgerView", "TrainerLike", "StateStore",
    "JOURNAL_MAGIC", "MAX_RECORD_BYTES", "SNAPSHOT_FORMAT", "SNAPSHOT_VERSION", "JournalScan", "Ledger",
    "LoadedState", "Recovery", "Snapshot", "Store", "TrainingRecord", "apply_record", "decode_snapshot",
    "encode_snapshot", "frame_record", "fsync_directory", "remove_stale_temps", "scan_journal", "write_atomically",
]  # fmt: skip
