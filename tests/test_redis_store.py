"""The Redis store against the embedded one: equal scores on corpus mail, export/import both ways, bounds.

Every test talks to a real redis-server (tests/redis_helpers.py) on loopback.
"""

from __future__ import annotations

import dataclasses

import pytest

from spamd.config import ModelConfig, StoreConfig, load_config
from spamd.config.addresses import parse_cluster_url
from spamd.engine.engine import Engine
from spamd.errors import ConfigError, CorruptStateError, StoreError, StoreUnavailableError
from spamd.learning.classifier import Classifier
from spamd.model.bayes import Label
from spamd.store import decode_snapshot
from spamd.store.redis import RedisModel, RedisState, RedisTrainer
from tests import cli_helpers as c
from tests import core_helpers as h
from tests.redis_helpers import (
    RedisServer,
    free_port,
    redis_state,
    with_redis,
)


def engines(tmp_path, url: str, hash_bits: int = 16) -> tuple[Engine, Engine]:
    local = Engine.open(h.small_config(tmp_path / "local", hash_bits=hash_bits), durable=False)
    shared = Engine.open(with_redis(h.small_config(tmp_path / "redis", hash_bits=hash_bits), url))
    return local, shared


@h.requires_corpus
def test_redis_scores_equal_embedded_scores_on_corpus_mail(tmp_path, redis_url):
    """Online: score each of 300 trec07p-dev messages with both stores, then train both with its label."""
    rows = h.read_index(h.TREC_INDEX)
    rows = rows[:: len(rows) // 300][:300]
    local, shared = engines(tmp_path, redis_url)
    try:
        worst = 0.0
        for label, path in rows:
            raw = path.read_bytes()
            a, b = local.classify(raw).score, shared.classify(raw).score
            worst = max(worst, abs(a.probability - b.probability))
            assert f"{a.probability:.4f}" == f"{b.probability:.4f}" and a.verdict == b.verdict
            assert local.train(raw, Label.parse(label), "test") == shared.train(raw, Label.parse(label), "test")
        assert worst == 0.0  # the same function over the same integers: not merely close
        explained = [engine.explain(rows[-1][1].read_bytes(), limit=10) for engine in (local, shared)]
        assert explained[0] == explained[1]
        assert shared.model.state_equals(h.local_model(local))
        assert shared.stats()["trained_spam"] == local.stats()["trained_spam"] > 100
    finally:
        local.close()
        shared.close()


def test_export_and_import_between_the_stores_both_ways(tmp_path, redis_url):
    local, shared = engines(tmp_path, redis_url)
    try:
        for i in range(12):
            label = Label.SPAM if i % 3 else Label.HAM
            local.train(
                h.numbered_message(i, "cheap pills" if label else "meeting notes"), label, "test", user=bool(i % 2)
            )
        # embedded -> Redis
        shared.import_snapshot(local.export_snapshot(), "local export")
        assert shared.model.state_equals(h.local_model(local))
        assert shared.trainer.ledger.as_dict() == local.trainer.ledger.as_dict()
        assert (
            shared.train(h.numbered_message(4, "cheap pills"), Label.SPAM, "test") == "skipped_repeat"
        )  # now a person's
        assert shared.train(h.numbered_message(4, "cheap pills"), Label.HAM, "autolearn", user=False) == "declined"
        # Entries trained after the import are the newest: the cap trims imported ones first.
        order = redis_state(shared).client.zrange(redis_state(shared).order, 0, -1)
        assert order[-1] == shared.classifier.analyze(h.numbered_message(4, "cheap pills")).key
        assert order[:-1] == [k for k in local.trainer.ledger.as_dict() if k != order[-1]]
        # Redis -> embedded, after a correction made in Redis
        assert shared.train(h.numbered_message(2, "cheap pills"), Label.HAM, "test") == "corrected"
        local.train(h.numbered_message(4, "cheap pills"), Label.SPAM, "test")
        local.train(h.numbered_message(2, "cheap pills"), Label.HAM, "test")
        exported = decode_snapshot(shared.export_snapshot(), local.config.model, 1000, "redis export")
        assert exported.model.state_equals(h.local_model(local))
        assert exported.ledger.as_dict() == local.trainer.ledger.as_dict()
        fresh = Engine.open(h.small_config(tmp_path / "fresh", hash_bits=16), durable=False)
        try:
            fresh.import_snapshot(shared.export_snapshot(), "redis export")
            assert fresh.model.state_equals(h.local_model(local))
        finally:
            fresh.close()
    finally:
        local.close()
        shared.close()


def test_spamctl_exports_and_imports_across_stores(tmp_path, redis_url, home):
    """spamctl without --redis exports the embedded model; with --redis imports it into Redis, and back."""
    for i, raw in enumerate(c.SPAM + c.HAM):
        (home / f"m{i}").write_bytes(raw)
    config = home / "spamd.toml"
    assert (
        c.run_spamctl(
            "--config", config, "--data-dir", home / "a", "train", "--spam", *[home / f"m{i}" for i in range(3)]
        ).returncode
        == 0
    )
    assert (
        c.run_spamctl(
            "--config", config, "--data-dir", home / "a", "train", "--ham", *[home / f"m{i}" for i in range(3, 6)]
        ).returncode
        == 0
    )
    assert c.run_spamctl("--config", config, "--data-dir", home / "a", "export", home / "a.export").returncode == 0
    done = c.run_spamctl(
        "--config", config, "--data-dir", home / "b", "--redis", redis_url, "--json", "import", home / "a.export"
    )
    assert done.returncode == 0, done.stderr
    repeat = c.run_spamctl(
        "--config", config, "--data-dir", home / "b", "--redis", redis_url, "--json", "train", "--spam", home / "m0"
    )
    assert repeat.returncode == 0 and "skipped_repeat" in repeat.stdout, repeat.stdout + repeat.stderr
    assert (
        c.run_spamctl(
            "--config", config, "--data-dir", home / "b", "--redis", redis_url, "export", home / "b.export"
        ).returncode
        == 0
    )
    model_config = ModelConfig(hash_bits=16)
    a = decode_snapshot((home / "a.export").read_bytes(), model_config, 1000, "a")
    b = decode_snapshot((home / "b.export").read_bytes(), model_config, 1000, "b")
    assert a.model.state_equals(b.model) and a.ledger.equals(b.ledger)
    stats = c.run_spamctl("--config", config, "--data-dir", home / "b", "--redis", redis_url, "--json", "stats").json()
    assert stats["store"] == "redis" and stats["trained_spam"] == 3 and stats["trained_ham"] == 3


home = c.home  # fixture


def test_another_hash_bits_on_the_same_prefix_is_refused(tmp_path, redis_url):
    first = Engine.open(with_redis(h.small_config(tmp_path / "a", hash_bits=16), redis_url))
    first.close()
    with pytest.raises(CorruptStateError, match="hash_bits = 16"):
        Engine.open(with_redis(h.small_config(tmp_path / "b", hash_bits=14), redis_url))
    other = Engine.open(with_redis(h.small_config(tmp_path / "c", hash_bits=14), redis_url, prefix="other:"))
    other.close()  # another prefix is another model


def test_ledger_is_capped_oldest_first_inside_the_script(tmp_path, redis_url):
    config = with_redis(
        dataclasses.replace(h.small_config(tmp_path), store=StoreConfig(ledger_max_entries=5)), redis_url
    )
    state = RedisState(config)
    trainer = RedisTrainer(state, RedisModel(state, config.model))
    classifier = Classifier(config, trainer.model)
    analyzed = [classifier.analyze(h.numbered_message(i, "offer")) for i in range(8)]
    for a in analyzed:
        trainer.train(a, Label.SPAM, "test")
    assert len(trainer.ledger) == 5 and state.client.zcard(state.order) == 5
    assert trainer.ledger.get(analyzed[0].key) is None and trainer.ledger.get(analyzed[7].key) == (Label.SPAM, True)
    # Training the newest again moves nothing; the model still holds all eight.
    assert trainer.train(analyzed[7], Label.SPAM, "test") == "skipped_repeat"
    assert int(trainer.model.doc_totals[Label.SPAM]) == 8
    # Only the prefix's keys exist (no ham row: no ham trained): nothing else is written.
    # (On a cluster, the prefix in braces: one hash tag for all.)
    cluster = "cluster" in redis_url
    head = "{spamd:}" if cluster else "spamd:"
    keys = state.client.keys("*", **({"target_nodes": "primaries"} if cluster else {}))
    assert sorted(k.decode() for k in keys) == sorted(
        head + name for name in ["spam", "ledger", "ledger:order", "events", "outcomes", "totals"]
    )
    if cluster:  # every key in one slot, so each script touches one
        assert len({state.client.keyslot(k) for k in keys}) == 1
    state.close()


def test_unreachable_redis_fails_fast_with_one_clear_error_and_recovers(tmp_path):
    server = RedisServer(tmp_path / "redis")
    config = with_redis(h.small_config(tmp_path / "d", hash_bits=12), server.url)
    with pytest.raises(StoreError, match="unreachable.*start Redis"):
        Engine.open(config)
    server.start()
    try:
        engine = Engine.open(config)
        engine.train(h.numbered_message(1, "offer"), Label.SPAM, "test")
        server.kill()
        with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{server.port}.*unreachable"):
            engine.classify(h.numbered_message(2, "offer"))
        # Within the backoff, calls fail at once rather than stalling on a connect each.
        with pytest.raises(StoreUnavailableError):
            engine.train(h.numbered_message(2, "offer"), Label.SPAM, "test")
        server.start()  # AOF (appendfsync always): the acknowledged training survived

        def served() -> bool:
            try:
                return engine.train(h.numbered_message(1, "offer"), Label.SPAM, "test") == "skipped_repeat"
            except StoreUnavailableError:
                return False

        c.wait_until(served, timeout=15)
        assert int(engine.model.doc_totals[Label.SPAM]) == 1
        engine.close()
    finally:
        server.stop()


def test_score_is_one_round_trip(tmp_path, redis_url):
    """One read-only script call per message scored (its HMGETs inside), whatever the message's length."""
    local, shared = engines(tmp_path, redis_url)
    try:
        state = redis_state(shared)
        client = state.client
        # On a cluster: the node that holds the model's slot.
        node = {"target_nodes": client.get_node_from_key(state.totals)} if state.cluster else {}
        shared.train(h.numbered_message(1, "cheap pills"), Label.SPAM, "t")
        shared.train(h.numbered_message(2, "meeting notes"), Label.HAM, "t")
        shared.classify(h.numbered_message(0, "warm"))  # the first call loads the script (NOSCRIPT, then EVAL)
        client.config_resetstat(**node)
        for i in range(10):
            shared.classify(h.numbered_message(i, "cheap pills and a meeting " * i))
        stats = client.info("commandstats", **node)
        assert stats["cmdstat_evalsha"]["calls"] == 10 and stats["cmdstat_hmget"]["calls"] == 30
        assert {k for k in stats if k not in ("cmdstat_evalsha", "cmdstat_hmget")} <= {
            "cmdstat_config|resetstat",
            "cmdstat_info",
        }
        assert "cmdstat_keys" not in stats and "cmdstat_scan" not in stats
    finally:
        local.close()
        shared.close()


def test_cluster_urls_are_checked_with_clear_errors(tmp_path):
    parts = parse_cluster_url("rediss+cluster://app:s%40cret@10.0.0.5:7000,[::1]:7001/0")
    assert parts.nodes == (("10.0.0.5", 7000), ("::1", 7001)) and parts.tls
    assert (parts.username, parts.password) == ("app", "s@cret")
    refused = {
        "redis+cluster://10.0.0.5:7000/2": "only database 0",
        "redis+cluster://10.0.0.5": "expected HOST:PORT",
        "redis+cluster://10.0.0.5:7000,": "expected HOST:PORT",
        "redis+cluster://:pw@10.0.0.5:7000?timeout=1": "no query options",
        "cluster://10.0.0.5:7000": "redis\\+cluster://",
    }
    for url, why in refused.items():
        with pytest.raises(ConfigError, match=why) as error:
            load_config(None, data_dir=tmp_path, redis_url=url)
        assert "pw" not in str(error.value)  # the password is never shown
    config = tmp_path / "spamd.toml"
    config.write_text('[redis]\nurl = "redis+cluster://127.0.0.1:7000"\nprefix = "{spamd}:"\n')
    with pytest.raises(ConfigError, match="hash tag itself"):
        load_config(config, data_dir=tmp_path)
    config.write_text('[redis]\nprefix = "{spamd}:"\n')  # on plain Redis any prefix is fine, as before
    load_config(config, data_dir=tmp_path, redis_url="redis://127.0.0.1:6379/0")


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_spamctl_exits_75_when_redis_is_unreachable(tmp_path, scheme):
    """EX_TEMPFAIL, as spamc answers: a script or Sieve filter retries later; the error names the URL."""
    (tmp_path / "m").write_bytes(c.SPAM[0])
    url = f"{scheme}://127.0.0.1:{free_port()}" + ("/0" if scheme == "redis" else "")
    done = c.run_spamctl("--data-dir", tmp_path / "d", "--redis", url, "train", "--spam", tmp_path / "m")
    last = done.stderr.splitlines()[-1]
    assert (
        done.returncode == 75 and last.startswith("spamctl: Redis") and "unreachable" in last and "127.0.0.1:" in last
    ), done.stderr
