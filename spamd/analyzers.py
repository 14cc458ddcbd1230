"""Message analysis in helper processes, so the daemon's second core works while one loop owns the model.

Analysis (strip, parse, tokenize, hash) needs no model and is most of the CPU a
message costs the loop. The daemon sends the bytes of each message it scores (every
way in: SMTP, milter, spamc, a Maildir's unscored arrivals) to an analysis
process over a socket pair and gets its ledger key and features back; scoring,
training and every reply stay on the loop, in arrival order per process.

Nothing depends on a helper being there. A message it cannot answer for (it
exited, was killed, took longer than `answer_timeout_s`, or its analysis raised)
is analyzed on the loop instead, exactly as without helpers, and a replacement
process is started. The helpers run `python -m spamd.analyzers FD`: a fresh
interpreter (no fork of a threaded daemon) that exits when the daemon's end of
its socket closes, SIGKILL of the daemon included.

The frames are spamd.helper_processes'. The configuration is pickle((ParserConfig,
hash_bits)); work is the message's bytes; an answer is b"A" + key length (2 bytes) +
key + ids + counts (uint32 each), or b"E" + the error's text.
"""

from __future__ import annotations

import pickle
import socket
import struct
import sys

import numpy as np

from spamd.classifier import Analyzed, Classifier, usable_cores
from spamd.config import Config, ModelConfig
from spamd.gc_tuning import tune_gc_for_message_streams
from spamd.helper_processes import HelperProcesses, HelperUnavailable, frame, frames, ignore_stop_signals
from spamd.model import Features
from spamd.scheduling import yield_to_the_loop

_KEY_LENGTH = struct.Struct("!H")


class AnalysisUnavailable(HelperUnavailable):
    """No helper answered for this message: analyze it on the loop."""


def default_processes() -> int:
    """Helpers beside the loop: one per core but the loop's own, none on a single core."""
    return max(0, usable_cores() - 1)


class AnalysisProcesses(HelperProcesses[Analyzed]):
    """Helper processes that analyze messages for the loop; `analyze` picks the least busy."""

    module = "spamd.analyzers"
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
        return pickle.dumps((self.config.parser, self.config.model.hash_bits))

    def reconfigure(self, config: Config) -> None:
        """New parser caps for the helpers (hash_bits never changes while running)."""
        self.config = config
        self.send_configuration()

    async def analyze(self, raw: bytes) -> Analyzed:
        """The message's key and features from a helper; AnalysisUnavailable if none answers."""
        return await self.request(raw)

    def decode(self, kind: bytes, payload: bytes) -> Analyzed | BaseException:
        if kind == b"A":
            return _decode_analyzed(payload)
        return AnalysisUnavailable(payload.decode("utf-8", "replace"))


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
    ignore_stop_signals()
    tune_gc_for_message_streams()
    yield_to_the_loop()
    classifier: Classifier | None = None
    for batch in frames(sock):
        answers: list[bytes] = []
        for kind, ident, payload in batch:
            if kind == b"C":
                parser, hash_bits = pickle.loads(payload)  # from the daemon that started us, over a private socket
                classifier = Classifier(Config(parser=parser, model=ModelConfig(hash_bits=hash_bits)), None)  # type: ignore[arg-type]
                answers.append(frame(b"R", 0))
                continue
            try:
                assert classifier is not None, "a message before the configuration"
                answers.append(frame(b"A", ident, _encode_analyzed(classifier.analyze(payload))))
            except Exception as e:  # the loop analyzes it again and reports what happens there
                answers.append(frame(b"E", ident, f"{type(e).__name__}: {e}".encode()))
        try:
            sock.sendall(b"".join(answers))
        except ConnectionError:
            return


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
