"""Settled mail: read mail kept in place learned as ham, mail left in Junk as spam, once, after `settle_after`.

In-process tests inject the clock (the daemon's `clock`) and move it forward; the
end-to-end tests run the daemon as a subprocess with a settle_after of a second or
two and files dated in the past with os.utime. Every test sets settle_after itself.
Maildirs are real, in tmp_path; moves are renames, as an IMAP server makes them.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from spamd.config import load_config
from spamd.errors import ConfigError
from spamd.frontends.maildir.settle import SettleQueue, arrival, settles_as
from spamd.model.bayes import Label
from tests.daemon_helpers import (
    WATCHDOG_WARNING_IGNORED,
    daemon_config,
    drop,
    engine_of,
    folder_files,
    imap_move,
    make_message,
    running,
    set_flags,
    smtp_port,
    wait_until,
    watcher_of,
)
from tests.redis_helpers import with_redis

JUNK, TRASH = ".Junk", ".Trash"
SETTLE_S = 100.0  # in-process tests: the clock is theirs, so any value works
# spamd's verdict, as a delivery agent filing by it leaves the message: not a person's decision.
SPAM_VERDICT = b"X-Spam-Status: Yes, score=0.99\nX-Spam-Flag: YES\n"
HAM_VERDICT = b"X-Spam-Status: No, score=0.01\n"  # scored already: INBOX new/ mail is left alone


class Clock:
    """Wall time that a test moves forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def put(
    maildir: Path,
    data: bytes,
    folder: str = "",
    flags: str | None = None,
    age_s: float = 0.0,
    mtime: float | None = None,
) -> Path:
    """Deliver as an MDA or an IMAP APPEND does: tmp/, then new/ (no flags) or cur/ with `flags`.

    Its mtime (when it arrived) `age_s` ago, or `mtime` (a test's clock may be ahead of the files').
    """
    when = mtime if mtime is not None else (time.time() - age_s if age_s else None)
    return drop(maildir, data, folder, flags=flags, mtime=when)


def trained(daemon) -> tuple[int, int]:
    stats = daemon.engine.stats()
    return stats["trained_spam"], stats["trained_ham"]


def events(daemon) -> dict[str, int]:
    return dict(daemon.engine.stats()["training_events"])


async def handled(daemon, count: int) -> None:
    """Wait until the watcher has handled `count` events in all (each put, rename or unlink is one)."""
    await wait_until(lambda: daemon.watcher.handled >= count)
    await daemon.watcher.drained()


async def settle(daemon) -> None:
    """One pass of the settler over what is due by the daemon's clock (after any pass under way)."""
    await daemon.watcher.settler.settle_due()


def settle_config(tmp_path: Path, settle_after: float = SETTLE_S, **maildir):
    """Settled learning of every filing, spamd's own included (margin 0), unless a test says otherwise.

    Every settled label is learned ([model] train_margin inf), so that the tests see each
    one as learned; the thick threshold itself is tested in tests/test_feedback.py.
    """
    return daemon_config(
        tmp_path,
        maildir={"settle_after": settle_after, "settle_margin": 0.0, "fsync": False, **maildir},
        model={"train_margin": math.inf},
    )


# ---------------------------------------------------------------- the rule and the queue


def test_what_settles_as_what(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox

    mailbox = Mailbox(tmp_path, MaildirConfig(), "user")

    def label(relative: str) -> Label | None:
        loc = mailbox.locate(tmp_path / relative)
        assert loc is not None
        return settles_as(mailbox, loc.folder, loc.name)

    assert label("cur/1.M1.h:2,S") == Label.HAM
    assert label("cur/1.M1.h:2,FRS") == Label.HAM
    assert label(".Work.2024/cur/1.M1.h:2,S") == Label.HAM
    assert label("cur/1.M1.h:2,") is None  # unread
    assert label("new/1.M1.h") is None
    assert label("cur/1.M1.h:2,ST") is None  # marked deleted
    assert label(".Junk/new/1.M1.h") == Label.SPAM  # read or not
    assert label(".Junk/cur/1.M1.h:2,S") == Label.SPAM
    assert label(".Trash/cur/1.M1.h:2,S") is None


def test_arrival_is_the_mtime_unless_that_is_in_the_future():
    now = 1_800_000_000.0
    assert arrival("1700000000.M1.h", now - 50, now) == now - 50  # the name's time does not matter
    assert arrival("1799999000.M1.h:2,S", now + 3600, now) == 1_799_999_000  # a future mtime: the name's time
    assert arrival("oddname", now + 3600, now) == now + 3600


def test_the_queue_pops_only_what_is_due_and_a_tick_costs_nothing_more():
    queue = SettleQueue()
    mailbox_a, mailbox_b = object(), object()
    for i in range(10_000):
        queue.push(1000.0 + i, mailbox_a, f"cur/{i}:2,S")  # type: ignore[arg-type]
    queue.push(5.0, mailbox_b, ".Junk/new/x")  # type: ignore[arg-type]
    queue.push(5.0, mailbox_a, ".Junk/new/x")  # type: ignore[arg-type]  # same path, other Maildir
    started = time.perf_counter()
    for _ in range(1000):
        assert queue.pop_due(4.0, 64) == []
    idle_tick_s = (time.perf_counter() - started) / 1000
    assert idle_tick_s < 1e-4, idle_tick_s  # a peek at the heap's top, whatever it holds
    assert {id(m) for m, _ in queue.pop_due(5.0, 64)} == {id(mailbox_a), id(mailbox_b)}
    assert [p for _, p in queue.pop_due(1002.0, 64)] == ["cur/0:2,S", "cur/1:2,S", "cur/2:2,S"]
    assert len(queue) == 10_000 - 3 and queue.next_due() == 1003.0
    queue.rewind(50.0)
    assert len(queue.pop_due(50.0, 100_000)) == 10_000 - 3


def test_settled_marks_are_saved_with_the_seen_index_and_follow_its_entries(tmp_path):
    from spamd.config import MaildirConfig
    from spamd.frontends.maildir.mailbox import Mailbox
    from spamd.frontends.maildir.seen import export_indexes, load_indexes, save_indexes

    mailbox = Mailbox(tmp_path / "Maildir", MaildirConfig(), "user")
    index = mailbox.index
    for n, folder in enumerate(["", "", ".Junk", ".Work"]):
        index.record(f"{n}.M{n}.h", folder, bytes([n]) * 16)
    for n in (0, 2, 3):
        index.mark_settled(f"{n}.M{n}.h")
    index.mark_settled("never.seen")  # not in the index: nothing to mark
    assert len(index.settled) == 3 and not index.is_settled("1.M1.h")
    index.record("3.M3.h", "", bytes([3]) * 16)  # moved, same name: still settled
    assert index.is_settled("3.M3.h")
    save_indexes(tmp_path / "index", export_indexes([mailbox]))
    [restored] = load_indexes(tmp_path / "index").values()
    assert restored.by_base == index.by_base and restored.settled == index.settled
    assert [restored.is_settled(f"{n}.M{n}.h") for n in range(4)] == [True, False, True, True]
    restored.forget("0.M0.h")  # deleted: its mark goes with it
    assert restored.keep_only({"1.M1.h", "3.M3.h"}) == 1  # 2 deleted while spamd was down
    assert restored.settled == {bytes([3]) * 16}
    # An index written before settled learning existed (no "settled"): loaded, nothing settled.
    from spamd.frontends.maildir.seen import encode_indexes

    (tmp_path / "old").write_bytes(encode_indexes({"maildirs": {"m": index.export()}}))
    assert load_indexes(tmp_path / "old")["m"].settled == set()


def test_settle_after_is_validated(tmp_path):
    config = tmp_path / "spamd.toml"
    for bad in ("-1", "nan", "inf", '"1h"'):
        config.write_text(f"[maildir]\nsettle_after = {bad}\n")
        with pytest.raises(ConfigError, match="settle_after"):
            load_config(config)
    config.write_text("[maildir]\nsettle_after = 2\n")
    assert load_config(config).maildir.settle_after == 2.0
    assert load_config(None).maildir.settle_after == 259200.0  # three days
    assert load_config(None).maildir.settle_margin == float("inf")  # only mail spamd never scored


# ---------------------------------------------------------------- in process, with the clock moved by hand


def in_process(test):
    """An async test of a daemon on this test's loop (watchdog's harmless warning ignored)."""
    return pytest.mark.asyncio(WATCHDOG_WARNING_IGNORED(test))


@in_process
async def test_read_mail_settles_as_ham_junk_as_spam_unread_and_trash_never(tmp_path):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / ".Work" / sub).mkdir(parents=True)  # there before: a folder made while watched is not what is tested
    async with running(settle_config(tmp_path), clock=clock) as daemon:
        inbox_read = put(maildir, HAM_VERDICT + make_message(Label.HAM, 1), flags="S")
        work_read = put(maildir, HAM_VERDICT + make_message(Label.HAM, 2), folder=".Work", flags="RS")
        unread = put(maildir, HAM_VERDICT + make_message(Label.HAM, 3))
        put(maildir, HAM_VERDICT + make_message(Label.HAM, 4), folder=TRASH, flags="S")
        junk = put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 1), folder=JUNK)
        await handled(daemon, 5)
        await settle(daemon)
        assert trained(daemon) == (0, 0)  # none has been there long enough

        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (1, 2)
        assert events(daemon) == {"settled:learned": 3}
        index = daemon.mailboxes[0].index
        assert [index.is_settled(p.name.split(":")[0]) for p in (inbox_read, work_read, junk, unread)] == [True] * 3 + [
            False
        ]

        # Read later, long after it arrived: learned as soon as the watcher sees the flag.
        set_flags(unread, "S")
        await handled(daemon, 6)
        await settle(daemon)
        assert trained(daemon) == (1, 3)

        # Nothing learned twice: flags change, Junk is opened (new/ -> cur/), time passes.
        set_flags(inbox_read, "FS")
        junk = set_flags(junk, "S")
        await handled(daemon, 8)
        clock.advance(10 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (1, 3) and events(daemon) == {"settled:learned": 4}


@in_process
async def test_spamds_own_filing_settles_only_beyond_the_margin(tmp_path):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    async with running(settle_config(tmp_path, settle_margin=0.5), clock=clock) as daemon:
        put(maildir, b"X-Spam-Status: No, score=0.3000 log_odds=-0.154\n" + make_message(Label.HAM, 1), flags="S")
        put(maildir, b"X-Spam-Status: No, score=0.0100 log_odds=-0.835\n" + make_message(Label.HAM, 2), flags="S")
        put(
            maildir,
            b"X-Spam-Status: Yes, score=0.8600 log_odds=0.330\nX-Spam-Flag: YES\n" + make_message(Label.SPAM, 1),
            folder=JUNK,
        )
        put(maildir, HAM_VERDICT + make_message(Label.HAM, 3), flags="S")  # another filter's verdict: not spamd's
        await handled(daemon, 4)
        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        # The two near the thresholds stay unlearned (they may be mistakes nobody corrected).
        assert trained(daemon) == (0, 2) and events(daemon) == {"settled:learned": 2}
        assert all(daemon.mailboxes[0].index.is_settled(n.split(":")[0]) for n in os.listdir(maildir / "cur"))
        clock.advance(10 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (0, 2)  # looked at once, not again


def test_delivered_log_odds_reads_spamds_own_header():
    from spamd.engine.scoring import delivered_log_odds, spam_headers
    from spamd.model.bayes import Score, Verdict

    header = "".join(f"{k}: {v}\n" for k, v in spam_headers(Score(-0.4321, 0.09, Verdict.HAM), 0.15, 0.85))
    assert delivered_log_odds(header.encode() + b"\nbody log_odds=9\n") == -0.432
    assert delivered_log_odds(b"X-Spam-Status: No, score=-1.2 required=5.0\n\nbody\n") is None
    assert delivered_log_odds(b"Subject: x\n\nX-Spam-Status: Yes, log_odds=3.0\n") is None  # in the body


@in_process
async def test_a_persons_later_move_corrects_settled_mail_exactly_once(tmp_path):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / ".Work" / sub).mkdir(parents=True)
    async with running(settle_config(tmp_path), clock=clock) as daemon:
        ham = put(
            maildir, HAM_VERDICT + make_message(Label.SPAM, 1), flags="S"
        )  # spam the person read and kept, for now
        spam = put(maildir, SPAM_VERDICT + make_message(Label.HAM, 1), folder=JUNK)  # ham lost in Junk, for now
        junk = put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 2), folder=JUNK)
        await handled(daemon, 3)
        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (2, 1)

        in_junk = imap_move(ham, maildir, JUNK)  # the person: it is spam after all
        rescued = imap_move(spam, maildir, "")  # and this one is not
        imap_move(junk, maildir, TRASH)  # emptying Junk: no training, and not spam twice
        await handled(daemon, 6)
        assert trained(daemon) == (2, 1)  # both corrected: counts moved, not added
        assert events(daemon) == {"settled:learned": 3, "maildir:corrected": 2}
        clock.advance(10 * SETTLE_S)
        await settle(daemon)
        work = imap_move(in_junk, maildir, ".Work")  # there and back: corrections only
        await handled(daemon, 7)
        in_junk = imap_move(work, maildir, JUNK)
        set_flags(rescued, "RS")
        await handled(daemon, 9)
        clock.advance(10 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (2, 1)
        assert events(daemon) == {"settled:learned": 3, "maildir:corrected": 4}
        # The Trainer declines settled learning over a person's decision (autolearn's rule).
        from spamd.learning.outcomes import Outcome

        assert daemon.scorer is not None
        assert daemon.scorer.learn(in_junk.read_bytes(), Label.HAM, "settled", user=False) == Outcome.DECLINED


@in_process
async def test_a_person_acting_before_it_settles_is_all_that_is_learned(tmp_path):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    async with running(settle_config(tmp_path), clock=clock) as daemon:
        lost_ham = put(maildir, SPAM_VERDICT + make_message(Label.HAM, 1), folder=JUNK)
        missed = put(maildir, HAM_VERDICT + make_message(Label.SPAM, 1), flags="S")
        thrown = put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 2), folder=JUNK)
        deleted = put(maildir, HAM_VERDICT + make_message(Label.HAM, 2), flags="S")
        await handled(daemon, 4)
        clock.advance(SETTLE_S / 2)
        imap_move(lost_ham, maildir, "")  # rescued: a person's ham
        imap_move(missed, maildir, JUNK)  # a person's spam
        imap_move(thrown, maildir, TRASH)
        deleted = set_flags(deleted, "ST")  # marked deleted, then expunged
        await handled(daemon, 8)
        deleted.unlink()
        await handled(daemon, 9)
        clock.advance(SETTLE_S * 10)
        await settle(daemon)
        assert trained(daemon) == (1, 1)
        assert events(daemon) == {"maildir:learned": 2}


@in_process
async def test_smtp_deliveries_into_junk_settle_without_the_loop_seeing_their_events(tmp_path):
    import asyncio

    from tests.daemon_helpers import send, train

    clock = Clock()
    maildir = tmp_path / "Maildir"
    async with running(settle_config(tmp_path), clock=clock) as daemon:
        train(daemon)
        for n in range(3):
            assert await asyncio.to_thread(send, smtp_port(daemon), make_message(Label.SPAM, n, seed=5)) == {}
        assert len(folder_files(maildir, JUNK)) == 3
        assert len(watcher_of(daemon).settler.queue) == 3  # queued at delivery, due settle_after from then
        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (23, 20)
        assert events(daemon)["settled:learned"] == 3


@in_process
async def test_restarts_learn_nothing_twice_and_catch_up_what_became_due_while_down(tmp_path):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    config = settle_config(tmp_path)
    async with running(config, clock=clock) as daemon:
        put(maildir, HAM_VERDICT + make_message(Label.HAM, 1), flags="S")
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 1), folder=JUNK)
        await handled(daemon, 2)
        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (1, 1)
        put(maildir, HAM_VERDICT + make_message(Label.HAM, 2), flags="S", mtime=clock())  # due after spamd stops
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 2), folder=JUNK, mtime=clock())
        await handled(daemon, 4)
        await settle(daemon)
        assert trained(daemon) == (1, 1)
    # Down: time passes, a message is read, one more arrives in Junk.
    clock.advance(2 * SETTLE_S)
    put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 3), folder=JUNK, age_s=2 * SETTLE_S)
    async with running(config, clock=clock) as daemon:
        # Queued by the catch-up: the three not settled yet, not the two that were.
        assert daemon.stats()["daemon"]["maildirs"][0]["settled_messages"] == 2
        await settle(daemon)
        assert trained(daemon) == (3, 2)
        assert events(daemon) == {"settled:learned": 3}
    async with running(config, clock=clock) as daemon:
        assert len(watcher_of(daemon).settler.queue) == 0  # everything there has settled: nothing queued, nothing read
        clock.advance(SETTLE_S * 10)
        await settle(daemon)
        assert trained(daemon) == (3, 2) and events(daemon) == {}
        assert watcher_of(daemon).files_read == 0
    # The index lost (a crash before it was saved, say): the ledger knows them all; no training.
    (tmp_path / "maildir-index.msgpack").unlink()
    async with running(config, clock=clock) as daemon:
        await settle(daemon)
        assert trained(daemon) == (3, 2) and events(daemon) == {}
        assert watcher_of(daemon).settler.counts["known"] == 5 and "learned" not in watcher_of(daemon).settler.counts
        assert len(daemon.mailboxes[0].index.settled) == 5


DAY_S = 86400.0


def put_old_mail(tmp_path: Path, count: int) -> Path:
    """A month-old mailbox: `count` read ham in INBOX and `count` spam in Junk. Returns the Maildir."""
    maildir = tmp_path / "Maildir"
    for n in range(count):
        put(maildir, make_message(Label.HAM, n), flags="S", age_s=30 * DAY_S - n)
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, n), folder=JUNK, age_s=30 * DAY_S - n)
    return maildir


@in_process
async def test_first_start_over_existing_maildirs_trains_the_model(tmp_path):
    """Old read INBOX mail becomes ham, old Junk spam: the new install is not Unsure on everything."""
    maildir = put_old_mail(tmp_path, 15)
    for n in range(15, 20):
        put(maildir, make_message(Label.HAM, n), flags="", age_s=DAY_S)  # never read: not learned
    config = settle_config(tmp_path, settle_after=3600.0)
    async with running(config) as daemon:
        await wait_until(lambda: trained(daemon) == (15, 15))
        assert events(daemon) == {"settled:learned": 30}
        verdicts = [engine_of(daemon).classify(make_message(label, 100 + n, seed=3)).score.verdict.value
                    for label in (Label.HAM, Label.SPAM) for n in range(5)]  # fmt: skip
        assert verdicts == ["ham"] * 5 + ["spam"] * 5


@in_process
async def test_first_start_leaves_the_history_the_model_already_files_right_by_the_margin(tmp_path):
    """[model] train_margin as shipped: old mail the model already files right by 2 is not learned; the rest is."""
    put_old_mail(tmp_path, 30)
    config = daemon_config(tmp_path, maildir={"settle_after": 3600.0, "settle_margin": 0.0, "fsync": False})
    assert config.model.train_margin == 2.0
    async with running(config) as daemon:
        await wait_until(lambda: sum(events(daemon).values()) == 60)
        counted = events(daemon)
        assert set(counted) == {"settled:learned", "settled:skipped_confident"}, counted
        assert sum(trained(daemon)) == counted["settled:learned"] < 60
        verdicts = [engine_of(daemon).classify(make_message(label, 100 + n, seed=3)).score.verdict.value
                    for label in (Label.HAM, Label.SPAM) for n in range(5)]  # fmt: skip
        assert verdicts == ["ham"] * 5 + ["spam"] * 5


@in_process
async def test_settled_learning_with_the_model_in_redis(tmp_path, redis_url):
    clock = Clock()
    maildir = tmp_path / "Maildir"
    config = with_redis(settle_config(tmp_path), redis_url)
    async with running(config, clock=clock) as daemon:
        ham = put(maildir, HAM_VERDICT + make_message(Label.HAM, 1), flags="S")
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 1), folder=JUNK)
        await handled(daemon, 2)
        clock.advance(2 * SETTLE_S)
        await settle(daemon)
        assert trained(daemon) == (1, 1)
        imap_move(ham, maildir, JUNK)
        await handled(daemon, 3)
        assert trained(daemon) == (2, 0)
        assert events(daemon) == {"settled:learned": 2, "maildir:corrected": 1}
    (tmp_path / "maildir-index.msgpack").unlink()  # and the ledger in Redis is what prevents a repeat
    async with running(config, clock=clock) as daemon:
        clock.advance(SETTLE_S * 10)
        await settle(daemon)
        assert trained(daemon) == (2, 0) and events(daemon) == {}
        assert watcher_of(daemon).settler.counts["known"] == 2


@in_process
async def test_a_reload_turns_settled_learning_on_and_off(tmp_path):
    from spamd.daemon import Daemon

    clock = Clock()
    maildir = tmp_path / "Maildir"
    config_file = tmp_path / "spamd.toml"
    config_file.write_text(
        f'data_dir = "{tmp_path}"\n[model]\nhash_bits = 16\n[smtp]\nport = 0\n[maildir]\nfsync = false\nsettle_after = 0\n'
    )
    daemon = Daemon(config_file, install_signals=False, clock=clock)
    try:
        await daemon.startup()
        put(maildir, HAM_VERDICT + make_message(Label.HAM, 1), flags="S", age_s=3 * SETTLE_S)
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 1), folder=JUNK, age_s=3 * SETTLE_S)
        await handled(daemon, 2)
        await settle(daemon)
        assert trained(daemon) == (0, 0) and len(watcher_of(daemon).settler.queue) == 0  # off: nothing queued

        config_file.write_text(config_file.read_text().replace("settle_after = 0\n", f"settle_after = {SETTLE_S}\n"))
        reloaded = await daemon.reload()
        assert reloaded["applied"]["maildir.settle_after"] == [0.0, SETTLE_S] and not reloaded["needs_restart"]
        await wait_until(lambda: trained(daemon) == (1, 1))  # what was there is listed and learned

        config_file.write_text(config_file.read_text().replace(f"settle_after = {SETTLE_S}\n", "settle_after = 0\n"))
        await daemon.reload()
        put(maildir, SPAM_VERDICT + make_message(Label.SPAM, 2), folder=JUNK, age_s=3 * SETTLE_S)
        await handled(daemon, 3)
        clock.advance(SETTLE_S * 10)
        await settle(daemon)
        assert trained(daemon) == (1, 1) and len(watcher_of(daemon).settler.queue) == 0
    finally:
        daemon.request_exit()
        await daemon.shutdown()
