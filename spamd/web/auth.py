"""Who may use the web console: the token, a password hash, sessions, CSRF tokens and throttled logins.

- **The token**: 32 random bytes (URL-safe base64) in `<data_dir>/web-token`, created
  owner-only (0600, owned by the data directory's owner) by whichever needs it first:
  the daemon starting its console, or `spamctl web-token`, which prints it. It is read
  at each login, so replacing it (`spamctl web-token --new`) applies at once.
- **A password**, optional: `[web] password_hash`, `scrypt$N$r$p$SALT$HASH` (hex), as
  `hash_password` makes it (`spamctl web-token --hash`). Checked in a thread: scrypt
  takes tens of milliseconds by design.
- **Sessions**: a random id in an HttpOnly, SameSite=Strict cookie; kept in memory (a
  restart logs everyone out), at most MAX_SESSIONS, each ending after SESSION_IDLE_S
  unused. Each holds the CSRF token its forms carry. The login form, before any
  session, carries one bound to a cookie of its own.
- **Failed logins**: FAILURES_PER_PEER per peer, and FAILURES_OVERALL in all, within
  THROTTLE_WINDOW_S; past either, every attempt is refused (429), right or wrong, until
  the window has passed.

It serves no HTTP itself (spamd/web/app.py does) and keeps nothing on disk but the token.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spamd.errors import SpamdError

TOKEN_FILE = "web-token"
MAX_SESSIONS = 64
SESSION_IDLE_S = 12 * 3600.0
THROTTLE_WINDOW_S = 60.0
FAILURES_PER_PEER = 5
FAILURES_OVERALL = 20
# scrypt's cost: N = 2**15, r = 8 takes 32 MiB and ~0.1 s per check on one core of this
# machine (hashlib.scrypt); with the throttle above that is the guessing rate's bound.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
_SCRYPT_MAXMEM = 256 * 1024 * 1024


# ---------------------------------------------------------------- the token


def token_path(data_dir: Path) -> Path:
    return Path(data_dir) / TOKEN_FILE


def load_or_create_token(data_dir: Path) -> str:
    """The console's token, created (owner-only) if there is none yet."""
    path = token_path(data_dir)
    try:
        return _read_token(path)
    except FileNotFoundError:
        pass
    _write_token(path, secrets.token_urlsafe(32), replace=False)
    return _read_token(path)


def replace_token(data_dir: Path) -> str:
    """A new token in place of the old one; sessions logged in with the old one stay."""
    token = secrets.token_urlsafe(32)
    _write_token(token_path(data_dir), token, replace=True)
    return token


def _read_token(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SpamdError(f"{path}: cannot read the web console's token: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise SpamdError(
                f"{path}: the web console's token is readable by others; chmod 600 it, or delete it for a new one"
            )
        token = f.read(4096).decode("ascii", "replace").strip()
    if len(token) < 16:
        raise SpamdError(f"{path}: not a web console token (too short); delete it and a new one is made")
    return token


def _write_token(path: Path, token: str, replace: bool) -> None:
    """Write owner-only via a temp file; without `replace`, a token someone else wrote first wins."""
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = directory.stat()
        temp = directory / f".{path.name}.tmp-{secrets.token_hex(6)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise SpamdError(f"{path}: cannot create the web console's token: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(token.encode("ascii") + b"\n")
            if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0):
                # root (spamctl, say) makes it for the daemon, which runs as the data directory's owner
                os.fchown(f.fileno(), owner.st_uid, owner.st_gid)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(temp, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)  # fails if the file exists: a token made meanwhile is kept
    except OSError as e:
        raise SpamdError(f"{path}: cannot write the web console's token: {e.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


# ---------------------------------------------------------------- the password hash


def hash_password(password: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """`scrypt$N$r$p$SALT$HASH`, salt and hash in hex, for `[web] password_hash`."""
    if not password:
        raise SpamdError("an empty password cannot be hashed")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32)
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def verify_password(password: str, encoded: str) -> bool:
    """Whether `password` is the one `encoded` was made from; False for anything malformed."""
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        want = bytes.fromhex(digest)
        got = hashlib.scrypt(
            password.encode("utf-8"), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
            maxmem=_SCRYPT_MAXMEM, dklen=len(want),
        )  # fmt: skip
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got, want)


def secret_matches(secret: str, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(secret.encode("utf-8"), token.encode("utf-8"))


# ---------------------------------------------------------------- sessions and CSRF


@dataclass
class Session:
    id: str
    csrf: str
    created: float
    last_seen: float


class Sessions:
    """Logged-in sessions by id, the least recently used dropped past MAX_SESSIONS."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
        idle_s: float = SESSION_IDLE_S,
    ):
        self.clock = clock
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> Session:
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now)
        self._sessions[session.id] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if now - session.last_seen > self.idle_s:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def drop(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)


def csrf_matches(sent: object, expected: str) -> bool:
    return isinstance(sent, str) and bool(sent) and hmac.compare_digest(sent.encode("utf-8"), expected.encode("utf-8"))


# ---------------------------------------------------------------- failed logins


@dataclass
class LoginThrottle:
    """Failed logins in the last THROTTLE_WINDOW_S, per peer and in all."""

    clock: Callable[[], float] = time.monotonic
    window_s: float = THROTTLE_WINDOW_S
    per_peer: int = FAILURES_PER_PEER
    overall: int = FAILURES_OVERALL
    failures: deque[tuple[float, str]] = field(default_factory=deque)

    def _trim(self, now: float) -> None:
        while self.failures and now - self.failures[0][0] >= self.window_s:
            self.failures.popleft()

    def retry_after(self, peer: str) -> float | None:
        """Seconds until `peer` may try again, or None if it may now."""
        now = self.clock()
        self._trim(now)
        mine = [when for when, who in self.failures if who == peer]
        if len(mine) >= self.per_peer:
            return max(0.0, mine[-self.per_peer] + self.window_s - now)
        if len(self.failures) >= self.overall:
            return max(0.0, self.failures[-self.overall][0] + self.window_s - now)
        return None

    def failed(self, peer: str) -> None:
        now = self.clock()
        self._trim(now)
        self.failures.append((now, peer))
        while len(self.failures) > self.overall:  # no more are needed to decide
            self.failures.popleft()
