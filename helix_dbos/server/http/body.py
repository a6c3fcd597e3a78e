"""Reading a request body under limits: size, time, and JSON nesting depth.

The edge guard reads the whole body (FastAPI would buffer it anyway) after the request
is authenticated, so an anonymous client cannot make the server hold its bytes, a slow
client cannot hold a connection open forever, and a JSON document nested deeper than
the limit is refused before anything parses it recursively.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from starlette.types import Message, Receive, Scope

# A JSON string (skipped whole) or a bracket: enough to count nesting without parsing.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_OPENERS = frozenset(b"[{")


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int
    timeout_seconds: float
    max_json_depth: int


class BodyRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def json_depth_exceeds(data: bytes, limit: int) -> bool:
    """True when arrays and objects in `data` nest deeper than `limit` (strings skipped)."""
    depth = 0
    for match in _JSON_TOKEN.finditer(data):
        token = match.group()
        if len(token) != 1:
            continue
        if token[0] in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return b"json" in value.lower()
    return False


async def read_body(scope: Scope, receive: Receive, limits: BodyLimits) -> Message:
    """The whole body as one `http.request` message (or the client's disconnect)."""
    length = declared_length(scope)
    if length is not None and length > limits.max_bytes:
        raise BodyRefused(413, f"Request body is {length} bytes; the limit is {limits.max_bytes}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.timeout_seconds
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise BodyRefused(
                408,
                f"The request body did not arrive within {limits.timeout_seconds:g} seconds",
            ) from None
        if message["type"] != "http.request":
            return message  # the client went away: the app sees the disconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limits.max_bytes:
            raise BodyRefused(
                413,
                f"Request body is more than {limits.max_bytes} bytes; the limit is "
                f"{limits.max_bytes}",
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    if body and is_json(scope) and json_depth_exceeds(body, limits.max_json_depth):
        raise BodyRefused(
            422,
            f"The JSON body nests deeper than {limits.max_json_depth} levels; the limit "
            f"is {limits.max_json_depth}",
        )
    return {"type": "http.request", "body": body, "more_body": False}


def replaying(first: Message, receive: Receive) -> Receive:
    """A receive that hands out `first`, then whatever the client sends next."""
    pending: list[Message] = [first]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
