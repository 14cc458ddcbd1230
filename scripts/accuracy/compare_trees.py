#!/usr/bin/env python3
"""A change's whole accuracy, before -> after: two checkouts measured on the same streams, side by side.

Every accuracy change is shown on both development corpora and their derived
streams, on the hard mail of the 2020s at first contact and after its earlier
months, under full, errors-only and people feedback, and on attacked spam at
first contact. This runs each of those measurements in the checkout before the
change (--before, e.g. a `git worktree` of the commit before) and in this one (or
--after), each with its own code, and prints every figure before -> after:

- `ablate_model.py --variants all` on the --dev indexes (the defaults of each tree):
  per feedback, the geometric mean over the streams of the (1-ROCA)% ratios after /
  before and the worst stream, then each corpus's (1-ROCA)%, spam and ham to Junk;
- `ablate_model.py --before` for each --first-contact BEFORE:INDEX (the model learns
  BEFORE, then is judged on INDEX), and for each --later BEFORE:INDEX the later half
  of INDEX after BEFORE and INDEX's first half (the judged stream of the hard mail);
- `ablate_model.py` on each --alone index from an empty model;
- `attack_first_contact.py --no-bogofilter` on the --attacks indexes: each attack's
  (1-ROCA)% and its ratio to the unchanged stream, before -> after.

    git worktree add --detach /tmp/before HEAD~1
    python scripts/accuracy/compare_trees.py --before /tmp/before \\
        --trusted-authserv-ids juliett.baddomain.com,juliett.example.com

Each tree runs with TREE/.venv/bin/python if it has one, else this interpreter with
TREE first on PYTHONPATH; each keeps its analysis caches under --work apart (a tree's
`ablate_model.py` keys its cache by its own analysis version). Takes 15-20 minutes a
tree on 2 cores with the defaults below; bogofilter's figures for the same streams are
compare_bogofilter.py's (they do not move with spamd).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ROOT.parent / "shared" / "corpora"
FEEDBACK = "full,errors,people,people-s2"


@dataclass(frozen=True)
class Run:
    """One ablate_model.py run: its name in the tables, its arguments, and whether its streams are derived too."""

    name: str
    args: tuple[str, ...]
    variants: bool = False


def interpreter(tree: Path) -> tuple[str, dict[str, str]]:
    """The Python that runs `tree`'s code, and its environment."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    own = tree / ".venv" / "bin" / "python"
    if own.exists():
        return str(own), env
    return sys.executable, {**env, "PYTHONPATH": str(tree)}


def absolute_index(index: Path, into: Path) -> Path:
    """`index` rewritten with absolute paths under `into` (so that halves and joins can be read from anywhere)."""
    base = index.resolve().parent
    lines = []
    for line in index.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2:
            fields[1] = str((base / fields[1]).resolve())
            lines.append(" ".join(fields))
    into.write_text("\n".join(lines) + "\n")
    return into


def later_half(before: Path, index: Path, work: Path) -> tuple[Path, Path]:
    """(BEFORE then INDEX's first half, INDEX's later half) as index files under `work`."""
    name = index.resolve().parent.name
    first = absolute_index(before, work / f"before-{name}.index").read_text().splitlines()
    lines = absolute_index(index, work / f"stream-{name}.index").read_text().splitlines()
    middle = len(lines) // 2
    learned, judged = work / f"learned-{name}.index", work / f"later-{name}.index"
    learned.write_text("\n".join(first + lines[:middle]) + "\n")
    judged.write_text("\n".join(lines[middle:]) + "\n")
    return learned, judged


def ablate(tree: Path, run: Run, work: Path, trusted: str, feedback: str) -> list[dict]:
    """`run` in `tree`: every stream's figures under each feedback, from ablate_model.py --json."""
    python, env = interpreter(tree)
    out = work / f"{run.name}.json"
    command = [python, str(tree / "scripts" / "accuracy" / "ablate_model.py"), "--work", str(work / "cache"),
               "--candidates", "default", "--feedback", feedback, "--json", str(out), *run.args]  # fmt: skip
    if run.variants:
        command += ["--variants", "all"]
    if trusted:
        command += ["--trusted-authserv-ids", trusted]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"compare_trees.py: {run.name} failed in {tree}:\n{done.stderr[-2000:]}")
    return [row for row in json.loads(out.read_text()) if row["candidate"] == "default"]


def attacks(tree: Path, indexes: list[Path], names: str, work: Path) -> list[dict]:
    """attack_first_contact.py's rows for `indexes` in `tree` (spamd alone), each attack of `names`."""
    python, env = interpreter(tree)
    command = [python, str(tree / "scripts" / "attacks" / "attack_first_contact.py"), *map(str, indexes),
               "--attacks", names, "--no-bogofilter", "--json", "--work", str(work / "attacks")]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"compare_trees.py: the attacks failed in {tree}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)["rows"]


def figures(row: dict) -> str:
    return f"{row['roca']:.4f}; {row['spam_junk_pct']:.1f}%, {row['ham_junk_pct']:.2f}%"


def print_run(name: str, before: list[dict], after: list[dict]) -> None:
    """A run's ratios per feedback (with derived streams) and each original stream's figures before -> after."""
    old = {(r["feedback"], r["stream"]): r for r in before}
    new = {(r["feedback"], r["stream"]): r for r in after}
    keys = [key for key in old if key in new]
    print(f"\n### {name}\n")
    streams = {stream for _, stream in keys}
    if len(streams) > 2:
        print("| feedback | geometric mean after / before | worst stream | best stream |\n|---|---|---|---|")
        for feedback in dict.fromkeys(f for f, _ in keys):
            ratios = sorted(
                (new[f, s]["roca"] / old[f, s]["roca"], s) for f, s in keys if f == feedback and old[f, s]["roca"] > 0
            )
            if ratios:
                mean = (
                    math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios)) if all(r > 0 for r, _ in ratios) else 0
                )
                print(
                    f"| {feedback} | {mean:.3f} | {ratios[-1][0]:.2f} ({ratios[-1][1]}) | {ratios[0][0]:.2f} ({ratios[0][1]}) |"
                )
        print()
    print("| stream | feedback | before | after |  ((1-ROCA)%; spam, ham to Junk)\n|---|---|---|---|")
    for feedback, stream in keys:
        if "," not in stream:  # the streams as given, not the derived ones
            print(f"| {stream} | {feedback} | {figures(old[feedback, stream])} | {figures(new[feedback, stream])} |")


def print_attacks(before: list[dict], after: list[dict]) -> None:
    old = {(r["corpus"], r["attack"]): r["spamd"] for r in before}
    print("\n### Attacked spam at first contact (spamd)\n")
    print("| corpus | attack | (1-ROCA)% before -> after | x unchanged before -> after |\n|---|---|---|---|")
    for row in after:
        was, now = old.get((row["corpus"], row["attack"])), row["spamd"]
        if was is not None:
            print(f"| {row['corpus']} | {row['attack']} | {was['one_minus_roca_pct']:.4f} -> "
                  f"{now['one_minus_roca_pct']:.4f} | {was['roca_vs_unchanged']:.2f} -> {now['roca_vs_unchanged']:.2f} |")  # fmt: skip


def pair(value: str) -> tuple[Path, Path]:
    before, sep, index = value.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError("BEFORE:INDEX")
    return Path(before), Path(index)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    parser.add_argument("--after", type=Path, default=ROOT, help="the checkout after it (default: this one)")
    dev = [CORPORA / "trec07p-dev" / "full" / "index", CORPORA / "spamassassin" / "index"]
    hard, modern = CORPORA / "hard-dev" / "index", CORPORA / "modern-dev" / "index"
    parser.add_argument("--dev", type=Path, action="append", help="with their derived streams (default: both corpora)")
    parser.add_argument("--first-contact", type=pair, action="append", metavar="BEFORE:INDEX",
                        help="default: modern-dev:hard-dev")  # fmt: skip
    parser.add_argument("--later", type=pair, action="append", metavar="BEFORE:INDEX",
                        help="INDEX's later half after BEFORE and its first half (default: modern-dev:hard-dev)")  # fmt: skip
    parser.add_argument(
        "--alone", type=Path, action="append", help="from an empty model (default: hard-dev, modern-dev)"
    )
    parser.add_argument("--attacks", type=Path, action="append", help="attacked at first contact (default: --dev's)")
    parser.add_argument("--attack-names", default="all", help="attack_first_contact.py's --attacks")
    parser.add_argument("--no-attacks", action="store_true")
    parser.add_argument("--feedback", default=FEEDBACK)
    parser.add_argument("--trusted-authserv-ids", default="", help="as ablate_model.py's (hard-dev's receivers)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "spamd-compare-trees")
    args = parser.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    runs = [Run("development streams", tuple(map(str, args.dev or dev)), variants=True)]
    for before, index in args.first_contact or [(modern, hard)]:
        runs.append(Run(f"{index.parent.name} after {before.parent.name} (first contact)",
                        ("--before", str(before), str(index))))  # fmt: skip
    for before, index in args.later or [(modern, hard)]:
        learned, judged = later_half(before, index, work)
        runs.append(Run(f"{index.parent.name}'s later half after {before.parent.name} and its first half",
                        ("--before", str(learned), str(judged))))  # fmt: skip
    runs += [Run(f"{index.parent.name} alone", (str(index),)) for index in args.alone or [hard, modern]]
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[str, dict[str, list[dict]]] = {}
    for side, tree in trees.items():
        place = work / hashlib.blake2b(str(tree).encode(), digest_size=6).hexdigest()
        place.mkdir(exist_ok=True)
        for run in runs:
            print(f"{side}: {run.name} ({tree})", file=sys.stderr)
            results.setdefault(run.name, {})[side] = ablate(tree, run, place, args.trusted_authserv_ids, args.feedback)
        if not args.no_attacks:
            print(f"{side}: attacked spam ({tree})", file=sys.stderr)
            results.setdefault("attacks", {})[side] = attacks(
                tree, args.attacks or args.dev or dev, args.attack_names, place
            )
    print(f"# before: {trees['before']}\n# after: {trees['after']}")
    for run in runs:
        print_run(run.name, results[run.name]["before"], results[run.name]["after"])
    if not args.no_attacks:
        print_attacks(results["attacks"]["before"], results["attacks"]["after"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
