#!/usr/bin/env python3
"""How long a bulk `spamctl classify` takes to start: two messages, workers forked, trees alternating.

Every bulk run (`spamctl classify` of a folder, `spamctl eval`, `train`) waits for its
process to import spamd, load the model and fork its workers before the first message
is analyzed, and that wait is serial: on trec07p-dev's 10,000 files it was 0.3-0.4 s of
a 6 s run. This times `spamctl classify` of the index's first two messages (its bulk
path: the workers are forked and answer), each tree with its own .venv and a state
directory trained on the index's first messages (untimed), RUNS times with the trees
alternating. Wall clock from the parent's side, CPU of the process and its workers
(their rusage once reaped). The median and the fastest run of each are printed.

    python scripts/speed/start_time.py ../shared/corpora/trec07p-dev/full/index --tree /tmp/before --tree . --runs 11
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.speed.compare_speed import trained_data_dir, trees_and_commands  # noqa: E402
from spamd.evaluation.trec import mail_entries, read_index  # noqa: E402

TRAINED_MESSAGES = 1000  # a model of the size a small site has, for the snapshot the start loads


def one_start(spamctl: list[str], data: Path, paths: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its reaped workers) of one classify of `paths`."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(
        [*spamctl, "--data-dir", str(data), "classify", *paths], capture_output=True, text=True
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0 or done.stdout.count("\n") != len(paths):
        raise SystemExit(f"spamctl classify failed: {done.stderr.strip()[:500]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout with its own .venv (repeatable)")
    parser.add_argument("--runs", type=int, default=11, help="starts of each tree, alternating")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    entries = mail_entries(read_index(args.index))
    if len(entries) < 2:
        print(f"{args.index}: fewer than two mail messages", file=sys.stderr)
        return 1
    trees, commands = trees_and_commands(args.tree)
    paths = [str(e.path) for e in entries[:2]]
    walls: list[list[float]] = [[] for _ in trees]
    cpus: list[list[float]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory(prefix="spamd-start-") as tmp:
        datas = [
            trained_data_dir(entries[:TRAINED_MESSAGES], Path(tmp) / str(n), spamctl=spamctl)
            for n, spamctl in enumerate(commands)
        ]
        for _ in range(args.runs):
            for n, (spamctl, data) in enumerate(zip(commands, datas, strict=True)):
                wall, cpu = one_start(spamctl, data, paths)
                walls[n].append(wall)
                cpus[n].append(cpu)
    summary = [
        {
            "tree": str(tree or "."),
            "median_wall_ms": round(statistics.median(wall) * 1000),
            "fastest_wall_ms": round(min(wall) * 1000),
            "median_cpu_ms": round(statistics.median(cpu) * 1000),
        }
        for tree, wall, cpu in zip(trees, walls, cpus, strict=True)
    ]
    if args.json:
        print(json.dumps(summary))
    else:
        for row in summary:
            print(
                f"{row['tree']}: median {row['median_wall_ms']} ms, fastest {row['fastest_wall_ms']} ms, "
                f"CPU median {row['median_cpu_ms']} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
