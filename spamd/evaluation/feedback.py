"""Who labels which message, and when: the feedback protocols that `spamctl eval` runs.

TREC's immediate full feedback trains every message with its gold label right
after it is scored. People do not: they move a message only when spamd filed
it wrongly, later, and not always; what they leave in place is a label too
(settled mail). A `Protocol` turns one scored message into the training events
it causes, each due after some number of further messages, so the evaluation
can replay a stream the way the daemon would live it. It decides nothing about
how a message is scored or learned: the caller applies the events to the real
trainer.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass, field

from spamd.model.bayes import Label, Verdict

FEEDBACKS = ("full", "errors", "people")

# Sources of the training events, as the daemon names them in logs, metrics and stats.
PERSON = "eval"  # what a person's move would be (full, errors, a correction in people)
AUTOLEARN = "autolearn"
SETTLED = "settled"


@dataclass(frozen=True)
class People:
    """How the simulated owner of a mailbox treats spamd's filing (probabilities; delays in messages).

    Defaults: people look at their inbox every day and at Junk seldom, so missed
    spam is corrected more often than ham lost in Junk; they read most ham and
    delete most spam they do not bother to move.
    """

    correct_missed_spam: float = 0.7  # spam filed in INBOX, moved to Junk
    rescue_lost_ham: float = 0.4  # ham filed in Junk, moved back out
    sort_unsure: float = 0.5  # an Unsure message moved to where it belongs
    delete_missed_spam: float = 0.7  # of the missed spam left in INBOX: deleted, not left read
    read_ham: float = 0.9  # ham in INBOX opened (the Maildir S flag): what settled learning needs
    mean_delay: float = 50.0  # messages scored before a correction, on average (exponential)
    seed: int = 1


@dataclass(frozen=True)
class Protocol:
    """One evaluation protocol: whose labels arrive, when, and what the daemon learns by itself."""

    feedback: str = "full"
    delay: int = 0  # full / errors: a label arrives after this many more messages were scored
    autolearn: bool = False  # learn confident verdicts at delivery, as `[maildir] autolearn`
    settled: bool = False  # learn what is left in place, as `[maildir] settle_after`
    settle_after: int = 1000  # messages scored before a message left in place counts as settled
    # Only a verdict this far from undecided (|normalized log-odds|) is autolearned or
    # settled: spamd's mistakes lie near its thresholds, and these learn them uncorrected.
    autolearn_margin: float = 0.0
    settle_margin: float = 0.0
    # The first `history` messages of the stream stand for the mail already in the
    # mailboxes at the first start: not scored; with settled learning on, learned at
    # once with the label of the folder they lie in (the person filed them).
    history: int = 0
    # First contact: the first `train_first` messages are learned with their gold labels
    # and not scored; the rest are scored and nothing more is learned (no feedback,
    # autolearn or settling), as a model trained with `spamctl train` meets a new stream.
    train_first: int = 0
    people: People = field(default_factory=People)

    def __post_init__(self) -> None:
        if self.feedback not in FEEDBACKS:
            raise ValueError(f"feedback {self.feedback!r}: expected one of {', '.join(FEEDBACKS)}")
        if min(self.delay, self.settle_after, self.history, self.train_first) < 0:
            raise ValueError("delay, settle_after, history and train_first are numbers of messages, at least 0")

    def trainer_source(self, source: str) -> str:
        """The source the trainer is told for an event's `source`.

        Under errors and people a person's label is a move, which the daemon always learns
        ("person": spamd.engine.trainer's thick threshold is for labels no person gave message by
        message); under full feedback every message's label is, as TREC gives it (PERSON).
        """
        return "person" if source == PERSON and self.feedback != "full" else source

    def describe(self) -> str:
        """A short name for reports: only what changes the run (settled learning of spamd's own filing
        with an infinite margin learns nothing, so it is not named)."""
        if self.train_first:
            return f"train first {self.train_first}, then score only"
        parts = [self.feedback]
        if self.history:
            parts.append(f"history {self.history}" + (" settled" if self.settled else ""))
        if self.delay:
            parts.append(f"delay {self.delay}")
        if self.autolearn:
            parts.append("autolearn" + (f" margin {self.autolearn_margin:g}" if self.autolearn_margin else ""))
        if self.settled and self.settle_margin != math.inf:
            parts.append(
                f"settled after {self.settle_after}" + (f" margin {self.settle_margin:g}" if self.settle_margin else "")
            )
        return ", ".join(parts)


@dataclass(frozen=True, order=True, slots=True)
class Event:
    """A training event due once `due` messages have been scored in all."""

    due: int
    order: int  # ties keep the order the events were made in
    message: int = field(compare=False)  # the message's place in the stream
    label: Label = field(compare=False)
    source: str = field(compare=False)
    person: bool = field(compare=False)  # a person's decision (wins over autolearn and settled)


class Feedback:
    """The events a protocol makes of each scored message, released in order as the stream advances."""

    def __init__(self, protocol: Protocol):
        self.protocol = protocol
        self._rng = random.Random(protocol.people.seed)
        self._pending: list[Event] = []
        self._made = 0
        self._open: Counter[int] = Counter()  # message -> its events not yet released

    def _add(self, due: int, message: int, label: Label, source: str, person: bool) -> None:
        self._made += 1
        heapq.heappush(self._pending, Event(due, self._made, message, label, source, person))
        self._open[message] += 1

    def waits_for(self, message: int) -> bool:
        """Whether an event for this message is still to be released (its analysis must be kept)."""
        return self._open[message] > 0

    def due(self, scored: int) -> list[Event]:
        """The events due now that `scored` messages have been scored, in order."""
        out = []
        while self._pending and self._pending[0].due <= scored:
            event = heapq.heappop(self._pending)
            self._open[event.message] -= 1
            if not self._open[event.message]:
                del self._open[event.message]
            out.append(event)
        return out

    def remaining(self) -> list[Event]:
        """What is still pending at the end of the stream (never applied: no message follows)."""
        return sorted(self._pending)

    def observe(self, message: int, gold: Label, verdict: Verdict, log_odds: float = 0.0) -> list[Event]:
        """Record what follows from message number `message` (0-based) scored as `verdict`.

        Returns the events due at once (autolearn, and labels with no delay), in
        the order they apply; later ones are released by `due`.
        """
        p = self.protocol
        now = message + 1  # messages scored so far
        filed_spam = verdict is Verdict.SPAM  # Junk; Unsure and ham go to INBOX
        sure = abs(log_odds) >= p.settle_margin  # settled learning takes spamd's own filing only then
        if p.autolearn and verdict is not Verdict.UNSURE and abs(log_odds) >= p.autolearn_margin:
            self._add(now, message, Label.SPAM if filed_spam else Label.HAM, AUTOLEARN, False)
        wrong = verdict is Verdict.UNSURE or filed_spam != (gold == Label.SPAM)
        if p.feedback == "full" or (p.feedback == "errors" and wrong):
            self._add(now + p.delay, message, gold, PERSON, True)
            if p.feedback == "errors" and p.delay > p.settle_after:  # it sat long enough to settle first
                self._settle(message, now, Label.SPAM if filed_spam else Label.HAM, sure)
        elif p.feedback == "errors":
            self._settle(message, now, gold, sure)  # filed right, so left in place
        elif p.feedback == "people":
            self._person(message, now, gold, verdict, sure)
        return self.due(now)

    def _person(self, message: int, now: int, gold: Label, verdict: Verdict, sure: bool) -> None:
        """What the simulated owner does with one message, and what settled learning then sees."""
        people, rng = self.protocol.people, self._rng
        later = now + max(1, round(rng.expovariate(1.0 / people.mean_delay))) if people.mean_delay > 0 else now
        spam = gold == Label.SPAM
        if verdict is Verdict.UNSURE:
            corrected = rng.random() < people.sort_unsure
        elif verdict is Verdict.SPAM:
            corrected = not spam and rng.random() < people.rescue_lost_ham
        else:
            corrected = spam and rng.random() < people.correct_missed_spam
        if corrected:
            self._add(later, message, gold, PERSON, True)
            if later > now + self.protocol.settle_after:  # it sat long enough to settle first
                self._settle(message, now, Label.SPAM if verdict is Verdict.SPAM else Label.HAM, sure)
        elif verdict is Verdict.SPAM:
            self._settle(message, now, Label.SPAM, sure)  # left in Junk, never rescued: spam, right or not
        elif spam:
            if rng.random() >= people.delete_missed_spam:  # read and kept in INBOX: learned as ham, wrongly
                self._settle(message, now, Label.HAM, sure)
        elif rng.random() < people.read_ham:
            self._settle(message, now, Label.HAM, sure)

    def _settle(self, message: int, now: int, filed: Label, sure: bool) -> None:
        if self.protocol.settled and sure:
            self._add(now + self.protocol.settle_after, message, filed, SETTLED, False)
