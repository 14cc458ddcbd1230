"""Hostile clients on the web console's port leave SMTP serving and the console answering.

Real parts: spamd as a subprocess with `--web`, raw sockets for the attacks (as
tests/test_metrics.py attacks /metrics), http.client for a logged-in session, smtplib
beside them.
"""

from __future__ import annotations

import http.client
import re
import signal
import socket
import time

import pytest

from spamd.model.bayes import Label
from spamd.web.app import LIMITS, MAX_UPLOAD_BYTES
from spamd.web.auth import load_or_create_token
from tests.daemon_helpers import DaemonProcess, make_message, send, write_config


def answer(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send `request`, half-close, read to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def logged_in(port: int, token: str) -> tuple[str, str]:
    """(session cookie, CSRF token) of a session opened with http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/login")
    response = conn.getresponse()
    cookie = response.getheader("Set-Cookie")
    found = re.search(r'name="csrf" value="([^"]+)"', response.read().decode())
    assert cookie is not None and found is not None
    form_cookie, form_csrf = cookie.split(";", 1)[0], found.group(1)
    body = f"csrf={form_csrf}&secret={token}"
    conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded", "Cookie": form_cookie})
    response = conn.getresponse()
    response.read()
    assert response.status == 303
    session = next(v for k, v in response.getheaders() if k == "Set-Cookie" and v.startswith("spamd_session=")).split(
        ";", 1
    )[0]
    conn.request("GET", "/train", headers={"Cookie": session})
    response = conn.getresponse()
    found = re.search(r'name="csrf" value="([^"]+)"', response.read().decode())
    assert found is not None
    csrf = found.group(1)
    conn.close()
    return session, csrf


def console_answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/login")
        response = conn.getresponse()
        return response.status == 200 and b"Log in" in response.read()
    finally:
        conn.close()


@pytest.mark.slow
def test_hostile_clients_on_the_web_port_leave_smtp_and_the_console_serving(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", "--web", "127.0.0.1:0")
    idle: list[socket.socket] = []
    try:
        started = daemon.wait_for("daemon_started")
        smtp_port, port = started["smtp_port"], started["web_port"]
        session, csrf = logged_in(port, load_or_create_token(data))

        for _ in range(200):  # idle connections, past the server's limit
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        slow = socket.create_connection(("127.0.0.1", port), timeout=20)
        slow.sendall(b"GET /hist")  # slowloris: half a request line, then nothing
        idle.append(slow)

        assert answer(port, bytes(range(256)) * 4 + b"\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert answer(port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: spamd\r\n\r\n").startswith(b"HTTP/1.1 431 ")
        many = b"".join(b"X-%d: %d\r\n" % (i, i) for i in range(LIMITS.max_headers + 10))
        assert answer(port, b"GET /login HTTP/1.1\r\nHost: spamd\r\n" + many + b"\r\n").startswith(b"HTTP/1.1 431 ")
        # An oversized upload, declared: refused before a byte of it is read, logged in or not.
        declared = b"POST /train HTTP/1.1\r\nHost: spamd\r\nCookie: %s\r\nContent-Type: multipart/form-data; boundary=b\r\n" \
                   b"Content-Length: %d\r\n\r\n" % (session.encode(), MAX_UPLOAD_BYTES + 1)  # fmt: skip
        assert answer(port, declared + b"--b\r\n").startswith(b"HTTP/1.1 413 ")
        # ... and undeclared (chunked), past the limit while it is read: refused, nothing trained.
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST /train HTTP/1.1\r\nHost: spamd\r\nCookie: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" % session.encode())  # fmt: skip
            chunk = b"csrf=" + csrf.encode() + b"&action=spam&message_text=" + b"x" * (1 << 20)
            reply = b""
            try:
                for _ in range(MAX_UPLOAD_BYTES // len(chunk) + 2):
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    chunk = b"x" * (1 << 20)
                s.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused and closed while the rest was still coming
            try:
                while part := s.recv(65536):
                    reply += part
            except ConnectionResetError:
                pass
            assert reply == b"" or reply.startswith(b"HTTP/1.1 413 "), reply[:200]

        # With all of that open, a delivery and the console go through at once.
        began = time.monotonic()
        send(smtp_port, make_message(Label.HAM, 1))
        assert console_answers(port)
        assert time.monotonic() - began < 3.0
        # Idle and slow clients are cut off after the head timeout.
        assert slow.recv(100) == b""
        assert not daemon.events("training_applied")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
        assert not daemon.events("web_request_failed")
    finally:
        for s in idle:
            s.close()
        daemon.kill()
