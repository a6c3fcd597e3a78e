"""Many SSE readers of one stream share one reader of the database.

Per process, a stream (a session, or one run of it) has at most one *feed*: a task that
follows `helix.stream` and encodes each chunk once into its SSE text. Each connection
subscribes to a feed and takes, per wake-up, everything that arrived since it last
wrote, as one write. 100 readers of a session then cost one database reader, one JSON
encoding per chunk and one write per burst per reader, instead of one reader, one
encoding and one write per chunk per reader.

A feed keeps its recent chunks, so a reader that starts (or resumes from a
Last-Event-ID) at or after the feed's start joins it; one further behind gets a feed of
its own. A reader too slow to keep up (its backlog past `MAX_BACKLOG`) is closed without
`end`, so the client reconnects with Last-Event-ID and misses nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from helix_dbos.runtime.process.outage import is_transient_db_error
from helix_dbos.runtime.process.process_runtime import logger
from helix_dbos.server.http.sse import RETRY_MS, format_chunk, format_event
from helix_dbos.streaming.chunks import StreamChunk

MAX_BACKLOG = 20_000  # chunks waiting for one reader before it is told to reconnect
KEEP = 5_000  # recent chunks a feed keeps for readers that join late

Follow = Callable[[str, int, "str | None"], AsyncIterator[StreamChunk]]


@dataclass(eq=False)  # hashed by identity: a feed keeps a set of them
class Subscription:
    """One connection's place in a feed: the seq it has, the texts not yet written, and
    how the feed ended (`None` while it goes on; "end", "resume", or an error event)."""

    after: int
    pending: list[str] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: str | None = None

    def take(self) -> str:
        text = "".join(self.pending)
        self.pending.clear()
        self.wake.clear()
        return text

    def finish(self, outcome: str) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self.wake.set()


class Feed:
    """One follower of `(session_id, run_id)` from `after_seq`, and its subscribers."""

    def __init__(self, follow: Follow, key: tuple[str, str | None], after_seq: int) -> None:
        self.key = key
        self.floor = after_seq  # every chunk after this seq is in `recent` or was trimmed
        self.seqs: list[int] = []
        self.texts: list[str] = []
        self.subscribers: set[Subscription] = set()
        self.done = False
        self.on_done: Callable[[Feed], None] = lambda feed: None
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._run(follow, after_seq))

    def covers(self, after_seq: int) -> bool:
        return not self.done and after_seq >= self.floor

    def subscribe(self, after_seq: int) -> Subscription:
        sub = Subscription(after_seq)
        start = bisect.bisect_right(self.seqs, after_seq)
        if start < len(self.texts):
            sub.pending.extend(self.texts[start:])
            sub.wake.set()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers and not self.done:
            self._close()
            self._task.cancel()

    def _close(self) -> None:
        self.done = True
        self.on_done(self)

    def _publish(self, chunk: StreamChunk) -> None:
        text = format_chunk(chunk)
        self.seqs.append(chunk.seq)
        self.texts.append(text)
        if len(self.texts) > KEEP * 2:  # trim in halves: amortized O(1) per chunk
            self.floor = self.seqs[-KEEP - 1]
            del self.seqs[:-KEEP], self.texts[:-KEEP]
        for sub in list(self.subscribers):
            if chunk.seq <= sub.after:  # it resumed past where this feed has read so far
                continue
            sub.pending.append(text)
            sub.wake.set()
            if len(sub.pending) > MAX_BACKLOG:
                self.subscribers.discard(sub)
                sub.finish("resume")

    async def _run(self, follow: Follow, after_seq: int) -> None:
        outcome = "end"
        try:
            async for chunk in follow(self.key[0], after_seq, self.key[1]):
                self._publish(chunk)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_transient_db_error(exc):  # the database went away: clients resume
                logger.warning("helix SSE stream lost the database, client to resume: %s", exc)
                outcome = "resume"
            else:
                logger.warning("helix SSE stream failed: %s", exc)
                outcome = format_event("error", {"error": str(exc)})
        finally:
            if not self.done:
                self._close()
            for sub in self.subscribers:
                sub.finish(outcome)


class SessionFanout:
    """The feeds of one server process (its event loop)."""

    def __init__(self, follow: Follow) -> None:
        self._follow = follow
        self._feeds: dict[tuple[str, str | None], Feed] = {}

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    @contextlib.asynccontextmanager
    async def subscription(
        self, session_id: str, run_id: str | None, after_seq: int
    ) -> AsyncIterator[Subscription]:
        key, loop = (session_id, run_id), asyncio.get_running_loop()
        shared = self._feeds.get(key)
        if shared is not None and shared.loop is not loop:
            shared = None  # a loop that served earlier requests (a test client's) and is gone
        feed = shared
        if feed is None or not feed.covers(after_seq):
            feed = Feed(self._follow, key, after_seq)
            if shared is None:  # else: a reader behind the shared feed gets one of its own
                self._feeds[key] = feed
                feed.on_done = self._forget
        sub = feed.subscribe(after_seq)
        try:
            yield sub
        finally:
            feed.unsubscribe(sub)

    def _forget(self, feed: Feed) -> None:
        if self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]


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
