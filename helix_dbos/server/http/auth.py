"""Fail-closed authentication: every route but the public ones runs the `authenticate` hook.

The hook gets the Starlette request (its headers, cookies and query: the body is not
read before it admits the request) and returns True, or a `Principal` naming who is
asking and which sessions it may see, or an awaitable of either. Anything else,
including an exception, is a 401. Browsers cannot put headers on an EventSource, so
`bearer_token` also accepts the token as the `helix_token` cookie (set by the server at
sign-in, HttpOnly) or, as a last resort for non-browser SSE clients, `?token=`.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from urllib.parse import unquote

from fastapi import HTTPException, Request

from helix_dbos.runtime.process.process_runtime import logger

TOKEN_COOKIE = "helix_token"


@dataclass(frozen=True)
class Principal:
    """Who a request comes from, as the `authenticate` hook says.

    `name` is recorded as who answered a tool call over HTTP (`answered_by`); None leaves
    it to the client's `answered_by` (the shared-token case). `sessions` limits what the
    principal sees: a collection of session ids, or a predicate on a session id; None
    means every session. A sub-agent's session is visible with its root session.
    """

    name: str | None = None
    sessions: Collection[str] | Callable[[str], bool] | None = None

    @property
    def sees_everything(self) -> bool:
        return self.sessions is None

    def may_see(self, session_id: str) -> bool:
        if self.sessions is None:
            return True
        if callable(self.sessions):
            return self.sessions(session_id) is True
        return session_id in self.sessions


ANYONE = Principal()
Authenticate = Callable[[Request], "bool | Principal | Awaitable[bool | Principal]"]


def check_auth_config(authenticate: Authenticate | None, allow_unauthenticated: bool) -> None:
    if authenticate is None and not allow_unauthenticated:
        raise ValueError(
            "create_app needs authenticate=<callable(request) -> bool> or, to serve without "
            "authentication (local development only), allow_unauthenticated=True"
        )
    if authenticate is not None and not callable(authenticate):
        raise TypeError("authenticate must be a callable (request) -> bool | Awaitable[bool]")


async def principal_of(authenticate: Authenticate | None, request: Request) -> Principal | None:
    """The request's principal, or None when the hook refuses it (or raises: fail closed)."""
    if authenticate is None:
        return ANYONE
    try:
        verdict = authenticate(request)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:  # a broken hook denies: fail closed
        logger.warning("helix server: authenticate hook raised %r; denying", exc)
        return None
    if verdict is True:
        return ANYONE
    if isinstance(verdict, Principal):
        return verdict
    return None


def current_principal(request: Request) -> Principal:
    """The principal the edge guard admitted (a route dependency)."""
    principal = getattr(request.state, "helix_principal", None)
    if not isinstance(principal, Principal):  # the guard always sets it: fail closed
        raise HTTPException(status_code=401, detail="Not authenticated")
    return principal


def check_token(token: str) -> None:
    """A token must work in every carrier (header, cookie, query): printable ASCII, no
    spaces. Blank or whitespace tokens are refused, so `bearer_token(" ")` cannot open
    the server to anyone sending a blank header."""
    if not token or not token.strip():
        raise ValueError("bearer_token needs a non-empty token (not blank or whitespace)")
    bad = sorted({c for c in token if not ("\x21" <= c <= "\x7e")})
    if bad:
        shown = ", ".join(f"U+{ord(c):04X}" for c in bad)
        raise ValueError(
            f"the server token must be printable ASCII without spaces (it holds {shown}): "
            "HTTP headers carry no other characters reliably"
        )


def bearer_token(token: str) -> Authenticate:
    """A hook accepting `Authorization: Bearer <token>`, the `helix_token` cookie or `?token=`.

    Every holder of the token gets full access (every session) and names itself in
    `answered_by`; return a `Principal` from your own hook for more.
    """
    check_token(token)
    expected = token.encode()

    def authenticate(request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        candidates = [
            value.strip() if scheme.lower() == "bearer" else "",
            # The sign-in route stores the token URL-encoded (cookie-safe).
            unquote(request.cookies.get(TOKEN_COOKIE, "")),
            request.query_params.get("token", ""),
        ]
        return any(c and hmac.compare_digest(c.encode(), expected) for c in candidates)

    return authenticate
