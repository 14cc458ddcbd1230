"""A mail-evidence family switched on or off against a stored model: the model is kept and learns it from then on.

The families only add tokens of their own prefixes, so a model built without one
holds what it would hold had the family seen nothing yet; the settings that change
what a count means (stored_counts, char_ngrams, osb, hash_bits) are still refused.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.errors import CorruptStateError
from spamd.model.bayes import Label, Score
from spamd.model.families import UNRECORDED_COUNT_SETTINGS, EvidenceHistory, count_settings
from spamd.store.snapshot import check_count_settings
from tests import core_helpers as h
from tests.cli_helpers import HAM, SPAM, run_spamctl
from tests.daemon_helpers import NO_DNS_SECTION, DaemonProcess, folder_files, send
from tests.redis_helpers import redis_state, with_redis

PHISH = b"From: Walmart Notices Center <walmartnoticescenter@sinhil.com>\nSubject: your order\n\nverify now\n"
ON = ModelConfig(hash_bits=12, sender_claims=True)
OFF = ModelConfig(hash_bits=12, sender_claims=False)


def write_config(path: Path, model: str = "") -> Path:
    """A daemon's config (small model, JSON logs, DNS on loopback only) with these [model] lines."""
    path.write_text("[model]\nhash_bits = 16\n" + model + '[log]\nformat = "json"\n' + NO_DNS_SECTION)
    return path


def with_model(config: Config, model: ModelConfig) -> Config:
    return dataclasses.replace(config, model=model)


def train_some(engine: Engine, start: int = 0) -> None:
    for raw in SPAM[start:]:
        engine.train(raw, Label.SPAM, "test")
    for raw in HAM[start:]:
        engine.train(raw, Label.HAM, "test")


def assert_diluted(now: Score, before: Score) -> None:
    """The score of a model that has learned nothing of a family yet: each of its tokens adds 0 to the mean."""
    assert now.verdict == before.verdict
    assert 0 < now.log_odds / before.log_odds <= 1


def evidence_of(engine: Engine) -> list[str]:
    return [str(row["family"]) for row in engine.stats()["evidence_families"]]


def test_only_the_evidence_families_may_differ_from_the_stored_settings():
    stored = count_settings(OFF)
    check_count_settings(stored, ON, "here")  # switched on
    check_count_settings(count_settings(ON), OFF, "here")  # and off
    for other in (dataclasses.replace(ON, osb=True), dataclasses.replace(ON, stored_counts="binary")):
        with pytest.raises(CorruptStateError, match="the counts mean something else"):
            check_count_settings(stored, other, "here")


def test_the_history_follows_each_switch():
    history = EvidenceHistory()
    assert history.follow(("sender_claims",), 5, 100.0) == (["sender_claims"], [])
    assert history.follow(("sender_claims", "bulk_marks"), 9, 200.0) == (["bulk_marks"], [])
    assert history.follow(("bulk_marks",), 12, 300.0) == ([], ["sender_claims"])
    assert EvidenceHistory.restore(history.export(), ("bulk_marks", "link_targets")).since == {
        "bulk_marks": (9, 200.0),
        "link_targets": (0, 0.0),  # named by the settings, not dated: since the first record
    }


def test_an_embedded_model_switched_on_and_off_keeps_its_counts_and_learns_from_then(tmp_path):
    base = h.small_config(tmp_path)
    engine = Engine.open(with_model(base, OFF), durable=False)
    train_some(engine)
    engine.snapshot()
    engine.train(PHISH, Label.SPAM, "test")  # in the journal only
    before = engine.classify(HAM[0]).score
    engine.close()

    engine = Engine.open(with_model(base, ON), durable=False)  # snapshot + journal, built without the family
    try:
        assert evidence_of(engine) == ["sender_claims"]
        [row] = engine.stats()["evidence_families"]
        assert row["since_seq"] == engine.trainer.seq + 1 and row["since"]
        # Nothing of the family learned yet: its tokens weigh nothing (but count among the message's).
        assert_diluted(engine.classify(HAM[0]).score, before)
        engine.train(PHISH.replace(b"your order", b"your parcel"), Label.SPAM, "test")
        _, rows = engine.explain(PHISH, limit=200)
        assert "from-name-not-in-domain:walmart" in [r.token for r in rows]
        since = row["since_seq"]
    finally:
        engine.close()

    engine = Engine.open(with_model(base, ON), durable=False)  # no new switch: the date is kept
    try:
        assert engine.stats()["evidence_families"][0]["since_seq"] == since
        assert engine.store.last_snapshot_seq == since - 1  # written at the switch
    finally:
        engine.close()

    engine = Engine.open(with_model(base, OFF), durable=False)  # replays a record made with the family on
    try:
        assert evidence_of(engine) == []
        engine.train(HAM[0].replace(b"Subject:", b"Subject: again"), Label.HAM, "test")
        assert engine.classify(PHISH).score is not None
    finally:
        engine.close()

    for other in (dataclasses.replace(OFF, osb=True), dataclasses.replace(OFF, hash_bits=13)):
        with pytest.raises(CorruptStateError, match="set (it|them) back"):
            Engine.open(with_model(base, other), durable=False)


def test_an_export_of_one_family_set_imports_under_another(tmp_path):
    source = Engine.open(with_model(h.small_config(tmp_path / "a"), ON), durable=False)
    train_some(source)
    data = source.export_snapshot()
    source.close()
    target = Engine.open(with_model(h.small_config(tmp_path / "b"), OFF), durable=False)
    try:
        target.import_snapshot(data, "export")
        assert evidence_of(target) == []
        assert target.stats()["trained_spam"] == len(SPAM)
    finally:
        target.close()


def test_a_redis_model_switched_on_and_off_keeps_its_counts(tmp_path, redis_url):
    def opened(model: ModelConfig, name: str) -> Engine:
        return Engine.open(with_redis(with_model(h.small_config(tmp_path / name), model), redis_url))

    engine = opened(OFF, "a")
    train_some(engine)
    before = engine.classify(HAM[0]).score
    engine.close()

    engine = opened(ON, "b")
    try:
        [row] = engine.stats()["evidence_families"]
        assert row["family"] == "sender_claims" and row["since_seq"] == len(SPAM) + len(HAM) + 1
        assert_diluted(engine.classify(HAM[0]).score, before)
        engine.train(PHISH, Label.SPAM, "test")
        _, rows = engine.explain(PHISH, limit=200)
        assert "from-name-not-in-domain:walmart" in [r.token for r in rows]
        exported = engine.export_snapshot()
        assert engine.stats()["trained_spam"] == len(SPAM) + 1
        state = redis_state(engine)
        assert json.loads(state.client.hget(state.totals, "count_settings"))["evidence"] == "sender_claims"
    finally:
        engine.close()

    engine = opened(ON, "c")  # no new switch: the date is kept
    try:
        assert engine.stats()["evidence_families"] == [row]
    finally:
        engine.close()

    engine = opened(OFF, "d")
    try:
        assert evidence_of(engine) == []
        engine.train(HAM[0].replace(b"Subject:", b"Subject: again"), Label.HAM, "test")
        assert engine.stats()["trained_ham"] == len(HAM) + 1
        engine.import_snapshot(exported, "export")  # made with the family on
        assert evidence_of(engine) == []
    finally:
        engine.close()

    with pytest.raises(CorruptStateError, match="another \\[redis\\] prefix"):
        opened(dataclasses.replace(OFF, osb=True), "e")


def stats_of(config: Path, data: Path) -> dict:
    done = run_spamctl("--config", config, "--data-dir", data, "stats", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_daemon_restarted_with_a_family_switched_on_then_off_starts_scores_and_trains(tmp_path):
    data = tmp_path / "data"
    config = write_config(tmp_path / "spamd.toml", "sender_claims = false\n")
    files = []
    for label, messages in (("spam", SPAM), ("ham", HAM)):
        for i, raw in enumerate(messages):
            files.append(tmp_path / f"{label}{i}.eml")
            files[-1].write_bytes(raw)
        done = run_spamctl("--config", config, "--data-dir", data, "train", f"--{label}", *files[-len(messages) :])
        assert done.returncode == 0, done.stderr
        if label == "spam":  # a snapshot, then the ham in the journal after it
            assert run_spamctl("--config", config, "--data-dir", data, "snapshot").returncode == 0
    phish = tmp_path / "phish.eml"
    phish.write_bytes(PHISH)

    for switched, families in (("on", ["sender_claims"]), ("off", [])):
        write_config(config, f"sender_claims = {'true' if switched == 'on' else 'false'}\n")
        daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        try:
            event = daemon.wait_for("evidence_family_switched")
            assert event["family"] == "sender_claims" and event["to"] == switched
            send(daemon.port, PHISH)
            assert daemon.wait_for("message_scored")
            before = stats_of(config, data)["trained_spam"]
            done = run_spamctl("--config", config, "--data-dir", data, "train", "--spam", phish)
            assert done.returncode == 0, done.stderr
            stats = stats_of(config, data)
            assert [row["family"] for row in stats["evidence_families"]] == families
            assert stats["trained_spam"] == before + 1
            readable = run_spamctl("--config", config, "--data-dir", data, "stats")
            assert ("sender_claims (since record" in readable.stdout) == (switched == "on")
            daemon.signal(signal.SIGTERM)
            assert daemon.wait() == 0
        finally:
            daemon.kill()
        phish.write_bytes(PHISH.replace(b"your order", b"your order " + switched.encode()))
    assert len(folder_files(data / "Maildir", "") + folder_files(data / "Maildir", ".Junk")) == 2

    write_config(config, "osb = true\n")  # the counts would mean something else: still refused
    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    try:
        assert daemon.wait() != 0
        assert any("the counts mean something else" in line for line in daemon.lines)
    finally:
        daemon.kill()


def test_spamctl_stats_names_no_family_on_a_default_model(tmp_path: Path):
    config = write_config(tmp_path / "spamd.toml")
    done = run_spamctl("--config", config, "--data-dir", tmp_path / "data", "stats")
    assert done.returncode == 0, done.stderr
    assert "evidence families" in done.stdout and "none" in done.stdout


def test_records_and_snapshots_that_do_not_say_were_built_with_no_family_on(tmp_path):
    """What an older spamd wrote without count settings meant no family on, whatever today's defaults switch on."""
    base = h.small_config(tmp_path)
    engine = Engine.open(with_model(base, OFF), durable=False)
    train_some(engine)  # records that name no settings: as before they were kept
    engine.close()
    assert count_settings(OFF) == UNRECORDED_COUNT_SETTINGS
    engine = Engine.open(with_model(base, ON), durable=False)
    try:
        [row] = engine.stats()["evidence_families"]
        assert row["since_seq"] == len(SPAM) + len(HAM) + 1  # switched on now, not at the first record
    finally:
        engine.close()
