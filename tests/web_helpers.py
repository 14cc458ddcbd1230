"""Helpers for the web console tests: a logged-in aiohttp client, forms' CSRF tokens, hostile messages.

Real parts only: the console runs in a real Daemon (on the test's loop, or as a
subprocess), reached over loopback TCP with aiohttp's client or a real browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from spamd.web.auth import load_or_create_token

CSRF_RE = re.compile(r'name="csrf" value="([^"]*)"')
HOSTILE_SUBJECTS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</title><script>document.title='owned'</script>",
    "=?utf-8?b?PHNjcmlwdD5hbGVydCgyKTwvc2NyaXB0Pg==?=",  # RFC 2047 for <script>alert(2)</script>
]


def hostile_message(n: int, subject: str) -> bytes:
    return (
        f'From: "<b>bold</b>" <x{n}@evil.example>\n'
        "To: user@example.com\n"
        f"Subject: {subject}\n"
        f"Message-ID: <hostile-{n}@evil.example>\n"
        "\n"
        f"<script>alert({n})</script> free money winner prize claim <img src=x onerror=alert({n})>\n"
    ).encode()


def csrf_of(page: str) -> str:
    m = CSRF_RE.search(page)
    assert m is not None and m.group(1), "no CSRF token in the page"
    return m.group(1)


class WebClient:
    """An aiohttp client session on the console, with the cookie jar browsers have (cookies for IP hosts)."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.session = aiohttp.ClientSession(self.base, cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf = ""

    async def __aenter__(self) -> WebClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def login(self, secret: str, expect: int = 303) -> aiohttp.ClientResponse:
        page = await (await self.session.get("/login")).text()
        response = await self.session.post(
            "/login", data={"csrf": csrf_of(page), "secret": secret}, allow_redirects=False
        )
        assert response.status == expect, (response.status, await response.text())
        if expect == 303:
            self.csrf = csrf_of(await (await self.session.get("/train")).text())
        return response

    async def login_with_token(self, data_dir: Path) -> None:
        await self.login(load_or_create_token(data_dir))

    async def page(self, path: str, status: int = 200) -> str:
        response = await self.session.get(path, allow_redirects=False)
        text = await response.text()
        assert response.status == status, (path, response.status, text[:500])
        return text

    async def post(self, path: str, data: object, status: int, csrf: bool = True) -> aiohttp.ClientResponse:
        if csrf and isinstance(data, dict):
            data = {"csrf": self.csrf, **data}
        elif csrf and isinstance(data, aiohttp.FormData):
            data.add_field("csrf", self.csrf)
        response = await self.session.post(path, data=data, allow_redirects=False)
        assert response.status == status, (path, response.status, (await response.text())[:500])
        return response


def stat_values(page: str) -> dict[str, int]:
    """The overview's counts, as its data-stat attributes give them."""
    return {name: int(value) for name, value in re.findall(r'data-stat="([^"]+)" data-value="(-?\d+)"', page)}
