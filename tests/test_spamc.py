"""SpamAssassin's spamc protocol: Debian's spamc, aiospamc and Exim's request framing against a real spamd.

spamd runs as a subprocess with `--spamc 127.0.0.1:0`, trained through spamctl;
spamc is /usr/bin/spamc; Exim 4.96 runs its `spam =` ACL condition against it
(`exim -bh`, unpacked by .ci/unpack-exim), and Exim's request is also written by
hand and its answer read with Exim's own sscanf formats. Verdicts and points are
checked against `spamctl classify` on the same running daemon.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import socket
import subprocess
import tomllib
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamd.config import ModelConfig, SpamcConfig, load_config
from spamd.daemon import Daemon
from spamd.errors import ConfigError
from spamd.frontends.spamc.answers import shown_score, symbol_name
from spamd.model.bayes import Label, Score, Verdict
from tests.daemon_helpers import daemon_config, engine_of, make_message, running, spamc_port, train, wait_until_sync
from tests.spamc_helpers import (
    SpamcDaemon,
    exim_parse,
    exim_unavailable,
    mixed_message,
    needs_spamc,
    raw_exchange,
    request,
    run_exim,
    start_spamd,
    stats_counts,
)


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
    model = ModelConfig()  # the daemon runs on the default thresholds
    return score, shown_score(score, model.ham_threshold, model.spam_threshold, 5.0)


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
    # The control-socket answer used above is spamctl classify's own, to the digit.
    done = spamd.spamctl("classify", "--json", "-", input=SAMPLES[-1])
    assert done.returncode == 0 and done.json() == spamd.classify(SAMPLES[-1])


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
    lines = wait_until_sync(
        lambda: [e for e in spamd.process.events("message_scored") if e.get("client_user") == "alice"]
    )
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


# ---------------------------------------------------------------- Exim and hand-written requests


def test_exims_request_gets_the_answer_exim_parses(spamd):
    # src/spam.c: "REPORT SPAMC/1.2\r\nUser: %s\r\nContent-length: %ld\r\n\r\n", the spool
    # file, shutdown(SHUT_WR), read to EOF; anything its two sscanf formats miss is a DEFER.
    for raw in SAMPLES:
        message = raw.replace(b"\n", b"\r\n")
        answer = raw_exchange(
            spamd.port, b"REPORT SPAMC/1.2\r\nUser: nobody\r\nContent-length: %d\r\n\r\n%s" % (len(message), message)
        )
        parsed = exim_parse(answer)
        assert parsed is not None, answer[:200]
        score, threshold, report = parsed
        verdict = spamd.classify(message)["verdict"]
        # Exim: spam_rc = spamd_score >= spamd_threshold ? OK : FAIL.
        assert (score >= threshold) == (verdict == "spam"), (score, threshold, verdict)
        assert threshold == 5.0
        assert report.startswith(b"spamd classified this message as ")
        assert answer.startswith(b"SPAMD/1.1 0 EX_OK\r\nSpam: ")


EXIM_ACL = """\
spamd_address = 127.0.0.1 {port}
acl_smtp_rcpt = acl_rcpt
acl_smtp_data = acl_data
begin acl
acl_rcpt:
  accept
acl_data:
  warn  spam = nobody:true
        log_message = spamd said score=$spam_score threshold_action=$spam_action report_lists_tokens=${{if match{{$spam_report}}{{toward spam:}}{{yes}}{{no}}}}
  deny  spam = nobody
        message = rejected as spam, score $spam_score
  accept
begin routers
begin transports
"""


def exim_dialog(raw: bytes) -> bytes:
    body = raw.replace(b"\n", b"\r\n")
    return (
        b"HELO client.example\r\nMAIL FROM:<a@example.org>\r\nRCPT TO:<user@test.example>\r\nDATA\r\n"
        + body
        + b".\r\nQUIT\r\n"
    )


def test_exim_spam_acl_end_to_end(spamd):
    # Debian's Exim 4.96 (exim4-daemon-heavy, unpacked by .ci/unpack-exim) runs a real SMTP
    # dialogue through its ACLs (-bh): `spam = nobody:true` sets $spam_score from spamd,
    # `spam = nobody` rejects what spamd calls spam.
    if why := exim_unavailable():
        pytest.skip(why)
    rejected = set()
    for raw in (make_message(Label.SPAM, 530), make_message(Label.HAM, 530), *SAMPLES[2:]):
        done = run_exim(EXIM_ACL.format(port=spamd.port), exim_dialog(raw))
        out = done.stdout.decode() + done.stderr.decode()
        assert "cannot parse spamd" not in out and "DEFER" not in out, out[-3000:]
        m = re.search(r"spamd said score=(-?\d+\.\d) threshold_action=(reject|no action) report_lists_tokens=yes", out)
        assert m is not None, out[-3000:]
        # Exim scans the message as it will deliver it, with its own Received: header on
        # top, so the points are those of that message; what Exim does with them must
        # follow spamd's line: reject from 5.0 up, accept below.
        spam = float(m.group(1)) >= 5.0
        assert (m.group(2) == "reject") == spam
        if spam:
            assert f"550 rejected as spam, score {m.group(1)}\r\n" in out
        else:
            assert "250 Accepted\r\n" in out and "550 " not in out, out[-3000:]
        rejected.add(spam)
    assert rejected == {True, False}
    # The clear cases are spamctl's verdicts too.
    assert verdict_of(spamd, make_message(Label.SPAM, 530))[0].verdict is Verdict.SPAM
    assert verdict_of(spamd, make_message(Label.HAM, 530))[0].verdict is Verdict.HAM


def test_protocol_versions_frame_answers_as_spamassassin_does(spamd):
    raw = make_message(Label.SPAM, 510)
    _, (points, required) = verdict_of(spamd, raw)
    spam = f"Spam: True ; {points} / {required}\r\n".encode()
    # CHECK: the Spam header alone, at every version.
    assert raw_exchange(spamd.port, request("CHECK", raw)) == b"SPAMD/1.1 0 EX_OK\r\n" + spam + b"\r\n"
    # PROCESS 1.5: Content-length and Spam; 1.2: Content-length only; 1.0: no headers, body to EOF.
    answer = raw_exchange(spamd.port, request("PROCESS", raw))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head == b"SPAMD/1.1 0 EX_OK\r\nContent-length: %d\r\n" % len(body) + spam.rstrip(b"\r\n")
    assert body.endswith(raw) and body.startswith(b"X-Spam-Status: Yes")
    assert (
        raw_exchange(spamd.port, request("PROCESS", raw, version="1.2"))
        == b"SPAMD/1.1 0 EX_OK\r\nContent-length: %d\r\n\r\n" % len(body) + body
    )
    assert raw_exchange(spamd.port, b"PROCESS SPAMC/1.0\r\n" + raw) == b"SPAMD/1.0 0 EX_OK\r\n" + body
    # SYMBOLS before 1.3 ends its line with CRLF; from 1.3 on it does not.
    old = raw_exchange(spamd.port, request("SYMBOLS", raw, version="1.2"))
    assert old.startswith(b"SPAMD/1.1 0 EX_OK\r\n" + spam + b"\r\nSPAMD_SPAM,") and old.endswith(b"\r\n")
    new = raw_exchange(spamd.port, request("SYMBOLS", raw))
    assert not new.endswith(b"\n")
    # HEADERS: up to and including the empty line after the header.
    headers = raw_exchange(spamd.port, request("HEADERS", raw)).partition(b"\r\n\r\n")[2]
    assert headers == body[: body.index(b"\n\n") + 2]
    # PING before 1.5 has no header block; SKIP gets no answer at all.
    assert raw_exchange(spamd.port, b"PING SPAMC/1.2\r\n", half_close=False) == b"SPAMD/1.5 0 PONG\r\n"
    assert raw_exchange(spamd.port, b"PING SPAMC/1.5\r\n\r\n") == b"SPAMD/1.5 0 PONG\r\n"
    assert raw_exchange(spamd.port, b"SKIP SPAMC/1.5\r\n\r\n") == b""
    # Without shutting down its side, a client that sent Content-length is answered at once.
    assert raw_exchange(spamd.port, request("CHECK", raw), half_close=False).startswith(
        b"SPAMD/1.1 0 EX_OK\r\nSpam: True"
    )


def test_compressed_requests_are_inflated_and_damaged_ones_refused(spamd):
    # Debian's spamc is built without zlib ("spamc -z support not available"): the request is
    # framed as libspamc frames it with -z.
    raw = make_message(Label.SPAM, 511)
    plain = raw_exchange(spamd.port, request("CHECK", raw))
    packed = zlib.compress(raw)
    assert raw_exchange(spamd.port, request("CHECK", packed, headers={"Compress": "zlib"})) == plain
    answer = raw_exchange(spamd.port, request("PROCESS", packed, headers={"Compress": "zlib"}))
    assert answer.endswith(raw), "answers are not compressed: no client inflates one"
    assert raw_exchange(spamd.port, request("CHECK", b"not zlib at all", headers={"Compress": "zlib"})).startswith(
        b"SPAMD/1.0 65 "
    )
    assert raw_exchange(spamd.port, request("CHECK", packed[:-6], headers={"Compress": "zlib"})).startswith(
        b"SPAMD/1.0 65 "
    )
    assert raw_exchange(spamd.port, request("CHECK", raw, headers={"Compress": "gzip"})).startswith(b"SPAMD/1.0 76 ")
    assert raw_exchange(spamd.port, request("CHECK", packed, headers={"Compress": "zlib"}, length=False)).startswith(
        b"SPAMD/1.0 76 "
    )


def test_malformed_requests_get_their_ex_code(spamd):
    raw = make_message(Label.HAM, 512)
    cases = {
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n": 76,
        b"CHECK SPAMC/x.y\r\n\r\n": 76,
        b"CHECK SPAMC/1.5\r\nno colon here\r\n\r\n" + raw: 76,
        b"CHECK SPAMC/1.5\r\nContent-length: 12ab\r\n\r\n" + raw: 76,
        b"CHECK SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % (len(raw) + 10) + raw: 76,  # mismatch at EOF
        b"CHECK SPAMC/1.5\r\nUser: a\x01b\r\n\r\n" + raw: 76,
        b"CHECK SPAMC/1.5\r\nContent-length: 5": 76,  # EOF during headers
        b"": 76,  # closed before headers
        b"CHECK SPAMC/1.5\r\n" + b"X-Junk: 1\r\n" * 300 + b"\r\n": 76,
        b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\nRemove: local\r\nContent-length: %d\r\n\r\n" % len(raw)
        + raw: 76,
        b"TELL SPAMC/1.5\r\nMessage-class: maybe\r\nSet: local\r\nContent-length: %d\r\n\r\n" % len(raw) + raw: 76,
        b"TELL SPAMC/1.5\r\nSet: local\r\nContent-length: %d\r\n\r\n" % len(raw) + raw: 76,
        b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\nContent-length: 9\r\n\r\n\x89PNG\r\n\x1a\n\x00": 65,
    }
    before = stats_counts(spamd.stats())
    for data, code in cases.items():
        answer = raw_exchange(spamd.port, data)
        assert re.fullmatch(rb"SPAMD/1\.0 %d [ -~]+\r\n" % code, answer), (data[:60], answer)
    assert stats_counts(spamd.stats()) == before, "nothing learned from a malformed TELL"


@needs_spamc
def test_tell_is_refused_unless_allowed(tmp_path):
    daemon = start_spamd(tmp_path, "", train=False)
    try:
        raw = make_message(Label.SPAM, 513)
        # As SpamAssassin's spamd without --allow-tell: 69 EX_UNAVAILABLE, nothing learned.
        answer = raw_exchange(daemon.port, request("TELL", raw, headers={"Message-class": "spam", "Set": "local"}))
        assert (
            answer
            == b"SPAMD/1.0 69 Service Unavailable: TELL commands are not enabled, set [spamc] allow_tell = true\r\n"
        )
        done = daemon.spamc("-L", "spam", input=raw)
        assert done.returncode != 0 and b"successfully" not in done.stdout
        assert stats_counts(daemon.stats()) == (0, 0, 0)
        assert daemon.spamc("-c", input=raw).returncode == 0  # scoring is served all the same
    finally:
        daemon.process.kill()


@needs_spamc
def test_tell_is_durable_when_acknowledged(tmp_path):
    # SIGKILL right after spamc reports the learning: the restarted spamd holds it.
    daemon = start_spamd(tmp_path, "allow_tell = true\n", train=False)
    try:
        for i in range(5):
            done = daemon.spamc("-L", "spam" if i % 2 else "ham", input=make_message(Label.SPAM, 520 + i))
            assert done.stdout == b"Message successfully un/learned\n"
        daemon.process.kill()
        offline = daemon.stats()
        assert offline["mode"] == "offline" and stats_counts(offline) == (2, 3, 5)
    finally:
        daemon.process.kill()


def test_peers_outside_the_allow_list_are_refused_and_the_listener_is_off_by_default(tmp_path):
    async def scenario() -> None:
        config = daemon_config(tmp_path / "a", smtp=dict(allowed_peers=("::1",)), spamc=dict(listen="127.0.0.1:0"))
        async with running(config) as daemon:
            port = spamc_port(daemon)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request("PING", version="1.5"))
            assert (
                await asyncio.wait_for(reader.read(), 10)
                == b"SPAMD/1.0 77 connections from 127.0.0.1 are not accepted\r\n"
            )
            writer.close()
        async with running(daemon_config(tmp_path / "b")) as daemon:
            assert daemon.spamc is None and daemon.stats()["daemon"]["spamc_listen"] is None

    asyncio.run(scenario())


async def exchange_async(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def test_a_reload_applies_spamc_settings_to_the_next_connection(tmp_path):
    path = tmp_path / "spamd.toml"
    path.write_text('[model]\nhash_bits = 16\n[maildir]\nfsync = false\n[spamc]\nlisten = "127.0.0.1:0"\n')

    async def scenario() -> None:
        daemon = Daemon(path, data_dir=tmp_path / "data", smtp_listen="127.0.0.1:0", install_signals=False)
        try:
            await daemon.startup()
            port = spamc_port(daemon)
            tell = request("TELL", make_message(Label.SPAM, 800), headers={"Message-class": "spam", "Set": "local"})
            assert (await exchange_async(port, tell)).startswith(b"SPAMD/1.0 69 ")
            path.write_text(
                path.read_text().replace(
                    'listen = "127.0.0.1:0"', 'listen = "127.0.0.1:9"\nallow_tell = true\nrequired_score = 6.0'
                )
            )
            result = await daemon.reload()
            assert result["applied"] == {"spamc.allow_tell": [False, True], "spamc.required_score": [5.0, 6.0]}
            assert result["needs_restart"] == ["spamc.listen"]
            assert await exchange_async(port, tell) == b"SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\n\r\n"
            check = await exchange_async(port, request("CHECK", make_message(Label.SPAM, 800)))
            assert check.startswith(b"SPAMD/1.1 0 EX_OK\r\nSpam: ") and check.endswith(b" / 6.0\r\n\r\n")
        finally:
            daemon.request_exit()
            await daemon.shutdown()

    asyncio.run(scenario())


def test_config_keys_and_command_line(tmp_path):
    path = tmp_path / "spamd.toml"
    path.write_text('[spamc]\nlisten = "127.0.0.1:7830"\nallow_tell = true\nrequired_score = 6.0\n')
    config = load_config(path)
    assert (config.spamc.listen, config.spamc.allow_tell, config.spamc.required_score) == ("127.0.0.1:7830", True, 6.0)
    assert config.spamc_allowed_peers == config.smtp.allowed_peers == ("127.0.0.1", "::1")
    assert config.spamc_max_message_bytes == config.smtp.max_message_bytes
    assert load_config(path, spamc_listen="[::1]:783").spamc.listen == "[::1]:783"
    assert load_config().spamc.listen == ""  # off unless asked for
    for bad in ('listen = "783"', "max_connections = 0", "idle_timeout_s = 0", "allow_tell = 1"):
        path.write_text(f"[spamc]\n{bad}\n")
        with pytest.raises(ConfigError, match="spamc"):
            load_config(path)
    with pytest.raises(ConfigError, match="--spamc"):
        load_config(None, spamc_listen="localhost")


# ---------------------------------------------------------------- aiospamc


def test_aiospamc_every_command(tmp_path):
    aiospamc = pytest.importorskip("aiospamc")
    from aiospamc.responses import ProtocolException
    from loguru import logger

    logger.remove()  # aiospamc logs every request through loguru to stderr

    async def scenario() -> None:
        config = daemon_config(tmp_path, spamc=dict(listen="127.0.0.1:0", allow_tell=True))
        async with running(config) as daemon:
            train(daemon)
            where = {"host": "127.0.0.1", "port": spamc_port(daemon)}
            spam, ham = make_message(Label.SPAM, 600), make_message(Label.HAM, 600)
            assert (await aiospamc.ping(**where)).message == "PONG"
            for compress in (False, True):
                for raw, is_spam in ((spam, True), (ham, False)):
                    check = await aiospamc.check(raw, compress=compress, user="bob", **where)
                    value = check.headers["Spam"]
                    assert (value.value, value.threshold) == (is_spam, 5.0)
                    assert (value.score >= value.threshold) == is_spam
                    processed = await aiospamc.process(raw, compress=compress, **where)
                    assert processed.body.endswith(raw) and processed.body.startswith(b"X-Spam-Status: ")
                    headers = await aiospamc.headers(raw, compress=compress, **where)
                    assert processed.body.startswith(headers.body) and headers.body.endswith(b"\n\n")
                    symbols = await aiospamc.symbols(raw, compress=compress, **where)
                    assert symbols.body.startswith(b"SPAMD_SPAM," if is_spam else b"SPAMD_HAM,")
                    report = await aiospamc.report(raw, compress=compress, **where)
                    assert b"toward spam:" in report.body
                    if_spam = await aiospamc.report_if_spam(raw, compress=compress, **where)
                    assert bool(if_spam.body) == is_spam
            fresh = make_message(Label.SPAM, 601)
            told = await aiospamc.tell(fresh, "spam", set_action="local", **where)
            assert told.headers["DidSet"].action.local
            again = await aiospamc.tell(fresh, "spam", set_action="local", **where)
            assert "DidSet" not in again.headers
            corrected = await aiospamc.tell(fresh, "ham", set_action="local", compress=True, **where)
            assert corrected.headers["DidSet"].action.local
            assert engine_of(daemon).trainer.label_of(engine_of(daemon).classifier.analyze(fresh).key) is Label.HAM
            forgotten = await aiospamc.tell(fresh, "ham", remove_action="local", **where)
            assert forgotten.headers["DidRemove"].action.local
            assert engine_of(daemon).trainer.label_of(engine_of(daemon).classifier.analyze(fresh).key) is None
            with pytest.raises(ProtocolException):
                await aiospamc.tell(fresh, "spam", set_action="local", remove_action="local", **where)

    asyncio.run(scenario())


def test_config_file_documents_every_spamc_key():
    text = (Path(__file__).parent.parent / "config" / "spamd.toml").read_text()
    section = text.split("\n[spamc]\n", 1)[1].split("\n[", 1)[0]
    documented = dict(re.findall(r"^# (\w+) = (.+)$", section, re.MULTILINE))
    assert set(documented) == {f.name for f in dataclasses.fields(SpamcConfig)}
    for name, value in documented.items():
        parsed = tomllib.loads(f"x = {value}")["x"]
        default = getattr(SpamcConfig(), name)
        assert (tuple(parsed) if isinstance(parsed, list) else parsed) == default, name
