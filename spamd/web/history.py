"""Recent verdicts for the web console: a bounded ring of what was scored, and messages per minute.

`Scorer.scored` hands every verdict here, whichever way the message came in, once the
console is on (`[web] listen`). Each verdict keeps a small record (time, way in, user,
verdict, probability, sender domain, the Subject's raw bytes only with `show_subjects`)
in a deque of `history_entries`. The raw messages of the newest verdicts are kept too,
within `history_message_bytes`, so that an explanation is computed when someone opens
one, with the model as it is then: keeping tokens instead would mean tokenizing on the
loop a message the analysis process already tokenized. Counts per minute for the last
six hours feed the overview's chart.

It does not parse a message beyond two header lookups, nor score or explain: the web
pages do that, on request.
"""

from __future__ import annotations

import itertools
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from spamd.mail.message import decode_header_value, split_head_body

MINUTES_KEPT = 6 * 60
VERDICT_COLUMNS = ("ham", "unsure", "spam")  # the per-minute counts, in this order
HEAD_SCANNED = 16 * 1024  # bytes of the header block searched for From and Subject
SUBJECT_BYTES = 400  # of the raw Subject field kept (RFC 2047 words decoded when shown)

_FROM_RE = re.compile(rb"^from:[ \t]*([^\n]{0,400})", re.IGNORECASE | re.MULTILINE)
_SUBJECT_RE = re.compile(rb"^subject:[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)", re.IGNORECASE | re.MULTILINE)
_DOMAIN_RE = re.compile(rb"@([A-Za-z0-9](?:[A-Za-z0-9.-]{0,250}[A-Za-z0-9])?)")
_FOLD_RE = re.compile(rb"\r?\n[ \t]+")


class Recorded:
    """One verdict as the history keeps it; `raw` is None once the message is no longer kept."""

    __slots__ = ("id", "time", "way_in", "user", "verdict", "probability", "sender_domain", "subject", "key", "raw")

    def __init__(
        self, id: int, when: float, way_in: str, user: str, verdict: str, probability: float,
        sender_domain: str, subject: bytes | None, key: bytes, raw: bytes | None,
    ):  # fmt: skip
        self.id = id
        self.time = when
        self.way_in = way_in
        self.user = user
        self.verdict = verdict
        self.probability = probability
        self.sender_domain = sender_domain
        self.subject = subject
        self.key = key
        self.raw = raw

    @property
    def subject_text(self) -> str | None:
        """The Subject decoded (RFC 2047), or None when it was not recorded."""
        if self.subject is None:
            return None
        return decode_header_value(_FOLD_RE.sub(b" ", self.subject).rstrip(b"\r"))


@dataclass(frozen=True)
class HistorySettings:
    entries: int
    message_bytes: int  # raw messages kept, in total
    max_message_bytes: int  # a message longer than this is kept cut here (the parser reads no further)


class History:
    """The ring of recent verdicts, the raw messages of the newest, and per-minute counts."""

    def __init__(
        self, settings: HistorySettings, show_subjects: Callable[[], bool], clock: Callable[[], float] = time.time
    ):
        self.settings = settings
        self.show_subjects = show_subjects
        self.clock = clock
        self.ring: deque[Recorded] = deque()
        self.kept: deque[Recorded] = deque()  # those of `ring` whose raw is kept, oldest first
        self.kept_bytes = 0
        self.recorded = 0  # verdicts ever recorded (ids run from 1)
        self.minutes: dict[int, list[int]] = {}  # minute (Unix time // 60) -> counts by VERDICT_COLUMNS
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self.ring)

    # ------------------------------------------------------------ recording (on the loop, per message)

    def record(self, raw: bytes, key: bytes, verdict: str, probability: float, way_in: str, user: str) -> Recorded:
        now = self.clock()
        head = split_head_body(raw[:HEAD_SCANNED])[0]
        sender = _FROM_RE.search(head)
        domain = ""
        if sender is not None:
            address = sender.group(1)
            angle = address.rfind(b"<")
            found = _DOMAIN_RE.search(address, angle + 1 if angle >= 0 else 0)
            if found is not None:
                domain = sys.intern(found.group(1).decode("ascii").lower())  # a few domains, many messages
        subject = None
        if self.show_subjects():
            m = _SUBJECT_RE.search(head)
            subject = m.group(1)[:SUBJECT_BYTES] if m is not None else b""
        entry = Recorded(
            next(self._ids), now, way_in, sys.intern(user), verdict, probability, domain, subject, key, None
        )
        self.recorded += 1
        settings = self.settings
        if settings.entries:
            ring = self.ring
            if len(ring) >= settings.entries:
                oldest = ring.popleft()
                if oldest.raw is not None:
                    self._forget_oldest_raw()  # the oldest kept is the oldest listed
            ring.append(entry)
            if settings.message_bytes:
                kept = raw if len(raw) <= settings.max_message_bytes else raw[: settings.max_message_bytes]
                if len(kept) <= settings.message_bytes:
                    entry.raw = kept
                    self.kept.append(entry)
                    self.kept_bytes += len(kept)
                    while self.kept_bytes > settings.message_bytes:
                        self._forget_oldest_raw()
        minute = int(now // 60)
        counts = self.minutes.get(minute)
        if counts is None:
            counts = self.minutes[minute] = [0, 0, 0]
            if len(self.minutes) > MINUTES_KEPT:
                for old in [m for m in self.minutes if m <= minute - MINUTES_KEPT]:
                    del self.minutes[old]
        counts[VERDICT_COLUMNS.index(verdict)] += 1
        return entry

    def _forget_oldest_raw(self) -> None:
        entry = self.kept.popleft()
        assert entry.raw is not None
        self.kept_bytes -= len(entry.raw)
        entry.raw = None

    # ------------------------------------------------------------ reading (the pages)

    def get(self, entry_id: int) -> Recorded | None:
        if not self.ring:
            return None
        index = entry_id - self.ring[0].id
        return self.ring[index] if 0 <= index < len(self.ring) else None

    def newest(self, limit: int, before: int | None = None, verdict: str = "", way_in: str = "") -> list[Recorded]:
        """Up to `limit` verdicts, newest first, older than id `before`, matching the filters given."""
        ring = self.ring
        skip = 0
        if before is not None and ring:
            skip = max(0, ring[-1].id - before + 1)
        found: list[Recorded] = []
        for entry in itertools.islice(reversed(ring), skip, None):
            if (verdict and entry.verdict != verdict) or (way_in and entry.way_in != way_in):
                continue
            found.append(entry)
            if len(found) >= limit:
                break
        return found

    def per_minute(self, minutes: int = MINUTES_KEPT) -> Iterator[tuple[int, list[int]]]:
        """(minute, counts by VERDICT_COLUMNS) for each of the last `minutes` minutes, oldest first, this one included."""
        now = int(self.clock() // 60)
        for minute in range(now - minutes + 1, now + 1):
            yield minute, self.minutes.get(minute, [0, 0, 0])
