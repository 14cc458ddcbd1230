"""The open model state and what can be done with it: classify, explain, train, snapshot, stats.

One Engine per process that owns the state directory (the daemon, or spamctl
when no daemon runs). It holds the lock for its lifetime. It does not know
about SMTP, Maildir or sockets; the daemon and spamctl call it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from spamd.classifier import Analyzed, Classifier
from spamd.config import Config
from spamd.model import Contribution, Label, Score
from spamd.store import Recovery, Store, encode_snapshot
from spamd.training import Outcome, Trainer


@dataclass(frozen=True, slots=True)
class Classified:
    analyzed: Analyzed
    score: Score


class Engine:
    def __init__(self, config: Config, store: Store, trainer: Trainer, recovery: Recovery):
        self.config = config
        self.store = store
        self.trainer = trainer
        self.model = trainer.model
        self.classifier = Classifier(config, trainer.model)
        self.recovery = recovery
        self.started = time.time()
        self.scored: Counter[str] = Counter()  # verdict -> messages scored since start

    @classmethod
    def open(cls, config: Config, durable: bool = True) -> "Engine":
        """Lock the state directory, load the newest good snapshot and replay the journal."""
        store = Store(config.state_dir, config.model, config.store, durable=durable)
        store.lock()
        try:
            loaded = store.load()
        except BaseException:
            store.close()
            raise
        trainer = Trainer(loaded.model, loaded.ledger, store, loaded.seq)
        return cls(config, store, trainer, loaded.recovery)

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------ per message

    def classify(self, raw: bytes) -> Classified:
        analyzed = self.classifier.analyze(raw)
        score = self.classifier.score(analyzed)
        self.scored[score.verdict.value] += 1
        return Classified(analyzed, score)

    def explain(self, raw: bytes, limit: int = 20) -> tuple[Score, list[Contribution]]:
        return self.model.explain(self.classifier.tokens(raw), limit)

    def train(self, raw: bytes, label: Label, source: str, user: bool = True) -> Outcome:
        return self.trainer.train(self.classifier.analyze(raw), label, source, user)

    def untrain(self, raw: bytes, source: str) -> Outcome:
        return self.trainer.untrain(self.classifier.analyze(raw), source)

    # ------------------------------------------------------------ snapshots

    def needs_snapshot(self, now: float | None = None) -> bool:
        """Training since the last snapshot, and the timer or the journal size says it is time."""
        if self.trainer.seq == self.store.last_snapshot_seq:
            return False
        now = time.time() if now is None else now
        last = self.store.last_snapshot_time or self.started
        return (
            now - last >= self.config.store.snapshot_interval_s
            or self.store.journal_bytes >= self.config.store.journal_max_bytes
        )

    def begin_snapshot(self) -> tuple[bytes, int]:
        """Encode the state and start a new journal segment; cheap enough for the event loop.

        Follow with `finish_snapshot` (blocking fsyncs: run it in a thread).
        """
        seq = self.trainer.seq
        encoded = encode_snapshot(self.model, self.trainer.ledger, seq)
        self.store.rotate_journal(seq)
        return encoded, seq

    def finish_snapshot(self, encoded: bytes, seq: int) -> Path:
        path = self.store.write_snapshot(encoded, seq)
        self.store.prune()
        return path

    def snapshot(self) -> Path:
        """Write a snapshot now (blocking)."""
        return self.finish_snapshot(*self.begin_snapshot())

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, object]:
        model, store = self.model, self.store
        trained = Counter()
        for (source, outcome), n in self.trainer.events.items():
            trained[f"{source}:{outcome}"] += n
        snapshot_age = None if store.last_snapshot_time is None else time.time() - store.last_snapshot_time
        return {
            "messages_scored": sum(self.scored.values()),
            "scored_by_verdict": dict(self.scored),
            "trained_ham": int(model.doc_totals[Label.HAM]),
            "trained_spam": int(model.doc_totals[Label.SPAM]),
            "training_events": dict(trained),
            "tokens": int(model.distinct),
            "token_totals": {"ham": int(model.token_totals[Label.HAM]), "spam": int(model.token_totals[Label.SPAM])},
            "ledger_entries": len(self.trainer.ledger),
            "model_memory_bytes": model.memory_bytes,
            "journal_seq": self.trainer.seq,
            "journal_records": store.journal_records,
            "journal_bytes": store.journal_bytes,
            "snapshot_seq": store.last_snapshot_seq,
            "snapshot_age_s": snapshot_age,
            "uptime_s": time.time() - self.started,
            "recovery_problems": list(self.recovery.problems),
        }
