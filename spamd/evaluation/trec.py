"""TREC spam-track evaluation: read an index, run the immediate-feedback protocol, report the measures.

The measures themselves (spamd.evaluation.measures) follow Cormack & Lynam, "TREC 2005 Spam
Track Overview": (1-ROCA)%, hm% at sm% = 0.1, lam%. This module does not decide how a message
is scored or learned: the caller passes the real classifier and trainer in.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from spamd.errors import SpamdError
from spamd.evaluation.feedback import PERSON, SETTLED, Event, Feedback, Protocol
from spamd.evaluation.measures import hm_at_sm, lam, one_minus_roca
from spamd.mail.message import looks_like_message, read_message_file
from spamd.model.bayes import Features, Label, Verdict
from spamd.people.senders import counted_senders
from spamd.people.users import is_user_name

if TYPE_CHECKING:
    from spamd.config import Config
    from spamd.learning.classifier import Classifier

Prepared = TypeVar("Prepared")  # what the caller's analysis makes of a message


@dataclass(frozen=True, slots=True)
class IndexEntry:
    label: Label
    name: str  # the path as written in the index
    directory: str  # the index's directory, which `name` is relative to
    user: str | None = None  # an optional third field: whose mail it is (spamd/people/users.py)

    @property
    def file(self) -> str:
        """The message's file name, resolved against the index's directory (as a str: made for every
        message of an index, a `Path` cost trec07p-dev's 10,000 entries 0.12 s of serial start)."""
        return os.path.join(self.directory, self.name)

    @property
    def path(self) -> Path:
        return Path(self.file)


def read_index(index: Path) -> list[IndexEntry]:
    """Parse a TREC index ('spam ../data/inmail.1' per line); bad lines are an error naming the line.

    A third field names the user the message belongs to ('spam ../data/inmail.1 alice'):
    `spamctl eval` scores it with that user's layer and trains that user. A path with
    spaces is then not possible; one without a user keeps the rest of its line as path.
    """
    try:
        lines = index.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise SpamdError(f"{index}: cannot read index: {e.strerror}") from None
    entries, directory = [], str(index.parent)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or parts[0].lower() not in ("spam", "ham"):
            raise SpamdError(f"{index}:{number}: expected '<spam|ham> <path> [user]', got {line[:80]!r}")
        path, user = parts[1].strip(), None
        fields = path.split()
        if len(fields) == 2 and is_user_name(fields[1]):
            path, user = fields
        entries.append(IndexEntry(Label.parse(parts[0]), path, directory, user))
    return entries


# Why an index entry is not learned from: what `spamctl train` says of the same file.
NOT_A_MESSAGE = "not a mail message (it does not start with a header field)"


def read_mail(path: str | os.PathLike[str]) -> tuple[bytes | None, str]:
    """A message file's bytes and "", or None and why it is no message to score and learn.

    Unreadable (missing, a directory, no permission: the system's reason) or not a
    mail message (empty, binary: `looks_like_message`, the test `spamctl train`
    applies before it learns anything). An index of one's own mail holds such files;
    every reader of an index here skips them with the reason, none stops on one.
    """
    try:
        raw = read_message_file(path)
    except OSError as e:
        return None, f"unreadable: {e.strerror or e}"
    if not looks_like_message(raw):
        return None, NOT_A_MESSAGE
    return raw, ""


def say_skipped(entry: IndexEntry, reason: str) -> None:
    """One line on stderr naming the file and why it was skipped, as `<program>: skipped <path>: <why>`."""
    print(f"{Path(sys.argv[0]).name or 'spamd'}: skipped {entry.path}: {reason}", file=sys.stderr)


def index_messages(
    entries: Iterable[IndexEntry], on_skip: Callable[[IndexEntry, str], None] = say_skipped
) -> Iterator[tuple[IndexEntry, bytes]]:
    """Each entry that is a readable mail message with its bytes, in index order; the others go to `on_skip`."""
    for entry in entries:
        raw, reason = read_mail(entry.file)
        if raw is None:
            on_skip(entry, reason)
        else:
            yield entry, raw


def mail_entries(
    entries: Iterable[IndexEntry], on_skip: Callable[[IndexEntry, str], None] = say_skipped
) -> list[IndexEntry]:
    """The entries that are readable mail messages (each file read once); the others go to `on_skip`.

    For a caller that hands the files to another program (`spamctl train`,
    bogofilter): it gets only what that program would learn from.
    """
    return [entry for entry, _ in index_messages(entries, on_skip)]


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    gold: Label
    score: float  # higher = spammier
    judged_spam: bool
    unsure: bool
    user: str | None = None


@dataclass(frozen=True)
class Report:
    messages: int
    skipped: int
    one_minus_roca_pct: float
    hm_at_sm01_pct: float
    lam_pct: float
    hm_pct: float
    sm_pct: float
    unsure_pct: float
    msgs_per_s: float
    seconds: float
    # Trainings applied, by source (eval: a person's label; autolearn; settled), and of
    # them those that changed the model (learned or corrected, not a repeat or declined).
    trained: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    # Where the spam and the ham went: filed spam, Unsure, filed ham (percent of each scored).
    spam_filed_pct: dict[str, float] = field(default_factory=dict)
    ham_filed_pct: dict[str, float] = field(default_factory=dict)
    # Per user named in the index: messages, (1-ROCA)%, hm%, sm% of that user's mail alone.
    users: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# Messages analyzed together before each is scored and trained in turn (see
# Classifier.analyze_many): `spamctl eval` on trec07p-dev 871 -> 1,092 msgs/s with
# batches of 64 (median of 3 interleaved runs); in a loop over its first 3,000
# messages, batches of 16 gained nothing and 128 or 256 less than 32 or 64. A batch
# also stops at BATCH_BYTES, so an index of huge messages holds few of them at once.
BATCH_MESSAGES = 64
BATCH_BYTES = 16 << 20


Batch = list[tuple[IndexEntry, "Prepared | None", str]]  # (entry, analyzed or None, why it was skipped)


def read_batches(entries: list[IndexEntry], analyze_many: Callable[[list[bytes]], list[Prepared]]) -> Iterator[Batch]:
    """Read and analyze the messages a batch at a time, in this process, in index order."""
    position = 0
    while position < len(entries):
        batch: list[IndexEntry] = []
        raws: list[bytes] = []
        failed: dict[int, str] = {}  # place in the batch -> why it could not be read
        size = 0
        while position < len(entries) and len(raws) < BATCH_MESSAGES and size < BATCH_BYTES:
            entry = entries[position]
            position += 1
            raw, reason = read_mail(entry.file)
            if raw is None:
                failed[len(batch)] = reason
            else:
                raws.append(raw)
                size += len(raw)
            batch.append(entry)
        analyzed = iter(analyze_many(raws))
        yield [
            (entry, None, failed[n]) if n in failed else (entry, next(analyzed), "") for n, entry in enumerate(batch)
        ]


def run_online(
    batches: Iterable[Batch],
    score: Callable[[Prepared], tuple[float, bool, bool]],
    learn: Callable[[Prepared, Label, str, bool], object],
    on_skip: Callable[[IndexEntry, str], None] = lambda entry, reason: None,
    progress: Callable[[int], None] = lambda n: None,
    protocol: Protocol | None = None,
) -> tuple[list[Result], int, float, Counter[tuple[str, str]]]:
    """Score each message, record it, then apply the training its protocol's feedback causes.

    `batches` yields the messages in index order, already analyzed (raw bytes ->
    what `score` and `learn` take), which depends on nothing learned: by
    `read_batches` here, or by worker processes (`analyze_in_workers`). Each is
    then scored in index order, and the training events due by then are applied
    before the next one is scored; with full immediate feedback (the default
    protocol, TREC's) that is each message with its gold label right after its
    score. `score(prepared)` returns (score, judged_spam, unsure);
    `learn(prepared, label, source, person)` returns the trainer's outcome.
    Messages `read_mail` refuses are skipped and reported through `on_skip`. Returns
    the results, the number skipped, seconds, and the trainings by (source, outcome).
    """
    feedback = Feedback(protocol or Protocol())
    results: list[Result] = []
    trained: Counter[tuple[str, str]] = Counter()
    waiting: dict[int, Prepared] = {}  # message number -> analyzed, while an event for it is pending
    skipped = history = 0
    first, learned_first = feedback.protocol.train_first, 0

    def apply(events: list[Event]) -> None:
        for event in events:
            outcome = learn(waiting[event.message], event.label, event.source, event.person)
            trained[(event.source, getattr(outcome, "value", str(outcome)))] += 1
        for event in events:
            if not feedback.waits_for(event.message):
                waiting.pop(event.message, None)

    started = time.perf_counter()
    for batch in batches:
        for entry, prepared, reason in batch:
            if prepared is None:
                skipped += 1
                on_skip(entry, reason)
                progress(1)
                continue
            if history < feedback.protocol.history:
                history += 1  # mail that was there before spamd: filed by the person, not scored
                if feedback.protocol.settled:
                    outcome = learn(prepared, entry.label, SETTLED, False)
                    trained[(SETTLED, getattr(outcome, "value", str(outcome)))] += 1
                progress(1)
                continue
            if first:
                if learned_first < first:  # first contact: learned with its label, not scored
                    learned_first += 1
                    outcome = learn(prepared, entry.label, PERSON, True)
                    trained[(PERSON, getattr(outcome, "value", str(outcome)))] += 1
                else:  # then scored, and nothing more learned
                    value, judged_spam, unsure = score(prepared)
                    results.append(Result(entry.name, entry.label, value, judged_spam, unsure, entry.user))
                progress(1)
                continue
            number = len(results)
            apply(feedback.due(number))  # labels that arrived while earlier messages were scored
            value, judged_spam, unsure = score(prepared)
            results.append(Result(entry.name, entry.label, value, judged_spam, unsure, entry.user))
            verdict = Verdict.UNSURE if unsure else Verdict.SPAM if judged_spam else Verdict.HAM
            waiting[number] = prepared
            apply(feedback.observe(number, entry.label, verdict, value))
            if not feedback.waits_for(number):
                waiting.pop(number, None)
            progress(1)
    return results, skipped, time.perf_counter() - started, trained


# ---------------------------------------------------------------- analysis in worker processes


# A worker's answer for a chunk of the index: the keys of the messages it could read, their senders, all
# their feature ids and counts end to end, each message's number of features, why
# each of the others could not be read (by place in the chunk), and the features' family
# weights end to end (None while every weight is 1: [model] families). Three arrays pickle in
# three headers, where a list of Analyzed pickled two arrays a message: the main
# process unpickled a batch in 14.3 us a message, 1.4 us this way (trec07p-dev).
# keys, senders, feature ids, counts, lengths, unreadable, weights, each message's
# authentication (authenticated senders, DMARC p=reject failure, X-Spam-Auth value), and the
# features' kinds end to end (None unless [model] evidence_weight scores the evidence apart).
AnalyzedChunk = tuple[
    list[bytes], list[tuple[int, ...]], np.ndarray, np.ndarray, np.ndarray, dict[int, str], np.ndarray | None,
    list[tuple[int, bool, str]], np.ndarray | None,
]  # fmt: skip


def _read_and_analyze(
    classifier: Classifier, paths: list[str], authenticate: bool = True, senders: bool = True
) -> AnalyzedChunk:
    """In a worker: read a chunk of the index and analyze what could be read (module level: picklable);
    `authenticate` and `senders` as `Classifier.analyze_many`'s."""
    raws: list[bytes] = []
    failed: dict[int, str] = {}
    for number, path in enumerate(paths):
        raw, reason = read_mail(path)
        if raw is None:
            failed[number] = reason
        else:
            raws.append(raw)
    analyzed = classifier.analyze_many(raws, authenticate, senders=senders)
    features = [a.features for a in analyzed]
    return (
        [a.key for a in analyzed],
        [a.senders for a in analyzed],
        np.concatenate([f.ids for f in features]) if features else np.zeros(0, np.uint32),
        np.concatenate([f.counts for f in features]) if features else np.zeros(0, np.uint32),
        np.array([len(f.ids) for f in features], dtype=np.int64),
        failed,
        _chunk_weights(features),
        [(a.authenticated, a.dmarc_reject, a.auth_report) for a in analyzed],
        _chunk_kinds(features),
    )


def _chunk_weights(features: list[Features]) -> np.ndarray | None:
    """The features' weights end to end (1 for a message without), or None when no message has any."""
    if not any(f.weights is not None for f in features):
        return None
    return np.concatenate([np.ones(len(f.ids)) if f.weights is None else f.weights for f in features])


def _chunk_kinds(features: list[Features]) -> np.ndarray | None:
    """The features' kinds end to end (words for a message without), or None when no message has any."""
    if not any(f.kinds is not None for f in features):
        return None
    return np.concatenate([np.zeros(len(f.ids), np.int8) if f.kinds is None else f.kinds for f in features])


def _unpacked(entries: list[IndexEntry], chunk: AnalyzedChunk) -> Batch:
    """A worker's answer as the Batch `read_batches` would have made of the same entries."""
    from spamd.learning.classifier import Analyzed

    keys, senders, ids, counts, lengths, failed, weights, auth, kinds = chunk
    ends = np.cumsum(lengths).tolist()
    analyzed = iter(
        [
            Analyzed(
                key,
                Features(
                    ids[start:end],
                    counts[start:end],
                    None if weights is None else weights[start:end],
                    None if kinds is None else kinds[start:end],
                ),
                sent,
                *who,
            )
            for key, sent, (start, end), who in zip(keys, senders, pairwise([0, *ends]), auth, strict=True)
        ]
    )
    return [(entry, None, failed[n]) if n in failed else (entry, next(analyzed), "") for n, entry in enumerate(entries)]


def analyze_in_workers(
    config: Config, entries: list[IndexEntry], jobs: int, authenticate: bool = True, senders: bool = True
) -> Iterator[Batch]:
    """The batches of `read_batches`, read and analyzed by `jobs` worker processes, yielded in index order.

    Analysis (parse, tokenize, hash) is most of the work per message and needs no
    model, so it runs beside the one process that scores and trains in index order:
    the same scores as one process, to the last digit (tests/test_evaluation.py).
    Batches stop at BATCH_MESSAGES only (workers read the files; sizes are not known here).
    `authenticate`: verify the senders (False: `verification_counts` says nothing can come of it).
    `senders` False: leave out who each message is from (no user's senders are kept).
    """
    from spamd.learning.classifier import AnalysisWorkers

    chunks = [entries[i : i + BATCH_MESSAGES] for i in range(0, len(entries), BATCH_MESSAGES)]
    analyze = functools.partial(_read_and_analyze, authenticate=authenticate, senders=senders)
    with AnalysisWorkers(config, jobs) as workers:
        # Paths as str: a pickled Path took 4.5 us a message to unpickle in the worker, a str 0.05.
        answers = workers.map(analyze, ([entry.file for entry in chunk] for chunk in chunks))
        for chunk, answer in zip(chunks, answers, strict=True):
            yield _unpacked(chunk, answer)


def summarize(
    results: list[Result], skipped: int, seconds: float, trained: Counter[tuple[str, str]] | None = None
) -> Report:
    scores = np.array([r.score for r in results], dtype=np.float64)
    is_spam = np.array([r.gold == Label.SPAM for r in results], dtype=bool)
    judged = np.array([r.judged_spam for r in results], dtype=bool)
    n_spam, n_ham = int(is_spam.sum()), int((~is_spam).sum())
    hm = float((judged & ~is_spam).sum() / n_ham) if n_ham else float("nan")
    sm = float((~judged & is_spam).sum() / n_spam) if n_spam else float("nan")
    unsure = sum(r.unsure for r in results)
    return Report(
        messages=len(results),
        skipped=skipped,
        one_minus_roca_pct=one_minus_roca(scores, is_spam),
        hm_at_sm01_pct=hm_at_sm(scores, is_spam),
        lam_pct=lam(hm, sm, n_ham, n_spam) if n_ham and n_spam else float("nan"),
        hm_pct=100.0 * hm,
        sm_pct=100.0 * sm,
        unsure_pct=100.0 * unsure / max(len(results), 1),
        msgs_per_s=len(results) / seconds if seconds > 0 else float("nan"),
        seconds=seconds,
        trained=_by_source(trained or Counter(), lambda outcome: True),
        changed=_by_source(trained or Counter(), lambda outcome: outcome in ("learned", "corrected")),
        users=_by_user(results),
        spam_filed_pct=_filed(results, Label.SPAM),
        ham_filed_pct=_filed(results, Label.HAM),
    )


def _filed(results: list[Result], gold: Label) -> dict[str, float]:
    """Shares of the `gold` mail filed spam, Unsure and ham, in percent (Junk, a second look, the inbox)."""
    mine = [r for r in results if r.gold == gold]
    if not mine:
        return {}
    unsure = sum(r.unsure for r in mine)
    filed_spam = sum(r.judged_spam and not r.unsure for r in mine)
    return {
        "spam": 100.0 * filed_spam / len(mine),
        "unsure": 100.0 * unsure / len(mine),
        "ham": 100.0 * (len(mine) - filed_spam - unsure) / len(mine),
    }


def _by_user(results: list[Result]) -> dict[str, dict[str, float]]:
    """The measures of each user's messages alone (none when the index names no user)."""
    names = sorted({r.user for r in results if r.user is not None})
    users = {}
    for name in names:
        mine = [r for r in results if r.user == name]
        scores = np.array([r.score for r in mine], dtype=np.float64)
        is_spam = np.array([r.gold == Label.SPAM for r in mine], dtype=bool)
        judged = np.array([r.judged_spam for r in mine], dtype=bool)
        n_spam, n_ham = int(is_spam.sum()), int((~is_spam).sum())
        users[name] = {
            "messages": len(mine),
            "one_minus_roca_pct": one_minus_roca(scores, is_spam),
            "hm_pct": 100.0 * float((judged & ~is_spam).sum() / n_ham) if n_ham else float("nan"),
            "sm_pct": 100.0 * float((~judged & is_spam).sum() / n_spam) if n_spam else float("nan"),
        }
    return users


def _by_source(trained: Counter[tuple[str, str]], counts: Callable[[str], bool]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for (source, outcome), n in trained.items():
        if counts(outcome):
            totals[source] += n
    return dict(sorted(totals.items()))


def iter_result_lines(results: list[Result]) -> Iterator[str]:
    """TREC results format: '<path> <gold> <score> <judgement>'."""
    for r in results:
        yield f"{r.name} {r.gold} {r.score:.6f} {'spam' if r.judged_spam else 'ham'}\n"


# ---------------------------------------------------------------- spamctl eval


def verification_counts(config: Config, dns: bool) -> bool:
    """Whether verifying the senders can change how an evaluation scores, trains or files a message.

    Without DNS (`evaluate_index`'s default) every key and policy look-up is a temporary error, so
    no signature passes, no DMARC policy is known and no sender is authenticated; only trusted
    Authentication-Results could vouch for one, and only [model] auth_outcomes makes tokens of the
    errors. Otherwise all verification gives is the X-Spam-Auth report, which an evaluation does not
    keep: it is not run. The analysis of trec07p-dev's first 300 messages in batches of 64, as a
    worker runs it: 3,139 k -> 3,059 k instructions a message (callgrind; about 20 us of 640 by the
    clock). tests/test_evaluation.py checks, message by message of signed mail, that nothing it
    would give differs.
    """
    return dns or bool(config.auth.trusted_authserv_ids) or config.model.auth_outcomes


def evaluate_index(
    config: Config,
    index: Path,
    progress: bool = False,
    on_skip: Callable[[IndexEntry, str], None] = lambda entry, reason: None,
    jobs: int = 0,
    protocol: Protocol | None = None,
    user_layer: bool = True,
    dns: bool = False,
    batches_of: Callable[[list[IndexEntry]], Iterable[Batch]] | None = None,
) -> tuple[list[Result], Report]:
    """Run the protocol (default: TREC immediate full feedback) through the real Engine (parse, score, journaled training) on a fresh model.

    The model lives in a temporary data directory that is removed afterwards; the
    journal is written as in the daemon but not fsynced (durable=False), since a
    crash mid-evaluation loses nothing of value. `jobs` > 0 analyzes the messages
    in that many worker processes (`analyze_in_workers`); the scores are the same.
    Entries `read_mail` refuses (unreadable, or no mail message: `spamctl train`
    would not learn them either) are skipped, each passed to `on_skip` with the reason.
    An entry naming a user is scored with that user's layer and trains that user;
    `user_layer` False scores every message with the shared model alone (and trains it alone).
    Sender authentication looks nothing up in DNS unless `dns`: a corpus's keys and records of
    years ago are gone, and a figure must not depend on today's DNS or on the network. Without it,
    every look-up would be a temporary error, so the senders are verified only where that can
    still count: trusted Authentication-Results, or [model] auth_outcomes (`verification_counts`).
    `batches_of` gives the index's batches analyzed beforehand (a measurement that replays one
    corpus's messages under many settings analyzes them once); `jobs` and `dns` then do nothing.
    """
    import dataclasses
    import tempfile

    if not dns:
        config = dataclasses.replace(config, auth=dataclasses.replace(config.auth, dns_budget_s=0.0))

    from spamd.engine.engine import Engine
    from spamd.learning.classifier import Analyzed
    from spamd.model.bayes import Verdict

    entries = read_index(index)
    with tempfile.TemporaryDirectory(prefix="spamd-eval-") as tmp:
        # A model of its own, in the temporary directory: never a Redis that [redis] url names, whose
        # shared model every mail host scores with (an eval there trained it with the corpus).
        own = dataclasses.replace(config, data_dir=Path(tmp), redis=dataclasses.replace(config.redis, url=""))
        engine = Engine.open(own, durable=False)
        try:

            def score(prepared: tuple[Analyzed, str | None]) -> tuple[float, bool, bool]:
                analyzed, user_name = prepared
                scored = engine.classify_analyzed(analyzed, user_name).score
                if user_name is not None:  # filed for its user: where their mail from its senders goes
                    filed_spam = scored.verdict == Verdict.SPAM
                    counted = counted_senders(analyzed.senders, analyzed.authenticated, filed_spam)
                    engine.senders.delivered(user_name, analyzed.key, counted, filed_spam)
                return scored.log_odds, scored.verdict == Verdict.SPAM, scored.verdict == Verdict.UNSURE

            told = protocol or Protocol()

            def learn(prepared: tuple[Analyzed, str | None], label: Label, source: str, person: bool) -> object:
                source = told.trainer_source(source)
                outcome = engine.trainer.train(prepared[0], label, source=source, user=person, user_name=prepared[1])
                engine.record_move(prepared[0], label, source, person, prepared[1])
                return outcome

            def with_users(batches: Iterable[Batch]) -> Iterator[Batch]:
                for batch in batches:
                    yield [
                        (entry, None if analyzed is None else (analyzed, entry.user if user_layer else None), reason)
                        for entry, analyzed, reason in batch
                    ]

            bar = _progress_bar(len(entries)) if progress else None
            authenticate = verification_counts(config, dns)
            # Who a message is from counts only for the user it names (the senders' rule, spamd/people/senders.py).
            senders = user_layer and any(entry.user is not None for entry in entries)
            try:
                if batches_of is not None:
                    batches: Iterable[Batch] = batches_of(entries)
                elif jobs > 0:
                    batches = analyze_in_workers(config, entries, jobs, authenticate, senders)
                else:
                    batches = read_batches(
                        entries, lambda raws: engine.classifier.analyze_many(raws, authenticate, senders=senders)
                    )
                results, skipped, seconds, trained = run_online(
                    with_users(batches),
                    score,
                    learn,
                    on_skip,
                    bar.update if bar is not None else (lambda n: None),
                    protocol,
                )
            finally:
                if bar is not None:
                    bar.close()
        finally:
            engine.close()
    return results, summarize(results, skipped, seconds, trained)


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="msg", smoothing=0.1, dynamic_ncols=True)


def format_report(report: Report, index: Path, protocol: Protocol | None = None) -> str:
    rows = [
        ("index", str(index)),
        ("messages", f"{report.messages:,} ({report.skipped} skipped)"),
        ("(1-ROCA)%", f"{report.one_minus_roca_pct:.4f}"),
        ("hm% at sm%=0.1", f"{report.hm_at_sm01_pct:.2f}"),
        ("lam%", f"{report.lam_pct:.3f}"),
        ("hm% / sm% at threshold", f"{report.hm_pct:.2f} / {report.sm_pct:.2f}"),
        ("unsure", f"{report.unsure_pct:.2f}%"),
        (
            "spam filed spam / unsure / ham",
            " / ".join(f"{report.spam_filed_pct.get(k, math.nan):.1f}%" for k in ("spam", "unsure", "ham")),
        ),
        ("throughput", f"{report.msgs_per_s:,.0f} msgs/s ({report.seconds:.1f} s)"),
    ]
    if protocol is not None:
        rows.insert(1, ("feedback", protocol.describe()))
    for source, n in report.trained.items():
        rows.append((f"trained ({source})", f"{n:,} ({report.changed.get(source, 0):,} changed the model)"))
    for name, m in report.users.items():
        rows.append((f"user {name}", f"(1-ROCA)% {m['one_minus_roca_pct']:.4f}, hm% / sm% {m['hm_pct']:.2f} / "
                     f"{m['sm_pct']:.2f}, {int(m['messages']):,} messages"))  # fmt: skip
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
