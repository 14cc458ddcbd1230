"""Feature families ([model] stored_counts, char_ngrams, osb and their weights): exact learning, stores, explain, defaults."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig, UsersConfig, load_config
from spamd.engine.analyzers import _decode_analyzed, _encode_answer
from spamd.engine.engine import Engine
from spamd.engine.trainer import Trainer
from spamd.errors import ConfigError, CorruptStateError
from spamd.learning.classifier import Classifier
from spamd.model.bayes import Label, MultinomialNB, features_of, featurize
from spamd.model.families import char_ngram_tokens, families_of, is_weighted, join_families, osb_tokens, token_weights
from spamd.people.users import SharedCounts, UserLayers, _overrides, score_for_user
from spamd.store import Ledger
from spamd.store.snapshot import decode_snapshot, encode_snapshot
from tests import core_helpers as h
from tests.cli_helpers import HAM, SPAM, run_spamctl
from tests.redis_helpers import redis_state, with_redis

# Every family setting, alone and combined, in a table small enough that tokens collide.
SETTINGS = [
    ModelConfig(hash_bits=10, stored_counts=stored, char_ngrams=n, osb=osb, ngram_weight=0.3, osb_weight=0.5)
    for stored, n, osb in itertools.product(("log", "binary", "log2"), (0, 3, 4, 5), (False, True))
]
# The evidence among the words: the weighted families' own arithmetic, as the tests below spell it out.
WEIGHTED = ModelConfig(hash_bits=14, char_ngrams=4, ngram_weight=0.3, osb=True, osb_weight=0.3, evidence_weight=0.0)

text = st.text(alphabet="abc de\nfé€$", max_size=120)
labelled = st.tuples(st.lists(st.sampled_from(["tok", "subject:x", "url:y.example", "w"]), max_size=8), text, text,
                     st.sampled_from(list(Label)))  # fmt: skip


def message_features(config: ModelConfig, tokens: list[str], head: str, body: str):
    joined, weights = join_families(tokens, families_of(head, body, config), config)
    return featurize(joined, config.hash_bits, weights)


def same_state(a: MultinomialNB, b: MultinomialNB) -> bool:
    return a.state_equals(b) and a.distinct == int(np.count_nonzero(a.counts[0] | a.counts[1]))


# ---------------------------------------------------------------- exact learning


@pytest.mark.parametrize("config", SETTINGS, ids=lambda c: f"{c.stored_counts}-cng{c.char_ngrams}-osb{int(c.osb)}")
@settings(max_examples=25, deadline=None)
@given(base=st.lists(labelled, max_size=5), extra=st.lists(labelled, min_size=1, max_size=5), data=st.data())
def test_unlearn_is_the_exact_inverse_of_learn_under_every_family_setting(config, base, extra, data):
    model = MultinomialNB(config)
    for tokens, head, body, label in base:
        model.learn_one(message_features(config, tokens, head, body), label)
    before = MultinomialNB(config)
    before.counts[:], before.token_totals[:], before.doc_totals[:] = model.counts, model.token_totals, model.doc_totals
    before.distinct = model.distinct
    for tokens, head, body, label in extra:
        model.learn_one(message_features(config, tokens, head, body), label)
    for tokens, head, body, label in data.draw(st.permutations(extra)):
        assert model.unlearn_one(message_features(config, tokens, head, body), label)
    assert same_state(model, before)


def test_stored_counts_modes():
    tf = np.array([1, 2, 3, 10, 5000], dtype=np.uint32)
    assert MultinomialNB.stored_counts(tf).tolist() == [3, 4, 6, 10, 28]
    assert MultinomialNB.stored_counts(tf, "log2").tolist() == [1, 2, 3, 5, 14]
    assert MultinomialNB.stored_counts(tf, "binary").tolist() == [1, 1, 1, 1, 1]
    model = MultinomialNB(ModelConfig(hash_bits=10, stored_counts="binary"))
    model.learn_one(featurize(["a", "a", "a", "b"], 10), Label.SPAM)
    assert int(model.token_totals[Label.SPAM]) == 2


# ---------------------------------------------------------------- the families' tokens


def test_osb_and_char_ngram_tokens():
    assert osb_tokens(["free", "cash", "money"]) == ["osb1:free cash", "osb1:cash money", "osb2:free money"]
    assert char_ngram_tokens("abcab", 3) == ["g:abc", "g:bca", "g:cab"]  # each n-gram once
    config = ModelConfig(char_ngrams=3, ngram_chars=6)
    ((grams, weight),) = families_of("a: b", "cdefg", config)
    assert grams == ["g:a: ", "g:: b", "g: b\n", "g:b\nc"] and weight == 1.0  # "a: b\ncd": headers first, then the text


def test_default_model_has_no_family_tokens_and_no_weights():
    classifier = Classifier(Config(), MultinomialNB(ModelConfig()))
    for raw in [*SPAM, *HAM]:
        tokens = classifier.tokens(raw)
        assert tokens == classifier.tokens(raw) and tokens
        assert not [t for t in tokens if t.startswith("g:") or (t.startswith("osb") and t[3:4].isdigit())]
        features = classifier.analyze(raw).features
        assert features.weights is None
        assert np.array_equal(features.ids, featurize(tokens, 22).ids)


def test_weights_follow_each_family_and_a_shared_bucket_keeps_the_heavier():
    tokens, weights = join_families(["w"], [(["osb1:a b"], 0.3), (["g:abcd"], 0.5)], WEIGHTED)
    assert weights is not None and (own := token_weights(tokens, WEIGHTED)) is not None
    assert tokens == ["w", "osb1:a b", "g:abcd"] and weights.tolist() == [1.0, 0.3, 0.5]
    assert own.tolist() == [1.0, 0.3, 0.3]  # WEIGHTED's own weights, by prefix
    merged = featurize(["x", "y"], 0, np.array([1.0, 0.3]))  # one bucket for both
    assert merged.weights is not None
    assert merged.counts.tolist() == [2] and merged.weights.tolist() == [1.0]
    assert token_weights(tokens, ModelConfig(osb=True)) is None  # every weight 1: no weights at all


# ---------------------------------------------------------------- scoring with weights


def trained(config: ModelConfig) -> tuple[Classifier, MultinomialNB]:
    model = MultinomialNB(config)
    classifier = Classifier(Config(model=config), model)
    for raw, label in [*[(r, Label.SPAM) for r in SPAM], *[(r, Label.HAM) for r in HAM]]:
        model.learn_one(classifier.analyze(raw).features, label)
    return classifier, model


def test_weights_scale_each_familys_log_odds_and_count_in_the_denominator():
    classifier, model = trained(WEIGHTED)
    probe = b"From: x@y.example\nSubject: free cash prize\n\nclick now for free money\n"
    tokens = classifier.tokens(probe)
    features, analyzed = features_of(tokens, WEIGHTED), classifier.analyze(probe).features
    assert features.weights is not None and analyzed.weights is not None  # WEIGHTED weighs its families
    assert np.array_equal(features.ids, analyzed.ids)
    assert np.array_equal(features.weights, analyzed.weights)
    per_bucket = model._token_log_odds(features.ids)
    expected = float((per_bucket * features.weights).sum()) / (features.weights.sum() + WEIGHTED.neutral_tokens)
    assert model.score(features).log_odds == pytest.approx(expected, rel=1e-12)
    score, rows = model.explain(tokens, limit=1 << 20)
    assert score == model.score(features)
    assert sum(r.weight for r in rows) == pytest.approx(score.log_odds)
    # With every weight 1 the same tokens score as one plain mean.
    unweighted = dataclasses.replace(WEIGHTED, ngram_weight=1.0, osb_weight=1.0)
    model.config = unweighted
    plain = featurize(tokens, unweighted.hash_bits)
    assert model.score(features_of(tokens, unweighted)) == model.score(plain)


def test_a_users_overrides_weigh_as_their_familys_log_odds():
    classifier, model = trained(WEIGHTED)
    users = UserLayers(UsersConfig(token_moves=True))
    # The user calls the shared model's spam ham: her evidence overrides it token by token.
    for seq, raw in enumerate(SPAM, 1):
        users.apply("alice", classifier.analyze(raw).features, Label.HAM, None, seq, WEIGHTED.stored_counts)
    users.apply("alice", classifier.analyze(HAM[0]).features, Label.SPAM, None, 99, WEIGHTED.stored_counts)
    layer, table = users.for_scoring("alice", WEIGHTED)
    features = classifier.analyze(SPAM[0]).features
    assert layer is not None and table is not None and features.weights is not None
    mine = score_for_user(model, layer, table, features)
    assert mine.log_odds < model.score(features).log_odds  # moved towards ham
    # The same with the weights left out of the features: a plain mean, which differs.
    unweighted = dataclasses.replace(features, weights=None)
    shared = model._token_log_odds(features.ids)
    counts = SharedCounts.of_model(model, features)
    moved = _overrides(counts, layer, table, features.ids, counts.counts, shared)
    expected = float(((shared + moved) * features.weights).sum()) / (features.weights.sum() + WEIGHTED.neutral_tokens)
    assert mine.log_odds == pytest.approx(expected, rel=1e-12)
    assert score_for_user(model, layer, table, unweighted).log_odds != pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "model, frame, fields",
    [
        (WEIGHTED, b"W", ("weights",)),
        (dataclasses.replace(WEIGHTED, evidence_weight=0.25), b"B", ("weights", "kinds")),
        (ModelConfig(), b"K", ("kinds",)),
        (ModelConfig(evidence_weight=0.0), b"A", ()),
    ],
    ids=["weights", "both", "kinds", "neither"],
)
def test_weights_and_kinds_cross_the_analysis_helpers_socket_unchanged(
    model: ModelConfig, frame: bytes, fields: tuple[str, ...]
) -> None:
    analyzed = Classifier(Config(model=model), None).analyze(SPAM[1])  # type: ignore[arg-type]
    kind, _, payload = _encode_answer(7, analyzed)
    back = _decode_analyzed(payload, weighted="weights" in fields, kinded="kinds" in fields)
    assert kind == frame and back.key == analyzed.key
    for field in ("ids", "counts", *fields):
        assert np.array_equal(getattr(back.features, field), getattr(analyzed.features, field))
    assert all(getattr(back.features, field) is None for field in {"weights", "kinds"} - set(fields))
    with pytest.raises(ValueError, match="wrong length"):
        _decode_analyzed(payload + b"\0", weighted="weights" in fields, kinded="kinds" in fields)


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("line, error", [
    ('stored_counts = "sqrt"', "model.stored_counts must be one of log, binary, log2, got 'sqrt'"),
    ("char_ngrams = 6", "model.char_ngrams must be 0 (off), 3, 4 or 5, got 6"),
    ("ngram_chars = 0", "model.ngram_chars must be between 1 and 100000, got 0"),
    ("osb_weight = 0", "model.osb_weight must be above 0 and at most 10, got 0.0"),
    ("ngram_weight = -1.5", "model.ngram_weight must be above 0 and at most 10, got -1.5"),
    ('osb = "yes"', "[model] osb: expected true or false"),
])  # fmt: skip
def test_family_keys_are_checked_with_clear_errors(tmp_path, line, error):
    path = tmp_path / "spamd.toml"
    path.write_text(f"[model]\n{line}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and error in str(e.value)


def test_family_keys_load():
    path = Path(__file__).parent / "families.toml"
    try:
        path.write_text(
            '[model]\nstored_counts = "log2"\nchar_ngrams = 4\nngram_chars = 2000\nosb = true\nosb_weight = 0.3\n'
        )
        model = load_config(path).model
    finally:
        path.unlink()
    assert (model.stored_counts, model.char_ngrams, model.ngram_chars, model.osb, model.osb_weight) == (
        "log2",
        4,
        2000,
        True,
        0.3,
    )
    assert (
        is_weighted(model)
        and not is_weighted(ModelConfig(char_ngrams=4))
        and not is_weighted(ModelConfig(ngram_weight=0.3))
    )


# ---------------------------------------------------------------- snapshots and journal


FAMILIES = ModelConfig(hash_bits=12, stored_counts="log2", char_ngrams=3, osb=True, ngram_weight=0.3)


def test_snapshot_with_families_round_trips_and_other_settings_are_refused():
    _, model = trained(FAMILIES)
    data = encode_snapshot(model, Ledger(10), 7)
    assert decode_snapshot(data, FAMILIES, 10, "snap").model.state_equals(model)
    # A weight only scores: it may change.
    assert decode_snapshot(data, dataclasses.replace(FAMILIES, ngram_weight=1.0), 10, "snap").model.state_equals(model)
    changes: list[tuple[dict[str, Any], str]] = [
        ({"osb": False}, "model.osb = True (the config says False)"),
        ({"char_ngrams": 4}, "model.char_ngrams = 3 (the config says 4)"),
        ({"ngram_chars": 2000}, "model.ngram_chars = 3000 (the config says 2000)"),
        ({"stored_counts": "log"}, "model.stored_counts = 'log2' (the config says 'log')"),
    ]
    for change, said in changes:
        with pytest.raises(CorruptStateError) as e:
            decode_snapshot(data, dataclasses.replace(FAMILIES, **change), 10, "snap")
        assert str(e.value).startswith("snap: built with ") and said in str(e.value)
        assert "set them back, or move the state directory aside and retrain" in str(e.value)


def test_a_default_snapshot_is_refused_by_a_model_with_families(tmp_path):
    config = h.small_config(tmp_path, snapshots_kept=1)
    engine = Engine.open(config)
    engine.train(SPAM[0], Label.SPAM, "test")
    engine.snapshot()
    engine.close()
    with pytest.raises(CorruptStateError, match=r"snapshot-.*model.osb = False \(the config says True\)"):
        Engine.open(dataclasses.replace(config, model=dataclasses.replace(config.model, osb=True)))


def test_journal_only_state_of_other_families_is_refused(tmp_path):
    config = dataclasses.replace(h.small_config(tmp_path), model=dataclasses.replace(FAMILIES, hash_bits=12))
    engine = Engine.open(config)
    for raw in SPAM:
        engine.train(raw, Label.SPAM, "test")
    engine.close()
    reopened = Engine.open(config)  # the same settings replay
    assert int(reopened.model.doc_totals[Label.SPAM]) == len(SPAM)
    reopened.close()
    with pytest.raises(
        CorruptStateError, match=r"journal-000000000000.log: record 1: built with model.stored_counts = 'log2'"
    ):
        Engine.open(dataclasses.replace(config, model=ModelConfig(hash_bits=12)))


# ---------------------------------------------------------------- explain


def test_spamctl_explain_names_ngrams_and_bigrams_by_their_text(tmp_path):
    data = tmp_path / "data"
    config = tmp_path / "spamd.toml"
    config.write_text("[model]\nhash_bits = 16\nchar_ngrams = 4\nngram_weight = 0.3\nosb = true\n")
    for label, messages in (("--spam", SPAM), ("--ham", HAM)):
        for i, raw in enumerate(messages):
            (tmp_path / f"{label[2:]}{i}.eml").write_bytes(raw)
        files = [tmp_path / f"{label[2:]}{i}.eml" for i in range(len(messages))]
        done = run_spamctl("--config", config, "--data-dir", data, "train", label, *files)
        assert done.returncode == 0, done.stderr
    probe = b"From: x@y.example\nSubject: free cash prize\n\nclick now for free money\n"
    done = run_spamctl("--config", config, "--data-dir", data, "explain", "-", "--json", "--limit", "1000", input=probe)
    assert done.returncode == 0, done.stderr
    rows = [r["token"] for side in ("toward_spam", "toward_ham") for r in json.loads(done.stdout)[side]]
    assert "osb1:free money" in rows and "osb1:click now" in rows
    assert "g:free" in rows and "g:cash" in rows
    assert not [t for t in rows if t.isdigit()]  # never a bucket number


def test_the_tokens_of_a_message_name_their_families():
    classifier = Classifier(Config(model=ModelConfig(char_ngrams=5, osb=True)), None)  # type: ignore[arg-type]
    tokens = classifier.tokens(b"Subject: hi\n\nfree cash money\n")
    plain = Classifier(Config(), None).tokens(b"Subject: hi\n\nfree cash money\n")  # type: ignore[arg-type]
    assert tokens[: len(plain)] == plain  # the tokenizer's first, then the families'
    assert (
        "osb2:free money" in tokens and "g:subje" in tokens and "g:cash " in tokens
    )  # header names as the parser gives them


# ---------------------------------------------------------------- Redis


def family_engines(tmp_path: Path, url: str, model: ModelConfig) -> tuple[Engine, Engine]:
    local = Engine.open(dataclasses.replace(h.small_config(tmp_path / "local"), model=model), durable=False)
    shared = Engine.open(with_redis(dataclasses.replace(h.small_config(tmp_path / "redis"), model=model), url))
    return local, shared


REDIS_FAMILIES = ModelConfig(
    hash_bits=16, stored_counts="binary", char_ngrams=4, ngram_weight=0.3, osb=True, osb_weight=0.5
)


@h.requires_corpus
def test_redis_scores_equal_embedded_scores_with_families_on(tmp_path, redis_url):
    """Online over 120 trec07p-dev messages: both stores score alike to the bit, and hold the same counts."""
    rows = h.read_index(h.TREC_INDEX)
    rows = rows[:: len(rows) // 120][:120]
    local, shared = family_engines(tmp_path, redis_url, REDIS_FAMILIES)
    try:
        for label, path in rows:
            raw = path.read_bytes()
            a, b = local.classify(raw).score, shared.classify(raw).score
            assert a == b
            assert local.train(raw, Label.parse(label), "test") == shared.train(raw, Label.parse(label), "test")
        explained = [engine.explain(rows[-1][1].read_bytes(), limit=40) for engine in (local, shared)]
        assert explained[0] == explained[1]
        assert any(r.token.startswith(("g:", "osb")) for r in explained[0][1])
        assert shared.model.state_equals(h.local_model(local))
    finally:
        local.close()
        shared.close()


def test_redis_model_of_other_families_is_refused(tmp_path, redis_url):
    first = Engine.open(
        with_redis(dataclasses.replace(h.small_config(tmp_path / "a"), model=REDIS_FAMILIES), redis_url)
    )
    first.train(SPAM[0], Label.SPAM, "test")
    first.close()
    other = dataclasses.replace(REDIS_FAMILIES, osb=False)
    with pytest.raises(
        CorruptStateError,
        match=r"prefix 'spamd:'\): built with model.osb = True \(the config says False\).*another \[redis\] prefix",
    ):
        Engine.open(with_redis(dataclasses.replace(h.small_config(tmp_path / "b"), model=other), redis_url))
    weights = dataclasses.replace(REDIS_FAMILIES, ngram_weight=1.0)  # a weight only scores
    Engine.open(with_redis(dataclasses.replace(h.small_config(tmp_path / "c"), model=weights), redis_url)).close()


def test_a_redis_model_trained_before_the_settings_were_kept_counts_as_the_defaults(tmp_path, redis_url):
    engine = Engine.open(with_redis(h.small_config(tmp_path / "a", hash_bits=16), redis_url))
    engine.train(SPAM[0], Label.SPAM, "test")
    state = redis_state(engine)
    state.client.hdel(state.totals, "count_settings")  # as an older spamd left it
    engine.close()
    with pytest.raises(CorruptStateError, match="model.char_ngrams = 0"):
        Engine.open(with_redis(dataclasses.replace(h.small_config(tmp_path / "b"), model=REDIS_FAMILIES), redis_url))
    Engine.open(with_redis(h.small_config(tmp_path / "c", hash_bits=16), redis_url)).close()


def test_a_users_layer_stores_counts_as_the_shared_model_does():
    """The layer's counts are compared with the shared model's (everyone else's = shared - hers): the same stored_counts."""
    config = ModelConfig(hash_bits=12, stored_counts="binary", osb=True)
    classifier = Classifier(Config(model=config), None)  # type: ignore[arg-type]
    trainer = Trainer(MultinomialNB(config), Ledger(100), None, users=UserLayers(UsersConfig(token_moves=True)))
    analyzed = classifier.analyze(b"Subject: cash cash cash\n\nfree free money money money\n")
    trainer.train(analyzed, Label.SPAM, "test", user_name="alice")
    layer = trainer.users.layers["alice"]
    assert np.array_equal(layer.ids, analyzed.features.ids)
    assert np.array_equal(layer.counts[Label.SPAM], trainer.model.counts[Label.SPAM, analyzed.features.ids])
    assert set(layer.counts[Label.SPAM].tolist()) == {1} and np.array_equal(
        layer.token_totals, trainer.model.token_totals
    )
    trainer.untrain(analyzed, "test", user_name="alice")
    assert "alice" not in trainer.users.layers and not trainer.model.counts.any()
