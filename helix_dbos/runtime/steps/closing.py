"""Ending a live run from outside its workflow (abort, a stale or orphaned run).

Used by `HelixDBOS` and by the CLI's `RemoteControl`, which runs no agents.
"""

from __future__ import annotations

from helix_dbos.orchestration.messages import pair_dangling_tool_calls
from helix_dbos.runtime.steps.step_types import ChunkRecord
from helix_dbos.store import repository as repo


async def close_run(
    session: repo.SQLConnection, session_id: str, run_id: str, error: str, status: str = "failed"
) -> bool:
    """End a live run from outside its workflow, pairing every dangling tool call."""
    if not await repo.update_live_run(
        session, run_id, status=status, error=error, waiting_for=None, finished=True
    ):
        return False
    await repo.abort_pending_tool_calls(session, run_id, error)
    history = [m for _, m in await repo.load_messages(session, session_id)]
    await repo.append_messages(
        session, session_id, run_id, pair_dangling_tool_calls(history, error)
    )
    await repo.update_session(session, session_id, status=status, error=error)
    await repo.notify_run_end(session, run_id)
    run = await repo.get_run(session, run_id)  # its chunk names the agent and last step
    await repo.insert_chunks(
        session,
        session_id,
        run_id,
        run.agent_name if run else "",
        run.step_count if run else 0,
        [ChunkRecord(f"{run_id}:{status}", f"run_{status}", {"error": error})],
    )
    return True
