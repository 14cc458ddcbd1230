"""TREC measures on hand-computable inputs, and `spamctl eval` end to end on a small hand-made corpus."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.errors import SpamdError
from spamd.evaluation import trec as evaluation
from spamd.evaluation.measures import hm_at_sm, lam, one_minus_roca, roc_points
from spamd.evaluation.trec import evaluate_index, read_index
from spamd.learning.classifier import Classifier
from spamd.mail.message import looks_like_message
from spamd.model.bayes import Label, MultinomialNB
from tests.core_helpers import CORPORA, requires_corpus

SPAM_WORDS = ["viagra", "cheap", "pills", "casino", "winner", "prize", "offer", "bitcoin", "loan", "refinance"]
HAM_WORDS = ["meeting", "agenda", "patch", "review", "kernel", "thanks", "lunch", "budget", "draft", "minutes"]


def _message(words: list[str], i: int, spam: bool) -> bytes:
    sender = "promo@deals.example" if spam else "colleague@work.example"
    body = " ".join(words[(i + k) % len(words)] for k in range(30))
    return f"From: {sender}\nTo: me@work.example\nSubject: note {i}\nMessage-ID: <{i}@x>\n\n{body}\n".encode()


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    """40 messages alternating spam/ham, plus an index line whose file is missing."""
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for i in range(40):
        spam = i % 2 == 0
        (data / f"m{i}").write_bytes(_message(SPAM_WORDS if spam else HAM_WORDS, i, spam))
        lines.append(f"{'spam' if spam else 'ham'} ../data/m{i}")
    lines.insert(10, "spam ../data/missing")
    (tmp_path / "full").mkdir()
    index = tmp_path / "full" / "index"
    index.write_text("\n".join(lines) + "\n")
    return index


# ---------------------------------------------------------------- measures


def test_roca_perfect_reversed_and_tied():
    spam = np.array([True, True, False, False])
    assert one_minus_roca(np.array([0.9, 0.8, 0.1, 0.2]), spam) == 0.0
    assert one_minus_roca(np.array([0.1, 0.2, 0.9, 0.8]), spam) == 100.0
    assert one_minus_roca(np.array([0.5, 0.5, 0.5, 0.5]), spam) == 50.0
    # one ham above one of two spam: 1 misordered pair of 4 -> 25%
    assert one_minus_roca(np.array([0.9, 0.3, 0.5, 0.1]), spam) == 25.0


def test_hm_at_sm_and_roc_endpoints():
    scores = np.array([0.9, 0.8, 0.7, 0.1, 0.2, 0.75])
    spam = np.array([True, True, True, False, False, False])
    hm, sm = roc_points(scores, spam)
    assert (hm[0], sm[0]) == (0.0, 1.0) and (hm[-1], sm[-1]) == (1.0, 0.0)
    # To let no spam through, the threshold must sit at 0.7, above which one ham of three lies.
    assert hm_at_sm(scores, spam, target_sm=0.0) == pytest.approx(100 / 3)


def test_lam_is_symmetric_and_bounded():
    assert lam(0.01, 0.01, 1000, 1000) == pytest.approx(1.0)
    assert lam(0.2, 0.01, 100, 100) == pytest.approx(lam(0.01, 0.2, 100, 100))
    assert 0 < lam(0.0, 0.0, 100, 100) < 1  # zero rates count as half an error, never -inf


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 5), st.booleans()), min_size=2, max_size=60))
def test_roca_matches_pairwise_count(pairs):
    scores = np.array([s for s, _ in pairs])
    spam = np.array([y for _, y in pairs])
    if spam.all() or not spam.any():
        return
    wrong = sum((h > s) + 0.5 * (h == s) for s in scores[spam] for h in scores[~spam])
    expected = 100.0 * wrong / (spam.sum() * (~spam).sum())
    assert one_minus_roca(scores, spam) == pytest.approx(expected)


def test_read_index_rejects_bad_lines_naming_them(tmp_path):
    index = tmp_path / "index"
    index.write_text("spam a\nmaybe b\n")
    with pytest.raises(SpamdError, match=r"index:2"):
        read_index(index)
    with pytest.raises(SpamdError, match="cannot read index"):
        read_index(tmp_path / "absent")


# ---------------------------------------------------------------- spamctl eval


def _spamctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def test_eval_trains_a_model_of_its_own_never_the_redis_the_config_names(small_corpus, tmp_path):
    # The shared model in Redis scores every mail host's mail: an evaluation must not train it
    # with its corpus. Nothing listens on port 9 here, so a connection would fail the command.
    config = tmp_path / "spamd.toml"
    config.write_text('[redis]\nurl = "redis://127.0.0.1:9/0"\n')
    done = _spamctl(
        "--config", str(config), "--data-dir", str(tmp_path / "d"), "eval", "--json", str(small_corpus), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] == 40


def test_spamctl_eval_json_results_plot_and_missing_message(small_corpus, tmp_path):
    results = tmp_path / "results.txt"
    plot = tmp_path / "roc.png"
    run = _spamctl(
        "--data-dir",
        str(tmp_path / "d"),
        "eval",
        str(small_corpus),
        "--json",
        "--results",
        str(results),
        "--plot",
        str(plot),
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    for key in ("one_minus_roca_pct", "hm_at_sm01_pct", "lam_pct", "msgs_per_s"):
        assert key in report
    assert report["messages"] == 40 and report["skipped"] == 1
    assert "missing" in run.stderr  # reported, not a crash
    # Separable mail: after a few messages every spam outranks every ham.
    assert report["one_minus_roca_pct"] < 10
    lines = results.read_text().splitlines()
    assert len(lines) == 40
    name, gold, score, judged = lines[2].split()
    assert name == "../data/m2" and gold == "spam" and judged in ("spam", "ham")
    float(score)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The evaluation never touches the data directory's model: it runs on a fresh one.
    assert not (tmp_path / "d" / "state").exists()


def test_spamctl_eval_skips_and_names_files_that_are_no_mail_message(small_corpus, tmp_path):
    """An index of one's own mail holds empty and binary files: eval names each on stderr and goes on."""
    data = small_corpus.parent.parent / "data"
    (data / "empty").write_bytes(b"")
    (data / "junk").write_bytes(bytes(range(256)) * 4)
    small_corpus.write_text(small_corpus.read_text() + "ham ../data/empty\nspam ../data/junk\n")
    run = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(small_corpus), "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["messages"] == 40 and report["skipped"] == 3
    problems = run.stderr.strip().splitlines()
    assert len(problems) == 3
    assert "../data/missing: unreadable" in problems[0]
    assert problems[1].endswith(f"../data/empty: {evaluation.NOT_A_MESSAGE}")
    assert problems[2].endswith(f"../data/junk: {evaluation.NOT_A_MESSAGE}")


def test_index_messages_yields_mail_and_reports_the_rest(small_corpus, capsys, monkeypatch):
    data = small_corpus.parent.parent / "data"
    (data / "empty").write_bytes(b"")
    (data / "dir").mkdir()
    small_corpus.write_text(
        "ham ../data/m1\nham ../data/empty\nspam ../data/dir\nspam ../data/m2\nspam ../data/missing\n"
    )
    entries = read_index(small_corpus)
    monkeypatch.setattr(sys, "argv", ["measure.py"])
    assert [e.name for e in evaluation.mail_entries(entries)] == ["../data/m1", "../data/m2"]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"measure.py: skipped {entries[1].path}: {evaluation.NOT_A_MESSAGE}",
        f"measure.py: skipped {entries[2].path}: unreadable: Is a directory",
        f"measure.py: skipped {entries[4].path}: unreadable: No such file or directory",
    ]
    got = list(evaluation.index_messages(entries, on_skip=lambda e, why: None))
    assert [(e.name, raw) for e, raw in got] == [(e.name, e.path.read_bytes()) for e in (entries[0], entries[3])]


def test_spamctl_eval_table_and_unreadable_index(small_corpus, tmp_path):
    run = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(small_corpus), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "(1-ROCA)%" in run.stdout and "msgs/s" in run.stdout
    bad = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(tmp_path / "nope"), cwd=tmp_path)
    assert bad.returncode != 0
    assert "cannot read index" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- batches


def _varied_messages(count: int) -> list[tuple[bytes, Label]]:
    """Spam and ham with overlapping words, HTML, a repeated message and a non-mail blob."""
    rng = np.random.default_rng(7)
    messages = []
    for i in range(count):
        spam = bool(rng.random() < 0.6)
        pool = SPAM_WORDS + HAM_WORDS[:3] if spam else HAM_WORDS + SPAM_WORDS[:2]
        body = " ".join(rng.choice(pool, size=int(rng.integers(5, 60))))
        head = f"From: {'promo@deals' if spam else 'colleague@work'}.example\nSubject: note {i}\nMessage-ID: <{i}@x>\n"
        if i % 7 == 0:
            head += "Content-Type: text/html\n"
            body = f"<html><body><p>{body}</p><a href='http://x{i % 3}.example/p/{i}'>go</a></body></html>"
        raw = f"{head}\n{body}\n".encode()
        messages.append((raw, Label.SPAM if spam else Label.HAM))
    messages[50] = messages[10]  # trained again: a repeat the ledger skips
    messages[90] = (b"\x00\xff binary junk, no header at all", Label.SPAM)
    return messages


def test_analyze_many_equals_analyze_one_at_a_time():
    config = Config()
    classifier = Classifier(config, MultinomialNB(config.model))
    raws = [raw for raw, _ in _varied_messages(100)]
    for batched, raw in zip(classifier.analyze_many(raws), raws, strict=True):
        single = classifier.analyze(raw)
        assert batched.key == single.key
        assert np.array_equal(batched.features.ids, single.features.ids)
        assert np.array_equal(batched.features.counts, single.features.counts)


@pytest.mark.parametrize(
    "model", [ModelConfig(), ModelConfig(char_ngrams=4, ngram_weight=0.3, osb=True)], ids=["default", "families"]
)
@pytest.mark.parametrize("jobs", [0, 2], ids=["in-process", "two-workers"])
def test_batched_evaluation_scores_each_message_with_the_model_of_the_messages_before_it(
    tmp_path, monkeypatch, jobs, model
):
    """Analysis runs ahead in batches (here or in worker processes); scoring and training stay in index order.

    With weighted families the weights travel from the workers with the features.
    """
    config = Config(model=model)
    monkeypatch.setattr(evaluation, "BATCH_MESSAGES", 16)  # 150 messages span ten batches
    messages = _varied_messages(150)
    (tmp_path / "data").mkdir()
    lines = []
    for i, (raw, label) in enumerate(messages):
        (tmp_path / "data" / f"m{i}").write_bytes(raw)
        lines.append(f"{label} data/m{i}")
    lines.insert(33, "ham data/missing")  # a skipped line inside a batch
    index = tmp_path / "index"
    index.write_text("\n".join(lines) + "\n")
    skipped = []
    batched, report = evaluate_index(config, index, on_skip=lambda e, why: skipped.append((e.name, why)), jobs=jobs)
    # The missing file and the binary blob (no mail message: `spamctl train` refuses it) are skipped, with the reason.
    assert report.messages == 149 and report.skipped == 2
    assert skipped == [
        ("data/missing", "unreadable: No such file or directory"),
        ("data/m90", evaluation.NOT_A_MESSAGE),
    ]

    # The reference: one message at a time, as the daemon does it (it learns no non-mail either).
    engine = Engine.open(dataclasses.replace(config, data_dir=tmp_path / "reference"), durable=False)
    try:
        expected = []
        for raw, label in messages:
            if not looks_like_message(raw):
                continue
            expected.append(engine.classify(raw).score.log_odds)
            engine.train(raw, label, "eval")
    finally:
        engine.close()
    assert [r.score for r in batched] == expected


def test_spamctl_eval_train_first_learns_the_head_then_scores_the_rest_without_learning(small_corpus, tmp_path):
    # The tail repeats one spam four times: online learning would change its score, first contact must not.
    data = small_corpus.parent.parent / "data"
    (data / "repeat").write_bytes(_message(SPAM_WORDS[:3] + HAM_WORDS, 7, True))
    with small_corpus.open("a") as f:
        f.write("spam ../data/repeat\n" * 4)
    run = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(small_corpus), "--train-first", "20", "--json",
                   "--results", str(tmp_path / "results.txt"), cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["feedback"] == "train first 20, then score only"
    assert report["messages"] == 40 + 4 - 20 and report["skipped"] == 1
    assert report["trained"] == {"eval": 20}
    scores = [line.split()[2] for line in (tmp_path / "results.txt").read_text().splitlines()]
    assert len(scores) == 24 and len(set(scores[-4:])) == 1
    filed = report["spam_filed_pct"]
    assert set(filed) == {"spam", "unsure", "ham"} and abs(sum(filed.values()) - 100) < 1e-9
    assert filed["spam"] > 50  # the head taught it these words
    table = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(small_corpus), "--train-first", "20", cwd=tmp_path)
    assert "spam filed spam / unsure / ham" in table.stdout and "train first 20" in table.stdout
    bad = _spamctl("--data-dir", str(tmp_path / "d"), "eval", str(small_corpus), "--train-first", "-1", cwd=tmp_path)
    assert bad.returncode != 0 and "--train-first" in bad.stderr


def test_verification_counts_only_with_dns_trusted_results_or_outcome_tokens():
    config = Config()
    assert not evaluation.verification_counts(config, dns=False)
    assert evaluation.verification_counts(config, dns=True)
    trusting = dataclasses.replace(config, auth=dataclasses.replace(config.auth, trusted_authserv_ids=("mx.example",)))
    assert evaluation.verification_counts(trusting, dns=False)
    outcomes = dataclasses.replace(config, model=dataclasses.replace(config.model, auth_outcomes=True))
    assert evaluation.verification_counts(outcomes, dns=False)


@requires_corpus
def test_without_dns_verifying_signed_mail_gives_eval_nothing_it_scores_or_files_by():
    # What eval leaves unverified (verification_counts False): signed 2025 mail whose receivers'
    # Authentication-Results are not trusted here, and modern-dev's signed and ARC-sealed lists.
    config = dataclasses.replace(Config(), auth=dataclasses.replace(Config().auth, dns_budget_s=0.0))
    sealers = dataclasses.replace(config.auth, trusted_arc_sealers=("google.com", "lists.ettus.com", "microsoft.com"))
    hard, modern = CORPORA / "hard-dev" / "index", CORPORA / "modern-dev" / "index"
    entries = read_index(hard) + read_index(modern)[:300]
    signed = [e.path.read_bytes() for e in entries]
    signed = [raw for raw in signed if b"dkim-signature:" in raw.lower()[:20_000]]
    assert len(signed) > 150
    for auth in (config.auth, sealers):
        classifier = Classifier(dataclasses.replace(config, auth=auth), MultinomialNB(config.model))
        checked = classifier.analyze_many(signed)
        assert sum("dkim=temperror" in a.auth_report for a in checked) > 150  # verified, each key unknown
        for verified, unverified in zip(checked, classifier.analyze_many(signed, False), strict=True):
            assert verified.authenticated == 0 and not verified.dmarc_reject, verified.auth_report
            assert "=pass" not in verified.auth_report, verified.auth_report
            assert verified.key == unverified.key and verified.senders == unverified.senders
            assert np.array_equal(verified.features.ids, unverified.features.ids)
            assert np.array_equal(verified.features.counts, unverified.features.counts)


def test_eval_keeps_who_mail_is_from_where_the_index_names_its_user(tmp_path: Path) -> None:
    """Who a message is from is left out of eval's analysis only when no user is named: a user's
    rescues of a sender still move that sender's later mail (the senders' rule), analyzed in workers
    or in the process itself."""
    data = tmp_path / "data"
    data.mkdir()
    lines = []
    for i in range(80):
        # Spam and ham from others, then spam-worded mail from one sender that alice keeps among the spam.
        kept, spam = i >= 40 and i % 2 == 0, i % 2 == 0 if i < 40 else i % 2 == 1
        sender = "news@kept.example" if kept else "promo@deals.example" if spam else "colleague@work.example"
        words = HAM_WORDS if not (kept or spam) else SPAM_WORDS
        body = " ".join(words[(i + k) % len(words)] for k in range(30))
        raw = f"From: {sender}\nTo: alice@work.example\nSubject: note {i}\nMessage-ID: <{i}@x>\n\n{body}\n"
        (data / f"m{i}").write_bytes(raw.encode())
        lines.append(f"{'spam' if spam else 'ham'} ../data/m{i} alice")
    (tmp_path / "full").mkdir()
    index = tmp_path / "full" / "index"
    index.write_text("\n".join(lines) + "\n")
    config = dataclasses.replace(
        Config(), users=dataclasses.replace(Config().users, score_per_user=True, sender_moves=1, sender_share=0.0)
    )
    kept_scores = {}
    for jobs in (0, 1):
        for layer in (True, False):
            results, _ = evaluate_index(config, index, jobs=jobs, user_layer=layer)
            kept_scores[jobs, layer] = [r.score for n, r in enumerate(results) if n >= 40 and n % 2 == 0]
    # The shared model alone files the kept sender's spam-worded mail as it reads; alice's rescues move it.
    assert kept_scores[0, True] == kept_scores[1, True]
    assert kept_scores[0, False] == kept_scores[1, False]
    moved = [a < b for a, b in zip(kept_scores[0, True], kept_scores[0, False], strict=True)]
    assert any(moved), (kept_scores[0, True], kept_scores[0, False])
