"""The one path from raw bytes to features and a score, shared by the daemon, spamctl and eval.

bytes -> strip spamd's own headers -> parse (capped) -> tokens -> hashed features -> score.
It does not learn: `spamd.training.Trainer` does, through the journal and ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from spamd.config import Config
from spamd.message import parse_message, strip_own_headers, stripped_message_key
from spamd.model import Features, MultinomialNB, Score, featurize
from spamd.tokenize import tokenize


@dataclass(frozen=True, slots=True)
class Analyzed:
    """A message ready to score or learn: its ledger key and its features."""

    key: bytes
    features: Features


class Classifier:
    def __init__(self, config: Config, model: MultinomialNB):
        self.config = config
        self.model = model

    def tokens(self, raw: bytes) -> list[str]:
        return tokenize(parse_message(strip_own_headers(raw), self.config.parser))

    def analyze(self, raw: bytes) -> Analyzed:
        stripped = strip_own_headers(raw)  # once: for the key and for the tokens
        tokens = tokenize(parse_message(stripped, self.config.parser))
        return Analyzed(stripped_message_key(stripped), featurize(tokens, self.config.model.hash_bits))

    def score(self, analyzed: Analyzed) -> Score:
        return self.model.score(analyzed.features)
