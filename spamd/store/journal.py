"""The journal format: records framed as <u32 length><u32 crc32><msgpack payload>; a torn tail is cut, damage before whole records refused."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from spamd.errors import CorruptStateError
from spamd.store.records import TrainingRecord

# The magic names the journal format version: records changed shape (hash_bits) in 02.
JOURNAL_MAGIC = b"SPAMDJ02"


_FRAME = struct.Struct("<II")  # payload length, crc32 of payload


MAX_RECORD_BYTES = 64 * 1024 * 1024


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
