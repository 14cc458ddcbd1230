"""The estimation switches: off, the scores of before to the bit; on, score, explain and per-user scoring agree."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig, UsersConfig, load_config
from spamd.errors import ConfigError
from spamd.model.bayes import PRIOR_ROW, Features, Label, MultinomialNB, featurize, score_counts, verdict_of
from spamd.model.estimation import class_norms, log_masses
from spamd.people.users import UserLayers, explain_for_user, score_for_user

TINY = ModelConfig(hash_bits=10)  # small enough that random vocabularies collide
SWITCHES: dict[str, dict[str, Any]] = {
    "wnorm": dict(weight_normalization=True),
    "prior": dict(class_prior=True),
    "both": dict(weight_normalization=True, class_prior=True),
}

words = st.text(alphabet="abcdefghij€é", min_size=1, max_size=4)
messages = st.lists(words, min_size=0, max_size=30)
labelled = st.tuples(messages, st.sampled_from(list(Label)))
switched = st.sampled_from(sorted(SWITCHES))


def masses_of(model: MultinomialNB) -> np.ndarray:
    """The class log masses of a model that keeps them ([model] weight_normalization; None without)."""
    masses = model.class_log_masses()
    assert masses is not None
    return masses


def train(model: MultinomialNB, items: list[tuple[list[str], Label]]) -> None:
    for tokens, label in items:
        model.learn_one(featurize(tokens, model.config.hash_bits), label)


def score_as_before(model: MultinomialNB, features: Features) -> float:
    """The log-odds as spamd computed them before the switches existed (its arithmetic, step by step)."""
    config = model.config
    if len(features) == 0 or not (model.doc_totals[0] and model.doc_totals[1]):
        return 0.0
    counts = model.counts.take(features.ids, axis=1)
    alpha, vocabulary = config.alpha, max(model.distinct, 1)
    smoothed = counts + alpha
    ham_total = float(model.token_totals[0]) + alpha * vocabulary
    spam_total = float(model.token_totals[1]) + alpha * vocabulary
    log_odds = np.log(smoothed[1] / smoothed[0])
    log_odds += math.log(ham_total / spam_total)
    evidence = smoothed[1] + smoothed[0] - 2 * alpha
    log_odds *= evidence / (evidence + config.evidence_prior)
    return float(np.add.reduce(log_odds)) / (len(features) + config.neutral_tokens)


@settings(max_examples=100, deadline=None)
@given(items=st.lists(labelled, min_size=1, max_size=12), probe=messages)
def test_with_the_switches_off_scores_are_those_of_before_to_the_bit(items, probe):
    model = MultinomialNB(TINY)
    train(model, items)
    features = featurize(probe, TINY.hash_bits)
    assert model.score(features).log_odds == score_as_before(model, features)
    assert model.class_log_masses() is None and model._log_masses is None  # nothing kept, nothing counted


def test_the_switches_need_what_they_read_and_say_so():
    counts, totals = np.ones((2, 3)), np.array([5, 5])
    with pytest.raises(ValueError, match="log masses"):
        score_counts(dataclasses.replace(TINY, weight_normalization=True), counts, totals, 3)
    with pytest.raises(ValueError, match="doc_totals"):
        score_counts(dataclasses.replace(TINY, class_prior=True), counts, totals, 3)


@settings(max_examples=100, deadline=None)
@given(items=st.lists(labelled, min_size=2, max_size=12), probe=messages, switch=switched)
def test_with_a_switch_on_score_and_explain_agree(items, probe, switch):
    model = MultinomialNB(dataclasses.replace(TINY, **SWITCHES[switch]))
    train(model, items + [(["ham"], Label.HAM), (["spam"], Label.SPAM)])
    score = model.score(featurize(probe, TINY.hash_bits))
    explained, rows = model.explain(probe, limit=10_000)
    assert explained == score
    if probe:
        assert math.isclose(sum(r.weight for r in rows), score.log_odds, rel_tol=1e-9, abs_tol=1e-12)
        assert (PRIOR_ROW in [r.token for r in rows]) == ("prior" in switch or switch == "both")


@settings(max_examples=100, deadline=None)
@given(base=st.lists(labelled, max_size=10), extra=st.lists(labelled, min_size=1, max_size=10), data=st.data())
def test_unlearn_restores_counts_and_log_masses_exactly_and_the_masses_are_a_recount(base, extra, data):
    model = MultinomialNB(dataclasses.replace(TINY, weight_normalization=True))
    train(model, base)
    counts, masses = model.counts.copy(), masses_of(model).copy()
    train(model, extra)
    assert np.array_equal(masses_of(model), log_masses(model.counts, TINY.alpha))
    for tokens, label in data.draw(st.permutations(extra)):
        assert model.unlearn_one(featurize(tokens, TINY.hash_bits), label)
    assert np.array_equal(model.counts, counts)
    assert model._log_masses is not None and np.array_equal(model._log_masses, masses)  # kept by unlearn, not recounted
    assert np.array_equal(masses_of(model), masses)


def test_the_class_norms_are_the_l1_norms_of_log_p_over_the_buckets_seen():
    model = MultinomialNB(dataclasses.replace(TINY, weight_normalization=True))
    train(model, [(["buy", "cheap", "pills", "now", "now"], Label.SPAM), (["lunch", "at", "noon"], Label.HAM),
                  (["cheap", "lunch"], Label.HAM)])  # fmt: skip
    alpha, seen = TINY.alpha, model.counts[0] | model.counts[1] > 0
    totals = [float(model.token_totals[c]) + alpha * model.distinct for c in (0, 1)]
    direct = [float(np.abs(np.log((model.counts[c][seen] + alpha) / totals[c])).sum()) for c in (0, 1)]
    computed = class_norms(masses_of(model), (totals[0], totals[1]), model.distinct, alpha)
    assert np.allclose(computed, direct, rtol=1e-9)


def test_normalization_with_equal_norms_is_the_plain_log_odds():
    """The common factor is the mean of the two norms: where they are equal nothing changes."""
    plain, normed = MultinomialNB(TINY), MultinomialNB(dataclasses.replace(TINY, weight_normalization=True))
    items = [(["a", "b", "c"], Label.SPAM), (["d", "e", "f"], Label.HAM)]  # mirror images: equal norms
    train(plain, items)
    train(normed, items)
    features = featurize(["a", "b", "d", "x"], TINY.hash_bits)
    assert math.isclose(normed.score(features).log_odds, plain.score(features).log_odds, rel_tol=1e-9)


def test_the_class_prior_adds_the_log_ratio_of_messages_over_the_denominator():
    plain, prior = MultinomialNB(TINY), MultinomialNB(dataclasses.replace(TINY, class_prior=True))
    items = [(["a", "b"], Label.SPAM)] * 3 + [(["c", "d"], Label.HAM)]
    train(plain, items)
    train(prior, items)
    features = featurize(["a", "c", "e"], TINY.hash_bits)
    moved = prior.score(features).log_odds - plain.score(features).log_odds
    assert math.isclose(moved, math.log(3 / 1) / (3 + TINY.neutral_tokens), rel_tol=1e-9)


def test_a_model_whose_counts_were_written_in_place_recounts_its_masses():
    """A snapshot load or an import writes the arrays, not learn_one: the masses follow."""
    config = dataclasses.replace(TINY, weight_normalization=True)
    source, loaded = MultinomialNB(config), MultinomialNB(config)
    train(source, [(["x", "y", "z"], Label.SPAM), (["u", "v"], Label.HAM)])
    assert masses_of(loaded).tolist() == [0, 0]
    loaded.counts[:], loaded.token_totals[:], loaded.doc_totals[:] = (
        source.counts,
        source.token_totals,
        source.doc_totals,
    )
    loaded.distinct = source.distinct
    probe = featurize(["x", "u", "w"], TINY.hash_bits)
    assert loaded.score(probe) == source.score(probe)


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_per_user_scoring_and_explain_use_the_switches_as_the_shared_model_does(switch):
    config = dataclasses.replace(TINY, **SWITCHES[switch])
    model, layers = (
        MultinomialNB(config),
        UserLayers(UsersConfig(token_moves=True)),
    )  # layers are built only where they score
    items = [(["cheap", "pills", "offer"], Label.SPAM, "alice"), (["meeting", "agenda", "lunch"], Label.HAM, "alice"),
             (["cheap", "offer", "casino"], Label.SPAM, None), (["agenda", "patch", "review"], Label.HAM, None),
             (["newsletter", "offer", "agenda"], Label.HAM, "alice")]  # fmt: skip
    for seq, (tokens, label, user) in enumerate(items):
        features = featurize(tokens, config.hash_bits)
        model.learn_one(features, label)
        if user:
            layers.apply(user, features, label, None, seq)
    probe = ["newsletter", "offer", "agenda", "cheap"]
    features = featurize(probe, config.hash_bits)
    # A user without a layer: the shared model's score, to the bit.
    assert score_for_user(model, *layers.for_scoring("bob", config), features) == model.score(features)
    assert layers.for_scoring("alice", config)[1] is not None  # her layer holds both classes: it scores
    scored = score_for_user(model, *layers.for_scoring("alice", config), features)
    explained, rows = explain_for_user(model, *layers.for_scoring("alice", config), probe, limit=100)
    assert explained == scored
    assert math.isclose(sum(r.weight for r in rows), scored.log_odds, rel_tol=1e-9)


def test_config_rejects_a_non_boolean_switch_and_the_switches_with_redis(tmp_path):
    path = tmp_path / "spamd.toml"
    path.write_text('[model]\nweight_normalization = "yes"\n')
    with pytest.raises(ConfigError, match="weight_normalization"):
        load_config(path)
    path.write_text('[model]\nclass_prior = true\n[redis]\nurl = "redis://127.0.0.1:6379/0"\n')
    with pytest.raises(ConfigError, match="class_prior are not available with \\[redis\\]"):
        load_config(path)
    path.write_text("[model]\nclass_prior = true\nweight_normalization = true\n")
    assert load_config(path).model == dataclasses.replace(Config().model, class_prior=True, weight_normalization=True)


def test_an_empty_or_one_sided_model_stays_undecided_with_the_switches_on():
    model = MultinomialNB(dataclasses.replace(TINY, weight_normalization=True, class_prior=True))
    features = featurize(["a"], TINY.hash_bits)
    assert model.score(features) == verdict_of(model.config, 0.0)
    train(model, [(["a"], Label.SPAM)])
    assert model.score(features) == verdict_of(model.config, 0.0)
