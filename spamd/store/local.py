"""The model on disk: versioned msgpack snapshots and an append-only, fsynced journal.

Layout of the state directory:

    lock                          held (flock) by whichever process owns the state
    snapshot-000000001234.spamd   model + ledger after journal record 1234
    journal-000000001234.log      records 1235, 1236, ... appended after that snapshot

A snapshot is written to a temp file, fsynced, renamed into place and the
directory fsynced. Older snapshots (`snapshots_kept`) and the journal segments
that lead on from them are kept, so a damaged newest snapshot falls back to an
older one plus every journal record since. A journal record is framed as
`<u32 length><u32 crc32><msgpack payload>`: a torn tail (a crash mid-append) is
cut off and reported; damage followed by whole records is refused, naming the
file, since replaying around it would silently lose training.

This module knows nothing of SMTP, Maildir or how a record came about.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import numpy as np
import structlog

from spamd.config import ModelConfig, StoreConfig
from spamd.errors import CorruptStateError, StateLockedError, StoreError
from spamd.model import Features, Label, MultinomialNB

log = structlog.get_logger()

SNAPSHOT_FORMAT = "spamd-snapshot"
SNAPSHOT_VERSION = 1
# The magic names the journal format version: records changed shape (hash_bits) in 02.
JOURNAL_MAGIC = b"SPAMDJ02"
_FRAME = struct.Struct("<II")  # payload length, crc32 of payload
MAX_RECORD_BYTES = 64 * 1024 * 1024
_SNAPSHOT_RE = re.compile(r"^snapshot-(\d{12})\.spamd$")
_JOURNAL_RE = re.compile(r"^journal-(\d{12})\.log$")


# ---------------------------------------------------------------- records


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

    def to_msgpack(self) -> bytes:
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
            },
            use_bin_type=True,
        )

    @classmethod
    def from_msgpack(cls, data: bytes) -> "TrainingRecord":
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
        )


# ---------------------------------------------------------------- the ledger


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
            self.remove(record.key)
        else:
            self.set(record.key, record.label, record.user)

    def counts(self) -> dict[str, int]:
        values = np.fromiter(self._entries.values(), dtype=np.uint8, count=len(self._entries))
        return {"ham": int(np.count_nonzero((values & 1) == 0)), "spam": int(np.count_nonzero(values & 1))}

    def export(self) -> dict[str, bytes]:
        keys = b"".join(self._entries.keys())
        values = bytes(self._entries.values())
        return {"keys": keys, "values": values}

    @classmethod
    def restore(cls, data: dict[str, bytes], max_entries: int) -> "Ledger":
        ledger = cls(max_entries)
        keys, values = data["keys"], data["values"]
        if len(keys) != 16 * len(values):
            raise ValueError("ledger keys and values differ in length")
        ledger._entries = {keys[16 * i : 16 * i + 16]: v for i, v in enumerate(values)}
        return ledger

    def replace_with(self, other: "Ledger") -> None:
        """Take over another ledger's entries in place (for import: holders of this object see them)."""
        self._entries = other._entries
        other._entries = {}

    def as_dict(self) -> dict[bytes, int]:
        """Key -> label | 2 if a person decided, oldest first (a copy)."""
        return dict(self._entries)

    def equals(self, other: "Ledger") -> bool:
        return self._entries == other._entries


def apply_record(model: MultinomialNB, ledger: Ledger, record: TrainingRecord) -> None:
    """The one way a record changes the state, live and on replay alike."""
    if record.previous is not None:
        model.unlearn_one(record.features, record.previous)
    if record.label is not None:
        model.learn_one(record.features, record.label)
    ledger.apply(record)


# ---------------------------------------------------------------- snapshots


def _pack_array(array: np.ndarray) -> dict[str, Any]:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"dtype": little.dtype.str, "shape": list(array.shape), "data": little.tobytes()}


def _unpack_array(d: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    if dtype.kind not in "uif":
        raise ValueError(f"unexpected dtype {dtype}")
    return np.frombuffer(d["data"], dtype=dtype).reshape(d["shape"]).astype(dtype.newbyteorder("="))


def encode_snapshot(
    model: MultinomialNB,
    ledger: Ledger,
    seq: int,
    counters: dict[str, int] | None = None,
    live: dict[str, Any] | None = None,
) -> bytes:
    """Model and ledger as snapshot bytes. Counts are stored sparse (ids + values per class).

    `counters` are running totals kept across restarts (messages scored by verdict);
    they ride along with the snapshot so they are written atomically with it, as does
    `live` (spamd/accuracy.py: remembered verdicts and per-day counts). Both are
    optional keys of the version-1 payload: older snapshots load without them, and an
    older spamd reading this one ignores them.
    """
    rows = {}
    for label in Label:
        row = model.counts[label]
        ids = np.flatnonzero(row).astype(np.uint32)
        rows[str(label)] = {"ids": _pack_array(ids), "values": _pack_array(row[ids])}
    payload = msgpack.packb(
        {
            "seq": seq,
            "created": time.time(),
            "hash_bits": model.config.hash_bits,
            "rows": rows,
            "token_totals": _pack_array(model.token_totals),
            "doc_totals": _pack_array(model.doc_totals),
            "distinct": model.distinct,
            "ledger": ledger.export(),
            "counters": {str(k): int(v) for k, v in (counters or {}).items()},
            "live": live or {},
        },
        use_bin_type=True,
    )
    return msgpack.packb(
        {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "checksum": hashlib.blake2b(payload, digest_size=32).digest(),
            "payload": payload,
        },
        use_bin_type=True,
    )


@dataclass
class Snapshot:
    seq: int
    created: float
    model: MultinomialNB
    ledger: Ledger
    # Running totals (e.g. "scored:spam"); absent in snapshots written before they existed.
    counters: dict[str, int] = field(default_factory=dict)
    # LiveAccuracy.export(); absent (empty) in snapshots written before it existed.
    live: dict[str, Any] = field(default_factory=dict)


def decode_snapshot(data: bytes, model_config: ModelConfig, ledger_max: int, where: str) -> Snapshot:
    """Parse and verify snapshot bytes; CorruptStateError says what is wrong with `where`."""
    try:
        outer = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise CorruptStateError(f"{where}: not a readable snapshot ({type(e).__name__}: {e})") from None
    if not isinstance(outer, dict) or outer.get("format") != SNAPSHOT_FORMAT:
        raise CorruptStateError(f"{where}: not a spamd snapshot (no '{SNAPSHOT_FORMAT}' header)")
    if outer.get("version") != SNAPSHOT_VERSION:
        raise CorruptStateError(
            f"{where}: snapshot format version {outer.get('version')!r}, this spamd reads version "
            f"{SNAPSHOT_VERSION}; run the spamd that wrote it, or retrain"
        )
    payload = outer.get("payload")
    if not isinstance(payload, bytes) or hashlib.blake2b(payload, digest_size=32).digest() != outer.get("checksum"):
        raise CorruptStateError(f"{where}: checksum mismatch, the snapshot is damaged")
    try:
        d = msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True)
        if d["hash_bits"] != model_config.hash_bits:
            raise CorruptStateError(
                f"{where}: built with model.hash_bits = {d['hash_bits']}, the config says "
                f"{model_config.hash_bits}; set it back, or move the state directory aside and retrain"
            )
        model = MultinomialNB(model_config)
        for label in Label:
            ids = _unpack_array(d["rows"][str(label)]["ids"]).astype(np.int64)
            values = _unpack_array(d["rows"][str(label)]["values"])
            if len(ids) and (ids.max() >= model.n_buckets or ids.min() < 0):
                raise ValueError("bucket id out of range")
            model.counts[label, ids] = values
        model.token_totals[:] = _unpack_array(d["token_totals"])
        model.doc_totals[:] = _unpack_array(d["doc_totals"])
        model.distinct = int(d["distinct"])
        ledger = Ledger.restore(d["ledger"], ledger_max)
        counters = {str(k): int(v) for k, v in d.get("counters", {}).items()}
        live = d.get("live") or {}
        if not isinstance(live, dict):
            raise ValueError("live accuracy section is not a map")
        return Snapshot(int(d["seq"]), float(d["created"]), model, ledger, counters, live)
    except CorruptStateError:
        raise
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise CorruptStateError(f"{where}: checksum is right but the content is malformed ({e})") from None


# ---------------------------------------------------------------- files


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, durable: bool = True) -> None:
    """Temp file in the same directory, fsync, rename over `path`, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)


def remove_stale_temps(directory: Path, pattern: str) -> list[str]:
    """Delete the temp files (`.<name>.tmp-<pid>`) a write_atomically killed mid-write left behind.

    Call only while holding the state lock: then no other process is writing them.
    """
    removed = []
    for path in directory.glob(pattern):
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


@dataclass
class JournalScan:
    records: list[TrainingRecord]
    good_end: int  # offset after the last whole record
    torn_bytes: int  # bytes after good_end that are a torn tail


def scan_journal(data: bytes, where: str) -> JournalScan:
    """Every whole record of a journal segment; a torn tail is measured, damage before whole records refused."""
    if not data.startswith(JOURNAL_MAGIC):
        if JOURNAL_MAGIC.startswith(data):  # crash while writing the magic itself
            return JournalScan([], 0, len(data))
        if data.startswith(JOURNAL_MAGIC[:6]):
            raise CorruptStateError(
                f"{where}: journal format {data[6:8].decode('ascii', 'replace')!r}, this spamd reads "
                f"{JOURNAL_MAGIC[6:].decode()!r}; run the spamd that wrote it to take a snapshot, or retrain"
            )
        raise CorruptStateError(f"{where}: not a spamd journal (bad magic); move it aside to start without it")
    records: list[TrainingRecord] = []
    offset = len(JOURNAL_MAGIC)
    while offset < len(data):
        record, next_offset = _read_record(data, offset, where)
        if record is None:
            if _whole_record_follows(data, offset):
                raise CorruptStateError(
                    f"{where}: damaged record at byte {offset} with whole records after it; "
                    "spamd will not replay around it. Restore the state directory from a backup "
                    "(spamctl import), or move this journal aside to lose the training it holds"
                )
            return JournalScan(records, offset, len(data) - offset)
        records.append(record)
        offset = next_offset
    return JournalScan(records, offset, 0)


def _read_record(data: bytes, offset: int, where: str | None = None) -> tuple[TrainingRecord | None, int]:
    """The record at `offset`, or None if it is torn or fails its CRC.

    With `where` (the replay, not the search for later records), a record that
    passes its CRC yet does not decode is refused: it was written whole, so
    dropping it as a torn tail would silently lose training.
    """
    if offset + _FRAME.size > len(data):
        return None, offset
    length, crc = _FRAME.unpack_from(data, offset)
    start, end = offset + _FRAME.size, offset + _FRAME.size + length
    if length > MAX_RECORD_BYTES or end > len(data):
        return None, offset
    payload = data[start:end]
    if zlib.crc32(payload) != crc:
        return None, offset
    try:
        return TrainingRecord.from_msgpack(payload), end
    except Exception as e:  # msgpack and the field checks raise several unrelated types
        if where is None:
            return None, offset
        raise CorruptStateError(
            f"{where}: record at byte {offset} is whole (checksum right) but cannot be decoded "
            f"({type(e).__name__}: {e}); it was written by another spamd version or is damaged. "
            "Restore from a backup (spamctl import), or move the journal aside to lose the training it holds"
        ) from None


def _whole_record_follows(data: bytes, bad_offset: int) -> bool:
    """Is there a valid record anywhere after a bad one? Then this is not a torn tail."""
    search_from = bad_offset + 1
    while True:
        # Records start with a small length; scan candidate offsets cheaply.
        if search_from + _FRAME.size > len(data):
            return False
        record, _ = _read_record(data, search_from)
        if record is not None:
            return True
        search_from += 1
        if search_from - bad_offset > 1 << 20:  # a torn tail is at most one record long
            return False


def frame_record(record: TrainingRecord) -> bytes:
    payload = record.to_msgpack()
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


# ---------------------------------------------------------------- the store


@dataclass
class Recovery:
    """What loading found, for the log and for `spamctl stats`."""

    snapshot: str | None = None
    snapshot_seq: int = 0
    replayed: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass
class LoadedState:
    model: MultinomialNB
    ledger: Ledger
    seq: int
    recovery: Recovery
    counters: dict[str, int] = field(default_factory=dict)
    live: dict[str, Any] = field(default_factory=dict)
    # The records replayed over the snapshot, without their features: (key, label,
    # previous, user, source, time), so live accuracy can re-derive what they meant.
    replayed: list[tuple[bytes, Label | None, Label | None, bool, str, float]] = field(default_factory=list)


class Store:
    """Owns the state directory: lock, load + replay, journal appends, snapshots."""

    keeps_snapshots = True  # (the Redis store keeps none: Redis holds the state)

    def __init__(self, state_dir: Path, model_config: ModelConfig, config: StoreConfig, durable: bool = True):
        self.state_dir = Path(state_dir)
        self.model_config = model_config
        self.config = config
        self.durable = durable
        self._lock_file: BinaryIO | None = None
        self._journal_fd: int | None = None
        self._journal_path: Path | None = None
        self._journal_end = 0  # offset after the last whole record
        self.journal_records = 0  # records in the current segment
        self.last_snapshot_seq = 0
        self.last_snapshot_time: float | None = None

    # ---------------------------------------------------------- lock

    def lock(self) -> None:
        """Take the state directory for this process, or raise StateLockedError."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise StoreError(f"{self.state_dir}: cannot create state directory: {e.strerror}") from None
        path = self.state_dir / "lock"
        try:
            f = open(path, "a+b")
        except OSError as e:
            raise StoreError(f"{path}: cannot open the lock file: {e.strerror}") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise StateLockedError(
                f"{self.state_dir}: model state is in use by another process (spamd or spamctl)"
            ) from None
        self._lock_file = f

    def close(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # ---------------------------------------------------------- load

    def _files(self, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
        found = []
        for entry in os.scandir(self.state_dir):
            m = pattern.match(entry.name)
            if m:
                found.append((int(m.group(1)), Path(entry.path)))
        return sorted(found)

    def load(self) -> LoadedState:
        """Newest valid snapshot + every journal record after it; see the module docstring for failures."""
        recovery = Recovery()
        # A kill during a snapshot write leaves its temp file; each is up to a snapshot's size.
        stale = remove_stale_temps(self.state_dir, ".snapshot-*.spamd.tmp-*")
        if stale:
            log.warning("snapshot_temp_removed", files=stale, reason="a snapshot write was cut short")
        snapshots = self._files(_SNAPSHOT_RE)
        snapshot: Snapshot | None = None
        for seq, path in reversed(snapshots):
            try:
                snapshot = decode_snapshot(path.read_bytes(), self.model_config, self.config.ledger_max_entries, str(path))
                recovery.snapshot, recovery.snapshot_seq = str(path), snapshot.seq
                break
            except CorruptStateError as e:
                recovery.problems.append(str(e))
                log.error("snapshot_unusable", path=str(path), error=str(e))
            except OSError as e:
                recovery.problems.append(f"{path}: {e.strerror}")
        if snapshot is None and snapshots:
            raise CorruptStateError(
                "no usable snapshot: " + " | ".join(recovery.problems)
                + f". Restore {self.state_dir} from a backup (spamctl import), or move it aside to start empty"
            )
        if snapshot is None:
            snapshot = Snapshot(0, 0.0, MultinomialNB(self.model_config), Ledger(self.config.ledger_max_entries))
        seq = snapshot.seq
        replayed = []
        segments = self._files(_JOURNAL_RE)
        for index, (start, path) in enumerate(segments):
            is_last = index == len(segments) - 1
            data = path.read_bytes()
            scan = scan_journal(data, str(path))
            if scan.torn_bytes:
                if not is_last:
                    raise CorruptStateError(
                        f"{path}: ends in a torn record but newer journal segments follow; "
                        "restore from a backup or move the state directory aside"
                    )
                self._cut_torn_tail(path, data, scan, recovery)
            for record in scan.records:
                if record.seq <= seq:
                    continue
                if record.seq != seq + 1:
                    raise CorruptStateError(
                        f"{path}: journal jumps from record {seq} to {record.seq}; records are missing. "
                        "Restore the state directory from a backup, or move it aside and retrain"
                    )
                if record.hash_bits != self.model_config.hash_bits:
                    raise CorruptStateError(
                        f"{path}: record {record.seq} was written with model.hash_bits = {record.hash_bits}, "
                        f"the config says {self.model_config.hash_bits}. Set it back, or move the state "
                        "directory aside and retrain"
                    )
                apply_record(snapshot.model, snapshot.ledger, record)
                replayed.append((record.key, record.label, record.previous, record.user, record.source, record.time))
                seq = record.seq
                recovery.replayed += 1
        self.last_snapshot_seq = snapshot.seq
        self.last_snapshot_time = snapshot.created or None
        last_records = len(scan.records) if segments else 0
        self._open_segment(segments[-1][1] if segments else None, seq, last_records)
        return LoadedState(snapshot.model, snapshot.ledger, seq, recovery, snapshot.counters, snapshot.live, replayed)

    def _cut_torn_tail(self, path: Path, data: bytes, scan: JournalScan, recovery: Recovery) -> None:
        """Keep the torn bytes aside for inspection, then truncate the segment to its whole records."""
        aside = path.with_name(f"{path.name}.torn-{scan.good_end}")
        aside.write_bytes(data[scan.good_end :])
        with open(path, "r+b") as f:
            f.truncate(scan.good_end)
            if scan.good_end == 0:
                f.write(JOURNAL_MAGIC)
            os.fsync(f.fileno())
        message = f"{path}: cut a torn tail of {scan.torn_bytes} bytes (a crash mid-append; saved as {aside.name})"
        recovery.problems.append(message)
        log.warning("journal_tail_truncated", path=str(path), bytes=scan.torn_bytes, saved_as=str(aside))

    def _open_segment(self, path: Path | None, seq: int, records: int = 0) -> None:
        if path is None:
            path = self.state_dir / f"journal-{seq:012d}.log"
        fd, end = self._open_journal_file(path)
        self._journal_fd, self._journal_path, self._journal_end = fd, path, end
        self.journal_records = records

    def _open_journal_file(self, path: Path) -> tuple[int, int]:
        """Open a segment for appending, writing the magic into a new one; (fd, end offset). OSError as is."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        end = 0
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end == 0:
                os.write(fd, JOURNAL_MAGIC)
                if self.durable:
                    os.fsync(fd)
                    fsync_directory(self.state_dir)
                end = len(JOURNAL_MAGIC)
        except BaseException:
            os.close(fd)
            if end == 0:
                path.unlink(missing_ok=True)  # empty, or a torn magic: holds nothing
            raise
        return fd, end

    # ---------------------------------------------------------- append

    @property
    def journal_bytes(self) -> int:
        return self._journal_end

    @property
    def journal_path(self) -> Path | None:
        return self._journal_path

    def append(self, record: TrainingRecord) -> None:
        """Write one record and fsync it; on failure the journal is left as it was, and StoreError raised."""
        assert self._journal_fd is not None, "load() first"
        frame = frame_record(record)
        try:
            written = 0
            while written < len(frame):
                written += os.write(self._journal_fd, frame[written:])
            if self.durable:
                os.fsync(self._journal_fd)
        except OSError as e:
            self._roll_back_partial_append()
            what = "disk full" if e.errno == errno.ENOSPC else e.strerror
            raise StoreError(f"{self._journal_path}: cannot record training ({what}); nothing was learned") from None
        self._journal_end += len(frame)
        self.journal_records += 1

    def _roll_back_partial_append(self) -> None:
        try:
            os.ftruncate(self._journal_fd, self._journal_end)
        except OSError:
            # If even that fails the torn tail is cut at the next start (scan_journal).
            log.error("journal_rollback_failed", path=str(self._journal_path))

    # ---------------------------------------------------------- snapshot

    def write_snapshot(self, encoded: bytes, seq: int) -> Path:
        """Write snapshot bytes for `seq`, start a fresh journal segment, prune old files.

        Blocking (fsyncs): the daemon runs it in a thread on bytes encoded from the live state.
        """
        path = self.state_dir / f"snapshot-{seq:012d}.spamd"
        try:
            write_atomically(path, encoded, self.durable)
        except OSError as e:
            what = "disk full" if e.errno == errno.ENOSPC else e.strerror
            raise StoreError(f"{path}: cannot write snapshot ({what}); the journal still holds all training") from None
        self.last_snapshot_seq = seq
        self.last_snapshot_time = time.time()
        return path

    def rotate_journal(self, seq: int) -> None:
        """Start a new journal segment after a snapshot at `seq` (call on the owning thread)."""
        path = self.state_dir / f"journal-{seq:012d}.log"
        if self._journal_path == path:
            return
        # The new segment is opened before the old one is let go: on a full or read-only
        # disk training goes on in the old segment (and the snapshot is retried later).
        try:
            fd, end = self._open_journal_file(path)
        except OSError as e:
            what = "disk full" if e.errno == errno.ENOSPC else e.strerror
            raise StoreError(f"{path}: cannot start a journal segment ({what}); training goes on in the current one") from None
        if self._journal_fd is not None:
            os.close(self._journal_fd)
        self._journal_fd, self._journal_path, self._journal_end = fd, path, end
        self.journal_records = 0

    def prune(self) -> None:
        """Drop snapshots beyond `snapshots_kept` and journal segments no kept snapshot needs."""
        snapshots = self._files(_SNAPSHOT_RE)
        kept = snapshots[-self.config.snapshots_kept :]
        for _, path in snapshots[: -self.config.snapshots_kept]:
            path.unlink(missing_ok=True)
        if not kept:
            return
        oldest_needed = kept[0][0]
        segments = self._files(_JOURNAL_RE)
        for (start, path), (next_start, _) in zip(segments, segments[1:]):
            if next_start <= oldest_needed and path != self._journal_path:
                path.unlink(missing_ok=True)
        # A torn tail set aside at recovery is kept for inspection as long as its segment.
        for torn in self.state_dir.glob("journal-*.log.torn-*"):
            if not torn.with_name(torn.name.split(".torn-")[0]).exists():
                torn.unlink(missing_ok=True)
