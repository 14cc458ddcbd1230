"""Where each user's mail from a sender ends up (spamd/people/senders.py): the rule, its bounds, its persistence.

The daemon's own path (real Maildirs, moves, two users who disagree) is in
tests/test_users_daemon.py; the measurement on real lists in scripts/accuracy/multi_user_stream.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig, StoreConfig, UsersConfig
from spamd.engine.engine import Engine
from spamd.learning.classifier import Analyzed
from spamd.mail.message import ParsedMessage, parse_message
from spamd.model.bayes import Label, Verdict, verdict_of
from spamd.model.bayes import ModelConfig as _ModelConfig
from spamd.people.senders import (
    CLAIMED_PUSH,
    FLOOR,
    PUSH,
    SenderReputation,
    Way,
    counted_senders,
    from_address,
    keys_of_senders,
    sender_names,
)
from tests.daemon_helpers import list_digest, make_message

MODEL = _ModelConfig()
LIST = 7  # a sender key, for the pure-state tests


def parsed(headers: str) -> ParsedMessage:
    return parse_message(f"{headers}\n\nbody\n".encode(), Config().parser)


def test_a_message_is_from_its_lists_and_its_from_address():
    message = parsed(
        'From: "The Shop" <News@Shop.Example>\nList-Id: Weekly offers <offers.shop.example>\nList-Id: second'
    )
    assert sender_names(message) == ["from=news@shop.example", "list-id=offers.shop.example", "list-id=second"]
    assert sender_names(parsed("From: nobody at all\nSubject: x")) == []
    assert len(keys_of_senders(sender_names(message))) == 3


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ('"The Shop" <News@Shop.Example>', "news@shop.example"),
        ("news@shop.example (The Shop)", "news@shop.example"),
        # An address in the display name or a comment is what the sender says, not who it is.
        ('"Proton Mail Alert notification@proton.me" <taoheed@gmail.example>', "taoheed@gmail.example"),
        ("support@bank.example <x@elsewhere.example>", "x@elsewhere.example"),
        ('"Shop <deals@shop.example>" <x@elsewhere.example>', "x@elsewhere.example"),
        ("x@elsewhere.example (deals@shop.example)", "x@elsewhere.example"),
        ("Shop <deals@shop.example> <x@elsewhere.example>", "x@elsewhere.example"),  # an encoded name, decoded
        ("x@elsewhere.example ((nested deals@shop.example) comment)", "x@elsewhere.example"),
        ("(deals@shop.example)", None),
        ('"a quote left open <deals@shop.example>', None),  # runs to the end, as a reader takes it
        # The first mailbox of a list, and of a group.
        ("first@one.example, Second <second@two.example>", "first@one.example"),
        ("Friends: a@one.example, b@two.example;", "a@one.example"),
        ("undisclosed-recipients:;", None),
        ("<>", None),
        # A quoted local part is the address's own, its domain the one that counts.
        ('"deals@shop.example"@elsewhere.example', "dealsshop.example@elsewhere.example"),
        ('<"Books@Books"@publisher.example>', "booksbooks@publisher.example"),
        ("Jo <@relay.example,@hop.example:jo@home.example>", "jo@home.example"),
        ("nobody at all", None),
    ],
)
def test_the_from_address_is_the_first_mailboxs_own(value: str, address: str | None) -> None:
    assert from_address(value) == address


def test_an_address_in_an_encoded_display_name_is_not_the_sender() -> None:
    message = parsed("From: =?utf-8?q?The_Shop_=3Cdeals@shop.example=3E?= <x@elsewhere.example>")
    assert "<deals@shop.example>" in message.header("from")  # the parser decoded the name
    assert sender_names(message) == ["from=x@elsewhere.example"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_any_from_and_list_id_give_at_most_four_bounded_senders(from_value, list_value):
    message = ParsedMessage(headers=[("from", from_value), ("list-id", list_value), ("list-id", list_value[::-1])])
    names = sender_names(message)
    assert all(len(name) <= 210 for name in names)
    keys = keys_of_senders(names)
    assert len(keys) <= 4 and all(0 <= k < 2**64 for k in keys)


def deliver(rep: SenderReputation, user: str, n: int, filed_spam: bool = False, sender: int = LIST) -> bytes:
    key = n.to_bytes(16, "big")
    rep.delivered(user, key, (sender,), filed_spam)
    return key


def test_three_moves_into_junk_file_the_users_next_copy_there_and_no_one_elses():
    rep = SenderReputation(1000, 1000)
    score = verdict_of(MODEL, -0.4)  # everyone's model: ham
    keys = [deliver(rep, "alice", n) for n in range(3)] + [deliver(rep, "bob", 10 + n) for n in range(3)]
    assert rep.adjust(score, "alice", (LIST,), MODEL) is score  # nothing moved yet: the shared score itself
    for key in keys[:2]:
        assert rep.moved(key, Label.SPAM, "alice")
    assert rep.adjust(score, "alice", (LIST,), MODEL) is score  # two moves are not yet three
    assert rep.moved(keys[2], Label.SPAM, "alice")
    assert not rep.moved(keys[2], Label.SPAM, "alice")  # already in Junk: no second move
    turned = rep.adjust(score, "alice", (LIST,), MODEL)
    assert turned.verdict is Verdict.SPAM and turned.log_odds == FLOOR
    assert rep.adjust(verdict_of(MODEL, 0.5), "alice", (LIST,), MODEL).log_odds == 0.5 + PUSH
    assert rep.adjust(score, "bob", (LIST,), MODEL) is score  # bob's copies stay his
    assert rep.adjust(score, "alice", (LIST + 1,), MODEL) is score  # another sender
    assert rep.summary() == {"alice": {"senders_to_junk": 1, "senders_to_inbox": 0}}


def test_one_message_filed_for_two_users_is_each_ones_own_copy_to_move():
    """LMTP delivers one message (one key) to several users: each one's move counts for their copy alone."""
    rep = SenderReputation(1000, 1000)
    keys = [deliver(rep, "alice", n) for n in range(3)]
    for key in keys:
        rep.delivered("bob", key, (LIST,), False)
    for key in keys:
        assert rep.moved(key, Label.SPAM, "alice")
        assert not rep.moved(key, Label.HAM, "bob")  # bob's copy lies in his inbox already
    assert rep.direction("alice", (LIST,)) == Way.JUNK and rep.direction("bob", (LIST,)) == Way.NONE
    again = SenderReputation(1000, 1000)
    again.restore(rep.export())
    assert not again.moved(keys[0], Label.SPAM, "alice") and again.moved(keys[0], Label.SPAM, "bob")


def test_a_list_that_relays_the_odd_spam_is_not_turned():
    rep = SenderReputation(1000, 1000)
    keys = [deliver(rep, "alice", n) for n in range(20)]
    for key in keys[:4]:  # four relayed spams moved into Junk, sixteen copies read in the inbox
        rep.moved(key, Label.SPAM, "alice")
    assert rep.direction("alice", (LIST,)) == 0


def test_mail_kept_out_of_junk_wins_over_mail_moved_into_it():
    rep = SenderReputation(1000, 1000)
    for n in range(3):  # the list, moved out of Junk three times
        rep.moved(deliver(rep, "alice", n, filed_spam=True), Label.HAM, "alice")
    for n in range(3):  # the poster's address, moved into Junk three times
        rep.moved(deliver(rep, "alice", 100 + n, sender=LIST + 1), Label.SPAM, "alice")
    assert rep.direction("alice", (LIST + 1,)) == 1
    assert rep.direction("alice", (LIST + 1, LIST)) == -1
    # Filed her way whatever the content says, when the list is authenticated (bit 0: the first
    # sender): at least FLOOR past the middle, or PUSH further.
    assert rep.adjust(verdict_of(MODEL, 2.0), "alice", (LIST, LIST + 1), MODEL, authenticated=0b01).log_odds == -FLOOR
    assert rep.adjust(verdict_of(MODEL, -1.0), "alice", (LIST,), MODEL, authenticated=1).log_odds == -1.0 - PUSH
    # Not authenticated, the list is a claim: the move into Junk of the poster outweighs it.
    assert rep.direction("alice", (LIST, LIST + 1), 0) is Way.JUNK
    assert rep.adjust(verdict_of(MODEL, 2.0), "alice", (LIST, LIST + 1), MODEL).log_odds == 2.0 + PUSH


def test_an_unauthenticated_rescued_sender_gets_only_the_bounded_push():
    """Anyone can write a From: mail content files as spam by more than CLAIMED_PUSH stays spam."""
    rep = SenderReputation(1000, 1000)
    for n in range(3):
        rep.moved(deliver(rep, "alice", n, filed_spam=True), Label.HAM, "alice")
    assert rep.direction("alice", (LIST,), 1) is Way.INBOX
    assert rep.direction("alice", (LIST,), 0) is Way.INBOX_CLAIMED
    spam_cut = 0.315
    for content in (spam_cut + CLAIMED_PUSH + 0.01, 1.21, 2.23, 9.0):
        claimed = rep.adjust(verdict_of(MODEL, content), "alice", (LIST,), MODEL, authenticated=0)
        assert claimed.log_odds == content - CLAIMED_PUSH and claimed.verdict is Verdict.SPAM
        assert rep.adjust(verdict_of(MODEL, content), "alice", (LIST,), MODEL, authenticated=1).log_odds == -FLOOR
    borderline = rep.adjust(verdict_of(MODEL, 0.4), "alice", (LIST,), MODEL)
    assert borderline.log_odds == 0.4 - CLAIMED_PUSH and borderline.verdict is not Verdict.SPAM


def test_a_training_of_mail_spamd_never_filed_counts_as_a_move_with_its_user_and_senders():
    rep = SenderReputation(1000, 1000)
    for n in range(3):
        assert rep.moved(n.to_bytes(16, "big"), Label.SPAM, "alice", (LIST,))
    assert rep.direction("alice", (LIST,)) == 1
    assert not rep.moved(b"x" * 16, Label.SPAM)  # no user or senders: nothing to count


def test_off_bounded_and_round_trips():
    off = SenderReputation(1000, 1000, moves=0)
    for n in range(5):
        off.moved(deliver(off, "alice", n), Label.SPAM, "alice")
    assert len(off) == 0 and off.direction("alice", (LIST,)) == 0
    rep = SenderReputation(50, 40)
    for n in range(500):
        rep.moved(deliver(rep, f"u{n % 7}", n, sender=n % 60), Label.SPAM if n % 3 else Label.HAM, f"u{n % 7}")
    assert len(rep) == 40 and len(rep._placed) == 50
    copy = SenderReputation(50, 40)
    copy.restore(rep.export())
    assert copy.export() == rep.export()
    for bad in ({"placed": [], "stats": [["u", 1, 1, 2, 3]]}, {"placed": [], "stats": [["u", 1, 1, 2, 3, -1]]}):
        try:
            SenderReputation(50, 40).restore(bad)
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"restored {bad}")


# ---------------------------------------------------------------- through the Engine


def engine_config(tmp_path: Path, **users: Any) -> Config:
    return Config(
        data_dir=tmp_path, model=ModelConfig(hash_bits=14), store=StoreConfig(snapshot_interval_s=3600.0),
        users=UsersConfig(**users),
    )  # fmt: skip


def trained_engine(config: Config) -> Engine:
    engine = Engine.open(config, durable=False)
    for n in range(6):
        engine.train(make_message(Label.SPAM, n), Label.SPAM, "spamctl")
        engine.train(make_message(Label.HAM, n), Label.HAM, "spamctl")
    for n in range(6):  # everyone else reads the list
        engine.train(list_digest(n), Label.HAM, "spamctl")
    return engine


def turned_by_a_full_pass(rep: SenderReputation) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for user, sender in rep._stats:
        way = rep.direction(user, (sender,))
        if way:
            row = out.setdefault(user, {"senders_to_junk": 0, "senders_to_inbox": 0})
            row["senders_to_junk" if way > 0 else "senders_to_inbox"] += 1
    return out


def test_the_per_user_summary_kept_as_counts_change_is_a_full_pass_over_them_past_the_bound_and_restore():
    """`spamctl users`' per-user counts are kept as pairs turn, turn back and are evicted; a restored copy
    and a changed rule (a reload) count them afresh."""
    rep = SenderReputation(300, 60)
    n = 0
    for rounds in range(4):
        for user in ("alice", "bob", "carol"):
            for sender in range(30):
                for _ in range(3):
                    n += 1
                    key = deliver(rep, user, n, filed_spam=(sender + rounds) % 3 == 0, sender=sender)
                    rep.moved(key, Label.HAM if (sender + rounds) % 3 == 0 else Label.SPAM, user)
            assert rep.summary() == turned_by_a_full_pass(rep)
    assert len(rep) == 60 and rep.summary() and sum(r["senders_to_junk"] for r in rep.summary().values()) > 0
    copy = SenderReputation(300, 60)
    copy.restore(rep.export())
    assert copy.summary() == rep.summary()
    rep.moves = 4
    assert rep.summary() == turned_by_a_full_pass(rep) != copy.summary()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abc"),
            st.integers(0, 5),
            st.lists(st.integers(0, 6) | st.integers(65_530, 65_540), min_size=4, max_size=4),
        )
    )
)
def test_a_restored_state_counts_each_users_turned_senders_as_a_full_pass_does(rows):
    """The per-user counts a restore derives from the snapshot's columns (numpy) agree with `way_of` a pair;
    the counts come back the same whether shared tuples (16 bits) or a tuple a pair (past them) hold them."""
    rep = SenderReputation(100, 1000)
    rep.restore({"placed": [], "stats": [[user, sender, *counts] for user, sender, counts in rows]})
    copy = SenderReputation(100, 1000)
    copy.restore(rep.export())
    assert copy.summary() == rep.summary() == turned_by_a_full_pass(rep)
    assert copy.export() == rep.export()


def deliver_copy(engine: Engine, n: int, user: str, verdict: Verdict | None = None) -> Analyzed:
    """Score the user's copy n of the list and file it (by its verdict, or by `verdict`), as a way in does."""
    classified = engine.classify(list_digest(n, f"{user}@example.com"), user)
    filed = classified.score.verdict if verdict is None else verdict
    engine.remember_verdict(classified.analyzed.key, filed, "smtp", user, classified.analyzed.senders)
    return classified.analyzed


def test_the_engine_turns_alices_list_after_her_moves_and_keeps_it_across_a_snapshot_and_a_crash(tmp_path):
    config = engine_config(tmp_path)
    engine = trained_engine(config)
    probe = list_digest(99, "alice@example.com")
    assert engine.classify(probe, "alice").score.verdict is not Verdict.SPAM
    for n in range(100, 103):
        analyzed = deliver_copy(engine, n, "alice")
        assert analyzed.senders
        engine.train(list_digest(n, "alice@example.com"), Label.SPAM, "maildir", user_name="alice")
    assert engine.classify(probe, "alice").score.verdict is Verdict.SPAM
    assert engine.classify(probe, "bob").score == engine.classify(probe).score  # bob's is everyone's
    for n in range(200, 203):  # bob's copies, filed into Junk: the snapshot holds where they lie
        deliver_copy(engine, n, "bob", Verdict.SPAM)
    engine.snapshot()
    for n in range(200, 203):  # he moves them out; journaled, in no snapshot
        engine.train(list_digest(n, "bob@example.com"), Label.HAM, "maildir", user_name="bob")
    engine.close()  # no snapshot after bob's moves: as after SIGKILL
    engine = Engine.open(config, durable=False)
    try:
        assert engine.classify(probe, "alice").score.verdict is Verdict.SPAM
        assert (
            engine.senders.direction("bob", engine.classify(probe).analyzed.senders) == -1
        )  # replayed from the journal
    finally:
        engine.close()


def test_autolearn_and_settled_mail_are_no_move_and_score_per_user_off_scores_everyone_alike(tmp_path):
    config = engine_config(tmp_path)
    engine = trained_engine(config)
    for n in range(100, 106):
        deliver_copy(engine, n, "alice")
        engine.train(
            list_digest(n, "alice@example.com"), Label.SPAM, ("autolearn", "settled")[n % 2], user_name="alice"
        )
    probe = list_digest(99, "alice@example.com")
    assert engine.classify(probe, "alice").score == engine.classify(probe).score
    for n in range(110, 113):  # carol's own trainings (spamctl, web, a TELL) are hers
        engine.train(list_digest(n, "carol@example.com"), Label.SPAM, "spamctl", user_name="carol")
    assert engine.classify(probe, "carol").score.verdict is Verdict.SPAM
    engine.reconfigure(dataclasses.replace(config, users=UsersConfig(score_per_user=False)))
    assert engine.classify(probe, "carol").score == engine.classify(probe).score
    engine.close()


def test_moves_of_mail_spamd_never_filed_are_replayed_from_the_journal_after_a_crash(tmp_path):
    """spamctl train --user, a spamc TELL: the record keeps the message's senders, so a kill loses no move."""
    config = engine_config(tmp_path)
    engine = trained_engine(config)
    engine.snapshot()
    for n in range(110, 113):
        engine.train(list_digest(n, "alice@example.com"), Label.SPAM, "spamctl", user_name="alice")
    turned = engine.senders.summary()
    assert turned["alice"]["senders_to_junk"] == 2  # its List-Id and its From address
    engine.close()  # no snapshot: as after SIGKILL
    engine = Engine.open(config, durable=False)
    try:
        assert engine.senders.summary() == turned
        assert engine.classify(list_digest(99, "alice@example.com"), "alice").score.verdict is Verdict.SPAM
    finally:
        engine.close()


def test_forgeries_filed_in_junk_do_not_wear_down_a_rescued_senders_standing():
    """Mail filed into Junk counts only for the senders it is authenticated as: anyone can send it."""
    assert counted_senders((LIST, LIST + 1), 0b10, filed_spam=True) == (LIST + 1,)
    assert counted_senders((LIST, LIST + 1), 0, filed_spam=False) == (LIST, LIST + 1)
    rep = SenderReputation(1000, 1000)
    for n in range(3):
        rep.moved(deliver(rep, "alice", n, filed_spam=True), Label.HAM, "alice")
    for n in range(10, 40):  # thirty forgeries, all filed into Junk by their content
        rep.delivered("alice", bytes([n]), counted_senders((LIST,), 0, filed_spam=True), True)
    assert rep.direction("alice", (LIST,), 1) is Way.INBOX


def test_the_same_message_delivered_to_two_people_counts_each_ones_move_for_them_alone():
    """One list copy in alice's Maildir and one in bob's, the same bytes: bob's rescue is his, not alice's."""
    rep = SenderReputation(1000, 1000)
    for n in range(3):
        key = n.to_bytes(16, "big")
        rep.delivered("alice", key, (LIST,), False)
        rep.delivered("bob", key, (LIST,), True)
        assert rep.moved(key, Label.SPAM, "alice")  # she left the list
        assert rep.moved(key, Label.HAM, "bob")  # he reads it
        assert not rep.moved(key, Label.HAM, "bob")  # his copy is out of Junk already
    assert rep.direction("alice", (LIST,)) is Way.JUNK
    assert rep.direction("bob", (LIST,)) is Way.INBOX
    assert not rep.moved(b"x" * 16, Label.HAM)  # no user: nobody's move
    copy = SenderReputation(1000, 1000)
    copy.restore(rep.export())
    assert copy.direction("alice", (LIST,)) is Way.JUNK and copy.direction("bob", (LIST,)) is Way.INBOX
