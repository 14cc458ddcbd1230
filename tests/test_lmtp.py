"""Debian's Postfix hands mail to spamd over LMTP, spamd hands it on to Debian's Dovecot LMTP: scored per recipient.

The Postfix, Dovecot and spamd lines are docs/postfix.md's and docs/dovecot.md's, read
from them with this instance's ports and paths (tests/lmtp_helpers.py). smtplib is the
mail client; imaplib reads and moves the mail as the users' clients would; spamd runs
as a subprocess as the mail user, watching the users' Maildirs, so their moves train
their own layers. Dovecot's Sieve files into Junk by spamd's X-Spam-Flag.
"""

from __future__ import annotations

import shutil
import smtplib
from collections.abc import Iterator
from functools import partial

import pytest

from spamd.model.bayes import Label
from tests.daemon_helpers import crlf, list_digest, wait_until_sync
from tests.dovecot_helpers import dovecot_missing, private_dir
from tests.lmtp_helpers import DOMAIN, LmtpDovecot, LmtpSpamd, lmtp_missing, lmtp_postfix, postfix_said
from tests.postfix_helpers import Postfix, Sink, message, postfix_missing

pytestmark = [
    pytest.mark.slow,
    pytest.mark.real_program(postfix_missing() or dovecot_missing() or lmtp_missing()),
]

ALIASES = {"team": ["alice", "bob"]}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Postfix, LmtpSpamd, LmtpDovecot]]:
    top = private_dir("spamd-lmtp-")
    dovecot = spamd = None
    try:
        with Sink() as sink:  # where Postfix sends its bounces (the senders are at example.org)
            for part in ("dovecot", "spamd"):
                (top / part).mkdir()
                (top / part).chmod(0o711)
            dovecot = LmtpDovecot(top / "dovecot")
            dovecot.start()
            spamd = LmtpSpamd(top / "spamd", dovecot)
            spamd.start()
            postfix = lmtp_postfix(sink.port, spamd.port, ALIASES)
            try:
                yield postfix.start(), spamd, dovecot
            finally:
                postfix.stop()
    finally:
        if spamd is not None:
            spamd.stop()
        if dovecot is not None:
            dovecot.stop()
        shutil.rmtree(top, ignore_errors=True)


def send(postfix: Postfix, data: bytes, recipients: list[str], sender: str = "sender@example.org") -> dict:
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        return client.sendmail(sender, recipients, crlf(data))


def digest(n: int) -> bytes:
    """A list's digest to the team alias, its Subject a marker no other test's Subject contains."""
    return list_digest(n, f"team@{DOMAIN}").replace(
        f"Subject: digest {n}\n".encode(), f"Subject: lmtpdigest{n:03d}z\n".encode()
    )


def arrived(dovecot: LmtpDovecot, user: str, marker: str) -> dict[str, int]:
    """Where the user's copy of the message marked `marker` is (INBOX, Junk), once it is in one of them."""

    def where() -> dict[str, int] | None:
        folders = dovecot.folders(user, marker)
        return folders if sum(folders.values()) else None

    found = wait_until_sync(where, 30)
    assert found is not None
    return found


def lines_of(postfix: Postfix, recipient: str, *words: str) -> list[str]:
    """Postfix's LMTP lines for `recipient` holding every one of `words`."""
    return [line for line in postfix_said(postfix, recipient) if all(w in line for w in words)]


def test_one_message_to_an_alias_is_filed_each_users_own_way(stack: tuple[Postfix, LmtpSpamd, LmtpDovecot]):
    postfix, spamd, dovecot = stack
    wants_junk = {"alice": True, "bob": False}  # alice left the list; bob reads it
    in_a_row = 0
    moves = 0
    # Both users' copies are filed their way for good from the 10th copy with the evidence among the
    # words, from the 10th or 12th with it scored apart ([model] evidence_weight): room for 16.
    for n in range(16):
        marker = f"lmtpdigest{n:03d}z"
        assert send(postfix, digest(n), [f"team@{DOMAIN}"], sender="list@news.example.net") == {}
        where = {user: arrived(dovecot, user, marker) for user in wants_junk}
        filed_their_way = {
            u: where[u] == ({"INBOX": 0, "Junk": 1} if junk else {"INBOX": 1, "Junk": 0})
            for u, junk in wants_junk.items()
        }
        if all(filed_their_way.values()):
            in_a_row += 1
            if in_a_row == 2:
                break
            continue
        in_a_row = 0
        for user, junk in wants_junk.items():  # each user corrects their own copy, over IMAP
            if not filed_their_way[user]:
                moves += dovecot.move(user, marker, "INBOX" if junk else "Junk", "Junk" if junk else "INBOX")
        spamd.wait_for_moves(moves)
    assert in_a_row == 2, (n, where)
    # One transaction from Postfix, one scoring per user, two copies with their own headers.
    scored = spamd.events("message_scored", way_in="lmtp", message_id=f"<digest-{n}-team@{DOMAIN}>")
    verdicts = {e["user_name"]: (e["verdict"], e["recipients"]) for e in scored}
    assert len(scored) == 2 and verdicts["alice"] == ("spam", [f"alice@{DOMAIN}"]), scored
    assert verdicts["bob"][0] != "spam" and verdicts["bob"][1] == [f"bob@{DOMAIN}"], scored  # ham or unsure: INBOX
    [alice] = dovecot.fetch("alice", "Junk", marker)
    [bob] = dovecot.fetch("bob", "INBOX", marker)
    assert b"X-Spam-Flag: YES" in alice and b"X-Spam-Flag: NO" in bob
    assert alice.count(b"X-Spam-Status:") == bob.count(b"X-Spam-Status:") == 1
    stats = spamd.stats()["daemon"]
    assert stats["lmtp_recipients"]["deferred"] == stats["lmtp_recipients"]["refused"] == 0
    assert dovecot.errors() == []


def test_sieve_files_spam_into_junk_and_a_forged_flag_does_not(stack: tuple[Postfix, LmtpSpamd, LmtpDovecot]):
    postfix, _, dovecot = stack
    forged = "X-Spam-Flag: YES\nX-Spam-Status: Yes, forged\n"
    assert send(postfix, message(Label.HAM, "lmtpsieveham", extra_headers=forged), [f"alice@{DOMAIN}"]) == {}
    assert send(postfix, message(Label.SPAM, "lmtpsievespam"), [f"alice@{DOMAIN}"]) == {}
    wait_until_sync(lambda: dovecot.folders("alice", "lmtpsieveham") == {"INBOX": 1, "Junk": 0}, 30)
    wait_until_sync(lambda: dovecot.folders("alice", "lmtpsievespam") == {"INBOX": 0, "Junk": 1}, 30)
    [ham] = dovecot.fetch("alice", "INBOX", "lmtpsieveham")
    assert b"forged" not in ham and b"X-Spam-Flag: NO" in ham


def test_dovecot_refusing_one_recipient_bounces_that_recipient_alone(stack: tuple[Postfix, LmtpSpamd, LmtpDovecot]):
    postfix, spamd, dovecot = stack
    # carol is over her quota (Dovecot answers after DATA), dave does not exist (Dovecot answers his RCPT).
    recipients = [f"alice@{DOMAIN}", f"carol@{DOMAIN}", f"dave@{DOMAIN}"]
    assert send(postfix, message(Label.HAM, "lmtprefused"), recipients) == {}

    [carol] = wait_until_sync(lambda: lines_of(postfix, f"carol@{DOMAIN}", "status=bounced"), 30)
    queue_id = carol.split(": to=<")[0].rsplit(" ", 1)[1]  # the one message's, in Postfix's queue
    [dave] = wait_until_sync(lambda: lines_of(postfix, f"dave@{DOMAIN}", queue_id), 30)
    [alice] = wait_until_sync(lambda: lines_of(postfix, f"alice@{DOMAIN}", queue_id), 30)
    # Each recipient's reply is Dovecot's own for that recipient.
    assert "said: 552 5.2.2 <carol@example.com> Quota exceeded" in carol, carol
    assert "said: 550 5.1.1 <dave@example.com> User doesn't exist" in dave, dave
    assert "(250 2.0.0 <alice@example.com>" in alice, alice
    assert dovecot.folders("alice", "lmtprefused") == {"INBOX": 1, "Junk": 0}
    assert spamd.events("lmtp_recipient_not_delivered", recipient=f"dave@{DOMAIN}")
    wait_until_sync(lambda: postfix.queued() == [], 30)  # (the bounce to the sender goes out too)


def test_next_hop_down_defers_and_the_retry_delivers_once(stack: tuple[Postfix, LmtpSpamd, LmtpDovecot]):
    postfix, spamd, dovecot = stack
    with spamd.reconfigured("next_hop_timeout_s", "2.0"):
        dovecot.freeze(True)  # accepts connections, answers nothing
        try:
            assert send(postfix, message(Label.HAM, "lmtpdown"), [f"team@{DOMAIN}"]) == {}
            # Each recipient deferred with spamd's 451: Postfix keeps the message.
            for user in ALIASES["team"]:
                wait_until_sync(partial(lines_of, postfix, f"{user}@{DOMAIN}", "status=deferred", "451 4.4.1"), 30)
            assert spamd.events("lmtp_next_hop_failed")
        finally:
            dovecot.freeze(False)
        postfix.flush()
        for user in ALIASES["team"]:
            assert arrived(dovecot, user, "lmtpdown") == {"INBOX": 1, "Junk": 0}
    wait_until_sync(lambda: postfix.queued() == [], 30)
    for user in ALIASES["team"]:
        assert dovecot.folders(user, "lmtpdown") == {"INBOX": 1, "Junk": 0}


def test_the_next_hop_as_dovecots_unix_socket(stack: tuple[Postfix, LmtpSpamd, LmtpDovecot]):
    postfix, spamd, dovecot = stack
    path = dovecot.top / "run" / "lmtp"  # Dovecot's own LMTP socket under its base_dir
    assert path.is_socket()
    with spamd.reconfigured("next_hop", f'"{path}"'):
        assert send(postfix, message(Label.SPAM, "lmtpunix"), [f"bob@{DOMAIN}"]) == {}
        assert arrived(dovecot, "bob", "lmtpunix") == {"INBOX": 0, "Junk": 1}
    assert spamd.events("message_scored", via=str(path), user_name="bob")


@pytest.mark.parametrize("round_", range(3))
def test_kill_9_mid_transaction_postfix_retries_nothing_lost_or_twice(
    stack: tuple[Postfix, LmtpSpamd, LmtpDovecot], round_: int
):
    postfix, spamd, dovecot = stack
    marker = f"lmtpkilled{round_}z"
    lost = len(lines_of(postfix, f"alice@{DOMAIN}", "status=deferred", "lost connection"))
    dovecot.freeze(True)  # spamd's hand-on waits on Dovecot's greeting: the transaction is under way
    try:
        assert send(postfix, message(Label.HAM, marker, n=round_), [f"team@{DOMAIN}"]) == {}
        wait_until_sync(lambda: spamd.stats()["daemon"]["lmtp_in_flight"] == 1, 30)
        spamd.kill()
    finally:
        dovecot.freeze(False)
    # Postfix lost the connection before any reply: it keeps the message and retries it.
    wait_until_sync(lambda: len(lines_of(postfix, f"alice@{DOMAIN}", "status=deferred", "lost connection")) > lost, 30)
    spamd.start()
    postfix.flush()
    for user in ALIASES["team"]:
        arrived(dovecot, user, marker)
    wait_until_sync(lambda: postfix.queued() == [], 30)
    for user in ALIASES["team"]:
        assert sum(dovecot.folders(user, marker).values()) == 1, user
