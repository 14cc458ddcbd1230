"""Feature families beside the tokenizer's tokens, switched in [model]: character n-grams and orthogonal sparse bigrams.

Each family is more tokens with a prefix of its own (`g:abcd`, `osb2:free money`),
hashed into the same count table as the tokenizer's, so `explain` names them by
their text and the stores keep them as they keep any token. A family's weight
multiplies its log-odds in the message's mean and counts in its denominator.
Pure functions: no model, no I/O. All off by default (ModelConfig).

One table for all, rather than a table per family: the families crowd the tokens'
buckets. (1-ROCA)% trec07p-dev / spamassassin, a table per family (2**22 buckets
each) -> the one table of 2**22 (scripts/accuracy/ablate_model.py, with and without
--family-tables), full feedback: osb-w0.3 0.0249 / 0.0739 -> 0.0276 / 0.0815,
cng4-w0.3 0.0183 / 0.0901 -> 0.0186 / 0.0908, osb+cng4-w0.3 0.0170 / 0.0773 ->
0.0188 / 0.0826 (in one table of 2**24: 0.0161 / 0.0787); errors-only feedback,
which trains far fewer messages, no cost: osb+cng4-w0.3 0.0234 / 0.0452 -> 0.0230 /
0.0457. Kept to one table so that every store, snapshot and explain handles a family
token as any token; with the bigrams on, a larger hash_bits buys the loss back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from spamd.config import ModelConfig
from spamd.mail.message import ParsedMessage
from spamd.mail.tokenize import EVIDENCE_FAMILIES, evidence_tokens, salad_tokens, words

NGRAM_PREFIX = "g:"
# Pairs of the body's words at distance 1..OSB_REACH (CRM114's OSB), among its first
# OSB_WORDS words, read from at most OSB_TEXT_CHARS characters of its text (the
# cap bounds the work on a long message; 500 words fit in it but for odd text).
OSB_REACH = 4
OSB_WORDS = 500
OSB_TEXT_CHARS = 16_000
# Each family: its tokens, and the weight of their log-odds.
Family = tuple[list[str], float]

# What a token is evidence of, for [model] evidence_weight (spamd.model.bayes.split_evidence):
# the words (the tokenizer's tokens and the n-gram families), the message's structure (the
# mail-evidence families and the authentication outcomes), or a claim among those: a domain
# or a name the message states and nothing proves, which may count toward spam only.
BODY, EVIDENCE, CLAIM = 0, 1, 2
CLAIM_PREFIXES = (
    "from-org:",
    "from-suffix:",
    "from-name-in-domain:",
    "from-name-claims:",
    "reply-to-org:",
    "return-path-org:",
    "claimed:dkim-org:",
    "link-org:",
    "link-text-names:",
)


def evidence_kind(token: str) -> int:
    """EVIDENCE, or CLAIM for a token of the mail-evidence families that names what the message claims."""
    return CLAIM if token.startswith(CLAIM_PREFIXES) else EVIDENCE


def kinds_of(words: int, evidence: list[str], more_words: int = 0) -> np.ndarray:
    """Per-token kinds of `words` words, then the `evidence` tokens, then `more_words` words (the n-gram families)."""
    kinds = np.zeros(words + len(evidence) + more_words, dtype=np.int8)  # BODY is 0
    if evidence:
        kinds[words : words + len(evidence)] = [evidence_kind(t) for t in evidence]
    return kinds


def count_settings(config: ModelConfig) -> dict[str, object]:
    """The settings that decide what the counts mean: kept with the model and checked at load (the weights are not)."""
    settings: dict[str, object] = {
        "stored_counts": config.stored_counts,
        "char_ngrams": config.char_ngrams,
        "ngram_chars": config.ngram_chars if config.char_ngrams else 0,
        "osb": config.osb,
    }
    # Only when some are on: a model stored before they existed was built with none.
    evidence = evidence_families(config)
    if evidence:
        settings["evidence"] = ",".join(evidence)  # a string: the same through JSON and msgpack
    if config.auth_outcomes:  # likewise only when on
        settings["auth_outcomes"] = True
    return settings


# The count settings of a model stored, or a record written, before they were kept: the
# defaults then, no family on. Not today's defaults, which may switch a family on.
UNRECORDED_COUNT_SETTINGS: dict[str, object] = {
    "stored_counts": "log",
    "char_ngrams": 0,
    "ngram_chars": 0,
    "osb": False,
}


def evidence_families(config: ModelConfig) -> tuple[str, ...]:
    """The mail-evidence families (spamd.mail.tokenize.EVIDENCE_FAMILIES) switched on in `config`, in their order."""
    return tuple(name for name in EVIDENCE_FAMILIES if getattr(config, name))


def evidence_in(settings: Mapping[str, object]) -> tuple[str, ...]:
    """The mail-evidence families a model's stored count settings name (none when it does not say)."""
    value = settings.get("evidence")
    return tuple(name for name in str(value).split(",") if name) if value else ()


def settings_that_differ(stored: Mapping[str, object], wanted: Mapping[str, object]) -> list[str]:
    """The count settings of `wanted` that `stored` holds otherwise, but for the mail-evidence families.

    Those only add tokens of their own prefixes: a model built without one holds no
    counts of its tokens, which is what it would hold had the family been on and seen
    nothing yet. So switching one on (or off) keeps every count's meaning, and the model
    learns the family from then on; every other setting changes what the counts mean.
    """
    return [key for key, value in wanted.items() if key != "evidence" and stored.get(key) != value]


@dataclass
class EvidenceHistory:
    """Since when a model learns each mail-evidence family it has on: family -> (first record's seq, time switched on).

    Seq 0 and time 0: since the model's first record, or since before this was kept.
    Not the counts (which need no change when a family is switched): what `spamctl stats`
    tells of them, kept with the model (snapshot, Redis).
    """

    since: dict[str, tuple[int, float]] = field(default_factory=dict)

    def follow(self, families: Sequence[str], seq: int, when: float) -> tuple[list[str], list[str]]:
        """Take `families` as the ones on from record `seq`: (those switched on, those switched off)."""
        on = [name for name in families if name not in self.since]
        off = [name for name in self.since if name not in families]
        for name in on:
            self.since[name] = (seq, when)
        for name in off:
            del self.since[name]
        return on, off

    def export(self) -> dict[str, list[float]]:
        return {name: [seq, when] for name, (seq, when) in self.since.items()}

    @classmethod
    def restore(cls, data: object, families: Sequence[str]) -> EvidenceHistory:
        """The history kept with a model whose count settings name `families` (a family it does not date: since 0)."""
        kept = data if isinstance(data, Mapping) else {}
        since: dict[str, tuple[int, float]] = {}
        for name in families:
            value = kept.get(name)
            ok = isinstance(value, (list, tuple)) and len(value) == 2
            since[name] = (int(value[0]), float(value[1])) if ok else (0, 0.0)  # type: ignore[index]
        return cls(since)

    def describe(self) -> list[dict[str, object]]:
        """For stats: each family on, the first record learned with it and when it was switched on (None: unknown)."""
        return [{"family": name, "since_seq": seq, "since": when or None} for name, (seq, when) in self.since.items()]


def is_weighted(config: ModelConfig) -> bool:
    """Whether a family switched on weighs other than 1 (then features carry weights; else none are made)."""
    return bool(config.char_ngrams and config.ngram_weight != 1.0) or (config.osb and config.osb_weight != 1.0)


def osb_tokens(body_words: list[str], reach: int = OSB_REACH) -> list[str]:
    """Word pairs at distance 1..reach, the distance in the token: "osb2:free money" for "free cash money"."""
    tokens: list[str] = []
    for d in range(1, reach + 1):
        prefix = f"osb{d}:"
        # Words d apart: d pairs fewer than words, so the shorter side ends the pairs.
        tokens += [prefix + a + " " + b for a, b in zip(body_words, body_words[d:], strict=False)]
    return tokens


def char_ngram_tokens(source: str, n: int) -> list[str]:
    """The distinct character n-grams of `source`, case and whitespace kept (each once: presence, not frequency)."""
    return [NGRAM_PREFIX + g for g in dict.fromkeys([source[i : i + n] for i in range(len(source) - n + 1)])]


def message_sources(msg: ParsedMessage) -> tuple[str, str]:
    """What the families read: the decoded headers as "name: value" lines, and the text parts joined."""
    return "\n".join(f"{name}: {value}" for name, value in msg.headers), "\n".join([*msg.texts, *msg.salad])


def families_of(head: str, text: str, config: ModelConfig) -> list[Family]:
    """The families switched on in `config`, each its tokens and weight; [] with the defaults."""
    found: list[Family] = []
    if config.osb:
        found.append((osb_tokens(words(text[:OSB_TEXT_CHARS])[:OSB_WORDS]), config.osb_weight))
    if config.char_ngrams:
        source = head[: config.ngram_chars]
        if len(source) < config.ngram_chars:
            source = (source + "\n" + text)[: config.ngram_chars]
        found.append((char_ngram_tokens(source, config.char_ngrams), config.ngram_weight))
    return found


def with_families(tokens: list[str], msg: ParsedMessage, config: ModelConfig) -> tuple[list[str], np.ndarray | None]:
    """The tokenizer's tokens with the families' after them, and a weight per token (None while every weight is 1).

    The mail-evidence families' tokens come first after the tokenizer's, weighing 1.
    The word salad's words (last of the tokenizer's) share [model] salad_tokens (`salad_weights`).
    With every family off and no salad capped, `tokens` itself: no work, the same features to the bit.
    """
    joined, weights, _ = with_families_and_kinds(tokens, msg, config)
    return joined, weights


Weighed = tuple[list[str], np.ndarray | None, np.ndarray | None]


def with_families_and_kinds(tokens: list[str], msg: ParsedMessage, config: ModelConfig) -> Weighed:
    """`with_families`, and each token's kind (BODY, EVIDENCE, CLAIM) while [model] evidence_weight scores the
    evidence apart (None otherwise: no work)."""
    capped = salad_weights(tokens, len(salad_tokens(msg)) if msg.salad else 0, config)
    evidence = evidence_families(config)
    words, found = len(tokens), []
    if evidence:  # weighed as the tokenizer's own tokens
        found = evidence_tokens(msg, evidence)
        tokens = tokens + found
        if capped is not None:
            capped = np.concatenate([capped, np.ones(len(found))])
    if not (config.osb or config.char_ngrams):
        return tokens, capped, kinds_of(words, found) if config.evidence_weight else None
    families = families_of(*message_sources(msg), config)
    joined, weights = join_families(tokens, families, config, capped)
    kinds = kinds_of(words, found, len(joined) - len(tokens)) if config.evidence_weight else None
    return joined, weights, kinds


def salad_weights(tokens: list[str], salad: int, config: ModelConfig) -> np.ndarray | None:
    """Weights for `tokens` whose last `salad` are the words of word salad: those words' distinct tokens share
    [model] salad_tokens between them, the others weigh 1; None while nothing is capped.

    A block of ordinary words appended to spam then adds at most salad_tokens tokens' worth of
    ham evidence to the mean, and a person's unpunctuated note is still scored by its words. A
    salad word that also occurs outside the salad weighs 1 (its bucket weighs as its heaviest token).
    """
    cap = config.salad_tokens
    if not cap or not salad:
        return None
    distinct = len(set(tokens[-salad:]))
    if distinct <= cap:
        return None
    weights = np.ones(len(tokens))
    weights[-salad:] = cap / distinct
    return weights


def join_families(
    tokens: list[str], families: list[Family], config: ModelConfig, weights: np.ndarray | None = None
) -> tuple[list[str], np.ndarray | None]:
    """`tokens` and the families' tokens as one list, with per-token weights when a weight is not 1
    (`weights`: those of `tokens`, None for 1 each)."""
    joined = tokens + [t for family, _ in families for t in family]
    if not is_weighted(config) and weights is None:
        return joined, None
    family_weights = np.repeat([w for _, w in families], [len(f) for f, _ in families])
    return joined, np.concatenate([np.ones(len(tokens)) if weights is None else weights, family_weights])


def token_weight(token: str, config: ModelConfig) -> float:
    """A token's family weight, told by its prefix (no tokenizer token has "g:" or "osbN:" in front)."""
    if token.startswith(NGRAM_PREFIX):
        return config.ngram_weight if config.char_ngrams else 1.0
    if token.startswith("osb") and token[3:4].isdigit() and token[4:5] == ":":
        return config.osb_weight if config.osb else 1.0
    return 1.0


def token_weights(tokens: list[str], config: ModelConfig) -> np.ndarray | None:
    """Per-token weights of a token list (for explain, which has only the tokens); None while every weight is 1."""
    if not is_weighted(config):
        return None
    return np.array([token_weight(t, config) for t in tokens], dtype=np.float64)
