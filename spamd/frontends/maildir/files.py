"""Writing a message file into a Maildir folder's new/, whole, owned as the Maildir is.

`write_file` is what SMTP delivery runs, in one of the daemon's threads or in a
delivery process (`spamd.frontends.delivery`, which imports this module and
`layout` only); `write_message` is the watcher's filing, which then removes the original.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from spamd.frontends.maildir.layout import Location, Ownership, _open_dir

if TYPE_CHECKING:
    from spamd.frontends.maildir.mailbox import Mailbox


def maildir_lines(data: bytes) -> bytes:
    """A message as SMTP carries it (CRLF line ends) as a Maildir file holds it: LF, as Dovecot and Courier write them."""
    return data.replace(b"\r\n", b"\n")


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
    SMTP delivery ran 10-20% faster in scripts/speed/bench_smtp.py. A crash can leave no
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
