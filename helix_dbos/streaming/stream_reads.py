"""Readers of one session share their chunk queries.

When a notification wakes many readers of a session, most ask for the same
rows (`seq > last`). The first asker runs the query; the others await its
result, so 100 readers cost one query per position, not 100.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from helix_dbos.streaming.chunks import StreamChunk

Key = tuple[str, int, "str | None"]
Loader = Callable[[str, int, "str | None"], Awaitable[list[StreamChunk]]]


class SharedChunkReads:
    def __init__(self, loader: Loader) -> None:
        self._loader = loader
        self._inflight: dict[Key, asyncio.Future[list[StreamChunk]]] = {}

    async def load(self, session_id: str, after_seq: int, run_id: str | None) -> list[StreamChunk]:
        key = (session_id, after_seq, run_id)
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[list[StreamChunk]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            chunks = await self._loader(session_id, after_seq, run_id)
            future.set_result(chunks)
            return chunks
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a reader-less failure logs nothing
            raise
        finally:
            self._inflight.pop(key, None)
