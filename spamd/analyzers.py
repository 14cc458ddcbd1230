"""Message analysis in helper processes, so the daemon's second core works while one loop owns the model.

Analysis (strip, parse, tokenize, hash) needs no model and is most of the CPU a
message costs the loop. The daemon sends the bytes of each message it scores (every
way in: SMTP, milter, spamc, a Maildir's unscored arrivals) to an analysis
process over a socket pair and gets its ledger key and features back; scoring,
training and every reply stay on the loop, in arrival order per process.

Nothing depends on a helper being there. A message it cannot answer for (it
exited, was killed, took longer than `ANSWER_TIMEOUT_S`, or its analysis raised)
is analyzed on the loop instead, exactly as without helpers, and a replacement
process is started. The helpers run `python -m spamd.analyzers FD`: a fresh
interpreter (no fork of a threaded daemon) that exits when the daemon's end of
its socket closes, SIGKILL of the daemon included.

Frames, daemon -> helper: b"C" + length + pickle((ParserConfig, hash_bits)) to
configure (first, and on reload); b"M" + length + message bytes. Helper -> daemon:
b"R" + 0 once configured; then one answer per b"M", in order: b"A" + length + key
length (2 bytes) + key + ids + counts (uint32 each), or b"E" + length + the error's text.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import structlog

from spamd.classifier import Analyzed, Classifier, usable_cores
from spamd.config import Config, ModelConfig
from spamd.model import Features

log = structlog.get_logger()

_FRAME = struct.Struct("!cI")
_KEY_LENGTH = struct.Struct("!H")
# A helper that has not answered its oldest message in this long is killed (the
# message is then analyzed on the loop). The parser's caps bound analysis: the
# slowest hostile message in tests/test_fuzz.py takes well under a second.
ANSWER_TIMEOUT_S = 30.0
# A helper that exits is replaced at most this often, so a crash loop cannot spin.
RESTART_INTERVAL_S = 1.0
# Helpers that exit before they were ever ready, in a row, after which spamd stops
# starting them (a broken install: the loop analyzes everything, as with processes = 0).
MAX_FAILED_STARTS = 5


class AnalysisUnavailable(Exception):
    """No helper answered for this message: analyze it on the loop."""


def default_processes() -> int:
    """Helpers beside the loop: one per core but the loop's own, none on a single core."""
    return max(0, usable_cores() - 1)


@dataclass
class _Helper:
    process: subprocess.Popen[bytes]
    writer: asyncio.StreamWriter
    reader: asyncio.StreamReader
    # (future, time sent) per message sent and not yet answered, oldest first.
    pending: deque[tuple[asyncio.Future[Analyzed], float]] = field(default_factory=deque)
    alive: bool = True
    outgoing: list[bytes] = field(default_factory=list)  # frames for the next send
    ready: bool = False  # it has said so: until then its share is analyzed on the loop (start-up takes ~0.3 s)
    answering: asyncio.Task[None] | None = None


class AnalysisProcesses:
    """Helper processes that analyze messages for the loop; `analyze` picks the least busy."""

    def __init__(self, config: Config, processes: int):
        self.config = config
        self.wanted = processes
        self.helpers: list[_Helper] = []
        self.closing = False
        self.started_total = 0
        self.answered = 0  # messages a helper analyzed
        self.handed_back = 0  # messages no helper answered for: analyzed on the loop
        self._last_start = 0.0
        self._watchdog: asyncio.Task[None] | None = None
        self._starting: set[asyncio.Task[None]] = set()
        self._failed_starts = 0

    async def start(self) -> None:
        try:
            for _ in range(self.wanted):
                await self._start_one()
        except OSError as e:
            self._give_up(f"cannot start {sys.executable}: {e.strerror or e}")
        self._watchdog = asyncio.create_task(self._kill_stuck(), name="analysis-watchdog")

    def _give_up(self, why: str) -> None:
        self.wanted = 0
        log.error("analysis_processes_disabled", error=why, action="every message is analyzed on the loop")

    async def _start_one(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "spamd.analyzers", str(theirs.fileno())],
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
        helper = _Helper(process, writer, reader)
        self._send(helper, b"C", pickle.dumps((self.config.parser, self.config.model.hash_bits)))
        helper.answering = asyncio.create_task(self._read_answers(helper), name=f"analysis-{process.pid}")
        self.helpers.append(helper)
        self.started_total += 1
        self._last_start = time.monotonic()

    @staticmethod
    def _send(helper: _Helper, kind: bytes, payload: bytes) -> None:
        # Frames queued in one turn of the loop leave in one send, at its end: a send
        # wakes the helper, and each wake-up cost the loop its CPU for a while (the
        # sends were 6% of the loop's samples in scripts/bench_smtp.py, one a message).
        if not helper.outgoing:
            asyncio.get_running_loop().call_soon(AnalysisProcesses._flush, helper)
        helper.outgoing += (_FRAME.pack(kind, len(payload)), payload)

    @staticmethod
    def _flush(helper: _Helper) -> None:
        if helper.alive and not helper.writer.is_closing():
            helper.writer.write(b"".join(helper.outgoing))
        helper.outgoing.clear()

    def reconfigure(self, config: Config) -> None:
        """New parser caps for the helpers (hash_bits never changes while running)."""
        self.config = config
        for helper in self.helpers:
            if helper.alive:
                self._send(helper, b"C", pickle.dumps((config.parser, config.model.hash_bits)))

    async def analyze(self, raw: bytes) -> Analyzed:
        """The message's key and features from a helper; AnalysisUnavailable if none answers."""
        ready = [h for h in self.helpers if h.alive and h.ready]
        if not ready:
            self._replace_exited()
            self.handed_back += 1
            raise AnalysisUnavailable("no analysis process is ready")
        helper = min(ready, key=lambda h: len(h.pending))
        answer: asyncio.Future[Analyzed] = asyncio.get_running_loop().create_future()
        helper.pending.append((answer, time.monotonic()))
        self._send(helper, b"M", raw)
        return await answer

    async def _read_answers(self, helper: _Helper) -> None:
        try:
            while True:
                kind, length = _FRAME.unpack(await helper.reader.readexactly(_FRAME.size))
                payload = await helper.reader.readexactly(length)
                if kind == b"R":
                    helper.ready = True
                    self._failed_starts = 0
                    continue
                answer, _ = helper.pending.popleft()
                if answer.done():  # its session went away meanwhile
                    continue
                if kind == b"A":
                    answer.set_result(_decode_analyzed(payload))
                    self.answered += 1
                else:
                    self.handed_back += 1
                    answer.set_exception(AnalysisUnavailable(payload.decode("utf-8", "replace")))
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, struct.error, ValueError) as e:
            self._lost(helper, e)

    def _lost(self, helper: _Helper, error: BaseException) -> None:
        helper.alive = False
        while helper.pending:
            answer, _ = helper.pending.popleft()
            if not answer.done():
                self.handed_back += 1
                answer.set_exception(AnalysisUnavailable("the analysis process exited"))
        helper.writer.close()
        if helper.process.poll() is None:
            helper.process.kill()
        try:
            helper.process.wait(timeout=1.0)  # gone already (its socket closed) or just killed
        except subprocess.TimeoutExpired:
            pass
        if self.closing:
            return
        self.helpers.remove(helper)
        if not helper.ready:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS and self.wanted:
                self._give_up(f"{self._failed_starts} analysis processes in a row exited before they were ready")
                return
        log.warning(
            "analysis_process_lost",
            pid=helper.process.pid,
            exit_code=helper.process.returncode,
            error=f"{type(error).__name__}: {error}",
            action="its messages are analyzed on the loop; a new process is started",
        )
        self._replace_exited()

    def _replace_exited(self) -> None:
        if self.closing or len(self.helpers) >= self.wanted:
            return
        if time.monotonic() - self._last_start < RESTART_INTERVAL_S:
            return  # the next message after the interval tries again
        self._last_start = time.monotonic()
        try:
            starting = asyncio.get_running_loop().create_task(self._start_one(), name="analysis-restart")
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
            log.error("analysis_process_not_started", error=str(task.exception()), action="messages are analyzed on the loop")

    async def _kill_stuck(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for helper in list(self.helpers):
                if helper.alive and helper.pending and now - helper.pending[0][1] > ANSWER_TIMEOUT_S:
                    log.warning("analysis_process_stuck", pid=helper.process.pid, waited_s=round(now - helper.pending[0][1], 1))
                    helper.process.kill()  # its reader sees the end of the socket and hands the messages back
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
            while helper.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if helper.process.poll() is None:
                helper.process.kill()
                helper.process.wait()
            if helper.answering is not None:
                helper.answering.cancel()
        await asyncio.gather(*(h.answering for h in self.helpers if h.answering), return_exceptions=True)
        for helper in self.helpers:  # a message still waiting (past the drain's timeout) goes to the loop
            while helper.pending:
                answer, _ = helper.pending.popleft()
                if not answer.done():
                    answer.set_exception(AnalysisUnavailable("spamd is stopping"))


def _encode_analyzed(analyzed: Analyzed) -> bytes:
    features = analyzed.features
    return b"".join(
        (
            _KEY_LENGTH.pack(len(analyzed.key)),
            analyzed.key,
            features.ids.astype(np.uint32, copy=False).tobytes(),
            features.counts.astype(np.uint32, copy=False).tobytes(),
        )
    )


def _decode_analyzed(payload: bytes) -> Analyzed:
    (key_length,) = _KEY_LENGTH.unpack_from(payload)
    start = _KEY_LENGTH.size + key_length
    key = payload[_KEY_LENGTH.size : start]
    arrays = np.frombuffer(payload, dtype=np.uint32, offset=start)
    if len(arrays) % 2:
        raise ValueError("an analysis answer of odd length")
    half = len(arrays) // 2
    return Analyzed(key, Features(arrays[:half], arrays[half:]))


# ---------------------------------------------------------------- the helper's side


def serve(sock: socket.socket) -> None:
    """Answer the daemon's messages in order until its end of the socket closes.

    Every frame that one read brings is answered before the next read, and the
    answers go back in one send: a busy daemon is woken once per batch, not per message.
    """
    from spamd.engine import tune_gc_for_message_streams
    from spamd.scheduling import yield_to_the_loop

    tune_gc_for_message_streams()
    yield_to_the_loop()
    classifier: Classifier | None = None
    received = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionError:
            return
        if not chunk:
            return
        received += chunk
        answers: list[bytes] = []
        start = 0
        while len(received) - start >= _FRAME.size:
            kind, length = _FRAME.unpack_from(received, start)
            if len(received) - start - _FRAME.size < length:
                break
            payload = bytes(received[start + _FRAME.size : start + _FRAME.size + length])
            start += _FRAME.size + length
            if kind == b"C":
                parser, hash_bits = pickle.loads(payload)  # from the daemon that started us, over a private socket
                classifier = Classifier(Config(parser=parser, model=ModelConfig(hash_bits=hash_bits)), None)  # type: ignore[arg-type]
                answers.append(_FRAME.pack(b"R", 0))
                continue
            try:
                assert classifier is not None, "a message before the configuration"
                answer = _encode_analyzed(classifier.analyze(payload))
                answers += (_FRAME.pack(b"A", len(answer)), answer)
            except Exception as e:  # the loop analyzes it again and reports what happens there
                error = f"{type(e).__name__}: {e}".encode()
                answers += (_FRAME.pack(b"E", len(error)), error)
        del received[:start]
        if answers:
            try:
                sock.sendall(b"".join(answers))
            except ConnectionError:
                return


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
