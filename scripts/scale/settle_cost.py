"""What settled learning costs on a big Maildir: the queue's memory, a timer tick, the start-up catch-up.

Builds a Maildir of --messages small messages (default 100,000) in a temporary
directory, as spamd would have delivered them (an X-Spam-Status header, Junk mail
flagged): 60% read in INBOX, 10% unread in INBOX, 25% in Junk, 5% in Trash. Then
runs spamd's own classes on it (Mailbox, MaildirWatcher and its Settler, the
Engine on a durable journal, as the daemon does), with an injected clock, nothing
mocked, and measures:

  - the first start's catch-up (every file read: the seen index is empty), and what
    queueing the candidates adds to it;
  - the queue's memory (tracemalloc of the pushes), and the settled marks';
  - the first pass over a full queue of mail younger than settle_after (each file
    stat'ed and queued again for its due time), then an idle tick;
  - settled learning per message (read, analyze, journal fsync, learn) over the first
    --learn candidates, and the longest the event loop was held meanwhile;
  - a restart's catch-up with everything settled, against settled learning off.

    .venv/bin/python scripts/scale/settle_cost.py                 # 100,000 messages, 2,000 learned
    .venv/bin/python scripts/scale/settle_cost.py --messages 20000 --learn 500 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd.config import Config, LogConfig, MaildirConfig, ModelConfig  # noqa: E402
from spamd.engine.engine import Engine  # noqa: E402
from spamd.engine.scoring import Metrics, Scorer  # noqa: E402
from spamd.frontends.maildir.mailbox import Mailbox  # noqa: E402
from spamd.frontends.maildir.seen import SeenIndex, encode_indexes  # noqa: E402
from spamd.frontends.maildir.watcher import MaildirWatcher  # noqa: E402
from spamd.runtime.logs import configure_logging  # noqa: E402
from tests.daemon_helpers import HAM_WORDS, SPAM_WORDS  # noqa: E402

DAY = 86400.0
WORDS = (
    HAM_WORDS
    + SPAM_WORDS
    + [
        "invoice",
        "shipping",
        "order",
        "account",
        "password",
        "reset",
        "holiday",
        "family",
        "weekend",
        "photos",
        "dinner",
        "travel",
    ]
)


def build(maildir: Path, count: int, seed: int = 1) -> dict[str, int]:
    """Write `count` small messages as spamd delivers them; how many of each kind."""
    rng = random.Random(seed)
    for folder in ("", ".Junk", ".Trash"):
        for sub in ("cur", "new", "tmp"):
            (maildir / folder / sub).mkdir(parents=True, exist_ok=True)
    kinds = {"inbox_read": 0, "inbox_unread": 0, "junk": 0, "trash": 0}
    start = int(time.time()) - count
    for n in range(count):
        r = rng.random()
        kind = "inbox_read" if r < 0.6 else "inbox_unread" if r < 0.7 else "junk" if r < 0.95 else "trash"
        kinds[kind] += 1
        spam = kind == "junk"
        status = b"X-Spam-Status: Yes, score=0.99\nX-Spam-Flag: YES\n" if spam else b"X-Spam-Status: No, score=0.02\n"
        body = " ".join(rng.choice(WORDS) for _ in range(60))
        data = (
            status
            + (
                f"From: sender{n % 977}@example.org\nTo: user@example.com\nSubject: {' '.join(rng.sample(WORDS, 4))}\n"
                f"Message-ID: <cost-{n}@example.org>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\n\n{body}\nserial{n}\n"
            ).encode()
        )
        name = f"{start + n}.M{n}P1.cost"
        if kind == "junk":
            path = maildir / ".Junk" / "new" / name
        elif kind == "trash":
            path = maildir / ".Trash" / "cur" / f"{name}:2,S"
        else:
            path = maildir / "cur" / f"{name}:2,{'S' if kind == 'inbox_read' else ''}"
        path.write_bytes(data)
    return kinds


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def watcher_for(engine: Engine, mailbox: Mailbox, config: MaildirConfig, clock: Clock) -> MaildirWatcher:
    scorer = Scorer(engine, Metrics())
    return MaildirWatcher(
        [mailbox], config, score=scorer.score_beside_the_loop, delivered=scorer.scored, learn=scorer.learn,
        ledger_label=engine.trainer.ledger.get, on_error=lambda *a, **k: None, clock=clock,
    )  # fmt: skip


def traced(action) -> tuple[object, int]:
    """`action()` and the bytes it left allocated (tracemalloc)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    result = action()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return result, after - before


async def longest_stall(task: asyncio.Task) -> float:
    """The longest the loop was held while `task` ran: lateness of a 1 ms heartbeat."""
    worst = 0.0
    while not task.done():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - t - 0.001)
    return worst


async def measure(args: argparse.Namespace, top: Path) -> None:
    maildir, data = top / "Maildir", top / "data"
    n = args.messages
    t = time.perf_counter()
    kinds = await asyncio.to_thread(build, maildir, n)
    print(f"built {n:,} messages in {time.perf_counter() - t:.1f} s: {kinds}")
    settle_after = 7 * DAY
    config = Config(
        data_dir=data, model=ModelConfig(hash_bits=20),
        maildir=MaildirConfig(paths=(str(maildir),), watch_inbox=False, fsync=False, settle_after=settle_after),
    )  # fmt: skip
    off = dataclasses.replace(config.maildir, settle_after=0.0)
    data.mkdir()
    engine = Engine.open(config)  # durable: each training fsyncs the journal, as in the daemon
    clock = Clock()
    try:
        mailbox = Mailbox(maildir, off, "user")
        mailbox.ensure_layout()
        watcher = watcher_for(engine, mailbox, off, clock)

        # First start: the index is empty, every file is read (that is the catch-up's own cost).
        t = time.perf_counter()
        await watcher.catch_up(mailbox)
        first = time.perf_counter() - t
        locations = await asyncio.to_thread(mailbox.scan)
        watcher.config = config.maildir
        settler = watcher.settler
        t = time.perf_counter()
        queued = sum(settler.consider(mailbox, loc) for loc in locations)
        consider_s = time.perf_counter() - t
        print(f"\nfirst start: catch-up {first:.2f} s ({watcher.files_read:,} files read); "
              f"queueing the {queued:,} candidates adds {consider_s * 1000:.0f} ms ({consider_s / n * 1e6:.2f} us a file)")  # fmt: skip

        settler.queue.clear()
        _, queue_bytes = traced(lambda: sum(settler.consider(mailbox, loc) for loc in locations))
        print(f"queue memory: {queue_bytes / 2**20:.1f} MiB for {len(settler.queue):,} entries "
              f"({queue_bytes / len(settler.queue):.0f} bytes each)")  # fmt: skip

        # Mail younger than settle_after (a restart of an install with nothing settled yet):
        # the first pass stats every entry and queues it again for its due time; then ticks idle.
        t = time.perf_counter()
        counts = await settler.settle_due()
        young_s = time.perf_counter() - t
        print(f"first pass over {len(settler.queue):,} entries not due: {young_s:.2f} s "
              f"({young_s / len(settler.queue) * 1e6:.1f} us each: stat, queued again) {dict(counts)}")  # fmt: skip
        ticks = 1000
        t = time.perf_counter()
        for _ in range(ticks):
            await settler.settle_due()
        print(f"idle tick with {len(settler.queue):,} queued: {(time.perf_counter() - t) / ticks * 1e6:.1f} us")

        # First start over old mail: everything is due. Learned over the first --learn candidates.
        settler.queue.clear()
        clock.now += 2 * settle_after
        candidates = [loc for loc in sorted(locations, key=lambda loc: loc.name) if settler.consider(mailbox, loc)]
        settler.queue.clear()
        sample = candidates[: args.learn]
        for loc in sample:
            settler.consider(mailbox, loc)
        t = time.perf_counter()
        task = asyncio.create_task(settler.settle_due())
        stall = await longest_stall(task)
        counts = task.result()
        learn_s = time.perf_counter() - t
        per = learn_s / len(sample)
        print(f"\nsettled learning, first {len(sample):,} of {len(candidates):,} due: {learn_s:.2f} s, "
              f"{per * 1000:.2f} ms a message (durable journal) -> {per * len(candidates) / 60:.1f} min for all; "
              f"longest loop stall {stall * 1000:.1f} ms; {dict(counts)}")  # fmt: skip

        # A restart with everything settled: nothing queued, nothing read.
        index = mailbox.index
        # (The list of Nones is the loop, kept so the figure stays comparable with those measured before.)
        _, marks_bytes = traced(lambda: [index.mark_settled(loc.base) for loc in candidates])  # type: ignore[func-returns-value]
        size = len(encode_indexes({"maildirs": {"m": index.export()}, "settled": {"m": index.export_settled()}}))
        plain = len(encode_indexes({"maildirs": {"m": index.export()}}))
        print(f"\nsettled marks: {marks_bytes / 2**20:.1f} MiB in memory for {len(index.settled):,} "
              f"({marks_bytes / max(len(index.settled), 1):.0f} bytes each); index file {plain / 2**20:.1f} -> "
              f"{size / 2**20:.1f} MiB")  # fmt: skip
        rows, flags = index.export(), index.export_settled()
        for label, maildir_config in (("off", off), ("on, all settled", config.maildir)):
            times = []
            for _ in range(3):
                restarted = Mailbox(maildir, maildir_config, "user", SeenIndex.restore(rows, flags))
                again = watcher_for(engine, restarted, maildir_config, clock)
                t = time.perf_counter()
                summary = await again.catch_up(restarted)
                times.append(time.perf_counter() - t)
            print(f"restart catch-up, settled learning {label}: {min(times):.2f} s (best of 3), "
                  f"{summary['read']} read, {summary['settle_queued']} queued")  # fmt: skip
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--learn", type=int, default=2000, help="settled messages learned for the per-message cost")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the Maildir (default: the temp dir)")
    args = parser.parse_args()
    configure_logging(LogConfig(level="warning", format="json"))
    top = Path(tempfile.mkdtemp(prefix="settle-cost-", dir=args.dir))
    try:
        print(f"{sys.version.split()[0]}, {os.cpu_count()} cores, {top}")
        asyncio.run(measure(args, top))
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
