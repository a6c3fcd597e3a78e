"""`HelixDBOS`'s double-texting methods, with their `_sync` twins: a session's stored
messages, cancelling one, and a handle on one (docs/double-texting.md). Each delegates
to `SessionQueue`."""

from __future__ import annotations

from helix_dbos.runtime.process.event_loop import sync_twin
from helix_dbos.runtime.sessions.session_queue import (
    QueuedMessageInfo,
    QueuedRunHandle,
    SessionQueue,
)
from helix_dbos.runtime.sessions.session_reads import SessionReads
from helix_dbos.store.storable import check_storable


class SessionQueueMethods:
    """A mixin of `HelixDBOS`: messages sent while their session's run was live."""

    _queue: SessionQueue
    _reads: SessionReads

    async def queued_messages(self, session_id: str) -> list[QueuedMessageInfo]:
        """The session's stored messages (double texting), oldest first: waiting ones
        with their place in line, and those already started, steered or cancelled."""
        await self._reads.get_session(session_id)
        return await self._queue.list(session_id)

    async def cancel_queued(self, session_id: str, message_id: str) -> QueuedMessageInfo:
        """Cancel a stored message before its run starts (`QueuedMessageTakenError` if it
        started or was steered into a run first)."""
        check_storable(session_id=session_id, message_id=message_id)
        return await self._queue.cancel(session_id, message_id)

    async def get_queued_handle(self, session_id: str, message_id: str) -> QueuedRunHandle:
        """A handle on a stored message, for example after a restart: `result()` waits for
        the run it starts or joins."""
        check_storable(session_id=session_id, message_id=message_id)
        await self._reads.get_session(session_id)
        return self._queue.handle(session_id, message_id)

    queued_messages_sync = sync_twin(queued_messages)
    cancel_queued_sync = sync_twin(cancel_queued)
    get_queued_handle_sync = sync_twin(get_queued_handle)
