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

Where the analysis runs compiled (setup.py), the same test also runs the source, in a
fresh interpreter with SPAMD_PURE_PYTHON=1, over the same messages: the build and its
pure-Python fallback are held to the same digests, to the bit. The attacked messages are
made once for both: attacking costs more than both analyses (trec07p-dev 36 s, then 5 s
compiled and 7 s as source, 2 cores idle).

When a change is meant to change the analysis, print the new digests with
`python -m tests.test_analysis_digest` and say in the commit what moved and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import msgpack
import pytest

from spamd.config import ModelConfig, ParserConfig
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import featurize
from spamd.model.families import with_families
from spamd.runtime import compiled
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
    ("trec07p-dev", "defaults"): "c58619e6b54a570e08a883f6c7cfe4b84807f7e8861dffcac6ad7f3176f3d055",
    ("spamassassin", "defaults"): "a50d2555eaa8a9c31469cd627aa43912534bba39332497b6d25e9b164b1c8bd8",
    ("modern-dev", "defaults"): "2b5193001742b7b60dc114e072c42fad608d3aebee4621b91e64a74a3ee159f9",
    ("hard-dev", "defaults"): "3d0910e52809d2f20e4926256dca0eaa42b0e5b06429fd9db48f3c91fe0e5713",
    ("trec07p-dev", "all-families"): "a8a21866580085623c1b046420003379e4ceb0505611ecdd5951258093936bc6",
    ("spamassassin", "all-families"): "f54195bddf1ae46447dbe3f597aee11420ed3834641ccbaa802a87702f082ba2",
    ("modern-dev", "all-families"): "387f0bb3f03db37694f23cddd8f1fb7ef1ecabbd48f74d897749689e1c482f02",
    ("hard-dev", "all-families"): "fac37caf476efc29b40c4825fdc4556e4c2c5f3bce24344dfaedaedf3ec9e6ef",
    ("trec07p-dev", "attacked"): "659c862b34f4a8b85e200ad64fdeb6681d48c2c39e82e97d5b7a8e6d72da60b1",
    ("spamassassin", "attacked"): "a13e2cda18ba2a8f98391a0ff722c7bbdbae36d647a7b2f4df14f74387acf560",
    ("modern-dev", "attacked"): "762ff815d6d2858b3daee756900155c05c7f9c14fb57077586cb23d908330b1d",
    ("hard-dev", "attacked"): "87e2dc8dc303515a3c3fef493d2c89556a3f80c08fde4c00e0354ecc12c46f6e",
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


# What each digest is taken over, and with which settings.
KINDS = {"defaults": DEFAULTS, "all-families": ALL_FAMILIES, "attacked": DEFAULTS}


def raws_of(corpus: str, kind: str) -> list[bytes]:
    """The messages a digest of `kind` is taken over: every one, every FAMILIES_STEP-th, or every
    ATTACKED_STEP-th with its spam attacked by every attack at once."""
    if kind == "attacked":
        return [raw for _, raw in attacked(messages(corpus)[::ATTACKED_STEP], "all")]
    raws = [raw for _, raw in messages(corpus)]
    return raws if kind == "defaults" else raws[::FAMILIES_STEP]


ROOT = Path(__file__).resolve().parents[1]
# In a fresh interpreter with SPAMD_PURE_PYTHON=1: every compiled module is its source, then the digest
# of the messages given (a msgpack list of bytes) or, without them, of the corpus's.
SOURCE_DIGEST = """
import importlib, sys
import msgpack
import spamd.mail.tokenize
from spamd.runtime import compiled
from tests.test_analysis_digest import KINDS, digest, raws_of
assert not compiled.COMPILED, compiled.REASON
import spamd.model.features
assert spamd.mail.tokenize.words_in is None, "the words are found by the patterns, not by spamd/mail/_words.c"
assert spamd.model.features.token_ids_in_c is None, "the tokens are hashed in Python, not by spamd/model/_token_ids.c"
written_in_c = {"spamd.mail._words", "spamd.model._token_ids"}
files = {m: importlib.import_module(m).__file__ for m in compiled.recorded() if m not in written_in_c}
assert all(f.endswith(".py") for f in files.values()), files
corpus, kind = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    with open(sys.argv[3], "rb") as f:
        raws = msgpack.unpackb(f.read())
else:
    raws = raws_of(corpus, kind)
print(digest(raws, KINDS[kind]))
"""


def source_digest(corpus: str, kind: str, given: list[bytes] | None, where: Path) -> subprocess.Popen[str]:
    """The source's digest, computed beside this process (read with `source_result`); `given`: the
    messages already made (the attacked ones: attacking costs ten times the analysis)."""
    args = [corpus, kind]
    if given is not None:
        path = where / f"{corpus}-{kind}.msgpack"
        path.write_bytes(msgpack.packb(given))
        args.append(str(path))
    env = {**os.environ, compiled.PURE_ENV: "1"}
    return subprocess.Popen(
        [sys.executable, "-c", SOURCE_DIGEST, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip


def source_result(running: subprocess.Popen[str]) -> str:
    out, err = running.communicate(timeout=900)
    assert running.returncode == 0, err[-3000:]
    return out.splitlines()[-1]


# A test item for each corpus and kind: on two workers, trec07p-dev's three (attacking alone
# 36 s of them) no longer hold the end of the suite as one item of 64 s.
@requires_corpus
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("corpus", list(INDEXES))
def test_every_message_is_analyzed_as_before(corpus: str, kind: str, tmp_path: Path) -> None:
    if kind == "attacked":
        raws = raws_of(corpus, kind)
        given: list[bytes] | None = raws
    else:  # the source reads the corpus itself meanwhile
        raws, given = [], None
    # Compiled: the source too, the same messages, in a process of its own meanwhile.
    source = source_digest(corpus, kind, given, tmp_path) if compiled.COMPILED else None
    try:
        if given is None:
            raws = raws_of(corpus, kind)
        assert digest(raws, KINDS[kind]) == EXPECTED[(corpus, kind)]
    except BaseException:
        if source is not None:
            source.kill()
            source.wait()
        raise
    if source is not None:
        assert source_result(source) == EXPECTED[(corpus, kind)], "the source analyzes differently from the build"


if __name__ == "__main__":
    for name in INDEXES if len(sys.argv) < 2 else sys.argv[1:]:
        for kind, settings in KINDS.items():
            print(f'    ("{name}", "{kind}"): "{digest(raws_of(name, kind), settings)}",')
