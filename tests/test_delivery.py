"""SMTP deliveries written by a helper process (spamd/frontends/delivery.py): the same files the daemon's
own threads write, their errors answered as a thread's would be, and no message lost when the helper
dies, hangs or cannot start. Real processes, real Maildirs, real signals."""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import signal
import smtplib
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import MaildirConfig
from spamd.frontends.delivery import DeliveryProcesses, DeliveryUnavailable, decode_work, encode_work
from spamd.frontends.maildir.files import write_file
from spamd.frontends.maildir.layout import INBOX, Ownership
from spamd.frontends.maildir.mailbox import Mailbox
from spamd.model.bayes import Label
from tests.daemon_helpers import daemon_config, files, make_message, running, send, smtp_port, train, wait_until
from tests.test_full_disk import fill, tmpfs  # noqa: F401 (a fixture)

MESSAGE = b"From: a@example.org\nSubject: hello\n\nbody\n"


def maildir(where: Path) -> Mailbox:
    mailbox = Mailbox(where / "Maildir", MaildirConfig(), "user")
    assert mailbox.ensure_layout() is None
    return mailbox


async def started(processes: int = 1) -> DeliveryProcesses:
    writers = DeliveryProcesses(processes)
    await writers.start()
    await wait_until(lambda: sum(h.alive and h.ready for h in writers.helpers) >= processes, timeout=30)
    return writers


def snapshot(mailbox: Mailbox) -> dict[str, tuple[bytes, int]]:
    """Every file under the Maildir: its content and mode, by path relative to the root."""
    found = {}
    for path in sorted(mailbox.root.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(mailbox.root))] = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
    return found


@pytest.mark.asyncio
async def test_a_delivery_process_writes_the_files_a_thread_writes(tmp_path: Path) -> None:
    by_helper, by_thread = maildir(tmp_path / "helper"), maildir(tmp_path / "thread")
    deliveries = [
        (folder, f"{n}.M1P1Q{n}.host", MESSAGE + b"%d\n" % n * (n * 300))
        for n, folder in enumerate([INBOX, ".Junk"] * 15)
    ]
    writers = await started()
    try:
        paths = await asyncio.gather(
            *(
                writers.write(by_helper.root, by_helper.ownership, folder, name, data, fsync=True)
                for folder, name, data in deliveries
            )
        )
        assert writers.answered == len(deliveries) and writers.handed_back == 0
    finally:
        await writers.close()
    for folder, name, data in deliveries:
        write_file(by_thread.root, by_thread.ownership, folder, name, data, fsync=True)
    assert paths == [by_helper.folder_dir(folder) / "new" / name for folder, name, _ in deliveries]
    assert snapshot(by_helper) == snapshot(by_thread)
    assert len(files(by_helper.root / ".Junk" / "new")) == 15
    assert not files(by_helper.root / "tmp") and not files(by_helper.root / ".Junk" / "tmp")


@pytest.mark.asyncio
async def test_a_failed_write_comes_back_as_the_threads_error_and_nothing_leaves_the_maildir(tmp_path: Path) -> None:
    mailbox = maildir(tmp_path)
    outside = tmp_path / "elsewhere"
    (outside / "new").mkdir(parents=True)
    (outside / "tmp").mkdir()
    (mailbox.root / ".Linked").symlink_to(outside)  # a user's link, pointing out of their Maildir
    writers = await started()

    async def both(folder: str, name: str, data: bytes) -> tuple[OSError, OSError]:
        with pytest.raises(OSError) as in_thread:
            write_file(mailbox.root, mailbox.ownership, folder, name, data, fsync=True)
        with pytest.raises(OSError) as in_helper:
            await writers.write(mailbox.root, mailbox.ownership, folder, name, data, fsync=True)
        return in_thread.value, in_helper.value

    try:
        await writers.write(mailbox.root, mailbox.ownership, INBOX, "3.x.host", MESSAGE, fsync=True)
        for folder, name in ((".Nope", "1.x.host"), (".Linked", "2.x.host"), (INBOX, "3.x.host")):
            thread_error, helper_error = await both(folder, name, b"other")
            assert type(helper_error) is type(thread_error)
            assert (helper_error.errno, helper_error.strerror, helper_error.filename) == (
                thread_error.errno, thread_error.strerror, thread_error.filename,
            )  # fmt: skip
        missing, linked, taken = [
            (await both(f, n, b"x"))[1]
            for f, n in ((".Nope", "4.x.host"), (".Linked", "5.x.host"), (INBOX, "3.x.host"))
        ]
        assert isinstance(missing, FileNotFoundError) and missing.filename == str(mailbox.root / ".Nope")
        assert linked.strerror is not None
        assert "symbolic link" in linked.strerror and linked.filename == str(mailbox.root / ".Linked")
        assert isinstance(taken, FileExistsError)  # names are unique: a second write of one is refused, not merged
        # Errors are answers, not unavailability: the caller must not write them again in a thread.
        assert writers.handed_back == 0 and all(h.alive for h in writers.helpers)
    finally:
        await writers.close()
    assert not any(p.is_file() for p in outside.rglob("*"))
    assert [p.read_bytes() for p in files(mailbox.root / "new")] == [MESSAGE]


@pytest.mark.asyncio
async def test_a_full_disk_is_answered_enospc(tmp_path: Path, tmpfs: Path) -> None:  # noqa: F811
    mailbox = maildir(tmpfs)
    fill(tmpfs / "filler")
    writers = await started()
    try:
        with pytest.raises(OSError) as full:
            await writers.write(mailbox.root, mailbox.ownership, INBOX, "1.x.host", MESSAGE * 2000, fsync=True)
        assert full.value.errno == errno.ENOSPC
    finally:
        await writers.close()
    assert not files(mailbox.root / "new") and not files(mailbox.root / "tmp")


@pytest.mark.asyncio
async def test_a_hung_delivery_process_is_killed_and_its_messages_are_written_by_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DeliveryProcesses, "answer_timeout_s", 1.0)
    config = daemon_config(tmp_path, maildir={"fsync": True, "delivery_processes": 1})
    async with running(config) as daemon:
        train(daemon)
        writers = daemon.writers
        assert writers is not None
        await wait_until(lambda: writers.helpers and writers.helpers[0].ready, timeout=30)
        stuck = writers.helpers[0]
        stuck.process.send_signal(signal.SIGSTOP)
        port = smtp_port(daemon)
        began = time.monotonic()
        assert await asyncio.to_thread(send, port, make_message(Label.HAM, 1)) == {}
        assert time.monotonic() - began < 5
        assert stuck.process.wait(timeout=5) == -signal.SIGKILL
        assert writers.handed_back == 1
        assert len(files(tmp_path / "Maildir" / "new")) == 1


@pytest.mark.asyncio
async def test_every_message_is_delivered_while_the_delivery_process_is_killed(tmp_path: Path) -> None:
    config = daemon_config(tmp_path, maildir={"fsync": True, "delivery_processes": 1})
    raws = [make_message(Label.SPAM if n % 2 else Label.HAM, n, seed=9) for n in range(80)]
    async with running(config) as daemon:
        train(daemon)
        writers = daemon.writers
        assert writers is not None
        await wait_until(lambda: writers.helpers and writers.helpers[0].ready, timeout=30)
        port = smtp_port(daemon)
        retried = []

        def deliver(raw: bytes) -> None:
            # A message whose helper died after linking it is refused (451: the thread's
            # link finds the name taken) and sent again, as an MTA would.
            for _ in range(3):
                try:
                    assert send(port, raw) == {}
                    return
                except smtplib.SMTPDataError as e:
                    assert e.smtp_code == 451, e
                    retried.append(raw)
            raise AssertionError("refused three times")

        # The clients' own threads: the daemon's executor (on this same loop) is left to its deliveries.
        clients = ThreadPoolExecutor(8)

        async def send_all(chunk: list[bytes]) -> None:
            for raw in chunk:
                await asyncio.get_running_loop().run_in_executor(clients, deliver, raw)

        sending = asyncio.gather(*(send_all(raws[i::8]) for i in range(8)))
        await wait_until(lambda: writers.answered >= 10, timeout=30)
        victim = writers.helpers[0]
        victim.process.send_signal(signal.SIGKILL)
        await sending
        clients.shutdown()
        await wait_until(lambda: any(h.ready and h is not victim for h in writers.helpers), timeout=30)
        assert writers.started_total == 2
    maildir_root = tmp_path / "Maildir"
    delivered = [p.read_bytes() for p in files(maildir_root / "new") + files(maildir_root / ".Junk" / "new")]
    for raw in raws:  # each whole, once, or twice where a 451 made the sender retry
        body = raw.split(b"\n\n", 1)[1]
        copies = sum(data.split(b"\n\n", 1)[1] == body for data in delivered)
        assert 1 <= copies <= 1 + retried.count(raw), raw[:80]
    assert len(delivered) <= len(raws) + len(retried)
    assert not files(maildir_root / "tmp") and not files(maildir_root / ".Junk" / "tmp")


def first_helper_ready(writers: DeliveryProcesses) -> bool:
    return bool(writers.helpers and writers.helpers[0].ready)


@pytest.mark.asyncio
async def test_with_or_without_a_delivery_process_the_maildir_is_the_same(tmp_path: Path) -> None:
    raws = [make_message(Label.SPAM if n % 3 else Label.HAM, n, seed=4) for n in range(24)]
    found = {}
    for processes in (0, 1):
        config = daemon_config(tmp_path / str(processes), maildir={"fsync": True, "delivery_processes": processes})
        async with running(config) as daemon:
            train(daemon)
            writers = daemon.writers
            if processes:
                assert writers is not None
                await wait_until(functools.partial(first_helper_ready, writers), timeout=30)
            else:
                assert writers is None
            port = smtp_port(daemon)
            for raw in raws:
                assert await asyncio.to_thread(send, port, raw) == {}
            if writers is not None:
                assert writers.answered == len(raws)  # every one written by the helper
            index = {base: folder for base, folder, _ in daemon.mailboxes[0].index.export()}
        root = tmp_path / str(processes) / "Maildir"
        contents = {}
        for folder in (INBOX, ".Junk"):
            for path in files((root / folder if folder else root) / "new"):
                contents[path.read_bytes()] = folder
                assert index[path.name] == folder  # recorded where it was written
                assert stat.S_IMODE(path.stat().st_mode) == 0o600
        found[processes] = contents
    assert found[0] == found[1] and len(found[1]) == len(raws)


@pytest.mark.asyncio
async def test_delivery_processes_that_cannot_start_leave_every_delivery_to_the_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spamd.runtime.helper_processes.RESTART_INTERVAL_S", 0.01)
    mailbox = maildir(tmp_path)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    writers = DeliveryProcesses(1)
    await writers.start()
    try:
        deadline = time.monotonic() + 20
        while writers.wanted:
            assert time.monotonic() < deadline, "still starting helpers"
            with pytest.raises(DeliveryUnavailable):
                await writers.write(mailbox.root, mailbox.ownership, INBOX, "x.host", MESSAGE, fsync=False)
            await asyncio.sleep(0.05)
        assert writers.started_total <= 5
    finally:
        await writers.close()


SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # no file name holds one


@settings(max_examples=200, deadline=None)
@given(
    root=st.text(st.characters(exclude_characters="\0", exclude_categories=SURROGATES), min_size=1, max_size=300),
    folder=st.text(st.characters(exclude_characters="\0/", exclude_categories=SURROGATES), max_size=100),
    name=st.text(st.characters(exclude_characters="\0/", exclude_categories=SURROGATES), min_size=1, max_size=200),
    data=st.binary(max_size=5000),
    fsync=st.booleans(),
    ownership=st.none()
    | st.builds(
        Ownership, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 0o7777), st.integers(0, 0o7777)
    ),
)
def test_a_work_frame_carries_every_field_exactly(
    root: str, folder: str, name: str, data: bytes, fsync: bool, ownership: Ownership | None
) -> None:
    assert decode_work(encode_work(Path(root), ownership, folder, name, data, fsync)) == (
        Path(root),
        ownership,
        folder,
        name,
        data,
        fsync,
    )


def test_file_names_that_are_not_utf8_survive_the_frame() -> None:
    name = os.fsdecode(b"1.M2P3.h\xffst")  # a surrogate-escaped byte, as os.fsdecode gives it
    assert decode_work(encode_work(Path("/m"), None, "", name, b"x", True))[3] == name


def test_a_helper_whose_daemon_is_gone_finishes_the_writes_it_started_and_drops_the_rest(tmp_path: Path) -> None:
    # The daemon answered nothing for the queued ones: its senders send them again, so
    # writing them as well would only make second copies.
    import socket
    import subprocess

    from spamd.runtime.helper_processes import frame

    mailbox = maildir(tmp_path)
    ours, theirs = socket.socketpair()
    helper = subprocess.Popen(
        [sys.executable, "-m", "spamd.frontends.delivery", str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    try:
        ours.sendall(frame(b"C", 0))
        assert ours.recv(64).startswith(b"R")
        helper.send_signal(signal.SIGSTOP)  # everything below arrives in one read, then the end of the socket
        works = [
            frame(
                b"W", n, encode_work(mailbox.root, mailbox.ownership, INBOX, f"{n}.x.host", MESSAGE + b"%d\n" % n, True)
            )
            for n in range(1, 201)
        ]
        ours.sendall(b"".join(works))
        ours.shutdown(socket.SHUT_WR)
        helper.send_signal(signal.SIGCONT)
        assert helper.wait(timeout=30) == 0
    finally:
        if helper.poll() is None:
            helper.kill()
        ours.close()
    written = files(mailbox.root / "new")
    assert len(written) < 200  # (how many started before the end was read depends on the scheduler)
    assert all(path.read_bytes() == MESSAGE + path.name.split(".")[0].encode() + b"\n" for path in written)
    assert not files(mailbox.root / "tmp")
