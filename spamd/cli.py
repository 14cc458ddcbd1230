"""spamctl: inspect and train spamd, through the running daemon's control socket or, without one, directly.

Which way is decided per invocation: if something answers on the control socket
(`Config.control_socket`) spamctl is a client of that daemon; otherwise it opens
the model state itself (Engine.open), under the same flock the daemon takes, so
the two never write at once. Both ways run the same operations (spamd.frontends.control).

Every command takes --json (one JSON document on stdout) and prints a readable
table otherwise. Every error is one line on stderr and exit status 1 (2 for
usage errors, from argparse). It does not score, learn or store anything itself.
"""

from __future__ import annotations

import argparse
import io
import json
import mailbox
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import structlog

from spamd.config import Config, load_config
from spamd.frontends.control import (
    DEFAULT_EXPLAIN_LIMIT,
    ENGINE_OPERATIONS,
    MAX_FRAME_BYTES,
    NOT_A_MESSAGE,
    ControlClient,
    DaemonNotRunning,
    score_fields,
)
from spamd.engine import Engine, tune_gc_for_message_streams
from spamd.errors import NotAMessageError, SpamdError, StateLockedError
from spamd.message import read_message_file
from spamd.store import write_atomically

if TYPE_CHECKING:
    from spamd.classifier import Classifier

# Training requests carry a few messages each: small enough that the daemon's
# loop is never held long (each training is an fsync), large enough to amortize
# the round trip.
BATCH_MESSAGES = 16
BATCH_BYTES = 4 * 1024 * 1024
# A message must fit in one control frame with room for the request around it.
MAX_MESSAGE_BYTES = MAX_FRAME_BYTES - 64 * 1024


# ---------------------------------------------------------------- the two ways to reach the model


class Backend(Protocol):
    mode: str

    def request(self, command: str, **args: Any) -> Any: ...
    def export_bytes(self) -> bytes: ...
    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


class DaemonBackend:
    """A running spamd, through its control socket."""

    mode = "daemon"

    def __init__(self, client: ControlClient):
        self.client = client

    def request(self, command: str, **args: Any) -> Any:
        return self.client.request(command, **args)

    def export_bytes(self) -> bytes:
        return self.client.export_bytes()

    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        return self.client.import_bytes(data, name)

    def close(self) -> None:
        self.client.close()


class OfflineBackend:
    """No daemon: the state directory, opened and locked by this process."""

    mode = "offline"

    def __init__(self, engine: Engine, socket_path: Path):
        self.engine = engine
        self.socket_path = socket_path

    def request(self, command: str, **args: Any) -> Any:
        operation = ENGINE_OPERATIONS.get(command)
        if operation is not None:
            return operation(self.engine, args)
        if command == "stats":
            # Nothing has been up: uptime and throughput belong to a daemon.
            state_dir = str(self.engine.store.state_dir)
            return {**self.engine.stats(), "mode": "offline", "uptime_s": None, "state_dir": state_dir}
        if command == "snapshot":
            return {"path": str(self.engine.snapshot())}
        raise DaemonNotRunning(
            f"no spamd is running (nothing answers on {self.socket_path}); '{command}' needs the daemon"
        )

    def export_bytes(self) -> bytes:
        return self.engine.export_snapshot()

    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        return self.engine.import_snapshot(data, name)

    def close(self) -> None:
        try:
            # Training done offline is in the journal already; fold it into a snapshot
            # when the daemon itself would have, so the journal does not grow unbounded.
            if self.engine.needs_snapshot():
                self.engine.snapshot()
        finally:
            self.engine.close()


def open_backend(config: Config, daemon_only: bool = False) -> Backend:
    """The daemon if one answers on the socket; else the state directory, locked."""
    client = ControlClient(config.control_socket)
    try:
        client.connect()
        return DaemonBackend(client)
    except DaemonNotRunning:
        if daemon_only:
            raise
    try:
        engine = Engine.open(config)
    except StateLockedError:
        raise SpamdError(
            f"{config.state_dir}: the model state is locked by a running spamd or another spamctl, but "
            f"nothing answers on {config.control_socket}; wait for the other spamctl to finish, or check "
            "that daemon (stuck, or started with another config or --data-dir?)"
        ) from None
    return OfflineBackend(engine, config.control_socket)


# ---------------------------------------------------------------- reading messages


def read_message(name: str) -> bytes:
    """A file's bytes, or stdin's for '-'; any bytes at all are a message to score."""
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    if path.is_dir():
        raise NotAMessageError(f"{path}: is a directory, not a mail message")
    return _read_file(path)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SpamdError(f"{path}: no such file") from None
    except PermissionError:
        raise SpamdError(f"{path}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{path}: cannot read: {e.strerror}") from None


def input_kind(path: Path, look_inside: bool = True) -> str:
    """'maildir' (a Maildir or Maildir++ folder), 'directory' (of message files), 'mbox'
    (a file of several messages, each starting with a 'From ' line), or 'file'.

    A file with a single 'From ' line (TREC's, some MDAs') is a 'file': one message.
    Without `look_inside` a file is not read: it is a 'file', mbox or not.
    """
    try:
        if path.is_dir():
            if (path / "cur").is_dir() or (path / "new").is_dir():
                return "maildir"
            return "directory"
        if not look_inside:
            path.stat()  # that it is there at all
            return "file"
        with open(path, "rb") as f:
            return "mbox" if holds_several_mbox_messages(f) else "file"
    except FileNotFoundError:
        raise SpamdError(f"{path}: no such file or directory") from None
    except PermissionError:
        raise SpamdError(f"{path}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{path}: cannot read: {e.strerror}") from None


def holds_several_mbox_messages(f: BinaryIO) -> bool:
    """Whether a file starts with a 'From ' line and has another (where `mailbox.mbox` splits).

    Read in 1 MiB chunks, stopping at the second 'From ' line. `mailbox.mbox` would
    tell the same by reading every line in Python: its table of contents alone cost
    2.4 s of `spamctl classify` over trec07p-dev's 10,000 one-message files (whose
    first line is 'From '), 45% of the run.
    """
    if f.read(5) != b"From ":
        return False
    tail = b""
    while chunk := f.read(1 << 20):
        if b"\nFrom " in tail + chunk:
            return True
        tail = chunk[-5:]
    return False


def file_messages(path: Path | str, described: str, split_mbox: bool) -> Iterator[tuple[str, bytes | None, str | None]]:
    """The message of one file as (name, bytes, None), or (name, None, problem) if it cannot be read.

    With `split_mbox`, a file that turns out to hold several mbox messages yields each,
    split as `mailbox` does. Otherwise, and for a file with one 'From ' line, the file's
    bytes as they are: the key the daemon computes for the same file.
    """
    try:
        raw = read_message_file(path)
    except OSError as e:  # a file that vanished (moved by a mail client) or is unreadable
        yield described, None, e.strerror or str(e)
        return
    if not (split_mbox and holds_several_mbox_messages(io.BytesIO(raw))):
        yield described, raw, None
        return
    box = mailbox.mbox(str(path), create=False)
    try:
        for number, key in enumerate(box.iterkeys(), 1):
            yield f"{described} message {number}", box.get_bytes(key), None
    finally:
        box.close()


def too_large(raw: bytes) -> str | None:
    """Why a message cannot be classified through the control socket; None if it can."""
    if len(raw) <= MAX_MESSAGE_BYTES:
        return None
    return f"too large ({human_bytes(len(raw))}; the limit is {human_bytes(MAX_MESSAGE_BYTES)})"


def directory_files(directory: Path) -> list[Path]:
    """The message files directly in a plain directory (as sa-learn takes one): not its sub-directories, no dotfiles."""
    try:
        entries = sorted(directory.iterdir())
    except PermissionError:
        raise SpamdError(f"{directory}: permission denied") from None
    return [p for p in entries if not p.name.startswith(".") and p.is_file()]


def maildir_files(folder: Path) -> list[Path]:
    """Message files in cur/ and new/ (tmp/ holds deliveries in progress); dotfiles are not mail."""
    found: list[Path] = []
    for sub in ("cur", "new"):
        directory = folder / sub
        try:
            entries = sorted(directory.iterdir())
        except FileNotFoundError:
            continue
        except PermissionError:
            raise SpamdError(f"{directory}: permission denied") from None
        found.extend(p for p in entries if not p.name.startswith(".") and p.is_file())
    return found


class Inputs:
    """Every message named by the PATH arguments, counted up front (for the progress bar).

    A PATH is a message file, an mbox, a Maildir folder, a plain directory of
    message files, or '-': standard input, one message (an mbox when it starts
    with a 'From ' line and holds several), as sa-learn and Dovecot's pipe give it.

    With `mboxes_found_late` (for callers that show no progress bar), files are not
    read up front: an mbox is split when its turn comes and `total` grows then. Reading
    every file twice, once to count, had spamctl classify spend 0.6 s over trec07p-dev's
    10,000 files before its first message was classified.
    """

    def __init__(self, paths: list[str], mboxes_found_late: bool = False):
        self._items: list[tuple[str, Path, str]] = []  # (kind, path, description)
        self._mboxes_found_late = mboxes_found_late
        self._mboxes: dict[Path, mailbox.mbox] = {}
        self._stdin: bytes | None = None
        self._spool: Path | None = None
        self.total = 0
        if paths.count("-") > 1:
            raise SpamdError("- (standard input) can be given only once")
        try:
            for name in paths:
                if name == "-":
                    self._add_stdin(sys.stdin.buffer.read())
                    continue
                path = Path(name)
                kind = input_kind(path, look_inside=not mboxes_found_late)
                if kind in ("maildir", "directory"):
                    files = maildir_files(path) if kind == "maildir" else directory_files(path)
                    self._items.extend(("file", f, str(f)) for f in files)
                    self.total += len(files)
                    continue
                if kind == "mbox" and self._add_mbox(path, str(path)):
                    continue
                # One message, even with an mbox "From " line (TREC files, some MDAs): its bytes
                # as they are, so its key is the one the daemon computes for the same file.
                # (An mbox whose second "From " line `mailbox` does not split at holds one too.)
                self._items.append(("file", path, str(path)))
                self.total += 1
        except BaseException:
            self.close()  # a bad PATH after '-': no spool file left behind
            raise

    def _add_mbox(self, path: Path, described: str) -> bool:
        """Queue an mbox's messages; False (nothing queued) when it holds one message or none."""
        box = mailbox.mbox(str(path), create=False)
        if len(box) > 1:
            self._mboxes[path] = box
            self._items.append(("mbox", path, described))
            self.total += len(box)
            return True
        box.close()
        return False

    def _add_stdin(self, data: bytes) -> None:
        if holds_several_mbox_messages(io.BytesIO(data)):
            # The mailbox module parses files only: spool it, read it, remove it when done.
            fd, spool = tempfile.mkstemp(prefix="spamctl-stdin-", suffix=".mbox")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self._spool = Path(spool)
            if self._add_mbox(self._spool, "standard input"):
                return
            self._spool.unlink()
            self._spool = None
        self._stdin = data
        self._items.append(("stdin", Path("-"), "standard input"))
        self.total += 1

    def __iter__(self) -> Iterator[tuple[str, bytes | None, str | None]]:
        """(name, message bytes or None, problem or None), in order."""
        for name, source in self.sources():
            if isinstance(source, bytes):
                yield name, source, None
                continue
            count = 0
            for count, message in enumerate(file_messages(source, name, self._mboxes_found_late), 1):
                yield message
            self.total += count - 1  # an mbox found late: counted now

    def sources(self) -> Iterator[tuple[str, str | bytes]]:
        """(name, bytes) of mbox messages and standard input, (name, path as str) of files not read yet, in order.

        A file is read by whoever takes it (`file_messages`): with `mboxes_found_late`, that
        may be a worker process (`spamctl classify`), and it splits a file found to be an mbox.
        """
        for kind, path, described in self._items:
            if kind == "mbox":
                box = self._mboxes[path]
                for number, key in enumerate(box.iterkeys(), 1):
                    yield f"{described} message {number}", box.get_bytes(key)
            elif kind == "stdin":
                assert self._stdin is not None
                yield described, self._stdin
            else:
                yield described, str(path)  # a str pickles in 0.05 us, a Path unpickles in 4.5

    def close(self) -> None:
        """Close the mboxes and remove standard input's spool file, if any."""
        for box in self._mboxes.values():
            box.close()
        if self._spool is not None:
            self._spool.unlink(missing_ok=True)


# ---------------------------------------------------------------- output helpers


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def table(rows: list[tuple[str, ...]], indent: str = "", numbers: bool = True) -> str:
    """Left-aligned first column; the others right-aligned (numbers) or left-aligned (text)."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    lines = []
    for row in rows:
        align = str.rjust if numbers else str.ljust
        cells = [row[0].ljust(widths[0])] + [align(cell, widths[i + 1]) for i, cell in enumerate(row[1:])]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _verdicts(counts: dict[str, int] | None) -> str:
    counts = counts or {}
    total = sum(counts.values())
    parts = ", ".join(f"{v} {counts.get(v, 0)}" for v in ("ham", "unsure", "spam"))
    return f"{total} ({parts})"


# ---------------------------------------------------------------- commands


def cmd_stats(config: Config, args: argparse.Namespace) -> int:
    with closing(open_backend(config)) as backend:
        stats = backend.request("stats")
    if args.json:
        emit_json(stats)
    else:
        print(format_stats(stats))
    return 0


# Training outcomes in the order a table shows them.
_OUTCOME_COLUMNS = ("learned", "corrected", "skipped_repeat", "unlearned", "not_trained", "declined")


def format_stats(stats: dict[str, Any]) -> str:
    daemon = stats.get("mode") == "daemon"
    # The daemon's own figures (throughput, latency, errors) sit in a "daemon" section.
    extra: dict[str, Any] = stats["daemon"] if isinstance(stats.get("daemon"), dict) else stats
    if daemon:
        header = f"spamd running (pid {extra.get('pid', '?')}), up {human_duration(stats.get('uptime_s'))}"
    else:
        header = f"no spamd running; read from {stats.get('state_dir', 'the state directory')}"
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
    ]
    if daemon:
        p50, p99 = extra.get("latency_ms_p50"), extra.get("latency_ms_p99")
        rows.append(("scoring throughput (last min)", f"{extra.get('throughput_msgs_per_s', 0)} msgs/s"))
        rows.append(("scoring latency p50 / p99", "-" if p50 is None else f"{p50} ms / {p99} ms"))
        if extra.get("smtp_listen"):
            rows.append(("smtp", f"{extra['smtp_listen']} ({extra.get('smtp_mode', '?')}), "
                                 f"{extra.get('smtp_sessions', 0)} sessions open"))
        if extra.get("milter_listen"):
            rows.append(("milter", f"{extra['milter_listen']}, {extra.get('milter_sessions', 0)} connections open, "
                                   f"{extra.get('milter_in_flight', 0)} messages in flight"))
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
        columns = [c for c in _OUTCOME_COLUMNS if c in ("learned", "corrected", "skipped_repeat") or any(
            counts[c] for counts in by_source.values())]
        names = {"skipped_repeat": "skipped (repeat)"}
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


def cmd_report(config: Config, args: argparse.Namespace) -> int:
    """Live accuracy per day: a table, JSON, or a plot with the training volume."""
    with closing(open_backend(config)) as backend:
        days = backend.request("live_days")["days"]
    if args.plot:
        from spamd.evaluation import plot_live_accuracy  # optional matplotlib: only when asked

        plot_live_accuracy(days, Path(args.plot))
    if args.json:
        emit_json({"days": days})
    elif not args.plot:
        rows: list[tuple[str, ...]] = [("day", "scored", "missed spam", "false pos", "unsure->spam", "unsure->ham",
                                        "trained spam", "trained ham")]  # fmt: skip
        for d in days:
            rows.append((d["day"], *(str(d.get(k, 0)) for k in ("scored", "missed_spam", "false_positive",
                         "unsure_resolved_spam", "unsure_resolved_ham", "trained:spam", "trained:ham"))))  # fmt: skip
        print(table(rows) if days else "no live-accuracy figures yet")
    return 0


def cmd_train(config: Config, args: argparse.Namespace) -> int:
    label = "spam" if args.spam else "ham"
    return _train_paths(config, args, "train", label)


def cmd_untrain(config: Config, args: argparse.Namespace) -> int:
    return _train_paths(config, args, "untrain", None)


def _train_paths(config: Config, args: argparse.Namespace, command: str, label: str | None) -> int:
    inputs = Inputs(args.paths)  # resolve every PATH before training any: a typo trains nothing
    with closing(inputs):
        return _train_inputs(config, args, command, label, inputs)


def _train_inputs(config: Config, args: argparse.Namespace, command: str, label: str | None, inputs: Inputs) -> int:
    tally: Counter[str] = Counter()
    problems: list[tuple[str, str]] = []
    failure: str | None = None
    backend = open_backend(config)
    progress = _progress_bar(inputs.total, "training" if command == "train" else "untraining")
    try:
        batch: list[bytes] = []
        names: list[str] = []

        def send() -> str | None:
            extra = {"label": label} if label else {}
            result = backend.request(command, messages=batch, **extra)
            for name, outcome in zip(names, result["outcomes"]):
                tally[outcome] += 1
                if outcome == NOT_A_MESSAGE:
                    problems.append((name, "not a mail message"))
            progress.update(len(batch))
            batch.clear()
            names.clear()
            return result.get("error")

        size = 0
        for name, raw, problem in inputs:
            if raw is not None:
                problem = too_large(raw)
            if problem is not None:
                problems.append((name, problem))
                tally["unreadable"] += 1
                progress.update(1)
                continue
            assert raw is not None
            if batch and (len(batch) >= BATCH_MESSAGES or size + len(raw) > BATCH_BYTES):
                failure = send()
                size = 0
                if failure:
                    break
            batch.append(raw)
            names.append(name)
            size += len(raw)
        if batch and not failure:
            failure = send()
    finally:
        progress.close()
        backend.close()
    for name, problem in problems:
        print(f"spamctl: {name}: {problem}", file=sys.stderr)
    report = {
        "mode": backend.mode,
        "messages": inputs.total,
        **{k: tally.get(k, 0) for k in _tally_keys(command)},
        "problems": [{"path": name, "problem": problem} for name, problem in problems],
    }
    if label:
        report["label"] = label
    if failure:
        report["error"] = failure
    if args.json:
        emit_json(report)
    else:
        title = f"trained as {label}" if label else "untrained"
        rows = [(_TALLY_NAMES.get(k, k), str(tally.get(k, 0))) for k in _tally_keys(command)]
        print(f"{title}: {inputs.total} messages ({backend.mode})")
        print(table(rows, indent="  "))
    if failure:
        print(f"spamctl: stopped: {failure}", file=sys.stderr)
    return 1 if failure or problems else 0


_TALLY_NAMES = {
    "skipped_repeat": "skipped (already trained)",
    "not_trained": "not in the model",
    NOT_A_MESSAGE: "not a mail message",
    "unreadable": "unreadable",
}


def _tally_keys(command: str) -> tuple[str, ...]:
    if command == "train":
        return ("learned", "corrected", "skipped_repeat", NOT_A_MESSAGE, "unreadable")
    return ("unlearned", "not_trained", NOT_A_MESSAGE, "unreadable")


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, what: str) -> Any:
    """tqdm on stderr when it is a terminal; nothing otherwise (logs and pipes stay clean)."""
    if not sys.stderr.isatty():
        return _NoProgress()
    from tqdm import tqdm  # only worth importing for a person watching

    return tqdm(total=total, desc=what, unit="msg", file=sys.stderr, leave=False)


def cmd_classify(config: Config, args: argparse.Namespace) -> int:
    [only] = args.paths if len(args.paths) == 1 else [None]
    if only is None or (only != "-" and input_kind(Path(only)) in ("maildir", "directory")):
        return _classify_many(config, args, Inputs(args.paths, mboxes_found_late=True))
    inputs = Inputs(args.paths)  # one file, stdin, or an mbox (of one message, or a line each)
    if inputs.total != 1:
        return _classify_many(config, args, inputs)
    with closing(inputs):
        [(name, raw, problem)] = list(inputs)
    if problem is not None or raw is None:
        raise SpamdError(f"{name}: {problem}")
    _check_size(name, raw)
    with closing(open_backend(config)) as backend:
        result = backend.request("classify", raw=raw)
    if args.json:
        emit_json(result)
    else:
        rows = [
            ("verdict", result["verdict"]),
            ("probability", f"{result['probability']:.4f}"),
            ("score", f"{result['score']:+.4f} (log-odds per token)"),
        ]
        print(table(rows, numbers=False))
    return 0


# Messages per classify_many request: analyzed together, one round trip (64 as in eval).
CLASSIFY_BATCH_MESSAGES = 64

Classified = tuple[str, dict[str, Any] | None, str | None]  # (name, score fields or None, problem or None)


def source_batches(inputs: Inputs) -> Iterator[list[tuple[str, str | bytes]]]:
    """`inputs.sources()` in lists of CLASSIFY_BATCH_MESSAGES, or fewer bytes than BATCH_BYTES."""
    batch: list[tuple[str, str | bytes]] = []
    size = 0
    for name, source in inputs.sources():
        batch.append((name, source))
        size += len(source) if isinstance(source, bytes) else 0
        if len(batch) >= CLASSIFY_BATCH_MESSAGES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def classified(
    sources: list[tuple[str, str | bytes]], classify_many: Callable[[list[bytes]], list[dict[str, Any]]]
) -> list[Classified]:
    """Read the files among `sources` (an mbox found among them split) and classify every message, in order.

    `classify_many` scores a batch: in a worker process, or through the daemon. A batch
    holds at most CLASSIFY_BATCH_MESSAGES messages and BATCH_BYTES (one control frame).
    """
    done: list[Classified] = []
    names: list[str] = []
    raws: list[bytes] = []
    size = 0

    def classify_pending() -> None:
        nonlocal size
        if raws:
            done.extend((name, fields, None) for name, fields in zip(names, classify_many(raws)))
        names.clear()
        raws.clear()
        size = 0

    for name, source in sources:
        messages = [(name, source, None)] if isinstance(source, bytes) else file_messages(source, name, split_mbox=True)
        for message_name, raw, problem in messages:
            if raw is not None:
                problem = too_large(raw)
            if problem is not None or raw is None:
                classify_pending()  # what came before it is answered before it
                done.append((message_name, None, problem))
                continue
            if raws and (len(raws) >= CLASSIFY_BATCH_MESSAGES or size + len(raw) > BATCH_BYTES):
                classify_pending()
            names.append(message_name)
            raws.append(raw)
            size += len(raw)
    classify_pending()
    return done


def read_and_classify(classifier: Classifier, sources: list[tuple[str, str | bytes]]) -> list[Classified]:
    """`classified` as a job for `AnalysisWorkers.map`: the worker reads, analyzes and scores.

    The workers read the files, as eval's do: when the one main process read, pickled
    and sent every message, it spent 0.88-0.96 s of CPU on trec07p-dev's 10,000 files
    (start-up included), 0.61-0.67 s now that it sends names.
    """
    return classified(sources, lambda raws: [score_fields(classifier.score(a)) for a in classifier.analyze_many(raws)])


def _classify_many(config: Config, args: argparse.Namespace, inputs: Inputs) -> int:
    """One line per message, as `bogofilter -b` prints them: name, verdict, probability, score.

    With --json, one JSON object per line. Unreadable inputs are named on stderr and
    make the exit status 1; the others are still classified. Without a daemon the
    messages are read, analyzed and scored in worker processes, one per core.
    """
    problems = 0

    def show(results: list[Classified]) -> None:
        nonlocal problems
        for name, result, problem in results:
            if result is None:
                print(f"spamctl: {name}: {problem}", file=sys.stderr)
                problems += 1
            elif args.json:
                print(json.dumps({"path": name, **result}))
            else:
                print(f"{name} {result['verdict']} {result['probability']:.4f} {result['score']:+.4f}")

    with closing(inputs), closing(open_backend(config)) as backend:
        from spamd.classifier import AnalysisWorkers, default_jobs

        jobs = default_jobs()
        if isinstance(backend, OfflineBackend) and jobs:
            # The state is locked by this process and nothing trains: the workers score
            # as well, and this process only lists the inputs and prints. Scoring here
            # instead kept 0.5 s of trec07p-dev's 3.9 s on the one process every message
            # passes through.
            with AnalysisWorkers(config, jobs, model=backend.engine.model) as workers:
                for results in workers.map(read_and_classify, source_batches(inputs)):
                    show(results)
        else:
            # Through the daemon (or in this process on a single core), a batch a request.
            def through_backend(raws: list[bytes]) -> list[dict[str, Any]]:
                return backend.request("classify_many", messages=raws)["results"]

            for batch in source_batches(inputs):
                show(classified(batch, through_backend))
    return 1 if problems else 0


def cmd_explain(config: Config, args: argparse.Namespace) -> int:
    raw = read_message(args.file)
    _check_size(args.file, raw)
    with closing(open_backend(config)) as backend:
        result = backend.request("explain", raw=raw, limit=args.limit)
    if args.json:
        emit_json(result)
        return 0
    print(f"verdict {result['verdict']}, probability {result['probability']:.4f}, score {result['score']:+.4f}")
    if not result["toward_spam"] and not result["toward_ham"]:
        print("\nno token moved the score (an empty message, or the model has not learned both classes yet)")
        return 0
    for title, key in (("toward spam", "toward_spam"), ("toward ham", "toward_ham")):
        print()
        rows = [(title, "count", "contribution")]
        rows += [(r["token"], str(r["count"]), f"{r['weight']:+.4f}") for r in result[key]]
        print(table(rows) if len(rows) > 1 else f"{title}: no tokens")
    return 0


def _check_size(name: str, raw: bytes) -> None:
    if len(raw) > MAX_MESSAGE_BYTES:
        size, limit = human_bytes(len(raw)), human_bytes(MAX_MESSAGE_BYTES)
        raise SpamdError(f"{name}: message of {size} is over the {limit} limit of the control socket")


def cmd_snapshot(config: Config, args: argparse.Namespace) -> int:
    with closing(open_backend(config)) as backend:
        result = backend.request("snapshot")
    if args.json:
        emit_json({**result, "mode": backend.mode})
    else:
        print(f"snapshot written: {result['path']}")
    return 0


def cmd_reload(config: Config, args: argparse.Namespace) -> int:
    try:
        backend = open_backend(config, daemon_only=True)
    except DaemonNotRunning:
        raise DaemonNotRunning(
            f"no spamd is running (nothing answers on {config.control_socket}); there is no daemon to reload"
        ) from None
    try:
        result = backend.request("reload")
    finally:
        backend.close()
    if args.json:
        emit_json(result)
    else:
        print("configuration reloaded")
        if isinstance(result, dict) and result:
            rows = [(str(k), json.dumps(v, default=str)) for k, v in sorted(result.items())]
            print(table(rows, indent="  ", numbers=False))
    return 0


def cmd_export(config: Config, args: argparse.Namespace) -> int:
    target = Path(args.file)
    if target.is_dir():
        raise SpamdError(f"{target}: is a directory; give a file name to export to")
    if not target.parent.is_dir():
        raise SpamdError(f"{target.parent}: no such directory")
    with closing(open_backend(config)) as backend:
        data = backend.export_bytes()
    try:
        write_atomically(target, data)
    except PermissionError:
        raise SpamdError(f"{target}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{target}: cannot write: {e.strerror}") from None
    if args.json:
        emit_json({"path": str(target), "bytes": len(data), "mode": backend.mode})
    else:
        print(f"exported {human_bytes(len(data))} to {target}")
    return 0


def cmd_import(config: Config, args: argparse.Namespace) -> int:
    source = Path(args.file)
    if source.is_dir():
        raise SpamdError(f"{source}: is a directory, not a spamd export")
    data = _read_file(source)
    if not data:
        raise SpamdError(f"{source}: empty file, not a spamd export")
    with closing(open_backend(config)) as backend:
        result = backend.import_bytes(data, str(source))
    if args.json:
        emit_json({**result, "mode": backend.mode})
    else:
        print(
            f"imported {source}: {result['trained_ham']:,} ham and {result['trained_spam']:,} spam in the model, "
            f"{result['ledger_entries']:,} trained messages; saved as {result['snapshot']}"
        )
    return 0


def cmd_eval(config: Config, args: argparse.Namespace) -> int:
    from spamd.classifier import default_jobs
    from spamd.evaluation import eval_command  # heavy (numpy reports, optional matplotlib): only when asked

    if args.jobs is not None and args.jobs < 1:
        raise SpamdError(f"--jobs {args.jobs}: need at least 1 (1 = analyze in this process)")
    jobs = default_jobs() if args.jobs is None else (0 if args.jobs == 1 else args.jobs)
    return eval_command(
        config,
        Path(args.index),
        Path(args.results) if args.results else None,
        Path(args.plot) if args.plot else None,
        args.json,
        sys.stderr.isatty(),
        jobs,
    )


# ---------------------------------------------------------------- argument parsing


def _add_common(parser: argparse.ArgumentParser, top: bool) -> None:
    # On subcommands the defaults are SUPPRESS so they do not overwrite options given before the command.
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--config", metavar="FILE", default=default, help="TOML config (same as spamd's)")
    parser.add_argument("--data-dir", metavar="DIR", default=default, help="state directory (same as spamd's)")
    parser.add_argument("--redis", metavar="URL", default=default, help="the model in Redis (same as spamd's --redis)")
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="print JSON for scripts"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spamctl",
        description="Control spamd: through the running daemon's control socket, or on its state when none runs.",
    )
    _add_common(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, handler: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _add_common(sub, top=False)
        sub.set_defaults(handler=handler)
        return sub

    command("stats", "counters, model size, snapshot and journal state, scoring speed, live accuracy", cmd_stats)
    report = command("report", "live accuracy per day: what people's moves said of spamd's verdicts", cmd_report)
    report.add_argument("--plot", metavar="FILE.png", help="draw errors and training volume per day here")
    train = command("train", "train messages: files, Maildir folders, directories, mbox files, - for stdin", cmd_train)
    which = train.add_mutually_exclusive_group(required=True)
    which.add_argument("--spam", action="store_true", help="train as spam")
    which.add_argument("--ham", action="store_true", help="train as ham")
    train.add_argument("paths", nargs="+", metavar="PATH", help="message file, mbox, Maildir folder, directory, or -")
    untrain = command("untrain", "remove messages from the model", cmd_untrain)
    untrain.add_argument("paths", nargs="+", metavar="PATH", help="message file, mbox, Maildir folder, directory, or -")
    classify = command(
        "classify", "verdict, score and spam probability: of one message, or a line each for many", cmd_classify
    )
    classify.add_argument(
        "paths", nargs="+", metavar="PATH", help="message file or -; several, a directory, Maildir folder or mbox: a line each"
    )
    explain = command("explain", "the tokens that moved a message's score most, each way", cmd_explain)
    explain.add_argument("file", metavar="FILE|-")
    explain.add_argument("--limit", type=int, default=DEFAULT_EXPLAIN_LIMIT, metavar="N", help="tokens per direction")
    command("snapshot", "write a snapshot of the model now", cmd_snapshot)
    command("reload", "make the running daemon re-read its config", cmd_reload)
    export = command("export", "write a verified, portable backup of model and ledger", cmd_export)
    export.add_argument("file", metavar="FILE")
    imported = command("import", "replace model and ledger with an export (verified first)", cmd_import)
    imported.add_argument("file", metavar="FILE")
    evaluate = command("eval", "TREC-style online evaluation over an index file", cmd_eval)
    evaluate.add_argument("index", metavar="INDEX")
    evaluate.add_argument("--results", metavar="FILE", help="write TREC results lines here")
    evaluate.add_argument("--plot", metavar="FILE.png", help="draw the ROC curve here")
    evaluate.add_argument(
        "--jobs", type=int, metavar="N", help="processes analyzing messages (default: one per core; 1: none beside eval)"
    )
    return parser


def run(argv: list[str] | None = None) -> int:
    """Parse, load the config, run one command; every user-caused failure is one line and status 1."""
    args = build_parser().parse_args(argv)
    if args.command == "explain" and args.limit < 1:
        print("spamctl: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        config = load_config(
            Path(args.config) if args.config else None,
            data_dir=Path(args.data_dir) if args.data_dir else None,
            redis_url=args.redis,
        )
        return int(args.handler(config, args))
    except SpamdError as e:
        print(f"spamctl: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # what slipped past the specific checks: name the file and the reason
        where = f"{e.filename}: " if e.filename else ""
        print(f"spamctl: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("spamctl: interrupted", file=sys.stderr)
        return 130


def main() -> None:
    # The store's warnings (a stale snapshot temp removed, say) go to stderr: structlog's
    # default printer writes to stdout, where they broke `--json` output for scripts.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    tune_gc_for_message_streams()
    sys.exit(run())
