"""The edge guard: what every request meets before any route reads it.

In order: the Host header (DNS rebinding) and the Origin (cross-site requests) when the
server runs without authentication; then authentication, before a byte of the body is
read; then the body, under its size, time and JSON-depth limits. Every response gets the
security headers (a strict Content-Security-Policy, no framing, no sniffing, no
Referer). A browser that arrives with `?token=` is sent on without it, the token moved
into the HttpOnly cookie, so it leaves the address bar, the history and later logs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from helix_dbos.server.http.auth import Authenticate, principal_of
from helix_dbos.server.http.body import BodyLimits, BodyRefused, read_body, replaying
from helix_dbos.server.http.cookies import token_cookie
from helix_dbos.server.pages import page

PUBLIC_PATHS = frozenset({"/sign-in", "/sign-out", "/docs", "/redoc", "/openapi.json"})
PUBLIC_PREFIXES = ("/assets/",)

# No inline script anywhere: every script and style is a file of this origin.
STRICT_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# The API docs (Swagger UI, ReDoc) set inline styles and ReDoc searches in a worker.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; font-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class EdgePolicy:
    authenticate: Authenticate | None
    body: BodyLimits
    allowed_hosts: tuple[str, ...] | None  # None: any Host
    same_origin_only: bool
    cookie_max_age: int


def route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def host_name(host: str) -> str:
    """`example.com:8000` -> `example.com`; `[::1]:80` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    name = host_name(host)
    return any(a == "*" or host_name(a) == name for a in allowed)


def cross_origin(request: Request) -> bool:
    """A browser request sent by another site (another origin's page, form or script).

    Sec-Fetch-Site decides where the browser sends it (every current browser does); the
    Origin otherwise. With `Referrer-Policy: no-referrer` a browser sends `Origin: null`
    on a same-origin form post, so Origin alone cannot clear such a request.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False  # not a browser's cross-site request (curl, an SDK)
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin.lower() != own.lower()


def security_headers(path: str) -> list[tuple[bytes, bytes]]:
    csp = DOCS_CSP if path in ("/docs", "/redoc") else STRICT_CSP
    return [
        (b"content-security-policy", csp.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]


def with_security_headers(send: Send, path: str) -> Send:
    extra = security_headers(path)

    async def secured(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            headers = list(message.get("headers", []))
            headers += [(n, v) for n, v in extra if n not in names]
            message = {**message, "headers": headers}
        await send(message)

    return secured


async def respond(
    send: Send,
    status: int,
    body: dict[str, Any] | str,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    if isinstance(body, str):
        payload, kind = body.encode(), b"text/html; charset=utf-8"
    else:
        payload, kind = json.dumps(body).encode(), b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def wants_inbox_page(request: Request, path: str) -> bool:
    return (
        request.method == "GET"
        and path == "/inbox"
        and "text/html" in request.headers.get("accept", "")
    )


def without_token(request: Request) -> str:
    """The inbox's address and query, minus `token` (relative, so a mount prefix stays)."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return "inbox" + (f"?{urlencode(query)}" if query else "")


class EdgeGuard:
    def __init__(self, app: ASGIApp, policy: EdgePolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        send = with_security_headers(send, path)
        request = Request(scope)
        policy = self.policy
        if policy.allowed_hosts is not None and not host_allowed(
            request.headers.get("host", ""), policy.allowed_hosts
        ):
            detail = f"Host '{request.headers.get('host', '')}' is not served here"
            await respond(send, 421, {"detail": detail})
            return
        if (policy.same_origin_only or path in ("/sign-in", "/sign-out")) and cross_origin(request):
            await respond(send, 403, {"detail": "Cross-origin requests are refused"})
            return
        if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
            principal = await principal_of(policy.authenticate, request)
            if principal is None:
                if wants_inbox_page(request, path):
                    await respond(send, 401, page("sign_in.html"))
                else:
                    await respond(send, 401, {"detail": "Not authenticated"})
                return
            token = request.query_params.get("token")
            if token and wants_inbox_page(request, path):
                cookie = token_cookie(token, request, policy.cookie_max_age)
                location = without_token(request).encode()
                await respond(send, 303, "", [(b"location", location), cookie])
                return
            scope.setdefault("state", {})["helix_principal"] = principal
        try:
            first = await read_body(scope, receive, policy.body)
        except BodyRefused as refused:
            await respond(send, refused.status, {"detail": refused.detail})
            return
        await self.app(scope, replaying(first, receive), send)
