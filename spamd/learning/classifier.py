"""The one path from raw bytes to features and a score, shared by the daemon, spamctl and eval.

bytes -> strip spamd's own headers -> parse (capped) -> tokens -> hashed features -> score.
It does not learn: `spamd.engine.trainer.Trainer` does, through the journal and ledger.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from spamd.config import Config, UsersConfig
from spamd.mail.auth.dns import Budget, DnsWouldWait
from spamd.mail.auth.outcomes import outcome_tokens
from spamd.mail.auth.spf import SmtpSession
from spamd.mail.auth.verify import NOTHING, Authenticator, AuthResult
from spamd.mail.domains import load_suffix_list
from spamd.mail.message import ParsedMessage, parse_message, strip_own_headers, stripped_message_key
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import Features, ModelView, Score, featurize, verdict_of
from spamd.model.families import EVIDENCE, Weighed, with_families_and_kinds
from spamd.people.senders import (
    SenderCounts,
    authenticated_senders,
    from_address,
    keys_of_senders,
    moved_by_counts,
    sender_names,
)
from spamd.people.users import LayerScorer
from spamd.runtime.gc_tuning import tune_gc_for_message_streams
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap

# Threads a process of `spamctl eval --dns` or `classify` verifies a batch's senders in while
# their look-ups wait on DNS (a batch is 64 messages). The daemon's helpers have their own
# (spamd.engine.analyzers.HELPER_VERIFYING_THREADS).
BATCH_VERIFYING_THREADS = 32
# `[auth] dmarc_reject_action = "spam"`: a DMARC failure under p=reject is filed as spam, at
# least this far past the middle (the senders' rule's floor, spamd.people.senders.FLOOR).
DMARC_REJECT_LOG_ODDS = 0.45


@dataclass(frozen=True, slots=True)
class Analyzed:
    """A message ready to score or learn: its ledger key, its features and who it is from (spamd.people.senders),
    and which of those senders are authenticated (a bit per sender; spamd.mail.auth)."""

    key: bytes
    features: Features
    senders: tuple[int, ...] = ()
    authenticated: int = 0
    dmarc_reject: bool = False  # DMARC failed under p=reject ([auth] dmarc_reject_action)
    auth_report: str = ""  # the X-Spam-Auth value ("": nothing was checked)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A message parsed and tokenized, before its senders are verified (`Classifier.prepared`)."""

    stripped: bytes
    message: ParsedMessage
    tokens: list[str]
    weights: np.ndarray | None
    kinds: np.ndarray | None = None  # with [model] evidence_weight (spamd.model.families.with_families_and_kinds)


class Classifier:
    def __init__(
        self,
        config: Config,
        model: ModelView,
        users: LayerScorer | None = None,
        senders: SenderCounts | None = None,
    ):
        self.config = config
        self.model = model
        self.users = users  # per-user layers (None: none kept, as in analysis workers)
        self.senders = senders  # where each user's mail from a sender ends up (None: not kept)
        self._authenticator: Authenticator | None = None  # made on first use: its resolver stays in its process
        self._verifying: ThreadPoolExecutor | None = None
        self._verifying_made = threading.Lock()

    @property
    def authenticator(self) -> Authenticator:
        if self._authenticator is None:
            self._authenticator = Authenticator(self.config.auth)
        return self._authenticator

    @property
    def nameservers_down(self) -> bool:
        """Whether this process's resolver takes `[auth] nameservers` as down (spamd.mail.auth.dns)."""
        return self._authenticator is not None and self._authenticator.resolver.servers_down

    @property
    def nameservers_times_down(self) -> int:
        """How often this process's resolver took `[auth] nameservers` as down."""
        return 0 if self._authenticator is None else self._authenticator.resolver.times_down

    def authenticate(
        self, stripped: bytes, message: ParsedMessage, session: SmtpSession | None = None, budget: Budget | None = None
    ) -> AuthResult:
        """Who sent the message (`[auth]`; SPF with the SMTP `session` when `[auth] spf`): DNS within the
        `budget` (None: `[auth] dns_budget_s` from now), so call it off the event loop."""
        session = session if self.config.auth.spf else None
        return self.authenticator.verify(
            stripped, message.headers, from_address(message.header("from")), session, budget
        )

    def tokens(self, raw: bytes) -> list[str]:
        """The message's tokens, the families' ([model] char_ngrams, osb) after the tokenizer's."""
        return self.weighed_tokens(raw)[0]

    def weighed_tokens(self, raw: bytes) -> Weighed:
        """`tokens`, their weights in the score (None: 1 each) and their kinds (None: all words; [model]
        evidence_weight), as `analyze` makes its features of them."""
        stripped = strip_own_headers(raw)
        message = parse_message(stripped, self.config.parser)
        weighed = with_families_and_kinds(tokenize(message), message, self.config.model)
        if self.config.model.auth_outcomes:
            auth = self.authenticate(stripped, message) if self.config.auth.enabled else NOTHING
            weighed = _with_outcomes(weighed, auth)
        return weighed

    def analyze(self, raw: bytes, authenticate: bool = True, session: SmtpSession | None = None) -> Analyzed:
        return self.analyze_many([raw], authenticate, [session])[0]

    def analyze_many(
        self, raws: list[bytes], authenticate: bool = True, sessions: Sequence[SmtpSession | None] | None = None,
        senders: bool = True,
    ) -> list[Analyzed]:  # fmt: skip
        """`analyze` of each message, running each stage over the whole list before the next.

        The same results as one at a time (no stage depends on the model), for
        callers that hold several messages at once (`spamctl eval`). A
        stage that runs over a batch keeps its code and data in the CPU's caches;
        one message at a time, each stage evicts the last: `spamctl eval` on
        trec07p-dev 871 -> 1,092 msgs/s in batches of 64 (median of 3 runs each,
        interleaved; see spamd.evaluation.trec). Verifying the senders is a stage of its own
        too: the analysis helper takes what one read brings, mostly 3 to 7 messages under
        load (bench_smtp.py --auth warm), and signed trec07p-dev mail in batches of 4 took
        769 -> 718 us a message (best of 8 alternated passes; 548 -> 543 with [auth] off).
        `authenticate`: verify the senders (for scoring; a training does not need it), with
        each message's SMTP session in `sessions` (None: none). `senders` False leaves out who the
        message is from, for a caller that keeps nobody's senders (`spamctl eval` of an index
        that names no user): 2,606 k -> 2,565 k instructions a trec07p-dev message (callgrind).
        """
        authenticate = self.verifies(authenticate)
        prepared = self.prepared(raws)
        if not authenticate:
            return [self.finished(ready, False, NOTHING, senders) for ready in prepared]
        sessions = sessions if sessions is not None else [None] * len(raws)
        auths = self.authenticated_together(prepared, sessions)
        return [self.finished(ready, True, auth, senders) for ready, auth in zip(prepared, auths, strict=True)]

    def authenticated_together(
        self, prepared: Sequence[Prepared], sessions: Sequence[SmtpSession | None]
    ) -> list[AuthResult]:
        """Each message's senders verified: here while the resolver's cache answers every look-up, else in
        threads, so that the DNS waits of a batch's messages overlap rather than queue one behind another."""
        auths = [
            self.authenticated_from_cache(ready, session) for ready, session in zip(prepared, sessions, strict=True)
        ]
        waiting = [number for number, auth in enumerate(auths) if auth is None]
        if waiting:

            def verified(number: int) -> AuthResult:
                ready = prepared[number]
                return self.authenticate(ready.stripped, ready.message, sessions[number], self.authenticator.budget())

            done = map(verified, waiting) if len(waiting) == 1 else self.verifying_threads.map(verified, waiting)
            for number, auth in zip(waiting, done, strict=True):
                auths[number] = auth
        return [NOTHING if auth is None else auth for auth in auths]

    def authenticated_from_cache(
        self, prepared: Prepared, session: SmtpSession | None, started: float | None = None
    ) -> AuthResult | None:
        """`prepared`'s senders verified from the resolver's cache alone; None where a look-up would wait on DNS
        (the caller verifies it again in a thread, within the budget counted from `started`, None: now)."""
        try:
            budget = self.authenticator.budget(started, cached_only=True)
            return self.authenticate(prepared.stripped, prepared.message, session, budget)
        except DnsWouldWait:
            return None

    @property
    def verifying_threads(self) -> ThreadPoolExecutor:
        """Threads for `authenticated_together`'s look-ups, made on first use, in the process that uses them."""
        with self._verifying_made:
            if self._verifying is None:
                self._verifying = ThreadPoolExecutor(BATCH_VERIFYING_THREADS, thread_name_prefix="verify-batch")
            return self._verifying

    def verifies(self, authenticate: bool) -> bool:
        """Whether an analysis asked to `authenticate` (or not) verifies the senders: [model] auth_outcomes
        makes the outcomes tokens, so that a training verifies the message too; [auth] off, none does."""
        return (authenticate or self.config.model.auth_outcomes) and self.config.auth.enabled

    def prepared(self, raws: list[bytes]) -> list[Prepared]:
        """Every stage of `analyze_many` but the senders' verification and the hashing, a stage at a time over all."""
        stripped = [strip_own_headers(raw) for raw in raws]  # once: for the key and for the tokens
        parsed = [parse_message(message, self.config.parser) for message in stripped]
        model = self.config.model
        token_lists = [with_families_and_kinds(tokenize(message), message, model) for message in parsed]
        return [
            Prepared(s, message, tokens, weights, kinds)
            for s, message, (tokens, weights, kinds) in zip(stripped, parsed, token_lists, strict=True)
        ]

    def finished(self, prepared: Prepared, authenticate: bool, auth: AuthResult, keep_senders: bool = True) -> Analyzed:
        """A `prepared` message's analysis with its senders' verification `auth` (NOTHING where `authenticate` is off);
        without its senders unless `keep_senders`."""
        stripped, message = prepared.stripped, prepared.message
        names = sender_names(message) if keep_senders else []
        key, senders = stripped_message_key(stripped), keys_of_senders(names)
        features = self.featurized(prepared, auth)
        if not authenticate:
            return Analyzed(key, features, senders)
        return Analyzed(
            key, features, senders, authenticated_senders(names, senders, auth), auth.dmarc_rejects(), auth.header()
        )

    def featurized(self, prepared: Prepared, auth: AuthResult) -> Features:
        """A `prepared` message's features, with the outcomes of `auth` among its tokens when [model] auth_outcomes."""
        model = self.config.model
        weighed: Weighed = (prepared.tokens, prepared.weights, prepared.kinds)
        tokens, weights, kinds = _with_outcomes(weighed, auth) if model.auth_outcomes else weighed
        return featurize(tokens, model.hash_bits, weights, kinds)

    def scores_many(self, raws: list[bytes], user_name: str | None = None) -> list[Score]:
        """`score` of each of `analyze_many(raws)`, for callers that keep only the scores (`spamctl classify`).

        Where the senders' rule does not score (no user named, or nobody moved mail), what only
        it and the training ledger read is left out: the message's key and its senders, 60 us
        of the ~1,000 a classify worker spent on each trec07p-dev message. So is verifying the
        senders, unless its outcome moves the score by itself (`verification_scores`): without
        it, all verification gave was the X-Spam-Auth report, which classify does not print.
        The same scores.
        """
        if self.scores_by_senders(user_name):
            return [self.score(analyzed, user_name) for analyzed in self.analyze_many(raws)]
        prepared = self.prepared(raws)
        if self.verifies(True) and self.verification_scores():
            auths = self.authenticated_together(prepared, [None] * len(prepared))
        else:
            auths = [NOTHING] * len(prepared)
        return [
            self.score(Analyzed(b"", self.featurized(ready, auth), dmarc_reject=auth.dmarc_rejects()), user_name)
            for ready, auth in zip(prepared, auths, strict=True)
        ]

    def verification_scores(self) -> bool:
        """Whether verifying the senders moves a score the senders' rule does not: the outcomes' tokens
        ([model] auth_outcomes), or a DMARC p=reject failure filed as spam ([auth] dmarc_reject_action)."""
        return self.config.model.auth_outcomes or self.config.auth.dmarc_reject_action == "spam"

    def scores_by_senders(self, user_name: str | None) -> bool:
        """Whether `score` may move `user_name`'s score by where their mail from its senders went (spamd/people/senders.py)."""
        senders = self.senders
        return (
            senders is not None and user_name is not None and self.config.users.score_per_user and bool(senders.moves)
        )

    def scoring_layer(self, user_name: str | None) -> LayerScorer | None:
        """The layers that score `user_name`'s mail when mail is scored per user; None: the shared model alone."""
        return scoring_layers(self.users, self.config.users, user_name)

    def score(self, analyzed: Analyzed, user_name: str | None = None) -> Score:
        """The shared model's score, or `user_name`'s: with their layer ([users] token_moves) and where their
        mail from the message's senders ends up (spamd/people/senders.py); the shared one if neither says anything."""
        senders = self.senders
        by_senders = self.scores_by_senders(user_name) and bool(analyzed.senders)
        counts = None
        if by_senders and scoring_layers(self.users, self.config.users, user_name) is None:
            # The shared model's score and the senders' counts read together: in Redis, one round trip.
            assert senders is not None and user_name is not None
            score, counts = senders.score_and_counts(self.model, analyzed.features, user_name, analyzed.senders)
        else:
            score = score_as_delivered(self.model, self.users, self.config.users, analyzed.features, user_name)
        if analyzed.dmarc_reject and self.config.auth.dmarc_reject_action == "spam":
            score = verdict_of(self.config.model, max(score.log_odds, DMARC_REJECT_LOG_ODDS))
        if not by_senders:
            return score
        assert senders is not None and user_name is not None
        model, features = self.config.model, analyzed.features
        if counts is None:
            return senders.adjust(score, user_name, analyzed.senders, model, analyzed.authenticated, features)
        similar = senders.similar(user_name, analyzed.senders, features)  # what the user kept from them
        return moved_by_counts(score, counts, senders.moves, senders.share, analyzed.authenticated, model, similar)


def scoring_layers(users: LayerScorer | None, users_config: UsersConfig, user_name: str | None) -> LayerScorer | None:
    """`users` if their token layers score `user_name`'s mail ([users] score_per_user and token_moves); None: the shared model."""
    if user_name is None or users is None or not (users_config.score_per_user and users_config.token_moves):
        return None
    return users


def score_as_delivered(
    model: Any, users: LayerScorer | None, users_config: UsersConfig, features: Features, user_name: str | None
) -> Score:
    """A message's score as its user's mail is scored: for the Classifier, and for the trainers' thick threshold."""
    layers = scoring_layers(users, users_config, user_name)
    if layers is None:
        return model.score(features)
    assert user_name is not None
    return layers.score_for(model, user_name, features)


# ---------------------------------------------------------------- analysis in worker processes

Job = TypeVar("Job")
Done = TypeVar("Done")

_worker_classifier: Classifier | None = None


def _start_worker(
    config: Config, model: ModelView | None, users: LayerScorer | None = None, senders: SenderCounts | None = None
) -> None:
    global _worker_classifier
    tune_gc_for_message_streams()
    keep_read_buffers_in_the_heap()
    _worker_classifier = Classifier(config, model, users, senders)  # type: ignore[arg-type]  # None: analysis only, it never scores


def _run_in_worker(task: tuple[Callable[[Classifier, Any], Any], Any]) -> Any:
    function, job = task
    assert _worker_classifier is not None
    return function(_worker_classifier, job)


class AnalysisWorkers:
    """Worker processes that each hold a Classifier, for bulk work.

    Analysis (strip, parse, tokenize, hash) is most of the CPU per message and needs
    no model, so `spamctl eval` runs it here while one process scores and trains in
    order. Given a `model` that nothing trains meanwhile (`spamctl classify` of many
    messages without a daemon), the workers read and score too, with the `users`'
    layers when a user is named. `map` keeps the jobs' order.
    """

    def __init__(
        self, config: Config, jobs: int, model: ModelView | None = None, users: LayerScorer | None = None,
        senders: SenderCounts | None = None,
    ):  # fmt: skip
        import multiprocessing

        # The platform's default start method: fork on Linux before Python 3.14 (workers
        # start in milliseconds and share the model's pages), forkserver after it, which
        # is safe beside threads (the model is then pickled to each worker, once).
        context = multiprocessing.get_context()
        if context.get_start_method() == "fork":
            load_suffix_list()  # shared by the forked workers' pages
        self._pool = context.Pool(jobs, _start_worker, (config, model, users, senders))

    def map(self, function: Callable[[Classifier, Job], Done], jobs: Iterable[Job]) -> Iterator[Done]:
        """function(classifier, job) for each job in a worker, results in the jobs' order, computed ahead."""
        return self._pool.imap(_run_in_worker, ((function, job) for job in jobs))

    def __enter__(self) -> AnalysisWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.terminate()
        self._pool.join()


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as taskset or systemd's CPUAffinity= set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs() -> int:
    """Worker processes for analysis: one per usable core, none on a single core."""
    cores = usable_cores()
    return cores if cores > 1 else 0


def _with_outcomes(weighed: Weighed, auth: AuthResult) -> Weighed:
    """The tokens with the authentication outcomes' tokens after them ([model] auth_outcomes), each weighing 1,
    and of the kind EVIDENCE (what was verified, not claimed) when kinds are kept."""
    tokens, weights, kinds = weighed
    extra = outcome_tokens(auth)
    return (
        tokens + extra,
        None if weights is None else np.concatenate([weights, np.ones(len(extra))]),
        None if kinds is None else np.concatenate([kinds, np.full(len(extra), EVIDENCE, dtype=np.int8)]),
    )
