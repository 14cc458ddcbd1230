"""What a training did (`Outcome`), and the thick-threshold rule every store applies before learning a label.

Shared by the local trainer (spamd.engine.trainer) and the Redis store's, so both
answer the same outcome for the same history. It learns nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from spamd.config import ModelConfig
from spamd.model.bayes import Label, Score, Verdict
from spamd.people.accuracy import NOT_A_PERSON


class Outcome(str, Enum):  # noqa: UP042  StrEnum would change what str() and format() of a member print (3.11: the value, not Class.NAME)
    LEARNED = "learned"  # new to the model
    CORRECTED = "corrected"  # was trained with the other label; moved
    REPEAT = "skipped_repeat"  # already trained this way; nothing changed
    UNLEARNED = "unlearned"  # removed from the model
    NOT_TRAINED = "not_trained"  # untrain of a message the model does not hold
    DECLINED = "declined"  # autolearn that would override a person's decision
    CONFIDENT = "skipped_confident"  # no person's label, new, already scored this way by train_margin: not learned


def left_unlearned(config: ModelConfig, label: Label, source: str, score: Callable[[], Score | None]) -> bool:
    """Whether the thick threshold leaves a new label: no person's (NOT_A_PERSON), and `score()`, the message's
    score now as its user's mail is scored, files it that way by [model] train_margin.

    `score` is called only when the rule can apply; it answers None where it does not after all
    (a store that finds the message already trained).
    """
    margin = config.train_margin
    if margin == math.inf or source not in NOT_A_PERSON:
        return False
    now = score()
    return now is not None and confidently_right(now, label, margin)


def confidently_right(score: Score, label: Label, margin: float) -> bool:
    """Whether thick-threshold training leaves a message: its verdict is `label`, by at least `margin`.

    [model] train_margin's measurements are in spamd.config.sections.
    """
    return score.verdict is (Verdict.SPAM if label == Label.SPAM else Verdict.HAM) and abs(score.log_odds) >= margin
