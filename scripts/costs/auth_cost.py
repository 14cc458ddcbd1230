"""What sender authentication adds to a message's analysis: CPU a message with [auth] on and off, DNS cached.

Signs trec07p-dev messages as scripts/speed/bench_smtp.py --auth does (d=bench.example, an RSA key
of --key-bits, 2048 by default, c=relaxed/relaxed, as 2020s mail is signed; the key and a
DMARC record published by a loopback DNS server in a process of its own), analyzes each once
untimed so the resolver's cache holds every answer, then times `Classifier.analyze` of the
same mail with [auth] enabled and disabled, alternated --rounds times in one process; the best
round of each (CPU time) is the figure, the rest being the machine's noise.

    .venv/bin/python scripts/costs/auth_cost.py                                  # this checkout
    .venv/bin/python scripts/costs/auth_cost.py --tree /tmp/old --tree .         # an A/B of two checkouts

The mail is signed and the DNS server run by this checkout's code, once; each --tree is then
measured in a process of its own with that tree's spamd on sys.path first, on the same mail.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINE_END = re.compile(rb"\r\n|\n|\r(?!\n)")  # smtplib's


def measure(tree: Path, work: Path, rounds: int) -> None:
    """Time the tree's analysis of the mail in `work`, with each setting's config there."""
    sys.path[:0] = [str(tree)]  # the tree's spamd first
    from spamd.config import load_config
    from spamd.learning.classifier import Classifier

    mail, described = pickle.loads((work / "mail.pickle").read_bytes())
    classifiers = {
        setting: Classifier(load_config(work / f"{setting}.toml"), None)  # type: ignore[arg-type]  # analysis only
        for setting in ("off", "on")
    }
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
    print(f"{tree}: {len(mail)} messages {described}, analysis CPU a message (best of {rounds}): [auth] off "
          f"{best['off']:.3f} ms, on {best['on']:.3f} ms; authentication adds {best['on'] - best['off']:.3f} ms "
          f"({best['on'] / best['off']:.2f}x)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--key-bits", type=int, default=2048, help="the test key's RSA size")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout whose spamd is measured")
    parser.add_argument("--in-tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_tree is not None:
        measure(args.in_tree, args.work, args.rounds)
        return 0
    sys.path.insert(0, str(ROOT))
    from scripts.speed.bench_smtp import DEFAULT_INDEX, SignedMail, read_corpus

    work = Path(tempfile.mkdtemp(prefix="spamd-auth-cost-"))
    signed = SignedMail(work, args.key_bits)
    try:
        rows = read_corpus(DEFAULT_INDEX)[1000 : 1000 + args.messages]
        mail = [_LINE_END.sub(b"\r\n", signed.sign(raw)) for _, raw in rows]  # every line end CRLF, as SMTP brings it
        described = f"signed by a {args.key_bits}-bit key, c=relaxed/relaxed"
        (work / "mail.pickle").write_bytes(pickle.dumps((mail, described)))
        for setting in ("off", "on"):
            (work / f"{setting}.toml").write_text(signed.section(setting))
        for tree in [t.resolve() for t in args.tree or [ROOT]]:
            command = [sys.executable, __file__, "--in-tree", str(tree), "--work", str(work),
                       "--rounds", str(args.rounds)]  # fmt: skip
            done = subprocess.run(command, cwd=tree, env=dict(os.environ, PYTHONSAFEPATH="1"))
            if done.returncode != 0:
                return done.returncode
    finally:
        signed.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
