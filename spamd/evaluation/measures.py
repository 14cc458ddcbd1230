"""The TREC spam track's measures of a ranking: the ROC curve, (1-ROCA)%, hm% at sm%, lam%.

They follow Cormack & Lynam, "TREC 2005 Spam Track Overview", and take only scores and gold
labels, so that every evaluation (spamctl eval, the scripts' streams) measures alike.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np


def roc_points(scores: np.ndarray, is_spam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC curve as (hm rate, sm rate) over every threshold, from 'all spam' to 'all ham'."""
    order = np.argsort(-scores, kind="mergesort")
    s, y = scores[order], is_spam[order]
    distinct = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each tie group
    spam_caught = np.cumsum(y)[distinct]
    ham_flagged = np.cumsum(~y)[distinct]
    n_spam, n_ham = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    hm = np.r_[0.0, ham_flagged / n_ham]
    sm = np.r_[1.0, 1.0 - spam_caught / n_spam]
    return hm, sm


def one_minus_roca(scores: np.ndarray, is_spam: np.ndarray) -> float:
    """Area above the ROC curve, in percent (ties count half, as the Mann-Whitney statistic)."""
    n_spam, n_ham = int(is_spam.sum()), int((~is_spam).sum())
    if n_spam == 0 or n_ham == 0:
        return float("nan")
    ranks = _average_ranks(scores)
    auc = (ranks[is_spam].sum() - n_spam * (n_spam + 1) / 2) / (n_spam * n_ham)
    return 100.0 * (1.0 - auc)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    boundaries = np.r_[0, np.flatnonzero(np.diff(sorted_values)) + 1, len(values)]
    for start, end in pairwise(boundaries):
        ranks[order[start:end]] = (start + end + 1) / 2.0
    return ranks


def hm_at_sm(scores: np.ndarray, is_spam: np.ndarray, target_sm: float = 0.001) -> float:
    """Ham misclassification % at the threshold where the spam misclassification is target_sm."""
    if not is_spam.any() or is_spam.all():
        return float("nan")
    hm, sm = roc_points(scores, is_spam)
    # sm falls from 1 to 0 as hm rises; interpolate hm at sm = target (np.interp wants rising x).
    return 100.0 * float(np.interp(target_sm, sm[::-1], hm[::-1]))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def lam(hm: float, sm: float, n_ham: int, n_spam: int) -> float:
    """Logistic average misclassification, in percent. A zero rate counts as half an error."""
    hm = min(max(hm, 0.5 / max(n_ham, 1)), 1 - 0.5 / max(n_ham, 1))
    sm = min(max(sm, 0.5 / max(n_spam, 1)), 1 - 0.5 / max(n_spam, 1))
    z = (_logit(hm) + _logit(sm)) / 2
    return 100.0 / (1.0 + math.exp(-z))
