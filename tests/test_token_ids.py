"""spamd/model/_token_ids.c hashes tokens to the bucket ids its pure-Python twin computes.

CI builds it (.ci/run) and fails here if it does not run; a checkout that runs as source
(spamd.runtime.compiled) skips, saying so. tests/test_analysis_digest.py compares the two
on every message of the corpora.
"""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.model import features
from spamd.runtime import compiled

NOT_BUILT = None if features.token_ids_in_c is not None else f"the tokens are hashed in Python: {compiled.REASON}"
pytestmark = pytest.mark.real_program(NOT_BUILT)

# Tokens of every length xxh3 treats apart (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer) and of
# every width of code point; lone surrogates are left to the test that wants them.
_TOKENS = st.lists(
    st.text(st.characters(codec="utf-8"), max_size=300) | st.text("ab9$", min_size=0, max_size=20),
    max_size=40,
)


def _in_c(tokens: list[str], hash_bits: int) -> np.ndarray:
    assert features.token_ids_in_c is not None
    out = np.empty(len(tokens), dtype=np.uint32)
    features.token_ids_in_c(tokens, (1 << hash_bits) - 1, out)
    return out


@settings(max_examples=400, deadline=None)
@given(_TOKENS, st.integers(min_value=1, max_value=32))
def test_the_ids_are_the_ones_python_computes(tokens: list[str], hash_bits: int) -> None:
    expected = [xxhash.xxh3_64_intdigest(token.encode()) & ((1 << hash_bits) - 1) for token in tokens]
    assert _in_c(tokens, hash_bits).tolist() == expected
    assert features.token_ids_in_python(tokens, hash_bits).tolist() == expected


def test_a_lone_surrogate_is_hashed_as_python_hashes_it() -> None:
    tokens = ["word", "x\ud800y", "€5"]
    with pytest.raises(UnicodeEncodeError):
        _in_c(tokens, 22)
    expected = sorted({xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) & (2**22 - 1) for t in tokens})
    assert features.featurize(tokens, 22).ids.tolist() == expected


def test_what_is_not_a_list_of_str_or_a_buffer_to_match_is_refused() -> None:
    assert features.token_ids_in_c is not None
    with pytest.raises(TypeError):
        features.token_ids_in_c(("a", "b"), 255, np.empty(2, dtype=np.uint32))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        features.token_ids_in_c(["a", b"b"], 255, np.empty(2, dtype=np.uint32))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="one uint32 per token"):
        features.token_ids_in_c(["a", "b"], 255, np.empty(3, dtype=np.uint32))
    with pytest.raises((TypeError, BufferError)):
        features.token_ids_in_c(["a"], 255, bytes(4))  # type: ignore[arg-type]  # read-only
