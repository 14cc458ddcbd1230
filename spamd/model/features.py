"""Token strings -> hashed bucket ids with counts (and weights and kinds): what the model counts and scores.

Tokens are hashed (xxh3, seed 0: the same id on every process and machine) into a fixed
number of buckets, so memory does not grow with the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import xxhash

from spamd.config import ModelConfig
from spamd.model.families import token_weights
from spamd.runtime import compiled

# The tokens' ids computed by spamd/model/_token_ids.c in one call, where it is built and the build
# is current (spamd.runtime.compiled); else (None) in Python, the same ids.
token_ids_in_c: Callable[[list[str], int, np.ndarray], None] | None = None
if compiled.COMPILED:
    from spamd.model._token_ids import token_ids as _token_ids_c

    token_ids_in_c = _token_ids_c


@dataclass(frozen=True, slots=True)
class Features:
    """A message as unique bucket ids (sorted) with their token counts, and their family weights if any is not 1."""

    ids: np.ndarray  # uint32, sorted, unique
    counts: np.ndarray  # uint32, >= 1
    # float64 per id (spamd/model/families.py); None: every id weighs 1, the default and the fast path.
    weights: np.ndarray | None = None
    # int8 per id: what kind of evidence the bucket holds (spamd.model.families.BODY, EVIDENCE, CLAIM),
    # scored apart from the words with [model] evidence_weight; None: all words, as before.
    kinds: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)


def token_id(token: str, mask: int) -> int:
    return xxhash.xxh3_64_intdigest(token.encode("utf-8", "surrogatepass")) & mask


def token_ids_in_python(tokens: list[str], hash_bits: int) -> np.ndarray:
    """The tokens' bucket ids (uint32), as spamd/model/_token_ids.c computes them."""
    try:
        # map() keeps the per-token loop in C; hashing every token and counting the
        # sorted ids beats counting strings first (57 -> 52 us/msg).
        hashes = np.fromiter(map(xxhash.xxh3_64_intdigest, map(str.encode, tokens)), np.uint64, len(tokens))
    except UnicodeEncodeError:  # a lone surrogate
        hashes = np.array([xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) for t in tokens], np.uint64)
    hashes &= np.uint64((1 << hash_bits) - 1)
    return hashes.astype(np.uint32)


def featurize(
    tokens: list[str], hash_bits: int, weights: np.ndarray | None = None, kinds: np.ndarray | None = None
) -> Features:
    """Token strings -> unique bucket ids with counts (colliding tokens merge).

    With per-token `weights`, a bucket weighs as its heaviest token: a tokenizer token
    that shares a bucket with an n-gram keeps its weight of 1 (unmeasured: with the
    n-grams and pairs on, about one pair of a message's ~2,400 tokens shares a bucket
    of 2**22). With per-token `kinds` (spamd.model.families.token_kinds), a bucket is of
    the highest kind among its tokens.
    """
    if token_ids_in_c is None:
        ids = token_ids_in_python(tokens, hash_bits)
    else:
        # The whole of spamctl eval over trec07p-dev's first 2,000 messages: 9.57 -> 8.86 G instructions
        # (callgrind, workers traced; docs/performance.md#the-tokens-hashes-in-c).
        ids = np.empty(len(tokens), dtype=np.uint32)
        try:
            token_ids_in_c(tokens, (1 << hash_bits) - 1, ids)
        except UnicodeEncodeError:  # a lone surrogate: cannot come from decoded mail, but be total
            ids = token_ids_in_python(tokens, hash_bits)
    apart = None
    if kinds is not None:
        kinds = np.asarray(kinds, dtype=np.int8)
        if len(kinds) != len(tokens):
            raise ValueError(f"{len(kinds)} kinds for {len(tokens)} tokens")
        # The evidence tokens' ids and kinds, taken before the ids are sorted: each token is hashed
        # once: featurize 457 -> 420 k instructions a message over trec07p-dev's first 300 (callgrind).
        places = kinds.nonzero()[0]  # not np.flatnonzero: its Python wrapper cost more than the search
        apart = (ids.take(places), kinds.take(places))
    if weights is not None:
        order = np.argsort(ids, kind="stable")
        ids, weights = ids[order], np.asarray(weights, dtype=np.float64)[order]
    else:
        ids.sort()
    if len(ids) == 0:
        no_kinds = None if kinds is None else np.zeros(0, dtype=np.int8)
        return Features(ids, np.zeros(0, dtype=np.uint32), None if weights is None else np.zeros(0), no_kinds)
    # What np.unique(return_counts=True) computes, without its Python-level
    # overhead: featurize 94 -> 78 us/msg on trec07p-dev (same features).
    starts = np.empty(len(ids), dtype=bool)
    starts[0] = True
    np.not_equal(ids[1:], ids[:-1], out=starts[1:])
    first = np.flatnonzero(starts)
    counts = np.empty(len(first), dtype=np.uint32)
    np.subtract(first[1:], first[:-1], out=counts[:-1], casting="unsafe")
    counts[-1] = len(ids) - first[-1]
    unique = ids[first]
    bucket_weights = None if weights is None else np.maximum.reduceat(weights, first)
    if apart is None:
        return Features(unique, counts, bucket_weights)
    bucket_kinds = np.zeros(len(unique), dtype=np.int8)
    # A message's few evidence tokens (about seven) set their buckets' kinds one by one, the highest
    # kind winning a shared bucket: np.maximum.at cost more than the loop on so few.
    for place, kind in zip(np.searchsorted(unique, apart[0]).tolist(), apart[1].tolist(), strict=True):
        if kind > bucket_kinds[place]:
            bucket_kinds[place] = kind
    return Features(unique, counts, bucket_weights, bucket_kinds)


def features_of(
    tokens: list[str], config: ModelConfig, weights: np.ndarray | None = None, kinds: np.ndarray | None = None
) -> Features:
    """`featurize` with the tokens' `weights`, or (None) the family weights the tokens' prefixes tell."""
    return featurize(tokens, config.hash_bits, token_weights(tokens, config) if weights is None else weights, kinds)
