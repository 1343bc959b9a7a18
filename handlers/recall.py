"""memory::recall: the contract's hybrid score, exact over all of an agent's memories.

Ranking reads an agent's scoring columns (kept in memory by worker/index.py) and needs no
database; marking the winners as accessed is a small write that also returns their full rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import apsw
import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.text import query_keywords
from schema.memory import RecalledMemory, RecallReply, RecallRequest

WEEK_MS = 604_800_000.0
ROLE_CODES = {"user": 0, "assistant": 1, "system": 2}
KeywordMode = Literal["share", "idf"]


@dataclass
class Columns:
    """One agent's memories as parallel arrays; rows with live False are deleted."""

    ids: Sequence[str]
    live: npt.NDArray[np.bool_]
    timestamp: npt.NDArray[np.int64]
    importance: npt.NDArray[np.float64]
    confidence: npt.NDArray[np.float64]
    role: npt.NDArray[np.int8]
    session: npt.NDArray[np.int32]
    session_codes: dict[str, int]
    vectors: dict[str, npt.NDArray[np.float32]]
    has_vector: dict[str, npt.NDArray[np.bool_]]
    postings: dict[str, npt.NDArray[np.int64]]


def keyword_scores(
    columns: Columns, keywords: list[str], mode: KeywordMode
) -> npt.NDArray[np.float64]:
    """Share of query keywords found in each memory; `idf` weighs rare keywords more.

    With equal weights both modes give the same value; a keyword no memory has weighs as much
    as the rarest one, so an unmatched query word still lowers every memory's share.
    """
    rows = len(columns.ids)
    matched = np.zeros(rows, dtype=np.float64)
    if not keywords:
        return matched
    live_count = max(1, int(columns.live.sum()))
    total = 0.0
    for keyword in keywords:
        posting = columns.postings.get(keyword)
        if mode == "idf":
            frequency = 0 if posting is None else int(columns.live[posting].sum())
            weight = float(np.log1p(live_count / max(1, frequency)))
        else:
            weight = 1.0
        total += weight
        if posting is not None and len(posting):
            matched[posting] += weight
    return matched / total


def scores(
    columns: Columns,
    query: str,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
) -> npt.NDArray[np.float64]:
    rows = len(columns.ids)
    cosine = np.zeros(rows, dtype=np.float64)
    if query_vector is not None and query_vector[0] in columns.vectors:
        model, vector = query_vector
        matrix = columns.vectors[model][:rows]
        if matrix.shape[1] == vector.shape[0]:
            cosine = (matrix @ vector).astype(np.float64)
            cosine[~columns.has_vector[model][:rows]] = 0.0
    keyword = keyword_scores(columns, query_keywords(query), keyword_mode)
    age = np.maximum(0, now - columns.timestamp[:rows]).astype(np.float64)
    recency = np.power(0.5, age / WEEK_MS)
    return (
        0.50 * cosine
        + 0.25 * keyword
        + 0.10 * recency
        + 0.10 * columns.importance[:rows]
        + 0.05 * columns.confidence[:rows]
    )


def rank(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
) -> list[tuple[str, float]]:
    """The exact top `limit` as (id, score): score, then newer timestamp, then ascending id."""
    rows = len(columns.ids)
    if rows == 0:
        return []
    eligible = columns.live[:rows].copy()
    if req.roles is not UNSET:
        eligible &= np.isin(columns.role[:rows], [ROLE_CODES[role] for role in req.roles])
    if req.session_id is not UNSET:
        code = columns.session_codes.get(req.session_id)
        if code is None:
            return []
        eligible &= columns.session[:rows] == code
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return []
    score = scores(
        columns, req.query, now=now, query_vector=query_vector, keyword_mode=keyword_mode
    )[candidates]
    if len(candidates) > req.limit:
        kth = np.partition(score, len(score) - req.limit)[len(score) - req.limit]
        keep = score >= kth  # every row tied with the k-th competes on the tie-breaks
        candidates, score = candidates[keep], score[keep]
    found = [
        (float(score[i]), int(columns.timestamp[row]), columns.ids[int(row)])
        for i, row in enumerate(candidates)
    ]
    found.sort(key=lambda item: (-item[0], -item[1], item[2]))
    return [(memory_id, value) for value, _, memory_id in found[: req.limit]]


def mark_recalled(
    conn: apsw.Connection, agent_id: str, ranked: list[tuple[str, float]], *, now: int
) -> RecallReply:
    """Count the access of each returned memory and return the rows as they are after it.

    A memory evicted between ranking and this write is left out rather than resurrected.
    """
    memories = []
    for memory_id, score in ranked:
        row = conn.execute(
            "UPDATE memories SET access_count = access_count + 1, last_accessed = ? "
            "WHERE id = ? AND agent_id = ? RETURNING id, role, content, timestamp, session_id, "
            "importance, confidence, access_count, last_accessed, metadata",
            (now, memory_id, agent_id),
        ).fetchone()
        if row is None:
            continue
        metadata: dict[str, Any] | None = None if row[9] is None else msgspec.json.decode(row[9])
        memories.append(
            RecalledMemory(
                id=row[0],
                role=row[1],
                content=row[2],
                score=score,
                timestamp=row[3],
                session_id=row[4],
                importance=row[5],
                confidence=row[6],
                access_count=row[7],
                last_accessed=row[8],
                metadata=metadata,
            )
        )
    return RecallReply(memories=memories)
