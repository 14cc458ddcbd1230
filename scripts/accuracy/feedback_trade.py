#!/usr/bin/env python3
"""spamd under the feedback people give, setting by setting: the table behind the learning defaults.

Runs `spamctl eval`'s protocols (spamd/evaluation/feedback.py) on each index for a list of
settings — the Unsure band, autolearn, settled learning of spamd's own filing and
its margin — and prints a Markdown table of (1-ROCA)% and the share of Unsure mail.
The `people` protocol is a seeded simulation, so it runs once per seed and reports
the geometric mean; `full` and `errors` are deterministic and run once.

    python scripts/accuracy/feedback_trade.py ../shared/corpora/trec07p-dev/full/index \\
        ../shared/corpora/spamassassin/index --seeds 1,2,3

Files in an index that are no mail message are named on stderr and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from spamd.config import load_config
from spamd.errors import SpamdError
from spamd.evaluation.feedback import People, Protocol
from spamd.evaluation.trec import evaluate_index

# (name, [model] overrides, protocol overrides): each measured under the protocols asked for.
SETTINGS: list[tuple[str, dict, dict]] = [
    ("Unsure band 0.25-0.75, nothing else", {"ham_threshold": 0.25, "spam_threshold": 0.75}, {}),
    ("Unsure band 0.15-0.85 (default)", {}, {}),
    ("0.15-0.85, autolearn", {}, {"autolearn": True}),
    ("0.15-0.85, autolearn margin 0.6", {}, {"autolearn": True, "autolearn_margin": 0.6}),
    ("0.15-0.85, settled own filing, margin 0", {}, {"settled": True, "settle_margin": 0.0}),
    ("0.15-0.85, settled own filing, margin 0.3", {}, {"settled": True, "settle_margin": 0.3}),
    ("0.15-0.85, settled own filing, margin 0.6", {}, {"settled": True, "settle_margin": 0.6}),
]


def corpus_name(index: Path) -> str:
    return index.parent.name if index.parent.name != "full" else index.parent.parent.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, nargs="+", help="TREC index files (spam|ham PATH a line)")
    parser.add_argument("--feedback", default="errors,people", help="comma-separated protocols (default errors,people)")
    parser.add_argument("--seeds", default="1,2,3", help="people protocol: the simulation's seeds (default 1,2,3)")
    parser.add_argument("--settle-after", type=int, default=500, help="messages before mail left in place settles")
    parser.add_argument("--only", help="run only the settings whose name contains this text")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: comma-separated integers")
    config = load_config(None)
    feedbacks = [f.strip() for f in args.feedback.split(",")]
    header = ["setting", "feedback"] + [f"{corpus_name(i)} (1-ROCA)% / Unsure%" for i in args.index]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, model, protocol_fields in SETTINGS:
        if args.only and args.only not in name:
            continue
        run_config = dataclasses.replace(config, model=dataclasses.replace(config.model, **model))
        for feedback in feedbacks:
            cells = []
            for index in args.index:
                rocas, unsures = [], []
                for seed in seeds if feedback == "people" else seeds[:1]:
                    fields = {"settled": False, "settle_after": args.settle_after, **protocol_fields}
                    protocol = Protocol(feedback=feedback, people=People(seed=seed), **fields)
                    try:
                        _, report = evaluate_index(
                            run_config, index, jobs=2, protocol=protocol,
                            on_skip=lambda entry, why: print(f"feedback_trade.py: skipped {entry.name}: {why}", file=sys.stderr),
                        )  # fmt: skip
                    except SpamdError as e:
                        print(f"feedback_trade.py: {e}", file=sys.stderr)
                        return 1
                    rocas.append(report.one_minus_roca_pct)
                    unsures.append(report.unsure_pct)
                geo = math.exp(sum(math.log(max(r, 1e-9)) for r in rocas) / len(rocas))
                cells.append(f"{geo:.4f} / {sum(unsures) / len(unsures):.1f}")
            print(f"| {name} | {feedback} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
