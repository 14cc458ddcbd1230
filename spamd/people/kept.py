"""What a person kept from a sender: a small sample of its mail's tokens, so that a forger gains little.

A sender a person moved out of Junk files its mail in the inbox with full force only when the
message is authenticated as that sender (spamd/people/senders.py). Anyone can write an
unauthenticated From or List-Id, but not the content of the mail the person kept from it: a
forger riding a list's address does not send the list's mail. So each person's ham labels
(a move out of Junk, `spamctl train --user`, a TELL, the web console; never autolearn or settled
learning) add, per sender of the message, a sample of its tokens to that (user, sender)'s
profile, and an unauthenticated message from a rescued sender moves towards ham in proportion
to how much of its own sample the profile holds (`resemblance`, `kept_score`).

The sample: the message's bucket ids whose low SAMPLE_BITS bits are zero (about one in 8, the
same ids for the same tokens in every message, as a fixed-rate sketch), each kept as a 16-bit
fingerprint of the rest of the id; a profile is at most PROFILE_SIZE of them, the ones seen
most recently last. Pure functions and a bounded store with no I/O; RedisKept holds the same
profiles in Redis.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from spamd.model.bayes import Features, Score, verdict_of

SAMPLE_BITS = 3
# Fingerprints a (user, sender) profile holds at most: 2 bytes each, 128 bytes a sender.
PROFILE_SIZE = 64
# How far towards ham an unauthenticated rescued sender's message moves: KEPT_PUSH times how far
# its resemblance lies from RESEMBLANCE_NONE to RESEMBLANCE_FULL (no further past the ends), and
# no floor pulls it further. Measured with scripts/attacks/claimed_push.py (docs/users.md).
KEPT_PUSH = 0.6
RESEMBLANCE_NONE = 0.2
RESEMBLANCE_FULL = 0.4
# Profiles held at most by the embedded store (2 x 64 bytes each and the dict's ~200).
MAX_PROFILES = 200_000

_EMPTY = np.zeros(0, dtype=np.uint16)


def kept_sample(features: Features) -> np.ndarray:
    """The message's sampled fingerprints (uint16, unique, sorted)."""
    ids = features.ids
    picked = ids[(ids & ((1 << SAMPLE_BITS) - 1)) == 0] >> SAMPLE_BITS
    return np.unique((picked ^ (picked >> 16)).astype(np.uint16))


def merged(profile: bytes | None, sample: np.ndarray, size: int | None = None) -> bytes:
    """`profile` with `sample` added; past `size` (PROFILE_SIZE) the first go: the held fingerprints the sample
    lacks, then its new ones. The ones it repeats go last, so what recurs in a sender's mail (a list's
    headers and footer) stays."""
    held = _EMPTY if not profile else np.frombuffer(profile, dtype="<u2")
    again = np.isin(held, sample)
    new = sample[~np.isin(sample, held)].astype("<u2")
    return np.concatenate([held[~again], new, held[again]])[-(size or PROFILE_SIZE) :].tobytes()


def resemblance(profile: bytes | None, sample: np.ndarray) -> float:
    """The share of the message's sample the profile holds (0 with no profile or an empty sample)."""
    if not profile or not len(sample):
        return 0.0
    return float(np.isin(sample, np.frombuffer(profile, dtype="<u2")).mean())


def kept_push(similar: float) -> float:
    """How far towards ham a rescued, unauthenticated sender's message moves at this resemblance."""
    span = (similar - RESEMBLANCE_NONE) / (RESEMBLANCE_FULL - RESEMBLANCE_NONE)
    return KEPT_PUSH * min(max(span, 0.0), 1.0)


def kept_score(score: Score, similar: float, config: Any) -> Score:
    """`score` moved `kept_push(similar)` towards ham (as it is when that is 0)."""
    push = kept_push(similar)
    return score if push == 0.0 else verdict_of(config, score.log_odds - push)


class KeptProfiles(Protocol):
    """What the Engine and the Classifier use: KeptSamples here, spamd.store.redis.kept.RedisKept with Redis."""

    def kept(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> None: ...
    def resemblance(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> float: ...
    def profiles(self, user: str) -> int: ...


class KeptSamples:
    """Per (user, sender), the profile of what the person kept from it; the least recently kept go past the bound."""

    def __init__(self, max_profiles: int = MAX_PROFILES):
        self.max_profiles = max_profiles
        self._profiles: OrderedDict[tuple[str, int], bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._profiles)

    def kept(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> None:
        """The person labelled a message from `senders` ham: its sample joins each sender's profile."""
        if not len(sample):
            return
        for sender in senders:
            pair = (user, sender)
            self._profiles[pair] = merged(self._profiles.get(pair), sample)
            self._profiles.move_to_end(pair)
        while len(self._profiles) > self.max_profiles:
            self._profiles.popitem(last=False)

    def resemblance(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> float:
        """The highest resemblance of the message's sample to the user's profiles of its senders."""
        return max((resemblance(self._profiles.get((user, s)), sample) for s in senders), default=0.0)

    def profiles(self, user: str) -> int:
        return sum(1 for owner, _ in self._profiles if owner == user)

    def export(self) -> dict[str, Any]:
        """For a snapshot: user names, and per profile its user's index, sender and fingerprints, oldest first."""
        names: dict[str, int] = {}
        profiles = [
            [names.setdefault(user, len(names)), sender, profile] for (user, sender), profile in self._profiles.items()
        ]
        return {"users": list(names), "profiles": profiles}

    def restore(self, data: dict[str, Any]) -> None:
        """Take what `export` made (empty: a fresh start). ValueError/TypeError if malformed."""
        if not data:
            return
        users = [str(name) for name in data["users"]]
        profiles: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        for index, sender, profile in data["profiles"][-self.max_profiles :]:
            if not isinstance(profile, bytes) or len(profile) % 2 or len(profile) > 2 * PROFILE_SIZE:
                raise ValueError("kept profiles: at most PROFILE_SIZE 16-bit fingerprints expected")
            profiles[(users[index], int(sender))] = profile
        self._profiles = profiles

    def pairs(self) -> Iterable[tuple[str, int]]:
        return self._profiles.keys()
