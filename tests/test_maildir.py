"""Maildir watching and learning from moves: a real Maildir++ in tmp_path, os.rename as an IMAP server moves.

Non-events are checked with a sentinel: after the moves that must not train, one
that must is made, and since the watcher handles events in order, once the
sentinel is learned every earlier event has been handled.
"""

from __future__ import annotations

import asyncio
import math
import os
import smtplib
import time
from pathlib import Path

import pytest

from spamd.frontends.maildir.layout import FILED_MARK, base_of
from spamd.frontends.maildir.seen import RecentNames
from spamd.model.bayes import Label
from tests.daemon_helpers import (
    WATCHDOG_WARNING_IGNORED,
    daemon_config,
    drop,
    engine_of,
    filed,
    folder_files,
    imap_move,
    make_message,
    running,
    send,
    set_flags,
    smtp_port,
    train,
    wait_until,
    watcher_of,
)

pytestmark = [pytest.mark.asyncio, WATCHDOG_WARNING_IGNORED]

JUNK, TRASH = ".Junk", ".Trash"


def trained(daemon) -> tuple[int, int]:
    stats = daemon.engine.stats()
    return stats["trained_spam"], stats["trained_ham"]


async def deliver_unscored(daemon, maildir: Path, messages: list[bytes]) -> list[Path]:
    """Drop unscored mail into INBOX new/ as an MDA would; wait until spamd has filed all of it."""
    before = len(filed(maildir)) + len(filed(maildir, JUNK))
    for data in messages:
        drop(maildir, data)
    await wait_until(lambda: len(filed(maildir)) + len(filed(maildir, JUNK)) == before + len(messages))
    await daemon.watcher.drained()
    return filed(maildir)


def by_id(paths: list[Path]) -> dict[bytes, Path]:
    out = {}
    for p in paths:
        data = p.read_bytes()
        out[data.split(b"Message-ID: <", 1)[1].split(b">", 1)[0]] = p
    return out


async def sentinel(daemon, maildir: Path, n: int = 900) -> None:
    """A training move after the moves under test; returns once it (and so all before it) is handled."""
    spam_before = trained(daemon)[0]
    path = drop(maildir, b"X-Spam-Status: Unsure, score=0.5\n" + make_message(Label.SPAM, n, seed=7), sub="cur")
    imap_move(path, maildir, JUNK)
    await wait_until(lambda: trained(daemon)[0] == spam_before + 1)


# ---------------------------------------------------------------- scoring new mail


async def test_unscored_inbox_mail_is_scored_and_filed(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        train(daemon)
        await deliver_unscored(daemon, maildir, [make_message(Label.SPAM, 1), make_message(Label.HAM, 1)])
        [junk] = folder_files(maildir, JUNK)
        [inbox] = folder_files(maildir)
        assert junk.parent.name == "new" and FILED_MARK in junk.name
        assert junk.read_bytes().startswith(b"X-Spam-Status: Yes")
        assert inbox.read_bytes().startswith(b"X-Spam-Status: No")
        assert ",S=" in junk.name and junk.name.endswith(f",S={junk.stat().st_size}")
        assert files_in(maildir / "tmp") == files_in(maildir / ".Junk" / "tmp") == []
        # Filing is not training, and already-scored mail is left alone.
        assert trained(daemon) == (20, 20)
        drop(maildir, b"X-Spam-Status: No, score=0.1\n" + make_message(Label.HAM, 2))
        await sentinel(daemon, maildir)
        assert len(folder_files(maildir)) == 2 and trained(daemon) == (21, 20)


def files_in(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


async def test_autolearn_is_off_by_default_and_never_overrides_a_person(tmp_path):
    maildir = tmp_path / "Maildir"
    # Every autolearned verdict learned ([model] train_margin inf: no thick threshold), as this test counts them.
    async with running(
        daemon_config(tmp_path, maildir={"autolearn": True, "fsync": False}, model={"train_margin": math.inf})
    ) as daemon:
        train(daemon)
        await deliver_unscored(daemon, maildir, [make_message(Label.SPAM, 1)])
        assert trained(daemon) == (21, 20)  # learned from its own confident verdict
        [junk] = folder_files(maildir, JUNK)
        imap_move(junk, maildir, "")  # the person says: not spam
        await wait_until(lambda: trained(daemon) == (20, 21))
        # The same message again: autolearn declines to override the person.
        await deliver_unscored(daemon, maildir, [make_message(Label.SPAM, 1)])
        assert trained(daemon) == (20, 21)
    async with running(daemon_config(tmp_path / "other")) as daemon:
        train(daemon)
        await deliver_unscored(daemon, tmp_path / "other" / "Maildir", [make_message(Label.SPAM, 1)])
        assert trained(daemon) == (20, 20)


# ---------------------------------------------------------------- learning from moves


async def test_thirty_spam_and_ten_ham_there_and_back(tmp_path):
    maildir = tmp_path / "Maildir"
    spam = [make_message(Label.SPAM, i) for i in range(30)]
    ham = [make_message(Label.HAM, i) for i in range(10)]
    async with running(daemon_config(tmp_path)) as daemon:
        paths = by_id(await deliver_unscored(daemon, maildir, spam + ham))  # untrained: all Unsure, in INBOX
        assert len(paths) == 40 and trained(daemon) == (0, 0)
        # The IMAP client sees them: new/ -> cur/, some flagged as read or flagged.
        for i, (mid, path) in enumerate(sorted(paths.items())):
            paths[mid] = set_flags(path, "S" if i % 2 else "FS")
        spam_paths = [p for mid, p in paths.items() if mid.startswith(b"spam")]
        ham_paths = [p for mid, p in paths.items() if mid.startswith(b"ham")]
        spam_in_junk = [imap_move(p, maildir, JUNK) for p in spam_paths]
        ham_in_junk = [imap_move(p, maildir, JUNK) for p in ham_paths]
        await wait_until(lambda: trained(daemon) == (40, 0))
        ham_in_junk = [set_flags(p, "RS") for p in ham_in_junk]  # flags change in Junk: nothing
        [imap_move(p, maildir, "") for p in ham_in_junk]  # the person's correction
        await wait_until(lambda: trained(daemon) == (30, 10))
        for p in spam_in_junk:  # emptying Junk into Trash is not "not spam"
            imap_move(set_flags(p, "ST"), maildir, TRASH, "ST")
        await sentinel(daemon, maildir)
        assert trained(daemon) == (31, 10)
        events = engine_of(daemon).stats()["training_events"]
        assert events == {"maildir:learned": 41, "maildir:corrected": 10}


async def test_quick_there_and_back_without_waiting(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        paths = list(
            by_id(await deliver_unscored(daemon, maildir, [make_message(Label.HAM, i) for i in range(5)])).values()
        )
        for p in paths:
            imap_move(imap_move(p, maildir, JUNK), maildir, "")
        await sentinel(daemon, maildir)
        spam, ham = trained(daemon)
        assert (spam, ham) == (1, 5)


async def test_non_events_do_not_train(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        train(daemon)
        baseline = trained(daemon)
        messages = [make_message(Label.HAM, i) for i in range(6)] + [make_message(Label.SPAM, i) for i in range(3)]
        paths = by_id(await deliver_unscored(daemon, maildir, messages))
        assert len(filed(maildir, JUNK)) == 3  # spamd's own filing into Junk: not training
        hams = [paths[f"ham-{i}-0@example.org".encode()] for i in range(6)]
        a = set_flags(hams[0], "")  # new/ -> cur/
        a = set_flags(a, "S")  # read
        a = set_flags(a, "RS")  # replied
        b = imap_move(hams[1], maildir, ".Work")  # between ordinary folders
        imap_move(b, maildir, ".Archive.2024")
        hams[2].unlink()  # deletion
        imap_move(hams[3], maildir, TRASH)  # INBOX -> Trash
        for junk in folder_files(maildir, JUNK):  # Junk -> Trash
            imap_move(junk, maildir, TRASH)
        await sentinel(daemon, maildir)
        assert trained(daemon) == (baseline[0] + 1, baseline[1])
        assert engine_of(daemon).stats()["training_events"].get("maildir:learned") == 1


async def test_moves_between_any_folder_and_junk(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        paths = list(
            by_id(await deliver_unscored(daemon, maildir, [make_message(Label.HAM, i) for i in range(3)])).values()
        )
        work = imap_move(paths[0], maildir, ".Work")
        in_junk = imap_move(work, maildir, JUNK)  # from another folder into Junk: spam
        await wait_until(lambda: trained(daemon) == (1, 0))
        imap_move(in_junk, maildir, ".Work")  # out of Junk into another folder: ham
        await wait_until(lambda: trained(daemon) == (0, 1))
        trash = imap_move(paths[1], maildir, TRASH)
        imap_move(trash, maildir, JUNK)  # Trash -> Junk: spam
        await wait_until(lambda: trained(daemon) == (1, 1))


async def test_spamds_own_deliveries_never_wake_the_loops_watcher_yet_moving_them_trains(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        train(daemon)
        port = smtp_port(daemon)
        raws = [make_message(Label.HAM, n, seed=11) for n in range(20)]
        for raw in raws:
            assert await asyncio.to_thread(send, port, raw) == {}
        await sentinel(daemon, maildir)
        # One "created" event per delivery reached the loop before; the watcher's thread
        # now drops them (a straggler that arrives after its delivery returned still may).
        handled = daemon.stats()["daemon"]["maildir_events_handled"]
        assert handled < len(raws) // 2, handled
        delivered = folder_files(maildir)
        assert len(delivered) == len(raws)
        spam_before = trained(daemon)[0]
        imap_move(delivered[0], maildir, JUNK)
        await wait_until(lambda: trained(daemon)[0] == spam_before + 1)


async def test_recent_names_are_kept_at_least_one_period_and_at_most_two():
    names = RecentNames(keep_s=0.3)
    names.add("first")
    await asyncio.sleep(0.2)
    assert "first" in names and "never" not in names
    await asyncio.sleep(0.2)
    names.add("second")  # a turnover: "first" is now in the previous period
    assert "first" in names and "second" in names
    await asyncio.sleep(0.35)
    names.add("third")  # another: "first" is gone, the set does not grow without bound
    assert "first" not in names and "second" in names and "third" in names


async def test_move_under_a_new_name_hard_link_then_unlink(tmp_path):
    """Dovecot may copy a message into the other folder by hard link under a new base name, then expunge."""
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        [path] = await deliver_unscored(daemon, maildir, [make_message(Label.HAM, 1)])
        junk_copy = maildir / JUNK / "cur" / "1700000000.M1P1.imap,S=99:2,S"
        os.link(path, junk_copy)
        path.unlink()
        await wait_until(lambda: trained(daemon) == (1, 0))
        back = maildir / "cur" / "1700000001.M2P1.imap:2,S"
        os.link(junk_copy, back)
        junk_copy.unlink()
        await wait_until(lambda: trained(daemon) == (0, 1))


async def test_mail_appearing_in_junk_unseen(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        drop(maildir, make_message(Label.SPAM, 1), folder=JUNK, sub="cur")  # APPEND into Junk
        await wait_until(lambda: trained(daemon) == (1, 0))
        # Filed into Junk by a delivery agent following spamd's own verdict: no person decided.
        drop(maildir, b"X-Spam-Status: Yes, score=0.99\nX-Spam-Flag: YES\n" + make_message(Label.SPAM, 2), folder=JUNK)
        await sentinel(daemon, maildir)
        assert trained(daemon) == (2, 0)


async def test_several_users_share_one_model(tmp_path):
    root = tmp_path / "users"
    for user in ("alice", "bob"):
        (root / user / "Maildir").mkdir(parents=True)
    config = daemon_config(tmp_path / "data", maildir={"root": str(root), "fsync": False})
    async with running(config) as daemon:
        alice, bob = root / "alice" / "Maildir", root / "bob" / "Maildir"
        [a] = await deliver_unscored(daemon, alice, [make_message(Label.SPAM, 1)])
        [b] = await deliver_unscored(daemon, bob, [make_message(Label.SPAM, 2)])
        imap_move(a, alice, JUNK)
        imap_move(b, bob, JUNK)
        await wait_until(lambda: trained(daemon) == (2, 0))
        assert [d["user"] for d in daemon.stats()["daemon"]["maildirs"]] == ["alice", "bob"]


async def test_a_user_added_while_running_is_served_after_reload(tmp_path):
    """Refused over SMTP until a reload (SIGHUP) finds the new user's Maildir; then delivered and learned from."""
    root = tmp_path / "users"
    (root / "alice" / "Maildir").mkdir(parents=True)
    config = daemon_config(tmp_path / "data", maildir={"root": str(root), "fsync": False})
    async with running(config) as daemon:
        bob = root / "bob" / "Maildir"
        bob.mkdir(parents=True)
        drop(bob, make_message(Label.SPAM, 1), sub="cur")  # there before spamd serves it: caught up, not trained
        port = smtp_port(daemon)
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await asyncio.to_thread(send, port, make_message(Label.HAM, 2), ["bob@example.com"])
        reloaded = await daemon.reload()
        assert reloaded["maildirs_added"] == [str(bob)]
        assert [m.user for m in daemon.mailboxes] == ["alice", "bob"]
        assert (await daemon.reload())["maildirs_added"] == []  # found once
        await asyncio.to_thread(send, port, make_message(Label.HAM, 3), ["bob@example.com"])
        assert len(folder_files(bob, "")) == 2
        [old] = [p for p in folder_files(bob, "") if b"spam-1-0@" in p.read_bytes()]
        imap_move(old, bob, JUNK)  # bob's move is learned at once
        await wait_until(lambda: trained(daemon) == (1, 0))
        assert daemon.stats()["daemon"]["maildirs"][1]["user"] == "bob"


# ---------------------------------------------------------------- catch-up on start


async def test_moves_made_while_down_are_learned_on_start(tmp_path):
    maildir = tmp_path / "Maildir"
    config = daemon_config(tmp_path)
    spam = [make_message(Label.SPAM, i) for i in range(4)]
    ham = [make_message(Label.HAM, i) for i in range(4)]
    async with running(config) as daemon:
        paths = by_id(await deliver_unscored(daemon, maildir, spam + ham))
        ham_in_junk = imap_move(paths[b"ham-0-0@example.org"], maildir, JUNK)
        await wait_until(lambda: trained(daemon) == (1, 0))
    # Down: the person moves spam into Junk (one under a new name), takes the ham back
    # out, changes flags, empties something into Trash.
    for i in range(3):
        imap_move(paths[f"spam-{i}-0@example.org".encode()], maildir, JUNK)
    renamed = maildir / JUNK / "cur" / "1700000000.M9P9.imap:2,S"
    os.link(paths[b"spam-3-0@example.org"], renamed)
    paths[b"spam-3-0@example.org"].unlink()
    imap_move(ham_in_junk, maildir, "")
    set_flags(paths[b"ham-1-0@example.org"], "S")
    imap_move(paths[b"ham-2-0@example.org"], maildir, TRASH)
    async with running(config) as daemon:
        assert trained(daemon) == (4, 1)
        reads = watcher_of(daemon).files_read
        assert reads == 1  # only the file under a new name was read: the index knew the rest
    # A restart with nothing changed learns nothing more; neither does one with the index lost.
    async with running(config) as daemon:
        assert trained(daemon) == (4, 1) and watcher_of(daemon).files_read == 0
    (tmp_path / "maildir-index.msgpack").unlink()
    async with running(config) as daemon:
        assert trained(daemon) == (4, 1) and watcher_of(daemon).files_read == 8


async def test_first_start_learns_an_existing_junk_folder(tmp_path):
    maildir = tmp_path / "Maildir"
    for i in range(3):
        drop(maildir, make_message(Label.SPAM, i), folder=JUNK, sub="cur")
    drop(maildir, make_message(Label.HAM, 0), sub="cur")
    async with running(daemon_config(tmp_path)) as daemon:
        assert trained(daemon) == (3, 0)


async def test_interrupted_filing_is_not_duplicated(tmp_path):
    maildir = tmp_path / "Maildir"
    config = daemon_config(tmp_path)
    original = drop(maildir, make_message(Label.HAM, 1))
    async with running(config):
        await wait_until(lambda: len(filed(maildir)) == 1)
    [scored] = filed(maildir)
    # As if spamd died between renaming the scored copy into place and unlinking the original.
    original.write_bytes(make_message(Label.HAM, 1))  # (spamd is down: no watcher sees this write)
    async with running(config):
        assert [p.name for p in folder_files(maildir)] == [scored.name]
        assert base_of(scored.name).startswith(base_of(original.name))


async def test_training_is_snapshotted_on_the_timer(tmp_path):
    import spamd.daemon

    maildir = tmp_path / "Maildir"
    config = daemon_config(tmp_path, store={"snapshot_interval_s": 0.05})
    async with running(config) as daemon:
        assert spamd.daemon.TIMER_TICK_S >= 0.05  # the tick is min(interval, TIMER_TICK_S)
        drop(maildir, make_message(Label.SPAM, 1), folder=JUNK, sub="cur")
        await wait_until(lambda: trained(daemon) == (1, 0))
        await wait_until(lambda: (tmp_path / "state" / "snapshot-000000000001.spamd").is_file(), timeout=5)
        assert (tmp_path / "maildir-index.msgpack").is_file()


async def test_a_file_moved_out_of_the_maildir_is_forgotten(tmp_path):
    maildir = tmp_path / "Maildir"
    async with running(daemon_config(tmp_path)) as daemon:
        [path] = await deliver_unscored(daemon, maildir, [make_message(Label.HAM, 1)])
        os.rename(path, tmp_path / "elsewhere")
        await sentinel(daemon, maildir)
        assert base_of(path.name) not in daemon.mailboxes[0].index.by_base


async def test_stale_tmp_files_are_removed_fresh_ones_kept(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import STALE_TMP_S, Mailbox

    mailbox = Mailbox(tmp_path / "Maildir", MaildirConfig(), "user", None)
    mailbox.ensure_layout()
    now = time.time()
    old_inbox = tmp_path / "Maildir" / "tmp" / "1.killed.host"
    old_junk = tmp_path / "Maildir" / ".Junk" / "tmp" / "2.killed.host"
    fresh = tmp_path / "Maildir" / "tmp" / "3.writing.host"
    for path in (old_inbox, old_junk, fresh):
        path.write_bytes(b"Subject: partial\n")
    for path in (old_inbox, old_junk):
        os.utime(path, (now - STALE_TMP_S - 60, now - STALE_TMP_S - 60))
    assert mailbox.remove_stale_tmp(now) == 2
    assert fresh.exists() and not old_inbox.exists() and not old_junk.exists()
