"""Maildirs spamd never breaks: what it creates gets the Maildir's owner, group and mode, set-group-id
folders stay so, and a symbolic link in a Maildir is never followed (as root or not)."""

from __future__ import annotations

import asyncio
import os
import smtplib
import time
from pathlib import Path

import pytest

from spamd.model.bayes import Label
from tests.daemon_helpers import (
    WATCHDOG_WARNING_IGNORED,
    daemon_config,
    drop,
    filed,
    folder_files,
    make_message,
    running,
    send,
    smtp_port,
    train,
    wait_until,
    watcher_of,
)

pytestmark = [pytest.mark.asyncio, WATCHDOG_WARNING_IGNORED]

JUNK = ".Junk"


# A mail uid/gid with no passwd entry, as a virtual-mail setup's "vmail" often is.
MAIL_UID, MAIL_GID = 5000, 5000
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")


def owned(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, st.st_mode & 0o7777


def made_by_spamd(maildir: Path) -> list[Path]:
    """Every directory and file under the Maildir but the root (spamd made them all in these tests)."""
    return sorted(p for p in maildir.rglob("*"))


@needs_root
@pytest.mark.parametrize("tmp_file", ["unnamed", "named"])
async def test_everything_created_in_a_maildir_gets_its_owner_group_and_mode(tmp_path, tmp_file, monkeypatch):
    if tmp_file == "named":
        # As on a file system without O_TMPFILE: the kernel opens tmp/ itself and answers
        # EISDIR, and delivery writes a named file in tmp/ and renames it.
        monkeypatch.setattr("spamd.frontends.maildir.files._UNNAMED_FILE_FLAGS", os.O_WRONLY | os.O_CLOEXEC)
    maildir = tmp_path / "Maildir"
    maildir.mkdir(mode=0o750)
    os.chmod(maildir, 0o750)
    os.chown(maildir, MAIL_UID, MAIL_GID)
    config = daemon_config(tmp_path, maildir={"paths": (str(maildir),)})
    async with running(config) as daemon:
        train(daemon)
        port = smtp_port(daemon)
        await asyncio.to_thread(send, port, make_message(Label.SPAM, 1))  # delivered into Junk
        await asyncio.to_thread(send, port, make_message(Label.HAM, 1))  # into INBOX
        # Filed by the watcher (an MDA's unscored drop): the filed copy is spamd's.
        path = drop(maildir, make_message(Label.SPAM, 2))
        os.chown(path, MAIL_UID, MAIL_GID)
        await wait_until(lambda: len(filed(maildir, JUNK)) == 1)
        await watcher_of(daemon).drained()
    created = made_by_spamd(maildir)
    assert {p.relative_to(maildir).as_posix() for p in created} >= {
        "cur", "new", "tmp", ".Junk", ".Junk/cur", ".Junk/new", ".Junk/tmp", ".Junk/maildirfolder",
        ".Trash", ".Trash/cur", ".Trash/new", ".Trash/tmp", ".Trash/maildirfolder",
    }  # fmt: skip
    messages = folder_files(maildir) + folder_files(maildir, JUNK)
    assert len(messages) == 3
    assert list((maildir / "tmp").iterdir()) == list((maildir / ".Junk" / "tmp").iterdir()) == []
    for path in created:
        want = 0o750 if path.is_dir() else 0o640
        assert owned(path) == (MAIL_UID, MAIL_GID, want), path


@needs_root
async def test_a_group_shared_maildir_keeps_its_set_group_id_folders(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox

    maildir = tmp_path / "Maildir"
    maildir.mkdir()
    os.chown(maildir, MAIL_UID, MAIL_GID)
    os.chmod(maildir, 0o2770)
    assert Mailbox(maildir, MaildirConfig(), "user").ensure_layout() is None
    assert owned(maildir / ".Junk") == (MAIL_UID, MAIL_GID, 0o2770)
    assert owned(maildir / ".Junk" / "maildirfolder") == (MAIL_UID, MAIL_GID, 0o660)


@needs_root
async def test_a_missing_maildir_gets_its_parents_owner(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox

    home = tmp_path / "alice"
    home.mkdir()
    os.chown(home, MAIL_UID, MAIL_GID)
    Mailbox(home / "Maildir", MaildirConfig(), "alice").ensure_layout()
    assert owned(home / "Maildir") == (MAIL_UID, MAIL_GID, 0o700)
    assert owned(home / "Maildir" / ".Junk" / "new") == (MAIL_UID, MAIL_GID, 0o700)


@needs_root
async def test_folders_a_root_spamd_left_owned_by_root_are_repaired(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox

    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp", ".Junk/cur", ".Junk/new", ".Junk/tmp"):
        (maildir / sub).mkdir(parents=True, mode=0o755)
    for path in [maildir, maildir / "cur", maildir / "new", maildir / "tmp"]:
        os.chown(path, MAIL_UID, MAIL_GID)
        os.chmod(path, 0o700)
    (maildir / ".Junk" / "maildirfolder").touch(mode=0o644)
    (maildir / "cur" / "1.M1P1.host:2,S").write_bytes(b"Subject: a user's own\n\n")
    os.chown(maildir / "cur" / "1.M1P1.host:2,S", 0, 0)  # not spamd's layout: left alone
    mailbox = Mailbox(maildir, MaildirConfig(), "user")
    mailbox.ensure_layout()
    for sub in (".Junk", ".Junk/cur", ".Junk/new", ".Junk/tmp"):
        assert owned(maildir / sub) == (MAIL_UID, MAIL_GID, 0o700), sub
    assert owned(maildir / ".Junk" / "maildirfolder") == (MAIL_UID, MAIL_GID, 0o600)
    assert owned(maildir / "cur" / "1.M1P1.host:2,S")[:2] == (0, 0)
    assert sorted(mailbox.repaired) == sorted(
        str(maildir / sub) for sub in (".Junk", ".Junk/cur", ".Junk/new", ".Junk/tmp")
    )
    mailbox.ensure_layout()
    assert mailbox.repaired == []  # once repaired, nothing more to say at the next start


async def test_a_symbolic_link_in_a_maildir_is_never_followed(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.errors import StoreError
    from spamd.frontends.maildir.files import write_message
    from spamd.frontends.maildir.mailbox import Mailbox

    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    os.chmod(outside, 0o755)
    before = owned(outside)
    maildir = tmp_path / "Maildir"
    maildir.mkdir()
    (maildir / ".Junk").symlink_to(outside)
    mailbox = Mailbox(maildir, MaildirConfig(), "user")
    with pytest.raises(StoreError, match="symbolic link"):
        mailbox.ensure_layout()
    assert owned(outside) == before and list(outside.iterdir()) == []

    # A link swapped in after start: a delivery refuses it and writes nothing outside.
    (maildir / ".Junk").unlink()
    mailbox.ensure_layout()
    os.rename(maildir / ".Junk" / "tmp", maildir / "junk-tmp")
    (maildir / ".Junk" / "tmp").symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        write_message(mailbox, ".Junk", "1.x.host", b"Subject: x\n\nx\n", fsync=False)
    assert owned(outside) == before and list(outside.iterdir()) == []


async def test_smtp_delivery_into_a_linked_folder_is_refused_with_451_and_nothing_written(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path, maildir={"paths": (str(maildir),)})) as daemon:
        os.rename(maildir / "tmp", tmp_path / "inbox-tmp")
        (maildir / "tmp").symlink_to(outside)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            await asyncio.to_thread(send, smtp_port(daemon), make_message(Label.HAM, 1))
        assert refused.value.smtp_code == 451
        assert list(outside.iterdir()) == [] and folder_files(maildir) == []
        [error] = daemon.metrics.snapshot()["recent_errors"]
        assert error["event"] == "smtp_delivery_failed" and "symbolic link" in error["error"]


@needs_root
async def test_spamd_neither_root_nor_the_owner_says_what_to_change():
    import shutil
    import subprocess
    import tempfile

    from tests.dovecot_helpers import as_user, python_for

    # Not under tmp_path: pytest's base directory is root's alone (0700).
    top = Path(tempfile.mkdtemp(prefix="spamd-owner-"))
    os.chmod(top, 0o755)
    maildir = top / "Maildir"
    maildir.mkdir()
    os.chown(maildir, MAIL_UID, MAIL_GID)
    os.chmod(maildir, 0o777)  # writable, so only the ownership problem remains
    code = (
        "import sys; from pathlib import Path; from spamd.config import MaildirConfig; "
        "from spamd.frontends.maildir.mailbox import Mailbox; "
        "print(Mailbox(Path(sys.argv[1]), MaildirConfig(), 'u').ensure_layout())"
    )
    if python_for(MAIL_UID + 1, MAIL_GID + 1) is None:
        pytest.skip("no Python interpreter can run spamd as another user here")
    run_as = as_user(MAIL_UID + 1, MAIL_GID + 1)
    python = run_as.pop("python")
    done = await asyncio.to_thread(
        lambda: subprocess.run(
            [*python, "-c", code, str(maildir)], capture_output=True, text=True, timeout=30, **run_as
        )
    )
    shutil.rmtree(top)
    assert done.returncode == 0, done.stderr
    assert f"{maildir}: owned by uid {MAIL_UID}" in done.stdout
    assert "run spamd as the Maildir's user" in done.stdout and "or as root" in done.stdout


@needs_root
async def test_the_daemon_says_at_start_what_it_repaired_or_cannot_mirror(tmp_path):
    import shutil
    import signal
    import tempfile

    from tests.daemon_helpers import DaemonProcess, write_config
    from tests.dovecot_helpers import as_user, python_for

    if python_for(MAIL_UID + 1, MAIL_GID + 1) is None:
        pytest.skip("no Python interpreter can run spamd as another user here")
    top = Path(tempfile.mkdtemp(prefix="spamd-start-"))
    try:
        os.chmod(top, 0o755)
        maildir = top / "Maildir"
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True)
        for path in (maildir, *maildir.iterdir()):
            os.chown(path, MAIL_UID, MAIL_GID)
        os.chmod(maildir, 0o777)  # others may write: only the ownership is in the way
        (maildir / ".Junk" / "cur").mkdir(parents=True)  # an older root spamd's, left root's

        # As root: the folders are given back, with what the admin should still check.
        config = write_config(top / "spamd.toml", f'[maildir]\npaths = ["{maildir}"]\n')
        daemon = DaemonProcess("--config", config, "--data-dir", top / "root-data", "--smtp", "127.0.0.1:0")
        try:
            line = daemon.wait_for("maildir_ownership_repaired")
            assert line["maildir"] == str(maildir) and str(maildir / ".Junk") in line["folders"]
            assert f"chown -R {MAIL_UID}:{MAIL_GID} {maildir}" in line["action"]
            daemon.wait_for("daemon_started")
        finally:
            daemon.signal(signal.SIGTERM)
            assert daemon.wait() == 0
        assert owned(maildir / ".Junk" / "cur")[:2] == (MAIL_UID, MAIL_GID)

        # As a user who is neither root nor the owner: one clear line, and spamd serves on.
        data = top / "user-data"
        data.mkdir()
        os.chown(data, MAIL_UID + 1, MAIL_GID + 1)
        daemon = DaemonProcess(
            "--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", **as_user(MAIL_UID + 1, MAIL_GID + 1)
        )
        try:
            line = daemon.wait_for("maildir_ownership_not_mirrored")
            assert line["maildir"] == str(maildir) and line["level"] == "error"
            assert "run spamd as the Maildir's user" in line["problem"]
            daemon.wait_for("daemon_started")
            assert len(daemon.events("maildir_ownership_not_mirrored")) == 1
        finally:
            daemon.signal(signal.SIGTERM)
            assert daemon.wait() == 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


@needs_root
async def test_root_spamd_never_reads_removes_or_files_what_a_link_in_a_maildir_points_at(tmp_path):
    """A user with a shell may plant links, FIFOs and hard links in their Maildir; root spamd must not follow them."""
    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_bytes(b"Subject: secret\n\nTOPSECRET\n")
    os.chmod(secret, 0o600)
    elsewhere = tmp_path / "elsewhere"  # a folder outside, with mail in it and an old tmp/ file
    for sub in ("cur", "new", "tmp"):
        (elsewhere / sub).mkdir(parents=True)
    (elsewhere / "new" / "1.M1P1.host").write_bytes(b"Subject: outside\n\nOUTSIDE\n")
    old = elsewhere / "tmp" / "2.M2P2.host"
    old.write_bytes(b"Subject: old\n\n")
    os.utime(old, (time.time() - 40 * 3600,) * 2)
    (maildir / ".Evil").symlink_to(elsewhere)
    (maildir / "new" / "3.M3P3.link").symlink_to(secret)
    os.mkfifo(maildir / "new" / "4.M4P4.fifo")
    os.link(secret, maildir / "new" / "5.M5P5.hard")  # as if fs.protected_hardlinks were off
    for path in (maildir, maildir / "cur", maildir / "new", maildir / "tmp"):
        os.chown(path, MAIL_UID, MAIL_GID)

    async with running(daemon_config(tmp_path / "data", maildir={"paths": (str(maildir),)})) as daemon:
        (maildir / "new" / "6.M6P6.live").symlink_to(secret)  # planted while spamd watches
        ours = drop(maildir, make_message(Label.HAM, 1))
        os.chown(ours, MAIL_UID, MAIL_GID)
        await wait_until(lambda: len(filed(maildir)) == 1)
        await watcher_of(daemon).drained()
        assert watcher_of(daemon).files_read == 1
    assert secret.read_bytes() == b"Subject: secret\n\nTOPSECRET\n"
    assert old.exists() and (elsewhere / "new" / "1.M1P1.host").exists()
    for path in maildir.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name != "5.M5P5.hard":
            assert b"TOPSECRET" not in path.read_bytes(), path


async def test_a_users_maildir_that_is_a_link_is_not_served(tmp_path):
    root = tmp_path / "vmail"
    (root / "bob" / "Maildir").mkdir(parents=True)
    (root / "alice").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "alice" / "Maildir").symlink_to(elsewhere)
    async with running(daemon_config(tmp_path / "data", maildir={"root": str(root)})) as daemon:
        assert [m.user for m in daemon.mailboxes] == ["bob"]
        [error] = daemon.metrics.snapshot()["recent_errors"]
        assert error["event"] == "maildir_not_served" and error["path"] == str(root / "alice" / "Maildir")
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await asyncio.to_thread(send, smtp_port(daemon), make_message(Label.HAM, 1), ["alice@example.com"])
        await daemon.reload()
        assert [m.user for m in daemon.mailboxes] == ["bob"]
    assert list(elsewhere.iterdir()) == []
