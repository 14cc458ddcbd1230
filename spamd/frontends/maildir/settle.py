"""Settled mail: what people leave in place is a label too.

A message read (the Maildir S flag, and not marked deleted) and still in INBOX or
any folder but Junk and Trash `[maildir] settle_after` seconds after it arrived is
learned as ham; one left in Junk that long, never taken out, as spam. Trash is
never learned. The training goes the way autolearn's does (source `settled`,
`user=False`): the trainer declines it over a person's decision, and a person's
later move corrects it, once.

When a message arrived: its file's mtime, which is when it was delivered or filed
(Dovecot sets it to the IMAP received date and keeps it through flag changes,
moves and copies); if that lies in the future, the time its Maildir name begins
with, if earlier. Nothing is stored per message for it.

Bounded work. `SettleQueue` is a heap of (due, Maildir, path in the Maildir), fed
by what the watcher sees anyway: spamd's own deliveries into Junk, and every
appearance or rename (a move, a filing, new/ -> cur/, a flag change) of a message
where it may settle, live or in the start-up catch-up's listing. Unread mail
outside Junk is not queued until it is read. A queued time is a first guess:
spamd's own deliveries are due settle_after from now; anything else is looked at
at once, or, if the time in its name plus settle_after is past, at that time, so
that at a first start old mail is learned oldest first, Junk and INBOX mixed.
The `Settler`'s timer sleeps until the earliest guess and pops only what is due.
For each: is it still where the seen index says, and not settled (else dropped: a
rename or move queued it again under its new name)? Its mtime (not due after all:
queued again for then). The ledger: already labelled so, or by a person? Then it
is marked settled without reading the file. Else it is read, learned, and marked
settled in the seen index.

Restarts. The settled marks live in the seen index and are saved with it (at
snapshots, with the embedded store, and at shutdown), so the catch-up queues only
messages not settled yet; a mark lost in a crash costs a ledger lookup, not a
second training. What became due while spamd was down is learned once the
catch-up is done, in batches that yield to the loop.

Cost on 100,000 messages (scripts/scale/settle_cost.py: 60% read in INBOX, 10% unread,
25% in Junk, 5% in Trash; 2 shared cores, ext4 on a virtual disk):
  - the queue: ~150 bytes an entry, 12.4 MiB for the 85,218 candidates of a first
    start. Afterwards it holds only read mail and Junk younger than settle_after.
  - the settled marks: ~58 bytes a settled message in memory (4.7 MiB); one byte a
    message in the index file (4.4 -> 4.5 MiB).
  - a tick with nothing due: ~5 us, whatever the queue holds (a look at its top).
  - a message looked at and not due yet: ~20 us (a stat; queued again). One
    learned: ~2.2 ms, nearly all of it the journal's fsync, so the 85,218 of a
    first start take ~3 minutes beside serving; the loop was held at most 28 ms at
    a time (one training's fsync).
  - the start-up catch-up: queueing adds ~4 us a file (0.38 s); a restart with
    everything settled took 1.44 s against 1.07 with settled learning off, nothing
    read or queued. (A first start's catch-up reads every file to index it: 40 s.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from spamd.engine.scoring import delivered_log_odds
from spamd.errors import SpamdError
from spamd.frontends.maildir.layout import Location, base_of
from spamd.model.bayes import Label

if TYPE_CHECKING:
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox

log = structlog.get_logger()

SETTLED = "settled"  # the training source, in logs, /metrics and spamctl stats
# Entries looked at (stat'ed in one thread hand-off) per step between yields to the loop: a
# hand-off costs ~1 ms, so 64 a step took 55 us an entry, 512 ~15 (scripts/scale/settle_cost.py).
BATCH = 512
READ_BATCH = 64  # files read in one hand-off (their bytes held together)
YIELD_AFTER_S = 0.01  # looking at a batch yields to the loop after this long
IDLE_S = 60.0  # the timer looks again at least this often (wall clock changes)


def settles_as(mailbox: Mailbox, folder: str, name: str) -> Label | None:
    """What a message file `name` in `folder` would settle as: spam in Junk, ham if read elsewhere but Trash; else None."""
    if folder == mailbox.trash:
        return None
    if folder == mailbox.junk:
        return Label.SPAM
    info = name.partition(":")[2]
    flags = info[2:] if info.startswith("2,") else ""
    # T: marked deleted, about to be expunged; not mail kept.
    return Label.HAM if "S" in flags and "T" not in flags else None


def name_time(name: str) -> float | None:
    """The time a Maildir file name begins with (when the file was made), or None."""
    stamp = name.split(".", 1)[0]
    return float(stamp) if stamp.isascii() and stamp.isdigit() else None


def arrival(name: str, mtime: float, now: float) -> float:
    """When a message arrived where it is: its mtime; if that is in the future, its name's time if earlier."""
    if mtime <= now:
        return mtime
    named = name_time(name)
    return mtime if named is None else min(mtime, named)


def relative(loc: Location) -> str:
    """A message file's path under its Maildir's root, as the queue keeps it: "cur/<name>", ".Junk/new/<name>"."""
    return f"{loc.folder}/{loc.sub}/{loc.name}" if loc.folder else f"{loc.sub}/{loc.name}"


def split_relative(path: str) -> tuple[str, str, str]:
    """(folder, sub, name) of a `relative` path, without pathlib (~20 us a path: most of a tick's work)."""
    parts = path.split("/")
    return ("", parts[0], parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[2])


def _mtimes(looked: list[tuple[Mailbox, str, str, str, str, Label]]) -> list[float | None]:
    """The files' mtimes, in order (blocking), each directory opened once."""
    by_mailbox: dict[int, list[int]] = {}
    for i, entry in enumerate(looked):
        by_mailbox.setdefault(id(entry[0]), []).append(i)
    out: list[float | None] = [None] * len(looked)
    for indexes in by_mailbox.values():
        mailbox = looked[indexes[0]][0]
        for i, mtime in zip(indexes, mailbox.mtimes([looked[i][2:5] for i in indexes]), strict=True):
            out[i] = mtime
    return out


class SettleQueue:
    """A heap of (due, Maildir number, path under the Maildir's root); pops only what is due.

    A message may be in it several times (renamed, moved): the stale entries are
    dropped when they come up. It does not decide anything.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._mailboxes: list[Mailbox] = []
        self._numbers: dict[int, int] = {}  # id(mailbox) -> its number; Maildirs are never dropped while running

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: float, mailbox: Mailbox, path: str) -> None:
        number = self._numbers.get(id(mailbox))
        if number is None:
            number = self._numbers[id(mailbox)] = len(self._mailboxes)
            self._mailboxes.append(mailbox)
        heapq.heappush(self._heap, (due, number, path))

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float, limit: int) -> list[tuple[Mailbox, str]]:
        """Up to `limit` entries due by `now`, earliest first."""
        out: list[tuple[Mailbox, str]] = []
        heap = self._heap
        while heap and heap[0][0] <= now and len(out) < limit:
            _, number, path = heapq.heappop(heap)
            out.append((self._mailboxes[number], path))
        return out

    def rewind(self, now: float) -> None:
        """Every entry due by `now` at the latest (settle_after changed: each is looked at again)."""
        self._heap = sorted((min(due, now), number, path) for due, number, path in self._heap)  # sorted: a heap

    def clear(self) -> None:
        self._heap.clear()


class Settler:
    """Queues messages that may settle, and learns them when due through the watcher's `learn`.

    It does not watch anything itself: the watcher tells it what it sees (`consider`).
    """

    def __init__(
        self,
        config: Callable[[], MaildirConfig],
        learn: Callable[..., object],
        ledger_label: Callable[[bytes], tuple[Label, bool] | None],
        until_stored: Callable[..., Awaitable[Any]],
        on_error: Callable[..., None],
        clock: Callable[[], float] = time.time,
    ):
        self.config = config
        self.learn = learn
        self.ledger_label = ledger_label
        self.until_stored = until_stored  # retries while the shared store is unreachable
        self.on_error = on_error
        self.clock = clock
        self.queue = SettleQueue()
        self.counts: Counter[str] = Counter()  # since start: learned, corrected, declined, known, waiting, dropped...
        self._wake = asyncio.Event()
        self._wake_at = -math.inf  # the due time the timer sleeps until (-inf: not sleeping)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ feeding the queue

    def consider(self, mailbox: Mailbox, loc: Location, just_delivered: bool = False) -> bool:
        """Queue `loc` if it may settle where it is; whether it was queued.

        `just_delivered`: spamd has just written it, so it is due settle_after from now.
        """
        settle_after = self.config().settle_after
        if not settle_after:
            return False
        if self._label_if_still_there(mailbox, loc.folder, loc.name) is None:
            return False
        now = self.clock()
        if just_delivered:
            due = now + settle_after
        else:
            named = name_time(loc.name)
            due = now if named is None else min(now, named + settle_after)
        self.queue.push(due, mailbox, relative(loc))
        if due < self._wake_at:
            self._wake.set()
        return True

    async def consider_all(self, mailboxes: list[Mailbox]) -> int:
        """Queue what may settle in every Maildir, from a listing (settled learning was just turned on)."""
        queued = 0
        for mailbox in list(mailboxes):
            for i, loc in enumerate(await asyncio.to_thread(mailbox.scan)):
                queued += self.consider(mailbox, loc)
                if i % 1000 == 999:
                    await asyncio.sleep(0)
        return queued

    def reconfigure(self, before: float, after: float) -> None:
        """settle_after changed from `before` to `after` (a reload); the caller lists the Maildirs if it was off."""
        if not after:
            self.queue.clear()
        elif before:
            self.queue.rewind(self.clock())
            self._wake.set()

    # ------------------------------------------------------------ the timer

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="maildir-settle")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            due = self.queue.next_due()
            wait = None if due is None else due - self.clock()
            if wait is None or wait > 0:
                self._wake.clear()
                self._wake_at = math.inf if due is None else due
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), None if wait is None else min(wait, IDLE_S))
                self._wake_at = -math.inf
            try:
                await self.settle_due()
            except Exception:  # the timer must outlive a bug in one pass
                log.exception("maildir_settle_failed")
                await asyncio.sleep(1.0)

    async def settle_due(self) -> Counter[str]:
        """Learn every queued message due now, in batches that yield to the loop; what happened, counted."""
        async with self._lock:
            counts: Counter[str] = Counter()
            started = time.perf_counter()
            while batch := self.queue.pop_due(self.clock(), BATCH):
                await self._settle(batch, counts)
                await asyncio.sleep(0)
            self.counts.update(counts)
            if counts:
                trained = any(k not in ("waiting", "dropped") for k in counts)
                (log.info if trained else log.debug)(
                    "maildir_settled", elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
                    queued=len(self.queue), **counts,
                )  # fmt: skip
            return counts

    def _label_if_still_there(self, mailbox: Mailbox, folder: str, name: str) -> Label | None:
        """What the file would settle as, if the seen index still has it there and not settled; else None."""
        entry = mailbox.index.by_base.get(base_of(name))
        if entry is None or entry[0] != folder or entry[1] in mailbox.index.settled:
            return None
        return settles_as(mailbox, folder, name)

    async def _settle(self, batch: list[tuple[Mailbox, str]], counts: Counter[str]) -> None:
        settle_after = self.config().settle_after
        if not settle_after:  # turned off meanwhile
            counts["dropped"] += len(batch)
            return
        looked: list[tuple[Mailbox, str, str, str, str, Label]] = []  # (mailbox, path, folder, sub, name, label)
        for mailbox, path in batch:
            folder, sub, name = split_relative(path)
            label = self._label_if_still_there(mailbox, folder, name)
            if label is None:
                counts["dropped"] += 1  # moved, settled or gone since: its move queued it again if it may settle
                continue
            looked.append((mailbox, path, folder, sub, name, label))
        mtimes = await asyncio.to_thread(_mtimes, looked)
        now = self.clock()
        to_read: list[tuple[Mailbox, Location, Label, float]] = []
        last_yield = time.perf_counter()
        for (mailbox, path, folder, sub, name, label), mtime in zip(looked, mtimes, strict=True):
            if time.perf_counter() - last_yield > YIELD_AFTER_S:
                await asyncio.sleep(0)
                last_yield = time.perf_counter()
            entry = mailbox.index.by_base.get(base_of(name))
            if mtime is None or entry is None or self._label_if_still_there(mailbox, folder, name) != label:
                counts["dropped"] += 1  # renamed (flags) or removed: the rename queued its new name
                continue
            since = arrival(name, mtime, now)
            if since + settle_after > now:
                self.queue.push(since + settle_after, mailbox, path)
                counts["waiting"] += 1
                continue
            known = await self.until_stored(
                functools.partial(self.ledger_label, entry[1]), maildir=str(mailbox.root), name=name
            )
            if known is not None and (known[1] or known[0] == label):
                mailbox.index.mark_settled(base_of(name))  # a person decided, or it is learned so already
                counts["known"] += 1
                continue
            to_read.append(
                (mailbox, Location(folder, sub, name, mailbox.folder_dir(folder) / sub / name), label, since)
            )
            if len(to_read) == READ_BATCH:
                await self._learn(to_read, now, counts)
                to_read = []
                last_yield = time.perf_counter()
        if to_read:
            await self._learn(to_read, now, counts)

    async def _learn(
        self, to_read: list[tuple[Mailbox, Location, Label, float]], now: float, counts: Counter[str]
    ) -> None:
        raws = await asyncio.to_thread(lambda: [mailbox.read_message(loc) for mailbox, loc, _, _ in to_read])
        margin = self.config().settle_margin
        for (mailbox, loc, label, since), raw in zip(to_read, raws, strict=True):
            if raw is None or self._label_if_still_there(mailbox, loc.folder, loc.name) != label:
                counts["dropped"] += 1
                continue
            scored = delivered_log_odds(raw)
            if scored is not None and not abs(scored) >= margin:
                mailbox.index.mark_settled(loc.base)  # spamd filed it unsure of itself: an uncorrected mistake, maybe
                counts["inside_margin"] += 1
                continue
            learn = functools.partial(
                self.learn, raw, label, SETTLED, user=False, layer_user=mailbox.layer_user,
                user_name=mailbox.user, folder=loc.folder or "INBOX", how="left_in_place", age_s=round(now - since),
            )  # fmt: skip
            try:
                outcome = await self.until_stored(learn, maildir=str(mailbox.root), name=loc.name)
            except (
                SpamdError
            ) as e:  # the store refused (a full disk, Redis gone at shutdown): tried again at next start
                log.error("maildir_settle_failed", maildir=str(mailbox.root), path=str(loc.path), error=str(e))
                self.on_error("maildir_settle_failed", path=str(loc.path), error=str(e))
                counts["failed"] += 1
                continue
            mailbox.index.mark_settled(loc.base)
            counts[str(getattr(outcome, "value", outcome))] += 1
            # Each training fsyncs the journal on the loop (1-3 ms here, spikes of 30): one at a time.
            await asyncio.sleep(0)
