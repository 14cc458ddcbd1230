"""Per-user layers in Redis (spamd/store/redis/users.py) against the embedded store's, on a real redis-server and cluster.

Every test talks to real redis-server processes (tests/redis_helpers.py); `[cluster]`
runs (and the tests named `cluster`) use a three-master Redis Cluster on loopback.
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
from typing import Any

import pytest

from spamd.config import UsersConfig
from spamd.engine.engine import Engine
from spamd.errors import StoreUnavailableError
from spamd.model.bayes import Label
from spamd.people.users import TRIM_SLACK
from spamd.store import decode_snapshot
from spamd.store.redis.connect import user_keys
from tests import cli_helpers as c
from tests import core_helpers as h
from tests.daemon_helpers import wait_until_sync
from tests.redis_helpers import (
    REDIS_CLI,
    RedisClusterServers,
    RedisServer,
    redis_state,
    redis_users,
    with_redis,
)

TOPICS = ["weekly offer from the shop", "cheap pills online now", "minutes of the meeting", "your parcel is waiting"]


def users_config(tmp_path, name: str, url: str | None = None, **users: Any):
    config = h.small_config(tmp_path / name, hash_bits=12)
    config = dataclasses.replace(
        config, users=dataclasses.replace(UsersConfig(score_per_user=True, token_moves=True), **users)
    )
    return with_redis(config, url) if url else config


def message(i: int) -> bytes:
    return h.numbered_message(i, TOPICS[i % len(TOPICS)])


def both(tmp_path, url: str, **users: Any) -> tuple[Engine, Engine]:
    local = Engine.open(users_config(tmp_path, "local", **users), durable=False)
    shared = Engine.open(users_config(tmp_path, "redis", url, **users))
    return local, shared


def user_counts(engine: Engine, name: str) -> dict[str, int]:
    """A user's layer totals as Redis holds them."""
    state = redis_state(engine)
    totals = state.client.hgetall(user_keys(state.config.redis.prefix, name)[2])
    return {k.decode(): int(v) for k, v in totals.items() if k != b"trained_at"}


@pytest.mark.parametrize("bounds", [{"max_tokens": 40}, {"max_users": 1}], ids=["max_tokens", "max_users"])
def test_redis_user_layers_and_scores_equal_the_embedded_stores_after_the_same_trainings(tmp_path, redis_url, bounds):
    """Learn, repeat, correct, untrain, autolearn, by two users and none, past a bound: same layers, same scores."""
    local, shared = both(tmp_path, redis_url, **bounds)
    rng = random.Random(7)
    try:
        for _ in range(120):
            raw, user = message(rng.randrange(16)), rng.choice([None, "alice", "bob", "bob"])
            op = rng.random()
            if op < 0.15:
                assert local.untrain(raw, "test", user_name=user) == shared.untrain(raw, "test", user_name=user)
            else:
                label, person = rng.choice([Label.HAM, Label.SPAM]), op < 0.85
                outcomes = [e.train(raw, label, "test", user=person, user_name=user) for e in (local, shared)]
                assert outcomes[0] == outcomes[1]
        assert shared.model.state_equals(h.local_model(local))
        assert shared.trainer.ledger.as_dict() == local.trainer.ledger.as_dict()
        layers = redis_users(shared).load()
        assert layers.equals(h.local_users(local)) and sorted(layers.layers) == sorted(redis_users(shared).names())
        if "max_tokens" in bounds:
            # trimmed by the same rule: past the cap of 40, down to 1/TRIM_SLACK below it
            assert 40 - 40 // TRIM_SLACK <= max(len(layer) for layer in layers.layers.values()) <= 40
        else:
            assert len(layers) == 1 and shared.users.expired > 10
        for i in range(24):
            raw = message(i)
            for user in (None, "alice", "bob", "carol"):
                a, b = local.classify(raw, user_name=user).score, shared.classify(raw, user_name=user).score
                assert abs(a.probability - b.probability) <= 1e-9 and a.verdict == b.verdict, (i, user)
            # carol has no layer: exactly the shared model
            assert shared.classify(raw, user_name="carol").score == shared.classify(raw).score
        assert local.explain(message(3), 10, "bob") == shared.explain(message(3), 10, "bob")
        for user in ("alice", "bob"):
            for i in range(16):
                key = shared.classifier.analyze(message(i)).key
                assert local.trainer.label_of(key, user) == shared.trainer.label_of(key, user)
    finally:
        local.close()
        shared.close()


def test_each_user_and_message_counts_once_and_a_correction_moves_shared_and_user_counts_once(tmp_path, redis_url):
    _, shared = None, Engine.open(users_config(tmp_path, "redis", redis_url))
    try:
        raw = message(1)
        key = shared.classifier.analyze(raw).key
        assert shared.train(raw, Label.SPAM, "test", user_name="alice") == "learned"
        assert shared.train(raw, Label.SPAM, "test", user_name="alice") == "skipped_repeat"
        assert list(shared.model.doc_totals) == [0, 1]
        assert user_counts(shared, "alice")["docs:1"] == 1
        assert not redis_state(shared).client.exists(user_keys("spamd:", "alice")[3])  # no :rank below max_tokens
        assert shared.train(raw, Label.HAM, "test", user_name="alice") == "corrected"
        assert shared.train(raw, Label.HAM, "test", user_name="alice") == "skipped_repeat"
        assert list(shared.model.doc_totals) == [1, 0]
        alice = user_counts(shared, "alice")
        assert (alice["docs:0"], alice["docs:1"]) == (1, 0)
        assert shared.trainer.label_of(key, "alice") == Label.HAM and shared.trainer.label_of(key) is None
        assert shared.train(raw, Label.SPAM, "test", user_name="bob") == "learned"  # bob's own decision
        assert list(shared.model.doc_totals) == [1, 1]
        assert shared.train(raw, Label.SPAM, "autolearn", user=False, user_name="alice") == "declined"
        assert user_counts(shared, "alice")["docs:0"] == 1
        assert shared.untrain(raw, "test", user_name="alice") == "unlearned"
        assert shared.untrain(raw, "test", user_name="alice") == "not_trained"
        assert user_counts(shared, "alice") == {} and redis_users(shared).names() == ["bob"]  # nothing left: no layer
        assert list(shared.model.doc_totals) == [0, 1]
    finally:
        shared.close()


def test_two_users_with_opposite_training_on_the_same_mail_each_get_their_verdict(tmp_path, redis_url):
    shared = Engine.open(users_config(tmp_path, "redis", redis_url))
    try:
        for i in range(1, 9):
            shared.train(h.numbered_message(100 + i, "cheap pills online now"), Label.SPAM, "test")
            shared.train(h.numbered_message(200 + i, "minutes of the meeting"), Label.HAM, "test")
        for i in range(1, 9):
            raw = h.numbered_message(i, "weekly offer from the shop")
            assert shared.train(raw, Label.SPAM, "test", user_name="alice") == "learned"
            assert shared.train(raw, Label.HAM, "test", user_name="bob") == "learned"
        for i in range(300, 303):  # each their other class too: a one-class layer has no log-odds
            shared.train(h.numbered_message(i, "minutes of the meeting"), Label.HAM, "test", user_name="alice")
            shared.train(h.numbered_message(i, "cheap pills online now"), Label.SPAM, "test", user_name="bob")
        probe = h.numbered_message(50, "weekly offer from the shop")
        alice, bob = (shared.classify(probe, user_name=u).score for u in ("alice", "bob"))
        assert alice.verdict.value == "spam" and bob.verdict.value == "ham", (alice, bob)
    finally:
        shared.close()


def test_max_users_deletes_the_least_recently_trained_users_layer_in_redis_as_the_embedded_store_does(
    tmp_path, redis_url
):
    local, shared = both(tmp_path, redis_url, max_users=2)
    try:
        for i, user in enumerate(["alice", "bob", "carol", "bob", "dave"]):
            for engine in (local, shared):
                engine.train(message(i), Label.SPAM if i % 2 else Label.HAM, "test", user_name=user)
        assert sorted(h.local_users(local).layers) == redis_users(shared).names() == ["bob", "dave"]
        assert redis_users(shared).load().equals(h.local_users(local))
        state = redis_state(shared)
        for gone in ("alice", "carol"):
            assert not any(state.client.exists(key) for key in user_keys("spamd:", gone))
        assert shared.stats()["users"] == 2 and shared.users.expired == 2
    finally:
        local.close()
        shared.close()


def test_export_and_import_carry_the_users_layers_between_the_stores(tmp_path, redis_url):
    local, shared = both(tmp_path, redis_url)
    try:
        for i in range(12):
            local.train(message(i), Label.SPAM if i % 3 else Label.HAM, "test", user_name=["alice", "bob", None][i % 3])
        shared.train(message(30), Label.SPAM, "test", user_name="zed")  # replaced by the import: zed's layer goes
        shared.import_snapshot(local.export_snapshot(), "local export")
        assert not any(redis_state(shared).client.exists(key) for key in user_keys("spamd:", "zed"))
        assert redis_users(shared).load().equals(h.local_users(local)) and redis_users(shared).names() == [
            "alice",
            "bob",
        ]
        for i in range(12):
            for user in ("alice", "bob"):
                assert (
                    shared.classify(message(i), user_name=user).score
                    == local.classify(message(i), user_name=user).score
                )
        # A correction after the import moves the imported layer (unlearned from the model's ledger entry).
        for engine in (local, shared):
            assert engine.train(message(1), Label.HAM, "test", user_name="bob") == "corrected"
        assert redis_users(shared).load().equals(h.local_users(local))
        back = decode_snapshot(shared.export_snapshot(), local.config.model, 1000, "redis export", local.config.users)
        assert back.users.equals(h.local_users(local)) and back.model.state_equals(h.local_model(local))
    finally:
        local.close()
        shared.close()


home = c.home  # fixture


def test_spamctl_trains_lists_and_scores_users_with_the_model_in_redis(redis_url, home):
    config = home / "spamd.toml"
    (home / "spamd.toml").write_text(
        (home / "spamd.toml").read_text() + "\n[users]\nscore_per_user = true\ntoken_moves = true\n"
    )
    for i in range(4):
        (home / f"m{i}").write_bytes(message(i))

    def spamctl(*args):
        return c.run_spamctl("--config", config, "--data-dir", home / "d", "--redis", redis_url, *args)

    done = spamctl("--json", "train", "--spam", "--user", "alice", home / "m0", home / "m1")
    assert done.returncode == 0 and done.json()["learned"] == 2, done.stdout + done.stderr
    assert spamctl("--json", "train", "--ham", "--user", "alice", home / "m2").json()["learned"] == 1
    assert spamctl("--json", "train", "--ham", "--user", "bob", home / "m0").json()["learned"] == 1
    users = spamctl("--json", "users").json()
    assert [(u["user"], u["trained_ham"], u["trained_spam"]) for u in users["users"]] == [
        ("alice", 1, 2),
        ("bob", 1, 0),
    ]
    assert all(u["tokens"] > 0 and u["bytes"] > 0 for u in users["users"])
    measured = spamctl("--json", "users", "--memory").json()["users"]  # MEMORY USAGE, not the estimate
    assert [u["user"] for u in measured] == ["alice", "bob"] and all(u["bytes"] > 0 for u in measured)
    assert "alice" in spamctl("users").stdout
    stats = spamctl("--json", "stats", "--user", "alice").json()
    assert stats["user"]["trained_spam"] == 2 and stats["users"] == 2
    for command in ("classify", "explain"):
        assert spamctl("--json", command, "--user", "alice", home / "m3").returncode == 0
    assert spamctl("--json", "untrain", "--user", "bob", home / "m0").json()["unlearned"] == 1
    assert [u["user"] for u in spamctl("--json", "users").json()["users"]] == ["alice"]


# ---------------------------------------------------------------- a user's node down (cluster)


def slot_owner(servers: RedisClusterServers, key: str) -> tuple[int, RedisServer]:
    """CLUSTER KEYSLOT of `key` and the master that holds it."""
    slot = int(subprocess.run([REDIS_CLI, "-p", str(servers.nodes[0].port), "CLUSTER", "KEYSLOT", key],
                              capture_output=True, text=True, timeout=10, check=True).stdout)  # fmt: skip
    return slot, servers.node_for(key)


def test_cluster_user_node_down_fails_that_users_requests_only_and_the_retried_training_converges(tmp_path):
    """Users' keys on different masters; the master of one user's slot (not the model's) SIGKILLed and restarted.

    That user's training and scoring fail with StoreUnavailableError (spamctl exits 75)
    while another user on another master trains and scores; once the master is back, the
    failed training retried counts once, and every training acknowledged before is there.
    """
    servers = RedisClusterServers(tmp_path / "cluster").start()
    local = shared = None
    try:
        model_node = servers.node_for("{spamd:}totals")
        owners = {name: slot_owner(servers, user_keys("spamd:", name)[0]) for name in (f"user{i}" for i in range(12))}
        victim = next(n for n, (_, node) in owners.items() if node is not model_node)
        other = next(n for n, (_, node) in owners.items() if node is not owners[victim][1])
        assert owners[victim][0] != owners[other][0]
        for key in user_keys("spamd:", victim)[1:]:  # every key of the user in the one slot
            assert slot_owner(servers, key)[0] == owners[victim][0]
        victim_node = owners[victim][1]

        local = Engine.open(users_config(tmp_path, "local"), durable=False)
        shared = Engine.open(users_config(tmp_path, "redis", servers.url))
        acknowledged = []
        for i in range(6):
            for user in (victim, other):
                label = Label.SPAM if (i + (user == other)) % 2 else Label.HAM
                assert shared.train(message(i), label, "test", user_name=user) == "learned"
                acknowledged.append((message(i), label, user))
        probe = message(20)
        before = shared.classify(probe, user_name=other).score

        victim_node.kill()
        with pytest.raises(StoreUnavailableError):
            shared.train(message(7), Label.SPAM, "test", user_name=victim)  # the shared step commits, the layer's fails
        assert (
            shared.trainer.label_of(shared.classifier.analyze(message(7)).key, victim) == Label.SPAM
        )  # not acknowledged
        with pytest.raises(StoreUnavailableError):
            shared.classify(probe, user_name=victim)
        assert shared.classify(probe).score is not None  # the shared model still scores
        assert shared.train(message(8), Label.SPAM, "test", user_name=other) == "learned"
        acknowledged.append((message(8), Label.SPAM, other))
        assert shared.classify(probe, user_name=other).score is not None and before is not None
        (tmp_path / "m7").write_bytes(message(7))
        (tmp_path / "ctl.toml").write_text("[model]\nhash_bits = 12\n[users]\ntoken_moves = true\n")
        refused = c.run_spamctl("--config", tmp_path / "ctl.toml", "--data-dir", tmp_path / "ctl", "--redis", servers.url,
                                "--json", "train", "--spam", "--user", victim, tmp_path / "m7")  # fmt: skip
        assert refused.returncode == 75, refused.stdout + refused.stderr  # EX_TEMPFAIL

        victim_node.start()
        servers.wait_ok()

        def retried() -> bool:
            try:
                return shared.train(message(7), Label.SPAM, "test", user_name=victim) == "skipped_repeat"
            except StoreUnavailableError:
                return False

        wait_until_sync(retried, timeout=30, interval=0.5)  # the model had it; the layer learns it now, once
        assert shared.train(message(7), Label.SPAM, "test", user_name=victim) == "skipped_repeat"
        for raw, label, user in [*acknowledged, (message(7), Label.SPAM, victim)]:
            local.train(raw, label, "test", user_name=user)
        assert shared.model.state_equals(h.local_model(local))
        assert redis_users(shared).load().equals(h.local_users(local))
        for user in (victim, other):
            assert (
                abs(
                    shared.classify(probe, user_name=user).score.probability
                    - local.classify(probe, user_name=user).score.probability
                )
                <= 1e-9
            )

        # An untraining whose layer step fails: the model forgets at once, the layer on the retry.
        victim_node.kill()
        with pytest.raises(StoreUnavailableError):
            shared.untrain(message(0), "test", user_name=victim)
        assert shared.trainer.label_of(shared.classifier.analyze(message(0)).key, victim) is None
        victim_node.start()
        servers.wait_ok()

        def untrained() -> bool:
            try:
                return shared.untrain(message(0), "test", user_name=victim) == "not_trained"
            except StoreUnavailableError:
                return False

        wait_until_sync(untrained, timeout=30, interval=0.5)
        local.untrain(message(0), "test", user_name=victim)
        assert shared.model.state_equals(h.local_model(local))
        assert redis_users(shared).load().equals(h.local_users(local))
        assert shared.trainer.ledger.as_dict() == local.trainer.ledger.as_dict()
        state = redis_state(shared)
        assert all(int(v) < 4 for v in state.client.hvals(state.ledger))  # nothing left pending
    finally:
        for engine in (local, shared):
            if engine is not None:
                engine.close()
        servers.stop()
