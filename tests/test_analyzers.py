"""Analysis in helper processes (spamd/engine/analyzers.py): the same features as on the loop, and no message
lost when a helper dies, hangs or is not there yet. Real processes, real signals."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dns.message
import dns.rcode
import numpy as np
import pytest

from spamd.config import AuthConfig, Config, ModelConfig, ParserConfig
from spamd.engine.analyzers import AnalysisProcesses, AnalysisUnavailable
from spamd.learning.classifier import Analyzed, Classifier
from spamd.model.bayes import Label
from tests import fuzz_helpers as fh
from tests.auth_helpers import SigningKeys, mail
from tests.core_helpers import PLAIN, TREC_INDEX, corpus_sample
from tests.daemon_helpers import (
    daemon_config,
    engine_of,
    files,
    make_message,
    running,
    send,
    smtp_port,
    train,
    wait_until,
)

pytestmark = pytest.mark.asyncio

CONFIG = Config()


def messages() -> list[bytes]:
    """Hand-written and hostile messages, and corpus mail when the corpora are there."""
    found = [PLAIN, b"", b"\x00\xff" * 5000, b"Subject: only a header", *fh.hostile_seeds()[:12]]
    found += [make_message(label, n) for label in Label for n in range(5)]
    if TREC_INDEX.is_file():
        found += corpus_sample(150)
    return found


def same(a: Analyzed, b: Analyzed) -> bool:
    return (
        a.key == b.key and a.senders == b.senders
        and a.features.ids.tolist() == b.features.ids.tolist() and a.features.counts.tolist() == b.features.counts.tolist()
        and same_array(a.features.kinds, b.features.kinds)
    )  # fmt: skip


def same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a.tolist() == b.tolist())


async def ready(processes: AnalysisProcesses, count: int = 1) -> None:
    await wait_until(lambda: sum(h.alive and h.ready for h in processes.helpers) >= count, timeout=30)


# Weighted families ([model]): the helpers make the same family tokens, and the weights cross the socket.
FAMILIES = dataclasses.replace(CONFIG, model=ModelConfig(char_ngrams=4, ngram_weight=0.3, osb=True, osb_weight=0.5))
# The evidence among the words: no kinds cross the socket.
WORDS_ONLY = dataclasses.replace(CONFIG, model=ModelConfig(evidence_weight=0.0))


@pytest.mark.parametrize("config", [CONFIG, FAMILIES, WORDS_ONLY], ids=["default", "families", "words-only"])
async def test_a_helper_finds_the_features_the_loop_finds(config: Config) -> None:
    helpers = AnalysisProcesses(config, 2)
    await helpers.start()
    try:
        await ready(helpers, 2)
        raws = messages()
        answers = await asyncio.gather(*(helpers.analyze(raw) for raw in raws))
        loop_side = Classifier(config, None)  # type: ignore[arg-type]
        assert all(same(a, loop_side.analyze(raw)) for a, raw in zip(answers, raws, strict=True))
        weights = [
            (a.features.weights, loop_side.analyze(raw).features.weights) for a, raw in zip(answers, raws, strict=True)
        ]
        # The default config weighs only word salad (the messages' 40-word bodies): the same weights both sides.
        assert all(same_array(h, o) for h, o in weights)
        assert config is not FAMILIES or all(h is not None for h, _ in weights)
        # The evidence scored apart by default ([model] evidence_weight): each bucket's kind crosses too.
        assert all((a.features.kinds is None) == (config is WORDS_ONLY) for a in answers)
        assert {len(h.pending) for h in helpers.helpers} == {0}
    finally:
        await helpers.close()
    assert all(h.process.poll() is not None for h in helpers.helpers)


def answered(frames: bytes) -> dict[int, tuple[bytes, bytes]]:
    """The frames the helper sent, by id: (kind, payload)."""
    from spamd.runtime.helper_processes import FRAME

    answers = {}
    while frames:
        kind, ident, length = FRAME.unpack_from(frames)
        answers[ident] = (kind, frames[FRAME.size : FRAME.size + length])
        frames = frames[FRAME.size + length :]
    return answers


def received_until_closed(sock: socket.socket) -> bytes:
    return b"".join(iter(lambda: sock.recv(1 << 20), b""))


async def test_a_batch_is_answered_as_one_message_at_a_time_and_a_bad_frame_fails_alone() -> None:
    """What one read brings is analyzed a stage at a time over the batch: the same answers as
    message by message; a frame that cannot be read is answered with an error, the rest as ever."""
    from spamd.engine.analyzers import _answer_all, _Sender, encode_work

    classifier = Classifier(CONFIG, None)  # type: ignore[arg-type]
    raws = messages()[:40]
    for work in (
        [(number, encode_work(raw, None)) for number, raw in enumerate(raws)],
        [(number, encode_work(raw, None)) for number, raw in enumerate(raws)][:7] + [(99, b"\xff")],
    ):
        ours, theirs = socket.socketpair()
        with ours, theirs:
            sender = _Sender(theirs)
            with ThreadPoolExecutor(4) as verifying:  # left when every verification is answered
                _answer_all(classifier, work, sender, verifying)
            sender.send()
            theirs.shutdown(socket.SHUT_WR)
            reply = answered(received_until_closed(ours))
        assert sorted(reply) == sorted(ident for ident, _ in work)
        helpers = AnalysisProcesses(CONFIG, 0)
        for ident, (kind, payload) in reply.items():
            if ident == 99:
                assert kind == b"E"
                continue
            answer = helpers.decode(kind, payload)
            assert isinstance(answer, Analyzed) and same(answer, classifier.analyze(raws[ident]))


async def test_each_answer_leaves_before_the_next_message_s_senders_are_verified(test_keys: SigningKeys) -> None:
    await asyncio.to_thread(answers_leave_as_each_message_is_verified, test_keys)


def answers_leave_as_each_message_is_verified(test_keys: SigningKeys) -> None:
    """A helper that verifies senders answers for each message as soon as it is verified, so that the
    loop scores and delivers it meanwhile: here the answer for an unsigned message comes while the
    next one's key look-up waits at the nameserver, which holds it unanswered."""
    from spamd.engine.analyzers import encode_work
    from spamd.runtime.helper_processes import frame

    nameserver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    nameserver.bind(("127.0.0.1", 0))
    nameserver.settimeout(60)
    auth = AuthConfig(nameservers=(f"127.0.0.1:{nameserver.getsockname()[1]}",))
    ours, theirs = socket.socketpair()
    helper = subprocess.Popen(
        [sys.executable, "-m", "spamd.engine.analyzers", str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    try:
        ours.settimeout(60)
        ours.sendall(frame(b"C", 0, pickle.dumps((ParserConfig(), ModelConfig(), auth))))
        assert answered(ours.recv(1 << 16)) == {0: (b"R", b"")}
        unsigned = mail(sender="Alice <alice@home.example>", subject="lunch")
        signed = test_keys.shop.sign(mail())
        ours.sendall(frame(b"W", 1, encode_work(unsigned, None)) + frame(b"W", 2, encode_work(signed, None)))
        query, client = nameserver.recvfrom(4096)  # the signed message's key, asked for
        assert dns.message.from_wire(query).question[0].name.to_text() == "sel1._domainkey.shop.example."
        readable, _, _ = select.select([ours], [], [], 30)
        assert readable, "no answer for the unsigned message while the signed one's look-up waits"
        first = answered(ours.recv(1 << 20))
        assert list(first) == [1] and first[1][0] == b"K"  # kinds: the evidence scored apart by default
        while True:  # no such name, for the key and what is asked after it (DMARC)
            refused = dns.message.make_response(dns.message.from_wire(query))
            refused.set_rcode(dns.rcode.NXDOMAIN)
            nameserver.sendto(refused.to_wire(), client)
            readable, _, _ = select.select([ours, nameserver], [], [], 60)
            assert readable, "neither an answer nor a query within a minute"
            if ours in readable:
                break
            query, client = nameserver.recvfrom(4096)
        second = answered(ours.recv(1 << 20))
        assert list(second) == [2]
        analyzed = AnalysisProcesses(CONFIG, 0).decode(*second[2])
        assert isinstance(analyzed, Analyzed) and "dkim=" in analyzed.auth_report
    finally:
        ours.close()
        helper.wait(timeout=60)
        nameserver.close()


async def test_new_parser_caps_reach_the_helpers() -> None:
    helpers = AnalysisProcesses(CONFIG, 1)
    await helpers.start()
    try:
        await ready(helpers)
        raw = fh.nested_multipart(8)
        capped = dataclasses.replace(CONFIG, parser=ParserConfig(max_parts=2, max_depth=2))
        helpers.reconfigure(capped)
        answer = await helpers.analyze(raw)
        assert same(answer, Classifier(capped, None).analyze(raw))  # type: ignore[arg-type]
        assert not same(answer, Classifier(CONFIG, None).analyze(raw))  # type: ignore[arg-type]
    finally:
        await helpers.close()


async def test_a_killed_helper_hands_its_messages_back_and_is_replaced() -> None:
    helpers = AnalysisProcesses(CONFIG, 1)
    await helpers.start()
    try:
        await ready(helpers)
        first = helpers.helpers[0]
        raws = [make_message(Label.SPAM, n) for n in range(200)]
        asked = [asyncio.ensure_future(helpers.analyze(raw)) for raw in raws]
        await asyncio.sleep(0)  # every request is on its way
        first.process.send_signal(signal.SIGKILL)
        outcomes = await asyncio.gather(*asked, return_exceptions=True)
        # Each either answered before the kill or was handed back for the loop to analyze.
        assert all(isinstance(o, (Analyzed, AnalysisUnavailable)) for o in outcomes)
        assert any(isinstance(o, AnalysisUnavailable) for o in outcomes)
        # Replaced within the restart interval (1 s) and its start-up; meanwhile the loop analyzes.
        await wait_until(lambda: any(h.ready for h in helpers.helpers if h is not first), timeout=30)
        assert same(await helpers.analyze(PLAIN), Classifier(CONFIG, None).analyze(PLAIN))  # type: ignore[arg-type]
        assert helpers.started_total == 2 and first not in helpers.helpers
    finally:
        await helpers.close()


async def test_a_hung_helper_is_killed_and_its_messages_go_back_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AnalysisProcesses, "answer_timeout_s", 1.0)
    helpers = AnalysisProcesses(CONFIG, 1)
    await helpers.start()
    try:
        await ready(helpers)
        stuck = helpers.helpers[0]
        stuck.process.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(AnalysisUnavailable):
            await asyncio.wait_for(helpers.analyze(PLAIN), 10)
        assert time.monotonic() - started < 5
        assert stuck.process.wait(timeout=5) == -signal.SIGKILL
    finally:
        await helpers.close()


async def test_the_daemon_delivers_every_message_while_its_helper_is_killed(tmp_path: Path) -> None:
    config = daemon_config(tmp_path, parser={"processes": 1})
    async with running(config) as daemon:
        train(daemon)
        assert daemon.analyzers is not None
        await ready(daemon.analyzers)
        port = smtp_port(daemon)
        raws = [make_message(Label.SPAM if n % 2 else Label.HAM, n, seed=5) for n in range(60)]

        async def send_all(chunk: list[bytes]) -> None:
            for raw in chunk:
                assert await asyncio.to_thread(send, port, raw) == {}

        sending = asyncio.gather(*(send_all(raws[i::4]) for i in range(4)))
        await asyncio.sleep(0.05)
        daemon.analyzers.helpers[0].process.send_signal(signal.SIGKILL)
        await sending
        maildir = tmp_path / "Maildir"
        delivered = files(maildir / "new") + files(maildir / ".Junk" / "new")
        assert len(delivered) == len(raws)
        # The verdict is the loop's own for every one of them, whoever analyzed it.
        for path in delivered:
            data = path.read_bytes()
            body = data.split(b"\n\n", 1)[1]
            original = next(r for r in raws if r.split(b"\n\n", 1)[1] == body)
            expected = engine_of(daemon).classify(original).score.verdict
            assert (b"X-Spam-Flag: YES" in data) == (expected.value == "spam")


async def test_no_helper_outlives_a_killed_daemon(tmp_path: Path) -> None:
    # Both kinds: the analysis process and the delivery process (spamd/runtime/helper_processes.py).
    (tmp_path / "spamd.toml").write_text("[parser]\nprocesses = 1\n[maildir]\nfsync = false\ndelivery_processes = 1\n")
    log = (tmp_path / "spamd.log").open("wb")
    daemon = subprocess.Popen(  # noqa: ASYNC220  the daemon under test; nothing else runs on this test's loop
        [sys.executable, "-m", "spamd", "--config", str(tmp_path / "spamd.toml"), "--data-dir", str(tmp_path / "data"),
         "--smtp", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    log.close()
    children = Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children")

    def helpers() -> dict[str, int] | None:
        found = {}
        for pid in children.read_text().split():
            with contextlib.suppress(FileNotFoundError):  # (a child between fork and exec still shows spamd's own line)
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if args[1:2] == [b"-m"]:
                    found[args[2].decode()] = int(pid)
        return found if {"spamd.engine.analyzers", "spamd.frontends.delivery"} <= found.keys() else None

    def ready_logged() -> dict[str, int] | None:
        """Each kind's pid, from its `KIND_process_ready` event, once both are logged."""
        events = [json.loads(line) for line in (tmp_path / "spamd.log").read_text().splitlines() if line[:1] == "{"]
        ready = {e["event"]: e["pid"] for e in events if e["event"].endswith("_process_ready")}
        return ready if len(ready) == 2 else None

    try:
        found = await wait_until(helpers, timeout=30)
        assert isinstance(found, dict)
        ready = await wait_until(ready_logged, timeout=30)  # the admin's sign that a helper takes its share
        assert ready == {
            "analysis_process_ready": found["spamd.engine.analyzers"],
            "delivery_process_ready": found["spamd.frontends.delivery"],
        }
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
        await wait_until(lambda: not any(_alive(pid) for pid in found.values()), timeout=10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited: its parent (init, now) reaps it


async def test_with_or_without_helpers_every_message_gets_the_same_headers(tmp_path: Path) -> None:
    raws = [make_message(Label.SPAM if n % 3 else Label.HAM, n, seed=8) for n in range(30)]
    if TREC_INDEX.is_file():
        raws += corpus_sample(40)
    statuses = {}
    for processes in (0, 1):
        config = daemon_config(tmp_path / str(processes), parser={"processes": processes})
        async with running(config) as daemon:
            train(daemon)
            if processes:
                assert daemon.analyzers is not None
                await ready(daemon.analyzers)
            else:
                assert daemon.analyzers is None
            port = smtp_port(daemon)
            for n, raw in enumerate(raws):
                marked = b"X-Test-Serial: %d\n" % n + raw
                assert await asyncio.to_thread(send, port, marked) == {}
            if daemon.analyzers is not None:  # (processes)
                assert daemon.analyzers.answered == len(raws)  # every one analyzed by the helper
        maildir = tmp_path / str(processes) / "Maildir"
        found = {}
        for path in files(maildir / "new") + files(maildir / ".Junk" / "new"):
            head = path.read_bytes().split(b"\n\n", 1)[0]
            serial = int(head.split(b"X-Test-Serial: ", 1)[1].split(b"\n", 1)[0])
            found[serial] = [line for line in head.split(b"\n") if line.startswith(b"X-Spam-")]
        assert sorted(found) == list(range(len(raws)))
        statuses[processes] = found
    assert statuses[0] == statuses[1]
    # Status, Score, Flag; and X-Spam-Auth where a corpus message carries a DKIM signature.
    assert {tuple(v) for v in statuses[1].values()} and all(len(v) in (3, 4) for v in statuses[1].values())


async def test_stopping_hands_back_what_a_hung_helper_still_holds() -> None:
    helpers = AnalysisProcesses(CONFIG, 1)
    await helpers.start()
    await ready(helpers)
    stuck = helpers.helpers[0]
    stuck.process.send_signal(signal.SIGSTOP)
    waiting = asyncio.ensure_future(helpers.analyze(PLAIN))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await helpers.close()  # the helper cannot read the end of its socket: killed after 5 s
    assert time.monotonic() - started < 10
    with pytest.raises(AnalysisUnavailable):
        await waiting
    assert stuck.process.poll() is not None


@pytest.mark.parametrize("interpreter", ["/bin/false", "/nonexistent/python"])
async def test_helpers_that_cannot_start_leave_every_message_to_the_loop(
    interpreter: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A broken install: the helper exits at once, or cannot be run at all. spamd keeps
    # analyzing on the loop, and stops trying after a few starts instead of every second.
    monkeypatch.setattr("spamd.runtime.helper_processes.RESTART_INTERVAL_S", 0.01)
    monkeypatch.setattr(sys, "executable", interpreter)
    helpers = AnalysisProcesses(CONFIG, 1)
    await helpers.start()
    try:

        async def gave_up() -> bool:
            with contextlib.suppress(AnalysisUnavailable):
                await helpers.analyze(PLAIN)
            return helpers.wanted == 0

        deadline = time.monotonic() + 20
        while not await gave_up():
            assert time.monotonic() < deadline, "still starting helpers"
            await asyncio.sleep(0.05)
        assert helpers.started_total <= 5
        with pytest.raises(AnalysisUnavailable):
            await helpers.analyze(PLAIN)
    finally:
        await helpers.close()
    assert "analysis_processes_disabled" in capsys.readouterr().out
