"""/login and /logout (contract section 20): a form with a field named `token`, its other fields
hidden inputs sent back as they are; a good token sets the session cookie and redirects to `/`
(or to the page the visitor was sent from)."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from worker.ui.access import COOKIE, IDLE_S, LOGIN_COOKIE, same, set_cookie
from worker.ui.server import Browser, Page, route

LOGIN_S = 600


def routes(browser: Browser) -> list[Route]:
    async def form(
        request: Request, status: int = 200, problem: str = "", target: str | None = None
    ) -> Response:
        if browser.sessions.open_door:
            return RedirectResponse("/", status_code=303)
        check = secrets.token_urlsafe(32)
        response = browser.render(
            request, "login.html", None, status, check=check, problem=problem,
            next=local(target or request.query_params.get("next", "/")),
        )  # fmt: skip
        set_cookie(response, request, LOGIN_COOKIE, check, LOGIN_S)
        return response

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return await form(request)
        if browser.sessions.open_door:
            return RedirectResponse("/", status_code=303)
        fields = await request.form()
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not same(fields.get("csrf"), expected):
            return browser.refuse(request, None, 403, "This sign-in form has expired or did not "
                                  "come from this site: open /login again.")  # fmt: skip
        presented, target = fields.get("token"), fields.get("next")
        target = target if isinstance(target, str) else "/"
        token = browser.sessions.sign_in(presented if isinstance(presented, str) else "")
        if token is None:
            return await form(request, 401, "That token is not one this browser accepts.", target)
        browser.sessions.close(request)
        key, _ = browser.sessions.open(token)
        response = RedirectResponse(local(target), 303)
        set_cookie(response, request, COOKIE, key, IDLE_S)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    async def logout(page: Page) -> Response:
        browser.sessions.close(page.request)
        response = RedirectResponse("/login" if not browser.sessions.open_door else "/", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    return [
        Route("/login", login, methods=["GET", "POST"]),
        route("/logout", browser, logout, post=True),
    ]


def local(target: str) -> str:
    """A path on this site to go to after signing in; anything else (another site, `//host`)
    is `/`."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
