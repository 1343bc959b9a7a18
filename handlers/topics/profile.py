"""What a topic is compared by: the keyword stems of its recent messages (a window, so a topic
that drifts follows its latest words), every stem it has used (for a resume query naming an
old part of it), and a running mean of its messages' vectors when they have them."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from itertools import chain

import msgspec
import numpy as np
import numpy.typing as npt

from handlers.topics.words import keyword_stems

WINDOW = 12  # recent messages compared against; 8-20 scored alike on the test set
VOCABULARY = 256  # distinct stems remembered for resume queries, the most used kept
MEANING_WEIGHT = 0.3  # a new message's share of the running mean vector


class TopicProfile(msgspec.Struct, frozen=True, kw_only=True):
    """A topic as assignment sees it; `recent` is oldest first, one tuple of stems per message
    that had any, and `meaning` a unit vector or None."""

    topic_id: str
    recent: tuple[tuple[str, ...], ...] = ()
    vocabulary: dict[str, int] = {}
    meaning: tuple[float, ...] | None = None
    # The stems of `recent` when the caller has them (read with it: handlers/topics/stored.py).
    words: frozenset[str] | None = None

    def recent_stems(self) -> frozenset[str]:
        return words_of(self.recent) if self.words is None else self.words


@lru_cache(maxsize=4096)
def words_of(recent: tuple[tuple[str, ...], ...]) -> frozenset[str]:
    """Every stem of a window, kept for the windows in use: a store compares its message with
    each of the session's topics, most of which have not changed since the last store."""
    return frozenset(chain.from_iterable(recent))


def unit(vector: tuple[float, ...] | npt.NDArray[np.float64]) -> tuple[float, ...]:
    found = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(found))
    return tuple((found / norm if norm else found).tolist())


def updated(
    profile: TopicProfile, stems: tuple[str, ...], vector: tuple[float, ...] | None = None
) -> TopicProfile:
    """The profile with one more message: its stems join the window (the oldest leaves) and the
    vocabulary, its vector the running mean. A message without stems leaves the window as it
    was, so acknowledgements do not push the topic's words out."""
    return TopicProfile(
        topic_id=profile.topic_id,
        recent=window_with(profile.recent, stems),
        vocabulary=folded(profile.vocabulary, (stems,)),
        meaning=mean_with(profile.meaning, vector),
    )


def window_with(
    recent: tuple[tuple[str, ...], ...], stems: tuple[str, ...]
) -> tuple[tuple[str, ...], ...]:
    """`updated`'s window: the message's stems in, the oldest out (no stems: as it was)."""
    return (*recent, stems)[-WINDOW:] if stems else recent


def mean_with(
    meaning: tuple[float, ...] | None, vector: tuple[float, ...] | None
) -> tuple[float, ...] | None:
    """`updated`'s running mean with the message's vector (None: as it was)."""
    if vector is None:
        return meaning
    if meaning is None or len(meaning) != len(vector):
        return unit(vector)
    new = np.asarray(unit(vector), dtype=np.float64)
    return unit((1 - MEANING_WEIGHT) * np.asarray(meaning) + MEANING_WEIGHT * new)


def folded(vocabulary: dict[str, int], windows: Iterable[tuple[str, ...]]) -> dict[str, int]:
    """The vocabulary with messages' stems added one message at a time (the most used
    VOCABULARY kept after each, as `updated` does), a new dict."""
    found = dict(vocabulary)
    for stems in windows:
        for stem in stems:
            found[stem] = found.get(stem, 0) + 1
        if len(found) > VOCABULARY:
            kept = sorted(found.items(), key=lambda item: (-item[1], item[0]))[:VOCABULARY]
            found = dict(kept)
    return found


def profile_of(
    topic_id: str, messages: Iterable[tuple[str, tuple[float, ...] | None]]
) -> TopicProfile:
    """A topic's profile rebuilt from its (text, vector) messages in session order: what
    placing them one by one left, for a store that keeps no profile, or after a repair."""
    profile = TopicProfile(topic_id=topic_id)
    for text, vector in messages:
        profile = updated(profile, keyword_stems(text), vector)
    return profile
