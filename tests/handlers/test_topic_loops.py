"""Open loops and the built-in topic text (contract section 21; handlers/topics/loops.py and
extract.py): questions open until answered, promises and to-dos until reported done, each
pointing at the message that opened it; a title, labels and summary without the LLM."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.topics.extract import SUMMARY_CHARS, TITLE_CHARS, extract
from handlers.topics.loops import CUE, LoopMessage, OpenLoop, advance, has_cue, open_loops


def said(*lines: tuple[str, str]) -> list[LoopMessage]:
    return [
        LoopMessage(id=f"m{n}", role=role, text=text) for n, (role, text) in enumerate(lines, 1)
    ]


def kinds(loops: list[OpenLoop]) -> list[tuple[str, str]]:
    return [(loop.kind, loop.message_id) for loop in loops]


def test_a_question_stays_open_until_another_role_answers_it() -> None:
    """A user's question is open after an acknowledgement or the user's own follow-up, and
    closed by the assistant's answer; the assistant's own question is closed by the user's."""
    messages = said(
        ("user", "Is it worth doing a day trip to Sintra?"),
        ("user", "ok"),
        ("assistant", "Definitely. Take the train from Rossio. Are you flying in on Thursday?"),
    )
    assert kinds(open_loops(messages[:1])) == [("question", "m1")]
    assert kinds(open_loops(messages[:2])) == [("question", "m1")]
    assert kinds(open_loops(messages)) == [("question", "m3")]
    after = advance(
        open_loops(messages),
        LoopMessage(id="m4", role="user", text="Yes, landing Thursday morning."),
    )
    assert after == []


def test_an_answer_that_only_asks_back_does_not_close_the_question() -> None:
    """A clarifying question in reply is not an answer."""
    loops = open_loops(
        said(("user", "How much lamb for eight people?"), ("assistant", "Boneless or bone-in?"))
    )
    assert kinds(loops) == [("question", "m1"), ("question", "m2")]


def test_a_promise_stays_open_until_its_speaker_reports_it_done() -> None:
    """ "I'll book the hotel" is open; the assistant cannot close it; the user's "booked the
    hotel" does, and the loop's text is the sentence that made it."""
    messages = said(
        ("user", "Great, I'll book the hotel in Chiado tonight."),
        ("assistant", "Sounds like a plan. I booked nothing, of course."),
    )
    loops = open_loops(messages)
    assert loops == [
        OpenLoop(
            kind="promise",
            text="Great, I'll book the hotel in Chiado tonight.",
            message_id="m1",
            role="user",
        )
    ]
    done = advance(loops, LoopMessage(id="m3", role="user", text="Booked the hotel, 140 a night."))
    assert done == []


def test_a_todo_is_closed_by_a_report_sharing_its_words_or_a_bare_done() -> None:
    """ "I need to register..." closes when someone says it was registered; a report about
    something else does not close it; a bare "done" closes the latest to-do."""
    loops = open_loops(
        said(
            ("user", "I need to register the puppy with the vet before Saturday."),
            ("user", "Remind me to order the lamb shoulder on Thursday."),
        )
    )
    assert kinds(loops) == [("todo", "m1"), ("todo", "m2")]
    unrelated = advance(loops, LoopMessage(id="m3", role="user", text="I've sent the invitations."))
    assert kinds(unrelated) == [("todo", "m1"), ("todo", "m2")]
    vet = advance(loops, LoopMessage(id="m4", role="user", text="Registered him at the vet today."))
    assert kinds(vet) == [("todo", "m2")]
    bare = advance(loops, LoopMessage(id="m5", role="user", text="Done!"))
    assert kinds(bare) == [("todo", "m1")]


def test_let_me_check_is_a_promise_closed_when_the_check_is_reported() -> None:
    """ "Let me check the CI logs" opens; "Checked the CI logs: ..." closes it."""
    loops = open_loops(said(("user", "Let me check the CI logs to see when it failed.")))
    assert kinds(loops) == [("promise", "m1")]
    closed = advance(
        loops, LoopMessage(id="m2", role="user", text="Checked the CI logs: all near midnight UTC.")
    )
    assert closed == []


def test_statements_open_nothing() -> None:
    """Plain statements from either side open no loop."""
    assert (
        open_loops(
            said(
                ("user", "My knee hurts after running."),
                ("assistant", "That is typical of IT band syndrome."),
            )
        )
        == []
    )


def test_the_builtin_extract_gives_a_title_labels_and_a_bounded_summary() -> None:
    """Labels are the topic's most used words as written; the title is the first user sentence
    holding the top label; the summary counts messages and quotes the sentences richest in
    labels, within its bound; the same messages give the same text."""
    messages = [
        ("user", "I'm planning a long weekend in Lisbon in May. Where should we stay in Lisbon?"),
        ("assistant", "For a first visit Lisbon's Baixa or Chiado are central and walkable."),
        ("user", "Is it worth doing a day trip to Sintra from Lisbon?"),
        ("assistant", "Definitely. Take the train from Rossio station in Lisbon."),
        ("user", "ok thanks"),
    ]
    text = extract(messages)
    assert text.labels[0] == "lisbon" and len(text.labels) == 5
    assert text.title == "I'm planning a long weekend in Lisbon in May."
    assert text.summary.startswith("5 messages (2 assistant, 3 user). ")
    assert "Sintra" in text.summary
    assert extract(messages) == text
    long = [("user", "Lisbon " + "word " * 400 + "end.")] * 40
    bounded = extract(long)
    assert len(bounded.title) <= TITLE_CHARS and len(bounded.summary) <= SUMMARY_CHARS
    assert extract([]).title == "Untitled" and extract([]).summary == "0 messages."


CUE_PHRASINGS = [
    "I need to", "I have to", "I've got to", "I’ve got to", "I must", "we need to", "we have to",
    "I still need to", "remind me to", "don't forget to", "need to remember to", "to-do", "todo",
    "adding it to my list", "I'll", "I’ll", "I will", "I'm going to", "I am going to", "let me",
    "I'm gonna", "will do", "I promise to", "İ'll", "ı will", "İ muſt", "remınd me to",
    "LET ME", "Todo", "ADD IT TO MY LİST",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(CUE_PHRASINGS),
            st.sampled_from(["the", "trip", "ok", "I", "ll", "go", "to", "do", "list", "must-see"]),
            st.text(alphabet="iIİıſKkLlsStTmMuUnNeEdDoO-' ’", max_size=6),
        ),
        max_size=8,
    ).map(" ".join)
)
def test_the_cue_test_says_what_the_cue_expression_finds(text: str) -> None:
    """`has_cue` (a substring test before the expression) agrees with CUE on every text,
    including case variants re.IGNORECASE matches (Turkish i's, the long s, the Kelvin sign)."""
    assert has_cue(text) == (CUE.search(text) is not None)
