"""The memory browser in tests: its application in this process over a live worker (HTTP through
httpx2's ASGI transport), a token file, and signing in as a person does (the form's hidden
inputs sent back as they are)."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2

from worker.client import MemoryClient
from worker.tokens import load_tokens
from worker.ui.access import Sessions
from worker.ui.server import Link, make_app

TOKENS = {"alice": "alice-ui-token", "bob": "bob-ui-token", "all": "every-agent-token"}


def token_file(tmp_path: Path, agents: dict[str, list[str]]) -> Path:
    path = tmp_path / "ui-tokens.json"
    entries = {
        name: {"sha256": hashlib.sha256(TOKENS[name].encode()).hexdigest(), "agents": patterns}
        for name, patterns in agents.items()
    }
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


@asynccontextmanager
async def browser_over(
    client: MemoryClient,
    tokens: Path | None,
    base: str = "http://127.0.0.1",
    tenant: str | None = None,
) -> AsyncIterator[httpx2.AsyncClient]:
    """The browser's application over client (`tenant`: an operator's, naming the tenant)."""
    sessions = Sessions(None if tokens is None else load_tokens("TOKENS", str(tokens)))
    app = make_app(Link.of(client, tenant), sessions)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url=base) as http:
        yield http


def hidden(page: str) -> dict[str, str]:
    """The hidden inputs of a page's (first) form, by name."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    return {name: html.unescape(value) for name, value in found}


def csrf(page: str) -> str:
    return hidden(page)["csrf"]


async def sign_in(http: httpx2.AsyncClient, token: str, target: str = "/") -> httpx2.Response:
    form = await http.get("/login", params={"next": target})
    assert form.status_code == 200 and 'name="token"' in form.text
    return await http.post("/login", data={**hidden(form.text), "token": token})


async def post(http: httpx2.AsyncClient, path: str, page: str, **fields: Any) -> httpx2.Response:
    """A form's POST with the CSRF token of the page it is on."""
    return await http.post(path, data={"csrf": csrf(page), **fields})
