"""A real redis-server for tests: loopback, a free port, its own directory, AOF on; and fixtures over it.

Not a conftest: a test module imports the fixtures it uses. Skips with a reason
when /usr/bin/redis-server is absent. Nothing here fakes Redis.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_helpers import wait_until_sync

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    """A loopback port free right now (redis-server has no --port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1:<port> with `--dir directory`, appendonly, no RDB saves; restartable on the same port."""

    def __init__(self, directory: Path, port: int | None = None, appendfsync: str = "always"):
        if not Path(REDIS_SERVER).exists():
            pytest.skip(f"redis-server not installed ({REDIS_SERVER}); apt-get install redis-server")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory),
                "--save", "", "--appendonly", "yes", "--appendfsync", self.appendfsync,
                "--protected-mode", "yes", "--logfile", str(self.directory / "redis.log"),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until_sync(self.ping, timeout=10)
        return self

    def ping(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"redis-server exited ({self.proc.returncode}): {self.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

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


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (tests flush it with `redis_url`)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The shared server, emptied for this test."""
    client = redis_server.client()
    client.flushall()
    client.close()
    yield redis_server.url


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

