"""The browser's pictures, drawn on the server: the graph draws one line per pair of entities
(a relation and its inverse twin would overlap), and the chart's bars fit the picture."""

from __future__ import annotations

from schema.kg import EntityOut, RelationOut
from worker.ui.drawing import day_bars, graph

DAY = 86_400_000


def test_a_relation_and_its_inverse_twin_draw_one_line_named_from_the_nearer_entity() -> None:
    entities = [
        EntityOut(id="alice", type="person", properties={}, depth=0,
                  relations=[RelationOut(target="Lisbon", type="travels_to")]),
        EntityOut(id="Lisbon", type="city", properties={}, depth=1,
                  relations=[RelationOut(target="alice", type="inverse_travels_to")]),
    ]  # fmt: skip
    nodes, edges, size = graph(entities)
    assert [node.id for node in nodes] == ["alice", "Lisbon"]
    assert [edge.label for edge in edges] == ["travels_to"]
    assert all(0 <= node.x <= size and 0 <= node.y <= size for node in nodes)


def test_bars_are_per_day_scaled_to_the_busiest_and_never_wider_than_40() -> None:
    bars = day_bars([0, 1, DAY, DAY + 1, DAY + 2, 3 * DAY])
    assert [(bar.day, bar.count) for bar in bars] == [
        ("1970-01-01", 2), ("1970-01-02", 3), ("1970-01-04", 1),
    ]  # fmt: skip
    assert max(bar.height for bar in bars) == 160 and all(bar.width <= 40 for bar in bars)
    assert day_bars([]) == []
