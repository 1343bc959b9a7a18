"""worker/json_keys.py against a reference: Python's json with a hook that sees every pair."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.json_keys import _scan, duplicate_key

KEYS = st.sampled_from(["a", "b", "agentId", 'q"', "\\", "é", "u0022", ""]) | st.text(max_size=4)
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
# A JSON object as a list of pairs, so that a key may come twice.
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.lists(st.tuples(KEYS, inner), max_size=4),
    max_leaves=12,
)


def render(value: Any, ascii_only: bool, space: str) -> str:
    """JSON text; lists of pairs become objects, keys kept in order, repeats included."""
    if isinstance(value, list) and value and all(isinstance(item, tuple) for item in value):
        members = (
            f"{json.dumps(k, ensure_ascii=ascii_only)}{space}:{space}{render(v, ascii_only, space)}"
            for k, v in value
        )
        return "{" + f",{space}".join(members) + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(render(item, ascii_only, space) for item in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


def has_duplicate(text: str) -> bool:
    found = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        found = found or len({key for key, _ in items}) < len(items)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return found


@settings(max_examples=400, deadline=None)
@given(
    pairs=st.lists(st.tuples(KEYS, VALUES), max_size=5),
    ascii_only=st.booleans(),
    space=st.sampled_from(["", " ", "\n\t"]),
)
def test_a_duplicate_key_is_found_exactly_when_an_object_repeats_a_key(
    pairs: list[tuple[str, Any]], ascii_only: bool, space: str
) -> None:
    """Objects at any depth, keys and strings with quotes, backslashes and `\\u` escapes, any
    JSON whitespace: the fast proof and the scan agree with the reference."""
    text = render(pairs, ascii_only, space) if pairs else "{}"
    data = text.encode()
    expected = has_duplicate(text)
    assert (duplicate_key(data) is not None) == expected, text
    assert (_scan(data) is not None) == expected, text


def test_the_message_names_the_key_and_the_object() -> None:
    data = b'{"x": [[1, 2], {"q": [{}, {"z": 1 , "z" : 2}]}]}'
    assert duplicate_key(data) == "duplicate key `z` at `$.x[1].q[1]`"
