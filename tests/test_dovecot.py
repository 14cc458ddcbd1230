"""Debian's real Dovecot serving the Maildirs spamd watches; a real IMAP client (imaplib) moves the mail.

What users do, with spamd run as the mail user and as root: MOVE and COPY into
Junk (spam), out of Junk (ham), Junk -> Trash and flag changes (nothing), many
messages in one UID MOVE. spamd must learn exactly once per decision, and
Dovecot must log no error. Run as root, spamd created .Junk/.Trash owned by
root, and every MOVE into Junk failed with "[SERVERBUG] Internal error": that
regression is checked by owner, group and mode of everything in the Maildir.
With `[maildir] settle_after` set, mail read (\\Seen, as Dovecot renames the file)
and left in INBOX is learned as ham once it has been there that long.

Then the IMAPSieve set-up shipped in config/imapsieve/ for mail spamd does not
watch: Dovecot pipes each message moved into or out of Junk to spamd-learn,
which trains the running spamd through spamctl.

Dovecot starts once per module (one per configuration), each test with its own user.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamd.model.bayes import Label
from tests.daemon_helpers import make_message, send, wait_until_sync
from tests.dovecot_helpers import (
    MAIL_GID,
    MAIL_UID,
    REPO,
    SIEVEC,
    Dovecot,
    Spamd,
    dovecot_missing,
    private_dir,
    python_for,
    wait_for_training,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.real_program(dovecot_missing()),
]

IMAPSIEVE = REPO / "config" / "imapsieve"
LDA = "/usr/lib/dovecot/dovecot-lda"


@pytest.fixture(scope="module")
def dovecot() -> Iterator[Dovecot]:
    top = private_dir("spamd-dc-")
    server = Dovecot(top)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def spamd_top() -> Iterator[Path]:
    top = private_dir("spamd-")
    yield top
    shutil.rmtree(top, ignore_errors=True)


def message_ids(client, mailbox: str) -> dict[str, bytes]:
    """Message-ID (the part before @) -> UID, for every message in the mailbox."""
    status, _ = client.select(mailbox)
    assert status == "OK", mailbox
    status, data = client.uid("FETCH", "1:*", "(UID BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
    assert status == "OK"
    found = {}
    for item in data:
        if isinstance(item, tuple):
            uid, tag = re.search(rb"UID (\d+)", item[0]), re.search(rb"<([^@>]+)", item[1])
            assert uid is not None and tag is not None
            found[tag.group(1).decode()] = uid.group(1)
    return found


def imap_ok(result) -> None:
    status, data = result
    assert status == "OK", data


def ownership_of_everything(root: Path) -> set[tuple[int, int]]:
    found = {(os.lstat(root).st_uid, os.lstat(root).st_gid)}
    for path in root.rglob("*"):
        st = os.lstat(path)
        found.add((st.st_uid, st.st_gid))
    return found


@pytest.mark.parametrize("mail_user", [True, False], ids=["as-mail-user", "as-root"])
def test_imap_moves_train_spamd_exactly_once_and_dovecot_logs_no_error(dovecot, spamd_top, mail_user):
    if mail_user and python_for(MAIL_UID, MAIL_GID) is None:
        pytest.skip("no Python interpreter can run spamd as the mail user here")
    user = "mailuser" if mail_user else "rootcase"
    # The user's first login: Dovecot makes the Maildir (mail uid, 0700), as it would.
    first = dovecot.imap(user)
    imap_ok(first.select("INBOX"))
    first.logout()
    maildir = dovecot.maildir(user)
    assert maildir.is_dir()
    # A group-readable Maildir: Dovecot then makes folders 0750 and files 0640, and so must
    # spamd, under the unit's UMask=0077.
    os.chmod(maildir, 0o750)
    spamd = Spamd(spamd_top, [maildir], mail_user=mail_user)
    spamd.start()
    try:
        # Mail arrives through spamd (its SMTP delivery); an empty model files it all in INBOX.
        messages = [make_message(Label.SPAM, n, seed=11) for n in range(8)] + [
            make_message(Label.HAM, n, seed=11) for n in range(3)
        ]
        for raw in messages:
            send(spamd.smtp_port, raw)

        client = dovecot.imap(user)
        try:
            inbox = message_ids(client, "INBOX")
            assert len(inbox) == len(messages)
            spam = [inbox[f"spam-{n}-11"] for n in range(8)]
            ham = [inbox[f"ham-{n}-11"] for n in range(3)]
            imap_ok(client.uid("MOVE", spam[0], "Junk"))  # one message moved: spam
            imap_ok(client.uid("COPY", spam[1], "Junk"))  # copied into Junk: spam as well
            imap_ok(client.uid("MOVE", b",".join(spam[2:7]), "Junk"))  # five in one UID MOVE
            imap_ok(client.uid("STORE", b",".join(ham), "+FLAGS", r"(\Seen \Flagged)"))  # flags: nothing
            wait_for_training(spamd, {"maildir:learned": 7})

            junk = message_ids(client, "Junk")
            assert len(junk) == 7
            imap_ok(client.uid("STORE", b",".join(junk.values()), "+FLAGS", r"(\Seen)"))  # nothing
            imap_ok(client.uid("MOVE", junk["spam-0-11"], "INBOX"))  # out of Junk: ham
            imap_ok(client.uid("MOVE", junk["spam-2-11"], "Trash"))  # Junk -> Trash: nothing
            imap_ok(client.create("Archive"))
            imap_ok(client.uid("MOVE", junk["spam-3-11"], "Archive"))  # out of Junk anywhere else: ham
            # The sentinel: events are handled in order, so once it counts, all before it have.
            message_ids(client, "INBOX")
            imap_ok(client.uid("MOVE", spam[7], "Junk"))
            counts = wait_for_training(spamd, {"maildir:learned": 8, "maildir:corrected": 2})
            client.logout()
        finally:
            with contextlib.suppress(OSError):
                client.shutdown()
        # Nothing was seen twice (a repeat would show as "maildir:skipped_repeat").
        assert {k: v for k, v in spamd.training().items() if v} == counts
        stats = spamd.stats()
        # Each decision once: spam 1, 2, 4, 5, 6, 7 (2 sits in Trash, still spam), ham 0 and 3.
        assert (stats["trained_spam"], stats["trained_ham"], stats["ledger_entries"]) == (6, 2, 8), counts
        assert stats["daemon"]["recent_errors"] == []
        assert dovecot.errors() == []
        # Nothing in the Maildir belongs to anyone but the mail user: Dovecot's files, spamd's,
        # and those Dovecot hard-linked from spamd's deliveries.
        assert ownership_of_everything(maildir) == {(MAIL_UID, MAIL_GID)}
        # What spamd made has Dovecot's modes for a 0750 Maildir.
        for folder in (".Junk", ".Trash"):
            for sub in ("", "cur", "new", "tmp"):
                assert os.stat(maildir / folder / sub).st_mode & 0o7777 == 0o750, folder + "/" + sub
            assert os.stat(maildir / folder / "maildirfolder").st_mode & 0o7777 == 0o640
        messages = [
            *maildir.glob("cur/*"),
            *maildir.glob("new/*"),
            *maildir.glob(".*/cur/*"),
            *maildir.glob(".*/new/*"),
        ]
        assert len(messages) == 12  # 11 delivered, one of them copied
        for path in messages:
            assert os.stat(path).st_mode & 0o7777 == 0o640, path
    finally:
        spamd.stop()


def test_read_mail_left_in_place_settles_as_ham_through_dovecots_own_flag_renames(dovecot, spamd_top):
    """Settled learning as Dovecot names read mail: \\Seen and left in INBOX is ham, once; unread or in Trash, nothing.

    Non-events are checked with a sentinel read after them: the settler pops in order of due time.
    """
    user = "settler"
    first = dovecot.imap(user)
    imap_ok(first.select("INBOX"))
    first.logout()
    maildir = dovecot.maildir(user)
    spamd = Spamd(spamd_top, [maildir], mail_user=False)
    spamd.config.write_text(
        spamd.config.read_text() + "settle_after = 1.5\nsettle_margin = 0.0\n"
    )  # the last section is [maildir]
    spamd.start()
    try:
        for n in range(4):  # an empty model: all in INBOX
            send(spamd.smtp_port, make_message(Label.HAM, n, seed=17))
        client = dovecot.imap(user)
        try:
            inbox = message_ids(client, "INBOX")
            imap_ok(client.uid("STORE", inbox["ham-0-17"] + b"," + inbox["ham-1-17"], "+FLAGS", r"(\Seen)"))
            imap_ok(client.uid("STORE", inbox["ham-2-17"], "+FLAGS", r"(\Seen)"))
            imap_ok(client.uid("MOVE", inbox["ham-2-17"], "Trash"))  # read and thrown away
            # ham-3 is left unread.
            wait_for_training(spamd, {"settled:learned": 2})
            send(spamd.smtp_port, make_message(Label.HAM, 4, seed=17))  # the sentinel
            imap_ok(client.uid("STORE", message_ids(client, "INBOX")["ham-4-17"], "+FLAGS", r"(\Seen)"))
            wait_for_training(spamd, {"settled:learned": 3})
            imap_ok(client.uid("MOVE", inbox["ham-0-17"], "Junk"))  # the person changes their mind: corrected
            counts = wait_for_training(spamd, {"settled:learned": 3, "maildir:corrected": 1})
            client.logout()
        finally:
            with contextlib.suppress(OSError):
                client.shutdown()
        stats = spamd.stats()
        assert (stats["trained_spam"], stats["trained_ham"]) == (1, 2), counts
        assert stats["daemon"]["recent_errors"] == [] and dovecot.errors() == []
    finally:
        spamd.stop()


@pytest.mark.parametrize("mail_user", [True, False], ids=["as-mail-user", "as-root"])
def test_mail_dovecot_lda_delivers_is_filed_by_spamd_and_stays_readable(dovecot, spamd_top, mail_user):
    """Dovecot's LDA delivers (as Postfix's mailbox_command would); spamd scores and files it; IMAP reads and moves it."""
    if mail_user and python_for(MAIL_UID, MAIL_GID) is None:
        pytest.skip("no Python interpreter can run spamd as the mail user here")
    user = "ldauser" if mail_user else "ldaroot"
    first = dovecot.imap(user)
    imap_ok(first.select("INBOX"))
    maildir = dovecot.maildir(user)
    spamd = Spamd(spamd_top, [maildir], mail_user=mail_user)
    spamd.start()
    try:
        corpus = spamd_top / "corpus"
        for label, name in ((Label.SPAM, "spam"), (Label.HAM, "ham")):
            (corpus / name).mkdir(parents=True)
            for n in range(20):
                (corpus / name / f"{n}.eml").write_bytes(make_message(label, n, seed=13))
        for path in [corpus, *corpus.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        for kind in ("spam", "ham"):
            done = spamd.spamctl("train", f"--{kind}", str(corpus / kind))
            assert done.returncode == 0, done.stderr.decode()
        # Delivered by Dovecot's LDA (a ",S=...,W=..." name in INBOX new/, no X-Spam-Status),
        # while a client has INBOX selected.
        for label, n in [(Label.SPAM, 1), (Label.SPAM, 2), (Label.HAM, 1), (Label.HAM, 2)]:
            done = subprocess.run(
                [LDA, "-c", str(dovecot.conf), "-d", user, "-f", "sender@example.org"],
                input=make_message(label, n, seed=14), capture_output=True, timeout=30,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr.decode()
        wait_until_sync(
            lambda: len(list(maildir.glob("new/*.spamd*"))) + len(list(maildir.glob(".Junk/new/*.spamd*"))) == 4
        )
        imap_ok(first.noop())
        first.logout()

        client = dovecot.imap(user)
        try:
            junk, inbox = message_ids(client, "Junk"), message_ids(client, "INBOX")
            assert sorted(junk) == ["spam-1-14", "spam-2-14"] and sorted(inbox) == ["ham-1-14", "ham-2-14"]
            status, data = client.uid("FETCH", b",".join(inbox.values()), "(BODY.PEEK[])")
            assert status == "OK" and all(b"X-Spam-Status: No" in item[1] for item in data if isinstance(item, tuple))
            imap_ok(client.uid("MOVE", inbox["ham-1-14"], "Junk"))  # the filter was wrong: spam
            message_ids(client, "Junk")
            imap_ok(client.uid("MOVE", junk["spam-1-14"], "INBOX"))  # and here: ham
            counts = wait_for_training(spamd, {"spamctl:learned": 40, "maildir:learned": 2})
            client.logout()
        finally:
            with contextlib.suppress(OSError):
                client.shutdown()
        assert dovecot.errors() == []
        assert spamd.stats()["daemon"]["recent_errors"] == []
        assert {k: v for k, v in spamd.training().items() if v} == counts  # spamd's own filing trained nothing
        assert ownership_of_everything(maildir) == {(MAIL_UID, MAIL_GID)}
    finally:
        spamd.stop()


# ---------------------------------------------------------------- IMAPSieve: a Maildir spamd does not watch


@pytest.fixture(scope="module")
def sieve_dovecot() -> Iterator[Dovecot]:
    """Dovecot with config/imapsieve/ installed as its conf.d snippet and docs/dovecot.md say, paths moved under a private directory."""
    if not os.path.exists(SIEVEC):
        message = f"{SIEVEC} is not installed (apt-get install dovecot-sieve)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}, and CI installs it (.ci/run)")
        pytest.skip(message)
    top = private_dir("spamd-ds-")
    server: Dovecot | None = None
    try:
        sieve_dir, bin_dir = top / "sieve", top / "bin"
        for directory in (sieve_dir, bin_dir):
            directory.mkdir()
            os.chmod(directory, 0o755)
        snippet = (IMAPSIEVE / "90-spamd-imapsieve.conf").read_text()
        snippet = snippet.replace("/etc/dovecot/sieve", str(sieve_dir)).replace(
            "/usr/local/lib/spamd/imapsieve", str(bin_dir)
        )
        server = Dovecot(top, extra=snippet)
        for name in ("spamd-report-spam.sieve", "spamd-report-ham.sieve"):
            shutil.copy(IMAPSIEVE / name, sieve_dir / name)
            # Compiled ahead, as the snippet says: the mail user may not write beside a global script.
            compile_ = [SIEVEC, "-c", str(server.conf), str(sieve_dir / name)]
            done = subprocess.run(compile_, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
        server.start()
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(top, ignore_errors=True)


def install_learn_script(bin_dir: Path, spamd: Spamd) -> None:
    """spamd-learn as shipped, its two settings pointed at this test's spamctl and config."""
    run_as = spamd.run_as
    python = " ".join(run_as["python"])
    pythonpath = run_as["env"].get("PYTHONPATH", "")
    wrapper = bin_dir.parent / "spamctl"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="{pythonpath}" exec {python} -c "from spamd.cli import main; main()" "$@"\n'
    )
    os.chmod(wrapper, 0o755)
    script = (IMAPSIEVE / "spamd-learn").read_text()
    assert 'SPAMCTL="/usr/local/bin/spamctl"' in script and 'SPAMD_CONFIG="/etc/spamd/spamd.toml"' in script
    script = script.replace('SPAMCTL="/usr/local/bin/spamctl"', f'SPAMCTL="{wrapper}"')
    script = script.replace('SPAMD_CONFIG="/etc/spamd/spamd.toml"', f'SPAMD_CONFIG="{spamd.config}"')
    (bin_dir / "spamd-learn").write_text(script)
    os.chmod(bin_dir / "spamd-learn", 0o755)


def test_imapsieve_trains_spamd_from_moves_in_a_maildir_it_does_not_watch(sieve_dovecot, spamd_top):
    if python_for(MAIL_UID, MAIL_GID) is None:
        pytest.skip("no Python interpreter can run spamd as the mail user here")
    # spamd as the mail user (one virtual-mail uid): Dovecot's pipe runs as that user too.
    spamd = Spamd(spamd_top, [spamd_top / "data" / "Maildir"], mail_user=True)
    with spamd.config.open("a") as config:  # token layers, so that `spamctl users` shows whose moves trained
        config.write("[users]\ntoken_moves = true\n")
    install_learn_script(sieve_dovecot.top / "bin", spamd)
    spamd.start()
    try:
        client = sieve_dovecot.imap("sieveuser")
        try:
            for name in ("Junk", "Trash"):
                imap_ok(client.create(name))
            for n in range(6):
                imap_ok(
                    client.append("INBOX", None, None, make_message(Label.SPAM, n, seed=12).replace(b"\n", b"\r\n"))
                )
            inbox = message_ids(client, "INBOX")
            spam = [inbox[f"spam-{n}-12"] for n in range(6)]
            imap_ok(client.uid("MOVE", spam[0], "Junk"))
            imap_ok(client.uid("COPY", spam[1], "Junk"))
            imap_ok(client.uid("MOVE", b",".join(spam[2:5]), "Junk"))
            imap_ok(client.uid("STORE", spam[5], "+FLAGS", r"(\Seen)"))
            wait_for_training(spamd, {"spamctl:learned": 5})
            junk = message_ids(client, "Junk")
            imap_ok(client.uid("MOVE", junk["spam-0-12"], "INBOX"))  # ham
            imap_ok(client.uid("MOVE", junk["spam-2-12"], "Trash"))  # nothing
            message_ids(client, "INBOX")
            imap_ok(client.uid("MOVE", spam[5], "Junk"))  # the sentinel
            wait_for_training(spamd, {"spamctl:learned": 6, "spamctl:corrected": 1})
            client.logout()
        finally:
            with contextlib.suppress(OSError):
                client.shutdown()
        # The same script as an ssh forced command on spamd's host: the label comes from
        # SSH_ORIGINAL_COMMAND, and nothing but "spam" or "ham" is accepted.
        script = str(sieve_dovecot.top / "bin" / "spamd-learn")
        run_as = {k: v for k, v in spamd.run_as.items() if k not in ("python", "env")}
        for command, status in (
            ("ham", 0),
            ("spam; touch /tmp/spamd-learn-owned", 64),
            ("--help", 64),
            ("spam ../x", 64),
        ):
            done = subprocess.run(
                [script], input=make_message(Label.HAM, 1, seed=12), capture_output=True, timeout=60,
                env={"PATH": "/usr/bin:/bin", "SSH_ORIGINAL_COMMAND": command}, **run_as,
            )  # fmt: skip
            assert done.returncode == status, done.stderr
        assert not os.path.exists("/tmp/spamd-learn-owned")
        done = subprocess.run(
            [script], input=b"", capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, **run_as
        )
        assert done.returncode == 64 and b"usage: spamd-learn spam|ham" in done.stderr
        counts = wait_for_training(spamd, {"spamctl:learned": 7, "spamctl:corrected": 1})
        stats = spamd.stats()
        assert {k: v for k, v in stats["training_events"].items() if v} == counts
        assert (stats["trained_spam"], stats["trained_ham"]) == (5, 2)
        # The IMAP user's moves (imapsieve's imap.user) trained their own layer; the forced command's, none.
        done = spamd.spamctl("users", "--json")
        assert done.returncode == 0, done.stderr.decode()
        [layer] = json.loads(done.stdout)["users"]
        assert (layer["user"], layer["trained_spam"], layer["trained_ham"]) == ("sieveuser", 5, 1)
        assert sieve_dovecot.errors() == []
    finally:
        spamd.stop()
