"""The analysis pinned: the same tokens, weights and hashed counts for every message of the four corpora.

A digest (SHA-256) over each message's tokens in order, their weights and its
features' ids and counts, taken over a corpus's messages in index order: with the
default [parser] and [model] settings (every message), with every token family on
(every third), and over the corpora's spam attacked (every fourth message's stream;
spamd_lab.attacks "all": look-alike letters, invisible characters, split
words, hidden text, encoded headers). A change of the
code that changes no token keeps every digest; one that changes a token of one
message changes its corpus's digest, and accuracy with it. Sender authentication's
outcome tokens are left out (they need DNS; tests/test_auth_outcomes.py has them).

When a change is meant to change the analysis, print the new digests with
`python -m tests.test_analysis_digest` and say in the commit what moved and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Iterable

import pytest

from spamd.config import ModelConfig, ParserConfig
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import featurize
from spamd.model.families import with_families
from spamd_lab.attacks import attacked
from tests.core_helpers import CORPORA, read_index, requires_corpus

INDEXES = {
    "trec07p-dev": CORPORA / "trec07p-dev" / "full" / "index",
    "spamassassin": CORPORA / "spamassassin" / "index",
    "modern-dev": CORPORA / "modern-dev" / "index",
    "hard-dev": CORPORA / "hard-dev" / "index",
}
DEFAULTS = (ParserConfig(), ModelConfig())
ALL_FAMILIES = (
    ParserConfig(),
    dataclasses.replace(
        ModelConfig(), char_ngrams=4, osb=True, sender_claims=True, link_targets=True, attachment_kinds=True,
        bulk_marks=True,
    ),
)  # fmt: skip
# The attacked streams take every ATTACKED_STEP-th message of a corpus: attacking a spam
# (the email package's parse and flatten) costs ten times its analysis. Every family on
# (character n-grams above all) costs three times the defaults: every FAMILIES_STEP-th.
ATTACKED_STEP = 4
FAMILIES_STEP = 3

# Recorded from the code as it is; see the module's docstring.
EXPECTED = {
    ("trec07p-dev", "defaults"): "65b57da934a84b44918872816af965c52c5b2ceaf428c1f7e734b8c2672b2808",
    ("spamassassin", "defaults"): "84db9f334917fb0ccea353eaa47d5d4278557f71281bfd208000ee3d5827a860",
    ("modern-dev", "defaults"): "e606745da6952829398ae0a22e925e3b07e46c6ef881e13214dbfe32c7c489c6",
    ("hard-dev", "defaults"): "0589bb087d1898001cc41104408ff88088580c0339538970cd1f1eac3359614c",
    ("trec07p-dev", "all-families"): "046ce15be4b674db7701368aeace3ae2b1627e36975b29588a0a30f2a6f6cf9d",
    ("spamassassin", "all-families"): "2a1207a27f071204f02231c7b9297ead90c25d547d7ad6cf1e22d19496bc9a1c",
    ("modern-dev", "all-families"): "c6630f7e62b8d65eddfe368f0d57dc895496704bbe764062a5b79557d7b57332",
    ("hard-dev", "all-families"): "4e4ccda10dd8b2c77af866a72a6f8e341a1eb31066d87baf1cb3dee259d17683",
    ("trec07p-dev", "attacked"): "aad5274e20524d2554122863a774c4131d2d70e73ffc8f351ef9013f521e238a",
    ("spamassassin", "attacked"): "9e9bb2bc85a1abc38c44c2b3f5788c7678a7c78200219d4ef850060fa17b5b12",
    ("modern-dev", "attacked"): "133d9cc7ec9e7fdc27487e89d80fda358951910d7d18b9b403433f06d726b588",
    ("hard-dev", "attacked"): "e0439edaa7e0e3f6a9cbd1e5ae7827ee8e210056a89ac1da075d84a7db8022d6",
}


def digest(raws: Iterable[bytes], settings: tuple[ParserConfig, ModelConfig]) -> str:
    """SHA-256 over each message's tokens, weights, feature ids and counts, in order."""
    parser, model = settings
    total = hashlib.sha256()
    for raw in raws:
        message = parse_message(strip_own_headers(raw), parser)
        tokens, weights = with_families(tokenize(message), message, model)
        features = featurize(tokens, model.hash_bits, weights)
        total.update("\0".join(tokens).encode("utf-8", "surrogatepass") + b"\1")
        if weights is not None:
            total.update(weights.tobytes())
        total.update(features.ids.tobytes() + features.counts.tobytes() + b"\2")
    return total.hexdigest()


def messages(corpus: str) -> list[tuple[str, bytes]]:
    return [(label, path.read_bytes()) for label, path in read_index(INDEXES[corpus])]


def digests(corpus: str) -> dict[tuple[str, str], str]:
    rows = messages(corpus)
    raws = [raw for _, raw in rows]
    sample = rows[::ATTACKED_STEP]
    return {
        (corpus, "defaults"): digest(raws, DEFAULTS),
        (corpus, "all-families"): digest(raws[::FAMILIES_STEP], ALL_FAMILIES),
        (corpus, "attacked"): digest((raw for _, raw in attacked(sample, "all")), DEFAULTS),
    }


@requires_corpus
@pytest.mark.parametrize("corpus", list(INDEXES))
def test_every_message_is_analyzed_as_before(corpus: str) -> None:
    assert digests(corpus) == {key: value for key, value in EXPECTED.items() if key[0] == corpus}


if __name__ == "__main__":
    for name in INDEXES if len(sys.argv) < 2 else sys.argv[1:]:
        for key, value in digests(name).items():
            print(f'    {key}: "{value}",')
