"""What a recall ranks while its agent is still being read from SQLite (a first start without a
snapshot: 30 s or more at a million memories): a stand-in index of the rows most likely to be
the answer, read for that recall alone.

The stand-in holds the agent's RECENT newest memories (by timestamp: the highest recency, so
most of the best priors) and the MATCHED newest whose content or summary holds a query
word (found with SQLite's LIKE on the word's stem, or what the stem shares with the word: a
superset of the memories that hold the word). The recall then ranks it exactly as it ranks a
loaded agent, so its answer is the loaded agent's whenever the best memories are among those
rows: an older memory that matches none of the query's words, or one past the MATCHED most
recent matches of a common word, can be missed; the keyword weights that depend on how many
memories hold a word are counted over the stand-in's rows. Once the load is installed, recalls
rank the whole agent again (worker/recall_index/index.py `with_snapshot`).
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw

from handlers.text import query_keywords, stem
from worker.recall_index.agent_index import ROW_SQL, AgentIndex, AgentKey, Row
from worker.recall_index.loading import RECALLABLE

RECENT = 500
MATCHED = 2000
# The query's words looked for (the first ones): each is a LIKE over every row of the agent.
WORDS = 8


def patterns(query: str) -> list[str]:
    """LIKE patterns that every memory holding one of the query's words (or, in the `stems`
    keyword mode, a word of the same stem) matches: the part the word and its stem share
    ("happy", "happi": "happ"), `%`, `_` and `\\` escaped."""
    found: dict[str, None] = {}
    for word in query_keywords(query)[:WORDS]:
        stemmed, shared = stem(word), 0
        while shared < min(len(word), len(stemmed)) and word[shared] == stemmed[shared]:
            shared += 1
        part = word[: max(shared, min(3, len(word)))]
        escaped = part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found[f"%{escaped}%"] = None
    return list(found)


def stand_in(
    conn: apsw.Connection, key: AgentKey, query: str, *, anchor_ms: int, codes: bool
) -> AgentIndex:
    """The agent's stand-in for a recall of `query` (the module's docstring), read on conn in
    the caller's read transaction."""
    rowids: set[int] = set()
    for (rowid,) in conn.execute(
        f"SELECT rowid FROM memories WHERE tenant = ? AND agent_id = ?{RECALLABLE} "
        "ORDER BY timestamp DESC LIMIT ?",
        (*key, RECENT),
    ):
        rowids.add(rowid)
    likes = patterns(query)
    if likes:
        matching = " OR ".join(
            "content LIKE ? ESCAPE '\\' OR summary LIKE ? ESCAPE '\\'" for _ in likes
        )
        found = conn.execute(
            f"SELECT rowid FROM memories WHERE tenant = ? AND agent_id = ?{RECALLABLE} "
            f"AND ({matching}) ORDER BY timestamp DESC LIMIT ?",
            (*key, *(like for like in likes for _ in range(2)), MATCHED),
        )
        rowids.update(rowid for (rowid,) in found)
    index = AgentIndex(anchor_ms=anchor_ms, capacity=max(16, len(rowids)), codes=codes)
    index.load(_rows(conn, sorted(rowids)))
    return index


def _rows(conn: apsw.Connection, rowids: list[int]) -> Iterator[Row]:
    """The rows of `rowids` (ascending), in the order a load reads them."""
    for start in range(0, len(rowids), 500):
        chunk = rowids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        yield from conn.execute(f"{ROW_SQL} WHERE rowid IN ({marks}) ORDER BY rowid", chunk)
