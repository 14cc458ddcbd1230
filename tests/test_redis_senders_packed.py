"""A user's sender counts in Redis in one packed field a sender (spamd/store/redis/sender_fields.py), and the
state an older spamd wrote (a field a count: tests/redis_senders_v1.py, its scripts verbatim) taken over.

Real redis-server processes (tests/redis_helpers.py): the plain server and a three-master cluster.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import UsersConfig
from spamd.engine.engine import Engine
from spamd.model.bayes import Label, Verdict
from spamd.people.senders import SenderReputation, sender_key
from spamd.store.redis.connect import Script, sender_keys_of
from spamd.store.redis.listing import list_users, turned_of
from spamd.store.redis.sender_fields import counts_by_sender, packed, sender_args, sender_id, unpacked
from spamd.store.redis.senders import (
    DELIVER_LUA,
    KEEP_S,
    MOVE_LUA,
    PLACED_PER_USER,
    SENDERS_PER_USER,
    RedisSenders,
    recency_now,
)
from spamd.store.redis.summary import summary_key
from tests import redis_senders_v1 as v1
from tests.daemon_helpers import list_digest
from tests.redis_helpers import redis_state
from tests.test_redis_listing import listed, summaries
from tests.test_redis_senders import config_for, general_training

HIGH = 1 << 63


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**53), min_size=1, max_size=4), st.integers(0, 2**64 - 1))
def test_packed_counts_read_back_and_a_sender_id_is_its_key_as_a_signed_64_bit_integer(counts, sender):
    full = (counts + [0, 0, 0])[:4]
    assert unpacked(packed(full)) == full
    assert not packed(full).endswith(",0")  # trailing zero counts left out: "5" is five deliveries
    assert -HIGH <= int(sender_id(sender)) < HIGH and int(sender_id(sender)) % 2**64 == sender


def test_a_sender_past_2_63_costs_redis_what_one_below_it_does(redis_plain_url):
    """Keys past 2**63 written unsigned were 20 digits of text in the listpack; signed they are integers too."""
    client = redis.Redis.from_url(redis_plain_url)
    deliver = Script(client, DELIVER_LUA)
    try:
        sizes = []
        for user, base in (("low", HIGH - 10**18), ("high", 2**64 - 10**18)):
            keys = [*sender_keys_of("spamd:", user), summary_key("spamd:", sender_keys_of("spamd:", user)[0], False)]
            for n in range(20):
                args = [f"m{n}".encode(), 0, "1800000000", 100, 100, 1000, 3, "0.8", user]
                deliver(keys=keys, args=[*args, *sender_args([base + n * 7919])])
            assert client.object("encoding", keys[0]) == b"listpack"
            sizes.append([client.memory_usage(key) for key in keys[:2]])
        assert sizes[0] == sizes[1]
    finally:
        client.close()


def high_sender_digest(n: int, to: str) -> bytes:
    """A list digest whose From address's key is past 2**63 (its List-Id's is below)."""
    address = next(
        a for a in (f"list{k}@news.example.net" for k in itertools.count()) if sender_key(f"from={a}") >= HIGH
    )
    return list_digest(n, to).replace(b"From: list@news.example.net", f"From: {address}".encode())


def test_state_an_older_spamd_wrote_scores_and_lists_the_same_after_the_upgrade_and_moves_on(tmp_path, redis_url):
    """Alice's and Bob's deliveries and moves counted by the older scripts (a field a count); the new spamd scores
    their mail and lists them as the embedded store does with the same counts; their next deliveries and moves
    fold each sender's old fields into its packed one, and scores, listing and summary lines stay the same."""
    local = Engine.open(config_for(tmp_path, "local"), durable=False)
    engine = Engine.open(config_for(tmp_path, "redis", redis_url))
    state = redis_state(engine)
    old_deliver, old_move = Script(state.client, v1.DELIVER_LUA), Script(state.client, v1.MOVE_LUA)
    try:
        for opened in (local, engine):
            general_training(opened)
        copies = {"alice": range(100, 104), "bob": range(200, 204)}
        for user, numbers in copies.items():
            keys = [*sender_keys_of("spamd:", user), summary_key("spamd:", sender_keys_of("spamd:", user)[0],
                                                                  state.cluster)]  # fmt: skip
            for n in numbers:
                analyzed = engine.classify(high_sender_digest(n, f"{user}@example.com"), user).analyzed
                assert any(s >= HIGH for s in analyzed.senders) and any(s < HIGH for s in analyzed.senders)
                filed = int(user == "bob")  # bob's copies filed into Junk, alice's into the inbox
                base = [recency_now(), SENDERS_PER_USER, PLACED_PER_USER, KEEP_S, 3, "0.8", user,
                        *map(str, analyzed.senders)]  # the older daemon's ARGV  # fmt: skip
                assert old_deliver(keys=keys, args=[analyzed.key, filed, *base]) == 1
                local.senders.delivered(user, analyzed.key, analyzed.senders, bool(filed))
                # each moved to the other side: alice's list to Junk, bob's out of it
                assert old_move(keys=keys, args=[analyzed.key, 1 - filed, *base]) == 1
                local.senders.moved(analyzed.key, Label.SPAM if filed == 0 else Label.HAM, user)
            held = state.client.hgetall(keys[0])
            assert held and all(b":" in field for field in held)  # the older form only
        probe = engine.classify(high_sender_digest(99, "x@example.com")).analyzed.senders

        def same() -> None:
            for user in ("alice", "bob", "carol"):
                copy = high_sender_digest(99, f"{user}@example.com")
                redis_senders, local_senders = engine.senders, local.senders
                assert isinstance(redis_senders, RedisSenders) and isinstance(local_senders, SenderReputation)
                assert redis_senders.counts(user, probe) == [local_senders._stats.get((user, s)) for s in probe]
                assert engine.classify(copy, user).score == local.classify(copy, user).score, user
            assert engine.senders.summary() == local.senders.summary()
            assert listed(engine) == listed(local)  # spamctl users
            fresh = [tuple(t) for t in turned_of(state, ["alice", "bob"], 3, 0.8)]
            turned = engine.senders.summary()
            assert fresh == [tuple(turned.get(u, {"j": 0, "i": 0}).values()) for u in ("alice", "bob")]

        assert local.senders.summary() == {
            "alice": {"senders_to_junk": 2, "senders_to_inbox": 0},
            "bob": {"senders_to_junk": 0, "senders_to_inbox": 2},
        }
        same()  # read from the older fields, nothing written yet
        for user, numbers in copies.items():  # one more copy each, delivered and moved by the new spamd
            n = numbers[-1] + 1
            copy = high_sender_digest(n, f"{user}@example.com")
            for opened in (local, engine):
                classified = opened.classify(copy, user)
                verdict = Verdict.SPAM if user == "alice" else Verdict.HAM
                opened.remember_verdict(classified.analyzed.key, verdict, "smtp", user, classified.analyzed.senders)
            same()  # a delivery folds the old fields in: the summary line kept exact through it
            for opened in (local, engine):
                label = Label.HAM if user == "alice" else Label.SPAM
                opened.train(copy, label, "maildir", user_name=user)
                opened.train(copy, label, "maildir", user_name=user)  # retried: counted once
            held = state.client.hgetall(sender_keys_of("spamd:", user)[0])
            assert sorted(held) == sorted(sender_id(s).encode() for s in probe)  # packed, old fields gone
            members = state.client.zrange(sender_keys_of("spamd:", user)[1], 0, -1)
            assert sorted(members) == sorted(sender_id(s).encode() for s in probe)  # one member each, signed
        same()
    finally:
        local.close()
        engine.close()


Rule = tuple[int, float]
SENDERS = (5, HIGH - 1, HIGH, 2**64 - 1, 12_345_678_901_234_567_890)
# Each message's senders, fixed as a message's are.
MESSAGE_SENDERS = [(SENDERS[m % 5],) if m < 5 else (SENDERS[m % 5], SENDERS[(m + 2) % 5]) for m in range(8)]

OPS = st.lists(
    st.tuples(st.sampled_from("ab"), st.integers(0, 7), st.sampled_from(["deliver", "move"]), st.integers(0, 1)),
    max_size=40,
)


def test_the_scripts_count_as_the_embedded_store_through_an_upgrade(redis_url, tmp_path):
    """Deliveries and moves (retried ones among them), the first `upgrade` by the older scripts under one rule
    (sender_moves, sender_share), the rest by the new ones under another or the same: each sender's counts read
    by RedisSenders.counts, the summary lines, `spamctl users` and the users' keys agree with SenderReputation
    fed the same; a sender a new script touched holds only its packed field."""
    engine = Engine.open(config_for(tmp_path, "e", redis_url))
    state = redis_state(engine)
    old = {"deliver": Script(state.client, v1.DELIVER_LUA), "move": Script(state.client, v1.MOVE_LUA)}
    runs = itertools.count()

    rules = st.sampled_from([(1, 0.5), (2, 0.8), (3, 0.8)])

    @settings(max_examples=30, deadline=None)
    @given(OPS, st.integers(0, 40), rules, rules)
    def check(ops: list[tuple[str, int, str, int]], upgrade: int, old_rule: Rule, rule: Rule) -> None:
        moves, share = rule
        senders = RedisSenders(state, UsersConfig(sender_moves=moves, sender_share=share))
        rep = SenderReputation(1000, 1000, *old_rule)
        run = next(runs)
        names = {u: f"u{run}{u}" for u in "ab"}  # each example its own users
        touched: set[tuple[str, int]] = set()
        for step, (u, m, op, side) in enumerate(ops):
            if step == upgrade:  # the new spamd, perhaps with another rule
                rep.moves, rep.share = rule
            user, key, those = names[u], f"{u}{m}".encode(), MESSAGE_SENDERS[m]
            label = Label.SPAM if side else Label.HAM
            if op == "deliver":
                rep.delivered(user, key, those, bool(side))
            else:
                rep.moved(key, label, user, those)
            if step < upgrade:
                keys = [*sender_keys_of("spamd:", user), summary_key("spamd:", sender_keys_of("spamd:", user)[0],
                                                                      state.cluster)]  # fmt: skip
                old[op](keys=keys, args=[key, side, recency_now(), SENDERS_PER_USER, PLACED_PER_USER, KEEP_S,
                                         old_rule[0], repr(old_rule[1]), user, *map(str, those)])  # fmt: skip
            else:
                if op == "deliver":
                    senders.delivered(user, key, those, bool(side))
                elif not senders.moved(key, label, user, those):
                    continue  # already on that side (a retry): the script changed nothing
                touched.update((user, s) for s in those)
        rep.moves, rep.share = rule
        ours = set(names.values())
        assert {u: row for u, row in senders.summary().items() if u in ours} == rep.summary()
        listed = {r["user"]: (r["senders_to_junk"], r["senders_to_inbox"]) for r in list_users(state, moves, share)}
        assert {u: turned for u, turned in listed.items() if u in ours} == {
            u: (row["senders_to_junk"], row["senders_to_inbox"]) for u, row in rep.summary().items()
        }
        for user in ours:
            assert senders.counts(user, SENDERS) == [rep._stats.get((user, s)) for s in SENDERS]
            held: dict[Any, Any] = state.client.hgetall(sender_keys_of("spamd:", user)[0])
            by_field = counts_by_sender(held)
            assert len(by_field) == sum((user, s) in rep._stats for s in SENDERS)  # no sender in both forms
            for s in SENDERS:
                if (user, s) in touched:
                    assert f"{s}:d".encode() not in held and sender_id(s) in by_field
            assert state.client.zcard(sender_keys_of("spamd:", user)[1]) == len(by_field)

    try:
        check()
    finally:
        engine.close()


def test_the_summary_lines_stay_exact_through_the_caps_across_the_upgrade(tmp_path, redis_url):
    """Random deliveries and moves of eight senders' mail (half of their keys past 2**63) to three users past small
    caps, the first half by the older scripts: each line's turned senders, senders and messages held are what the
    keys hold, every sender held once (one form, one member), as the older and the new scripts drop them."""
    engine = Engine.open(config_for(tmp_path, "a", redis_url))
    state = redis_state(engine)
    scripts = {
        "old": (Script(state.client, v1.DELIVER_LUA), Script(state.client, v1.MOVE_LUA)),
        "new": (Script(state.client, DELIVER_LUA), Script(state.client, MOVE_LUA)),
    }
    rng = random.Random(11)
    users = ["alice", "bob", "carol"]
    pool = [n * 1_000_003 for n in range(1, 5)] + [2**64 - n * 1_000_003 for n in range(1, 5)]
    try:
        for step in range(400):
            user = rng.choice(users)
            which = "old" if step < 200 else "new"
            keys = [*sender_keys_of("spamd:", user), summary_key("spamd:", sender_keys_of("spamd:", user)[0],
                                                                  state.cluster)]  # fmt: skip
            senders = rng.sample(pool, rng.choice([1, 1, 2]))
            names = [str(s) for s in senders] if which == "old" else sender_args(senders)
            args = [f"m{rng.randrange(12)}".encode(), rng.randrange(2), str(1_800_000_000 + step), 5, 6, 1000, 2,
                    "0.5", user, *names]  # fmt: skip
            scripts[which][rng.random() < 0.5](keys=keys, args=args)
            if step % 20 == 19:
                lines = summaries(state, 2, 0.5)
                for name, (junk, inbox) in zip(users, turned_of(state, users, 2, 0.5), strict=True):
                    held = sender_keys_of("spamd:", name)
                    row = lines.get(name, {"senders_to_junk": 0, "senders_to_inbox": 0, "senders": 0, "messages": 0})
                    assert (row["senders_to_junk"], row["senders_to_inbox"]) == (junk, inbox), (step, name)
                    fields: dict[Any, Any] = state.client.hgetall(held[0])
                    assert row["senders"] == state.client.zcard(held[1]) == len(counts_by_sender(fields)) <= 5
                    assert row["messages"] == state.client.zcard(held[2]) <= 6
        assert any(row["senders_to_junk"] or row["senders_to_inbox"] for row in summaries(state, 2, 0.5).values())
    finally:
        engine.close()
