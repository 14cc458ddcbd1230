"""What sender authentication adds to a message's analysis: CPU a message with [auth] on and off, DNS cached.

Signs trec07p-dev messages with a test key (as scripts/bench_smtp.py --auth does: d=bench.example,
an RSA key of --key-bits, 2048 by default as large senders publish,
published with a DMARC record by a loopback DNS server in a process of its own), analyzes each
once untimed so the resolver's cache holds every answer, then times `Classifier.analyze` of the
same mail with [auth] enabled and disabled, alternated --rounds times in one process; the best
round of each (CPU time) is the figure, the rest being the machine's noise.

    .venv/bin/python scripts/auth_cost.py                                  # this checkout
    .venv/bin/python scripts/auth_cost.py --tree /tmp/old --tree .         # an A/B of two checkouts

With --tree the script runs itself once per tree (that tree's code on sys.path first); a tree
from before --key-bits signs with 1024-bit keys only (give --key-bits 1024).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LINE_END = re.compile(rb"\r\n|\n|\r(?!\n)")  # smtplib's


def measure(tree: Path, messages: int, rounds: int, key_bits: int) -> None:
    sys.path[:0] = [str(tree), str(ROOT)]  # the tree's spamd first
    from scripts.bench_smtp import DEFAULT_INDEX, SignedMail, read_corpus
    from spamd.config import load_config
    from spamd.learning.classifier import Classifier

    rows = read_corpus(DEFAULT_INDEX)[1000 : 1000 + messages]
    work = Path(tempfile.mkdtemp(prefix="spamd-auth-cost-"))
    try:
        signed = SignedMail(work, key_bits)
    except TypeError:  # a tree from before --key-bits: its keys were 1024 bits
        if key_bits != 1024:
            sys.exit(f"{tree} signs with 1024-bit keys only: give --key-bits 1024")
        signed = SignedMail(work)
    try:
        mail = [_LINE_END.sub(b"\r\n", signed.sign(raw)) for _, raw in rows]  # every line end CRLF, as SMTP brings it
        classifiers = {}
        for setting in ("off", "on"):
            config = work / f"{setting}.toml"
            config.write_text(signed.section(setting))
            classifiers[setting] = Classifier(load_config(config), None)  # type: ignore[arg-type]  # analysis only
        for raw in mail:  # untimed: every DNS answer cached
            classifiers["on"].analyze(raw)
            classifiers["off"].analyze(raw)
        best = {"off": float("inf"), "on": float("inf")}
        for _ in range(rounds):
            for setting, classifier in classifiers.items():
                started = time.process_time()
                for raw in mail:
                    classifier.analyze(raw)
                best[setting] = min(best[setting], (time.process_time() - started) / len(mail) * 1e3)
        print(f"{tree}: {len(mail)} messages signed by a {key_bits}-bit key, analysis CPU a message (best of {rounds}): [auth] off "
              f"{best['off']:.3f} ms, on {best['on']:.3f} ms; authentication adds {best['on'] - best['off']:.3f} ms "
              f"({best['on'] / best['off']:.2f}x)")  # fmt: skip
    finally:
        signed.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--key-bits", type=int, default=2048, help="the test key's RSA size")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout whose spamd is measured")
    parser.add_argument("--in-tree", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_tree is not None:
        measure(args.in_tree, args.messages, args.rounds, args.key_bits)
        return 0
    for tree in [t.resolve() for t in args.tree or [ROOT]]:
        command = [sys.executable, __file__, "--in-tree", str(tree), "--messages", str(args.messages),
                   "--rounds", str(args.rounds), "--key-bits", str(args.key_bits)]  # fmt: skip
        done = subprocess.run(command, cwd=tree, env=dict(os.environ, PYTHONSAFEPATH="1"))
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
