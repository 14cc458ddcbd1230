"""Power-cut rounds against a real spamd: SIGKILL under SMTP load and `spamctl train`, restart, check.

The long version of tests/test_crash.py (same loop, tests/attack_helpers.py):
each round starts spamd on the same data directory, checks that every message
acknowledged so far is in the Maildir exactly once (or reached the next hop with
--relay), that no partial file sits in new/ or cur/ and that every training
spamctl reported done is in the model; then 8 clients send and spamctl trains
until a SIGKILL at a random moment. Some rounds also leave a torn journal record
or a torn newest snapshot. Ends with every reported training checked against the
ledger. Prints a JSON summary; exit status 1 on the first failed check.

    .venv/bin/python scripts/robustness/crash_rounds.py --rounds 200
    .venv/bin/python scripts/robustness/crash_rounds.py --rounds 50 --relay
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.attack_helpers import CrashRounds, NextHop, maildir_census  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--relay", action="store_true", help="relay mode, with an aiosmtpd next hop in this process")
    parser.add_argument("--no-damage", action="store_true", help="only SIGKILL; no simulated torn journal or snapshot")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="spamd-crash-"))
    started = time.monotonic()
    failed = None
    next_hop = NextHop().__enter__() if args.relay else None
    rounds = CrashRounds(work, clients=args.clients, relay_port=next_hop.port if next_hop else None,
                         seed=args.seed, damage=not args.no_damage)  # fmt: skip
    try:
        for number in range(args.rounds):
            rounds.run_round(number, next_hop)
            if (number + 1) % 10 == 0:
                print(f"round {number + 1}: {json.dumps(rounds.summary())}", file=sys.stderr, flush=True)
        if next_hop is not None:
            daemon, _ = rounds.start()
            try:
                rounds.check(args.rounds, next_hop, daemon.proc.pid)
            finally:
                daemon.kill()
        else:
            rounds.final_check()
    except AssertionError as e:
        failed = str(e)
    finally:
        if next_hop is not None:
            next_hop.__exit__(None, None, None)
    summary = rounds.summary()
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    summary["maildir_tmp_leftovers"] = maildir_census(rounds.maildir).tmp_leftovers
    summary["state_dir_files"] = sorted(p.name for p in rounds.state.iterdir()) if rounds.state.is_dir() else []
    summary["failed"] = failed
    print(json.dumps(summary, indent=2))
    if args.keep or failed:
        print(f"work directory kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
