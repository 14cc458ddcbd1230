"""Word salad weighs little ([model] salad_tokens): a visible block of good words cannot buy spam the inbox,
and a person's unpunctuated note is still scored by its words."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig
from spamd.learning.classifier import Classifier
from spamd.mail.hidden import SALAD_WORDS, split_word_salad
from spamd.mail.message import parse_message
from spamd.mail.tokenize import salad_tokens, tokenize
from spamd.model.bayes import Label, MultinomialNB, Verdict, featurize
from spamd.model.families import salad_weights, with_families
from tests.daemon_helpers import HAM_WORDS as SHORT_HAM_WORDS
from tests.daemon_helpers import make_message

CAP = 3.0  # [model] salad_tokens as shipped

HAM_WORDS = SHORT_HAM_WORDS + [
    "thursday",
    "monday",
    "office",
    "slides",
    "quarter",
    "plan",
    "client",
    "invoice",
    "travel",
    "hotel",
    "flight",
    "call",
    "friday",
]
SPAM_WORDS = [
    "viagra",
    "casino",
    "winner",
    "prize",
    "claim",
    "cheap",
    "pills",
    "offer",
    "bitcoin",
    "lottery",
    "free",
    "money",
    "urgent",
    "bonus",
    "discount",
    "pharmacy",
    "replica",
    "watches",
    "deal",
    "limited",
    "exclusive",
    "guaranteed",
    "cash",
    "loan",
    "credit",
]


def ham(n: int, rng: random.Random) -> bytes:
    sentence = " ".join(rng.choice(HAM_WORDS) for _ in range(8))
    return (
        f"From: Anna Berg <anna@work.example>\nTo: bob@work.example\nSubject: {rng.choice(HAM_WORDS)} {n}\n"
        f"Message-ID: <ham-{n}@work.example>\n\nHi Bob,\n\n{sentence.capitalize()}. See you at {n % 12 + 1}.\n\nAnna\n"
    ).encode()


def spam(n: int, rng: random.Random, appended: str = "") -> bytes:
    sentence = " ".join(rng.choice(SPAM_WORDS) for _ in range(8))
    return (
        f"From: Deals <offers{n}@promo{n % 7}.example.biz>\nTo: bob@work.example\nSubject: {rng.choice(SPAM_WORDS)}!\n"
        f"Message-ID: <{n}.x{n * 7}@promo.example.biz>\n\n{sentence.upper()}!!! Visit http://promo{n % 7}.example.biz/"
        f"{n}\n{appended}"
    ).encode()


def trained(salad: float) -> Classifier:
    # The words alone: the evidence scored apart (its sender's claims) would catch the attack either way.
    config = Config(model=ModelConfig(hash_bits=18, salad_tokens=salad, evidence_weight=0.0))
    classifier = Classifier(config, MultinomialNB(config.model))
    rng = random.Random(7)
    for n in range(40):
        for raw, label in ((ham(n, rng), Label.HAM), (spam(n, rng), Label.SPAM)):
            classifier.model.learn_one(classifier.analyze(raw, authenticate=False).features, label)  # type: ignore[attr-defined]
    return classifier


def verdict(classifier: Classifier, raw: bytes) -> Verdict:
    return classifier.score(classifier.analyze(raw, authenticate=False)).verdict


def test_a_visible_block_of_ham_words_appended_to_spam_keeps_it_spam() -> None:
    rng = random.Random(1)
    block = " ".join(rng.choice(HAM_WORDS) for _ in range(150))
    attacked = spam(1000, random.Random(2), f"\n{block}\n")
    capped, uncapped = trained(CAP), trained(0.0)
    assert verdict(capped, spam(1000, random.Random(2))) == Verdict.SPAM
    assert verdict(uncapped, attacked) != Verdict.SPAM  # the attack works where every word counts
    assert verdict(capped, attacked) == Verdict.SPAM


def test_a_persons_unpunctuated_lower_case_note_stays_ham() -> None:
    rng = random.Random(3)
    note = " ".join(rng.choice(HAM_WORDS) for _ in range(45))
    raw = (
        "From: Anna Berg <anna@work.example>\nTo: bob@work.example\nSubject: lunch\n"
        f"Message-ID: <note@work.example>\n\nhi bob {note} see you anna\n"
    ).encode()
    classifier = trained(CAP)
    assert parse_message(raw, classifier.config.parser).salad  # it is word salad, and capped
    assert verdict(classifier, raw) == Verdict.HAM


def unpunctuated(label: Label, n: int) -> bytes:
    """The suite's test message as it was before its words were cut into sentences: 40 words of salad."""
    return make_message(label, n).replace(b". ", b" ").replace(b".\n", b"\n")


def test_the_suites_forty_word_messages_keep_their_verdicts() -> None:
    config = Config(model=ModelConfig(hash_bits=16, salad_tokens=CAP))
    classifier = Classifier(config, MultinomialNB(config.model))
    for n in range(20):
        for label in (Label.HAM, Label.SPAM):
            classifier.model.learn_one(classifier.analyze(unpunctuated(label, n)).features, label)  # type: ignore[attr-defined]
    assert parse_message(unpunctuated(Label.HAM, 99), config.parser).salad
    assert not parse_message(make_message(Label.HAM, 99), config.parser).salad
    assert verdict(classifier, unpunctuated(Label.HAM, 99)) == Verdict.HAM
    assert verdict(classifier, unpunctuated(Label.SPAM, 99)) == Verdict.SPAM


def test_the_salad_words_share_the_cap_and_the_rest_weigh_one() -> None:
    block = " ".join(f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(100))  # 100 distinct words
    raw = f"From: a@b.example\nSubject: Offer\n\nBuy cheap pills now! Visit the shop.\n\n{block}\n".encode()
    message = parse_message(raw, Config().parser)
    tokens = tokenize(message)
    assert tokens[-100:] == block.split() and salad_tokens(message) == block.split()
    config = ModelConfig(salad_tokens=10.0)
    weights = salad_weights(tokens, 100, config)
    assert weights is not None and list(weights[-100:]) == [0.1] * 100 and set(weights[:-100]) == {1.0}
    joined, joined_weights = with_families(tokens, message, config)
    features = featurize(joined, config.hash_bits, joined_weights)
    assert features.weights is not None
    assert np.isclose(features.weights.sum(), len(set(joined) - set(block.split())) + 10.0)  # evidence families too
    assert salad_weights(tokens, 100, dataclasses.replace(config, salad_tokens=0.0)) is None  # 0: every word weighs 1
    assert salad_weights(tokens, 100, dataclasses.replace(config, salad_tokens=100.0)) is None  # under the cap
    assert with_families(tokens, message, dataclasses.replace(config, salad_tokens=0.0))[1] is None


def test_a_run_of_salad_starts_and_ends_between_words() -> None:
    words = " ".join(["the", "budget", "meeting", "is", "on", "monday"] * 8)
    text, runs = split_word_salad(f"Hello {words} end2 ok")
    assert text == "Hello end2 ok" and [r.split() for r in runs] == [words.split()]
    assert split_word_salad("Hello, " + " ".join(["word"] * (SALAD_WORDS - 1))) == (
        "Hello, " + " ".join(["word"] * (SALAD_WORDS - 1)),
        [],
    )


_PIECES = st.sampled_from(["ab", "cd", "efg", "z", "Ab", "x.y", "a2", "é", "b,", "", "\u00a0"])
_TEXTS = st.lists(st.tuples(_PIECES, st.sampled_from([" ", "\n", "\t", "  ", ""])), max_size=300).map(
    lambda pairs: "".join(piece + gap for piece, gap in pairs)
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_TEXTS, st.text(max_size=400)))
def test_salad_and_the_rest_hold_every_word_of_any_text(text: str) -> None:
    rest, runs = split_word_salad(text)
    assert sorted(text.split()) == sorted(rest.split() + [w for run in runs for w in run.split()])
    for run in runs:
        assert len(run.split()) >= SALAD_WORDS and set(run) <= set("abcdefghijklmnopqrstuvwxyz \n\t")
