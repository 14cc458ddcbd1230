"""One user's Maildir++ (`Mailbox`), and which Maildir a recipient's mail goes to.

A `Mailbox` creates its layout folders, and lists, reads and removes message files,
always through directory descriptors reached from the root without following links.
`classify_move` is the rule that turns a move between folders into a label; the
watcher (`watcher.py`) applies it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from spamd.config import MaildirConfig
from spamd.errors import StoreError
from spamd.frontends.maildir.layout import (
    INBOX,
    Location,
    Ownership,
    _made_by_root_spamd,
    _make_dir,
    _open_dir,
    _open_root,
)
from spamd.frontends.maildir.seen import RecentNames, SeenIndex
from spamd.model.bayes import Label

log = structlog.get_logger()

STALE_TMP_S = 36 * 3600


class Mailbox:
    """One user's Maildir++: its folders, delivery into them, and its seen index."""

    def __init__(self, root: Path, config: MaildirConfig, user: str, index: SeenIndex | None = None):
        self.root = Path(root)
        self.config = config
        self.user = user
        # The user whose layer (spamd/people/users.py) this Maildir's moves train and its mail is
        # scored with: `user` when spamd serves one Maildir per user (maildir.root, or
        # several paths); None for the one Maildir of a single-user install (the shared model).
        self.layer_user: str | None = None
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
                fd = os.open(
                    "maildirfolder", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd
                )
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
            elif (
                os.geteuid() == 0
                and self.ownership is not None
                and self.ownership.uid != 0
                and st.st_uid != self.ownership.uid
                and st.st_gid != self.ownership.gid
            ):
                reason = f"owned by uid {st.st_uid} gid {st.st_gid}, not by the Maildir's owner"
            if reason is not None:
                log.warning("maildir_file_skipped", maildir=str(self.root), path=str(loc.path), reason=reason)
                return None
            return f.read()

    def mtimes(self, files: list[tuple[str, str, str]]) -> list[float | None]:
        """The modification time of each (folder, sub, name) message file (blocking); None if gone or no regular file.

        Looked at without following links, as `read_message` reads, each directory
        opened once for all of its files.
        """
        by_dir: dict[tuple[str, str], list[int]] = {}
        for i, (folder, sub, _) in enumerate(files):
            by_dir.setdefault((folder, sub), []).append(i)
        out: list[float | None] = [None] * len(files)
        for (folder, sub), indexes in by_dir.items():
            try:
                with self.open_dir(folder, sub) as dir_fd:
                    for i in indexes:
                        try:
                            st = os.stat(files[i][2], dir_fd=dir_fd, follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            out[i] = st.st_mtime
            except OSError:
                continue
        return out

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
