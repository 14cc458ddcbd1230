"""Loopback ports for the servers tests start (Postfix, Dovecot, redis-server, sinks) that must be told one."""

from __future__ import annotations

import socket

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback TCP port free right now, and never one this process handed out before.

    The kernel may give two binds in a row the same ephemeral port: two servers told the same
    one collide, and the second's failure can hide behind the first's answers (a Redis replica
    started on its primary's port, whose PING the primary answered, waited six minutes to link).
    """
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise AssertionError("no loopback port this process has not handed out already, in 100 tries")
