"""The forged-sender attack through the real daemon: a rescued sender's trust goes only to its signed mail.

spamd runs as a subprocess (tests/daemon_helpers.py) asking only our DNS server on
loopback (tests/dns_helpers.py) for the test keys; mail comes over SMTP (smtplib);
the user's rescues are Maildir moves out of Junk as an IMAP server makes them.
"""

from __future__ import annotations

import json
import random
import smtplib
import threading
from pathlib import Path

from spamd.model.bayes import Label
from spamd.people.senders import CLAIMED_PUSH
from tests.auth_helpers import SigningKeys
from tests.daemon_helpers import (
    SPAM_WORDS,
    DaemonProcess,
    crlf,
    folder_files,
    imap_move,
    make_message,
    wait_until_sync,
    write_config,
)
from tests.dns_helpers import ZoneServer
from tests.spamc_helpers import SpamcDaemon
from tests.test_users_daemon import personal_history, users

JUNK = ".Junk"
SPAM_CUT = 0.315  # log-odds of the default spam_threshold (0.85)
SHOP = "Deals <deals@shop.example>"


# The shop's offers and the forger's spam both read as spam to the model, in different words: a
# rescued offer teaches its own words (and the shop's header tokens) as ham, not the forger's
# phishing vocabulary, which the model learned from spam of its own.
OFFER_WORDS = SPAM_WORDS
FORGED_WORDS = [f"{stem}{i}" for stem in ("verify", "suspended", "password", "login", "wallet") for i in range(12)]


def phishing(n: int) -> bytes:
    rng = random.Random(f"phish-{n}")
    body = " ".join(rng.choice(FORGED_WORDS) for _ in range(60))
    return f"From: sec{n}@bank-alerts.example\nTo: x@example.com\nSubject: account {n}\n\n{body}\n".encode()


def from_shop(kind: str, n: int, words: list[str], length: int = 40) -> bytes:
    rng = random.Random(f"{kind}-{n}")
    body = " ".join(rng.choice(words) for _ in range(length))
    return crlf(
        f"From: {SHOP}\nTo: alice@home.example\nSubject: {kind} {n}\nMessage-ID: <{kind}-{n}@shop.example>\n\n"
        f"{body}\n{kind}{n}\n".encode()
    )


def deliver(port: int, maildir: Path, raw: bytes) -> tuple[Path, bool]:
    """Send `raw` to alice over SMTP; where it was filed (path, in Junk)."""
    before = {p.name.split(":")[0] for p in folder_files(maildir) + folder_files(maildir, JUNK)}
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.sendmail("bounce@shop.example", ["alice@home.example"], raw)

    def arrived() -> tuple[Path, bool] | None:
        for folder, junk in (("", False), (JUNK, True)):
            for p in folder_files(maildir, folder):
                if p.name.split(":")[0] not in before:
                    return p, junk
        return None

    return wait_until_sync(arrived)  # type: ignore[return-value]


def test_forged_mail_from_a_rescued_sender_goes_where_its_content_sends_it(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    root = tmp_path / "users"
    maildir = root / "alice" / "Maildir"
    maildir.mkdir(parents=True)
    config = write_config(
        tmp_path / "spamd.toml",
        f'[maildir]\nroot = "{root}"\nfsync = false\n[auth]\nnameservers = ["{auth_zone.address}"]\ndns_budget_s = 10.0\n',
    )
    data = tmp_path / "data"
    process = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
    try:
        port = process.port
        daemon = SpamcDaemon(process, 0, config, data)
        general = tmp_path / "general"
        general.mkdir()
        for label in (Label.SPAM, Label.HAM):
            paths = []
            for i in range(20):
                paths.append(general / f"{label}-{i}.eml")
                paths[-1].write_bytes(make_message(label, i, seed=777))
                if label == Label.SPAM:
                    paths.append(general / f"phish-{i}.eml")
                    paths[-1].write_bytes(phishing(i))
            assert daemon.spamctl("train", f"--{label}", *paths).returncode == 0
        personal_history(daemon.spamctl, general, "alice")

        # Three of the shop's signed offers arrive, filed in Junk; Alice rescues them.
        offers = []
        for n in range(3):
            path, in_junk = deliver(port, maildir, test_keys.shop.sign(from_shop("offer", n, OFFER_WORDS)))
            assert in_junk, f"offer {n} reads as spam to the model: filed in Junk before her rescue"
            head = path.read_bytes().split(b"\n\n", 1)[0]
            assert b"X-Spam-Auth: source=spamd; dkim=pass header.d=shop.example; dmarc=pass" in head, head
            offers.append(path)
        for path in offers:
            imap_move(path, maildir, "")
        # Her three moves turn the shop's address her way (no token layer counts them: token_moves is off).
        wait_until_sync(lambda: users(daemon.spamctl).get("alice", {}).get("senders_to_inbox") == 1)

        # Forged, unsigned, the same From: filed by its content, into Junk; so is a forgery with a valid
        # signature of another domain (unaligned). Content alone files each as spam by more than the bound.
        forgeries = [from_shop("forged", n, FORGED_WORDS, 150) for n in range(10, 13)]
        forgeries.append(test_keys.other.sign(from_shop("forged", 13, FORGED_WORDS, 150)))
        for n, raw in enumerate(forgeries):
            sample = general / f"forged-{n}.eml"
            sample.write_bytes(raw)
            alone = json.loads(daemon.spamctl("classify", "--json", sample).stdout)
            assert alone["score"] >= SPAM_CUT + CLAIMED_PUSH, alone
            path, in_junk = deliver(port, maildir, raw)
            assert in_junk, path.read_bytes().split(b"\n\n", 1)[0]
        # The shop's own signed mail still follows her rescues, whatever its content.
        for n in range(30, 33):
            path, in_junk = deliver(port, maildir, test_keys.shop.sign(from_shop("forged", n, FORGED_WORDS, 150)))
            assert not in_junk, path.read_bytes().split(b"\n\n", 1)[0]

        # explain says which identity the rule used and whether it was authenticated.
        forged, signed = general / "forged.eml", general / "signed.eml"
        forged.write_bytes(from_shop("forged", 40, FORGED_WORDS, 150))
        signed.write_bytes(test_keys.shop.sign(from_shop("forged", 40, FORGED_WORDS, 150)))
        rows = {}
        for name, path in (("forged", forged), ("signed", signed)):
            done = daemon.spamctl("explain", "--json", "--user", "alice", path)
            assert done.returncode == 0, done.stderr
            rows[name] = json.loads(done.stdout)["senders"]
        rule = ("sender", "authenticated", "way")
        forged_rule = [{k: row[k] for k in rule} for row in rows["forged"]]
        assert forged_rule == [{"sender": "from=deals@shop.example", "authenticated": "", "way": "inbox_claimed"}]
        signed_rule = [{k: row[k] for k in rule} for row in rows["signed"]]
        assert signed_rule == [{"sender": "from=deals@shop.example", "authenticated": "dmarc", "way": "inbox"}]
        # The moves that shaped the verdict: alice's rescues of the shop, each a learned ham move.
        moves = rows["forged"][0]["moves"]
        assert moves and all(m["label"] == "ham" and m["what"] == "learned" for m in moves), moves
        # The forgery does not read as what she kept from the shop: its push is below the rule's bound.
        assert rows["forged"][0]["kept_push"] < 0.6, rows["forged"]
        human = daemon.spamctl("explain", "--user", "alice", forged)
        assert "sender from=deals@shop.example: not authenticated" in human.stdout
        listed = daemon.spamctl("users")
        assert "filed there whatever their content only when the message is authenticated (DMARC" in listed.stdout
    finally:
        process.kill()


def test_spf_for_the_smtp_client_and_dmarc_through_it_reach_the_header(tmp_path: Path, auth_zone: ZoneServer) -> None:
    """[auth] spf: the listener's client is checked; unsigned mail from the shop's server passes DMARC. A bounce
    whose HELO is written as a result of its own ("x; dkim=pass ...") writes no result into X-Spam-Auth."""
    auth_zone.txt("shop.example", "v=spf1 ip4:127.0.0.1 -all")
    maildir = tmp_path / "Maildir"
    config = write_config(
        tmp_path / "spamd.toml",
        f'[maildir]\npaths = ["{maildir}"]\nfsync = false\n'
        f'[auth]\nspf = true\nnameservers = ["{auth_zone.address}"]\ndns_budget_s = 10.0\n',
    )
    process = DaemonProcess("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    try:
        heads = []
        forged_helo = "x; dkim=pass header.d=bank.example"
        sessions = (("bounce@shop.example", None), ("x@attacker.example", None), ("", forged_helo))
        for n, (mail_from, helo) in enumerate(sessions):
            raw = from_shop("spf", n, SPAM_WORDS)
            with smtplib.SMTP("127.0.0.1", process.port, local_hostname=helo, timeout=30) as client:
                client.sendmail(mail_from, ["alice@home.example"], raw)

            def delivered(n: int = n) -> list[Path]:
                return [
                    p for p in folder_files(maildir) + folder_files(maildir, JUNK) if b"spf%d" % n in p.read_bytes()
                ]

            found = wait_until_sync(delivered)
            heads.append(found[0].read_bytes().split(b"\n\n", 1)[0].decode())
        assert "spf=pass smtp.mailfrom=shop.example; dmarc=pass header.from=shop.example" in heads[0], heads[0]
        assert "dmarc=fail header.from=shop.example policy.published-domain-policy=reject" in heads[1], heads[1]
        [report] = [line for line in heads[2].splitlines() if line.startswith("X-Spam-Auth:")]
        assert report == (
            "X-Spam-Auth: source=spamd; spf=none smtp.mailfrom=x??dkim?pass?header.d?bank.example; "
            "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
        ), heads[2]
    finally:
        process.kill()


def test_a_nameserver_that_never_answers_authenticates_nothing_and_fails_no_mail(
    tmp_path: Path, silent_nameserver: str, test_keys: SigningKeys
) -> None:
    """Every message is still delivered, each with a temporary error: the budget ends each one's wait."""
    maildir = tmp_path / "Maildir"
    config = write_config(
        tmp_path / "spamd.toml",
        f'[maildir]\npaths = ["{maildir}"]\nfsync = false\n[auth]\nnameservers = ["{silent_nameserver}"]\ndns_budget_s = 1.0\n',
    )
    process = DaemonProcess("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    try:
        raws = [test_keys.shop.sign(from_shop("silent", n, SPAM_WORDS)) for n in range(4)]
        errors: list[BaseException] = []

        def send(raw: bytes) -> None:
            try:
                with smtplib.SMTP("127.0.0.1", process.port, timeout=60) as client:
                    client.sendmail("bounce@shop.example", ["alice@home.example"], raw)
            except (OSError, smtplib.SMTPException) as e:
                errors.append(e)

        senders = [threading.Thread(target=send, args=(raw,)) for raw in raws]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(120)
        assert not errors
        delivered = wait_until_sync(lambda: len(folder_files(maildir) + folder_files(maildir, JUNK)) == 4 or None)
        assert delivered
        for path in folder_files(maildir) + folder_files(maildir, JUNK):
            head = path.read_bytes().split(b"\n\n", 1)[0]
            assert b"X-Spam-Auth: source=spamd; dkim=temperror header.d=shop.example; dmarc=temperror" in head, head
    finally:
        process.kill()
