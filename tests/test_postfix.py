"""spamd as a Postfix content filter (smtp.mode = "relay"), inside Debian's real Postfix.

The master.cf and spamd.toml lines are docs/postfix.md's, read from it (tests/doc_snippets.py)
with this instance's ports: Postfix's smtpd hands every message to spamd
(content_filter=spamd:[127.0.0.1]:PORT), spamd re-injects it into a second smtpd that
filters nothing, and Postfix relays it to a sink. smtplib is the mail client; spamd
runs as a subprocess.
"""

from __future__ import annotations

import pytest

from spamd.model.bayes import Label
from tests.postfix_helpers import (
    Postfix,
    Sink,
    Spamd,
    content_filter_master_cf,
    content_filter_spamd_toml,
    free_port,
    message,
    postfix_missing,
    running_postfix,
)

pytestmark = pytest.mark.real_program(postfix_missing())


@pytest.fixture(scope="module")
def sink():
    with Sink() as sink:
        yield sink


@pytest.fixture(scope="module")
def postfix_and_spamd(tmp_path_factory, sink):
    reinject_port = free_port()
    spamd = Spamd(tmp_path_factory.mktemp("filter"), content_filter_spamd_toml(reinject_port))
    smtpd, services = content_filter_master_cf(spamd.smtp_port, reinject_port)
    spamd.start()
    try:
        with running_postfix(sink.port, smtpd_options=smtpd, services=services) as postfix:
            yield postfix, spamd
    finally:
        spamd.stop()


def named(data: bytes, name: str) -> list[bytes]:
    head = data.split(b"\r\n\r\n", 1)[0]
    return [line for line in head.split(b"\r\n") if line.lower().startswith(name.lower().encode() + b":")]


def test_content_filter_marks_each_message_once(postfix_and_spamd: tuple[Postfix, Spamd], sink: Sink):
    postfix, spamd = postfix_and_spamd
    assert postfix.send(message(Label.HAM, "filter-ham")) == {}
    assert postfix.send(message(Label.SPAM, "filter-spam")) == {}
    [ham] = sink.wait_for("filter-ham")
    [spam] = sink.wait_for("filter-spam")
    assert [s[:18] for s in named(ham, "X-Spam-Status")] == [b"X-Spam-Status: No,"]
    assert [s[:19] for s in named(spam, "X-Spam-Status")] == [b"X-Spam-Status: Yes,"]
    assert named(spam, "X-Spam-Flag") == [b"X-Spam-Flag: YES"]
    # Through Postfix twice (before and after spamd): two Received lines, one message.
    assert len(named(ham, "Received")) == 2
    spamd.last_event("message_scored", verdict="spam", via="relay")  # (the log is read by a thread)
    assert [e["via"] for e in spamd.events("message_scored")] == ["relay", "relay"]
    assert postfix.queued() == []


def test_content_filter_replaces_a_forged_verdict(postfix_and_spamd: tuple[Postfix, Spamd], sink: Sink):
    postfix, _ = postfix_and_spamd
    forged = "X-Spam-Status: No, forged\nX-Spam-Flag: NO\n"
    assert postfix.send(message(Label.SPAM, "filter-swapped", extra_headers=forged)) == {}
    [data] = sink.wait_for("filter-swapped")
    assert b"forged" not in data
    [status] = named(data, "X-Spam-Status")
    assert status.startswith(b"X-Spam-Status: Yes, score=")
    assert named(data, "X-Spam-Flag") == [b"X-Spam-Flag: YES"]
