"""The seen index: where spamd last saw each message of a Maildir; its persistence.

Each Maildir has a `SeenIndex`: base name -> (folder, message key) for every file
spamd has seen, and message key -> folder (how the watcher tells a move from a
new message: see `watcher.py`), and which of its messages have settled (learned from
being left in place: see `settle.py`), so that a restart does not queue them again.
The index is persisted (msgpack) with snapshots and at shutdown. A stale or lost
index is safe: a message re-decided from an older index, or from the ledger alone,
gets the label it already holds, and training the same label twice is a ledger
no-op.

`RecentNames` holds the names spamd delivered lately, so that the watcher's
thread drops the events of spamd's own deliveries.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import structlog

from spamd.store import write_atomically

if TYPE_CHECKING:
    from spamd.frontends.maildir.mailbox import Mailbox

log = structlog.get_logger()

INDEX_FORMAT = "spamd-maildir-index"
INDEX_VERSION = 1


# ---------------------------------------------------------------- the seen index


class SeenIndex:
    """Where spamd last saw each message of one Maildir, by base name and by message key; which have settled."""

    def __init__(self) -> None:
        self.by_base: dict[str, tuple[str, bytes]] = {}
        self.by_key: dict[bytes, str] = {}
        # Message keys of the settled messages: never queued to settle again, wherever they
        # move. Keys, not bases: the set holds the very bytes objects of `by_base`'s entries,
        # so a mark costs a set slot (about 40 bytes), not another copy of a name.
        self.settled: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.by_base)

    def record(self, base: str, folder: str, key: bytes) -> None:
        self.by_base[base] = (folder, key)
        self.by_key[key] = folder

    def forget(self, base: str, folder: str | None = None) -> None:
        """Drop `base` (only if it was last seen in `folder`, when given)."""
        entry = self.by_base.get(base)
        if entry is None or (folder is not None and entry[0] != folder):
            return
        del self.by_base[base]
        if self.by_key.get(entry[1]) == entry[0]:
            del self.by_key[entry[1]]
            self.settled.discard(entry[1])  # (a move under a new name loses the mark: the ledger then says "known")

    def is_settled(self, base: str) -> bool:
        entry = self.by_base.get(base)
        return entry is not None and entry[1] in self.settled

    def mark_settled(self, base: str) -> None:
        entry = self.by_base.get(base)
        if entry is not None:
            self.settled.add(entry[1])

    def keep_only(self, bases: set[str]) -> int:
        """Forget every base not in `bases` (deleted while spamd was down); rebuild by_key."""
        gone = [b for b in self.by_base if b not in bases]
        for base in gone:
            del self.by_base[base]
        self.by_key = {key: folder for folder, key in self.by_base.values()}
        self.settled.intersection_update(self.by_key)
        return len(gone)

    def export(self) -> list[list[Any]]:
        return [[base, folder, key] for base, (folder, key) in self.by_base.items()]

    def export_settled(self) -> bytes:
        """One byte per row of `export()` (same order: call both with no change between): 1 if settled."""
        settled = self.settled
        return bytes(key in settled for _, key in self.by_base.values())

    @classmethod
    def restore(cls, rows: list[list[Any]], settled: bytes = b"") -> SeenIndex:
        index = cls()
        for base, folder, key in rows:
            index.record(base, folder, key)
        # State saved before the flags were kept has none (b""): nothing is settled then.
        index.settled = {row[2] for row, flag in zip(rows, settled, strict=False) if flag}
        return index


def encode_indexes(exported: dict[str, dict[str, Any]]) -> bytes:
    # "settled" (a flag per row of "maildirs") came later without a new version: an
    # older spamd ignores it, and would only queue those messages again.
    return msgpack.packb({"format": INDEX_FORMAT, "version": INDEX_VERSION, **exported}, use_bin_type=True)


def load_indexes(path: Path) -> dict[str, SeenIndex]:
    """The persisted indexes, or none if missing or unreadable (catch-up then rebuilds them)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        payload = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
        if payload.get("format") != INDEX_FORMAT or payload.get("version") != INDEX_VERSION:
            raise ValueError(f"unknown format {payload.get('format')!r} version {payload.get('version')!r}")
        settled = payload.get("settled", {})
        return {root: SeenIndex.restore(rows, settled.get(root, b"")) for root, rows in payload["maildirs"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as e:
        log.warning("maildir_index_unreadable", path=str(path), error=str(e), action="rebuilding from the folders")
        return {}


class RecentNames:
    """Names added in the last `keep_s` to 2 x `keep_s` seconds, without a timer or a lock.

    Added on the loop, looked up on watchdog's thread. A lookup that races a
    turnover can miss a name: the event then goes to the loop, which finds the
    name in the index and does nothing, as it did for every event before.
    """

    def __init__(self, keep_s: float = 10.0):
        self.keep_s = keep_s
        self._current: set[str] = set()
        self._previous: set[str] = set()
        self._since = time.monotonic()

    def add(self, name: str) -> None:
        now = time.monotonic()
        if now - self._since > self.keep_s:
            self._previous, self._current, self._since = self._current, set(), now
        self._current.add(name)

    def __contains__(self, name: object) -> bool:
        return name in self._current or name in self._previous


def export_indexes(mailboxes: list[Mailbox]) -> dict[str, dict[str, Any]]:
    """A copy of every Maildir's seen index and settled flags, taken on the loop (cheap: one list per entry)."""
    return {
        "maildirs": {str(m.root): m.index.export() for m in mailboxes},
        "settled": {str(m.root): m.index.export_settled() for m in mailboxes},
    }


def save_indexes(path: Path, exported: dict[str, dict[str, Any]]) -> None:
    """Persist exported indexes (blocking: run in a thread). Not fsync-critical: see the module docstring."""
    write_atomically(path, encode_indexes(exported), durable=False)
