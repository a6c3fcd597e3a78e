"""The inbox's sign-in cookie: set by the server, never readable by a page's script.

`HttpOnly` keeps it from JavaScript (the inbox's and any other page's on the same host),
`SameSite=Strict` from other sites' requests, `Secure` off plain HTTP when the request
came over https, and `Max-Age` makes it expire.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request

from helix_dbos.server.http.auth import TOKEN_COOKIE


def token_cookie(token: str, request: Request, max_age: int) -> tuple[bytes, bytes]:
    """A `set-cookie` header holding `token` (URL-encoded: any printable token fits)."""
    return _cookie(quote(token, safe=""), request, max_age)


def cleared_cookie(request: Request) -> tuple[bytes, bytes]:
    return _cookie("", request, 0)


def _cookie(value: str, request: Request, max_age: int) -> tuple[bytes, bytes]:
    parts = [f"{TOKEN_COOKIE}={value}", "HttpOnly", "SameSite=Strict", "Path=/"]
    parts.append(f"Max-Age={max_age}")
    if request.url.scheme == "https":
        parts.append("Secure")
    return b"set-cookie", "; ".join(parts).encode("latin-1")
