"""SpamAssassin's spamc protocol: Debian's spamc, aiospamc and Exim's request framing against a real spamd.

spamd runs as a subprocess with `--spamc 127.0.0.1:0`, trained through spamctl;
spamc is /usr/bin/spamc; Exim's request is written by hand and its answer read
with Exim's own sscanf formats. Verdicts and points are checked against
`spamctl classify` on the same running daemon.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import zlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.config import load_config
from spamd.errors import ConfigError
from spamd.frontends.spamc import Ex, Request, RequestParser, SpamcRequestError, sa_score, shown_score, symbol_name
from spamd.model import Label, Score, Verdict
from tests.daemon_helpers import daemon_config, make_message, running, train, wait_until_sync
from tests.spamc_helpers import (
    SPAMC,
    SpamcDaemon,
    exim_parse,
    mixed_message,
    needs_spamc,
    raw_exchange,
    request,
    start_spamd,
    stats_counts,
)

_SCORE_LINE = re.compile(rb"^(-?\d+\.\d)/(-?\d+\.\d)\n")


@pytest.fixture(scope="module")
def spamd(tmp_path_factory) -> Iterator[SpamcDaemon]:
    """One trained spamd with TELL allowed, shared by the tests that only read or train distinct messages."""
    daemon = start_spamd(tmp_path_factory.mktemp("spamc"), "allow_tell = true\n")
    try:
        yield daemon
        assert daemon.process.proc.poll() is None, "spamd died:\n" + "\n".join(daemon.process.lines[-20:])
        assert not daemon.process.events("spamc_request_failed")
    finally:
        daemon.process.kill()


def verdict_of(spamd: SpamcDaemon, raw: bytes) -> tuple[Score, tuple[str, str]]:
    """spamctl's verdict for a message, and the points spamc must show for it."""
    result = spamd.classify(raw)
    score = Score(result["score"], result["probability"], Verdict(result["verdict"]))
    return score, shown_score(score, 0.25, 0.75, 5.0)


SAMPLES = [
    make_message(Label.SPAM, 500),
    make_message(Label.HAM, 500),
    *[mixed_message(i, spam, 40 - spam) for i, spam in enumerate((8, 12, 16, 20, 24, 28, 32))],
]


# ---------------------------------------------------------------- Debian's spamc


@needs_spamc
def test_check_exit_code_and_points_agree_with_spamctl_classify(spamd):
    verdicts = set()
    for raw in SAMPLES:
        score, (points, required) = verdict_of(spamd, raw)
        verdicts.add(score.verdict)
        done = spamd.spamc("-c", input=raw)
        # spamc -c: exit 1 for spam, 0 otherwise; stdout "points/threshold".
        assert done.returncode == (1 if score.verdict is Verdict.SPAM else 0), (score, done)
        assert done.stdout == f"{points}/{required}\n".encode()
        assert (float(points) >= float(required)) == (score.verdict is Verdict.SPAM)
    assert {Verdict.SPAM, Verdict.HAM} <= verdicts, verdicts


@needs_spamc
def test_process_adds_the_same_headers_as_smtp_and_headers_mode_matches(spamd):
    raw = make_message(Label.SPAM, 501)
    score, _ = verdict_of(spamd, raw)
    done = spamd.spamc(input=raw)
    assert done.returncode == 0
    out = done.stdout
    assert out.endswith(raw), "the message after spamd's headers, byte for byte"
    head = out[: -len(raw)].decode()
    assert head.startswith(f"X-Spam-Status: Yes, score={score.probability:.4f} ")
    assert f"X-Spam-Score: {score.probability:.4f}\n" in head and "X-Spam-Flag: YES\n" in head
    # HEADERS: spamd answers the header block, spamc appends the original body.
    assert spamd.spamc("--headers", input=raw).stdout == out
    # -E: exit 1 for spam when filtering too.
    assert spamd.spamc("-E", input=raw).returncode == 1
    # A message already carrying an earlier verdict gets it replaced, not doubled.
    again = spamd.spamc(input=out).stdout
    assert again == out


@needs_spamc
def test_report_and_symbols_name_the_tokens_spamctl_explain_names(spamd):
    raw = make_message(Label.SPAM, 502)
    score, (points, required) = verdict_of(spamd, raw)
    explained = spamd.explain(raw)
    top = explained["toward_spam"][0]["token"]
    done = spamd.spamc("-R", input=raw)
    assert done.returncode == 0
    assert done.stdout.startswith(f"{points}/{required}\n".encode())
    report = done.stdout.decode()
    assert "spamd classified this message as spam" in report
    assert f"{explained['toward_spam'][0]['weight']:+7.3f} {top}" in report
    assert "toward ham:" in report
    # -y: the verdict and the strongest tokens as rule names.
    symbols = spamd.spamc("-y", input=raw).stdout.decode().split(",")
    assert symbols[0] == "SPAMD_SPAM"
    assert symbol_name("SPAMMY", top) in symbols
    assert all(re.fullmatch(r"[A-Z0-9_]+", s) for s in symbols), symbols
    # -r: points and report only for spam; nothing at all for anything else.
    assert spamd.spamc("-r", input=raw).stdout.startswith(f"{points}/{required}\nspamd classified".encode())
    ham = make_message(Label.HAM, 502)
    assert verdict_of(spamd, ham)[0].verdict is Verdict.HAM
    assert spamd.spamc("-r", input=ham).stdout == b""


@needs_spamc
def test_ping_and_user(spamd):
    done = spamd.spamc("-K")
    assert (done.returncode, done.stdout) == (0, b"SPAMD/1.5 0\n")
    raw = make_message(Label.HAM, 503)
    assert spamd.spamc("-u", "alice", "-c", input=raw).returncode == 0
    lines = wait_until_sync(lambda: [e for e in spamd.process.events("message_scored") if e.get("client_user") == "alice"])
    assert lines[0]["via"] == "spamc" and lines[0]["command"] == "CHECK"


@needs_spamc
def test_tell_learns_once_corrects_once_and_forgets(spamd):
    raw = make_message(Label.SPAM, 504, seed=5)
    before = stats_counts(spamd.stats())

    def learn(kind: str) -> bytes:
        done = spamd.spamc("-L", kind, input=raw)
        assert done.returncode == 0, done
        return done.stdout

    assert learn("spam") == b"Message successfully un/learned\n"
    assert stats_counts(spamd.stats()) == (before[0] + 1, before[1], before[2] + 1)
    assert learn("spam") == b"Message was already un/learned\n"  # a repeat changes nothing
    assert stats_counts(spamd.stats()) == (before[0] + 1, before[1], before[2] + 1)
    assert learn("ham") == b"Message successfully un/learned\n"  # a correction moves it once
    assert stats_counts(spamd.stats()) == (before[0], before[1] + 1, before[2] + 1)
    assert learn("ham") == b"Message was already un/learned\n"
    assert learn("forget") == b"Message successfully un/learned\n"
    assert stats_counts(spamd.stats()) == before
    assert learn("forget") == b"Message was already un/learned\n"
    assert stats_counts(spamd.stats()) == before
    events = spamd.stats()["training_events"]
    assert events["spamc:learned"] >= 1 and events["spamc:corrected"] >= 1 and events["spamc:unlearned"] >= 1


def _port_free(port: int) -> str:
    """Why a loopback port cannot be listened on, or "" if it can."""
    try:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    except OSError as e:
        return f"cannot listen on 127.0.0.1:{port}: {e.strerror}"
    return ""


@needs_spamc
def test_dovecot_training_scripts_work_unchanged(tmp_path):
    # Dovecot's IMAPSieve training scripts as its documentation publishes them
    # ("Antispam with IMAPSieve", sa-learn-spam.sh / sa-learn-ham.sh with spamc): no
    # address given, so spamc goes to its default, localhost:783. spamd listens there.
    if why := _port_free(783):
        pytest.skip(f"{why} (spamc's default port; binding it needs root)")
    scripts = {}
    for kind in ("spam", "ham"):
        script = tmp_path / f"sa-learn-{kind}.sh"
        script.write_text(f"#!/bin/sh\nexec /usr/bin/spamc -u ${{1}} -L {kind}\n")
        script.chmod(0o755)
        scripts[kind] = script
    daemon = start_spamd(tmp_path / "d", "allow_tell = true\n", listen="127.0.0.1:783", train=False)
    try:
        raw = make_message(Label.SPAM, 506, seed=5)

        def run(kind: str) -> bytes:
            # As Dovecot's sieve_extprograms runs them: the user as $1, the message on stdin.
            done = subprocess.run([str(scripts[kind]), "jane"], input=raw, capture_output=True, timeout=30)
            assert done.returncode == 0, done
            return done.stdout

        assert run("spam") == b"Message successfully un/learned\n"
        assert stats_counts(daemon.stats()) == (1, 0, 1)
        assert run("spam") == b"Message was already un/learned\n"
        assert run("ham") == b"Message successfully un/learned\n"
        assert stats_counts(daemon.stats()) == (0, 1, 1)
        trained = wait_until_sync(lambda: daemon.process.events("training_applied")[2:])
        assert trained[0]["client_user"] == "jane" and trained[0]["source"] == "spamc"
        assert daemon.stop() == 0
    finally:
        daemon.process.kill()
