"""Teaching spamd from the console: an uploaded file or a pasted message, as spam, as ham, or forgotten.

A file is split as `spamctl train` splits it (spamd/cli/inputs.py): a file that starts
with a "From " line and has another is an mbox, split by Python's `mailbox`; anything
else is one message, as it is. So the same file trained both ways gives the ledger the
same messages: a repeat, never counted twice. Every message goes through the
Scorer, as a Maildir move or a spamc TELL does: journaled and fsynced before its answer,
judged against spamd's verdict for live accuracy, logged as `training_applied` with
source "web". It yields to the loop between messages, so mail is served meanwhile.
"""

from __future__ import annotations

import asyncio
import mailbox
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from spamd.errors import SpamdError
from spamd.mail.message import looks_like_message
from spamd.model.bayes import Label

SOURCE = "web"
ACTIONS = ("spam", "ham", "forget")
NOT_A_MESSAGE = "not_a_message"
# What each answer of the trainer means, as the page words it.
OUTCOME_NAMES = {
    "learned": "learned: new to the model",
    "corrected": "corrected: it was trained the other way, and moved",
    "skipped_repeat": "a repeat: already trained this way, nothing changed",
    "unlearned": "forgotten: removed from the model",
    "not_trained": "not in the model: nothing to forget",
    "declined": "declined",
    NOT_A_MESSAGE: "not a mail message: nothing learned",
}


@dataclass
class Taught:
    """The trainer's answer for each message, in order, and what stopped it if something did."""

    action: str
    results: list[tuple[str, str]] = field(default_factory=list)  # (name, outcome)
    error: str | None = None

    @property
    def tally(self) -> Counter[str]:
        return Counter(outcome for _, outcome in self.results)


def split_upload(data: bytes, name: str) -> list[tuple[str, bytes]]:
    """The messages of an uploaded file: an mbox's each, or the file as one (blocking: an mbox goes through a temp file)."""
    if not (data.startswith(b"From ") and b"\nFrom " in data):
        return [(name, data)]
    fd, temp = tempfile.mkstemp(prefix="spamd-upload-", suffix=".mbox")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        box = mailbox.mbox(temp, create=False)
        try:
            return [(f"{name} message {number}", box.get_bytes(key)) for number, key in enumerate(box.iterkeys(), 1)]
        finally:
            box.close()
    finally:
        os.unlink(temp)


def pasted_message(text: str) -> bytes:
    """A message pasted into the form: browsers send its lines ending in CRLF; mail files end them in LF."""
    return text.replace("\r\n", "\n").encode("utf-8", "surrogateescape")


async def teach(scorer: Any, action: str, messages: list[tuple[str, bytes]], layer_user: str | None = None) -> Taught:
    """Train (or forget) each message through the Scorer, for `layer_user`'s layer too; a failure of the store stops the rest."""
    taught = Taught(action)
    label = None if action == "forget" else Label.parse(action)
    for name, raw in messages:
        if not looks_like_message(raw):
            taught.results.append((name, NOT_A_MESSAGE))
            continue
        try:
            if label is None:
                outcome = scorer.forget(raw, SOURCE, layer_user=layer_user)
            else:
                outcome = scorer.learn(raw, label, SOURCE, layer_user=layer_user)
        except SpamdError as e:  # the journal cannot be written, Redis is down: nothing more is learned
            taught.error = str(e)
            break
        taught.results.append((name, outcome.value))
        await asyncio.sleep(0)  # let SMTP and the rest in between messages
    return taught
