"""What a person kept from a sender (spamd/people/kept.py) and the learning records (spamd/people/learned.py).

The Engine's part runs against both stores: embedded, and a real redis-server (plain and a
three-master cluster, tests/redis_helpers.py). Nothing of spamd's own is mocked.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import UsersConfig
from spamd.engine.engine import Engine
from spamd.learning.outcomes import Outcome
from spamd.model.bayes import Label, Verdict
from spamd.people.kept import (
    KEPT_PUSH,
    PROFILE_SIZE,
    RESEMBLANCE_FULL,
    RESEMBLANCE_NONE,
    KeptSamples,
    kept_push,
    merged,
    resemblance,
)
from spamd.people.learned import LearningRecords, forged_looking, learning_record, message_id_of
from spamd.store.redis.connect import Script
from spamd.store.redis.kept import KEEP_LUA, kept_key
from tests import core_helpers as h
from tests.daemon_helpers import make_message
from tests.redis_helpers import redis_state, with_redis

SHOP_WORDS = [
    "offer",
    "sale",
    "discount",
    "sneakers",
    "jacket",
    "season",
    "collection",
    "coupon",
    "members",
    "deal",
    "price",
]
FOOTER = (
    "You receive this because you joined Shop Example rewards. Manage preferences at shop example account centre. "
    "Shop Example Ltd, 12 Harbour Road, Lighthouse Quay. Unsubscribe with one click from this newsletter."
)


def shop_newsletter(n: int, frm: str = "Shop Example <deals@shop.example>") -> bytes:
    """The shop's own newsletter: its vocabulary, its layout and its footer, no signature (unauthenticated)."""
    rng = random.Random(f"shop-{n}")
    lines = [" ".join(rng.choice(SHOP_WORDS) for _ in range(10)) + "." for _ in range(4)]
    return (
        f"From: {frm}\nTo: alice@example.com\nSubject: shop example weekly {n}\n"
        f"Message-ID: <weekly-{n}@shop.example>\nX-Mailer: ShopSender 4.2\n\n"
        + "\n".join(lines)
        + f"\n\n{FOOTER}\nweekly{n}\n"
    ).encode()


def forged(raw: bytes, frm: str = "Shop Example <deals@shop.example>") -> bytes:
    """`raw` (someone else's mail) with the shop's From written over its own."""
    head, _, body = raw.partition(b"\n\n")
    lines = [line for line in head.split(b"\n") if not line.lower().startswith(b"from:")]
    return b"\n".join([f"From: {frm}".encode(), *lines]) + b"\n\n" + body


# ---------------------------------------------------------------- the profile alone


def fingerprints(values: list[int]) -> np.ndarray:
    return np.unique(np.array(values, dtype=np.uint16))


def test_a_profile_keeps_what_recurs_and_is_bounded():
    boilerplate = list(range(10))
    profile = b""
    for n in range(30):
        profile = merged(profile, fingerprints(boilerplate + [1000 + 40 * n + k for k in range(40)]))
    held = np.frombuffer(profile, dtype="<u2")
    assert len(held) == PROFILE_SIZE and len(set(held.tolist())) == PROFILE_SIZE
    assert set(boilerplate) <= set(held.tolist())  # seen in every message: never the first to go
    assert resemblance(profile, fingerprints(boilerplate)) == 1.0
    assert resemblance(profile, fingerprints([60000, 60001])) == 0.0
    assert resemblance(None, fingerprints(boilerplate)) == 0.0 and resemblance(profile, fingerprints([])) == 0.0


def test_the_push_grows_with_resemblance_and_never_reaches_ham_alone():
    assert kept_push(0.0) == kept_push(RESEMBLANCE_NONE) == 0.0
    assert kept_push(RESEMBLANCE_FULL) == kept_push(1.0) == KEPT_PUSH
    assert 0 < kept_push((RESEMBLANCE_NONE + RESEMBLANCE_FULL) / 2) < KEPT_PUSH
    assert KEPT_PUSH < 0.63  # the spam cut to the ham cut: mail content files as spam becomes Unsure at most


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=90), min_size=1, max_size=12))
def test_a_profile_holds_the_last_samples_fingerprints_first(samples):
    profile = None
    for values in samples:
        sample = fingerprints(values)
        profile = merged(profile, sample)
        held = set(np.frombuffer(profile, dtype="<u2").tolist())
        assert len(held) == len(profile) // 2 <= PROFILE_SIZE  # no repeats, bounded
        if len(sample) <= PROFILE_SIZE:
            assert set(sample.tolist()) <= held


def test_kept_samples_are_per_user_and_sender_bounded_and_round_trip():
    kept = KeptSamples(max_profiles=3)
    kept.kept("alice", (1, 2), fingerprints([1, 2, 3]))
    kept.kept("bob", (1,), fingerprints([7, 8]))
    assert kept.resemblance("alice", (1,), fingerprints([1, 2])) == 1.0
    assert kept.resemblance("bob", (1,), fingerprints([1, 2])) == 0.0
    kept.kept("carol", (5,), fingerprints([9]))  # a fourth profile: alice's first one goes
    assert len(kept) == 3 and kept.resemblance("alice", (1,), fingerprints([1])) == 0.0
    copy = KeptSamples(max_profiles=3)
    copy.restore(kept.export())
    assert copy.export() == kept.export()
    with pytest.raises(ValueError):
        copy.restore({"users": ["x"], "profiles": [[0, 1, b"odd"]]})


def test_redis_merges_a_sample_as_the_embedded_store_does(tmp_path, redis_url):
    """The script's merge and spamd.people.kept.merged give the same bytes, sample after sample."""
    engine = Engine.open(with_redis(h.small_config(tmp_path / "r"), redis_url))
    state = redis_state(engine)
    try:
        script = Script(state.client, KEEP_LUA)
        key = kept_key("spamd:", "alice")
        rng = random.Random(3)
        profile = None
        for _ in range(40):
            pool = rng.randrange(20, 400)  # small pools: many fingerprints again, large ones: mostly new
            sample = fingerprints([rng.randrange(pool) for _ in range(rng.randrange(0, 100))])
            if not len(sample):
                continue
            script(keys=[key], args=[sample.astype("<u2").tobytes(), PROFILE_SIZE, 64, 3600, "-5"])
            profile = merged(profile, sample)
            assert state.client.hget(key, "-5") == profile
    finally:
        engine.close()


# ---------------------------------------------------------------- learning records alone


def test_learning_records_are_bounded_latest_per_message_and_found_by_message_id():
    records = LearningRecords(max_records=3)
    for n in range(5):
        records.add(learning_record(bytes([n]) * 16, "learned", user="alice", message_id=f"<m{n}>", label="ham",
                                    source="maildir"))  # fmt: skip
    records.add(learning_record(bytes([4]) * 16, "already_trained", user="alice", message_id="<m4>", label="ham",
                                source="maildir"))  # fmt: skip
    assert len(records) == 3 and records.counts == {"learned": 5, "already_trained": 1}
    assert [r["what"] for r in records.find(message_id="<m4>")] == ["already_trained", "learned"]  # newest first
    assert records.find(key=bytes([0]) * 16) == []  # the oldest went
    assert records.find(user="bob") == []
    copy = LearningRecords(max_records=3)
    copy.restore(records.export())
    assert copy.find() == records.find()


def test_message_id_and_forged_looking_read_the_head_only():
    raw = b"Message-ID: <a@b>\r\nX-Spam-Auth: source=spamd; dmarc=fail header.from=bank.example\r\n\r\nMessage-ID: <c@d>\n"
    assert message_id_of(raw) == "<a@b>" and forged_looking(raw)
    assert not forged_looking(b"Subject: x\n\nX-Spam-Auth: source=spamd; dmarc=fail\n")
    assert not forged_looking(b"X-Spam-Auth: source=spamd; dmarc=pass header.from=bank.example\n\n")


# ---------------------------------------------------------------- the Engine, both stores


def engine_for(tmp_path, store: str, request) -> Engine:
    config = dataclasses.replace(h.small_config(tmp_path / store, hash_bits=18), users=UsersConfig())
    if store == "redis":
        config = with_redis(config, request.getfixturevalue("redis_plain_url"))
    return Engine.open(config, durable=False)


def deliver(engine: Engine, raw: bytes, user: str) -> Verdict:
    """Score `raw` for `user` and file it, as a way in does."""
    classified = engine.classify(raw, user)
    a = classified.analyzed
    engine.remember_verdict(a.key, classified.score.verdict, "smtp", user, a.senders, a.authenticated)
    return classified.score.verdict


@pytest.mark.parametrize("store", ["local", "redis"])
def test_what_alice_rescued_stays_rescued_and_forgers_gain_nothing(tmp_path, store, request):
    engine = engine_for(tmp_path, store, request)
    try:
        for n in range(20):
            engine.train(make_message(Label.SPAM, n), Label.SPAM, "spamctl")
            engine.train(make_message(Label.HAM, n), Label.HAM, "spamctl")
        for n in range(100, 110):  # everyone else calls the shop's mail spam
            engine.train(shop_newsletter(n, "Shop Example <deals@shop.example>"), Label.SPAM, "spamctl")
        for n in range(3):  # alice's copies land in Junk and she moves each out of it
            assert deliver(engine, shop_newsletter(n), "alice") is Verdict.SPAM
            assert engine.train(shop_newsletter(n), Label.HAM, "maildir", user_name="alice") is Outcome.LEARNED

        own = engine.classify(shop_newsletter(50)).analyzed
        alone, hers = engine.classifier.score(own), engine.classifier.score(own, "alice")
        assert hers.log_odds < alone.log_odds - 0.5 * KEPT_PUSH  # the shop's own mail: most of the push
        assert hers.verdict is not Verdict.SPAM
        own_gain = alone.log_odds - hers.log_odds
        spam = [engine.classify(forged(make_message(Label.SPAM, n))).analyzed for n in range(40, 60)]
        spam = [a for a in spam if engine.classifier.score(a).verdict is Verdict.SPAM]
        gained = [engine.classifier.score(a).log_odds - engine.classifier.score(a, "alice").log_odds for a in spam]
        # Forgeries: none filed as ham, and on average a small part of what her shop's own mail gains (these
        # short messages are a third From and headers, which a forger writes as the shop does).
        assert len(spam) >= 15 and all(engine.classifier.score(a, "alice").verdict is not Verdict.HAM for a in spam)
        assert sum(gained) / len(gained) < 0.4 * own_gain, (gained, own_gain)

        # spamd's own label never undoes hers: autolearn of the shop's mail as spam is declined for her
        assert engine.train(shop_newsletter(51), Label.SPAM, "autolearn", user=False, user_name="alice") is (
            Outcome.DECLINED
        )
        assert engine.train(shop_newsletter(0), Label.SPAM, "settled", user=False, user_name="alice") is (
            Outcome.DECLINED
        )
        assert engine.train(shop_newsletter(52), Label.SPAM, "autolearn", user=False, user_name="bob") is (
            Outcome.LEARNED
        )

        # is it learning? her rescue of weekly-1, by Message-ID and by the message itself
        [record] = engine.learning_records("alice", message_id="<weekly-1@shop.example>")
        assert record["what"] == "learned" and record["moved"] and record["kept"] == 1 and record["label"] == "ham"
        assert engine.learning_records("alice", raw=shop_newsletter(1)) == [record]
        assert engine.learning_records("bob", raw=shop_newsletter(1)) == []
        assert engine.learning_records("alice", raw=shop_newsletter(51))[0]["what"] == "declined"
        assert engine.train(shop_newsletter(1), Label.HAM, "maildir", user_name="alice") is Outcome.REPEAT
        assert engine.learning_records("alice", raw=shop_newsletter(1))[0]["what"] == "already_trained"
        engine.note_ignored(shop_newsletter(2), "alice", ".Junk", ".Trash", True)
        assert engine.learning_records("alice", raw=shop_newsletter(2))[0]["what"] == "trash"

        # a rescue whose From failed DMARC when spamd delivered it: learned, but nothing for its senders
        phish = b"X-Spam-Auth: source=spamd; dmarc=fail header.from=shop.example\n" + forged(
            make_message(Label.SPAM, 90), "Shop Example <deals@shop.example>"
        )
        assert deliver(engine, phish, "carol") is Verdict.SPAM
        engine.train(phish, Label.HAM, "maildir", user_name="carol")
        [record] = engine.learning_records("carol", raw=phish)
        assert record["what"] == "forged_sender" and not record["moved"] and not record["kept"]
        assert engine.senders.kept.resemblance("carol", own.senders, np.arange(10, dtype=np.uint16)) == 0.0

        standing = engine.sender_standing(shop_newsletter(53), "alice")
        [row] = standing["senders"]
        assert row["way"] == "inbox_claimed" and row["resemblance"] > RESEMBLANCE_NONE
        assert {m["message_id"] for m in row["moves"]} == {f"<weekly-{n}@shop.example>" for n in range(3)}
        assert engine.senders.learned.counts["learned"] >= 3
    finally:
        engine.close()


def test_kept_samples_and_records_survive_a_restart_from_the_journal_alone(tmp_path):
    """No snapshot: the trainings replayed from the journal give back the profiles and their records."""
    config = dataclasses.replace(h.small_config(tmp_path / "d", hash_bits=18), users=UsersConfig())
    engine = Engine.open(config)
    try:
        for n in range(3):  # filed in her Junk, moved out of it
            a = engine.classify(shop_newsletter(n), "alice").analyzed
            engine.remember_verdict(a.key, Verdict.SPAM, "smtp", "alice", a.senders, a.authenticated)
            engine.train(shop_newsletter(n), Label.HAM, "maildir", user_name="alice")
        probe = engine.classify(shop_newsletter(9)).analyzed
        before = engine.classifier.score(probe, "alice")
        assert before.log_odds < engine.classifier.score(probe).log_odds  # pushed by what she kept
        records = engine.learning_records("alice")
    finally:
        engine.store.close()  # as a kill -9 leaves it: the journal, no snapshot
    engine = Engine.open(config)
    try:
        assert engine.classifier.score(probe, "alice") == before
        again = engine.learning_records("alice")
        assert [(r["key"], r["what"], r["moved"], r["kept"]) for r in again] == [
            (r["key"], r["what"], r["moved"], r["kept"]) for r in records
        ]
    finally:
        engine.close()
