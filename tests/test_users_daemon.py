"""Per-user layers through the real daemon: Maildir moves, Debian's spamc -u, restart and kill -9.

spamd runs as a subprocess (tests/daemon_helpers.py); moves are renames as an IMAP
server makes them; spamc is Debian's binary. Nothing of spamd's own is mocked.
"""

from __future__ import annotations

import signal
import smtplib
from pathlib import Path

import pytest

from spamd.model.bayes import Label
from tests.daemon_helpers import (
    DaemonProcess,
    crlf,
    folder_files,
    imap_move,
    list_digest,
    make_message,
    wait_until_sync,
    write_config,
)
from tests.spamc_helpers import SpamcDaemon, needs_spamc, start_spamd

JUNK = ".Junk"


def users(spamctl) -> dict[str, dict]:
    done = spamctl("users", "--json")
    assert done.returncode == 0, done.stderr
    return {row["user"]: row for row in done.json()["users"]}


def personal_history(spamctl, work: Path, user: str) -> None:
    """A few ordinary trainings of each class for `user` (a layer with one class has no log-odds of its own)."""
    for label in (Label.SPAM, Label.HAM):
        paths = []
        for i in range(3):
            path = work / f"{user}-{label}-{i}.eml"
            path.write_bytes(make_message(label, i, seed=sum(map(ord, user))))
            paths.append(path)
        done = spamctl("train", f"--{label}", "--user", user, *paths)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("store", ["local", "redis"])
def test_two_users_opposite_moves_on_one_kind_each_get_their_way(tmp_path, store, request):
    """With the embedded store, and with the model and the layers in a real Redis."""
    root = tmp_path / "users"
    maildirs = {user: root / user / "Maildir" for user in ("alice", "bob")}
    for maildir in maildirs.values():
        maildir.mkdir(parents=True)
    redis = f'[redis]\nurl = "{request.getfixturevalue("redis_plain_url")}"\n' if store == "redis" else ""
    config = write_config(
        tmp_path / "spamd.toml", f'[maildir]\nroot = "{root}"\nfsync = false\n[users]\nscore_per_user = true\n{redis}'
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
            assert daemon.spamctl("train", f"--{label}", *paths).returncode == 0
        for user in maildirs:
            personal_history(daemon.spamctl, general, user)
        wants_junk = {"alice": True, "bob": False}  # alice left the list; bob reads it
        their_way_in_a_row = {"alice": 0, "bob": 0}
        for n in range(30):
            for user, maildir in maildirs.items():
                before = {p.name.split(":")[0] for p in folder_files(maildir) + folder_files(maildir, JUNK)}
                with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
                    client.sendmail(
                        "list@news.example.net", [f"{user}@example.com"], crlf(list_digest(n, f"{user}@example.com"))
                    )

                def arrived(maildir: Path = maildir, before: set[str] = before) -> tuple[Path, bool] | None:
                    for folder, junk in (("", False), (JUNK, True)):
                        for p in folder_files(maildir, folder):
                            if p.name.split(":")[0] not in before:
                                return p, junk
                    return None

                path, in_junk = wait_until_sync(arrived)  # type: ignore[misc]
                if in_junk == wants_junk[user]:
                    their_way_in_a_row[user] += 1
                    continue
                their_way_in_a_row[user] = 0
                applied = len(process.events("training_applied"))
                imap_move(path, maildir, JUNK if wants_junk[user] else "")

                def applied_more(applied: int = applied) -> bool:
                    return len(process.events("training_applied")) > applied

                wait_until_sync(applied_more)
            if min(their_way_in_a_row.values()) >= 3:
                break
        assert min(their_way_in_a_row.values()) >= 3, their_way_in_a_row
    finally:
        process.kill()


def restart(daemon: SpamcDaemon) -> SpamcDaemon:
    process = DaemonProcess(
        "--config", daemon.config, "--data-dir", daemon.data, "--smtp", "127.0.0.1:0", "--spamc", "127.0.0.1:0"
    )
    return SpamcDaemon(process, process.wait_for("daemon_started")["spamc_port"], daemon.config, daemon.data)


def user_score(daemon: SpamcDaemon, user: str, raw: bytes) -> str:
    """What Debian's spamc -c answers for `user`: 'score/threshold'."""
    done = daemon.spamc("-u", user, "-c", input=raw)
    return done.stdout.decode().strip()


def tell_alice_spam_and_bob_ham_of_one_list(daemon, token_layers: bool = True) -> bytes:
    """Through spamc -u: each user's ordinary history of both classes, then the list's copies spam for alice and
    ham for bob, until each one's layer files a new copy their way. Returns that new copy.

    `token_layers`: [users] token_moves is on, so each user's tells built a layer (off: none is built)."""
    for user in ("alice", "bob"):
        for i in range(3):
            for label in (Label.SPAM, Label.HAM):
                assert (
                    daemon.spamc("-u", user, "-L", str(label), input=make_message(label, i, seed=len(user))).returncode
                    == 0
                )
    for n in range(6):
        assert daemon.spamc("-u", "alice", "-L", "spam", input=list_digest(n, "alice@example.com")).returncode == 0
        assert daemon.spamc("-u", "bob", "-L", "ham", input=list_digest(n, "bob@example.com")).returncode == 0
    layers = users(daemon.spamctl)
    expected = (9, 9) if token_layers else (0, 0)
    assert (layers["alice"]["trained_spam"], layers["bob"]["trained_ham"]) == expected
    probe = list_digest(99, "list-readers@example.com")
    alice, bob, nobody = (float(user_score(daemon, u, probe).split("/")[0]) for u in ("alice", "bob", "carol"))
    assert alice > nobody > bob, (alice, nobody, bob)
    return probe


@needs_spamc
def test_spamc_u_trains_and_scores_with_the_users_layer_and_restarts_keep_every_layer(tmp_path):
    daemon = start_spamd(tmp_path / "d", "allow_tell = true\n[users]\nscore_per_user = true\ntoken_moves = true\n")
    try:
        probe = tell_alice_spam_and_bob_ham_of_one_list(daemon)
        layers = users(daemon.spamctl)
        scores = {u: user_score(daemon, u, probe) for u in ("alice", "bob", "carol")}

        assert daemon.stop() == 0  # SIGTERM: a clean stop
        daemon = restart(daemon)
        assert users(daemon.spamctl) == layers
        assert {u: user_score(daemon, u, probe) for u in scores} == scores

        for n in range(6, 9):  # acknowledged, then killed before any snapshot
            assert daemon.spamc("-u", "alice", "-L", "spam", input=list_digest(n, "alice@example.com")).returncode == 0
            assert daemon.spamc("-u", "bob", "-L", "ham", input=list_digest(n, "bob@example.com")).returncode == 0
        layers = users(daemon.spamctl)
        scores = {u: user_score(daemon, u, probe) for u in scores}
        daemon.process.signal(signal.SIGKILL)
        daemon.process.wait(30)
        daemon = restart(daemon)
        assert users(daemon.spamctl) == layers
        assert layers["alice"]["trained_spam"] == 12 and layers["bob"]["trained_ham"] == 12
        assert {u: user_score(daemon, u, probe) for u in scores} == scores
    finally:
        daemon.process.kill()


@needs_spamc
@pytest.mark.parametrize("store", ["local", "redis"])
def test_spamc_u_tells_turn_a_list_for_that_user_alone_as_shipped_and_kill_9_keeps_it(tmp_path, store, request):
    """The default: no token layer; each user's TELLs of one list decide where their copies go (spamd/people/senders.py);
    embedded (in snapshots and the journal) and in Redis."""
    redis = f'[redis]\nurl = "{request.getfixturevalue("redis_plain_url")}"\n' if store == "redis" else ""
    daemon = start_spamd(tmp_path / "d", f"allow_tell = true\n{redis}")
    try:
        probe = tell_alice_spam_and_bob_ham_of_one_list(daemon, token_layers=False)
        turned = {u: (row["senders_to_junk"], row["senders_to_inbox"]) for u, row in users(daemon.spamctl).items()}
        assert turned == {"alice": (2, 0), "bob": (0, 2)}  # the list's List-Id and From address, each way
        scores = {u: user_score(daemon, u, probe) for u in ("alice", "bob", "carol")}
        score, threshold = (float(x) for x in scores["alice"].split("/"))
        assert score >= threshold  # spam for alice: filed in her Junk
        daemon.process.signal(signal.SIGKILL)  # no snapshot holds the tells: the journal does
        daemon.process.wait(30)
        daemon = restart(daemon)
        assert {
            u: (row["senders_to_junk"], row["senders_to_inbox"]) for u, row in users(daemon.spamctl).items()
        } == turned
        assert {u: user_score(daemon, u, probe) for u in scores} == scores
    finally:
        daemon.process.kill()


@needs_spamc
def test_spamc_u_trains_and_scores_with_the_users_layer_in_redis(tmp_path, redis_plain_url):
    redis = f'[redis]\nurl = "{redis_plain_url}"\n'
    daemon = start_spamd(
        tmp_path / "d", f"allow_tell = true\n[users]\nscore_per_user = true\ntoken_moves = true\n{redis}"
    )
    try:
        tell_alice_spam_and_bob_ham_of_one_list(daemon)
    finally:
        daemon.process.kill()


@pytest.mark.parametrize("store", ["local", "redis"])
def test_a_rescue_is_learned_and_recorded_trash_is_recorded_and_kill_9_keeps_both(tmp_path, store, request):
    """Real Maildir moves under the daemon: alice moves the shop's mail out of Junk; `spamctl learned` says what
    spamd learned from each move (and from one into Trash, nothing); `spamctl explain` names her moves; a kill -9
    loses neither the moves' records nor what she kept (embedded: the journal; Redis: Redis)."""
    from tests.test_kept import shop_newsletter

    maildir = tmp_path / "users" / "alice" / "Maildir"
    maildir.mkdir(parents=True)
    redis = f'[redis]\nurl = "{request.getfixturevalue("redis_plain_url")}"\n' if store == "redis" else ""
    config = write_config(tmp_path / "spamd.toml", f'[maildir]\nroot = "{tmp_path / "users"}"\nfsync = false\n{redis}')
    data = tmp_path / "data"

    def start() -> tuple[DaemonProcess, SpamcDaemon]:
        process = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0")
        assert process.port  # started: its control socket answers
        return process, SpamcDaemon(process, 0, config, data)

    process, daemon = start()
    try:
        general = tmp_path / "general"
        general.mkdir()
        for label, make in ((Label.SPAM, lambda i: make_message(Label.SPAM, i, seed=5)),
                            (Label.HAM, lambda i: make_message(Label.HAM, i, seed=5)),
                            (Label.SPAM, lambda i: shop_newsletter(100 + i))):  # fmt: skip
            paths = []
            for i in range(12):
                paths.append(general / f"{label}-{len(list(general.iterdir()))}.eml")
                paths[-1].write_bytes(make(i))
            assert daemon.spamctl("train", f"--{label}", *paths).returncode == 0
        moved = []
        for n in range(4):
            with smtplib.SMTP("127.0.0.1", process.port, timeout=10) as client:
                client.sendmail("deals@shop.example", ["alice@example.com"], crlf(shop_newsletter(n)))

            def arrived() -> list[Path]:
                return [p for p in folder_files(maildir, JUNK) if p not in moved]

            [path] = wait_until_sync(arrived)
            moved.append(path)
        applied = len(process.events("training_applied"))
        rescued = [imap_move(path, maildir, "") for path in moved[:3]]  # out of Junk
        imap_move(moved[3], maildir, ".Trash")  # into Trash: nothing to learn
        wait_until_sync(lambda: len(process.events("training_applied")) >= applied + 3)

        def records(*args: str) -> list[dict]:
            done = daemon.spamctl("learned", "--user", "alice", "--json", *args)
            assert done.returncode == 0, done.stderr
            return done.json()["records"]

        [first] = records("--message-id", "<weekly-0@shop.example>")
        assert (first["what"], first["label"], first["moved"], first["kept"]) == (
            "learned",
            "ham",
            True,
            1,
        )  # its one sender: the From
        trash = wait_until_sync(lambda: records("--message-id", "<weekly-3@shop.example>"))
        assert trash[0]["what"] == "trash" and trash[0]["to_folder"] == ".Trash"
        probe = tmp_path / "probe.eml"
        probe.write_bytes(shop_newsletter(20))
        explained = daemon.spamctl("explain", "--user", "alice", "--json", probe)
        assert explained.returncode == 0, explained.stderr
        rows = {row["sender"]: row for row in explained.json()["senders"]}
        assert rows["from=deals@shop.example"]["way"] == "inbox_claimed"
        assert rows["from=deals@shop.example"]["resemblance"] > 0
        assert len(rows["from=deals@shop.example"]["moves"]) == 3
        text = daemon.spamctl("learned", "--user", "alice", probe)
        assert text.returncode == 1 and "no learning record" in text.stdout  # never moved

        process.signal(signal.SIGKILL)
        process.wait(30)
        process, daemon = start()
        # Replayed from the journal, found by the file (the journal keeps no Message-ID)
        [again] = records(str(rescued[0]))
        assert (again["what"], again["moved"], again["kept"], again["key"]) == ("learned", True, 1, first["key"])
        after = daemon.spamctl("explain", "--user", "alice", "--json", probe).json()["senders"]
        assert {row["sender"]: row.get("resemblance") for row in after} == {
            name: row.get("resemblance") for name, row in rows.items()
        }
    finally:
        process.kill()
