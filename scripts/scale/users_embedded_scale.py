"""What many users' sender state costs in the embedded store: memory, snapshot size, start-up, `spamctl users`.

Opens a daemon's Engine on a fresh state directory (no [redis] url, token_moves off: no token
layers) and, for --users users, counts through the Engine's own sender state
(spamd/people/senders.py) --moves deliveries into Junk and moves out of it for each of
--senders senders per user, so each sender is "rescued" ([users] sender_moves = 3). Then
it writes a snapshot the daemon's way (Engine.snapshot) and, in a fresh process, opens the
Engine on it as the daemon starts (Engine.open: snapshot read, checked, restored) and
answers `spamctl users` (the control operation, in process). It reports the builder's and
the restarted process's resident memory, the snapshot's size, the start-up time, the
`spamctl users` time, and how many pairs the bounds kept.

The Redis figures are scripts/scale/users_scale.py's.

    nice -n 10 .venv/bin/python scripts/scale/users_embedded_scale.py                  # 100,000 users x 20 senders
    nice -n 10 .venv/bin/python scripts/scale/users_embedded_scale.py --users 10000 --max-senders 200000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd.config import load_config  # noqa: E402
from spamd.engine.engine import Engine  # noqa: E402
from spamd.frontends.control import op_users  # noqa: E402
from spamd.frontends.control_protocol import user_rows  # noqa: E402
from spamd.model.bayes import Label  # noqa: E402
from spamd.runtime.gc_tuning import tune_gc_for_message_streams  # noqa: E402


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def config_file(home: Path, max_senders: int | None) -> Path:
    path = home / "spamd.toml"
    path.write_text("" if max_senders is None else f"[users]\nmax_senders = {max_senders}\n")
    return path


def build(home: Path, users: int, senders: int, moves: int) -> dict[str, float]:
    """The state through the Engine's sender state, and its snapshot, as the daemon writes it."""
    engine = Engine.open(load_config(home / "spamd.toml", data_dir=home / "data"), durable=False)
    before = resident_mib()
    started = time.perf_counter()
    state = engine.senders
    for u in range(users):
        user = f"user{u}@example.com"
        for s in range(senders):
            sender = int.from_bytes(hashlib.blake2b(f"{u}:{s}".encode(), digest_size=8).digest(), "big")
            for m in range(moves):
                key = hashlib.blake2b(f"{u}:{s}:{m}".encode(), digest_size=16).digest()
                state.delivered(user, key, (sender,), True)
                state.moved(key, Label.HAM, user, (sender,))
    built = time.perf_counter() - started
    after = resident_mib()
    started = time.perf_counter()
    path = engine.snapshot()
    written = time.perf_counter() - started
    figures = {"build_s": built, "rss_before_mib": before, "rss_built_mib": after, "snapshot_s": written,
               "snapshot_mib": path.stat().st_size / 2**20, "pairs": float(state.pairs() or 0)}  # fmt: skip
    engine.close()
    return figures


def start(home: Path) -> dict[str, float]:
    """A fresh process's start-up on the snapshot, and `spamctl users` there (run with --start)."""
    tune_gc_for_message_streams()  # as the daemon does before it opens the Engine
    before = resident_mib()
    started, cpu = time.perf_counter(), time.process_time()
    engine = Engine.open(load_config(home / "spamd.toml", data_dir=home / "data"), durable=False)
    opened, opened_cpu = time.perf_counter() - started, time.process_time() - cpu
    started = time.perf_counter()
    listed = user_rows(op_users(engine, {})["users"])
    answered = time.perf_counter() - started
    figures = {"start_s": opened, "start_cpu_s": opened_cpu, "rss_empty_mib": before, "rss_started_mib": resident_mib(), "users_s": answered,
               "users_listed": float(len(listed)), "pairs": float(engine.senders.pairs() or 0)}  # fmt: skip
    engine.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=20, help="rescued senders per user")
    parser.add_argument("--moves", type=int, default=3, help="messages moved out of Junk per sender")
    parser.add_argument("--max-senders", type=int, default=None, help="[users] max_senders (default: spamd's)")
    parser.add_argument("--start", type=Path, help=argparse.SUPPRESS)  # the fresh process's part
    args = parser.parse_args()
    if args.start:
        print(json.dumps(start(args.start)))
        return 0
    home = Path(tempfile.mkdtemp(prefix="spamd-users-embedded-"))
    config_file(home, args.max_senders)
    built = build(home, args.users, args.senders, args.moves)
    run = subprocess.run([sys.executable, __file__, "--start", str(home)], capture_output=True, text=True, check=True)
    started = json.loads(run.stdout.strip().splitlines()[-1])
    wanted = args.users * args.senders
    print(f"{args.users} users x {args.senders} senders x {args.moves} moves, max_senders "
          f"{args.max_senders or 'default'}: built in {built['build_s']:.1f} s; pairs kept "
          f"{built['pairs']:.0f} of {wanted}")  # fmt: skip
    print(f"builder resident {built['rss_before_mib']:.0f} -> {built['rss_built_mib']:.0f} MiB; snapshot "
          f"{built['snapshot_mib']:.1f} MiB written in {built['snapshot_s']:.1f} s")  # fmt: skip
    print(f"start-up (Engine.open on it, fresh process) {started['start_s']:.2f} s ({started['start_cpu_s']:.2f} s "
          f"of CPU), resident "
          f"{started['rss_empty_mib']:.0f} -> {started['rss_started_mib']:.0f} MiB; pairs restored "
          f"{started['pairs']:.0f}")  # fmt: skip
    print(f"spamctl users (op_users in process) {started['users_s']:.2f} s, {started['users_listed']:.0f} users listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
