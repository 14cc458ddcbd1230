"""Settled learning end to end: the daemon as a subprocess with a settle_after of a second or two, moves
as an IMAP server makes them, restarts; what settles is learned once, and never what a person undid."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from spamd.model.bayes import Label
from tests.daemon_helpers import (
    DaemonProcess,
    drop,
    folder_files,
    imap_move,
    make_message,
    set_flags,
    wait_until_sync,
    write_config,
)

JUNK, TRASH = ".Junk", ".Trash"


def spamctl(data: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--config", str(config), "--data-dir", str(data), *args],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done


def stats(data: Path, config: Path) -> dict:
    return json.loads(spamctl(data, config, "stats", "--json").stdout)


def find(maildir: Path, folder: str, marker: bytes) -> Path:
    (path,) = [p for p in folder_files(maildir, folder) if marker in p.read_bytes()]
    return path


def settled_lines(daemon: DaemonProcess) -> list[dict]:
    return [e for e in daemon.events("training_applied") if e["source"] == "settled"]


def message_ids(lines: list[dict]) -> list[str]:
    return sorted(e["message_id"].strip("<>").split("@")[0] for e in lines)


@pytest.mark.slow
def test_end_to_end_settled_learning_moves_and_restarts(tmp_path):
    """Non-events are checked with a sentinel: a read message put in INBOX after them, due after them, so
    once it is learned every earlier due time has been dealt with (the queue pops in order of due time).
    """
    settle_s = 1.5
    config = write_config(
        tmp_path / "spamd.toml",
        f"[store]\nsnapshot_interval_s = 3600.0\n[maildir]\nsettle_after = {settle_s}\nsettle_margin = 0.0\n",
    )
    # Every settled label learned (no thick threshold), as the test counts them.
    config.write_text(config.read_text().replace("[model]\n", "[model]\ntrain_margin = inf\n", 1))
    data = tmp_path / "data"
    maildir = data / "Maildir"
    teach = tmp_path / "teach"
    for label in (Label.SPAM, Label.HAM):
        (teach / str(label)).mkdir(parents=True)
        for n in range(12):
            (teach / str(label) / f"{n}.eml").write_bytes(make_message(label, n, seed=999))
    spamctl(data, config, "train", "--spam", str(teach / "spam"))
    spamctl(data, config, "train", "--ham", str(teach / "ham"))
    sentinels = iter(range(50, 60))

    def sentinel() -> str:
        n = next(sentinels)
        drop(maildir, make_message(Label.HAM, n, seed=1), flags="S")
        return f"ham-{n}-1"

    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
    try:
        from tests.daemon_helpers import send

        port = daemon.port
        for n in range(4):  # into INBOX
            send(port, make_message(Label.HAM, n))
        for n in range(3):  # into Junk by spamd's verdict
            send(port, make_message(Label.SPAM, n))
        imap_move(find(maildir, JUNK, b"<spam-2-0@"), maildir, TRASH, "S")  # Junk emptied before it settled
        assert len(folder_files(maildir, JUNK)) == 2 and len(folder_files(maildir)) == 4
        read = set_flags(find(maildir, "", b"<ham-0-0@"), "S")  # read: settles as ham
        set_flags(find(maildir, "", b"<ham-1-0@"), "")  # seen by the client, not read: never learned
        imap_move(find(maildir, "", b"<ham-2-0@"), maildir, TRASH, "S")  # read and thrown away: never learned
        last = sentinel()
        wait_until_sync(lambda: last in message_ids(settled_lines(daemon)), timeout=20)
        lines = settled_lines(daemon)
        assert message_ids(lines) == ["ham-0-0", last, "spam-0-0", "spam-1-0"]
        assert sorted((e["label"], e["folder"], e["outcome"], e["user"]) for e in lines) == [
            ("ham", "INBOX", "learned", False), ("ham", "INBOX", "learned", False),
            ("spam", ".Junk", "learned", False), ("spam", ".Junk", "learned", False),
        ]  # fmt: skip
        assert all(e["age_s"] >= round(settle_s) - 1 for e in lines)

        before = stats(data, config)
        assert before["training_events"] == {"settled:learned": 4}
        assert (before["trained_spam"], before["trained_ham"]) == (12 + 2, 12 + 2)
        text = spamctl(data, config, "stats").stdout.decode()
        assert [line.split()[:2] for line in text.splitlines() if line.strip().startswith("settled")] == [
            ["settled", "4"]
        ]
        metrics_port = daemon.wait_for("daemon_started")["metrics_port"]
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'spamd_trainings_total{label="ham",outcome="learned",source="settled"} 2.0' in scraped
        assert 'spamd_trainings_total{label="spam",outcome="learned",source="settled"} 2.0' in scraped

        # The person changes their mind about the settled ham: corrected, exactly once ...
        in_junk = imap_move(read, maildir, JUNK)
        moved = daemon.wait_for("training_applied", count=5)
        assert (moved["source"], moved["outcome"], moved["message_id"]) == (
            "maildir",
            "corrected",
            "<ham-0-0@example.org>",
        )
        # ... and empties Junk into Trash: the settled spam is neither learned again nor unlearned.
        for path in folder_files(maildir, JUNK):
            if path != in_junk:
                imap_move(path, maildir, TRASH, "S")
        last = sentinel()
        wait_until_sync(lambda: last in message_ids(settled_lines(daemon)), timeout=20)
        after = stats(data, config)
        assert after["training_events"] == {"settled:learned": 5, "maildir:corrected": 1}
        assert (after["trained_spam"], after["trained_ham"]) == (12 + 3, 12 + 2)
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0

        # Down: the unread message is read; older mail arrives (an IMAP APPEND of mail kept elsewhere).
        set_flags(find(maildir, "", b"<ham-1-0@"), "S")
        an_hour_ago = time.time() - 3600
        drop(maildir, make_message(Label.HAM, 7), flags="S", mtime=an_hour_ago)
        drop(maildir, make_message(Label.HAM, 8), folder=".Archive", flags="RS", mtime=an_hour_ago)
        daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        assert daemon.wait_for("maildir_caught_up")["settle_queued"] == 3  # only these: nothing settled before
        wait_until_sync(lambda: len(settled_lines(daemon)) == 3, timeout=20)
        assert message_ids(settled_lines(daemon)) == ["ham-1-0", "ham-7-0", "ham-8-0"]
        assert {e["outcome"] for e in settled_lines(daemon)} == {"learned"}
        again = stats(data, config)
        assert again["training_events"] == {"settled:learned": 3}
        assert (again["trained_spam"], again["trained_ham"]) == (12 + 3, 12 + 5)
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0

        daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        assert daemon.wait_for("maildir_caught_up")["settle_queued"] == 0
        last = sentinel()
        wait_until_sync(lambda: settled_lines(daemon), timeout=20)
        assert message_ids(settled_lines(daemon)) == [last]
        final = stats(data, config)
        assert (final["trained_spam"], final["trained_ham"]) == (12 + 3, 12 + 6)
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        daemon.kill()
