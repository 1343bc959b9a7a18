"""Pictures drawn on the server as SVG data, which the templates turn into markup (autoescaped:
an entity's id is text in a `<text>` element, never markup): the knowledge graph around an
entity, in rings by distance, a bar chart of memories over time, and a fact's values over
time."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from schema.facts import Fact
from schema.kg import EntityOut
from worker.ui.formats import day_of

SIZE = 560
RING = 110


@dataclass(frozen=True)
class Node:
    id: str
    type: str
    x: float
    y: float
    depth: int


@dataclass(frozen=True)
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float
    label: str


def graph(entities: list[EntityOut]) -> tuple[list[Node], list[Edge], int]:
    """Nodes placed on rings around the centre by their depth (the root in the middle), edges
    between placed nodes; and the picture's size. At most 60 nodes are drawn (the page lists
    every entity in words beneath)."""
    drawn = entities[:60]
    rings: dict[int, list[EntityOut]] = {}
    for entity in drawn:
        rings.setdefault(entity.depth, []).append(entity)
    size = SIZE + 2 * RING * max(0, max(rings, default=0) - 2)
    centre = size / 2
    at: dict[str, Node] = {}
    for depth, members in sorted(rings.items()):
        for k, entity in enumerate(members):
            angle = 2 * math.pi * k / len(members) + depth * 0.4
            radius = RING * depth
            x = centre + radius * math.cos(angle)
            y = centre + radius * math.sin(angle)
            at[entity.id] = Node(entity.id, entity.type or "", round(x, 1), round(y, 1), depth)
    # One line per pair of entities: a relation and its inverse twin would draw over each other;
    # the relation out of the entity nearer the root names it.
    edges: dict[frozenset[str], Edge] = {}
    for e in sorted(drawn, key=lambda entity: entity.depth):
        for r in e.relations:
            pair = frozenset((e.id, r.target))
            if r.target in at and e.id in at and pair not in edges:
                edges[pair] = Edge(at[e.id].x, at[e.id].y, at[r.target].x, at[r.target].y, r.type)
    return list(at.values()), list(edges.values()), int(size)


@dataclass(frozen=True)
class Bar:
    day: str
    count: int
    x: float
    y: float
    width: float
    height: float


def day_bars(timestamps: list[int], width: int = 600, height: int = 160) -> list[Bar]:
    """Memories per UTC day (at most the last 60 days that have any) as bars scaled to fit."""
    per_day = sorted(Counter(day_of(t) for t in timestamps).items())[-60:]
    if not per_day:
        return []
    most = max(count for _, count in per_day)
    step = min(width / len(per_day), 40.0)  # a few days are narrow bars, not a wall
    return [
        Bar(day, count, round(k * step, 1), round(height - count / most * height, 1),
            max(1.0, round(step - 2, 1)), round(count / most * height, 1))
        for k, (day, count) in enumerate(per_day)
    ]  # fmt: skip


@dataclass(frozen=True)
class Span:
    label: str
    status: str
    start: str
    end: str
    x: float
    y: float
    width: float


LABELS = 150  # the left part of a timeline, where each value is named
SPAN_ROW = 20


def spans(facts: list[Fact], now: int, width: int = 600) -> list[Span]:
    """One bar per value (facts in validFrom order), from its validFrom to its validTo, or to
    now while it holds (a retracted value: to when it would have ended), on one time axis from
    the first validFrom to now."""
    if not facts:
        return []
    first = min(fact.valid_from for fact in facts)
    last = max([now, *(fact.valid_to or fact.valid_from for fact in facts)])
    scale = (width - LABELS) / max(1, last - first)
    drawn = []
    for row, fact in enumerate(facts):
        until = fact.valid_to if fact.valid_to is not None else last
        label = fact.object if len(fact.object) <= 22 else fact.object[:21] + "…"
        x = LABELS + (fact.valid_from - first) * scale
        end = day_of(fact.valid_to) if fact.valid_to is not None else "now"
        drawn.append(
            Span(label, fact.status, day_of(fact.valid_from), end, round(x, 1),
                 row * SPAN_ROW, max(2.0, round((until - fact.valid_from) * scale, 1)))
        )  # fmt: skip
    return drawn
