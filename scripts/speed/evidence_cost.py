"""Instructions a message of analysis, scoring and learning as `spamctl eval` runs them, by evidence weight.

    python scripts/speed/evidence_cost.py --tree /tmp/before --tree . --weights 0,0.25 --limit 300

Each tree (its own TREE/.venv/bin/python; without one, this interpreter with TREE first on
PYTHONPATH) runs this script under `valgrind --tool=callgrind` twice per `[model]
evidence_weight`: once over the warm-up messages alone and once over them and --limit more,
so that the difference is what the messages cost, imports and loads left out. Each message
is analysed (no DNS), scored to file it, scored again as the trainer's thick threshold asks,
and learned where that check says so. Instruction counts: the machine's clock moves by
±25% between identical runs, the counts by about 0.1%.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INDEX = ROOT.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index"
WARM_MESSAGES = 10
# The thick threshold of the measurement: a message whose |log-odds| already says its label by this
# much is not learned (the daemon's is [model] train_margin; any fixed margin serves a comparison).
MARGIN = 0.5


def child(index: Path, limit: int, weight: float) -> None:
    from spamd.config import Config
    from spamd.learning.classifier import Classifier
    from spamd.model.bayes import Label, MultinomialNB

    lines = index.read_text().splitlines()[: WARM_MESSAGES + limit]
    messages = [(index.parent / line.split(" ", 1)[1]).read_bytes() for line in lines]
    labels = [Label.SPAM if line.startswith("spam") else Label.HAM for line in lines]
    config = Config()
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, evidence_weight=weight))
    model = MultinomialNB(config.model)
    classifier = Classifier(config, model)
    classifier.analyze_many(messages[:WARM_MESSAGES], authenticate=False)  # one-time loads
    if not limit:
        return
    for analyzed, label in zip(
        classifier.analyze_many(messages[WARM_MESSAGES:], authenticate=False), labels[WARM_MESSAGES:], strict=True
    ):
        model.score(analyzed.features)  # filed
        if model.score(analyzed.features).log_odds * (1 if label == Label.SPAM else -1) < MARGIN:
            model.learn_one(analyzed.features, label)


def instructions(tree: Path, index: Path, limit: int, weight: float, out: Path) -> int:
    python = tree / ".venv" / "bin" / "python"
    env = dict(os.environ)
    if not python.exists():
        python = Path(sys.executable)
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(python), __file__, "--child",
         "--index", str(index), "--limit", str(limit), "--weights", str(weight)],
        capture_output=True, text=True, cwd=tree, env=env, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{tree}: the run failed: {done.stderr.strip()[-500:]}")
    for row in out.read_text().splitlines():
        if row.startswith("summary:") or row.startswith("totals:"):
            return int(row.split()[1])
    raise SystemExit(f"{tree}: callgrind wrote no summary")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable; default: this one)")
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--weights", default="0,0.25", help="evidence weights, comma-separated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    if args.child:
        sys.path.remove(str(Path(__file__).resolve().parent))  # the tree's spamd, not a sibling script
        child(args.index, args.limit, weights[0])
        return 0
    trees = [t.resolve() for t in args.tree or [ROOT]]
    print(f"instructions a message, {args.limit} messages of {args.index} after {WARM_MESSAGES} (callgrind)\n")
    print("| evidence_weight | " + " | ".join(t.name for t in trees) + " |")
    print("|---" * (len(trees) + 1) + "|")
    with tempfile.TemporaryDirectory(prefix="evidence-cost-") as work:
        for weight in weights:
            cells = []
            for tree in trees:
                out = Path(work) / "callgrind.out"
                warm = instructions(tree, args.index.resolve(), 0, weight, out)
                full = instructions(tree, args.index.resolve(), args.limit, weight, out)
                cells.append(f"{(full - warm) // max(args.limit, 1):,}")
            print(f"| {weight:g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
