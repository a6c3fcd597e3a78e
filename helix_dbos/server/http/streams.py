"""Caps on open SSE streams, per server and per session: each stream holds a connection
and a database listener, so past the cap a new one is refused with a 503 (and
`Retry-After`) instead of exhausting the server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from fastapi import HTTPException
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

RETRY_AFTER_SECONDS = 5


class StreamSlots:
    def __init__(self, max_streams: int = 256, max_per_session: int = 16) -> None:
        if max_streams < 1 or max_per_session < 1:
            raise ValueError("max_streams and max_streams_per_session must be positive")
        self.max_streams = max_streams
        self.max_per_session = max_per_session
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return sum(self._open.values())

    def acquire(self, session_id: str) -> Callable[[], None]:
        """A slot for a stream of `session_id` (its release, idempotent), or a 503."""
        with self._lock:
            if sum(self._open.values()) >= self.max_streams:
                raise self._busy(f"the server has {self.max_streams} open streams, its limit")
            if self._open[session_id] >= self.max_per_session:
                raise self._busy(
                    f"session '{session_id}' has {self.max_per_session} open streams, its limit"
                )
            self._open[session_id] += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self._open[session_id] -= 1
                if self._open[session_id] <= 0:
                    del self._open[session_id]

        return release

    @staticmethod
    def _busy(why: str) -> HTTPException:
        return HTTPException(
            status_code=503,
            detail=f"Too many streams: {why}; close one or retry later",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


class SlotStreamingResponse(StreamingResponse):
    """A streaming response that gives its slot back however it ends (finished, client
    gone, cancelled before the first byte)."""

    def __init__(self, *args: object, release: Callable[[], None], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
