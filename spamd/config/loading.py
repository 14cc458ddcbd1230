"""TOML loading over the embedded defaults, command-line overrides, and the checks that give clear errors.

Nothing here is read at import time by other modules: the entry points call
`load_config` once and pass the result (or the section a component needs) down.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from spamd.config.addresses import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    parse_cluster_url,
    parse_host_port,
    parse_nameserver,
    parse_sentinel_url,
)
from spamd.config.sections import MAX_NGRAM_CHARS, STORED_COUNTS, Config, metrics_address, web_address
from spamd.errors import ConfigError

# Each [section] of the file and its dataclass, in the Config's order.
_SECTION_CLASSES = {f.name: type(getattr(Config(), f.name)) for f in dataclasses.fields(Config) if f.name != "data_dir"}


def _coerce(value: Any, default: Any, where: str) -> Any:
    """Check a TOML value against the type of the default it replaces."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
        return tuple(value)
    raise ConfigError(f"{where}: unsupported value {value!r}")


def _check_listen(listen: str, where: str, problems: list[str]) -> None:
    """An optional listener's address, if set, must be host:port (the problem added, not raised)."""
    if listen:
        try:
            parse_host_port(listen, where)
        except ConfigError as e:
            problems.append(str(e))


def _validate(config: Config, source: str) -> None:
    m, p, s = config.model, config.parser, config.smtp
    problems = []
    if not 10 <= m.hash_bits <= 28:
        problems.append("model.hash_bits must be between 10 and 28")
    if not m.alpha > 0:
        problems.append("model.alpha must be > 0")
    if not m.evidence_prior >= 0:
        problems.append("model.evidence_prior must be >= 0")
    if not m.neutral_tokens >= 0:
        problems.append("model.neutral_tokens must be >= 0")
    if not (math.isfinite(m.evidence_weight) and 0 <= m.evidence_weight <= 100):
        problems.append(f"model.evidence_weight must be 0 (off) or a weight up to 100, got {m.evidence_weight}")
    if not (math.isfinite(m.evidence_neutral) and m.evidence_neutral >= 0):
        problems.append(f"model.evidence_neutral must be a number of tokens >= 0, got {m.evidence_neutral}")
    if not (math.isfinite(m.evidence_apart_prior) and m.evidence_apart_prior >= 0):
        problems.append(f"model.evidence_apart_prior must be a count >= 0, got {m.evidence_apart_prior}")
    if not 0 <= m.decisive_tokens <= 100_000:
        problems.append("model.decisive_tokens must be 0 (every token) or a number of tokens up to 100000")
    if not (math.isfinite(m.salad_tokens) and 0 <= m.salad_tokens <= 100_000):
        problems.append(
            f"model.salad_tokens must be 0 (not capped) or a number of tokens up to 100000, got {m.salad_tokens}"
        )
    if not 0.0 <= m.ham_threshold <= m.spam_threshold <= 1.0:
        problems.append("need 0 <= model.ham_threshold <= model.spam_threshold <= 1")
    if m.stored_counts not in STORED_COUNTS:
        problems.append(f"model.stored_counts must be one of {', '.join(STORED_COUNTS)}, got {m.stored_counts!r}")
    if m.char_ngrams not in (0, 3, 4, 5):
        problems.append(f"model.char_ngrams must be 0 (off), 3, 4 or 5, got {m.char_ngrams}")
    if not 1 <= m.ngram_chars <= MAX_NGRAM_CHARS:
        problems.append(f"model.ngram_chars must be between 1 and {MAX_NGRAM_CHARS}, got {m.ngram_chars}")
    for name in ("ngram_weight", "osb_weight"):
        weight = getattr(m, name)
        if not (math.isfinite(weight) and 0 < weight <= 10):
            problems.append(f"model.{name} must be above 0 and at most 10, got {weight}")
    if not m.train_margin >= 0:
        problems.append(
            f"model.train_margin must be a |log-odds| >= 0 (inf: learn every message), got {m.train_margin}"
        )
    if config.redis.url and (m.weight_normalization or m.class_prior):
        problems.append(
            "model.weight_normalization and model.class_prior are not available with [redis] url set: the Redis "
            "store scores from the counts alone; turn them off (their default) or leave redis.url empty"
        )
    if min(p.max_bytes, p.max_parts, p.max_depth, p.max_text_chars) < 1:
        problems.append("parser limits must be >= 1")
    if not -1 <= p.processes <= 64:
        problems.append("parser.processes must be -1 (one per core but one), 0 (none) or up to 64")
    if not (math.isfinite(config.maildir.settle_after) and config.maildir.settle_after >= 0):
        problems.append(
            f"maildir.settle_after must be a number of seconds >= 0 (0: off), got {config.maildir.settle_after}"
        )
    if not config.maildir.settle_margin >= 0:
        problems.append(
            f"maildir.settle_margin must be a log-odds >= 0 (inf: only mail spamd never scored), got {config.maildir.settle_margin}"
        )
    if not -1 <= config.maildir.delivery_processes <= 8:
        problems.append("maildir.delivery_processes must be -1 (one on two cores or more), 0 (none) or up to 8")
    u = config.users
    if u.max_tokens < 1 or u.max_users < 1 or not u.backoff > 0:
        problems.append("users.max_tokens and users.max_users must be >= 1, users.backoff > 0")
    if u.sender_moves < 0 or not 0 < u.sender_share <= 1 or u.max_senders < 1 or u.max_delivered < 1:
        problems.append(
            "users.sender_moves must be >= 0, users.sender_share in (0, 1], users.max_senders and "
            "users.max_delivered >= 1"
        )
    a = config.auth
    if not (math.isfinite(a.dns_budget_s) and 0 < a.dns_budget_s <= 60) or a.trusted_hops < 0:
        problems.append("auth.dns_budget_s must be above 0 and at most 60 seconds, auth.trusted_hops >= 0")
    if a.dmarc_reject_action not in ("score", "spam"):
        problems.append(f"auth.dmarc_reject_action must be score or spam, got {a.dmarc_reject_action!r}")
    for nameserver in a.nameservers:
        try:
            parse_nameserver(nameserver)
        except ConfigError as e:
            problems.append(str(e))
    if s.mode not in ("deliver", "relay"):
        problems.append(f"smtp.mode must be 'deliver' or 'relay', got {s.mode!r}")
    if not 0 <= s.port <= 65535 or not 0 < s.next_hop_port <= 65535:
        problems.append("smtp ports must be within 0..65535")
    if s.max_recipients < 1 or s.max_message_bytes < 1024:
        problems.append("smtp.max_recipients >= 1 and smtp.max_message_bytes >= 1024 required")
    mi = config.milter
    _check_listen(mi.listen, "[milter] listen", problems)
    if mi.reject_at != 0.0 and not 0.5 < mi.reject_at <= 1.0:
        problems.append(f"milter.reject_at must be 0 (never reject) or above 0.5 and at most 1, got {mi.reject_at}")
    if mi.max_message_bytes < 1024:
        problems.append("milter.max_message_bytes >= 1024 required")
    if min(mi.idle_timeout_s, mi.message_timeout_s) <= 0:
        problems.append("milter timeouts must be > 0")
    c = config.spamc
    _check_listen(c.listen, "[spamc] listen", problems)
    if c.max_connections < 1 or (c.max_message_bytes and c.max_message_bytes < 1024):
        problems.append("spamc.max_connections >= 1 and spamc.max_message_bytes 0 or >= 1024 required")
    if not c.idle_timeout_s > 0 or not c.data_timeout_s > 0:
        problems.append("spamc.idle_timeout_s and spamc.data_timeout_s must be > 0")
    if not -1000.0 <= c.required_score <= 1000.0:
        problems.append("spamc.required_score must be between -1000 and 1000")
    lm = config.lmtp
    _check_listen(lm.listen, "[lmtp] listen", problems)
    if lm.next_hop and not lm.next_hop.startswith("/"):
        _check_listen(lm.next_hop, "[lmtp] next_hop (HOST:PORT or an absolute Unix socket path)", problems)
    if lm.max_recipients < 1 or lm.max_message_bytes < 1024:
        problems.append("lmtp.max_recipients >= 1 and lmtp.max_message_bytes >= 1024 required")
    if min(lm.idle_timeout_s, lm.data_timeout_s, lm.next_hop_timeout_s) <= 0:
        problems.append("lmtp.idle_timeout_s, lmtp.data_timeout_s and lmtp.next_hop_timeout_s must be > 0")
    if config.store.snapshots_kept < 1:
        problems.append("store.snapshots_kept must be >= 1")
    if config.log.format not in ("auto", "json", "console"):
        problems.append("log.format must be auto, json or console")
    for folder in (config.maildir.junk_folder, config.maildir.trash_folder):
        if not folder.startswith(".") or "/" in folder or folder in (".", ".."):
            problems.append(f"maildir folder {folder!r} must be a Maildir++ name like '.Junk'")
    r = config.redis
    if r.url and not r.url.startswith(("redis://", "rediss://", "unix://", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)):
        problems.append(
            f"redis.url must start with redis://, rediss://, unix://, (a Redis Cluster) redis+cluster://, "
            f"rediss+cluster://, or (Redis Sentinel) redis+sentinel://, rediss+sentinel://, got {r.url!r}"
        )
    elif r.url.startswith(SENTINEL_SCHEMES):
        try:
            parse_sentinel_url(r.url)
        except ConfigError as e:
            problems.append(str(e))
    elif r.url.startswith(CLUSTER_SCHEMES):
        try:
            parse_cluster_url(r.url)
        except ConfigError as e:
            problems.append(str(e))
        if "{" in r.prefix or "}" in r.prefix or r.prefix.startswith("u:"):
            problems.append(
                f"redis.prefix {r.prefix!r}: on a Redis Cluster spamd wraps the prefix in braces as the keys' "
                "hash tag itself: leave out '{' and '}' (and do not start it with 'u:', kept for per-user keys)"
            )
    if not r.prefix or r.timeout_s <= 0 or r.events_max < 1:
        problems.append("redis.prefix must be set, redis.timeout_s > 0 and redis.events_max >= 1")
    if not 0 <= r.replicas_acked <= 16 or r.replica_timeout_s <= 0:
        problems.append("redis.replicas_acked must be between 0 and 16 and redis.replica_timeout_s > 0")
    if config.metrics.listen:
        try:
            metrics_address(config)
        except ConfigError as e:
            problems.append(f"metrics.listen: {e}")
    w = config.web
    if w.listen:
        try:
            web_address(config)
        except ConfigError as e:
            problems.append(f"web.listen: {e}")
    if w.password_hash and not re.fullmatch(r"scrypt\$\d+\$\d+\$\d+\$[0-9a-f]+\$[0-9a-f]+", w.password_hash):
        problems.append("web.password_hash must be made by `spamctl web-token --hash` (scrypt$N$r$p$SALT$HASH)")
    if w.history_entries < 0 or w.history_message_bytes < 0:
        problems.append("web.history_entries and web.history_message_bytes must be >= 0")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


def load_config(
    path: Path | None = None,
    *,
    data_dir: Path | None = None,
    smtp_listen: str | None = None,
    milter_listen: str | None = None,
    spamc_listen: str | None = None,
    redis_url: str | None = None,
    metrics_listen: str | None = None,
    web_listen: str | None = None,
) -> Config:
    """Embedded defaults, overlaid with the TOML file (if any), then command-line overrides."""
    config = Config()
    source = "embedded defaults"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except PermissionError:
            raise ConfigError(f"{path}: permission denied reading config") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        config = _apply(config, raw, source)
    if data_dir is not None:
        config = replace(config, data_dir=Path(data_dir))
    if smtp_listen is not None:
        host, port = parse_host_port(smtp_listen)
        config = replace(config, smtp=replace(config.smtp, host=host, port=port))
    if milter_listen is not None:
        parse_host_port(milter_listen, "--milter")
        config = replace(config, milter=replace(config.milter, listen=milter_listen))
    if spamc_listen is not None:
        parse_host_port(spamc_listen, "--spamc")
        config = replace(config, spamc=replace(config.spamc, listen=spamc_listen))
    if redis_url is not None:
        config = replace(config, redis=replace(config.redis, url=redis_url))
    if metrics_listen is not None:
        parse_host_port(metrics_listen, "--metrics")  # the flag named in the error, not metrics.listen
        config = replace(config, metrics=replace(config.metrics, listen=metrics_listen))
    if web_listen is not None:
        parse_host_port(web_listen, "--web")
        config = replace(config, web=replace(config.web, listen=web_listen))
    config = replace(config, data_dir=Path(config.data_dir).expanduser())
    _validate(config, source)
    return config


def _apply(config: Config, raw: dict[str, Any], source: str) -> Config:
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "data_dir":
            if not isinstance(value, str):
                raise ConfigError(f"{source}: data_dir: expected a string path")
            changes["data_dir"] = Path(value)
            continue
        cls = _SECTION_CLASSES.get(key)
        if cls is None or not isinstance(value, dict):
            raise ConfigError(
                f"{source}: unknown key or section {key!r} (known: data_dir, {', '.join(_SECTION_CLASSES)})"
            )
        section = getattr(config, key)
        known = {f.name for f in dataclasses.fields(cls)}
        updates = {}
        for name, item in value.items():
            if name not in known:
                raise ConfigError(f"{source}: unknown key [{key}] {name!r} (known: {', '.join(sorted(known))})")
            updates[name] = _coerce(item, getattr(section, name), f"{source}: [{key}] {name}")
        changes[key] = replace(section, **updates)
    return replace(config, **changes)
