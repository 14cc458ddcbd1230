"""Live accuracy: remembered verdicts judged by people's moves, per-day windows, persistence, end to end.

Unit tests run LiveAccuracy on an injected clock (no sleeps). The Engine tests
use a real state directory (snapshots, journal replay). The end-to-end tests run
spamd as a subprocess with real SMTP (smtplib), real Maildir moves (renames as an
IMAP server makes them), spamctl as a subprocess, SIGTERM and SIGKILL.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spamd.config import Config, ModelConfig, StoreConfig
from spamd.engine.engine import Engine
from spamd.model.bayes import Label, Verdict
from spamd.people.accuracy import (
    AGREED,
    DAY_S,
    FALSE_POSITIVE,
    MISSED_SPAM,
    UNSURE_HAM,
    UNSURE_SPAM,
    LiveAccuracy,
    is_person,
    judgement,
)
from spamd.store import decode_snapshot, encode_snapshot
from tests import core_helpers as h
from tests.daemon_helpers import DaemonProcess, folder_files, imap_move, send, set_flags, write_config

DAY0 = 20_000 * DAY_S  # a UTC midnight


class Clock:
    def __init__(self, now: float = DAY0 + 3600):
        self.now = now

    def __call__(self) -> float:
        return self.now


def key(n: int) -> bytes:
    return n.to_bytes(16, "big")


# ---------------------------------------------------------------- units


@pytest.mark.parametrize(
    "verdict, label, expected",
    [
        (Verdict.HAM, Label.SPAM, MISSED_SPAM),
        (Verdict.SPAM, Label.HAM, FALSE_POSITIVE),
        (Verdict.UNSURE, Label.SPAM, UNSURE_SPAM),
        (Verdict.UNSURE, Label.HAM, UNSURE_HAM),
        (Verdict.SPAM, Label.SPAM, AGREED),
        (Verdict.HAM, Label.HAM, AGREED),
    ],
)
def test_a_persons_label_judges_the_verdict(verdict, label, expected):
    assert judgement(verdict, label) == expected


def test_autolearn_and_eval_are_not_a_person():
    assert is_person("maildir", True) and is_person("spamctl", True) and is_person("spamc", True)
    assert not is_person("autolearn", False) and not is_person("autolearn", True) and not is_person("eval", True)
    assert not is_person("maildir", False)


def test_windows_count_each_kind_by_the_day_the_person_acted():
    clock = Clock()
    live = LiveAccuracy(1000, clock)
    verdicts = [Verdict.HAM, Verdict.SPAM, Verdict.UNSURE, Verdict.UNSURE, Verdict.SPAM, Verdict.HAM]
    for i, verdict in enumerate(verdicts):
        live.scored(key(i), verdict, "smtp")
    # today: a missed spam; 3 days ago: a false positive; 10 days ago: unsure -> spam;
    # 40 days ago: unsure -> ham (outside the month); agreement today.
    assert live.judged(key(0), Label.SPAM) == MISSED_SPAM
    assert live.judged(key(1), Label.HAM, when=clock.now - 3 * DAY_S) == FALSE_POSITIVE
    assert live.judged(key(2), Label.SPAM, when=clock.now - 10 * DAY_S) == UNSURE_SPAM
    assert live.judged(key(3), Label.HAM, when=clock.now - 40 * DAY_S) == UNSURE_HAM
    assert live.judged(key(4), Label.SPAM) == AGREED
    day, week, month = live.window(1), live.window(7), live.window(30)
    assert (day["scored"], day[MISSED_SPAM], day[FALSE_POSITIVE], day[AGREED]) == (6, 1, 0, 1)
    assert (week[MISSED_SPAM], week[FALSE_POSITIVE], week[UNSURE_SPAM]) == (1, 1, 0)
    assert (month[MISSED_SPAM], month[FALSE_POSITIVE], month[UNSURE_SPAM], month[UNSURE_HAM]) == (1, 1, 1, 0)
    assert day["rates"][MISSED_SPAM] == pytest.approx(1 / 6)
    assert day["scored_by_verdict"] == {"ham": 2, "unsure": 2, "spam": 2}
    # The next day, today's figures are yesterday's: out of "day", still in "week".
    clock.now += DAY_S
    assert live.window(1)["scored"] == 0 and live.window(1)["rates"][MISSED_SPAM] is None
    assert live.window(7)[MISSED_SPAM] == 1 and live.window(7)["scored"] == 6
    assert live.totals["judged:unsure_resolved_ham"] == 1  # all time, whatever the window
    days = live.per_day()  # every day from the oldest to today, quiet days empty
    assert len(days) == 42 and days[0] == {"day": "2024-08-25", UNSURE_HAM: 1} and days[-1] == {"day": "2024-10-05"}


def test_only_the_first_persons_judgement_counts_and_unscored_mail_is_not_judged():
    live = LiveAccuracy(1000, Clock())
    live.scored(key(1), Verdict.SPAM, "maildir")
    assert live.judged(key(1), Label.HAM) == FALSE_POSITIVE
    assert live.judged(key(1), Label.SPAM) is None  # the person changed their mind: not counted again
    assert live.judged(key(2), Label.SPAM) is None  # never scored (trained from an archive)
    assert live.window(1)[FALSE_POSITIVE] == 1 and live.window(1)[AGREED] == 0
    live.scored(key(1), Verdict.HAM, "smtp")  # scored again (sent again): a fresh verdict to judge
    assert live.judged(key(1), Label.SPAM) == MISSED_SPAM


def test_day_buckets_and_verdict_memory_are_bounded():
    clock = Clock()
    live = LiveAccuracy(max_entries=10, clock=clock, max_days=5)
    for day in range(8):
        live.scored(key(day), Verdict.HAM, "smtp")
        clock.now += DAY_S
    assert sorted(live.days) == [20_003 + i for i in range(5)]  # the oldest days forgotten
    for n in range(100):
        live.scored(key(1000 + n), Verdict.SPAM, "smtp")
    assert len(live) <= 10 * 1.05 + 16
    assert live.verdict_of(key(1099)) is Verdict.SPAM and live.verdict_of(key(0)) is None
    assert live.judged(key(0), Label.SPAM) is None


def test_export_restore_round_trip():
    clock = Clock()
    live = LiveAccuracy(1000, clock)
    live.scored(key(1), Verdict.UNSURE, "spamc")
    live.scored(key(2), Verdict.SPAM, "milter")
    live.judged(key(1), Label.SPAM)
    live.trained(Label.SPAM)
    again = LiveAccuracy(1000, clock)
    again.restore(live.export())
    assert again.summary() == live.summary()
    assert again.judged(key(1), Label.HAM) is None  # judged before the export: stays judged
    assert again.judged(key(2), Label.HAM) == FALSE_POSITIVE
    assert again.totals["scored:spamc:unsure"] == 1 and again.totals["scored:milter:spam"] == 1
    with pytest.raises(ValueError):
        again.restore({"keys": b"x" * 16, "values": b"", "days": {}, "totals": {}})


# ---------------------------------------------------------------- engine and store


def engine_config(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path, model=ModelConfig(hash_bits=12), store=StoreConfig(snapshot_interval_s=3600.0))


def msg(n: int, words: str) -> bytes:
    return f"From: a{n}@example.org\nSubject: s{n}\nMessage-ID: <{n}@example.org>\n\n{words} serial{n}\n".encode()


def test_engine_judges_a_persons_training_and_not_autolearn_and_keeps_it_across_snapshots(tmp_path):
    config = engine_config(tmp_path)
    engine = Engine.open(config, durable=False)
    messages = [msg(i, "hello world") for i in range(4)]
    keys = [engine.classify(raw).analyzed.key for raw in messages]
    for k, verdict in zip(keys, (Verdict.HAM, Verdict.SPAM, Verdict.UNSURE, Verdict.HAM), strict=True):
        engine.remember_verdict(k, verdict, "smtp")
    engine.train(messages[0], Label.SPAM, "maildir")  # missed spam
    engine.train(messages[1], Label.HAM, "spamctl")  # false positive
    engine.train(messages[2], Label.SPAM, "autolearn", user=False)  # not a person: not judged
    engine.train(messages[3], Label.SPAM, "eval")  # evaluation: not judged
    day = engine.stats()["live_accuracy"]["day"]
    assert (day[MISSED_SPAM], day[FALSE_POSITIVE], day[UNSURE_SPAM], day["scored"]) == (1, 1, 0, 4)
    assert (day["trained_spam"], day["trained_ham"]) == (3, 1)
    assert engine.has_unsaved_state()
    engine.snapshot()
    assert not engine.has_unsaved_state()
    engine.close()
    engine = Engine.open(config, durable=False)
    assert engine.stats()["live_accuracy"]["day"] == day
    engine.train(messages[2], Label.HAM, "maildir")  # a person resolves the unsure one now
    assert engine.stats()["live_accuracy"]["day"][UNSURE_HAM] == 1
    engine.close()


def test_after_a_crash_judgements_are_rederived_from_the_journal(tmp_path):
    """What survives a kill: verdicts the last snapshot holds, and every journaled training since."""
    config = engine_config(tmp_path)
    engine = Engine.open(config, durable=False)
    a, b = msg(1, "alpha"), msg(2, "beta")
    engine.remember_verdict(engine.classify(a).analyzed.key, Verdict.SPAM, "smtp")
    engine.snapshot()
    engine.remember_verdict(engine.classify(b).analyzed.key, Verdict.HAM, "smtp")  # after the snapshot
    engine.train(a, Label.HAM, "maildir")  # journaled: a false positive
    engine.train(b, Label.SPAM, "maildir")  # journaled, but its verdict is in no snapshot
    engine.close()  # no snapshot: as after SIGKILL
    engine = Engine.open(config, durable=False)
    day = engine.stats()["live_accuracy"]["day"]
    assert (day[FALSE_POSITIVE], day[MISSED_SPAM], day["scored"], day["trained_spam"], day["trained_ham"]) == (
        1,
        0,
        1,
        1,
        1,
    )
    engine.close()


def test_a_snapshot_without_live_figures_still_loads(tmp_path):
    """Snapshots written before live accuracy existed (no "live" key) load with empty figures."""
    config = engine_config(tmp_path)
    engine = Engine.open(config, durable=False)
    engine.train(msg(1, "gamma"), Label.SPAM, "spamctl")
    old = encode_snapshot(h.local_model(engine), h.local_ledger(engine), engine.trainer.seq, engine.counters())
    engine.close()
    decoded = decode_snapshot(old, config.model, 100, "old")
    assert decoded.live == {} and decoded.model.doc_totals[Label.SPAM] == 1
    (tmp_path / "state" / f"snapshot-{1:012d}.spamd").write_bytes(old)
    engine = Engine.open(config, durable=False)
    assert engine.stats()["live_accuracy"]["totals"] == {}
    assert engine.stats()["trained_spam"] == 1
    engine.close()


# ---------------------------------------------------------------- end to end

SPAMMY = "viagra casino winner prize claim cheap pills offer bitcoin lottery"
HAMMY = "meeting agenda minutes project review deadline lunch report schedule budget"


def stream_message(n: int, words: str) -> bytes:
    return (
        f"From: s{n}@example.org\nTo: user@example.com\nSubject: note {n}\n"
        f"Message-ID: <live-{n}@example.org>\n\n{(words + ' ') * 4}\nserial{n}x\n"
    ).encode()


def spamctl(data: Path, config: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--config", str(config), "--data-dir", str(data), *args],
        input=input, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done


def live_day(data: Path, config: Path) -> dict:
    return json.loads(spamctl(data, config, "stats", "--json").stdout)["live_accuracy"]["day"]


def find(maildir: Path, folder: str, n: int) -> Path:
    marker = f"<live-{n}@example.org>".encode()
    (path,) = [p for p in folder_files(maildir, folder) if marker in p.read_bytes()]
    return path


@pytest.mark.slow
def test_live_accuracy_end_to_end_with_restarts(tmp_path):
    """A stream spamd gets partly wrong; people's moves and spamctl count each kind exactly, across restarts."""
    config = write_config(tmp_path / "spamd.toml", "[store]\nsnapshot_interval_s = 3600.0\n")
    data = tmp_path / "data"
    maildir = data / "Maildir"
    # Teach it the two vocabularies (offline, before spamd starts): a message of both is unsure.
    for i in range(8):
        spamctl(data, config, "train", "--spam", "-", input=stream_message(900 + i, SPAMMY))
        spamctl(data, config, "train", "--ham", "-", input=stream_message(950 + i, HAMMY))
    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    try:
        # 0, 1, 7: spam words -> Junk; 2, 3, 6: ham words -> INBOX; 4, 5: both -> unsure, INBOX.
        words = [SPAMMY, SPAMMY, HAMMY, HAMMY, f"{SPAMMY} {HAMMY}", f"{SPAMMY} {HAMMY}", HAMMY, SPAMMY]
        for n, text in enumerate(words):
            send(daemon.port, stream_message(n, text))
        daemon.wait_for("message_scored", count=len(words))
        verdicts = {
            int(e["message_id"].split("-")[1].split("@")[0]): e["verdict"] for e in daemon.events("message_scored")
        }
        assert verdicts == {0: "spam", 1: "spam", 2: "ham", 3: "ham", 4: "unsure", 5: "unsure", 6: "ham", 7: "spam"}

        imap_move(find(maildir, ".Junk", 0), maildir, "")  # out of Junk: a false positive
        imap_move(find(maildir, ".Junk", 1), maildir, ".Trash")  # spam thrown away: agrees, not training
        imap_move(find(maildir, "", 2), maildir, ".Junk")  # into Junk after ham: a missed spam
        set_flags(find(maildir, "", 3), "S")  # ham read in INBOX: agrees, nothing counted
        imap_move(find(maildir, "", 4), maildir, ".Junk")  # unsure resolved as spam by a move
        daemon.wait_for("training_applied", count=3)
        spamctl(
            data, config, "train", "--ham", "-", input=find(maildir, "", 5).read_bytes()
        )  # unsure -> ham by spamctl
        spamctl(data, config, "train", "--ham", "-", input=find(maildir, "", 6).read_bytes())  # a person confirms ham
        expected = {"scored": 8, MISSED_SPAM: 1, FALSE_POSITIVE: 1, UNSURE_SPAM: 1, UNSURE_HAM: 1, AGREED: 1}
        day = live_day(data, config)
        assert {k: day[k] for k in expected} == expected
        assert day["rates"][FALSE_POSITIVE] == pytest.approx(1 / 8)
        text = spamctl(data, config, "stats").stdout.decode()
        assert "false positives" in text and "1 (12.50%)" in text

        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
        daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        daemon.wait_for("daemon_started")
        day = live_day(data, config)
        assert {k: day[k] for k in expected} == expected  # a clean restart keeps every figure

        # After the restart: one more false positive (its verdict is in the snapshot), then a
        # message scored since the snapshot, then SIGKILL. The move was acknowledged (journaled).
        imap_move(find(maildir, ".Junk", 7), maildir, "")
        daemon.wait_for("training_applied")
        send(daemon.port, stream_message(8, SPAMMY))
        daemon.wait_for("message_scored")
        daemon.signal(signal.SIGKILL)
        daemon.wait()
        daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        daemon.wait_for("daemon_started")
        day = live_day(data, config)
        # Survives the kill: the journaled false positive. Lost: the scored count of message 8,
        # given after the last snapshot (scoring is not journaled).
        assert day[FALSE_POSITIVE] == 2 and day["scored"] == 8
        assert {k: day[k] for k in (MISSED_SPAM, UNSURE_SPAM, UNSURE_HAM, AGREED)} == {
            MISSED_SPAM: 1, UNSURE_SPAM: 1, UNSURE_HAM: 1, AGREED: 1,
        }  # fmt: skip

        report = json.loads(spamctl(data, config, "report", "--json").stdout)["days"]
        assert report[-1][FALSE_POSITIVE] == 2 and report[-1]["trained:ham"] >= 1
        plot = tmp_path / "live.png"
        spamctl(data, config, "report", "--plot", str(plot))
        assert plot.read_bytes().startswith(b"\x89PNG")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        daemon.kill()
