"""Every thread and process the daemon starts, but its event loop's, is a batch task
(spamd/runtime/scheduling.py): delivery threads, watchdog's threads, the analysis process.
A real daemon on this test's loop, a real SMTP delivery and a real helper process."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from spamd.runtime.scheduling import background_executor, threads_started_here_yield_to_the_loop
from tests.core_helpers import PLAIN
from tests.daemon_helpers import daemon_config, files, running, send, smtp_port, wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH on this system")


def policy(thread: threading.Thread) -> int:
    assert thread.native_id is not None
    return os.sched_getscheduler(thread.native_id)


def test_threads_started_inside_are_batch_tasks_and_the_caller_is_itself_again() -> None:
    before = os.sched_getscheduler(0)
    done = threading.Event()
    with threads_started_here_yield_to_the_loop():
        inside = threading.Thread(target=done.wait)
        inside.start()
    outside = threading.Thread(target=done.wait)
    outside.start()
    try:
        assert os.sched_getscheduler(0) == before
        assert policy(inside) == os.SCHED_BATCH
        assert policy(outside) == before
    finally:
        done.set()
        inside.join()
        outside.join()


def test_the_background_executors_threads_are_batch_tasks() -> None:
    with background_executor() as executor:
        policies = {executor.submit(os.sched_getscheduler, 0).result() for _ in range(8)}
    assert policies == {os.SCHED_BATCH}


@pytest.mark.asyncio
async def test_in_a_running_daemon_only_the_loop_is_an_ordinary_task(tmp_path: Path) -> None:
    already = {t.native_id for t in threading.enumerate()}
    config = daemon_config(tmp_path, parser={"processes": 1})
    async with running(config) as daemon:
        analyzers = daemon.analyzers
        assert analyzers is not None
        await wait_until(lambda: all(h.ready for h in analyzers.helpers), timeout=30)
        port = smtp_port(daemon)
        assert await asyncio.to_thread(send, port, PLAIN) == {}
        assert len(files(tmp_path / "Maildir" / "new")) == 1

        started = [t for t in threading.enumerate() if t.native_id not in already]
        # watchdog's inotify reader, emitter and dispatcher, and the thread that delivered
        assert len(started) >= 4, [t.name for t in started]
        assert {t.name: policy(t) for t in started} == {t.name: os.SCHED_BATCH for t in started}
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the loop's own thread
        assert {os.sched_getscheduler(h.process.pid) for h in analyzers.helpers} == {os.SCHED_BATCH}


def test_a_real_time_loop_thread_gets_its_policy_and_priority_back() -> None:
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        pytest.skip("setting SCHED_FIFO needs CAP_SYS_NICE")
    try:
        done = threading.Event()
        with threads_started_here_yield_to_the_loop():
            inside = threading.Thread(target=done.wait)
            inside.start()
        assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == (os.SCHED_FIFO, 1)
        assert policy(inside) == os.SCHED_BATCH
        done.set()
        inside.join()
    finally:
        os.sched_setscheduler(0, before[0], before[1])
