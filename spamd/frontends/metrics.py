"""The Prometheus /metrics endpoint, served on the daemon's loop with aiohttp.

The exposition is prometheus_client's (`generate_latest` over a private
CollectorRegistry, so several daemons can run in one test process); the
collector reads the Engine's and the Metrics object's plain counters on the
event loop that owns them, so no other thread ever touches model state.
Requests are bounded in size and time and connections in number
(spamd/web/server.py), so garbage, slowloris and idle floods cannot stall the loop.
It serves GET (and HEAD) /metrics only, no login, nothing that changes state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from spamd import __version__
from spamd.engine.analyzers import AnalysisProcesses
from spamd.engine.engine import Engine
from spamd.engine.scoring import AUTH_SOURCES, SCAN_BUCKETS_S, Metrics
from spamd.frontends.delivery import DeliveryProcesses
from spamd.model.bayes import Label, Verdict
from spamd.people.accuracy import JUDGEMENTS, WAYS_IN
from spamd.runtime.helper_processes import HelperProcesses
from spamd.web.server import BoundedServer, Limits, bounded_application

log = structlog.get_logger()

# A scrape's request head is a few hundred bytes and a handful of fields, and it sends no
# body; Prometheus scrapes with one connection at a time, so past 64 open the oldest idle
# one is closed to make room and idle or slow clients cannot keep a scrape out.
LIMITS = Limits(head_timeout_s=5.0, request_timeout_s=5.0, max_body_bytes=0, max_headers=32, max_line_bytes=8190,
                max_connections=64)  # fmt: skip


class DaemonState(Protocol):
    """What the collector reads: the open Engine (None while stopping) and the frontends' counters."""

    engine: Engine | None
    metrics: Metrics
    analyzers: AnalysisProcesses | None
    writers: DeliveryProcesses | None


class SpamdCollector(Collector):
    """Every spamd_* family, built from plain ints at scrape time; holds no counters itself."""

    def __init__(self, daemon: DaemonState, started: float | None = None):
        self.daemon = daemon
        self.started = time.time() if started is None else started

    def describe(self) -> list[Metric]:
        return []  # families depend on the state; registering does not call collect()

    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily("spamd_build", "spamd's version.", value={"version": __version__})
        yield GaugeMetricFamily(
            "spamd_start_time_seconds", "When this spamd process started (Unix time).", value=self.started
        )
        yield from self._frontends(self.daemon.metrics)
        yield from self._analyzers(self.daemon.analyzers)
        yield from self._delivery_processes(self.daemon.writers)
        engine = self.daemon.engine
        yield from self._nameservers(self.daemon.analyzers, engine)
        if engine is not None:
            yield from self._engine(engine)

    def _nameservers(self, analyzers: AnalysisProcesses | None, engine: Engine | None) -> Iterator[Metric]:
        own = engine is not None and engine.classifier.nameservers_down
        down = (0 if analyzers is None else analyzers.nameservers_down_now()) + own
        yield GaugeMetricFamily(
            "spamd_auth_nameservers_down",
            "Processes (analysis processes, and the daemon's own) that take [auth] nameservers as down now: after "
            "look-ups in a row that timed out or failed, sender authentication is a temporary error at once "
            "while one look-up at a time tries them.",
            value=down,
        )
        times = (0 if analyzers is None else analyzers.nameservers_down_total) + (
            0 if engine is None else engine.classifier.nameservers_times_down
        )
        taken = CounterMetricFamily(
            "spamd_auth_nameservers_taken_down",
            "How often a process took [auth] nameservers as down (restarts at zero with spamd).",
        )
        taken.add_metric([], times)
        yield taken

    def _frontends(self, metrics: Metrics) -> Iterator[Metric]:
        ways = sorted(set(WAYS_IN) | set(metrics.sessions_total) | set(metrics.sessions_refused))
        opened = GaugeMetricFamily("spamd_sessions_open", "Connections open now, by way in.", labels=["way_in"])
        total = CounterMetricFamily(
            "spamd_sessions", "Connections accepted, by way in (restarts at zero with spamd).", labels=["way_in"]
        )
        refused = CounterMetricFamily(
            "spamd_sessions_refused",
            "Connections turned away (peer not allowed), by way in (restarts at zero with spamd).",
            labels=["way_in"],
        )
        for way in ways:
            opened.add_metric([way], metrics.sessions_open[way])
            total.add_metric([way], metrics.sessions_total[way])
            refused.add_metric([way], metrics.sessions_refused[way])
        yield from (opened, total, refused)

        scan = HistogramMetricFamily(
            "spamd_scan_duration_seconds",
            "Time from a message's arrival to its answer or delivery, by way in (restarts at zero with spamd).",
            labels=["way_in"],
        )
        for way in sorted(set(WAYS_IN) | set(metrics.scan_buckets)):
            counts = metrics.scan_buckets.get(way, [0] * (len(SCAN_BUCKETS_S) + 1))
            cumulative, buckets = 0, []
            for bound, n in zip((*map(str, SCAN_BUCKETS_S), "+Inf"), counts, strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            scan.add_metric([way], buckets, metrics.scan_seconds[way])
        yield scan

        errors = CounterMetricFamily(
            "spamd_errors",
            "Errors spamd reported (see `spamctl stats`), by log event (restarts at zero).",
            labels=["event"],
        )
        for event, n in sorted(metrics.errors_by_event.items()):
            errors.add_metric([event], n)
        yield errors

        checked = CounterMetricFamily(
            "spamd_auth_messages",
            "Messages scored with [auth] on, by where their sender authentication came from: spamd's own "
            "verification, a trusted MTA's Authentication-Results (authserv-id), or none (nothing to check) "
            "(restarts at zero with spamd).",
            labels=["source"],
        )
        for source in sorted(set(AUTH_SOURCES) | set(metrics.auth_messages)):
            checked.add_metric([source], metrics.auth_messages[source])
        yield checked
        results = CounterMetricFamily(
            "spamd_auth_results",
            "Sender authentication results of scored mail, as X-Spam-Auth reports them, by method and result "
            "(one per DKIM signature); temperror is DNS that did not answer within [auth] dns_budget_s "
            "(restarts at zero with spamd).",
            labels=["method", "result"],
        )
        for (method, result), n in sorted(metrics.auth_results.items()):
            results.add_metric([method, result], n)
        yield results

    def _analyzers(self, analyzers: AnalysisProcesses | None) -> Iterator[Metric]:
        yield from _helper_families(
            analyzers, "analysis", "Analysis processes ready beside the loop ([parser] processes).",
            "spamd_messages_analyzed", "Messages analyzed by an analysis process, or handed back to the loop because none answered "
            "(exited, stuck, starting); without analysis processes, neither (restarts at zero with spamd).",
        )  # fmt: skip

    def _delivery_processes(self, writers: DeliveryProcesses | None) -> Iterator[Metric]:
        yield from _helper_families(
            writers, "delivery", "Delivery processes ready beside the loop ([maildir] delivery_processes).",
            "spamd_deliveries_written", "SMTP deliveries written by a delivery process, or handed back to the daemon's threads "
            "because none answered (exited, stuck, starting); without delivery processes, neither (restarts at zero with spamd).",
        )  # fmt: skip

    def _engine(self, engine: Engine) -> Iterator[Metric]:
        live, model, store = engine.live, engine.model, engine.store
        scored = CounterMetricFamily(
            "spamd_messages_scored",
            "Messages scored, by verdict and way in (kept across restarts in snapshots).",
            labels=["verdict", "way_in"],
        )
        ways = set(WAYS_IN) | {k.split(":")[1] for k in live.totals if k.startswith("scored:")}
        for way in sorted(ways):
            for verdict in Verdict:
                scored.add_metric([verdict.value, way], live.totals[f"scored:{way}:{verdict.value}"])
        yield scored

        trainings = CounterMetricFamily(
            "spamd_trainings",
            "Training events by label, source and outcome (restarts at zero; the model's counts are "
            "spamd_model_trained_messages).",
            labels=["label", "source", "outcome"],
        )
        for (label, source, outcome), n in sorted(engine.trainings.items()):
            trainings.add_metric([label, source, outcome], n)
        yield trainings
        learned = CounterMetricFamily(
            "spamd_learning_records",
            "Learning records kept since start by what they say: learned, already_trained, trash, ignored_move, "
            "forged_sender... (spamd/people/learned.py)",
            labels=["what"],
        )
        for what, n in sorted(engine.senders.learned.counts.items()):
            learned.add_metric([what], n)
        yield learned

        judged = CounterMetricFamily(
            "spamd_live_judgements",
            "People's verdicts on messages spamd scored, by what they say of spamd's verdict: "
            "missed_spam, false_positive, unsure_resolved_spam, unsure_resolved_ham, agreed "
            "(kept across restarts in snapshots and the journal).",
            labels=["judgement"],
        )
        for kind in JUDGEMENTS:
            judged.add_metric([kind], live.totals[f"judged:{kind}"])
        yield judged
        yield GaugeMetricFamily(
            "spamd_live_verdicts_remembered", "Verdicts remembered for judging later moves.", value=len(live)
        )

        trained = GaugeMetricFamily(
            "spamd_model_trained_messages", "Messages the model holds, by label.", labels=["label"]
        )
        for which in Label:
            trained.add_metric([str(which)], int(model.doc_totals[which]))
        yield trained
        yield GaugeMetricFamily("spamd_model_tokens", "Distinct token buckets in use.", value=int(model.distinct))
        yield GaugeMetricFamily(
            "spamd_model_memory_bytes", "Memory of the model's count arrays.", value=model.memory_bytes
        )
        yield GaugeMetricFamily(
            "spamd_ledger_entries", "Trained messages the ledger remembers.", value=len(engine.trainer.ledger)
        )
        if engine.users is not None:  # no label per user: a family per user count would grow without bound
            # With Redis: the users in <p>users, every daemon's; their memory is Redis's (INFO memory).
            yield GaugeMetricFamily(
                "spamd_users_with_layer", "Users with a layer of their own (docs/users.md).", value=len(engine.users)
            )
            if engine.users.memory_bytes is not None:
                yield GaugeMetricFamily(
                    "spamd_users_memory_bytes", "Memory of every user's layer and of the scoring tables held.",
                    value=engine.users.memory_bytes + engine.users.table_bytes,
                )  # fmt: skip
            yield CounterMetricFamily(
                "spamd_users_expired", "Layers dropped for [users] max_users (restarts at zero with spamd).",
                value=engine.users.expired,
            )  # fmt: skip
            pairs = engine.senders.pairs()  # None in Redis: counting them would read every user's keys
            if pairs is not None:
                yield GaugeMetricFamily(
                    "spamd_user_senders", "(user, sender) pairs whose mail this daemon counts (spamd/people/senders.py).",
                    value=pairs,
                )  # fmt: skip
        yield GaugeMetricFamily(
            "spamd_recovery_problems",
            "Problems found loading the state at start (damaged snapshot, torn journal tail): see `spamctl stats`.",
            value=len(engine.recovery.problems),
        )
        if not getattr(store, "keeps_snapshots", True):
            return  # the model is in Redis: no journal or snapshot of this process's own
        yield GaugeMetricFamily(
            "spamd_journal_bytes", "Size of the current journal segment.", value=store.journal_bytes
        )
        yield GaugeMetricFamily(
            "spamd_journal_records", "Training records in the current journal segment.", value=store.journal_records
        )
        if store.last_snapshot_time is not None:
            yield GaugeMetricFamily(
                "spamd_snapshot_age_seconds", "Time since the newest snapshot was written.",
                value=max(0.0, time.time() - store.last_snapshot_time),
            )  # fmt: skip


def metrics_registry(daemon: DaemonState) -> CollectorRegistry:
    """A private registry holding only spamd's collector (not the process-global default one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpamdCollector(daemon))
    return registry


class MetricsServer:
    """GET /metrics over HTTP/1.1 on the loop (aiohttp, bounded by spamd/web/server.py); loopback peers by default.

    No TLS or authentication: put a reverse proxy in front to scrape across hosts.
    """

    def __init__(
        self, registry: CollectorRegistry, allowed_peers: tuple[str, ...], on_error: Callable[..., None] | None = None
    ):
        self.registry = registry
        self.served = 0
        self.on_error = on_error
        app = bounded_application(LIMITS)
        app.router.add_get("/metrics", self._scrape)  # HEAD too; other methods 405, other paths 404
        self.http = BoundedServer(
            app, LIMITS, allowed_peers, what="/metrics", setting="metrics.listen, or --metrics",
            on_refused=lambda peer: log.warning("metrics_peer_refused", peer=peer), on_failure=self._failed,
        )  # fmt: skip

    @property
    def address(self) -> tuple[str, int] | None:
        return self.http.address

    async def start(self, host: str, port: int) -> tuple[str, int]:
        return await self.http.start(host, port)

    async def close(self) -> None:
        await self.http.close()

    async def _scrape(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        self.served += 1
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _failed(self, request: web.BaseRequest, exc: BaseException | None) -> None:
        log.error("metrics_request_failed", path=request.path, error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        if self.on_error is not None:
            self.on_error("metrics_request_failed", error=f"{type(exc).__name__}: {exc}")


def _helper_families(
    helpers: HelperProcesses | None, kind: str, ready_help: str, done_name: str, done_help: str
) -> Iterator[Metric]:
    """spamd_<kind>_processes, spamd_<kind>_processes_started and `done_name` by helper or handed back."""
    ready = 0 if helpers is None else sum(h.alive and h.ready for h in helpers.helpers)
    yield GaugeMetricFamily(f"spamd_{kind}_processes", ready_help, value=ready)
    started = CounterMetricFamily(
        f"spamd_{kind}_processes_started", f"{kind.capitalize()} processes started, replacements included (restarts at zero with spamd).",
    )  # fmt: skip
    started.add_metric([], 0 if helpers is None else helpers.started_total)
    done = CounterMetricFamily(done_name, done_help, labels=["by"])
    done.add_metric([f"{kind}_process"], 0 if helpers is None else helpers.answered)
    done.add_metric(["handed_back"], 0 if helpers is None else helpers.handed_back)
    yield from (started, done)
