"""The built-in title, labels and summary of a topic: what a topic shows when the LLM service
does not answer in time (as compaction falls back, contract section 7). Deterministic and
bounded, made from the topic's own words.

- labels: the keywords used in most of its messages (then most often, then first), each shown
  as the word it was most often written as;
- title: the first user sentence holding a label (a topic's opening line usually says what it
  is about), shortened; else the labels joined;
- summary: "N messages (k user, m assistant)." then the sentences that hold the most labels,
  in the order they were said, within SUMMARY_CHARS.

The LLM's text (handlers/topics/titles.py) is asked for when a topic reaches TITLE_FIRST
messages and every TITLE_EVERY more (`asks_llm`); once on a topic it holds over the built-in
refreshes until the topic has grown past the LLM's next chance unanswered (`llm_holds`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

import msgspec

from handlers.text import stem, tokens
from handlers.topics.loops import sentences
from handlers.topics.words import CACHED_CHARS, keyword_stems

LABELS = 5
TITLE_CHARS = 80
SUMMARY_CHARS = 600
TITLE_FIRST = 3  # messages when the LLM is first asked: a topic has said what it is about
TITLE_EVERY = 12  # then asked again each time the topic has grown by this many


def asks_llm(count: int) -> bool:
    """Whether the LLM is asked for a topic's text when it reaches `count` messages."""
    return count >= TITLE_FIRST and (count - TITLE_FIRST) % TITLE_EVERY == 0


def llm_holds(llm_titled: int, count: int) -> bool:
    """Whether the LLM's text, asked when the topic had `llm_titled` messages (0: the text is
    the built-in one), stays through a built-in refresh at `count` messages: until the topic has
    grown past the LLM's next chance (a missed answer lets the built-in text follow again)."""
    return llm_titled > 0 and count - llm_titled <= TITLE_EVERY


class TopicText(msgspec.Struct, frozen=True, kw_only=True):
    title: str
    labels: list[str]
    summary: str


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


def labels_of(messages: Sequence[tuple[str, str]], count: int = LABELS) -> list[str]:
    """The topic's keywords, as written: (role, text) pairs in session order."""
    spread: dict[str, int] = {}  # messages using it
    uses: dict[str, int] = {}
    first: dict[str, int] = {}
    written: dict[str, dict[str, int]] = {}  # its tokens, in order of first use
    for _, text in messages:
        for stemmed in keyword_stems(text):
            spread[stemmed] = spread.get(stemmed, 0) + 1
            if stemmed not in first:
                first[stemmed] = len(first)
        for token, stemmed, times in written_in(text):
            if stemmed in first:
                uses[stemmed] = uses.get(stemmed, 0) + times
                forms = written.get(stemmed)
                if forms is None:
                    written[stemmed] = {token: times}
                else:
                    forms[token] = forms.get(token, 0) + times
    ranked = heapq.nsmallest(count, first, key=lambda s: (-spread[s], -uses.get(s, 0), first[s]))
    # the most used form, the first written on a tie
    return [max(written[s], key=written[s].__getitem__) if s in written else s for s in ranked]


def written_in(text: str) -> tuple[tuple[str, str, int], ...]:
    """(token, its stem, how many times) for each distinct token of the text, in order of first
    appearance; kept for short texts, which a topic's text is remade from again and again."""
    return _cached_written(text) if len(text) <= CACHED_CHARS else _written(text)


def _written(text: str) -> tuple[tuple[str, str, int], ...]:
    return tuple((token, stem(token), times) for token, times in Counter(tokens(text)).items())


_cached_written = lru_cache(maxsize=4096)(_written)


def sentences_of(text: str) -> tuple[str, ...]:
    """The text's sentences (handlers/topics/loops.py), kept for short texts."""
    return _cached_sentences(text) if len(text) <= CACHED_CHARS else tuple(sentences(text))


@lru_cache(maxsize=4096)
def _cached_sentences(text: str) -> tuple[str, ...]:
    return tuple(sentences(text))


def header_of(roles: Mapping[str, int]) -> str:
    """The summary's first sentence: how many messages, by role."""
    counted = ", ".join(f"{n} {r}" for r, n in sorted(roles.items()))
    return f"{sum(roles.values())} messages ({counted})." if counted else "0 messages."


def extract(
    messages: Sequence[tuple[str, str]], roles: Mapping[str, int] | None = None
) -> TopicText:
    """Title, labels and summary from the topic's (role, text) messages in session order;
    `roles`: every message of the topic by role, when `messages` is a sample of it."""
    labels = labels_of(messages)
    label_stems = {stem(label) for label in labels}
    said = [
        (role, sentence) for role, text in messages for sentence in sentences_of(text) if sentence
    ]
    title = ""
    for role, sentence in said:
        if role == "user" and label_stems & set(keyword_stems(sentence)):
            title = _cut(sentence, TITLE_CHARS)
            break
    title = title or (", ".join(labels).capitalize() if labels else "Untitled")
    header = header_of(Counter(role for role, _ in messages) if roles is None else roles)
    weight = {
        index: len(label_stems & set(keyword_stems(sentence)))
        for index, (_, sentence) in enumerate(said)
    }
    chosen: list[int] = []
    room = SUMMARY_CHARS - len(header)
    for index in sorted(weight, key=lambda i: (-weight[i], i)):
        if weight[index] == 0:
            break
        line = _cut(said[index][1], 160)
        if len(line) + 1 > room:
            continue
        chosen.append(index)
        room -= len(line) + 1
    body = [_cut(said[index][1], 160) for index in sorted(chosen)]
    return TopicText(title=title, labels=labels, summary=" ".join([header, *body])[:SUMMARY_CHARS])
