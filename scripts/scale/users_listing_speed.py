"""How long `spamctl users` takes, as an admin runs it, at many users in Redis: the command end to end.

Starts a redis-server on loopback (tests/redis_helpers.py) and writes --users summary lines
straight into the users' summary hash (each user with 20 senders, 20 turned to the inbox,
60 messages held: what scripts/scale/users_scale.py builds with the real move script in 500 s;
the listing reads only these lines). Then, for each --tree (default: this checkout), starts
`python -m spamd` from that tree on that Redis and times `spamctl users` there (a fresh
process each time: its start-up, the daemon's answer over the control socket, the table
printed to a pipe) --runs times; trees alternate, --rounds times.

    .venv/bin/python scripts/scale/users_listing_speed.py                           # 100,000 users
    .venv/bin/python scripts/scale/users_listing_speed.py --tree /tmp/old --tree .  # an A/B of two checkouts
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd.store.redis.summary import summary_key  # noqa: E402
from tests.redis_helpers import RedisServer  # noqa: E402


def write_lines(client, users: int) -> None:
    expires = int(time.time()) + 400 * 86400
    pipe = client.pipeline(transaction=False)
    key = summary_key("spamd:", "", False)
    for u in range(users):
        pipe.hset(key, f"user{u}@example.com", f"0 0 0 0 20 20 60 {expires} 3:0.8")
        if u % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def time_listing(tree: Path, url: str, runs: int) -> tuple[list[float], float]:
    """`spamctl users` --runs times against a daemon run from `tree`, and one `spamctl stats` (start-up alone)."""
    data = Path(tempfile.mkdtemp(prefix="spamd-listing-"))
    python, spamctl = str(tree / ".venv/bin/python"), str(tree / ".venv/bin/spamctl")
    daemon = subprocess.Popen(
        [python, "-m", "spamd", "--data-dir", str(data), "--redis", url, "--smtp", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree,
    )  # fmt: skip
    try:
        for _ in range(300):  # bounded: 60 s
            if (data / "control.sock").exists():
                break
            time.sleep(0.2)
        ready = subprocess.run([spamctl, "--data-dir", str(data), "stats"], capture_output=True, cwd=tree, timeout=60)
        if b"running" not in ready.stdout:
            raise SystemExit(f"{tree}: no daemon answered: {ready.stderr.decode()[-300:]}")
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            listed = subprocess.run(
                [spamctl, "--data-dir", str(data), "users"], capture_output=True, cwd=tree, timeout=120
            )
            took.append(time.perf_counter() - started)
            if listed.returncode != 0:
                raise SystemExit(f"{tree}: spamctl users failed: {listed.stderr.decode()[-300:]}")
        started = time.perf_counter()
        subprocess.run([spamctl, "--data-dir", str(data), "stats"], capture_output=True, cwd=tree, timeout=60)
        return took, time.perf_counter() - started
    finally:
        daemon.terminate()
        daemon.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout with its own .venv (default: this one)")
    parser.add_argument("--runs", type=int, default=3, help="`spamctl users` runs a round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree or [ROOT]]
    server = RedisServer(Path(tempfile.mkdtemp(prefix="spamd-listing-redis-")), appendfsync="no").start()
    client = server.client()
    try:
        write_lines(client, args.users)
        results: dict[Path, list[float]] = {tree: [] for tree in trees}
        for _ in range(args.rounds):
            for tree in trees:
                took, stats = time_listing(tree, server.url, args.runs)
                results[tree] += took
                print(f"{tree}: spamctl users {' '.join(f'{t:.2f}' for t in took)} s; spamctl stats {stats:.2f} s",
                      flush=True)  # fmt: skip
        for tree, took in results.items():
            print(f"{tree}: {args.users} users, spamctl users median {statistics.median(took):.2f} s, "
                  f"best {min(took):.2f} s, worst {max(took):.2f} s")  # fmt: skip
    finally:
        client.close()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
