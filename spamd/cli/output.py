"""What spamctl prints: JSON, tables, sizes and durations, and the stats and live-accuracy reports."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from spamd import __version__
from spamd.runtime.humanize import controls_shown, human_bytes, human_duration


class ControlCharactersShown:
    """A text stream that writes each control character as \\xNN (`controls_shown`): a List-Id of ESC
    sequences in `spamctl explain` reached the terminal as it was. JSON output has none: json escapes them."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(controls_shown(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding: the stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def control_characters_shown() -> Iterator[None]:
    """sys.stdout shows control characters as \\xNN inside."""
    stdout = sys.stdout
    sys.stdout = ControlCharactersShown(stdout)
    try:
        yield
    finally:
        sys.stdout = stdout


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def logs_to_stderr() -> None:
    """The store's warnings (a stale snapshot temp removed, say) go to stderr: structlog's default
    printer writes to stdout, where they broke `--json` output for scripts. Called once spamctl imports
    what logs (structlog and its rich tracebacks: a tenth of a second of start-up otherwise)."""
    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))


def table(rows: Sequence[tuple[str, ...]], indent: str = "", numbers: bool = True) -> str:
    """Left-aligned first column; the others right-aligned (numbers) or left-aligned (text).

    Each line is made by one format string: 100,000 users' rows (`spamctl users`) took 0.7 s of
    CPU a cell at a time, 0.2 s so.
    """
    if not rows:
        return ""
    width = max(map(len, rows))
    padded = rows if all(len(row) == width for row in rows) else [(*row, *[""] * (width - len(row))) for row in rows]
    widths = [max(map(len, column)) for column in zip(*padded, strict=True)]
    align = ">" if numbers else "<"
    line = "  ".join([f"{{:<{widths[0]}}}"] + [f"{{:{align}{w}}}" for w in widths[1:]])
    return "\n".join([indent + line.format(*row).rstrip() for row in padded])


def column_table(headings: list[tuple[str, str]], columns: dict[str, list[Any]]) -> str:
    """`table` of a list a column (as `spamctl users` gets them), without making a row of strings first:
    the header, then each row; the first column left-aligned, the others right-aligned."""
    picked = [columns[key] for _, key in headings]
    widths = [max(len(title), _widest(column)) for (title, _), column in zip(headings, picked, strict=True)]
    line = "  ".join([f"{{:<{widths[0]}}}"] + [f"{{:>{w}}}" for w in widths[1:]])
    lines = [line.format(*(title for title, _ in headings)).rstrip()]
    lines += [line.format(*row).rstrip() for row in zip(*picked, strict=True)]
    return "\n".join(lines)


def _widest(column: list[Any]) -> int:
    """The widest cell of a column as printed (a column of whole numbers: its largest or smallest)."""
    if not column:
        return 0
    if all(type(v) is int for v in column):
        return max(len(str(max(column))), len(str(min(column))))
    return max(len(str(v)) for v in column)


def _verdicts(counts: dict[str, int] | None) -> str:
    counts = counts or {}
    total = sum(counts.values())
    parts = ", ".join(f"{v} {counts.get(v, 0)}" for v in ("ham", "unsure", "spam"))
    return f"{total} ({parts})"


# Training outcomes in the order a table shows them.
# Exit status when the shared store (Redis) is unreachable right now: sysexits'
# EX_TEMPFAIL, as spamc answers then, so a script or a Sieve filter can retry.
EX_TEMPFAIL = 75

_OUTCOME_COLUMNS = (
    "learned",
    "corrected",
    "skipped_repeat",
    "skipped_confident",
    "unlearned",
    "not_trained",
    "declined",
)


def _evidence(families: list[dict[str, Any]] | None) -> str:
    """The mail-evidence families on and since when the model learns each (a family switched on learns from then)."""
    if not families:
        return "none"
    parts = []
    for f in families:
        since = f"since record {f['since_seq']}" if f.get("since_seq") else "since the first record"
        if f.get("since"):
            since += time.strftime(", switched on %Y-%m-%d %H:%M UTC", time.gmtime(f["since"]))
        parts.append(f"{f['family']} ({since})")
    return "; ".join(parts)


def format_stats(stats: dict[str, Any]) -> str:
    daemon = stats.get("mode") == "daemon"
    # The daemon's own figures (throughput, latency, errors) sit in a "daemon" section.
    extra: dict[str, Any] = stats["daemon"] if isinstance(stats.get("daemon"), dict) else stats
    version = stats.get("version", "?")
    if daemon:
        header = f"spamd running (pid {extra.get('pid', '?')}), up {human_duration(stats.get('uptime_s'))}, version {version}"
        if version != __version__:  # upgraded but not restarted, or the other way round
            header += f"; this spamctl is {__version__}: restart spamd to run the installed version"
    else:
        header = f"no spamd running; read from {stats.get('state_dir', 'the state directory')} by spamctl {version}"
    rows: list[tuple[str, ...]] = []
    if daemon:
        rows.append(("messages scored since start", _verdicts(stats.get("scored_by_verdict"))))
    rows += [
        ("messages scored all time", _verdicts(stats.get("scored_by_verdict_all_time"))),
        ("ham in the model", f"{stats.get('trained_ham', 0):,}"),
        ("spam in the model", f"{stats.get('trained_spam', 0):,}"),
        ("distinct tokens", f"{stats.get('tokens', 0):,}"),
        ("trained messages (ledger)", f"{stats.get('ledger_entries', 0):,}"),
        ("model memory", human_bytes(stats.get("model_memory_bytes"))),
        (
            "snapshot",
            f"seq {stats.get('snapshot_seq', 0)}, {human_bytes(stats.get('snapshot_bytes'))}, "
            + (
                "none written yet"
                if stats.get("snapshot_age_s") is None
                else f"{human_duration(stats.get('snapshot_age_s'))} old"
            ),
        ),
        (
            "journal",
            f"seq {stats.get('journal_seq', 0)}, {stats.get('journal_records', 0)} records since the snapshot, "
            f"{human_bytes(stats.get('journal_bytes'))}",
        ),
        ("evidence families", _evidence(stats.get("evidence_families"))),
    ]
    if daemon:
        p50, p99 = extra.get("latency_ms_p50"), extra.get("latency_ms_p99")
        rows.append(("scoring throughput (last min)", f"{extra.get('throughput_msgs_per_s', 0)} msgs/s"))
        rows.append(("scoring latency p50 / p99", "-" if p50 is None else f"{p50} ms / {p99} ms"))
        if extra.get("smtp_listen"):
            rows.append(
                (
                    "smtp",
                    f"{extra['smtp_listen']} ({extra.get('smtp_mode', '?')}), "
                    f"{extra.get('smtp_sessions', 0)} sessions open",
                )
            )
        if extra.get("lmtp_listen"):
            counted = extra.get("lmtp_recipients") or {}
            rows.append(
                (
                    "lmtp",
                    f"{extra['lmtp_listen']} (next hop {extra.get('lmtp_next_hop', '?')}), "
                    f"{extra.get('lmtp_sessions', 0)} sessions open; recipients {counted.get('delivered', 0)} "
                    f"delivered, {counted.get('deferred', 0)} deferred, {counted.get('refused', 0)} refused",
                )
            )
        if extra.get("milter_listen"):
            rows.append(
                (
                    "milter",
                    f"{extra['milter_listen']}, {extra.get('milter_sessions', 0)} connections open, "
                    f"{extra.get('milter_in_flight', 0)} messages in flight",
                )
            )
        for served in extra.get("maildirs") or []:
            rows.append(("maildir", f"{served.get('path')} ({served.get('indexed_messages', 0)} messages indexed)"))
    out = [header, "", table(rows, numbers=False)]
    events: dict[str, int] = stats.get("training_events") or {}
    by_source: dict[str, Counter[str]] = {}
    for key, n in events.items():
        source, _, outcome = key.partition(":")
        by_source.setdefault(source, Counter())[outcome] += n
    out.append("")
    if not daemon:
        out.append("training events: counted by a running daemon only")
    elif by_source:
        columns = [
            c
            for c in _OUTCOME_COLUMNS
            if c in ("learned", "corrected", "skipped_repeat") or any(counts[c] for counts in by_source.values())
        ]
        names = {"skipped_repeat": "skipped (repeat)", "skipped_confident": "skipped (filed right)"}
        training_rows = [("training since start",) + tuple(names.get(c, c) for c in columns)]
        for source in sorted(by_source):
            training_rows.append((f"  {source}",) + tuple(str(by_source[source][c]) for c in columns))
        out.append(table(training_rows))
    else:
        out.append("training since start: none")
    live = stats.get("live_accuracy")
    if isinstance(live, dict):
        out.append("")
        out.append(format_live_accuracy(live))
    problems = list(stats.get("recovery_problems") or [])
    errors = list(extra.get("recent_errors") or [])
    if problems or errors:
        out.append("")
        out.append("recent errors:")
        out.extend(f"  recovery: {p}" for p in problems)
        for e in errors:
            if isinstance(e, dict):
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("time", 0)))
                details = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("time", "event"))
                out.append(f"  {when} {e.get('event', '?')} {details}".rstrip())
            else:
                out.append(f"  {e}")
    return "\n".join(out)


_LIVE_COLUMNS = (
    ("missed_spam", "missed spam"),
    ("false_positive", "false positives"),
    ("unsure_resolved_spam", "unsure -> spam"),
    ("unsure_resolved_ham", "unsure -> ham"),
)


def format_live_accuracy(live: dict[str, Any]) -> str:
    """The live-accuracy table: per window, messages scored and what people's moves said, count (rate)."""
    rows: list[tuple[str, ...]] = [("live accuracy (UTC days)", "scored", *(name for _, name in _LIVE_COLUMNS))]
    for window in ("day", "week", "month"):
        w = live.get(window) or {}
        scored = int(w.get("scored", 0))
        cells = []
        for kind, _ in _LIVE_COLUMNS:
            n = int(w.get(kind, 0))
            cells.append(f"{n}" if not scored else f"{n} ({100 * n / scored:.2f}%)")
        label = {"day": "  today", "week": "  last 7 days", "month": "  last 30 days"}[window]
        rows.append((label, f"{scored:,}", *cells))
    note = (
        "  a false positive is mail spamd filed as spam that a person moved out of Junk; "
        "a missed spam, mail it let through that a person moved into Junk"
    )
    return table(rows) + "\n" + note


def user_request(args: Any) -> dict[str, str]:
    """The request arguments for spamctl's --user: {} without one; a bad name is an error before anything is sent."""
    name = getattr(args, "user", None)
    if name is None:
        return {}
    from spamd.people.users import check_user_name  # the per-user model's module: only for a --user

    return {"user": check_user_name(name, "--user")}
