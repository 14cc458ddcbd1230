"""Per-user layers (spamd/people/users.py) through the real trainer, store and engine: exactness, ledger, scoring, snapshots."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig, UsersConfig
from spamd.engine.engine import Engine
from spamd.engine.trainer import Trainer
from spamd.evaluation.trec import read_index
from spamd.learning.classifier import Analyzed
from spamd.learning.outcomes import Outcome
from spamd.model.bayes import Features, Label, MultinomialNB
from spamd.people.users import (
    TRIM_SLACK,
    UserLayer,
    UserLayers,
    UserNameError,
    check_user_name,
    recipient_name,
    recipients_user,
    score_for_user,
    user_ledger_key,
)
from spamd.store import Ledger, TrainingRecord
from tests import core_helpers as h

MODEL = ModelConfig(hash_bits=12)


def analyzed(seed: int) -> Analyzed:
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, 1 << 12, size=rng.integers(1, 30))).astype(np.uint32)
    counts = rng.integers(1, 5, size=len(ids)).astype(np.uint32)
    return Analyzed(seed.to_bytes(16, "big"), Features(ids, counts))


def trainer() -> Trainer:
    return Trainer(MultinomialNB(MODEL), Ledger(10_000), None, users=UserLayers(UsersConfig(token_moves=True)))


USERS = st.sampled_from([None, "alice", "bob"])
STEP = st.tuples(st.integers(0, 7), st.sampled_from([Label.HAM, Label.SPAM, None]), USERS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=25))
def test_untraining_everything_returns_to_empty_and_each_user_message_counts_once(steps):
    t = trainer()
    held: dict[tuple[int, str | None], Label] = {}
    for seed, label, user in steps:
        a = analyzed(seed)
        if label is None:
            t.untrain(a, "test", user_name=user)
            held.pop((seed, user), None)
        else:
            t.train(a, label, "test", user_name=user)
            held[(seed, user)] = label
    # The shared model holds each (user, message) once, with its last label.
    expected = MultinomialNB(MODEL)
    for (seed, _), label in held.items():
        expected.learn_one(analyzed(seed).features, label)
    assert np.array_equal(expected.counts, t.model.counts)
    assert len(t.ledger) == len(held)
    for (seed, user), label in held.items():
        assert t.label_of(analyzed(seed).key, user) == label
    # Untrain all: shared model and every layer are exactly empty.
    for seed, user in list(held):
        assert t.untrain(analyzed(seed), "test", user_name=user) is Outcome.UNLEARNED
    assert t.model.state_equals(MultinomialNB(MODEL)) and len(t.ledger) == 0 and len(t.users) == 0


def test_a_correction_moves_shared_and_layer_once_and_a_repeat_nothing():
    t = trainer()
    a = analyzed(1)
    assert t.train(a, Label.SPAM, "test", user_name="alice") is Outcome.LEARNED
    assert t.train(a, Label.HAM, "test", user_name="bob") is Outcome.LEARNED  # another person's entry
    assert t.train(a, Label.SPAM, "test", user_name="alice") is Outcome.REPEAT
    assert t.train(a, Label.HAM, "test", user_name="alice") is Outcome.CORRECTED
    assert t.model.doc_totals.tolist() == [2, 0]
    alice, bob = t.users.get("alice"), t.users.get("bob")
    assert alice is not None and bob is not None
    assert alice.doc_totals.tolist() == [1, 0]
    assert bob.doc_totals.tolist() == [1, 0]
    assert user_ledger_key(None, a.key) == a.key and user_ledger_key("alice", a.key) != a.key


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from([Label.HAM, Label.SPAM])), min_size=2, max_size=30),
       st.integers(100, 140))  # fmt: skip
def test_a_user_without_trainings_scores_bit_identically_to_the_shared_model(trainings, probe):
    t = trainer()
    for seed, label in trainings:
        t.train(analyzed(seed), label, "test", user_name="alice")
        t.train(analyzed(seed + 1000), label, "test")
    features = analyzed(probe).features
    for name in ("carol", "nobody"):
        assert score_for_user(t.model, *t.users.for_scoring(name, MODEL), features) == t.model.score(features)
    # A message none of whose tokens alice trained: her score is the shared one too.
    empty = Features(np.zeros(0, np.uint32), np.zeros(0, np.uint32))
    assert score_for_user(t.model, *t.users.for_scoring("alice", MODEL), empty) == t.model.score(empty)
    alice = t.users.get("alice")
    if alice is not None:
        apart = np.setdiff1d(features.ids, alice.ids)
        elsewhere = Features(apart, np.ones(len(apart), np.uint32))
        assert score_for_user(t.model, *t.users.for_scoring("alice", MODEL), elsewhere) == t.model.score(elsewhere)


def test_the_user_layer_turns_a_disputed_kind_for_its_user_only():
    t = trainer()

    def kind(seed: int) -> Analyzed:  # one list's copies: its own tokens, and a few of each copy's own
        a = analyzed(seed)
        ids = np.union1d(a.features.ids, np.arange(4000, 4030, dtype=np.uint32))
        return Analyzed(a.key, Features(ids, np.ones(len(ids), np.uint32)))

    newsletter = [kind(500 + i) for i in range(12)]
    for i, a in enumerate(newsletter[:8]):
        t.train(a, Label.HAM, "test", user_name="bob")
        t.train(analyzed(900 + i), Label.SPAM, "test")
    for a in newsletter[8:11]:
        t.train(a, Label.SPAM, "test", user_name="alice")
    for i in range(3):  # her own ham too: a layer of one class has no log-odds of its own
        t.train(analyzed(950 + i), Label.HAM, "test", user_name="alice")
    probe = newsletter[11].features
    alice = score_for_user(t.model, *t.users.for_scoring("alice", MODEL), probe)
    bob = score_for_user(t.model, *t.users.for_scoring("bob", MODEL), probe)
    assert alice.log_odds > bob.log_odds


def test_user_names_are_checked_and_recipients_name_one_user_or_none():
    assert check_user_name("alice.b+x@example.org") == "alice.b+x@example.org"
    for bad in ("", ".hidden", "a/b", "x" * 65, "a b", "ü"):
        with pytest.raises(UserNameError):
            check_user_name(bad)
    assert recipients_user(["alice@example.org", "alice+lists@example.org"]) == "alice"
    assert recipients_user(["alice@example.org", "bob@example.org"]) is None
    assert (
        recipients_user(iter(["alice+a@example.org", "alice+b@example.org"])) == "alice"
    )  # any iterable (the milter's)
    assert recipients_user(["a b@example.org"]) is None  # no valid name: the shared model
    assert recipient_name("alice+lists@example.org") == recipient_name("alice") == "alice"


def test_layers_survive_snapshot_restart_and_journal_replay_and_old_records_load(tmp_path):
    config = dataclasses.replace(Config(model=MODEL, users=UsersConfig(token_moves=True)), data_dir=tmp_path)
    engine = Engine.open(config, durable=False)
    for i in range(6):
        engine.trainer.train(analyzed(i), Label(i % 2), "test", user_name="alice")
    engine.snapshot()
    for i in range(6, 9):
        engine.trainer.train(analyzed(i), Label(i % 2), "test", user_name="bob")  # journal only
    engine.trainer.train(analyzed(50), Label.SPAM, "test")  # a training with no user
    before = {name: (layer.ids.copy(), layer.counts.copy()) for name, layer in h.local_users(engine).layers.items()}
    counts = h.local_model(engine).counts.copy()
    engine.close()
    reopened = Engine.open(config, durable=False)
    try:
        layers = h.local_users(reopened).layers
        assert np.array_equal(h.local_model(reopened).counts, counts)
        assert set(layers) == {"alice", "bob"}
        for name, (ids, c) in before.items():
            assert np.array_equal(layers[name].ids, ids)
            assert np.array_equal(layers[name].counts, c)
        assert reopened.trainer.label_of(analyzed(7).key, "bob") == Label.SPAM
    finally:
        reopened.close()
    # A record with no user is written as before users existed (no user_name key).
    record = TrainingRecord(1, b"k" * 16, Label.SPAM, None, True, "x", analyzed(1).features, 0.0, 12)
    assert b"user_name" not in record.to_msgpack()
    assert TrainingRecord.from_msgpack(record.to_msgpack()).user_name is None


def test_layers_are_bounded_by_tokens_and_users():
    t = Trainer(
        MultinomialNB(MODEL),
        Ledger(10_000),
        None,
        users=UserLayers(UsersConfig(max_tokens=20, max_users=2, token_moves=True)),
    )
    for i in range(5):
        t.train(analyzed(i), Label.SPAM, "test", user_name="alice")
    alice = t.users.get("alice")
    assert alice is not None and len(alice) <= 20
    t.train(analyzed(10), Label.HAM, "test", user_name="bob")
    t.train(analyzed(11), Label.HAM, "test", user_name="carol")
    assert set(t.users.layers) == {"bob", "carol"}  # alice trained least recently


def test_eval_reads_a_user_as_the_third_field(tmp_path):
    (tmp_path / "m1").write_bytes(b"Subject: x\n\nhello\n")
    (tmp_path / "index").write_text("spam m1 alice\nham m1\n")
    entries = read_index(tmp_path / "index")
    assert [e.user for e in entries] == ["alice", None]
    assert entries[0].path == tmp_path / "m1"


def test_layers_score_only_when_score_per_user_is_on_and_are_built_only_with_token_moves(tmp_path):
    """On (the default, with the token layer joined): a user's moves count for them. Off: their mail scores as the
    shared model's (the layer is built, token_moves on). Without token_moves no layer is built at all."""
    off = dataclasses.replace(
        Config(model=MODEL, users=UsersConfig(score_per_user=False, token_moves=True)), data_dir=tmp_path / "off"
    )
    on = dataclasses.replace(Config(model=MODEL, users=UsersConfig(token_moves=True)), data_dir=tmp_path / "on")
    unbuilt = dataclasses.replace(Config(model=MODEL, users=UsersConfig()), data_dir=tmp_path / "unbuilt")
    assert on.users.score_per_user
    probe = h.numbered_message(0, "weekly offer from the shop")
    scores = {}
    for name, config in (("off", off), ("on", on), ("unbuilt", unbuilt)):
        engine = Engine.open(config, durable=False)
        try:
            for i in range(1, 13):
                engine.train(h.numbered_message(i, "weekly offer from the shop"), Label.HAM, "test")
                engine.train(h.numbered_message(100 + i, "cheap pills online now"), Label.SPAM, "test")
            for i in range(13, 19):
                engine.train(h.numbered_message(i, "weekly offer from the shop"), Label.SPAM, "test", user_name="alice")
                engine.train(
                    h.numbered_message(200 + i, "minutes of the meeting"), Label.HAM, "test", user_name="alice"
                )
            built = h.local_users(engine).for_scoring("alice", config.model)[0] is not None
            assert built == config.users.token_moves, name
            assert len(engine.users) == int(built)
            scores[name] = (engine.classify(probe, user_name="alice").score, engine.classify(probe).score)
        finally:
            engine.close()
    assert scores["off"][0] == scores["off"][1]  # off: alice scores as everyone
    assert scores["unbuilt"][0] == scores["unbuilt"][1]  # no layer: the shared model's
    assert scores["on"][0].log_odds > scores["on"][1].log_odds  # on: her moves count for her


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(st.integers(0, 200), min_size=1, max_size=30), st.integers(1, 5), st.sampled_from(list(Label))
        ),
        min_size=1,
        max_size=25,
    ),
    st.integers(5, 60),
)
def test_a_layer_learns_and_trims_as_a_plain_table_of_counts_does(messages, max_tokens):
    """Counts as a dict of id -> (ham, spam) would hold them; past the cap, the most counted stay (ties: larger id)."""
    layer, reference = UserLayer(), dict[int, list[int]]()
    for ids, tf, label in ((sorted(i), tf, label) for i, tf, label in messages):
        counts = np.full(len(ids), tf, dtype=np.uint32)
        layer.learn(Features(np.array(ids, dtype=np.uint32), counts), label, max_tokens)
        stored = int(MultinomialNB.stored_counts(counts)[0])
        for i in ids:
            reference.setdefault(i, [0, 0])[label] += stored
        if len(reference) > max_tokens:
            ranked = sorted(reference, key=lambda i: (sum(reference[i]), i), reverse=True)
            reference = {i: reference[i] for i in ranked[: max_tokens - max_tokens // TRIM_SLACK]}
        assert layer.ids.tolist() == sorted(reference)
        assert layer.counts.T.tolist() == [reference[i] for i in sorted(reference)]
        assert layer.token_totals.tolist() == [sum(c[k] for c in reference.values()) for k in (0, 1)]
