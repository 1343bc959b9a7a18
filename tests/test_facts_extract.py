"""Facts from stored text (contract section 19): every listed phrasing, where an object ends,
any letter case and contraction, anywhere in the text, and nothing from questions,
conditionals, wishes and plans, or statements about someone else; over the hand-written test
set in tests/fixtures/facts_sentences.jsonl and the rules one by one."""

from __future__ import annotations

import re
import time

import pytest

from handlers.facts.extract import Statement, extract_statements
from worker.bench.facts import TEST_SET, load_cases, score

CASES = load_cases(TEST_SET)
# Section 19's list, as the test set labels its sentences.
LISTED = [
    "my name is X", "call me X", "I am N years old", "I just turned N", "my birthday is (on) X",
    "I'm from X", "I grew up in X", "I live in X", "I'm living in X", "I moved to X",
    "I've moved to X", "I relocated to X", "I'm based in X", "I work at X", "I work for X",
    "I got a job at X", "I started working at X", "I work as a(n) X", "my job is X",
    "I study at X", "I'm married to X", "my wife/husband/partner is X", "I like X", "I love X",
    "I enjoy X", "I'm a fan of X", "I don't like X", "I hate X", "I can't stand X",
    "my favorite <thing> is X", "I speak X", "I'm allergic to X", "I don't live in X anymore",
    "I no longer live in X", "I no longer work at X", "I quit my job at X",
    "I don't like X anymore",
]  # fmt: skip
NOT_FACTS = ["question", "conditional", "wish", "someone_else"]


@pytest.mark.parametrize("phrasing", LISTED)
def test_every_listed_phrasing_gives_its_statements_with_varied_objects(phrasing: str) -> None:
    """Each listed phrasing has at least four sentences in the set (each with another object
    and other words around it), and each sentence gives exactly its statements, in order."""
    cases = [case for case in CASES if case.phrasing == phrasing]
    assert len(cases) >= 4
    assert len({case.expect[0].object.lower() for case in cases}) == len(cases)
    for case in cases:
        assert extract_statements(case.text) == case.expect, case.text


@pytest.mark.parametrize("kind", NOT_FACTS)
def test_sixty_non_facts_of_each_kind_give_no_statement(kind: str) -> None:
    """Questions, conditionals, wishes and plans, and statements about someone else: at least
    60 sentences of each kind in the set, most holding a listed phrasing, and none gives a
    statement."""
    cases = [case for case in CASES if case.kind == kind]
    assert len(cases) >= 60
    stated = {case.text: extract_statements(case.text) for case in cases}
    assert {text: found for text, found in stated.items() if found} == {}


def test_precision_and_recall_over_the_test_set_meet_the_issue_bar() -> None:
    """Over at least 200 sentences: precision at least 0.95, recall at least 0.90."""
    results = score(CASES)
    assert results["sentences"] >= 200
    assert results["precision"] >= 0.95 and results["recall"] >= 0.90


@pytest.mark.parametrize(
    "tail",
    [", which is loud", "; it is loud", ": it is loud", " - it is loud", " and love it",
     " but work in Jersey", " because of work", " so I walk a lot", " with my wife",
     " who knew", " which is loud", " where rents are high", " when I'm not away",
     " since 2019", " while I study", " now", " currently", " these days", " yesterday",
     " last month", " in 2019", " in May", " two years ago", " now, with my wife"],
)  # fmt: skip
def test_an_object_ends_at_its_clause_without_trailing_time_words(tail: str) -> None:
    """The object runs to a comma, ";", ":", a dash or a clause word, and trailing time words
    are not part of it."""
    assert extract_statements(f"I moved to New York{tail}.") == [Statement("lives_in", "New York")]


def test_anymore_makes_an_end_and_is_not_part_of_the_object() -> None:
    """ "I don't like X anymore" ends likes X; "I don't like X" is a dislike; "I don't live in
    X anymore" and "I no longer live in X" end lives_in X."""
    assert extract_statements("I don't like jazz anymore") == [Statement("likes", "jazz", True)]
    assert extract_statements("I don't like jazz") == [Statement("dislikes", "jazz")]
    for text in ("I don't live in Rome anymore.", "I no longer live in Rome these days"):
        assert extract_statements(text) == [Statement("lives_in", "Rome", True)]


@pytest.mark.parametrize(
    ("texts", "statement"),
    [
        (["I'm from Chile", "I am from Chile", "Im from Chile", "I’m from Chile",
          "i'm from Chile", "I AM FROM Chile", "i am FROM Chile"], Statement("from", "Chile")),
        (["I don't like olives", "I do not like olives", "I dont like olives",
          "I DON'T LIKE olives", "I don’t like olives"], Statement("dislikes", "olives")),
        (["I've moved to Oslo", "I have moved to Oslo", "Ive moved to Oslo", "I’ve moved to Oslo",
          "i've MOVED TO Oslo"], Statement("lives_in", "Oslo")),
        (["I can't stand rain", "I cannot stand rain", "I cant stand rain", "I can not stand rain",
          "I can’t stand rain"], Statement("dislikes", "rain")),
    ],
)  # fmt: skip
def test_any_letter_case_and_contraction_gives_the_same_statement(
    texts: list[str], statement: Statement
) -> None:
    """Each phrasing in any letter case, with or without its contraction and apostrophe."""
    for text in texts:
        assert extract_statements(text) == [statement], text


def test_a_statement_is_found_anywhere_in_a_long_text_with_its_case_kept() -> None:
    """After 100 KB of other sentences, and after other words in its own sentence; the object
    keeps the letter case it was written in."""
    prose = "The weather was fine and the train was late again. " * 2000
    text = f"{prose}Long day, anyway i live in new york with my cat."
    assert extract_statements(text) == [Statement("lives_in", "new york")]


def test_several_statements_in_one_text_come_in_order_each_once() -> None:
    """Statements of several sentences and clauses, in the order written; a repeat is given
    once."""
    text = "My name is Ana. I'm from Chile, and I work at Google; I'm from Chile!"
    assert extract_statements(text) == [
        Statement("name", "Ana"),
        Statement("from", "Chile"),
        Statement("works_at", "Google"),
    ]


@pytest.mark.parametrize(
    "unit",
    ["I like x ", "I very ", "I'm ", "i ", "I so so so so so so so so ", "I, ", "my ",
     "I moved from a b c d e f g h i j k l m n o p q r s t u v w x y z to ", "I live in Rome? ",
     "I.", "?!", "x" + " " * 64],
)  # fmt: skip
def test_a_512_kib_text_built_to_be_slow_costs_under_a_second(unit: str) -> None:
    """Every pattern stays linear and the reading is bounded: half a megabyte (the largest
    content) of any repeated head, adverb, clause mark or punctuation costs well under a
    second of CPU (0.05 s at worst on the development machine)."""
    text = (unit * (512 * 1024 // len(unit) + 1))[: 512 * 1024]
    started = time.thread_time()
    extract_statements(text)
    assert time.thread_time() - started < 1.0


def test_a_place_or_name_that_is_no_such_thing_gives_nothing() -> None:
    """ "I was born in 1990" names no place, "call me later" no name, "my birthday is coming
    up" no date, "I work for myself" no workplace; their real counterparts do."""
    for text in ("I was born in 1990.", "Call me later.", "My birthday is coming up!",
                 "I work for myself.", "I'm from here.", "I speak to my mom daily."):  # fmt: skip
        assert extract_statements(text) == [], text
    assert extract_statements("I was born in Accra in 1990.") == [Statement("from", "Accra")]
    assert extract_statements("Call me Kofi.") == [Statement("name", "Kofi")]
    assert extract_statements("My birthday is on May 2.") == [Statement("birthday", "May 2")]


def test_a_taste_for_the_thing_at_hand_is_no_lasting_taste() -> None:
    """ "I love the colours" (of the photo just shared), "I love your cake", "I love it",
    "I love having them around" name nothing once read alone; "I love the Beatles", "I can't
    stand the cold" and "I love baking" do."""
    for text in ("I love the colours!", "I love your cake.", "I love it!",
                 "I really love having them around.", "I love how you did that."):  # fmt: skip
        assert extract_statements(text) == [], text
    assert extract_statements("I love the Beatles.") == [Statement("likes", "the Beatles")]
    assert extract_statements("I can't stand the cold.") == [Statement("dislikes", "the cold")]
    assert extract_statements("I love baking.") == [Statement("likes", "baking")]


def test_extracting_a_text_with_words_never_seen_together_compiles_no_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each head is compiled once, at import: a text whose set of head words is new costs no
    compile (several milliseconds each, for each new set, when the heads a text held were
    joined into a pattern of their own)."""
    compiled: list[str] = []
    real = re.compile

    def counting(pattern: str, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)
    text = "My favourite spouse quit; I moved to Oslo and I'm allergic to cats, I speak Farsi."
    assert {s.predicate for s in extract_statements(text)} == {"lives_in", "allergic_to", "speaks"}
    assert compiled == []


def test_i_have_an_allergy_to_x_states_allergic_to_x() -> None:
    """ "I have (a severe) allergy / allergies to X" is the allergic_to phrasing too (the scan's
    gate once stopped at "allerg" and let none of them through)."""
    for text, thing in [
        ("I have an allergy to peanuts.", "peanuts"),
        ("I have a severe allergy to wasp stings.", "wasp stings"),
        ("I have allergies to ragweed, sadly.", "ragweed"),
    ]:
        assert [(s.predicate, s.object, s.ends) for s in extract_statements(text)] == [
            ("allergic_to", thing, False)
        ], text
