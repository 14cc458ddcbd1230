"""The messages named on spamctl's command line: files, mbox files, Maildir folders, directories and standard input."""

from __future__ import annotations

import io
import mailbox
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from spamd.cli.backends import MAX_MESSAGE_BYTES
from spamd.errors import NotAMessageError, SpamdError
from spamd.mail.message import read_message_file
from spamd.runtime.humanize import human_bytes


def read_message(name: str) -> bytes:
    """A file's bytes, or stdin's for '-'; any bytes at all are a message to score."""
    if name == "-":
        return sys.stdin.buffer.read()
    path = Path(name)
    if path.is_dir():
        raise NotAMessageError(f"{path}: is a directory, not a mail message")
    return _read_file(path)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SpamdError(f"{path}: no such file") from None
    except PermissionError:
        raise SpamdError(f"{path}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{path}: cannot read: {e.strerror}") from None


def input_kind(path: Path, look_inside: bool = True) -> str:
    """'maildir' (a Maildir or Maildir++ folder), 'directory' (of message files), 'mbox'
    (a file of several messages, each starting with a 'From ' line), or 'file'.

    A file with a single 'From ' line (TREC's, some MDAs') is a 'file': one message.
    Without `look_inside` a file is not read: it is a 'file', mbox or not.
    """
    try:
        if path.is_dir():
            if (path / "cur").is_dir() or (path / "new").is_dir():
                return "maildir"
            return "directory"
        if not look_inside:
            path.stat()  # that it is there at all
            return "file"
        with open(path, "rb") as f:
            return "mbox" if holds_several_mbox_messages(f) else "file"
    except FileNotFoundError:
        raise SpamdError(f"{path}: no such file or directory") from None
    except PermissionError:
        raise SpamdError(f"{path}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{path}: cannot read: {e.strerror}") from None


def holds_several_mbox_messages(f: BinaryIO) -> bool:
    """Whether a file starts with a 'From ' line and has another (where `mailbox.mbox` splits).

    Read in 1 MiB chunks, stopping at the second 'From ' line. `mailbox.mbox` would
    tell the same by reading every line in Python: its table of contents alone cost
    2.4 s of `spamctl classify` over trec07p-dev's 10,000 one-message files (whose
    first line is 'From '), 45% of the run.
    """
    if f.read(5) != b"From ":
        return False
    tail = b""
    while chunk := f.read(1 << 20):
        if b"\nFrom " in tail + chunk:
            return True
        tail = chunk[-5:]
    return False


def file_messages(path: Path | str, described: str, split_mbox: bool) -> Iterator[tuple[str, bytes | None, str | None]]:
    """The message of one file as (name, bytes, None), or (name, None, problem) if it cannot be read.

    With `split_mbox`, a file that turns out to hold several mbox messages yields each,
    split as `mailbox` does. Otherwise, and for a file with one 'From ' line, the file's
    bytes as they are: the key the daemon computes for the same file.
    """
    try:
        raw = read_message_file(path)
    except OSError as e:  # a file that vanished (moved by a mail client) or is unreadable
        yield described, None, e.strerror or str(e)
        return
    if not (split_mbox and holds_several_mbox_messages(io.BytesIO(raw))):
        yield described, raw, None
        return
    box = mailbox.mbox(str(path), create=False)
    try:
        for number, key in enumerate(box.iterkeys(), 1):
            yield f"{described} message {number}", box.get_bytes(key), None
    finally:
        box.close()


def too_large(raw: bytes) -> str | None:
    """Why a message cannot be classified through the control socket; None if it can."""
    if len(raw) <= MAX_MESSAGE_BYTES:
        return None
    return f"too large ({human_bytes(len(raw))}; the limit is {human_bytes(MAX_MESSAGE_BYTES)})"


def directory_files(directory: Path) -> list[str]:
    """The message files directly in a plain directory (as sa-learn takes one): not its sub-directories, no dotfiles."""
    try:
        return _files_in(directory)
    except PermissionError:
        raise SpamdError(f"{directory}: permission denied") from None


def _files_in(directory: Path) -> list[str]:
    """The files of a directory but dotfiles, by name, as paths in a str.

    Listed by `os.scandir`, whose entries know their type without a stat, and sorted as
    names rather than as Paths: a Maildir of 10,000 messages listed in 0.17 s -> 0.04-0.06 s of CPU.
    Each a str, not a `Path`: every file of a Maildir, before its first message is classified
    (spamctl classify of 10,000: 0.1 s of serial start as Paths), and it goes to a worker as a str.
    """
    with os.scandir(directory) as entries:
        names = sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file())
    where = str(directory)
    return [os.path.join(where, name) for name in names]


def maildir_files(folder: Path) -> list[str]:
    """Message files in cur/ and new/ (tmp/ holds deliveries in progress); dotfiles are not mail."""
    found: list[str] = []
    for sub in ("cur", "new"):
        directory = folder / sub
        try:
            found += _files_in(directory)
        except FileNotFoundError:
            continue
        except PermissionError:
            raise SpamdError(f"{directory}: permission denied") from None
    return found


class Inputs:
    """Every message named by the PATH arguments, counted up front (for the progress bar).

    A PATH is a message file, an mbox, a Maildir folder, a plain directory of
    message files, or '-': standard input, one message (an mbox when it starts
    with a 'From ' line and holds several), as sa-learn and Dovecot's pipe give it.

    With `mboxes_found_late` (for callers that show no progress bar), files are not
    read up front: an mbox is split when its turn comes and `total` grows then. Reading
    every file twice, once to count, had spamctl classify spend 0.6 s over trec07p-dev's
    10,000 files before its first message was classified.
    """

    def __init__(self, paths: list[str], mboxes_found_late: bool = False):
        self._items: list[tuple[str, Path | str, str]] = []  # (kind, path, description)
        self._mboxes_found_late = mboxes_found_late
        self._mboxes: dict[Path, mailbox.mbox] = {}
        self._stdin: bytes | None = None
        self._spool: Path | None = None
        self.total = 0
        if paths.count("-") > 1:
            raise SpamdError("- (standard input) can be given only once")
        try:
            for name in paths:
                if name == "-":
                    self._add_stdin(sys.stdin.buffer.read())
                    continue
                path = Path(name)
                kind = input_kind(path, look_inside=not mboxes_found_late)
                if kind in ("maildir", "directory"):
                    files = maildir_files(path) if kind == "maildir" else directory_files(path)
                    self._items.extend(("file", f, f) for f in files)
                    self.total += len(files)
                    continue
                if kind == "mbox" and self._add_mbox(path, str(path)):
                    continue
                # One message, even with an mbox "From " line (TREC files, some MDAs): its bytes
                # as they are, so its key is the one the daemon computes for the same file.
                # (An mbox whose second "From " line `mailbox` does not split at holds one too.)
                self._items.append(("file", path, str(path)))
                self.total += 1
        except BaseException:
            self.close()  # a bad PATH after '-': no spool file left behind
            raise

    def _add_mbox(self, path: Path, described: str) -> bool:
        """Queue an mbox's messages; False (nothing queued) when it holds one message or none."""
        box = mailbox.mbox(str(path), create=False)
        if len(box) > 1:
            self._mboxes[path] = box
            self._items.append(("mbox", path, described))
            self.total += len(box)
            return True
        box.close()
        return False

    def _add_stdin(self, data: bytes) -> None:
        if holds_several_mbox_messages(io.BytesIO(data)):
            # The mailbox module parses files only: spool it, read it, remove it when done.
            fd, spool = tempfile.mkstemp(prefix="spamctl-stdin-", suffix=".mbox")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self._spool = Path(spool)
            if self._add_mbox(self._spool, "standard input"):
                return
            self._spool.unlink()
            self._spool = None
        self._stdin = data
        self._items.append(("stdin", Path("-"), "standard input"))
        self.total += 1

    def __iter__(self) -> Iterator[tuple[str, bytes | None, str | None]]:
        """(name, message bytes or None, problem or None), in order."""
        for name, source in self.sources():
            if isinstance(source, bytes):
                yield name, source, None
                continue
            count = 0
            for message in file_messages(source, name, self._mboxes_found_late):
                count += 1
                yield message
            self.total += count - 1  # an mbox found late: counted now

    def sources(self) -> Iterator[tuple[str, str | bytes]]:
        """(name, bytes) of mbox messages and standard input, (name, path as str) of files not read yet, in order.

        A file is read by whoever takes it (`file_messages`): with `mboxes_found_late`, that
        may be a worker process (`spamctl classify`), and it splits a file found to be an mbox.
        """
        for kind, path, described in self._items:
            if kind == "mbox":
                box = self._mboxes[Path(path)]
                for number, key in enumerate(box.iterkeys(), 1):
                    yield f"{described} message {number}", box.get_bytes(key)
            elif kind == "stdin":
                assert self._stdin is not None
                yield described, self._stdin
            else:
                yield described, str(path)  # a str pickles in 0.05 us, a Path unpickles in 4.5

    def close(self) -> None:
        """Close the mboxes and remove standard input's spool file, if any."""
        for box in self._mboxes.values():
            box.close()
        if self._spool is not None:
            self._spool.unlink(missing_ok=True)
