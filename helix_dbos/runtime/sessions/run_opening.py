"""Opening a run: one request for every way a run starts, one body that writes it, and
the run id -> workflow id mapping.

Every start path builds an `OpenRunRequest` and opens it here, as DBOS routes every
workflow start through `_init_workflow`: `execute()` on a new session or the next turn
of one, `resume()`, `retry()`, a sub-agent's child (`runtime/children/subagents.py`) and a
companion's turn (`runtime/children/companions.py`). A new kind of start (a fork's first run, a
queued message's run) is one more `kind` and constructor here, not another copy of the
rows a run needs: its session (created, or locked and checked), the run row under
`workflow_id(run_id)`, the input after healing an unpaired `__finish__`, the session's
new turn and the `run_started` chunk.

A top-level new session outside a workflow has a faster form of the same rows
(`open_new_session_run`, one statement that also takes the run's start lock).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from helix_dbos.definitions.agent import Agent
from helix_dbos.errors import SessionAgentMismatchError
from helix_dbos.orchestration.double_texting import queued_run_id
from helix_dbos.orchestration.messages import synthesize_finish_tool_result
from helix_dbos.orchestration.types import Message
from helix_dbos.store import repository as repo
from helix_dbos.store import run_bounds
from helix_dbos.store.features.queued_messages import QueuedMessage, QueuedStart, take_queued

WORKFLOW_ID_PREFIX = "helix-"

# Derived ids: a replay of the parent's step derives the same child, never a second one.
_CHILD_NAMESPACE = uuid.UUID("5b7d8a52-6f0e-4d55-9d0c-2f1c3c9d4a10")
_COMPANION_NAMESPACE = uuid.UUID("0f8e9c1e-3b8a-4a57-8f55-9a3b6f4e2c71")

# new_session: a session this open creates (`execute()` without a session id);
# turn: the next turn of a session, created if its id is unknown (`execute(session_id=)`);
# resume / retry: the next turn of an existing session;
# child: a sub-agent call's own new session; companion: a turn of a companion's session;
# queued: the next turn of a session, started by a message stored while a run was live
# (double texting, `runtime/sessions/session_queue.py`).
RunKind = Literal["new_session", "turn", "resume", "retry", "child", "companion", "queued"]
_CREATES_SESSION: frozenset[RunKind] = frozenset({"new_session", "child"})


def workflow_id(run_id: str) -> str:
    """The DBOS workflow id of a run (`helix.runs.workflow_id`)."""
    return f"{WORKFLOW_ID_PREFIX}{run_id}"


def run_id_of(workflow: str) -> str | None:
    """The run id of a run's workflow id; None for any other workflow."""
    if not workflow.startswith(WORKFLOW_ID_PREFIX):
        return None
    return workflow[len(WORKFLOW_ID_PREFIX) :]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _derived(namespace: uuid.UUID, prefix: str, key: str) -> str:
    return f"{prefix}_{uuid.uuid5(namespace, key).hex}"


def child_ids(parent_run_id: str, step: int, call_id: str) -> tuple[str, str]:
    """A sub-agent call's child (session id, run id), from the parent run, step and call."""
    key = f"{parent_run_id}:{step}:{call_id}"
    return (
        _derived(_CHILD_NAMESPACE, "ses", "session:" + key),
        _derived(_CHILD_NAMESPACE, "run", key),
    )


def companion_run_id(parent_run_id: str, step: int, call_id: str) -> str:
    """A companion call's turn's run id, from the parent run, step and call."""
    return _derived(_COMPANION_NAMESPACE, "run", f"{parent_run_id}:{step}:{call_id}")


@dataclass(frozen=True)
class OpenRunRequest:
    """What opening a run needs, whichever way it starts. Ids are chosen before
    anything is written, so a run's start lock can be taken first."""

    kind: RunKind
    run_id: str
    session_id: str
    agent_name: str
    max_steps: int
    messages: list[Message]
    # What `helix.runs.options` records: for a top-level run its effective options (so
    # a caller reading the result from the row knows its mode); for a child its parent.
    options: dict[str, Any]
    # The state a session created by this open starts with.
    new_state: dict[str, Any] = field(default_factory=dict)
    # The caller's state: replaces an existing session's state for the new turn.
    state: dict[str, Any] | None = None
    parent_session_id: str | None = None
    root_session_id: str | None = None
    # A run a stored message starts: the message is taken in the same transaction.
    queued: QueuedStart | None = None

    @property
    def workflow_id(self) -> str:
        return workflow_id(self.run_id)

    @property
    def creates_session(self) -> bool:
        """The session cannot exist yet (its id is new): no lock, no check, turn 1."""
        return self.kind in _CREATES_SESSION

    @classmethod
    def top_level(
        cls,
        kind: RunKind,
        agent: Agent,
        *,
        session_id: str | None,
        messages: list[Message],
        state: dict[str, Any] | None,
        options: dict[str, Any],
        run_id: str | None = None,
    ) -> OpenRunRequest:
        """A run started through the API: a new session when `session_id` is None.
        `run_id` is derived by a caller that may open the same run twice (a schedule's
        firing, `schedules/firing.py`); new otherwise."""
        return cls(
            kind="new_session" if session_id is None else kind,
            run_id=run_id or new_id("run"),
            session_id=session_id or new_id("ses"),
            agent_name=agent.name,
            max_steps=agent.max_steps,
            messages=messages,
            options=options,
            new_state=state or agent.initial_state(None),
            state=state,
        )

    @classmethod
    def child(
        cls,
        agent: Agent,
        *,
        session_id: str,
        run_id: str,
        text: str,
        parent_session_id: str,
        parent_run_id: str,
        root_session_id: str,
        call_id: str,
        tenant: str | None = None,
    ) -> OpenRunRequest:
        """A sub-agent call's child run, in a new session below the parent's, for the
        parent's tenant."""
        return cls(
            kind="child",
            run_id=run_id,
            session_id=session_id,
            agent_name=agent.name,
            max_steps=agent.max_steps,
            messages=[Message(role="user", content=text)],
            options=child_options(parent_run_id, call_id, tenant),
            new_state=agent.initial_state(None),
            parent_session_id=parent_session_id,
            root_session_id=root_session_id,
        )

    @classmethod
    def companion_turn(
        cls,
        agent: Agent,
        *,
        session_id: str,
        text: str,
        parent_run_id: str,
        step: int,
        call_id: str,
        tenant: str | None = None,
    ) -> OpenRunRequest:
        """The next turn of a companion's session, asked for by its parent's call, for
        the parent's tenant."""
        return cls(
            kind="companion",
            run_id=companion_run_id(parent_run_id, step, call_id),
            session_id=session_id,
            agent_name=agent.name,
            max_steps=agent.max_steps,
            messages=[Message(role="user", content=text)],
            options=child_options(parent_run_id, call_id, tenant),
        )

    @classmethod
    def queued_message(
        cls, agent: Agent, message: QueuedMessage, options: dict[str, Any]
    ) -> OpenRunRequest:
        """The run a stored message starts, under the run id derived from the message
        (so it is opened once), with the message's state and, for `rollback`, the run it
        removes from the visible history first."""
        rollback = message.target_run_id if message.strategy == "rollback" else None
        content = message.content
        return cls(
            kind="queued",
            run_id=queued_run_id(message.message_id),
            session_id=message.session_id,
            agent_name=agent.name,
            max_steps=agent.max_steps,
            messages=[Message(role="user", content=content)] if content is not None else [],
            options=options,
            new_state=message.state or agent.initial_state(None),
            state=message.state,
            queued=QueuedStart(message.message_id, rollback),
        )


def child_options(parent_run_id: str, call_id: str, tenant: str | None) -> dict[str, Any]:
    """What a child run's `helix.runs.options` records: its parent's call and, so its
    `tenant` column shows it, the tenant it inherits."""
    options: dict[str, Any] = {"parent_run_id": parent_run_id, "tool_call_id": call_id}
    if tenant is not None:
        options["tenant"] = tenant
    return options


@dataclass(frozen=True)
class OpenedRun:
    session_id: str
    run_id: str
    workflow_id: str
    turn: int


@dataclass(frozen=True)
class AlreadyRunning:
    """The session has a live run: nothing was opened."""

    run_id: str
    workflow_id: str


async def open_run(
    conn: repo.SQLConnection, request: OpenRunRequest, *, wake: bool = True
) -> OpenedRun | AlreadyRunning:
    """Open the run in the caller's transaction: create the session or lock it (and
    refuse another agent's session, or report its live run), insert the run, add the
    input, start the session's new turn and announce it with a `run_started` chunk
    (`wake` False: with no NOTIFY, which the caller sends after its commit)."""
    sid = request.session_id
    first_turn = 0
    if request.creates_session:
        await repo.insert_session(
            conn,
            sid,
            request.agent_name,
            request.new_state,
            parent_session_id=request.parent_session_id,
            root_session_id=request.root_session_id,
        )
    else:
        row = await repo.get_session(conn, sid, for_update=True)
        if row is None:
            await repo.insert_session(conn, sid, request.agent_name, request.new_state)
            row = await repo.get_session(conn, sid, for_update=True)
            assert row is not None
        elif row.agent_name != request.agent_name:
            raise SessionAgentMismatchError(sid, row.agent_name, request.agent_name)
        live = await repo.get_live_run(conn, sid)
        if live is not None:
            return AlreadyRunning(live.run_id, live.workflow_id)
        if request.queued is not None:  # before the run's rows: a rollback removes a run's
            await take_queued(conn, request.queued, request.run_id)
        first_turn = row.turn_count
    turn = first_turn + 1
    await repo.insert_run(
        conn,
        run_id=request.run_id,
        session_id=sid,
        workflow_id=request.workflow_id,
        agent_name=request.agent_name,
        turn=turn,
        max_steps=request.max_steps,
        options=request.options,
    )
    heal: list[Message] = []
    if not request.creates_session:
        unpaired = await repo.unpaired_finish_call_ids(conn, sid)
        heal = [synthesize_finish_tool_result(call_id) for call_id in unpaired]
    await repo.append_messages(conn, sid, request.run_id, heal + request.messages)
    fields: dict[str, Any] = {"status": "running", "turn_count": turn, "error": None}
    if request.state is not None and first_turn > 0:
        fields["state"] = request.state
    await repo.update_session(conn, sid, **fields)
    started = (f"{request.run_id}:started", "run_started", {"turn": turn})
    await repo.insert_chunks(
        conn, sid, request.run_id, request.agent_name, 0, [started], notify=wake
    )
    return OpenedRun(sid, request.run_id, request.workflow_id, turn)


async def open_new_session_run(conn: repo.SQLConnection, request: OpenRunRequest) -> OpenedRun:
    """`open_run` for a top-level new session, in one autocommit statement on `conn` that
    also takes the run's start lock (held even if the statement fails: release it either
    way). Outside workflows only: a workflow opens its runs in an exactly-once
    datasource transaction."""
    assert request.kind == "new_session"
    await run_bounds.open_new_session_run(
        conn,
        session_id=request.session_id,
        run_id=request.run_id,
        workflow_id=request.workflow_id,
        agent_name=request.agent_name,
        state=request.new_state,
        max_steps=request.max_steps,
        options=request.options,
        messages=request.messages,
    )
    return OpenedRun(request.session_id, request.run_id, request.workflow_id, 1)
