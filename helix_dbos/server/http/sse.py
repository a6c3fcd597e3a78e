"""Server-Sent Events over `helix.stream`.

Each chunk is one event: `id: <seq>` (so a reconnecting EventSource sends it back
as Last-Event-ID), `event: <type>`, `data: <chunk JSON>`. Comments keep idle
connections alive through proxies. When the stream ends (the run reached a
terminal chunk, or the session has nothing live), an `end` event tells clients
not to reconnect. A stream open longer than its lifetime closes without `end`, so
an EventSource reconnects with Last-Event-ID and misses nothing; so does one whose
database went away (it resumes after its last event once the database is back).
helix's own `/sse` writes a shared subscription (`sse_fanout.event_stream`); a protocol
mapping writes its own items through `mapped_event_stream` and an `SSEWire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from helix_dbos.runtime.process.outage import is_transient_db_error
from helix_dbos.runtime.process.process_runtime import logger
from helix_dbos.streaming.chunks import StreamChunk

RETRY_MS = 3000
_END = object()
_RESUME = object()


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


@dataclass(frozen=True)
class SSEWire:
    """How items, a failure and the end are written: helix's own events by default; a
    protocol mapping (protocols/) passes its own and keeps the keep-alives and lifetime."""

    item: Callable[[Any], str] = format_chunk
    error: Callable[[str], str] = lambda message: format_event("error", {"error": message})
    end: str = format_event("end", {})


HELIX_WIRE = SSEWire()


async def mapped_event_stream(
    chunks: AsyncIterator[Any],
    *,
    keepalive_seconds: float,
    max_seconds: float = float("inf"),
    wire: SSEWire = HELIX_WIRE,
) -> AsyncIterator[str]:
    """SSE text for a protocol mapping's own items (protocols/), written by `wire`, with
    the keep-alives, lifetime and database-loss behaviour of `event_stream`.

    The item iterator runs in its own task feeding a queue, so waiting for the next item
    can time out into a keep-alive without cancelling the reader.
    """
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)

    async def pump() -> None:
        try:
            async for chunk in chunks:
                await queue.put(wire.item(chunk))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_transient_db_error(exc):  # the database went away: the client reconnects
                logger.warning("helix SSE stream lost the database, client to resume: %s", exc)
                await queue.put(_RESUME)
                return
            logger.warning("helix SSE stream failed: %s", exc)  # tell the client, then end
            await queue.put(wire.error(str(exc)))
        await queue.put(_END)

    task = asyncio.create_task(pump())
    getter: asyncio.Future[Any] | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    try:
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        while True:
            if getter is None:
                getter = asyncio.ensure_future(queue.get())
            left = deadline - loop.time()
            if left <= 0:
                yield ": stream lifetime reached; reconnect with Last-Event-ID\n\n"
                return
            done, _ = await asyncio.wait({getter}, timeout=min(keepalive_seconds, left))
            if not done:
                if deadline - loop.time() > 0:
                    yield ": keep-alive\n\n"
                continue
            item, getter = getter.result(), None
            if item is _RESUME:
                return  # no `end`: the client reconnects with Last-Event-ID and resumes
            if item is _END:
                break
            yield item
        yield wire.end
    finally:
        for pending in (getter, task):
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
