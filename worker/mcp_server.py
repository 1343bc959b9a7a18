"""`memory-worker mcp`: the Model Context Protocol in front of a running worker, for one agent.

An MCP client (Claude Desktop, an IDE, an agent framework) starts this process, or reaches it
over streamable HTTP, and gets tools to save, search and manage memories; every call goes to
the worker over NATS through the Python client (worker/client.py). The agent whose memories
they are is fixed by whoever deploys the server (`--agent`, or in HTTP mode a request header
that the request's bearer token must be allowed to name): never an argument a model could choose.

Refusals come back as tool errors (`isError`) with the worker's code and message, so that a
model reads "forbidden" rather than an empty result; a worker or NATS that is down is one too,
within `--timeout`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from pydantic import Field, ValidationError

from schema.context import ContextRequest
from schema.errors import WorkerError
from schema.facts import FactQueryRequest
from schema.life import ForgetRequest, GetRequest, ListRequest
from schema.memory import RecallRequest, StoreRequest
from schema.session import SessionListRequest
from schema.switch import ToggleRequest
from schema.taxonomy import Category, Sensitivity
from schema.topics import SessionResumeRequest
from worker.client import MemoryClient
from worker.client_errors import ClientError
from worker.config import Config
from worker.mcp_text import (
    CONTEXT,
    FACTS,
    FORGET,
    GET,
    INSTRUCTIONS,
    LIST,
    RESUME,
    SAVE,
    SEARCH,
    TOGGLE,
    fact_lines,
    memory_lines,
    recalled_lines,
    refused_arguments,
)
from worker.tokens import Tokens

T = TypeVar("T")
Importance = Annotated[
    float | None,
    Field(ge=0.0, le=1.0, description="0-1; see the guidelines above. Omit to let it be estimated"),
]
Ids = Annotated[list[str], Field(min_length=1, max_length=100, description="memory ids")]
Summary = Annotated[
    str | None,
    Field(min_length=1, max_length=1024, description="a short version, shown for long content"),
]
TagList = Annotated[
    list[str] | None, Field(max_length=32, description="labels to filter by, 1-64 characters")
]


class Bridge:
    """The one connection to the worker, made on first use and again after it is lost, so
    that the server starts (and answers tools/list) while NATS is still down."""

    def __init__(self, config: Config, url: str, timeout: float, inbox_prefix: str | None):
        self.config = config
        self.url = url
        self.timeout = timeout
        self.inbox_prefix = inbox_prefix
        self._client: MemoryClient | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> MemoryClient:
        async with self._lock:
            if self._client is None or self._client.closed:
                self._client = await MemoryClient.connect(
                    self.url,
                    config=self.config,
                    timeout=self.timeout,
                    inbox_prefix=self.inbox_prefix,
                )
            return self._client

    async def call(self, ask: Callable[[MemoryClient], Awaitable[T]]) -> T:
        """What ask returns; a refusal or failure as the error a model reads."""
        try:
            return await ask(await self.client())
        except WorkerError as error:
            raise ToolError(f"the memory worker refused ({error.code}): {error.message}") from None
        except ClientError as error:
            raise ToolError(f"the memory worker is unavailable: {error}") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    @staticmethod
    def convert(fields: dict[str, Any], kind: type[T]) -> T:
        """A request from a tool's arguments, checked as the worker checks it: a refusal names
        the argument (`$.tags[0]`) instead of crashing the tool."""
        try:
            return msgspec.convert(fields, kind)
        except msgspec.ValidationError as error:
            raise ToolError(f"invalid argument: {error}") from None


Refusal = Callable[[str], str | None]  # why the caller may not act for an agent, or None


class MemoryServer(MCPServer[Any]):
    """The SDK's server, but arguments that fail the tools' schema are refused in one line
    naming each field (`invalid argument: `query` is required`) instead of the SDK's text,
    which is pydantic's several lines of type codes, echoed input and a link."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(error, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(refused_arguments(cause.errors())) from cause


def agent_resolver(
    agent: str | None, header: str | None, refusal: Refusal | None
) -> Callable[[Context], str]:
    """Where the agent comes from: the deployer's --agent, or the request's header; with
    tokens, checked against this request's token before anything is read or written."""

    def resolve(ctx: Context) -> str:
        value = agent
        if value is None:
            assert header is not None
            value = (ctx.headers or {}).get(header.lower()) or (ctx.headers or {}).get(header)
            if not value:
                raise ToolError(f"no agent: the request has no {header} header")
        if refusal is not None and (reason := refusal(value)):
            raise ToolError(f"forbidden: {reason}")
        return value

    return resolve


def end_of_day(date: str) -> int:
    """The last millisecond of a UTC day `YYYY-MM-DD` (a tool error naming `date` otherwise)."""
    try:
        start = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise ToolError(f"invalid argument: `date`: {date!r} is not YYYY-MM-DD") from None
    return int(start.timestamp() * 1000) + 86_399_999


def build_server(
    bridge: Bridge,
    agent: str | None,
    header: str | None,
    *,
    allow_toggle: bool,
    refusal: Refusal | None = None,
) -> MCPServer[Any]:
    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await bridge.close()

    server = MemoryServer(
        "memory-worker", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING"
    )
    agent_of = agent_resolver(agent, header, refusal)

    @server.tool(name="memory_save", description=SAVE, structured_output=False)
    async def memory_save(
        content: Annotated[str, Field(min_length=1, description="one self-contained fact")],
        ctx: Context,
        importance: Importance = None,
        summary: Summary = None,
        tags: TagList = None,
        category: Annotated[Category | None, Field(description="what kind of memory")] = None,
        sensitivity: Annotated[
            Sensitivity | None, Field(description="internal unless it is public or restricted")
        ] = None,
    ) -> str:
        given = {
            "importance": importance,
            "summary": summary,
            "tags": tags,
            "category": category,
            "sensitivity": sensitivity,
        }
        fields: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        request = bridge.convert(
            {"agentId": agent_of(ctx), "content": content, **fields}, StoreRequest
        )
        reply = await bridge.call(lambda c: c.store(request))
        if reply.disabled:
            return "Not saved: memory is switched off for this agent."
        done = "Already known" if reply.deduplicated else "Saved"
        notes = [f"{count} {kind} redacted" for kind, count in (reply.redactions or {}).items()]
        notes += [f"flagged {flag}" for flag in reply.flags or [] if not flag.startswith("pii:")]
        return f"{done} (id {reply.id})" + (f"; {', '.join(notes)}." if notes else ".")

    @server.tool(name="memory_search", description=SEARCH, structured_output=False)
    async def memory_search(
        query: Annotated[str, Field(min_length=1, description="words to look for")],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=20, description="at most this many")] = 5,
    ) -> str:
        request = RecallRequest(agent_id=agent_of(ctx), query=query, limit=limit)
        reply = await bridge.call(lambda c: c.recall(request))
        return recalled_lines(reply.memories) or "No memories match."

    @server.tool(name="memory_context", description=CONTEXT, structured_output=False)
    async def memory_context(
        query: Annotated[str, Field(description="what the conversation is about")],
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=20)] = 10,
        max_chars: Annotated[int, Field(ge=200, le=100_000, description="size bound")] = 4000,
    ) -> str:
        request = ContextRequest(
            agent_id=agent_of(ctx), query=query, limit=limit, max_chars=max_chars
        )
        reply = await bridge.call(lambda c: c.context(request))
        return reply.text

    @server.tool(name="memory_resume", description=RESUME, structured_output=False)
    async def memory_resume(
        session_id: Annotated[str, Field(min_length=1, description="the session to pick up")],
        ctx: Context,
        query: Annotated[str | None, Field(min_length=1, description="the line of work")] = None,
        topic_id: Annotated[str | None, Field(min_length=1, description="a topic's id")] = None,
        max_chars: Annotated[int, Field(ge=200, le=100_000, description="size bound")] = 4000,
    ) -> str:
        given = {"query": query, "topicId": topic_id}
        fields: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        request = bridge.convert(
            {"agentId": agent_of(ctx), "sessionId": session_id, "maxChars": max_chars, **fields},
            SessionResumeRequest,
        )
        reply = await bridge.call(lambda c: c.session_resume(request))
        if reply.topic_id is None:
            return "This session has no topics yet."
        return f"topic {reply.topic_id}\n{reply.text}"

    @server.tool(name="memory_facts", description=FACTS, structured_output=False)
    async def memory_facts(
        ctx: Context,
        about: Annotated[str | None, Field(min_length=1, max_length=256)] = None,
        date: Annotated[str | None, Field(description="YYYY-MM-DD; omit for now")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> str:
        fields: dict[str, Any] = {"agentId": agent_of(ctx), "limit": limit}
        if date is not None:
            fields["asOf"] = end_of_day(date)
        if about is not None:
            fields["subject"] = about
        reply = await bridge.call(lambda c: c.fact_query(bridge.convert(fields, FactQueryRequest)))
        if not reply.facts and about is not None:  # `about` may be what a fact is about
            fields["object"] = fields.pop("subject")
            request = bridge.convert(fields, FactQueryRequest)
            reply = await bridge.call(lambda c: c.fact_query(request))
        return fact_lines(reply.facts) or "No facts known."

    @server.tool(name="memory_get", description=GET, structured_output=False)
    async def memory_get(ids: Ids, ctx: Context) -> str:
        request = GetRequest(agent_id=agent_of(ctx), ids=ids)
        reply = await bridge.call(lambda c: c.get(request))
        missing = f"\nNot found: {', '.join(reply.missing)}" if reply.missing else ""
        return (memory_lines(reply.memories) or "None found.") + missing

    @server.tool(name="memory_forget", description=FORGET, structured_output=False)
    async def memory_forget(ids: Ids, ctx: Context) -> str:
        request = ForgetRequest(agent_id=agent_of(ctx), ids=ids)
        reply = await bridge.call(lambda c: c.forget(request))
        missing = f"; not found: {', '.join(reply.missing)}" if reply.missing else ""
        return f"Forgot {reply.forgotten}{missing}."

    @server.tool(name="memory_list", description=LIST, structured_output=False)
    async def memory_list(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(description="nextCursor of the last page")] = None,
    ) -> str:
        more: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        request = ListRequest(agent_id=agent_of(ctx), limit=limit, **more)
        reply = await bridge.call(lambda c: c.list_memories(request))
        text = memory_lines(reply.memories) or "No memories."
        return text + (f"\nnextCursor: {reply.next_cursor}" if reply.next_cursor else "")

    if allow_toggle:

        @server.tool(name="memory_toggle", description=TOGGLE, structured_output=False)
        async def memory_toggle(enabled: bool, ctx: Context) -> str:
            request = ToggleRequest(agent_id=agent_of(ctx), enabled=enabled)
            reply = await bridge.call(lambda c: c.toggle(request))
            return "Memory is on." if reply.enabled else "Memory is off."

    if agent is not None:  # static resources get no request, so no header to read
        add_resources(server, bridge, agent, refusal)
    return server


def add_resources(
    server: MCPServer[Any], bridge: Bridge, agent: str, refusal: Refusal | None
) -> None:
    async def read(ask: Callable[[MemoryClient], Awaitable[T]]) -> T:
        if refusal is not None and (reason := refusal(agent)):
            raise ResourceError(f"forbidden: {reason}")
        try:
            return await bridge.call(ask)
        except ToolError as error:
            raise ResourceError(str(error)) from None

    @server.resource("memory://pinned", name="pinned", mime_type="text/plain")
    async def pinned() -> str:
        """The agent's pinned memories: always part of its context."""
        request = ListRequest(agent_id=agent, pinned=True, limit=1000)
        reply = await read(lambda c: c.list_memories(request))
        return memory_lines(reply.memories) or "No pinned memories."

    @server.resource("memory://sessions", name="sessions", mime_type="text/plain")
    async def sessions() -> str:
        """The agent's conversation sessions, most recent first."""
        reply = await read(lambda c: c.session_list(SessionListRequest(agent_id=agent)))
        lines = [
            f"{s.id}: {s.message_count} messages, updated {s.updated_at}"
            for s in sorted(reply.sessions, key=lambda s: -s.updated_at)
        ]
        return "\n".join(lines) or "No sessions."


def serve(config: Config, args: argparse.Namespace, url: str, tokens: Tokens | None) -> None:
    """Run until the client closes stdin (stdio) or SIGINT/SIGTERM (HTTP, worker/mcp_http.py:
    behind bearer tokens when there are any)."""
    from worker.mcp_http import serve_http, token_refusal

    bridge = Bridge(config, url, args.timeout, args.inbox_prefix)
    refusal = None if tokens is None else token_refusal(tokens)
    server = build_server(
        bridge, args.agent, args.agent_header, allow_toggle=args.allow_toggle, refusal=refusal
    )
    if args.http is None:
        server.run("stdio")
    else:
        serve_http(server, args, tokens)
