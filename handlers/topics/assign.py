"""Which topic a message belongs to (contract section 21), and which topic a resume query names.

A message's score against a topic is the share of its keyword stems found among the topic's
recent messages (containment). Measured on tests/fixtures/topic_sessions.jsonl against cosine
of stem counts, Jaccard, IDF-weighted containment and raw overlap counts, containment scored
best: a follow-up shares a word or two with its line of work, and its share does not shrink
with the size of the topic as cosine and Jaccard do. A message joins its best topic when that
score reaches THRESHOLD (the active topic wins ties). Otherwise a user's message that says
enough (MIN_NEW_KEYWORDS stems) starts a new topic; a shorter one, or an assistant's reply,
stays in the active topic: a new line of work is opened by someone saying what it is about,
while an unmatched short question is almost always a follow-up. With vectors on both sides
the score is the mean of containment and the cosine's rise above MEANING_FLOOR (over
MEANING_SPAN), against a running mean of the topic's vectors.

On the test set (48 sessions, 1502 messages) keywords alone give purity 0.90 and
completeness 0.896: a follow-up that shares no word with its thread ("It uses datetime.now()
to compute a discount") starts a topic of its own. With the builtin model's vectors, 0.93 and
0.945. `memory-worker bench --topics` prints both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np
import numpy.typing as npt

from handlers.topics.profile import TopicProfile, updated
from handlers.topics.words import keyword_stems, too_short

THRESHOLD = 0.2  # 0.15 and 0.25 trade purity for completeness on both test sets
MIN_NEW_KEYWORDS = 4  # 3: threads split by their follow-ups; 5: new threads swallowed
ACTIVE_TIE = 0.02  # the active topic wins a tie
MEANING_FLOOR = 0.1  # a cosine at or below this says nothing of a shared subject
MEANING_SPAN = 0.5  # the cosine above the floor that counts as a full match

# A message that says it comes back to something ("Back to the bathroom.", "Re the quote:",
# "Another knee question.", "One more thing about moving.") joins the topic it shares most with,
# however little; one that opens on a word pointing back ("It ...", "And ...", "What about")
# continues what came before and never starts a topic.
RETURNS = re.compile(
    r"^\W*(?:sorry,?\s+)?(?:back to|going back|switching back|coming back|returning to"
    r"|to get back|re\b|regarding|about (?:the|my|our|that|this)\b|another\b|one more"
    r"|more on\b|quick update)",
    re.IGNORECASE,
)
POINTS_BACK = re.compile(
    r"^\W*(?:it|it's|its|they|they're|them|their|that|that's|this|these|those|he|she|and"
    r"|also|so|then|but|or|what about|how about)\b",
    re.IGNORECASE,
)

Direction = npt.NDArray[np.float64]
Reason = Literal["matched", "new", "short", "unmatched"]


class Incoming(msgspec.Struct, frozen=True, kw_only=True):
    """A message to place: its role, text and vector (None: no embedding yet)."""

    role: str
    text: str
    vector: tuple[float, ...] | None = None


class Assignment(msgspec.Struct, frozen=True, kw_only=True):
    """Where a message goes: `topic_id` None means a new topic (its id is the decide step's to
    mint); `reason` says why, `score` is the chosen topic's score (0 for new or short), and
    `stems` the message's keywords, to update the chosen topic's profile with."""

    topic_id: str | None
    reason: Reason
    score: float
    stems: tuple[str, ...]


def meaning_score(direction: Direction, meaning: tuple[float, ...]) -> float:
    """The cosine's rise above the floor, 0-1; `direction` is the message's unit vector."""
    cosine = float(np.dot(direction, np.asarray(meaning, dtype=np.float64)))
    return min(1.0, max(0.0, (cosine - MEANING_FLOOR) / MEANING_SPAN))


def direction_of(vector: tuple[float, ...] | None) -> Direction | None:
    if vector is None:
        return None
    found = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(found))
    return found / norm if norm else found


def score(stems: tuple[str, ...], direction: Direction | None, topic: TopicProfile) -> float:
    """The message's closeness to the topic, 0-1."""
    words = topic.recent_stems()
    shared = len(words.intersection(stems)) / len(stems) if stems else 0.0  # stems: distinct
    if direction is None or topic.meaning is None or len(direction) != len(topic.meaning):
        return shared
    return (shared + meaning_score(direction, topic.meaning)) / 2


def assign(message: Incoming, topics: Sequence[TopicProfile], active: str | None) -> Assignment:
    """The topic the message belongs to among the session's topics; `active` is the topic of
    the session's latest message (None: the session has none yet)."""
    stems = keyword_stems(message.text)
    if active is not None and too_short(stems):
        return Assignment(topic_id=active, reason="short", score=0.0, stems=stems)
    direction = direction_of(message.vector)
    best: str | None = None
    best_score = -1.0
    for topic in topics:
        found = score(stems, direction, topic) + (ACTIVE_TIE if topic.topic_id == active else 0)
        if found > best_score:
            best, best_score = topic.topic_id, found
    if best is not None and best_score >= THRESHOLD:
        return Assignment(topic_id=best, reason="matched", score=round(best_score, 4), stems=stems)
    if best is not None and best_score > ACTIVE_TIE and RETURNS.match(message.text):
        return Assignment(topic_id=best, reason="matched", score=round(best_score, 4), stems=stems)
    opens = (
        message.role == "user"
        and len(stems) >= MIN_NEW_KEYWORDS
        and not POINTS_BACK.match(message.text)
    )
    if active is None or opens:
        return Assignment(topic_id=None, reason="new", score=0.0, stems=stems)
    return Assignment(topic_id=active, reason="unmatched", score=0.0, stems=stems)


def resume_topic(query: str, topics: Sequence[TopicProfile]) -> str | None:
    """The topic a resume query names best: the share of the query's stems the topic has used
    (its whole vocabulary, not only recent words), weighted by how often; None when it shares
    none with any topic (then resume takes the active one)."""
    stems = keyword_stems(query)
    best: str | None = None
    best_score = 0.0
    for topic in topics:
        used = topic.vocabulary
        found = sum(1.0 + min(used.get(stem, 0), 5) / 10 for stem in stems if stem in used)
        if found > best_score:
            best, best_score = topic.topic_id, found
    return best


def place(
    topics: dict[str, TopicProfile], active: str | None, message: Incoming, new_id: str
) -> tuple[str, TopicProfile, Assignment]:
    """One store's step: the topic the message goes to (`new_id`, minted by the caller's decide
    step, when it starts one), that topic's profile with the message added, and why."""
    found = assign(message, list(topics.values()), active)
    topic_id = found.topic_id if found.topic_id is not None else new_id
    profile = topics.get(topic_id) or TopicProfile(topic_id=topic_id)
    return topic_id, updated(profile, found.stems, message.vector), found
