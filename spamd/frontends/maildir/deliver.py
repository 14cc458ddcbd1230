"""SMTP delivery into a Maildir: Junk if spam, else INBOX; recorded in the seen index first.

The file is written by a delivery process (`spamd.frontends.delivery`) when one
takes it, else by one of the daemon's threads (`files.write_file`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from spamd.frontends.maildir.files import write_file
from spamd.frontends.maildir.layout import INBOX, Location, unique_name
from spamd.helper_processes import HelperUnavailable
from spamd.model import Verdict

if TYPE_CHECKING:
    from spamd.frontends.delivery import DeliveryProcesses
    from spamd.frontends.maildir.mailbox import Mailbox
    from spamd.scoring import Scored


async def deliver(mailbox: Mailbox, scored: Scored, fsync: bool, writers: DeliveryProcesses | None = None) -> Location:
    """SMTP delivery: into Junk/new if spam, else INBOX/new; recorded in the index first. Where it went.

    Written by a delivery process when one takes it, else by one of the daemon's threads.
    """
    folder = mailbox.junk if scored.score.verdict is Verdict.SPAM else INBOX
    name = unique_name()
    mailbox.index.record(name, folder, scored.key)
    mailbox.delivered.add(name)
    try:
        data = scored.data.replace(b"\r\n", b"\n")  # Maildir files use LF, as Dovecot and Courier write them
        path = None
        if writers is not None:
            try:
                path = await writers.write(mailbox.root, mailbox.ownership, folder, name, data, fsync)
            except HelperUnavailable:
                # Its process exited or hung. If it had linked the file already, the
                # thread's link fails (EEXIST): 451, and the sender's retry makes a copy.
                pass
        if path is None:
            path = await asyncio.to_thread(write_file, mailbox.root, mailbox.ownership, folder, name, data, fsync)
    except BaseException:
        mailbox.index.forget(name)
        raise
    # What Mailbox.locate would make of the path, without parsing it back (that took 11 us of the loop's
    # time a delivery: timeit, a 2-core machine).
    return Location(folder, "new", name, path)
