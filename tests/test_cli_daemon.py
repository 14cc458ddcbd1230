"""spamctl against a running daemon: found by its data directory, talking over the control socket, and
a killed daemon's stale socket handled; talking to one, it imports neither the model nor the parser."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spamd import __version__
from spamd.frontends.control_protocol import ControlClient, ControlError
from tests.cli_helpers import HAM, SPAM, run_spamctl, wait_until, write_maildir


class RunningDaemon:
    """`python -m spamd` as a subprocess, with its log in a file; stopped with SIGTERM (bounded)."""

    def __init__(self, *args: str | Path, log: Path):
        self.log = log
        self._log_file = open(log, "wb")  # noqa: SIM115  the daemon's output for its life: closed by stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spamd", *map(str, args), "--smtp", "127.0.0.1:0"],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def wait_answering(self, socket_path: Path) -> None:
        wait_until(lambda: answers(socket_path) or self.process.poll() is not None, timeout=30)
        assert self.process.poll() is None, f"spamd exited: {self.log.read_text()}"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log_file.close()


def answers(socket_path: Path) -> bool:
    try:
        with ControlClient(socket_path, timeout=5) as client:
            return bool(client.request("ping"))
    except ControlError:
        return False


@pytest.mark.slow
def test_spamctl_drives_a_running_daemon_found_by_data_dir(home: Path) -> None:
    data = home / "data"
    daemon = RunningDaemon("--data-dir", data, log=home / "spamd.log")
    try:
        daemon.wait_answering(data / "control.sock")
        stats = run_spamctl("--data-dir", data, "stats", "--json")
        assert stats.returncode == 0, stats.stderr
        assert stats.json()["mode"] == "daemon" and stats.json()["daemon"]["pid"] == daemon.process.pid
        assert stats.json()["uptime_s"] > 0 and stats.json()["version"] == __version__

        junk = write_maildir(home / "Junk", SPAM)
        inbox = write_maildir(home / "Inbox", HAM)
        trained = run_spamctl("--data-dir", data, "train", "--spam", junk, "--json")
        assert trained.returncode == 0, trained.stderr
        assert trained.json()["mode"] == "daemon" and trained.json()["learned"] == len(SPAM)
        assert run_spamctl("--data-dir", data, "train", "--ham", inbox, "--json").json()["learned"] == len(HAM)
        assert run_spamctl("--data-dir", data, "train", "--spam", junk, "--json").json()["skipped_repeat"] == len(SPAM)

        probe = b"From: x@y.example\nSubject: free cash prize\n\nclick now for free money\n"
        classified = run_spamctl("--data-dir", data, "classify", "-", "--json", input=probe)
        assert classified.returncode == 0 and classified.json()["verdict"] == "spam"
        explained = run_spamctl("--data-dir", data, "explain", "-", input=probe)
        assert explained.returncode == 0 and "toward spam" in explained.stdout

        snapshot = run_spamctl("--data-dir", data, "snapshot", "--json")
        assert snapshot.returncode == 0, snapshot.stderr
        assert Path(snapshot.json()["path"]).exists()
        reloaded = run_spamctl("--data-dir", data, "reload", "--json")
        assert reloaded.returncode == 0 and reloaded.json()["ok"] is True

        table = run_spamctl("--data-dir", data, "stats")
        assert "spamd running" in table.stdout and "spamctl" in table.stdout  # events by source
        assert f", version {__version__}" in table.stdout.splitlines()[0], table.stdout
        stats = run_spamctl("--data-dir", data, "stats", "--json").json()
        assert (stats["trained_spam"], stats["trained_ham"]) == (len(SPAM), len(HAM))
        assert stats["snapshot_seq"] == stats["journal_seq"] == len(SPAM) + len(HAM)
        assert stats["training_events"]["spamctl:skipped_repeat"] == len(SPAM)
        assert stats["messages_scored"] == 0  # spamctl's questions are not mail scored

        exported = run_spamctl("--data-dir", data, "export", home / "backup.spamd")
        assert exported.returncode == 0, exported.stderr
        run_spamctl("--data-dir", data, "untrain", junk)
        imported = run_spamctl("--data-dir", data, "import", home / "backup.spamd", "--json")
        assert imported.returncode == 0 and imported.json()["trained_spam"] == len(SPAM)
        assert run_spamctl("--data-dir", data, "stats", "--json").json()["trained_spam"] == len(SPAM)
    finally:
        daemon.stop()
    assert not (data / "control.sock").exists()
    # Stopped: spamctl works on the state directly and finds the daemon's training there.
    offline = run_spamctl("--data-dir", data, "stats", "--json").json()
    assert offline["mode"] == "offline" and offline["trained_spam"] == len(SPAM)


@pytest.mark.slow
def test_a_killed_daemon_leaves_a_stale_socket_that_spamctl_and_the_next_daemon_handle(home: Path) -> None:
    args = ("--config", home / "spamd.toml", "--data-dir", home / "data")
    socket_path = home / "data" / "control.sock"
    first = RunningDaemon(*args, log=home / "first.log")
    try:
        first.wait_answering(socket_path)
        message = home / "one.eml"
        message.write_bytes(SPAM[0])
        assert run_spamctl(*args, "train", "--spam", message, "--json").json()["learned"] == 1
        first.kill()  # no shutdown: the socket file stays, the journal holds the training
    finally:
        first.stop()
    assert socket_path.exists() and not answers(socket_path)
    offline = run_spamctl(*args, "stats", "--json")
    assert offline.returncode == 0, offline.stderr
    assert offline.json()["mode"] == "offline" and offline.json()["trained_spam"] == 1

    second = RunningDaemon(*args, log=home / "second.log")
    try:
        second.wait_answering(socket_path)
        stats = run_spamctl(*args, "stats", "--json").json()
        assert stats["mode"] == "daemon" and stats["trained_spam"] == 1
    finally:
        second.stop()


def test_spamctl_talking_to_a_daemon_imports_neither_the_model_nor_the_mail_parser(home: Path) -> None:
    """Its start-up was a third of a second of imports for a request the daemon answers; offline it opens the
    state itself and needs them (and sends the store's warnings to stderr)."""
    from tests.daemon_helpers import DaemonProcess

    probe = (
        "import sys\nfrom spamd.cli import run\ncode = run(sys.argv[1:])\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('spamd.engine', 'spamd.mail', 'numpy', 'structlog')))\n"
        "print('HEAVY', ' '.join(heavy), file=sys.stderr)\nsys.exit(code)\n"
    )

    def imported(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe, "--config", str(home / "spamd.toml"), "--data-dir", str(home / "data"), *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr.split("HEAVY", 1)[1].split()

    assert "spamd.engine.engine" in imported("stats")  # offline: the state opened here
    daemon = DaemonProcess("--config", home / "spamd.toml", "--data-dir", home / "data", "--smtp", "127.0.0.1:0")
    try:
        daemon.wait_for("daemon_started")
        for command in (["stats"], ["users"], ["--json", "users"], ["report"]):
            assert imported(*command) == [], command
    finally:
        daemon.signal(signal.SIGTERM)
        daemon.wait()
