"""An agent's facts (contract sections 19 and 20): what it believes now, or on a day ("as of"),
each with the memories it came from, and every subject and predicate's values in the order they
began (past and retracted ones too); and retracting a fact after a confirmation page."""

from __future__ import annotations

import time
from dataclasses import dataclass

from msgspec import UNSET
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from handlers.facts.keys import compared
from schema.errors import InvalidRequest, NotFound
from schema.facts import Fact, FactQueryRequest, FactRetractRequest
from worker.ui.drawing import SPAN_ROW, Span, spans
from worker.ui.formats import day_of, millis_of_day
from worker.ui.pages import request_of
from worker.ui.server import Browser, Page, route, url

SHOWN = 1000  # memory::fact::query's largest page: the facts one page lists
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Timeline:
    """One subject and predicate's values in the order they began, and their picture: a bar
    each (drawing.spans) from the day the first began (`first`) to now, `height` tall."""

    subject: str
    predicate: str
    facts: list[Fact]
    spans: list[Span]
    first: str
    height: int


def timelines(facts: list[Fact], now: int) -> list[Timeline]:
    """Facts (ordered by subject, predicate, validFrom, as the query returns them) grouped by
    their subject's compared form and predicate, each group in validFrom order and drawn."""
    groups: dict[tuple[str, str], list[Fact]] = {}
    for fact in facts:
        groups.setdefault((compared(fact.subject), fact.predicate), []).append(fact)
    lines = []
    for (_, predicate), members in groups.items():
        ordered = sorted(members, key=lambda f: f.valid_from)
        first = day_of(ordered[0].valid_from)
        height = SPAN_ROW * len(ordered) + 16
        lines.append(
            Timeline(members[0].subject, predicate, ordered, spans(ordered, now), first, height)
        )
    return lines


def as_of(page: Page) -> int | None:
    """The last millisecond of the day in `asof` (what held by the end of it, as memory_facts
    reads its `date`); None without one; a 400 naming the field for anything but YYYY-MM-DD."""
    text = page.param("asof").strip()
    if not text:
        return None
    start = millis_of_day(text)
    if start is None:
        raise InvalidRequest(f"asof: {text!r} is not a day as YYYY-MM-DD - at `$.asof`")
    return start + DAY_MS - 1


async def query(page: Page, **fields: object) -> list[Fact]:
    request = request_of(FactQueryRequest, agent_id=page.agent, limit=SHOWN, **fields)
    reply = await page.ask("fact_query", request)
    facts: list[Fact] = reply.facts
    return facts


async def facts(page: Page) -> Response:
    """Current facts (or those that held at the end of the `asof` day), then every timeline of
    the agent's facts, ended and retracted values too; `subject` narrows both."""
    if not page.agent:
        raise NotFound("no agent named (agent=)")
    subject = page.param("subject").strip()
    when = as_of(page)
    about = {"subject": subject or UNSET}
    held = await query(page, as_of=UNSET if when is None else when, **about)
    history = await query(page, include_history=True, **about)
    return page.render(
        "facts.html",
        agent=page.agent,
        facts=held,
        timelines=timelines(history, int(time.time() * 1000)),
        more=len(held) >= SHOWN or len(history) >= SHOWN,
        limit=SHOWN,
        values={"asof": page.param("asof").strip(), "subject": subject},
        done="Retracted: the fact is no longer believed; what it had ended holds again."
        if page.param("done") == "retracted"
        else "",
    )


async def one(page: Page) -> Fact:
    """The fact `id` of the agent, looked up in its subject and predicate's history when the
    link names them (the facts page's links do)."""
    fact_id = page.param("id")
    narrowed = {
        "subject": page.param("subject") or UNSET,
        "predicate": page.param("predicate") or UNSET,
    }
    for fact in await query(page, include_history=True, **narrowed):
        if fact.id == fact_id:
            return fact
    raise NotFound(f"agent {page.agent!r} has no fact {fact_id!r}")


async def confirm_retract(page: Page) -> Response:
    return page.render("retract.html", agent=page.agent, fact=await one(page))


async def retract(page: Page) -> Response:
    request = request_of(FactRetractRequest, agent_id=page.agent, ids=[page.param("id")])
    reply = await page.ask("fact_retract", request)
    if reply.missing:
        raise NotFound(f"agent {page.agent!r} has no fact {page.param('id')!r}")
    return RedirectResponse(url("/facts", agent=page.agent, done="retracted"), status_code=303)


def routes(browser: Browser) -> list[Route]:
    return [
        route("/facts", browser, facts),
        route("/facts/retract", browser, confirm_retract),
        route("/facts/retract", browser, retract, post=True),
    ]
