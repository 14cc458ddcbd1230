"""Reaching Redis: the client for a plain Redis, a primary under Sentinel or a Redis Cluster, the key names, "down".

Plain Redis keeps the key names it always had (`<prefix>ham`); on a cluster every key
of the shared model carries one hash tag, the prefix in braces (`{spamd:}ham`), so each
multi-key script runs on one slot. Each user's layer has its own hash tag `{u:NAME}`
(`<prefix>{u:NAME}:ham`..., one slot per user, users spread over the nodes); a prefix
starting with `u:` is refused on a cluster (spamd.config). This module runs no
command of its own beyond a script's EVALSHA / EVAL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    ClusterError,
    CrossSlotTransactionError,
    InvalidPipelineStack,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry
from redis.sentinel import Sentinel

from spamd.config import RedisConfig
from spamd.config.addresses import CLUSTER_SCHEMES, SENTINEL_SCHEMES, parse_cluster_url, parse_sentinel_url
from spamd.errors import StoreError, StoreUnavailableError

# The model's keys, in the order the training script takes them (KEYS[1..8]).
MODEL_KEY_NAMES = ("ham", "spam", "totals", "ledger", "ledger:order", "events", "outcomes", "users")
# One user's keys, in the order the user-layer script takes them.
USER_KEY_NAMES = ("ham", "spam", "totals", "rank", "ledger")

# What a Redis going away, restarting or a cluster node being down looks like to
# redis-py: the store answers temporary failures for these (451, tempfail, 75).
# ClusterDownError (CLUSTERDOWN) and MasterDownError are ClusterErrors; TryAgainError
# comes during a resharding; a RedisClusterException other than a bug of ours (keys in
# two slots) means no node could be asked at all.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, ClusterError, TryAgainError, RedisClusterException,
)  # fmt: skip
NOT_UNAVAILABLE: tuple[type[BaseException], ...] = (CrossSlotTransactionError, InvalidPipelineStack)


def is_cluster(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


def is_sentinel(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEMES)


def model_keys(prefix: str, cluster: bool) -> list[str]:
    """The shared model's keys: `<prefix>ham`... on plain Redis, `{<prefix>}ham`... (one hash tag) on a cluster."""
    head = f"{{{prefix}}}" if cluster else prefix
    return [head + name for name in MODEL_KEY_NAMES]


def user_hash_tag(name: str) -> str:
    """The hash tag of one user's keys, `{u:NAME}`: all of a user's keys in one slot, the users spread over the nodes."""
    return f"{{u:{name}}}"


def user_keys(prefix: str, name: str) -> list[str]:
    """One user's keys, `<prefix>{u:NAME}:ham`..., on plain Redis and on a cluster alike (`name` checked before)."""
    head = prefix + user_hash_tag(name) + ":"
    return [head + key for key in USER_KEY_NAMES]


def sender_keys_of(prefix: str, user: str) -> list[str]:
    head = prefix + user_hash_tag(user) + ":"
    return [head + name for name in ("senders", "senders_at", "filed")]


def connect(r: RedisConfig, where: str) -> Any:
    """A client for `r.url` (redis.Redis or redis.cluster.RedisCluster); it does not stall longer than documented.

    Plain Redis: one immediate retry on a broken connection (a restarted Redis: it
    reconnects). A cluster: one retry after redis-py re-reads the slot map from a live
    node; each attempt waits at most `timeout_s` to connect and `timeout_s` for the
    reply, so a request on a dead node returns within about 2 x timeout_s (4 s by
    default; a refused connection, as from a stopped node on a live host, at once).
    A training retried either way is a repeat to the script's ledger check, never double.
    """
    # With replicas_acked, a reply may wait replica_timeout_s for WAIT besides Redis's own time.
    reply_timeout = r.timeout_s + (r.replica_timeout_s if r.replicas_acked else 0.0)
    common: dict[str, Any] = dict(
        socket_timeout=reply_timeout, socket_connect_timeout=r.timeout_s, health_check_interval=0
    )
    if is_sentinel(r.url):
        return connect_sentinel(r, common)
    if not is_cluster(r.url):
        try:
            return redis.Redis.from_url(r.url, retry=Retry(NoBackoff(), 1), retry_on_timeout=False, **common)
        except ValueError as e:
            raise StoreError(f"[redis] url {where!r}: {e}") from None
    parts = parse_cluster_url(r.url)
    try:
        # Connects at once: it reads the slot map (CLUSTER SLOTS) from the first node that answers.
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in parts.nodes],
            username=parts.username, password=parts.password, ssl=parts.tls,
            retry=Retry(NoBackoff(), 1),
            # spamd needs the one slot of its hash tag, not all 16384.
            require_full_coverage=False,
            **common,
        )  # fmt: skip
    except NOT_UNAVAILABLE:
        raise
    except UNAVAILABLE as e:
        raise StoreUnavailableError(f"Redis Cluster at {where} is unreachable ({type(e).__name__}: {e})") from None


def connect_sentinel(r: RedisConfig, common: dict[str, Any]) -> Any:
    """The primary Sentinel names, as a redis.Redis whose every new connection asks the sentinels where it is now.

    After a failover the first request on the old address fails (a broken connection,
    or READONLY from the old primary come back as a replica: redis-py turns that into a
    ConnectionError), the pool is reset, and the next connection goes to the new primary;
    nothing here caches the address. The sentinels are asked without the primary's password.
    """
    parts = parse_sentinel_url(r.url)
    sentinels = Sentinel(
        list(parts.sentinels),
        sentinel_kwargs={"socket_timeout": r.timeout_s, "socket_connect_timeout": r.timeout_s},
    )
    return sentinels.master_for(
        parts.master_name, username=parts.username, password=parts.password, ssl=parts.tls,
        retry=Retry(NoBackoff(), 1), retry_on_timeout=False, **common,
    )  # fmt: skip


class Script:
    """A Lua script run by EVALSHA, sent whole (EVAL) where the node does not have it yet.

    Not redis-py's Script: on a cluster its SCRIPT LOAD goes to every primary, so one
    node down would stop the script on the others; EVAL loads it on the node that runs it.
    """

    def __init__(self, client: Any, text: str):
        self.client = client
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    def __call__(self, keys: list[str], args: list[Any]) -> Any:
        try:
            return self.client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.client.eval(self.text, len(keys), *keys, *args)

    def pipelined(
        self, calls: list[tuple[list[str], list[Any]]], after: Callable[[Any], Any] | None = None
    ) -> list[Any]:
        """The script once per (keys, args) of `calls`, then whatever `after` queues, in one pipeline (one round
        trip); sent again whole (EVAL) where the node lacks the script. A reply that is an error is raised."""
        for whole in (False, True):
            pipe = self.client.pipeline(transaction=False)
            for keys, args in calls:
                if whole:
                    pipe.eval(self.text, len(keys), *keys, *args)
                else:
                    pipe.evalsha(self.sha, len(keys), *keys, *args)
            if after is not None:
                after(pipe)
            replies = list(pipe.execute(raise_on_error=False))
            if not any(isinstance(reply, NoScriptError) for reply in replies[: len(calls)]):
                break
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies
