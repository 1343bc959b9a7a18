"""Open loops of a topic (contract section 21): questions not yet answered, and promises and
to-dos not yet done, each with the id of the message that opened it.

Read per sentence, in order, by fixed phrasings (no model):
- a sentence ending in "?" is a question; a later message of the topic from another role that
  says something (a sentence that is not a question, with a keyword) answers it;
- "I'll ...", "let me ...", "I'm going to ..." is a promise of its speaker; "I need to ...",
  "I have to ...", "remind me to ...", "don't forget to ..." a to-do. A later message of the
  topic that reports it done ("done", "booked", "I've sent", "here's ...") and shares a
  keyword with it closes it (a bare "done" closes the latest); a promise only by its speaker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

import msgspec

from handlers.topics.words import keyword_stems

LoopKind = Literal["question", "promise", "todo"]
MAX_TEXT = 200  # a loop's text: its sentence, shortened

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_APOS = "['’]"
PROMISE = re.compile(
    rf"\b(?:I{_APOS}ll|I will|I{_APOS}m going to|I am going to|let me|I{_APOS}m gonna"
    r"|will do|I promise to)\b",
    re.IGNORECASE,
)
TODO = re.compile(
    rf"\b(?:I need to|I have to|I{_APOS}ve got to|I must|we need to|we have to|I still need to"
    rf"|remind me to|don{_APOS}t forget to|need to remember to|to-?do\b|add(?:ing)? it to my list)",
    re.IGNORECASE,
)
DONE = re.compile(
    rf"\b(?:done|finished|completed|sorted|booked|sent|ordered|checked|called|registered"
    rf"|bought|fixed|paid|did it|I{_APOS}ve|I have (?:now )?\w+ed|here{_APOS}s|here is"
    r"|attached|just \w+ed)\b",
    re.IGNORECASE,
)
# TODO or PROMISE anywhere in a text: one scan of a message says whether any of its sentences
# can open a to-do or promise (a sentence is a part of the text bounded by what is not a word, so
# a phrasing found in a sentence is found in the text; the phrasings are most of a store's loop
# reading).
CUE = re.compile(f"{TODO.pattern}|{PROMISE.pattern}", re.IGNORECASE)
# A word of each of CUE's phrasings: a text without any of them (casefolded, both Turkish i's as
# "i", which re.IGNORECASE matches with "i") cannot match CUE, which is then not run: a
# substring test is a sixth of the regular expression's cost, and most texts have none.
CUE_WORDS = (
    "ll", "need", "have", "got", "must", "remind", "forget", "todo", "to-do", "list", "going",
    "let", "gonna", "promise",
)  # fmt: skip

BARE_DONE = re.compile(r"^\W*(?:all )?(?:done|finished|sorted|did it)\W*$", re.IGNORECASE)


def has_cue(text: str) -> bool:
    """Whether CUE is in the text."""
    folded = text.casefold().replace("i\u0307", "i").replace("\u0131", "i")
    return any(map(folded.__contains__, CUE_WORDS)) and CUE.search(text) is not None


class OpenLoop(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """`messageId` is the message that opened it; `role` its speaker."""

    kind: LoopKind
    text: str
    message_id: str
    role: str


class LoopMessage(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    role: str
    text: str


def sentences(text: str) -> list[str]:
    return [found.strip() for found in _SENTENCE.findall(text) if found.strip()]


def _short(sentence: str) -> str:
    text = " ".join(sentence.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def opened(
    message: LoopMessage, said: Sequence[str] | None = None, cued: bool = True
) -> list[OpenLoop]:
    """The loops this message opens, one per sentence at most, in order; `said`: its
    sentences, when the caller has them; `cued` False: CUE is not in its text (no sentence
    opens a to-do or a promise)."""
    found = []
    for sentence in sentences(message.text) if said is None else said:
        kind: LoopKind | None = None
        if sentence.endswith("?"):
            kind = "question"
        elif cued and TODO.search(sentence):
            kind = "todo"
        elif cued and PROMISE.search(sentence):
            kind = "promise"
        if kind is not None:
            found.append(
                OpenLoop(kind=kind, text=_short(sentence), message_id=message.id, role=message.role)
            )
    return found


class _Reply(NamedTuple):
    """What a message says to the loops before it, read once however many loops are open:
    whether it answers (a sentence that is not a question, with a keyword), and the keywords of
    its sentences that report something done."""

    answers: bool
    reported: frozenset[str]


def _reply(said: Sequence[str], text: str, loops: Sequence[OpenLoop], role: str) -> _Reply:
    """Only what the open loops can be closed by is read: whether it answers when a question of
    another role is open, what it reports done when a to-do or promise is (none when DONE is
    nowhere in its text)."""
    answers = any(loop.kind == "question" and loop.role != role for loop in loops) and any(
        not sentence.endswith("?") and keyword_stems(sentence) for sentence in said
    )
    if all(loop.kind == "question" for loop in loops) or DONE.search(text) is None:
        return _Reply(answers, frozenset())
    reports = (s for s in said if DONE.search(s) and not s.endswith("?"))
    return _Reply(answers, frozenset(stem for s in reports for stem in keyword_stems(s)))


def _closes(loop: OpenLoop, message: LoopMessage, reply: _Reply) -> bool:
    if loop.kind == "question":
        return message.role != loop.role and reply.answers
    if loop.kind == "promise" and message.role != loop.role:
        return False
    return not reply.reported.isdisjoint(keyword_stems(loop.text))


def advance(loops: Sequence[OpenLoop], message: LoopMessage) -> list[OpenLoop]:
    """The topic's open loops after one more of its messages: those it answers or reports done
    are closed, then those it opens are added."""
    text = message.text
    cue = has_cue(text)
    if not loops and "?" not in text and not cue:
        return []  # most messages: nothing open, nothing opened (no sentence can match)
    said = sentences(text)
    still = list(loops)
    if still:
        reply = _reply(said, text, still, message.role)
        still = [loop for loop in still if not _closes(loop, message, reply)]
    if BARE_DONE.match(message.text.strip()):
        for index in range(len(still) - 1, -1, -1):
            loop = still[index]
            if loop.kind == "todo" or (loop.kind == "promise" and loop.role == message.role):
                del still[index]
                break
    return still + opened(message, said, cue)


def open_loops(messages: Iterable[LoopMessage]) -> list[OpenLoop]:
    """A topic's open loops from its messages in session order."""
    loops: list[OpenLoop] = []
    for message in messages:
        loops = advance(loops, message)
    return loops
