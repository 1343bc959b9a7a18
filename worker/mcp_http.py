"""MCP over streamable HTTP behind bearer tokens (`memory-worker mcp --http PORT`).

Agents' memories hold what users told them, so this door is as tight as the bus
(docs/tenants.md). With `MEMORY_WORKER_MCP_TOKENS` (worker/tokens.py) every HTTP request passes,
outermost first:

1. the SDK's bearer check (`BearerAuthBackend` over our `TokenVerifier`, then
   `RequireAuthMiddleware`): no token or an unknown one is 401 with `WWW-Authenticate: Bearer`,
   answered before the SDK's session manager sees the request, so it opens no session;
2. the agent gate: the agent the request acts for (`--agent`, or the `--agent-header` header of
   this very request) must match one of the token's patterns, else 403. Every MCP message
   (initialize, each tool call, each resource read) is a request of its own, so switching the
   header mid-session is checked like the first request; a request that would open a session
   is refused (429) while the token already has `--sessions-per-token` open, so one token
   cannot fill the SDK's session table and lock everyone else out;
3. the SDK's session manager, which also binds each session to the token that opened it.

Without tokens only loopback may be served, and never `--agent-header`: `start_problem` says
why not before anything listens.
"""

from __future__ import annotations

import argparse
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import structlog
import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worker.tokens import Token, Tokens

log = structlog.get_logger()
TOKENS_VARIABLE = "MEMORY_WORKER_MCP_TOKENS"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def start_problem(args: argparse.Namespace, tokens: Tokens | None) -> str | None:
    """Why HTTP must not start as asked, or None: without tokens, nothing but loopback, and no
    header naming the agent (whoever reaches the port could name any agent)."""
    if tokens is not None:
        return None
    if args.agent_header is not None:
        return (
            f"--agent-header lets each request name its agent, so it needs {TOKENS_VARIABLE} "
            "(a file of bearer tokens and the agents each may act for; `memory-worker token` "
            "makes one)"
        )
    if args.host not in LOOPBACK:
        return (
            f"--host {args.host} is not loopback (127.0.0.1, ::1, localhost): serving it needs "
            f"{TOKENS_VARIABLE} (a file of bearer tokens; `memory-worker token` makes one)"
        )
    return None


class FileTokenVerifier:
    """The SDK's TokenVerifier over the token file: a token's name is its client id, which the
    SDK's session manager then binds each session to."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.tokens.find(token)
        if found is None:
            return None
        return AccessToken(token=token, client_id=found.name, scopes=[])


def token_refusal(tokens: Tokens) -> Callable[[str], str | None]:
    """Why the current request's token may not act for an agent, or None: the check tools and
    resources make again where they resolve the agent, behind the HTTP gate."""

    def refusal(agent: str) -> str | None:
        access = get_access_token()
        token = None if access is None else tokens.named(access.client_id)
        if token is None:
            return "the request carries no valid bearer token"
        if not token.allows(agent):
            return f"token {token.name!r} may not act for agent {agent!r}"
        return None

    return refusal


class AgentGate:
    """Between the SDK's bearer check and its session manager: the request's agent must be one
    its token may act for, and a token may hold at most `cap` sessions."""

    def __init__(
        self,
        app: ASGIApp,
        server: MCPServer[Any],
        tokens: Tokens,
        agent: str | None,
        header: str | None,
        cap: int,
    ) -> None:
        self.app = app
        self.server = server
        self.tokens = tokens
        self.agent = agent
        self.header = header
        self.cap = cap
        self.opening: Counter[str] = Counter()  # requests opening a session, by token name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        assert isinstance(user, AuthenticatedUser)  # RequireAuthMiddleware let it through
        token = self.tokens.named(user.access_token.client_id)
        assert token is not None
        headers = Headers(scope=scope)
        agent = self.agent if self.header is None else headers.get(self.header)
        if agent and not token.allows(agent):
            description = f"token {token.name!r} may not act for agent {agent!r}"
            await refuse(send, 403, "forbidden", description)
            return
        if scope["method"] != "POST" or MCP_SESSION_ID_HEADER in headers:
            await self.app(scope, receive, send)
            return
        if self.open_sessions(token) + self.opening[token.name] >= self.cap:
            description = (
                f"token {token.name!r} holds the most sessions one token may ({self.cap}); "
                "end one (DELETE) or wait for an idle one to expire"
            )
            await refuse(send, 429, "too_many_sessions", description)
            return
        # Counted until it answers: by then the session it opened is in the SDK's table.
        self.opening[token.name] += 1
        counted = True

        async def answer(message: Message) -> None:
            nonlocal counted
            if counted and message["type"] == "http.response.start":
                self.opening[token.name] -= 1
                counted = False
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            if counted:
                self.opening[token.name] -= 1

    def open_sessions(self, token: Token) -> int:
        # The SDK records which credential opened each live session; it has no public count.
        owners = self.server.session_manager._session_owners
        return sum(1 for owner in owners.values() if owner["client_id"] == token.name)


async def refuse(send: Send, status: int, error: str, description: str) -> None:
    body = msgspec.json.encode({"error": error, "error_description": description})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guarded(app: ASGIApp, gate: AgentGate) -> ASGIApp:
    """app behind the bearer check and the gate; lifespan events go straight to app, and a
    websocket (which MCP does not use) is closed."""
    checked = RequireAuthMiddleware(gate, required_scopes=[])

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await checked(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await app(scope, receive, send)

    backend = BearerAuthBackend(FileTokenVerifier(gate.tokens))
    return AuthenticationMiddleware(AuthContextMiddleware(route), backend=backend)


def serve_http(server: MCPServer[Any], args: argparse.Namespace, tokens: Tokens | None) -> None:
    """Serve /mcp on --host:--http until SIGINT or SIGTERM."""
    app: ASGIApp = server.streamable_http_app(host=args.host)
    if tokens is not None:
        gate = AgentGate(
            app, server, tokens, args.agent, args.agent_header, args.sessions_per_token
        )
        app = guarded(app, gate)
    config = uvicorn.Config(app, host=args.host, port=args.http, log_level="warning")
    anyio.run(Announced(config).serve)


class Announced(uvicorn.Server):
    """uvicorn's server, saying where it listens once it does: one `mcp.listening` line with
    the URL a client connects to (the port `--http 0` was given, too); uvicorn's own lines
    stay below warning."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            address = self.servers[0].sockets[0].getsockname()
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            log.info("mcp.listening", url=f"http://{host}:{address[1]}/mcp")
