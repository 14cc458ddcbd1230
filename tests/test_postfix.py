"""spamd as a Postfix content filter (smtp.mode = "relay"), inside Debian's real Postfix.

The master.cf is the README's, adapted to a private instance: Postfix's smtpd hands
every message to spamd (content_filter=spamd:[127.0.0.1]:PORT), spamd re-injects it
into a second smtpd that filters nothing, and Postfix relays it to a sink. smtplib is
the mail client; spamd runs as a subprocess.
"""

from __future__ import annotations

import pytest

from spamd.model import Label
from tests.postfix_helpers import Postfix, Sink, Spamd, free_port, message, postfix_missing, running_postfix

pytestmark = pytest.mark.skipif(postfix_missing() is not None, reason=str(postfix_missing()))

# README "As a Postfix content filter", with the ports of this instance.
CONTENT_FILTER_SMTPD = "  -o content_filter=spamd:[127.0.0.1]:{spamd_port}\n"
CONTENT_FILTER_SERVICES = """\
spamd     unix  -       -       n       -       16      smtp
  -o smtp_data_done_timeout=1200
  -o smtp_send_xforward_command=no
  -o disable_dns_lookups=yes
  -o max_use=20
127.0.0.1:{reinject_port} inet n  -       n       -       -       smtpd
  -o content_filter=
  -o receive_override_options=no_unknown_recipient_checks,no_header_body_checks,no_milters
  -o smtpd_helo_restrictions=
  -o smtpd_client_restrictions=
  -o smtpd_sender_restrictions=
  -o smtpd_recipient_restrictions=permit_mynetworks,reject
  -o mynetworks=127.0.0.0/8
  -o smtpd_authorized_xforward_hosts=127.0.0.0/8
"""


@pytest.fixture(scope="module")
def sink():
    with Sink() as sink:
        yield sink


@pytest.fixture(scope="module")
def postfix_and_spamd(tmp_path_factory, sink):
    reinject_port = free_port()
    spamd = Spamd(tmp_path_factory.mktemp("filter"), f'[smtp]\nmode = "relay"\nnext_hop_port = {reinject_port}\n')
    smtpd = CONTENT_FILTER_SMTPD.format(spamd_port=spamd.smtp_port)
    services = CONTENT_FILTER_SERVICES.format(reinject_port=reinject_port)
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
