"""Debian's real Postfix for the tests, private to one test module, with spamd beside it as a subprocess.

`Postfix` writes a main.cf / master.cf into a directory of its own under /tmp (queue,
data and log there too; removed after), listens on 127.0.0.1 only and relays every message to a `Sink`, a plain
aiosmtpd server that keeps what it got. Its master runs in the foreground as the
test's child, in its own process group, and is stopped with SIGTERM. `Spamd` runs
`python -m spamd` on fixed ports (so a restart after a kill is found at the same
address) over a model trained once. Nothing here mocks Postfix or spamd.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP

from spamd.config import load_config
from spamd.engine.engine import Engine
from spamd.model.bayes import Label
from tests.attack_helpers import NextHop
from tests.daemon_helpers import DaemonProcess, crlf, make_message, wait_until_sync, write_config
from tests.doc_snippets import main_cf_settings, master_cf_services, snippet, with_placeholders
from tests.ports import free_port

POSTFIX = Path("/usr/sbin/postfix")
POSTQUEUE = Path("/usr/sbin/postqueue")
POSTKICK = Path("/usr/sbin/postkick")
SENDMAIL = Path("/usr/sbin/sendmail")
MASTER = Path("/usr/lib/postfix/sbin/master")
DEBIAN_MASTER_CF = Path("/etc/postfix/master.cf")


def postfix_missing() -> str | None:
    """Why Postfix cannot run here (a skip reason), or None."""
    for path in (POSTFIX, POSTQUEUE, POSTKICK, SENDMAIL, MASTER, DEBIAN_MASTER_CF):
        if not path.exists():
            return f"Debian's postfix is not installed ({path} missing; apt-get install postfix)"
    if os.geteuid() != 0:
        return "Postfix's master must start as root (it runs its daemons as mail_owner postfix)"
    try:
        pwd.getpwnam("postfix")
        grp.getgrnam("postdrop")
    except KeyError:
        return "the postfix user or the postdrop group is missing (apt-get install postfix creates them)"
    return None


def postfix_directory() -> Path:
    """A directory the postfix user can reach (queue, data, log), of its own under /tmp.

    Not under pytest's tmp_path: every pytest session start takes /tmp/pytest-of-root
    back to 0700, so a run beside this one would lock Postfix's daemons (which run as
    the postfix user) out of their queue in the middle of the tests.
    """
    directory = Path(tempfile.mkdtemp(prefix="spamd-postfix-"))
    directory.chmod(0o755)
    return directory


class Sink(NextHop):
    """Where Postfix delivers: every message it got, whole, in arrival order."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[bytes] = []

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        with self._lock:
            self.messages.append(envelope.original_content or b"")
        return await super().handle_DATA(server, session, envelope)

    def with_subject(self, marker: str) -> list[bytes]:
        """The messages carrying `marker` (each test's messages carry their own)."""
        with self._lock:
            return [m for m in self.messages if marker.encode() in m]

    def wait_for(self, marker: str, count: int = 1, timeout: float = 20.0) -> list[bytes]:
        wait_until_sync(lambda: len(self.with_subject(marker)) >= count, timeout)
        return self.with_subject(marker)


class Postfix:
    """One private Postfix: smtpd on `smtp_port`, every message relayed to `relay_port`."""

    def __init__(
        self, relay_port: int, main: dict[str, str] | None = None, smtpd_options: str = "", services: str = ""
    ):
        self.dir = postfix_directory()
        self.conf = self.dir / "conf"
        self.queue = self.dir / "queue"
        self.data = self.dir / "data"
        self.log_path = self.dir / "maillog"
        self.smtp_port = free_port()
        self.relay_port = relay_port
        self.main = main or {}
        self.smtpd_options = smtpd_options  # "  -o name=value" lines for the smtpd the tests talk to
        self.services = services  # more master.cf services
        self.proc: subprocess.Popen[bytes] | None = None

    def main_cf(self) -> str:
        settings = {
            "compatibility_level": "3.6",
            "queue_directory": str(self.queue),
            "data_directory": str(self.data),
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": "localhost",
            "mydomain": "localdomain",
            "myorigin": "$myhostname",
            "inet_interfaces": "127.0.0.1",
            "inet_protocols": "ipv4",
            "mydestination": "",
            "local_recipient_maps": "",
            "alias_maps": "",
            "alias_database": "",
            "relay_domains": "example.com",
            "relayhost": f"[127.0.0.1]:{self.relay_port}",
            "mynetworks": "127.0.0.0/8",
            "smtpd_relay_restrictions": "permit_mynetworks, reject",
            "maillog_file": str(self.log_path),
            "maillog_file_prefixes": str(self.dir),
            "smtputf8_enable": "no",
            "smtp_tls_security_level": "none",
            "smtpd_tls_security_level": "none",
            "disable_dns_lookups": "yes",
            "biff": "no",
            # Deferred mail retried within seconds, not minutes, when a test flushes the queue.
            "queue_run_delay": "1s",
            "minimal_backoff_time": "1s",
            "maximal_backoff_time": "2s",
        }
        settings.update(self.main)
        return "".join(f"{key} = {value}\n" for key, value in settings.items())

    def master_cf(self) -> str:
        """Debian's master.cf with nothing chrooted (no chroot jail under tmp) and no public smtpd, plus ours."""
        lines = []
        for line in DEBIAN_MASTER_CF.read_text().splitlines():
            fields = line.split()
            if line[:1].isalnum() and len(fields) >= 8:
                if fields[0] == "smtp" and fields[1] == "inet":
                    continue
                fields[4] = "n"
                line = "  ".join(fields)
            lines.append(line)
        listener = f"127.0.0.1:{self.smtp_port} inet n - n - - smtpd\n"
        return "\n".join(lines) + "\n" + listener + self.smtpd_options + self.services

    def start(self) -> Postfix:
        self.conf.mkdir(exist_ok=True)
        (self.conf / "main.cf").write_text(self.main_cf())
        (self.conf / "master.cf").write_text(self.master_cf())
        self.queue.mkdir(exist_ok=True)
        self.data.mkdir(exist_ok=True)
        shutil.chown(self.data, "postfix")
        # `postfix check` makes the queue's subdirectories with Postfix's owners and modes.
        checked = subprocess.run([POSTFIX, "-c", self.conf, "check"], capture_output=True, text=True, timeout=60)
        if checked.returncode != 0:
            raise AssertionError(f"postfix check failed: {checked.stderr}\n{self.log()}")
        # -d: the master stays in the foreground, our child; its own session so that its
        # SIGTERM handling kills its process group (its daemons), not ours.
        self.proc = subprocess.Popen(
            [MASTER, "-c", self.conf, "-d"], start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        wait_until_sync(self._listening, 20)
        return self

    def _listening(self) -> bool:
        assert self.proc is not None and self.proc.stderr is not None  # stderr=PIPE
        if self.proc.poll() is not None:
            raise AssertionError(
                f"postfix master exited ({self.proc.returncode}): {self.proc.stderr.read()!r}\n{self.log()}"
            )
        try:
            socket.create_connection(("127.0.0.1", self.smtp_port), timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """Stop the master (it takes its daemons with it) and remove the instance's directory."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
        finally:
            if self.proc is not None and self.proc.stderr is not None:
                self.proc.stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def queued(self) -> list[str]:
        """Queue ids of the messages Postfix holds (postqueue -p)."""
        listing = subprocess.run([POSTQUEUE, "-c", self.conf, "-j"], capture_output=True, text=True, timeout=30)
        return [line for line in listing.stdout.splitlines() if line.strip()]

    def flush(self) -> None:
        """Retry now: the deferred queue (postqueue -f) and the maildrop (pickup woken up)."""
        subprocess.run([POSTQUEUE, "-c", self.conf, "-f"], capture_output=True, timeout=30, check=True)
        # (SIGPIPE when pickup is between lives: the master restarts it, and it scans at start.)
        subprocess.run([POSTKICK, "-c", self.conf, "public", "pickup", "W"], capture_output=True, timeout=30)

    def submit(self, data: bytes, rcpt: str = "user@example.com") -> None:
        """One message submitted locally, with Postfix's sendmail(1) (pickup, then non_smtpd_milters)."""
        subprocess.run(
            [SENDMAIL, "-C", self.conf, "-f", "sender@example.org", rcpt],
            input=data,
            capture_output=True,
            timeout=30,
            check=True,
        )

    def send(self, data: bytes, rcpt: str = "user@example.com") -> dict:
        """One message through Postfix's smtpd, as a mail client sends it."""
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30) as client:
            return client.sendmail("sender@example.org", [rcpt], crlf(data))


# ---------------------------------------------------------------- docs/postfix.md's lines, with this instance's ports


def milter_main_cf(milter: str) -> dict[str, str]:
    """docs/postfix.md's main.cf lines for the milter, pointed at `milter` ("inet:127.0.0.1:PORT")."""
    text = with_placeholders(snippet("postfix-milter-main.cf"), {"inet:127.0.0.1:10027": milter})
    return main_cf_settings(text)


def content_filter_master_cf(spamd_port: int, reinject_port: int) -> tuple[str, str]:
    """docs/postfix.md's master.cf lines for the content filter, as (smtpd_options, services).

    The docs' first entry is the public `smtp inet ... smtpd` service with the
    content_filter option added: here the options go under the private instance's own
    smtpd listener (Postfix.master_cf drops Debian's public one). The rest are the
    `spamd` transport and the re-injection listener, as the docs write them.
    """
    text = with_placeholders(
        snippet("postfix-content-filter-master.cf"),
        {"[127.0.0.1]:10025": f"[127.0.0.1]:{spamd_port}", "127.0.0.1:10026 ": f"127.0.0.1:{reinject_port} "},
    )
    public, *services = master_cf_services(text)
    first, _, options = public.partition("\n")
    fields = first.split()
    if fields[:2] != ["smtp", "inet"] or fields[-1] != "smtpd" or not options:
        raise AssertionError(
            f"docs/postfix.md's content filter should start with the smtp inet service and its -o lines: {public!r}"
        )
    return options, "".join(services)


def content_filter_spamd_toml(reinject_port: int) -> str:
    """docs/postfix.md's spamd.toml lines for the content filter (relay mode), re-injecting at `reinject_port`."""
    return with_placeholders(
        snippet("postfix-content-filter-spamd.toml"), {"next_hop_port = 10026": f"next_hop_port = {reinject_port}"}
    )


@contextlib.contextmanager
def running_postfix(relay_port: int, **options: Any) -> Iterator[Postfix]:
    postfix = Postfix(relay_port, **options)
    try:
        yield postfix.start()
    finally:
        postfix.stop()


# ---------------------------------------------------------------- spamd beside it


TRAINED = 20


def message(label: Label, marker: str, n: int = 0, extra_headers: str = "") -> bytes:
    """A test message whose Subject and body carry `marker`, so the sink can find it."""
    base = make_message(label, n, seed=zlib.crc32(marker.encode()) % 1000)
    head, _, body = base.partition(b"\n\n")
    head = head.replace(b"Subject: ", f"Subject: {marker} ".encode(), 1)
    return extra_headers.encode() + head + b"\n\n" + body + f"end {marker}\n".encode()


class Spamd:
    """`python -m spamd` on fixed loopback ports over a data directory trained once; restartable."""

    def __init__(self, directory: Path, config_text: str = "", milter: bool = False):
        self.data = directory / "spamd"
        self.config_path = directory / "spamd.toml"
        self.base_text = config_text
        write_config(self.config_path, config_text)
        self.smtp_port = free_port()
        self.milter_port = free_port() if milter else None
        self.proc: DaemonProcess | None = None
        self._train()

    def _train(self) -> None:
        engine = Engine.open(load_config(self.config_path, data_dir=self.data))
        try:
            for i in range(TRAINED):
                engine.train(make_message(Label.SPAM, i, seed=999), Label.SPAM, "test")
                engine.train(make_message(Label.HAM, i, seed=999), Label.HAM, "test")
            engine.snapshot()
        finally:
            engine.close()

    def start(self) -> Spamd:
        args: list[str | Path] = [
            "--config",
            self.config_path,
            "--data-dir",
            self.data,
            "--smtp",
            f"127.0.0.1:{self.smtp_port}",
        ]
        if self.milter_port is not None:
            args += ["--milter", f"127.0.0.1:{self.milter_port}"]
        self.proc = DaemonProcess(*args, "--metrics", "127.0.0.1:0")
        self.metrics_port = self.proc.wait_for("daemon_started")["metrics_port"]
        return self

    @property
    def process(self) -> DaemonProcess:
        """The daemon's process, once started."""
        assert self.proc is not None, "start() first"
        return self.proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.proc.poll() is None

    def ensure_running(self) -> None:
        if not self.alive():
            if self.proc is not None:
                self.proc.kill()
            self.start()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.alive():
            self.proc.signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.proc.returncode

    def milter_sessions(self) -> int:
        """Milter connections open right now (spamctl stats, over the control socket)."""
        import json

        from tests.attack_helpers import spamctl

        result = spamctl("--config", self.config_path, "--data-dir", self.data, "stats", "--json")
        return int(json.loads(result.stdout)["daemon"]["milter_sessions"]) if result.returncode == 0 else 0

    def events(self, name: str) -> list[dict]:
        return [] if self.proc is None else self.proc.events(name)

    def last_event(self, name: str, timeout: float = 10.0, **fields: object) -> dict:
        """The latest `name` log line with these fields, waited for (the log is read by a thread)."""

        def found() -> list[dict]:
            return [e for e in self.events(name) if all(e.get(k) == v for k, v in fields.items())]

        return wait_until_sync(found, timeout)[-1]

    @contextlib.contextmanager
    def reconfigured(self, text: str) -> Iterator[None]:
        """The running daemon with `text` added to its config (SIGHUP), put back after."""
        assert self.proc is not None
        self._reload(self.base_text + text)
        try:
            yield
        finally:
            if self.alive():
                self._reload(self.base_text)

    @contextlib.contextmanager
    def restarted_with(self, text: str) -> Iterator[None]:
        """spamd restarted with `text` added to its config (for settings a reload does not apply), put back after."""
        self.stop()
        write_config(self.config_path, self.base_text + text)
        self.start()
        try:
            yield
        finally:
            self.stop()
            write_config(self.config_path, self.base_text)
            self.start()

    def _reload(self, text: str) -> None:
        assert self.proc is not None
        before = len(self.proc.events("config_reloaded"))
        write_config(self.config_path, text)
        self.proc.signal(signal.SIGHUP)
        self.proc.wait_for("config_reloaded", count=before + 1)


def watch(threads: list[threading.Thread], timeout: float = 60.0) -> None:
    """Join worker threads within a bound (a stuck one fails the test instead of hanging it)."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"{thread.name} still running after {timeout} s"
