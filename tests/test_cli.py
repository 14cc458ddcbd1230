"""spamctl as a subprocess with no daemon running: it opens the state itself, under the lock."""

from __future__ import annotations

import fcntl
import json
import mailbox
import os
import pty
import socket
import struct
import subprocess
import sys
import termios
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.cli.inputs import holds_several_mbox_messages
from spamd.config import load_config
from spamd.engine.engine import Engine
from spamd.model.bayes import Label
from tests import core_helpers as h
from tests.cli_helpers import (
    HAM,
    SPAM,
    SPAMCTL,
    classify_inputs,
    run_spamctl,
    write_maildir,
    write_mbox,
)  # noqa: F401 (home is a fixture)


def ctl(home: Path, *args: str | Path, input: bytes | None = None):
    return run_spamctl("--config", home / "spamd.toml", "--data-dir", home / "data", *args, input=input)


def open_engine(home: Path) -> Engine:
    return Engine.open(load_config(home / "spamd.toml", data_dir=home / "data"), durable=False)


def test_stats_on_a_fresh_state_directory(home: Path) -> None:
    result = ctl(home, "stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = result.json()
    for key in ("messages_scored", "trained_ham", "trained_spam", "tokens", "uptime_s"):
        assert key in stats
    assert stats["trained_ham"] == stats["trained_spam"] == stats["tokens"] == 0
    assert stats["mode"] == "offline" and stats["uptime_s"] is None
    table = ctl(home, "stats")
    assert table.returncode == 0
    assert "no spamd running" in table.stdout and "spam in the model" in table.stdout


def test_json_output_stays_json_when_the_store_warns(home: Path) -> None:
    # A snapshot temp left by a killed daemon is removed with a warning: on stderr, not
    # in the JSON a script reads (it broke tests/test_crash.py's spamctl runs).
    assert ctl(home, "stats", "--json").returncode == 0
    stale = home / "data" / "state" / ".snapshot-000000000001.spamd.tmp-99999"
    stale.write_bytes(b"half a snapshot")
    result = ctl(home, "stats", "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["mode"] == "offline"
    assert "snapshot_temp_removed" in result.stderr and not stale.exists()


def test_options_before_and_after_the_command_agree(home: Path) -> None:
    after = run_spamctl("stats", "--json", "--data-dir", home / "data", "--config", home / "spamd.toml")
    assert after.returncode == 0, after.stderr
    assert after.json()["state_dir"] == str(home / "data" / "state")


def test_classify_works_on_an_empty_model_and_on_any_bytes(home: Path) -> None:
    result = ctl(home, "classify", "-", "--json", input=SPAM[0])
    assert result.returncode == 0, result.stderr
    assert result.json()["verdict"] == "unsure"
    for junk in (b"", b"\x00\xff\xfe" * 1000, b"\n\n\n", bytes(range(256))):
        result = ctl(home, "classify", "-", "--json", input=junk)
        assert result.returncode == 0, result.stderr
        assert set(result.json()) >= {"verdict", "score", "probability"}
    table = ctl(home, "classify", "-", input=SPAM[0])
    assert "verdict" in table.stdout and "unsure" in table.stdout


def test_train_a_maildir_twice_skips_the_repeats(home: Path) -> None:
    junk = write_maildir(home / "Maildir" / ".Junk", SPAM)
    first = ctl(home, "train", "--spam", junk, "--json")
    assert first.returncode == 0, first.stderr
    assert first.json()["learned"] == len(SPAM) and first.json()["mode"] == "offline"
    again = ctl(home, "train", "--spam", junk, "--json")
    assert again.json()["learned"] == 0 and again.json()["skipped_repeat"] == len(SPAM)
    stats = ctl(home, "stats", "--json").json()
    assert stats["trained_spam"] == len(SPAM) and stats["trained_ham"] == 0
    text = ctl(home, "train", "--spam", junk)
    assert "skipped (already trained)" in text.stdout and "learned" in text.stdout


def test_train_mbox_and_single_files_then_classify_and_explain(home: Path) -> None:
    box = write_mbox(home / "ham.mbox", HAM)
    assert ctl(home, "train", "--ham", box, "--json").json()["learned"] == len(HAM)
    files = []
    for i, raw in enumerate(SPAM):
        files.append(home / f"spam{i}.eml")
        files[-1].write_bytes(raw)
    assert ctl(home, "train", "--spam", *files, "--json").json()["learned"] == len(SPAM)
    probe = b"From: x@y.example\nSubject: free cash prize\n\nclick now for free money\n"
    verdict = ctl(home, "classify", "-", "--json", input=probe).json()
    assert verdict["verdict"] == "spam" and verdict["probability"] > 0.8
    explained = ctl(home, "explain", "-", "--json", "--limit", "3", input=probe).json()
    assert len(explained["toward_spam"]) == 3
    assert all(row["weight"] > 0 for row in explained["toward_spam"])
    assert all(row["weight"] < 0 for row in explained["toward_ham"])
    table = ctl(home, "explain", "-", input=probe)
    assert table.returncode == 0 and "toward spam" in table.stdout and "contribution" in table.stdout


def test_explain_shows_a_messages_control_characters_escaped_not_to_the_terminal(home: Path) -> None:
    """A List-Id, a Subject and body words holding ESC and BEL sequences (retitle the window, clear the screen):
    the table shows each as \\xNN; JSON keeps them, escaped by JSON itself."""
    assert ctl(home, "train", "--ham", write_mbox(home / "ham.mbox", HAM)).returncode == 0
    assert ctl(home, "train", "--spam", write_mbox(home / "spam.mbox", SPAM)).returncode == 0
    probe = (
        b"From: x@y.example\nList-Id: \x1b]0;pwned\x07 \x1b[2J list\nSubject: free \x1b[31mcash\x9b\n\n"
        b"click now for free money \x1b[2J\x1b]0;x\x07\n"
    )
    table = ctl(home, "explain", "-", input=probe)
    assert table.returncode == 0, table.stderr
    shown = [c for c in table.stdout if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0]
    assert not shown, shown
    assert "sender list-id=\\x1b]0;pwned\\x07 \\x1b[2j list: not authenticated" in table.stdout, table.stdout
    senders = ctl(home, "explain", "-", "--json", input=probe).json()["senders"]
    assert {"sender": "list-id=\x1b]0;pwned\x07 \x1b[2j list", "authenticated": "", "way": "none"} in senders


def test_explain_shows_hidden_text_disguised_words_and_the_tokens_counted(home: Path) -> None:
    box = write_mbox(home / "ham.mbox", HAM)
    assert ctl(home, "train", "--ham", box).returncode == 0
    assert ctl(home, "train", "--spam", write_mbox(home / "spam.mbox", SPAM)).returncode == 0
    probe = (
        b"From: x@y.example\nSubject: free cash\nMIME-Version: 1.0\nContent-Type: text/html; charset=utf-8\n\n"
        b"<p>click fr<b></b>ee m\xd0\xbeney</p><div style='display:none'>meeting agenda minutes</div>\n"
    )
    explained = ctl(home, "explain", "-", "--json", input=probe).json()
    assert explained["hidden_by"] == ["display-none"] and explained["hidden_text"] == "meeting agenda minutes"
    assert explained["obfuscations"] == ["mixed-script", "split"]
    assert explained["tokens_counted"] == explained["tokens"] > 0
    table = ctl(home, "explain", "-", input=probe).stdout
    assert "hidden from the reader by display-none" in table and "meeting agenda minutes" in table
    assert "disguised words undone: mixed-script, split" in table and "most decisive" not in table
    (home / "decisive.toml").write_text("[model]\nhash_bits = 16\ndecisive_tokens = 3\n")
    capped = run_spamctl("--config", home / "decisive.toml", "--data-dir", home / "data", "explain", "-", input=probe)
    assert "score over the 3 most decisive of" in capped.stdout, capped.stderr


def test_explain_shows_word_salad_and_the_weight_it_was_capped_at(home: Path) -> None:
    assert ctl(home, "train", "--ham", write_mbox(home / "ham.mbox", HAM)).returncode == 0
    assert ctl(home, "train", "--spam", write_mbox(home / "spam.mbox", SPAM)).returncode == 0
    block = " ".join(f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60))  # 60 distinct words
    probe = f"From: x@y.example\nSubject: free cash\n\nClick now for free money!\n\n{block} {block}\n".encode()
    explained = ctl(home, "explain", "-", "--json", input=probe).json()
    assert (explained["salad_words"], explained["salad_distinct"], explained["salad_weight"]) == (120, 60, 3.0)
    table = ctl(home, "explain", "-", input=probe).stdout
    assert "word salad (runs of 40+ lower-case words, no punctuation): 120 words, 60 distinct" in table
    assert "weighing 3 tokens in the score (capped at 3: [model] salad_tokens)" in table
    plain = ctl(home, "explain", "-", input=b"From: x@y.example\nSubject: free cash\n\nClick now for free money!\n")
    assert "word salad" not in plain.stdout


def test_a_single_file_with_an_mbox_from_line_is_one_message_keyed_as_the_daemon_keys_it(home: Path) -> None:
    trec_style = b"From nobody@example  Fri Apr 13 14:36:03 2007\n" + SPAM[0]
    (home / "inmail.1").write_bytes(trec_style)
    assert ctl(home, "train", "--spam", home / "inmail.1", "--json").json()["learned"] == 1
    # The same bytes as a file in a Maildir (as the watcher would see them): a repeat.
    folder = write_maildir(home / "Junk", [trec_style])
    assert ctl(home, "train", "--spam", folder, "--json").json()["skipped_repeat"] == 1


def test_progress_bar_only_on_a_terminal(home: Path) -> None:
    folder = write_maildir(home / "Junk", SPAM)
    quiet = ctl(home, "train", "--spam", folder)
    assert "msg" not in quiet.stderr and quiet.stderr == ""
    main, other = pty.openpty()
    # A fresh pty is 0 columns wide, which tqdm honours by drawing nothing: size it like a terminal.
    fcntl.ioctl(other, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        done = subprocess.run(
            [*SPAMCTL, "--config", str(home / "spamd.toml"), "--data-dir", str(home / "data"), "untrain", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=other,
            timeout=60,
        )
        os.close(other)
        other = -1
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
        if other != -1:
            os.close(other)
    assert done.returncode == 0
    assert b"untraining" in shown and b"/3 " in shown


def test_training_with_the_other_label_corrects_and_untrain_removes(home: Path) -> None:
    message = home / "one.eml"
    message.write_bytes(HAM[0])
    assert ctl(home, "train", "--spam", message, "--json").json()["learned"] == 1
    assert ctl(home, "train", "--ham", message, "--json").json()["corrected"] == 1
    stats = ctl(home, "stats", "--json").json()
    assert (stats["trained_ham"], stats["trained_spam"]) == (1, 0)
    untrained = ctl(home, "untrain", message, "--json").json()
    assert untrained["unlearned"] == 1
    assert ctl(home, "untrain", message, "--json").json()["not_trained"] == 1
    stats = ctl(home, "stats", "--json").json()
    assert (stats["trained_ham"], stats["trained_spam"], stats["tokens"]) == (0, 0, 0)


def test_files_that_are_not_mail_are_reported_and_not_learned(home: Path) -> None:
    folder = write_maildir(home / "Maildir", [SPAM[0], b"", b"\x89PNG\r\n\x1a\n\x00\x00binary"])
    result = ctl(home, "train", "--spam", folder, "--json")
    assert result.returncode == 1
    report = result.json()
    assert report["learned"] == 1 and report["not_a_message"] == 2
    assert result.stderr.count("not a mail message") == 2


@pytest.mark.parametrize(
    "args, expected",
    [
        (("classify", "/nonexistent/message"), "/nonexistent/message: no such file"),
        (("train", "--spam", "/nonexistent/folder"), "/nonexistent/folder: no such file or directory"),
        (("import", "/nonexistent/backup"), "/nonexistent/backup: no such file"),
        (("reload",), "no daemon to reload"),
    ],
)
def test_errors_are_one_line_and_a_nonzero_status(home: Path, args: tuple[str, ...], expected: str) -> None:
    result = ctl(home, *args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_plain_directory_of_message_files_is_trained_as_sa_learn_takes_one(home: Path) -> None:
    plain = home / "plain"
    (plain / "nested").mkdir(parents=True)
    for i, raw in enumerate(SPAM):
        (plain / f"{i}.eml").write_bytes(raw)
    (plain / ".hidden").write_bytes(HAM[0])  # a dotfile is no message
    (plain / "nested" / "deeper.eml").write_bytes(HAM[1])  # nor is a sub-directory followed
    result = ctl(home, "train", "--spam", plain, "--json")
    assert result.returncode == 0, result.stderr
    assert result.json()["messages"] == len(SPAM) and result.json()["learned"] == len(SPAM)
    stats = ctl(home, "stats", "--json").json()
    assert (stats["trained_spam"], stats["trained_ham"]) == (len(SPAM), 0)
    lines = ctl(home, "classify", plain).stdout.splitlines()  # a line per message, as bogofilter -b
    assert [line.split()[0] for line in lines] == [str(plain / f"{i}.eml") for i in range(len(SPAM))]


def test_classify_of_many_prints_a_line_each_agreeing_with_one_at_a_time(home: Path) -> None:
    assert ctl(home, "train", "--spam", write_mbox(home / "spam.mbox", SPAM[:-1])).returncode == 0
    assert ctl(home, "train", "--ham", write_mbox(home / "ham.mbox", HAM[:-1])).returncode == 0
    files = []
    for i, raw in enumerate([SPAM[-1], HAM[-1]]):
        files.append(home / f"new{i}.eml")
        files[-1].write_bytes(raw)
    box = write_mbox(home / "both.mbox", [SPAM[-1], HAM[-1]])
    missing = ctl(home, "classify", *files, home / "missing.eml")
    assert missing.returncode == 1 and "missing.eml" in missing.stderr and not missing.stdout  # every PATH first
    result = ctl(home, "classify", *files, box)
    assert result.returncode == 0, result.stderr
    lines = [line.rsplit(" ", 3) for line in result.stdout.splitlines()]  # a name may hold spaces
    assert [line[0] for line in lines[:2]] == [str(f) for f in files] and len(lines) == 4
    for path, line in zip(files, lines[:2], strict=True):
        single = ctl(home, "classify", path, "--json").json()
        assert line[1:] == [single["verdict"], f"{single['probability']:.4f}", f"{single['score']:+.4f}"]
    assert lines[2][1:] == lines[0][1:] and lines[3][1:] == lines[1][1:]  # the same messages in the mbox
    as_json = [__import__("json").loads(line) for line in ctl(home, "classify", *files, "--json").stdout.splitlines()]
    assert [r["path"] for r in as_json] == [str(f) for f in files] and lines[0][1] == as_json[0]["verdict"]


def test_classify_of_many_names_a_message_too_large_in_its_place_and_goes_on(home: Path) -> None:
    # Read, analyzed and scored in worker processes (no daemon, two cores): the lines
    # stay in the order of the inputs, an mbox among them is split where it stands.
    paths, names, big = classify_inputs(home)
    result = ctl(home, "classify", *paths)
    assert result.returncode == 1
    assert [line.rsplit(" ", 3)[0] for line in result.stdout.splitlines()] == names
    assert f"{big}: too large" in result.stderr and result.stderr.count("\n") == 1


def test_standard_input_is_one_message_and_keyed_as_the_same_file(home: Path) -> None:
    result = ctl(home, "train", "--spam", "-", "--json", input=SPAM[0])
    assert result.returncode == 0, result.stderr
    assert result.json()["messages"] == 1 and result.json()["learned"] == 1
    (home / "same.eml").write_bytes(SPAM[0])
    assert ctl(home, "train", "--spam", home / "same.eml", "--json").json()["skipped_repeat"] == 1
    # Standard input beside files; the other label corrects it.
    (home / "other.eml").write_bytes(SPAM[1])
    mixed = ctl(home, "train", "--ham", home / "other.eml", "-", "--json", input=SPAM[0]).json()
    assert (mixed["messages"], mixed["learned"], mixed["corrected"]) == (2, 1, 1)
    assert ctl(home, "untrain", "-", "--json", input=SPAM[0]).json()["unlearned"] == 1
    twice = ctl(home, "train", "--spam", "-", "-", input=SPAM[0])
    assert twice.returncode == 1 and "only once" in twice.stderr


def test_an_mbox_on_standard_input_is_split_and_leaves_no_spool_file(home: Path) -> None:
    box = write_mbox(home / "ham.mbox", HAM).read_bytes()
    env_tmp = home / "tmp"
    env_tmp.mkdir()
    spamctl = [*SPAMCTL, "--config", str(home / "spamd.toml"), "--data-dir", str(home / "data")]
    env = {**os.environ, "TMPDIR": str(env_tmp)}
    done = subprocess.run(
        [*spamctl, "train", "--ham", "-", "--json"], input=box, capture_output=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert b'"learned": 3' in done.stdout
    assert list(env_tmp.iterdir()) == []
    # The same mbox as a file: every message a repeat (the same keys).
    assert ctl(home, "train", "--ham", home / "ham.mbox", "--json").json()["skipped_repeat"] == len(HAM)
    # A bad PATH after '-' trains nothing and leaves no spool file.
    failed = subprocess.run(
        [*spamctl, "train", "--ham", "-", "/nonexistent"], input=box, capture_output=True, timeout=60, env=env
    )
    assert failed.returncode == 1 and b"/nonexistent: no such file" in failed.stderr
    assert list(env_tmp.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_is_one_line(home: Path) -> None:
    message = home / "secret.eml"
    message.write_bytes(SPAM[0])
    message.chmod(0)
    result = ctl(home, "classify", message)
    assert result.returncode == 1 and "permission denied" in result.stderr


def test_bad_config_is_one_line(home: Path) -> None:
    (home / "bad.toml").write_text("[model]\nhash_bits = 'many'\n")
    result = run_spamctl("--config", home / "bad.toml", "stats")
    assert result.returncode == 1 and "hash_bits" in result.stderr and result.stderr.count("\n") == 1


def test_a_held_lock_with_no_socket_answering_is_explained(home: Path) -> None:
    engine = open_engine(home)  # stands where a hung daemon would: holding the state lock
    try:
        # A socket file that nobody listens on, as a killed daemon leaves it.
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(home / "data" / "control.sock"))
        stale.close()
        result = ctl(home, "stats")
    finally:
        engine.close()
    assert result.returncode == 1
    assert "locked by a running spamd" in result.stderr and "nothing answers" in result.stderr
    assert ctl(home, "stats").returncode == 0  # stale socket, lock free: offline works


def test_snapshot_persists_and_journal_is_folded(home: Path) -> None:
    write_maildir(home / "Junk", SPAM)
    ctl(home, "train", "--spam", home / "Junk")
    result = ctl(home, "snapshot", "--json")
    assert result.returncode == 0, result.stderr
    path = Path(result.json()["path"])
    assert path.exists() and path.parent == home / "data" / "state"
    stats = ctl(home, "stats", "--json").json()
    assert stats["snapshot_seq"] == stats["journal_seq"] == len(SPAM)
    assert stats["journal_records"] == 0 and stats["snapshot_bytes"] == path.stat().st_size


def test_export_then_import_into_another_state_directory(home: Path) -> None:
    write_maildir(home / "Junk", SPAM)
    write_maildir(home / "Inbox", HAM)
    ctl(home, "train", "--spam", home / "Junk")
    ctl(home, "train", "--ham", home / "Inbox")
    exported = ctl(home, "export", home / "backup.spamd", "--json")
    assert exported.returncode == 0, exported.stderr
    assert exported.json()["bytes"] == (home / "backup.spamd").stat().st_size

    other: list[str | Path] = ["--config", home / "spamd.toml", "--data-dir", home / "other"]
    # The target has its own history: a longer journal than the export's seq.
    for raw in HAM + SPAM:
        (home / "x.eml").write_bytes(raw + b"\nlocal\n")
        run_spamctl(*other, "train", "--ham", home / "x.eml")
    imported = run_spamctl(*other, "import", home / "backup.spamd", "--json")
    assert imported.returncode == 0, imported.stderr
    result = imported.json()
    assert (result["trained_ham"], result["trained_spam"]) == (len(HAM), len(SPAM))
    assert result["seq"] > len(HAM + SPAM)  # past the target's own journal
    # Nothing older is replayed over it on the next open, and training carries on from it.
    again = run_spamctl(*other, "train", "--spam", home / "Junk", "--json").json()
    assert again["skipped_repeat"] == len(SPAM)
    source, target = (
        open_engine(home),
        Engine.open(load_config(home / "spamd.toml", data_dir=home / "other"), durable=False),
    )
    try:
        assert source.model.state_equals(h.local_model(target))
        assert h.local_ledger(source).equals(h.local_ledger(target))
    finally:
        source.close()
        target.close()


def test_import_is_verified_before_anything_changes(home: Path) -> None:
    write_maildir(home / "Junk", SPAM)
    ctl(home, "train", "--spam", home / "Junk")
    ctl(home, "export", home / "backup.spamd")
    damaged = bytearray((home / "backup.spamd").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (home / "damaged.spamd").write_bytes(bytes(damaged))
    before = ctl(home, "stats", "--json").json()
    for name, expected in (("damaged.spamd", "nothing changed"), ("spam0.eml", "nothing changed")):
        if name == "spam0.eml":
            (home / name).write_bytes(SPAM[0])
        result = ctl(home, "import", home / name)
        assert result.returncode == 1 and expected in result.stderr and result.stderr.count("\n") == 1
    after = ctl(home, "stats", "--json").json()
    assert (after["trained_spam"], after["journal_seq"]) == (before["trained_spam"], before["journal_seq"])


def test_import_with_other_hash_bits_is_refused(home: Path) -> None:
    write_maildir(home / "Junk", SPAM)
    ctl(home, "train", "--spam", home / "Junk")
    ctl(home, "export", home / "backup.spamd")
    (home / "wide.toml").write_text("[model]\nhash_bits = 17\n")
    result = run_spamctl("--config", home / "wide.toml", "--data-dir", home / "wide", "import", home / "backup.spamd")
    assert result.returncode == 1
    assert "hash_bits = 16" in result.stderr and "17" in result.stderr and "nothing changed" in result.stderr


def test_all_time_scored_counts_survive_a_snapshot(home: Path) -> None:
    config = load_config(home / "spamd.toml", data_dir=home / "data")
    engine = Engine.open(replace(config), durable=False)
    engine.train(SPAM[0], Label.SPAM, "test")
    engine.train(HAM[0], Label.HAM, "test")
    engine.snapshot()
    assert not engine.has_unsaved_state()
    engine.classify(SPAM[1])
    engine.classify(HAM[1])
    assert engine.has_unsaved_state()  # only the scored counts: still worth a snapshot at shutdown
    engine.snapshot()
    assert not engine.has_unsaved_state()
    engine.close()
    stats = ctl(home, "stats", "--json").json()
    assert stats["messages_scored_all_time"] == 2


def test_eval_is_registered() -> None:
    result = run_spamctl("eval", "--help")
    assert result.returncode == 0
    assert "--results" in result.stdout and "--plot" in result.stdout


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.sampled_from(
            [b"From a@b Mon Jan  1 00:00:00 2024", b"From:x", b"", b"text", b">From quoted", b"F", b"rom "]
        ),
        max_size=12,
    ),
    long_first_line=st.none() | st.integers(min_value=0, max_value=6),
)
def test_the_quick_several_messages_check_agrees_with_mailbox(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], long_first_line: int | None
) -> None:
    data = b"\n".join(lines)
    if long_first_line is not None:
        # The check reads 5 bytes, then 1 MiB chunks: with these lengths the second line's
        # "\nFrom " starts 0 to 6 bytes before the first chunk's end (across it for 1 to 5).
        first = b"From a@b Mon Jan  1 00:00:00 2024 ".ljust((1 << 20) + 5 - long_first_line, b"x")
        data = first + b"\n" + data
    path = tmp_path_factory.mktemp("mbox") / "box"
    path.write_bytes(data)
    with open(path, "rb") as f:
        quick = holds_several_mbox_messages(f)
    box = mailbox.mbox(str(path), create=False)
    assert quick == (data.startswith(b"From ") and len(box) > 1)
    box.close()


def _threads_after_importing_numpy(environment: dict[str, str]) -> int:
    probe = "import spamd, numpy, os; print(len(os.listdir('/proc/self/task')))"
    done = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)")
def test_spamd_processes_start_no_blas_threads_unless_the_admin_asks():
    # OpenBLAS's thread per core spun ~0.1 s of CPU at every process start, for nothing.
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _threads_after_importing_numpy(environment) == 1
    if len(os.sched_getaffinity(0)) > 1:  # an admin's own setting still starts OpenBLAS's threads
        assert _threads_after_importing_numpy({**environment, "OPENBLAS_NUM_THREADS": "2"}) == 2


def test_spamd_processes_start_without_importing_rich_and_log_plain_tracebacks():
    # structlog imports rich whenever it is installed (the test extras bring it): 80-150 ms of
    # every start, for a traceback renderer spamd's logs do not use.
    pytest.importorskip("rich")  # without it there is nothing to keep out
    probe = (
        "import sys, io, spamd, structlog\n"
        "from spamd.config import LogConfig\n"
        "from spamd.runtime.logs import configure_logging\n"
        "print('rich' in sys.modules)\n"
        "out = io.StringIO()\n"
        "configure_logging(LogConfig(format='console'), out)\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    structlog.get_logger().exception('failed')\n"
        "print('Traceback (most recent call last)' in out.getvalue(), 'ZeroDivisionError' in out.getvalue())\n"
        "import rich\n"  # still importable for whatever else wants it
        "print('rich' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "True", "True"]


def test_bulk_workers_share_the_suffix_list_their_parent_loaded_before_forking(home: Path) -> None:
    import multiprocessing

    from spamd.learning.classifier import AnalysisWorkers
    from spamd.mail import domains

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("only forked workers share their parent's pages")
    domains._suffix_list.cache_clear()
    with AnalysisWorkers(load_config(None), 1):
        # Loaded here once, rather than by each worker at its first message (50-100 ms each).
        assert domains._suffix_list.cache_info().currsize == 1


def test_classify_of_many_files_for_a_user_scores_each_with_their_layer_as_one_file_does(home: Path) -> None:
    """The bulk path (worker processes) scores for --user exactly as one message at a time does."""
    from tests.daemon_helpers import list_digest, make_message

    mail = home / "mail"
    mail.mkdir()
    files = {}
    for label in (Label.SPAM, Label.HAM):
        for i in range(4):
            files[f"{label}{i}"] = mail / f"{label}{i}.eml"
            files[f"{label}{i}"].write_bytes(make_message(label, i))
    for n in range(8):
        files[f"list{n}"] = mail / f"list{n}.eml"
        files[f"list{n}"].write_bytes(list_digest(n))
    assert ctl(home, "train", "--spam", *(files[f"spam{i}"] for i in range(4))).returncode == 0
    assert (
        ctl(
            home, "train", "--ham", *(files[f"ham{i}"] for i in range(4)), *(files[f"list{n}"] for n in range(4))
        ).returncode
        == 0
    )
    assert ctl(home, "train", "--spam", "--user", "alice", *(files[f"list{n}"] for n in range(4, 7))).returncode == 0
    assert ctl(home, "train", "--ham", "--user", "alice", files["ham2"], files["ham3"]).returncode == 0  # both classes
    probes = [files["list7"], files["spam0"], files["ham1"]]

    def fields(line: str) -> tuple:
        result = json.loads(line)
        return result["verdict"], result["probability"], result["score"]

    many = [fields(line) for line in ctl(home, "--json", "classify", "--user", "alice", *probes).stdout.splitlines()]
    one_at_a_time = [fields(ctl(home, "--json", "classify", "--user", "alice", p).stdout) for p in probes]
    shared = [fields(line) for line in ctl(home, "--json", "classify", *probes).stdout.splitlines()]
    assert many == one_at_a_time
    assert many[0][2] > shared[0][2]  # her trainings turned the list's next copy towards spam (spamd/people/senders.py)
