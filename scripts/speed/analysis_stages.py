"""Instructions per message of each analysis stage, counted by callgrind, for this tree and another (an old commit's).

    python scripts/speed/analysis_stages.py --tree /tmp/before --tree . --limit 300

Each tree runs this script with its own interpreter (TREE/.venv/bin/python, which
imports TREE's spamd; without one, this interpreter with TREE first on PYTHONPATH) under `valgrind --tool=callgrind`; the script runs every
stage over the same messages (trec07p-dev's first --limit, in memory) one stage at a
time over them all, as `spamctl eval` does in its batches, and between stages the
parent has callgrind dump its counters (callgrind_control), so that each dump holds
one stage's instructions. The stages a tree does not have (the 2020s scans, the
evidence families) are left out of its row. Instruction counts, not seconds: the
machine may be busy, the counts do not move with it (a run's counts repeat within
about 0.1%).

Parsing is counted several times over, with the [parser] scans switched on one by
one (normalize, hidden_text, and the word-salad scan, which has no switch: off is
a tree without it), so that each scan's cost is the difference; the tokenizer's
families likewise, one function at a time. "analyze" is the whole analysis as the
classifier runs it (no sender authentication), apart from the rest.

`--clock ROUNDS` times the same stages by CPU seconds instead, without valgrind, the best
of ROUNDS runs with the trees taking turns: where the counts and the clock disagree (a
numpy table's memory, an allocation), the clock is what a user waits for.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INDEX = ROOT.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index"
# Every stage runs over this many messages first, uncounted: what a process loads once (the
# Public Suffix List, 0.07 s) would otherwise land in the first stage that needs it.
WARM_MESSAGES = 10


# ---------------------------------------------------------------- the child: one tree's stages


def stages(raws: list[bytes]) -> list[tuple[str, Callable[[], Any]]]:
    """(name, run) of each stage this tree has, in order; later stages read what earlier ones kept."""
    try:  # packages by layer
        from spamd.config import ModelConfig, ParserConfig
        from spamd.learning.classifier import Classifier
        from spamd.mail import tokenize as tk
        from spamd.mail.message import parse_message, strip_own_headers, stripped_message_key
        from spamd.model.bayes import Label, MultinomialNB, featurize
        from spamd.model.families import with_families
        from spamd.people.senders import keys_of_senders, sender_names

        def senders(message: Any) -> Any:
            return keys_of_senders(sender_names(message))

        new = True
    except ImportError:  # before: one module a concern at the top (imported by name: this tree has none of them)
        from spamd.config import ModelConfig, ParserConfig

        def old(module: str) -> Any:
            return importlib.import_module(f"spamd.{module}")

        # The old tree's classes under the new tree's names (the same roles): mypy reads only this tree.
        tk, with_families = old("tokenize"), old("families").with_families
        Classifier = old("classifier").Classifier  # type: ignore[misc]
        message = old("message")
        parse_message, strip_own_headers = message.parse_message, message.strip_own_headers
        stripped_message_key = message.stripped_message_key
        Label, featurize = old("model").Label, old("model").featurize  # type: ignore[misc]
        MultinomialNB = old("model").MultinomialNB  # type: ignore[misc]
        senders = old("senders").sender_keys
        new = False
    parser, model = ParserConfig(), ModelConfig()
    kept: dict[str, Any] = {}
    out: list[tuple[str, Callable[[], Any]]] = [
        ("strip", lambda: kept.update(stripped=list(map(strip_own_headers, raws))))
    ]

    def parse(config: Any) -> Callable[[], Any]:
        return lambda: kept.update(parsed=[parse_message(s, config) for s in kept["stripped"]])

    if new:
        out += [
            ("parse: no scans", parse(dataclasses.replace(parser, normalize=False, hidden_text=False))),
            ("parse: + normalize", parse(dataclasses.replace(parser, hidden_text=False))),
        ]
    out.append(("parse", parse(parser)))

    def over_parsed(function: Callable[[Any], Any]) -> Callable[[], Any]:
        return lambda: [function(m) for m in kept["parsed"]]

    families = ["header_tokens", "body_tokens", "structure_tokens", "disguise_tokens", "salad_tokens"]
    for name in families:
        if hasattr(tk, name):
            out.append((f"tokens: {name.removesuffix('_tokens')}", over_parsed(getattr(tk, name))))
    for name in getattr(tk, "EVIDENCE_FAMILIES", {}):
        if getattr(model, name):
            out.append((f"tokens: {name}", over_parsed(tk.EVIDENCE_FAMILIES[name])))
    out.append(
        (
            "tokenize + families",
            lambda: kept.update(tokens=[with_families(tk.tokenize(m), m, model) for m in kept["parsed"]]),
        )
    )
    out.append(("hashing", lambda: kept.update(features=[featurize(t, model.hash_bits, w) for t, w in kept["tokens"]])))
    out.append(("message key", lambda: [stripped_message_key(s) for s in kept["stripped"]]))
    out.append(("sender names and keys", lambda: [senders(m) for m in kept["parsed"]]))
    nb = MultinomialNB(model)
    labels = [Label.SPAM if n % 3 else Label.HAM for n in range(len(raws))]

    def train_and_score() -> None:
        for features, label in zip(kept["features"], labels, strict=True):
            nb.score(features)
            nb.learn_one(features, label)

    out.append(("score and learn (the model alone)", train_and_score))
    classifier = Classifier(_config(), None)  # type: ignore[arg-type]
    analyze = (lambda: classifier.analyze_many(raws, False)) if new else (lambda: classifier.analyze_many(raws))
    out.append(("analyze (whole)", analyze))
    return out


def _config() -> Any:
    from spamd.config import Config

    return Config()


def child(index: Path, limit: int, clock: bool = False) -> None:
    """Run the stages; between them, wait for the parent to dump callgrind's counters, or (`clock`) print
    each stage's CPU seconds as one JSON line at the end."""
    sys.path.remove(str(Path(__file__).resolve().parent))  # the tree's spamd, not a sibling script
    # The collector as every process that analyses mail runs it (spamd.runtime.gc_tuning, the same thresholds
    # in every tree): at the default thresholds its full collections scanned every message the stages keep,
    # and a tree whose parsed messages hold more objects paid for them in its "analyze" (the old tree's 589 us
    # a message by the clock, 445 us in an analysis worker).
    gc.set_threshold(50_000, 20, 20)
    lines = index.read_text().splitlines()[:limit]
    raws = [(index.parent / line.split(" ", 1)[1]).read_bytes() for line in lines]
    for _, run in stages(raws[:WARM_MESSAGES]):  # one-time loads (the suffix list) out of the counts
        run()
    plan = stages(raws)
    seconds = {}
    for name, run in [("start", lambda: None), *plan]:
        if clock:
            gc.collect()  # each stage's garbage its own: the last one's is not collected in its time
            started = time.process_time()
            run()
            seconds[name] = time.process_time() - started
            continue
        run()
        print(name, flush=True)
        sys.stdin.readline()
    if clock:
        print(json.dumps(seconds), flush=True)


# ---------------------------------------------------------------- the parent


def _interpreter(tree: Path) -> tuple[Path, dict[str, str]]:
    """The interpreter that runs `tree`'s stages and its environment."""
    python = tree / ".venv" / "bin" / "python"
    env = dict(os.environ)
    if (
        not python.exists()
    ):  # a checkout without a venv of its own (`git worktree add` of a commit): ours, its code first
        python = Path(sys.executable)
        env["PYTHONPATH"] = str(tree)
    return python, env


def measure(tree: Path, index: Path, limit: int, out_dir: Path) -> dict[str, int]:
    """Instructions of each stage in `tree`, by name."""
    python, env = _interpreter(tree)
    out = out_dir / f"callgrind.{tree.name}"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", str(python), __file__, "--child",
         "--index", str(index), "--limit", str(limit)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tree, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    names = []
    for line in proc.stdout:
        names.append(line.strip())
        subprocess.run(
            ["callgrind_control", "-d", f"stage{len(names)}", str(proc.pid)], capture_output=True, check=True
        )
        proc.stdin.write("\n")
        proc.stdin.flush()
    if proc.wait():
        raise SystemExit(f"{tree}: the stages' run failed ({proc.returncode})")
    counts = {}
    for number, name in enumerate(names, 1):
        for row in Path(f"{out}.{proc.pid}.{number}").read_text().splitlines():
            if row.startswith("summary:"):
                counts[name] = int(row.split()[1])
    return counts


def clock(tree: Path, index: Path, limit: int) -> dict[str, float]:
    """CPU seconds of each stage in `tree`, by name: one run, by the clock (the machine's load moves it)."""
    python, env = _interpreter(tree)
    done = subprocess.run(
        [str(python), __file__, "--child", "--clock", "1", "--index", str(index), "--limit", str(limit)],
        capture_output=True, text=True, cwd=tree, env=env,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{tree}: the stages' run failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", help="a checkout with its own .venv (repeatable)")
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument(
        "--clock", type=int, metavar="ROUNDS", default=0,
        help="CPU microseconds a message by the clock instead: the best of ROUNDS runs, the trees taking turns",
    )  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.index, args.limit, clock=bool(args.clock))
        return 0
    trees = [t.resolve() for t in args.tree or [ROOT]]
    index = args.index.resolve()
    results: dict[Path, dict[str, Any]] = {}
    if args.clock:
        for _ in range(args.clock):  # rounds interleaved: a spell of load falls on every tree alike
            for tree in trees:
                seconds = clock(tree, index, args.limit)
                best = results.setdefault(tree, seconds)
                for name, value in seconds.items():
                    best[name] = min(best[name], value)
        results = {tree: {name: value * 1e6 for name, value in r.items()} for tree, r in results.items()}
        print(f"CPU microseconds a message, trec07p-dev's first {args.limit} messages (best of {args.clock})\n")
    else:
        with tempfile.TemporaryDirectory(prefix="stages-") as work:
            results = {tree: measure(tree, index, args.limit, Path(work)) for tree in trees}
        print(f"instructions per message, trec07p-dev's first {args.limit} messages (callgrind)\n")
    names = list(dict.fromkeys(name for counts in results.values() for name in counts if name != "start"))
    print("| stage | " + " | ".join(t.name for t in trees) + (" | new / old |" if len(trees) == 2 else " |"))
    print("|---" * (len(trees) + 1 + (len(trees) == 2)) + "|")
    for name in names:
        cells = [results[t].get(name) for t in trees]
        row = [
            (f"{c / args.limit:,.1f}" if args.clock else f"{c / args.limit:,.0f}") if c is not None else ""
            for c in cells
        ]
        ratio = f"{cells[1] / cells[0]:.2f}" if len(cells) == 2 and all(cells) else ""  # type: ignore[operator]
        print(f"| {name} | " + " | ".join(row) + (f" | {ratio} |" if len(trees) == 2 else " |"))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
