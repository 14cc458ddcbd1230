"""Fixtures: our loopback DNS server (spamd_lab.loopback_dns) over records the test writes, and one that never answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from spamd_lab.loopback_dns import SOA, ZoneServer, txt_strings

__all__ = ["SOA", "ZoneServer", "silent_nameserver", "txt_strings", "zone_server"]


@pytest.fixture
def zone_server() -> Iterator[ZoneServer]:
    server = ZoneServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def silent_nameserver() -> Iterator[str]:
    """A loopback UDP port that takes queries and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
