"""The words around a statement that decide whether it is one, and where its object ends.

handlers/facts/extract.py reads these: where a clause ends, which time words trail an object
and are dropped, which words before a statement make it a question, a condition, a wish or
plan, or someone else's words, and which first words an object of each kind cannot have.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE
_APOS = "['’]"
MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
SEASON = r"(?:spring|summer|fall|autumn|winter)"

# A sentence ends at . ! ? or a line break, but not after a title or an initial ("St. Louis").
# Read left to right, a run of marks or of line breaks is met at its first character: the
# pattern starts with a plain character set, so a search skips the rest of a text at C speed.
SENTENCE_END = re.compile(r"[.!?…\n](?:(?<=[.!?…])[.!?…]*+(?=[\s\"”’)]|$)|(?<=\n)\n*+)")
TITLE = re.compile(r"(?:^|\W)(?:Mr|Mrs|Ms|Dr|St|Mt|Jr|Sr|vs|[A-HJ-Z])$")

# Where a statement's object ends: the end of its clause (contract section 19).
_CLAUSE_WORDS = (
    r"and|but|because|cause|cuz|so|with|who|whom|whose|which|where|when|whenever|since|while"
    r"|whereas|although|though|or|then|that|until|till|unless|if|especially|particularly"
    r"|except|including|plus|than"
)
_PUNCTUATION = r"[,;:!?()\[\]\"“”…]|\s[-–—]+\s|[–—]"  # sentences end at "." already
_EXTRA = {
    "place": r"for|from|to|after|before|during|as|by",
    "org": r"for|from|to|after|before|during|as|in|on|by|near",
    "job": r"at|in|for|on|from|to|after|before|during|with|by",
    "language": r"to|with|at|in|for|on|from|by|around",
}
OBJECT_END = {
    kind: re.compile(rf"{_PUNCTUATION}|\s(?:{_CLAUSE_WORDS}{'|' + extra if extra else ''})\b", _I)
    for kind, extra in (("", ""), *_EXTRA.items())
}

# Time words and fillers that trail an object and are not part of it; one is dropped at a time.
_TAIL_WORDS = (
    r"now|right\s+now|currently|at\s+the\s+moment|at\s+present|anymore|any\s+more|no\s+more"
    r"|these\s+days|nowadays|lately|recently|already|again|still|too|also|as\s+well|either"
    r"|though|anyway|anyways|today|tonight|yesterday|tomorrow|for\s+now|there|here"
    rf"|this\s+(?:morning|afternoon|evening|week|weekend|month|year|{SEASON})"
    rf"|(?:last|next|past)\s+(?:night|week|weekend|month|year|time|{SEASON}|{MONTH}|{WEEKDAY})"
    rf"|in\s+(?:\d{{4}}|{MONTH}(?:\s+\d{{4}})?|(?:the\s+)?{SEASON}(?:\s+of\s+\d{{4}})?)"
    rf"|on\s+{WEEKDAY}"
    r"|(?:\w+|a\s+(?:few|couple(?:\s+of)?))\s+(?:days?|weeks?|months?|years?|decades?)\s+ago"
    r"|a\s+while\s+(?:ago|back)|long\s+ago|ages\s+ago|back\s+then|back\s+in\s+\d{4}"
    r"|at\s+the\s+time|every\s+(?:day|week|morning|night|weekend|year)|everyday|each\s+day"
    r"|daily|(?:so|very)\s+much|a\s+lot|a\s+ton|lots|more|better|best|the\s+most|most|really"
    r"|actually|honestly|totally|for\s+sure|of\s+course|obviously|lol|haha+|btw|tbh"
    r"|by\s+the\s+way|originally|fluently|well|perfectly|natively"
    r"|for\s+(?:a\s+while|years|ages|a\s+long\s+time|(?:\w+|\d+)\s+(?:days?|weeks?|months?|years?))"
)
TAIL = re.compile(rf"(?:^|\s+)(?:{_TAIL_WORDS})$", _I)
DATE_TAIL = re.compile(r"(?:^|\s+)(?:now|though|too|also|btw|actually|by\s+the\s+way)$", _I)
ANYMORE = re.compile(r"\b(?:anymore|any\s+more|no\s+more)\b", _I)

# The words before a head are read lowercased, by case-sensitive patterns (several times faster
# than IGNORECASE ones). Clause marks: the clause a head sits in starts after the last one.
CLAUSE_MARK = re.compile(
    r"[,;:()\[\]\"“”]|\s[-–—]+\s|[–—]|\b(?:and|but|so|because|cause|or|though|although|yet"
    r"|whereas|plus|then)\b",
)
_AUX = (
    rf"(?:do|does|did|am|is|are|was|were|can|could|will|would|should|shall|have|has|had|may"
    rf"|might|must|(?:do|does|did|is|are|was|were|have|has|can|could|would|should|won|wo)n{_APOS}?t)"
)
_LEAD = r"^\W*(?:(?:and|but|so|or|well|oh|hey|also|then|wait|ok|okay|um|hmm|btw|now)\W+)*"
# A clause that opens like a question: "do I ...", "do you know I ...", "why do I ...".
ASKING = re.compile(
    rf"{_LEAD}(?:{_AUX}\s*$|{_AUX}\s+(?:i|you|we|they|he|she|it|my|your|there|that|this|anyone)\b"
    rf"|(?:what|where|who|whom|whose|why|how|which|when){_APOS}?(?:s\b|\s+{_AUX}\b))",
)
CONDITION = re.compile(
    r"\b(?:if|unless|whether|suppose[sd]?|supposing|assuming|assume|imagine|imagining"
    r"|pretend(?:ing)?|provided|providing|in\s+case|as\s+long\s+as|let['’]?s\s+say)\b",
)
WISH = re.compile(
    r"\b(?:want(?:s|ed)?|wanna|wish(?:es|ed)?|hope[sd]?|hoping|hopefully|dream(?:s|ed|ing)?"
    r"|plan(?:s|ned|ning)?|thinking\s+(?:of|about)|think\s+about|consider(?:ing)?"
    r"|intend(?:s|ing)?|would|will|gonna|going\s+to|might|could|should|maybe|perhaps"
    r"|someday|some\s+day|one\s+day|eventually|about\s+to|looking\s+forward"
    r"|can['’]?t\s+wait|cannot\s+wait|if\s+only|aim(?:ing)?\s+to)\b|['’](?:d|ll)\b",
)
# "when I live in X" is a plan; "when I moved to X" a fact (past heads skip this).
UNTIL = re.compile(
    r"\b(?:when|whenever|once|after|before|until|till|as\s+soon\s+as|by\s+the\s+time"
    r"|the\s+day|the\s+moment)\s*$",
)
# Someone else's words: "my sister says I ...", "he told me: I ...".
REPORTED = re.compile(
    r"(?:^|[^\w'’])(?P<who>\w+)\s+(?:(?:always|often|once|just|also|never|keeps?|kept)\s+)?"
    r"(?:say(?:s|ing)?|said|tell(?:s|ing)?\s+\w+|told\s+\w+|think(?:s|ing)?|thought|believe[sd]?"
    r"|claim(?:s|ed)?|insist(?:s|ed)?|wrote|writes|swears?|swore|assume[sd]?|guess(?:es|ed)?"
    r"|reckons?|figures?)\s*(?:that\s*)?[:,]?\s*[\"“‘']?\s*$",
)
QUOTES = re.compile(r"[\"“”]")


def _set(words: str) -> frozenset[str]:
    return frozenset(words.replace(",", " ").split())


_PRONOUNS = (
    "it its it's that this these those them him her you u ya y'all us me myself yourself one "
    "ones everything something anything nothing everyone everybody someone somebody anyone "
    "anybody all both either neither what how why who whom when where which whatever there "
    "here your yours his hers their theirs our ours is are was were be been am has have had "
    "do does did will would can could should might must not no never"
)
_PREPOSITIONS = "about with of in on at for from by into as like than to up out over off down"
_THING = f"{_PRONOUNS} {_PREPOSITIONS} so too very more less much lot lots same better best such"
STOP_FIRST = {
    "": _set(_PRONOUNS),
    "thing": _set(_THING),
    # "My favorite treat is this tart" names it; "I love this" only points at something.
    "favorite": _set(_THING) - {"this", "that", "these", "those"},
    "place": _set(
        f"{_PRONOUNS} home night nights weekends weekend hours free fun money least times fear "
        "hope denial peace around abroad overseas town work school"
    ),
    "org": _set(
        f"{_PRONOUNS} {_PREPOSITIONS} home night nights weekends weekend hours free fun money "
        "least times myself"
    ),
    "job": _set(
        f"{_PRONOUNS} {_PREPOSITIONS} hard much well long fast part little usual great good "
        "fine ok okay boring stressful tough fun amazing awesome demanding exhausting tiring so "
        "very really pretty too going getting killing driving taking keeping making being "
        "stressing wearing eating done over important interesting easy difficult crazy hectic "
        "busy"
    ),
    "language": _set(
        f"{_PRONOUNS} {_PREPOSITIONS} my truth freely softly loudly highly volumes louder well "
        "plainly frankly honestly"
    ),
}
# Words after "my wife is" or "my name is" that describe rather than name.
NOT_A_NAME = _set(
    f"{_PRONOUNS} {_PREPOSITIONS} a an the my so very really not also still always just pretty "
    "quite too super such more less much pregnant sick ill tired busy away home late early gone "
    "upset angry mad happy sad excited nervous worried fine ok okay good well better worse "
    "sweet kind funny smart right wrong sure ready done finished free older younger taller "
    "shorter retired unemployed scared afraid crazy nuts awesome amazing great lovely perfect "
    "best asleep awake back here there on off over hilarious american british english "
    "canadian australian irish scottish welsh french german italian spanish portuguese dutch "
    "swedish norwegian danish finnish polish russian ukrainian greek turkish chinese japanese "
    "korean indian mexican brazilian argentinian african nigerian kenyan egyptian israeli "
    "iranian vietnamese thai filipino indonesian catholic jewish muslim christian vegan "
    "vegetarian single engaged married divorced everything incredible wonderful beautiful "
    "gorgeous cute tall short young old new fun hot later tomorrow tonight today anytime "
    "sometime whenever soon old-fashioned maybe please now then again bored stressed obsessed "
    "annoyed pleased amazed interested surprised disappointed"
)
NAME_SUFFIXES = ("ing", "ly", "ous", "ful", "ive", "able", "ible", "ic", "less", "'s", "’s")
LANGUAGES = _set(
    "english spanish french german italian portuguese dutch swedish norwegian danish finnish "
    "polish russian ukrainian czech slovak hungarian romanian bulgarian greek turkish arabic "
    "hebrew persian farsi hindi urdu bengali punjabi tamil telugu marathi gujarati chinese "
    "mandarin cantonese japanese korean vietnamese thai indonesian malay tagalog filipino "
    "swahili amharic yoruba igbo zulu afrikaans latin esperanto catalan basque galician "
    "irish welsh gaelic icelandic serbian croatian bosnian slovenian albanian lithuanian "
    "latvian estonian georgian armenian kurdish pashto nepali sinhala khmer lao burmese "
    "mongolian kazakh uzbek asl sign language"
)
LANGUAGE_LEAD = re.compile(
    r"^(?:(?:a\s+(?:little|bit)(?:\s+of)?|some|fluent|basic|conversational|broken|native"
    r"|decent|good|perfect|very\s+little|little)\s+)+",
    _I,
)
# An object of "I love X" that is a remark about what is shown, not a lasting taste.
REMARK = re.compile(
    r"^the\s+(?:way|fact|idea|thought)\b|^the\s+(?:look|looks|sound|feel|vibe|vibes|colou?rs?"
    r"|energy|message|details?|pics?|pictures?|photos?|shot|view|design|name)$|^to\s+(?:say|admit"
    r"|think|imagine|hear|see|know|tell|be|ask|point|mention|read|watch)\b",
    _I,
)
SECOND_PERSON = re.compile(r"\b(?:you|your|yours|ya|u|y['’]all)\b", _I)
# A taste that points at what the conversation holds ("I love having them around", "seeing it
# like this") names nothing once read alone.
POINTING = re.compile(r"\b(?:it|its|them|this|that|these|those|him|her|he|she|they|their)\b", _I)
# A place that is only a time: "I was born in 1990", "... in May".
TIME_ONLY = re.compile(
    rf"^(?:the\s+)?(?:\d{{4}}s?|\d{{2}}s|{MONTH}(?:\s+\d{{1,2}}\w*)?(?:,?\s+\d{{4}})?"
    rf"|\d{{1,2}}\w*\s+(?:of\s+)?{MONTH}(?:,?\s+\d{{4}})?|{WEEKDAY}|{SEASON}(?:\s+of\s+\d{{4}})?)$",
    _I,
)
DATE_WORD = re.compile(
    rf"\b{MONTH}\b|\d|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|eleventh|twelfth|\w+teenth|twentieth|thirtieth|twenty-\w+|thirty-first)\b",
    _I,
)
