"""spamd/model/_token_ids.c: tokens hashed to bucket ids (xxh3 of their UTF-8, masked) in one call of C."""

import numpy as np

def token_ids(tokens: list[str], mask: int, out: np.ndarray) -> None: ...
