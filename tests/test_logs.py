"""The daemon's log lines: one JSON shape for spamd's events and for aiosmtpd's and
watchdog's stdlib records, a level that changes live, and a log that cannot fail
the delivery that writes it (closed stderr, full disk)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
import structlog

from spamd.config import LogConfig
from spamd.runtime.logs import configure_logging, set_level
from tests.cli_helpers import DEADLINE_SLACK
from tests.daemon_helpers import NO_DNS_SECTION, send


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name in ("mail.log", "watchdog"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_spamd_events_and_stdlib_records_share_one_json_shape(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LogConfig(format="json", level="info"), stream)
    log = structlog.get_logger()
    log.info("message_scored", verdict="ham", delivered_to=["Maildir/new/1"])
    logging.getLogger("mail.log").warning("peer %s misbehaved", "127.0.0.1")
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError as e:
        log.error("smtp_session_failed", exc_info=e)

    scored, foreign, failed = lines(stream)
    assert scored["event"] == "message_scored" and scored["level"] == "info"
    assert scored["verdict"] == "ham" and scored["delivered_to"] == ["Maildir/new/1"]
    assert scored["timestamp"].endswith("Z")
    assert foreign == {
        "event": "peer 127.0.0.1 misbehaved",
        "level": "warning",
        "timestamp": foreign["timestamp"],
        "logger": "mail.log",
    }
    assert failed["level"] == "error" and "ZeroDivisionError: boom" in failed["exception"]


def test_the_level_changes_live_and_chatty_libraries_stay_at_warning(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LogConfig(format="json", level="info"), stream)
    log = structlog.get_logger()  # cached on first use, as every module's logger is
    log.debug("hidden")
    log.info("shown_at_info")
    set_level("debug")  # what SIGHUP does
    log.debug("shown_at_debug")
    logging.getLogger("mail.log").info("every SMTP command")
    set_level("error")
    log.warning("hidden_at_error")
    log.error("shown_at_error")

    assert [line["event"] for line in lines(stream)] == ["shown_at_info", "shown_at_debug", "shown_at_error"]


@pytest.mark.parametrize("broken", ["closed", "full disk"])
def test_a_log_that_cannot_be_written_does_not_fail_the_caller(restore_logging: None, broken: str) -> None:
    if broken == "closed":
        stream: TextIO = io.StringIO()
        stream.close()
    else:
        # Every flush fails with ENOSPC; closed below with that error suppressed, which a `with` would raise.
        stream = open("/dev/full", "w")  # noqa: SIM115  see above
    try:
        configure_logging(LogConfig(format="json"), stream)
        structlog.get_logger().info("message_scored", verdict="spam")
        logging.getLogger("watchdog").error("inotify hiccup")
    finally:
        if not stream.closed:
            with contextlib.suppress(OSError):
                stream.close()


def test_lines_from_many_threads_never_interleave(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LogConfig(format="json"), stream)
    log = structlog.get_logger()
    padding = "x" * 2000

    def spamd_events(n: int) -> None:
        for i in range(200):
            log.info("message_scored", thread=n, i=i, padding=padding)

    def stdlib_records(n: int) -> None:
        for i in range(200):
            logging.getLogger("watchdog").warning("event %d %d %s", n, i, padding)

    threads = [threading.Thread(target=spamd_events if n % 2 else stdlib_records, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    parsed = lines(stream)  # a torn line would not parse
    assert len(parsed) == 8 * 200


_COLOURS = re.compile(rb"\x1b\[[0-9;]*m")


def _read_until(fd: int, wanted: bytes, seen: bytearray, limit_s: float) -> None:
    """Read the pseudo-terminal into `seen` until `wanted` shows in it (colours aside), within limit_s."""
    deadline = time.monotonic() + limit_s * DEADLINE_SLACK
    while wanted not in _COLOURS.sub(b"", bytes(seen)):
        left = deadline - time.monotonic()
        assert left > 0, f"no {wanted!r} within the limit:\n{bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # EIO: the daemon exited, the terminal closed
                raise AssertionError(f"spamd exited before {wanted!r}:\n{bytes(seen)!r}") from None


def test_a_daemon_on_a_terminal_writes_a_messages_control_characters_as_escapes(tmp_path: Path) -> None:
    """spamd in the foreground, its log on a terminal (a pseudo-terminal): console lines in colour, and a
    Message-ID of ESC and BEL sequences (retitle the window, clear the screen) written as \\xNN."""
    config = tmp_path / "spamd.toml"
    config.write_text('[model]\nhash_bits = 16\n[log]\nformat = "auto"\n' + NO_DNS_SECTION)
    terminal, theirs = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "spamd", "--config", str(config), "--data-dir", str(tmp_path / "data"),
         "--smtp", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=theirs,
    )  # fmt: skip
    os.close(theirs)
    seen = bytearray()
    try:
        _read_until(terminal, b"daemon_started", seen, 20)
        _read_until(terminal, b"\n", seen, 5)
        found = re.search(rb"smtp_port=(\d+)", _COLOURS.sub(b"", bytes(seen)))
        assert found, bytes(seen)
        message = b"From: a@b.example\nMessage-ID: <\x1b]0;pwned\x07\x1b[2J@b.example>\nSubject: hi\n\nhello\n"
        send(int(found.group(1)), message)
        _read_until(terminal, b"message_scored", seen, 20)
        _read_until(terminal, b"@b.example>", seen, 5)
        assert _COLOURS.search(bytes(seen)), "no colours: not the console renderer on a terminal"
        assert b"<\\x1b]0;pwned\\x07\\x1b[2J@b.example>" in _COLOURS.sub(b"", bytes(seen)), bytes(seen)
        assert b"\x1b]" not in seen and b"\x07" not in seen and b"\x1b[2J" not in seen, bytes(seen)
    finally:
        process.kill()
        process.wait(10)
        os.close(terminal)
