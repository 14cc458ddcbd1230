"""The measurement scripts are tools an admin runs on their own mail: each has a --help,
and the ones that take a TREC index name each file that is no mail message (empty,
binary, unreadable) on stderr and go on, instead of stopping with a traceback.

The index here is made up (no corpus needed): separable spam and ham, three empty
files, a binary one and a line whose file is missing. The comparisons with bogofilter
need it installed; CI installs it (.ci/run), so there its absence is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spamd.evaluation.trec import read_index
from spamd_lab.opendkim_library import library_missing
from tests.core_helpers import TREC_INDEX, requires_corpus

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "scripts").glob("*/*.py"))

SPAM_WORDS = ["viagra", "cheap", "pills", "casino", "winner", "prize", "offer", "bitcoin", "loan", "refinance"]
HAM_WORDS = ["meeting", "agenda", "patch", "review", "kernel", "thanks", "lunch", "budget", "draft", "minutes"]
NOT_MAIL = ["data/empty1", "data/empty2", "data/junk", "data/empty3"]


def run_script(name: str, *args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run scripts/`name` (its folder and file: "speed/compare_speed.py") as the docs do, from elsewhere."""
    # No PYTHONPATH: each script finds this checkout's spamd_lab, scripts and tests itself.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / name), *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def needs_bogofilter() -> None:
    """Skip without bogofilter, but fail in CI, which installs it: a skipped comparison there would hide a break."""
    if shutil.which("bogofilter") is None:
        if os.environ.get("CI"):
            pytest.fail("bogofilter is not installed, and CI installs it (.ci/run): apt-get install bogofilter")
        pytest.skip("bogofilter is not installed (apt-get install bogofilter)")


@pytest.fixture
def index_with_junk(tmp_path: Path) -> Path:
    """24 messages alternating spam and ham, with three empty files, a binary one and a missing one among them."""
    data = tmp_path / "mail" / "data"
    data.mkdir(parents=True)
    lines = []
    for i in range(24):
        spam = i % 2 == 0
        words = SPAM_WORDS if spam else HAM_WORDS
        body = " ".join(words[(i + k) % len(words)] for k in range(30))
        sender = "promo@deals.example" if spam else "colleague@work.example"
        raw = f"From: {sender}\nTo: me@work.example\nSubject: note {i}\nMessage-ID: <{i}@x>\n\n{body}\n"
        (data / f"m{i}").write_text(raw)
        lines.append(f"{'spam' if spam else 'ham'} data/m{i}")
    for name in ("empty1", "empty2", "empty3"):
        (data / name).write_bytes(b"")
    (data / "junk").write_bytes(bytes(range(256)) * 8)
    for place, line in (
        (3, "spam data/empty1"),
        (8, "ham data/empty2"),
        (13, "spam data/junk"),
        (20, "ham data/empty3"),
    ):
        lines.insert(place, line)
    lines.insert(17, "ham data/missing")
    index = tmp_path / "mail" / "index"
    index.write_text("\n".join(lines) + "\n")
    return index


def assert_reported_each_junk_file(stderr: str, script: str) -> None:
    """One 'skipped' line per file that is no mail message, naming it and why; the missing file as unreadable."""
    skipped = [line for line in stderr.splitlines() if ": skipped " in line]
    for name in NOT_MAIL:
        lines = [line for line in skipped if line.startswith(f"{script}: skipped ") and f"/{name}: " in line]
        assert len(lines) == 1, (name, stderr)
        assert lines[0].endswith("not a mail message (it does not start with a header field)"), lines[0]
    missing = [line for line in skipped if "/data/missing: " in line]
    assert len(missing) == 1 and "unreadable" in missing[0], stderr
    assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{path.parent.name}/{path.name}" for path in SCRIPTS])
def test_every_script_has_a_help(script: Path, tmp_path: Path) -> None:
    run = run_script(str(script.relative_to(REPO / "scripts")), "--help", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: "), run.stdout
    # argparse puts the description after the usage lines: a sentence saying what the script does.
    description = run.stdout.split("\n\n")[1].strip()
    assert len(description) > 20 and not description.startswith(("positional arguments", "options")), run.stdout


def test_compare_speed_skips_and_names_files_that_are_no_mail_message(index_with_junk: Path, tmp_path: Path) -> None:
    needs_bogofilter()
    run = run_script("speed/compare_speed.py", str(index_with_junk), "--rounds", "1", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert_reported_each_junk_file(run.stderr, "compare_speed.py")
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["messages"] == 24
    for key in ("spamd_eval_msgs_per_s", "spamd_bulk_classify_msgs_per_s", "bogofilter_bulk_classify_msgs_per_s"):
        assert summary[key] > 0, summary


def test_compare_speed_per_user_times_each_users_layer_and_refuses_an_index_without_users(
    index_with_junk: Path, tmp_path: Path
) -> None:
    needs_bogofilter()
    lines = index_with_junk.read_text().splitlines()
    users = index_with_junk.with_name("users-index")
    users.write_text("".join(f"{line} {('alice', 'bob')[n % 2]}\n" for n, line in enumerate(lines)))
    run = run_script("speed/compare_speed.py", str(users), "--per-user", "--rounds", "1", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["spamd_bulk_classify_per_user_msgs_per_s"] > 0 and summary["per_user_scoring_cost"] > 0, summary
    refused = run_script("speed/compare_speed.py", str(index_with_junk), "--per-user", "--rounds", "1", cwd=tmp_path)
    assert refused.returncode == 2 and "names users" in refused.stderr


def test_compare_speed_names_what_one_trees_venv_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A package one venv holds and the other does not can cost a process start there alone: said, not hidden."""
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("needs the checkout's own .venv")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare / ".venv")], check=True)
    sys.path.insert(0, str(REPO))
    try:
        from scripts.speed.compare_speed import say_venvs_differ
    finally:
        sys.path.remove(str(REPO))
    say_venvs_differ([REPO, bare])
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and f": {bare}/.venv lacks what another tree's has: " in said[0], said
    assert "numpy" in said[0] and "structlog" in said[0]  # what spamd needs, in the checkout's venv only


def test_compare_speed_classifies_against_a_slow_nameserver_of_its_own(index_with_junk: Path, tmp_path: Path) -> None:
    needs_bogofilter()
    run = run_script(
        "speed/compare_speed.py", str(index_with_junk), "--dns-delay", "0.05", "--rounds", "1", "--json", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["classify_dns_delay_s"] == 0.05 and summary["spamd_bulk_classify_msgs_per_s"] > 0, summary
    assert summary["classify_dns_verifying"] is True
    config = tmp_path / "spamd.toml"
    config.write_text("")
    refused = run_script(
        "speed/compare_speed.py", str(index_with_junk), "--dns-delay", "0.05", "--config", str(config), cwd=tmp_path
    )
    assert refused.returncode == 2 and "--dns-delay" in refused.stderr


def test_start_time_times_each_trees_bulk_classify_of_two_messages(index_with_junk: Path, tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "spamctl").exists():
        pytest.skip("--tree needs the checkout's own .venv/bin/spamctl")
    run = run_script(
        "speed/start_time.py", str(index_with_junk), "--tree", str(REPO), "--runs", "2", "--json", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    [row] = json.loads(run.stdout)
    assert row["tree"] == str(REPO) and 0 < row["fastest_wall_ms"] <= row["median_wall_ms"], row
    assert row["median_cpu_ms"] > 0, row  # the process's and its workers'


def test_compare_speed_times_each_tree_and_a_maildir_of_the_messages(index_with_junk: Path, tmp_path: Path) -> None:
    needs_bogofilter()
    if not (REPO / ".venv" / "bin" / "spamctl").exists():
        pytest.skip("--tree needs the checkout's own .venv/bin/spamctl")
    run = run_script(
        "speed/compare_speed.py", str(index_with_junk), "--tree", str(REPO), "--tree", str(REPO), "--maildir",
        "--rounds", "1", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert [t["tree"] for t in summary["trees"]] == [str(REPO), str(REPO)]
    assert "lacks what another tree's has" not in run.stderr  # one venv: nothing to tell apart
    for tree in summary["trees"]:
        assert tree["messages"] == 24
        for key in ("spamd_bulk_classify_msgs_per_s", "spamd_maildir_classify_msgs_per_s"):
            assert tree[key] > 0, tree
    assert summary["bogofilter_maildir_classify_msgs_per_s"] > 0
    assert summary["new_over_old"]["spamd_maildir_classify_msgs_per_s"] > 0
    missing = run_script("speed/compare_speed.py", str(index_with_junk), "--tree", str(tmp_path), cwd=tmp_path)
    assert missing.returncode != 0 and "own venv" in missing.stderr


def test_compare_bogofilter_skips_and_names_files_that_are_no_mail_message(
    index_with_junk: Path, tmp_path: Path
) -> None:
    needs_bogofilter()
    work = tmp_path / "work"
    run = run_script(
        "accuracy/compare_bogofilter.py", str(index_with_junk), "--variants", "original,subject-only", "--work", str(work), "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert_reported_each_junk_file(run.stderr, "compare_bogofilter.py")
    rows = json.loads(run.stdout)["rows"]
    assert [row["variant"] for row in rows] == ["original", "subject-only"]
    for row in rows:
        # Both filters saw the same 24 messages: nothing learned from the empty or binary files.
        assert row["messages"] == 24 and row["spamd"]["messages"] == 24 and row["bogofilter"]["messages"] == 24, row
    # No derived stream is made of a file that is no message.
    assert len((work / "mail" / "subject-only" / "index").read_text().splitlines()) == 24


def test_audit_text_and_heavy_mail_index_go_on_past_files_that_are_no_mail_message(
    index_with_junk: Path, tmp_path: Path
) -> None:
    audit = run_script("accuracy/audit_text.py", str(index_with_junk), cwd=tmp_path)
    assert audit.returncode == 0, audit.stderr
    assert_reported_each_junk_file(audit.stderr, "audit_text.py")
    assert "24 messages (5 skipped" in audit.stdout

    heavy = run_script(
        "speed/heavy_mail_index.py", str(tmp_path / "heavy"), str(index_with_junk), "--min-bytes", "1", cwd=tmp_path
    )
    # None of the made-up messages carries HTML: the script says so, having named the junk.
    assert heavy.returncode == 1 and "no message is that large and carries HTML" in heavy.stderr
    assert_reported_each_junk_file(heavy.stderr, "heavy_mail_index.py")


def test_a_script_given_an_unreadable_index_says_so_in_one_line(tmp_path: Path) -> None:
    run = run_script("accuracy/audit_text.py", str(tmp_path / "nope"), cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip() == f"audit_text.py: {tmp_path / 'nope'}: cannot read index: No such file or directory"


def test_users_cost_reports_memory_snapshot_and_start_up_and_leaves_nothing(tmp_path: Path) -> None:
    run = run_script(
        "scale/users_cost.py", "--users", "6", "--trainings", "4", "--replay", "12", "--dir", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "layers: 6 users" in run.stdout and "ledger: 24 entries" in run.stdout
    assert "snapshot: " in run.stdout and "start-up with 12 journal records to replay" in run.stdout
    assert list(tmp_path.iterdir()) == []  # the temporary state directory is removed


def test_ablate_model_skips_and_names_files_that_are_no_mail_message(index_with_junk: Path, tmp_path: Path) -> None:
    done = run_script("accuracy/ablate_model.py", "--candidates", "binary", "--feedback", "full", "--work", str(tmp_path / "w"),
                      str(index_with_junk), cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_reported_each_junk_file(done.stderr, "ablate_model.py")
    assert "| binary |" in done.stdout


def trec_head_index(tmp_path: Path, messages: int = 600) -> Path:
    """An index of trec07p-dev's first messages, with absolute paths (the scripts run elsewhere)."""
    corpus = REPO.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index"
    lines = [line.split() for line in corpus.read_text().splitlines()[:messages]]
    index = tmp_path / "index"
    index.write_text("".join(f"{label} {(corpus.parent / path).resolve()}\n" for label, path in lines))
    return index


def test_compare_trees_shows_every_run_before_and_after_and_the_same_tree_moves_nothing(
    index_with_junk: Path, tmp_path: Path
) -> None:
    index = str(index_with_junk)
    run = run_script(
        "accuracy/compare_trees.py", "--before", str(REPO), "--after", str(REPO), "--dev", index,
        "--first-contact", f"{index}:{index}", "--later", f"{index}:{index}", "--alone", index, "--feedback",
        "full,errors", "--attack-names", "zero-width", "--work", str(tmp_path / "w"), cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    for heading in ("development streams", "mail after mail (first contact)", "mail's later half after mail and its first half",
                    "mail alone", "Attacked spam at first contact (spamd)"):  # fmt: skip
        assert f"### {heading}\n" in out, out
    # The derived streams' ratios per feedback (1.000 where a stream is not ranked perfectly, else "-"), and each
    # stream's figures before and after: the same tree, the same figures.
    ratio_rows = [line for line in out.splitlines() if line.startswith(("| full | ", "| errors | "))]
    assert len(ratio_rows) == 2 and all(row.split(" | ")[1] in ("1.000", "-") for row in ratio_rows), out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "%, " in line]
    assert len(rows) >= 2 * 4 and all(row[2] == row[3].rstrip(" |") for row in rows), out
    attacked = [line for line in out.splitlines() if line.startswith("| mail | zero-width |")]
    assert len(attacked) == 1, out
    before, after = attacked[0].split(" | ")[2].split(" -> ")
    assert before == after, attacked


@pytest.mark.skipif(
    not (REPO.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index").is_file(), reason="corpus absent"
)
def test_ablate_models_default_is_spamctl_evals_figure_under_each_protocol(tmp_path: Path) -> None:
    """The script replays spamd's arithmetic itself: its default row must be `spamctl eval` to the last digit shown."""
    index = trec_head_index(tmp_path)
    done = run_script("accuracy/ablate_model.py", "--candidates", "default", "--work", str(tmp_path / "w"), str(index),
                      cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| default |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    for place, protocol in enumerate(("full", "errors", "people")):
        evaluated = subprocess.run(
            [str(Path(sys.executable).parent / "spamctl"), "eval", str(index), "--json", "--feedback", protocol],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert evaluated.returncode == 0, evaluated.stderr
        report = json.loads(evaluated.stdout.strip().splitlines()[-1])
        assert cells[1 + 5 * place + 2] == f"{report['one_minus_roca_pct']:.4f}", (protocol, row)


@pytest.mark.skipif(
    not (REPO.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index").is_file(), reason="corpus absent"
)
def test_ablate_models_estimation_and_margin_rows_are_spamctl_evals_figures(tmp_path: Path) -> None:
    """The switches and the train margin the script runs are spamd's own: its rows are `spamctl eval`'s to the digit."""
    index = trec_head_index(tmp_path)
    done = run_script("accuracy/ablate_model.py", "--candidates", "margin1,wnorm+prior", "--feedback", "full,errors",
                      "--work", str(tmp_path / "w"), str(index), cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    accuracy = done.stdout.split("\n\n")[0]  # the first table; the second is the share trained
    rows = {cells[0]: cells for line in accuracy.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}  # fmt: skip
    (tmp_path / "both.toml").write_text("[model]\nweight_normalization = true\nclass_prior = true\n")
    for row, place, options in (
        ("margin1", 0, ["--train-margin", "1"]),
        ("margin1", 1, ["--train-margin", "1", "--feedback", "errors"]),
        ("wnorm+prior", 0, ["--config", str(tmp_path / "both.toml")]),
        ("wnorm+prior", 1, ["--config", str(tmp_path / "both.toml"), "--feedback", "errors"]),
    ):
        evaluated = subprocess.run(
            [str(Path(sys.executable).parent / "spamctl"), "eval", str(index), "--json", *options],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert evaluated.returncode == 0, evaluated.stderr
        report = json.loads(evaluated.stdout.strip().splitlines()[-1])
        assert rows[row][1 + 5 * place + 2] == f"{report['one_minus_roca_pct']:.4f}", (row, options)


def test_multi_user_stream_deals_each_disputed_list_to_two_users_who_disagree(
    index_with_junk: Path, tmp_path: Path
) -> None:
    data = index_with_junk.parent / "data"
    lines = index_with_junk.read_text().splitlines()
    lists = ("kernel-dev.lists.example", "pets.lists.example")
    for i in range(12):  # list0, list2, ... on the first list; list1, list3, ... on the second
        body = " ".join(HAM_WORDS[(i + k) % len(HAM_WORDS)] for k in range(30))
        (data / f"list{i}").write_text(
            f"From: member{i}@lists.example\nTo: list@lists.example\nList-Id: Talk <{lists[i % 2]}>\n"
            f"Subject: thread {i}\nMessage-ID: <list{i}@x>\n\n{body}\n"
        )
        lines.insert(2 * i + 1, f"ham data/list{i}")
    index_with_junk.write_text("\n".join(lines) + "\n")

    def on_list(path: str) -> int | None:
        return int(path.rsplit("/list", 1)[1]) % 2 if "/list" in path else None

    out = tmp_path / "out"
    run = run_script(
        "accuracy/multi_user_stream.py", str(index_with_junk), "--out", str(out), "--disputed", lists[0],
        "--disputed", "pets", "--cost-messages", "0", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    agree = [line.split() for line in (out / "agree.index").read_text().splitlines()]
    for which, name in enumerate((lists[0], "pets")):
        disagree = [line.split() for line in (out / f"disagree-{name}.index").read_text().splitlines()]
        assert [path for _, path, _ in disagree] == [path for _, path, _ in agree]
        # The list's copies alternately bob's (ham) and alice's (spam); every other line as in agree.
        assert [(label, user) for label, path, user in disagree if on_list(path) == which] == [
            ("ham", "bob"),
            ("spam", "alice"),
        ] * 3
        assert [a for a in agree if on_list(a[1]) != which] == [d for d in disagree if on_list(d[1]) != which]
    summary = json.loads((out / "summary.json").read_text())
    for name in (lists[0], "pets"):
        shares = summary[f"disagree {name}/user layer"]["disputed"]
        assert set(shares) == {"alice", "bob"} and all(copies == 3 for _, _, copies in shares.values()), shares
    refused = run_script("accuracy/multi_user_stream.py", str(index_with_junk), "--out", str(out), "--disputed", "no.such.list",
                         "--cost-messages", "0", cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 1 and "no.such.list" in refused.stderr and "Traceback" not in refused.stderr


def test_attack_first_contact_learns_the_head_and_scores_each_attacked_tail(
    index_with_junk: Path, tmp_path: Path
) -> None:
    needs_bogofilter()
    work = tmp_path / "work"
    run = run_script(
        "attacks/attack_first_contact.py", str(index_with_junk), "--attacks", "zero-width,all", "--train-first", "12",
        "--work", str(work), "--jobs", "1", "--json", cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert_reported_each_junk_file(run.stderr, "attack_first_contact.py")
    rows = json.loads(run.stdout)["rows"]
    assert [row["attack"] for row in rows] == ["unchanged", "zero-width", "all"]
    for row in rows:
        assert row["spamd"]["messages"] == row["bogofilter"]["messages"] == 12, row
        assert row["spamd"]["trained"] == {"eval": 12}
        assert set(row["spamd"]["spam_filed_pct"]) == {"spam", "unsure", "ham"}
    assert rows[0]["spamd"]["roca_vs_unchanged"] == 1.0
    # The learned head is the unchanged mail; only the tail's spam is attacked.
    attacked = read_index(work / "mail" / "zero-width-seed1-from12" / "index")
    original = [
        e for e in read_index(index_with_junk) if e.path.exists() and e.path.stat().st_size and "junk" not in e.name
    ]
    assert [e.path.read_bytes() for e in attacked[:12]] == [e.path.read_bytes() for e in original[:12]]
    assert all(
        a.path.read_bytes() != o.path.read_bytes()
        for a, o in zip(attacked[12:], original[12:], strict=True)
        if a.label == 1
    )


@pytest.mark.skipif(
    not (REPO.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index").is_file(), reason="corpus absent"
)
def test_ablate_models_mail_evidence_row_is_spamctl_evals_figure(tmp_path: Path) -> None:
    """The mail-evidence families the script adds from its cache are the ones spamd adds: the same figure to the digit."""
    index = trec_head_index(tmp_path, messages=300)
    done = run_script("accuracy/ablate_model.py", "--candidates", "evidence-all", "--feedback", "full",
                      "--work", str(tmp_path / "w"), str(index), cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| evidence-all |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    config = tmp_path / "evidence.toml"
    config.write_text(
        "[model]\nsender_claims = true\nlink_targets = true\nattachment_kinds = true\nbulk_marks = true\n"
    )
    evaluated = subprocess.run(
        [str(Path(sys.executable).parent / "spamctl"), "eval", str(index), "--json", "--config", str(config)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert cells[3] == f"{report['one_minus_roca_pct']:.4f}", row


def test_multi_user_stream_signs_each_disputed_list_by_its_own_domain_and_serves_the_key(
    index_with_junk: Path, tmp_path: Path
) -> None:
    data = index_with_junk.parent / "data"
    lines = index_with_junk.read_text().splitlines()
    for i in range(6):
        body = " ".join(HAM_WORDS[(i + k) % len(HAM_WORDS)] for k in range(30))
        (data / f"list{i}").write_text(
            f"From: member{i}@members.example\nTo: list@lists.example\nList-Id: Talk <kernel-dev.lists.example>\n"
            f"Subject: thread {i}\nMessage-ID: <list{i}@x>\n\n{body}\n"
        )
        lines.insert(2 * i + 1, f"ham data/list{i}")
    index_with_junk.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    run = run_script(
        "accuracy/multi_user_stream.py", str(index_with_junk), "--out", str(out), "--disputed", "kernel-dev",
        "--sign", "--disagree-only", "--cost-messages", "0", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # Signed by lists.example (the List-Id's organizational domain, not the --disputed text), and
    # every copy verifies through spamd's own checks against the script's loopback DNS server.
    assert "by ['lists.example']" in run.stdout, run.stdout
    assert "kernel-dev: 6 of 6 signed copies authenticated as the list" in run.stdout, run.stdout
    disagree = [line.split() for line in (out / "disagree-kernel-dev.index").read_text().splitlines()]
    signed = [Path(path) for _, path, _ in disagree if "/signed/" in path]
    assert len(signed) == 6 and all(b"d=lists.example" in p.read_bytes() for p in signed)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["disagree kernel-dev/user layer"]["disputed"]) == {"alice", "bob"}, summary


@pytest.mark.corpus
@requires_corpus
def test_claimed_push_scores_forgeries_from_a_rescued_sender_under_each_bound(tmp_path: Path) -> None:
    """On the corpus: a model of a few messages is too thin for three rescues of spam-like mail to leave
    the next offers in Junk (each rescue teaches spam words as ham)."""
    run = run_script(
        "attacks/claimed_push.py", "--corpus", str(TREC_INDEX), "--prefix", "300", "--forged", "10",
        "--jobs", "1", "--out", str(tmp_path / "out"), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "forged-sender attack: 10 forgeries" in run.stdout, run.stdout
    lines = {line.split(":")[0].strip(): line for line in run.stdout.splitlines() if "filed out of Junk" in line}
    bounds = ("0", "0.3", "0.6", "1.0", "full", "kept")
    assert set(lines) == {f"bound {bound:4}".strip() for bound in bounds}, run.stdout
    # No push lets nothing through that content files as spam; the full rule lets everything through.
    assert lines["bound 0"].split(": ")[1].startswith("0 of "), lines
    # Within the spam cut's distance to the ham cut (0.63), a push makes spam by content Unsure at most.
    assert all(" 0 ham," in lines[f"bound {b}"] for b in ("0.3", "0.6", "kept")), lines
    through, of = lines["bound full"].split(": ")[1].split(" filed")[0].split(" of ")
    assert through == of, lines


def test_bench_smtp_trusted_replays_mail_whose_authentication_results_the_daemon_trusts(
    index_with_junk: Path, tmp_path: Path
) -> None:
    """--auth trusted: the signed mail carries a verifying milter's Authentication-Results above Postfix's
    Received, which the daemon trusts (X-Spam-Auth names the authserv-id, not spamd); off-warm replays the
    same mail and reports nothing; the ratio against off-warm is printed."""
    run = run_script(
        "speed/bench_smtp.py", "--index", str(index_with_junk), "--train", "8", "--limit", "10", "--clients", "2",
        "--auth", "off-warm", "--auth", "trusted", "--settle", "0", "--keep", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert any(line.startswith("auth trusted / off-warm: ") for line in run.stdout.splitlines()), run.stdout
    kept = Path(run.stdout.split("kept ")[1].split()[0])
    try:
        reports: dict[bool, set[str]] = {}
        for config in kept.glob("*/spamd.toml"):
            trusted = "trusted_authserv_ids" in config.read_text()
            delivered = list((config.parent / "data" / "Maildir").glob("**/new/*"))
            assert delivered, config
            reports[trusted] = {
                next((line.split(";")[0] for line in path.read_text("latin-1").splitlines()
                      if line.startswith("X-Spam-Auth:")), "none")
                for path in delivered
            }  # fmt: skip
        assert reports == {False: {"none"}, True: {"X-Spam-Auth: source=authserv-id mta.bench.example"}}, reports
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_bench_smtp_runs_the_same_users_maildirs_with_per_user_scoring_off_and_on_beside_one_maildir(
    index_with_junk: Path, tmp_path: Path
) -> None:
    """--per-user off/on: the same users' Maildirs, [users] score_per_user false and true, and one Maildir with the
    shared model, interleaved; both ratios printed with a figure per round, and every message delivered."""
    run = run_script(
        "speed/bench_smtp.py", "--index", str(index_with_junk), "--train", "8", "--limit", "10", "--clients", "2",
        "--users", "0", "--users", "3", "--per-user", "off", "--per-user", "on", "--settle", "0", "--keep",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "users 3 (per-user scoring off): " in run.stdout and "users 3 (per-user scoring on): " in run.stdout
    ratios = [line for line in run.stdout.splitlines() if " by the medians, " in line and "; per round " in line]
    assert [line.split(":")[0] for line in ratios] == [
        "3 users, per-user scoring on / off",
        "3 users, over one Maildir, the shared model",
    ], run.stdout
    assert all(len(line.split("per round ")[1].split()) == 1 for line in ratios)
    kept = Path(run.stdout.split("kept ")[1].split()[0])
    try:
        configs = sorted(path.read_text() for path in kept.glob("*/spamd.toml"))
        users = sorted(
            next((line for line in c.splitlines() if line.startswith("score_per_user")), "") for c in configs
        )
        assert users == ["", "score_per_user = false", "score_per_user = true"], configs
    finally:
        shutil.rmtree(kept, ignore_errors=True)


@pytest.mark.corpus
@requires_corpus
@pytest.mark.real_program(library_missing())
def test_auth_cost_verifies_the_same_signed_mail_with_libopendkim_and_spamd(tmp_path: Path) -> None:
    """Both verifiers pass the script's own signature on nearly every message (a broken binding, or a key
    the callback did not hand over, fails them all) and each one's CPU a message is printed."""
    run = run_script(
        "costs/auth_cost.py", "--libopendkim", "--messages", "40", "--rounds", "1", cwd=tmp_path, timeout=120
    )
    assert run.returncode == 0, run.stderr
    line = run.stdout.strip()
    assert "40 messages signed by a 2048-bit key" in line and "keys from the cache" in line, line
    found = re.search(r"disagrees on our signature in (\d+)\.", line)
    # A 2007 signature without v= makes libopendkim refuse the whole message: 1 of these 40.
    assert found is not None and int(found.group(1)) <= 4, line
    assert " us, libopendkim " in line and line.endswith("x)"), line


@requires_corpus
def test_analysis_stages_by_the_clock_times_every_stage_of_each_tree(tmp_path: Path) -> None:
    run = run_script(
        "speed/analysis_stages.py", "--tree", str(REPO), "--tree", str(REPO), "--index", str(TREC_INDEX),
        "--limit", "12", "--clock", "2", cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "CPU microseconds a message" in run.stdout and "(best of 2)" in run.stdout
    rows = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:] for line in run.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| stage")}  # fmt: skip
    for stage in ("parse", "tokens: header", "hashing", "analyze (whole)"):
        old, new, ratio = rows[stage]
        assert float(old.replace(",", "")) > 0 and float(new.replace(",", "")) > 0 and float(ratio) > 0, rows[stage]


@pytest.mark.skipif(not (REPO.parent / "shared" / "corpora" / "hard-dev" / "index").is_file(), reason="corpus absent")
def test_ablate_models_identities_count_only_where_a_sender_is_verified(tmp_path: Path) -> None:
    """The verified identities alone add no token where nobody can be verified (trec07p-dev: no trusted
    Authentication-Results, no DNS), so their row is the default's; where the receivers' results are
    trusted (hard-dev) they are tokens, and the figures move."""

    def rows(*arguments: str) -> dict[str, list[str]]:
        done = run_script("accuracy/ablate_model.py", "--candidates", "default,identities", "--feedback", "full",
                          "--work", str(tmp_path / "w"), *arguments, cwd=tmp_path, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr
        accuracy = done.stdout.split("\n\n")[0]
        return {cells[0]: cells[1:] for line in accuracy.splitlines() if line.startswith("| ")
                for cells in [[c.strip() for c in line.strip("|").split("|")]]}  # fmt: skip

    unverified = rows(str(trec_head_index(tmp_path, messages=300)))
    assert unverified["identities"] == unverified["default"], unverified
    hard = REPO.parent / "shared" / "corpora" / "hard-dev" / "index"
    verified = rows("--trusted-authserv-ids", "juliett.baddomain.com,juliett.example.com", str(hard))
    assert verified["identities"][2] != verified["default"][2], verified
