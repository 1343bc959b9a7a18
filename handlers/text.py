"""Tokens and keywords exactly as contract section 3 defines them."""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer  # type: ignore[import-not-found,unused-ignore]  # PyStemmer: no type information

WORD = re.compile(r"\w+")

# NLTK's English stopword list, the 179-word version the contract names.
STOPWORDS = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "you're",
        "you've",
        "you'll",
        "you'd",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "she's",
        "her",
        "hers",
        "herself",
        "it",
        "it's",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "that'll",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "don't",
        "should",
        "should've",
        "now",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "ain",
        "aren",
        "aren't",
        "couldn",
        "couldn't",
        "didn",
        "didn't",
        "doesn",
        "doesn't",
        "hadn",
        "hadn't",
        "hasn",
        "hasn't",
        "haven",
        "haven't",
        "isn",
        "isn't",
        "ma",
        "mightn",
        "mightn't",
        "mustn",
        "mustn't",
        "needn",
        "needn't",
        "shan",
        "shan't",
        "shouldn",
        "shouldn't",
        "wasn",
        "wasn't",
        "weren",
        "weren't",
        "won",
        "won't",
        "wouldn",
        "wouldn't",
    ]
)


def tokens(text: str) -> list[str]:
    """Casefolded `\\w+` tokens, in order."""
    return WORD.findall(text.casefold())


class _Stemmers(threading.local):
    """A stemmer per thread: PyStemmer's objects must not be used from two threads at once."""

    def __init__(self) -> None:
        self.english = Stemmer.Stemmer("english")


_STEMMERS = _Stemmers()


@lru_cache(maxsize=1 << 16)
def stem(token: str) -> str:
    """The token's English Snowball stem ("painting", "painted" -> "paint"), for the `stems`
    keyword mode; tokens are stemmed once however many memories share them."""
    stemmed: str = _STEMMERS.english.stemWord(token)
    return stemmed


def query_keywords(query: str) -> list[str]:
    """The query's distinct non-stopword tokens (all of its tokens if every one is a stopword)."""
    found = list(dict.fromkeys(tokens(query)))
    kept = [token for token in found if token not in STOPWORDS]
    return kept or found
