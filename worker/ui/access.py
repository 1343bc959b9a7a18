"""Who may use the browser, and how each change proves it comes from its own page.

With MEMORY_WORKER_UI_TOKENS (section 18's token file, worker/tokens.py) a person signs in once
with a token at /login and gets a session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` over
HTTPS or behind a proxy that says `X-Forwarded-Proto: https`); the session acts for the agents
that token's patterns match, and no other. Without tokens the server listens on loopback only
(worker/ui/server.py refuses any other host) and whoever reaches it gets a session for every
agent, made on the first page they open.

Every session has its own CSRF token, put in a hidden input of every form; a POST whose `csrf`
field is not the session's is refused (403) before anything is asked of the worker. The sign-in
form, which comes before any session, carries a token of its own that must equal a short-lived
cookie set with the form (a double submit), so no other site can sign a browser in.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from worker.tokens import Token, Tokens

COOKIE = "memory_ui_session"
LOGIN_COOKIE = "memory_ui_login"
IDLE_S = 8 * 3600  # a session unused this long is gone
MAX_SESSIONS = 10_000  # past this, the least recently used session is dropped
EVERY_AGENT = Token("local", b"", ("*",))  # without tokens: loopback only, every agent


@dataclass
class Session:
    token: Token
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    seen: float = field(default_factory=time.monotonic)


class Sessions:
    """Sessions by the random id their cookie holds, in this process's memory: a restart signs
    everyone out, and nothing of a session is ever written to disk."""

    def __init__(self, tokens: Tokens | None) -> None:
        self.tokens = tokens
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    @property
    def open_door(self) -> bool:
        """No tokens: every visitor (on loopback) is let in."""
        return self.tokens is None

    def of(self, request: Request) -> Session | None:
        key = request.cookies.get(COOKIE)
        session = None if key is None else self._sessions.get(key)
        if session is None or time.monotonic() - session.seen > IDLE_S:
            return None
        session.seen = time.monotonic()
        self._sessions.move_to_end(key or "")
        return session

    def open(self, token: Token) -> tuple[str, Session]:
        key = secrets.token_urlsafe(32)
        session = self._sessions[key] = Session(token)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return key, session

    def close(self, request: Request) -> None:
        key = request.cookies.get(COOKIE)
        if key is not None:
            self._sessions.pop(key, None)

    def sign_in(self, presented: str) -> Token | None:
        """The token file's entry for what was typed; None for an unknown token."""
        if self.tokens is None or not presented:
            return None
        return self.tokens.find(presented)


def same(given: object, expected: str) -> bool:
    """Whether a form's token is the expected one, compared in constant time."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def secure(request: Request) -> bool:
    """Served over HTTPS, here or at a proxy that says so."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip()
    return request.url.scheme == "https" or forwarded == "https"


def set_cookie(response: Response, request: Request, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
