"""Postfix -> spamd (LMTP) -> Dovecot (LMTP, Sieve, quota) on loopback, as docs/postfix.md and docs/dovecot.md set them up.

`LmtpDovecot` is tests.dovecot_helpers' Dovecot with docs/dovecot.md's LMTP block and
Sieve script (compiled ahead with sievec), a passwd-file userdb naming the users that
exist (an unknown one is refused at RCPT), and a quota plugin for the one user whose
quota is tiny. `LmtpSpamd` runs spamd as the mail user over those users' Maildirs
(`[maildir] root`, so their moves train their own layers) on fixed ports, so a restart
after kill -9 is found where Postfix looks. Nothing here mocks Postfix, Dovecot or spamd.
"""

from __future__ import annotations

import contextlib
import imaplib
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from spamd.config import load_config
from spamd.engine.engine import Engine
from spamd.model.bayes import Label
from tests.daemon_helpers import DaemonProcess, make_message, wait_until_sync
from tests.doc_snippets import main_cf_settings, snippet, with_placeholders
from tests.dovecot_helpers import MAIL_GID, MAIL_UID, SIEVEC, Dovecot, as_user
from tests.ports import free_port
from tests.postfix_helpers import Postfix

USERS = ("alice", "bob", "carol")
OVER_QUOTA = "carol"  # a quota of 1 KiB, and 4 KiB of mail already
DOMAIN = "example.com"

PASSWD_USERDB = """\
userdb {{
  driver = passwd-file
  args = {top}/users
}}"""

# Before docs/dovecot.md's block: its `protocol lmtp` adds sieve to these plugins.
QUOTA = """\
mail_plugins = $mail_plugins quota
plugin {
  quota = maildir:User quota
}
"""


def lmtp_missing() -> str | None:
    for path in ("/usr/lib/dovecot/lmtp", "/usr/lib/dovecot/modules/lib90_sieve_plugin.so", SIEVEC):
        if not os.path.exists(path):
            return f"{path} is missing (apt-get install dovecot-lmtpd dovecot-sieve)"
    return None


class LmtpDovecot(Dovecot):
    """Dovecot with IMAP and docs/dovecot.md's LMTP listener and Sieve script; users alice, bob and carol."""

    def __init__(self, top: Path):
        self.lmtp_port = free_port()
        sieve_dir = top / "sieve"
        sieve_dir.mkdir()
        os.chmod(sieve_dir, 0o755)
        conf = with_placeholders(
            snippet("dovecot-lmtp.conf"),
            {"port = 24": f"port = {self.lmtp_port}", "/etc/dovecot/sieve": str(sieve_dir)},
        )
        lines = []
        for user in USERS:
            quota = "userdb_quota_rule=*:storage=1K" if user == OVER_QUOTA else ""
            lines.append(f"{user}::{MAIL_UID}:{MAIL_GID}::{top}/home/{user}::{quota}\n")
        (top / "users").write_text("".join(lines))
        super().__init__(top, extra=QUOTA + conf, userdb=PASSWD_USERDB)
        (sieve_dir / "spamd-junk.sieve").write_text(snippet("spamd-junk.sieve"))
        compiled = subprocess.run(
            [SIEVEC, "-c", str(self.conf), str(sieve_dir / "spamd-junk.sieve")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert compiled.returncode == 0, compiled.stderr
        for user in USERS:  # the homes spamd serves from its start (Dovecot would make them at the first delivery)
            for path in (self.home(user), self.maildir(user)):
                path.mkdir(mode=0o700)
                os.chown(path, MAIL_UID, MAIL_GID)
        # carol's mailbox already holds more than her 1 KiB quota: any delivery is over it.
        cur = self.maildir(OVER_QUOTA) / "cur"
        cur.mkdir(mode=0o700)
        (cur / "1.filled:2,S").write_bytes(b"Subject: filled\n\n" + b"x" * 4096 + b"\n")
        for path in (cur, cur / "1.filled:2,S"):
            os.chown(path, MAIL_UID, MAIL_GID)

    def processes(self) -> list[int]:
        """The master and every process under it (imap, lmtp, auth...)."""
        assert self.proc is not None
        listing = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True, check=True)
        children: dict[int, list[int]] = {}
        for line in listing.stdout.splitlines():
            pid, ppid = (int(x) for x in line.split())
            children.setdefault(ppid, []).append(pid)
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def freeze(self, frozen: bool) -> None:
        """Stop (SIGSTOP) or resume (SIGCONT) all of Dovecot: a next hop that accepts a connection and says nothing."""
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def folders(self, user: str, marker: str) -> dict[str, int]:
        """Over IMAP: how many messages whose Subject holds `marker` each of INBOX and Junk holds."""
        client = self.imap(user)
        try:
            counts = {}
            for mailbox in ("INBOX", "Junk"):
                status, _ = client.select(mailbox, readonly=True)
                if status != "OK":  # Junk not made yet: nothing filed there
                    counts[mailbox] = 0
                    continue
                status, data = client.search(None, "SUBJECT", f'"{marker}"')
                assert status == "OK"
                counts[mailbox] = len(data[0].split())
            return counts
        finally:
            client.logout()

    def fetch(self, user: str, mailbox: str, marker: str) -> list[bytes]:
        """Over IMAP: the messages in `mailbox` whose Subject holds `marker`, whole."""
        client = self.imap(user)
        try:
            status, _ = client.select(mailbox, readonly=True)
            assert status == "OK", mailbox
            status, data = client.uid("SEARCH", "SUBJECT", f'"{marker}"')
            found = []
            for uid in data[0].split():
                status, parts = client.uid("FETCH", uid.decode(), "(BODY.PEEK[])")
                assert status == "OK"
                found.append(bytes(parts[0][1]))
            return found
        finally:
            client.logout()

    def move(self, user: str, marker: str, source: str, target: str) -> int:
        """Over IMAP, as the user's mail client: UID MOVE every message of `source` whose Subject holds `marker`."""
        client: imaplib.IMAP4 = self.imap(user)
        try:
            status, _ = client.select(source)
            assert status == "OK", source
            status, data = client.uid("SEARCH", "SUBJECT", f'"{marker}"')
            uids = data[0].split()
            if uids:
                status, _ = client.uid("MOVE", b",".join(uids).decode(), target)
                assert status == "OK"
            return len(uids)
        finally:
            client.logout()


def lmtp_postfix(relay_port: int, spamd_port: int, aliases: dict[str, list[str]]) -> Postfix:
    """Postfix with docs/postfix.md's LMTP lines pointed at spamd, aliases expanded before them (virtual_alias_maps)."""
    main = main_cf_settings(with_placeholders(snippet("postfix-lmtp-main.cf"), {"10024": str(spamd_port)}))
    # Each entry in braces: its value (the alias's members) holds commas.
    table = ", ".join(
        f"{{ {alias}@{DOMAIN} = {','.join(f'{u}@{DOMAIN}' for u in users)} }}" for alias, users in aliases.items()
    )
    main.update(
        {
            "relay_domains": "",
            "virtual_alias_maps": f"inline:{{ {table} }}",
            # Dovecot says who exists: a recipient it does not know is refused at its RCPT, through spamd.
            "smtpd_reject_unlisted_recipient": "no",
            "lmtp_destination_recipient_limit": "50",
        }
    )
    return Postfix(relay_port, main=main)


class LmtpSpamd:
    """spamd as the mail user: LMTP on a fixed port, handing on to Dovecot's LMTP, watching the users' Maildirs."""

    def __init__(self, top: Path, dovecot: LmtpDovecot):
        self.top = top
        self.data = top / "data"
        self.config = top / "spamd.toml"
        self.port = free_port()
        text = with_placeholders(
            snippet("spamd-lmtp.toml"),
            {
                "127.0.0.1:10024": f"127.0.0.1:{self.port}",
                "127.0.0.1:24": f"127.0.0.1:{dovecot.lmtp_port}",
                "/var/vmail": str(dovecot.top / "home"),
            },
        )
        self.config.write_text(
            f'data_dir = "{self.data}"\n[model]\nhash_bits = 16\n[log]\nformat = "json"\n[smtp]\nport = 0\n'
            f"{text}fsync = false\n"
        )
        self.data.mkdir(mode=0o700)
        self._train()
        for path in [self.data, self.config, *self.data.rglob("*")]:
            os.chown(path, MAIL_UID, MAIL_GID)
        self.run_as = as_user(MAIL_UID, MAIL_GID)
        self.process: DaemonProcess | None = None

    def _train(self) -> None:
        """The shared model taught the two test vocabularies (as tests.postfix_helpers.Spamd does), each user a little."""
        engine = Engine.open(load_config(self.config))
        try:
            for i in range(20):
                engine.train(make_message(Label.SPAM, i, seed=999), Label.SPAM, "test")
                engine.train(make_message(Label.HAM, i, seed=999), Label.HAM, "test")
            for user in USERS:  # each user's own history of both classes (a layer with one class says nothing)
                for i in range(3):
                    for label in (Label.SPAM, Label.HAM):
                        engine.train(make_message(label, i, seed=len(user)), label, "test", user_name=user)
            engine.snapshot()
        finally:
            engine.close()

    def start(self) -> DaemonProcess:
        self.process = DaemonProcess("--config", self.config, **self.run_as, umask=0o077)
        started = self.process.wait_for("daemon_started")
        assert started["lmtp_port"] == self.port, started
        return self.process

    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def kill(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.wait(10)

    @contextlib.contextmanager
    def reconfigured(self, key: str, value: str) -> Iterator[None]:
        """The running daemon with `[lmtp] key = value` (TOML; a reload applies it), put back after."""
        original = self.config.read_text()
        kept = re.sub(rf"^{key} = .*\n", "", original, flags=re.M)
        self.config.write_text(kept.replace("[lmtp]\n", f"[lmtp]\n{key} = {value}\n", 1))
        try:
            done = self.spamctl("reload")
            assert done.returncode == 0 and f"lmtp.{key}".encode() in done.stdout, done
            yield
        finally:
            self.config.write_text(original)
            if self.alive():
                assert self.spamctl("reload").returncode == 0

    def spamctl(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        popen = dict(self.run_as)
        python = popen.pop("python")
        env = popen.pop("env")
        done: subprocess.CompletedProcess[bytes] = subprocess.run(
            [*python, "-c", "from spamd.cli import main; main()", "--config", str(self.config), *args],
            input=b"", capture_output=True, timeout=60, env=env, **popen,
        )  # fmt: skip
        return done

    def stats(self) -> dict:
        done = self.spamctl("stats", "--json")
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)

    def events(self, name: str, **fields: object) -> list[dict]:
        if self.process is None:
            return []
        return [e for e in self.process.events(name) if all(e.get(k) == v for k, v in fields.items())]

    def wait_for_moves(self, count: int, timeout: float = 30.0) -> None:
        """Until `count` moves were learned from the Maildirs since start (each a user's own training)."""

        def learned() -> bool:
            events = self.stats().get("training_events") or {}
            return (
                sum(n for key, n in events.items() if key.startswith("maildir:") and key != "maildir:skipped_repeat")
                >= count
            )

        wait_until_sync(learned, timeout=timeout, interval=0.2)


def postfix_said(postfix: Postfix, recipient: str) -> list[str]:
    """Postfix's delivery lines for `recipient` (status=sent / deferred / bounced and what the LMTP server said)."""
    return re.findall(rf"^.*postfix/lmtp\[\d+\]: \w+: to=<{re.escape(recipient)}>.*$", postfix.log(), re.M)
