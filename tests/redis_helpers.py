"""A real redis-server for tests: loopback, a free port, its own directory, AOF on; a Redis Cluster; Sentinel.

Loaded as a plugin by tests/conftest.py, so a test names its fixtures as parameters. Skips with a reason
when /usr/bin/redis-server is absent, but fails in CI, which installs it (.ci/run):
a skipped Redis test there would hide a break. Nothing here fakes Redis.

`redis_url` runs a test on both: a plain redis-server (`[plain]`) and a three-master
cluster (`[cluster]`, so `pytest -k cluster` selects it), as `redis://` and
`redis+cluster://` URLs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from spamd.frontends.control_protocol import ControlClient
from spamd.model.bayes import Label
from spamd.store.redis.state import RedisState
from spamd.store.redis.store import RedisStore
from spamd.store.redis.users import RedisUsers
from tests.daemon_helpers import DaemonProcess, folder_files, wait_until_sync, write_config
from tests.ports import free_port

if TYPE_CHECKING:
    from spamd.engine.engine import Engine

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
REDIS_SENTINEL = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"


def redis_state(engine: Engine) -> RedisState:
    """The Redis state of an engine opened with `[redis] url` (its store typed as either store's)."""
    assert isinstance(engine.store, RedisStore)
    return engine.store.state


def redis_users(engine: Engine) -> RedisUsers:
    """The users' layers in Redis of an engine opened with `[redis] url`."""
    assert isinstance(engine.users, RedisUsers)
    return engine.users


def needs_redis(*more: str) -> None:
    """Skip without redis-server and redis-cli (and `more`), but fail in CI, which installs them."""
    missing = [path for path in (REDIS_SERVER, REDIS_CLI, *more) if not Path(path).exists()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(
                f"{', '.join(missing)} not installed, and CI installs it (.ci/run): apt-get install redis-server"
            )
        pytest.skip(f"{', '.join(missing)} not installed; apt-get install redis-server")


def free_cluster_port() -> int:
    """A free loopback port a cluster node accepts (Redis refuses ports above 55535 in cluster mode)."""
    for _ in range(100):
        port = free_port()
        if port <= 55535:
            return port
    raise AssertionError("no free loopback port at or below 55535")


class RedisServer:
    """redis-server on 127.0.0.1:<port> with `--dir directory`, appendonly, no RDB saves; restartable on the same port.

    `cluster=True`: a cluster node (its nodes.conf in the same directory, so a restart
    rejoins with the same id and slots).
    """

    def __init__(self, directory: Path, port: int | None = None, appendfsync: str = "always", cluster: bool = False):
        needs_redis()
        self.cluster = cluster
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or (free_cluster_port() if cluster else free_port())
        self.bus_port = free_port() if cluster else 0  # the cluster bus, kept across restarts
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, replica_of: int | None = None) -> RedisServer:
        """Start (again) on the same port and directory; `replica_of`: as a replica of the server on that port."""
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory),
                "--save", "", "--appendonly", "yes", "--appendfsync", self.appendfsync,
                "--protected-mode", "yes", "--logfile", str(self.directory / "redis.log"),
                *([*CLUSTER_NODE_OPTIONS, "--cluster-port", str(self.bus_port)] if self.cluster else []),
                *(["--replicaof", "127.0.0.1", str(replica_of)] if replica_of else []),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until_sync(self.ping, timeout=10)
        return self

    def ping(self) -> bool:
        """Whether this server answers on its port: its own process, not another that holds the port
        (then this one fails to bind, exits, and the next ping says so with its log)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"redis-server exited ({self.proc.returncode}): {self.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"INFO server\r\n")
                reply = b""
                for _ in range(20):  # bounded: INFO server is a few kB
                    reply += s.recv(65536)
                    if reply.startswith(b"$") and b"\r\n" in reply:
                        length = int(reply[1 : reply.index(b"\r\n")])
                        if len(reply) >= reply.index(b"\r\n") + 2 + length:
                            break
        except (OSError, ValueError):
            return False
        return self.proc is None or f"process_id:{self.proc.pid}\r\n".encode() in reply

    def log_tail(self) -> str:
        try:
            return (self.directory / "redis.log").read_text()[-2000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: what Redis fsynced to its AOF is all that survives."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def client(self):  # -> redis.Redis
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5)

    def info(self, section: str) -> str:
        """`redis-cli INFO`-style text of one section (`CLUSTER INFO` for "cluster")."""
        command = ["CLUSTER", "INFO"] if section == "cluster" else ["INFO", section]
        done = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *command],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
        return done.stdout


# A node: cluster mode, its cluster state file beside its AOF; a node down marks the
# cluster failing for the others after 2 s; a node that is down stops only the slots
# it holds (the other nodes keep serving theirs), as docs/redis.md recommends.
CLUSTER_NODE_OPTIONS = [
    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
    "--cluster-require-full-coverage", "no",
]  # fmt: skip


class RedisClusterServers:
    """Three redis-server masters on free loopback ports made one cluster by `redis-cli --cluster create`.

    Each node has the persistence of RedisServer (AOF, appendfsync always) in its own
    directory; `node_for(key)` is the master holding a key's slot, to kill and restart.
    `replicas=1`: a replica for each master too (six nodes); a master killed fails over to it.
    """

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 0):
        needs_redis()
        self.masters, self.replicas = masters, replicas
        self.nodes = [RedisServer(directory / f"node{i}", cluster=True) for i in range(masters * (1 + replicas))]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> RedisClusterServers:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            created = subprocess.run(
                [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert created.returncode == 0, created.stdout + created.stderr
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every running node says cluster_state:ok (bounded)."""
        wait_until_sync(lambda: all("cluster_state:ok" in n.info("cluster") for n in self.nodes if n.proc), timeout)

    def wait_replicas_linked(self, timeout: float = 90) -> None:
        """Until every running replica is linked to its master (it could take over)."""

        def linked() -> bool:
            roles = [n.info("replication") for n in self.nodes if n.proc]
            replicas = [role for role in roles if "role:slave" in role]
            return len(replicas) >= self.replicas * self.masters and all("master_link_status:up" in r for r in replicas)

        wait_until_sync(linked, timeout, interval=0.2)

    def node_for(self, key: str) -> RedisServer:
        """The master of `key`'s slot, as the first running node says (after a failover: once it knows)."""
        for node in self.nodes:
            if node.proc is None:
                continue
            client = node.client()
            try:
                slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                # CLUSTER SLOTS: per range [start, end, [master host, port, id, ...], [replica ...]...]
                for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                    if int(start) <= slot <= int(end):
                        return next(n for n in self.nodes if n.port == int(primary[1]))
            finally:
                client.close()
        raise AssertionError(f"no node holds the slot of {key!r}")

    def flush(self) -> None:
        for node in self.nodes:
            client = node.client()
            client.flushall()
            client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (tests flush it with `redis_url`)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    """One three-master Redis Cluster for the session (tests flush it with `redis_url`)."""
    servers = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster")).start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def redis_plain_url(redis_server: RedisServer) -> str:
    """The shared plain server, emptied for this test."""
    client = redis_server.client()
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterServers) -> str:
    """The shared cluster, emptied for this test: a redis+cluster:// URL naming its three nodes."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(params=["plain", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """A Redis emptied for this test: the plain server, then the cluster (the same test on both)."""
    return request.getfixturevalue(f"redis_{request.param}_url")


def with_redis(config, url: str, prefix: str = "spamd:"):
    """`config` with the model in Redis at `url`."""
    return dataclasses.replace(config, redis=dataclasses.replace(config.redis, url=url, prefix=prefix))


def wait_for_port_free(port: int, timeout: float = 10.0) -> None:
    def free() -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                return False

    wait_until_sync(free, timeout)


class RedisSentinels:
    """A primary, one replica and three redis-sentinel processes on loopback, all watching one master name.

    Sentinel promotes the replica 2 s after the primary stops answering (quorum 2 of 3);
    `kill_primary` SIGKILLs the primary and waits, bounded, for the promotion; `restore`
    starts the killed server again as the new primary's replica, so the kill can repeat.
    """

    MASTER_NAME = "spamd"

    def __init__(self, directory: Path):
        needs_redis(REDIS_SENTINEL)
        self.directory = directory
        self.servers = [RedisServer(directory / "redis-a"), RedisServer(directory / "redis-b")]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.down: RedisServer | None = None  # killed, not yet restored

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports) + f"/{self.MASTER_NAME}"

    def start(self) -> RedisSentinels:
        try:
            primary, replica = self.servers
            primary.start()
            replica.start(replica_of=primary.port)
            self.wait_replica_linked(replica)
            for i, port in enumerate(self.sentinel_ports):
                directory = self.directory / f"sentinel{i}"
                directory.mkdir(parents=True, exist_ok=True)
                conf = directory / "sentinel.conf"  # Sentinel rewrites its own file: one each
                conf.write_text(
                    f"port {port}\nbind 127.0.0.1\ndir {directory}\nlogfile {directory / 'sentinel.log'}\n"
                    f"sentinel monitor {self.MASTER_NAME} 127.0.0.1 {primary.port} 2\n"
                    f"sentinel down-after-milliseconds {self.MASTER_NAME} 2000\n"
                    f"sentinel failover-timeout {self.MASTER_NAME} 10000\n"
                    f"sentinel parallel-syncs {self.MASTER_NAME} 1\n"
                )
                self.sentinels.append(subprocess.Popen([REDIS_SENTINEL, str(conf)], stdin=subprocess.DEVNULL,
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            # Every sentinel knows the replica and the two other sentinels: a failover can happen.
            wait_until_sync(lambda: all(self.sentinel_sees_all(port) for port in self.sentinel_ports), timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def sentinel(self, port: int, *command: str) -> str:
        done = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *command],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
        return done.stdout

    def sentinel_sees_all(self, port: int) -> bool:
        """This sentinel knows the two others and holds a live replica of the primary it names (one it could promote)."""
        fields = self.sentinel(port, "SENTINEL", "MASTER", self.MASTER_NAME).split()
        info = dict(zip(fields[::2], fields[1::2], strict=False))
        if info.get("num-other-sentinels") != "2":
            return False
        # SENTINEL REPLICAS as redis-cli prints it: "name", value, "ip", value, ... per replica.
        fields = self.sentinel(port, "SENTINEL", "REPLICAS", self.MASTER_NAME).split()
        starts = [i for i, field in enumerate(fields) if field == "name"] + [len(fields)]
        replicas = [
            dict(zip(fields[a:b:2], fields[a + 1 : b : 2], strict=False))
            for a, b in zip(starts, starts[1:], strict=False)
        ]
        return any(r.get("flags") == "slave" and r.get("master-link-status") == "ok" for r in replicas)

    def primary_port(self) -> int | None:
        """The primary's port as a majority of the sentinels say (None while they disagree)."""
        said = [self.sentinel(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.MASTER_NAME).split()
                for port in self.sentinel_ports]  # fmt: skip
        ports = [int(s[1]) for s in said if len(s) == 2]
        best = max(set(ports), key=ports.count, default=None)
        return best if best is not None and ports.count(best) >= 2 else None

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return next(server for server in self.servers if server.port == port)

    def wait_replica_linked(self, replica: RedisServer, timeout: float = 60) -> None:
        wait_until_sync(lambda: "master_link_status:up" in replica.info("replication"), timeout)

    def kill_primary(self, timeout: float = 90) -> tuple[RedisServer, RedisServer]:
        """SIGKILL the primary; return (killed, promoted) once the sentinels name the other and it says role:master."""
        killed = self.primary()
        killed.kill()
        self.down = killed
        promoted = next(server for server in self.servers if server is not killed)
        wait_until_sync(
            lambda: self.primary_port() == promoted.port and "role:master" in promoted.info("replication"),
            timeout,
        )
        return killed, promoted

    def kill_replica(self) -> RedisServer:
        replica = next(server for server in self.servers if server is not self.primary())
        replica.kill()
        self.down = replica
        return replica

    def restore(self, timeout: float = 90) -> None:
        """The killed server back, as the primary's replica, linked and caught up."""
        assert self.down is not None
        server, self.down = self.down, None
        server.start(replica_of=self.primary().port)
        self.wait_replica_linked(server, timeout)
        wait_until_sync(lambda: all(self.sentinel_sees_all(port) for port in self.sentinel_ports), timeout)

    def stop(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.sentinels = []
        for server in self.servers:
            server.stop()


class RedisDaemon:
    """One spamd as a subprocess on a shared Redis: its SMTP port, its control socket, its Maildir.

    `redis_settings` are more lines of its [redis] section; `args` more command-line options.
    """

    def __init__(self, root: Path, url: str, name: str, *args: str, redis_settings: str = ""):
        self.data_dir = root / name
        self.config = write_config(root / f"{name}.toml", f'[redis]\nurl = "{url}"\n{redis_settings}')
        self.process = DaemonProcess(
            "--config", self.config, "--data-dir", self.data_dir, "--smtp", "127.0.0.1:0", *args
        )  # fmt: skip
        self.port = self.process.port

    def request(self, command: str, **args: object) -> dict[str, Any]:
        with ControlClient(self.data_dir / "control.sock", timeout=60) as client:
            return client.request(command, **args)

    def train(self, messages: list[bytes], label: Label) -> list[str]:
        return self.request("train", label=str(label), messages=messages)["outcomes"]

    def probability(self, raw: bytes) -> float:
        return self.request("classify", raw=raw)["probability"]

    def delivered(self) -> list[Path]:
        maildir = self.data_dir / "Maildir"
        return folder_files(maildir) + folder_files(maildir, ".Junk")

    def stop(self) -> None:
        self.process.kill()
