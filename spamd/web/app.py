"""The web console's routes: login, the five pages (Learned among them), training, and the headers every answer carries.

Routes (every page but /login needs a session; every POST a CSRF token):

    GET  /login, POST /login, POST /logout
    GET  /                       overview          (spamd/web/pages.py)
    GET  /accuracy               live accuracy per day
    GET  /history                recent verdicts    ?verdict= &way_in= &before=
    GET  /history/{id}           one verdict, explained
    POST /history/{id}/train     train that message as spam / ham, or forget it
    GET  /train, POST /train     upload or paste messages to train (spamd/web/train.py)
    GET  /static/...             the stylesheet and icon shipped in the package

Nothing changes state over GET. Templates are jinja2 with autoescaping, so whatever
comes from a message (a Subject, a token, a sender's domain) is text on the page, never
markup; the Content-Security-Policy allows no inline script and no other origin, and no
page may be framed. HTTP is served by spamd/web/server.py on the daemon's loop.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import jinja2
import structlog
from aiohttp import web

from spamd.errors import SpamdError
from spamd.people.users import USER_NAME_RULE, is_user_name
from spamd.runtime.humanize import human_bytes, human_duration
from spamd.web import pages
from spamd.web.auth import (
    LoginThrottle,
    Session,
    Sessions,
    csrf_matches,
    load_or_create_token,
    secret_matches,
    verify_password,
)
from spamd.web.history import History
from spamd.web.server import BoundedServer, Limits, bounded_application
from spamd.web.train import ACTIONS, OUTCOME_NAMES, pasted_message, split_upload, teach

log = structlog.get_logger()

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "spamd_session"
LOGIN_COOKIE = "spamd_login"  # binds the login form's CSRF token before there is a session
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
MAX_SECRET_CHARS = 1024
# A browser sends a dozen header fields and keeps a few connections; an upload of 16 MiB
# takes well under a second on a LAN. Past 64 connections the oldest idle one is closed.
LIMITS = Limits(head_timeout_s=10.0, request_timeout_s=60.0, max_body_bytes=MAX_UPLOAD_BYTES, max_headers=64,
                max_line_bytes=8190, max_connections=64)  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}
PUBLIC_PATHS = frozenset({"/login"})


class Console:
    """The console's aiohttp application on its BoundedServer, reading `daemon` on its loop."""

    def __init__(self, daemon: Any, history: History):
        self.daemon = daemon
        self.history = history
        self.sessions = Sessions()
        self.throttle = LoginThrottle()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every template, whatever its name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            num=_num, pct=_pct, bytes=human_bytes, duration=human_duration, utc=_utc, ago=_ago
        )
        app = bounded_application(LIMITS, [self._security_headers, self._require_login])
        r = app.router
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_post("/logout", self.logout)
        r.add_get("/", self.overview)
        r.add_get("/accuracy", self.accuracy)
        r.add_get("/history", self.history_page)
        r.add_get(r"/history/{id:\d{1,18}}", self.verdict_page)
        r.add_post(r"/history/{id:\d{1,18}}/train", self.train_verdict)
        r.add_get("/learned", self.learned_page)
        r.add_get("/train", self.train_form)
        r.add_post("/train", self.train)
        r.add_static("/static", HERE / "static", show_index=False, follow_symlinks=False)
        self.http = BoundedServer(
            app, LIMITS, daemon.config.web.allowed_peers, what="the web console", setting="web.listen, or --web",
            on_refused=lambda peer: log.warning("web_peer_refused", peer=peer), on_failure=self._failed,
        )  # fmt: skip

    @property
    def address(self) -> tuple[str, int] | None:
        return self.http.address

    @property
    def data_dir(self) -> Path:
        return Path(self.daemon.config.data_dir)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        await asyncio.to_thread(load_or_create_token, self.data_dir)  # there from the first start on
        return await self.http.start(host, port)

    async def close(self) -> None:
        await self.http.close()

    # ------------------------------------------------------------ middlewares

    @web.middleware
    async def _security_headers(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as e:
            e.headers.update(SECURITY_HEADERS)
            raise
        response.headers.update(SECURITY_HEADERS)
        if request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "max-age=3600"
        return response

    @web.middleware
    async def _require_login(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if path in PUBLIC_PATHS or path.startswith("/static/"):
            return await handler(request)
        session = self._session(request)
        if session is None:
            if request.method in ("GET", "HEAD"):
                raise web.HTTPSeeOther("/login")
            return self._error(request, 403, "Log in first.")
        if request.method == "POST":
            form = await request.post()
            if not csrf_matches(form.get("csrf"), session.csrf):
                return self._error(
                    request, 403, "The form's CSRF token is missing or stale: reload the page and send it again."
                )
        return await handler(request)

    def _failed(self, request: web.BaseRequest, exc: BaseException | None) -> None:
        log.error("web_request_failed", path=request.path, error=f"{type(exc).__name__}: {exc}", exc_info=exc)
        self.daemon.metrics.error("web_request_failed", error=f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------ rendering

    def _render(self, request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        session = self._session(request)
        page = self.templates.get_template(template).render(
            csrf=session.csrf if session else "", logged_in=session is not None, path=request.path, **values
        )
        return web.Response(text=page, status=status, content_type="text/html", charset="utf-8")

    def _session(self, request: web.Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def _error(self, request: web.Request, status: int, message: str) -> web.Response:
        return self._render(request, "error.html", status=status, title=str(status), message=message)

    # ------------------------------------------------------------ login

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        if self._session(request) is not None:
            raise web.HTTPSeeOther("/")
        return self._login_page(request, 200, None)

    def _login_page(
        self, request: web.Request, status: int, problem: str | None, retry_after: float | None = None
    ) -> web.Response:
        form_token = secrets.token_urlsafe(32)
        response = self._render(request, "login.html", status=status, title="Log in", form_token=form_token, problem=problem,
                                has_password=bool(self.daemon.config.web.password_hash))  # fmt: skip
        response.set_cookie(LOGIN_COOKIE, form_token, httponly=True, samesite="Strict", path="/login")
        if retry_after is not None:
            response.headers["Retry-After"] = str(max(1, round(retry_after)))
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        expected = request.cookies.get(LOGIN_COOKIE)
        if expected is None or not csrf_matches(form.get("csrf"), expected):
            return self._error(
                request, 403, "The login form's CSRF token is missing or stale: reload the page and log in again."
            )
        peer = request.remote or "?"
        wait = self.throttle.retry_after(peer)
        if wait is not None:
            log.warning("web_login_throttled", peer=peer, retry_after_s=round(wait))
            return self._login_page(
                request, 429, f"Too many failed logins: try again in {max(1, round(wait))} s.", wait
            )
        secret = form.get("secret")
        if not isinstance(secret, str) or not 0 < len(secret) <= MAX_SECRET_CHARS or not await self._secret_ok(secret):
            self.throttle.failed(peer)
            log.warning("web_login_failed", peer=peer)
            return self._login_page(request, 401, "Wrong token or password.")
        session = self.sessions.create()
        log.info("web_login_succeeded", peer=peer)
        done = web.HTTPSeeOther("/")
        done.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="Strict", path="/")
        done.del_cookie(LOGIN_COOKIE, path="/login")
        raise done

    async def _secret_ok(self, secret: str) -> bool:
        try:
            token = await asyncio.to_thread(load_or_create_token, self.data_dir)
        except SpamdError as e:  # unreadable: the password may still do
            log.error("web_token_unreadable", error=str(e))
            self.daemon.metrics.error("web_token_unreadable", error=str(e))
            token = None
        if secret_matches(secret, token):
            return True
        password_hash = self.daemon.config.web.password_hash
        return bool(password_hash) and await asyncio.to_thread(verify_password, secret, password_hash)

    async def logout(self, request: web.Request) -> web.StreamResponse:
        self.sessions.drop(request.cookies.get(SESSION_COOKIE))
        done = web.HTTPSeeOther("/login")
        done.del_cookie(SESSION_COOKIE, path="/")
        raise done

    # ------------------------------------------------------------ pages

    async def overview(self, request: web.Request) -> web.Response:
        listen = None if self.address is None else "{}:{}".format(*self.address)
        return self._render(request, "overview.html", title="Overview", **pages.overview(self.daemon, listen))

    async def accuracy(self, request: web.Request) -> web.Response:
        return self._render(request, "accuracy.html", title="Accuracy", **pages.accuracy(self.daemon))

    async def history_page(self, request: web.Request) -> web.Response:
        query = request.query
        before = query.get("before", "")
        verdict = query.get("verdict", "")
        way_in = query.get("way_in", "")
        context = pages.history(
            self.daemon,
            int(before) if before.isdigit() and len(before) <= 18 else None,
            verdict if verdict in ("ham", "unsure", "spam") else "",
            way_in if way_in.isalpha() and len(way_in) <= 20 else "",
        )
        return self._render(request, "history.html", title="History", **context)

    async def learned_page(self, request: web.Request) -> web.Response:
        """What spamd learned from people's moves, or why not (spamd/people/learned.py): the latest records."""
        user = request.query.get("user", "")
        message_id = request.query.get("message_id", "")[:200]
        records = self.daemon.engine.learning_records(
            user if is_user_name(user) else None, None, message_id or None, 200
        )
        return self._render(request, "learned.html", title="Learned", records=records, user=user,
                            message_id=message_id, in_redis=not self.daemon.engine.store.keeps_snapshots)  # fmt: skip

    def _entry(self, request: web.Request) -> Any:
        entry = self.history.get(int(request.match_info["id"]))
        if entry is None:
            raise web.HTTPNotFound(
                text="no such verdict in the history (it may have been dropped as newer ones came)\n"
            )
        return entry

    async def verdict_page(self, request: web.Request) -> web.Response:
        entry = self._entry(request)
        taught = request.query.get("taught", "")
        return self._render(request, "verdict.html", title=f"Verdict {entry.id}", **pages.verdict(self.daemon, entry),
                            taught=OUTCOME_NAMES.get(taught))  # fmt: skip

    async def train_verdict(self, request: web.Request) -> web.StreamResponse:
        entry = self._entry(request)
        form = await request.post()
        action = form.get("action")
        if action not in ACTIONS:
            return self._error(request, 400, "Train as spam, as ham, or forget.")
        if entry.raw is None:
            return self._error(request, 410, "This message is no longer kept: train it from the Train page.")
        # For the user it was scored for, when it named one: as that user's own move would.
        layer_user = entry.user if is_user_name(entry.user) else None
        taught = await teach(self.daemon.scorer, str(action), [(f"verdict {entry.id}", entry.raw)], layer_user)
        if taught.error:
            return self._error(request, 503, f"Not trained: {taught.error}")
        raise web.HTTPSeeOther(f"/history/{entry.id}?taught={taught.results[0][1]}")

    async def train_form(self, request: web.Request) -> web.Response:
        return self._render(request, "train.html", title="Train", taught=None, model=self._model_counts(), problem=None,
                            outcome_names=OUTCOME_NAMES, max_upload=MAX_UPLOAD_BYTES)  # fmt: skip

    async def train(self, request: web.Request) -> web.Response:
        form = await request.post()
        action = form.get("action")
        messages: list[tuple[str, bytes]] = []
        upload = form.get("message_file")
        if isinstance(upload, web.FileField):
            data = await asyncio.to_thread(upload.file.read)
            if data:
                messages += await asyncio.to_thread(split_upload, data, upload.filename or "upload")
        pasted = form.get("message_text")
        if isinstance(pasted, str) and pasted.strip():
            messages.append(("pasted message", pasted_message(pasted)))
        user = str(form.get("user") or "").strip()
        problem = None
        if action not in ACTIONS:
            problem = "Choose spam, ham or forget."
        elif not messages:
            problem = "Upload a message file (.eml or mbox) or paste a message."
        elif user and not is_user_name(user):
            problem = f"A user name is {USER_NAME_RULE}."
        taught = None if problem else await teach(self.daemon.scorer, str(action), messages, user or None)
        status = 400 if problem else (503 if taught and taught.error else 200)
        return self._render(request, "train.html", status=status, title="Train", taught=taught, model=self._model_counts(),
                            problem=problem, outcome_names=OUTCOME_NAMES, max_upload=MAX_UPLOAD_BYTES)  # fmt: skip

    def _model_counts(self) -> dict[str, int] | None:
        try:
            model = self.daemon.engine.model
            return {"ham": int(model.doc_totals[0]), "spam": int(model.doc_totals[1])}
        except SpamdError:
            return None


# ---------------------------------------------------------------- template filters


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value * 100:.{digits}f}%"


def _utc(when: float | None, fmt: str = "%Y-%m-%d %H:%M:%S", zone: str = " UTC") -> str:
    return "-" if when is None else time.strftime(fmt, time.gmtime(when)) + zone


def _ago(when: float | None) -> str:
    return "-" if when is None else human_duration(max(0.0, time.time() - when)) + " ago"
