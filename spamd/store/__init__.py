"""Where the model, the ledger and training live: the embedded store (spamd.store.local).

`spamd.store.local` is the default: msgpack snapshots plus an fsynced journal in
the state directory. Its names are re-exported here so `from spamd.store import
Ledger` keeps working. This package knows nothing of SMTP or Maildir.
"""

from spamd.store.local import (
    JOURNAL_MAGIC,
    MAX_RECORD_BYTES,
    SNAPSHOT_FORMAT,
    SNAPSHOT_VERSION,
    JournalScan,
    Ledger,
    LoadedState,
    Recovery,
    Snapshot,
    Store,
    TrainingRecord,
    apply_record,
    decode_snapshot,
    encode_snapshot,
    frame_record,
    fsync_directory,
    remove_stale_temps,
    scan_journal,
    write_atomically,
)

__all__ = [
    "JOURNAL_MAGIC", "MAX_RECORD_BYTES", "SNAPSHOT_FORMAT", "SNAPSHOT_VERSION", "JournalScan", "Ledger",
    "LoadedState", "Recovery", "Snapshot", "Store", "TrainingRecord", "apply_record", "decode_snapshot",
    "encode_snapshot", "frame_record", "fsync_directory", "remove_stale_temps", "scan_journal", "write_atomically",
]  # fmt: skip
