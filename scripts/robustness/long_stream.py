#!/usr/bin/env python3
"""Score and train a long stream through the real Engine: memory, ledger and files must stay within their caps.

The corpora are replayed with mutations, so every message has a new key and
new tokens keep appearing: a fresh Message-ID, a few words replaced (from a pool
of made-up words, and half the time a word never seen before), a few body lines
shuffled. Each message is scored (`Engine.classify`) then trained with its gold
label (`Engine.train`); a snapshot is taken whenever `Engine.needs_snapshot()`
says so, as the daemon's timer does, with a small `journal_max_bytes` so the
journal rotates often. At the end the state directory is opened again and must
hold exactly the live model and ledger.

Reports RSS (VmRSS every --sample-every messages, and the peak from getrusage),
ledger entries, snapshot and journal files on disk with their sizes, messages/s,
and whether each bound held:

  * ledger entries <= ledger_max_entries * 1.05 + 16 (the Ledger trims in batches
    once it passes that, back to ledger_max_entries);
  * snapshot files <= snapshots_kept;
  * each journal segment <= journal_max_bytes + the largest record written.

    python scripts/robustness/long_stream.py                                # 100,000 messages, ~2-3 min
    python scripts/robustness/long_stream.py --messages 8000 --sample-every 1000 --ledger-max 2000 --json

The model's count arrays are written once at start (`counts += 0`) so their pages
are resident from the first sample: RSS growth then measures what the stream
adds, not numpy's lazily faulted zero pages (2 x 2^hash_bits x 4 bytes).
Exit status: 0 when every bound held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import string
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spamd.config import Config, ModelConfig, StoreConfig
from spamd.engine.engine import Engine
from spamd.errors import SpamdError
from spamd.evaluation.trec import index_messages, read_index
from spamd.model.bayes import Label, MultinomialNB
from spamd.store import Ledger

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
DEFAULT_INDEXES = [CORPORA / "trec07p-dev" / "full" / "index", CORPORA / "spamassassin" / "index"]
# Ledger.set trims once it holds more than this many entries (see spamd/store/local.py).
LEDGER_SLACK = 1.05
LEDGER_EXTRA = 16


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sample-every", type=int, default=10_000, help="messages between samples (default 10,000)")
    parser.add_argument("--ledger-max", type=int, default=20_000, help="store.ledger_max_entries (default 20,000)")
    parser.add_argument(
        "--journal-max-bytes", type=int, default=1 << 20, help="store.journal_max_bytes (default 1 MiB)"
    )
    parser.add_argument("--snapshots-kept", type=int, default=2)
    parser.add_argument("--hash-bits", type=int, default=ModelConfig().hash_bits)
    parser.add_argument("--index", type=Path, action="append", help="TREC index (repeatable; default both corpora)")
    parser.add_argument("--data-dir", type=Path, help="state goes here (default: a temporary directory)")
    parser.add_argument("--durable", action="store_true", help="fsync journal and snapshots (default off, for speed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- the stream


def load_messages(indexes: list[Path]) -> list[tuple[Label, bytes]]:
    """Every message of the indexes, interleaved (one from each in turn); each file that is none is named on stderr."""
    lists = [[(entry.label, raw) for entry, raw in index_messages(read_index(index))] for index in indexes]
    mixed: list[tuple[Label, bytes]] = []
    for i in range(max(map(len, lists), default=0)):
        mixed.extend(rows[i] for rows in lists if i < len(rows))
    return mixed


_MESSAGE_ID_RE = re.compile(rb"(?im)^message-id:[^\n]*\n")
_WORD_AT_RE = re.compile(rb"[A-Za-z]{3,}")


class Mutator:
    """New Message-ID, some words replaced, some lines shuffled: a new key and new tokens per message."""

    def __init__(self, seed: int, pool_size: int = 50_000):
        self.rng = random.Random(seed)
        self.pool = [self._fresh_word() for _ in range(pool_size)]

    def _fresh_word(self) -> bytes:
        return "".join(self.rng.choices(string.ascii_lowercase, k=self.rng.randint(4, 9))).encode()

    def __call__(self, raw: bytes, n: int) -> bytes:
        rng = self.rng
        sep = raw.find(b"\n\n")
        head, body = (raw, b"") if sep == -1 else (raw[: sep + 1], raw[sep + 1 :])
        message_id = b"Message-ID: <stream.%d.%d@host%d.example>\n" % (n, rng.getrandbits(32), rng.randrange(1000))
        head, found = _MESSAGE_ID_RE.subn(message_id, head, count=1)
        if not found:
            head = message_id + head
        text = bytearray(body)
        for _ in range(rng.randint(1, 8)):  # replace the word at a random place
            m = _WORD_AT_RE.search(text, rng.randrange(len(text) + 1))
            if m:
                word = self._fresh_word() if rng.random() < 0.5 else rng.choice(self.pool)
                text[m.start() : m.end()] = word
        lines = bytes(text).split(b"\n")
        if len(lines) > 3:  # shuffle a window of lines
            start = rng.randrange(len(lines) - 2)
            window = lines[start : start + rng.randint(2, 10)]
            rng.shuffle(window)
            lines[start : start + len(window)] = window
        return head + b"\n".join(lines)


# ---------------------------------------------------------------- measuring


def rss_kib() -> int:
    """Resident set size now (VmRSS), KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def state_files(state_dir: Path) -> dict[str, list[int]]:
    """Sizes of the files in the state directory by kind."""
    kinds: dict[str, list[int]] = {"snapshot": [], "journal": [], "other": []}
    for path in state_dir.iterdir():
        if path.name == "lock":
            continue
        kind = (
            "snapshot"
            if path.name.startswith("snapshot-") and path.suffix == ".spamd"
            else ("journal" if path.name.startswith("journal-") and path.suffix == ".log" else "other")
        )
        kinds[kind].append(path.stat().st_size)
    return kinds


@dataclass
class Bounds:
    """The worst seen of each bounded quantity."""

    ledger_max_seen: int = 0
    snapshot_files_max: int = 0
    journal_files_max: int = 0
    journal_segment_bytes_max: int = 0
    record_bytes_max: int = 0
    other_files: set[str] = field(default_factory=set)

    def check_files(self, state_dir: Path) -> dict[str, list[int]]:
        files = state_files(state_dir)
        self.snapshot_files_max = max(self.snapshot_files_max, len(files["snapshot"]))
        self.journal_files_max = max(self.journal_files_max, len(files["journal"]))
        self.journal_segment_bytes_max = max([self.journal_segment_bytes_max, *files["journal"]])
        if files["other"]:
            self.other_files.update(
                p.name
                for p in state_dir.iterdir()
                if p.name != "lock" and not p.name.startswith(("snapshot-", "journal-"))
            )
        return files


def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    indexes = args.index or DEFAULT_INDEXES
    missing = [str(i) for i in indexes if not i.is_file()]
    if missing:
        raise SystemExit(f"long_stream: no index at {', '.join(missing)} (the corpora live at ../shared/corpora)")
    started = time.perf_counter()
    messages = load_messages(indexes)
    load_seconds = time.perf_counter() - started
    config = Config(
        data_dir=data_dir,
        model=ModelConfig(hash_bits=args.hash_bits),
        store=StoreConfig(
            journal_max_bytes=args.journal_max_bytes,
            snapshots_kept=args.snapshots_kept,
            ledger_max_entries=args.ledger_max,
            snapshot_interval_s=1e9,  # only the journal size triggers them
        ),
    )
    engine = Engine.open(config, durable=args.durable)
    assert isinstance(engine.model, MultinomialNB)  # the embedded store's
    engine.model.counts += 0  # fault in the count arrays' pages now (see the module docstring)
    mutate = Mutator(args.seed)
    bounds = Bounds()
    samples: list[dict[str, Any]] = []
    snapshots = 0
    snapshot_seconds = 0.0
    verdicts = {"ham": 0, "spam": 0, "unsure": 0}
    ledger_cap = int(args.ledger_max * LEDGER_SLACK + LEDGER_EXTRA)

    def sample(n: int, interval_start: float, interval_messages: int) -> float:
        files = bounds.check_files(engine.store.state_dir)
        now = time.perf_counter()
        samples.append(
            {
                "messages": n,
                "rss_mib": round(rss_kib() / 1024, 1),
                "ledger": len(engine.trainer.ledger),
                "distinct_buckets": int(engine.model.distinct),
                "snapshots": len(files["snapshot"]),
                "snapshot_bytes": sorted(files["snapshot"]),
                "journals": len(files["journal"]),
                "journal_bytes": sorted(files["journal"]),
                "msgs_per_s": round(interval_messages / (now - interval_start), 1) if interval_messages else None,
            }
        )
        return now

    interval_start = sample(0, time.perf_counter(), 0)
    stream_started = interval_start
    cpu_started = time.process_time()
    for n in range(1, args.messages + 1):
        label, raw = messages[(n - 1) % len(messages)]
        raw = mutate(raw, n)
        verdicts[engine.classify(raw).score.verdict.value] += 1
        before = engine.store.journal_bytes
        engine.train(raw, label, source="stream")
        bounds.record_bytes_max = max(bounds.record_bytes_max, engine.store.journal_bytes - before)
        bounds.journal_segment_bytes_max = max(bounds.journal_segment_bytes_max, engine.store.journal_bytes)
        bounds.ledger_max_seen = max(bounds.ledger_max_seen, len(engine.trainer.ledger))
        if engine.needs_snapshot():
            t = time.perf_counter()
            engine.snapshot()
            snapshot_seconds += time.perf_counter() - t
            snapshots += 1
            bounds.check_files(engine.store.state_dir)
        if n % args.sample_every == 0 or n == args.messages:
            interval_start = sample(n, interval_start, n - int(samples[-1]["messages"]))
    stream_seconds = time.perf_counter() - stream_started
    cpu_seconds = time.process_time() - cpu_started

    peak_stream_kib = peak_rss_kib()
    # The state on disk is the live state: open it again (as a restart would) and compare.
    live_model, live_ledger = engine.model, engine.trainer.ledger
    assert isinstance(live_model, MultinomialNB) and isinstance(live_ledger, Ledger)  # the embedded store's
    engine.close()
    reopened = Engine.open(config, durable=args.durable)
    assert isinstance(reopened.trainer.ledger, Ledger)
    restart_ok = reopened.model.state_equals(live_model) and reopened.trainer.ledger.equals(live_ledger)
    replayed = reopened.recovery.replayed
    reopened.close()

    rss_after_warmup = [s["rss_mib"] for s in samples if int(s["messages"]) >= min(args.sample_every, args.messages)]
    report = {
        "messages": args.messages,
        "corpus_messages": len(messages),
        "load_seconds": round(load_seconds, 1),
        "stream_seconds": round(stream_seconds, 1),
        "msgs_per_s": round(args.messages / stream_seconds, 1),
        # CPU time of this process: the figure to compare on a shared, loaded machine.
        "cpu_seconds": round(cpu_seconds, 1),
        "msgs_per_cpu_s": round(args.messages / cpu_seconds, 1),
        "verdicts": verdicts,
        # ru_maxrss: over the stream (loading the corpora included), and with the
        # restart check (a second model and a snapshot decode held beside the first).
        "peak_rss_stream_mib": round(peak_stream_kib / 1024, 1),
        "peak_rss_mib": round(peak_rss_kib() / 1024, 1),
        "rss_first_sample_mib": samples[0]["rss_mib"],
        "rss_warm_mib": rss_after_warmup[0],
        # Steady growth (last sample - first warm one) and the largest transient above
        # the warm figure (a sample right after a snapshot's encode buffers were freed
        # but not yet returned by the allocator).
        "rss_growth_after_warmup_mib": round(rss_after_warmup[-1] - rss_after_warmup[0], 1),
        "rss_max_above_warm_mib": round(max(rss_after_warmup) - rss_after_warmup[0], 1),
        "model_bytes": engine.model.memory_bytes,
        "ledger_max_entries": args.ledger_max,
        "ledger_bound": ledger_cap,
        "ledger_max_seen": bounds.ledger_max_seen,
        "snapshots_taken": snapshots,
        "snapshot_seconds_total": round(snapshot_seconds, 1),
        "snapshots_kept": args.snapshots_kept,
        "snapshot_files_max": bounds.snapshot_files_max,
        "journal_max_bytes": args.journal_max_bytes,
        "record_bytes_max": bounds.record_bytes_max,
        "journal_segment_bytes_max": bounds.journal_segment_bytes_max,
        "journal_files_max": bounds.journal_files_max,
        "other_files": sorted(bounds.other_files),
        "restart_equal": restart_ok,
        "restart_replayed": replayed,
        "samples": samples,
    }
    report["bounds_held"] = {
        "ledger": bounds.ledger_max_seen <= ledger_cap,
        "snapshot_files": bounds.snapshot_files_max <= args.snapshots_kept,
        "journal_segment": bounds.journal_segment_bytes_max <= args.journal_max_bytes + bounds.record_bytes_max,
        "no_other_files": not bounds.other_files,
        "restart_equal": restart_ok,
    }
    return report


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{'messages':>9} {'RSS MiB':>8} {'ledger':>7} {'buckets':>9} {'snaps':>5} {'snapshot bytes':>22} "
        f"{'jrnls':>5} {'journal bytes':>22} {'msgs/s':>7}"
    )
    for s in report["samples"]:
        print(
            f"{s['messages']:>9,} {s['rss_mib']:>8} {s['ledger']:>7,} {s['distinct_buckets']:>9,} {s['snapshots']:>5} "
            f"{','.join(map(str, s['snapshot_bytes'])):>22} {s['journals']:>5} "
            f"{','.join(map(str, s['journal_bytes'])):>22} {s['msgs_per_s'] or '':>7}"
        )
    for key, value in report.items():
        if key != "samples":
            print(f"{key:>28}: {value}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.data_dir:
        report = run(args, args.data_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="spamd-stream-") as tmp:
            report = run(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0 if all(report["bounds_held"].values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
