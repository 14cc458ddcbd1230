"""`spamctl users` over Redis: every user's summary line read in a few round trips, checked where it may be stale.

Reads the summary hashes (spamd.store.redis.summary) and `<p>users`; goes back to a user's
own keys only where the line cannot answer alone: its sender keys expire within a few
seconds of now (EXISTS), it was counted by another sender rule than this daemon's (the
turned senders counted afresh), or MEMORY USAGE is asked for.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from redis.exceptions import ClusterError, MovedError

from spamd.errors import CorruptStateError
from spamd.people.senders import way_of
from spamd.store.redis.connect import UNAVAILABLE, Script, sender_keys_of, user_keys
from spamd.store.redis.sender_fields import counts_by_sender
from spamd.store.redis.state import RedisState
from spamd.store.redis.summary import FIELDS, LINES_LUA, LISTING_BATCH, TURNED_LUA, rule_of, summary_keys

# A line whose sender keys expire within this many seconds of the listing's clock is checked
# with EXISTS (the two clocks, this host's and Redis's, may differ a little).
EXPIRY_MARGIN_S = 5


# Bytes of a user's keys in Redis, estimated from the summary's counts (MEMORY USAGE, Redis 7.0,
# listpack-encoded keys: scripts/scale/users_scale.py and docs/redis.md): a layer's token, a training
# in the layer's ledger, a sender held (its four counts and its recency), a delivered message held.
BYTES_PER_TOKEN = 60
BYTES_PER_TRAINING = 20
BYTES_PER_SENDER = 66  # 120 before the packed counts (a hash field a count)
BYTES_PER_MESSAGE = 26
BYTES_PER_USER = 16


def read_lines(state: RedisState) -> Lines:
    """Every user's summary line, by name: one script a node (a cluster's hashes grouped by the master that holds
    their slots; a pipeline of 16,384 HGETALLs took 5-7 s through redis-py on this loaded machine)."""
    keys = summary_keys(state.config.redis.prefix, state.cluster)
    if not state.cluster:
        groups = [(state.client, keys)]
    else:
        by_node: dict[str, tuple[Any, list[str]]] = {}
        slots = state.client.nodes_manager.slots_cache
        for slot, key in enumerate(keys):
            node = slots[slot][0] if slots.get(slot) else None
            if node is None:
                raise ClusterError(f"no master holds slot {slot}")
            by_node.setdefault(node.name, (node, []))[1].append(key)
        groups = [(state.client.get_redis_connection(node), held) for node, held in by_node.values()]
    names, lines = [], []
    for client, held in groups:

        def read(client: Any = client, held: list[str] = held) -> list[bytes]:
            try:
                return [bytes(blob) for blob in Script(client, LINES_LUA)(keys=[], args=held)]
            except MovedError as e:  # a slot moved (a failover, a resharding): read the map again; retried later
                with contextlib.suppress(*UNAVAILABLE):
                    state.client.nodes_manager.initialize()
                raise ClusterError(f"slot moved: {e}") from None

        node_names, node_lines = state.call("reading the users' summaries", read)
        if node_names:
            names.append(node_names)
            lines.append(node_lines)
    return parse_lines(b"\n".join(names), b"\n".join(lines))


@dataclass
class Lines:
    """Every user's summary line in columns: names, counts (one row a user, FIELDS), the rule each was counted by."""

    names: list[str]
    counts: np.ndarray  # int64 (n, len(FIELDS))
    rules: list[bytes]

    def column(self, field: str) -> np.ndarray:
        return self.counts[:, FIELDS.index(field)]


def parse_lines(names: bytes, lines: bytes) -> Lines:
    """Names, one a line, and their "counts... rule" lines: the counts parsed by numpy in one pass.

    100,000 lines: 0.27 s of the listing's CPU when split into a token each and parsed a column at a
    time (1 s when parsed into a dict a line), against a few tenths of that now (docs/redis.md).
    """
    listed = names.decode().split("\n") if names else []
    tokens = lines.split()
    width = len(FIELDS) + 1
    rules = tokens[width - 1 :: width]
    del tokens[width - 1 :: width]
    try:
        counts = _numbers(b" ".join(tokens))
    except ValueError:
        counts = np.zeros(0, np.int64)
    if len(rules) != len(listed) or len(counts) != len(listed) * len(FIELDS):
        raise CorruptStateError(
            f"the users' summary lines: {len(listed)} names, {len(rules)} lines of {len(FIELDS)} numbers and a "
            f"rule expected, {len(counts)} numbers read"
        )
    return Lines(listed, counts.reshape(-1, len(FIELDS)), rules)


def _numbers(text: bytes) -> np.ndarray:
    """The whole numbers of `text`, by numpy's C parser (ValueError, or fewer, where one is not)."""
    if not text:
        return np.zeros(0, np.int64)
    with warnings.catch_warnings():  # numpy warns (or raises) where the text stops being numbers
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.fromstring(text, dtype=np.int64, sep=" ")


def summaries(state: RedisState, moves: int, share: float) -> Lines:
    """Every user's summary, sender part zeroed where their sender keys expired, turned senders by this rule."""
    lines = read_lines(state)
    counts, now = lines.counts, time.time()
    senders, expires = lines.column("senders"), lines.column("expires")
    sender_part = np.array([FIELDS.index(f) for f in ("senders_to_junk", "senders_to_inbox", "senders", "messages")])
    counts[np.ix_((senders > 0) & (expires < now - EXPIRY_MARGIN_S), sender_part)] = 0
    prefix = state.config.redis.prefix
    edge = np.flatnonzero((senders > 0) & (expires <= now + EXPIRY_MARGIN_S)).tolist()
    if edge:
        held = _pipelined(state, edge, lambda pipe, i: pipe.exists(sender_keys_of(prefix, lines.names[i])[1]))
        gone = [i for i, exists in zip(edge, held, strict=True) if not exists]
        counts[np.ix_(np.array(gone, dtype=np.int64), sender_part)] = 0
    rule = rule_of(moves, share).encode()
    other = np.array([by != rule for by in lines.rules], dtype=bool).reshape(-1)
    recount = np.flatnonzero(other & (senders > 0)).tolist()
    for i, (junk, inbox) in zip(
        recount, turned_of(state, [lines.names[i] for i in recount], moves, share), strict=True
    ):
        counts[i, FIELDS.index("senders_to_junk")], counts[i, FIELDS.index("senders_to_inbox")] = junk, inbox
    return lines


def estimated_bytes(lines: Lines) -> np.ndarray:
    """Each user's keys' bytes in Redis, from the counts (BYTES_PER_*)."""
    c = lines.column
    return (
        BYTES_PER_USER
        + BYTES_PER_TOKEN * c("tokens")
        + BYTES_PER_TRAINING * (c("trained_ham") + c("trained_spam"))
        + BYTES_PER_SENDER * c("senders")
        + BYTES_PER_MESSAGE * c("messages")
    )


_LAYER_TOTALS = ("docs:0", "docs:1", "distinct")
_SHOWN = ("trained_ham", "trained_spam", "tokens", "senders_to_junk", "senders_to_inbox")


def list_users(state: RedisState, moves: int, share: float, memory: bool = False) -> list[dict[str, Any]]:
    """`list_user_columns` as a dict a user."""
    columns = list_user_columns(state, moves, share, memory)
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def list_user_columns(state: RedisState, moves: int, share: float, memory: bool = False) -> dict[str, list[Any]]:
    """`spamctl users`' columns, as the embedded store's rows: each user with a layer (in `<p>users`) or whose moves
    turned senders, by name; bytes estimated from the counts, or MEMORY USAGE of their keys with `memory`."""
    layered = {bytes(n).decode() for n in state.call("listing users", lambda: state.client.zrange(state.users, 0, -1))}
    lines = summaries(state, moves, share)
    counts = lines.counts
    if len(counts):
        # a layer an expiry left (its keys' deletion failed) is not held
        outside = np.fromiter((name not in layered for name in lines.names), dtype=bool, count=len(lines.names))
        counts[outside, :3] = 0
    shown = counts[:, [FIELDS.index(f) for f in _SHOWN]]
    keep = np.flatnonzero(shown.any(axis=1)).tolist()
    names = [lines.names[i] for i in keep]
    values = shown[keep].tolist()
    sizes = estimated_bytes(lines)[keep].tolist()
    prefix = state.config.redis.prefix
    # Users in <p>users without a line: trained by a spamd from before the summaries (their line comes with
    # their next change), or with neither a layer ([users] token_moves off) nor senders counted. Their totals.
    missing = sorted(layered.difference(lines.names))
    totals = _pipelined(state, missing, lambda pipe, name: pipe.hmget(user_keys(prefix, name)[2], *_LAYER_TOTALS))
    for name, each in zip(missing, totals, strict=True):
        if any(each):
            ham, spam, tokens = (int(v or 0) for v in each)
            names.append(name)
            values.append([ham, spam, tokens, 0, 0])
            sizes.append(BYTES_PER_USER + BYTES_PER_TOKEN * tokens + BYTES_PER_TRAINING * (ham + spam))
    if memory:
        per = len(user_keys(prefix, "")) + len(sender_keys_of(prefix, ""))

        def queue(pipe: Any, name: str) -> None:
            for key in [*user_keys(prefix, name), *sender_keys_of(prefix, name)]:
                pipe.memory_usage(key)

        used = _pipelined(state, names, queue, per)
        sizes = [sum(int(u or 0) for u in each) for each in used]
    order = sorted(range(len(names)), key=names.__getitem__)
    ordered = [values[i] for i in order]
    columns: dict[str, list[Any]] = {"user": [names[i] for i in order]}
    for index, field in enumerate(("trained_ham", "trained_spam", "tokens")):
        columns[field] = [v[index] for v in ordered]
    columns["bytes"] = [sizes[i] for i in order]
    columns["senders_to_junk"] = [v[3] for v in ordered]
    columns["senders_to_inbox"] = [v[4] for v in ordered]
    return columns


def _pipelined(state: RedisState, items: list[Any], queue: Any, per: int = 1) -> list[Any]:
    """`queue(pipe, item)` for each item, in pipelines of LISTING_BATCH; each item's `per` replies (one: the reply)."""
    out: list[Any] = []
    for start in range(0, len(items), LISTING_BATCH):
        batch = items[start : start + LISTING_BATCH]

        def read(batch: list[Any] = batch) -> list[Any]:
            pipe = state.client.pipeline(transaction=False)
            for item in batch:
                queue(pipe, item)
            return list(pipe.execute())

        replies = state.call("reading the users' keys", read)
        out += replies if per == 1 else [replies[i : i + per] for i in range(0, len(replies), per)]
    return out


def turned_of(state: RedisState, users: list[str], moves: int, share: float) -> list[tuple[int, int]]:
    """The senders each user's moves turned {to Junk, to the inbox}, counted afresh from their counts."""
    prefix = state.config.redis.prefix
    out: list[tuple[int, int]] = []
    for start in range(0, len(users), LISTING_BATCH):  # one pipeline a batch, not a round trip a user
        batch = users[start : start + LISTING_BATCH]

        def read(batch: list[str] = batch) -> list[Any]:
            if state.cluster:  # a cluster pipeline runs no scripts: the hashes, read here
                pipe = state.client.pipeline(transaction=False)
                for user in batch:
                    pipe.hgetall(sender_keys_of(prefix, user)[0])
                return [_turned_in_python(raw, moves, share) for raw in pipe.execute()]
            calls = [([sender_keys_of(prefix, user)[0]], [moves, repr(share)]) for user in batch]
            return Script(state.client, TURNED_LUA).pipelined(
                calls
            )  # EVAL where a node lacks it (restarted, failed over)

        out += state.call("reading the users' senders", read)
    return out


def _turned_in_python(raw: dict[Any, Any], moves: int, share: float) -> tuple[int, int]:
    """TURNED_LUA's answer from a user's senders hash, read."""
    counts = counts_by_sender(raw).values()
    ways = [way_of([tuple(c)], moves, share) for c in counts]  # type: ignore[list-item]
    return sum(way > 0 for way in ways), sum(way < 0 for way in ways)
