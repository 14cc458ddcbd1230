"""The trainer: learn, correct and skip repeats through the ledger; every change journaled first.

A message trained again with the same label changes nothing; trained with the
other label it is moved (its old counts unlearned, the new ones learned) in one
journal record. The journal record is fsynced before the model changes and
before the caller hears the outcome, so an acknowledged training survives a
power cut. The trainer knows where an event came from only as a `source` tag.

A training may name a user (`user_name`, spamd/people/users.py): it then teaches that
user's layer and the shared model in one record, and the ledger holds one entry
per (user, message), so the same message trained by two people counts for each.

A new label that comes from no person's decision on that message (spamd's own filing
settled or autolearned, an evaluation's stream of labels: spamd.people.accuracy.NOT_A_PERSON)
is not learned when the message's score already says it by `[model] train_margin`
(thick-threshold training, `confidently_right`); the ledger does not hold it, so a later
correction learns it as new. A person's move, TELL, train or click is always learned.
"""

from __future__ import annotations

import time
from collections import Counter

from spamd.config import UsersConfig
from spamd.learning.classifier import Analyzed, score_as_delivered
from spamd.learning.outcomes import Outcome, left_unlearned
from spamd.model.bayes import Label, MultinomialNB
from spamd.model.families import count_settings
from spamd.people.users import UserLayers, user_ledger_key
from spamd.store import Ledger, Store, TrainingRecord, apply_record


class Trainer:
    def __init__(
        self, model: MultinomialNB, ledger: Ledger, store: Store | None, seq: int = 0, users: UserLayers | None = None
    ):
        self.model = model
        self.ledger = ledger
        self.users = users if users is not None else UserLayers(UsersConfig())
        self.store = store  # None: in-memory only (tests of the model alone)
        self.seq = seq
        # (source, outcome) -> count since start, for `spamctl stats`.
        self.events: Counter[tuple[str, str]] = Counter()

    def train(
        self, analyzed: Analyzed, label: Label, source: str, user: bool = True, user_name: str | None = None
    ) -> Outcome:
        """Make the model (and `user_name`'s layer) hold `analyzed` as `label`. `user=False` marks autolearn."""
        known = self.ledger.get(user_ledger_key(user_name, analyzed.key))
        if known is not None:
            known_label, known_by_user = known
            if known_label == label:
                if user and not known_by_user:
                    self._commit(analyzed, label, label, user, source, user_name)  # now a person's decision too
                return self._count(source, Outcome.REPEAT)
            if not user and known_by_user:
                return self._count(source, Outcome.DECLINED)
            self._commit(analyzed, label, known_label, user, source, user_name)
            return self._count(source, Outcome.CORRECTED)
        if left_unlearned(
            self.model.config, label, source,
            lambda: score_as_delivered(self.model, self.users, self.users.config, analyzed.features, user_name),
        ):  # fmt: skip
            return self._count(source, Outcome.CONFIDENT)
        self._commit(analyzed, label, None, user, source, user_name)
        return self._count(source, Outcome.LEARNED)

    def untrain(self, analyzed: Analyzed, source: str, user_name: str | None = None) -> Outcome:
        known = self.ledger.get(user_ledger_key(user_name, analyzed.key))
        if known is None:
            return self._count(source, Outcome.NOT_TRAINED)
        self._commit(analyzed, None, known[0], True, source, user_name)
        return self._count(source, Outcome.UNLEARNED)

    def label_of(self, key: bytes, user_name: str | None = None) -> Label | None:
        known = self.ledger.get(user_ledger_key(user_name, key))
        return None if known is None else known[0]

    def _commit(
        self, analyzed: Analyzed, label: Label | None, previous: Label | None, user: bool, source: str,
        user_name: str | None,
    ) -> None:  # fmt: skip
        record = TrainingRecord(
            self.seq + 1,
            analyzed.key,
            label,
            previous,
            user,
            source,
            analyzed.features,
            time.time(),
            self.model.config.hash_bits,
            user_name,
            count_settings(self.model.config),
            analyzed.senders if user_name is not None else (),
        )
        if self.store is not None:
            self.store.append(record)  # raises StoreError and changes nothing if the disk refuses
        self.seq = record.seq
        if label == previous:
            self.ledger.apply(record)  # only the user flag changes
        else:
            apply_record(self.model, self.ledger, record, self.users)

    def _count(self, source: str, outcome: Outcome) -> Outcome:
        self.events[(source, outcome.value)] += 1
        return outcome
