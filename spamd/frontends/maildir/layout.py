"""Maildir++ layout, message file names, and the ownership of what spamd creates.

Layout (Dovecot and Courier): the Maildir root is the INBOX (`cur/ new/ tmp/`),
each other folder a dot-directory beside them (`.Junk/`, `.Trash/`, `.Work.2024/`).
A message file is named `<base>[:2,<flags>]`: the base is unique in the Maildir
and survives flag changes (`cur/` renames) and `new/` -> `cur/`; IMAP servers keep
it, or make a new one, when they move a message between folders.

Every directory spamd opens in a Maildir is opened without following links
(`_open_dir`), and what it creates gets the root's owner, group and modes (`Ownership`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

INBOX = ""  # the Maildir root's own cur/new/tmp
_SIZE_FIELDS_RE = re.compile(r",[SW]=\d+")
# Suffix of the name spamd gives the scored copy of a message it files: derived
# from the original's base, so a filing interrupted between rename and unlink is
# recognised at the next start (the original is then removed, not scored twice).
FILED_MARK = ".spamd"


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
    def of(cls, st: os.stat_result) -> Ownership:
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
            with contextlib.suppress(PermissionError):  # not root and not in the group: reported once by problem()
                os.fchown(fd, uid, gid)

    def problem(self, root: Path) -> str | None:
        """Why the mail server may not be able to use what spamd creates here, or None when it can."""
        euid = os.geteuid()
        if euid == 0 or euid == self.uid:
            return None
        if (self.gid in os.getgroups() or self.gid == os.getegid()) and self.dir_mode & 0o070 == 0o070:
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


def _make_dir(
    parent_fd: int, name: str, where: Path, ownership: Ownership | None, repaired: list[str] | None = None
) -> int:
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


_counter = itertools.count()
_HOSTNAME = socket.gethostname().replace("/", r"\057").replace(":", r"\072") or "localhost"


def unique_name() -> str:
    now = time.time()
    return f"{int(now)}.M{int(now % 1 * 1e6)}P{os.getpid()}Q{next(_counter)}.{_HOSTNAME}"
