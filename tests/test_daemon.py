"""The daemon as a subprocess: signals (SIGTERM, SIGHUP), restart catch-up, and errors users can cause."""

from __future__ import annotations

import signal
import smtplib
import socket
import subprocess
import sys

import pytest

from spamd.config import load_config
from spamd.engine.engine import Engine
from spamd.model.bayes import Label
from tests.daemon_helpers import (
    NO_DNS_SECTION,
    DaemonProcess,
    folder_files,
    imap_move,
    make_message,
    send,
    wait_until_sync,
    write_config,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def start(tmp_path):
    started: list[DaemonProcess] = []

    def start_daemon(*args) -> DaemonProcess:
        daemon = DaemonProcess(*args)
        started.append(daemon)
        return daemon

    yield start_daemon
    for daemon in started:
        daemon.kill()


def trained(config_file, data_dir) -> tuple[int, int]:
    engine = Engine.open(load_config(config_file, data_dir=data_dir))
    try:
        stats = engine.stats()
        return stats["trained_spam"], stats["trained_ham"]
    finally:
        engine.close()


def test_sigterm_finishes_writes_a_snapshot_and_exits_0(tmp_path, start):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    daemon = start("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    send(daemon.port, make_message(Label.SPAM, 1))
    [delivered] = folder_files(data / "Maildir")
    imap_move(delivered, data / "Maildir", ".Junk")
    learned = daemon.wait_for("training_applied")
    assert learned["label"] == "spam" and learned["outcome"] == "learned" and learned["folder"] == ".Junk"
    scored = daemon.wait_for("message_scored")
    assert {"message_id", "peer", "verdict", "score", "elapsed_ms"} <= set(scored)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert daemon.events("daemon_stopped")
    assert (data / "state" / "snapshot-000000000001.spamd").is_file()
    assert trained(config, data) == (1, 0)


def test_sigterm_lets_a_message_in_flight_finish_and_closes_idle_sessions(tmp_path, start):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    daemon = start("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    message = make_message(Label.HAM, 1).replace(b"\n", b"\r\n")
    busy, idle = (smtplib.SMTP("127.0.0.1", daemon.port, timeout=10) for _ in range(2))
    try:
        idle.ehlo("idle")
        busy.ehlo("busy")
        busy.mail("a@example.org")
        busy.rcpt("user@example.com")
        busy.putcmd("data")
        assert busy.getreply()[0] == 354
        busy.send(message[:100])
        daemon.signal(signal.SIGTERM)
        daemon.wait_for("daemon_stopping")
        busy.send(message[100:] + b".\r\n")
        assert busy.getreply()[0] == 250
        assert len(folder_files(data / "Maildir")) == 1
        assert idle.noop()[0] == 421  # an idle session is told to come back later
    finally:
        busy.close()
        idle.close()
    assert daemon.wait() == 0


def test_sighup_reloads_the_config(tmp_path, start):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    daemon = start("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    daemon.wait_for("daemon_started")
    config.write_text(
        '[model]\nhash_bits = 16\nspam_threshold = 0.95\n[log]\nformat = "json"\nlevel = "warning"\n'
        '[smtp]\nmax_recipients = 3\n[maildir]\njunk_folder = ".Spam"\n' + NO_DNS_SECTION
    )
    daemon.signal(signal.SIGHUP)
    reloaded = daemon.wait_for("config_reloaded")
    assert reloaded["applied"]["model.spam_threshold"][1] == 0.95
    assert reloaded["applied"]["smtp.max_recipients"] == [100, 3]
    restart = daemon.wait_for("config_change_needs_restart")
    assert restart["keys"] == ["maildir.junk_folder"]
    refused = send(daemon.port, make_message(Label.HAM, 1), [f"u{i}@example.com" for i in range(4)])
    assert list(refused) == ["u3@example.com"]
    assert not daemon.events("message_scored")  # log level is now warning
    config.write_text("[model\n")
    daemon.signal(signal.SIGHUP)
    assert "not valid TOML" in daemon.wait_for("config_reload_failed")["error"]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_moves_made_while_down_are_learned_on_restart(tmp_path, start):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    maildir = data / "Maildir"
    daemon = start("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    for i in range(3):
        send(daemon.port, make_message(Label.SPAM, i))
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    for path in folder_files(maildir):
        imap_move(path, maildir, ".Junk")
    daemon = start("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    caught_up = daemon.wait_for("maildir_caught_up")
    assert caught_up["files"] == 3 and caught_up["read"] == 0
    assert [e["phase"] for e in daemon.events("training_applied")] == ["catch_up"] * 3
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert trained(config, data) == (3, 0)


# ---------------------------------------------------------------- errors users cause


def run_once(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spamd", *map(str, args)], capture_output=True, text=True, timeout=60)


def test_bad_config_is_one_clear_line(tmp_path):
    config = tmp_path / "spamd.toml"
    config.write_text('[smtp]\nmode = "bounce"\n')
    result = run_once("--config", config, "--data-dir", tmp_path / "data")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"spamd: {config}: smtp.mode must be 'deliver' or 'relay', got 'bounce'"
    ]


def test_locked_state_is_one_clear_line(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    engine = Engine.open(load_config(config, data_dir=tmp_path / "data"))
    try:
        result = run_once("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    finally:
        engine.close()
    assert result.returncode == 1
    [line] = [x for x in result.stderr.splitlines() if not x.startswith("{")]
    assert line.startswith("spamd: ") and "in use by another process" in line


def test_corrupt_state_is_one_clear_line(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    state = tmp_path / "data" / "state"
    state.mkdir(parents=True)
    (state / "snapshot-000000000005.spamd").write_bytes(b"not a snapshot")
    result = run_once("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    assert result.returncode == 1
    [line] = [x for x in result.stderr.splitlines() if not x.startswith("{")]
    assert line.startswith("spamd: no usable snapshot")


def test_port_in_use_is_one_clear_line(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_once("--config", config, "--data-dir", tmp_path / "data", "--smtp", f"127.0.0.1:{port}")
    assert result.returncode == 1
    [line] = [x for x in result.stderr.splitlines() if not x.startswith("{")]
    assert line.startswith(f"spamd: cannot listen for SMTP on 127.0.0.1:{port}")


def test_wait_until_sync_fails_loudly():
    with pytest.raises(AssertionError, match="not met"):
        wait_until_sync(lambda: False, timeout=0.05)


def test_shipped_config_documents_every_key_with_its_default(tmp_path):
    import dataclasses
    import tomllib
    from pathlib import Path

    from spamd.config import Config

    shipped = Path(__file__).resolve().parents[1] / "config" / "spamd.toml"
    lines = [line[2:] if line.startswith("# ") and " = " in line and not line.startswith("#  ") else line
             for line in shipped.read_text().splitlines()]  # fmt: skip
    uncommented = tmp_path / "uncommented.toml"
    uncommented.write_text("\n".join(lines))
    assert load_config(uncommented) == load_config(None)
    raw = tomllib.loads(uncommented.read_text())
    for f in dataclasses.fields(Config):
        if f.name == "data_dir":
            assert "data_dir" in raw
        else:
            assert set(raw[f.name]) == {g.name for g in dataclasses.fields(getattr(Config(), f.name))}, f.name
