"""A memory's summary and taxonomy over the bus (contract sections 13 and 17): stored, returned
everywhere a memory is, filterable in list and recall, changed by update with the recall index
in step, `recallPolicy` in recall and maintenance, and bad input refused with nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Client
from tests.test_life import sql
from worker.app import App

DESCRIBED = {
    "summary": "the deploy key rotates weekly",
    "category": "fact",
    "sensitivity": "restricted",
    "recallPolicy": "auto",
    "tags": ["ops", "keys", "ops"],
}


async def get(client: Client, agent: str, memory_id: str) -> Any:
    [memory] = (await client.ok("memory::get", {"agentId": agent, "ids": [memory_id]}))["memories"]
    return memory


async def listed(client: Client, **filters: Any) -> list[str]:
    body = await client.ok("memory::list", {"agentId": "a", "order": "oldest", **filters})
    return [m["content"] for m in body["memories"]]


async def recalled(client: Client, query: str = "", **filters: Any) -> list[str]:
    return [m["content"] for m in await client.recall("a", query, **filters)]


async def test_summary_and_taxonomy_are_stored_and_returned_by_get_list_update_and_recall(
    client: Client,
) -> None:
    """Every memory object carries summary, category, sensitivity, recallPolicy, tags (repeats
    collapsed) and flags; a memory stored without them has the defaults."""
    described = (await client.store("a", "rotate the key", **DESCRIBED))["id"]
    plain = (await client.store("a", "plain note"))["id"]
    expected = {
        "summary": "the deploy key rotates weekly", "category": "fact",
        "sensitivity": "restricted", "recallPolicy": "auto", "tags": ["ops", "keys"],
        "flags": [],
    }  # fmt: skip
    defaults: dict[str, Any] = {
        "summary": None, "category": "note", "sensitivity": "internal", "recallPolicy": "auto",
        "tags": [], "flags": [],
    }  # fmt: skip
    memory = await get(client, "a", described)
    assert {key: memory[key] for key in expected} == expected
    assert {key: (await get(client, "a", plain))[key] for key in defaults} == defaults
    [first, _] = (await client.ok("memory::list", {"agentId": "a", "order": "oldest"}))["memories"]
    assert {key: first[key] for key in expected} == expected
    [top] = await client.recall("a", "rotate", limit=1)
    assert {key: top[key] for key in expected} == expected
    updated = await client.ok("memory::update", {"agentId": "a", "id": plain, "importance": 0.9})
    assert {key: updated["memory"][key] for key in defaults} == defaults


async def test_a_summarys_words_find_the_memory_as_its_contents_would(client: Client) -> None:
    """A query word found only in the summary ranks the memory above one without it, as the
    word in its content would; dedup stays on the content alone, keeping the first memory's
    summary."""
    found = (await client.store("a", "zzz", summary="quarterly budget review"))["id"]
    await client.store("a", "unrelated words")
    [top, other] = await client.recall("a", "budget")
    assert top["id"] == found and top["score"] > other["score"]
    again = await client.store("a", "zzz", summary="another summary")
    assert again == {
        "id": found,
        "stored": False,
        "deduplicated": True,
        "redactions": {},
        "flags": [],
        "facts": [],
    }
    assert (await get(client, "a", found))["summary"] == "quarterly budget review"


@pytest.mark.formula
async def test_a_summarys_words_count_as_the_contents_for_recalls_keyword_term(
    client: Client,
) -> None:
    """Under the contract's share, a query word found only in the summary scores as if in the
    content: its whole keyword term, 0.25 above a memory without it."""
    found = (await client.store("a", "zzz", summary="quarterly budget review"))["id"]
    await client.store("a", "unrelated words")
    [top, other] = await client.recall("a", "budget")
    assert top["id"] == found
    assert top["score"] - other["score"] == pytest.approx(0.25, abs=0.01)


async def test_list_and_recall_filter_by_category_tags_and_max_sensitivity(client: Client) -> None:
    """category (one or a list) and tags pass any of theirs; maxSensitivity passes that level
    and below; a filter not given does not filter (restricted memories included)."""
    await client.store("a", "m public fact", category="fact", sensitivity="public", tags=["x"])
    await client.store("a", "m internal preference", category="preference", tags=["y", "z"])
    await client.store("a", "m restricted event", category="event", sensitivity="restricted")
    everything = ["m public fact", "m internal preference", "m restricted event"]
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({}, everything),
        ({"category": "fact"}, ["m public fact"]),
        ({"category": ["fact", "event"]}, ["m public fact", "m restricted event"]),
        ({"tags": ["z", "nope"]}, ["m internal preference"]),
        ({"tags": ["x", "y"]}, ["m public fact", "m internal preference"]),
        ({"maxSensitivity": "public"}, ["m public fact"]),
        ({"maxSensitivity": "internal"}, ["m public fact", "m internal preference"]),
        ({"maxSensitivity": "restricted"}, everything),
        ({"category": "event", "maxSensitivity": "internal"}, []),
    ]
    for filters, expected in cases:
        assert await listed(client, **filters) == expected, filters
        assert sorted(await recalled(client, "m", **filters)) == sorted(expected), filters


async def test_update_changes_summary_and_taxonomy_and_recall_follows_at_once(
    client: Client,
) -> None:
    """With the agent's index loaded, an update's new summary words, category and tags are what
    the next recall filters and scores by; `summary: ""` and `tags: []` remove them."""
    memory_id = (await client.store("a", "alpha", tags=["old"]))["id"]
    assert await recalled(client, "alpha", tags=["old"]) == ["alpha"]  # the index is loaded
    change = {"summary": "gamma words", "category": "instruction", "tags": ["new"],
              "sensitivity": "public"}  # fmt: skip
    reply = await client.ok("memory::update", {"agentId": "a", "id": memory_id, **change})
    assert {key: reply["memory"][key] for key in change} == change
    assert await recalled(client, "gamma", tags=["old"]) == []
    [found] = await client.recall("a", "gamma", tags=["new"], category="instruction")
    assert found["id"] == memory_id and found["score"] > 0.25
    cleared = await client.ok(
        "memory::update", {"agentId": "a", "id": memory_id, "summary": "", "tags": []}
    )
    assert (cleared["memory"]["summary"], cleared["memory"]["tags"]) == (None, [])
    assert await recalled(client, "gamma", tags=["new"]) == []
    assert [m["score"] < 0.25 for m in await client.recall("a", "gamma")] == [True]


async def test_recall_policy_never_is_kept_listed_and_gettable_but_never_recalled(
    client: Client,
) -> None:
    """`never`: left out of recall and withPinned (even when pinned); back once set to `auto`."""
    hidden = (await client.store("a", "secret plan", recallPolicy="never"))["id"]
    await client.store("a", "open plan")
    assert await recalled(client, "plan") == ["open plan"]
    await client.ok("memory::update", {"agentId": "a", "id": hidden, "pinned": True})
    reply = await client.ok("memory::recall", {"agentId": "a", "query": "plan", "withPinned": True})
    assert reply["pinned"] == [] and [m["content"] for m in reply["memories"]] == ["open plan"]
    assert await listed(client) == ["secret plan", "open plan"]
    assert (await get(client, "a", hidden))["recallPolicy"] == "never"
    await client.ok("memory::update", {"agentId": "a", "id": hidden, "recallPolicy": "auto"})
    assert sorted(await recalled(client, "plan")) == ["open plan", "secret plan"]


async def test_recall_policy_always_is_core_memory_never_evicted_nor_decayed(
    client: Client, worker: App
) -> None:
    """`always` behaves as pinned: returned among withPinned's pinned (not repeated among the
    ranked), kept by evict with cap 0, and never decayed."""
    core = (await client.store("a", "always here", recallPolicy="always", timestamp=0))["id"]
    await client.store("a", "ordinary here", timestamp=0)
    reply = await client.ok("memory::recall", {"agentId": "a", "query": "here", "withPinned": True})
    assert [m["id"] for m in reply["pinned"]] == [core]
    assert [m["content"] for m in reply["memories"]] == ["ordinary here"]
    evicted = await client.ok("memory::evict", {"cap": 0})
    assert evicted["evicted"] == 1
    await client.ok("memory::consolidate", {"decayRate": 1.0})
    assert sql(worker, "SELECT id, confidence FROM memories") == [(core, 1.0)]


async def test_max_sensitivity_applies_to_withpinned_and_other_filters_do_not(
    client: Client,
) -> None:
    """The pinned core memory ignores the filters, as section 12 says, except maxSensitivity:
    a caller who may not see restricted memories does not get them there either."""
    secret = (await client.store("a", "restricted core", sensitivity="restricted"))["id"]
    shown = (await client.store("a", "event core", category="event"))["id"]
    for memory_id in (secret, shown):
        await client.ok("memory::update", {"agentId": "a", "id": memory_id, "pinned": True})
    ask = {"agentId": "a", "withPinned": True, "category": "fact"}
    both = await client.ok("memory::recall", ask)
    assert {m["id"] for m in both["pinned"]} == {secret, shown}
    capped = await client.ok("memory::recall", {**ask, "maxSensitivity": "internal"})
    assert [m["id"] for m in capped["pinned"]] == [shown]


BAD_STORES: list[tuple[dict[str, Any], str, str]] = [
    ({"category": "gossip"}, "400", "$.category"),
    ({"sensitivity": "secret"}, "400", "$.sensitivity"),
    ({"recallPolicy": "sometimes"}, "400", "$.recallPolicy"),
    ({"tags": "ops"}, "400", "$.tags"),
    ({"tags": [""]}, "400", "$.tags[0]"),
    ({"tags": ["x" * 65]}, "400", "$.tags[0]"),
    ({"tags": [" padded"]}, "400", "$.tags[0]"),
    ({"tags": [f"t{n}" for n in range(33)]}, "400", "$.tags"),
    ({"summary": "   "}, "400", "$.summary"),
    ({"summary": ""}, "400", "$.summary"),
    ({"summary": "é" * 513}, "413", "$.summary"),
    ({"summary": None}, "400", "$.summary"),
]


@pytest.mark.parametrize(("extra", "code", "field"), BAD_STORES)
async def test_bad_summary_or_taxonomy_is_refused_naming_the_field_and_nothing_is_written(
    client: Client, worker: App, extra: dict[str, Any], code: str, field: str
) -> None:
    """On store and on update alike (update's `summary: ""` clears and is not refused)."""
    stored = await client.call("memory::store", {"agentId": "a", "content": "x", **extra})
    assert stored.code == code and f"`{field}`" in (stored.description or ""), stored
    assert sql(worker, "SELECT count(*) FROM memories") == [(0,)]
    if extra.get("summary") == "":
        return
    memory_id = (await client.store("a", "kept", summary="as it was"))["id"]
    before = sql(worker, "SELECT * FROM memories")
    update = await client.call("memory::update", {"agentId": "a", "id": memory_id, **extra})
    assert update.code == code and f"`{field}`" in (update.description or ""), update
    assert sql(worker, "SELECT * FROM memories") == before


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"category": "gossip"}, "$.category"),
        ({"category": []}, "$.category"),
        ({"tags": []}, "$.tags"),
        ({"tags": ["\u200bzero"]}, "$.tags[0]"),
        ({"maxSensitivity": "top"}, "$.maxSensitivity"),
    ],
)
async def test_bad_filters_are_refused_in_list_and_recall(
    client: Client, filters: dict[str, Any], field: str
) -> None:
    for trigger in ("memory::list", "memory::recall"):
        reply = await client.call(trigger, {"agentId": "a", **filters})
        assert reply.code == "400" and f"`{field}`" in (reply.description or ""), reply
