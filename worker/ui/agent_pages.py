"""An agent's other pages (contract section 20): sessions and their transcripts, the knowledge
graph around an entity (drawn), the audit log with filters, stats with a chart of memories over
time, and the memory switch and erase (after typing the agent's id)."""

from __future__ import annotations

from msgspec import UNSET
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from schema.errors import InvalidRequest
from schema.kg import EntityOut, KgQueryRequest
from schema.life import AuditRequest, EraseRequest, ListRequest, SessionGetRequest
from schema.session import SessionListRequest
from schema.stats import StatsRequest
from schema.switch import ToggleRequest
from worker.ui.drawing import Edge, Node, day_bars, graph
from worker.ui.formats import millis_of_day
from worker.ui.pages import DONE, request_of
from worker.ui.server import Browser, Page, route, url

TRIGGERS = (
    "memory::store", "memory::update", "memory::forget", "memory::unforget", "memory::delete",
    "memory::erase", "memory::toggle", "memory::evict", "memory::consolidate", "memory::kg::add",
    "memory::kg::delete", "memory::session::compact", "memory::session::repair",
)  # fmt: skip
CHARTED = 2000  # the newest memories the stats chart counts


async def sessions(page: Page) -> Response:
    reply = await page.ask("session_list", request_of(SessionListRequest, agent_id=page.agent))
    return page.render("sessions.html", agent=page.agent, sessions=reply.sessions)


async def transcript(page: Page) -> Response:
    request = request_of(
        SessionGetRequest,
        agent_id=page.agent,
        session_id=page.param("session"),
        limit=100,
        cursor=page.param("cursor") or UNSET,
    )
    reply = await page.ask("session_get", request)
    return page.render(
        "session.html",
        agent=page.agent,
        session_id=page.param("session"),
        messages=reply.messages,
        cursor=reply.next_cursor,
    )


async def neighbourhood(page: Page) -> Response:
    entity = page.param("entity")
    nodes: list[Node] = []
    edges: list[Edge] = []
    size, truncated = 0, False
    entities: list[EntityOut] = []
    if entity:
        depth = int(page.param("depth") or 2) if page.param("depth").isdigit() else 2
        reply = await page.ask(
            "kg_query",
            request_of(
                KgQueryRequest, agent_id=page.agent, entity_id=entity, depth=min(depth, 4),
                limit=200,
            ),
        )  # fmt: skip
        entities, truncated = reply.entities, reply.truncated
        nodes, edges, size = graph(entities)
    return page.render(
        "graph.html",
        agent=page.agent,
        entity=entity,
        depth=page.param("depth") or "2",
        entities=entities,
        nodes=nodes,
        edges=edges,
        size=size,
        truncated=truncated,
    )


async def audit(page: Page) -> Response:
    since_text = page.param("since")
    since = millis_of_day(since_text) if since_text else None
    if since_text and since is None:
        raise InvalidRequest("since: a day as YYYY-MM-DD - at `$.since`")
    reply = await page.ask(
        "audit",
        request_of(
            AuditRequest,
            agent_id=page.agent,
            since=UNSET if since is None else since,
            cursor=page.param("cursor") or UNSET,
            limit=100,
        ),
    )
    trigger, source = page.param("trigger"), page.param("source")
    events = [
        event
        for event in reply.events
        if (not trigger or event.trigger == trigger) and (not source or event.source == source)
    ]
    return page.render(
        "audit.html",
        agent=page.agent,
        events=events,
        cursor=reply.next_cursor,
        values={"since": since_text, "trigger": trigger, "source": source},
        triggers=TRIGGERS,
    )


async def stats(page: Page) -> Response:
    figures = await page.ask("stats", request_of(StatsRequest, agent_id=page.agent))
    stamps: list[int] = []
    cursor = None
    while len(stamps) < CHARTED:
        listed = await page.ask(
            "list_memories",
            request_of(ListRequest, agent_id=page.agent, limit=1000, cursor=cursor or UNSET),
        )
        stamps += [memory.timestamp for memory in listed.memories]
        cursor = listed.next_cursor
        if cursor is None:
            break
    return page.render(
        "stats.html",
        agent=page.agent,
        figures=figures,
        bars=day_bars(stamps),
        counted=len(stamps),
        more=cursor is not None,
    )


async def settings(page: Page) -> Response:
    figures = await page.ask("stats", request_of(StatsRequest, agent_id=page.agent))
    return page.render(
        "settings.html",
        agent=page.agent,
        enabled=figures.enabled,
        done=DONE.get(page.param("done"), ""),
        problem=page.param("problem"),
    )


async def toggle(page: Page) -> Response:
    enabled = page.param("enabled") == "1"
    await page.ask("toggle", request_of(ToggleRequest, agent_id=page.agent, enabled=enabled))
    done = "enabled" if enabled else "disabled"
    return RedirectResponse(url("/settings", agent=page.agent, done=done), status_code=303)


async def erase(page: Page) -> Response:
    """Only when the agent's id was typed exactly; anything else changes nothing."""
    if page.param("confirm") != page.agent:
        return page.render(
            "settings.html", status=400, agent=page.agent, enabled=None, done="",
            problem="The typed id does not match the agent's id: nothing was erased.",
        )  # fmt: skip
    request = request_of(EraseRequest, agent_id=page.agent, confirm=page.param("confirm"))
    reply = await page.ask("erase", request)
    return page.render("erased.html", agent=page.agent, erased=reply)


def routes(browser: Browser) -> list[Route]:
    return [
        route("/sessions", browser, sessions),
        route("/session", browser, transcript),
        route("/graph", browser, neighbourhood),
        route("/audit", browser, audit),
        route("/stats", browser, stats),
        route("/settings", browser, settings),
        route("/settings/toggle", browser, toggle, post=True),
        route("/settings/erase", browser, erase, post=True),
    ]
