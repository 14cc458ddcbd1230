"""The analysis pinned: the same tokens, weights and hashed counts for every message of the four corpora.

A digest (SHA-256) over each message's tokens in order, their weights and its
features' ids and counts, taken over a corpus's messages in index order: with the
default [parser] and [model] settings, with every token family on, and over the
corpora's spam attacked (spamd.evaluation.attacks "all": look-alike letters,
invisible characters, split words, hidden text, encoded headers). A change of the
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
from spamd.evaluation.attacks import attacked
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import featurize
from spamd.model.families import with_families
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
# (the email package's parse and flatten) costs ten times its analysis.
ATTACKED_STEP = 4

# Recorded from the code as it is; see the module's docstring.
EXPECTED = {
    ("trec07p-dev", "defaults"): "",
    ("spamassassin", "defaults"): "",
    ("modern-dev", "defaults"): "",
    ("hard-dev", "defaults"): "",
    ("trec07p-dev", "all-families"): "",
    ("spamassassin", "all-families"): "",
    ("modern-dev", "all-families"): "",
    ("hard-dev", "all-families"): "",
    ("trec07p-dev", "attacked"): "",
    ("spamassassin", "attacked"): "",
    ("modern-dev", "attacked"): "",
    ("hard-dev", "attacked"): "",
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
        (corpus, "all-families"): digest(raws, ALL_FAMILIES),
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

