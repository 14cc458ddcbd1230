"""How often CPython's cyclic garbage collector runs in a process that reads mail.

A process-wide setting, called once by each entry point (the daemon, spamctl)
and by each worker or helper process that analyzes messages, so it lives here
rather than beside any one of them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def tune_gc_for_message_streams() -> None:
    """Run CPython's cyclic collector less often; called once by each entry point.

    Each message allocates thousands of short-lived, acyclic objects (tokens,
    lists), so the default gen-0 threshold of 700 runs a collection several
    times per message for nothing: `spamctl eval` on trec07p-dev went
    1,339 -> 1,436 msgs/s with a threshold of 50,000 (as fast as no GC at all).
    """
    gc.set_threshold(50_000, 20, 20)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic collection while a snapshot's state is rebuilt (millions of objects that all stay), and
    that state frozen out of later collections (gc.freeze) rather than scanned by the first one after.

    Each collection run on the way scans every container built so far, and the daemon's state at
    100,000 users with 20 rescued senders each is some 4,000,000 objects (scripts/scale/users_embedded_scale.py,
    docs/users.md; not measured apart from the other start-up changes: with the thresholds above the
    collections are few). Objects that die later still go by refcount; only their cycles would stay.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
