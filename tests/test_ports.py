"""The harness's loopback ports: never handed out twice, and a Redis told a port another server holds fails at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ports import free_port
from tests.redis_helpers import RedisServer


def test_no_port_is_handed_out_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_redis_on_a_port_another_redis_holds_fails_at_start_with_its_log(tmp_path: Path) -> None:
    """Not started as if it were the other one, whose answers it would then be read by (a replica
    that waited minutes for a link to itself)."""
    first = RedisServer(tmp_path / "first").start()
    try:
        second = RedisServer(tmp_path / "second", port=first.port)
        with pytest.raises(AssertionError, match="Address already in use|exited"):
            second.start(replica_of=first.port)
        second.stop()
    finally:
        first.stop()
