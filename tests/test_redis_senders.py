"""Where each user's mail from a sender goes (spamd/people/senders.py), kept in Redis (spamd/store/redis/senders.py).

Real redis-server processes (tests/redis_helpers.py): the plain server and a three-master
cluster (`[cluster]` runs, and the test named `cluster`).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import redis

from spamd.config import UsersConfig
from spamd.engine.engine import Engine
from spamd.errors import StoreUnavailableError
from spamd.model.bayes import Label, Verdict
from spamd.people.senders import way_of
from spamd.store.redis.connect import Script, sender_keys_of
from spamd.store.redis.listing import turned_of
from spamd.store.redis.sender_fields import counts_by_sender, sender_args
from spamd.store.redis.senders import DELIVER_LUA, MOVE_LUA, RedisSenders
from spamd.store.redis.summary import summary_key
from tests import core_helpers as h
from tests.daemon_helpers import list_digest, make_message, wait_until_sync
from tests.redis_helpers import (
    RedisClusterServers,
    RedisServer,
    redis_state,
    with_redis,
)
from tests.test_redis_users import slot_owner


def config_for(tmp_path, name: str, url: str | None = None):
    config = dataclasses.replace(h.small_config(tmp_path / name, hash_bits=12), users=UsersConfig())
    return with_redis(config, url) if url else config


def general_training(engine: Engine) -> None:
    for n in range(6):
        engine.train(make_message(Label.SPAM, n), Label.SPAM, "spamctl")
        engine.train(make_message(Label.HAM, n), Label.HAM, "spamctl")
        engine.train(list_digest(n), Label.HAM, "spamctl")  # everyone else reads the list


def file_copy(engine: Engine, n: int, user: str, verdict: Verdict | None = None) -> None:
    """Score the user's copy n of the list and file it, as a way in does."""
    classified = engine.classify(list_digest(n, f"{user}@example.com"), user)
    filed = classified.score.verdict if verdict is None else verdict
    engine.remember_verdict(classified.analyzed.key, filed, "smtp", user, classified.analyzed.senders)


def test_redis_counts_as_the_embedded_store_does_and_every_daemon_and_a_restart_see_it(tmp_path, redis_url):
    """The same deliveries and moves, embedded and in Redis: the same directions; a second daemon shares them."""
    local = Engine.open(config_for(tmp_path, "local"), durable=False)
    first = Engine.open(config_for(tmp_path, "first", redis_url))
    second = None
    try:
        rng = random.Random(5)
        events = []
        for _ in range(80):
            user = rng.choice(["alice", "bob", "carol"])
            copy = rng.randrange(20)
            verdict = rng.choice([Verdict.HAM, Verdict.SPAM, Verdict.UNSURE])
            events.append((user, copy, verdict, rng.random() < 0.4, rng.choice([Label.SPAM, Label.SPAM, Label.HAM])))
        for engine in (local, first):
            general_training(engine)
            for user, copy, verdict, moves, label in events:
                file_copy(engine, copy, user, verdict)
                if moves:
                    engine.train(list_digest(copy, f"{user}@example.com"), label, "maildir", user_name=user)
            for n in range(100, 103):  # never filed: spamctl train --user
                engine.train(list_digest(n, "dave@example.com"), Label.SPAM, "spamctl", user_name="dave")
        probe = first.classify(list_digest(99)).analyzed
        for user in ("alice", "bob", "carol", "dave"):
            assert first.senders.direction(user, probe.senders) == local.senders.direction(user, probe.senders), user
            assert first.classify(list_digest(99), user).score == local.classify(list_digest(99), user).score
        assert local.senders.summary() == first.senders.summary()
        assert local.senders.summary()  # someone's moves turned the list
        second = Engine.open(config_for(tmp_path, "second", redis_url))  # another daemon on the same Redis
        for user in ("alice", "bob", "carol", "dave"):
            assert second.classify(list_digest(99), user).score == first.classify(list_digest(99), user).score
        first.close()
        first = Engine.open(config_for(tmp_path, "first", redis_url))  # a restart keeps it: it is in Redis
        assert first.senders.summary() == local.senders.summary()
    finally:
        for opened in (local, first, second):
            if opened is not None:
                opened.close()


def test_a_move_retried_counts_once_and_autolearn_counts_none(tmp_path, redis_plain_url):
    engine = Engine.open(config_for(tmp_path, "d", redis_plain_url))
    try:
        general_training(engine)
        for n in range(100, 103):
            file_copy(engine, n, "alice", Verdict.HAM)
            for _ in range(3):  # a retried training (its first reply a temporary error) moves it once
                engine.train(list_digest(n, "alice@example.com"), Label.SPAM, "maildir", user_name="alice")
            engine.train(list_digest(n, "alice@example.com"), Label.HAM, "autolearn", user_name="alice")
        state = redis_state(engine)
        counts = state.client.hgetall(sender_keys_of("spamd:", "alice")[0])
        moved_in = sorted(c[2] for c in counts_by_sender(counts).values())
        assert moved_in == [3, 3]  # the List-Id and the From address, three moves each
        assert engine.classify(list_digest(99, "alice@example.com"), "alice").score.verdict is Verdict.SPAM
        bobs = list_digest(99, "bob@example.com")
        assert engine.classify(bobs, "bob").score == engine.classify(bobs).score
        for key in sender_keys_of("spamd:", "alice"):
            assert 0 < state.client.ttl(key) <= 400 * 86400
    finally:
        engine.close()


def test_cluster_senders_node_down_fails_that_users_scoring_only_and_the_retried_move_counts_once(tmp_path):
    servers = RedisClusterServers(tmp_path / "cluster").start()
    engine = None
    try:
        model_node = servers.node_for("{spamd:}totals")
        owners = {
            name: slot_owner(servers, sender_keys_of("spamd:", name)[0]) for name in (f"user{i}" for i in range(12))
        }
        victim = next(n for n, (_, node) in owners.items() if node is not model_node)
        other = next(n for n, (_, node) in owners.items() if node is not owners[victim][1])
        victim_node = owners[victim][1]
        engine = Engine.open(config_for(tmp_path, "d", servers.url))
        general_training(engine)
        for user in (victim, other):
            for n in range(100, 102):
                file_copy(engine, n, user, Verdict.HAM)
                engine.train(list_digest(n, f"{user}@example.com"), Label.SPAM, "maildir", user_name=user)
        file_copy(engine, 102, victim, Verdict.HAM)
        probe = list_digest(99)

        victim_node.kill()
        with pytest.raises(StoreUnavailableError):  # the training is in; counting the move is not: a temporary error
            engine.train(list_digest(102, f"{victim}@example.com"), Label.SPAM, "maildir", user_name=victim)
        with pytest.raises(StoreUnavailableError):
            engine.classify(probe, victim)
        file_copy(engine, 102, other, Verdict.HAM)
        assert (
            engine.train(list_digest(102, f"{other}@example.com"), Label.SPAM, "maildir", user_name=other) == "learned"
        )
        assert engine.classify(probe, other).score.verdict is Verdict.SPAM  # the other user's third move counts

        victim_node.start()
        servers.wait_ok()

        def retried() -> bool:
            try:
                return (
                    engine.train(list_digest(102, f"{victim}@example.com"), Label.SPAM, "maildir", user_name=victim)
                    is not None
                )
            except StoreUnavailableError:
                return False

        wait_until_sync(retried, timeout=30, interval=0.5)
        engine.train(
            list_digest(102, f"{victim}@example.com"), Label.SPAM, "maildir", user_name=victim
        )  # once more: no new move
        counts = victim_node.client().hgetall(sender_keys_of("spamd:", victim)[0])  # the node that holds its slot
        assert sorted(c[2] for c in counts_by_sender(counts).values()) == [3, 3]
        assert engine.classify(probe, victim).score.verdict is Verdict.SPAM
    finally:
        if engine is not None:
            engine.close()
        servers.stop()


def test_a_users_sender_state_stays_within_its_caps_and_expires(redis_plain_url):
    """The scripts' bounds at a small size: past the caps the least recent senders (with all their counts) and
    filed messages go, and every key carries the expiry; a move of a message still held counts once."""
    client = redis.Redis.from_url(redis_plain_url)
    deliver, move = Script(client, DELIVER_LUA), Script(client, MOVE_LUA)
    keys = sender_keys_of("spamd:", "carol")
    keys.append(summary_key("spamd:", keys[0], False))
    senders_cap, filed_cap, ttl = 5, 8, 1000
    try:
        for n in range(30):  # 30 messages from 30 senders, each filed in Junk, then each moved out
            args = [f"m{n}".encode(), 1, str(1_800_000_000 + n), senders_cap, filed_cap, ttl, 1, "0.8", "carol",
                    *sender_args([1000 + n])]  # a second each  # fmt: skip
            assert deliver(keys=keys, args=args) == 1
            assert move(keys=keys, args=[f"m{n}".encode(), 0, *args[2:]]) == 1
            assert move(keys=keys, args=[f"m{n}".encode(), 0, *args[2:]]) == 0  # a retry: once
            assert client.zcard(keys[1]) <= senders_cap and client.zcard(keys[2]) <= filed_cap
        fields: dict[bytes, bytes] = client.hgetall(keys[0])  # type: ignore[assignment]  # redis-py's union of sync and async replies
        assert fields == {str(sender).encode(): b"1,1,0,1" for sender in range(1025, 1030)}  # the five most recent
        filed: list[bytes] = client.zrange(keys[2], 0, -1)  # type: ignore[assignment]  # as above
        assert set(filed) == {f"m{n}".encode() for n in range(22, 30)}
        scored: list[tuple[bytes, float]] = client.zrange(keys[2], 0, -1, withscores=True)  # type: ignore[assignment]
        assert all(int(score) % 2 == 0 for _, score in scored)  # not in Junk
        assert all(
            0 < client.ttl(key) <= ttl for key in keys[:3]
        )  # refreshed by each change, gone `ttl` after the last
        line = client.hget(keys[3], "carol").split()  # type: ignore[union-attr]  # the user's summary line
        assert [int(n) for n in line[:7]] == [0, 0, 0, 0, 5, 5, 8] and line[8] == b"1:0.8"  # 5 turned to the inbox
    finally:
        client.close()


def test_the_senders_a_users_moves_turned_are_counted_in_redis_as_way_of_counts_them(tmp_path, redis_plain_url):
    """A listing's count of a user's turned senders afresh (a summary line counted by another rule), made by a
    script where the counts are, agrees with the embedded rule (way_of a sender) around the bounds: the moves
    and the share."""
    client = redis.Redis.from_url(redis_plain_url)
    engine = Engine.open(config_for(tmp_path, "a", redis_plain_url))
    rng = random.Random(5)
    expected: list[tuple[int, int]] = []
    users = [f"turned{u}" for u in range(40)]
    try:
        for user in users:
            counts = {1000 + s: tuple(rng.randint(0, 6) for _ in range(4)) for s in range(rng.randint(1, 12))}
            client.hset(sender_keys_of(engine.config.redis.prefix, user)[0], mapping={
                f"{s}:{kind}": n for s, quad in counts.items() for kind, n in zip("dfio", quad, strict=True) if n
            })  # fmt: skip
            ways = [way_of([quad], 3, 0.8) for quad in counts.values()]  # type: ignore[list-item]
            expected.append((sum(way > 0 for way in ways), sum(way < 0 for way in ways)))
        assert any(junk for junk, _ in expected) and any(inbox for _, inbox in expected)
        assert [tuple(t) for t in turned_of(redis_state(engine), users, 3, 0.8)] == expected
        client.script_flush()  # a node without the script (restarted): sent whole
        assert [tuple(t) for t in turned_of(redis_state(engine), users, 3, 0.8)] == expected
    finally:
        client.close()
        engine.close()


def test_plain_redis_reads_a_users_senders_with_the_models_counts_and_a_server_down_is_a_temporary_error(tmp_path):
    """One round trip (a pipeline) for the model's counts and the user's senders' counts: the same score and
    counts as the two reads one after the other, with the script sent whole where Redis lost it; Redis down
    is StoreUnavailableError, never a score without the user's senders."""
    server = RedisServer(tmp_path / "redis").start()
    engine = Engine.open(config_for(tmp_path, "d", server.url))
    try:
        general_training(engine)
        for n in range(100, 103):  # alice moves three copies of the list into Junk
            file_copy(engine, n, "alice", Verdict.HAM)
            engine.train(list_digest(n, "alice@example.com"), Label.SPAM, "maildir", user_name="alice")
        analyzed = engine.classify(list_digest(99, "alice@example.com")).analyzed
        for user in ("alice", "bob"):
            together = engine.senders.score_and_counts(engine.model, analyzed.features, user, analyzed.senders)
            assert isinstance(engine.senders, RedisSenders)
            apart = engine.model.score(analyzed.features), engine.senders.counts(user, analyzed.senders)
            assert together == apart
        assert any(together[1]) is False  # bob: never heard of the list
        assert engine.classifier.score(analyzed, "alice").verdict is Verdict.SPAM
        server.client().script_flush()  # a restarted Redis without the script: EVAL, then EVALSHA again
        assert engine.classifier.score(analyzed, "alice").verdict is Verdict.SPAM
        assert engine.classifier.score(analyzed, "bob") == engine.classifier.score(analyzed)
        server.stop()
        with pytest.raises(StoreUnavailableError):
            engine.classifier.score(analyzed, "alice")
    finally:
        engine.close()
        server.stop()


def test_the_same_copy_in_two_peoples_mailboxes_counts_each_ones_move_for_them_in_both_stores(tmp_path, redis_url):
    """One list message, the same bytes, filed for alice and for bob: her move into Junk is hers, his move out
    of it his, embedded as in Redis (the embedded store once counted the second move for the first person)."""
    for engine in (Engine.open(config_for(tmp_path, "local"), durable=False),
                   Engine.open(config_for(tmp_path, "shared", redis_url))):  # fmt: skip
        try:
            general_training(engine)
            for n in range(10, 14):
                copy = list_digest(n)  # the very same bytes for both
                for user, verdict in (("alice", Verdict.HAM), ("bob", Verdict.SPAM)):
                    classified = engine.classify(copy, user)
                    engine.remember_verdict(classified.analyzed.key, verdict, "smtp", user, classified.analyzed.senders)
                engine.train(copy, Label.SPAM, "maildir", user_name="alice")
                engine.train(copy, Label.HAM, "maildir", user_name="bob")
            probe = engine.classify(list_digest(99)).analyzed.senders
            assert engine.senders.direction("alice", probe) == 1, engine.store
            assert engine.senders.direction("bob", probe) == -1, engine.store
        finally:
            engine.close()
