"""First-person statements in stored text: "I moved to Berlin" -> lives_in Berlin (section 19).

A pure function, run inside every store's transaction, so it is cheap: a text with no "I", "my"
or "call" is skipped by one search; otherwise at each of those that may start a head, the heads
the text can hold are tried in order, each compiled once (handlers/facts/heads.py). For each
head found:

- the words before it, in its clause, must not make it a question ("do I live in X"), a
  condition ("if I live in X"), a wish or plan ("I hope I'm based in X", "when I live in X")
  or someone else's words ("my sister says I ..."); a sentence ending in "?" is a question in
  its last clause ("I live in Paris, do you?" still states where I live);
- its object runs to the end of its clause (a comma, ";", ":", or a word such as "and", "but",
  "because", "with", "who", "when"...), without trailing time words ("now", "anymore",
  "last month", "in 2019", "two years ago"...);
- the object must fit its kind: a name is a name (capitalised, when the sentence capitalises
  names), a birthday holds a date, a taste is not a pronoun ("I love it") nor about the
  listener ("I love your photo").

Statements about someone else never match: every head is "I ..." or "my <name|partner|
favorite|job|birthday> is", and "my wife is" only names who she is.
"""

from __future__ import annotations

import re
from bisect import bisect_right

import msgspec

from handlers.facts import words as w
from handlers.facts.heads import Candidates, first_head, heads_for
from handlers.facts.phrasings import GATE, PHRASINGS, Phrasing


class Statement(msgspec.Struct, frozen=True):
    """`predicate`: name, age, birthday, from, lives_in, works_at, job, studies_at, partner,
    likes, dislikes, favorite:<thing>, speaks, allergic_to. `object` as written, trimmed.
    `ends`: the statement ends the fact ("I no longer live in X")."""

    predicate: str
    object: str
    ends: bool = False


_GATE = re.compile(GATE, re.IGNORECASE)  # what every head needs after its cue
# Where a head may start: "I", "Im", "Ive", "my", "call" (and a few harmless others). A plain
# character set first lets the scan skip most of a text at C speed (6 ns a character here).
CUE = re.compile(r"[iImMcC](?<=\b[iImMcC])(?:[mM]|[vV][eE]|[yY]|[aA][lL][lL])?\b")
MAX_WORDS = {
    "person": 4, "date": 6, "place": 8, "org": 8, "job": 6, "thing": 8, "favorite": 8, "language": 3
}  # fmt: skip
_EDGES = re.compile(r"^[^\w(]+|[^\w)]+$")
# Bounds that keep a long text linear: the words read before a head, an object's length.
WINDOW = 120
LONGEST = 120
CUES_READ = 1000
HEADS_READ = 100
_QUESTION = re.compile(r"\?\W*$")
_LATER_CLAUSE = re.compile(r"[,;:–—]|\s-\s")
_NEGATED = re.compile(r"\b(?:not|never|don['’]?t|dont|didn['’]?t)\s*$")
_THE_THING = re.compile(r"(?i:the)\s+[a-z]")  # "the colours", not "the Beatles"
_WORD = re.compile(r"[A-Za-z][\w'’.-]*")
_I_FORMS = {"i", "i'm", "i’m", "im", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"}
_PARTICLES = {"de", "van", "von", "da", "del", "della", "la", "le", "di", "du", "bin", "al"}


def extract_statements(text: str) -> list[Statement]:
    """Every statement the text makes about its speaker, in order, each once. Only the first
    CUES_READ words "I", "my" and "call" are read, and the first HEADS_READ heads: a
    conversation turn holds a few, a flood of them costs no more than this."""
    found: list[Statement] = []
    spans: list[tuple[int, int]] = []
    asked: dict[int, int] = {}
    heads = 0
    candidates: Candidates | None = None  # the heads this text can hold, once one may
    for number, cue in enumerate(CUE.finditer(text)):
        if number == CUES_READ or heads == HEADS_READ:
            break
        if _GATE.match(text, cue.start()) is None:  # most cues
            continue
        if candidates is None:
            candidates = heads_for(text)
        head = first_head(candidates, text, cue.start())
        if head is None:  # no sentence split at all
            continue
        heads += 1
        if not spans:
            spans = sentences(text)
        start, end = spans[bisect_right(spans, (cue.start(), len(text))) - 1]
        sentence = text[start:end]
        shift = start  # a head within its sentence is the sentence's own: not matched twice
        if head[1].end() > end:
            head, shift = first_head(candidates, sentence, cue.start() - start), 0
            if head is None:  # the head ran past its sentence's end
                continue
        if start not in asked:
            asked[start] = _asked_from(sentence)
        statement = _statement(sentence, head, shift, asked[start])
        if statement is not None and statement not in found:
            found.append(statement)
    return found


def sentences(text: str) -> list[tuple[int, int]]:
    """Where each sentence starts and ends: after . ! ? or a line break, not after a title or
    an initial ("Dr. Khan", "J. Smith")."""
    spans, start = [], 0
    for end in w.SENTENCE_END.finditer(text):
        dot = end.start()
        if end.group() == "." and w.TITLE.search(text[max(0, dot - 4) : dot]):
            continue
        spans.append((start, end.end()))
        start = end.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _asked_from(sentence: str) -> int:
    """Where the clause a question asks starts (past the sentence's end if it asks nothing):
    "I live in Paris, do you?" asks from its comma."""
    if not _QUESTION.search(sentence[-12:]):
        return len(sentence) + 1
    marks = list(_LATER_CLAUSE.finditer(sentence))
    return marks[-1].start() if marks else 0


def _statement(
    sentence: str, head: tuple[int, re.Match[str]], shift: int, asked: int
) -> Statement | None:
    """The statement a head (its index in PHRASINGS, its match) makes; `shift`: where the
    sentence starts in the string the head was matched in."""
    phrasing, match = PHRASINGS[head[0]], head[1]
    head_start, head_end = match.start() - shift, match.end() - shift
    before = sentence[max(0, head_start - WINDOW) : head_start].lower()
    if not _stated(before, phrasing):
        return None
    if phrasing.kind == "number":
        number = match.groupdict()  # "age" or "turned"
        obj, anymore, end = str(number.get("age") or number.get("turned")), False, head_end
    else:
        ends_at = w.OBJECT_END[phrasing.kind if phrasing.kind in w.OBJECT_END else ""]
        found = ends_at.search(sentence, head_end, head_end + LONGEST + 1)
        end = found.start() if found else min(len(sentence), head_end + LONGEST + 1)
        if end - head_end > LONGEST:
            return None
        obj, anymore = _trimmed(sentence[head_end:end], phrasing.kind)
        checked = _checked(obj, phrasing.kind, sentence)
        if checked is None:
            return None
        obj = checked
    if end > asked:
        return None  # in the clause that asks
    said = phrasing.anymore if anymore and phrasing.anymore else phrasing.plain
    if said is None:
        return None
    predicate, ends = said
    if predicate == "likes" and not ends and _THE_THING.match(obj):
        return None  # "I love the colours": the thing in front of them, not a lasting taste
    if predicate == "favorite":
        predicate = "favorite:" + "_".join(str(match.group("thing")).lower().split())
    return Statement(predicate, obj, ends)


def _stated(before: str, phrasing: Phrasing) -> bool:
    """False when the (lowercased) words before the head make it no statement of the
    speaker's."""
    if len(w.QUOTES.findall(before)) % 2:
        return False  # inside a quotation
    reported = w.REPORTED.search(before)
    if reported and reported.group("who") not in _I_FORMS:
        return False
    marks = list(w.CLAUSE_MARK.finditer(before))
    clause = before[marks[-1].end() :] if marks else before
    refuted, until = _read_clause(clause)
    return not refuted and (phrasing.past or not until)


_CLAUSES: dict[str, tuple[bool, bool]] = {}  # clause -> _read_clause's answer
_CLAUSES_KEPT = 4096


def _read_clause(clause: str) -> tuple[bool, bool]:
    """Whether the clause before a head asks, supposes, wishes or denies it, and whether it ends
    in "when" or "until". Remembered: the clauses met are mostly the same few ("", "so ", " ")
    and reading one takes five patterns."""
    found = _CLAUSES.get(clause)
    if found is None:
        refuted = (
            w.ASKING.search(clause) or w.CONDITION.search(clause) or w.WISH.search(clause)
        ) is not None or _NEGATED.search(clause) is not None
        found = (refuted, w.UNTIL.search(clause) is not None)
        if len(_CLAUSES) >= _CLAUSES_KEPT:
            _CLAUSES.clear()
        _CLAUSES[clause] = found
    return found


def _trimmed(raw: str, kind: str) -> tuple[str, bool]:
    """The object without its edges' punctuation and trailing time words, and whether one of
    those was "anymore"."""
    obj = _EDGES.sub("", raw)
    tail = w.DATE_TAIL if kind == "date" else w.TAIL
    anymore = False
    for _ in range(8):
        trailing = tail.search(obj)
        if trailing is None:
            break
        anymore = anymore or bool(w.ANYMORE.search(trailing.group()))
        obj = _EDGES.sub("", obj[: trailing.start()])
    if kind == "language":
        obj = w.LANGUAGE_LEAD.sub("", obj)
    return obj, anymore


def _checked(obj: str, kind: str, sentence: str) -> str | None:
    """The object if it fits its kind (a name trimmed to the name), else None."""
    words = obj.split()
    if not words or len(words) > MAX_WORDS[kind]:
        return None
    if words[0].lower() in w.STOP_FIRST.get(kind, w.STOP_FIRST[""]):
        return None
    if kind == "person":
        return _name(words, sentence)
    if kind == "place" and w.TIME_ONLY.match(obj):
        return None
    if kind == "date":
        return obj if w.DATE_WORD.search(obj) else None
    if kind in ("thing", "favorite"):
        if w.REMARK.search(obj) or w.SECOND_PERSON.search(obj):
            return None
        return None if kind == "thing" and w.POINTING.search(obj) else obj
    if kind == "language":
        known = words[-1].lower() in w.LANGUAGES or obj.lower() in w.LANGUAGES
        return obj if known or (_capitalised(sentence) and obj[0].isupper()) else None
    return obj


def _capitalised(sentence: str) -> bool:
    """Whether the sentence capitalises names: some word past its first (and past "I") does."""
    found = _WORD.findall(sentence)
    return any(word[0].isupper() and word.lower() not in _I_FORMS for word in found[1:])


def _name(words: list[str], sentence: str) -> str | None:
    """The leading capitalised words when the sentence capitalises names; in a sentence all in
    one case, the object when none of its words describes rather than names."""
    if words[0].lower() in w.NOT_A_NAME:
        return None
    if _capitalised(sentence) and not sentence.isupper():
        kept: list[str] = []
        for word in words:
            if word[0].isupper():
                kept.append(word)
            elif word.lower() not in _PARTICLES:
                break
            else:
                kept.append(word)
        while kept and kept[-1].lower() in _PARTICLES:
            kept.pop()
        if not kept or kept[-1].endswith(("'s", "’s")):
            return None
        return " ".join(kept)
    if len(words) > 3 or any(
        word.lower() in w.NOT_A_NAME or word.lower().endswith(w.NAME_SUFFIXES) for word in words
    ):
        return None
    return " ".join(words)
