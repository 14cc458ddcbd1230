"""The model on disk: versioned msgpack snapshots and an append-only, fsynced journal.

Layout of the state directory:

    lock                          held (flock) by whichever process owns the state
    snapshot-000000001234.spamd   model + ledger after journal record 1234
    journal-000000001234.log      records 1235, 1236, ... appended after that snapshot

The formats are their own modules (`snapshot`, `journal`, `records`), and so is
writing a file that is never half-written (`durable`); this one is the embedded
store over them. Older snapshots (`snapshots_kept`) and the journal segments that
lead on from them are kept, so a damaged newest snapshot falls back to an older one
plus every journal record since.

This module knows nothing of SMTP, Maildir or how a record came about.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import structlog

from spamd.config import ModelConfig, StoreConfig, UsersConfig
from spamd.errors import CorruptStateError, StateLockedError, StoreError
from spamd.model.bayes import Label, MultinomialNB
from spamd.model.families import EvidenceHistory, evidence_families, evidence_in
from spamd.people.kept import kept_sample
from spamd.people.users import UserLayers
from spamd.store.durable import fsync_directory, remove_stale_temps, write_atomically
from spamd.store.journal import JOURNAL_MAGIC, JournalScan, frame_record, scan_journal
from spamd.store.records import Ledger, TrainingRecord, apply_record
from spamd.store.snapshot import Snapshot, check_count_settings, decode_snapshot

log = structlog.get_logger()


_SNAPSHOT_RE = re.compile(r"^snapshot-(\d{12})\.spamd$")


_JOURNAL_RE = re.compile(r"^journal-(\d{12})\.log$")


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
    # previous, user, source, time, user name, senders, the kept sample of a user's ham:
    # spamd/people/kept.py), so live accuracy and the senders' state (spamd/people/senders.py)
    # can re-derive what they meant.
    replayed: list[
        tuple[bytes, Label | None, Label | None, bool, str, float, str | None, tuple[int, ...], np.ndarray | None]
    ] = field(default_factory=list)
    users: UserLayers = field(default_factory=lambda: UserLayers(UsersConfig()))
    # Since when each mail-evidence family on is learned; `evidence_switched`: the config
    # switched one on or off against what the model was built with (worth a snapshot).
    evidence: EvidenceHistory = field(default_factory=EvidenceHistory)
    evidence_switched: bool = False


def log_evidence_switch(on: list[str], off: list[str], seq: int, where: str) -> None:
    """Say that a mail-evidence family was switched on or off against a stored model (no count changes meaning)."""
    for name in on:
        log.warning(
            "evidence_family_switched", family=name, to="on", where=where, from_record=seq,
            effect="learns from now: the model holds no counts of its tokens yet, they weigh as they are learned",
        )  # fmt: skip
    for name in off:
        log.warning(
            "evidence_family_switched", family=name, to="off", where=where, after_record=seq - 1,
            effect="no longer made or learned: the counts it learned stay and are not read",
        )  # fmt: skip


class Store:
    """Owns the state directory: lock, load + replay, journal appends, snapshots."""

    keeps_snapshots = True  # (the Redis store keeps none: Redis holds the state)

    def __init__(
        self, state_dir: Path, model_config: ModelConfig, config: StoreConfig, durable: bool = True,
        users_config: UsersConfig | None = None,
    ):  # fmt: skip
        self.state_dir = Path(state_dir)
        self.users_config = users_config or UsersConfig()
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
            f = open(path, "a+b")  # noqa: SIM115  held open for the store's life: the flock lasts as long as the file
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
        for _, path in reversed(snapshots):
            try:
                snapshot = decode_snapshot(
                    path.read_bytes(), self.model_config, self.config.ledger_max_entries, str(path), self.users_config
                )
                recovery.snapshot, recovery.snapshot_seq = str(path), snapshot.seq
                break
            except CorruptStateError as e:
                recovery.problems.append(str(e))
                log.error("snapshot_unusable", path=str(path), error=str(e))
            except OSError as e:
                recovery.problems.append(f"{path}: {e.strerror}")
        if snapshot is None and snapshots:
            raise CorruptStateError(
                "no usable snapshot: "
                + " | ".join(recovery.problems)
                + f". Restore {self.state_dir} from a backup (spamctl import), or move it aside to start empty"
            )
        if snapshot is None:
            snapshot = Snapshot(
                0, 0.0, MultinomialNB(self.model_config), Ledger(self.config.ledger_max_entries),
                users=UserLayers(self.users_config),
            )  # fmt: skip
        seq = snapshot.seq
        evidence = snapshot.evidence
        replayed = []
        segments = self._files(_JOURNAL_RE)
        for index, (_, path) in enumerate(segments):
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
                check_count_settings(record.counts_built_with, self.model_config, f"{path}: record {record.seq}")
                evidence.follow(evidence_in(record.counts_built_with), record.seq, record.time)
                apply_record(snapshot.model, snapshot.ledger, record, snapshot.users)
                kept = kept_sample(record.features) if record.user_name and record.label == Label.HAM else None
                replayed.append(
                    (record.key, record.label, record.previous, record.user, record.source, record.time, record.user_name, record.senders, kept)
                )  # fmt: skip
                seq = record.seq
                recovery.replayed += 1
        self.last_snapshot_seq = snapshot.seq
        self.last_snapshot_time = snapshot.created or None
        last_records = len(scan.records) if segments else 0
        self._open_segment(segments[-1][1] if segments else None, seq, last_records)
        on, off = evidence.follow(evidence_families(self.model_config), seq + 1, time.time())
        if seq and (on or off):  # (a new model is built with what the config says: nothing switched)
            log_evidence_switch(on, off, seq + 1, str(self.state_dir))
        return LoadedState(
            snapshot.model, snapshot.ledger, seq, recovery, snapshot.counters, snapshot.live, replayed, snapshot.users,
            evidence, bool(seq and (on or off)),
        )  # fmt: skip

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
        assert self._journal_fd is not None  # after a write to it
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
            raise StoreError(
                f"{path}: cannot start a journal segment ({what}); training goes on in the current one"
            ) from None
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
        for (_, path), (next_start, _) in pairwise(segments):
            if next_start <= oldest_needed and path != self._journal_path:
                path.unlink(missing_ok=True)
        # A torn tail set aside at recovery is kept for inspection as long as its segment.
        for torn in self.state_dir.glob("journal-*.log.torn-*"):
            if not torn.with_name(torn.name.split(".torn-")[0]).exists():
                torn.unlink(missing_ok=True)
