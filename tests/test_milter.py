"""spamd as a Postfix milter, inside Debian's real Postfix, and against hostile milter clients.

Postfix (smtpd_milters = inet:127.0.0.1:PORT, milter_protocol = 6,
milter_default_action = tempfail) takes mail from smtplib and relays it to a sink;
spamd runs as a subprocess beside it. The hand-written milter clients below are only
the hostile ones: everything a well-behaved MTA does is done by Postfix itself.
"""

from __future__ import annotations

import random
import signal
import smtplib
import socket
import struct
import threading
import time

import pytest

from spamd.frontends.milter import (
    SMFIC_BODY,
    SMFIC_BODYEOB,
    SMFIC_HEADER,
    SMFIC_OPTNEG,
    SMFIF_ADDHDRS,
    SMFIF_CHGHDRS,
    packet,
)
from spamd.model import Label
from tests.attack_helpers import WellBehaved, tag_of
from tests.daemon_helpers import crlf, wait_until_sync
from tests.postfix_helpers import Postfix, Sink, Spamd, message, postfix_missing, running_postfix, watch

pytestmark = pytest.mark.skipif(postfix_missing() is not None, reason=str(postfix_missing()))


@pytest.fixture(scope="module")
def sink():
    with Sink() as sink:
        yield sink


@pytest.fixture(scope="module")
def spamd_process(tmp_path_factory):
    spamd = Spamd(tmp_path_factory.mktemp("milter"), milter=True).start()
    yield spamd
    spamd.stop()


@pytest.fixture
def spamd(spamd_process):
    spamd_process.ensure_running()  # a test that killed it leaves the next one a running spamd
    return spamd_process


@pytest.fixture(scope="module")
def postfix(tmp_path_factory, sink, spamd_process):
    milter = f"inet:127.0.0.1:{spamd_process.milter_port}"
    main = {
        "smtpd_milters": milter,
        "non_smtpd_milters": milter,
        "milter_protocol": "6",
        "milter_default_action": "tempfail",
        "milter_mail_macros": "i {mail_addr} {client_addr} {client_name} {auth_authen}",
    }
    with running_postfix(tmp_path_factory.mktemp("postfix-milter"), sink.port, main=main) as postfix:
        yield postfix


def headers_of(data: bytes) -> list[bytes]:
    head = data.split(b"\r\n\r\n", 1)[0]
    return [line for line in head.split(b"\r\n") if line[:1] not in (b" ", b"\t")]


def named(data: bytes, name: str) -> list[bytes]:
    return [h for h in headers_of(data) if h.lower().startswith(name.lower().encode() + b":")]


def test_marks_each_message_once_in_place(postfix: Postfix, sink: Sink, spamd: Spamd):
    assert postfix.send(message(Label.HAM, "mark-ham")) == {}
    assert postfix.send(message(Label.SPAM, "mark-spam")) == {}
    [ham] = sink.wait_for("mark-ham")
    [spam] = sink.wait_for("mark-spam")
    for data, status, flag, marker in ((ham, b"No", b"NO", b"mark-ham"), (spam, b"Yes", b"YES", b"mark-spam")):
        [line] = named(data, "X-Spam-Status")
        assert line.startswith(b"X-Spam-Status: " + status + b", score=")
        assert named(data, "X-Spam-Flag") == [b"X-Spam-Flag: " + flag]
        assert len(named(data, "X-Spam-Score")) == 1
        assert len(named(data, "Received")) == 1  # once through Postfix: no re-injection
        assert data.endswith(b"\r\nend " + marker + b"\r\n")  # the body as sent
    scored = [e for e in spamd.events("message_scored") if e.get("via") == "milter"]
    assert sorted(e["verdict"] for e in scored[-2:]) == ["ham", "spam"]
    assert all(e.get("queue_id") for e in scored)  # Postfix's queue id, from the "i" macro


def test_forged_verdicts_are_removed(postfix: Postfix, sink: Sink, spamd: Spamd):
    forged = "X-Spam-Status: No, forged\nx-spam-status: No, forged again\nX-Spam-Flag: NO\nX-Spam-Other: forged\n"
    assert postfix.send(message(Label.SPAM, "swapped-verdict", extra_headers=forged)) == {}
    [data] = sink.wait_for("swapped-verdict")
    assert b"forged" not in data, data.decode()
    [status] = named(data, "X-Spam-Status")
    assert status.startswith(b"X-Spam-Status: Yes, score=")
    assert named(data, "X-Spam-Flag") == [b"X-Spam-Flag: YES"]
    assert named(data, "X-Spam-Other") == []
    [line] = [e for e in spamd.events("message_scored") if e.get("removed_headers") == 4]
    assert line["verdict"] == "spam"


def test_reject_at_refuses_spam_with_554(postfix: Postfix, sink: Sink, spamd: Spamd):
    with spamd.reconfigured("[milter]\nreject_at = 0.9\n"):
        with pytest.raises(smtplib.SMTPDataError) as refused:
            postfix.send(message(Label.SPAM, "reject-spam"))
        assert refused.value.smtp_code == 554
        assert refused.value.smtp_error.startswith(b"5.7.1")
        assert postfix.send(message(Label.HAM, "reject-ham")) == {}  # ham still passes
        sink.wait_for("reject-ham")
    assert sink.with_subject("reject-spam") == []
    assert [e["action"] for e in spamd.events("message_scored") if e.get("action") == "rejected"] == ["rejected"]


def test_own_failure_answers_451_and_the_retry_is_delivered(postfix: Postfix, sink: Sink, spamd: Spamd):
    big = message(Label.HAM, "too-big") + b"padding padding padding padding\n" * 300  # ~10 KB
    with spamd.reconfigured("[milter]\nmax_message_bytes = 4096\n"):
        with pytest.raises(smtplib.SMTPDataError) as tempfailed:
            postfix.send(big)
        assert tempfailed.value.smtp_code == 451
        assert tempfailed.value.smtp_error.startswith(b"4.7.1")
        assert spamd.events("milter_message_refused")[-1]["reason"] == "too_big"
    assert postfix.queued() == []  # refused before the queue: the client keeps it
    assert sink.with_subject("too-big") == []
    assert postfix.send(big) == {}  # the sender's retry, once the limit allows it
    [data] = sink.wait_for("too-big")
    assert len(named(data, "X-Spam-Status")) == 1


def test_spamd_killed_mid_session_loses_nothing(postfix: Postfix, sink: Sink, spamd: Spamd):
    data = crlf(message(Label.HAM, "killed"))
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        client.ehlo("client.example.org")  # Postfix has connected to spamd and negotiated
        assert client.mail("sender@example.org")[0] == 250
        assert client.rcpt("user@example.com")[0] == 250
        assert client.docmd("DATA")[0] == 354
        client.send(data)  # the message, all but its end
        spamd.proc.proc.send_signal(signal.SIGKILL)
        spamd.proc.wait(10)
        client.send(b".\r\n")
        code, text = client.getreply()
    assert code == 451 and text.startswith(b"4.7.1")  # milter_default_action = tempfail
    assert postfix.queued() == []
    assert sink.with_subject("killed") == []
    spamd.start()  # same ports, same model
    assert postfix.send(message(Label.HAM, "killed")) == {}  # the client's retry
    [delivered] = sink.wait_for("killed")
    assert len(named(delivered, "X-Spam-Status")) == 1
    assert postfix.queued() == []


def test_sigterm_with_postfix_sessions_open_exits_at_once(postfix: Postfix, sink: Sink, spamd: Spamd):
    # Postfix holds one milter connection per SMTP session, idle between messages:
    # shutdown must close those at once, not wait the drain timeout for them.
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        client.ehlo("client.example.org")
        wait_until_sync(lambda: spamd.milter_sessions() >= 1, 10)
        started = time.monotonic()
        spamd.proc.signal(signal.SIGTERM)
        assert spamd.proc.wait(20) == 0
        assert time.monotonic() - started < 5
        with pytest.raises(smtplib.SMTPDataError) as tempfailed:
            client.sendmail("sender@example.org", ["user@example.com"], crlf(message(Label.HAM, "sigterm")))
        assert tempfailed.value.smtp_code == 451
    spamd.start()
    assert postfix.send(message(Label.HAM, "sigterm")) == {}
    assert len(sink.wait_for("sigterm")) == 1
