"""Addresses in the configuration taken apart: HOST:PORT listeners, Redis Cluster and Sentinel URLs, with clear errors.

Pure functions of strings; the config's validation and the store's connection both use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from spamd.errors import ConfigError

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")


@dataclass(frozen=True)
class ClusterURL:
    """A `redis+cluster://` URL taken apart: the nodes to start from, the credentials, TLS."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool


def parse_cluster_url(url: str) -> ClusterURL:
    """`redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][/0]` -> ClusterURL, or ConfigError naming the part.

    Any node of the cluster will do; more than one lets spamd start while one is down.
    A cluster has database 0 only.
    """
    scheme, _, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at:
        credentials, location = "", rest
    location, slash, path = location.partition("/")
    where = f"redis.url {redact_url(url)!r}"
    if slash and path not in ("", "0"):
        raise ConfigError(f"{where}: a Redis Cluster has only database 0; drop the '/{path}'")
    if "?" in location or "#" in location:
        raise ConfigError(f"{where}: no query options are understood here; use [redis] timeout_s")
    nodes = []
    for part in location.split(","):
        if not part:
            raise ConfigError(f"{where}: expected HOST:PORT[,HOST:PORT...] after {scheme}://")
        nodes.append(parse_host_port(part, where))
    username, colon, password = credentials.partition(":")
    return ClusterURL(
        nodes=tuple(nodes),
        username=unquote(username) if username else None,
        password=unquote(password) if colon and password else None,
        tls=scheme == "rediss+cluster",
    )


@dataclass(frozen=True)
class SentinelURL:
    """A `redis+sentinel://` URL taken apart: the sentinels to ask, the primary's name, its credentials, TLS."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    username: str | None
    password: str | None
    tls: bool


def parse_sentinel_url(url: str) -> SentinelURL:
    """`redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTERNAME` -> SentinelURL, or ConfigError.

    The credentials are the primary's (and its replicas'); the sentinels are asked
    without any. Database 0 only, as on a cluster: one name says where the model is.
    """
    scheme, _, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not at:
        credentials, location = "", rest
    where = f"redis.url {redact_url(url)!r}"
    if "?" in location or "#" in location:
        raise ConfigError(f"{where}: no query options are understood here; use [redis] timeout_s")
    location, slash, master_name = location.partition("/")
    if not slash or not master_name or "/" in master_name:
        raise ConfigError(f"{where}: expected HOST:PORT[,HOST:PORT...]/MASTERNAME (the name in `sentinel monitor`)")
    sentinels = []
    for part in location.split(","):
        if not part:
            raise ConfigError(f"{where}: expected HOST:PORT[,HOST:PORT...] after {scheme}://")
        sentinels.append(parse_host_port(part, where))
    username, colon, password = credentials.partition(":")
    return SentinelURL(
        sentinels=tuple(sentinels),
        master_name=unquote(master_name),
        username=unquote(username) if username else None,
        password=unquote(password) if colon and password else None,
        tls=scheme == "rediss+sentinel",
    )


def redact_url(url: str) -> str:
    """The URL without its password, for logs and messages."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def parse_host_port(text: str, where: str = "--smtp") -> tuple[str, int]:
    """'127.0.0.1:2525' or '[::1]:2525' -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{where} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:10025")
    host = host.strip("[]")
    if not host:
        raise ConfigError(f"{where} {text!r}: missing host")
    return host, int(port)


def parse_nameserver(text: str) -> tuple[str, int]:
    """ "192.0.2.1", "192.0.2.1:5353", "[2001:db8::1]:53" or "2001:db8::1" as (address, port)."""
    text = text.strip()
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "53"
    elif text.count(":") == 1:
        address, port = text.split(":")
    else:
        address, port = text, "53"
    if not address or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"auth.nameservers: {text!r} is not an address, address:port or [v6]:port")
    return address, int(port)
