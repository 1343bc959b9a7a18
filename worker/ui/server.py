"""The browser's application: routes, the guard every page passes, security headers, and how
`memory-worker ui` serves it (uvicorn).

Every page but /login and the static files passes `guarded`: a visitor without a session is sent
to /login (with tokens) or given one (without); a POST must carry the session's CSRF token; a
page about an agent (`?agent=`) the session's token does not match is 403 and nothing is asked
of the worker. Every response says `Content-Security-Policy` with scripts and styles from this
server's own files only, so a memory that holds markup could not run script even if it were
ever shown as HTML (it never is: templates autoescape).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import msgspec
import structlog
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schema.errors import WorkerError
from worker.client import MemoryClient
from worker.client_errors import ClientError
from worker.config import Config
from worker.registry import BY_TRIGGER
from worker.ui.access import COOKIE, EVERY_AGENT, IDLE_S, Session, Sessions, same, set_cookie
from worker.ui.formats import FILTERS

log = structlog.get_logger()
HERE = Path(__file__).parent
TOKENS_VARIABLE = "MEMORY_WORKER_UI_TOKENS"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATUS = {"400": 400, "403": 403, "404": 404, "409": 409, "413": 413, "503": 503}


class Link:
    """The one connection to the workers, made on first use and again after it is lost, so the
    browser starts (and shows a clear error page) while NATS is down. `tenant`: an operator's
    connection under tenancy names the tenant on every request."""

    def __init__(self, connect: Callable[[], Awaitable[MemoryClient]], tenant: str | None):
        self._connect = connect
        self.tenant = tenant
        self._client: MemoryClient | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, client: MemoryClient, tenant: str | None = None) -> Link:
        async def same_client() -> MemoryClient:
            return client

        return cls(same_client, tenant)

    async def client(self) -> MemoryClient:
        async with self._lock:
            if self._client is None or self._client.closed:
                self._client = await self._connect()
            return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


@dataclass
class Page:
    """What a page's function gets: the request, its session, its form (a POST) and the agent it
    is about (`?agent=` or the form's `agent`, already checked against the session's token)."""

    request: Request
    session: Session
    form: FormData | None
    agent: str
    ui: Browser

    def param(self, name: str, default: str = "") -> str:
        if self.form is not None and name in self.form:
            value = self.form[name]
            return value if isinstance(value, str) else default
        return self.request.query_params.get(name, default)

    async def ask(self, name: str, request: Any) -> Any:
        """The reply to one trigger's request (a `MemoryClient` method name)."""
        if self.ui.link.tenant is not None:
            request = msgspec.structs.replace(request, tenant=self.ui.link.tenant)
        client = await self.ui.link.client()
        return await getattr(client, name)(request)

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        return self.ui.render(self.request, template, self.session, status, **values)


Handler = Callable[[Page], Awaitable[Response]]


class Browser:
    def __init__(self, link: Link, sessions: Sessions) -> None:
        self.link = link
        self.sessions = sessions
        loader = jinja2.FileSystemLoader(HERE / "templates")
        self.templates = jinja2.Environment(loader=loader, autoescape=True)
        self.templates.filters.update(FILTERS)
        self.templates.globals["url"] = url
        self.templates.globals["facts"] = False  # make_app: once a facts page is served

    def render(
        self, request: Request, template: str, session: Session | None, status: int, **values: Any
    ) -> HTMLResponse:
        body = self.templates.get_template(template).render(session=session, **values)
        return HTMLResponse(body, status_code=status)

    def guarded(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session, opened = self.sessions.of(request), None
            if session is None and self.sessions.open_door:
                opened, session = self.sessions.open(EVERY_AGENT)
            if session is None:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(url("/login", next=target), status_code=303)
            form = None
            if request.method == "POST":
                form = await request.form()
                if opened is not None or not same(form.get("csrf"), session.csrf):
                    return self.refuse(
                        request,
                        session,
                        403,
                        "This form has expired or did not "
                        "come from this site: reload the page and try again.",
                    )
            page = Page(request, session, form, "", self)
            agent = page.param("agent")
            if agent and not session.token.allows(agent):
                return self.refuse(request, session, 403, f"This sign-in may not see agent "
                                   f"{agent!r}.")  # fmt: skip
            page.agent = agent
            try:
                response = await handler(page)
            except WorkerError as error:
                status = STATUS.get(error.status, 502)
                response = self.refuse(request, session, status, error.message, code=error.code)
            except ClientError as error:
                response = self.refuse(request, session, 503, f"The memory worker is "
                                       f"unavailable: {error}")  # fmt: skip
            if opened is not None:
                set_cookie(response, request, COOKIE, opened, IDLE_S)
            return response

        return endpoint

    def refuse(
        self, request: Request, session: Session | None, status: int, message: str, code: str = ""
    ) -> HTMLResponse:
        return self.render(
            request, "refused.html", session, status, refused=status, message=message, code=code
        )


def url(path: str, **params: Any) -> str:
    """A link to one of the browser's pages, its parameters encoded (ids may hold anything)."""
    given = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{quote(path)}?{urlencode(given)}" if given else quote(path)


async def secured(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    async def with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            names = {name.lower() for name, _ in headers}
            for name, value in HEADERS.items():
                if name.lower().encode() not in names:
                    headers.append((name.lower().encode(), value.encode()))
            message["headers"] = headers
        await send(message)

    await app(scope, receive, with_headers)


def make_app(link: Link, sessions: Sessions) -> ASGIApp:
    from worker.ui import agent_pages, pages, signin

    browser = Browser(link, sessions)
    routes = [
        *signin.routes(browser),
        *pages.routes(browser),
        *agent_pages.routes(browser),
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


def connector(config: Config, url_: str, timeout: float, inbox_prefix: str | None) -> Link:
    async def connect() -> MemoryClient:
        return await MemoryClient.connect(
            url_, config=config, timeout=timeout, inbox_prefix=inbox_prefix
        )

    return Link(connect, None)


def serve(app: ASGIApp, host: str, port: int) -> None:
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    asyncio.run(Announced(config).serve())


class Announced(uvicorn.Server):
    """uvicorn's server, saying once where it listens (`ui.listening`, the URL to open)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            address = self.servers[0].sockets[0].getsockname()
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            log.info("ui.listening", url=f"http://{host}:{address[1]}/")


def route(path: str, browser: Browser, handler: Handler, post: bool = False) -> Route:
    return Route(path, browser.guarded(handler), methods=["POST"] if post else ["GET"])
