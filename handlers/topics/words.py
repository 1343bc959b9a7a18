"""A message's keywords for topic assignment: recall's tokens and stopwords, Snowball stems
(handlers/text.py), without chat filler and numbers, which say nothing of a subject."""

from __future__ import annotations

from functools import lru_cache

from handlers.text import STOPWORDS, stem, tokens

# Words of conversation itself: present in every line of work, so they would join any two.
_FILLER_WORDS = """
ok okay yes yeah yep no nope thanks thank please hi hello hey sure right well also
    just really good great nice cool perfect awesome lol hmm ah oh wow maybe would could
    might must shall will can get got go going want need like know think make see let tell
    say said back about again one two thing things way lot much many bit still actually
    probably usually often idea anything something everything time day week question
    another sorry quick update stuff sec re"""
# Words of any subject: time, counts and amounts, verbs that carry no subject of their own, and
# plain adjectives. One of them shared made a new line of work join an old one ("Where do I
# start?"); chosen by kind, not from the test sets' words.
_GENERIC_WORDS = """
minute minutes hour hours days weeks month months year years today tomorrow tonight
    yesterday morning evening night weekend now soon later early late ago
    zero three four five six seven eight nine ten twelve twenty thirty forty fifty hundred
    thousand first second third half once twice
    most more less least enough even around almost full whole every each several few plenty
    start begin take give put keep use try look find come seem feel end set help
    last next new old big small long short little better best worse worth easy hard able
    same different own real proper fine"""
FILLER = frozenset(_FILLER_WORDS.split() + _GENERIC_WORDS.split())

# Fewer distinct keywords than this and a message is too short to judge ("ok thanks").
MIN_KEYWORDS = 2
CACHED_CHARS = 1000  # texts up to this long are cached (at most 4096 of them, ~4 MB)


def keyword_stems(text: str) -> tuple[str, ...]:
    """The message's distinct content stems, in order of first appearance. Short texts are
    cached: a store reads the same ones again (its topic's open loops, sentences of its
    messages); a long one is not kept, so the cache stays small."""
    return _cached_stems(text) if len(text) <= CACHED_CHARS else _stems(text)


@lru_cache(maxsize=4096)
def _cached_stems(text: str) -> tuple[str, ...]:
    return _stems(text)


def _stems(text: str) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for token in tokens(text):
        if len(token) < 2 or token.isdigit() or token in STOPWORDS or token in FILLER:
            continue
        stemmed = stem(token)
        if stemmed not in FILLER:
            found[stemmed] = None
    return tuple(found)


def too_short(stems: tuple[str, ...]) -> bool:
    """An acknowledgement or a word or two: it stays in the active topic."""
    return len(stems) < MIN_KEYWORDS
