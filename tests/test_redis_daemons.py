"""Several spamd daemons on one real Redis: one model, learned once, nothing acknowledged lost.

Each daemon is `python -m spamd --redis URL` as a subprocess with its own data
directory (Maildir, control socket); redis-server runs on a loopback port with
AOF on (tests/redis_helpers.py). Training goes through each daemon's control
socket, mail through smtplib, and Redis is SIGKILLed and restarted under traffic.
"""

from __future__ import annotations

import email
import shutil
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamd.config import Config, ModelConfig
from spamd.engine.engine import Engine
from spamd.model.bayes import Label
from tests.cli_helpers import Result, run_spamctl
from tests.daemon_helpers import (
    crlf,
    imap_move,
    make_message,
    wait_until_sync,
    write_config,
)
from tests.redis_helpers import RedisClusterServers, RedisDaemon, RedisServer, free_port
from tests.spamc_helpers import raw_exchange
from tests.spamc_helpers import request as spamc_request


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="spamd-redis-", dir="/tmp"))  # short: control socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def nodes(root: Path, url: str, count: int) -> list[RedisDaemon]:
    started: list[RedisDaemon] = []
    try:
        for i in range(count):
            started.append(RedisDaemon(root, url, f"n{i}"))
    except BaseException:
        for node in started:
            node.stop()
        raise
    return started


def x_spam_score(path: Path) -> str:
    return email.message_from_bytes(path.read_bytes())["X-Spam-Score"]


def test_daemons_share_one_model_learn_once_and_correct_anywhere(root, redis_url, tmp_path):
    spam = [make_message(Label.SPAM, i, seed=7) for i in range(15)]
    ham = [make_message(Label.HAM, i, seed=7) for i in range(15)]
    a, b, c = cluster = nodes(root, redis_url, 3)
    try:
        assert a.train(spam, Label.SPAM) == ["learned"] * 15
        assert b.train(ham, Label.HAM) == ["learned"] * 15
        # Learned once across nodes: the same messages through the others are repeats.
        assert c.train(spam, Label.SPAM) == ["skipped_repeat"] * 15
        assert a.train(ham, Label.HAM) == ["skipped_repeat"] * 15

        # The embedded store trained on the same messages, for the reference scores.
        local = Engine.open(Config(data_dir=tmp_path, model=ModelConfig(hash_bits=16)), durable=False)
        try:
            for raw in spam:
                local.train(raw, Label.SPAM, "test")
            for raw in ham:
                local.train(raw, Label.HAM, "test")
            probe = [make_message(Label.SPAM, 100, seed=8), make_message(Label.HAM, 100, seed=8)]
            for raw in probe:
                expected = local.classify(raw).score.probability
                assert [node.probability(raw) for node in cluster] == [expected] * 3
            # Through SMTP: every node writes the same X-Spam-Score as the embedded store would.
            for node in cluster:
                with smtplib.SMTP("127.0.0.1", node.port, timeout=10) as client:
                    client.sendmail("s@example.org", ["user@example.com"], crlf(probe[0]))
            wait_until_sync(lambda: all(len(node.delivered()) == 1 for node in cluster))
            assert {x_spam_score(node.delivered()[0]) for node in cluster} == {
                f"{local.classify(probe[0]).score.probability:.4f}"
            }

            # A training through one node is in the next score of every other.
            fresh = make_message(Label.SPAM, 200, seed=9)
            before = b.probability(fresh)
            assert a.train([fresh], Label.SPAM) == ["learned"]
            local.train(fresh, Label.SPAM, "test")
            assert b.probability(fresh) == c.probability(fresh) == local.classify(fresh).score.probability > before

            # A correction through any node moves it once; untrain from anywhere.
            assert c.train([spam[0]], Label.HAM) == ["corrected"]
            assert a.train([spam[0]], Label.HAM) == ["skipped_repeat"]
            assert b.request("untrain", messages=[spam[0]])["outcomes"] == ["unlearned"]
            assert c.request("untrain", messages=[spam[0]])["outcomes"] == ["not_trained"]
            local.train(spam[0], Label.HAM, "test")
            local.untrain(spam[0], "test")
            stats = [node.request("stats") for node in cluster]
            assert {(s["trained_spam"], s["trained_ham"]) for s in stats} == {(15, 15)}
            assert [node.probability(probe[0]) for node in cluster] == [local.classify(probe[0]).score.probability] * 3
        finally:
            local.close()
    finally:
        for node in cluster:
            node.stop()


def test_redis_killed_and_restarted_under_traffic_loses_nothing_acknowledged(root, tmp_path):
    """SMTP and training through two daemons while Redis is SIGKILLed and restarted (AOF, appendfsync always).

    Every message answered 250 is delivered once, none answered 451 is delivered, and every
    training acknowledged is in the model afterwards; the daemons recover by themselves.
    """
    server = RedisServer(tmp_path / "redis").start()
    cluster: list[RedisDaemon] = []
    try:
        cluster = nodes(root, server.url, 2)
        seeds = [make_message(Label.SPAM, i, seed=1) for i in range(5)] + [
            make_message(Label.HAM, i, seed=1) for i in range(5)
        ]
        cluster[0].train(seeds[:5], Label.SPAM)
        cluster[1].train(seeds[5:], Label.HAM)

        answers: dict[str, str] = {}  # Message-ID -> "250" / "451" / error
        replies: set[str] = set()  # the texts of refusals
        acknowledged: list[bytes] = []  # trainings answered "learned"
        refused_trainings: Counter[str] = Counter()
        stop = threading.Event()

        def send_mail() -> None:
            for n in range(100_000):
                if stop.is_set():
                    return
                raw = make_message(Label.SPAM if n % 2 else Label.HAM, n, seed=2)
                mid = f"<{Label.SPAM if n % 2 else Label.HAM}-{n}-2@example.org>"
                try:
                    with smtplib.SMTP("127.0.0.1", cluster[n % 2].port, timeout=10) as client:
                        client.sendmail("s@example.org", ["user@example.com"], crlf(raw))
                    answers[mid] = "250"
                except smtplib.SMTPDataError as e:
                    answers[mid] = str(e.smtp_code)
                    assert isinstance(e.smtp_error, bytes)  # as smtplib reads it
                    replies.add(e.smtp_error.decode())
                time.sleep(0.005)

        def train() -> None:
            for n in range(100_000):
                if stop.is_set():
                    return
                raw = make_message(Label.SPAM, n, seed=3)
                reply = cluster[n % 2].request("train", label="spam", messages=[raw])
                if reply.get("outcomes") == ["learned"]:
                    acknowledged.append(raw)
                else:
                    refused_trainings[str(reply.get("error", reply))[:40]] += 1
                time.sleep(0.01)

        workers = [threading.Thread(target=send_mail), threading.Thread(target=train)]
        for worker in workers:
            worker.start()
        try:
            wait_until_sync(lambda: Counter(answers.values())["250"] >= 20 and len(acknowledged) >= 10, timeout=30)
            server.kill()
            wait_until_sync(lambda: Counter(answers.values())["451"] >= 3 and refused_trainings, timeout=30)
            ok_before = Counter(answers.values())["250"]
            learned_before = len(acknowledged)
            server.start()
            wait_until_sync(
                lambda: Counter(answers.values())["250"] >= ok_before + 20 and len(acknowledged) >= learned_before + 10,
                timeout=30,
            )
        finally:
            stop.set()
            for worker in workers:
                worker.join(30)
        for node in cluster:
            node.process.wait_for("redis_unreachable")
            node.process.wait_for("redis_reconnected")

        delivered: Counter[str] = Counter()
        for node in cluster:
            for path in node.delivered():
                delivered[email.message_from_bytes(path.read_bytes())["Message-ID"]] += 1
        accepted = {mid for mid, answer in answers.items() if answer == "250"}
        assert {mid for mid, n in delivered.items() if n > 1} == set()
        assert accepted == set(delivered), "a 250 without delivery, or a delivery without a 250"
        assert replies == {"4.3.0 Spam filter model unavailable, try again later"}
        # Every acknowledged training is in the model: trained again, each is a repeat; and counted once.
        outcomes = cluster[1].train(acknowledged, Label.SPAM)
        assert outcomes == ["skipped_repeat"] * len(acknowledged)
        # (A training whose reply was lost as Redis died may be in the model unacknowledged: at most those.)
        stats = cluster[0].request("stats")
        assert 5 + len(acknowledged) <= stats["trained_spam"] <= 5 + len(acknowledged) + sum(refused_trainings.values())
    finally:
        for node in cluster:
            node.stop()
        server.stop()


def test_redis_down_is_a_temporary_failure_everywhere_and_a_maildir_move_waits_for_it(root, tmp_path):
    """SMTP 451 4.3.0, spamc 75 (EX_TEMPFAIL); a move into Junk made meanwhile is learned when Redis returns."""
    server = RedisServer(tmp_path / "redis").start()
    node = None
    try:
        node = RedisDaemon(root, server.url, "n0", "--spamc", "127.0.0.1:0")
        spamc_port = node.process.wait_for("daemon_started")["spamc_port"]
        with smtplib.SMTP("127.0.0.1", node.port, timeout=10) as client:
            client.sendmail("s@example.org", ["user@example.com"], crlf(make_message(Label.SPAM, 1, seed=4)))
        wait_until_sync(lambda: len(node.delivered()) == 1)
        server.kill()
        with (
            pytest.raises(smtplib.SMTPDataError) as refused,
            smtplib.SMTP("127.0.0.1", node.port, timeout=10) as client,
        ):
            client.sendmail("s@example.org", ["user@example.com"], crlf(make_message(Label.HAM, 2, seed=4)))
        assert (refused.value.smtp_code, refused.value.smtp_error) == (
            451,
            b"4.3.0 Spam filter model unavailable, try again later",
        )
        answer = raw_exchange(spamc_port, spamc_request("CHECK", make_message(Label.HAM, 3, seed=4)))
        assert answer == b"SPAMD/1.0 75 spam filter model unavailable, try again later\r\n"
        imap_move(node.delivered()[0], node.data_dir / "Maildir", ".Junk")
        node.process.wait_for("maildir_waiting_for_store")
        server.start()
        applied = node.process.wait_for("training_applied", timeout=30)
        assert applied["outcome"] == "learned" and applied["label"] == "spam" and applied["how"] == "moved"
        assert node.request("stats")["trained_spam"] == 1
    finally:
        if node is not None:
            node.stop()
        server.stop()


# ---------------------------------------------------------------- Redis Cluster


def send(port: int, raw: bytes) -> int:
    """One message over SMTP: 250, or the refusal's code."""
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            client.sendmail("s@example.org", ["user@example.com"], crlf(raw))
        return 250
    except smtplib.SMTPDataError as e:
        return e.smtp_code


def test_cluster_node_holding_the_model_killed_is_a_temporary_failure_and_recovery_keeps_every_training(root, tmp_path):
    """A three-master cluster: the master with the model's slot SIGKILLed answers 451 and spamctl 75; restarted, all is there.

    A master that does not hold the model's slot going down changes nothing for spamd.
    """
    servers = RedisClusterServers(tmp_path / "cluster").start()
    node = None
    try:
        node = RedisDaemon(root, servers.url, "n0")
        model_node = servers.node_for("{spamd:}totals")
        other = next(n for n in servers.nodes if n is not model_node)

        def spamctl_train(paths: list[Path]) -> Result:
            return run_spamctl(
                "--config", node.config, "--data-dir", node.data_dir, "--json", "train", "--spam", *paths
            )

        acknowledged: list[Path] = []
        for i in range(6):
            path = root / f"spam{i}.eml"
            path.write_bytes(make_message(Label.SPAM, i, seed=11))
            done = spamctl_train([path])
            assert done.returncode == 0 and done.json()["learned"] == 1, done.stdout + done.stderr
            acknowledged.append(path)
        assert send(node.port, make_message(Label.HAM, 1, seed=12)) == 250

        # Another master down: not spamd's slot, spamd does not notice.
        other.kill()
        assert send(node.port, make_message(Label.HAM, 2, seed=12)) == 250
        path = root / "spam-other-down.eml"
        path.write_bytes(make_message(Label.SPAM, 50, seed=11))
        assert spamctl_train([path]).returncode == 0
        acknowledged.append(path)
        other.start()
        servers.wait_ok()

        # The model's master down: temporary failures everywhere, at once.
        model_node.kill()
        started = time.monotonic()
        with (
            pytest.raises(smtplib.SMTPDataError) as refused,
            smtplib.SMTP("127.0.0.1", node.port, timeout=10) as client,
        ):
            client.sendmail("s@example.org", ["user@example.com"], crlf(make_message(Label.HAM, 3, seed=12)))
        assert (refused.value.smtp_code, refused.value.smtp_error) == (
            451,
            b"4.3.0 Spam filter model unavailable, try again later",
        )
        assert time.monotonic() - started < 5  # a refused connection to the dead node: no stall
        path = root / "spam-down.eml"
        path.write_bytes(make_message(Label.SPAM, 60, seed=11))
        refused_training = spamctl_train([path])
        assert refused_training.returncode == 75, refused_training.stdout + refused_training.stderr  # EX_TEMPFAIL
        assert "unreachable" in refused_training.stderr
        node.process.wait_for("redis_unreachable")

        # The same node back, same port, same directory (AOF, appendfsync always; nodes.conf):
        # spamd serves again by itself and every acknowledged training is in the model.
        model_node.start()
        servers.wait_ok()
        wait_until_sync(lambda: send(node.port, make_message(Label.HAM, 4, seed=12)) == 250, timeout=30, interval=0.5)
        node.process.wait_for("redis_reconnected")
        again = spamctl_train(acknowledged)
        assert again.returncode == 0 and again.json()["skipped_repeat"] == len(acknowledged), (
            again.stdout + again.stderr
        )
        stats = node.request("stats")
        assert stats["trained_spam"] == len(acknowledged)
        assert spamctl_train([path]).json()["learned"] == 1  # the one refused meanwhile is learned now
    finally:
        if node is not None:
            node.stop()
        servers.stop()


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_spamd_without_its_redis_exits_75_so_the_unit_restarts_it(root, scheme):
    """EX_TEMPFAIL at start: Restart=on-failure retries it (RestartPreventExitStatus=1 is for configuration errors)."""
    url = f"{scheme}://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "spamd", "--config", write_config(root / "c.toml"), "--data-dir", root / "d", "--redis", url,
         "--smtp", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 75, done.stderr
    assert done.stderr.splitlines()[-1].startswith("spamd: Redis") and "start Redis" in done.stderr
