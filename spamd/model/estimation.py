"""Estimation choices beside the plain log-odds, switched in [model]: Rennie's weight normalization and the class prior.

Pure functions over count arrays and class totals; both switches are off by default
and then none of this runs (spamd.model.bayes takes its plain path, to the bit). Does not
hold the model: spamd.model.bayes keeps the per-class log masses these read.

Weight normalization (Rennie et al. 2003, WCNB): each class's vector of log P(t|c)
over the buckets seen is divided by its L1 norm before the two are subtracted, so a
class whose estimates are spread over more tokens does not dominate. Both are then
multiplied by the mean of the two norms: with equal norms the log-odds are exactly the
plain ones, so the thresholds keep their meaning (one common factor moves no ranking).

The norm needs every seen bucket's log count. It is kept as a per-class integer
"log mass" L_c = sum over all buckets of round(log(1 + n_c/alpha) * LOG_MASS_SCALE)
(0 for an empty bucket), updated by learn and unlearn from the buckets they touch:
integers, so unlearning restores it exactly and the running sum equals a recount.
Then, with V buckets seen and Z_c = N_c + alpha * V the smoothed class total,
||log P(.|c)||_1 = sum over seen t of (log Z_c - log(n_ct + alpha))
                 = V * (log Z_c - log alpha) - L_c / LOG_MASS_SCALE.
"""

from __future__ import annotations

import math

import numpy as np

# Fixed point of the log masses: 2**-30 per bucket is far below any score's precision,
# and 2**28 buckets of counts up to 2**32 still sum within an int64.
LOG_MASS_SCALE = float(1 << 30)


def log_mass(counts: np.ndarray, alpha: float) -> int:
    """Sum of round(log(1 + n / alpha) * LOG_MASS_SCALE) over `counts` (0 for n = 0), exactly, as an int."""
    values = np.rint(np.log1p(np.asarray(counts, dtype=np.float64) / alpha) * LOG_MASS_SCALE).astype(np.int64)
    return int(np.add.reduce(values, dtype=np.int64))


def log_masses(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Both classes' log masses of a (2, n) count array (the whole model, or a user's layer): int64[2]."""
    return np.array([log_mass(counts[0], alpha), log_mass(counts[1], alpha)], dtype=np.int64)


def class_norms(
    masses: np.ndarray, smoothed_totals: tuple[float, float], distinct: int, alpha: float
) -> tuple[float, float]:
    """||log P(.|c)||_1 over the seen buckets, (ham, spam), from the log masses and the smoothed class totals."""
    seen = max(distinct, 1)
    log_alpha = math.log(alpha)
    return tuple(  # type: ignore[return-value]
        max(seen * (math.log(total) - log_alpha) - int(mass) / LOG_MASS_SCALE, 1e-12)
        for mass, total in zip(masses, smoothed_totals, strict=True)
    )


def normalized_log_odds(
    smoothed: np.ndarray, ham_total: float, spam_total: float, masses: np.ndarray, distinct: int, alpha: float
) -> np.ndarray:
    """Per bucket w_spam - w_ham, w_c = log P(t|c) * mean norm / ||log P(.|c)||_1 (`smoothed`: counts + alpha)."""
    ham_norm, spam_norm = class_norms(masses, (ham_total, spam_total), distinct, alpha)
    mean = (ham_norm + spam_norm) / 2
    log_p = np.log(smoothed)
    log_p[0] -= math.log(ham_total)
    log_p[1] -= math.log(spam_total)
    return log_p[1] * (mean / spam_norm) - log_p[0] * (mean / ham_norm)


def prior_log_odds(doc_totals: np.ndarray) -> float:
    """log(N_spam / N_ham) of the messages learned: what the class prior adds to the message's log-odds sum."""
    return math.log(float(doc_totals[1]) / float(doc_totals[0]))
