#!/usr/bin/env python3
"""Per-user layers measured: a corpus dealt to several users who agree, and to users who disagree.

Builds two multi-user TREC indexes (third field: the user) from one corpus:

- agree: every message dealt to a user at random, with its gold label;
- disagree: the same, except the messages of one mailing list (`--disputed`, matched
  in List-Id), dealt to the first two users only: the first labels them spam (she
  left the list and moves every copy into Junk), the second keeps them as ham.

Then runs `spamctl eval` on each, with the per-user layers and with `--no-user-layer`
(the shared model alone), and prints per user (1-ROCA)% and, for the disputed list,
the share of each user's copies filed their way (by verdict: spam to Junk, anything
else to INBOX) after at most 5 of their own corrections. Last, the cost of scoring
for a user against the shared model alone, in this process.

    python scripts/multi_user_stream.py ../shared/corpora/spamassassin/index --out /tmp/multi-user

Files in an index that are no mail message are named on stderr and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

USERS = ("alice", "bob", "carol")
CORRECTIONS = 5  # the target: filed their way after at most this many of a user's own corrections


def list_id(path: Path) -> str:
    """The List-Id header's value (first 64 KiB of the header), or ''."""
    with open(path, "rb") as f:
        head = f.read(65536).split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    for line in head.splitlines():
        if line[:8].lower() == b"list-id:":
            return line[8:].decode("latin-1").strip()
    return ""


def build_indexes(index: Path, out: Path, disputed: str, seed: int) -> tuple[Path, Path, int]:
    """Write agree.index and disagree.index under `out` (absolute paths); returns them and the disputed count."""
    from spamd.evaluation import read_index

    rng = random.Random(seed)
    agree, disagree = [], []
    n_disputed = 0
    for entry in read_index(index):
        user = rng.choice(USERS)
        path = entry.path.resolve()
        agree.append(f"{entry.label} {path} {user}\n")
        if disputed in list_id(path):
            n_disputed += 1
            owner = USERS[n_disputed % 2]  # alternately alice and bob
            disagree.append(f"{'spam' if owner == 'alice' else 'ham'} {path} {owner}\n")
        else:
            disagree.append(f"{entry.label} {path} {user}\n")
    out.mkdir(parents=True, exist_ok=True)
    (out / "agree.index").write_text("".join(agree))
    (out / "disagree.index").write_text("".join(disagree))
    return out / "agree.index", out / "disagree.index", n_disputed


def run_eval(index: Path, user_layer: bool, config: Path | None, feedback: str = "full") -> tuple[dict, list[tuple[str, bool]]]:
    """`spamctl eval --json` on `index`; the report and each message's (gold, judged spam) in index order."""
    with tempfile.NamedTemporaryFile(suffix=".results") as results:
        spamctl = Path(sys.executable).parent / "spamctl"  # the one installed beside this Python
        command = [str(spamctl), "eval", str(index), "--json", "--results", results.name, "--feedback", feedback]
        if config is not None:
            command[1:1] = ["--config", str(config)]
        command.append("--score-per-user" if user_layer else "--no-user-layer")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        verdicts = [(line.split()[1], line.split()[3] == "spam") for line in Path(results.name).read_text().splitlines()]
    return report, verdicts


def filed_their_way(index: Path, verdicts: list[tuple[str, bool]], disputed: str) -> dict[str, tuple[float, int, int]]:
    """Per user of the disputed list: (share filed their way after <= CORRECTIONS corrections, corrections, copies)."""
    lines = [line.split() for line in index.read_text().splitlines()]
    # spamctl eval skips files that are no message: match results to lines by path, in order.
    by_user: dict[str, list[bool]] = {}
    position = 0
    for label, path, user in lines:
        if position >= len(verdicts):
            break
        gold, judged_spam = verdicts[position]
        position += 1
        if not disputed_path(path, disputed):
            continue
        by_user.setdefault(user, []).append(judged_spam == (label == "spam"))
    shares = {}
    for user, right in sorted(by_user.items()):
        wrong_at = [i for i, ok in enumerate(right) if not ok]
        cut = wrong_at[min(CORRECTIONS, len(wrong_at)) - 1] + 1 if wrong_at else 0
        rest = right[cut:]
        shares[user] = (sum(rest) / len(rest) if rest else float("nan"), len(wrong_at), len(right))
    return shares


_DISPUTED_CACHE: dict[str, bool] = {}


def disputed_path(path: str, disputed: str) -> bool:
    if path not in _DISPUTED_CACHE:
        _DISPUTED_CACHE[path] = disputed in list_id(Path(path))
    return _DISPUTED_CACHE[path]


def scoring_cost(index: Path, messages: int) -> tuple[float, float]:
    """Microseconds per message scored for its user and by the shared model alone, after training the stream."""
    from spamd.config import Config, UsersConfig
    from spamd.engine import Engine
    from spamd.evaluation import index_messages, read_index

    entries = read_index(index)[: 2 * messages]
    with tempfile.TemporaryDirectory(prefix="spamd-users-cost-") as tmp:
        engine = Engine.open(dataclasses.replace(Config(users=UsersConfig(score_per_user=True)), data_dir=Path(tmp)), durable=False)
        try:
            pairs = [(entry, raw) for entry, raw in index_messages(entries)]
            analyzed = engine.classifier.analyze_many([raw for _, raw in pairs])
            train, test = list(zip(pairs, analyzed))[:messages], list(zip(pairs, analyzed))[messages:]
            for (entry, _), a in train:
                engine.trainer.train(a, entry.label, "eval", True, entry.user)
            timings = {}
            for name, with_user in (("shared", False), ("user", True), ("shared2", False), ("user2", True)):
                started = time.perf_counter()
                for _ in range(3):
                    for (entry, _), a in test:
                        engine.classifier.score(a, entry.user if with_user else None)
                timings[name] = (time.perf_counter() - started) / (3 * len(test)) * 1e6
        finally:
            engine.close()
    return min(timings["user"], timings["user2"]), min(timings["shared"], timings["shared2"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a TREC index (spamassassin: it holds mailing lists)")
    parser.add_argument("--out", type=Path, default=Path("multi-user-stream"), help="where the two indexes go")
    parser.add_argument("--disputed", default="rpm-zzzlist.freshrpms.net", help="List-Id of the list users disagree on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", type=Path, help="a spamd.toml for spamctl eval (e.g. other [users] settings)")
    parser.add_argument("--feedback", default="full", help="spamctl eval's protocol: full, errors or people (with errors and people,"
                        " a user's layer starts as the corrections they make: often one class only)")
    parser.add_argument("--cost-messages", type=int, default=2000, help="messages trained, then as many scored, for the cost (0: no cost measured)")
    args = parser.parse_args()
    agree, disagree, n_disputed = build_indexes(args.index, args.out, args.disputed, args.seed)
    print(f"indexes: {agree}, {disagree} ({n_disputed} messages of {args.disputed} disputed)")
    summary: dict[str, object] = {}
    for name, index in (("agree", agree), ("disagree", disagree)):
        for user_layer in (False, True):
            report, verdicts = run_eval(index, user_layer, args.config, args.feedback)
            how = "user layer" if user_layer else "shared only"
            per_user = {u: round(m["one_minus_roca_pct"], 4) for u, m in report["users"].items()}
            print(f"{name:8} {how:11}  (1-ROCA)% {report['one_minus_roca_pct']:.4f}  per user {per_user}")
            entry: dict[str, object] = {"overall": report["one_minus_roca_pct"], "users": report["users"]}
            if name == "disagree":
                shares = filed_their_way(index, verdicts, args.disputed)
                for user, (share, wrong, copies) in shares.items():
                    print(f"{'':21}{user}: {args.disputed} filed their way {100 * share:.1f}% after "
                          f"{min(wrong, CORRECTIONS)} corrections ({wrong} wrong of {copies})")  # fmt: skip
                entry["disputed"] = shares
            summary[f"{name}/{how}"] = entry
    if args.cost_messages > 0:
        user_us, shared_us = scoring_cost(agree, args.cost_messages)
        print(f"scoring cost: {user_us:.1f} us/msg for a user, {shared_us:.1f} us/msg shared only ({user_us / shared_us:.2f}x)")
        summary["cost_us"] = {"user": user_us, "shared": shared_us}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
