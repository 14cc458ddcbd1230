"""Maildir++: delivery, the watchdog bridge, and folder moves turned into training decisions.

Layout (Dovecot and Courier): the Maildir root is the INBOX (`cur/ new/ tmp/`),
each other folder a dot-directory beside them (`.Junk/`, `.Trash/`, `.Work.2024/`).
A message file is named `<base>[:2,<flags>]`: the base is unique in the Maildir
and survives flag changes (`cur/` renames) and `new/` -> `cur/`; IMAP servers keep
it, or make a new one, when they move a message between folders.

Move detection. Each Maildir has a `SeenIndex`: base name -> (folder, message key)
for every file spamd has seen, and message key -> folder. When a file appears
in a folder (inotify create / moved-to, or found by the start-up scan):
  - base known, same folder: a flag change or new/ -> cur/: nothing.
  - base known, other folder: a move from there.
  - base unknown: read the file (the only time a file is read); its key known
    to the index at another folder is a move under a new name (Dovecot's
    hard-link copy + expunge); otherwise the ledger decides (below).
A move into Junk from any other folder is spam; out of Junk into any folder but
Trash is ham; anything else (Junk -> Trash, between ordinary folders) is not a
training event. An unknown file in Junk is spam unless it carries spamd's own
spam flag (then a delivery agent filed it by spamd's verdict, no person did); an
unknown file elsewhere (not Trash) is ham if the ledger holds its key as spam
(a person moved it out of Junk while spamd was not looking). spamd records its
own deliveries in the index before renaming them into place, so they never
look like moves.

The start-up catch-up runs exactly that over a directory listing: O(files)
`readdir` entries, but only files whose base is not in the index are read, so
after the first start it costs a listing plus the messages that arrived or were
renamed while spamd was down. The index is persisted (msgpack) with snapshots and
at shutdown. A stale or lost index is safe: a message re-decided from an older
index, or from the ledger alone, gets the label it already holds, and training
the same label twice is a ledger no-op.

This module decides; it does not score or learn. It calls the `score` and
`learn` functions the daemon gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import itertools
import os
import re
import socket
import stat
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack
import structlog
from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from spamd.config import MaildirConfig
from spamd.errors import SpamdError, StoreError, StoreUnavailableError
from spamd.helper_processes import HelperUnavailable
from spamd.message import message_key
from spamd.model import Label, Verdict
from spamd.scheduling import threads_started_here_yield_to_the_loop
from spamd.scoring import Scored, has_spam_status, spam_flagged
from spamd.store import write_atomically

if TYPE_CHECKING:
    from spamd.frontends.delivery import DeliveryProcesses

log = structlog.get_logger()

T = TypeVar("T")

INBOX = ""  # the Maildir root's own cur/new/tmp
INDEX_FORMAT = "spamd-maildir-index"
INDEX_VERSION = 1
_SIZE_FIELDS_RE = re.compile(r",[SW]=\d+")
# Suffix of the name spamd gives the scored copy of a message it files: derived
# from the original's base, so a filing interrupted between rename and unlink is
# recognised at the next start (the original is then removed, not scored twice).
FILED_MARK = ".spamd"
STALE_TMP_S = 36 * 3600


@dataclass(frozen=True, slots=True)
class Location:
    folder: str  # INBOX ("") or a Maildir++ folder name such as ".Junk"
    sub: str  # "new" or "cur"
    name: str
    path: Path

    @property
    def base(self) -> str:
        return base_of(self.name)


def base_of(name: str) -> str:
    """The unique part of a Maildir file name, before the ':2,<flags>' info."""
    return name.split(":", 1)[0]


def filed_base(base: str, size: int) -> str:
    """Name of spamd's scored copy of `base`: size fields replaced (Dovecot trusts ,S=)."""
    return f"{_SIZE_FIELDS_RE.sub('', base)}{FILED_MARK},S={size}"


# ---------------------------------------------------------------- the seen index


class SeenIndex:
    """Where spamd last saw each message of one Maildir, by base name and by message key."""

    def __init__(self) -> None:
        self.by_base: dict[str, tuple[str, bytes]] = {}
        self.by_key: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self.by_base)

    def record(self, base: str, folder: str, key: bytes) -> None:
        self.by_base[base] = (folder, key)
        self.by_key[key] = folder

    def forget(self, base: str, folder: str | None = None) -> None:
        """Drop `base` (only if it was last seen in `folder`, when given)."""
        entry = self.by_base.get(base)
        if entry is None or (folder is not None and entry[0] != folder):
            return
        del self.by_base[base]
        if self.by_key.get(entry[1]) == entry[0]:
            del self.by_key[entry[1]]

    def keep_only(self, bases: set[str]) -> int:
        """Forget every base not in `bases` (deleted while spamd was down); rebuild by_key."""
        gone = [b for b in self.by_base if b not in bases]
        for base in gone:
            del self.by_base[base]
        self.by_key = {key: folder for folder, key in self.by_base.values()}
        return len(gone)

    def export(self) -> list[list[Any]]:
        return [[base, folder, key] for base, (folder, key) in self.by_base.items()]

    @classmethod
    def restore(cls, rows: list[list[Any]]) -> "SeenIndex":
        index = cls()
        for base, folder, key in rows:
            index.record(base, folder, key)
        return index


def encode_indexes(rows: dict[str, list[list[Any]]]) -> bytes:
    return msgpack.packb({"format": INDEX_FORMAT, "version": INDEX_VERSION, "maildirs": rows}, use_bin_type=True)


def load_indexes(path: Path) -> dict[str, SeenIndex]:
    """The persisted indexes, or none if missing or unreadable (catch-up then rebuilds them)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        payload = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
        if payload.get("format") != INDEX_FORMAT or payload.get("version") != INDEX_VERSION:
            raise ValueError(f"unknown format {payload.get('format')!r} version {payload.get('version')!r}")
        return {root: SeenIndex.restore(rows) for root, rows in payload["maildirs"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as e:
        log.warning("maildir_index_unreadable", path=str(path), error=str(e), action="rebuilding from the folders")
        return {}


# ---------------------------------------------------------------- ownership

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Ownership:
    """Owner, group and modes of what spamd creates in a Maildir: those of its root, as Dovecot derives them.

    Dovecot gives a new folder its Maildir root's mode and a new file that mode
    without execute bits (0700 -> 0600, 0770 -> 0660), in the root's group. spamd
    does the same, so the mail server can always use what spamd made. It applies
    them only through descriptors of objects spamd itself just opened without
    following links; it never changes anything by a path.
    """

    uid: int
    gid: int
    dir_mode: int
    file_mode: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Ownership":
        # The set-group-ID bit is kept: group-shared Maildirs rely on it for new folders.
        dir_mode = stat.S_IMODE(st.st_mode) & 0o2777
        return cls(st.st_uid, st.st_gid, dir_mode, dir_mode & 0o666)

    def apply(self, fd: int, directory: bool) -> None:
        """Give an object spamd created (open as `fd`) this owner, group and mode, as far as allowed.

        Does not raise for an owner it may not set: `problem()` said so at start.
        """
        mode = self.dir_mode if directory else self.file_mode
        # The mode first, while spamd still owns the object: root then needs no CAP_FOWNER.
        # (A chown keeps a directory's set-group-ID bit; files get no set-ID bits here.)
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            try:
                os.fchmod(fd, mode)
            except PermissionError:
                # systemd's RestrictSUIDSGID= refuses the set-group-ID bit: the rest still applies.
                with contextlib.suppress(PermissionError):
                    os.fchmod(fd, mode & 0o777)
        st = os.fstat(fd)
        uid = self.uid if st.st_uid != self.uid and os.geteuid() == 0 else -1
        gid = self.gid if st.st_gid != self.gid else -1
        if uid != -1 or gid != -1:
            try:
                os.fchown(fd, uid, gid)
            except PermissionError:
                pass  # not root and not in the group: reported once by problem()

    def problem(self, root: Path) -> str | None:
        """Why the mail server may not be able to use what spamd creates here, or None when it can."""
        euid = os.geteuid()
        if euid == 0 or euid == self.uid:
            return None
        if self.gid in os.getgroups() or self.gid == os.getegid():
            if self.dir_mode & 0o070 == 0o070:
                return None  # a group-shared Maildir: the mail server gets group access to it
        return (
            f"{root}: owned by uid {self.uid} gid {self.gid} mode {self.dir_mode:04o}, but spamd runs as uid {euid}: "
            f"folders and messages it creates there would be spamd's and unusable by the mail server; "
            f"run spamd as the Maildir's user (User= in spamd.service) or as root"
        )


def _open_dir(parent_fd: int, name: str, where: Path) -> int:
    """A sub-directory's descriptor, refusing a symbolic link (a user could point it anywhere).

    Failures are OSErrors naming `where`, so delivery answers them as any disk failure (451).
    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            refused = "a symbolic link or not a directory; spamd does not follow links in a Maildir"
            raise OSError(e.errno, refused, str(where)) from None
        raise OSError(e.errno, e.strerror, str(where)) from None


def _make_dir(parent_fd: int, name: str, where: Path, ownership: Ownership | None, repaired: list[str] | None = None) -> int:
    """`name` under `parent_fd`, created with `ownership` if missing; its descriptor.

    One that a root spamd once left root's gets `ownership` too, and is added to `repaired`.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        created = True
    except FileExistsError:
        created = False
    fd = _open_dir(parent_fd, name, where)
    try:
        if ownership is not None and not created and _made_by_root_spamd(fd, ownership):
            created = True
            if repaired is not None:
                repaired.append(str(where))
        if ownership is not None and created:
            ownership.apply(fd, directory=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _made_by_root_spamd(fd: int, ownership: Ownership) -> bool:
    # Folders an earlier spamd running as root made root's (0755) broke Dovecot's
    # moves into Junk ("[SERVERBUG] Internal error"); layout folders in that state are
    # repaired at start. Only spamd's own layout: nothing else is re-owned.
    return os.geteuid() == 0 and ownership.uid != 0 and os.fstat(fd).st_uid == 0


def _open_root(root: Path) -> tuple[int, Ownership]:
    """Open the Maildir root, creating it (with its parents) if missing; its descriptor and ownership.

    A missing root gets the owner and group of its nearest existing parent and
    mode 0700, as an MDA creating a user's first Maildir would.
    """
    missing: list[str] = []
    existing = root
    while not existing.exists():
        if existing.parent == existing:
            break
        missing.append(existing.name)
        existing = existing.parent
    fd = os.open(existing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parent = os.fstat(fd)
        made = Ownership(parent.st_uid, parent.st_gid, 0o700, 0o600)
        where = existing
        for name in reversed(missing):
            where = where / name
            child = _make_dir(fd, name, where, made)
            os.close(fd)
            fd = child
        return fd, Ownership.of(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------- one Maildir


_counter = itertools.count()
_HOSTNAME = socket.gethostname().replace("/", r"\057").replace(":", r"\072") or "localhost"


def unique_name() -> str:
    now = time.time()
    return f"{int(now)}.M{int(now % 1 * 1e6)}P{os.getpid()}Q{next(_counter)}.{_HOSTNAME}"


class RecentNames:
    """Names added in the last `keep_s` to 2 x `keep_s` seconds, without a timer or a lock.

    Added on the loop, looked up on watchdog's thread. A lookup that races a
    turnover can miss a name: the event then goes to the loop, which finds the
    name in the index and does nothing, as it did for every event before.
    """

    def __init__(self, keep_s: float = 10.0):
        self.keep_s = keep_s
        self._current: set[str] = set()
        self._previous: set[str] = set()
        self._since = time.monotonic()

    def add(self, name: str) -> None:
        now = time.monotonic()
        if now - self._since > self.keep_s:
            self._previous, self._current, self._since = self._current, set(), now
        self._current.add(name)

    def __contains__(self, name: object) -> bool:
        return name in self._current or name in self._previous


class Mailbox:
    """One user's Maildir++: its folders, delivery into them, and its seen index."""

    def __init__(self, root: Path, config: MaildirConfig, user: str, index: SeenIndex | None = None):
        self.root = Path(root)
        self.config = config
        self.user = user
        self.index = index if index is not None else SeenIndex()
        # The root's, read by ensure_layout; None until then (nothing is created before it runs).
        self.ownership: Ownership | None = None
        # Layout folders ensure_layout gave back to the Maildir's owner (left root's by an older spamd).
        self.repaired: list[str] = []
        # Files `deliver` wrote lately, in the index before they were written: the
        # watcher's thread drops their "created" events.
        self.delivered = RecentNames()

    @property
    def junk(self) -> str:
        return self.config.junk_folder

    @property
    def trash(self) -> str:
        return self.config.trash_folder

    def folder_dir(self, folder: str) -> Path:
        return self.root / folder if folder else self.root

    def ensure_layout(self) -> str | None:
        """Create INBOX, Junk and Trash (cur/new/tmp, maildirfolder) where missing, owned as the root is.

        Returns why the mail server may be unable to use what spamd creates (spamd
        is neither root nor the Maildir's owner), or None. It does not change the
        ownership of anything it did not create, except layout folders a root spamd
        once left owned by root.
        """
        self.repaired = []
        try:
            root_fd, self.ownership = _open_root(self.root)
            try:
                for folder in (INBOX, self.junk, self.trash):
                    folder_fd = (
                        _make_dir(root_fd, folder, self.root / folder, self.ownership, self.repaired)
                        if folder
                        else os.dup(root_fd)
                    )
                    try:
                        for sub in ("cur", "new", "tmp"):
                            os.close(_make_dir(folder_fd, sub, self.root / folder / sub, self.ownership, self.repaired))
                        if folder:
                            self._mark_folder(folder_fd)
                    finally:
                        os.close(folder_fd)
            finally:
                os.close(root_fd)
        except OSError as e:
            where = f" {e.filename}:" if e.filename and str(e.filename) != str(self.root) else ""
            raise StoreError(f"{self.root}: cannot create the Maildir folders:{where} {e.strerror}") from None
        return self.ownership.problem(self.root)

    def _mark_folder(self, folder_fd: int) -> None:
        """The empty `maildirfolder` file Maildir++ (Courier, Dovecot) puts in every sub-folder."""
        assert self.ownership is not None
        try:
            fd = os.open("maildirfolder", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         self.ownership.file_mode, dir_fd=folder_fd)  # fmt: skip
        except FileExistsError:
            try:
                fd = os.open("maildirfolder", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
            except OSError:
                return  # a link or unreadable: not spamd's to touch
            if not (stat.S_ISREG(os.fstat(fd).st_mode) and _made_by_root_spamd(fd, self.ownership)):
                os.close(fd)
                return
        try:
            self.ownership.apply(fd, directory=False)
        finally:
            os.close(fd)

    def remove_stale_tmp(self, now: float | None = None) -> int:
        """Delete files left in the folders' tmp/ for over 36 hours; returns how many.

        A delivery killed between writing tmp/ and renaming into new/ leaves its file
        there (it never got a 250, so the sender retried). The Maildir convention, as
        Dovecot applies it, is to clean such files after 36 hours, by which time no
        writer can still be working on one.
        """
        now = time.time() if now is None else now
        removed = 0
        for folder in self.folders():
            try:
                with self.open_dir(folder, "tmp") as tmp_fd:
                    for entry in list(os.scandir(tmp_fd)):
                        try:
                            st = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TMP_S:
                                os.unlink(entry.name, dir_fd=tmp_fd)
                                removed += 1
                        except OSError:
                            continue
            except OSError:
                continue
        return removed

    @contextlib.contextmanager
    def open_dir(self, folder: str, sub: str | None = None) -> Iterator[int]:
        """A descriptor of a folder (or its cur/new/tmp), reached from the root without following links.

        Everything spamd reads, writes, lists or removes inside a Maildir goes through
        one of these: a user may replace any folder or sub-directory of their Maildir
        with a link (to /etc, say), and spamd, perhaps root, must not follow it there.
        """
        fds = [os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        try:
            if folder:
                fds.append(_open_dir(fds[-1], folder, self.root / folder))
            if sub:
                fds.append(_open_dir(fds[-1], sub, self.folder_dir(folder) / sub))
            yield fds[-1]
        finally:
            for fd in fds:
                os.close(fd)

    def read_message(self, loc: Location) -> bytes | None:
        """A message file's bytes (blocking); None if it is gone or is no regular file of this Maildir.

        Opened without following links, and not at all if it is a FIFO or device. As
        root, a file owned neither by the Maildir's owner nor its group is not read:
        it cannot be a message of this user (spamd's own files have that owner).
        """
        try:
            with self.open_dir(loc.folder, loc.sub) as dir_fd:
                fd = os.open(loc.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except (FileNotFoundError, IsADirectoryError):
            return None  # renamed again before we got to it (new/ -> cur/, or moved): its own event follows
        except OSError as e:
            log.warning("maildir_file_skipped", maildir=str(self.root), path=str(loc.path), reason=e.strerror)
            return None
        with open(fd, "rb", closefd=True) as f:
            st = os.fstat(f.fileno())
            reason = None
            if not stat.S_ISREG(st.st_mode):
                reason = "not a regular file"
            elif os.geteuid() == 0 and self.ownership is not None and self.ownership.uid != 0:
                if st.st_uid != self.ownership.uid and st.st_gid != self.ownership.gid:
                    reason = f"owned by uid {st.st_uid} gid {st.st_gid}, not by the Maildir's owner"
            if reason is not None:
                log.warning("maildir_file_skipped", maildir=str(self.root), path=str(loc.path), reason=reason)
                return None
            return f.read()

    def remove(self, loc: Location) -> None:
        """Unlink a message file (blocking) through its directory's descriptor; gone already is fine."""
        try:
            with self.open_dir(loc.folder, loc.sub) as dir_fd:
                os.unlink(loc.name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass

    def locate(self, path: str | Path) -> Location | None:
        """The folder and sub-directory of a message file path, or None for anything else."""
        try:
            parts = Path(path).relative_to(self.root).parts
        except ValueError:
            return None
        if len(parts) == 2:
            folder, (sub, name) = INBOX, parts
        elif len(parts) == 3 and parts[0].startswith(".") and parts[0] not in (".", ".."):
            folder, sub, name = parts
        else:
            return None
        if sub not in ("new", "cur") or not name or name.startswith("."):
            return None
        return Location(folder, sub, name, Path(path))

    def folders(self) -> list[str]:
        """INBOX and every Maildir++ folder (dot-directory) under the root; [] if there is no root."""
        try:
            with os.scandir(self.root) as entries:
                # A link is no folder: it could lead anywhere (open_dir refuses it too).
                dotted = sorted(
                    e.name for e in entries
                    if e.name.startswith(".") and e.name not in (".", "..") and e.is_dir(follow_symlinks=False)
                )  # fmt: skip
        except FileNotFoundError:
            return []
        return [INBOX, *dotted]

    def scan(self) -> list[Location]:
        """Every message file in every folder (a listing only: nothing is read)."""
        found = []
        for folder in self.folders():
            for sub in ("new", "cur"):
                directory = self.folder_dir(folder) / sub
                try:
                    with self.open_dir(folder, sub) as dir_fd, os.scandir(dir_fd) as entries:
                        for e in entries:
                            if not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                                found.append(Location(folder, sub, e.name, directory / e.name))
                except FileNotFoundError:
                    continue
                except OSError as e:  # a link in place of the folder or cur/new: not followed
                    log.warning("maildir_folder_skipped", maildir=str(self.root), path=e.filename, reason=e.strerror)
                    continue
        return found

    def classify_move(self, before: str, after: str) -> Label | None:
        """Into Junk: spam. Out of Junk to anything but Trash: ham. Anything else: not training."""
        if after == before:
            return None
        if after == self.junk:
            return Label.SPAM
        if before == self.junk and after != self.trash:
            return Label.HAM
        return None


def _write_file(fd: int, data: bytes, ownership: Ownership | None, fsync: bool) -> None:
    if ownership is not None:
        ownership.apply(fd, directory=False)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    if fsync:
        os.fsync(fd)


# The file system has no unnamed files (O_TMPFILE; a kernel without it opens the directory
# and answers EISDIR), or there is no /proc to link one through.
_NO_UNNAMED_FILES = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT}
_UNNAMED_FILE_FLAGS = os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC


def _write_unnamed_then_link(
    tmp_fd: int, new_fd: int, new_dir: Path, name: str, data: bytes, mode: int, ownership: Ownership | None, fsync: bool
) -> bool:
    """Write the message as an unnamed file in tmp/ (O_TMPFILE), then link it into new/ whole.

    The Maildir sees one event, the file appearing in new/, where tmp/ + rename shows
    three (created, moved from, moved to): the watcher's threads handled each in Python,
    holding the GIL, and pairing the two halves of every rename. Without the watcher
    SMTP delivery ran 10-20% faster in scripts/bench_smtp.py. A crash can leave no
    file behind in tmp/ either. False, with nothing written, where the file system has
    no unnamed files (the caller then writes tmp/ and renames).
    """
    try:
        fd = os.open(".", _UNNAMED_FILE_FLAGS, mode, dir_fd=tmp_fd)
    except OSError as e:
        if e.errno in _NO_UNNAMED_FILES:
            return False
        raise
    try:
        _write_file(fd, data, ownership, fsync)
        try:
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=new_fd)  # linkat(AT_SYMLINK_FOLLOW): no privilege needed
        except OSError as e:
            if e.errno in _NO_UNNAMED_FILES and not os.path.exists(f"/proc/self/fd/{fd}"):
                return False  # no /proc here: written for nothing, the caller writes it again
            raise OSError(e.errno, e.strerror, str(new_dir / name)) from None  # not the /proc path linked from
    finally:
        os.close(fd)
    return True


def write_message(
    mailbox: Mailbox, folder: str, name: str, data: bytes, fsync: bool, replaces: Location | None = None
) -> Path:
    """`write_file` into `mailbox`, then unlink `replaces` (blocking).

    The message is in new/ whole before the original is removed: a crash leaves
    the original, a copy, or both, never a half-written file and never neither.
    """
    path = write_file(mailbox.root, mailbox.ownership, folder, name, data, fsync)
    if replaces is not None:
        mailbox.remove(replaces)
    return path


def write_file(root: Path, ownership: Ownership | None, folder: str, name: str, data: bytes, fsync: bool) -> Path:
    """Unnamed-file write in tmp/ (O_TMPFILE), fsync, link into new/ (or, where the file system has no
    unnamed files, tmp/ write, fsync, rename into new/), fsync new/ (blocking).

    The file gets the Maildir's owner, group and file mode. Every directory is
    opened without following links, so a link a user planted in their Maildir
    cannot make spamd write, or chown, anything outside it.
    """
    folder_dir = root / folder if folder else root
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        if folder:
            fds.append(_open_dir(fds[-1], folder, folder_dir))
        folder_fd = fds[-1]
        tmp_fd = _open_dir(folder_fd, "tmp", folder_dir / "tmp")
        fds.append(tmp_fd)
        new_fd = _open_dir(folder_fd, "new", folder_dir / "new")
        fds.append(new_fd)
        mode = ownership.file_mode if ownership is not None else 0o600
        if not _write_unnamed_then_link(tmp_fd, new_fd, folder_dir / "new", name, data, mode, ownership, fsync):
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=tmp_fd)
            try:
                _write_file(fd, data, ownership, fsync)
            except BaseException:
                os.close(fd)
                os.unlink(name, dir_fd=tmp_fd)
                raise
            os.close(fd)
            try:
                os.rename(name, name, src_dir_fd=tmp_fd, dst_dir_fd=new_fd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=tmp_fd)
                raise
        if fsync:
            os.fsync(new_fd)
    finally:
        for opened in fds:
            os.close(opened)
    return folder_dir / "new" / name


# ---------------------------------------------------------------- the watcher


Learn = Callable[..., object]  # (raw, label, source, user=..., **context)
LedgerLookup = Callable[[bytes], "tuple[Label, bool] | None"]


# Only what moves mean: the inotify mask then leaves out IN_MODIFY, IN_CLOSE_WRITE,
# IN_OPEN and IN_ATTRIB, which every write into tmp/ would otherwise raise.
_WATCHED_EVENTS = [FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirCreatedEvent, DirMovedEvent]


class _Bridge(FileSystemEventHandler):
    """Runs on watchdog's thread: only hands events to the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, mailbox: Mailbox, queue: asyncio.Queue):
        self.loop, self.mailbox, self.queue = loop, mailbox, queue

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in ("created", "moved", "deleted"):
            return
        src = os.fsdecode(event.src_path)
        if event.event_type != "moved" and os.path.basename(os.path.dirname(src)) == "tmp":
            return  # a delivery being written: it counts once renamed into new/ or cur/
        if event.event_type == "created" and os.path.basename(src) in self.mailbox.delivered:
            # spamd's own delivery, in the index before it was written: the loop would
            # find it there and do nothing. Dropped here, it costs the loop no wake-up
            # (5% of the loop's time under scripts/bench_smtp.py went to these events).
            return
        dest = os.fsdecode(event.dest_path) if event.event_type == "moved" else ""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.mailbox, event.event_type, src, dest))
        except RuntimeError:
            pass  # the loop is closed: spamd is exiting and catch-up covers the rest at next start


class MaildirWatcher:
    """Watches every served Maildir; files unscored INBOX mail and turns moves into training calls."""

    def __init__(
        self,
        mailboxes: list[Mailbox],
        config: MaildirConfig,
        score: Callable[[bytes], Awaitable[Scored]],
        delivered: Callable[..., None],
        learn: Learn,
        ledger_label: LedgerLookup,
        on_error: Callable[..., None],
    ):
        self.mailboxes = mailboxes
        self.config = config
        self.score = score  # classify through the Engine (analyzed beside the loop if it can be), headers added
        self.delivered = delivered  # (scored, raw, started, **context): the message_scored line
        self.learn = learn
        self.ledger_label = ledger_label
        self.on_error = on_error
        self.queue: asyncio.Queue[tuple[Mailbox, str, str, str]] = asyncio.Queue()
        self.handled = 0  # events taken from the queue
        self.observer: Any = None
        self._consumer: asyncio.Task[None] | None = None
        self._stopping = False
        self.files_read = 0

    # ------------------------------------------------------------ lifecycle

    def start_watching(self) -> None:
        """Start inotify watches; events queue up until `start_consuming` (after catch-up)."""
        with threads_started_here_yield_to_the_loop():  # Observer() starts watchdog's inotify reader
            self.observer = Observer()
            for mailbox in self.mailboxes:
                self._watch(mailbox)
            self.observer.start()

    def _watch(self, mailbox: Mailbox) -> None:
        with threads_started_here_yield_to_the_loop():  # a running observer starts the new watch's threads here
            self.observer.schedule(
                _Bridge(asyncio.get_running_loop(), mailbox, self.queue),
                str(mailbox.root),
                recursive=True,
                event_filter=_WATCHED_EVENTS,
            )

    async def watch_added(self, mailbox: Mailbox) -> None:
        """Serve a Maildir added to `mailboxes` while running: watch it, then catch up on what it holds."""
        self._watch(mailbox)
        await self.catch_up(mailbox)

    def start_consuming(self) -> None:
        self._consumer = asyncio.create_task(self._consume(), name="maildir-events")

    async def stop(self) -> None:
        """Stop watching, then handle what was already queued."""
        self._stopping = True  # a training waiting for the store gives up (logged) rather than hold shutdown
        if self.observer is not None:
            await asyncio.to_thread(self._stop_observer)
        if self._consumer is not None:
            await self.queue.join()
            self._consumer.cancel()
            try:
                await self._consumer
            except asyncio.CancelledError:
                pass

    def _stop_observer(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=10)

    async def drained(self) -> None:
        await self.queue.join()

    # ------------------------------------------------------------ catch-up

    async def catch_up(self, mailbox: Mailbox) -> dict[str, int]:
        """Apply what happened while spamd was down: the same decisions as live, over a listing."""
        started = time.perf_counter()
        locations = await asyncio.to_thread(mailbox.scan)
        by_base: dict[str, list[Location]] = {}
        for loc in locations:
            by_base.setdefault(loc.base, []).append(loc)
        filed_originals = {b[: b.rindex(FILED_MARK)] for b in by_base if FILED_MARK in b}
        read_before = self.files_read
        for base, locs in by_base.items():
            entry = mailbox.index.by_base.get(base)
            if len(locs) > 1 and entry is not None:
                # Mid-move (linked into the new folder, not yet unlinked from the old):
                # the copies outside the folder it was last seen in are the move.
                locs = [loc for loc in locs if loc.folder != entry[0]] or locs[:1]
            for loc in locs:
                if entry is None and loc.folder == INBOX and loc.sub == "new" and _SIZE_FIELDS_RE.sub("", base) in filed_originals:
                    # A filing interrupted after its copy was renamed into place.
                    await asyncio.to_thread(mailbox.remove, loc)
                    continue
                await self._appeared(mailbox, loc, None, context="catch_up")
        dropped = mailbox.index.keep_only(set(by_base))
        summary = {
            "files": len(locations),
            "read": self.files_read - read_before,
            "forgotten": dropped,
        }
        log.info(
            "maildir_caught_up",
            maildir=str(mailbox.root),
            elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
            **summary,
        )
        return summary

    # ------------------------------------------------------------ live events

    async def _consume(self) -> None:
        while True:
            mailbox, kind, src, dest = await self.queue.get()
            self.handled += 1
            try:
                await self._handle(mailbox, kind, src, dest)
            except SpamdError as e:  # the store refused (a full disk, Redis unreachable): one line, no traceback
                log.error("maildir_event_failed", maildir=str(mailbox.root), path=dest or src, error=str(e))
                self.on_error("maildir_event_failed", path=dest or src, error=str(e))
            except Exception as e:  # one bad file must not stop the watcher
                log.exception("maildir_event_failed", maildir=str(mailbox.root), path=dest or src)
                self.on_error("maildir_event_failed", path=dest or src, error=f"{type(e).__name__}: {e}")
            finally:
                self.queue.task_done()

    async def _handle(self, mailbox: Mailbox, kind: str, src: str, dest: str) -> None:
        if kind == "deleted":
            loc = mailbox.locate(src)
            if loc is not None:
                mailbox.index.forget(loc.base, loc.folder)
            return
        previous = None
        if kind == "moved":
            before = mailbox.locate(src)
            after = mailbox.locate(dest)
            if before is not None and after is None:
                mailbox.index.forget(before.base, before.folder)  # moved out of the Maildir: gone
            elif before is not None and after is not None and before.base != after.base:
                previous = mailbox.index.by_base.get(before.base)
                mailbox.index.forget(before.base)
        else:
            after = mailbox.locate(src)
        if after is not None:
            await self._appeared(mailbox, after, previous, context="live")

    async def _appeared(self, mailbox: Mailbox, loc: Location, previous: tuple[str, bytes] | None, context: str) -> None:
        entry = previous or mailbox.index.by_base.get(loc.base)
        if entry is not None:
            before, key = entry
            if before == loc.folder:
                return  # flags changed, new/ -> cur/, or our own delivery
            mailbox.index.record(loc.base, loc.folder, key)
            label = mailbox.classify_move(before, loc.folder)
            if label is not None:
                await self._learn(mailbox, loc, label, how="moved", before=before, context=context)
            return

        raw = await self._read(mailbox, loc)
        if raw is None:
            return
        self.files_read += 1
        key = message_key(raw)
        if loc.folder == INBOX and loc.sub == "new" and self.config.watch_inbox and not has_spam_status(raw):
            await self._file(mailbox, loc, raw, key)
            return
        before = mailbox.index.by_key.get(key)
        mailbox.index.record(loc.base, loc.folder, key)
        if before is not None:
            label = mailbox.classify_move(before, loc.folder)
            if label is not None:
                await self._learn(mailbox, loc, label, how="moved_renamed", before=before, context=context, raw=raw)
            return
        known = self.ledger_label(key)
        if loc.folder == mailbox.junk:
            if spam_flagged(raw):
                return  # filed into Junk by a delivery agent following spamd's verdict
            if known != (Label.SPAM, True):
                await self._learn(mailbox, loc, Label.SPAM, how="found_in_junk", before=None, context=context, raw=raw)
        elif loc.folder != mailbox.trash and known is not None and known[0] == Label.SPAM:
            await self._learn(mailbox, loc, Label.HAM, how="found_out_of_junk", before=None, context=context, raw=raw)

    async def _read(self, mailbox: Mailbox, loc: Location) -> bytes | None:
        return await asyncio.to_thread(mailbox.read_message, loc)

    async def _learn(
        self, mailbox: Mailbox, loc: Location, label: Label, how: str, before: str | None, context: str, raw: bytes | None = None
    ) -> None:
        if raw is None:
            raw = await self._read(mailbox, loc)
            if raw is None:
                # Gone before we read it: find it by name where it went next (flags changed).
                for sub in ("cur", "new"):
                    directory = mailbox.folder_dir(loc.folder) / sub
                    try:
                        names = [n for n in os.listdir(directory) if base_of(n) == loc.base]
                    except OSError:  # gone, or not a directory: read_message refuses links anyway
                        names = []
                    if names:
                        raw = await self._read(mailbox, Location(loc.folder, sub, names[0], directory / names[0]))
                        break
                if raw is None:
                    log.warning("training_source_vanished", maildir=str(mailbox.root), folder=loc.folder, name=loc.name)
                    return
        await self._until_stored(
            lambda: self.learn(
                raw, label, "maildir", user=True,
                user_name=mailbox.user, folder=loc.folder or "INBOX", previous_folder=before, how=how, phase=context,
            ),
            maildir=str(mailbox.root), name=loc.name,
        )  # fmt: skip

    async def _until_stored(self, call: Callable[[], T | Awaitable[T]], **context: object) -> T:
        """`call()` (awaited if it gives an awaitable), retried while the shared store (Redis) is
        unreachable, so a move made meanwhile is still learned.

        Holds the queue meanwhile (what follows needs the store too); gives up at shutdown.
        """
        delay = 0.1
        while True:
            try:
                result = call()
                return await result if inspect.isawaitable(result) else result  # type: ignore[return-value]
            except StoreUnavailableError as e:
                if self._stopping:
                    raise
                if delay == 0.1:
                    log.warning("maildir_waiting_for_store", error=str(e), **context)
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)

    async def _file(self, mailbox: Mailbox, loc: Location, raw: bytes, key: bytes) -> None:
        """Score an unscored INBOX message and put the scored copy in INBOX or Junk."""
        started = time.perf_counter()
        scored = await self._until_stored(lambda: self.score(raw), maildir=str(mailbox.root), name=loc.name)
        spam = scored.score.verdict is Verdict.SPAM
        folder = mailbox.junk if spam else INBOX
        name = filed_base(loc.base, len(scored.data))
        # Recorded before the rename: the watcher must see spamd's own filing as no move.
        mailbox.index.record(name, folder, key)
        try:
            await asyncio.to_thread(write_message, mailbox, folder, name, scored.data, self.config.fsync, loc)
        except FileExistsError:
            pass  # a scored copy from an interrupted filing is being written again; keep it
        except OSError as e:
            mailbox.index.forget(name)
            what = "disk full" if e.errno == errno.ENOSPC else e.strerror
            what = f"{e.filename}: {what}" if e.filename else what
            log.error("maildir_filing_failed", maildir=str(mailbox.root), name=loc.name, error=what)
            self.on_error("maildir_filing_failed", path=str(loc.path), error=what)
            return
        self.delivered(scored, raw, started, way_in="maildir", user_name=mailbox.user, folder=folder or "INBOX", via="maildir")
        if self.config.autolearn and scored.score.verdict is not Verdict.UNSURE:
            self.learn(raw, Label.SPAM if spam else Label.HAM, "autolearn", user=False, user_name=mailbox.user)


async def deliver(mailbox: Mailbox, scored: Scored, fsync: bool, writers: DeliveryProcesses | None = None) -> Path:
    """SMTP delivery: into Junk/new if spam, else INBOX/new; recorded in the index first.

    Written by a delivery process when one takes it, else by one of the daemon's threads.
    """
    folder = mailbox.junk if scored.score.verdict is Verdict.SPAM else INBOX
    name = unique_name()
    mailbox.index.record(name, folder, scored.key)
    mailbox.delivered.add(name)
    try:
        data = scored.data.replace(b"\r\n", b"\n")  # Maildir files use LF, as Dovecot and Courier write them
        if writers is not None:
            try:
                return await writers.write(mailbox.root, mailbox.ownership, folder, name, data, fsync)
            except HelperUnavailable:
                # Its process exited or hung. If it had linked the file already, the
                # thread's link fails (EEXIST): 451, and the sender's retry makes a copy.
                pass
        return await asyncio.to_thread(write_file, mailbox.root, mailbox.ownership, folder, name, data, fsync)
    except BaseException:
        mailbox.index.forget(name)
        raise


def export_indexes(mailboxes: list[Mailbox]) -> dict[str, list[list[Any]]]:
    """A copy of every Maildir's seen index, taken on the loop (cheap: one list per entry)."""
    return {str(m.root): m.index.export() for m in mailboxes}


def save_indexes(path: Path, rows: dict[str, list[list[Any]]]) -> None:
    """Persist exported indexes (blocking: run in a thread). Not fsync-critical: see the module docstring."""
    write_atomically(path, encode_indexes(rows), durable=False)


_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


def mailbox_for(recipient: str, mailboxes: list[Mailbox], per_user: bool) -> Mailbox | None:
    """The Maildir a recipient's mail goes to; None for a recipient who is no user here.

    Not `per_user` (one Maildir, not one per user under `maildir.root`): it takes
    every recipient's mail. Per user, the recipient's local part must name a user:
    mail for anyone else is refused rather than filed into another user's Maildir.
    Never builds a path from the address: it only picks among the Maildirs served.
    """
    if not per_user:
        return mailboxes[0]
    local = recipient.rpartition("@")[0] if "@" in recipient else recipient
    local = local.split("+", 1)[0]
    if _USER_RE.match(local) and ".." not in local:
        for mailbox in mailboxes:
            if mailbox.user == local or mailbox.user == local.lower():
                return mailbox
    return None


def user_of(root: Path) -> str:
    """A Maildir's user: its directory name, or its parent's for '<user>/Maildir'."""
    return root.parent.name if root.name == "Maildir" else root.name
