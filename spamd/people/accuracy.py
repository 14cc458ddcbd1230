"""Live accuracy: spamd's verdict on each message it scored, and what people's later moves say of it.

spamd remembers the verdict it gave each message it scored (by the ledger's
message key, bounded like the ledger). When a person later trains that message
(a move into or out of Junk, `spamctl train`, a spamc TELL) their label is
compared with the verdict: into Junk after ham or unsure is a missed spam or an
unsure resolved as spam, out of Junk after spam is a false positive, and so on.
The first person's judgement of a message is the one counted. Counts are kept in
per-day buckets (UTC days, the day the person acted) so `spamctl stats` can show
the last day, week and month, and as all-time totals for Prometheus.

Pure state with an injected clock: no I/O. The Engine persists it in snapshots and
re-derives judgements and training volume from replayed journal records, so what
a crash loses is only the verdicts (and scored counts) since the last snapshot.
Autolearn, settled mail (what people left in place) and evaluation are not a
person's verdict and are never judged here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from spamd.model.bayes import Label, Verdict

# Ways a message comes in; the label of `spamd_messages_scored_total`.
WAYS_IN = ("smtp", "lmtp", "milter", "spamc", "maildir")
# What a person's judgement says of spamd's verdict.
MISSED_SPAM = "missed_spam"  # spamd said ham, the person says spam
FALSE_POSITIVE = "false_positive"  # spamd said spam, the person says ham: the costly error
UNSURE_SPAM = "unsure_resolved_spam"
UNSURE_HAM = "unsure_resolved_ham"
AGREED = "agreed"  # the person's label is spamd's verdict
JUDGEMENTS = (MISSED_SPAM, FALSE_POSITIVE, UNSURE_SPAM, UNSURE_HAM, AGREED)
# Training sources that are not a person's decision (live accuracy leaves them out; the
# trainer's thick threshold, [model] train_margin, applies to them alone).
NOT_A_PERSON = frozenset({"autolearn", "settled", "eval"})

DAY_S = 86400
MAX_DAYS = 400
WINDOWS = {"day": 1, "week": 7, "month": 30}

_VERDICT_CODE = {Verdict.HAM: 0, Verdict.SPAM: 1, Verdict.UNSURE: 2}
_CODE_VERDICT = {v: k for k, v in _VERDICT_CODE.items()}
_JUDGED_BIT = 4


def judgement(verdict: Verdict, label: Label) -> str:
    """What a person's `label` says of spamd's `verdict`."""
    if verdict is Verdict.UNSURE:
        return UNSURE_SPAM if label == Label.SPAM else UNSURE_HAM
    if verdict is Verdict.HAM and label == Label.SPAM:
        return MISSED_SPAM
    if verdict is Verdict.SPAM and label == Label.HAM:
        return FALSE_POSITIVE
    return AGREED


def is_person(source: str, user: bool) -> bool:
    """Whether a training event is a person's verdict (moves, spamctl, spamc TELL), not autolearn, settled mail or eval."""
    return user and source not in NOT_A_PERSON


class LiveAccuracy:
    """Verdict memory, per-day buckets and all-time totals; mutators return what they counted.

    Does not decide what a move means (the Maildir watcher does) nor persist itself.
    """

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.time, max_days: int = MAX_DAYS):
        self.max_entries = max_entries
        self.clock = clock
        self.max_days = max_days
        self._verdicts: dict[bytes, int] = {}  # key -> verdict code | judged bit
        self.days: dict[int, Counter[str]] = {}
        # All time: "scored:<way_in>:<verdict>", "judged:<judgement>", "trained:<label>".
        self.totals: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._verdicts)

    def _bucket(self, when: float | None) -> Counter[str]:
        day = int((self.clock() if when is None else when) // DAY_S)
        bucket = self.days.get(day)
        if bucket is None:
            bucket = self.days[day] = Counter()
            if len(self.days) > self.max_days:
                for old in sorted(self.days)[: len(self.days) - self.max_days]:
                    del self.days[old]
        return bucket

    # ------------------------------------------------------------ events

    def scored(self, key: bytes, verdict: Verdict, way_in: str) -> None:
        """spamd gave `verdict` to the message `key` (delivered, or answered to the caller)."""
        self._verdicts.pop(key, None)  # re-insert: most recent last, a fresh judgement
        self._verdicts[key] = _VERDICT_CODE[verdict]
        if len(self._verdicts) > self.max_entries * 1.05 + 16:
            self._verdicts = dict(list(self._verdicts.items())[-self.max_entries :])
        bucket = self._bucket(None)
        bucket["scored"] += 1
        bucket[f"scored:{verdict.value}"] += 1
        self.totals[f"scored:{way_in}:{verdict.value}"] += 1

    def judged(self, key: bytes, label: Label, when: float | None = None) -> str | None:
        """A person says `key` is `label`: the judgement counted, or None (not scored, or judged before)."""
        code = self._verdicts.get(key)
        if code is None or code & _JUDGED_BIT:
            return None
        self._verdicts[key] = code | _JUDGED_BIT
        kind = judgement(_CODE_VERDICT[code & 3], label)
        self._bucket(when)[kind] += 1
        self.totals[f"judged:{kind}"] += 1
        return kind

    def trained(self, label: Label, when: float | None = None) -> None:
        """The model learned a message as `label` (new or corrected): the training volume."""
        self._bucket(when)[f"trained:{label}"] += 1
        self.totals[f"trained:{label}"] += 1

    def verdict_of(self, key: bytes) -> Verdict | None:
        code = self._verdicts.get(key)
        return None if code is None else _CODE_VERDICT[code & 3]

    # ------------------------------------------------------------ views

    def window(self, days: int) -> dict[str, Any]:
        """Counts and rates over the last `days` UTC days, today included."""
        today = int(self.clock() // DAY_S)
        total: Counter[str] = Counter()
        for day in range(today - days + 1, today + 1):
            total.update(self.days.get(day, ()))
        scored = total["scored"]
        counts = {kind: total[kind] for kind in JUDGEMENTS}
        return {
            "days": days,
            "scored": scored,
            "scored_by_verdict": {v.value: total[f"scored:{v.value}"] for v in Verdict},
            **counts,
            # Rates per message scored in the window (None when nothing was scored).
            "rates": {kind: (None if not scored else counts[kind] / scored) for kind in JUDGEMENTS},
            "trained_spam": total["trained:spam"],
            "trained_ham": total["trained:ham"],
        }

    def summary(self) -> dict[str, Any]:
        return {
            **{name: self.window(days) for name, days in WINDOWS.items()},
            "verdicts_remembered": len(self._verdicts),
            "totals": dict(self.totals),
        }

    def per_day(self) -> list[dict[str, Any]]:
        """Every day from the oldest kept to today, as `{"day": "YYYY-MM-DD", counts...}` (quiet days empty)."""
        if not self.days:
            return []
        out = []
        for day in range(min(self.days), max(max(self.days), int(self.clock() // DAY_S)) + 1):
            row = dict(self.days.get(day, {}))
            out.append({"day": time.strftime("%Y-%m-%d", time.gmtime(day * DAY_S)), **row})
        return out

    # ------------------------------------------------------------ persistence

    def export(self) -> dict[str, Any]:
        keys = b"".join(self._verdicts)
        return {
            "keys": keys,
            "values": bytes(self._verdicts.values()),
            "days": {str(day): dict(bucket) for day, bucket in self.days.items()},
            "totals": dict(self.totals),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Take the state an `export` made (from a snapshot); an empty dict is a fresh start."""
        if not data:
            return
        keys, values = bytes(data["keys"]), bytes(data["values"])
        if len(keys) != 16 * len(values):
            raise ValueError("live accuracy keys and values differ in length")
        codes = np.frombuffer(values, dtype=np.uint8)
        if len(codes) and int(codes.max()) > (_JUDGED_BIT | 3):
            raise ValueError("live accuracy verdict code out of range")
        self._verdicts = {keys[16 * i : 16 * i + 16]: int(v) for i, v in enumerate(values)}
        self.days = {
            int(day): Counter({str(k): int(v) for k, v in bucket.items()}) for day, bucket in data["days"].items()
        }
        self.totals = Counter({str(k): int(v) for k, v in data["totals"].items()})
