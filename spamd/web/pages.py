"""What each console page shows, gathered from the running daemon: overview, accuracy, history, one verdict.

Each function reads (never changes) the daemon's state on its loop and returns the
values a template shows. The overview's counts are `Daemon.stats()`, what
`spamctl stats --json` prints; the accuracy page is what `spamctl report` prints.
Rendering is the templates'; training is spamd/web/train.py's.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from spamd.engine.scoring import SCAN_BUCKETS_S, explanation
from spamd.errors import SpamdError
from spamd.model.bayes import Verdict
from spamd.people.accuracy import JUDGEMENTS, WAYS_IN
from spamd.web import charts
from spamd.web.history import MINUTES_KEPT, VERDICT_COLUMNS, History, Recorded

HISTORY_PAGE = 100  # verdicts a history page lists
EXPLAIN_TOKENS = 15  # tokens shown each way
ACCURACY_CHART_DAYS = 60
VERDICT_CSS = {"ham": "ham", "unsure": "unsure", "spam": "spam"}
JUDGEMENT_NAMES = {
    "missed_spam": "missed spam",
    "false_positive": "false positives",
    "unsure_resolved_spam": "unsure, then spam",
    "unsure_resolved_ham": "unsure, then ham",
    "agreed": "agreed",
}


class DaemonView(Protocol):
    """What the pages read: spamd.daemon.Daemon."""

    config: Any
    engine: Any
    metrics: Any
    analyzers: Any
    writers: Any
    history: History | None

    def stats(self) -> dict[str, Any]: ...

    def daemon_stats(self) -> dict[str, Any]: ...


def overview(daemon: DaemonView, web_listen: str | None) -> dict[str, Any]:
    """Listeners, traffic, verdicts, latency, model and store, helpers, errors: `spamctl stats` and more."""
    engine = daemon.engine
    store_problem = None
    try:
        stats = daemon.stats()
    except SpamdError as e:  # the model in Redis, and Redis down: what the daemon itself knows
        store_problem = str(e)
        stats = {
            "daemon": daemon.daemon_stats(),
            "uptime_s": time.time() - engine.started,
            "messages_scored": sum(engine.scored.values()),
            "scored_by_verdict": dict(engine.scored),
            # In Redis, and so not known meanwhile:
            "trained_ham": None, "trained_spam": None, "tokens": None, "ledger_entries": None,
            "recovery_problems": [],
        }  # fmt: skip
    d = stats["daemon"]
    history = daemon.history
    # Since the start, if that is less than the six hours kept: a young daemon's traffic is not a sliver.
    span = min(MINUTES_KEPT, max(30, int(stats["uptime_s"] // 60) + 2))
    minutes = list(history.per_minute(span)) if history is not None else []
    chart = charts.stacked_areas(
        f"messages per minute over the last {_span_words(span)}, by verdict (UTC)",
        [time.strftime("%H:%M", time.gmtime(m * 60)) for m, _ in minutes],
        [(v, VERDICT_CSS[v]) for v in VERDICT_COLUMNS],
        [counts for _, counts in minutes],
        x_tick_every=60 if span > 180 else 30 if span > 60 else 10,
    )
    last_hour = [sum(counts) for _, counts in minutes[-60:]]
    return {
        "stats": stats,
        "daemon": d,
        "store_problem": store_problem,
        "started": engine.started,
        "listeners": _listeners(daemon, d, web_listen),
        "chart": chart,
        "last_hour": sum(last_hour),
        "last_minute": last_hour[-1] if last_hour else 0,
        "verdicts": [v.value for v in (Verdict.HAM, Verdict.UNSURE, Verdict.SPAM)],
        "by_way": _by_way_in(engine),
        "latency": _latency(daemon.metrics),
        "helpers": [
            _helpers("analysis", daemon.analyzers, daemon.config.parser.processes),
            _helpers("delivery", daemon.writers, daemon.config.maildir.delivery_processes),
        ],  # fmt: skip
        "store": _store(daemon, stats, store_problem),
        "history_size": 0 if history is None else len(history),
        "history_kept": 0 if history is None else len(history.kept),
        "history_kept_bytes": 0 if history is None else history.kept_bytes,
    }


def _span_words(minutes: int) -> str:
    return f"{minutes // 60} hours" if minutes % 60 == 0 else f"{minutes} minutes"


def _listeners(daemon: DaemonView, d: dict[str, Any], web_listen: str | None) -> list[dict[str, Any]]:
    config = daemon.config
    rows = [
        {"name": "SMTP", "address": d.get("smtp_listen"), "detail": f"{d.get('smtp_mode')} mode",
         "open": d.get("smtp_sessions", 0), "busy": d.get("smtp_in_flight", 0)},
        {"name": "LMTP", "address": d.get("lmtp_listen"), "detail": f"next hop {d.get('lmtp_next_hop')}",
         "open": d.get("lmtp_sessions", 0), "busy": d.get("lmtp_in_flight", 0)},
        {"name": "milter", "address": d.get("milter_listen"), "detail": "Postfix smtpd_milters",
         "open": d.get("milter_sessions", 0), "busy": d.get("milter_in_flight", 0)},
        {"name": "spamc", "address": d.get("spamc_listen"),
         "detail": "TELL allowed" if config.spamc.allow_tell else "TELL refused",
         "open": d.get("spamc_connections", 0), "busy": d.get("spamc_in_flight", 0)},
        {"name": "Maildir watcher", "address": _maildirs(len(d.get("maildirs", []))) if d.get("maildirs") else None,
         "detail": f"{d.get('maildir_events_handled', 0):,} moves handled", "open": None,
         "busy": d.get("maildir_events_queued", 0)},
        {"name": "/metrics", "address": d.get("metrics_listen"), "detail": "Prometheus", "open": None, "busy": None},
        {"name": "web console", "address": web_listen, "detail": "this page", "open": None, "busy": None},
        {"name": "control socket", "address": str(config.control_socket) if getattr(daemon, "control", None) else None,
         "detail": "spamctl", "open": None, "busy": None},
    ]  # fmt: skip
    return rows


def _maildirs(n: int) -> str:
    return "1 Maildir" if n == 1 else f"{n:,} Maildirs"


def _by_way_in(engine: Any) -> list[dict[str, Any]]:
    """Messages scored, all time, by way in and verdict (kept across restarts, as /metrics counts them)."""
    totals = engine.live.totals
    ways = sorted(set(WAYS_IN) | {k.split(":")[1] for k in totals if k.startswith("scored:")})
    rows = []
    for way in ways:
        counts = {v.value: totals[f"scored:{way}:{v.value}"] for v in Verdict}
        rows.append({"way": way, "counts": counts, "total": sum(counts.values())})
    return rows


def _bucket_bound(buckets: list[int], n: int, q: float) -> str:
    """The upper bound of the histogram bucket that holds the `q` quantile of its `n` messages."""
    cumulative = 0
    for i, count in enumerate(buckets):
        cumulative += count
        if cumulative >= q * n:
            return f"≤ {SCAN_BUCKETS_S[i] * 1000:g} ms" if i < len(SCAN_BUCKETS_S) else f"> {SCAN_BUCKETS_S[-1]:g} s"
    return "-"


def _latency(metrics: Any) -> list[dict[str, Any]]:
    """Per way in since start: messages, mean, and the histogram's upper bound for p50 and p99."""
    rows = []
    for way, buckets in sorted(metrics.scan_buckets.items()):
        n = sum(buckets)
        if not n:
            continue

        rows.append(
            {
                "way": way,
                "count": n,
                "mean_ms": metrics.scan_seconds[way] / n * 1000,
                "p50": _bucket_bound(buckets, n, 0.5),
                "p99": _bucket_bound(buckets, n, 0.99),
            }
        )
    return rows


def _helpers(kind: str, helpers: Any, configured: int) -> dict[str, Any]:
    if helpers is None:
        return {
            "kind": kind,
            "configured": configured,
            "wanted": 0,
            "ready": 0,
            "started": 0,
            "answered": 0,
            "handed_back": 0,
        }
    return {
        "kind": kind,
        "configured": configured,
        "wanted": helpers.wanted,
        "ready": sum(h.alive and h.ready for h in helpers.helpers),
        "started": helpers.started_total,
        "answered": helpers.answered,
        "handed_back": helpers.handed_back,
    }


def _store(daemon: DaemonView, stats: dict[str, Any], problem: str | None) -> dict[str, Any]:
    if daemon.config.redis.url:
        return {"kind": "redis", "healthy": problem is None, "problem": problem,
                "url": stats.get("redis_url"), "used_memory": stats.get("redis_used_memory_bytes")}  # fmt: skip
    return {"kind": "embedded", "healthy": True, "problem": None, "state_dir": str(daemon.config.state_dir)}


# ---------------------------------------------------------------- accuracy


def accuracy(daemon: DaemonView) -> dict[str, Any]:
    """Live accuracy: the windows of `spamctl stats` and the days of `spamctl report`, with a chart of daily rates."""
    live = daemon.engine.live
    days = live.per_day()
    rows = []
    for day in days:
        scored = day.get("scored", 0)
        row = {"day": day["day"], "scored": scored, "trained_spam": day.get("trained:spam", 0),
               "trained_ham": day.get("trained:ham", 0)}  # fmt: skip
        for kind in JUDGEMENTS:
            row[kind] = day.get(kind, 0)
        row["errors"] = row["missed_spam"] + row["false_positive"]
        row["rates"] = {kind: (row[kind] / scored if scored else None) for kind in (*JUDGEMENTS, "errors")}
        rows.append(row)
    shown = rows[-ACCURACY_CHART_DAYS:]
    chart = charts.lines(
        f"errors per message scored, per UTC day, the last {len(shown)} days",
        [r["day"][5:] for r in shown],
        [("missed spam", "spam"), ("false positives", "fp"), ("unsure, then decided", "unsure")],
        [(r["rates"]["missed_spam"], r["rates"]["false_positive"],
          None if not r["scored"] else (r["unsure_resolved_spam"] + r["unsure_resolved_ham"]) / r["scored"]) for r in shown],
        x_tick_every=max(1, len(shown) // 8),
        percent=True,
    )  # fmt: skip
    return {"summary": live.summary(), "days": list(reversed(rows)), "chart": chart, "judgements": JUDGEMENT_NAMES}


# ---------------------------------------------------------------- history


def history(daemon: DaemonView, before: int | None, verdict: str, way_in: str) -> dict[str, Any]:
    recent = daemon.history
    entries = [] if recent is None else recent.newest(HISTORY_PAGE, before, verdict, way_in)
    older = entries[-1].id if len(entries) == HISTORY_PAGE else None
    return {
        "entries": [_row(e) for e in entries],
        "older": older,
        "verdict": verdict,
        "way_in": way_in,
        "verdicts": [v.value for v in Verdict],
        "ways": WAYS_IN,
        "remembered": 0 if recent is None else len(recent),
        "capacity": daemon.config.web.history_entries,
        "show_subjects": daemon.config.web.show_subjects,
    }


def _row(entry: Recorded) -> dict[str, Any]:
    return {
        "id": entry.id,
        "time": entry.time,
        "way_in": entry.way_in,
        "user": entry.user,
        "verdict": entry.verdict,
        "probability": entry.probability,
        "sender_domain": entry.sender_domain,
        "subject": entry.subject_text,
        "explainable": entry.raw is not None,
    }


def verdict(daemon: DaemonView, entry: Recorded) -> dict[str, Any]:
    """One verdict and, while its message is kept, the tokens that move its score most each way, now."""
    explained, problem, trained = None, None, None
    if entry.raw is not None:
        try:
            explained = explanation(daemon.engine, entry.raw, EXPLAIN_TOKENS)
            trained = daemon.engine.trainer.ledger.get(entry.key)
        except SpamdError as e:  # the model in Redis, and Redis down
            problem = str(e)
    return {
        "entry": _row(entry),
        "show_subjects": daemon.config.web.show_subjects,
        "explained": explained,
        "problem": problem,
        "trained": None if trained is None else {"label": str(trained[0]), "person": trained[1]},
    }
