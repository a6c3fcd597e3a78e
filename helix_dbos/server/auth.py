"""Fail-closed authentication: every route runs the app's `authenticate` hook.

The hook gets the Starlette request and returns True (or an awaitable of True)
to let it through; anything else, including an exception, is a 401. Browsers
cannot put headers on an EventSource, so `bearer_token` also accepts the token
as a `helix_token` cookie or a `token` query parameter.
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from fastapi import HTTPException, Request

from helix_dbos.runtime.context import logger

Authenticate = Callable[[Request], "bool | Awaitable[bool]"]
TOKEN_COOKIE = "helix_token"


def check_auth_config(authenticate: Authenticate | None, allow_unauthenticated: bool) -> None:
    if authenticate is None and not allow_unauthenticated:
        raise ValueError(
            "create_app needs authenticate=<callable(request) -> bool> or, to serve without "
            "authentication (local development only), allow_unauthenticated=True"
        )
    if authenticate is not None and not callable(authenticate):
        raise TypeError("authenticate must be a callable (request) -> bool | Awaitable[bool]")


def auth_dependency(authenticate: Authenticate | None) -> Callable[[Request], Awaitable[None]]:
    async def require_auth(request: Request) -> None:
        if authenticate is None:
            return
        try:
            verdict = authenticate(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:  # a broken hook denies: fail closed
            logger.warning("helix server: authenticate hook raised %r; denying", exc)
            verdict = False
        if verdict is not True:
            raise HTTPException(status_code=401, detail="Not authenticated")

    return require_auth


def bearer_token(token: str) -> Authenticate:
    """A hook accepting `Authorization: Bearer <token>`, a `helix_token` cookie or `?token=`."""
    if not token:
        raise ValueError("bearer_token needs a non-empty token")
    expected = token.encode()

    def authenticate(request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        candidates = [
            value.strip() if scheme.lower() == "bearer" else "",
            # The inbox's sign-in form stores the token URL-encoded (cookie-safe).
            unquote(request.cookies.get(TOKEN_COOKIE, "")),
            request.query_params.get("token", ""),
        ]
        return any(c and hmac.compare_digest(c.encode(), expected) for c in candidates)

    return authenticate
