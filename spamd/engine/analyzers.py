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
when a [model] family weighs other than 1), or b"E" + the error's text.
"""

from __future__ import annotations

import pickle
import socket
import struct
import sys

import numpy as np

from spamd.config import Config
from spamd.learning.classifier import Analyzed, Classifier, usable_cores
from spamd.mail.auth.spf import SmtpSession
from spamd.model.bayes import Features
from spamd.runtime.gc_tuning import tune_gc_for_message_streams
from spamd.runtime.helper_processes import HelperProcesses, HelperUnavailable, frame, frames, ignore_stop_signals
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap
from spamd.runtime.scheduling import yield_to_the_loop

_KEY_LENGTH = struct.Struct("!H")
_SENDERS = struct.Struct("!B")  # how many sender keys (uint64, spamd.people.senders) follow the key
# After the sender keys: which are authenticated (a bit each), DMARC's p=reject failure, and the
# X-Spam-Auth report's length (its UTF-8 follows).
_AUTH = struct.Struct("!BBH")
_SESSION = struct.Struct("!H")  # a work frame: the SMTP session's length, the session, the message


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
        if kind in (b"A", b"W"):
            return _decode_analyzed(payload, weighted=kind == b"W")
        return AnalysisUnavailable(payload.decode("utf-8", "replace"))


def encode_work(raw: bytes, session: SmtpSession | None) -> bytes:
    """A message to analyze: the SMTP session (client IP, MAIL FROM, HELO; empty: none) before its bytes."""
    told = (
        "\0".join((session.client_ip, session.mail_from, session.helo)).encode("utf-8", "replace") if session else b""
    )
    return _SESSION.pack(len(told)) + told + raw


def decode_work(payload: bytes) -> tuple[bytes, SmtpSession | None]:
    (length,) = _SESSION.unpack_from(payload)
    told = payload[_SESSION.size : _SESSION.size + length].decode("utf-8", "replace").split("\0")
    session = SmtpSession(*told) if len(told) == 3 else None
    return payload[_SESSION.size + length :], session


def _encode_answer(ident: int, analyzed: Analyzed) -> tuple[bytes, int, bytes]:
    """The answer's frame: kind (b"A", or b"W" with weights), id and payload."""
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
    if features.weights is None:
        return b"A", ident, b"".join(parts)
    # float64, as the loop's own analysis holds them: the same score either way, to the bit.
    return b"W", ident, b"".join([*parts, features.weights.astype(np.float64, copy=False).tobytes()])


def _decode_analyzed(payload: bytes, weighted: bool = False) -> Analyzed:
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
    arrays = np.frombuffer(payload, dtype=np.uint32, offset=start)
    words = 4 if weighted else 2  # uint32 words per id: id, count (and a float64 weight)
    if len(arrays) % words:
        raise ValueError("an analysis answer of the wrong length")
    n = len(arrays) // words
    weights = np.frombuffer(payload, dtype=np.float64, offset=start + 8 * n) if weighted else None
    features = Features(arrays[:n], arrays[n : 2 * n], weights)
    return Analyzed(key, features, senders, authenticated, bool(dmarc_reject), report)


# ---------------------------------------------------------------- the helper's side


def serve(sock: socket.socket) -> None:
    """Answer the daemon's messages in order until its end of the socket closes.

    The answers to what one read brings go back in one send, so that a busy daemon is
    woken once per batch, not per message; but when the helper verifies senders, each
    answer goes as soon as its message is verified (`_Answers`).
    """
    ignore_stop_signals()
    tune_gc_for_message_streams()
    keep_read_buffers_in_the_heap()
    yield_to_the_loop()
    classifier: Classifier | None = None
    for batch in frames(sock):
        answers = _Answers(sock)
        work: list[tuple[int, bytes]] = []  # messages since the last configuration frame
        try:
            for kind, ident, payload in batch:
                if kind == b"C":
                    _answer_all(classifier, work, answers)
                    work = []
                    # From the daemon that started us, over a private socket.
                    parser, model, auth = pickle.loads(payload)
                    classifier = Classifier(Config(parser=parser, model=model, auth=auth), None)  # type: ignore[arg-type]
                    answers.add(frame(b"R", 0))
                else:
                    work.append((ident, payload))
            _answer_all(classifier, work, answers)
            answers.send()
        except ConnectionError:
            return


class _Answers:
    """Answers waiting to be sent together.

    Verifying a message's senders is the last stage of its analysis and the longest
    (signed 2020s mail: a quarter of the helper's time), and sending every answer after
    the whole batch's verification made the first message wait for the last one's. Sent
    as each message is verified, the loop scores and delivers the first while the next
    is verified.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.waiting: list[bytes] = []

    def add(self, answer: bytes) -> None:
        self.waiting.append(answer)

    def send(self) -> None:
        """Send what is waiting (ConnectionError: the daemon's end closed)."""
        if self.waiting:
            self.sock.sendall(b"".join(self.waiting))
            self.waiting = []


def _answer_all(classifier: Classifier | None, work: list[tuple[int, bytes]], answers: _Answers) -> None:
    """Each message's answer, analyzed a stage at a time over them all (`Classifier.analyzed_in_turn`),
    sent as each is ready where senders are verified; if that fails, the rest one at a time, so
    that only the message at fault is answered with an error."""
    done = 0
    if len(work) > 1 and classifier is not None:
        verifies = classifier.config.auth.enabled
        try:
            decoded = [decode_work(payload) for _, payload in work]
            analyzed = classifier.analyzed_in_turn([raw for raw, _ in decoded], True, [s for _, s in decoded])
            for (ident, _), each in zip(work, analyzed, strict=True):
                answers.add(frame(*_encode_answer(ident, each)))
                done += 1
                if verifies:
                    answers.send()
        except ConnectionError:
            raise
        except Exception:  # the rest are analyzed again below, each answered with its own error
            pass
    for ident, payload in work[done:]:
        answers.add(_answer(classifier, ident, payload))


def _answer(classifier: Classifier | None, ident: int, payload: bytes) -> bytes:
    try:
        assert classifier is not None, "a message before the configuration"
        raw, session = decode_work(payload)
        return frame(*_encode_answer(ident, classifier.analyze(raw, session=session)))
    except Exception as e:  # the loop analyzes it again and reports what happens there
        return frame(b"E", ident, f"{type(e).__name__}: {e}".encode())


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
