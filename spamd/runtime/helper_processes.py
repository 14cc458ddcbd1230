"""Helper processes beside the event loop: start them, hand them work, take their answers, replace them, stop them.

The loop owns the model and every reply; work that needs neither (analysing a
message, writing one into a Maildir) can run in a helper process, where it takes
no turn of the loop's GIL. `spamd.engine.analyzers` and `spamd.frontends.delivery` are
the two kinds. Nothing depends on a helper being there: a request no helper can
take, or one whose helper exited, was killed or did not answer within
`answer_timeout_s`, fails with the kind's `Unavailable` error and the caller does
the work itself, as with no helpers at all. A replacement process is started.

The helpers run `python -m MODULE FD`: a fresh interpreter (no fork of a threaded
daemon) that exits when the daemon's end of its socket closes, SIGKILL of the
daemon included.

Frames, both ways: kind (1 byte) + request id + payload length (4 bytes each) + payload.
Daemon -> helper: b"C" the configuration (first, and on reload), then b"W" work.
Helper -> daemon: b"R" once configured, then one answer per b"W", carrying its id,
in any order; the kinds and payloads of answers are the helper kind's own. b"N" (id 0)
is a notice of the helper's, at any time, for the kind's `notice`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger()

T = TypeVar("T")

FRAME = struct.Struct("!cII")
# A helper that exits is replaced at most this often, so a crash loop cannot spin.
RESTART_INTERVAL_S = 1.0
# Helpers that exit before they were ever ready, in a row, after which spamd stops
# starting them (a broken install: the callers do all the work, as with no helpers).
MAX_FAILED_STARTS = 5


class HelperUnavailable(Exception):
    """No helper answered for this request: the caller does the work itself."""


@dataclass
class Helper:
    process: subprocess.Popen[bytes]
    writer: asyncio.StreamWriter
    reader: asyncio.StreamReader
    # request id -> (future, time sent), oldest first
    pending: dict[int, tuple[asyncio.Future, float]] = field(default_factory=dict)
    alive: bool = True
    outgoing: list[bytes] = field(default_factory=list)  # frames for the next send
    ready: bool = False  # it has said so: until then the callers do its share (start-up takes ~0.3 s)
    answering: asyncio.Task[None] | None = None


class HelperProcesses(Generic[T]):
    """A set of helper processes of one kind; `request` hands a payload to the least busy one."""

    module = ""  # run as `python -m module FD`
    kind = ""  # in log events and task names: "analysis", "delivery"
    fallback = ""  # what happens to the work while no helper takes it, for the logs
    unavailable: type[HelperUnavailable] = HelperUnavailable
    answer_timeout_s = 30.0  # the oldest request unanswered this long: the helper is killed

    def __init__(self, processes: int):
        self.wanted = processes
        self.helpers: list[Helper] = []
        self.closing = False
        self.started_total = 0
        self.answered = 0  # requests a helper answered
        self.handed_back = 0  # requests no helper answered for: the caller did the work
        self._ids = itertools.count(1)
        self._last_start = 0.0
        self._watchdog: asyncio.Task[None] | None = None
        self._starting: set[asyncio.Task[None]] = set()
        self._failed_starts = 0

    # ------------------------------------------------------------ the kind's part

    def configuration(self) -> bytes:
        """The payload of the b"C" frame every new helper gets first."""
        return b""

    def decode(self, kind: bytes, payload: bytes) -> T | BaseException:
        """An answer frame's result, or the exception its request fails with; raises if the frame is malformed."""
        raise NotImplementedError

    def notice(self, helper: Helper, payload: bytes) -> None:
        """A b"N" frame's payload: something the helper tells of its own state, not an answer."""

    # ------------------------------------------------------------ requests

    async def start(self) -> None:
        try:
            for _ in range(self.wanted):
                await self._start_one()
        except OSError as e:
            self._give_up(f"cannot start {sys.executable}: {e.strerror or e}")
        self._watchdog = asyncio.create_task(self._kill_stuck(), name=f"{self.kind}-watchdog")

    def send_configuration(self) -> None:
        """Send every running helper the current `configuration()`."""
        for helper in self.helpers:
            if helper.alive:
                self._send(helper, b"C", 0, self.configuration())

    async def request(self, payload: bytes) -> T:
        """The answer of the least busy ready helper; the kind's `unavailable` error if none answers."""
        ready = [h for h in self.helpers if h.alive and h.ready]
        if not ready:
            self._replace_exited()
            self.handed_back += 1
            raise self.unavailable(f"no {self.kind} process is ready")
        helper = min(ready, key=lambda h: len(h.pending))
        ident = next(self._ids) & 0xFFFFFFFF
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        helper.pending[ident] = (answer, time.monotonic())
        self._send(helper, b"W", ident, payload)
        return await answer

    def _send(self, helper: Helper, kind: bytes, ident: int, payload: bytes) -> None:
        # Frames queued in one turn of the loop leave in one send, at its end: a send
        # wakes the helper, and each wake-up cost the loop its CPU for a while (the
        # sends were 6% of the loop's samples in scripts/speed/bench_smtp.py, one a message).
        if not helper.outgoing:
            asyncio.get_running_loop().call_soon(self._flush, helper)
        helper.outgoing += (FRAME.pack(kind, ident, len(payload)), payload)

    @staticmethod
    def _flush(helper: Helper) -> None:
        if helper.alive and not helper.writer.is_closing():
            helper.writer.write(b"".join(helper.outgoing))
        helper.outgoing.clear()

    # ------------------------------------------------------------ helpers' lives

    async def _start_one(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            # Spawned, not waited for: milliseconds (see close()). In a thread, a cancellation would close
            # `theirs` below while the child may still be handed it.
            process = subprocess.Popen(  # noqa: ASYNC220  see above
                [sys.executable, "-m", self.module, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            reader, writer = await asyncio.open_connection(sock=ours)
        except BaseException:
            ours.close()
            process.kill()
            process.wait()
            raise
        helper = Helper(process, writer, reader)
        self._send(helper, b"C", 0, self.configuration())
        helper.answering = asyncio.create_task(self._read_answers(helper), name=f"{self.kind}-{process.pid}")
        self.helpers.append(helper)
        self.started_total += 1
        self._last_start = time.monotonic()

    def _give_up(self, why: str) -> None:
        self.wanted = 0
        log.error(f"{self.kind}_processes_disabled", error=why, action=self.fallback)

    async def _read_answers(self, helper: Helper) -> None:
        try:
            while True:
                kind, ident, length = FRAME.unpack(await helper.reader.readexactly(FRAME.size))
                payload = await helper.reader.readexactly(length)
                if kind == b"R":
                    if not helper.ready:  # (a new configuration is answered with b"R" too)
                        log.info(f"{self.kind}_process_ready", pid=helper.process.pid)
                    helper.ready = True
                    self._failed_starts = 0
                    continue
                if kind == b"N":
                    self.notice(helper, payload)
                    continue
                answer, _ = helper.pending[ident]
                result = self.decode(kind, payload)  # a malformed answer: lost, and `answer` is handed back
                del helper.pending[ident]
                if answer.done():  # its caller went away meanwhile
                    continue
                if isinstance(result, self.unavailable):
                    self.handed_back += 1
                else:
                    self.answered += 1
                if isinstance(result, BaseException):
                    answer.set_exception(result)
                else:
                    answer.set_result(result)
        except (asyncio.IncompleteReadError, ConnectionError, KeyError, IndexError, struct.error, ValueError) as e:
            self._lost(helper, e)

    def _lost(self, helper: Helper, error: BaseException) -> None:
        helper.alive = False
        self._hand_back(helper, f"the {self.kind} process exited")
        helper.writer.close()
        if helper.process.poll() is None:
            helper.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.process.wait(timeout=1.0)  # gone already (its socket closed) or just killed
        if self.closing:
            return
        self.helpers.remove(helper)
        if not helper.ready:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS and self.wanted:
                self._give_up(f"{self._failed_starts} {self.kind} processes in a row exited before they were ready")
                return
        log.warning(
            f"{self.kind}_process_lost",
            pid=helper.process.pid,
            exit_code=helper.process.returncode,
            error=f"{type(error).__name__}: {error}",
            action=f"{self.fallback}; a new process is started",
        )
        self._replace_exited()

    def _hand_back(self, helper: Helper, why: str) -> None:
        for answer, _ in helper.pending.values():
            if not answer.done():
                self.handed_back += 1
                answer.set_exception(self.unavailable(why))
        helper.pending.clear()

    def _replace_exited(self) -> None:
        if self.closing or len(self.helpers) >= self.wanted:
            return
        if time.monotonic() - self._last_start < RESTART_INTERVAL_S:
            return  # the next request after the interval tries again
        self._last_start = time.monotonic()
        try:
            starting = asyncio.get_running_loop().create_task(self._start_one(), name=f"{self.kind}-restart")
        except RuntimeError:
            return
        self._starting.add(starting)
        starting.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS and self.wanted:
                self._give_up(f"cannot start {sys.executable}: {task.exception()}")
                return
            log.error(f"{self.kind}_process_not_started", error=str(task.exception()), action=self.fallback)

    async def _kill_stuck(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for helper in list(self.helpers):
                oldest = next(iter(helper.pending.values()), None)
                if helper.alive and oldest is not None and now - oldest[1] > self.answer_timeout_s:
                    log.warning(
                        f"{self.kind}_process_stuck", pid=helper.process.pid, waited_s=round(now - oldest[1], 1)
                    )
                    helper.process.kill()  # its reader sees the end of the socket and hands the requests back
            if len(self.helpers) < self.wanted:
                self._replace_exited()

    async def close(self) -> None:
        """Stop the helpers: each exits at the end of its socket; killed if it lingers."""
        self.closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        # A replacement under way finishes starting (milliseconds: the process is spawned,
        # not waited for) and is then stopped with the others.
        await asyncio.gather(*self._starting, return_exceptions=True)
        for helper in self.helpers:
            helper.writer.close()
        deadline = time.monotonic() + 5.0
        for helper in self.helpers:
            # A Popen's exit has no awaitable: polled, bounded by the deadline.
            while helper.process.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110  see above
                await asyncio.sleep(0.02)
            if helper.process.poll() is None:
                helper.process.kill()
                helper.process.wait()
            if helper.answering is not None:
                helper.answering.cancel()
        await asyncio.gather(*(h.answering for h in self.helpers if h.answering), return_exceptions=True)
        for helper in self.helpers:  # a request still waiting (past the drain's timeout): the caller does it
            self._hand_back(helper, "spamd is stopping")


# ---------------------------------------------------------------- the helper's side


def ignore_stop_signals() -> None:
    """The daemon stops its helpers by closing their sockets, once its own drain is done.

    A SIGTERM or SIGINT sent to the whole process group (systemd's stop, a terminal's
    ^C) would otherwise end a helper in the middle of that drain's work.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def frames(sock: socket.socket) -> Iterator[list[tuple[bytes, int, bytes]]]:
    """The daemon's frames, as (kind, id, payload), a list per read, until its end of the socket closes."""
    received = bytearray()
    # Read into one buffer kept for the helper's life: recv(1 MiB) made a new 1 MiB object at
    # each read, 19.6 against 3.9 us a read of an 8 KB frame (a socketpair, 20,000 reads).
    buffer = memoryview(bytearray(1 << 20))
    while True:
        try:
            length = sock.recv_into(buffer)
        except ConnectionError:
            return
        if not length:
            return
        received += buffer[:length]
        batch = []
        start = 0
        while len(received) - start >= FRAME.size:
            kind, ident, length = FRAME.unpack_from(received, start)
            if len(received) - start - FRAME.size < length:
                break
            batch.append((kind, ident, bytes(received[start + FRAME.size : start + FRAME.size + length])))
            start += FRAME.size + length
        del received[:start]
        if batch:
            yield batch


def frame(kind: bytes, ident: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(kind, ident, len(payload)) + payload
