"""The one statement of the model limits (`runtime/process/model_limits.py`): a run's mark
while it waits for a call slot of its model."""

from __future__ import annotations

from helix_dbos.store.repository import Executor, _sql

_SET_QUEUED = _sql("UPDATE helix.runs SET queued_for = :queue WHERE run_id = :rid")


async def set_queued_for(conn: Executor, run_id: str, queue_name: str | None) -> None:
    """`queue_name` while the run waits for a slot on that queue, None once it has one."""
    await conn.execute(_SET_QUEUED, {"queue": queue_name, "rid": run_id})
