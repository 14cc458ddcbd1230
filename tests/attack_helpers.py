"""Helpers for the tests that attack a real spamd subprocess: power cuts, hostile clients, full disks.

Every message sent carries a unique tag (its Message-ID) and ends with an end
line naming the tag, so a Maildir census can say for each tag how many whole
copies exist and which files are not whole messages. `CrashRounds` is the
power-cut loop shared by tests/test_crash.py and scripts/robustness/crash_rounds.py.
Nothing of spamd's own code is mocked: spamd and spamctl run as processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import signal
import smtplib
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from aiosmtpd.smtp import SMTP

from tests.cli_helpers import SPAMCTL, spamctl_env
from tests.daemon_helpers import HAM_WORDS, SPAM_WORDS, DaemonProcess

_TAG_RE = re.compile(rb"^Message-ID: <([^@>]+)@attack\.test>", re.MULTILINE)
FOLDERS = ("", ".Junk", ".Trash")


def tagged_message(tag: str, spam: bool, words: int = 30, seed: int = 0) -> bytes:
    """A small message (LF line endings) whose Message-ID and last line carry `tag`."""
    rng = random.Random(f"{tag}-{seed}")
    vocabulary = SPAM_WORDS if spam else HAM_WORDS
    body = " ".join(rng.choice(vocabulary) for _ in range(words))
    return (
        f"From: sender@example.org\nTo: user@example.com\nSubject: {rng.choice(vocabulary)} {tag}\n"
        f"Message-ID: <{tag}@attack.test>\n\n{body}\nend {tag}\n"
    ).encode()


def tag_of(data: bytes) -> str | None:
    m = _TAG_RE.search(data)
    return m.group(1).decode() if m else None


def is_whole(data: bytes) -> bool:
    """Does this file hold a complete test message (its own end line last)?"""
    tag = tag_of(data)
    return tag is not None and data.replace(b"\r\n", b"\n").endswith(f"\nend {tag}\n".encode())


@dataclass
class Census:
    copies: Counter[str] = field(default_factory=Counter)  # tag -> whole copies in new/ and cur/
    broken: list[Path] = field(default_factory=list)  # files in new/ or cur/ that are not whole messages
    tmp_leftovers: int = 0  # files in tmp/ (allowed: a delivery cut short never reached new/)


def maildir_census(maildir: Path) -> Census:
    """Every message file of INBOX, .Junk and .Trash (new/ and cur/), read and checked."""
    census = Census()
    for folder in FOLDERS:
        base = maildir / folder if folder else maildir
        for sub in ("new", "cur"):
            directory = base / sub
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                data = path.read_bytes()
                if is_whole(data):
                    census.copies[tag_of(data)] += 1  # type: ignore[index]
                else:
                    census.broken.append(path)
        if (base / "tmp").is_dir():
            census.tmp_leftovers += sum(1 for _ in (base / "tmp").iterdir())
    return census


def spamctl(*args: str | Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPAMCTL, *map(str, args)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=timeout, env=spamctl_env(),
    )  # fmt: skip


# ---------------------------------------------------------------- a next hop for relay mode


class NextHop:
    """A plain aiosmtpd server on its own loop and thread, counting the tags it accepted."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    async def handle_DATA(self, server: SMTP, session: Any, envelope: Any) -> str:
        tag = tag_of(envelope.original_content or b"")
        with self._lock:
            self.received[tag or "?"] += 1
        return "250 OK"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> asyncio.Server:
            return await self._loop.create_server(
                lambda: SMTP(self, hostname="nexthop", loop=self._loop), "127.0.0.1", 0
            )

        self._server = self._loop.run_until_complete(serve())
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError("next hop did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.received)


# ---------------------------------------------------------------- power cuts


CRASH_CONFIG = """\
[model]
hash_bits = 16
[store]
# Snapshots and journal rotations every few hundred ms, so kills land in them too.
snapshot_interval_s = 0.25
journal_max_bytes = 16384
[maildir]
fsync = true
autolearn = false
[log]
format = "json"
"""


@dataclass
class RoundReport:
    sent: int = 0
    acked: int = 0
    refused: Counter[int] = field(default_factory=Counter)  # SMTP codes answered before the kill
    trained_done: int = 0
    trained_unknown: int = 0
    spamctl_runs: Counter[str] = field(default_factory=Counter)  # "daemon", "offline" or "cut off"
    kill_after_s: float = 0.0
    restart_s: float = 0.0
    recovery_problems: list[str] = field(default_factory=list)
    damage: str = ""


class CrashRounds:
    """SIGKILL spamd at random moments under SMTP load and `spamctl train`; check everything after each restart.

    `damage` also simulates what only a power cut (not SIGKILL, which cannot tear a
    single write) leaves behind: a torn record at the journal's tail, and a torn
    newest snapshot, each in some rounds. Neither may lose acknowledged work.
    """

    def __init__(self, work: Path, clients: int = 8, relay_port: int | None = None, seed: int = 0,
                 train_batch: int = 160, damage: bool = True, kill_window: tuple[float, float] = (0.05, 0.5)):  # fmt: skip
        self.work = work
        self.data = work / "data"
        self.maildir = self.data / "Maildir"
        self.state = self.data / "state"
        self.config = work / "spamd.toml"
        text = CRASH_CONFIG
        if relay_port is not None:
            text += f'[smtp]\nmode = "relay"\nnext_hop_port = {relay_port}\nnext_hop_timeout_s = 5.0\n'
        self.config.write_text(text)
        self.messages = work / "train"
        self.messages.mkdir(parents=True, exist_ok=True)
        self.clients = clients
        self.relay = relay_port is not None
        self.rng = random.Random(seed)
        self.train_batch = train_batch
        self.damage = damage
        self.kill_window = kill_window
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.acked: set[str] = set()
        self.trained: dict[str, set[Path]] = {"spam": set(), "ham": set()}  # spamctl said done
        self.maybe_trained: dict[str, set[Path]] = {"spam": set(), "ham": set()}  # spamctl was cut off
        self.reports: list[RoundReport] = []
        self.cut_off_in_model = 0
        self._serial = 0

    def _next_tag(self, kind: str) -> str:
        with self.lock:
            self._serial += 1
            return f"{kind}{self._serial}"

    # ------------------------------------------------------------ one round

    def start(self) -> tuple[DaemonProcess, dict]:
        started_at = time.monotonic()
        daemon = DaemonProcess("--config", self.config, "--data-dir", self.data, "--smtp", "127.0.0.1:0")
        try:
            started = daemon.wait_for("daemon_started", timeout=60)
        except BaseException:
            daemon.kill()
            raise
        started["restart_s"] = time.monotonic() - started_at
        return daemon, started

    def run_round(self, number: int, next_hop: NextHop | None = None) -> RoundReport:
        report = RoundReport()
        daemon, started = self.start()
        try:
            report.restart_s = started["restart_s"]
            report.recovery_problems = list(started.get("recovery_problems") or [])
            self.check(number, next_hop, daemon.proc.pid)
            stop = threading.Event()
            threads = [
                threading.Thread(target=self._client, args=(started["smtp_port"], stop, report))
                for _ in range(self.clients)
            ]
            threads.append(threading.Thread(target=self._trainer, args=(stop, report)))
            for t in threads:
                t.start()
            # Counted from spamctl's first request (its start-up takes longer than the
            # window): the kill then lands among its further requests, deliveries and snapshots.
            daemon.wait_for("control_request_handled", timeout=30)
            report.kill_after_s = self.rng.uniform(*self.kill_window)
            time.sleep(report.kill_after_s)  # a random moment, not a synchronization
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.wait(10)
            stop.set()
            for t in threads:
                t.join(90)
                if t.is_alive():
                    raise AssertionError(f"round {number}: a client or spamctl did not finish within 90 s")
        finally:
            daemon.kill()
        if self.damage:
            report.damage = self._tear(number)
        self.reports.append(report)
        return report

    def _client(self, port: int, stop: threading.Event, report: RoundReport) -> None:
        try:
            client = smtplib.SMTP("127.0.0.1", port, timeout=10)
        except OSError:
            return  # killed before this client connected
        try:
            while not stop.is_set():
                tag = self._next_tag("m")
                message = tagged_message(tag, spam=self.rng.random() < 0.5).replace(b"\n", b"\r\n")
                with self.lock:
                    self.attempted.add(tag)
                    report.sent += 1
                try:
                    client.sendmail("sender@example.org", ["user@example.com"], message)
                except (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused) as e:
                    code = getattr(e, "smtp_code", 0)
                    with self.lock:
                        report.refused[code] += 1
                    return
                except (smtplib.SMTPException, OSError):
                    return  # the daemon died under us: not acknowledged
                with self.lock:
                    self.acked.add(tag)
                    report.acked += 1
        finally:
            with contextlib.suppress(OSError):
                client.close()

    def _trainer(self, stop: threading.Event, report: RoundReport) -> None:
        """`spamctl train` in a loop: a batch of new messages per run, its label alternating."""
        first = True
        while not stop.is_set():
            label = self.rng.choice(("spam", "ham"))
            batch = []
            # The first run is one request, answered before the kill clock starts (so each
            # round has training reported done); later runs are many requests, cut by kills.
            for _ in range(16 if first else self.train_batch):
                tag = self._next_tag("t")
                path = self.messages / f"{tag}.eml"
                path.write_bytes(tagged_message(tag, spam=label == "spam"))
                batch.append(path)
            first = False
            done = spamctl(
                "--config", self.config, "--data-dir", self.data, "train", "--json", f"--{label}", *batch, timeout=60
            )
            result: dict[str, Any] = {}
            if done.returncode == 0:
                result = json.loads(done.stdout)
            with self.lock:
                report.spamctl_runs[result.get("mode", "cut off")] += 1
                if done.returncode == 0 and result.get("learned") == len(batch) and not result.get("error"):
                    self.trained[label].update(batch)
                    report.trained_done += len(batch)
                else:
                    self.maybe_trained[label].update(batch)
                    report.trained_unknown += len(batch)

    # ------------------------------------------------------------ simulated power-cut damage

    def _tear(self, number: int) -> str:
        """Some rounds: leave what a power cut in mid-write would (a torn journal record, a torn snapshot)."""
        done = []
        journals = sorted(self.state.glob("journal-*.log"))
        if journals and number % 3 == 1:
            # The start of a frame whose payload never made it: length and CRC, a few bytes.
            with open(journals[-1], "ab") as f:
                f.write((300).to_bytes(4, "little") + self.rng.randbytes(4 + self.rng.randrange(0, 200)))
            done.append(f"torn journal tail ({journals[-1].name})")
        snapshots = sorted(self.state.glob("snapshot-*.spamd"))
        if len(snapshots) >= 2 and number % 4 == 2:
            newest = snapshots[-1]
            data = newest.read_bytes()
            newest.write_bytes(data[: self.rng.randrange(1, len(data))])
            done.append(f"torn snapshot ({newest.name})")
        return ", ".join(done)

    # ------------------------------------------------------------ the checks after a restart

    def check(self, number: int, next_hop: NextHop | None, daemon_pid: int) -> None:
        """Every acknowledged message there exactly once, nothing partial, every reported training in the model."""
        where = f"after restart {number}"
        census = maildir_census(self.maildir)
        assert not census.broken, f"{where}: partial or foreign files in new/ or cur/: {census.broken[:5]}"
        unknown = set(census.copies) - self.attempted
        assert not unknown, f"{where}: messages nobody sent: {sorted(unknown)[:5]}"
        if self.relay:
            assert not census.copies, f"{where}: relay mode delivered into the Maildir"
            assert next_hop is not None
            received = next_hop.snapshot()
            missing = self.acked - set(received)
            assert not missing, (
                f"{where}: {len(missing)} acknowledged messages never reached the next hop: {sorted(missing)[:5]}"
            )
            twice = [t for t, n in received.items() if n > 1]
            assert not twice, f"{where}: the next hop got these more than once: {twice[:5]}"
        else:
            lost = sorted(t for t in self.acked if census.copies[t] == 0)
            assert not lost, f"{where}: {len(lost)} acknowledged messages lost: {lost[:5]}"
            twice = sorted(t for t, n in census.copies.items() if n > 1)
            assert not twice, f"{where}: messages delivered more than once: {twice[:5]}"
        # The running daemon's own snapshot or index being written right now is no leftover.
        leftovers = [p.name for p in (*self.state.glob(".*.tmp-*"), *self.data.glob(".*.tmp-*"))
                     if not p.name.endswith(f".tmp-{daemon_pid}")]  # fmt: skip
        assert not leftovers, f"{where}: temp files of a cut-short write left behind: {leftovers}"
        done = spamctl("--config", self.config, "--data-dir", self.data, "stats", "--json", timeout=60)
        assert done.returncode == 0, f"{where}: spamctl stats failed: {done.stderr.strip()}"
        stats = json.loads(done.stdout)
        assert stats["mode"] == "daemon", f"{where}: spamctl did not reach the daemon"
        for label in ("spam", "ham"):
            low = len(self.trained[label])
            high = low + len(self.maybe_trained[label])
            assert low <= stats[f"trained_{label}"] <= high, (
                f"{where}: {stats[f'trained_{label}']} {label} in the model; spamctl reported {low} done "
                f"and {high - low} cut off"
            )
        assert stats["ledger_entries"] == stats["trained_spam"] + stats["trained_ham"], (
            f"{where}: ledger and model disagree"
        )
        # Trainings of cut-off spamctl runs that were journaled before the kill (not promised, kept).
        self.cut_off_in_model = stats["ledger_entries"] - sum(len(v) for v in self.trained.values())

    def final_check(self) -> dict[str, int]:
        """Train every reported training again: each must be a repeat, i.e. in the ledger with its label."""
        daemon, _ = self.start()
        try:
            self.check(len(self.reports), None, daemon.proc.pid)
            outcomes: dict[str, int] = {}
            for label in ("spam", "ham"):
                paths = sorted(self.trained[label])
                if not paths:
                    continue
                done = spamctl(
                    "--config",
                    self.config,
                    "--data-dir",
                    self.data,
                    "train",
                    "--json",
                    f"--{label}",
                    *paths,
                    timeout=120,
                )
                assert done.returncode == 0, done.stderr
                result = json.loads(done.stdout)
                assert result["skipped_repeat"] == len(paths), (
                    f"{label}: of {len(paths)} trainings spamctl reported done, only {result['skipped_repeat']} "
                    f"are in the ledger ({result})"
                )
                outcomes[label] = result["skipped_repeat"]
            daemon.signal(signal.SIGTERM)
            assert daemon.wait(30) == 0, "spamd did not stop cleanly after the rounds"
            return outcomes
        finally:
            daemon.kill()

    def summary(self) -> dict[str, Any]:
        reports = self.reports
        problems = [p for r in reports for p in r.recovery_problems]
        return {
            "rounds": len(reports),
            "kills": len(reports),
            "messages_sent": sum(r.sent for r in reports),
            "messages_acknowledged": sum(r.acked for r in reports),
            "refused_before_kill": dict(sum((r.refused for r in reports), Counter())),
            "trainings_reported_done": sum(r.trained_done for r in reports),
            "trainings_cut_off": sum(r.trained_unknown for r in reports),
            "cut_off_trainings_in_model": self.cut_off_in_model,
            "spamctl_runs": dict(sum((r.spamctl_runs for r in reports), Counter())),
            "torn_journal_tails_cut": sum("torn tail" in p for p in problems),
            "damaged_snapshots_skipped": sum("snapshot" in p and "torn tail" not in p for p in problems),
            "damage_injected": sum(bool(r.damage) for r in reports),
            "restart_s_max": round(max((r.restart_s for r in reports), default=0.0), 3),
            "kill_after_s_range": [
                round(min(r.kill_after_s for r in reports), 3),
                round(max(r.kill_after_s for r in reports), 3),
            ]
            if reports
            else [],
        }


# ---------------------------------------------------------------- hostile SMTP clients


class RawClient:
    """A socket speaking (or abusing) SMTP byte by byte: nothing smtplib would tidy up."""

    def __init__(self, port: int, timeout: float = 10.0, greet: bool = True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.greeting = self.reply() if greet else None

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _line(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed by spamd; unread: {self.buffer!r}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.rstrip(b"\r")

    def reply(self) -> tuple[int, bytes]:
        """One (possibly multi-line) reply: its code and its last line."""
        while True:
            line = self._line()
            if len(line) < 4 or line[3:4] != b"-":
                return int(line[:3]), line

    def command(self, line: bytes) -> tuple[int, bytes]:
        self.send(line + b"\r\n")
        return self.reply()

    def closed_by_peer(self) -> bytes:
        """Read to the end of the stream (bounded by the socket timeout); what came before it."""
        rest = self.buffer
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                return rest
            rest += chunk

    def reset(self) -> None:
        """Vanish: close with RST (SO_LINGER 0), as a crashed client host does."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


class WellBehaved:
    """A normal client running beside the abuse: every send timed, every one must succeed.

    By default an smtplib sender that must get 250; `send(tag)` replaces it with
    another protocol's client (it raises on a bad answer).
    """

    def __init__(self, port: int, pause: float = 0.05, send: Callable[[str], None] | None = None):
        self.port = port
        self.pause = pause
        self.send = send or self._send_smtp
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.tags: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._serial = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self._serial += 1
            tag = f"probe{self._serial}"
            started = time.monotonic()
            try:
                self.send(tag)
            except (smtplib.SMTPException, OSError, AssertionError, subprocess.SubprocessError) as e:
                self.failures.append(f"{tag}: {type(e).__name__}: {e}")
            else:
                self.tags.append(tag)
            self.latencies.append(time.monotonic() - started)
            self._stop.wait(self.pause)

    def _send_smtp(self, tag: str) -> None:
        with smtplib.SMTP("127.0.0.1", self.port, timeout=10) as client:
            client.sendmail(
                "probe@example.org", ["user@example.com"], tagged_message(tag, spam=False).replace(b"\n", b"\r\n")
            )

    def __enter__(self) -> WellBehaved:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # At least a few sends beside the abuse, however quick the abuse was.
        deadline = time.monotonic() + 10
        while len(self.latencies) < 3 and time.monotonic() < deadline and self._thread.is_alive():
            self._stop.wait(0.01)
        self._stop.set()
        self._thread.join(30)

    def check(self, minimum: int = 3, limit_s: float = 1.0) -> None:
        assert not self.failures, f"the well-behaved client failed: {self.failures[:3]}"
        assert len(self.latencies) >= minimum, f"only {len(self.latencies)} well-behaved sends"
        slowest = max(self.latencies)
        assert slowest < limit_s, f"a well-behaved send took {slowest:.3f} s (over {limit_s} s)"
