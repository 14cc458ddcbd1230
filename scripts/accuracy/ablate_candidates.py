"""The candidates scripts/accuracy/ablate_model.py measures: each a set of [model] settings, some with a
prototype's switch that only the script has (a learned weight, calibration, the identities alone)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    name: str
    model: dict[str, object] = field(default_factory=dict)  # ModelConfig overrides
    # Learn evidence_weight online at this rate (0: fixed): a prototype of a learned weight.
    weight_rate: float = 0.0
    # The claims (kind CLAIM) among the words instead of apart: a prototype.
    claims_as_words: bool = False
    # Online Platt scaling of the score at this rate (0: off), fitted on the labels the feedback gives: a prototype.
    calibrate: float = 0.0
    # Platt scaling refitted by Newton's method over the last this many labels (0: off): a prototype.
    calibrate_window: int = 0
    # Of the authentication outcomes, only the verified identities (auth:aligned:, auth:signer:,
    # auth:sealer:): no token that nearly every message carries. A prototype.
    identities_only: bool = False
    # A token for mail whose authenticated From is a listed well-known sender (rspamd's DMARC and
    # SPF+DKIM lists), its bucket seeded with this many ham counts (0: off). A prototype.
    listed_prior: float = 0.0
    # The claims' (kind CLAIM) weight in the evidence's own mean (1: as the other evidence). A prototype.
    claim_weight: float = 1.0


CANDIDATES = [
    Candidate("default"),
    Candidate("binary", {"stored_counts": "binary"}),
    Candidate("log2", {"stored_counts": "log2"}),
    Candidate("osb", {"osb": True}),
    Candidate("osb-w0.3", {"osb": True, "osb_weight": 0.3}),
    Candidate("cng4", {"char_ngrams": 4}),
    Candidate("cng4-w0.3", {"char_ngrams": 4, "ngram_weight": 0.3}),
    Candidate("cng3-w0.3", {"char_ngrams": 3, "ngram_weight": 0.3}),
    Candidate("cng5-w0.3", {"char_ngrams": 5, "ngram_weight": 0.3}),
    Candidate("osb+cng4-w0.3", {"osb": True, "osb_weight": 0.3, "char_ngrams": 4, "ngram_weight": 0.3}),
    # The same in four times the buckets: the families' collisions with the tokens, thinned.
    Candidate(
        "osb+cng4-w0.3-bits24", {"osb": True, "osb_weight": 0.3, "char_ngrams": 4, "ngram_weight": 0.3, "hash_bits": 24}
    ),
    Candidate("alpha0.1", {"alpha": 0.1}),
    Candidate("evidence6", {"evidence_prior": 6.0}),
    Candidate("evidence9", {"evidence_prior": 9.0}),
    Candidate("alpha0.1-evidence6", {"alpha": 0.1, "evidence_prior": 6.0}),
    # The table's size: more collisions in fewer buckets (the default is 22: 32 MiB).
    Candidate("hash_bits16", {"hash_bits": 16}),
    Candidate("hash_bits18", {"hash_bits": 18}),
    Candidate("hash_bits20", {"hash_bits": 20}),
    Candidate("hash_bits24", {"hash_bits": 24}),
    # Estimation and the training rule (docs/accuracy.md "Feature families and estimation").
    Candidate("wnorm", {"weight_normalization": True}),
    Candidate("prior", {"class_prior": True}),
    Candidate("wnorm+prior", {"weight_normalization": True, "class_prior": True}),
    # The training rule: [model] train_margin (the default is 2; inf learns every message).
    Candidate("margin-inf", {"train_margin": math.inf}),
    Candidate("margin0.5", {"train_margin": 0.5}),
    Candidate("margin1", {"train_margin": 1.0}),
    Candidate("margin1.5", {"train_margin": 1.5}),
    Candidate("margin3", {"train_margin": 3.0}),
    Candidate("margin4", {"train_margin": 4.0}),
    # The score over the most decisive tokens only ([model] decisive_tokens; docs/accuracy.md "First contact").
    Candidate("decisive30", {"decisive_tokens": 30}),
    Candidate("decisive75", {"decisive_tokens": 75}),
    Candidate("decisive150", {"decisive_tokens": 150}),
    # A run of word salad weighing at most this many tokens ([model] salad_tokens; docs/accuracy.md "First contact").
    Candidate("salad0", {"salad_tokens": 0.0}),
    Candidate("salad2", {"salad_tokens": 2.0}),
    Candidate("salad3", {"salad_tokens": 3.0}),
    Candidate("salad5", {"salad_tokens": 5.0}),
    Candidate("salad10", {"salad_tokens": 10.0}),
    Candidate("salad20", {"salad_tokens": 20.0}),
    Candidate("salad40", {"salad_tokens": 40.0}),
    # The mail-evidence families (spamd/mail/senders_claimed.py, links.py, attachments.py, bulk.py).
    # sender_claims is on by default: "sender_claims" and its pairs were measured when it
    # was not (they now equal the defaults and the other family); no-sender_claims is without.
    Candidate("sender_claims", {"sender_claims": True}),
    Candidate("no-sender_claims", {"sender_claims": False}),
    Candidate("link_targets", {"link_targets": True}),
    Candidate("attachment_kinds", {"attachment_kinds": True}),
    Candidate("bulk_marks", {"bulk_marks": True}),
    Candidate(
        "evidence-all", {"sender_claims": True, "link_targets": True, "attachment_kinds": True, "bulk_marks": True}
    ),
    Candidate("sender_claims+bulk_marks", {"sender_claims": True, "bulk_marks": True}),
    Candidate("sender_claims+link_targets", {"sender_claims": True, "link_targets": True}),
    Candidate("sender_claims+attachment_kinds", {"sender_claims": True, "attachment_kinds": True}),
    # Sender authentication's outcomes as tokens (spamd/mail/auth/outcomes.py).
    Candidate("auth_outcomes", {"auth_outcomes": True}),
    # The structural evidence scored apart from the words ([model] evidence_weight; docs/accuracy.md "Evidence apart").
    *[
        Candidate(f"apart{w}{'-' + name if name else ''}", {"evidence_weight": w, **on})
        for w in (0.25, 0.5, 1.0, 2.0)
        for name, on in [
            ("", {}),
            ("auth", {"auth_outcomes": True}),
            ("all", {"auth_outcomes": True, "link_targets": True, "attachment_kinds": True, "bulk_marks": True}),
        ]
    ],
    Candidate("all", {"auth_outcomes": True, "link_targets": True, "attachment_kinds": True, "bulk_marks": True}),
    # The evidence among the words, as before it was scored apart by default.
    Candidate("words-only", {"evidence_weight": 0.0}),
    # The evidence's mean over more tokens that count 0: a message with little evidence says less.
    *[
        Candidate(f"learned{rate}-auth", {"evidence_weight": 0.25, "auth_outcomes": True}, weight_rate=rate)
        for rate in (0.01, 0.05)
    ],
    Candidate("learned0.01", {"evidence_weight": 0.25}, weight_rate=0.01),
    *[
        Candidate(f"apart{w}-auth-noclaims", {"evidence_weight": w, "auth_outcomes": True}, claims_as_words=True)
        for w in (0.25, 0.5)
    ],
    Candidate(
        "apart0.5-all-noclaims",
        {
            "evidence_weight": 0.5,
            "auth_outcomes": True,
            "link_targets": True,
            "attachment_kinds": True,
            "bulk_marks": True,
        },
        claims_as_words=True,
    ),  # fmt: skip
    *(Candidate(f"platt{rate}", {"evidence_weight": 0.0}, calibrate=rate) for rate in (0.002, 0.01)),
    *(Candidate(f"plattw{n}", {"evidence_weight": 0.0}, calibrate_window=n) for n in (200, 1000)),
    *(Candidate(f"apart0.25-plattw{n}", {"evidence_weight": 0.25}, calibrate_window=n) for n in (200, 1000)),
    *(Candidate(f"apart0.25-platt{rate}", {"evidence_weight": 0.25}, calibrate=rate) for rate in (0.002, 0.01)),
    *(
        Candidate(f"apart{w}-p{p}", {"evidence_weight": w, "evidence_apart_prior": p})
        for w in (0.25, 0.5)
        for p in (15, 30, 60)
    ),
    *(
        Candidate(f"apart0.5-auth-p{p}", {"evidence_weight": 0.5, "evidence_apart_prior": p, "auth_outcomes": True})
        for p in (15, 30, 60)
    ),
    Candidate("apart0.5-auth-n8", {"evidence_weight": 0.5, "evidence_neutral": 8.0, "auth_outcomes": True}),
    Candidate("apart1.0-auth-n8", {"evidence_weight": 1.0, "evidence_neutral": 8.0, "auth_outcomes": True}),
    Candidate("identities", {"auth_outcomes": True}, identities_only=True),
    *(Candidate(f"claimw{w}", claim_weight=w) for w in (2.0, 3.0)),
    Candidate("identities-apart0.5", {"auth_outcomes": True, "evidence_weight": 0.5}, identities_only=True),
    *(
        Candidate(f"identities-p{p}", {"auth_outcomes": True, "evidence_apart_prior": p}, identities_only=True)
        for p in (5, 10, 15)
    ),
    Candidate("identities-apart0.35", {"auth_outcomes": True, "evidence_weight": 0.35}, identities_only=True),
    Candidate("apart0.35", {"evidence_weight": 0.35}),
    *(Candidate(f"listed{k}", {}, listed_prior=k) for k in (0.001, 5, 20, 100)),
    *(Candidate(f"listed{k}-ids", {"auth_outcomes": True}, identities_only=True, listed_prior=k) for k in (5, 20)),
]


def main() -> None:
    import argparse

    argparse.ArgumentParser(
        description="List the candidates ablate_model.py --candidates takes: each name and what it sets."
    ).parse_args()
    plain = Candidate("")
    for candidate in CANDIDATES:
        switches = {
            name: value
            for name, value in vars(candidate).items()
            if name not in ("name", "model") and value != getattr(plain, name)
        }
        print(candidate.name, candidate.model or "", switches or "")


if __name__ == "__main__":
    main()
