"""Where each person's mail from a list or sender ends up: a list one user left goes to their Junk.

People disagree about whole kinds of mail, and a kind is a sender: the list Alice
left (she moves every copy into Junk) is the list Bob reads. Token evidence cannot
say this: a list's messages are mostly its topic, which everyone else's ham
teaches is ham, and the few tokens that name the list weigh one token each in a
score that is a mean over some 200 (measurements in docs/users.md). So spamd keeps,
per user and sender (the List-Id, and the From address), where that user's mail
from it ended up: delivered, filed into Junk by spamd, moved into Junk by the
person, moved out of it. Once the person moved `sender_moves` of a sender's
messages one way, and that way is where at least `sender_share` of the sender's
mail to them now lies, their next message from it is filed that way: the score
moves by PUSH and at least to FLOOR past the middle. A list that relays the odd
spam does not turn: its copies lie mostly in the inbox, whatever the person moved.

Pure state with no I/O, like spamd.people.accuracy.LiveAccuracy: the Engine records the
deliveries and moves, and persists the state in snapshots (deliveries since the
last snapshot are lost in a crash; moves replayed from the journal are counted
again against the deliveries the snapshot remembers).
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any, Protocol

import numpy as np
import xxhash

from spamd.mail.auth.verify import AuthResult
from spamd.mail.message import ParsedMessage
from spamd.model.bayes import Features, Label, Score, verdict_of
from spamd.people.kept import KeptProfiles, KeptSamples, kept_sample, kept_score
from spamd.people.learned import LearningLog, LearningRecords

# How far a sender's verdict moves a message's score (mean log-odds; the spam cut is
# 0.315, spamd.model.bayes.PROBABILITY_SLOPE), and how far past the middle it lands at
# least. Measured online (an in-process replay of scripts/accuracy/multi_user_stream.py) on
# nine disputed lists (spamassassin: freshrpms, ilug, razor-users, spamassassin-talk,
# exmh-workers; trec07p-dev: r-help, samba-cvs, perl6-internals, beginners.perl) and
# the agree streams (spamassassin seeds 1-6, trec07p-dev 1-3), errors-only feedback;
# alice's copies of the disputed list filed her way after 5 corrections, and the agree
# streams' per-user (1-ROCA)% over the shared model's alone (geometric mean):
#   per-token layer alone (the earlier rule):           16-97%, mean 67%;  agree 1.10 / 1.08x
#   push 0.6, 2 moves, share 0.5:                       82-100%, mean 93%; agree 1.18 / 1.11x
#   push 1.0, 3 moves, share 0.8:                       96-100%;           agree 1.15 / 1.11x
#   push 0.6 and at least to 0.45, 3 moves, share 0.8,
#     per-token layer off (kept):                       100% on all nine;  agree 1.00 / 1.00x
#     the same, 2 moves:                                100%;              agree 1.06 / 1.00x
#     the same, per-token layer on:                     100%;              agree 1.14 / 1.11x
# Under full feedback the kept rule: 100% on all nine, agree 1.02 / 1.00x.
PUSH = 0.6
FLOOR = 0.45
# A sender kept out of Junk whose message is not authenticated (spamd/mail/auth/) may be
# anyone writing that From or List-Id: its score moves at most this far towards ham and
# no floor pulls it further. Below 0.63 (the spam cut 0.315 to the ham cut -0.315) mail that
# content alone files as spam becomes Unsure at most, never ham. scripts/attacks/claimed_push.py
# (docs/users.md), bound 0 / 0.3 / 0.6 / 1.0 / the full rule: the keeper's copies of the nine
# disputed lists unsigned, errors feedback 100% at every bound; full feedback ilug 93.5 / 95.6
# / 100 / 100 / 100%, the other eight 100%; the forged-sender attack (3 rescues, then 300
# forged spam), forgeries content files as spam let out of Junk, spamassassin 0 / 13.0 / 33.5
# / 64.3 / 98.1%, trec07p-dev 0 / 4.4 / 13.5 / 31.1 / 99.0% (ham first at 1.0). Kept at 0.6:
# the smallest that kept every list 100%, with no forgery filed as ham.
CLAIMED_PUSH = 0.6


class Way(IntEnum):
    """Where the senders' rule files a user's message: NONE is no say; INBOX_CLAIMED is a rescued
    sender whose message is not authenticated (the bounded push)."""

    NONE = 0
    JUNK = 1
    INBOX = -1
    INBOX_CLAIMED = -2


_ADDRESS = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
# The From value is cut at these before an address is matched in whole pieces: a search for
# the address in "From: aaa...a" restarts at every character of the run (quadratic: 5.6 s for
# a header at the 512 KiB message cap; split and fullmatch: linear).
_ADDRESS_BREAKS = re.compile(r"[\s<>,;:\"'()\[\]]+")
# What a From says beside its address (RFC 5322 section 3.4): a quoted display name, a comment,
# and the angle brackets around the address when there is a display name. A quoted string
# followed by "@" is the address's local part, not a name. A quote left open runs to the end,
# as a reader takes it, and nothing in one is given back: "\"\"\"..." with every further quote
# escaped restarted a scan to the end at each of them (84 ms for 2,000 characters; now 0.02 ms).
_QUOTED = re.compile(r'"([^"\\]*+(?:\\.[^"\\]*+)*+)(?:"|\\?\Z)(\s*@)?')
_COMMENT = re.compile(r"\([^()]*\)")
_ANGLE_ADDRESS = re.compile(r"<([^<>]*)>")
_LIST_ID = re.compile(r"<([^<>]+)>")


# Cached: each message's From is read twice (its senders, and the domain DMARC checks), and senders
# repeat. A value is at most 4,096 characters (the parser's cap): 1,024 of them at most 16 MB.
@functools.lru_cache(maxsize=1024)
def from_address(value: str) -> str | None:
    """The address of a From value's first mailbox (its first 2,000 characters), lower-cased.

    The address, not what the display name or a comment says: `"support@bank.example"
    <x@elsewhere.example>` is from elsewhere.example, the domain DMARC checks (RFC 7489
    section 3.1) and the one a mail client shows beside the name. In the first mailbox of
    the list that has an address: its last angle-bracketed address, else its first whole
    address outside quoted names and comments. A comma that a decoded display name brings
    still splits the list ("=?utf-8?q?a@b.example,?= <c@d.example>" is from b.example), as
    a forged From is: the sender is then one DMARC does not pass.
    """
    text = value[:2000].lower()
    if '"' in text:
        text = _QUOTED.sub(_without_quoted_name, text)
    for _ in range(3):  # comments nest: each pass takes away the innermost
        if "(" not in text:
            break
        text = _COMMENT.sub(" ", text)
    for mailbox in text.split(","):
        # The last <...>: the parser decodes encoded words, so a display name may bring its own
        # ("=?utf-8?q?Shop_<deals@shop.example>?= <x@elsewhere.example>").
        # Inside <...>, past an obsolete route "<@a,@b:x@y>" (whose commas split it).
        bracketed = _ANGLE_ADDRESS.findall(mailbox)
        address = _first_address(bracketed[-1].rpartition(":")[2] if bracketed else mailbox)
        if address is not None:
            return address
    return None


def _without_quoted_name(quoted: re.Match[str]) -> str:
    """A quoted display name as a space; a quoted local part ("a b"@example.com) as the characters an
    address piece may hold, still before its "@"."""
    if quoted.group(2) is None:
        return " "
    return (re.sub(r"[^\w.+\-]", "", quoted.group(1)) or "quoted") + "@"


def _first_address(text: str) -> str | None:
    for piece in _ADDRESS_BREAKS.split(text):
        if "@" in piece and _ADDRESS.fullmatch(piece):
            return piece
    return None


def sender_names(message: ParsedMessage) -> list[str]:
    """The senders a message is from: each List-Id (the part in <>), and the From address, lower-cased."""
    names = []
    for name, value in message.headers:
        if name == "list-id":
            found = _LIST_ID.search(value[:2000])
            names.append("list-id=" + (found.group(1) if found else value).strip().lower()[:200])
        elif name == "from":
            address = from_address(value)
            if address is not None:
                names.append("from=" + address[:200])
    return names


def sender_key(name: str) -> int:
    return xxhash.xxh3_64_intdigest(name.encode("utf-8", "surrogatepass"))


def keys_of_senders(names: list[str]) -> tuple[int, ...]:
    """A message's `sender_names` hashed to 64 bits (at most 4: the first From and List-Ids it carries)."""
    return tuple(dict.fromkeys(sender_key(n) for n in names))[:4]


def authenticated_as(name: str, auth: AuthResult) -> str:
    """How a sender name is authenticated by `auth` ("dmarc", "dkim:D", "spf:D", "arc:S"), or "" if it is not."""
    kind, _, value = name.partition("=")
    if kind == "from":
        return auth.from_authenticated() if auth.from_domain == value.rpartition("@")[2] else ""
    if kind == "list-id":
        return auth.list_authenticated(value)
    return ""


def authenticated_senders(names: list[str], keys: tuple[int, ...], auth: AuthResult) -> int:
    """A bit per key of `keys` (`keys_of_senders(names)`, `names` the message's `sender_names`): set where
    `auth` authenticates that sender."""
    trusted = {sender_key(n) for n in names if authenticated_as(n, auth)}
    return sum(1 << i for i, key in enumerate(keys) if key in trusted)


def counted_senders(senders: tuple[int, ...], authenticated: int, filed_spam: bool) -> tuple[int, ...]:
    """The senders a delivery counts for: mail filed into Junk counts only for the senders it is
    authenticated as, so forgeries that content sends to Junk do not wear down a rescued sender's
    share of mail in the inbox (anyone can send them, as many as they like)."""
    if not filed_spam:
        return senders
    return tuple(sender for index, sender in enumerate(senders) if authenticated >> index & 1)


def way_of(
    counts: Iterable[tuple[int, int, int, int] | None], moves: int, share: float, authenticated: int | None = None
) -> Way:
    """The rule over a message's senders' counts for one user (delivered, filed into Junk, moved in,
    moved out; None: never heard of). `authenticated`: a bit per sender whose message is authenticated
    (None: the sender's standing, as if authenticated). An authenticated sender kept out of Junk wins;
    a move into Junk outweighs an unauthenticated claim to one kept out."""
    found = Way.NONE
    for index, each in enumerate(counts):
        if each is None or not each[0] or not moves:
            continue
        delivered, filed, moved_in, moved_out = each
        in_junk = min(max(filed - moved_out + moved_in, 0), delivered)
        if moved_out >= moves and delivered - in_junk >= share * delivered:
            if authenticated is None or authenticated >> index & 1:
                return Way.INBOX  # ham in Junk is the costly error: a sender kept out of it wins
            if found is Way.NONE:
                found = Way.INBOX_CLAIMED
        if moved_in >= moves and in_junk >= share * delivered:
            found = Way.JUNK
    return found


def moved_by_counts(
    score: Score,
    counts: Iterable[tuple[int, int, int, int] | None],
    moves: int,
    share: float,
    authenticated: int,
    config: Any,
    similar: Callable[[], float] | None = None,
) -> Score:
    """`score` moved (`moved_score`) the way `way_of` the user's counts of the message's senders says."""
    return moved_score(score, way_of(counts, moves, share, authenticated), config, similar)


def moved_score(score: Score, way: int, config: Any, similar: Callable[[], float] | None = None) -> Score:
    """`score` moved by PUSH to the side `way` says, and at least FLOOR past the middle; a claimed
    sender's towards ham by `kept_score` of its resemblance to what the person kept from it
    (`similar()`, spamd/people/kept.py), or by CLAIMED_PUSH when no profiles are kept (NONE: as it is)."""
    if way == Way.NONE:
        return score
    if way == Way.JUNK:
        log_odds = max(score.log_odds + PUSH, FLOOR)
    elif way == Way.INBOX:
        log_odds = min(score.log_odds - PUSH, -FLOOR)
    elif similar is not None:
        return kept_score(score, similar(), config)
    else:
        log_odds = score.log_odds - CLAIMED_PUSH
    return verdict_of(config, log_odds)


class SenderCounts(Protocol):
    """What the Engine and the Classifier use: SenderReputation here, RedisSenders with the model in Redis."""

    moves: int
    share: float
    changes: int

    def delivered(self, user: str, key: bytes, senders: tuple[int, ...], filed_spam: bool) -> None: ...
    def moved(self, key: bytes, label: Label, user: str | None = None, senders: tuple[int, ...] = ()) -> bool: ...
    def direction(self, user: str, senders: tuple[int, ...], authenticated: int | None = None) -> Way: ...
    @property
    def kept(self) -> KeptProfiles: ...  # what each person kept from each sender (spamd/people/kept.py)
    @property
    def learned(self) -> LearningLog: ...  # what spamd learned from each move (spamd/people/learned.py)

    def adjust(
        self,
        score: Score,
        user: str | None,
        senders: tuple[int, ...],
        config: Any,
        authenticated: int = 0,
        features: Features | None = None,
    ) -> Score: ...
    def similar(self, user: str, senders: tuple[int, ...], features: Features | None) -> Callable[[], float] | None: ...
    def score_and_counts(
        self, model: Any, features: Features, user: str, senders: tuple[int, ...]
    ) -> tuple[Score, list[tuple[int, int, int, int] | None]]: ...
    def summary(self) -> dict[str, dict[str, int]]: ...
    def pairs(self) -> int | None: ...
    def export(self) -> dict[str, Any]: ...
    def restore(self, data: dict[str, Any]) -> None: ...


class SenderReputation:
    """Per user and sender, where the mail ended up; per delivered message, where it lies now (bounded)."""

    def __init__(self, max_messages: int, max_senders: int, moves: int = 3, share: float = 0.8):
        self.max_messages = max_messages
        self.max_senders = max_senders
        self.moves = moves  # 0: off
        self.share = share
        # (user, key) -> (user, in Junk, senders): per user, as in Redis (each user's `filed` set). Keyed by the
        # message alone, the same message delivered to two people (one list's copy in each Maildir, an archive
        # trained for both) counted one person's move for the other: with each list copy delivered to both,
        # the keeper first, the keeper's copies went her way 0% (600 of 600 rescued for nothing) and the
        # leaver's 49.7% (modern-dev, errors feedback; docs/users.md). Now 100% and 100%.
        self._placed: OrderedDict[tuple[str, bytes], tuple[str, bool, tuple[int, ...]]] = OrderedDict()
        # (user, sender) -> the four counts, most recent last. Tuples, replaced on each change:
        # the garbage collector stops tracking a tuple of ints, not a list (200,000 pairs
        # as lists: 28-90 us a delivery in collections; as tuples: see users.md).
        # OrderedDict: the least recent goes in O(1) (a dict rebuilt past its bound cost 20 us a
        # delivery at 200,000 pairs).
        self._stats: OrderedDict[tuple[str, int], tuple[int, int, int, int]] = OrderedDict()
        self.changes = 0
        # Per user, the senders their moves turned [to Junk, to the inbox], kept as the counts change,
        # for `spamctl users`: a pass over every pair at 100,000 users x 20 senders took seconds
        # (scripts/scale/users_embedded_scale.py, docs/users.md). Counted for `_turned_by` (moves, share).
        self._turned: dict[str, list[int]] = {}
        self._turned_by = (moves, share)
        # What each person kept from each sender (spamd/people/kept.py), and what spamd learned from each
        # person's moves (spamd/people/learned.py): in the snapshot beside the counts.
        self.kept = KeptSamples()
        self.learned = LearningRecords()

    def __len__(self) -> int:
        return len(self._stats)

    def delivered(self, user: str, key: bytes, senders: Iterable[int], filed_spam: bool) -> None:
        """spamd filed the message `key` for `user` (into Junk if `filed_spam`)."""
        senders = tuple(senders)
        if not senders or not self.moves:
            return
        self._placed[(user, key)] = (user, filed_spam, senders)
        self._placed.move_to_end((user, key))
        if len(self._placed) > self.max_messages:
            self._placed.popitem(last=False)
        for sender in senders:
            self._add(user, sender, 1, int(filed_spam), 0, 0)
        self.changes += 1

    def moved(self, key: bytes, label: Label, user: str | None = None, senders: Iterable[int] = ()) -> bool:
        """The person says `key` is `label`: a move into or out of Junk if it lay on the other side.

        A message spamd never filed for them (trained with spamctl, or moved after
        arriving some other way) counts as delivered to the other side and moved, given
        its `user` and `senders`: the person said where that sender's mail goes.
        """
        if user is None:
            return False  # whose move it is decides whose counts it changes
        placed = self._placed.get((user, key))
        to_junk = label == Label.SPAM
        if placed is None:
            if not tuple(senders):
                return False
            self.delivered(user, key, senders, not to_junk)
            placed = self._placed.get((user, key))
            if placed is None:  # off (sender_moves = 0)
                return False
        user, in_junk, senders = placed
        if to_junk == in_junk:
            return False
        self._placed[(user, key)] = (user, to_junk, senders)
        for sender in senders:
            self._add(user, sender, 0, 0, int(to_junk), int(not to_junk))
        self.changes += 1
        return True

    def _add(self, user: str, sender: int, delivered: int, filed: int, moved_in: int, moved_out: int) -> None:
        before = self._stats.get((user, sender)) or (0, 0, 0, 0)
        d, f, i, o = before
        after = (d + delivered, f + filed, i + moved_in, o + moved_out)
        self._stats[(user, sender)] = after
        self._stats.move_to_end((user, sender))
        self._count_turned(user, before, -1)
        self._count_turned(user, after, 1)
        if len(self._stats) > self.max_senders:  # the senders heard of least recently go
            (gone_user, _), counts = self._stats.popitem(last=False)
            self._count_turned(gone_user, counts, -1)

    def _count_turned(self, user: str, counts: tuple[int, int, int, int], sign: int) -> None:
        """Add `sign` to the user's senders turned the way `counts` says (none: nothing)."""
        if (counts[2] < self.moves and counts[3] < self.moves) or self._turned_by != (self.moves, self.share):
            return  # no way without `moves` moves; a changed rule recounts in `summary`
        way = way_of((counts,), self.moves, self.share)
        if way:
            row = self._turned.setdefault(user, [0, 0])
            row[0 if way > 0 else 1] += sign
            if not any(row):
                del self._turned[user]

    def direction(self, user: str, senders: Iterable[int], authenticated: int | None = None) -> Way:
        """Where the user's mail from these senders goes (`way_of`)."""
        return way_of([self._stats.get((user, sender)) for sender in senders], self.moves, self.share, authenticated)

    def adjust(
        self,
        score: Score,
        user: str | None,
        senders: tuple[int, ...],
        config: Any,
        authenticated: int = 0,
        features: Features | None = None,
    ) -> Score:
        """`score` for `user`'s copy, moved to the side the user files this sender's mail on, if any;
        `authenticated`: a bit per sender whose message is authenticated; `features`: the message's, for its
        resemblance to what the user kept from a claimed sender (None: CLAIMED_PUSH)."""
        if user is None or not senders or not self.moves:
            return score
        return moved_score(
            score, self.direction(user, senders, authenticated), config, self.similar(user, senders, features)
        )

    def similar(self, user: str, senders: tuple[int, ...], features: Features | None) -> Callable[[], float] | None:
        """The resemblance of a message (`features`) to what `user` kept from `senders`, asked only when needed."""
        if features is None:
            return None
        return lambda: self.kept.resemblance(user, senders, kept_sample(features))

    def score_and_counts(
        self, model: Any, features: Features, user: str, senders: tuple[int, ...]
    ) -> tuple[Score, list[tuple[int, int, int, int] | None]]:
        """`model`'s score of `features` and the user's counts of `senders` (`way_of`'s input)."""
        return model.score(features), [self._stats.get((user, sender)) for sender in senders]

    def pairs(self) -> int | None:
        """(user, sender) pairs counted (for /metrics)."""
        return len(self._stats)

    def summary(self) -> dict[str, dict[str, int]]:
        """Per user: how many senders their moves turned each way (for `spamctl users`)."""
        if self._turned_by != (self.moves, self.share):  # the rule changed (a reload): count afresh
            self._recount()
        return {
            user: {"senders_to_junk": junk, "senders_to_inbox": inbox} for user, (junk, inbox) in self._turned.items()
        }

    def _recount(self) -> None:
        self._turned, self._turned_by = {}, (self.moves, self.share)
        if self.moves:
            for (user, _), counts in self._stats.items():
                self._count_turned(user, counts, 1)

    # ------------------------------------------------------------ persistence

    def export(self) -> dict[str, Any]:
        """The state for a snapshot: the pairs in columns (2,000,000 pairs as rows of six took 28 s to
        restore beside 2,000,000 delivered messages; see `restore`)."""
        names: dict[str, int] = {}
        index = [names.setdefault(user, len(names)) for user, _ in self._stats]
        senders = np.fromiter((sender for _, sender in self._stats), dtype=np.uint64, count=len(self._stats))
        counts = np.array(list(self._stats.values()), dtype=np.uint64).reshape(-1, 4)
        return {
            "placed": [
                [key, user, in_junk, list(senders)] for (_, key), (user, in_junk, senders) in self._placed.items()
            ],
            "pairs": {
                "users": list(names),
                "user": np.array(index, dtype=np.uint32).tobytes(),
                "sender": senders.tobytes(),
                "counts": np.minimum(counts, COUNT_MAX).astype(np.uint32).tobytes(),
            },
            "kept": self.kept.export(),
            "learned": self.learned.export(),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Take the state an `export` made (or an older one, the pairs in rows under "stats"); an empty dict
        is a fresh start. ValueError/TypeError if malformed."""
        if not data:
            return
        # One str per user name, not one per pair and message (msgpack makes each anew).
        names: dict[str, str] = {}
        placed: OrderedDict[tuple[str, bytes], tuple[str, bool, tuple[int, ...]]] = OrderedDict()
        for key, user, in_junk, senders in data["placed"][-self.max_messages :]:
            name = names.setdefault(user, str(user))
            placed[(name, bytes(key))] = (name, bool(in_junk), tuple(int(s) for s in senders))
        stats: OrderedDict[tuple[str, int], tuple[int, int, int, int]]
        turned = None
        if "pairs" in data:
            stats, turned = _pairs_from_columns(data["pairs"], names, self.moves, self.share)
        else:
            stats = OrderedDict()
            for user, sender, *counts in data["stats"]:
                if len(counts) != 4 or min(int(c) for c in counts) < 0:
                    raise ValueError("sender counts: four counts of at least 0 expected")
                d, f, i, o = (int(c) for c in counts)
                stats[(names.setdefault(user, str(user)), int(sender))] = (d, f, i, o)
        self._placed, self._stats = placed, stats
        self.kept.restore(data.get("kept") or {})
        self.learned.restore(data.get("learned") or {})
        if turned is None or len(stats) > self.max_senders:
            while len(stats) > self.max_senders:
                stats.popitem(last=False)
            self._recount()
        else:
            self._turned, self._turned_by = turned, (self.moves, self.share)


COUNT_MAX = 2**32 - 1  # a count kept in a snapshot at most (4 bytes)


def _pairs_from_columns(
    columns: dict[str, Any], names: dict[str, str], moves: int, share: float
) -> tuple[OrderedDict[tuple[str, int], tuple[int, int, int, int]], dict[str, list[int]] | None]:
    """`export`'s columns back into pairs, least recent first, and the per-user counts of turned senders
    (`way_of` over arrays; None if a pair repeats). Built by zip over numpy's lists and counted by numpy,
    no Python call a pair: with a `way_of` call a pair, 100,000 users x 20 senders started in 8.6 s
    (scripts/scale/users_embedded_scale.py; now: docs/users.md)."""
    users = [names.setdefault(name, str(name)) for name in columns["users"]]
    index = np.frombuffer(columns["user"], dtype=np.uint32)
    senders = np.frombuffer(columns["sender"], dtype=np.uint64)
    counts = np.frombuffer(columns["counts"], dtype=np.uint32).reshape(-1, 4)
    if not len(index) == len(senders) == len(counts) or (len(index) and int(index.max()) >= len(users)):
        raise ValueError("sender pairs: columns of one length and user indexes within the names expected")
    owners = list(map(users.__getitem__, index.tolist()))
    d, f, i, o = (counts[:, k].astype(np.int64) for k in range(4))
    stats = OrderedDict(zip(zip(owners, senders.tolist(), strict=True), _count_tuples(counts), strict=True))
    if len(stats) != len(index):
        return stats, None
    # way_of for one sender, authenticated None: out of Junk wins.
    in_junk = np.minimum(np.maximum(f - o + i, 0), d)
    live = (d > 0) & (moves > 0)
    to_inbox = live & (o >= moves) & (d - in_junk >= share * d)
    to_junk = live & ~to_inbox & (i >= moves) & (in_junk >= share * d)
    junk = np.bincount(index[to_junk], minlength=len(users))
    inbox = np.bincount(index[to_inbox], minlength=len(users))
    # (a numpy scalar a user cost 5 s of a 40 s start-up at 100,000 users on a loaded machine; lists: none)
    which = np.flatnonzero(junk + inbox)
    turned = {
        users[u]: [j, n] for u, j, n in zip(which.tolist(), junk[which].tolist(), inbox[which].tolist(), strict=True)
    }
    return stats, turned


def _count_tuples(counts: np.ndarray) -> Iterable[tuple[int, int, int, int]]:
    """The pairs' four counts as tuples, one tuple object for every pair with the same counts.

    Most pairs share a few count patterns (a rescued sender: 3 delivered, 3 filed, 3 moved out): one
    tuple each (tuples are replaced, never changed) rather than a new one a pair, which cost most of the
    pairs' restore (scripts/scale/users_embedded_scale.py, docs/users.md). Counts past 16 bits: a tuple a pair.
    """
    if not len(counts) or int(counts.max()) >= 1 << 16:
        return zip(*(counts[:, k].astype(np.int64).tolist() for k in range(4)), strict=True)
    wide = counts.astype(np.uint64)
    packed = wide[:, 0] | wide[:, 1] << np.uint64(16) | wide[:, 2] << np.uint64(32) | wide[:, 3] << np.uint64(48)
    patterns, which = np.unique(packed, return_inverse=True)
    shared = [(p & 0xFFFF, p >> 16 & 0xFFFF, p >> 32 & 0xFFFF, p >> 48) for p in patterns.tolist()]
    return list(map(shared.__getitem__, which.tolist()))
