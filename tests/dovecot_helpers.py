"""Debian's real Dovecot on loopback for the tests, and running spamd and spamctl as the mail user.

Nothing here mocks Dovecot: `Dovecot` writes a private dovecot.conf (static
passdb and userdb, every mail owned by MAIL_UID:MAIL_GID, an IMAP listener on
a free 127.0.0.1 port, logs in a file; the Maildir location and mailboxes are
docs/dovecot.md's lines, read from it) under a directory of its own, starts
`dovecot -F` and stops it after. The mail uid has no passwd entry, as a
virtual-mail "vmail" uid often has not; Dovecot needs none with a static userdb.

The directory is not under pytest's tmp_path: that is root's alone (0700), and
the mail user's processes (Dovecot's imap, spamd run as that user) must reach it.
"""

from __future__ import annotations

import functools
import imaplib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.cli_helpers import DEADLINE_SLACK
from tests.daemon_helpers import DaemonProcess, wait_until_sync
from tests.doc_snippets import snippet
from tests.ports import free_port

DOVECOT = "/usr/sbin/dovecot"
SIEVEC = "/usr/bin/sievec"
MAIL_UID, MAIL_GID = 5000, 5000
REPO = Path(__file__).resolve().parent.parent
PASSWORD = "secret"

DOVECOT_CONF = """\
base_dir = {top}/run
state_dir = {top}/state
log_path = {top}/dovecot.log
info_log_path = {top}/dovecot-info.log
listen = 127.0.0.1
protocols = imap
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
login_trusted_networks = 127.0.0.0/8
default_internal_user = dovecot
default_internal_group = dovecot
default_login_user = dovenull
first_valid_uid = 1000
{maildir}
passdb {{
  driver = static
  args = password={password}
}}
{userdb}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
{extra}
"""


STATIC_USERDB = """\
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={top}/home/%u
}}"""


def private_dir(prefix: str) -> Path:
    """A short directory under /tmp that other users can traverse (not list: 0711)."""
    top = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(top, 0o711)
    return top


class Dovecot:
    """One `dovecot -F` with a private config; `extra` is appended to dovecot.conf (plugins, IMAPSieve).

    `userdb`: the userdb block (every user exists, by default), formatted with top, uid and gid.
    """

    def __init__(self, top: Path, extra: str = "", userdb: str = STATIC_USERDB):
        self.top = top
        self.port = free_port()
        self.conf = top / "dovecot.conf"
        self.log = top / "dovecot.log"
        (top / "home").mkdir()
        os.chown(top / "home", MAIL_UID, MAIL_GID)
        os.chmod(top / "home", 0o755)
        self.conf.write_text(
            DOVECOT_CONF.format(
                top=top,
                port=self.port,
                uid=MAIL_UID,
                gid=MAIL_GID,
                password=PASSWORD,
                extra=extra,
                userdb=userdb.format(top=top, uid=MAIL_UID, gid=MAIL_GID),
                maildir=snippet("dovecot-maildir.conf").rstrip("\n"),  # docs/dovecot.md's lines, as they are
            )  # fmt: skip
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(self.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

        def listening() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                out = self.proc.stdout.read().decode() if self.proc.stdout else ""
                raise AssertionError(f"dovecot exited ({self.proc.returncode}): {out}\n{self.errors()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until_sync(listening, timeout=20)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def home(self, user: str) -> Path:
        return self.top / "home" / user

    def maildir(self, user: str) -> Path:
        return self.home(user) / "Maildir"

    def imap(self, user: str) -> imaplib.IMAP4:
        # A MOVE into or out of Junk waits for IMAPSieve's spamctl, one process a message:
        # seconds on a machine whose cores are busy, so the slack of every test deadline.
        client = imaplib.IMAP4("127.0.0.1", self.port, timeout=10 * DEADLINE_SLACK)
        client.login(user, PASSWORD)
        return client

    def log_lines(self) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def errors(self) -> list[str]:
        """Every line of Dovecot's log_path (warnings and worse: it holds nothing else) but its own shutdown's."""
        return [line for line in self.log_lines() if "master: Warning: Killed with signal" not in line]


def dovecot_missing() -> str | None:
    if not os.path.exists(DOVECOT):
        return f"{DOVECOT} is not installed (apt-get install dovecot-imapd)"
    if os.geteuid() != 0:
        return "Dovecot with a static mail uid, and spamd run as root and as that uid, need root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to run spamd with the systemd unit's capabilities"
    return None


# ---------------------------------------------------------------- spamd and spamctl as the mail user


def _imports_as(python: list[str], env: dict[str, str], uid: int, gid: int) -> bool:
    probe = "import spamd.daemon, spamd.cli, numpy, msgpack, xxhash, structlog, watchdog.observers, aiosmtpd"
    try:
        done = subprocess.run(
            [*python, "-c", probe], user=uid, group=gid, extra_groups=[], env=env, cwd="/",
            capture_output=True, timeout=60,
        )  # fmt: skip
    except OSError:  # the interpreter itself is out of that user's reach
        return False
    return done.returncode == 0


@functools.cache
def python_for(uid: int, gid: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    """An interpreter (and environment) that runs spamd as uid:gid, or None.

    This interpreter first; when it lives where that user cannot reach (a pyenv
    under /root), the system's python3 of the same version with this venv's
    site-packages on its path (the same compiled extensions serve both).
    """
    env = {k: v for k, v in os.environ.items() if k != "SPAMD_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    candidates = [[sys.executable]]
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system:
        candidates.append([system])
    site = [p for p in sys.path if p.endswith("site-packages")]
    for python in candidates:
        trial = dict(env)
        if python != [sys.executable]:
            trial["PYTHONPATH"] = os.pathsep.join([str(REPO), *site])
        if _imports_as(python, trial, uid, gid):
            return tuple(python), tuple(sorted(trial.items()))
    return None


def as_user(uid: int, gid: int) -> dict:
    """Keyword arguments for DaemonProcess / subprocess that run it as uid:gid with no other groups."""
    found = python_for(uid, gid)
    if found is None:
        raise RuntimeError(f"no Python interpreter can run spamd as uid {uid}")
    python, env = found
    return {"python": list(python), "env": dict(env), "user": uid, "group": gid, "extra_groups": [], "cwd": "/"}


def unit_capabilities_prefix() -> list[str]:
    """setpriv bounding root to config/spamd.service's CapabilityBoundingSet, with no new privileges."""
    unit = (REPO / "config" / "spamd.service").read_text()
    [line] = re.findall(r"^CapabilityBoundingSet=(.*)$", unit, re.M)
    caps = ",".join("+" + cap.removeprefix("CAP_").lower() for cap in line.split())
    return ["setpriv", "--no-new-privs", "--inh-caps=-all", f"--bounding-set=-all,{caps}"]


class Spamd:
    """spamd as a subprocess serving one Maildir, as root or as the mail user; spamctl beside it."""

    def __init__(self, top: Path, maildirs: list[Path], mail_user: bool):
        self.top = top
        self.data = top / "data"
        self.config = top / "spamd.toml"
        self.mail_user = mail_user
        paths = ", ".join(json.dumps(str(m)) for m in maildirs)
        self.config.write_text(
            f'data_dir = "{self.data}"\n[model]\nhash_bits = 16\n[log]\nformat = "json"\n'
            f"[smtp]\nport = 0\n[maildir]\npaths = [{paths}]\nfsync = false\n"
        )
        self.data.mkdir(mode=0o700)
        self.run_as: dict = as_user(MAIL_UID, MAIL_GID) if mail_user else {}
        # As root: only the capabilities config/spamd.service leaves it, as systemd would.
        self.daemon_as: dict = self.run_as or {"python": [*unit_capabilities_prefix(), sys.executable]}
        self.daemon_as = {**self.daemon_as, "umask": 0o077}  # the unit's UMask=
        if mail_user:
            os.chown(self.data, MAIL_UID, MAIL_GID)
            os.chown(self.config, MAIL_UID, MAIL_GID)
        self.process: DaemonProcess | None = None

    def start(self) -> DaemonProcess:
        self.process = DaemonProcess("--config", self.config, **self.daemon_as)
        self.process.wait_for("daemon_started")
        return self.process

    def stop(self) -> None:
        if self.process is not None and self.process.proc.poll() is None:
            self.process.signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    @property
    def smtp_port(self) -> int:
        assert self.process is not None
        return self.process.port

    def spamctl(self, *args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        """spamctl as the same user as the daemon (the control socket admits no one else)."""
        popen = dict(self.run_as)
        python = popen.pop("python", [sys.executable])
        env = popen.pop("env", dict(os.environ))
        return subprocess.run(
            [*python, "-c", "from spamd.cli import main; main()", "--config", str(self.config), *args],
            input=input, capture_output=True, timeout=60, env=env, **popen,
        )  # fmt: skip

    def stats(self) -> dict:
        done = self.spamctl("stats", "--json")
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)

    def training(self) -> dict[str, int]:
        """Training events since start, by "source:outcome" (e.g. "maildir:learned")."""
        return dict(self.stats().get("training_events") or {})


def wait_for_training(spamd: Spamd, expected: dict[str, int], timeout: float = 15.0) -> dict[str, int]:
    """Wait until the daemon's training counts equal `expected` (missing keys count 0)."""
    last: dict[str, int] = {}

    def reached() -> bool:
        nonlocal last
        last = {k: v for k, v in spamd.training().items() if v}
        return last == {k: v for k, v in expected.items() if v}

    try:
        wait_until_sync(reached, timeout=timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(f"training counts {last}, expected {expected}") from None
    return last
