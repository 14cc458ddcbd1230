"""Every thread and process but the event loop's yields the CPU to the loop.

The loop answers every client, scores and trains: while it waits, everything
waits. Delivery threads, watchdog's threads and the analysis processes wake
often (an fsync done, an inotify event, a batch to analyze) and, as ordinary
tasks, each wake-up could preempt the loop: under scripts/speed/bench_smtp.py the
loop thread was preempted 2.8 times per message. SCHED_BATCH tasks run just as
much but do not preempt on wake-up. scripts/speed/bench_smtp.py --tree A --tree B,
interleaved rounds of 5,000 messages: the delivery threads and the analysis
process as batch tasks, 509/470/427 -> 544/480/513 msgs/s; watchdog's threads
too, 414/497/446/432 -> 473/488/461/450 (median 439 -> 467).

No privilege is needed to choose SCHED_BATCH for one's own threads. Where the
system refuses or has no such policy the threads run as ordinary ones.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Iterator


def yield_to_the_loop() -> None:
    """Make the calling thread a batch task (and every thread it starts from now on)."""
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is not None:
        _set_policy(batch, 0)


def _policy() -> tuple[int, int] | None:
    """The calling thread's policy and priority, or None where they cannot be read."""
    try:
        return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    except (AttributeError, OSError):
        return None


def _set_policy(policy: int, priority: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, policy, os.sched_param(priority))


@contextlib.contextmanager
def threads_started_here_yield_to_the_loop() -> Iterator[None]:
    """Threads started inside (by a library, as watchdog's observer starts its own) are batch tasks.

    A new thread takes its policy from the thread that starts it: the loop's
    thread is a batch task only while inside, then what it was before, priority
    included (a real-time loop stays real-time).
    """
    before = _policy()
    if before is None:  # nothing to restore it to: leave the loop's thread alone
        yield
        return
    yield_to_the_loop()
    try:
        yield
    finally:
        _set_policy(*before)


def background_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The loop's default executor (deliveries, snapshots, scans): its threads yield to the loop."""
    return concurrent.futures.ThreadPoolExecutor(thread_name_prefix="spamd-background", initializer=yield_to_the_loop)
