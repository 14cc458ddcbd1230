#!/usr/bin/env python3
"""Measure the classifier core on one corpus: parser speed, memory, collisions, snapshots, caps.

Trains a model on every message of the index (through a real Engine on a temp
data directory, journal not fsynced so the disk is not what is measured) and
reports:

  * parse + tokenize throughput (messages read into memory first);
  * model memory, distinct tokens, bytes per distinct token, hash collision rate
    (distinct token strings, kept in a set during the run only, vs distinct buckets);
  * ledger memory per entry (tracemalloc over a rebuilt copy of the ledger);
  * snapshot size, save time (Engine.snapshot, fsynced) and load time (Store.load),
    median of 3;
  * how many messages hit each parser cap under the default ParserConfig.

    python scripts/speed/measure_core.py                # trec07p-dev, table
    python scripts/speed/measure_core.py --json
    python scripts/speed/measure_core.py --index ../shared/corpora/spamassassin/index
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.errors import SpamdError
from spamd.evaluation.trec import index_messages, read_index
from spamd.learning.classifier import Analyzed
from spamd.mail.message import message_key, parse_message, strip_own_headers
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import featurize
from spamd.store import Ledger, Store

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
DEFAULT_INDEX = CORPORA / "trec07p-dev" / "full" / "index"
CAPS = ("truncated", "parts-cap", "depth-cap")


def median_seconds(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ledger_bytes_per_entry(ledger: Ledger) -> float:
    """Python allocations of a rebuilt copy of the ledger (dict + 16-byte keys), per entry."""
    entries = list(ledger._entries.items())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    copy = Ledger(ledger.max_entries)
    for key, value in entries:
        copy._entries[bytes(bytearray(key))] = value  # fresh key objects, as after a load
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / max(len(copy), 1)


def measure(index: Path, config: Config, tmp_root: Path | None) -> dict[str, object]:
    messages = list(index_messages(read_index(index)))  # each file that is no message is named on stderr
    if not messages:
        raise SystemExit(f"{index}: no mail message to measure")
    raws = [raw for _, raw in messages]
    labels = [entry.label for entry, _ in messages]
    limits = config.parser

    # 1. parse + tokenize only.
    start = time.perf_counter()
    for raw in raws:
        tokenize(parse_message(raw, limits))
    parse_seconds = time.perf_counter() - start

    # 2. train everything through a real Engine; count strings, buckets and caps on the way.
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        run_config = replace(config, data_dir=Path(tmp))
        engine = Engine.open(run_config, durable=False)
        strings: set[str] = set()
        caps: Counter[str] = Counter()
        train_start = time.perf_counter()
        for raw, label in zip(raws, labels, strict=True):
            parsed = parse_message(strip_own_headers(raw), limits)
            caps.update(set(parsed.defects) & set(CAPS))
            tokens = tokenize(parsed)
            strings.update(tokens)
            analyzed = Analyzed(message_key(raw), featurize(tokens, config.model.hash_bits))
            engine.trainer.train(analyzed, label, "measure")
        train_seconds = time.perf_counter() - train_start
        model = engine.model
        bucket_ids = featurize(list(strings), config.model.hash_bits).ids
        distinct_buckets = len(bucket_ids)
        assert distinct_buckets == model.distinct, (distinct_buckets, model.distinct)
        assert isinstance(engine.trainer.ledger, Ledger)  # the embedded store's
        ledger_entry = ledger_bytes_per_entry(engine.trainer.ledger)
        ledger_entries = len(engine.trainer.ledger)
        engine.snapshot()
        engine.close()

        # 3. snapshot save (fsynced) and load, median of 3.
        engine = Engine.open(run_config, durable=True)
        snapshot_path = engine.snapshot()
        save_seconds = median_seconds(engine.snapshot)
        snapshot_bytes = snapshot_path.stat().st_size
        engine.close()

        def load() -> None:
            store = Store(run_config.state_dir, run_config.model, run_config.store)
            store.lock()
            try:
                store.load()
            finally:
                store.close()

        load_seconds = median_seconds(load)
        filesystem = _filesystem(Path(tmp))

    n = len(raws)
    return {
        "corpus": str(index),
        "messages": n,
        "corpus_bytes": sum(map(len, raws)),
        "python": platform.python_version(),
        "parse_tokenize_seconds": round(parse_seconds, 3),
        "parse_tokenize_msgs_per_s": round(n / parse_seconds, 1),
        "train_msgs_per_s": round(n / train_seconds, 1),
        "hash_bits": config.model.hash_bits,
        "model_memory_bytes": model.memory_bytes,
        "distinct_token_strings": len(strings),
        "distinct_buckets": distinct_buckets,
        "model_bytes_per_distinct_token": round(model.memory_bytes / max(model.distinct, 1), 1),
        "collision_rate": round(1 - distinct_buckets / max(len(strings), 1), 6),
        "ledger_entries": ledger_entries,
        "ledger_bytes_per_entry": round(ledger_entry, 1),
        "ledger_bytes_method": "tracemalloc of a rebuilt ledger dict with fresh 16-byte keys",
        "snapshot_bytes": snapshot_bytes,
        "snapshot_save_seconds_median3": round(save_seconds, 4),
        "snapshot_load_seconds_median3": round(load_seconds, 4),
        "snapshot_filesystem": filesystem,
        "parser_caps": {cap: caps[cap] for cap in CAPS},
        "parser_config": {
            "max_bytes": limits.max_bytes,
            "max_parts": limits.max_parts,
            "max_depth": limits.max_depth,
            "max_text_chars": limits.max_text_chars,
        },
    }


def _filesystem(path: Path) -> str:
    """The filesystem type holding `path` (fsync cost depends on it), from /proc/mounts."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    best = ("", "unknown")
    resolved = str(path.resolve())
    for fields in mounts:
        if len(fields) > 2 and resolved.startswith(fields[1]) and len(fields[1]) > len(best[0]):
            best = (fields[1], fields[2])
    return best[1]


def print_table(r: dict[str, Any]) -> None:
    caps = r["parser_caps"]
    rows = [
        ("corpus", f"{r['corpus']} ({r['messages']:,} messages, {r['corpus_bytes'] / 1e6:.1f} MB)"),
        (
            "parse + tokenize",
            f"{r['parse_tokenize_msgs_per_s']:,.0f} msgs/s ({r['parse_tokenize_seconds']} s, in memory)",
        ),
        ("train (end to end, no fsync)", f"{r['train_msgs_per_s']:,.0f} msgs/s"),
        ("model memory", f"{r['model_memory_bytes']:,} bytes (hash_bits={r['hash_bits']}, fixed size)"),
        ("distinct token strings", f"{r['distinct_token_strings']:,}"),
        ("distinct buckets (model.distinct)", f"{r['distinct_buckets']:,}"),
        ("model bytes per distinct token", f"{r['model_bytes_per_distinct_token']:,}"),
        ("hash collision rate", f"{100 * r['collision_rate']:.3f} % (1 - buckets/strings)"),
        (
            "ledger",
            f"{r['ledger_entries']:,} entries, {r['ledger_bytes_per_entry']} bytes/entry ({r['ledger_bytes_method']})",
        ),
        ("snapshot size", f"{r['snapshot_bytes']:,} bytes"),
        (
            "snapshot save (fsync), median of 3",
            f"{1000 * r['snapshot_save_seconds_median3']:.1f} ms on {r['snapshot_filesystem']}",
        ),
        ("snapshot load, median of 3", f"{1000 * r['snapshot_load_seconds_median3']:.1f} ms"),
    ]
    for cap in CAPS:
        rows.append((f"messages hitting cap '{cap}'", f"{caps[cap]:,}"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    p = r["parser_config"]
    print(
        f"{'parser config':<{width}}  max_bytes={p['max_bytes']:,} max_parts={p['max_parts']} "
        f"max_depth={p['max_depth']} max_text_chars={p['max_text_chars']:,}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX, help="TREC-format index (default: trec07p-dev)")
    parser.add_argument("--hash-bits", type=int, default=ModelConfig().hash_bits)
    parser.add_argument("--tmp", type=Path, default=None, help="where the temp data directory goes (default: $TMPDIR)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    if not args.index.is_file():
        print(f"{args.index}: no such index (the corpora live at {CORPORA})", file=sys.stderr)
        return 2
    config = Config(model=replace(ModelConfig(), hash_bits=args.hash_bits))
    result = measure(args.index, config, args.tmp)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
