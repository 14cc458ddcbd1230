"""`spamctl users` over Redis (spamd/store/redis/listing.py): each user's summary line, kept by the scripts that
change the user's state, is what a full pass over their keys says, and the listing is the embedded store's.

Real redis-server processes (tests/redis_helpers.py): the plain server and the three-master cluster.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

import pytest

from spamd.config import UsersConfig
from spamd.engine.engine import Engine
from spamd.frontends.control import op_users
from spamd.frontends.control_protocol import user_rows
from spamd.model.bayes import Label, Verdict
from spamd.store.redis.connect import Script, sender_keys_of
from spamd.store.redis.listing import list_users, turned_of
from spamd.store.redis.listing import summaries as summary_lines
from spamd.store.redis.sender_fields import sender_args
from spamd.store.redis.senders import DELIVER_LUA, MOVE_LUA
from spamd.store.redis.summary import FIELDS, summary_key
from tests import core_helpers as h
from tests.cli_helpers import DEADLINE_SLACK
from tests.daemon_helpers import list_digest
from tests.redis_helpers import redis_state, with_redis
from tests.test_redis_senders import file_copy, general_training


def summaries(state: Any, moves: int, share: float) -> dict[str, dict[str, int]]:
    lines = summary_lines(state, moves, share)
    return {
        name: dict(zip(FIELDS, row, strict=True)) for name, row in zip(lines.names, lines.counts.tolist(), strict=True)
    }


def config_for(tmp_path, name: str, url: str | None = None, prefix: str = "spamd:", **users):
    config = dataclasses.replace(h.small_config(tmp_path / name, hash_bits=12), users=UsersConfig(**users))
    return with_redis(config, url, prefix) if url else config


def test_a_users_summary_line_stays_a_full_pass_over_their_counts_through_the_caps_and_a_changed_rule(
    tmp_path, redis_url
):
    """Random deliveries and moves of eight senders' mail to three users, past small caps on senders and messages
    and under two rules: each line's turned senders, senders and messages held are what their keys hold."""
    engine = Engine.open(config_for(tmp_path, "a", redis_url))
    state = redis_state(engine)
    deliver, move = Script(state.client, DELIVER_LUA), Script(state.client, MOVE_LUA)
    rng = random.Random(7)
    users = ["alice", "bob", "carol"]
    rules = [(2, 0.5), (1, 0.8)]
    try:
        for step in range(400):
            user = rng.choice(users)
            moves, share = rules[step // 200]
            keys = [*sender_keys_of("spamd:", user), summary_key("spamd:", sender_keys_of("spamd:", user)[0],
                                                                  state.cluster)]  # fmt: skip
            senders = rng.sample(range(8), rng.choice([1, 1, 2]))
            message = f"m{rng.randrange(12)}".encode()
            args = [message, rng.randrange(2), str(1_800_000_000 + step), 5, 6, 1000, moves, repr(share), user,
                    *sender_args(senders)]  # fmt: skip
            (deliver if rng.random() < 0.5 else move)(keys=keys, args=args)
            if step % 25 == 24:
                lines = summaries(state, moves, share)
                fresh = turned_of(state, users, moves, share)
                for name, (junk, inbox) in zip(users, fresh, strict=True):
                    held = sender_keys_of("spamd:", name)
                    row = lines.get(name, {"senders_to_junk": 0, "senders_to_inbox": 0, "senders": 0, "messages": 0})
                    assert (row["senders_to_junk"], row["senders_to_inbox"]) == (junk, inbox), (step, name)
                    assert row["senders"] == state.client.zcard(held[1]) <= 5
                    assert row["messages"] == state.client.zcard(held[2]) <= 6
        assert any(row["senders_to_junk"] or row["senders_to_inbox"] for row in summaries(state, 1, 0.8).values())
        # Listed by another rule than the lines were counted with: counted afresh, the lines unchanged.
        again = summaries(state, 3, 0.8)
        assert [(again[u]["senders_to_junk"], again[u]["senders_to_inbox"]) for u in users] == [
            tuple(t) for t in turned_of(state, users, 3, 0.8)
        ]
    finally:
        engine.close()


def listed(engine: Engine) -> list[tuple[str, int, int, int, int, int]]:
    return [
        (r["user"], r["trained_ham"], r["trained_spam"], r["tokens"], r["senders_to_junk"], r["senders_to_inbox"])
        for r in user_rows(op_users(engine, {})["users"])
    ]


def test_spamctl_users_lists_in_redis_what_the_embedded_store_lists_with_and_without_layers(tmp_path, redis_url):
    """Users with only senders their moves turned ([users] token_moves off, the default) and users with layers past
    max_users: the same rows from Redis's summary lines as from the embedded store; --memory reads MEMORY USAGE."""
    for token_moves in (False, True):
        name = f"layers{int(token_moves)}"
        local = Engine.open(config_for(tmp_path, f"{name}-local", token_moves=token_moves, max_users=2), durable=False)
        shared = Engine.open(
            config_for(tmp_path, f"{name}-redis", redis_url, f"{name}:", token_moves=token_moves, max_users=2)
        )
        try:
            rng = random.Random(3)
            events = []
            for _ in range(90):
                user = rng.choice(["alice", "bob", "carol", "dave"])
                label = Label.SPAM if (user in ("alice", "carol")) == (rng.random() < 0.9) else Label.HAM
                verdict = rng.choice([Verdict.HAM, Verdict.SPAM, Verdict.HAM if label == Label.SPAM else Verdict.SPAM])
                events.append((user, rng.randrange(20), verdict, rng.random() < 0.5, label))
            for engine in (local, shared):
                general_training(engine)
                for user, copy, verdict, moves, label in events:
                    file_copy(engine, copy, user, verdict)
                    if moves:
                        engine.train(list_digest(copy, f"{user}@example.com"), label, "maildir", user_name=user)
            rows = listed(shared)
            assert rows == listed(local)
            assert any(r[4] or r[5] for r in rows)  # someone's moves turned the list
            if token_moves:
                assert len([r for r in rows if r[1] + r[2]]) == 2  # max_users: two layers left
                assert shared.users.expired > 0
            else:
                assert rows and not any(r[1] + r[2] + r[3] for r in rows)
            measured = user_rows(op_users(shared, {"memory": True})["users"])
            assert [r["user"] for r in measured] == [r[0] for r in rows] and all(r["bytes"] > 0 for r in measured)
        finally:
            local.close()
            shared.close()


def test_a_users_sender_state_gone_by_expiry_leaves_the_listing(tmp_path, redis_url):
    """The sender keys expire (here after 1 s; 400 days in the daemon) while the summary line stays: the
    listing reads it as gone, and the user's next move starts the line afresh."""
    engine = Engine.open(config_for(tmp_path, "e", redis_url))
    state = redis_state(engine)
    move = Script(state.client, MOVE_LUA)
    keys = [
        *sender_keys_of("spamd:", "erin"),
        summary_key("spamd:", sender_keys_of("spamd:", "erin")[0], state.cluster),
    ]
    try:
        now = int(time.time())
        for n in range(3):  # three messages of one sender moved out of Junk: turned to the inbox
            assert (
                move(
                    keys=keys,
                    args=[f"m{n}".encode(), 0, str(now), 5, 6, 1000, 3, repr(0.8), "erin", *sender_args([42])],
                )
                == 1
            )
        assert [r["user"] for r in list_users(state, 3, 0.8)] == ["erin"]
        assert (
            move(keys=keys, args=[b"m3", 0, str(now), 5, 6, 1, 3, repr(0.8), "erin", *sender_args([42])]) == 1
        )  # expiring in 1 s
        deadline = time.monotonic() + 10 * DEADLINE_SLACK
        while any(state.client.exists(key) for key in keys[:3]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(state.client.exists(key) for key in keys[:3])
        assert state.client.hget(keys[3], "erin") is not None  # the line outlives them
        assert list_users(state, 3, 0.8) == [] and engine.senders.summary() == {}
        assert move(keys=keys, args=[b"m9", 0, str(now), 5, 6, 1000, 3, repr(0.8), "erin", *sender_args([42])]) == 1
        line = summaries(state, 3, 0.8)["erin"]
        assert (line["senders_to_inbox"], line["senders"], line["messages"]) == (0, 1, 1)
    finally:
        engine.close()


def test_the_summary_lines_of_a_cluster_sit_on_each_users_slot(redis_cluster_url, tmp_path):
    """On a cluster each user's line is in the hash of their own slot (the script that writes it runs there)."""
    engine = Engine.open(config_for(tmp_path, "c", redis_cluster_url))
    state = redis_state(engine)
    try:
        for user in ("alice", "bob", "carol"):
            key = summary_key("spamd:", sender_keys_of("spamd:", user)[0], True)
            assert state.client.keyslot(key) == state.client.keyslot(sender_keys_of("spamd:", user)[0])
    finally:
        engine.close()


def test_a_malformed_summary_line_is_a_clear_error_not_a_wrong_listing(tmp_path, redis_url):
    """Lines are parsed a column at a time: one that is not eight numbers and a rule names the problem."""
    from spamd.errors import CorruptStateError

    engine = Engine.open(config_for(tmp_path, "malformed", redis_url, "malformed:"), durable=False)
    state = redis_state(engine)

    def write(name: str, line: str) -> None:
        state.client.hset(summary_key("malformed:", sender_keys_of("malformed:", name)[0], state.cluster), name, line)

    try:
        write("alice", "0 0 0 0 2 2 6 4102444800 3:0.8")
        write("bob", "0 0 0 1 0 1 3 4102444800 3:0.8")
        assert [(r["user"], r["senders_to_inbox"]) for r in user_rows(op_users(engine, {})["users"])] == [
            ("alice", 2),
            ("bob", 0),
        ]
        for bad in (
            "0 0 0 x 0 1 3 4102444800 3:0.8",
            "0 0 0 1 0 1 4102444800 3:0.8",
            "",
            "0 0 0 1 0 1 3 5 3:0.8 extra",
        ):
            write("bob", bad)
            with pytest.raises(CorruptStateError, match="summary lines"):
                op_users(engine, {})
    finally:
        engine.close()
