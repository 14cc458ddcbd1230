"""A full or read-only disk under the real daemon: a small tmpfs as its data directory.

Delivery answers 4xx so the sender retries, scoring goes on, training and
snapshots report a clear error, nothing on disk is left corrupt, and when space
returns spamd carries on by itself (the snapshot timer retries) and restarts
cleanly. Needs root (CAP_SYS_ADMIN) to mount; skipped with the reason otherwise.
"""

from __future__ import annotations

import errno
import json
import signal
import smtplib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attack_helpers import maildir_census, spamctl, tagged_message
from tests.daemon_helpers import DaemonProcess, wait_until_sync, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Path]:
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root / CAP_SYS_ADMIN): {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(path: Path) -> int:
    """Write until the file system is full to the last byte; the bytes written.

    Filled only to the last 64 KiB, a small model's snapshot still fitted now and then,
    and the snapshot that was meant to fail was written.
    """
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    written += f.write(b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    return written


class Setup:
    def __init__(self, tmp_path: Path, data: Path, snapshot_interval_s: float = 0.2):
        self.data = data
        self.config = write_config(
            tmp_path / "spamd.toml", f"[store]\nsnapshot_interval_s = {snapshot_interval_s}\n[maildir]\nfsync = true\n"
        )
        self.messages = tmp_path / "messages"
        self.messages.mkdir()
        self.serial = 0

    def start(self) -> DaemonProcess:
        return DaemonProcess("--config", self.config, "--data-dir", self.data, "--smtp", "127.0.0.1:0")

    def ctl(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return spamctl("--config", self.config, "--data-dir", self.data, *args)

    def files(self, spam: bool, n: int) -> list[Path]:
        paths = []
        for _ in range(n):
            self.serial += 1
            path = self.messages / f"t{self.serial}.eml"
            path.write_bytes(tagged_message(f"t{self.serial}", spam=spam))
            paths.append(path)
        return paths

    def train(self, spam: bool, n: int) -> subprocess.CompletedProcess[str]:
        return self.ctl("train", "--json", "--spam" if spam else "--ham", *self.files(spam, n))

    def send(self, port: int, tag: str) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            client.sendmail(
                "a@example.org", ["user@example.com"], tagged_message(tag, spam=True).replace(b"\n", b"\r\n")
            )

    def stats(self) -> dict:
        done = self.ctl("stats", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def refused_code(send, *args) -> int:
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(*args)
    return refused.value.smtp_code


def check_restart_is_clean(setup: Setup, daemon: DaemonProcess, trained: int) -> None:
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, "\n".join(daemon.lines[-10:])
    again = setup.start()
    try:
        started = again.wait_for("daemon_started")
        assert started["recovery_problems"] == []
        assert started["trained_spam"] + started["trained_ham"] == trained
    finally:
        again.kill()
    census = maildir_census(setup.data / "Maildir")
    assert not census.broken and census.tmp_leftovers == 0
    assert all(n == 1 for n in census.copies.values())


def test_full_disk_answers_4xx_keeps_scoring_and_recovers_by_itself(tmp_path, tmpfs):
    # The snapshot due must meet a full disk: with a 0.2 s timer the test had to fill the
    # disk between a training's answer and the timer's next tick, a race that a busy
    # machine lost five times running. A 20 s timer leaves training and filling 20 s.
    setup = Setup(tmp_path, tmpfs / "data", snapshot_interval_s=20.0)
    daemon = setup.start()
    filler = tmpfs / "filler"
    try:
        port = daemon.port
        assert setup.train(spam=True, n=10).returncode == 0 and setup.train(spam=False, n=10).returncode == 0
        setup.send(port, "before")
        # Training just before the disk fills leaves a snapshot due that cannot be written.
        # (Retried if the timer won the race and wrote it before the fill.)
        for _ in range(5):
            assert setup.train(spam=True, n=3).returncode == 0
            fill(filler)
            stats = setup.stats()
            if stats["snapshot_seq"] != stats["journal_seq"]:
                break
            filler.unlink()
        failed = daemon.wait_for("snapshot_failed", timeout=30)
        assert "disk full" in failed["error"]

        # SMTP: 452 4.3.1, so the sender keeps the message and retries.
        assert refused_code(setup.send, port, "while-full") == 452
        # Training: one clear line, non-zero exit. (The journal's last page may still take a
        # record or two: the report says how many were learned before the stop.)
        trained = setup.train(spam=False, n=40)
        assert trained.returncode == 1
        [line] = trained.stderr.strip().splitlines()
        assert line.startswith("spamctl: stopped:") and "disk full" in line, line
        assert json.loads(trained.stdout)["learned"] < 40
        # Snapshot on demand: the same.
        snapshot = setup.ctl("snapshot")
        assert (
            snapshot.returncode == 1
            and "disk full" in snapshot.stderr
            and len(snapshot.stderr.strip().splitlines()) == 1
        )
        # Scoring goes on.
        classify = setup.ctl("classify", "--json", setup.files(spam=True, n=1)[0])
        assert classify.returncode == 0 and json.loads(classify.stdout)["verdict"] == "spam"
        assert daemon.proc.poll() is None

        # Space returns: spamd carries on by itself.
        written = len(daemon.events("snapshot_written"))
        filler.unlink()
        setup.send(port, "after")
        assert setup.train(spam=False, n=2).returncode == 0
        daemon.wait_for("snapshot_written", count=written + 1, timeout=10)  # the timer's retry
        stats = wait_until_sync(lambda: (s := setup.stats())["snapshot_seq"] == s["journal_seq"] and s, timeout=20)
        trained_total = stats["trained_spam"] + stats["trained_ham"]
        check_restart_is_clean(setup, daemon, trained_total)
        copies = maildir_census(setup.data / "Maildir").copies
        assert copies["before"] == copies["after"] == 1 and "while-full" not in copies
    finally:
        daemon.kill()


def test_read_only_disk_answers_4xx_and_carries_on_when_writable(tmp_path, tmpfs):
    # The Maildir on its own file system: remounting it read-only needs no open writer on it
    # (the state's journal is always open for writing; a read-only state is checked at start).
    setup = Setup(tmp_path, tmpfs / "data")
    maildir = setup.data / "Maildir"
    maildir.mkdir(parents=True)
    inner = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(maildir)], capture_output=True, text=True
    )
    assert inner.returncode == 0, inner.stderr
    daemon = setup.start()
    try:
        port = daemon.port
        assert setup.train(spam=True, n=5).returncode == 0 and setup.train(spam=False, n=5).returncode == 0
        setup.send(port, "before")
        remount = subprocess.run(["mount", "-o", "remount,ro", str(maildir)], capture_output=True, text=True)
        assert remount.returncode == 0, remount.stderr
        assert refused_code(setup.send, port, "while-ro") == 451
        classify = setup.ctl("classify", "--json", setup.files(spam=True, n=1)[0])
        assert classify.returncode == 0 and json.loads(classify.stdout)["verdict"] == "spam"
        assert subprocess.run(["mount", "-o", "remount,rw", str(maildir)], capture_output=True).returncode == 0
        setup.send(port, "after")
        assert setup.train(spam=False, n=2).returncode == 0
        stats = setup.stats()
        check_restart_is_clean(setup, daemon, stats["trained_spam"] + stats["trained_ham"])
        copies = maildir_census(maildir).copies
        assert copies["before"] == copies["after"] == 1 and "while-ro" not in copies
    finally:
        daemon.kill()
        subprocess.run(["umount", "-l", str(maildir)], capture_output=True)

    # A read-only state directory at start: one clear line and exit 1, no traceback.
    assert subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True).returncode == 0
    stopped = setup.start()
    try:
        assert stopped.wait(30) == 1
        errors = [line for line in stopped.lines if line.startswith("spamd:")]
        assert len(errors) == 1 and "Read-only file system" in errors[0], stopped.lines[-5:]
        assert not any("Traceback" in line for line in stopped.lines)
    finally:
        stopped.kill()
