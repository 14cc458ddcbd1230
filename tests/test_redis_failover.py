"""Redis with replicas: acknowledged means replicated (`[redis] replicas_acked`), and Sentinel failovers lose nothing.

Real programs only: redis-server primaries and replicas, three redis-sentinel processes
(tests/redis_helpers.py), spamd daemons as subprocesses, smtplib clients. Every wait
is on a condition with a generous deadline, never on how fast anything is.
"""

from __future__ import annotations

import email
import shutil
import smtplib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamd.config import load_config
from spamd.config.addresses import parse_sentinel_url
from spamd.errors import ConfigError
from spamd.model.bayes import Label
from tests.cli_helpers import run_spamctl
from tests.daemon_helpers import (
    crlf,
    imap_move,
    make_message,
    wait_until_sync,
)
from tests.redis_helpers import RedisClusterServers, RedisDaemon, RedisSentinels, RedisServer


def replicas_acked(replica_timeout_s: float = 10.0) -> str:
    """The [redis] lines of a daemon that acknowledges only what a replica has too."""
    return f"replicas_acked = 1\nreplica_timeout_s = {replica_timeout_s}\n"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="spamd-failover-", dir="/tmp"))  # short: control socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sentinel_urls_are_checked_with_clear_errors(tmp_path):
    parts = parse_sentinel_url("rediss+sentinel://app:s%40cret@10.0.0.5:26379,[::1]:26380/mymaster")
    assert parts.sentinels == (("10.0.0.5", 26379), ("::1", 26380)) and parts.tls
    assert (parts.master_name, parts.username, parts.password) == ("mymaster", "app", "s@cret")
    refused = {
        "redis+sentinel://10.0.0.5:26379": "MASTERNAME",
        "redis+sentinel://10.0.0.5:26379/": "MASTERNAME",
        "redis+sentinel://10.0.0.5:26379/mymaster/0": "MASTERNAME",
        "redis+sentinel://:pw@10.0.0.5/mymaster": "expected HOST:PORT",
        "redis+sentinel://10.0.0.5:26379,/mymaster": "expected HOST:PORT",
        "redis+sentinel://:pw@10.0.0.5:26379/m?db=1": "no query options",
        "sentinel://10.0.0.5:26379/m": "redis\\+sentinel://",
    }
    for url, why in refused.items():
        with pytest.raises(ConfigError, match=why) as error:
            load_config(None, data_dir=tmp_path, redis_url=url)
        assert "pw" not in str(error.value)  # the password is never shown
    config = tmp_path / "spamd.toml"
    for bad in ("replicas_acked = -1", "replica_timeout_s = 0"):
        config.write_text(f"[redis]\n{bad}\n")
        with pytest.raises(ConfigError, match="replicas_acked"):
            load_config(config, data_dir=tmp_path)


def test_replica_down_makes_trainings_temporary_errors_until_it_is_back_then_they_count_once(root, tmp_path):
    """replicas_acked = 1 on a primary with one replica: with the replica down a training is not acknowledged
    (spamctl 75, the control socket's temporary error, a Maildir move waits), mail is still scored; back, once."""
    primary = RedisServer(tmp_path / "primary").start()
    replica = RedisServer(tmp_path / "replica").start(replica_of=primary.port)
    daemon = None
    try:
        wait_until_sync(lambda: "master_link_status:up" in replica.info("replication"), timeout=60)
        daemon = RedisDaemon(root, primary.url, "n0", redis_settings=replicas_acked(replica_timeout_s=1.0))
        first = make_message(Label.SPAM, 1, seed=21)
        assert daemon.request("train", label="spam", messages=[first])["outcomes"] == ["learned"]
        mail = make_message(Label.HAM, 2, seed=21)
        with smtplib.SMTP("127.0.0.1", daemon.port, timeout=30) as client:
            client.sendmail("s@example.org", ["user@example.com"], crlf(mail))
        wait_until_sync(lambda: len(daemon.delivered()) == 1, timeout=30)

        replica.kill()
        # Not acknowledged: the control socket says temporary, spamctl exits 75 (EX_TEMPFAIL).
        pending = make_message(Label.SPAM, 3, seed=21)
        reply = daemon.request("train", label="spam", messages=[pending])
        assert reply["outcomes"] == [] and reply["temporary"] and "replicas confirmed" in reply["error"], reply
        path = root / "pending.eml"
        path.write_bytes(pending)
        refused = run_spamctl("--config", daemon.config, "--data-dir", daemon.data_dir, "train", "--spam", path)
        assert refused.returncode == 75, refused.stdout + refused.stderr
        daemon.process.wait_for("redis_replicas_behind")
        # Scoring needs no replica: mail is still accepted.
        with smtplib.SMTP("127.0.0.1", daemon.port, timeout=30) as client:
            client.sendmail("s@example.org", ["user@example.com"], crlf(make_message(Label.HAM, 4, seed=21)))
        wait_until_sync(lambda: len(daemon.delivered()) == 2, timeout=30)
        # A move into Junk meanwhile waits for the store, retried by itself.
        moved = next(p for p in daemon.delivered() if b"-2-21@" in p.read_bytes())
        imap_move(moved, daemon.data_dir / "Maildir", ".Junk")
        daemon.process.wait_for("maildir_waiting_for_store", timeout=60)

        replica.start(replica_of=primary.port)
        applied = daemon.process.wait_for("training_applied", timeout=120)
        assert applied["how"] == "moved" and applied["label"] == "spam"
        daemon.process.wait_for("redis_replicas_caught_up", timeout=60)
        # The refused training was applied on the primary before its wait failed: the retry
        # is a repeat, acknowledged now, and the model counts it once.
        reply = daemon.request("train", label="spam", messages=[pending])
        assert reply["outcomes"] == ["skipped_repeat"], reply
        assert daemon.request("stats")["trained_spam"] == 3  # first, pending, the moved message: each once
        # And the replica holds what was acknowledged: the same ledger as the primary.
        primary_client, replica_client = primary.client(), replica.client()
        try:
            assert replica_client.hgetall("spamd:ledger") == primary_client.hgetall("spamd:ledger")
            assert replica_client.hgetall("spamd:totals") == primary_client.hgetall("spamd:totals")
        finally:
            primary_client.close()
            replica_client.close()
    finally:
        if daemon is not None:
            daemon.stop()
        replica.stop()
        primary.stop()


class Load:
    """SMTP clients and a stream of trainings through the daemons, each training retried until acknowledged.

    `answers`: Message-ID -> SMTP code; `acknowledged`: each training once, after the
    first "learned" or (a retry's) "skipped_repeat". Anything but a temporary error fails.
    """

    def __init__(self, daemons: list[RedisDaemon]):
        self.daemons = daemons
        self.answers: dict[str, int] = {}
        self.acknowledged: list[bytes] = []
        self.temporary = Counter[str]()  # temporary refusals of trainings, by their start
        self.stop = threading.Event()
        self.workers = [threading.Thread(target=self.send_mail), threading.Thread(target=self.train)]

    def __enter__(self) -> Load:
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(180)
        assert not any(worker.is_alive() for worker in self.workers)

    def send_mail(self) -> None:
        n = 0
        while not self.stop.is_set():
            raw = make_message(Label.SPAM if n % 2 else Label.HAM, n, seed=32)
            mid = f"<{Label.SPAM if n % 2 else Label.HAM}-{n}-32@example.org>"
            try:
                with smtplib.SMTP("127.0.0.1", self.daemons[n % len(self.daemons)].port, timeout=60) as client:
                    client.sendmail("s@example.org", ["user@example.com"], crlf(raw))
                self.answers[mid] = 250
            except smtplib.SMTPDataError as e:
                self.answers[mid] = e.smtp_code
            n += 1
            self.stop.wait(0.005)

    def train(self) -> None:
        n = 0
        while not self.stop.is_set():
            raw = make_message(Label.SPAM, n, seed=33)
            # The same message until acknowledged, as an MTA or a Maildir move retries (also
            # after `stop`: the set-up is whole again by then, and none is left half-known).
            for _ in range(10_000):
                reply = self.daemons[n % len(self.daemons)].request("train", label="spam", messages=[raw])
                if reply.get("outcomes") in (["learned"], ["skipped_repeat"]):
                    self.acknowledged.append(raw)
                    break
                assert reply.get("temporary"), reply  # never anything but a temporary error
                self.temporary[str(reply.get("error"))[:30]] += 1
                time.sleep(0.05)
            n += 1
            self.stop.wait(0.01)

    def progress(self, mail: int, trainings: int) -> None:
        """Until this many more 250s and acknowledged trainings than now (the daemons serve)."""
        ok, learned = Counter(self.answers.values())[250], len(self.acknowledged)
        wait_until_sync(
            lambda: Counter(self.answers.values())[250] >= ok + mail and len(self.acknowledged) >= learned + trainings,
            timeout=180,
            interval=0.1,
        )

    def check(self, seeds_spam: int, seeds_ham: int) -> None:
        """Every 250 delivered once, nothing refused delivered, only 451s; the model holds each training once."""
        delivered = Counter[str]()
        for d in self.daemons:
            for path in d.delivered():
                delivered[email.message_from_bytes(path.read_bytes())["Message-ID"]] += 1
        assert {mid for mid, n in delivered.items() if n > 1} == set()
        assert {mid for mid, code in self.answers.items() if code == 250} == set(delivered)
        assert set(self.answers.values()) <= {250, 451}
        # Exactly once: the model holds the seeds and every acknowledged training, no more, no less.
        stats = self.daemons[0].request("stats")
        expected = (seeds_spam + len(self.acknowledged), seeds_ham)
        assert (stats["trained_spam"], stats["trained_ham"]) == expected, (stats, self.temporary)
        again = self.daemons[-1].request("train", label="spam", messages=self.acknowledged)
        assert again["outcomes"] == ["skipped_repeat"] * len(self.acknowledged)


def seed(daemon: RedisDaemon) -> None:
    """Five spam and one ham, so that scoring does work (an empty model short-cuts)."""
    spam = [make_message(Label.SPAM, i, seed=31) for i in range(5)]
    assert daemon.request("train", label="spam", messages=spam)["outcomes"] == ["learned"] * 5
    assert daemon.request("train", label="ham", messages=[make_message(Label.HAM, 0, seed=31)])["outcomes"] == [
        "learned"
    ]


def test_sentinel_failovers_under_load_lose_no_acknowledged_training_and_no_accepted_mail(root, tmp_path):
    """Two daemons on a Sentinel-watched primary with one replica, replicas_acked = 1; SMTP clients and trainings
    run while the primary is SIGKILLed three times (the killed one back as the new primary's replica each time).

    Every training is retried until acknowledged and then is in the model exactly once;
    every 250 is delivered once and nothing refused is; refusals are 451, never 5xx; the
    daemons serve again after each failover without a restart and log `redis_failover`.
    """
    group = RedisSentinels(tmp_path / "sentinel").start()
    daemons: list[RedisDaemon] = []
    try:
        daemons = [RedisDaemon(root, group.url, f"n{i}", redis_settings=replicas_acked()) for i in range(2)]
        seed(daemons[0])
        with Load(daemons) as load:
            load.progress(10, 5)
            for _ in range(3):
                group.kill_primary()
                load.progress(10, 0)  # the new primary serves mail, no restart (trainings wait for a replica)
                group.restore()
                load.progress(5, 5)
        failovers = [event for d in daemons for event in d.process.events("redis_failover")]
        assert failovers and all(event["without_primary_s"] >= 0 for event in failovers)
        load.check(5, 1)
    finally:
        for d in daemons:
            d.stop()
        group.stop()


def test_cluster_master_failovers_under_load_lose_no_acknowledged_training(root, tmp_path):
    """A cluster of three masters with a replica each, replicas_acked = 1: the master holding the model's slot
    SIGKILLed twice under SMTP and trainings, its replica promoted by the cluster (MOVED, CLUSTERDOWN meanwhile:
    temporary errors); the killed node back as a replica each time. The same guarantees as under Sentinel."""
    servers = RedisClusterServers(tmp_path / "cluster", replicas=1).start()
    daemon = None
    try:
        servers.wait_replicas_linked()
        daemon = RedisDaemon(root, servers.url, "n0", redis_settings=replicas_acked())
        seed(daemon)
        with Load([daemon]) as load:
            load.progress(10, 5)
            for _ in range(2):
                master = servers.node_for("{spamd:}totals")
                master.kill()

                def promoted(master: object = master) -> bool:
                    return servers.node_for("{spamd:}totals") is not master

                wait_until_sync(promoted, 120, 0.5)
                load.progress(10, 0)  # the promoted replica serves, no restart
                master.start()  # rejoins as the new master's replica (its nodes.conf)
                servers.wait_ok(120)
                servers.wait_replicas_linked()
                load.progress(5, 5)
        load.check(5, 1)
    finally:
        if daemon is not None:
            daemon.stop()
        servers.stop()
