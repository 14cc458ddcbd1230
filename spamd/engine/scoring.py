"""Score one message for delivery and apply one training event, through the Engine, with their log lines.

The SMTP handler, the milter and the Maildir watcher all come here, so a message gets the
same X-Spam-* headers and the same `message_scored` line whichever way it
arrived, and every training event the same `training_applied` line. The model
itself is the Engine's: nothing here computes a score or touches counts.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import re
import time
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from spamd.config import Config
from spamd.engine.analyzers import AnalysisProcesses, AnalysisUnavailable
from spamd.engine.engine import Classified, Engine
from spamd.errors import StoreUnavailableError
from spamd.learning.outcomes import Outcome
from spamd.mail.auth.spf import SmtpSession
from spamd.mail.auth.verify import reported_results
from spamd.mail.message import parse_message, split_head_body, strip_own_headers, with_own_headers
from spamd.mail.tokenize import salad_tokens
from spamd.model.bayes import Contribution, Label, Score, Verdict

log = structlog.get_logger()

_MESSAGE_ID_RE = re.compile(rb"^message-id:[ \t]*(.*?)[ \t\r]*$", re.IGNORECASE | re.MULTILINE)
_STATUS_RE = re.compile(rb"^x-spam-status:", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Scored:
    data: bytes  # the message with spamd's headers
    classified: Classified
    headers: tuple[tuple[str, str], ...] = ()  # those headers, for a way in that adds them itself (the milter)
    user: str | None = None  # whose copy it was scored as (None: the shared model's)

    @property
    def score(self) -> Score:
        return self.classified.score

    @property
    def key(self) -> bytes:
        return self.classified.analyzed.key


def spam_headers(score: Score, ham_threshold: float, spam_threshold: float) -> list[tuple[str, str]]:
    """X-Spam-Status (Yes / No / Unsure with score and thresholds), X-Spam-Score, X-Spam-Flag."""
    status = {Verdict.SPAM: "Yes", Verdict.HAM: "No", Verdict.UNSURE: "Unsure"}[score.verdict]
    return [
        (
            "X-Spam-Status",
            f"{status}, score={score.probability:.4f} ham_threshold={ham_threshold:.2f} "
            f"spam_threshold={spam_threshold:.2f} log_odds={score.log_odds:.3f}",
        ),
        ("X-Spam-Score", f"{score.probability:.4f}"),
        ("X-Spam-Flag", "YES" if score.verdict is Verdict.SPAM else "NO"),
    ]


def message_id(raw: bytes) -> str:
    head = split_head_body(raw)[0][:65536]
    m = _MESSAGE_ID_RE.search(head)
    return m.group(1)[:200].decode("ascii", "replace") if m else ""


def has_spam_status(raw: bytes) -> bool:
    """Whether a message already carries a verdict (spamd's, or an earlier run's)."""
    return _STATUS_RE.search(split_head_body(raw)[0][:65536]) is not None


_LOG_ODDS_RE = re.compile(rb"^x-spam-status:[^\n]*?\blog_odds=(-?[0-9]+(?:\.[0-9]+)?)", re.IGNORECASE | re.MULTILINE)


def delivered_log_odds(raw: bytes) -> float | None:
    """The normalized log-odds spamd's X-Spam-Status gave this message when it was scored, or None (never scored by spamd)."""
    m = _LOG_ODDS_RE.search(split_head_body(raw)[0][:65536])
    return float(m.group(1)) if m else None


def spam_flagged(raw: bytes) -> bool:
    """Whether spamd (or a filter run before) marked this message as spam."""
    head = split_head_body(raw)[0][:65536].lower()
    return re.search(rb"^x-spam-flag:[ \t]*yes", head, re.MULTILINE) is not None


class Explains(Protocol):
    """What `explanation` asks of the Engine (or of what stands in for it)."""

    config: Config

    def explain(
        self, raw: bytes, limit: int = 20, user_name: str | None = None
    ) -> tuple[Score, list[Contribution]]: ...

    def sender_standing(self, raw: bytes, user_name: str | None = None) -> dict[str, Any]: ...


def explanation(
    engine: Explains, raw: bytes, limit: int, user_name: str | None = None, senders: bool = False
) -> dict[str, object]:
    """The score and the `limit` strongest tokens each way, as `spamctl explain` and spamc's SYMBOLS/REPORT show them;
    with `senders`, the senders' authentication and rule too (`spamctl explain`: it may wait for DNS)."""
    # Ask for every token, then take the strongest of each direction separately.
    score, rows = engine.explain(raw, limit=1 << 30, user_name=user_name)

    def side(chosen: list[Contribution]) -> list[dict[str, object]]:
        return [
            {"token": _safe_text(c.token), "count": c.count, "weight": c.weight, "kind": c.kind} for c in chosen[:limit]
        ]

    return {
        "verdict": score.verdict.value,
        "score": score.log_odds,
        "probability": score.probability,
        "toward_spam": side([c for c in rows if c.weight > 0]),
        "toward_ham": side([c for c in rows if c.weight < 0]),
        **(engine.sender_standing(raw, user_name) if senders else {}),
        **disguises(engine, raw, len(rows)),
    }


# Characters of hidden text `spamctl explain` shows.
HIDDEN_TEXT_SHOWN = 300


def disguises(engine: Explains, raw: bytes, tokens: int) -> dict[str, object]:
    """What the message hid from its reader (text hidden by CSS, disguised words), its word salad and the
    weight the score gave it ([model] salad_tokens), and, with [model] decisive_tokens, how many of its
    tokens the score counted: what explain shows beside the tokens."""
    message = parse_message(strip_own_headers(raw), engine.config.parser)
    hidden = " ".join(" ".join(text.split()) for text in message.hidden)
    decisive = engine.config.model.decisive_tokens
    salad = salad_tokens(message)
    distinct = len(set(salad))
    cap = engine.config.model.salad_tokens
    return {
        "salad_words": len(salad),
        "salad_distinct": distinct,
        # Their weight in the score, in tokens (at most the cap; a word also outside the salad weighs 1 on top).
        "salad_weight": min(float(distinct), cap) if cap else float(distinct),
        "hidden_text": _safe_text(hidden[:HIDDEN_TEXT_SHOWN] + ("..." if len(hidden) > HIDDEN_TEXT_SHOWN else "")),
        "hidden_by": sorted(set(message.hidden_kinds)),
        "obfuscations": sorted(set(message.obfuscations)),
        "tokens_counted": min(tokens, decisive) if decisive else tokens,
        "tokens": tokens,
    }


def _safe_text(token: str) -> str:
    # Tokens may carry lone surrogates (they are hashed with surrogatepass); msgpack wants valid UTF-8.
    return token.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


# Upper bounds (seconds) of the scan-duration histogram: a message takes ~1 ms to
# score and up to a delivery's fsyncs or a relay's round trip to be answered.
SCAN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# The label values of the authentication counters: a trusted MTA's header may hold any word.
AUTH_SOURCES = ("spamd", "authserv-id", "none")
AUTH_METHODS = ("dkim", "spf", "dmarc", "arc")
AUTH_OUTCOMES = ("pass", "fail", "softfail", "neutral", "none", "policy", "temperror", "permerror")


class Metrics:
    """Counters for `spamctl stats` and /metrics: verdicts, latencies, sessions per way in, errors.

    Plain ints updated on the event loop; the /metrics collector reads them there too.
    Frontends report sessions through `session_opened` / `session_closed` / `session_refused`.
    """

    WINDOW_S = 60.0

    def __init__(self) -> None:
        self.by_verdict: Counter[str] = Counter()
        self.latencies: deque[tuple[float, float]] = deque()  # (monotonic time, ms)
        self.errors: deque[dict[str, object]] = deque(maxlen=20)
        self.errors_by_event: Counter[str] = Counter()
        # way in -> per-bucket counts (the last is +Inf), and the sum of seconds
        self.scan_buckets: dict[str, list[int]] = {}
        self.scan_seconds: defaultdict[str, float] = defaultdict(float)
        self.sessions_open: Counter[str] = Counter()
        self.sessions_total: Counter[str] = Counter()
        self.sessions_refused: Counter[str] = Counter()
        # Sender authentication, as X-Spam-Auth reports it: messages by where their results came
        # from, and each result by (method, result); words outside the known ones count as "other".
        self.auth_messages: Counter[str] = Counter()
        self.auth_results: Counter[tuple[str, str]] = Counter()

    def record(self, verdict: Verdict, elapsed_ms: float, way_in: str = "smtp") -> None:
        now = time.monotonic()
        self.by_verdict[verdict.value] += 1
        self.latencies.append((now, elapsed_ms))
        self._trim(now)
        seconds = elapsed_ms / 1000.0
        buckets = self.scan_buckets.setdefault(way_in, [0] * (len(SCAN_BUCKETS_S) + 1))
        buckets[bisect.bisect_left(SCAN_BUCKETS_S, seconds)] += 1  # the first bound >= seconds; past all: +Inf
        self.scan_seconds[way_in] += seconds

    def record_auth(self, report: str) -> None:
        """Count a scored message's X-Spam-Auth value ("": nothing was checked)."""
        source, results = reported_results(report)
        self.auth_messages[source if source in AUTH_SOURCES else "other"] += 1
        for method, result in results:
            method = method if method in AUTH_METHODS else "other"
            self.auth_results[(method, result if result in AUTH_OUTCOMES else "other")] += 1

    def error(self, event: str, **details: object) -> None:
        self.errors.append({"time": time.time(), "event": event, **details})
        self.errors_by_event[event] += 1

    def session_opened(self, way_in: str) -> None:
        self.sessions_open[way_in] += 1
        self.sessions_total[way_in] += 1

    def session_closed(self, way_in: str) -> None:
        self.sessions_open[way_in] -= 1

    def session_refused(self, way_in: str) -> None:
        """A connection turned away (peer not allowed, too many): not counted as opened."""
        self.sessions_refused[way_in] += 1

    def _trim(self, now: float) -> None:
        while self.latencies and now - self.latencies[0][0] > self.WINDOW_S:
            self.latencies.popleft()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        self._trim(now)
        values = sorted(ms for _, ms in self.latencies)

        def pct(p: float) -> float | None:
            return None if not values else round(values[min(len(values) - 1, int(p * len(values)))], 2)

        span = min(self.WINDOW_S, now - self.latencies[0][0]) if self.latencies else 0.0
        return {
            "scored_by_verdict": dict(self.by_verdict),
            "throughput_msgs_per_s": round(len(values) / max(span, 1.0), 2),
            "latency_ms_p50": pct(0.50),
            "latency_ms_p99": pct(0.99),
            "recent_errors": list(self.errors),
        }


class Scorer:
    """Classify through the Engine and build the scored copy; learn through the Engine and log it."""

    def __init__(self, engine: Engine, metrics: Metrics, analyzers: AnalysisProcesses | None = None):
        self.engine = engine
        self.metrics = metrics
        self.analyzers = analyzers
        # spamd.web.history.History while the web console is on: every verdict is recorded there.
        self.history: Any = None

    def score(self, raw: bytes, layer_user: str | None = None) -> Scored:
        """Analyze and score on the loop; for `layer_user` with their layer (None: the shared model)."""
        return self._with_headers(raw, self.engine.classify(raw, layer_user), layer_user)

    async def score_beside_the_loop(
        self, raw: bytes, layer_user: str | None = None, session: SmtpSession | None = None
    ) -> Scored:
        """`score`, with the analysis in a helper process when one answers; when none does, on the loop,
        or in a thread with sender authentication on (its DNS must not stall the loop). `session`: the SMTP
        client that sent it, for SPF (none from spamc or a Maildir)."""
        analyzed = None
        if self.analyzers is not None:
            with contextlib.suppress(AnalysisUnavailable):
                analyzed = await self.analyzers.analyze(raw, session)
        if analyzed is None:
            if not self.engine.config.auth.enabled:
                return self.score(raw, layer_user)
            analyzed = await asyncio.to_thread(self.engine.classifier.analyze, raw, True, session)
        return self._with_headers(raw, self.engine.classify_analyzed(analyzed, layer_user), layer_user)

    async def score_for_users(
        self, raw: bytes, layer_users: Sequence[str | None], session: SmtpSession | None = None
    ) -> list[Scored | StoreUnavailableError]:
        """`score_beside_the_loop` for several users (LMTP's recipients): analyzed once, scored with each one's layer.

        A user whose scoring the store could not answer gets its StoreUnavailableError in
        their place, so the others' mail goes on; an analysis that fails raises as it would.
        """
        analyzed = None
        if self.analyzers is not None:
            with contextlib.suppress(AnalysisUnavailable):
                analyzed = await self.analyzers.analyze(raw, session)
        if analyzed is None:
            if self.engine.config.auth.enabled:
                analyzed = await asyncio.to_thread(self.engine.classifier.analyze, raw, True, session)
            else:
                analyzed = self.engine.classifier.analyze(raw)
        scored: list[Scored | StoreUnavailableError] = []
        for user in layer_users:
            try:
                scored.append(self._with_headers(raw, self.engine.classify_analyzed(analyzed, user), user))
            except StoreUnavailableError as e:
                scored.append(e)
        return scored

    def _with_headers(self, raw: bytes, classified: Classified, layer_user: str | None) -> Scored:
        model = self.engine.config.model
        headers = spam_headers(classified.score, model.ham_threshold, model.spam_threshold)
        if classified.analyzed.auth_report:
            headers.append(("X-Spam-Auth", classified.analyzed.auth_report))
        return Scored(with_own_headers(raw, headers), classified, tuple(headers), layer_user)

    def scored(self, scored: Scored, raw: bytes, started: float, way_in: str, **context: object) -> None:
        """The canonical line for one message, once it is delivered (or answered); counted by `way_in`.

        `way_in` is the frontend the message came through (smtp, milter, spamc, maildir).
        """
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self.metrics.record(scored.score.verdict, elapsed_ms, way_in)
        if self.engine.config.auth.enabled:
            self.metrics.record_auth(scored.classified.analyzed.auth_report)
        self.engine.remember_verdict(
            scored.key,
            scored.score.verdict,
            way_in,
            scored.user,
            scored.classified.analyzed.senders,
            scored.classified.analyzed.authenticated,
        )
        if self.history is not None:
            user = context.get("user_name") or context.get("client_user") or ""
            self.history.record(
                raw, scored.key, scored.score.verdict.value, scored.score.probability, way_in, str(user)
            )
        log.info(
            "message_scored",
            way_in=way_in,
            message_id=message_id(raw),
            key=scored.key.hex(),
            verdict=scored.score.verdict.value,
            score=round(scored.score.probability, 4),
            elapsed_ms=round(elapsed_ms, 2),
            **context,
        )

    def learn(
        self, raw: bytes, label: Label, source: str, user: bool = True, layer_user: str | None = None, **context: object
    ) -> Outcome:
        """Train (journaled and fsynced by the Engine before it returns), then log it; `layer_user`'s layer too."""
        outcome = self.engine.train(raw, label, source, user=user, user_name=self.engine.layer_user(layer_user))
        log.info(
            "training_applied",
            message_id=message_id(raw),
            label=str(label),
            source=source,
            user=user,
            outcome=outcome.value,
            layer_user=layer_user,
            **context,
        )
        return outcome

    def forget(self, raw: bytes, source: str, layer_user: str | None = None, **context: object) -> Outcome:
        """Untrain (journaled and fsynced by the Engine before it returns), then log it like `learn`."""
        outcome = self.engine.untrain(raw, source, user_name=self.engine.layer_user(layer_user))
        log.info(
            "training_applied",
            message_id=message_id(raw),
            label=None,
            source=source,
            user=True,
            outcome=outcome.value,
            **context,
        )
        return outcome
