"""The facts memory::context shows (contract section 19): the agent's current facts that share
a keyword with the query, at most 20, one `fact: <statement> (since YYYY-MM-DD)` line each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import apsw

from handlers.facts.keys import statement
from handlers.facts.reading import CURRENT, VISIBLE
from handlers.text import STOPWORDS, stem, tokens
from schema.base import Agent

MAX_FACTS = 20
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def keywords(text: str) -> set[str]:
    """The stems of the text's words that are not stopwords ("lives" and "live" share one)."""
    return {stem(token) for token in tokens(text) if token not in STOPWORDS}


def fact_line(subject: str, predicate: str, obj: str, valid_from: int) -> str:
    day = (EPOCH + timedelta(milliseconds=valid_from)).strftime("%Y-%m-%d")
    return f"fact: {statement(subject, predicate, obj)} (since {day})"


def context_facts(conn: apsw.Connection, agent: Agent, query: str) -> list[str]:
    """The lines, ordered by subject, predicate and validFrom; none for a query of stopwords."""
    wanted = keywords(query)
    if not wanted:
        return []
    lines = []
    for subject, predicate, obj, valid_from in conn.execute(
        f"SELECT f.subject, f.predicate, f.object, f.valid_from FROM facts f "
        f"WHERE f.tenant = ? AND f.agent_id = ? AND {CURRENT} AND {VISIBLE} "
        "ORDER BY f.subject_key, f.predicate, f.valid_from, f.seq",
        agent,
    ):
        said = statement(str(subject), str(predicate).replace(":", " "), str(obj))
        if keywords(said) & wanted:
            lines.append(fact_line(str(subject), str(predicate), str(obj), int(valid_from)))
            if len(lines) == MAX_FACTS:
                break
    return lines
