"""The agents, an agent's memories (recall's search and list's filters), and one memory with
everything a person may change about it (contract section 20). Each change is a POST from the
page that shows what it changes, then a redirect back to that page (so a reload repeats
nothing)."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from schema.agents import AgentsRequest
from schema.errors import InvalidRequest, NotFound
from schema.life import (
    DeleteRequest,
    ForgetRequest,
    GetRequest,
    ListRequest,
    MemoryOut,
    UnforgetRequest,
    UpdateRequest,
)
from schema.memory import RecallRequest
from worker.ui.server import Browser, Page, route, url

AGENTS_SHOWN = 50
MEMORIES_SHOWN = 20
CATEGORIES = ("fact", "preference", "event", "instruction", "note")
SENSITIVITIES = ("public", "internal", "restricted")
POLICIES = ("auto", "always", "never")
ROLES = ("user", "assistant", "system")
DONE = {
    "edited": "Saved.",
    "unchanged": "Nothing was changed.",
    "pinned": "Pinned.",
    "unpinned": "Unpinned.",
    "forgotten": "Forgotten: hidden from recall, restorable.",
    "restored": "Restored.",
    "deleted": "Deleted for good.",
    "erased": "The agent's memory was erased.",
    "enabled": "Memory switched on.",
    "disabled": "Memory switched off.",
}


def request_of(kind: type[Any], **fields: Any) -> Any:
    """A request struct from Python field names, checked as the worker checks it (a bad value
    is a 400 naming the field before anything is sent)."""
    names = {f.name: f.encode_name for f in msgspec.structs.fields(kind)}
    given = {names[name]: value for name, value in fields.items() if value is not UNSET}
    try:
        return msgspec.convert(given, kind)
    except msgspec.ValidationError as error:
        raise InvalidRequest(str(error)) from None


def literal_prefix(pattern: str) -> str:
    """What every id a pattern matches starts with: its characters before a wildcard."""
    for at, char in enumerate(pattern):
        if char in "*?[":
            return pattern[:at]
    return pattern


def narrowed(prefix: str, patterns: tuple[str, ...]) -> str | None:
    """The prefix to ask memory::agents for: the person's, lengthened to what all the token's
    patterns start with; None when the two cannot both hold."""
    fixed = [literal_prefix(pattern) for pattern in patterns]
    common = fixed[0]
    for other in fixed[1:]:
        while not other.startswith(common):
            common = common[:-1]
    if common.startswith(prefix):
        return common
    return prefix if prefix.startswith(common) else None


async def agents(page: Page) -> Response:
    """The agents this sign-in may see, by id, with their counts; `prefix` narrows by id."""
    prefix = page.param("prefix")
    token = page.session.token
    ask_prefix = narrowed(prefix, token.agents)
    shown: list[Any] = []
    cursor = page.param("cursor") or None
    while ask_prefix is not None and len(shown) < AGENTS_SHOWN:
        reply = await page.ask(
            "agents",
            request_of(
                AgentsRequest,
                prefix=ask_prefix or UNSET,
                cursor=cursor or UNSET,
                limit=AGENTS_SHOWN - len(shown),
            ),
        )
        shown += [agent for agent in reply.agents if token.allows(agent.agent_id)]
        cursor = reply.next_cursor
        if cursor is None:
            break
    return page.render("agents.html", agents=shown, prefix=prefix, cursor=cursor)


def filters(page: Page) -> dict[str, Any]:
    """list's and recall's filters from the page's parameters (empty ones not given)."""
    pinned = page.param("pinned")
    return {
        "session_id": page.param("session") or UNSET,
        "roles": [page.param("role")] if page.param("role") else UNSET,
        "category": page.param("category") or UNSET,
        "tags": [page.param("tag")] if page.param("tag") else UNSET,
        "pinned": {"yes": True, "no": False}.get(pinned, UNSET),
    }


async def agent(page: Page) -> Response:
    """An agent's memories: recall's ranking for a search, else list's pages, newest first."""
    if not page.agent:
        raise NotFound("no agent named (agent=)")
    query = page.param("q")
    cursor = None
    if query:
        found = await page.ask(
            "recall",
            request_of(
                RecallRequest,
                agent_id=page.agent,
                query=query,
                limit=MEMORIES_SHOWN,
                **filters(page),
            ),
        )
        memories: list[Any] = found.memories
    else:
        listed = await page.ask(
            "list_memories",
            request_of(
                ListRequest,
                agent_id=page.agent,
                limit=MEMORIES_SHOWN,
                cursor=page.param("cursor") or UNSET,
                order=page.param("order") or "newest",
                include_forgotten=page.param("forgotten") == "1",
                **filters(page),
            ),
        )
        memories, cursor = listed.memories, listed.next_cursor
    values = {k: page.param(k) for k in ("q", "session", "role", "category", "tag", "pinned")}
    values |= {"order": page.param("order"), "forgotten": page.param("forgotten")}
    return page.render(
        "agent.html",
        agent=page.agent,
        memories=memories,
        cursor=cursor,
        values=values,
        roles=ROLES,
        categories=CATEGORIES,
        done=DONE.get(page.param("done"), ""),
    )


async def one(page: Page) -> MemoryOut:
    got = await page.ask("get", request_of(GetRequest, agent_id=page.agent, ids=[page.param("id")]))
    if not got.memories:
        raise NotFound(f"agent {page.agent!r} has no memory {page.param('id')!r}")
    memory: MemoryOut = got.memories[0]
    return memory


async def memory(page: Page) -> Response:
    return page.render(
        "memory.html",
        agent=page.agent,
        memory=await one(page),
        categories=CATEGORIES,
        sensitivities=SENSITIVITIES,
        policies=POLICIES,
        done=DONE.get(page.param("done"), ""),
    )


def back(page: Page, done: str, memory_id: str | None = None) -> Response:
    if memory_id is None:
        return RedirectResponse(url("/agent", agent=page.agent, done=done), status_code=303)
    return RedirectResponse(
        url("/memory", agent=page.agent, id=memory_id, done=done), status_code=303
    )


async def edit(page: Page) -> Response:
    """Content, summary and taxonomy as the form has them; only what differs is sent."""
    now = await one(page)
    tags = [tag.strip() for tag in page.param("tags").split(",") if tag.strip()]
    wanted = {
        "content": page.param("content").replace("\r\n", "\n"),
        "summary": page.param("summary").replace("\r\n", "\n"),
        "category": page.param("category"),
        "sensitivity": page.param("sensitivity"),
        "recall_policy": page.param("recall_policy"),
        "tags": tags,
    }
    current = {key: getattr(now, key) for key in wanted} | {"summary": now.summary or ""}
    changed = {key: value for key, value in wanted.items() if value != current[key]}
    if not changed:
        return back(page, "unchanged", now.id)
    await page.ask("update", request_of(UpdateRequest, agent_id=page.agent, id=now.id, **changed))
    return back(page, "edited", now.id)


async def pin(page: Page) -> Response:
    pinned = page.param("pinned") == "1"
    request = request_of(UpdateRequest, agent_id=page.agent, id=page.param("id"), pinned=pinned)
    await page.ask("update", request)
    return back(page, "pinned" if pinned else "unpinned", page.param("id"))


async def forget(page: Page) -> Response:
    ids = [page.param("id")]
    await page.ask("forget", request_of(ForgetRequest, agent_id=page.agent, ids=ids))
    return back(page, "forgotten", page.param("id"))


async def unforget(page: Page) -> Response:
    ids = [page.param("id")]
    await page.ask("unforget", request_of(UnforgetRequest, agent_id=page.agent, ids=ids))
    return back(page, "restored", page.param("id"))


async def confirm_delete(page: Page) -> Response:
    return page.render("delete.html", agent=page.agent, memory=await one(page))


async def delete(page: Page) -> Response:
    ids = [page.param("id")]
    reply = await page.ask("delete", request_of(DeleteRequest, agent_id=page.agent, ids=ids))
    if reply.missing:
        raise NotFound(f"agent {page.agent!r} has no memory {ids[0]!r}")
    return back(page, "deleted")


def routes(browser: Browser) -> list[Route]:
    return [
        route("/", browser, agents),
        route("/agent", browser, agent),
        route("/memory", browser, memory),
        route("/memory/edit", browser, edit, post=True),
        route("/memory/pin", browser, pin, post=True),
        route("/memory/forget", browser, forget, post=True),
        route("/memory/unforget", browser, unforget, post=True),
        route("/memory/delete", browser, confirm_delete),
        route("/memory/delete", browser, delete, post=True),
    ]
