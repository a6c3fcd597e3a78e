"""A run's trace record, read back from its committed rows when it ends.

A run may suspend in one process and end in another, days later: its span is built
from what the database holds (its start and end, its waits, its tokens), so it is
whole whatever happened in between. Read only when a tracer is installed.
"""

from __future__ import annotations

from helix_dbos.runtime.process.process_runtime import Runtime, logger
from helix_dbos.runtime.steps import spans
from helix_dbos.store import repository as repo


async def emit_run_span(rt: Runtime, run_id: str) -> None:
    """Emit the run's record (best effort: tracing never fails a run)."""
    if not spans.tracing():
        return
    try:
        async with rt.engine.connect() as conn:
            run = await repo.get_run(conn, run_id)
            if run is None or run.finished_at is None:
                return
            usage, _ = await repo.run_usage_total(conn, run_id)
            waits = await repo.run_waits(conn, run_id)
    except Exception as exc:
        logger.warning("helix could not read run %s for its trace: %s", run_id, exc)
        return
    spans.emit(
        spans.RunRecord(
            session_id=run.session_id,
            run_id=run.run_id,
            agent_name=run.agent_name,
            status=run.status,
            step_count=run.step_count,
            started_at=run.started_at,
            finished_at=run.finished_at,
            error=run.error,
            usage=usage,
            waits=[spans.WaitRecord(*w) for w in waits],
        )
    )
