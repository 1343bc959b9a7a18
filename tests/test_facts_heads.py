"""The heads a text is matched against (handlers/facts/heads.py): only those whose words it
holds and that start with the cue's letter, none compiled for the text, and at every "I", "my"
and "call" of the test set (in any case, with the letters that IGNORECASE folds unusually) the
same head, at the same span, as the pattern of every head."""

from __future__ import annotations

import re

from handlers.facts.extract import CUE
from handlers.facts.heads import NEEDS, first_head, heads_for
from handlers.facts.phrasings import GATE, PHRASINGS
from worker.bench.facts import TEST_SET, load_cases

EVERY_HEAD = re.compile(
    GATE + "(?:" + "|".join(f"(?P<p{i}>{p.head})" for i, p in enumerate(PHRASINGS)) + ")",
    re.IGNORECASE,
)
GATED = re.compile(GATE, re.IGNORECASE)


def _variants(text: str) -> list[str]:
    return [
        text,
        text.upper(),
        text.lower(),
        text.replace("i", "\u0131"),  # dotless i: IGNORECASE matches it as "i"
        text.replace("I", "\u0130"),  # dotted capital I
        text.replace("s", "\u017f"),  # long s: IGNORECASE matches it as "s"
        text.replace("k", "\u212a"),  # Kelvin sign: matched as "k"
    ]


def test_a_text_is_matched_only_against_the_heads_whose_words_it_holds() -> None:
    """'I moved to Oslo' is tried against the moving heads only, not the likes or the jobs."""
    tried = {index for heads in heads_for("I moved to Oslo.").values() for index, _, _ in heads}
    labels = {PHRASINGS[i].label for i in tried}
    assert "I('ve) moved to X" in labels
    assert "I moved away from / out of X" in labels
    assert "I like / love / enjoy X" not in labels
    assert "I work at / for X" not in labels
    assert len(tried) < len(PHRASINGS) // 4


def test_every_head_has_words_that_each_of_its_matches_holds() -> None:
    """No head is tried on every text for want of a word it needs."""
    assert all(needs for needs in NEEDS)


def test_every_cue_of_the_test_set_matches_the_same_head_as_with_every_head() -> None:
    """Same span, same head, or no match, at each cue of each sentence and its variants."""
    compared = matched = 0
    for case in load_cases(TEST_SET):
        for text in _variants(case.text):
            candidates = heads_for(text)
            for cue in CUE.finditer(text):
                expected = EVERY_HEAD.match(text, cue.start())
                gated = GATED.match(text, cue.start()) is not None  # as extraction checks first
                found = first_head(candidates, text, cue.start()) if gated else None
                compared += 1
                if expected is None:
                    assert found is None, text
                    continue
                matched += 1
                assert found is not None, text
                index, match = found
                assert (match.span(), f"p{index}") == (expected.span(), expected.lastgroup)
                assert match.groupdict() == {
                    name: value
                    for name, value in expected.groupdict().items()
                    if name in match.re.groupindex
                }
    assert compared > 2000 and matched > 1000
