"""The web console's cost: each page's render time with a full history, and the history's memory.

A real Daemon on this process's loop with the console on a loopback port (no helper
processes), a small trained model, and `--entries` verdicts recorded in the history
(200 distinct messages in turn, each way in, each verdict, Subjects kept). The daemon
is made to look a day old with traffic in every minute of the six hours charted and
400 days of live accuracy, the fullest overview and accuracy pages. Each page is
fetched once (templates compiled), then `--rounds` times with aiohttp's client over
loopback after logging in; the median and the worst are printed, in ms. The time is
the server's render plus one loopback round trip (well under a millisecond).

Then the history alone: tracemalloc's count of the bytes it holds after
`--entries` verdicts, each with its own message bytes (about 400 each), and again after
twice as many into the same ring (bounded: the second figure is no larger).

    .venv/bin/python scripts/speed/bench_web.py                    # 100,000 verdicts, 10 rounds
    .venv/bin/python scripts/speed/bench_web.py --entries 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd.config import LogConfig  # noqa: E402
from spamd.model.bayes import Label  # noqa: E402
from spamd.runtime.logs import configure_logging  # noqa: E402
from spamd.web.history import History, HistorySettings  # noqa: E402
from tests.daemon_helpers import daemon_config, make_message, running, train  # noqa: E402
from tests.web_helpers import WebClient  # noqa: E402

WAYS_IN = ("smtp", "milter", "spamc", "maildir")
VERDICTS = ("ham", "spam", "unsure")


def fill(history: History, count: int, raws: list[bytes], distinct: bool = False) -> None:
    """`count` verdicts; `distinct`: each its own message bytes, as real mail is (else the raws shared)."""
    for i in range(count):
        raw = raws[i % len(raws)] + (b"serial %d\n" % i if distinct else b"")
        history.record(raw, i.to_bytes(16, "big"), VERDICTS[i % 3], 0.5, WAYS_IN[i % 4], f"user{i % 7}")


async def page_times(entries: int, rounds: int) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        data = Path(tmp)
        config = daemon_config(
            data, web={"listen": "127.0.0.1:0", "history_entries": entries, "show_subjects": True},
            parser={"processes": 0}, maildir={"delivery_processes": 0},
        )  # fmt: skip
        async with running(config) as d:
            train(d, 5)
            raws = [make_message(Label.SPAM if i % 2 else Label.HAM, i) for i in range(200)]
            fill(d.history, entries, raws)
            engine = d.engine
            assert engine is not None  # started
            engine.started -= 86400
            minute = int(time.time() // 60)
            d.history.minutes = {m: [m % 50, m % 7, m % 30] for m in range(minute - 400, minute + 1)}
            day = int(time.time() // 86400)
            engine.live.days = {
                n: Counter({"scored": 1000 + n % 90, "scored:spam": 700, "missed_spam": n % 5, "false_positive": n % 2,
                            "unsure_resolved_ham": n % 3, "agreed": 9, "trained:spam": 4})
                for n in range(day - 399, day + 1)
            }  # fmt: skip
            newest = d.history.newest(1)[0].id
            deep = max(newest - int(entries * 0.9), 1)
            paths = {
                "overview /": "/",
                "accuracy (400 days)": "/accuracy",
                "history, newest 100": "/history",
                "history, filtered": "/history?verdict=unsure&way_in=spamc",
                f"history, {newest - deep:,} back": f"/history?before={deep}",
                "a verdict's explanation": f"/history/{newest}",
                "train (the form)": "/train",
            }
            async with WebClient(d.web_server.address[1]) as web:
                await web.login_with_token(data)
                timings = {}
                for name, path in paths.items():
                    await web.page(path)
                    samples = []
                    for _ in range(rounds):
                        started = time.perf_counter()
                        await web.page(path)
                        samples.append((time.perf_counter() - started) * 1000)
                    timings[name] = (statistics.median(samples), max(samples))
            return timings


def history_bytes(entries: int) -> tuple[int, int, int]:
    """Bytes held by a History of `entries` after `entries` verdicts and after twice as many; and its length."""
    raws = [make_message(Label.SPAM if i % 2 else Label.HAM, i) for i in range(200)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    history = History(HistorySettings(entries, 32 * 1024 * 1024, 256 * 1024), show_subjects=lambda: True)
    fill(history, entries, raws, distinct=True)
    gc.collect()
    once = tracemalloc.get_traced_memory()[0] - base
    fill(history, entries, raws, distinct=True)
    gc.collect()
    twice = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return once, twice, len(history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))  # fmt: skip
    parser.add_argument("--entries", type=int, default=100_000, help="verdicts in the history (default 100,000)")
    parser.add_argument("--rounds", type=int, default=10, help="timed fetches of each page (default 10)")
    args = parser.parse_args()
    configure_logging(LogConfig(level="warning"))  # the daemon's start and stop lines are not the point

    timings = asyncio.run(page_times(args.entries, args.rounds))
    print(f"page render, {args.entries:,} verdicts in the history, {args.rounds} fetches each (ms):")
    print(f"  {'page':<28} {'median':>8} {'worst':>8}")
    for name, (median, worst) in timings.items():
        print(f"  {name:<28} {median:8.1f} {worst:8.1f}")
    once, twice, length = history_bytes(args.entries)
    print(f"history memory (tracemalloc), ring of {args.entries:,}:")
    print(f"  after {args.entries:,} verdicts: {once / 2**20:.1f} MiB ({once / args.entries:.0f} bytes a verdict, "
          f"the raw messages of the newest within history_message_bytes, 32 MiB, included)")  # fmt: skip
    print(f"  after {2 * args.entries:,} verdicts: {twice / 2**20:.1f} MiB, {length:,} kept")


if __name__ == "__main__":
    main()
