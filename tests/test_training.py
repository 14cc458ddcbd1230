"""The trainer and its ledger: learn, repeats, corrections, untrain, autolearn, the message key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.engine.trainer import Trainer
from spamd.learning.classifier import Classifier
from spamd.learning.outcomes import Outcome
from spamd.mail.message import message_key, strip_own_headers, with_own_headers
from spamd.model.bayes import Label, MultinomialNB
from spamd.store import Ledger
from tests import core_helpers as h
from tests.redis_helpers import with_redis

CONFIG = Config(model=ModelConfig(hash_bits=12))
CLASSIFIER = Classifier(CONFIG, MultinomialNB(CONFIG.model))
MESSAGES = [
    h.numbered_message(i, words) for i, words in enumerate(["cheap pills", "meeting", "offer", "lunch", "", "click"])
]
ANALYZED = [CLASSIFIER.analyze(raw) for raw in MESSAGES]
ANALYZED_HTML = CLASSIFIER.analyze(h.HTML)


def memory_trainer() -> Trainer:
    return Trainer(MultinomialNB(CONFIG.model), Ledger(1000), store=None)


@pytest.fixture(params=["local", "redis", "redis-cluster"])
def new_trainer(request):
    """A factory of empty trainers over each store: in-memory (the embedded one), a real Redis and a Redis Cluster.

    The same semantics tests run against both: learned once, corrections, untrain, autolearn vs a person.
    """
    if request.param == "local":
        yield memory_trainer
        return
    from spamd.store.redis import RedisModel, RedisState, RedisTrainer

    url = request.getfixturevalue("redis_plain_url" if request.param == "redis" else "redis_cluster_url")
    config = with_redis(CONFIG, url)
    states = []

    def make():
        state = RedisState(config)
        states.append(state)
        state.client.flushdb()
        return RedisTrainer(state, RedisModel(state, config.model))

    yield make
    for state in states:
        state.close()


def direct(final: dict[int, Label]) -> MultinomialNB:
    """A model trained straight with the final labels, no history."""
    model = MultinomialNB(CONFIG.model)
    for index, label in sorted(final.items()):
        model.learn_one(ANALYZED[index].features, label)
    return model


def test_learn_then_repeat_changes_nothing(new_trainer):
    trainer = new_trainer()
    assert trainer.train(ANALYZED[0], Label.SPAM, "move") == Outcome.LEARNED
    state = direct({0: Label.SPAM})
    assert trainer.model.state_equals(state) and trainer.seq == 1
    assert trainer.train(ANALYZED[0], Label.SPAM, "move") == Outcome.REPEAT
    assert trainer.model.state_equals(state) and trainer.seq == 1
    assert trainer.label_of(ANALYZED[0].key) == Label.SPAM
    assert trainer.events == {("move", "learned"): 1, ("move", "skipped_repeat"): 1}


def test_correction_moves_the_counts_exactly(new_trainer):
    trainer = new_trainer()
    trainer.train(ANALYZED[0], Label.SPAM, "move")
    trainer.train(ANALYZED[1], Label.HAM, "move")
    assert trainer.train(ANALYZED[0], Label.HAM, "move") == Outcome.CORRECTED
    assert trainer.model.state_equals(direct({0: Label.HAM, 1: Label.HAM}))
    assert list(trainer.model.doc_totals) == [2, 0]
    assert trainer.ledger.counts() == {"ham": 2, "spam": 0}


def test_correction_of_a_message_whose_tokens_all_stay_in_the_model(new_trainer):
    """Unlearning frees no bucket (another message holds them all): the distinct count moves by 0."""
    from spamd.learning.classifier import Analyzed

    first, twin = (Analyzed(bytes([i]) * 16, ANALYZED[0].features) for i in (1, 2))
    trainer = new_trainer()
    trainer.train(first, Label.SPAM, "move")
    trainer.train(twin, Label.SPAM, "move")
    assert trainer.train(first, Label.HAM, "move") == Outcome.CORRECTED
    assert trainer.untrain(twin, "move") == Outcome.UNLEARNED
    assert trainer.model.state_equals(direct({0: Label.HAM}))


def test_untrain(new_trainer):
    trainer = new_trainer()
    trainer.train(ANALYZED[0], Label.SPAM, "cli")
    trainer.train(ANALYZED[1], Label.HAM, "cli")
    assert trainer.untrain(ANALYZED[0], "cli") == Outcome.UNLEARNED
    assert trainer.model.state_equals(direct({1: Label.HAM}))
    assert trainer.label_of(ANALYZED[0].key) is None
    assert trainer.untrain(ANALYZED[0], "cli") == Outcome.NOT_TRAINED
    assert trainer.model.state_equals(direct({1: Label.HAM})) and trainer.seq == 3


def test_autolearn_never_overrides_a_person(new_trainer):
    trainer = new_trainer()
    # A person's decision stands against autolearn...
    trainer.train(ANALYZED[0], Label.HAM, "move", user=True)
    assert trainer.train(ANALYZED[0], Label.SPAM, "autolearn", user=False) == Outcome.DECLINED
    assert trainer.train(ANALYZED[0], Label.HAM, "autolearn", user=False) == Outcome.REPEAT
    assert trainer.ledger.get(ANALYZED[0].key) == (Label.HAM, True)
    # ...autolearn can be corrected by autolearn and by a person...
    trainer.train(ANALYZED[1], Label.SPAM, "autolearn", user=False)
    assert trainer.train(ANALYZED[1], Label.HAM, "autolearn", user=False) == Outcome.CORRECTED
    assert trainer.train(ANALYZED[1], Label.SPAM, "move", user=True) == Outcome.CORRECTED
    assert trainer.ledger.get(ANALYZED[1].key) == (Label.SPAM, True)
    # ...and a person confirming autolearn's label makes it a person's decision.
    trainer.train(ANALYZED[2], Label.SPAM, "autolearn", user=False)
    assert trainer.train(ANALYZED[2], Label.SPAM, "move", user=True) == Outcome.REPEAT
    assert trainer.train(ANALYZED[2], Label.HAM, "autolearn", user=False) == Outcome.DECLINED
    assert trainer.model.state_equals(direct({0: Label.HAM, 1: Label.SPAM, 2: Label.SPAM}))


def test_the_user_flag_and_labels_survive_a_restart(tmp_path):
    config = h.small_config(tmp_path)
    engine = Engine.open(config)
    engine.train(MESSAGES[0], Label.SPAM, "autolearn", user=False)
    engine.train(MESSAGES[0], Label.SPAM, "move", user=True)  # only the flag changes
    engine.train(MESSAGES[1], Label.HAM, "move")
    model = h.local_model(engine)
    engine.close()
    engine = Engine.open(config)  # replays the journal, flag-only record included
    try:
        assert engine.model.state_equals(model)
        assert engine.train(MESSAGES[0], Label.HAM, "autolearn", user=False) == Outcome.DECLINED
        assert engine.train(MESSAGES[1], Label.HAM, "move") == Outcome.REPEAT
        engine.snapshot()
    finally:
        engine.close()
    engine = Engine.open(config)  # now from the snapshot
    engine.close()
    assert engine.trainer.ledger.get(engine.classifier.analyze(MESSAGES[0]).key) == (Label.SPAM, True)


history = st.lists(
    st.tuples(
        st.integers(0, len(MESSAGES) - 1),
        st.sampled_from(["spam", "ham", "untrain"]),
        st.booleans(),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=history)
def test_any_history_equals_training_once_with_the_final_labels(new_trainer, events):
    trainer = new_trainer()
    final: dict[int, tuple[Label, bool]] = {}
    for index, action, user in events:
        if action == "untrain":
            trainer.untrain(ANALYZED[index], "test")
            final.pop(index, None)
            continue
        label = Label.parse(action)
        trainer.train(ANALYZED[index], label, "test", user=user)
        known = final.get(index)
        if known is None or user or not known[1]:  # autolearn does not override a person
            final[index] = (label, user or (known is not None and known[1] and known[0] == label))
    assert trainer.model.state_equals(direct({i: label for i, (label, _) in final.items()}))
    assert trainer.ledger.as_dict() == {
        ANALYZED[i].key: int(label) | (2 if user else 0) for i, (label, user) in final.items()
    }


sourced_history = st.lists(
    st.tuples(
        st.integers(0, len(MESSAGES) - 1),
        st.sampled_from([Label.SPAM, Label.HAM]),
        st.sampled_from(["person", "autolearn", "settled"]),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=sourced_history)
def test_settled_and_autolearn_mixed_with_people(new_trainer, events):
    """Any mix of a person's, autolearn's and settled learning's labels leaves, for each message, the label of
    its last person event if it had one, else its last label from the other two, each message counted once.

    Last, not first: settled learning comes after autolearn (delivery, then time left in place) and
    is the better evidence, so it corrects autolearn; neither ever changes a person's label.
    """
    trainer = new_trainer()
    held: dict[int, tuple[Label, bool]] = {}  # what the ledger must hold
    for index, label, source in events:
        person = source == "person"
        known = held.get(index)
        outcome = trainer.train(ANALYZED[index], label, source, user=person)
        if known is None:
            assert outcome == Outcome.LEARNED
            held[index] = (label, person)
        elif known[0] == label:
            assert outcome == Outcome.REPEAT
            held[index] = (label, person or known[1])
        elif known[1] and not person:
            assert outcome == Outcome.DECLINED
        else:
            assert outcome == Outcome.CORRECTED  # once: the old label's counts moved, none added
            held[index] = (label, person)
    assert trainer.model.state_equals(direct({i: label for i, (label, _) in held.items()}))
    assert int(sum(trainer.model.doc_totals)) == len(held)
    assert trainer.ledger.as_dict() == {
        ANALYZED[i].key: int(label) | (2 if person else 0) for i, (label, person) in held.items()
    }
    assert trainer.events.total() == len(events)


def test_engine_history_replays_to_the_same_state(tmp_path):
    config = h.small_config(tmp_path)
    engine = Engine.open(config)
    for i, label in [(0, "spam"), (1, "ham"), (0, "ham"), (2, "spam"), (1, "ham"), (2, "ham"), (0, "spam")]:
        engine.train(MESSAGES[i], Label.parse(label), "test")
    engine.untrain(MESSAGES[2], "test")
    model, ledger = h.local_model(engine), h.local_ledger(engine)
    engine.close()
    engine = Engine.open(config)
    engine.close()
    assert engine.model.state_equals(model) and h.local_ledger(engine).equals(ledger)
    assert engine.model.state_equals(direct({0: Label.SPAM, 1: Label.HAM}))


# ---------------------------------------------------------------- the message key


def test_message_key_ignores_own_headers_and_line_endings():
    raw = h.PLAIN
    key = message_key(raw)
    scored = with_own_headers(raw, [("X-Spam-Status", "Yes, score=0.97"), ("X-Spam-Flag", "YES")])
    assert scored != raw and message_key(scored) == key
    assert message_key(h.crlf(raw)) == key
    assert message_key(with_own_headers(h.crlf(raw), [("X-Spam-Score", "0.1")])) == key
    assert message_key(raw + b"\n\n") == key
    # Folded, oddly cased, anywhere in the header block.
    inserted = raw.replace(b"Subject:", b"x-spam-status: No,\n\tscore=0.01\nX-SPAM-Key: abc\nSubject:")
    assert message_key(inserted) == key
    assert strip_own_headers(inserted) == raw


def test_message_key_sees_everything_else():
    key = message_key(h.PLAIN)
    assert message_key(h.PLAIN.replace(b"noon", b"one")) != key
    assert message_key(h.PLAIN.replace(b"Subject:", b"X-Spammy: 1\nSubject:")) != key
    assert message_key(h.PLAIN + b"X-Spam-Status: in the body\n") != key  # body lines are content
    assert len(key) == 16


def test_with_own_headers_replaces_rather_than_stacks():
    once = with_own_headers(h.PLAIN, [("X-Spam-Status", "No")])
    twice = with_own_headers(once, [("X-Spam-Status", "Yes")])
    assert twice.count(b"X-Spam-Status") == 1 and b"X-Spam-Status: Yes\n" in twice
    crlf = with_own_headers(h.crlf(h.PLAIN), [("X-Spam-Status", "No")])
    assert crlf.startswith(b"X-Spam-Status: No\r\n")


def test_scored_copy_and_crlf_copy_are_repeats_of_the_same_message():
    trainer = memory_trainer()
    trainer.train(CLASSIFIER.analyze(h.HTML), Label.SPAM, "smtp")
    for variant in (h.crlf(h.HTML), with_own_headers(h.HTML, [("X-Spam-Status", "Yes")])):
        analyzed = CLASSIFIER.analyze(variant)
        assert trainer.train(analyzed, Label.SPAM, "maildir") == Outcome.REPEAT
        # The same features too, so a later correction unlearns exactly what was learned.
        assert np.array_equal(analyzed.features.ids, ANALYZED_HTML.features.ids)
        assert np.array_equal(analyzed.features.counts, ANALYZED_HTML.features.counts)


@pytest.mark.corpus
@h.requires_corpus
def test_corpus_variants_keep_key_and_features():
    for raw in h.corpus_sample(300):
        plain = CLASSIFIER.analyze(raw)
        for variant in (h.crlf(raw), with_own_headers(raw, [("X-Spam-Status", "No, score=0.1")])):
            other = CLASSIFIER.analyze(variant)
            assert other.key == plain.key
            assert np.array_equal(other.features.ids, plain.features.ids)
            assert np.array_equal(other.features.counts, plain.features.counts)


def test_the_thick_threshold_leaves_a_label_of_no_person_the_score_files_right_and_learns_a_persons(new_trainer):
    """[model] train_margin, the same in every store: settled or autolearned mail the model already files right by
    the margin is left unlearned (not in the ledger); a person's label of the same message is learned."""
    trainer = new_trainer()
    spam_words, ham_words = "cheap pills casino winner offer", "meeting agenda minutes review lunch"
    for i in range(8):
        trainer.train(CLASSIFIER.analyze(h.numbered_message(i, spam_words)), Label.SPAM, "move")
        trainer.train(CLASSIFIER.analyze(h.numbered_message(100 + i, ham_words)), Label.HAM, "move")
    probe = CLASSIFIER.analyze(h.numbered_message(50, spam_words))
    margin = trainer.model.config.train_margin
    assert margin == 2.0 and trainer.model.score(probe.features).log_odds >= margin
    before = trainer.seq
    assert trainer.train(probe, Label.SPAM, "settled", user=False) == Outcome.CONFIDENT
    assert trainer.train(probe, Label.SPAM, "autolearn", user=False) == Outcome.CONFIDENT
    assert trainer.label_of(probe.key) is None and trainer.seq == before  # nothing written
    assert trainer.train(probe, Label.HAM, "settled", user=False) == Outcome.LEARNED  # wrong: learned
    assert trainer.train(probe, Label.SPAM, "move") == Outcome.CORRECTED  # a person: always
    assert trainer.events[("settled", "skipped_confident")] == 1
