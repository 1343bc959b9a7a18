"""The browser's routes assembled: sign-in, the pages, the static files, behind the guard and the
security headers of worker/ui/server.py. Apart from server.py so that the pages, which import
its `route` and `Browser`, are not imported by it in turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from worker.registry import BY_TRIGGER
from worker.ui import agent_pages, fact_pages, pages, signin, topic_pages
from worker.ui.access import Sessions
from worker.ui.server import HERE, Browser, Link, secured


def make_app(link: Link, sessions: Sessions) -> ASGIApp:
    browser = Browser(link, sessions)
    routes = [
        *signin.routes(browser),
        *pages.routes(browser),
        *agent_pages.routes(browser),
        *fact_pages.routes(browser),
        *topic_pages.routes(browser),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await link.close()

    # The agent's menu links to facts once the worker has them and a page shows them.
    served = {getattr(r, "path", None) for r in routes}
    facts = "memory::fact::query" in BY_TRIGGER and "/facts" in served
    browser.templates.globals["facts"] = facts
    app = Starlette(routes=routes, lifespan=lifespan)

    async def headed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
        else:
            await secured(app, scope, receive, send)

    return headed
