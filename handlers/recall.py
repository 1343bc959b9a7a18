"""memory::recall: the contract's hybrid score, exact over all of an agent's memories.

An agent is the pair (tenant, agentId): every read and write here names both, so that a recall
in one tenant can neither return nor count an access of another tenant's memory.

Ranking reads an agent's scoring columns (kept in memory by worker/recall_index/index.py) and
needs no database; marking the winners as accessed is a small write that also returns their
full rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, Required, TypedDict, Unpack

import apsw
import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers import topk, topk_rows
from handlers.life import MEMORY_COLUMNS, memory_out
from handlers.taxonomy import sensitivities_of, string_list, taxonomy_mask
from handlers.text import query_keywords, stem
from handlers.vector_index import EXACT, VectorIndex, shortlist
from schema.errors import PayloadTooLarge
from schema.life import MemoryOut
from schema.memory import RecalledMemory, RecallReply, RecallRequest

WEEK_MS = 604_800_000.0
# What makes a memory part of the agent's core memory: pinned, or recall policy `always`
# (the condition of the memories_core index, migration 0005).
CORE = "pinned = 1 OR recall_policy = 'always'"
ROLE_CODES = {"user": 0, "assistant": 1, "system": 2}
KeywordMode = Literal["share", "idf", "stems"]
# A ranking: (slot in the columns, score), best first; `ids_of` names them.
Ranked = list[tuple[int, float]]


# Rows of a posting: int32 in the recall index (worker/recall_index/postings.py).
Posting = npt.NDArray[np.int32]


class Term(NamedTuple):
    """A query keyword as `keyword_weights` gives it: its posting (None: no memory has it), its
    share of the keyword term, and the posting's bits where the index keeps them."""

    posting: Posting | None
    weight: float
    dense: topk_rows.Dense | None = None


Terms = list[Term]
# A keyword worth less than this in the score is left out of the estimate that picks a vector
# index's shortlist (not out of the scores): it moves the estimate less than the codes' own error
# on the cosine does, and a common word's million-row posting cost the estimate 1 ms.
NEGLIGIBLE = 0.01


class Postings(Protocol):
    def get(self, token: str) -> Posting | None: ...

    def variants(self, stemmed: str) -> Sequence[str]: ...

    def dense(self, token: str) -> topk_rows.Dense | None: ...


@dataclass
class Columns:
    """A snapshot of one agent's memories as parallel arrays: the first `rows` entries count,
    and rows with live False are deleted. The writer may append beyond `rows` meanwhile."""

    rows: int
    ids: Sequence[str]
    live: npt.NDArray[np.bool_]
    timestamp: npt.NDArray[np.int64]
    importance: npt.NDArray[np.float64]
    confidence: npt.NDArray[np.float64]
    role: npt.NDArray[np.int8]
    session: npt.NDArray[np.int32]
    session_codes: Mapping[str, int]
    vectors: dict[str, npt.NDArray[np.float32]]
    has_vector: dict[str, npt.NDArray[np.bool_]]
    postings: Postings
    # Precomputed per row so that a recall costs a few vector operations: the score's constant
    # part, 0.10 * importance + 0.05 * confidence, and 2 ** ((timestamp - anchor_ms) / week),
    # which times 0.5 ** ((now - anchor_ms) / week) is the recency 0.5 ** ((now - timestamp) /
    # week) (capped at 1 for timestamps in the future).
    static: npt.NDArray[np.float64]
    growth: npt.NDArray[np.float64]
    anchor_ms: int
    pinned: npt.NDArray[np.bool_]
    # (top-level metadata key, canonical JSON value) -> slots: the metadata filter's lookup.
    tags: Mapping[tuple[str, str], Sequence[int] | npt.NDArray[np.int32]]
    # The taxonomy (handlers/taxonomy.py codes) and tag -> slots, the section-13 filters' own.
    category: npt.NDArray[np.int8]
    sensitivity: npt.NDArray[np.int8]
    tag_slots: Mapping[str, Sequence[int] | npt.NDArray[np.int32]]
    # Sign codes of the vectors, per model (handlers/vector_index.py): only where the worker
    # keeps them (MEMORY_WORKER_VECTOR_INDEX other than `exact`).
    codes: dict[str, npt.NDArray[np.uint64]] = field(default_factory=dict)
    # What the ranking without a query vector (handlers/topk.py) reads besides: id -> its
    # slots (to find the excluded ids' slots), and the prior's bounds per block of slots.
    slots_of: Callable[[str], Iterable[int]] | None = None
    bounds: topk_rows.BlockBounds | None = None
    # (model, slots) -> those rows of the model's vectors, read without mapping them in (a
    # snapshot's file: worker/recall_index/mapping.py FileRows); None: index `vectors`.
    vector_rows: Callable[[str, npt.NDArray[np.int64]], npt.NDArray[np.float32]] | None = None
    # `static` and `growth` as float32, where the index keeps them for the codes path's estimate.
    estimates: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]] | None = None


def canonical_json(value: Any) -> str:
    """One spelling per JSON value as the metadata filter compares them (handlers/listing.py
    same_json): object keys sorted, integral numbers as integers, `true` apart from `1`."""

    def normal(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, dict):
            return {key: normal(v) for key, v in item.items()}
        if isinstance(item, list):
            return [normal(v) for v in item]
        return item

    return msgspec.json.encode(normal(value), order="sorted").decode()


def tag_mask(columns: Columns, metadata: dict[str, Any]) -> npt.NDArray[np.bool_]:
    """The rows whose metadata has every key of the filter with an equal value."""
    rows = columns.rows
    mask = np.ones(rows, dtype=np.bool_)
    for key, value in metadata.items():
        slots = np.asarray(columns.tags.get((key, canonical_json(value)), ()), dtype=np.int64)
        has = np.zeros(rows, dtype=np.bool_)
        has[slots[slots < rows]] = True
        mask &= has
    return mask


def static_part(importance: float, confidence: float) -> float:
    return 0.10 * importance + 0.05 * confidence


def growth(timestamp: int, anchor_ms: int) -> float:
    exponent = (timestamp - anchor_ms) / WEEK_MS
    return math.inf if exponent > 1023 else 2.0**exponent


def idf(rows: int, frequency: int) -> float:
    """BM25's inverse document frequency; a word no memory has counts as the rarest (1)."""
    frequency = max(1, frequency)
    return math.log((rows - frequency + 0.5) / (frequency + 0.5) + 1.0)


def stem_posting(postings: Postings, stemmed: str) -> tuple[Posting | None, str | None]:
    """Rows having any word with this stem, each once, and that word when it is the only one."""
    found = [
        (p, token) for token in postings.variants(stemmed) if (p := postings.get(token)) is not None
    ]
    if len(found) <= 1:
        return found[0] if found else (None, None)
    return np.unique(np.concatenate([p for p, _ in found])), None


def keyword_weights(columns: Columns, keywords: list[str], mode: KeywordMode) -> Terms:
    """Each query keyword's posting (its rows in this snapshot) and its share of the keyword term.

    `share` weighs every keyword alike, as the contract says; `idf` weighs rare ones more (a
    keyword no memory has weighs as much as the rarest one, so an unmatched query word still
    lowers every memory's share); `stems` is `idf` over Snowball stems, so "painted" finds
    "painting". With equal weights and no stemming all give the contract's value.

    A posting is cut at `rows` (rows appended after the snapshot) but keeps the rows of removed
    memories, which no ranking lets compete: filtering a common word's posting by the live mask
    cost a million-memory recall 3-5 ms. IDF counts live rows only, through the removed slots,
    which are few.
    """
    if mode == "stems":
        stems = list(dict.fromkeys(stem(keyword) for keyword in keywords))
        pairs = [stem_posting(columns.postings, stemmed) for stemmed in stems]
    else:
        pairs = [(columns.postings.get(keyword), keyword) for keyword in keywords]
    if not pairs:
        return []
    found = [posting for posting, _ in pairs]
    dense = [
        None if posting is None or token is None else columns.postings.dense(token)
        for posting, token in pairs
    ]
    rows = columns.rows
    # The bound in the posting's own type: numpy would copy the posting to a Python int's.
    postings = [
        None if p is None else p[: int(np.searchsorted(p, p.dtype.type(rows)))] for p in found
    ]
    if mode == "share":
        weights = [1.0] * len(postings)
    else:
        live = columns.live[:rows]
        alive = int(np.count_nonzero(live))
        dead = np.flatnonzero(~live) if alive < rows else np.zeros(0, dtype=np.int64)

        def live_count(posting: Posting) -> int:
            if len(dead) == 0:
                return len(posting)
            if len(dead) < len(posting):
                return len(posting) - int(
                    np.count_nonzero(topk_rows.member(posting, dead, ascending=True))
                )
            return int(np.count_nonzero(live[posting]))

        memories = max(1, alive)
        weights = [idf(memories, 0 if p is None else live_count(p)) for p in postings]
    total = sum(weights)
    return [
        Term(posting, weight / total, bits)
        for posting, weight, bits in zip(postings, weights, dense, strict=True)
    ]


def scores(
    columns: Columns,
    query: str,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    terms: Terms | None = None,
) -> npt.NDArray[np.float64]:
    """Every row's score; `terms`: the query's `keyword_weights`, when the caller has them."""
    rows = columns.rows
    if terms is None:
        terms = keyword_weights(columns, query_keywords(query), keyword_mode)
    recency = columns.growth[:rows] * 0.5 ** ((now - columns.anchor_ms) / WEEK_MS)
    np.minimum(recency, 1.0, out=recency)
    recency *= 0.10
    total: npt.NDArray[np.float64] = recency
    total += columns.static[:rows]
    for posting, weight, _ in terms:
        if posting is not None:  # a posting holds a row once: `total[posting] +=`, 3x faster
            np.add.at(total, posting, 0.25 * weight)
    if query_vector is not None and query_vector[0] in columns.vectors:
        model, vector = query_vector
        matrix = columns.vectors[model][:rows]
        if matrix.shape[1] == vector.shape[0]:
            cosine = (matrix @ vector).astype(np.float64)
            cosine[~columns.has_vector[model][:rows]] = 0.0
            total += 0.50 * cosine
    return total


class RankOptions(TypedDict, total=False):
    """What a ranking is asked with besides the request: `rank_rows`'s keyword arguments, which
    `rank` and the expanded mode (handlers/expand.py) hand on as they are."""

    now: Required[int]
    query_vector: Required[tuple[str, npt.NDArray[np.float32]] | None]
    keyword_mode: KeywordMode
    excluded: set[str] | frozenset[str]
    vector_index: VectorIndex
    terms: Terms


def rank(
    columns: Columns, req: RecallRequest, **options: Unpack[RankOptions]
) -> list[tuple[str, float]]:
    """`rank_rows` as (id, score)."""
    return ids_of(columns, rank_rows(columns, req, **options))


def rank_rows(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    excluded: set[str] | frozenset[str] = frozenset(),
    vector_index: VectorIndex = EXACT,
    terms: Terms | None = None,
) -> Ranked:
    """The exact top `limit` as (slot, score): score, then newer timestamp, then ascending id,
    over the memories that pass the filters (all on the columns); `excluded` holds the ids left
    out (the pinned memories returned apart). `minScore` drops what ranks below it. Where
    `vector_index` applies, the top of a shortlist picked with the codes (approximate).

    Without a usable query vector a large agent is ranked by handlers/topk.py, which scores
    only the memories that can still win; `rank_all` scores every one (and is its reference).
    `terms`: the query's `keyword_weights`, when the caller has them (they are found once)."""
    rows = columns.rows
    bounds = columns.bounds
    if terms is None:
        terms = keyword_weights(columns, query_keywords(req.query), keyword_mode)
    with_vector = (
        query_vector is not None
        and query_vector[0] in columns.vectors
        and columns.vectors[query_vector[0]].shape[1] == query_vector[1].shape[0]
    )
    if (
        with_vector
        or rows < topk.FAST_FROM
        or bounds is None
        or len(bounds.static) * bounds.block < rows
    ):
        return rank_all(
            columns,
            req,
            now=now,
            query_vector=query_vector,
            keyword_mode=keyword_mode,
            excluded=excluded,
            vector_index=vector_index,
            terms=terms,
        )
    found = topk.rank_without_vector(
        columns,
        req,
        now=now,
        terms=terms,
        excluded=topk.excluded_slots(columns, excluded),
        bounds=bounds,
    )
    if found is not None:
        return found
    return rank_all(
        columns,
        req,
        now=now,
        query_vector=None,
        keyword_mode=keyword_mode,
        excluded=excluded,
        terms=terms,
    )


def rank_all(
    columns: Columns,
    req: RecallRequest,
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    keyword_mode: KeywordMode = "share",
    excluded: set[str] | frozenset[str] = frozenset(),
    vector_index: VectorIndex = EXACT,
    terms: Terms | None = None,
) -> Ranked:
    """`rank` by scoring every memory of the agent that passes the filters (with the codes, of
    a shortlist of them)."""
    rows = columns.rows
    if rows == 0:
        return []
    eligible = columns.live[:rows].copy()
    if req.pinned is not UNSET:
        eligible &= columns.pinned[:rows] == req.pinned
    if req.metadata is not UNSET:
        eligible &= tag_mask(columns, req.metadata)
    taxonomy = taxonomy_mask(req, rows, columns.category, columns.sensitivity, columns.tag_slots)
    if taxonomy is not None:
        eligible &= taxonomy
    if excluded:
        eligible[topk.excluded_slots(columns, excluded)] = False
    if req.since is not UNSET:
        eligible &= columns.timestamp[:rows] >= req.since
    if req.until is not UNSET:
        eligible &= columns.timestamp[:rows] < req.until
    if req.roles is not UNSET:
        eligible &= np.isin(columns.role[:rows], [ROLE_CODES[role] for role in req.roles])
    if req.session_id is not UNSET:
        code = columns.session_codes.get(req.session_id)
        if code is None:
            return []
        eligible &= columns.session[:rows] == code
    if approximate(columns, query_vector, vector_index):
        assert query_vector is not None
        if not eligible.any():
            return []
        if terms is None:
            terms = keyword_weights(columns, query_keywords(req.query), keyword_mode)
        candidates, score = shortlist_scores(
            columns, terms, eligible, now=now, query_vector=query_vector,
            candidates=vector_index.candidates, keyword_weight=vector_index.keyword_weight,
        )  # fmt: skip
        return top_of(columns, candidates, score, req)
    candidates = np.flatnonzero(eligible)
    if len(candidates) == 0:
        return []
    score = scores(
        columns,
        req.query,
        now=now,
        query_vector=query_vector,
        keyword_mode=keyword_mode,
        terms=terms,
    )[candidates]
    return top_of(columns, candidates, score, req)


def top_of(
    columns: Columns,
    candidates: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    req: RecallRequest,
) -> Ranked:
    """The first `limit` of the candidates (slots) by score, newer timestamp, then ascending
    id, without those below `minScore`."""
    if len(candidates) > req.limit:
        kth = np.partition(score, len(score) - req.limit)[len(score) - req.limit]
        keep = score >= kth  # every row tied with the k-th competes on the tie-breaks
        candidates, score = candidates[keep], score[keep]
    timestamp = columns.timestamp[candidates]
    order = np.lexsort((-timestamp, -score))
    if len(order) > req.limit:
        # Rows that tie the last place on score and timestamp compete on id: keep them all.
        last = order[req.limit - 1]
        tied = (score[order] == score[last]) & (timestamp[order] == timestamp[last])
        order = order[: max(req.limit, int(np.flatnonzero(tied)[-1]) + 1)]
    slots = candidates[order].tolist()
    ordered = score[order]
    tied = (ordered[1:] == ordered[:-1]) & (timestamp[order][1:] == timestamp[order][:-1])
    if tied.any():  # runs equal on score and timestamp go by ascending id
        start = 0
        for end in [*(np.flatnonzero(~tied) + 1).tolist(), len(slots)]:
            if end - start > 1:
                slots[start:end] = sorted(slots[start:end], key=lambda at: columns.ids[at])
            start = end
    floor = -1.0 if req.min_score is UNSET else req.min_score
    values = ordered.tolist()
    kept = zip(slots[: req.limit], values[: req.limit], strict=True)
    return [(slot, value) for slot, value in kept if value >= floor]


def ids_of(columns: Columns, ranked: Ranked) -> list[tuple[str, float]]:
    """The ranking as (memory id, score)."""
    return [(columns.ids[slot], score) for slot, score in ranked]


def approximate(
    columns: Columns,
    query_vector: tuple[str, npt.NDArray[np.float32]] | None,
    vector_index: VectorIndex,
) -> bool:
    """Whether this recall ranks a shortlist picked with the codes (handlers/vector_index.py)."""
    if query_vector is None or vector_index.mode == "exact":
        return False
    model, vector = query_vector
    codes = columns.codes.get(model)
    if codes is None or columns.vectors[model].shape[1] != len(vector):
        return False
    return vector_index.applies(int(np.count_nonzero(columns.has_vector[model][: columns.rows])))


def shortlist_scores(
    columns: Columns,
    terms: Terms,
    eligible: npt.NDArray[np.bool_],
    *,
    now: int,
    query_vector: tuple[str, npt.NDArray[np.float32]],
    candidates: int,
    keyword_weight: float = 0.25,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The shortlist's rows and their exact scores, the cosine from their float32 rows alone.

    The shortlist is picked on an estimate of every row's other terms in fewer passes than
    `scores` takes (the passes over a million rows are most of the cost), the keyword term
    weighed `keyword_weight` (the formula's 0.25, or more for a ranking that will weigh it
    more); the shortlist's own scores are then the same operations as `scores`, in the same
    order, on its rows only."""
    model, vector = query_vector
    rows = columns.rows
    c = 0.5 ** ((now - columns.anchor_ms) / WEEK_MS)
    static, grown = (
        (columns.static, columns.growth) if columns.estimates is None else columns.estimates
    )
    kind = static.dtype.type  # float32 where the index keeps the estimates: half the bytes
    estimate = np.multiply(grown[:rows], kind(0.10 * c))
    np.minimum(estimate, kind(0.10), out=estimate)
    estimate += static[:rows]
    for posting, weight, _ in terms:
        if posting is not None and keyword_weight * weight >= NEGLIGIBLE:
            np.add.at(estimate, posting, kind(keyword_weight * weight))
    has_vector = columns.has_vector[model]
    picked = shortlist(estimate, eligible, columns.codes[model], has_vector, vector, candidates)
    score = topk.prior(columns, picked, c)
    for posting, weight, bits in terms:
        if posting is not None:
            score[topk_rows.member(posting, picked, ascending=True, dense=bits)] += 0.25 * weight
    # Not `@`: BLAS hands a thousand rows to its threads, whose wake-up cost 5-12 ms on a busy
    # machine against 0.1 ms for this single-threaded loop.
    if columns.vector_rows is None:
        matrix = columns.vectors[model][picked]
    else:
        matrix = columns.vector_rows(model, picked)
    cosine = np.einsum("ij,j->i", matrix, vector).astype(np.float64)
    cosine[~has_vector[picked]] = 0.0
    score += 0.50 * cosine
    return picked, score


def pinned_memories(
    conn: apsw.Connection, tenant: str, agent_id: str, req: RecallRequest
) -> list[MemoryOut]:
    """The agent's core memory: its pinned memories and those whose recall policy is
    `always`, at most 50, highest importance then newest, whatever the filters but
    `maxSensitivity`; none whose policy is `never`; no access is counted."""
    allowed = sensitivities_of(req)
    sensitive = "" if allowed is None else f" AND sensitivity IN ({','.join('?' * len(allowed))})"
    return [
        memory_out(row)
        for row in conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND agent_id = ? "
            f"AND ({CORE}) AND recall_policy != 'never' AND forgotten_at IS NULL{sensitive} "
            "ORDER BY importance DESC, timestamp DESC, id LIMIT 50",
            (tenant, agent_id, *(allowed or ())),
        )
    ]


def check_recall(req: RecallRequest, max_query_bytes: int) -> None:
    """A bound on the query: its keywords and embedding cost time in proportion to its length,
    and one huge query would hold up other agents' recalls."""
    if len(req.query) * 4 <= max_query_bytes:  # no UTF-8 character takes more than 4 bytes
        return
    size = len(req.query.encode("utf-8", errors="surrogatepass"))
    if size > max_query_bytes:
        raise PayloadTooLarge(
            f"query is {size} bytes, more than the limit of {max_query_bytes} (at `$.query`)"
        )


def record_access(
    conn: apsw.Connection, tenant: str, agent_id: str, memory_ids: list[str], *, now: int
) -> None:
    """Persist one access of each memory a recall returned."""
    conn.executemany(
        "UPDATE memories SET access_count = access_count + 1, "
        "last_accessed = max(last_accessed, ?) WHERE tenant = ? AND agent_id = ? AND id = ?",
        [(now, tenant, agent_id, memory_id) for memory_id in memory_ids],
    )


def recalled_memories(
    conn: apsw.Connection,
    tenant: str,
    agent_id: str,
    ranked: list[tuple[str, float]],
    access_counts: dict[str, int],
    *,
    now: int,
) -> RecallReply:
    """The reply rows, in rank order, with each memory's access as counted by this recall.

    A memory evicted since it was ranked is left out rather than brought back.
    """
    placeholders = ",".join("?" * len(ranked))
    rows = {
        row[0]: row
        for row in conn.execute(
            "SELECT id, role, content, timestamp, session_id, importance, confidence, "
            "metadata, summary, category, sensitivity, recall_policy, tags, flags "
            # `+tenant`, `+agent_id`: look rows up by primary key, not by scanning the agent.
            "FROM memories WHERE +tenant = ? AND +agent_id = ? AND forgotten_at IS NULL "
            f"AND id IN ({placeholders})",
            (tenant, agent_id, *(memory_id for memory_id, _ in ranked)),
        )
    }
    memories = []
    for memory_id, score in ranked:
        row = rows.get(memory_id)
        if row is None or memory_id not in access_counts:
            continue
        metadata: dict[str, Any] | None = None if row[7] is None else msgspec.json.decode(row[7])
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
                access_count=access_counts[memory_id],
                last_accessed=now,
                metadata=metadata,
                summary=row[8],
                category=row[9],
                sensitivity=row[10],
                recall_policy=row[11],
                tags=string_list(row[12]),
                flags=string_list(row[13]),
            )
        )
    return RecallReply(memories=memories)
