"""Server-Sent Events over `helix.stream`.

Each chunk is one event: `id: <seq>` (so a reconnecting EventSource sends it back
as Last-Event-ID), `event: <type>`, `data: <chunk JSON>`. Comments keep idle
connections alive through proxies. When the stream ends (the run reached a
terminal chunk, or the session has nothing live), an `end` event tells clients
not to reconnect. A stream open longer than its lifetime closes without `end`, so
an EventSource reconnects with Last-Event-ID and misses nothing; so does one whose
database went away (it resumes after its last event once the database is back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from helix_dbos.streaming.chunks import StreamChunk

if TYPE_CHECKING:
    from helix_dbos.server.sse_fanout import Subscription

RETRY_MS = 3000


def format_chunk(chunk: StreamChunk) -> str:
    data = json.dumps(chunk.model_dump(mode="json"), separators=(",", ":"))
    return f"id: {chunk.seq}\nevent: {chunk.type}\ndata: {data}\n\n"


def format_event(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def parse_last_event_id(value: str | None) -> int | None:
    """The seq a reconnecting client saw last; None when absent, ValueError when malformed."""
    if value is None or value.strip() == "":
        return None
    seq = int(value.strip())
    if seq < 0:
        raise ValueError("negative")
    return seq


async def event_stream(
    subscription: AbstractAsyncContextManager[Subscription],
    *,
    keepalive_seconds: float,
    max_seconds: float = float("inf"),
) -> AsyncIterator[str]:
    """SSE text for a stream's subscription (`sse_fanout`), with keep-alive comments while
    no chunk arrives; everything that arrived since the last write goes as one write."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    async with subscription as sub:
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        while True:
            left = deadline - loop.time()
            if left <= 0:
                yield ": stream lifetime reached; reconnect with Last-Event-ID\n\n"
                return
            if not sub.wake.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sub.wake.wait(), min(keepalive_seconds, left))
                if not sub.wake.is_set():
                    if deadline - loop.time() > 0:
                        yield ": keep-alive\n\n"
                    continue
            text = sub.take()
            if text:
                yield text
            if sub.outcome is None:
                continue
            if sub.outcome == "resume":
                return  # no `end`: the client reconnects with Last-Event-ID and resumes
            if sub.outcome != "end":
                yield sub.outcome  # the error event, then `end`
            yield format_event("end", {})
            return
