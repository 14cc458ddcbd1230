"""The snapshot format: model counts and ledger as versioned msgpack, arrays as bin with dtype and shape; an unknown version fails loudly."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from spamd.config import ModelConfig, UsersConfig
from spamd.errors import CorruptStateError
from spamd.model.bayes import Label, MultinomialNB
from spamd.model.families import (
    UNRECORDED_COUNT_SETTINGS,
    EvidenceHistory,
    count_settings,
    evidence_in,
    settings_that_differ,
)
from spamd.people.users import UserLayers
from spamd.store.records import Ledger

SNAPSHOT_FORMAT = "spamd-snapshot"


SNAPSHOT_VERSION = 1


def _pack_array(array: np.ndarray) -> dict[str, Any]:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"dtype": little.dtype.str, "shape": list(array.shape), "data": little.tobytes()}


def _unpack_array(d: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    if dtype.kind not in "uif":
        raise ValueError(f"unexpected dtype {dtype}")
    return np.frombuffer(d["data"], dtype=dtype).reshape(d["shape"]).astype(dtype.newbyteorder("="))


def encode_snapshot(
    model: MultinomialNB,
    ledger: Ledger,
    seq: int,
    counters: dict[str, int] | None = None,
    live: dict[str, Any] | None = None,
    users: UserLayers | None = None,
    evidence: EvidenceHistory | None = None,
) -> bytes:
    """Model and ledger as snapshot bytes. Counts are stored sparse (ids + values per class).

    `counters` are running totals kept across restarts (messages scored by verdict);
    they ride along with the snapshot so they are written atomically with it, as does
    `live` (spamd/people/accuracy.py: remembered verdicts and per-day counts). Both are
    optional keys of the version-1 payload: older snapshots load without them, and an
    older spamd reading this one ignores them. So are the per-user layers (`users`,
    spamd/people/users.py), written only when there are any, and since when each
    mail-evidence family on is learned (`evidence`, spamd/model/families.py).
    """
    rows = {}
    for label in Label:
        row = model.counts[label]
        ids = np.flatnonzero(row).astype(np.uint32)
        rows[str(label)] = {"ids": _pack_array(ids), "values": _pack_array(row[ids])}
    payload = msgpack.packb(
        {
            "seq": seq,
            "created": time.time(),
            "hash_bits": model.config.hash_bits,
            # What the counts mean ([model] stored_counts and the families): an older
            # snapshot without it was built with UNRECORDED_COUNT_SETTINGS.
            "count_settings": count_settings(model.config),
            "rows": rows,
            "token_totals": _pack_array(model.token_totals),
            "doc_totals": _pack_array(model.doc_totals),
            "distinct": model.distinct,
            "ledger": ledger.export(),
            "counters": {str(k): int(v) for k, v in (counters or {}).items()},
            "live": live or {},
            **({"users": users.export()} if users else {}),
            **({"evidence_since": evidence.export()} if evidence and evidence.since else {}),
        },
        use_bin_type=True,
    )
    return msgpack.packb(
        {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "checksum": hashlib.blake2b(payload, digest_size=32).digest(),
            "payload": payload,
        },
        use_bin_type=True,
    )


@dataclass
class Snapshot:
    seq: int
    created: float
    model: MultinomialNB
    ledger: Ledger
    # Running totals (e.g. "scored:spam"); absent in snapshots written before they existed.
    counters: dict[str, int] = field(default_factory=dict)
    # LiveAccuracy.export(); absent (empty) in snapshots written before it existed.
    live: dict[str, Any] = field(default_factory=dict)
    # Per-user layers; none in snapshots written before them or without per-user training.
    users: UserLayers = field(default_factory=lambda: UserLayers(UsersConfig()))
    # The mail-evidence families the counts were built with, and since when each is learned.
    evidence: EvidenceHistory = field(default_factory=EvidenceHistory)


def check_count_settings(
    stored: object, model_config: ModelConfig, where: str, remedy: str = "move the state directory aside and retrain"
) -> None:
    """CorruptStateError unless the model at `where` was built with the config's [model] count settings.

    The mail-evidence families may differ: switching one adds or stops tokens of its
    own and changes no count's meaning (spamd.model.families.settings_that_differ).
    """
    wanted = count_settings(model_config)
    if stored == wanted:
        return
    if not isinstance(stored, dict):
        raise CorruptStateError(f"{where}: the count settings are not a map ({stored!r})")
    keys = settings_that_differ(stored, wanted)
    if not keys:
        return
    differ = ", ".join(f"model.{key} = {stored.get(key)!r} (the config says {wanted[key]!r})" for key in keys)
    raise CorruptStateError(
        f"{where}: built with {differ}: the counts mean something else under these settings; set them back, or {remedy}"
    )


def decode_snapshot(
    data: bytes, model_config: ModelConfig, ledger_max: int, where: str, users_config: UsersConfig | None = None
) -> Snapshot:
    """Parse and verify snapshot bytes; CorruptStateError says what is wrong with `where`."""
    try:
        outer = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise CorruptStateError(f"{where}: not a readable snapshot ({type(e).__name__}: {e})") from None
    if not isinstance(outer, dict) or outer.get("format") != SNAPSHOT_FORMAT:
        raise CorruptStateError(f"{where}: not a spamd snapshot (no '{SNAPSHOT_FORMAT}' header)")
    if outer.get("version") != SNAPSHOT_VERSION:
        raise CorruptStateError(
            f"{where}: snapshot format version {outer.get('version')!r}, this spamd reads version "
            f"{SNAPSHOT_VERSION}; run the spamd that wrote it, or retrain"
        )
    payload = outer.get("payload")
    if not isinstance(payload, bytes) or hashlib.blake2b(payload, digest_size=32).digest() != outer.get("checksum"):
        raise CorruptStateError(f"{where}: checksum mismatch, the snapshot is damaged")
    try:
        d = msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True)
        if d["hash_bits"] != model_config.hash_bits:
            raise CorruptStateError(
                f"{where}: built with model.hash_bits = {d['hash_bits']}, the config says "
                f"{model_config.hash_bits}; set it back, or move the state directory aside and retrain"
            )
        stored_settings = d.get("count_settings", UNRECORDED_COUNT_SETTINGS)
        check_count_settings(stored_settings, model_config, where)
        evidence = EvidenceHistory.restore(d.get("evidence_since"), evidence_in(stored_settings))
        model = MultinomialNB(model_config)
        for label in Label:
            ids = _unpack_array(d["rows"][str(label)]["ids"]).astype(np.int64)
            values = _unpack_array(d["rows"][str(label)]["values"])
            if len(ids) and (ids.max() >= model.n_buckets or ids.min() < 0):
                raise ValueError("bucket id out of range")
            model.counts[label, ids] = values
        model.token_totals[:] = _unpack_array(d["token_totals"])
        model.doc_totals[:] = _unpack_array(d["doc_totals"])
        model.distinct = int(d["distinct"])
        ledger = Ledger.restore(d["ledger"], ledger_max)
        counters = {str(k): int(v) for k, v in d.get("counters", {}).items()}
        live = d.get("live") or {}
        if not isinstance(live, dict):
            raise ValueError("live accuracy section is not a map")
        users = UserLayers.restore(d.get("users") or {}, users_config or UsersConfig(), model.n_buckets)
        return Snapshot(int(d["seq"]), float(d["created"]), model, ledger, counters, live, users, evidence)
    except CorruptStateError:
        raise
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise CorruptStateError(f"{where}: checksum is right but the content is malformed ({e})") from None
