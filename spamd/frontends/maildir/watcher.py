"""The watchdog bridge and the watcher: folder moves turned into training decisions.

Move detection. Each Maildir has a `SeenIndex` (`seen.py`): base name -> (folder, message key)
for every file spamd has seen, and message key -> folder. When a file appears
in a folder (inotify create / moved-to, or found by the start-up scan):
  - base known, same folder: a flag change or new/ -> cur/: nothing.
  - base known, other folder: a move from there.
  - base unknown: read the file (the only time a file is read); its key known
    to the index at another folder is a move under a new name (Dovecot's
    hard-link copy + expunge); otherwise the ledger decides (below).
A move into Junk from any other folder is spam; out of Junk into any folder but
Trash is ham; anything else (Junk -> Trash, between ordinary folders) is not a
training event. An unknown file in Junk is spam unless it carries spamd's own
spam flag (then a delivery agent filed it by spamd's verdict, no person did); an
unknown file elsewhere (not Trash) is ham if the ledger holds its key as spam
(a person moved it out of Junk while spamd was not looking). spamd records its
own deliveries in the index before renaming them into place, so they never
look like moves.

The start-up catch-up runs exactly that over a directory listing: O(files)
`readdir` entries, but only files whose base is not in the index are read, so
after the first start it costs a listing plus the messages that arrived or were
renamed while spamd was down.

What people leave in place is learned too, when `[maildir] settle_after` is set:
the watcher tells its `Settler` (`settle.py`) of every message it sees appear or
be renamed, and the settler learns those that stay long enough.

This module decides; it does not score or learn. It calls the `score` and
`learn` functions the daemon gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from spamd.config import MaildirConfig
from spamd.engine.scoring import Scored, has_spam_status, spam_flagged
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.maildir.files import write_message
from spamd.frontends.maildir.layout import _SIZE_FIELDS_RE, FILED_MARK, INBOX, Location, base_of, filed_base
from spamd.frontends.maildir.mailbox import Mailbox
from spamd.frontends.maildir.settle import Settler
from spamd.mail.message import message_key
from spamd.model.bayes import Label, Verdict
from spamd.runtime.scheduling import threads_started_here_yield_to_the_loop

log = structlog.get_logger()

T = TypeVar("T")


Learn = Callable[..., object]  # (raw, label, source, user=..., **context)
LedgerLookup = Callable[[bytes], "tuple[Label, bool] | None"]


# Only what moves mean: the inotify mask then leaves out IN_MODIFY, IN_CLOSE_WRITE,
# IN_OPEN and IN_ATTRIB, which every write into tmp/ would otherwise raise.
_WATCHED_EVENTS = [FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirCreatedEvent, DirMovedEvent]


class _Bridge(FileSystemEventHandler):
    """Runs on watchdog's thread: only hands events to the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, mailbox: Mailbox, queue: asyncio.Queue):
        self.loop, self.mailbox, self.queue = loop, mailbox, queue

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "moved", "deleted"):
            return
        src = os.fsdecode(event.src_path)
        if event.event_type != "moved" and os.path.basename(os.path.dirname(src)) == "tmp":
            return  # a delivery being written: it counts once renamed into new/ or cur/
        if event.event_type == "created" and os.path.basename(src) in self.mailbox.delivered:
            # spamd's own delivery, in the index before it was written: the loop would
            # find it there and do nothing. Dropped here, it costs the loop no wake-up
            # (5% of the loop's time under scripts/speed/bench_smtp.py went to these events).
            return
        dest = os.fsdecode(event.dest_path) if event.event_type == "moved" else ""
        # RuntimeError: the loop is closed: spamd is exiting and catch-up covers the rest at next start.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.mailbox, event.event_type, src, dest))


class MaildirWatcher:
    """Watches every served Maildir; files unscored INBOX mail and turns moves into training calls."""

    def __init__(
        self,
        mailboxes: list[Mailbox],
        config: MaildirConfig,
        score: Callable[[bytes, str | None], Awaitable[Scored]],
        delivered: Callable[..., None],
        learn: Learn,
        ledger_label: LedgerLookup,
        on_error: Callable[..., None],
        clock: Callable[[], float] = time.time,
        ignored: Callable[[bytes, str | None, str | None, str | None, bool], None] | None = None,
    ):
        self.mailboxes = mailboxes
        # (raw, user, from folder, to folder, into Trash): a move that teaches nothing, for its learning record
        self.ignored = ignored
        self.config = config
        self.score = score  # classify through the Engine (analyzed beside the loop if it can be), headers added
        self.delivered = delivered  # (scored, raw, started, **context): the message_scored line
        self.learn = learn
        self.ledger_label = ledger_label
        self.on_error = on_error
        self.queue: asyncio.Queue[tuple[Mailbox, str, str, str]] = asyncio.Queue()
        self.handled = 0  # events taken from the queue
        self.observer: Any = None
        self._consumer: asyncio.Task[None] | None = None
        self._stopping = False
        self.files_read = 0
        self.settler = Settler(lambda: self.config, learn, ledger_label, self._until_stored, on_error, clock)
        self._settle_listing: asyncio.Task[int] | None = None

    # ------------------------------------------------------------ lifecycle

    def start_watching(self) -> None:
        """Start inotify watches; events queue up until `start_consuming` (after catch-up)."""
        with threads_started_here_yield_to_the_loop():  # Observer() starts watchdog's inotify reader
            self.observer = Observer()
            for mailbox in self.mailboxes:
                self._watch(mailbox)
            self.observer.start()

    def _watch(self, mailbox: Mailbox) -> None:
        with threads_started_here_yield_to_the_loop():  # a running observer starts the new watch's threads here
            self.observer.schedule(
                _Bridge(asyncio.get_running_loop(), mailbox, self.queue),
                str(mailbox.root),
                recursive=True,
                event_filter=_WATCHED_EVENTS,
            )

    async def watch_added(self, mailbox: Mailbox) -> None:
        """Serve a Maildir added to `mailboxes` while running: watch it, then catch up on what it holds."""
        self._watch(mailbox)
        await self.catch_up(mailbox)

    def start_consuming(self) -> None:
        self._consumer = asyncio.create_task(self._consume(), name="maildir-events")

    def start_settling(self) -> None:
        """Learn settled mail from now on: what the catch-ups queued first (in batches, beside serving)."""
        self.settler.start()

    def delivered_by_spamd(self, mailbox: Mailbox, loc: Location) -> None:
        """spamd's SMTP delivery wrote `loc` (its events never reach the loop): it may settle from now."""
        self.settler.consider(mailbox, loc, just_delivered=True)

    def reconfigure(self, config: MaildirConfig) -> None:
        """A reload's [maildir] section: settle_after applies to what is queued, and turned on, to what is there."""
        before, self.config = self.config.settle_after, config
        if config.settle_after == before:
            return
        self.settler.reconfigure(before, config.settle_after)
        if not before and (self._settle_listing is None or self._settle_listing.done()):
            self._settle_listing = asyncio.create_task(
                self.settler.consider_all(self.mailboxes), name="maildir-settle-listing"
            )

    async def stop(self) -> None:
        """Stop watching and settling, then handle what was already queued."""
        self._stopping = True  # a training waiting for the store gives up (logged) rather than hold shutdown
        if self._settle_listing is not None:
            self._settle_listing.cancel()
        await self.settler.stop()
        if self.observer is not None:
            await asyncio.to_thread(self._stop_observer)
        if self._consumer is not None:
            await self.queue.join()
            self._consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._consumer

    def _stop_observer(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=10)

    async def drained(self) -> None:
        await self.queue.join()

    # ------------------------------------------------------------ catch-up

    async def catch_up(self, mailbox: Mailbox) -> dict[str, int]:
        """Apply what happened while spamd was down: the same decisions as live, over a listing."""
        started = time.perf_counter()
        locations = await asyncio.to_thread(mailbox.scan)
        by_base: dict[str, list[Location]] = {}
        for loc in locations:
            by_base.setdefault(loc.base, []).append(loc)
        filed_originals = {b[: b.rindex(FILED_MARK)] for b in by_base if FILED_MARK in b}
        read_before = self.files_read
        to_settle = 0
        for base, locs in by_base.items():
            entry = mailbox.index.by_base.get(base)
            if len(locs) > 1 and entry is not None:
                # Mid-move (linked into the new folder, not yet unlinked from the old):
                # the copies outside the folder it was last seen in are the move.
                locs = [loc for loc in locs if loc.folder != entry[0]] or locs[:1]
            for loc in locs:
                if (
                    entry is None
                    and loc.folder == INBOX
                    and loc.sub == "new"
                    and _SIZE_FIELDS_RE.sub("", base) in filed_originals
                ):
                    # A filing interrupted after its copy was renamed into place.
                    await asyncio.to_thread(mailbox.remove, loc)
                    continue
                await self._appeared(mailbox, loc, None, context="catch_up")
                to_settle += self.settler.consider(mailbox, loc)
        dropped = mailbox.index.keep_only(set(by_base))
        summary = {
            "files": len(locations),
            "read": self.files_read - read_before,
            "forgotten": dropped,
            "settle_queued": to_settle,  # read mail and Junk not settled yet (a first start: all the old mail)
        }
        log.info(
            "maildir_caught_up",
            maildir=str(mailbox.root),
            elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
            **summary,
        )
        return summary

    # ------------------------------------------------------------ live events

    async def _consume(self) -> None:
        while True:
            mailbox, kind, src, dest = await self.queue.get()
            self.handled += 1
            try:
                await self._handle(mailbox, kind, src, dest)
            except SpamdError as e:  # the store refused (a full disk, Redis unreachable): one line, no traceback
                log.error("maildir_event_failed", maildir=str(mailbox.root), path=dest or src, error=str(e))
                self.on_error("maildir_event_failed", path=dest or src, error=str(e))
            except Exception as e:  # one bad file must not stop the watcher
                log.exception("maildir_event_failed", maildir=str(mailbox.root), path=dest or src)
                self.on_error("maildir_event_failed", path=dest or src, error=f"{type(e).__name__}: {e}")
            finally:
                self.queue.task_done()

    async def _handle(self, mailbox: Mailbox, kind: str, src: str, dest: str) -> None:
        if kind == "deleted":
            loc = mailbox.locate(src)
            if loc is not None:
                mailbox.index.forget(loc.base, loc.folder)
            return
        previous = None
        if kind == "moved":
            before = mailbox.locate(src)
            after = mailbox.locate(dest)
            if before is not None and after is None:
                mailbox.index.forget(before.base, before.folder)  # moved out of the Maildir: gone
            elif before is not None and after is not None and before.base != after.base:
                previous = mailbox.index.by_base.get(before.base)
                mailbox.index.forget(before.base)
        else:
            after = mailbox.locate(src)
        if after is not None:
            await self._appeared(mailbox, after, previous, context="live")
            self.settler.consider(mailbox, after)  # where it is now, flags included (not if filed away)

    async def _appeared(
        self, mailbox: Mailbox, loc: Location, previous: tuple[str, bytes] | None, context: str
    ) -> None:
        entry = previous or mailbox.index.by_base.get(loc.base)
        if entry is not None:
            before, key = entry
            if before == loc.folder:
                return  # flags changed, new/ -> cur/, or our own delivery
            mailbox.index.record(loc.base, loc.folder, key)
            label = mailbox.classify_move(before, loc.folder)
            if label is not None:
                await self._learn(mailbox, loc, label, how="moved", before=before, context=context)
            else:
                await self._ignored(mailbox, loc, before)
            return

        raw = await self._read(mailbox, loc)
        if raw is None:
            return
        self.files_read += 1
        key = message_key(raw)
        if loc.folder == INBOX and loc.sub == "new" and self.config.watch_inbox and not has_spam_status(raw):
            await self._file(mailbox, loc, raw, key)
            return
        renamed_from = mailbox.index.by_key.get(key)
        mailbox.index.record(loc.base, loc.folder, key)
        if renamed_from is not None:
            label = mailbox.classify_move(renamed_from, loc.folder)
            if label is not None:
                await self._learn(
                    mailbox, loc, label, how="moved_renamed", before=renamed_from, context=context, raw=raw
                )
            else:
                await self._ignored(mailbox, loc, renamed_from, raw)
            return
        known = self.ledger_label(key)
        if loc.folder == mailbox.junk:
            if spam_flagged(raw):
                return  # filed into Junk by a delivery agent following spamd's verdict
            if known != (Label.SPAM, True):
                await self._learn(mailbox, loc, Label.SPAM, how="found_in_junk", before=None, context=context, raw=raw)
        elif loc.folder != mailbox.trash and known is not None and known[0] == Label.SPAM:
            await self._learn(mailbox, loc, Label.HAM, how="found_out_of_junk", before=None, context=context, raw=raw)

    async def _ignored(self, mailbox: Mailbox, loc: Location, before: str, raw: bytes | None = None) -> None:
        """A move that teaches nothing (into Trash, between folders neither of which is Junk): its learning record."""
        if self.ignored is None:
            return
        raw = raw if raw is not None else await self._read(mailbox, loc)
        if raw is not None:
            self.ignored(raw, mailbox.layer_user, before or "INBOX", loc.folder or "INBOX", loc.folder == mailbox.trash)

    async def _read(self, mailbox: Mailbox, loc: Location) -> bytes | None:
        return await asyncio.to_thread(mailbox.read_message, loc)

    async def _learn(
        self,
        mailbox: Mailbox,
        loc: Location,
        label: Label,
        how: str,
        before: str | None,
        context: str,
        raw: bytes | None = None,
    ) -> None:
        if raw is None:
            raw = await self._read(mailbox, loc)
            if raw is None:
                # Gone before we read it: find it by name where it went next (flags changed).
                for sub in ("cur", "new"):
                    directory = mailbox.folder_dir(loc.folder) / sub
                    try:
                        names = [n for n in os.listdir(directory) if base_of(n) == loc.base]
                    except OSError:  # gone, or not a directory: read_message refuses links anyway
                        names = []
                    if names:
                        raw = await self._read(mailbox, Location(loc.folder, sub, names[0], directory / names[0]))
                        break
                if raw is None:
                    log.warning("training_source_vanished", maildir=str(mailbox.root), folder=loc.folder, name=loc.name)
                    return
        await self._until_stored(
            lambda: self.learn(
                raw, label, "maildir", user=True, layer_user=mailbox.layer_user,
                user_name=mailbox.user, folder=loc.folder or "INBOX", previous_folder=before, how=how, phase=context,
            ),
            maildir=str(mailbox.root), name=loc.name,
        )  # fmt: skip

    async def _until_stored(self, call: Callable[[], T | Awaitable[T]], **context: object) -> T:
        """`call()` (awaited if it gives an awaitable), retried while the shared store (Redis) is
        unreachable, so a move made meanwhile is still learned.

        Holds the queue meanwhile (what follows needs the store too); gives up at shutdown.
        """
        delay = 0.1
        while True:
            try:
                result = call()
                return await result if inspect.isawaitable(result) else result
            except StoreUnavailableError as e:
                if self._stopping:
                    raise
                if delay == 0.1:
                    log.warning("maildir_waiting_for_store", error=str(e), **context)
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)

    async def _file(self, mailbox: Mailbox, loc: Location, raw: bytes, key: bytes) -> None:
        """Score an unscored INBOX message and put the scored copy in INBOX or Junk."""
        started = time.perf_counter()
        scored: Scored = await self._until_stored(
            lambda: self.score(raw, mailbox.layer_user), maildir=str(mailbox.root), name=loc.name
        )
        spam = scored.score.verdict is Verdict.SPAM
        folder = mailbox.junk if spam else INBOX
        name = filed_base(loc.base, len(scored.data))
        # Recorded before the rename: the watcher must see spamd's own filing as no move.
        mailbox.index.record(name, folder, key)
        try:
            await asyncio.to_thread(write_message, mailbox, folder, name, scored.data, self.config.fsync, loc)
        except FileExistsError:
            pass  # a scored copy from an interrupted filing is being written again; keep it
        except OSError as e:
            mailbox.index.forget(name)
            what = "disk full" if e.errno == errno.ENOSPC else e.strerror
            what = f"{e.filename}: {what}" if e.filename else what
            log.error("maildir_filing_failed", maildir=str(mailbox.root), name=loc.name, error=what)
            self.on_error("maildir_filing_failed", path=str(loc.path), error=what)
            return
        self.delivered(
            scored, raw, started, way_in="maildir", user_name=mailbox.user, folder=folder or "INBOX", via="maildir"
        )
        if self.config.autolearn and scored.score.verdict is not Verdict.UNSURE:
            self.learn(
                raw,
                Label.SPAM if spam else Label.HAM,
                "autolearn",
                user=False,
                layer_user=mailbox.layer_user,
                user_name=mailbox.user,
            )
