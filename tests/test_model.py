"""The hashed multinomial naive Bayes: exact learn/unlearn, invariants, scores, verdicts, explain."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import ModelConfig
from spamd.model.bayes import Label, MultinomialNB, Verdict, featurize, spam_probability, token_id

# 2**10 buckets: small enough that random vocabularies collide, which is the hard case.
TINY = ModelConfig(hash_bits=10)

words = st.text(alphabet="abcdefghij€é", min_size=1, max_size=4)
messages = st.lists(words, min_size=0, max_size=30)
labelled = st.tuples(messages, st.sampled_from(list(Label)))


def copy_state(model: MultinomialNB) -> MultinomialNB:
    clone = MultinomialNB(model.config)
    clone.counts[:] = model.counts
    clone.token_totals[:] = model.token_totals
    clone.doc_totals[:] = model.doc_totals
    clone.distinct = model.distinct
    return clone


def check_invariants(model: MultinomialNB) -> None:
    """Totals and `distinct` agree with the arrays they summarize."""
    assert model.distinct == int(np.count_nonzero(model.counts[0] | model.counts[1]))
    assert list(model.token_totals) == [int(model.counts[0].sum()), int(model.counts[1].sum())]
    assert model.doc_totals.min() >= 0


def train(model: MultinomialNB, items: list[tuple[list[str], Label]]) -> None:
    for tokens, label in items:
        model.learn_one(featurize(tokens, model.config.hash_bits), label)


# ---------------------------------------------------------------- learn / unlearn


@settings(max_examples=150, deadline=None)
@given(base=st.lists(labelled, max_size=10), extra=st.lists(labelled, min_size=1, max_size=10), data=st.data())
def test_learn_then_unlearn_restores_identical_state(base, extra, data):
    model = MultinomialNB(TINY)
    train(model, base)
    before = copy_state(model)
    train(model, extra)
    check_invariants(model)
    # Unlearn in any order: counts are integers, so the result is exact.
    for tokens, label in data.draw(st.permutations(extra)):
        assert model.unlearn_one(featurize(tokens, TINY.hash_bits), label)  # truthy: it returns np.True_, not True
        check_invariants(model)
    assert model.state_equals(before)
    assert np.array_equal(model.counts, before.counts)
    assert model.distinct == before.distinct


@settings(max_examples=80, deadline=None)
@given(items=st.lists(labelled, max_size=12), data=st.data())
def test_learning_order_does_not_matter(items, data):
    a, b = MultinomialNB(TINY), MultinomialNB(TINY)
    train(a, items)
    train(b, data.draw(st.permutations(items)))
    assert a.state_equals(b)


def test_unlearn_of_what_was_never_learned_clamps_and_says_so():
    model = MultinomialNB(TINY)
    train(model, [(["a", "b"], Label.HAM)])
    assert not model.unlearn_one(featurize(["a", "a", "zzz"], 10), Label.HAM)
    assert not model.unlearn_one(featurize(["a"], 10), Label.SPAM)
    check_invariants(model)
    assert model.counts.max() <= stored(1)  # clamped at zero, no uint32 wrap-around
    assert list(model.doc_totals) == [0, 0]


def stored(tf: int) -> int:
    return int(MultinomialNB.stored_counts(np.array([tf], dtype=np.uint32))[0])


def test_stored_counts_are_positive_integers_and_monotone():
    tf = np.arange(1, 5000, dtype=np.uint32)
    values = MultinomialNB.stored_counts(tf)
    assert values.dtype == np.uint32 and values.min() >= 1
    assert np.all(np.diff(values.astype(np.int64)) >= 0)


def test_counts_and_totals_after_learning():
    model = MultinomialNB(ModelConfig(hash_bits=16))
    model.learn_one(featurize(["cheap", "cheap", "pills"], 16), Label.SPAM)
    model.learn_one(featurize(["meeting", "cheap"], 16), Label.HAM)
    mask = model.n_buckets - 1
    # The arrays hold what stored_counts makes of each message's term frequencies.
    assert model.counts[Label.SPAM, token_id("cheap", mask)] == stored(2)
    assert model.counts[Label.HAM, token_id("cheap", mask)] == stored(1)
    assert list(model.token_totals) == [2 * stored(1), stored(2) + stored(1)]
    assert list(model.doc_totals) == [1, 1]
    assert model.distinct == 3
    assert model.memory_bytes == 2 * (1 << 16) * 4 + 2 * 8 + 2 * 8


# ---------------------------------------------------------------- featurize


@settings(max_examples=100, deadline=None)
@given(tokens=messages)
def test_featurize_merges_repeats_and_collisions(tokens):
    f = featurize(tokens, 10)
    assert f.ids.dtype == np.uint32 and f.counts.dtype == np.uint32
    assert np.all(np.diff(f.ids.astype(np.int64)) > 0)  # sorted, unique
    assert int(f.counts.sum()) == len(tokens)
    expected = Counter(token_id(t, (1 << 10) - 1) for t in tokens)
    assert dict(zip(f.ids.tolist(), f.counts.tolist(), strict=True)) == expected


def test_featurize_is_stable_across_processes():
    # xxh3 with seed 0: a snapshot from one process must mean the same in another.
    # (the value xxh3_64(b"subject:free") has on every machine; Python's hash() would not do)
    assert token_id("subject:free", (1 << 22) - 1) == 0x2E4827EEDBC6E6C6 & ((1 << 22) - 1)
    assert featurize(["x", "y"], 22).ids.tolist() == featurize(["y", "x"], 22).ids.tolist()


def test_featurize_lone_surrogate():
    f = featurize(["\udc80abc", "abc"], 12)
    assert int(f.counts.sum()) == 2


# ---------------------------------------------------------------- scores and verdicts


SPAMMY = ["cheap", "pills", "viagra", "offer", "click"]
HAMMY = ["meeting", "agenda", "minutes", "project", "lunch"]


SMALL_MODEL = ModelConfig(hash_bits=16)


def trained_model(config: ModelConfig = SMALL_MODEL) -> MultinomialNB:
    model = MultinomialNB(config)
    for i in range(5):
        model.learn_one(featurize(SPAMMY + [f"s{i}"], config.hash_bits), Label.SPAM)
        model.learn_one(featurize(HAMMY + [f"h{i}"], config.hash_bits), Label.HAM)
    return model


def test_empty_or_one_sided_model_is_undecided():
    model = MultinomialNB(TINY)
    score = model.score(featurize(SPAMMY, 10))
    assert (score.log_odds, score.probability, score.verdict) == (0.0, 0.5, Verdict.UNSURE)
    model.learn_one(featurize(SPAMMY, 10), Label.SPAM)
    assert model.score(featurize(SPAMMY, 10)).probability == 0.5
    assert trained_model().score(featurize([], 16)).verdict == Verdict.UNSURE


def test_spammy_and_hammy_messages():
    model = trained_model()
    spam = model.score(featurize(["cheap", "pills", "click"], 16))
    ham = model.score(featurize(["meeting", "agenda"], 16))
    assert spam.verdict == Verdict.SPAM and spam.log_odds > 0 and spam.probability > 0.9
    assert ham.verdict == Verdict.HAM and ham.log_odds < 0 and ham.probability < 0.1
    assert model.score(featurize(["never", "seen"], 16)).probability == pytest.approx(0.5)


def test_verdict_thresholds_are_inclusive_for_spam_exclusive_for_ham():
    model = trained_model()
    features = featurize(["cheap", "meeting", "agenda", "pills", "unknown"], 16)
    p = model.score(features).probability
    assert 0.0 < p < 1.0

    def verdict(ham: float, spam: float) -> Verdict:
        model.config = dataclasses.replace(model.config, ham_threshold=ham, spam_threshold=spam)
        return model.score(features).verdict

    assert verdict(0.0, p) == Verdict.SPAM  # at the spam threshold: spam
    assert verdict(0.0, math.nextafter(p, 1.0)) == Verdict.UNSURE
    assert verdict(p, 1.0) == Verdict.UNSURE  # at the ham threshold: not ham
    assert verdict(math.nextafter(p, 1.0), 1.0) == Verdict.HAM


def test_spam_probability_is_a_monotone_logistic():
    assert spam_probability(0.0) == 0.5
    assert spam_probability(1e9) == 1.0 and spam_probability(-1e9) == pytest.approx(0.0, abs=1e-20)
    values = [spam_probability(x / 10) for x in range(-50, 51)]
    assert values == sorted(values)
    assert spam_probability(0.3) == pytest.approx(1 - spam_probability(-0.3))


def test_repetition_counts_sublinearly_in_training_and_not_in_scoring():
    model = trained_model()
    once = model.score(featurize(["cheap", "meeting"], 16)).log_odds
    many = model.score(featurize(["cheap"] * 100 + ["meeting"], 16)).log_odds
    assert many == once  # a scored message's distinct tokens weigh the same
    cheap = int(featurize(["cheap"], 16).ids[0])
    before = int(model.counts[Label.SPAM, cheap])
    model.learn_one(featurize(["cheap"] * 100, 16), Label.SPAM)
    assert int(model.counts[Label.SPAM, cheap]) - before == round(4 * math.log(101))  # 18, not 100


# ---------------------------------------------------------------- explain


def test_explain_shares_sum_to_the_score_and_are_sorted():
    model = trained_model(ModelConfig(hash_bits=20))
    tokens = ["cheap", "cheap", "pills", "meeting", "unknown"]
    score, rows = model.explain(tokens, limit=10)
    assert score == model.score(featurize(tokens, 20))
    assert sum(r.weight for r in rows) == pytest.approx(score.log_odds)
    assert [abs(r.weight) for r in rows] == sorted((abs(r.weight) for r in rows), reverse=True)
    assert {r.token: r.count for r in rows} == {"cheap": 2, "pills": 1, "meeting": 1, "unknown": 1}
    assert rows[0].token in ("cheap", "pills") and rows[0].weight > 0
    assert len(model.explain(tokens, limit=2)[1]) == 2


def test_explain_on_an_empty_model():
    score, rows = MultinomialNB(TINY).explain(["a", "b"])
    assert score.verdict == Verdict.UNSURE and rows == []


def colliding_pair(bits: int) -> tuple[str, str]:
    seen: dict[int, str] = {}
    mask = (1 << bits) - 1
    for i in range(10_000):
        token = f"t{i}"
        bucket = token_id(token, mask)
        if bucket in seen:
            return seen[bucket], token
        seen[bucket] = token
    raise AssertionError("no collision found")


def test_explain_shares_sum_to_the_score_with_collisions():
    model = trained_model(TINY)
    a, b = colliding_pair(10)
    model.learn_one(featurize([a, "cheap"], 10), Label.SPAM)
    score, rows = model.explain([a, b, "meeting"], limit=10)
    assert sum(r.weight for r in rows) == pytest.approx(score.log_odds)


# ---------------------------------------------------------------- thin evidence


@settings(max_examples=100, deadline=None)
@given(items=st.lists(labelled, min_size=1, max_size=12))
def test_a_never_seen_token_is_neutral_whatever_the_class_totals(items):
    # Before, an unseen token scored log(N_ham / N_spam) of the class totals: novel
    # mail drifted to whichever class had fewer tokens.
    model = MultinomialNB(ModelConfig(hash_bits=16))
    train(model, items + [(["a"] * 5, Label.HAM), (["b"] * 50, Label.SPAM)])
    unseen = featurize(["zz-never-seen-token"], 16)
    assert model._token_log_odds(unseen.ids)[0] == 0.0
    assert model.score(unseen).log_odds == 0.0


def test_a_token_seen_once_weighs_less_than_one_seen_often():
    model = MultinomialNB(ModelConfig(hash_bits=16))
    train(model, [(["common", f"ham{i}"], Label.HAM) for i in range(20)])
    train(model, [(["rare"], Label.SPAM)] + [(["often", f"spam{i}"], Label.SPAM) for i in range(20)])
    rare, often = (featurize([t], 16).ids for t in ("rare", "often"))
    assert 0 < model._token_log_odds(rare)[0] < model._token_log_odds(often)[0]
    # Without the shrinkage one sighting counted two thirds as much as twenty; with it, a third.
    bare = copy_state(model)
    bare.config = dataclasses.replace(model.config, evidence_prior=0.0)
    shrunk_ratio = model._token_log_odds(rare)[0] / model._token_log_odds(often)[0]
    bare_ratio = bare._token_log_odds(rare)[0] / bare._token_log_odds(often)[0]
    assert shrunk_ratio < 0.4 < 0.6 < bare_ratio


def test_decisive_tokens_keep_a_block_of_unknown_words_from_diluting_the_score():
    spam = ["cheap", "pills", "click"]
    block = spam + [f"ordinary{n}" for n in range(60)]  # words the model never saw: log-odds 0
    every = trained_model()
    decisive = MultinomialNB(dataclasses.replace(every.config, decisive_tokens=3))
    for name in ("counts", "token_totals", "doc_totals"):
        getattr(decisive, name)[:] = getattr(every, name)
    decisive.distinct = every.distinct
    assert every.score(featurize(block, 16)).verdict == Verdict.UNSURE
    assert decisive.score(featurize(block, 16)) == every.score(featurize(spam, 16))
    # A message of no more tokens than that scores as before.
    assert decisive.score(featurize(spam, 16)) == every.score(featurize(spam, 16))
    score, rows = decisive.explain(block, limit=100)
    assert score == decisive.score(featurize(block, 16))
    assert sum(r.weight for r in rows) == pytest.approx(score.log_odds)
    assert {r.token for r in rows if r.weight} == set(spam)


def test_a_message_scored_again_is_scored_by_the_counts_and_config_of_now():
    # score() answers the same Features again from its last score only while nothing changed.
    config = ModelConfig(hash_bits=12)
    model = MultinomialNB(config)
    model.learn_one(featurize(["cheap", "pills"], 12), Label.SPAM)
    model.learn_one(featurize(["meeting", "notes"], 12), Label.HAM)
    message = featurize(["cheap", "pills", "offer"], 12)
    first = model.score(message)
    assert model.score(message) is first
    model.learn_one(featurize(["cheap", "offer"], 12), Label.SPAM)
    learned = model.score(message)
    assert learned.log_odds > first.log_odds
    model.unlearn_one(featurize(["cheap", "offer"], 12), Label.SPAM)
    assert model.score(message) == first
    fresh = MultinomialNB(config)
    fresh.learn_one(featurize(["cheap", "pills"], 12), Label.HAM)
    fresh.learn_one(featurize(["meeting", "notes"], 12), Label.SPAM)
    model.counts[:] = fresh.counts  # overwritten in place, as an import does
    model.forget_log_masses()
    assert model.score(message) == fresh.score(message) != first
    assert fresh.score(message).verdict != Verdict.SPAM
    model.config = dataclasses.replace(config, spam_threshold=0.01, ham_threshold=0.01)  # a reload
    assert model.score(message).verdict == Verdict.SPAM
