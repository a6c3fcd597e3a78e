"""A run's last write: its last step's rows and its final status, keyed and guarded by
the run's status, so one replayed after a crash changes nothing."""

from __future__ import annotations

import asyncio
import logging

from dbos import DBOS, StepOptions

from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.hooks import Hook, HookContext
from helix_dbos.log_events import RUN_ENDED, log_event
from helix_dbos.orchestration.types import Message
from helix_dbos.runtime.loop.llm_hooks import announce
from helix_dbos.runtime.process.process_runtime import (
    current_runtime,
    is_transient_db_error,
    logger,
)
from helix_dbos.runtime.steps import spans
from helix_dbos.runtime.steps.commit import StepCommit, commit_final
from helix_dbos.runtime.steps.run_trace import emit_run_span
from helix_dbos.runtime.steps.step_types import FinalStatus
from helix_dbos.store.run_bounds import EndedRun

FINAL_WRITE_ATTEMPTS = 6
FINAL_STEP_OPTIONS: StepOptions = {
    "name": "helix.commit_final",
    "retries_allowed": True,
    "max_attempts": FINAL_WRITE_ATTEMPTS,
    "interval_seconds": 0.5,
    "backoff_rate": 2.0,
    "should_retry": is_transient_db_error,
}


def end_hook(agent: Agent, status: FinalStatus) -> Hook | None:
    """The hook a run ending with `status` fires: on completion or on failure."""
    hooks = agent.hooks
    return hooks.on_agent_complete if status == "completed" else hooks.on_agent_failed


def ends_quietly(agent: Agent, status: FinalStatus, said: list[Message]) -> bool:
    """Nothing runs after the run's final write (no end hook, no span, no on_message for
    what workflow code said last), so the write's commit itself wakes the callers."""
    hears = bool(said) and agent.hooks.on_message is not None
    return end_hook(agent, status) is None and not hears and not spans.tracing()


async def write_final(commit: StepCommit, unwritten: StepCommit | None, notify: bool) -> EndedRun:
    """The run's last write from workflow code, without a DBOS step of its own.

    Like the write-ahead of every other step, it needs no checkpoint: its rows are keyed
    by `runs.committed_step` and its status update only lands on a live run, so a replay
    after a crash (or a retry after a lost connection: `final_step` waits a database
    outage out) writes nothing twice. It commits durably (see `commit_final`). That saves
    a step's two system-database round trips on every run.
    """
    return await final_step(commit, unwritten, notify)


async def settled_final_write(write: asyncio.Future[EndedRun], commit: StepCommit) -> EndedRun:
    """An early final write's outcome; if it failed for good, the write again (keyed)."""
    try:
        return await write
    except Exception as exc:
        logger.warning("helix's early final write of run %s failed: %s", commit.run_id, exc)
        return await write_final(commit, None, True)


async def final_write_step(
    commit: StepCommit, unwritten: StepCommit | None, notify: bool
) -> EndedRun:
    """The last write as a DBOS step, for a run whose user hooks fire in it (decided from
    checkpointed data only, so a replay takes the same steps)."""
    return await DBOS.run_step_async(FINAL_STEP_OPTIONS, final_step, commit, unwritten, notify)


async def final_step(
    commit: StepCommit, unwritten: StepCommit | None, notify: bool = False
) -> EndedRun:
    """The run's last write (`helix.commit_final`), whose writes are keyed or guarded by
    the run's status, so one replayed after a crash changes nothing."""
    rt = current_runtime()
    wrote = await rt.on_connection(
        "the final write", lambda conn: commit_final(conn, commit, unwritten, notify=notify)
    )
    ended = wrote.ended
    if ended:  # on_message for what workflow code said last (once: a replay ends nothing)
        said = (unwritten.unannounced if unwritten is not None else []) + commit.unannounced
        context = HookContext(commit.session_id, commit.run_id, commit.agent_name, commit.step)
        await announce(rt.agent(commit.agent_name), context, said)
        await emit_run_span(rt, commit.run_id)  # the `invoke_agent` span, if traced
    if ended and commit.status is not None:
        log_event(
            RUN_ENDED[commit.status],
            logging.INFO if commit.status == "completed" else logging.WARNING,
            commit.error,
            run_id=commit.run_id,
            session_id=commit.session_id,
            agent_name=commit.agent_name,
            step=commit.step,
            status=commit.status,
            error=commit.error,
        )
    return wrote
