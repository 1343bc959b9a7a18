"""The phrasings that state a fact about the speaker (contract section 19), as one table.

Each phrasing is the head of a statement: the words up to where its object starts ("I moved
to", "my favorite <thing> is"). handlers/facts/heads.py joins the heads a text can hold into
one pattern; handlers/facts/extract.py finds the object after a head (up to the end of its
clause), drops trailing time words and checks the object's kind. A head's `plain` is the
statement it makes; `anymore` the one it makes when the clause ends in "anymore" ("I don't
like X" dislikes X, "I don't like X anymore" ends likes X). `past` heads say what happened ("I
moved to X"), so "when I moved to X" is still a fact, while "when I live in X" is a plan.

Every pattern is matched case-insensitively; "I" accepts "i", "I'm" accepts "Im", "I am" and
the typographic apostrophe.
"""

from __future__ import annotations

from dataclasses import dataclass

Said = tuple[str, bool]  # (predicate, ends)


@dataclass(frozen=True)
class Phrasing:
    label: str  # as the docs list it
    head: str  # a regular expression, no capturing groups but the named ones below
    kind: str  # what its object must look like: person, number, date, place, org, job, ...
    plain: Said | None
    anymore: Said | None = None  # None: the same as plain
    past: bool = False


_APOS = "['’]"
I_ = r"\bI\s+"
IM = rf"\b(?:I\s*{_APOS}\s*m|I\s+am|Im)\s+"
IVE = rf"\b(?:I\s*{_APOS}\s*ve|I\s+have|Ive)\s+"
I_OR_IVE = rf"(?:{IVE}|{I_})"
ADVERBS = (
    r"just|recently|finally|actually|also|still|currently|now|really|truly|totally"
    r"|absolutely|genuinely|definitely|already|originally|basically|honestly|always|mostly"
    r"|even|personally|seriously|officially|usually|mainly|presently|happily|literally"
    r"|secretly|only|kinda|kind\s+of|sort\s+of|pretty\s+much|do|so+|very|super|deeply"
    r"|madly|simply|generally|certainly|severely|deathly|highly|mildly|slightly|extremely"
    r"|proudly|permanently|sadly"
)


def _by_first_letter(words: str) -> str:
    """The same alternatives, grouped by first letter (in their order within a group): one
    failed letter skips a group, so the run of adverbs that every head tries is three times
    cheaper, and what matches, and which alternative first, is unchanged."""
    groups: dict[str, list[str]] = {}
    for word in words.split("|"):
        groups.setdefault(word[0], []).append(word[1:])
    return "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in groups.items())


ADV = rf"(?:(?:{_by_first_letter(ADVERBS)})\s+){{0,4}}"
NOT = rf"(?:do\s+not|don{_APOS}?t|dont)\s+"
NO_LONGER = r"no\s+longer\s+"
IS = rf"\s*(?:is|{_APOS}s)\s+"
NUMBER = (
    r"(?:\d{1,3}|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)"
    r"(?:[-\s](?:one|two|three|four|five|six|seven|eight|nine))?|ten|eleven|twelve|thirteen"
    r"|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|one|two|three|four|five|six|seven"
    r"|eight|nine|(?:a|one)\s+hundred)"
)
FAN = (
    r"an?\s+(?:(?:big|huge|great|massive|real|longtime|long-time|die-hard|diehard|true|total"
    r"|major|avid)\s+)?fan\s+of\s+"
)
PARTNER = r"(?:wife|husband|partner|spouse|girlfriend|boyfriend|fianc[eé]e?)"
LIKE = r"(?:like|love|enjoy|adore)"
HATE = r"(?:hate|detest|despise|loathe)"
LIVE_ENDS = (r"lives_in", True)
WORK_ENDS = ("works_at", True)

PHRASINGS: tuple[Phrasing, ...] = (
    # likes, dislikes and their ends: first, as conversation says them most
    Phrasing("I like / love / enjoy X", rf"{I_}{ADV}{LIKE}s?\s+", "thing", ("likes", False)),
    Phrasing("I'm a fan of X", rf"{IM}{ADV}{FAN}", "thing", ("likes", False)),
    Phrasing("I don't like X", rf"{I_}{ADV}{NOT}{ADV}like\s+", "thing", ("dislikes", False),
             anymore=("likes", True)),
    Phrasing("I don't love / enjoy X anymore", rf"{I_}{ADV}{NOT}{ADV}(?:love|enjoy)\s+", "thing",
             None, anymore=("likes", True)),
    Phrasing("I'm not a fan of X", rf"{IM}{ADV}not\s+(?:really\s+|much\s+of\s+)?{FAN}", "thing",
             ("dislikes", False), anymore=("likes", True)),
    Phrasing("I no longer like X", rf"{I_}{ADV}(?:{NO_LONGER}{LIKE}|stopped\s+(?:liking|loving|"
             r"enjoying))\s+", "thing", ("likes", True)),
    Phrasing("I'm no longer a fan of X", rf"{IM}{ADV}{NO_LONGER}{FAN}", "thing", ("likes", True)),
    Phrasing("I hate X", rf"{I_}{ADV}{HATE}\s+", "thing", ("dislikes", False)),
    Phrasing("I can't stand X", rf"{I_}{ADV}(?:can{_APOS}?t|cannot|can\s+not)\s+stand\s+", "thing",
             ("dislikes", False)),
    Phrasing("I no longer hate X", rf"{I_}{ADV}(?:{NO_LONGER}|{NOT}{ADV}){HATE}\s+", "thing",
             ("dislikes", True)),
    # name, age, birthday, from
    Phrasing("my name is X", rf"\bmy\s+(?:(?:full|real|first|given)\s+)?name{IS}", "person",
             ("name", False)),
    Phrasing("call me X", r"\bcall\s+me\s+", "person", ("name", False)),
    Phrasing("I am N years old",
             rf"{IM}{ADV}(?P<age>{NUMBER})\s+(?:years?|yrs?)\s*(?:old|of\s+age)\b", "number",
             ("age", False)),
    Phrasing("I (just) turned N", rf"{I_OR_IVE}{ADV}turned\s+(?P<turned>{NUMBER})\b"
             r"(?!\s*(?:[-:/]|pages?|times?|degrees?|percent|%|around|up|down|over|off|out|into))",
             "number", ("age", False), past=True),
    Phrasing("my birthday is (on) X", rf"\bmy\s+(?:birthday|bday|b-day){IS}(?:on\s+|in\s+)?",
             "date", ("birthday", False)),
    Phrasing("I'm from X", rf"{IM}{ADV}from\s+", "place", ("from", False)),
    Phrasing("I grew up in X", rf"{I_}{ADV}grew\s+up\s+in\s+", "place", ("from", False), past=True),
    Phrasing("I was born (and raised) in X",
             r"\bI\s+was\s+(?:born\s+and\s+raised|born|raised)\s+in\s+", "place",
             ("from", False), past=True),
    # lives_in and its ends
    Phrasing("I live in X", rf"{I_}{ADV}(?:live|reside)\s+in\s+", "place", ("lives_in", False)),
    Phrasing("I'm living in X", rf"{IM}{ADV}living\s+in\s+", "place", ("lives_in", False)),
    Phrasing("I('ve) moved to X", rf"{I_OR_IVE}{ADV}(?:moved|relocated)\s+"
             r"(?:(?:back|here|over|out|away|all\s+the\s+way)\s+)?to\s+", "place",
             ("lives_in", False), past=True),
    Phrasing("I moved from Y to X", rf"{I_OR_IVE}{ADV}(?:moved|relocated)\s+from\s+"
             r"[^,;:.!?]{1,40}?\s+to\s+", "place", ("lives_in", False), past=True),
    Phrasing("I'm based in X", rf"{IM}{ADV}based\s+in\s+", "place", ("lives_in", False)),
    Phrasing("I don't live in X (anymore)", rf"{I_}{ADV}{NOT}{ADV}live\s+in\s+", "place",
             LIVE_ENDS),
    Phrasing("I no longer live in X", rf"{I_}{ADV}{NO_LONGER}live\s+in\s+", "place", LIVE_ENDS),
    Phrasing("I'm no longer / not living in X",
             rf"{IM}{ADV}(?:{NO_LONGER}|not\s+)(?:living|based)\s+in\s+", "place", LIVE_ENDS),
    Phrasing("I moved away from / out of X", rf"{I_OR_IVE}{ADV}moved\s+(?:away\s+from|out\s+of)\s+",
             "place", LIVE_ENDS, past=True),
    # works_at, job, studies_at
    Phrasing("I work at / for X", rf"{I_}{ADV}work\s+(?:at|for)\s+", "org", ("works_at", False)),
    Phrasing("I'm working at / for X", rf"(?:{IM}|{IVE}been\s+){ADV}working\s+(?:at|for)\s+",
             "org", ("works_at", False)),
    Phrasing("I got a job at X", rf"{I_OR_IVE}{ADV}(?:got|landed|found|started|accepted)\s+"
             r"(?:a\s+|the\s+)?(?:new\s+|full-time\s+|part-time\s+)?(?:job|position)\s+(?:at|with)\s+",
             "org", ("works_at", False), past=True),
    Phrasing("I started working at X", rf"{I_OR_IVE}{ADV}started\s+working\s+(?:at|for)\s+",
             "org", ("works_at", False), past=True),
    Phrasing("I don't work at X (anymore)", rf"{I_}{ADV}{NOT}{ADV}work\s+(?:at|for)\s+", "org",
             WORK_ENDS),
    Phrasing("I no longer work at X", rf"{I_}{ADV}{NO_LONGER}work\s+(?:at|for)\s+", "org",
             WORK_ENDS),
    Phrasing("I'm no longer / not working at X",
             rf"{IM}{ADV}(?:{NO_LONGER}|not\s+)working\s+(?:at|for)\s+", "org", WORK_ENDS),
    Phrasing("I quit / left / lost my job at X", rf"{I_OR_IVE}{ADV}(?:quit|left|lost)\s+my\s+"
             r"(?:(?:old|last)\s+)?(?:job|position)\s+(?:at|with)\s+", "org", WORK_ENDS, past=True),
    Phrasing("I stopped working at X", rf"{I_OR_IVE}{ADV}stopped\s+working\s+(?:at|for)\s+",
             "org", WORK_ENDS, past=True),
    Phrasing("I work as a(n) X", rf"(?:{I_}{ADV}work|{IM}{ADV}working)\s+as\s+(?:an?\s+)?",
             "job", ("job", False)),
    Phrasing("my job is X", rf"\bmy\s+(?:job|profession|occupation){IS}(?:an?\s+)?", "job",
             ("job", False)),
    Phrasing("I study at X", rf"(?:{I_}{ADV}study|{IM}{ADV}studying)\s+at\s+", "org",
             ("studies_at", False)),
    Phrasing("I'm a student at X",
             rf"{IM}{ADV}(?:an?\s+\w+\s+student|a\s+student|enrolled)\s+at\s+", "org",
             ("studies_at", False)),
    Phrasing("I no longer study at X", rf"{I_}{ADV}(?:{NO_LONGER}|{NOT}{ADV})study\s+at\s+", "org",
             ("studies_at", True)),
    # partner
    Phrasing("I'm married to X", rf"{IM}{ADV}married\s+to\s+", "person", ("partner", False)),
    Phrasing("my wife's name is X", rf"\bmy\s+{PARTNER}{_APOS}s\s+name{IS}", "person",
             ("partner", False)),
    Phrasing("my wife/husband/partner is X", rf"\bmy\s+{PARTNER}{IS}", "person",
             ("partner", False)),
    Phrasing("I'm no longer married to X", rf"{IM}{ADV}(?:{NO_LONGER}|not\s+)married\s+to\s+",
             "person", ("partner", True)),
    Phrasing("I'm divorced from X",
             rf"(?:{IM}{ADV}|{I_OR_IVE}{ADV}(?:got\s+)?)divorced\s+(?:from\s+)?",
             "person", ("partner", True), past=True),
    # favorite, speaks, allergic_to
    Phrasing("my favorite <thing> is X",
             r"\bmy\s+(?:(?:all[-\s]time|absolute|very|personal|current|new|top|ultimate|most)\s+)?"
             r"(?:favou?rite|fave|fav)\s+(?P<thing>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,3}?)\s*"
             rf"(?:is|are|{_APOS}s|has\s+to\s+be|must\s+be)\s+", "favorite", ("favorite", False)),
    Phrasing("I speak X", rf"{I_}{ADV}speak\s+", "language", ("speaks", False)),
    Phrasing("I no longer speak X", rf"{I_}{ADV}{NO_LONGER}speak\s+", "language",
             ("speaks", True)),
    Phrasing("I don't speak X anymore", rf"{I_}{ADV}{NOT}{ADV}speak\s+", "language", None,
             anymore=("speaks", True)),
    Phrasing("I'm allergic to X", rf"(?:{IM}{ADV}allergic\s+to|{I_}{ADV}have\s+(?:an?\s+)?"
             r"(?:\w+\s+)?allerg(?:y|ies)\s+to)\s+", "thing", ("allergic_to", False)),
    Phrasing("I'm no longer allergic to X",
             rf"{IM}{ADV}(?:{NO_LONGER}|not\s+){ADV}allergic\s+to\s+", "thing",
             ("allergic_to", True)),
)  # fmt: skip


# What may follow "I", "I'm" and "I've" (after adverbs) in some head: one check that lets the
# scan pass "I think", "I'm so glad", "I've been there" without trying every head.
_AFTER_I = (
    r"live|reside|moved|relocated|work|got|landed|found|started|accepted|quit|left|lost"
    r"|stopped|study|like|love|enjoy|adore|hate|detest|despise|loathe|can|cannot|can['’]?t"
    r"|speak|was|don['’]?t|dont|do\s+not|no|grew|turned|divorced"
    r"|have\s+(?:an?\s+)?(?:\w+\s+)?allerg(?:y|ies)"
)
_AFTER_IM = (
    rf"from|living|based|working|studying|an?|enrolled|married|not|no|allergic|divorced"
    rf"|{NUMBER}[\s-]+(?:years?|yrs?)"
)
_AFTER_IVE = r"moved|relocated|got|landed|found|started|accepted|quit|left|lost|stopped|been"
GATE = (
    rf"(?=I\s+{ADV}(?:{_AFTER_I})\b|(?:I\s*{_APOS}\s*m|I\s+am|Im)\s+{ADV}(?:{_AFTER_IM})\b"
    rf"|(?:I\s*{_APOS}\s*ve|I\s+have|Ive)\s+{ADV}(?:{_AFTER_IVE}|turned|divorced)\b"
    r"|my\b|call\b)"
)
