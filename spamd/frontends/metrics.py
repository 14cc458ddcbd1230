"""The Prometheus /metrics endpoint: a small HTTP/1.x server on the daemon's loop.

The exposition is prometheus_client's (`generate_latest` over a private
CollectorRegistry, so several daemons can run in one test process); the
collector reads the Engine's and the Metrics object's plain counters on the
event loop that owns them, so no other thread ever touches model state.
Requests are bounded in size and time and connections in number, so garbage,
slowloris and idle floods cannot stall the loop. It serves GET /metrics only:
no keep-alive, no compression, nothing that changes state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Protocol

import structlog
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
from spamd.accuracy import JUDGEMENTS, WAYS_IN
from spamd.analyzers import AnalysisProcesses
from spamd.engine import Engine
from spamd.errors import SpamdError
from spamd.frontends.delivery import DeliveryProcesses
from spamd.helper_processes import HelperProcesses
from spamd.model import Label, Verdict
from spamd.scoring import SCAN_BUCKETS_S, Metrics

log = structlog.get_logger()

MAX_REQUEST_BYTES = 8 * 1024  # a scrape's request head is a few hundred bytes
REQUEST_TIMEOUT_S = 5.0  # to send the request head, and to take the answer
# Prometheus scrapes with one connection at a time; past this many open, the oldest is
# closed to make room, so idle or slow clients cannot keep a scrape out.
MAX_CONNECTIONS = 64

_STATUS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large"}


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
        yield GaugeMetricFamily("spamd_start_time_seconds", "When this spamd process started (Unix time).", value=self.started)
        yield from self._frontends(self.daemon.metrics)
        yield from self._analyzers(self.daemon.analyzers)
        yield from self._delivery_processes(self.daemon.writers)
        engine = self.daemon.engine
        if engine is not None:
            yield from self._engine(engine)

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
            for bound, n in zip((*map(str, SCAN_BUCKETS_S), "+Inf"), counts):
                cumulative += n
                buckets.append((bound, cumulative))
            scan.add_metric([way], buckets, metrics.scan_seconds[way])
        yield scan

        errors = CounterMetricFamily(
            "spamd_errors", "Errors spamd reported (see `spamctl stats`), by log event (restarts at zero).", labels=["event"]
        )
        for event, n in sorted(metrics.errors_by_event.items()):
            errors.add_metric([event], n)
        yield errors

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

        trained = GaugeMetricFamily("spamd_model_trained_messages", "Messages the model holds, by label.", labels=["label"])
        for label in Label:
            trained.add_metric([str(label)], int(model.doc_totals[label]))
        yield trained
        yield GaugeMetricFamily("spamd_model_tokens", "Distinct token buckets in use.", value=int(model.distinct))
        yield GaugeMetricFamily("spamd_model_memory_bytes", "Memory of the model's count arrays.", value=model.memory_bytes)
        yield GaugeMetricFamily("spamd_ledger_entries", "Trained messages the ledger remembers.", value=len(engine.trainer.ledger))
        yield GaugeMetricFamily(
            "spamd_recovery_problems",
            "Problems found loading the state at start (damaged snapshot, torn journal tail): see `spamctl stats`.",
            value=len(engine.recovery.problems),
        )
        if not getattr(store, "keeps_snapshots", True):
            return  # the model is in Redis: no journal or snapshot of this process's own
        yield GaugeMetricFamily("spamd_journal_bytes", "Size of the current journal segment.", value=store.journal_bytes)
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
    """GET /metrics over HTTP/1.x on the loop, one request per connection; loopback peers by default.

    No keep-alive, TLS or authentication: put a reverse proxy in front to scrape across hosts.
    """

    def __init__(self, registry: CollectorRegistry, allowed_peers: tuple[str, ...]):
        self.registry = registry
        self.allowed_peers = frozenset(allowed_peers)
        self.server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] | None = None
        self._connections: dict[asyncio.Task[None], None] = {}  # oldest first
        self.served = 0
        self._closing = False

    async def start(self, host: str, port: int) -> tuple[str, int]:
        try:
            self.server = await asyncio.start_server(self._accept, host, port, limit=MAX_REQUEST_BYTES)
        except OSError as e:
            raise SpamdError(f"cannot listen for /metrics on {host}:{port}: {e.strerror} (metrics.listen, or --metrics)") from None
        self.address = self.server.sockets[0].getsockname()[:2]
        return self.address

    async def close(self) -> None:
        if self.server is None:
            return
        self.server.close()
        self._closing = True
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.wait_closed()
        self.server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        if host.startswith("::ffff:") and "." in host:
            host = host.removeprefix("::ffff:")
        try:
            if host not in self.allowed_peers:
                log.warning("metrics_peer_refused", peer=host)
                return
            if len(self._connections) >= MAX_CONNECTIONS:
                oldest = next(iter(self._connections))
                self._connections.pop(oldest)
                oldest.cancel()
            self._connections[task] = None
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                await self._serve(reader, writer)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # slow, vanished or half-sent: nothing more to answer
        except asyncio.CancelledError:
            if self._closing:
                raise
            # else: the oldest connection, closed to make room for a new one
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._answer(writer, 431, b"request head too long\n")
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._answer(writer, 400, b"not an HTTP/1.x request\n")
            return
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            await self._answer(writer, 405, b"only GET /metrics\n", extra=[("Allow", "GET, HEAD")])
            return
        if target.split("?", 1)[0] != "/metrics":
            await self._answer(writer, 404, b"spamd serves /metrics only\n")
            return
        body = generate_latest(self.registry)
        self.served += 1
        await self._answer(writer, 200, body, CONTENT_TYPE_LATEST, head_only=method == "HEAD")

    @staticmethod
    async def _answer(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        extra: list[tuple[str, str]] | None = None,
        head_only: bool = False,
    ) -> None:
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close"), *(extra or [])]
        lines = [f"HTTP/1.1 {status} {_STATUS[status]}", *(f"{k}: {v}" for k, v in headers), "", ""]
        writer.write("\r\n".join(lines).encode("latin-1") + (b"" if head_only else body))
        await writer.drain()


def _helper_families(helpers: HelperProcesses | None, kind: str, ready_help: str, done_name: str, done_help: str) -> Iterator[Metric]:
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
