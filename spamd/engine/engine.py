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
from typing import TYPE_CHECKING, Any

from spamd.config import Config
from spamd.engine.trainer import Trainer
from spamd.errors import CorruptStateError, StoreError
from spamd.learning.classifier import Analyzed, Classifier
from spamd.learning.outcomes import Outcome
from spamd.mail.auth.verify import NOTHING
from spamd.mail.message import parse_message, strip_own_headers
from spamd.model.bayes import Contribution, Label, Score, Verdict
from spamd.model.families import EvidenceHistory, evidence_families
from spamd.people.accuracy import LiveAccuracy, is_person
from spamd.people.kept import kept_push, kept_sample
from spamd.people.learned import forged_looking, learning_record, message_id_of
from spamd.people.senders import (
    SenderCounts,
    SenderReputation,
    Way,
    authenticated_as,
    counted_senders,
    sender_key,
    sender_names,
)
from spamd.people.users import is_user_name
from spamd.runtime.gc_tuning import paused_gc
from spamd.store import LoadedState, Recovery, StateStore, Store, TrainerLike, decode_snapshot, encode_snapshot
from spamd.store.local import log_evidence_switch

if TYPE_CHECKING:
    from spamd.store.redis.store import RedisStore


@dataclass(frozen=True, slots=True)
class Classified:
    analyzed: Analyzed
    score: Score


class Engine:
    def __init__(
        self,
        config: Config,
        store: Store | StateStore,
        trainer: Trainer | TrainerLike,
        recovery: Recovery,
        counters: dict[str, int] | None = None,
        live: LiveAccuracy | None = None,
        senders: SenderCounts | None = None,
        evidence: EvidenceHistory | None = None,
    ):
        self.config = config
        self.store = store
        self.trainer = trainer
        self.model = trainer.model
        self.users = trainer.users  # per-user layers: UserLayers, or RedisUsers with the model in Redis
        # Where each user's mail from each sender ended up (spamd/people/senders.py), persisted in snapshots.
        self.senders = senders if senders is not None else new_senders(config)
        self.classifier = Classifier(config, trainer.model, self.users, self.senders)
        self.recovery = recovery
        self.started = time.time()
        self.scored: Counter[str] = Counter()  # verdict -> messages scored since start
        # verdict -> messages scored before this process started, persisted in snapshots
        self.scored_before: Counter[str] = Counter(
            {k.removeprefix("scored:"): v for k, v in (counters or {}).items() if k.startswith("scored:")}
        )
        # What people's moves say of spamd's verdicts (spamd/people/accuracy.py), persisted in snapshots.
        self.live = live if live is not None else LiveAccuracy(config.store.ledger_max_entries)
        self.live_changes = 0  # mutations of `live`, so a shutdown knows a snapshot is worth it
        self._saved_live_changes = 0
        # (label, source, outcome) -> training events since start, for /metrics.
        self.trainings: Counter[tuple[str, str, str]] = Counter()
        self._saved_counters = self.counters()  # as the newest snapshot holds them
        # Since when the model learns each mail-evidence family on (kept in snapshots; in Redis, there).
        self.evidence = evidence if evidence is not None else EvidenceHistory()

    @classmethod
    def open(cls, config: Config, durable: bool = True) -> Engine:
        """Lock the state directory, load the newest good snapshot and replay the journal.

        With `[redis] url` set: connect to Redis instead, which holds model, ledger and training.
        """
        if config.redis.url:
            from spamd.store.redis import open_redis  # imports the redis client only when used

            return cls(config, *open_redis(config))
        store = Store(config.state_dir, config.model, config.store, durable=durable, users_config=config.users)
        store.lock()
        with paused_gc():
            try:
                loaded = store.load()
            except BaseException:
                store.close()
                raise
            trainer = Trainer(loaded.model, loaded.ledger, store, loaded.seq, loaded.users)
            live = live_state(config, loaded)
            senders = senders_state(config, loaded)
        engine = cls(config, store, trainer, loaded.recovery, loaded.counters, live, senders, loaded.evidence)
        if loaded.evidence_switched:  # the new set of families, kept at once (the journal's records say it too)
            try:
                engine.snapshot()
            except StoreError as e:
                loaded.recovery.problems.append(f"the switched evidence families are not in a snapshot yet ({e})")
        return engine

    def close(self) -> None:
        self.store.close()

    def _embedded(self) -> tuple[Store, Trainer]:
        """The embedded store and its trainer: what snapshots, the journal and an import in place work on.

        Called where `store.keeps_snapshots` is true, which only the embedded store is.
        """
        store, trainer = self.store, self.trainer
        assert isinstance(store, Store) and isinstance(trainer, Trainer), "the model is in Redis: no snapshots here"
        return store, trainer

    def _shared(self) -> RedisStore:
        """The Redis store, where `store.keeps_snapshots` is false: export, import and stats through it."""
        from spamd.store.redis.store import RedisStore  # loaded already: the store is one

        assert isinstance(self.store, RedisStore)
        return self.store

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded config's live settings: thresholds, smoothing, parser caps, snapshot policy.

        Does not resize the model or move the state: the caller keeps `hash_bits`, the
        families' count settings (spamd/model/families.py), `data_dir` and the store settings
        unchanged (they need a restart); the families' weights apply at once.
        """
        self.config = config
        self.classifier.config = config
        self.model.config = config.model
        if self.users is not None:
            self.users.config = config.users
        self.senders.moves, self.senders.share = config.users.sender_moves, config.users.sender_share

    # ------------------------------------------------------------ per message

    def layer_user(self, user_name: str | None) -> str | None:
        """The user a way in names, if the name is valid; else None.

        For the ways in (Maildir, SMTP, milter, spamc), whose mail is then scored and
        trained with the shared model alone; spamctl's --user is checked, not dropped.
        """
        if user_name is None or self.users is None or not is_user_name(user_name):
            return None
        return user_name

    def classify(self, raw: bytes, user_name: str | None = None) -> Classified:
        return self.classify_analyzed(self.classifier.analyze(raw), user_name)

    def classify_analyzed(self, analyzed: Analyzed, user_name: str | None = None) -> Classified:
        """Score a message analyzed beforehand (by `classifier.analyze_many`), counted like `classify`."""
        score = self.classifier.score(analyzed, user_name)
        self.scored[score.verdict.value] += 1
        return Classified(analyzed, score)

    def explain(self, raw: bytes, limit: int = 20, user_name: str | None = None) -> tuple[Score, list[Contribution]]:
        tokens, weights, kinds = self.classifier.weighed_tokens(raw)
        layers = self.classifier.scoring_layer(user_name)
        if layers is None:
            return self.model.explain(tokens, limit, weights, kinds)
        assert user_name is not None
        return layers.explain_for(self.model, user_name, tokens, limit, weights, kinds)

    def sender_standing(self, raw: bytes, user_name: str | None = None) -> dict[str, Any]:
        """Who the message says it is from, whether that is authenticated, and where `user_name`'s moves
        file each sender (for explain). Looks up DNS within `[auth] dns_budget_s`."""
        stripped = strip_own_headers(raw)
        message = parse_message(stripped, self.config.parser)
        auth = self.classifier.authenticate(stripped, message) if self.config.auth.enabled else NOTHING
        rows = []
        sample = kept_sample(self.classifier.analyze(raw, authenticate=False).features) if user_name else None
        for name in sender_names(message)[:4]:
            how = authenticated_as(name, auth)
            way = Way.NONE
            row: dict[str, Any] = {"sender": name, "authenticated": how}
            if user_name is not None and self.config.users.score_per_user:
                key = sender_key(name)
                way = self.senders.direction(user_name, (key,), 1 if how else 0)
                if way is Way.INBOX_CLAIMED and sample is not None:
                    similar = self.senders.kept.resemblance(user_name, (key,), sample)
                    row |= {"resemblance": round(similar, 3), "kept_push": round(kept_push(similar), 3)}
                if way is not Way.NONE:
                    row["moves"] = self.shaping_moves(user_name, key)
            rows.append(row | {"way": way.name.lower()})
        return {"auth": auth.header(), "senders": rows}

    def shaping_moves(self, user_name: str, sender: int, limit: int = 5) -> list[dict[str, Any]]:
        """The user's latest moves and trainings of mail from `sender` that counted for it (their learning records)."""
        mine = f"{sender:016x}"
        records = self.senders.learned.find(user_name, limit=1000)
        return [
            {k: r[k] for k in ("when", "message_id", "label", "source", "what", "key")}
            for r in records
            if mine in r["senders"] and (r["moved"] or r["kept"])
        ][:limit]

    def train(self, raw: bytes, label: Label, source: str, user: bool = True, user_name: str | None = None) -> Outcome:
        """Train through the trainer; a person's label is also judged against spamd's remembered verdict.

        spamd's own label (autolearn, settled) of a user's message from a sender that user's moves file
        the other way is declined: a person's word on a sender outranks spamd's own learning."""
        analyzed = self.classifier.analyze(raw, authenticate=False)
        person = user and source not in SPAMDS_OWN
        if not person and self.overruled_by_person(analyzed, label, user_name):
            outcome = Outcome.DECLINED
        else:
            outcome = self.trainer.train(analyzed, label, source, user, user_name)
        self.trainings[(str(label), source, outcome.value)] += 1
        if outcome in (Outcome.LEARNED, Outcome.CORRECTED):
            self.live.trained(label)
            self.live_changes += 1
        if outcome is not Outcome.DECLINED and is_person(source, user) and self.live.judged(analyzed.key, label):
            self.live_changes += 1
        forged = person and label == Label.HAM and forged_looking(raw)
        moved, kept = False, 0
        if outcome is not Outcome.DECLINED and not forged:
            moved, kept = self.record_move(analyzed, label, source, user, user_name)
        if person or outcome is Outcome.DECLINED:
            what = OUTCOME_WHAT[outcome]
            if forged and outcome in (Outcome.LEARNED, Outcome.CORRECTED):
                what = "forged_sender"
            self.note(analyzed.key, what, raw, user_name, str(label), source, analyzed.senders, moved, kept)
        return outcome

    def overruled_by_person(self, analyzed: Analyzed, label: Label, user_name: str | None) -> bool:
        """Whether `user_name`'s moves file one of the message's senders on the other side of `label`."""
        if user_name is None or not analyzed.senders or not self.senders.moves:
            return False
        way = self.senders.direction(user_name, analyzed.senders)
        return way in (Way.INBOX, Way.INBOX_CLAIMED) if label == Label.SPAM else way is Way.JUNK

    def untrain(self, raw: bytes, source: str, user_name: str | None = None) -> Outcome:
        analyzed = self.classifier.analyze(raw, authenticate=False)
        outcome = self.trainer.untrain(analyzed, source, user_name)
        self.trainings[("none", source, outcome.value)] += 1
        self.note(analyzed.key, OUTCOME_WHAT[outcome], raw, user_name, None, source, analyzed.senders)
        return outcome

    def note(
        self,
        key: bytes,
        what: str,
        raw: bytes,
        user_name: str | None,
        label: str | None,
        source: str,
        senders: tuple[int, ...] = (),
        moved: bool = False,
        kept: int = 0,
        folders: tuple[str | None, str | None] | None = None,
    ) -> None:
        """Keep the learning record of a message (spamd/people/learned.py): what was learned from it, or why not."""
        record = learning_record(
            key, what, user=user_name, message_id=message_id_of(raw), label=label, source=source,
            senders=senders, moved=moved, kept=kept, folders=folders,
        )  # fmt: skip
        self.senders.learned.add(record)
        self.live_changes += 1

    def note_ignored(
        self, raw: bytes, user_name: str | None, before: str | None, after: str | None, trash: bool
    ) -> None:
        """A move spamd saw and learns nothing from (into Trash, or between folders neither of which is Junk)."""
        key = self.classifier.analyze(raw, authenticate=False).key
        what = "trash" if trash else "ignored_move"
        self.note(key, what, raw, self.layer_user(user_name), None, "maildir", folders=(before, after))

    def learning_records(
        self, user_name: str | None = None, raw: bytes | None = None, message_id: str | None = None, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The latest learning records, of `user_name`'s messages (None: anyone's), for a message file or Message-ID."""
        key = None if raw is None else self.classifier.analyze(raw, authenticate=False).key
        return self.senders.learned.find(user_name, key, message_id, limit)

    def remember_verdict(
        self,
        key: bytes,
        verdict: Verdict,
        way_in: str,
        user_name: str | None = None,
        senders: tuple[int, ...] = (),
        authenticated: int = 0,
    ) -> None:
        """spamd's verdict on a message it delivered or answered, for live accuracy (no I/O); with the
        user it was filed for, where that user's mail from its senders went (spamd/people/senders.py)."""
        self.live.scored(key, verdict, way_in)
        self.live_changes += 1
        if user_name is not None:
            filed_spam = verdict is Verdict.SPAM
            self.senders.delivered(user_name, key, counted_senders(senders, authenticated, filed_spam), filed_spam)

    def record_move(
        self, analyzed: Analyzed, label: Label, source: str, user: bool, user_name: str | None
    ) -> tuple[bool, int]:
        """A person's label: a move into or out of Junk for the user's senders (spamd/people/senders.py),
        and their ham's sample kept for its senders (spamd/people/kept.py), unless spamd gave it (autolearn,
        settled mail). Whether it counted as a move, and for how many senders the sample was kept."""
        if not user or source in SPAMDS_OWN:
            return False, 0
        moved = self.senders.moved(analyzed.key, label, user_name, analyzed.senders)
        self.live_changes += moved
        if label == Label.HAM and user_name is not None and analyzed.senders and self.senders.moves:
            self.senders.kept.kept(user_name, analyzed.senders, kept_sample(analyzed.features))
            self.live_changes += 1
            return moved, len(analyzed.senders)
        return moved, 0

    # ------------------------------------------------------------ snapshots

    def needs_snapshot(self, now: float | None = None) -> bool:
        """Training since the last snapshot, and the timer or the journal size says it is time."""
        if not self.store.keeps_snapshots:
            return False
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
        if not self.store.keeps_snapshots:
            raise StoreError(
                "the model is in Redis ([redis] url): it keeps no snapshots here; back it up with spamctl export"
            )
        store, trainer = self._embedded()
        seq = trainer.seq
        counters = self.counters()
        encoded = encode_snapshot(
            trainer.model, trainer.ledger, seq, counters, self.live_export(), trainer.users, self.evidence
        )
        store.rotate_journal(seq)  # StoreError on a full disk: nothing changed
        self._saved_counters = counters
        self._saved_live_changes = self.live_changes
        return encoded, seq

    def finish_snapshot(self, encoded: bytes, seq: int) -> Path:
        store, _ = self._embedded()
        path = store.write_snapshot(encoded, seq)
        store.prune()
        return path

    def snapshot(self) -> Path:
        """Write a snapshot now (blocking)."""
        return self.finish_snapshot(*self.begin_snapshot())

    def has_unsaved_state(self) -> bool:
        """Training or scored counts that no snapshot holds yet: worth a snapshot at shutdown.

        Training is safe in the journal regardless; only the all-time scored counts
        are lost without one.
        """
        if not self.store.keeps_snapshots:
            return False
        return (
            self.trainer.seq != self.store.last_snapshot_seq
            or self.counters() != self._saved_counters
            or self.live_changes != self._saved_live_changes
        )

    def live_export(self) -> dict[str, object]:
        """What snapshots keep of people's moves: live accuracy, and the senders' state under "senders"."""
        return {**self.live.export(), "senders": self.senders.export()}

    def counters(self) -> dict[str, int]:
        """Running totals persisted in snapshots: messages scored by verdict, all time."""
        return {f"scored:{verdict}": n for verdict, n in (self.scored_before + self.scored).items()}

    # ------------------------------------------------------------ export / import

    def export_snapshot(self) -> bytes:
        """The live state as snapshot bytes (the portable backup format); writes nothing."""
        if not self.store.keeps_snapshots:
            return self._shared().export_snapshot(self.counters())
        _, trainer = self._embedded()
        return encode_snapshot(
            trainer.model, trainer.ledger, trainer.seq, self.counters(), self.live_export(), trainer.users,
            self.evidence,
        )  # fmt: skip

    def import_snapshot(self, data: bytes, where: str) -> dict[str, Any]:
        """Replace model and ledger with a verified export, written as the newest snapshot.

        Verifies first (checksum, format, hash_bits): on any failure nothing changes.
        The import is stored at a seq past every journal record, so no older record is
        replayed over it. This installation's scored counters are kept, not imported.
        Blocking (fsyncs); the daemon calls it on its loop so no training interleaves.
        Into Redis: one MULTI/EXEC, so every daemon sees the old model or the new one.
        """
        if not self.store.keeps_snapshots:
            return self._shared().import_snapshot(data, where)
        store, trainer = self._embedded()
        model = trainer.model
        try:
            imported = decode_snapshot(
                data, self.config.model, self.config.store.ledger_max_entries, where, self.config.users
            )
        except CorruptStateError as e:
            raise StoreError(f"import refused, nothing changed: {e}") from None
        seq = trainer.seq + 1
        counters = self.counters()
        evidence = imported.evidence  # the import's families, then this config's from here on
        on, off = evidence.follow(evidence_families(self.config.model), seq + 1, time.time())
        encoded = encode_snapshot(
            imported.model, imported.ledger, seq, counters, self.live_export(), imported.users, evidence
        )
        path = store.write_snapshot(encoded, seq)  # StoreError here leaves the live state as it was
        log_evidence_switch(on, off, seq + 1, where)
        self.evidence = evidence
        model.counts[:] = imported.model.counts
        model.token_totals[:] = imported.model.token_totals
        model.doc_totals[:] = imported.model.doc_totals
        model.distinct = imported.model.distinct
        model.forget_log_masses()  # counts overwritten in place, not learned
        trainer.ledger.replace_with(imported.ledger)  # in place: the daemon's watcher holds ledger.get
        trainer.users.replace_with(imported.users)
        trainer.seq = seq
        self._saved_counters = counters
        self._saved_live_changes = self.live_changes
        store.rotate_journal(seq)
        store.prune()
        return {
            "snapshot": str(path),
            "seq": seq,
            "trained_ham": int(model.doc_totals[Label.HAM]),
            "trained_spam": int(model.doc_totals[Label.SPAM]),
            "ledger_entries": len(trainer.ledger),
            "users": len(imported.users),
        }

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, Any]:
        if not self.store.keeps_snapshots:
            return self._shared_stats()
        store, trainer = self._embedded()
        model, users = trainer.model, trainer.users
        trained: Counter[str] = Counter()
        for (source, outcome), n in trainer.events.items():
            trained[f"{source}:{outcome}"] += n
        snapshot_age = None if store.last_snapshot_time is None else time.time() - store.last_snapshot_time
        snapshot_path = store.state_dir / f"snapshot-{store.last_snapshot_seq:012d}.spamd"
        try:
            snapshot_bytes: int | None = snapshot_path.stat().st_size
        except OSError:
            snapshot_bytes = None
        scored_all_time = self.scored_before + self.scored
        return {
            "messages_scored": sum(self.scored.values()),
            "scored_by_verdict": dict(self.scored),
            "messages_scored_all_time": sum(scored_all_time.values()),
            "scored_by_verdict_all_time": dict(scored_all_time),
            "trained_ham": int(model.doc_totals[Label.HAM]),
            "trained_spam": int(model.doc_totals[Label.SPAM]),
            "training_events": dict(trained),
            "tokens": int(model.distinct),
            "token_totals": {"ham": int(model.token_totals[Label.HAM]), "spam": int(model.token_totals[Label.SPAM])},
            "ledger_entries": len(self.trainer.ledger),
            "model_memory_bytes": model.memory_bytes,
            "users": len(users),
            "users_memory_bytes": users.memory_bytes,
            "users_expired": users.expired,
            "journal_seq": trainer.seq,
            "journal_records": store.journal_records,
            "journal_bytes": store.journal_bytes,
            "snapshot_seq": store.last_snapshot_seq,
            "snapshot_age_s": snapshot_age,
            "snapshot_bytes": snapshot_bytes,
            "evidence_families": self.evidence.describe(),
            "uptime_s": time.time() - self.started,
            "recovery_problems": list(self.recovery.problems),
            "live_accuracy": self.live.summary(),
        }

    def _shared_stats(self) -> dict[str, Any]:
        """stats() with the model in Redis: totals read there, no journal or snapshot."""
        store = self._shared()
        totals = store.state.totals_now()
        trained: Counter[str] = Counter()
        for (source, outcome), n in self.trainer.events.items():
            trained[f"{source}:{outcome}"] += n
        return {
            "messages_scored": sum(self.scored.values()),
            "scored_by_verdict": dict(self.scored),
            "trained_ham": totals["docs:0"],
            "trained_spam": totals["docs:1"],
            "training_events": dict(trained),
            "tokens": totals["distinct"],
            "token_totals": {"ham": totals["tokens:0"], "spam": totals["tokens:1"]},
            "ledger_entries": len(self.trainer.ledger),
            "users": len(self.users),
            "users_expired": self.users.expired,
            "journal_seq": totals["seq"],
            "evidence_families": store.state.evidence_now().describe(),
            "uptime_s": time.time() - self.started,
            "recovery_problems": [],
            **store.stats(),
            # In this process only: with Redis the figures are not persisted (README "Monitoring").
            "live_accuracy": self.live.summary(),
        }


def live_state(config: Config, loaded: LoadedState) -> LiveAccuracy:
    """The snapshot's live accuracy, brought up to date with the journal records replayed over it.

    A replayed record is a training the snapshot did not see: its volume is counted and,
    if a person made it, it is judged against the verdict the snapshot remembers. A
    verdict given after the snapshot is not in the journal (scoring is not journaled),
    so after a crash a move of such a message is trained but not judged.
    """
    live = LiveAccuracy(config.store.ledger_max_entries)
    try:
        live.restore(loaded.live)
    except (KeyError, ValueError, TypeError) as e:  # the model is fine; only the figures restart
        loaded.recovery.problems.append(f"live accuracy figures unreadable, started afresh ({e})")
        live = LiveAccuracy(config.store.ledger_max_entries)
    for key, label, previous, user, source, when, *_ in loaded.replayed:
        if label is None:
            continue
        if label != previous:
            live.trained(label, when)
        if is_person(source, user):
            live.judged(key, label, when)
    return live


SPAMDS_OWN = frozenset({"autolearn", "settled"})  # labels spamd gave itself: no person moved the message
# A training's outcome as a learning record's `what` (spamd/people/learned.py).
OUTCOME_WHAT = {
    Outcome.LEARNED: "learned",
    Outcome.CORRECTED: "corrected",
    Outcome.REPEAT: "already_trained",
    Outcome.DECLINED: "declined",
    Outcome.CONFIDENT: "confident",
    Outcome.UNLEARNED: "unlearned",
    Outcome.NOT_TRAINED: "not_trained",
}


def new_senders(config: Config) -> SenderReputation:
    users = config.users
    return SenderReputation(users.max_delivered, users.max_senders, users.sender_moves, users.sender_share)


def senders_state(config: Config, loaded: LoadedState) -> SenderReputation:
    """The snapshot's senders' state, with the moves among the journal records replayed over it.

    Deliveries are not journaled: a message delivered after the snapshot and moved before
    a crash counts as delivered to the other side and moved (what a move says anyway).
    """
    senders = new_senders(config)
    try:
        senders.restore(loaded.live.get("senders") or {})
    except (KeyError, ValueError, TypeError) as e:  # the model is fine; only where mail went restarts
        loaded.recovery.problems.append(f"senders' state unreadable, started afresh ({e})")
        senders = new_senders(config)
    for key, label, previous, user, source, when, user_name, sent, kept in loaded.replayed:
        if label is not None and user and source not in SPAMDS_OWN:
            moved = senders.moved(key, label, user_name, sent)
            kept_for = 0
            if kept is not None and user_name is not None and sent and senders.moves:
                senders.kept.kept(user_name, sent, kept)
                kept_for = len(sent)
            what = "already_trained" if label == previous else "learned" if previous is None else "corrected"
            senders.learned.add(
                learning_record(key, what, user=user_name, message_id="", label=str(label), source=source,
                                senders=sent, moved=moved, kept=kept_for, when=when)
            )  # fmt: skip
    return senders
