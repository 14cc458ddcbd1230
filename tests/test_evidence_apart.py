"""The structural evidence scored apart from the words ([model] evidence_weight): undiluted, claims spam-ward only."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig
from spamd.learning.classifier import Classifier
from spamd.model.bayes import (
    Label,
    MultinomialNB,
    combined_log_odds,
    denominator,
    featurize,
    mean_log_odds,
    score_counts,
    split_evidence,
    token_id,
    token_log_odds,
    verdict_of,
)
from spamd.model.families import BODY, CLAIM, EVIDENCE, evidence_kind, kinds_of
from tests.cli_helpers import run_spamctl, train_examples

BITS = 16
APART = ModelConfig(hash_bits=BITS, evidence_weight=1.0, evidence_neutral=2.0)


def trained(config: ModelConfig, examples: Sequence[tuple[list[str], np.ndarray | None, Label]]) -> MultinomialNB:
    model = MultinomialNB(config)
    for tokens, kinds, label in examples:
        model.learn_one(featurize(tokens, BITS, None, kinds), label)
    return model


def body(n: int, word: str) -> list[str]:
    return [f"{word}{i}" for i in range(n)]


def test_kinds_name_claims_and_what_was_verified():
    assert evidence_kind("from-org:paypal.com") == CLAIM
    assert evidence_kind("link-org:example.net") == CLAIM
    assert evidence_kind("from-name-not-in-domain:paypal") == EVIDENCE
    assert evidence_kind("bulk:one-click") == EVIDENCE
    assert kinds_of(2, ["from-org:x.com", "bulk:esp"], 1).tolist() == [BODY, BODY, CLAIM, EVIDENCE, BODY]


def test_a_page_of_words_no_longer_averages_the_sender_away():
    # The sender's evidence is decisive in training; the words are shared by both classes.
    shared_words = body(300, "w")
    spam_sender, ham_sender = ["from-name-not-in-domain:bank"], ["auth:aligned:bank.example"]
    examples = []
    for _ in range(20):
        examples.append((shared_words + spam_sender, kinds_of(300, spam_sender), Label.SPAM))
        examples.append((shared_words + ham_sender, kinds_of(300, ham_sender), Label.HAM))
    mixed = ModelConfig(hash_bits=BITS)
    phish = shared_words + spam_sender
    among_words = trained(mixed, examples).score(featurize(phish, BITS))
    apart = trained(APART, examples).score(featurize(phish, BITS, None, kinds_of(300, spam_sender)))
    assert among_words.verdict.value == "unsure"  # one token among 300 words
    assert apart.verdict.value == "spam"  # its own term: the words cannot dilute it
    assert apart.log_odds > 5 * among_words.log_odds


def test_a_claim_never_earns_ham_ward_weight():
    # from-org:shop.example was only ever in ham: a forger writing it gains nothing from it.
    words = body(10, "w")
    claim = ["from-org:shop.example"]
    examples = [(words + claim, kinds_of(10, claim), Label.HAM)] * 10 + [(body(10, "s"), None, Label.SPAM)] * 10
    model = trained(APART, examples)
    forged = featurize(body(10, "s") + claim, BITS, None, kinds_of(10, claim))
    without = featurize(body(10, "s") + claim, BITS, None, kinds_of(11, []))  # the claim as a word
    plain = dataclasses.replace(forged, kinds=np.zeros(len(forged), dtype=np.int8))
    assert model.score(forged).log_odds >= model.score(featurize(body(10, "s"), BITS)).log_odds * 10 / 11 - 1e-9
    assert model.score(forged).log_odds > model.score(without).log_odds  # as a word it pulled toward ham
    assert model.score(plain).log_odds == model.score(without).log_odds


def test_off_scores_to_the_bit_as_before():
    examples = [(body(5, "a") + ["bulk:esp"], None, Label.SPAM), (body(5, "b") + ["bulk:esp"], None, Label.HAM)]
    off = ModelConfig(hash_bits=BITS, evidence_weight=0.0)
    model = trained(off, examples)
    tokens = body(5, "a") + ["bulk:esp"]
    kinds = kinds_of(5, ["bulk:esp"])
    assert model.score(featurize(tokens, BITS, None, kinds)) == model.score(featurize(tokens, BITS))


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcdefg", min_size=1, max_size=3), max_size=25),
    evidence=st.lists(st.sampled_from(["from-org:a.b", "bulk:esp", "link:ip-host", "auth:dkim:pass", "link-org:c.d"])),
    history=st.lists(st.tuples(st.lists(st.sampled_from("abcdefg"), max_size=6), st.booleans()), max_size=12),
    weight=st.sampled_from([0.5, 1.0, 3.0]),
)
def test_explain_rows_sum_to_the_score_and_kinds_keep_the_features(words, evidence, history, weight):
    config = ModelConfig(hash_bits=10, evidence_weight=weight)
    model = MultinomialNB(config)
    for letters, spam in history:
        tokens = [*letters, *evidence[: len(letters)]]
        model.learn_one(featurize(tokens, 10, None, kinds_of(len(letters), evidence[: len(letters)])), Label(spam))
    model.learn_one(featurize(["h"], 10), Label.HAM)
    model.learn_one(featurize(["s"], 10), Label.SPAM)
    tokens, kinds = words + evidence, kinds_of(len(words), evidence)
    with_kinds, plain = featurize(tokens, 10, None, kinds), featurize(tokens, 10)
    assert with_kinds.ids.tolist() == plain.ids.tolist() and with_kinds.counts.tolist() == plain.counts.tolist()
    score, rows = model.explain(tokens, limit=10_000, kinds=kinds)
    assert score == model.score(with_kinds)
    assert math.isclose(sum(r.weight for r in rows), score.log_odds, rel_tol=1e-9, abs_tol=1e-9)


def test_the_classifier_marks_the_evidence_families_and_the_outcomes():
    config = Config()
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, hash_bits=BITS, evidence_weight=1.0, auth_outcomes=True),
        auth=dataclasses.replace(config.auth, enabled=False),
    )
    raw = (
        b"From: PayPal Service <alert@secure-paypa1.example>\r\nTo: you@example.org\r\n"
        b"Subject: account on hold\r\n\r\nlog in at https://secure-paypa1.example/login now\r\n"
    )
    tokens, _, kinds = Classifier(config, MultinomialNB(config.model)).weighed_tokens(raw)
    assert kinds is not None and len(kinds) == len(tokens)
    by_token = dict(zip(tokens, kinds.tolist(), strict=True))
    assert by_token["from-org:secure-paypa1.example"] == CLAIM
    assert by_token["from-name-not-in-domain:paypal"] == EVIDENCE
    assert by_token["auth:dkim:none"] == EVIDENCE
    assert by_token["subject:account"] == BODY


def test_spamctl_explain_shows_the_evidence_apart_with_its_kind(tmp_path):
    data, config = tmp_path / "data", tmp_path / "spamd.toml"
    config.write_text(
        "[model]\nhash_bits = 16\nevidence_weight = 1.0\nlink_targets = true\nbulk_marks = true\n[auth]\nenabled = false\n"
    )
    train_examples(tmp_path, config, data)
    probe = b"From: Lottery Office <winner@lottery.example>\nSubject: prize\n\nclaim at https://bit.ly/x\n"
    args = ("--config", config, "--data-dir", data, "explain", "-", "--limit", "1000")
    done = run_spamctl(*args, "--json", input=probe)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = {r["token"]: r for side in ("toward_spam", "toward_ham") for r in result[side]}
    assert rows["from-org:lottery.example"]["kind"] == "claim"
    kinds = {r["kind"] for r in rows.values()}
    assert kinds == {"word", "evidence", "claim"}, rows
    assert all(
        r["kind"] == "word" for token, r in rows.items() if not token.startswith(("from-", "link", "reply-", "bulk:"))
    )
    assert math.isclose(sum(r["weight"] for r in rows.values()), result["score"], abs_tol=1e-6)
    text = run_spamctl(*args, input=probe)
    assert text.returncode == 0 and "kind" in text.stdout and "claim" in text.stdout


def test_a_mark_every_message_carries_says_nothing_however_long_each_class_is():
    # Every message has "return-path:same-org"; spam is a third as long as ham (2007's mail).
    # Per token the mark leaned spam-ward (spam's tokens are fewer); per message it is 0.
    mark = ["return-path:same-org"]
    examples = []
    for i in range(30):
        examples.append((body(10, f"s{i}-") + mark, kinds_of(10, mark), Label.SPAM))
        examples.append((body(30, f"h{i}-") + mark, kinds_of(30, mark), Label.HAM))
    model = trained(APART, examples)
    message = featurize(body(5, "new") + mark, BITS, None, kinds_of(5, mark))
    assert abs(model.score(message).log_odds) < 1e-9  # unseen words and the mark: nothing either way
    per_token = trained(dataclasses.replace(APART, evidence_weight=0.0), examples)
    leaned = per_token.explain(body(5, "new") + mark)[1]
    assert [row.weight > 0.01 for row in leaned if row.token == mark[0]] == [True]  # what it was among the words


def test_evidence_is_rated_per_message_alike_embedded_and_fetched():
    # The same counts scored by the pure function (as the Redis store does) and by the model.
    from spamd.model.bayes import score_counts

    mark, sender = ["bulk:esp"], ["auth:aligned:shop.example"]
    examples = [(body(8, f"s{i}") + mark, kinds_of(8, mark), Label.SPAM) for i in range(6)]
    examples += [(body(20, f"h{i}") + mark + sender, kinds_of(20, mark + sender), Label.HAM) for i in range(6)]
    config = dataclasses.replace(APART, evidence_apart_prior=3.0)  # six messages speak at once
    model = trained(config, examples)
    message = featurize(body(3, "s1") + mark + sender, BITS, None, kinds_of(3, mark + sender))
    fetched = score_counts(
        config, model.counts.take(message.ids, axis=1), model.token_totals, model.distinct, None,
        model.doc_totals, None, message.kinds,
    )  # fmt: skip
    assert fetched == model.score(message)
    assert model.score(message).log_odds < 0  # the aligned sender, only ever ham, outweighs three spam words


def test_a_sender_seen_in_a_few_messages_cannot_decide_alone():
    # One spam from a sender, a few words both classes share: with the default evidence_apart_prior
    # the sender's evidence stays small; at the words' own prior (3, one message) it filed spam.
    sender = ["from-name-not-in-domain:bank"]
    examples = [(body(20, "w") + sender, kinds_of(20, sender), Label.SPAM), (body(20, "w"), None, Label.HAM)]
    message = featurize(body(20, "w") + sender, BITS, None, kinds_of(20, sender))
    at_three = trained(dataclasses.replace(APART, evidence_apart_prior=3.0), examples).score(message)
    shipped = trained(APART, examples).score(message)
    assert at_three.verdict.value == "spam"
    assert shipped.verdict.value == "unsure"
    assert 0 < shipped.log_odds < at_three.log_odds / 5


@given(
    values=st.lists(
        st.tuples(st.floats(-8, 8, allow_nan=False), st.sampled_from([BODY, EVIDENCE, CLAIM]), st.floats(0.05, 2.0)),
        min_size=1,
        max_size=40,
    ),
    weighted=st.booleans(),
)
def test_the_score_s_two_means_are_the_words_and_the_evidence_taken_apart(values, weighted):
    # combined_log_odds sums every bucket and takes the evidence away (few numpy calls); split_evidence
    # takes the buckets apart first: the same score.
    config = ModelConfig(evidence_weight=0.25)
    log_odds = np.array([v for v, _, _ in values])
    kinds = np.array([k for _, k, _ in values], dtype=np.int8)
    weights = np.array([w for _, _, w in values]) if weighted else None
    words, word_weights, evidence = split_evidence(config, log_odds, weights, kinds)
    expected = mean_log_odds(config, float(words.sum()), denominator(config, len(words), word_weights)) + evidence
    assert math.isclose(combined_log_odds(config, log_odds, weights, kinds), expected, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    buckets=st.lists(
        st.tuples(
            st.integers(0, 40), st.integers(0, 40), st.sampled_from([BODY, BODY, EVIDENCE, CLAIM]), st.floats(0.05, 2.0)
        ),
        min_size=1,
        max_size=40,
    ),
    weighted=st.booleans(),
    priors=st.sampled_from([(0.0, 30.0), (1.0, 30.0), (1.0, 1.0), (3.0, 0.0)]),
    totals=st.tuples(st.integers(1, 5_000), st.integers(1, 5_000), st.integers(1, 300), st.integers(1, 300)),
)
def test_the_score_s_quick_evidence_path_is_the_general_one(buckets, weighted, priors, totals):
    # score_counts takes every bucket as a word, then the few evidence buckets out in Python floats;
    # token_log_odds with the kinds, then combined_log_odds, estimate them in place: the same score.
    config = ModelConfig(evidence_weight=0.25, evidence_prior=priors[0], evidence_apart_prior=priors[1])
    counts = np.array([[h for h, _, _, _ in buckets], [s for _, s, _, _ in buckets]], dtype=np.uint32)
    kinds = np.array([k for _, _, k, _ in buckets], dtype=np.int8)
    weights = np.array([w for _, _, _, w in buckets]) if weighted else None
    token_totals = np.array([totals[0] + int(counts[0].sum()), totals[1] + int(counts[1].sum())], dtype=np.int64)
    doc_totals = np.array(totals[2:], dtype=np.int64)
    distinct = len(buckets) + 100
    log_odds = token_log_odds(config, counts, token_totals, distinct, None, kinds, doc_totals)
    if weights is not None:
        log_odds = log_odds * weights
    expected = verdict_of(config, combined_log_odds(config, log_odds, weights, kinds, doc_totals))
    quick = score_counts(config, counts, token_totals, distinct, weights, doc_totals, None, kinds)
    assert math.isclose(quick.log_odds, expected.log_odds, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(
        st.tuples(st.text(alphabet="abcdef", min_size=1, max_size=3), st.sampled_from([BODY, BODY, EVIDENCE, CLAIM])),
        max_size=60,
    ),
    weighted=st.booleans(),
)
def test_a_bucket_is_of_the_highest_kind_among_its_tokens(tokens, weighted):
    # featurize hashes each token once and takes the evidence's ids before sorting; counted here token by token.
    bits = 6  # few buckets: tokens collide
    words = [t for t, _ in tokens]
    kinds = np.array([k for _, k in tokens], dtype=np.int8)
    weights = np.linspace(0.5, 1.5, len(words)) if weighted else None
    features = featurize(words, bits, weights, kinds)
    expected: dict[int, int] = {}
    for word, kind in tokens:
        bucket = token_id(word, (1 << bits) - 1)
        expected[bucket] = max(expected.get(bucket, BODY), kind)
    assert features.kinds is not None
    assert dict(zip(features.ids.tolist(), features.kinds.tolist(), strict=True)) == expected
    assert features.ids.tolist() == featurize(words, bits, weights).ids.tolist()
