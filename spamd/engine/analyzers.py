"""Message analysis in helper processes, so the daemon's second core works while one loop owns the model.

Analysis (strip, parse, tokenize, hash) needs no model and is most of the CPU a
message costs the loop. The daemon sends the bytes of each message it scores (every
way in: SMTP, milter, spamc, a Maildir's unscored arrivals) to an analysis
process over a socket pair and gets its ledger key and features back; scoring,
training and every reply stay on the loop, in arrival order per process.

Nothing depends on a helper being there. A message it cannot answer for (it
exited, was killed, took longer than `answer_timeout_s`, or its analysis raised)
is analyzed on the loop instead, exactly as without helpers, and a replacement
process is started. The helpers run `python -m spamd.engine.analyzers FD`: a fresh
interpreter (no fork of a threaded daemon) that exits when the daemon's end of
its socket closes, SIGKILL of the daemon included.

The frames are spamd.runtime.helper_processes'. The configuration is pickle((ParserConfig,
ModelConfig, AuthConfig)); work is the SMTP session (`encode_work`) and the message's bytes; an answer is b"A" + key length (2 bytes) +
key + the senders and their authentication + ids + counts (uint32 each), b"W" the same + the ids' family weights (float64,
when a [model] family weighs other than 1), b"K" and b"B" as b"A" and b"W" + the ids' kinds (int8, while [model]
evidence_weight scores the evidence apart), or b"E" + the error's text. A notice (b"N") says that the
helper's resolver took `[auth] nameservers` as down (b"1") or that they answered again (b"0").
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import structlog

from spamd.config import Config
from spamd.learning.classifier import Analyzed, Classifier, Prepared, usable_cores
from spamd.mail.auth.dns import Budget
from spamd.mail.auth.spf import SmtpSession
from spamd.mail.auth.verify import NOTHING
from spamd.model.bayes import Features
from spamd.runtime.gc_tuning import tune_gc_for_message_streams
from spamd.runtime.helper_processes import (
    Helper,
    HelperProcesses,
    HelperUnavailable,
    frame,
    frames,
    ignore_stop_signals,
)
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap
from spamd.runtime.scheduling import yield_to_the_loop

log = structlog.get_logger()

_KEY_LENGTH = struct.Struct("!H")
_SENDERS = struct.Struct("!B")  # how many sender keys (uint64, spamd.people.senders) follow the key
# After the sender keys: which are authenticated (a bit each), DMARC's p=reject failure, and the
# X-Spam-Auth report's length (its UTF-8 follows).
_AUTH = struct.Struct("!BBH")
# A work frame: when the daemon sent it (time.monotonic(), the same clock in every process on
# Linux), the SMTP session's length, the session, the message.
_SESSION = struct.Struct("!dH")


class AnalysisUnavailable(HelperUnavailable):
    """No helper answered for this message: analyze it on the loop."""


def default_processes() -> int:
    """Helpers beside the loop: one per core but the loop's own, none on a single core."""
    return max(0, usable_cores() - 1)


class AnalysisProcesses(HelperProcesses[Analyzed]):
    """Helper processes that analyze messages for the loop; `analyze` picks the least busy."""

    module = "spamd.engine.analyzers"
    kind = "analysis"
    fallback = "messages are analyzed on the loop"
    unavailable = AnalysisUnavailable
    # The parser's caps bound analysis: the slowest hostile message in tests/test_fuzz.py
    # takes well under a second.
    answer_timeout_s = 30.0

    def __init__(self, config: Config, processes: int):
        super().__init__(processes)
        self.config = config
        self.nameservers_down: set[int] = set()  # the helpers (by pid) whose resolver takes them as down now
        self.nameservers_down_total = 0  # how often a helper took them as down

    def notice(self, helper: Helper, payload: bytes) -> None:
        pid = helper.process.pid
        if payload == b"1":
            self.nameservers_down.add(pid)
            self.nameservers_down_total += 1
            log.warning(
                "nameservers_taken_down", nameservers=" ".join(self.config.auth.nameservers) or "resolv.conf", pid=pid,
                action="sender authentication is a temporary error at once; one look-up at a time tries them",
            )  # fmt: skip
        elif pid in self.nameservers_down:
            self.nameservers_down.discard(pid)
            log.info(
                "nameservers_answered_again",
                nameservers=" ".join(self.config.auth.nameservers) or "resolv.conf",
                pid=pid,
            )

    def nameservers_down_now(self) -> int:
        """The running helpers whose resolver takes `[auth] nameservers` as down."""
        return sum(h.alive and h.process.pid in self.nameservers_down for h in self.helpers)

    def configuration(self) -> bytes:
        return pickle.dumps((self.config.parser, self.config.model, self.config.auth))

    def reconfigure(self, config: Config) -> None:
        """New parser caps, family weights and [auth] for the helpers (hash_bits and the families never change while running)."""
        self.config = config
        self.send_configuration()

    async def analyze(self, raw: bytes, session: SmtpSession | None = None) -> Analyzed:
        """The message's key and features from a helper; AnalysisUnavailable if none answers."""
        return await self.request(encode_work(raw, session))

    def decode(self, kind: bytes, payload: bytes) -> Analyzed | BaseException:
        if kind in _ANSWER_KINDS:
            return _decode_analyzed(payload, *_ANSWER_KINDS[kind])
        return AnalysisUnavailable(payload.decode("utf-8", "replace"))


def encode_work(raw: bytes, session: SmtpSession | None) -> bytes:
    """A message to analyze: the SMTP session (client IP, MAIL FROM, HELO; empty: none) before its bytes."""
    told = (
        "\0".join((session.client_ip, session.mail_from, session.helo)).encode("utf-8", "replace") if session else b""
    )
    return _SESSION.pack(time.monotonic(), len(told)) + told + raw


def decode_work(payload: bytes) -> tuple[bytes, SmtpSession | None, float]:
    """The message, its SMTP session and when the daemon sent it (its DNS budget runs from then)."""
    sent, length = _SESSION.unpack_from(payload)
    told = payload[_SESSION.size : _SESSION.size + length].decode("utf-8", "replace").split("\0")
    session = SmtpSession(*told) if len(told) == 3 else None
    return payload[_SESSION.size + length :], session, sent


# An answer's frame kind: (with weights, with kinds).
_ANSWER_KINDS = {b"A": (False, False), b"W": (True, False), b"K": (False, True), b"B": (True, True)}
_KIND_OF_ANSWER = {shape: kind for kind, shape in _ANSWER_KINDS.items()}


def _encode_answer(ident: int, analyzed: Analyzed) -> tuple[bytes, int, bytes]:
    """The answer's frame: kind (_ANSWER_KINDS: whether weights and kinds follow), id and payload."""
    features = analyzed.features
    report = analyzed.auth_report.encode("utf-8", "replace")[:65535]
    parts = [
        _KEY_LENGTH.pack(len(analyzed.key)),
        analyzed.key,
        _SENDERS.pack(len(analyzed.senders)),
        np.array(analyzed.senders, dtype=np.uint64).tobytes(),
        _AUTH.pack(analyzed.authenticated, analyzed.dmarc_reject, len(report)),
        report,
        features.ids.astype(np.uint32, copy=False).tobytes(),
        features.counts.astype(np.uint32, copy=False).tobytes(),
    ]
    if features.weights is not None:
        # float64, as the loop's own analysis holds them: the same score either way, to the bit.
        parts.append(features.weights.astype(np.float64, copy=False).tobytes())
    if features.kinds is not None:
        parts.append(features.kinds.astype(np.int8, copy=False).tobytes())
    kind = _KIND_OF_ANSWER[features.weights is not None, features.kinds is not None]
    return kind, ident, b"".join(parts)


def _decode_analyzed(payload: bytes, weighted: bool = False, kinded: bool = False) -> Analyzed:
    (key_length,) = _KEY_LENGTH.unpack_from(payload)
    start = _KEY_LENGTH.size + key_length
    key = payload[_KEY_LENGTH.size : start]
    (n_senders,) = _SENDERS.unpack_from(payload, start)
    start += _SENDERS.size
    senders = tuple(int(s) for s in np.frombuffer(payload, dtype=np.uint64, count=n_senders, offset=start))
    start += 8 * n_senders
    authenticated, dmarc_reject, report_length = _AUTH.unpack_from(payload, start)
    start += _AUTH.size
    report = payload[start : start + report_length].decode("utf-8", "replace")
    start += report_length
    per_id = 8 + (8 if weighted else 0) + (1 if kinded else 0)  # bytes: id, count (a float64 weight, an int8 kind)
    if (len(payload) - start) % per_id:
        raise ValueError("an analysis answer of the wrong length")
    n = (len(payload) - start) // per_id
    arrays = np.frombuffer(payload, dtype=np.uint32, count=2 * n, offset=start)
    start += 8 * n
    weights = None
    if weighted:
        weights = np.frombuffer(payload, dtype=np.float64, count=n, offset=start)
        start += 8 * n
    kinds = np.frombuffer(payload, dtype=np.int8, count=n, offset=start) if kinded else None
    features = Features(arrays[:n], arrays[n : 2 * n], weights, kinds)
    return Analyzed(key, features, senders, authenticated, bool(dmarc_reject), report)


# ---------------------------------------------------------------- the helper's side


# Senders verified at once in one of the daemon's analysis helpers. Verifying mostly waits for DNS, and one
# message's wait held up every message behind it: with nameservers that never answer, 16
# SMTP clients saw waits in steps of the 2 s budget (2.1, 4.2, 6.3 s). In threads the waits
# overlap, and each message's budget runs from its arrival, so a message that waits for a
# thread is not held up past its own budget either. A message whose look-ups the cache
# answers (most, on a busy host) is verified in the reading thread first, as before: handing
# each over to a thread cost the analysis process CPU (bench_smtp --auth warm: 1.50-1.81 ->
# 1.86-2.12 ms a message, a loaded machine); one that would wait is verified again in a thread.
HELPER_VERIFYING_THREADS = 64


def serve(sock: socket.socket) -> None:
    """Answer the daemon's messages until its end of the socket closes.

    The answers to what one read brings go back in one send, so that a busy daemon is
    woken once per batch, not per message; but when the helper verifies senders, each
    message is verified in a thread of its own and answered as soon as it is (`_Sender`).
    """
    ignore_stop_signals()
    tune_gc_for_message_streams()
    keep_read_buffers_in_the_heap()
    yield_to_the_loop()
    classifier: Classifier | None = None
    sender = _Sender(sock)
    verifying = ThreadPoolExecutor(HELPER_VERIFYING_THREADS, thread_name_prefix="verify")
    for batch in frames(sock):
        work: list[tuple[int, bytes]] = []  # messages since the last configuration frame
        try:
            for kind, ident, payload in batch:
                if kind == b"C":
                    _answer_all(classifier, work, sender, verifying)
                    work = []
                    # From the daemon that started us, over a private socket.
                    parser, model, auth = pickle.loads(payload)
                    classifier = Classifier(Config(parser=parser, model=model, auth=auth), None)  # type: ignore[arg-type]
                    if auth.enabled:
                        classifier.authenticator.resolver.on_change = sender.nameservers_changed
                    sender.add(frame(b"R", 0))
                else:
                    work.append((ident, payload))
            _answer_all(classifier, work, sender, verifying)
            sender.send()
        except ConnectionError:
            break
    verifying.shutdown(wait=False, cancel_futures=True)


class _Sender:
    """The helper's end of the socket, for the reading thread and the verifying ones: frames waiting to be
    sent together (`add`, `send`), and frames sent at once (`send_now`), one whole frame at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.waiting: list[bytes] = []
        self.lock = threading.Lock()

    def add(self, answer: bytes) -> None:
        self.waiting.append(answer)

    def send(self) -> None:
        """Send what is waiting (ConnectionError: the daemon's end closed)."""
        if self.waiting:
            data, self.waiting = b"".join(self.waiting), []
            with self.lock:
                self.sock.sendall(data)

    def send_now(self, answer: bytes) -> None:
        """From a verifying thread: a closed socket ends the reading thread, not this one."""
        with contextlib.suppress(OSError), self.lock:
            self.sock.sendall(answer)

    def nameservers_changed(self, down: bool) -> None:
        """The resolver's notice (spamd.mail.auth.dns): the daemon logs it and counts it in its metrics."""
        self.send_now(frame(b"N", 0, b"1" if down else b"0"))


def _answer_all(
    classifier: Classifier | None, work: list[tuple[int, bytes]], sender: _Sender, verifying: ThreadPoolExecutor
) -> None:
    """Each message's answer: every stage before the senders' verification over them all
    (`Classifier.prepared`), if that fails one at a time, so that only the message at fault is
    answered with an error; then each verified in a thread, or answered here when [auth] is off."""
    if not work:
        return
    if classifier is None:
        for ident, _ in work:
            sender.add(_error(ident, AssertionError("a message before the configuration")))
        return
    verifies = classifier.verifies(True)
    try:
        decoded = [decode_work(payload) for _, payload in work]
        prepared: list[Prepared | BaseException] = list(classifier.prepared([raw for raw, _, _ in decoded]))
    except Exception:
        decoded, prepared = [], []
        for _, payload in work:
            try:
                one = decode_work(payload)
                result: Prepared | BaseException = classifier.prepared([one[0]])[0]
            except Exception as e:  # the loop analyzes it again and reports what happens there
                one, result = (b"", None, time.monotonic()), e
            decoded.append(one)
            prepared.append(result)
    for (ident, _), (_, session, sent), ready in zip(work, decoded, prepared, strict=True):
        if isinstance(ready, BaseException):
            sender.add(_error(ident, ready))
        elif not verifies:
            sender.add(_finished(classifier, ident, ready, None, None))
        else:  # here, while the cache answers every look-up: no thread to hand over to
            answer = _finished_from_cache(classifier, ident, ready, session, sent)
            if answer is not None:
                sender.send_now(answer)
            else:
                budget = classifier.authenticator.budget(started=sent)
                verifying.submit(
                    lambda *args: sender.send_now(_finished(*args)), classifier, ident, ready, session, budget
                )


def _finished(
    classifier: Classifier, ident: int, prepared: Prepared, session: SmtpSession | None, budget: Budget | None
) -> bytes:
    """The answer frame of a prepared message, its senders verified within `budget` (None: not verified)."""
    try:
        auth = (
            NOTHING if budget is None else classifier.authenticate(prepared.stripped, prepared.message, session, budget)
        )
        return frame(*_encode_answer(ident, classifier.finished(prepared, budget is not None, auth)))
    except Exception as e:
        return _error(ident, e)


def _finished_from_cache(
    classifier: Classifier, ident: int, prepared: Prepared, session: SmtpSession | None, sent: float
) -> bytes | None:
    """`_finished` with the senders verified from the resolver's cache alone; None where a look-up would wait."""
    try:
        auth = classifier.authenticated_from_cache(prepared, session, sent)
        return None if auth is None else frame(*_encode_answer(ident, classifier.finished(prepared, True, auth)))
    except Exception as e:
        return _error(ident, e)


def _error(ident: int, error: BaseException) -> bytes:
    """The loop analyzes the message again and reports what happens there."""
    return frame(b"E", ident, f"{type(error).__name__}: {error}".encode())


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
