"""A session's topics and one topic's messages (contract sections 20 and 21): the threads a
session was split into, most recently active first, each with its title, labels, summary and
open loops (each linking to the message that opened it); and a topic's messages in session
order, paged, beneath what `memory::session::resume` gives an agent picking that topic up.

Every page asks the worker with the browser's own credentials for the agent the guard checked,
so a topic of another agent or tenant is simply not found (404)."""

from __future__ import annotations

from msgspec import UNSET
from starlette.responses import Response
from starlette.routing import Route

from schema.errors import NotFound
from schema.topics import SessionResumeRequest, TopicGetRequest, TopicListRequest
from worker.ui.pages import request_of
from worker.ui.server import Browser, Page, route

MESSAGES_SHOWN = 50  # a topic page's messages
RESUME_CHARS = 4000  # memory::session::resume's default maxChars: what an agent would read


async def topics(page: Page) -> Response:
    """The session's topics as memory::topic::list orders them (most recently active first)."""
    session_id = page.param("session")
    if not page.agent or not session_id:
        raise NotFound("no agent and session named (agent=, session=)")
    request = request_of(TopicListRequest, agent_id=page.agent, session_id=session_id)
    reply = await page.ask("topic_list", request)
    return page.render("topics.html", agent=page.agent, session_id=session_id, topics=reply.topics)


async def topic(page: Page) -> Response:
    """One topic with a page of its messages; on the first page, the resume text too (the
    latest messages are what it shows, so later pages need not ask for it again)."""
    if not page.agent or not page.param("id"):
        raise NotFound("no agent and topic named (agent=, id=)")
    cursor = page.param("cursor")
    got = await page.ask(
        "topic_get",
        request_of(
            TopicGetRequest,
            agent_id=page.agent,
            topic_id=page.param("id"),
            limit=MESSAGES_SHOWN,
            cursor=cursor or UNSET,
        ),
    )
    resume = None
    if not cursor:
        resume = await page.ask(
            "session_resume",
            request_of(
                SessionResumeRequest,
                agent_id=page.agent,
                session_id=got.topic.session_id,
                topic_id=got.topic.id,
                max_chars=RESUME_CHARS,
            ),
        )
    return page.render(
        "topic.html",
        agent=page.agent,
        topic=got.topic,
        messages=got.messages,
        cursor=got.next_cursor,
        resume=resume,
        resume_chars=RESUME_CHARS,
    )


def routes(browser: Browser) -> list[Route]:
    return [
        route("/topics", browser, topics),
        route("/topic", browser, topic),
    ]
