"""Remote sub-agents: a parent's call run by another helix server, durably (issue 32).

Seed 002: remote sub-agents have "stream proxying, SubSessionRef tracking with remote
metadata, deterministic session IDs, crash recovery via transport.getStatus(), and
interrupt propagation via transport.interrupt()". A call of a `RemoteSubAgentTool`
runs in the parent's workflow code as two DBOS steps (and one for its hooks), the calls
of one model step at once, at step ids reserved in call order:

1. `helix.remote_start:<agent>` records the call's row in `helix.remote_children` and
   starts the child with `POST /start`, in a session and under an idempotency key both
   derived from the parent's session and the call id: a step run again after a crash (its
   start done, its checkpoint not) gets the run the first attempt started;
2. `helix.remote_wait:<agent>` follows the child's stream, copying each chunk into the
   parent's stream (keyed by the remote seq, from the row's `last_seq` on), while it
   forwards the parent's interrupt or abort to the child; once the stream ends it asks
   the server for the child's status and usage, closes the row, and returns the child's
   output or error with its tokens (the parent's `subagent` usage row, as for a local
   child). A parent recovered after a crash replays step 1 from its checkpoint and runs
   step 2 again: it asks for the status and waits; it never starts the child twice.

An unreachable server, a dropped stream that does not come back, a 5xx or a 429 raise,
so DBOS retries the step with backoff (the tool's `max_attempts`); once they are spent,
or for any other 4xx (an unknown agent, a refused token), the call gets a tool error.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dbos import DBOS, StepOptions, StepReservation

from helix_dbos.client.errors import (
    APIConnectionError,
    APIStatusError,
    ConflictError,
    HelixClientError,
    InternalServerError,
    RateLimitError,
    StreamError,
)
from helix_dbos.definitions.agent import Agent
from helix_dbos.definitions.remote_subagent import RemoteSubAgentTool
from helix_dbos.errors import ToolArgumentsError
from helix_dbos.orchestration.messages import to_json_text
from helix_dbos.orchestration.types import LLMUsage, ToolCall
from helix_dbos.runtime.dbos.dbos_internals import WorkflowNotOwnedError, execution_owner
from helix_dbos.runtime.process.process_runtime import (
    Runtime,
    current_runtime,
    is_transient_db_error,
)
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.runtime.steps.live_chunks import tool_start_chunk, write_chunks
from helix_dbos.runtime.steps.results import TERMINAL_STATUSES
from helix_dbos.runtime.steps.step_types import ChunkRecord, ToolOutcome
from helix_dbos.runtime.steps.tool_step import outside_result_hooks
from helix_dbos.runtime.waits.hitl import interrupted_message
from helix_dbos.store import repository as repo
from helix_dbos.store.driver import DriverConnection
from helix_dbos.store.features import remote_children as store
from helix_dbos.store.features.remote_children import ProxiedChunk, RemoteRef
from helix_dbos.streaming.chunks import StreamChunk

if TYPE_CHECKING:
    from helix_dbos.client import AsyncHelixClient

_NAMESPACE = uuid.UUID("1f0c7d3e-9a4b-4f8e-b2a6-7c5d2e9f3b18")
# How often a waiting call looks for its parent's interrupt or abort.
CONTROL_POLL_SECONDS = 0.5
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class RemoteUnavailable(Exception):
    """The remote server cannot be followed right now: the step is retried."""


@dataclass(frozen=True)
class RemoteStart:
    """`helix.remote_start`'s checkpointed output: the child's run, or why there is none."""

    run_id: str | None = None
    error: str | None = None
    interrupted: bool = False


def remote_session_id(parent_session_id: str, call_id: str) -> str:
    """The child's session on the remote server: the same for a replayed call."""
    return f"ses_{uuid.uuid5(_NAMESPACE, f'session:{parent_session_id}:{call_id}').hex}"


def remote_start_key(parent_session_id: str, call_id: str) -> str:
    return f"helix-remote-{uuid.uuid5(_NAMESPACE, f'start:{parent_session_id}:{call_id}').hex}"


def remote_ref(
    commit: StepCommit,
    call: ToolCall,
    tool: RemoteSubAgentTool,
    text: str,
    workflow_id: str,
    tenant: str | None = None,
) -> RemoteRef:
    return RemoteRef(
        parent_session_id=commit.session_id,
        parent_run_id=commit.run_id,
        parent_workflow_id=workflow_id,
        parent_agent_name=commit.agent_name,
        step=commit.step,
        tool_call_id=call.id,
        tool_name=call.name,
        url=tool.url,
        agent_name=tool.agent_name,
        remote_session_id=remote_session_id(commit.session_id, call.id),
        idempotency_key=remote_start_key(commit.session_id, call.id),
        input=text,
        tenant=tenant,
    )


def _transient(exc: BaseException) -> bool:
    kinds = (APIConnectionError, InternalServerError, RateLimitError, RemoteUnavailable)
    return isinstance(exc, kinds) or is_transient_db_error(exc) or _a2a_transient(exc)


# The A2A transport (`a2a_wire/remote.py`: `start_a2a`, `follow_a2a`, `cancel_a2a_task`,
# `transient`), handed in by the facade, which sits above both; loaded on first use, as
# `a2a-sdk` is an optional extra.
_a2a_transport: Callable[[], Any] | None = None


def use_a2a_transport(load: Callable[[], Any]) -> None:
    """Set how an A2A child is spoken to: `load()` returns the transport module."""
    global _a2a_transport
    _a2a_transport = load


def _a2a() -> Any:
    if _a2a_transport is None:
        raise RuntimeError("no A2A transport: HelixDBOS hands it to the runtime")
    return _a2a_transport()


def _a2a_transient(exc: BaseException) -> bool:
    if type(exc).__module__.split(".")[0] != "a2a" and type(exc).__name__ != "A2AUnavailable":
        return False
    return bool(_a2a().transient(exc))


async def start_a2a(ref: RemoteRef, shown: ChunkRecord) -> RemoteStart:
    """`helix.remote_start` for an A2A child (a2a_wire/remote.py; needs `a2a-sdk`)."""
    run_id, error, interrupted = await _a2a().start_a2a(ref, shown)
    return RemoteStart(run_id=run_id, error=error, interrupted=interrupted)


async def follow_a2a(ref: RemoteRef, task_id: str) -> ToolOutcome:
    outcome: ToolOutcome = await _a2a().follow_a2a(ref, task_id)
    return outcome


def step_options(kind: str, tool: RemoteSubAgentTool) -> StepOptions:
    return {
        "name": f"helix.remote_{kind}:{tool.agent_name}",
        "retries_allowed": True,
        "max_attempts": tool.max_attempts,
        "interval_seconds": tool.retry_interval_seconds,
        "backoff_rate": 2.0,
        "should_retry": _transient,
    }


async def run_remote_children(
    agent: Agent, commit: StepCommit, calls: list[ToolCall], tenant: str | None = None
) -> dict[str, ToolOutcome]:
    """The outcomes of one step's remote sub-agent calls, all at once (in the parent's
    workflow code), each with its hooks fired once. Each call's three steps (start, wait,
    hooks) are reserved in call order first, so a replay finds the same step ids."""
    if not calls:
        return {}
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    plans = [(call, [DBOS.reserve_step() for _ in range(3)]) for call in calls]
    outcomes = await asyncio.gather(
        *(_run_one(agent, commit, call, workflow_id, steps, tenant) for call, steps in plans)
    )
    return {call.id: outcome for call, outcome in zip(calls, outcomes, strict=True)}


async def _run_one(
    agent: Agent,
    commit: StepCommit,
    call: ToolCall,
    workflow_id: str,
    steps: list[StepReservation],
    tenant: str | None,
) -> ToolOutcome:
    tool = agent.tool(call.name)
    assert isinstance(tool, RemoteSubAgentTool)
    start, wait, hooks = steps
    try:
        arguments = tool.validate_arguments(call.arguments)
    except ToolArgumentsError as exc:  # the model's mistake: an argument error
        outcome = ToolOutcome.not_executed(str(exc))
    else:
        ref = remote_ref(commit, call, tool, tool.child_input(arguments), workflow_id, tenant)
        shown = tool_start_chunk(commit.run_id, commit.step, call)
        outcome = await _delegate(ref, tool, shown, start, wait)
    await hooks.run_async(
        {"name": f"helix.tool_hooks:{call.name}"},
        outside_result_hooks,
        commit.session_id,
        commit.run_id,
        agent.name,
        commit.step,
        call,
        outcome,
    )
    return outcome


async def _delegate(
    ref: RemoteRef,
    tool: RemoteSubAgentTool,
    shown: ChunkRecord,
    start: StepReservation,
    wait: StepReservation,
) -> ToolOutcome:
    where = f"Remote sub-agent '{ref.agent_name}' at {ref.url}"
    starts, follows = (
        (start_a2a, follow_a2a) if tool.protocol == "a2a" else (start_remote, follow_remote)
    )
    try:
        started: RemoteStart = await start.run_async(
            step_options("start", tool), starts, ref, shown
        )
    except Exception as exc:  # its retries are spent: the model hears of it
        return _failed(f"{where} could not be started: {exc}", 0.0)
    if started.interrupted:
        return ToolOutcome.not_executed(started.error or interrupted_message(None))
    if started.run_id is None:
        return _failed(started.error or f"{where} could not be started", 0.0)
    try:
        outcome: ToolOutcome = await wait.run_async(
            step_options("wait", tool), follows, ref, started.run_id
        )
    except Exception as exc:
        return _failed(f"{where} could not be followed to its end: {exc}", 0.0)
    return outcome


def _failed(error: str, duration_ms: float, tokens: LLMUsage | None = None) -> ToolOutcome:
    return ToolOutcome(
        success=False,
        content=None,
        error=error,
        duration_ms=duration_ms,
        usage_kind="subagent",
        tokens=tokens,
    )


def _tool(rt: Runtime, ref: RemoteRef) -> RemoteSubAgentTool:
    tool = rt.agent(ref.parent_agent_name).tool(ref.tool_name)
    assert isinstance(tool, RemoteSubAgentTool), ref.tool_name
    return tool


def _client(tool: RemoteSubAgentTool, timeout: float = 30.0) -> AsyncHelixClient:
    # The steps retry on their own terms: the client tries each request once. Loaded
    # here, with httpx, by the first remote call: most processes never make one.
    from helix_dbos.client import AsyncHelixClient  # noqa: PLC0415

    return AsyncHelixClient(tool.url, token=tool.token(), max_retries=0, timeout=timeout)


async def start_remote(ref: RemoteRef, shown: ChunkRecord) -> RemoteStart:
    """The body of `helix.remote_start:<agent>`; the parent's stream shows the call
    start first (the same keyed `tool_start` its step writes later)."""
    rt = current_runtime()
    tool = _tool(rt, ref)
    if await rt.read(repo.interrupt_pending, ref.parent_workflow_id):
        return RemoteStart(error=interrupted_message(None), interrupted=True)
    await rt.on_connection(
        "a remote child's row", lambda conn: store.open_ref(conn, ref, execution_owner())
    )
    await write_chunks(
        rt, ref.parent_session_id, ref.parent_run_id, ref.parent_agent_name, ref.step, [shown]
    )
    async with _client(tool) as client:
        try:
            run = await client.start(
                ref.agent_name,
                ref.input,
                session_id=ref.remote_session_id,
                idempotency_key=ref.idempotency_key,
                tenant=ref.tenant,
            )
        except APIStatusError as exc:
            if _transient(exc):
                raise
            error = (
                f"Remote sub-agent '{ref.agent_name}' at {ref.url} refused the call "
                f"(HTTP {exc.status_code}): {exc.detail}"
            )
            await _finish(rt, ref, "failed", error)
            return RemoteStart(error=error)
    await record_start(rt, ref, run.run_id, lambda: _abort_child(tool, ref.remote_session_id, None))
    return RemoteStart(run_id=run.run_id)


async def record_start(
    rt: Runtime, ref: RemoteRef, remote_id: str, stop: Callable[[], Awaitable[None]]
) -> None:
    """Record the started child's run (or task) id, then `stop` the child if the parent
    was aborted while it started.

    An abort cancels the parent's workflow, marks its run aborted, then stops the
    children whose rows it finds. Against any order of those, one side stops the child:
    the id is recorded even when the cancel already took this execution's ownership (the
    abort's read of the rows must find it), and the parent's status is read after it.
    """

    def mark(owner: repo.Owner | None) -> Callable[[DriverConnection], Coroutine[Any, Any, None]]:
        return lambda conn: store.mark_started(
            conn, ref.parent_run_id, ref.tool_call_id, remote_id, owner
        )

    lost: WorkflowNotOwnedError | None = None
    try:
        await rt.on_connection("a remote child's row", mark(execution_owner()))
    except WorkflowNotOwnedError as exc:
        # An abort's cancel, or another execution that took the run over: the same
        # idempotency key gave both the same child, so the id is right either way.
        lost = exc
        await rt.on_connection("a remote child's row", mark(None))
    if await parent_aborted(rt, ref.parent_run_id):
        await stop()
    if lost is not None:
        raise lost


async def parent_aborted(rt: Runtime, parent_run_id: str) -> bool:
    """Whether the parent's run row says aborted: how a remote child's start and its
    follower (in any process) learn of the parent's abort."""
    parent = await rt.read(repo.get_run, parent_run_id)
    return parent is not None and parent.status == "aborted"


async def _abort_child(
    tool: RemoteSubAgentTool, remote_session_id: str, reason: str | None
) -> None:
    with contextlib.suppress(HelixClientError):
        async with _client(tool, timeout=5.0) as client:  # an abort does not wait long
            await client.abort(remote_session_id, reason=reason or "its parent was aborted")


async def follow_remote(ref: RemoteRef, run_id: str) -> ToolOutcome:
    """The body of `helix.remote_wait:<agent>`: proxy the child's stream, then collect."""
    rt = current_runtime()
    tool = _tool(rt, ref)
    row = await rt.read(store.get_ref, ref.parent_run_id, ref.tool_call_id)
    after = row.last_seq if row is not None else 0
    opened = row.created_at if row is not None else datetime.now(timezone.utc)
    async with _client(tool) as client:
        control = asyncio.ensure_future(_forward_control(rt, ref, client))
        try:
            async for chunk in client.stream(ref.remote_session_id, run_id=run_id, after_seq=after):
                await _proxy(rt, ref, _proxied(chunk))
            status = await client.status(ref.remote_session_id)
            usage = await client.get_usage(ref.remote_session_id, include_children=True)
        except StreamError as exc:
            raise RemoteUnavailable(str(exc)) from exc
        except APIStatusError as exc:
            if _transient(exc):
                raise
            error = f"Remote sub-agent '{ref.agent_name}' at {ref.url}: HTTP {exc.status_code}: {exc.detail}"
            await _finish(rt, ref, "failed", error)
            return _failed(error, _ms_since(opened))
        finally:
            control.cancel()
            with contextlib.suppress(BaseException):
                await control
    run = status.last_run
    if run is None or run.run_id != run_id or run.status not in TERMINAL_STATUSES:
        raise RemoteUnavailable(f"the remote run {run_id} has not ended yet")
    tokens = LLMUsage(**{k: int(getattr(usage.totals, k)) for k in _TOKENS})
    duration_ms = _ms_since(opened)
    if run.status == "completed":
        await _finish(rt, ref, "completed", None, tokens)
        return ToolOutcome(
            success=True,
            content=to_json_text(run.output),
            result=run.output,
            duration_ms=duration_ms,
            usage_kind="subagent",
            tokens=tokens,
        )
    why = f": {run.error}" if run.error else ""
    error = f"Sub-agent '{ref.agent_name}' {run.status}{why}"
    await _finish(rt, ref, run.status, run.error, tokens)
    return _failed(error, duration_ms, tokens)


async def _finish(
    rt: Runtime, ref: RemoteRef, status: str, error: str | None, tokens: LLMUsage | None = None
) -> None:
    counts = (tokens.input_tokens, tokens.output_tokens) if tokens is not None else None
    await rt.on_connection(
        "a remote child's row",
        lambda conn: store.finish(
            conn, ref.parent_run_id, ref.tool_call_id, status, error, counts, execution_owner()
        ),
    )


async def _proxy(rt: Runtime, ref: RemoteRef, chunk: ProxiedChunk) -> None:
    await rt.on_connection(
        "a remote chunk", lambda conn: store.proxy_chunk(conn, ref, chunk, execution_owner())
    )


def _ms_since(opened: datetime) -> float:
    return max(0.0, (datetime.now(timezone.utc) - opened).total_seconds() * 1000)


def _proxied(chunk: StreamChunk) -> ProxiedChunk:
    return ProxiedChunk(
        seq=chunk.seq,
        session_id=chunk.session_id,
        run_id=chunk.run_id,
        agent_name=chunk.agent_name,
        step=chunk.step,
        type=chunk.type,
        payload=chunk.payload,
    )


async def _forward_control(rt: Runtime, ref: RemoteRef, client: AsyncHelixClient) -> None:
    """Hand the parent's interrupt (once) or abort to the remote child, from whichever
    process follows it: an interrupt sent to the parent by any means (the API, the CLI,
    a raw DBOS.send) reaches the child, and so does an abort (the parent's run row)."""
    interrupted = False
    while True:
        if await parent_aborted(rt, ref.parent_run_id):
            with contextlib.suppress(HelixClientError):
                await client.abort(ref.remote_session_id, reason="its parent was aborted")
            return
        if not interrupted and await rt.read(repo.interrupt_pending, ref.parent_workflow_id):
            try:
                await client.interrupt(ref.remote_session_id, reason="its parent was interrupted")
                interrupted = True
            except ConflictError:  # it has ended meanwhile
                interrupted = True
            except HelixClientError:
                pass  # try again at the next look
        await asyncio.sleep(CONTROL_POLL_SECONDS)


async def abort_remote_children(
    helix_runtime: Runtime, session_id: str, reason: str | None
) -> None:
    """Abort the remote children running below `session_id` (the parent's abort, from a
    process that may not follow them: the parent's may be down)."""
    for child in await helix_runtime.read(store.live_below, session_id):
        agent = helix_runtime.agents.get(child.parent_agent_name)
        tool = agent.tool(child.tool_name) if agent is not None else None
        if not isinstance(tool, RemoteSubAgentTool):
            continue
        if tool.protocol == "a2a":
            if child.remote_run_id is not None:  # the task id: none until it started
                await _a2a().cancel_a2a_task(tool, child.remote_run_id)
            continue
        await _abort_child(tool, child.remote_session_id, reason)
