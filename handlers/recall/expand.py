"""memory::recall's `expanded` mode: the formula's ranking, then a memory lifted by its neighbours.

A conversation's turns share their topic with the turns around them: the answer to a question
often says "yes, last Friday" and is found only through the turn before it. So the second stage
takes the formula's best `pool` memories (exact, filters applied, by `rank`), re-weighs their
score's keyword term (`keyword` in place of the formula's 0.25: a stage score, not the
contract's formula, which the `formula` mode keeps) and gives each a share of the lead of its
strongest neighbour in the pool on that score: neighbours are the `turns` memories before and
after it in time in the same session, or, for memories without a session, those within
`SESSIONLESS_GAP_MS` of it (counted among the memories stored near it). The constants were
chosen by cross-validation on LoCoMo (README "Recall quality and speed"). The score reported is
that stage score over the highest it can reach (`Expansion.ceiling`), so it lies in 0-1 as the
formula's does and `minScore` means the same in both modes; the order is the stage score's. No
database, clock or bus: a pure function of the columns and the formula.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Unpack

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import UNSET

from handlers.recall.columns import Columns
from handlers.recall.keywords import Terms, keyword_weights
from handlers.recall.order import Ranked, ids_of
from handlers.recall.rank import RankOptions, rank_rows
from handlers.recall.slots import member
from handlers.recall.vector_index import EXACT
from handlers.text import query_keywords
from schema.memory import RecallRequest

# Two memories without a session are neighbours only if stored this close in time: a chat's turns
# are seconds to minutes apart, while memories an agent saves on different days are not one topic.
SESSIONLESS_GAP_MS = 3_600_000
# The keyword term's weight in the contract's formula (formula.py `scores`).
FORMULA_KEYWORD_WEIGHT = 0.25


@dataclass(frozen=True)
class Expansion:
    """`lift`: the share of a stronger neighbour's lead a memory takes; `turns`: neighbours on
    each side; `pool`: how many of the formula's best memories the stage reorders; `keyword`:
    the keyword term's weight in the stage's score (the formula's is 0.25): a conversation's
    answer often shares a rare word with the question that the model's cosine underrates."""

    lift: float = 0.5
    turns: int = 2
    pool: int = 500
    keyword: float = 0.8
    # Slots searched on each side for the turns: stores sent together commit a few out of order.
    reach: int = 32
    # The keyword term's weight in the estimate that picks a vector index's shortlist: the pool
    # is the formula's (0.25), but the stage lifts the memories rich in keywords (0.8), which a
    # shortlist picked on the formula's weight missed: at a million memories the top 10's
    # recall against exact vectors went from 0.80 to 0.93 (README, "One agent of a million").
    shortlist_keyword: float = 0.5

    def __post_init__(self) -> None:
        # A lift above 1 would carry a memory past its neighbour, and past `ceiling`.
        if not (0.0 <= self.lift <= 1.0 and self.keyword >= 0.0):
            raise ValueError(f"lift must be 0-1 and keyword >= 0: {self}")

    @property
    def ceiling(self) -> float:
        """The highest stage score: the formula's terms but the keyword term at 1 (cosine,
        recency, importance and confidence at most 0.75 together), the keyword term at
        `keyword`. A lift of at most 1 never carries a memory above its neighbour's score,
        so no expanded score exceeds it either: 1.55 at the default weight 0.8, 1 at 0.25."""
        return 1.0 - FORMULA_KEYWORD_WEIGHT + self.keyword


def expanded_rank(
    columns: Columns,
    req: RecallRequest,
    *,
    expansion: Expansion = Expansion(),
    **options: Unpack[RankOptions],
) -> list[tuple[str, float]]:
    """`expanded_rows` as (id, expanded score)."""
    return ids_of(columns, expanded_rows(columns, req, expansion=expansion, **options))


def expanded_rows(
    columns: Columns,
    req: RecallRequest,
    *,
    expansion: Expansion = Expansion(),
    **options: Unpack[RankOptions],
) -> Ranked:
    """The top `limit` as (slot, expanded score), by the stage score then newer timestamp (ties
    keep the formula's order); the formula's filters hold (only memories that pass them take
    part). The score given is the stage score over `expansion.ceiling` (0-1; a negative cosine's
    below 0 is given as 0), and `minScore` applies to it."""
    wide = msgspec.structs.replace(req, limit=max(req.limit, expansion.pool), min_score=UNSET)
    if "terms" not in options:  # found once, for the ranking and the stage
        keywords = query_keywords(req.query)
        options["terms"] = keyword_weights(columns, keywords, options.get("keyword_mode", "share"))
    terms = options["terms"]
    index = options.get("vector_index", EXACT)
    options["vector_index"] = dataclasses.replace(index, keyword_weight=expansion.shortlist_keyword)
    found = rank_rows(columns, wide, **options)
    if not found:
        return []
    slots = np.array([slot for slot, _ in found], dtype=np.int64)
    score = np.array([value for _, value in found], dtype=np.float64)
    if expansion.keyword != FORMULA_KEYWORD_WEIGHT:
        score += (expansion.keyword - FORMULA_KEYWORD_WEIGHT) * keyword_share(terms, slots)
    lifted = neighbour_scores(columns, slots, score, expansion)
    timestamp = columns.timestamp[slots]
    # Pool order breaks ties on id (rank's order), so a stable sort on score, then newer, keeps it.
    order = np.lexsort((-timestamp, -lifted))[: req.limit]
    # Scaled after ranking: a division could round two close scores into a tie.
    given = np.clip(lifted[order] / expansion.ceiling, 0.0, 1.0)
    floor = -1.0 if req.min_score is UNSET else req.min_score
    kept = zip(slots[order].tolist(), given.tolist(), strict=True)
    return [(slot, score) for slot, score in kept if score >= floor]


def keyword_share(terms: Terms, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Each slot's keyword term before its weight (0 to 1), as the formula counts it."""
    by_slot = np.argsort(slots)
    ascending = slots[by_slot]
    share = np.zeros(len(slots), dtype=np.float64)
    for posting, weight, dense in terms:
        if posting is not None:  # sorted: binary searches, not a set of the posting
            share[by_slot[member(posting, ascending, ascending=True, dense=dense)]] += weight
    return share


def neighbour_scores(
    columns: Columns,
    slots: npt.NDArray[np.int64],
    score: npt.NDArray[np.float64],
    expansion: Expansion,
) -> npt.NDArray[np.float64]:
    """score + lift * the largest lead over it of a neighbour in the pool (none: score).

    Turns are counted in timestamp order among the memories stored within `reach` slots of it,
    not in slot order: stores sent concurrently may be committed a few places out of order."""
    reach = expansion.reach
    by_slot = np.argsort(slots)
    sorted_slots = slots[by_slot]
    # Only a memory with another pooled memory within reach can have a pooled neighbour.
    crowd = np.searchsorted(sorted_slots, slots + reach, side="right")
    crowd -= np.searchsorted(sorted_slots, slots - reach)
    busy = np.flatnonzero(crowd > 1)
    lifted = score.copy()
    if len(busy) == 0:
        return lifted
    width = 2 * reach + 1
    window = slots[busy, None] + np.arange(-reach, reach + 1)[None, :]
    inside = (window >= 0) & (window < columns.rows)
    window = np.clip(window, 0, max(columns.rows - 1, 0))
    session, timestamp = columns.session[window], columns.timestamp[window]
    own_session, own_time = session[:, [reach]], timestamp[:, [reach]]
    together = inside & columns.live[window] & (session == own_session)
    together &= (own_session >= 0) | (np.abs(timestamp - own_time) <= SESSIONLESS_GAP_MS)
    # Positions in (timestamp, slot) order, memories of other conversations last.
    order = np.argsort(np.where(together, timestamp, np.iinfo(np.int64).max), axis=1, kind="stable")
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.broadcast_to(np.arange(width), order.shape), axis=1)
    turns = np.abs(position - position[:, [reach]])
    member = by_slot[np.clip(np.searchsorted(sorted_slots, window), 0, len(slots) - 1)]
    near = together & (slots[member] == window) & (turns >= 1) & (turns <= expansion.turns)
    lead = np.where(near, score[member] - score[busy, None], 0.0).max(axis=1)
    lifted[busy] += expansion.lift * np.maximum(lead, 0.0)
    return lifted
