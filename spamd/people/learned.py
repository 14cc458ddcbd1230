"""What spamd learned from each person's move, or why it did not: "is it learning?" answered per message.

A person moves a message out of Junk and wonders whether spamd noticed. Each training and
each move spamd saw but does not learn from leaves a record here: the message (its key and
Message-ID), whose it was, what it became and why, and what the move did for its senders
(counted as a move, a sample kept: spamd/people/senders.py, kept.py). `spamctl learned` reads
them by Message-ID or file, the web console lists the latest, /metrics counts them by `what`.

Bounded: MAX_RECORDS here (the oldest go), the last PER_USER_IN_REDIS of each user in Redis. No
message content beyond its Message-ID (which the console already shows), cut to 200 characters.
Pure state with no I/O, persisted with the senders' state in snapshots; the trainings since the
last snapshot are recorded again from the journal at start, the moves spamd ignored are not.
"""

from __future__ import annotations

import re
import time
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any, Protocol

from spamd.mail.message import split_head_body

# What a record says happened, for /metrics and the console (one word each).
WHAT = {
    "learned": "learned: the model and the person's senders took it",
    "corrected": "learned: the earlier label unlearned and this one learned",
    "already_trained": "nothing new: the message was trained with this label already",
    "declined": "not learned: a person labelled it otherwise, and a person's label wins over spamd's own",
    "confident": "not learned: the model says so already by the training margin",
    "unlearned": "unlearned",
    "not_trained": "nothing to unlearn: the message was never trained",
    "trash": "not learned: a move into Trash teaches nothing",
    "ignored_move": "not learned: a move between folders other than Junk teaches nothing",
    "forged_sender": "learned, but not for its senders: its From failed DMARC when it was delivered",
}
# The embedded store's bound: 10,000 grew a long stream's memory by 12 MiB over 6,000 trainings
# (records, and a snapshot's encoding of them every few minutes; tests/test_long_stream.py holds
# growth to 8 MiB): 2,000 cost at most about 4 MiB, and cover what anyone asks "is it learning?" of.
MAX_RECORDS = 2_000
PER_USER_IN_REDIS = 8
MESSAGE_ID_CHARS = 200

# As the log lines read it (spamd.engine.scoring.message_id), so a Message-ID from a log line finds its record.
_MESSAGE_ID = re.compile(rb"^message-id:[ \t]*(.*?)[ \t\r]*$", re.IGNORECASE | re.MULTILINE)
# spamd's own X-Spam-Auth, written at delivery (spamd/mail/auth/verify.py): a From that failed DMARC.
_DMARC_FAIL = re.compile(rb"^x-spam-auth:[^\n]*\bdmarc=fail\b", re.IGNORECASE | re.MULTILINE)


def message_id_of(raw: bytes) -> str:
    """The message's Message-ID as written (cut to MESSAGE_ID_CHARS), "" if it has none."""
    found = _MESSAGE_ID.search(split_head_body(raw)[0][:65536])
    return found.group(1)[:MESSAGE_ID_CHARS].decode("ascii", "replace") if found else ""


def forged_looking(raw: bytes) -> bool:
    """Whether spamd's X-Spam-Auth on the message (as delivered) says its From failed DMARC.

    Someone else could write that header too, but it only ever withholds trust from the message's
    own senders, so a forger gains nothing by it."""
    return _DMARC_FAIL.search(split_head_body(raw)[0][:65536]) is not None


def learning_record(
    key: bytes,
    what: str,
    *,
    user: str | None,
    message_id: str,
    label: str | None,
    source: str,
    senders: Iterable[int] = (),
    moved: bool = False,
    kept: int = 0,
    folders: tuple[str | None, str | None] | None = None,
    when: float | None = None,
) -> dict[str, Any]:
    """One record: plain values only (msgpack, JSON and the console take it as it is)."""
    record: dict[str, Any] = {
        "when": round(time.time() if when is None else when, 3),
        "user": user,
        "message_id": message_id[:MESSAGE_ID_CHARS],
        "key": key.hex(),
        "label": label,
        "source": source,
        "what": what,
        "why": WHAT[what],
        "senders": [f"{s:016x}" for s in senders],
        "moved": moved,  # counted as a move into or out of Junk for its senders
        "kept": kept,  # senders whose profile took the message's sample
    }
    if folders is not None:
        record["from_folder"], record["to_folder"] = folders
    return record


class LearningLog(Protocol):
    """Where the records go: LearningRecords here, spamd.store.redis.learned.RedisLearned with Redis."""

    counts: Counter[str]

    def add(self, record: dict[str, Any]) -> None: ...
    def find(
        self, user: str | None = None, key: bytes | None = None, message_id: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]: ...


class LearningRecords:
    """The latest MAX_RECORDS records, oldest first (a message's every move, each a record); `counts`: records by
    `what` since start.

    Each is held as a tuple of its values (FIELDS), its senders as numbers and without its `why`, which
    follows from `what`: a dict of its strings took about 1.5 KiB, and 10,000 of them grew a long
    stream's memory by 19 MiB over 6,000 messages (tests/test_long_stream.py, its bound 8 MiB).
    """

    def __init__(self, max_records: int = MAX_RECORDS):
        self.max_records = max_records
        self._records: deque[tuple[Any, ...]] = deque(maxlen=max_records)
        self.counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: dict[str, Any]) -> None:
        """Keep `record` as the latest; the oldest goes past the bound."""
        self.counts[record["what"]] += 1
        self._records.append(packed(record))

    def find(
        self, user: str | None = None, key: bytes | None = None, message_id: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The latest records (newest first) of `user` (None: anyone's), for the message `key` or `message_id`."""
        at = FIELDS.index("user")
        mine = (unpacked(record) for record in reversed(self._records) if user is None or record[at] == user)
        return matching(mine, key, message_id, limit)

    def export(self) -> dict[str, Any]:
        """For a snapshot: the field names and each record's values, as held (no dict a record: a snapshot
        is written every few minutes, and 10,000 dicts each time left the heap fragmented)."""
        return {"fields": list(FIELDS), "records": list(self._records)}

    def restore(self, data: dict[str, Any] | list[Any]) -> None:
        """Take what `export` made (empty: a fresh start); ValueError/TypeError/KeyError if malformed."""
        if not data:
            return
        if not isinstance(data, dict) or list(data["fields"]) != list(FIELDS):
            raise ValueError("learning records: not the fields this spamd keeps")
        restored: deque[tuple[Any, ...]] = deque(maxlen=self.max_records)
        for values in data["records"][-self.max_records :]:
            record = tuple(values)
            if len(record) != len(FIELDS):
                raise ValueError("learning record: not one value a field")
            what, key = record[FIELDS.index("what")], record[FIELDS.index("key")]
            if what not in WHAT or not isinstance(key, str):
                raise ValueError(f"learning record: unknown kind {what!r} or key")
            at = FIELDS.index("senders")
            restored.append(record[:at] + (tuple(int(s) for s in record[at]),) + record[at + 1 :])
        self._records = restored


# A record's values in the order LearningRecords holds them (the folders only where a move had them).
FIELDS = (
    "when", "user", "message_id", "key", "label", "source", "what", "senders", "moved", "kept", "from_folder",
    "to_folder",
)  # fmt: skip


def packed(record: dict[str, Any]) -> tuple[Any, ...]:
    """A record as LearningRecords holds it: its values in FIELDS' order, the senders as numbers."""
    values = dict(record, senders=tuple(int(s, 16) for s in record.get("senders", ())))
    return tuple(values.get(name) for name in FIELDS)


def unpacked(values: tuple[Any, ...]) -> dict[str, Any]:
    """The record `packed` held, as `learning_record` made it."""
    record = dict(zip(FIELDS, values, strict=True))
    record["senders"] = [f"{s:016x}" for s in record["senders"]]
    record["why"] = WHAT[record["what"]]
    if record["from_folder"] is None and record["to_folder"] is None:
        del record["from_folder"], record["to_folder"]
    return record


def matching(
    records: Iterable[dict[str, Any]], key: bytes | None, message_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """The first `limit` of `records` about the message `key` or `message_id` (None: any): both stores' find."""
    found = []
    for record in records:
        if key is not None and record["key"] != key.hex():
            continue
        if message_id is not None and record["message_id"] != message_id[:MESSAGE_ID_CHARS]:
            continue
        found.append(record)
        if len(found) >= limit:
            break
    return found
