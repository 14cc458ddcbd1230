"""The feedback protocols of `spamctl eval`: which message is trained, with what, and when; exact counts."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.evaluation.feedback import AUTOLEARN, PERSON, SETTLED, Feedback, People, Protocol
from spamd.evaluation.trec import evaluate_index
from spamd.learning.outcomes import Outcome, confidently_right
from spamd.model.bayes import Label, Score, Verdict, verdict_of
from tests import core_helpers as h

S, H, U = Verdict.SPAM, Verdict.HAM, Verdict.UNSURE
SPAM, HAM = Label.SPAM, Label.HAM

# (gold, verdict) for a small stream: right, wrong and Unsure each way.
STREAM = [(SPAM, S), (HAM, H), (SPAM, H), (HAM, S), (SPAM, U), (HAM, U), (HAM, H), (SPAM, S)]


def _events(protocol: Protocol, stream=STREAM) -> list[tuple[int, int, Label, str, bool]]:
    """(applied after N scored, message, label, source, person) for the whole stream, in order."""
    feedback = Feedback(protocol)
    out = []
    for number, (gold, verdict) in enumerate(stream):
        out += [(number, e.message, e.label, e.source, e.person) for e in feedback.due(number)]
        out += [
            (number + 1, e.message, e.label, e.source, e.person) for e in feedback.observe(number, gold, verdict, 1.0)
        ]
    return out


def test_full_feedback_trains_every_message_at_once():
    assert _events(Protocol("full")) == [(n + 1, n, gold, PERSON, True) for n, (gold, _) in enumerate(STREAM)]


def test_errors_trains_exactly_the_wrong_and_unsure_verdicts():
    assert [(m, label) for _, m, label, _, _ in _events(Protocol("errors"))] == [
        (2, SPAM),
        (3, HAM),
        (4, SPAM),
        (5, HAM),
    ]


def test_delay_holds_each_label_back_n_messages_and_drops_what_is_still_pending():
    events = _events(Protocol("errors", delay=3))
    assert [(applied, m) for applied, m, *_ in events] == [(6, 2), (7, 3), (8, 4)]  # message 5's is due after 9: never
    feedback = Feedback(Protocol("full", delay=3))
    for number, (gold, verdict) in enumerate(STREAM):
        feedback.due(number)
        feedback.observe(number, gold, verdict)
    assert [e.message for e in feedback.remaining()] == [5, 6, 7]


def test_autolearn_learns_confident_verdicts_at_delivery_and_people_correct_after():
    events = _events(Protocol("errors", autolearn=True))
    autolearned = [(m, label) for _, m, label, source, _ in events if source == AUTOLEARN]
    assert autolearned == [(0, SPAM), (1, HAM), (2, HAM), (3, SPAM), (6, HAM), (7, SPAM)]  # not the Unsure ones
    corrections = [(m, label, person) for _, m, label, source, person in events if source == PERSON]
    assert corrections == [(2, SPAM, True), (3, HAM, True), (4, SPAM, True), (5, HAM, True)]


def test_autolearn_margin_skips_verdicts_near_the_thresholds():
    feedback = Feedback(Protocol("errors", autolearn=True, autolearn_margin=0.5))
    assert feedback.observe(0, SPAM, S, log_odds=0.3) == []
    assert [e.source for e in feedback.observe(1, SPAM, S, log_odds=0.6)] == [AUTOLEARN]


def test_settled_learns_what_was_filed_right_after_settle_after_messages():
    events = _events(Protocol("errors", settled=True, settle_after=2))
    settled = [(applied, m, label) for applied, m, label, source, _ in events if source == SETTLED]
    assert settled == [(3, 0, SPAM), (4, 1, HAM)]  # message 6's would be due after 9 of 8
    assert all(not person for *_, source, person in events if source == SETTLED)


def _people_events(people: People, settled: bool = True, margin: float = 0.0):
    feedback = Feedback(Protocol("people", settled=settled, settle_after=5, settle_margin=margin, people=people))
    out = []
    for number, (gold, verdict) in enumerate(STREAM * 20):
        out += feedback.due(number)
        out += feedback.observe(number, gold, verdict, 1.0)
    return out + feedback.remaining()


def test_people_who_correct_everything_at_once_are_the_errors_protocol():
    everyone = People(1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1)
    events = _people_events(everyone, settled=False)
    errors = [n for n, (gold, verdict) in enumerate(STREAM * 20) if verdict is U or (verdict is S) != (gold is SPAM)]
    assert [e.message for e in events] == errors and all(e.person and e.source == PERSON for e in events)


def test_people_who_correct_nothing_leave_settled_learning_the_filing():
    nobody = People(0.0, 0.0, 0.0, 1.0, 1.0, 10.0, 1)  # every missed spam deleted, all ham read
    events = _people_events(nobody)
    assert all(e.source == SETTLED and not e.person for e in events)
    stream = STREAM * 20
    # Junk settles as spam (right or wrong), read mail in INBOX as ham; deleted spam never.
    expected = [n for n, (gold, verdict) in enumerate(stream) if verdict is S or (verdict is not S and gold is HAM)]
    assert sorted(e.message for e in events) == expected
    assert all(e.label == (SPAM if stream[e.message][1] is S else HAM) for e in events)
    assert _people_events(nobody, margin=2.0) == []  # every verdict at 1.0 is inside the margin


def test_people_simulation_is_seeded():
    people = People(0.5, 0.5, 0.5, 0.5, 0.5, 20.0, 7)
    assert _people_events(people) == _people_events(people)
    assert _people_events(people) != _people_events(People(0.5, 0.5, 0.5, 0.5, 0.5, 20.0, 8))


def test_confidently_right_is_the_verdict_of_the_label_by_the_margin():
    def score(log_odds: float) -> Score:
        return verdict_of(ModelConfig(), log_odds)

    assert confidently_right(score(2.5), SPAM, 2.0) and confidently_right(score(-2.0), HAM, 2.0)
    assert not confidently_right(score(1.9), SPAM, 2.0)  # right, but near the cut: learned
    assert not confidently_right(score(2.5), HAM, 2.0)  # wrong, however sure: learned
    assert not confidently_right(score(0.1), SPAM, 0.0)  # Unsure is never right
    assert not confidently_right(score(-40.0), HAM, math.inf)  # inf: every message learned


def test_protocol_rejects_unknown_feedback_and_negative_delays():
    with pytest.raises(ValueError):
        Protocol("sometimes")
    with pytest.raises(ValueError):
        Protocol("full", delay=-1)


# ---------------------------------------------------------------- through the real engine


SPAM_WORDS = ["viagra", "cheap", "pills", "casino", "winner", "prize", "offer", "bitcoin", "loan", "refinance"]
HAM_WORDS = ["meeting", "agenda", "patch", "review", "kernel", "thanks", "lunch", "budget", "draft", "minutes"]


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for i in range(30):
        spam = i % 3 != 0
        words = SPAM_WORDS if spam else HAM_WORDS
        body = " ".join(words[(i + k) % len(words)] for k in range(20))
        (data / f"m{i}").write_bytes(f"From: a{i}@x.example\nSubject: s{i}\nMessage-ID: <{i}@x>\n\n{body}\n".encode())
        lines.append(f"{'spam' if spam else 'ham'} data/m{i}")
    index = tmp_path / "index"
    index.write_text("\n".join(lines) + "\n")
    return index


def test_engine_trains_exactly_what_each_protocol_says(stream):
    results, full = evaluate_index(Config(), stream)
    assert (
        full.trained == {PERSON: 30} and 0 < full.changed[PERSON] < 30
    )  # the rest filed right by [model] train_margin
    _, every = evaluate_index(Config(model=ModelConfig(train_margin=math.inf)), stream)
    assert every.trained == {PERSON: 30} and every.changed == {PERSON: 30}
    results, errors = evaluate_index(Config(), stream, protocol=Protocol("errors"))
    wrong = sum(r.unsure or r.judged_spam != (r.gold == Label.SPAM) for r in results)
    assert 0 < wrong < 30 and errors.trained == {PERSON: wrong}
    _, delayed = evaluate_index(Config(), stream, protocol=Protocol("full", delay=4))
    assert delayed.trained == {PERSON: 26}
    _, auto = evaluate_index(Config(), stream, protocol=Protocol("errors", autolearn=True))
    # Every mistake corrected at once on top of autolearn: the model of full feedback.
    assert auto.one_minus_roca_pct == full.one_minus_roca_pct
    assert auto.changed[PERSON] == auto.trained[PERSON] and sum(auto.changed.values()) == full.changed[PERSON]


def test_spamctl_eval_feedback_options(stream):
    run = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--json", "eval", str(stream),
         "--feedback", "people", "--settled", "--settle-after", "5", "--settle-margin", "0", "--seed", "3", "--jobs", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["feedback"] == "people, settled after 5"
    assert report["messages"] == 30 and report["trained"].get(SETTLED, 0) > 0
    defaults = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--json", "eval", str(stream),
         "--feedback", "errors", "--history", "6", "--jobs", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert defaults.returncode == 0, defaults.stderr
    report = json.loads(defaults.stdout.splitlines()[-1])
    # As shipped: settled learning on, for mail spamd never scored only; no autolearn.
    assert report["feedback"] == "errors, history 6 settled" and report["trained"][SETTLED] == 6
    assert AUTOLEARN not in report["trained"]
    bad = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "eval", str(stream), "--sort-unsure", "2"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 1 and "--sort-unsure 2.0: a probability" in bad.stderr


def test_a_train_margin_through_the_engine_learns_the_wrong_and_the_unsure_and_skips_the_sure(stream):
    config = Config(model=ModelConfig(train_margin=0.5))
    results, report = evaluate_index(config, stream, protocol=Protocol("full"))
    expected = sum(r.unsure or r.judged_spam != (r.gold == Label.SPAM) or abs(r.score) < 0.5 for r in results)
    assert 0 < expected < 30 and report.changed == {PERSON: expected} and report.trained == {PERSON: 30}
    sure_and_right = [
        r for r in results if not r.unsure and r.judged_spam == (r.gold == Label.SPAM) and abs(r.score) >= 0.5
    ]
    assert len(sure_and_right) == 30 - expected  # right with room to spare: these, and only these, were not learned
    assert results[0].unsure  # the empty model is Unsure on the first message, which is learned
    _, every = evaluate_index(Config(model=ModelConfig(train_margin=math.inf)), stream, protocol=Protocol("full"))
    assert every.changed == {PERSON: 30}


def test_the_trainer_leaves_labels_of_no_person_it_already_files_right_and_learns_every_persons(tmp_path):
    engine = Engine.open(
        dataclasses.replace(Config(model=ModelConfig(train_margin=1.0)), data_dir=tmp_path), durable=False
    )
    try:
        for i in range(12):
            engine.train(h.numbered_message(i, "cheap pills casino winner"), Label.SPAM, "test")
            engine.train(h.numbered_message(100 + i, "meeting agenda minutes review"), Label.HAM, "test")
        probe = h.numbered_message(50, "cheap pills casino winner")
        assert engine.classify(probe).score.log_odds >= 1.0
        assert engine.train(probe, Label.SPAM, "settled", user=False) is Outcome.CONFIDENT
        assert engine.train(probe, Label.SPAM, PERSON) is Outcome.CONFIDENT  # an evaluation's label, the same
        assert engine.trainer.label_of(engine.classifier.analyze(probe).key) is None  # not in the ledger
        assert engine.train(probe, Label.HAM, "maildir") is Outcome.LEARNED  # a person says otherwise: learned, once
        assert engine.train(probe, Label.HAM, "maildir") is Outcome.REPEAT
        assert engine.trainer.events[("settled", "skipped_confident")] == 1
        sure = h.numbered_message(51, "cheap pills casino winner")
        assert engine.train(sure, Label.SPAM, "spamctl") is Outcome.LEARNED  # a person's train: always learned
    finally:
        engine.close()


def test_spamctl_eval_train_margin(stream):
    run = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--json", "eval", str(stream), "--train-margin", "0.5",
         "--jobs", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["trained"][PERSON] == 30 and 0 < report["changed"][PERSON] < 30
    bad = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "eval", str(stream), "--train-margin", "-1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 1 and "--train-margin -1.0: a |log-odds|" in bad.stderr


def test_history_is_learned_by_settled_learning_and_never_scored(stream):
    results, with_history = evaluate_index(Config(), stream, protocol=Protocol("errors", settled=True, history=12))
    assert len(results) == 18 and results[0].name == "data/m12"
    assert with_history.trained[SETTLED] == 12
    results, without = evaluate_index(Config(), stream, protocol=Protocol("errors", history=12))
    assert len(results) == 18 and SETTLED not in without.trained
    # The mail that was there trains the model before the first message is scored.
    assert with_history.trained.get(PERSON, 0) < without.trained[PERSON]
