"""SMTP delivery into a Maildir: Junk if spam, else INBOX; recorded in the seen index first.

The file is written by a delivery process (`spamd.frontends.delivery`) when one
takes it, else by one of the daemon's threads (`files.write_file`).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from spamd.frontends.maildir.files import maildir_lines, write_file
from spamd.frontends.maildir.layout import INBOX, Location, unique_name
from spamd.model.bayes import Verdict
from spamd.runtime.helper_processes import HelperUnavailable

if TYPE_CHECKING:
    from spamd.engine.scoring import Scored
    from spamd.frontends.delivery import DeliveryProcesses
    from spamd.frontends.maildir.mailbox import Mailbox


async def deliver(mailbox: Mailbox, scored: Scored, fsync: bool, writers: DeliveryProcesses | None = None) -> Location:
    """SMTP delivery: into Junk/new if spam, else INBOX/new; recorded in the index first. Where it went.

    Written by a delivery process when one takes it, else by one of the daemon's threads.
    """
    folder = mailbox.junk if scored.score.verdict is Verdict.SPAM else INBOX
    name = unique_name()
    mailbox.index.record(name, folder, scored.key)
    mailbox.delivered.add(name)
    try:
        path = None
        if writers is not None:
            # The delivery process turns CRLF into LF (maildir_lines), not the loop. HelperUnavailable:
            # its process exited or hung. If it had linked the file already, the thread's link
            # fails (EEXIST): 451, and the sender's retry makes a copy.
            with contextlib.suppress(HelperUnavailable):
                path = await writers.write(mailbox.root, mailbox.ownership, folder, name, scored.data, fsync)
        if path is None:
            path = await asyncio.to_thread(_write_lf, mailbox, folder, name, scored.data, fsync)
    except BaseException:
        mailbox.index.forget(name)
        raise
    # What Mailbox.locate would make of the path, without parsing it back (that took 11 us of the loop's
    # time a delivery: timeit, a 2-core machine).
    return Location(folder, "new", name, path)


def _write_lf(mailbox: Mailbox, folder: str, name: str, data: bytes, fsync: bool) -> Path:
    return write_file(mailbox.root, mailbox.ownership, folder, name, maildir_lines(data), fsync)
