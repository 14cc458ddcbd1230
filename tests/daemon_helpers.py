"""Shared helpers for the daemon tests (SMTP, Maildir, subprocess): configs, messages, waits, moves.

Not a conftest: nothing here applies itself. Everything is real: aiosmtpd on
127.0.0.1 port 0, smtplib, Maildirs in tmp_path, os.rename moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import smtplib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from spamd.config import AuthConfig, Config, MaildirConfig, ModelConfig, SmtpConfig, StoreConfig
from spamd.daemon import Daemon
from spamd.engine.engine import Engine
from spamd.frontends.maildir.layout import FILED_MARK, unique_name
from spamd.frontends.maildir.watcher import MaildirWatcher
from spamd.model.bayes import Label
from tests.cli_helpers import DEADLINE_SLACK

SPAM_WORDS = [
    "viagra",
    "casino",
    "winner",
    "prize",
    "claim",
    "cheap",
    "pills",
    "offer",
    "unsubscribe",
    "bitcoin",
    "lottery",
    "free",
    "money",
    "urgent",
]
HAM_WORDS = [
    "meeting",
    "agenda",
    "minutes",
    "project",
    "review",
    "deadline",
    "lunch",
    "report",
    "schedule",
    "budget",
    "draft",
    "notes",
    "team",
]


T = TypeVar("T")


def wait_until_sync(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Poll `predicate` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout * DEADLINE_SLACK
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"condition not met within {timeout * DEADLINE_SLACK}s: {getattr(predicate, '__name__', predicate)}"
            )
        time.sleep(interval)


async def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01) -> T:  # noqa: ASYNC109  as wait_until_sync; the failure names the condition
    """The same, without blocking the event loop the daemon under test runs on."""
    deadline = time.monotonic() + timeout * DEADLINE_SLACK
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"condition not met within {timeout * DEADLINE_SLACK}s: {getattr(predicate, '__name__', predicate)}"
            )
        await asyncio.sleep(interval)


def daemon_config(data_dir: Path, **sections: dict) -> Config:
    """Small model (fast snapshots), ephemeral SMTP port, timers out of the way; `sections` override."""
    config = Config(
        data_dir=data_dir,
        model=ModelConfig(hash_bits=16),
        store=StoreConfig(snapshot_interval_s=3600.0),
        smtp=SmtpConfig(port=0),
        maildir=MaildirConfig(fsync=False),
        auth=AuthConfig(nameservers=(LOOPBACK_NO_DNS,), dns_budget_s=NO_DNS_BUDGET_S),
    )
    changes = {name: dataclasses.replace(getattr(config, name), **values) for name, values in sections.items()}
    return dataclasses.replace(config, **changes)


LIST_WORDS = ["release", "rpm", "package", "mirror", "update", "changelog", "kernel", "build", "repository", "version"]


def list_digest(n: int, to: str = "readers@example.com") -> bytes:
    """One copy of a mailing list's digest (the kind users disagree on): its own vocabulary and sender, serial `digest{n}`."""
    rng = random.Random(f"digest-{n}-{to}")
    body = sentences([rng.choice(LIST_WORDS) for _ in range(40)])
    return (
        f"From: list@news.example.net\nTo: {to}\nSubject: digest {n}\nList-Id: <news.example.net>\n"
        f"Message-ID: <digest-{n}-{to}>\n\n{body}\ndigest{n}\n"
    ).encode()


def sentences(words: list[str]) -> str:
    """Words as text with a full stop after every tenth: the words the tokenizer finds in it are `words`, and
    no run of 40 is word salad (which [model] salad_tokens weighs as 3 tokens: spamd/mail/hidden.py)."""
    return " ".join(w + "." if i % 10 == 9 else w for i, w in enumerate(words))


def make_message(label: Label, n: int, seed: int = 0) -> bytes:
    """A distinct message (its own Message-ID and a unique token) in the label's vocabulary."""
    rng = random.Random(f"{label}-{n}-{seed}")
    words = SPAM_WORDS if label == Label.SPAM else HAM_WORDS
    body = sentences([rng.choice(words) for _ in range(40)])
    subject = " ".join(rng.choice(words) for _ in range(4))
    return (
        f"From: sender{n}@example.org\n"
        f"To: user@example.com\n"
        f"Subject: {subject}\n"
        f"Message-ID: <{label}-{n}-{seed}@example.org>\n"
        f"\n{body}\nserial{label}{n}x{seed}\n"
    ).encode()


# A started Daemon has these; its attributes are None before start(), so typed Optional.


def engine_of(daemon: Daemon) -> Engine:
    assert daemon.engine is not None, "the daemon is started"
    return daemon.engine


def watcher_of(daemon: Daemon) -> MaildirWatcher:
    assert daemon.watcher is not None, "the daemon is started"
    return daemon.watcher


def smtp_port(daemon: Daemon) -> int:
    """The port the daemon's SMTP listener took."""
    assert daemon.smtp_address is not None, "the daemon is started"
    return daemon.smtp_address[1]


def spamc_port(daemon: Daemon) -> int:
    """The port the daemon's spamc listener took."""
    assert daemon.spamc is not None and daemon.spamc.address is not None, "the daemon is started, with [spamc] listen"
    return daemon.spamc.address[1]


def train(daemon: Daemon, count: int = 20) -> None:
    """Give the model enough of each class for confident verdicts on the vocabularies above."""
    for i in range(count):
        engine_of(daemon).train(make_message(Label.SPAM, i, seed=999), Label.SPAM, "test")
        engine_of(daemon).train(make_message(Label.HAM, i, seed=999), Label.HAM, "test")


@contextlib.asynccontextmanager
async def running(config: Config, **daemon_args: object) -> AsyncIterator[Daemon]:
    """A Daemon started on this test's loop (no signal handlers), shut down after; `daemon_args` such as a clock."""
    daemon = Daemon(config=config, install_signals=False, **daemon_args)  # type: ignore[arg-type]
    try:
        await daemon.startup()
        yield daemon
    finally:
        daemon.request_exit()
        await daemon.shutdown()


def send(port: int, data: bytes, rcpts: list[str] | None = None, sender: str = "sender@example.org") -> dict:
    """One message over SMTP with smtplib (blocking: call via asyncio.to_thread in async tests)."""
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
        return client.sendmail(sender, rcpts or ["user@example.com"], crlf(data))


def crlf(data: bytes) -> bytes:
    """SMTP line endings (smtplib sends bytes as given; a real MTA sends CRLF)."""
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []


# watchdog warns (harmlessly) when a folder created while it runs gets its inotify watch
# added twice; as an error (pyproject) it would kill watchdog's thread.
WATCHDOG_WARNING_IGNORED = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")


def folder_files(maildir: Path, folder: str = "") -> list[Path]:
    """Message files of a folder ("" is INBOX), new/ and cur/."""
    base = maildir / folder if folder else maildir
    return files(base / "new") + files(base / "cur")


def filed(maildir: Path, folder: str = "") -> list[Path]:
    """The folder's message files that spamd filed (scored and moved there)."""
    return [p for p in folder_files(maildir, folder) if FILED_MARK in p.name]


def drop(
    maildir: Path, data: bytes, folder: str = "", sub: str = "new", flags: str | None = None, mtime: float | None = None
) -> Path:
    """Deliver as an MDA does: write in tmp/, rename into new/ (or cur/ with empty flags, or with `flags`).

    `mtime`: when the file arrived, for tests of what happens to mail as it ages.
    """
    base = maildir / folder if folder else maildir
    for d in ("tmp", "new", "cur"):
        (base / d).mkdir(parents=True, exist_ok=True)
    name = unique_name()
    tmp = base / "tmp" / name
    tmp.write_bytes(data)
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    if flags is not None:
        target = base / "cur" / f"{name}:2,{flags}"
    else:
        target = base / sub / (name if sub == "new" else f"{name}:2,")
    os.rename(tmp, target)
    return target


def imap_move(path: Path, maildir: Path, folder: str, flags: str = "S") -> Path:
    """Move a message as an IMAP server does: rename into the other folder's cur/, keeping the base name."""
    base = maildir / folder if folder else maildir
    (base / "cur").mkdir(parents=True, exist_ok=True)
    target = base / "cur" / f"{path.name.split(':', 1)[0]}:2,{flags}"
    os.rename(path, target)
    return target


def set_flags(path: Path, flags: str) -> Path:
    """A flag change: rename inside cur/ (from new/ that is also the new/ -> cur/ move)."""
    target = path.parent.parent / "cur" / f"{path.name.split(':', 1)[0]}:2,{flags}"
    os.rename(path, target)
    return target


# ---------------------------------------------------------------- the daemon as a subprocess


class DaemonProcess:
    """`python -m spamd` with its JSON log lines collected by a reader thread."""

    def __init__(self, *args: str | Path, python: list[str] | None = None, env: dict[str, str] | None = None, **popen):
        """`python`, `env` and `popen` (user=, group=, ...) run it as another user (tests/dovecot_helpers.py)."""
        import subprocess
        import sys
        import threading

        env = dict(env if env is not None else os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [*(python or [sys.executable]), "-m", "spamd", *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, **popen,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for raw in self.proc.stderr:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def events(self, name: str) -> list[dict]:
        import json

        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == name:
                    found.append(record)
        return found

    def wait_for(self, name: str, count: int = 1, timeout: float = 20.0) -> dict:
        def seen() -> list[dict]:
            if self.proc.poll() is not None and len(self.events(name)) < count:
                self._reader.join(timeout=2)
                if len(self.events(name)) < count:
                    raise AssertionError(
                        f"spamd exited ({self.proc.returncode}) before {name}:\n" + "\n".join(self.lines)
                    )
            return self.events(name)[count - 1 :]

        return wait_until_sync(seen, timeout)[0]

    @property
    def port(self) -> int:
        return self.wait_for("daemon_started")["smtp_port"]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(timeout=5)


# Sender authentication in tests asks only loopback, unless a test brings its own DNS
# server (tests/dns_helpers.py): corpus mail carries real DKIM signatures, and no test may
# ask the internet. Nothing listens on this port, and a look-up gives up after 50 ms: a
# temporary error that authenticates nothing and fails nothing, as with a dead resolver.
LOOPBACK_NO_DNS = "127.0.0.1:9"
NO_DNS_BUDGET_S = 0.05
NO_DNS_SECTION = f'[auth]\nnameservers = ["{LOOPBACK_NO_DNS}"]\ndns_budget_s = {NO_DNS_BUDGET_S}\n'


def write_config(path: Path, text: str = "") -> Path:
    """A TOML config for subprocess tests: small model, JSON logs, DNS on loopback only, plus `text`."""
    auth = "" if "[auth]" in text else NO_DNS_SECTION
    path.write_text('[model]\nhash_bits = 16\n[log]\nformat = "json"\n' + auth + text)
    return path
