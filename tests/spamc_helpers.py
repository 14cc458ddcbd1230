"""Helpers for the spamc protocol tests: spamd as a subprocess with --spamc, Debian's spamc, raw requests.

Nothing of spamd's own is mocked: spamd, spamctl and spamc run as processes,
the raw requests are bytes on a loopback socket.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spamd.frontends.control_protocol import ControlClient
from spamd.model.bayes import Label
from tests.cli_helpers import Result, run_spamctl
from tests.daemon_helpers import HAM_WORDS, SPAM_WORDS, DaemonProcess, make_message, sentences, write_config

SPAMC = shutil.which("spamc")
needs_spamc = pytest.mark.real_program(
    None if SPAMC else "SpamAssassin's spamc client is not installed (Debian package spamc)"
)

TRAINED_EACH = 20


@dataclass
class SpamcDaemon:
    process: DaemonProcess
    port: int
    config: Path
    data: Path
    metrics_port: int = 0  # its /metrics endpoint (tests/test_metrics.py)

    def spamc(self, *args: str, input: bytes = b"", timeout: float = 30.0) -> subprocess.CompletedProcess[bytes]:
        """Debian's spamc against this spamd over TCP (-d 127.0.0.1 -p PORT)."""
        assert SPAMC is not None
        return subprocess.run(
            [SPAMC, "-d", "127.0.0.1", "-p", str(self.port), *args], input=input, capture_output=True, timeout=timeout,
        )  # fmt: skip

    def spamctl(self, *args: str | Path, input: bytes | None = None) -> Result:
        return run_spamctl("--config", self.config, "--data-dir", self.data, *args, input=input)

    def stats(self) -> dict[str, Any]:
        done = self.spamctl("stats", "--json")
        assert done.returncode == 0, done.stderr
        return done.json()

    def classify(self, raw: bytes) -> dict[str, Any]:
        """What `spamctl classify` answers: the same request over the control socket, without a process per call."""
        with ControlClient(self.data / "control.sock", timeout=30) as client:
            return client.request("classify", raw=raw)

    def explain(self, raw: bytes) -> dict[str, Any]:
        done = self.spamctl("explain", "--json", "-", input=raw)
        assert done.returncode == 0, done.stderr
        return done.json()

    def stop(self) -> int:
        self.process.signal(signal.SIGTERM)
        return self.process.wait(30)


def start_spamd(work: Path, spamc_config: str = "", listen: str = "127.0.0.1:0", train: bool = True) -> SpamcDaemon:
    """spamd with the spamc listener on `listen`, trained on TRAINED_EACH messages of each class through spamctl."""
    work.mkdir(parents=True, exist_ok=True)
    config = write_config(work / "spamd.toml", "[spamc]\n" + spamc_config)
    data = work / "data"
    process = DaemonProcess(
        "--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", "--spamc", listen, "--metrics", "127.0.0.1:0"
    )
    try:
        started = process.wait_for("daemon_started")
        daemon = SpamcDaemon(process, started["spamc_port"], config, data, started["metrics_port"])
        if train:
            for label in (Label.SPAM, Label.HAM):
                folder = work / f"train-{label}"
                folder.mkdir(exist_ok=True)
                paths = []
                for i in range(TRAINED_EACH):
                    path = folder / f"{i}.eml"
                    path.write_bytes(make_message(label, i, seed=777))
                    paths.append(path)
                done = daemon.spamctl("train", f"--{label}", *paths)
                assert done.returncode == 0, done.stderr
        return daemon
    except BaseException:
        process.kill()
        raise


def mixed_message(n: int, spam_words: int, ham_words: int, seed: int = 0) -> bytes:
    """A message with `spam_words` words of the spam vocabulary and `ham_words` of the ham one."""
    rng = random.Random(f"mixed-{n}-{seed}")
    words = [rng.choice(SPAM_WORDS) for _ in range(spam_words)] + [rng.choice(HAM_WORDS) for _ in range(ham_words)]
    rng.shuffle(words)
    return (
        f"From: mixed{n}@example.org\nTo: user@example.com\nSubject: note {n}\n"
        f"Message-ID: <mixed-{n}-{seed}@example.org>\n\n{sentences(words)}\n"
    ).encode()


def raw_exchange(port: int, request: bytes, timeout: float = 10.0, half_close: bool = True) -> bytes:
    """Send a request as it is, shut down our side (as spamc and Exim do), read the answer to EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return answer
            answer += chunk


def request(verb: str, body: bytes = b"", version: str = "1.5", headers: dict[str, str] | None = None,
            length: bool = True) -> bytes:  # fmt: skip
    """A request framed as spamc frames it (Content-length of the body unless `length` is False)."""
    head = f"{verb} SPAMC/{version}\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    if length:
        head += f"Content-length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


# Exim's src/spam.c reads spamd's answer with two sscanf formats. In a scanf format a
# white-space character matches any amount of white space (none included), %7s a
# run of up to 7 non-space characters, %lf a float, %*u / %*s skip one.
_SCANF_PIECES = {
    "%7s": r"(\S{1,7})", "%lf": r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", "%*u": r"\d+", "%*s": r"\S+", "%n": r"",
}  # fmt: skip


def _scanf_pattern(fmt: str) -> re.Pattern[bytes]:
    out, i = "", 0
    while i < len(fmt):
        piece = next((p for p in _SCANF_PIECES if fmt.startswith(p, i)), None)
        if piece is not None:
            out += r"\s*" + _SCANF_PIECES[piece] if piece in ("%lf", "%*u", "%*s") else _SCANF_PIECES[piece]
            i += len(piece)
        elif fmt[i].isspace():
            out += r"\s*"
            while i < len(fmt) and fmt[i].isspace():
                i += 1
        else:
            out += re.escape(fmt[i])
            i += 1
    return re.compile(out.encode(), re.DOTALL)


EXIM_FORMATS = (
    _scanf_pattern("SPAMD/%7s 0 EX_OK\r\nContent-length: %*u\r\n\r\n%lf/%lf\r\n%n"),
    _scanf_pattern("SPAMD/%7s 0 EX_OK\r\nSpam: %*s ; %lf / %lf\r\n\r\n%n"),
)


def exim_parse(answer: bytes) -> tuple[float, float, bytes] | None:
    """(score, threshold, report) as Exim's spam.c reads them, or None where Exim defers ("cannot parse")."""
    for pattern in EXIM_FORMATS:
        m = pattern.match(answer)
        if m is not None:
            return float(m.group(2)), float(m.group(3)), answer[m.end() :]
    return None


def stats_counts(stats: dict[str, Any]) -> tuple[int, int, int]:
    return stats["trained_spam"], stats["trained_ham"], stats["ledger_entries"]


# ---------------------------------------------------------------- Exim, unpacked by .ci/unpack-exim

EXIM_ROOT = Path(__file__).resolve().parent.parent / ".ci" / "exim" / "root"
EXIM_USER = "Debian-exim"  # compiled into Debian's exim4; looked up before the config is read


def exim_unavailable() -> str:
    """Why the Exim end-to-end test cannot run here, or "" if it can."""
    if not (EXIM_ROOT / "usr/sbin/exim4").is_file():
        return "Exim not unpacked: run .ci/unpack-exim (Debian's exim4-daemon-heavy cannot be installed beside Postfix)"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "running the unpacked Exim needs root and unshare(1) (a private mount namespace for its system user)"
    return ""


def run_exim(config: str, dialog: bytes, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    """Exim's SMTP dialogue with its ACLs run for real (`exim -bh 127.0.0.1`), on a private configuration.

    Its spool and log go to a fresh directory under /tmp, removed after (Exim gives up
    root for a -C configuration, so they must be reachable by its system user; pytest's
    own directories are not). Debian's exim4 looks up that user before reading any
    configuration; when it is absent (Exim is not installed) it is added to a private
    copy of /etc/passwd and /etc/group, bind-mounted in a mount namespace of its own.
    """
    work = Path(tempfile.mkdtemp(prefix="spamd-exim-", dir="/tmp"))
    try:
        spool, logs = work / "spool", work / "log"
        for d in (work, spool, logs):
            d.mkdir(exist_ok=True)
            d.chmod(0o777)
        conf = work / "exim.conf"
        conf.write_text(
            f"primary_hostname = test.example\nspool_directory = {spool}\nlog_file_path = {logs}/%slog\n" + config
        )
        conf.chmod(0o644)
        libs = f"{EXIM_ROOT}/usr/lib/x86_64-linux-gnu:{EXIM_ROOT}/usr/lib"
        command = f'exec env LD_LIBRARY_PATH="{libs}" "{EXIM_ROOT}/usr/sbin/exim4" -C "{conf}" -bh 127.0.0.1'
        passwd = Path("/etc/passwd").read_text()
        if not re.search(rf"^{EXIM_USER}:", passwd, re.MULTILINE):
            (work / "passwd").write_text(
                passwd.rstrip("\n") + f"\n{EXIM_USER}:x:64999:64999::/nonexistent:/usr/sbin/nologin\n"
            )
            (work / "group").write_text(Path("/etc/group").read_text().rstrip("\n") + f"\n{EXIM_USER}:x:64999:\n")
            command = f'mount --bind "{work}/passwd" /etc/passwd && mount --bind "{work}/group" /etc/group && {command}'
        return subprocess.run(
            ["unshare", "--mount", "sh", "-c", command], input=dialog, capture_output=True, timeout=timeout
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
