"""Parked waits (issue 34, item 3): a run that waits long for a human lets go of its
coroutine; its answer (or its deadline) runs its workflow again here, replaying the
recorded steps, and the tool runs once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from dbos import DBOS
from helpers import approval_gated_delete, pending_calls, sql
from sqlalchemy import event

from helix_dbos.runtime.dbos import dbos_internals
from helix_dbos.runtime.dbos.dbos_internals import _ReplayedSteps
from helix_dbos.runtime.process import wait_parking
from helix_dbos.runtime.process.parked_span import PARKED_MESSAGE
from helix_dbos.runtime.waits.message_recheck import MessageRecheck


@pytest.fixture
def parking(helix) -> Iterator[wait_parking.WaitParking]:
    p = helix.runtime.parking
    saved = (p.max_in_memory, p.park_after_seconds)
    yield p
    p.max_in_memory, p.park_after_seconds = saved


def _gated_agent(make_agent, mock_llm, ran: list[str], n: int = 1, **agent_kw):
    agent = make_agent(tools=[approval_gated_delete(ran)], **agent_kw)
    # Each run takes a reply as it gets there: every run's first, then their last.
    for i in range(n):
        mock_llm.add_responses(
            {
                "type": "tool_calls",
                "tool_calls": [{"id": "d1", "name": "delete_file", "arguments": {"path": f"/{i}"}}],
            },
            agent=agent.name,
        )
    mock_llm.add_responses(*[{"type": "text", "content": "done"}] * n, agent=agent.name)
    return agent


async def _until(predicate, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def _parked(helix, parking, session_ids: list[str]) -> None:
    """Wait until every one of these sessions' runs waits, then park them all."""
    for sid in session_ids:
        await pending_calls(helix, sid)

    async def in_recv() -> bool:
        return parking.in_memory >= len(session_ids)

    await _until(in_recv)
    assert parking.park_all() == len(session_ids)
    await _settled(parking)


async def _settled(parking) -> None:
    """Until every parked run's task has ended and the one look for a message that came
    meanwhile is done (a fixed 0.2 s was too short on a loaded machine: a task that ended
    after the test's answer found it at that look, and the run was no longer parked)."""

    async def quiet() -> bool:
        return parking._cancelling == 0 and not parking._checking

    await _until(quiet)


async def _one_parked(helix, make_agent, mock_llm, parking, ran: list[str]):
    """A run parked while it waits for the approval of `delete_file` (call `d1`)."""
    agent = _gated_agent(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await _parked(helix, parking, [handle.session_id])
    return handle


def _dbos_waits_for(workflow_id: str) -> bool:
    """Whether DBOS has a `recv` of this workflow registered for its notification."""
    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    waiters = sys_db.notifications_map.snapshot()
    return any(components[0] == workflow_id for _payload, components, _signal in waiters)


def _workflow_status(database_url: str, workflow_id: str) -> str:
    return sql(
        database_url,
        "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
        workflow_id,
    )[0][0]


async def test_a_parked_run_is_resumed_by_its_approval_and_runs_its_tool_once(
    helix, make_agent, mock_llm, parking, database_url
):
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    result_task = asyncio.ensure_future(handle.result())  # a caller already awaiting it
    resumed = parking.resumed_total
    await _parked(helix, parking, [handle.session_id])
    assert parking.parked == 1 and not result_task.done()
    run = await helix.get_run(handle.run_id)
    assert run.status == "waiting"
    assert _workflow_status(database_url, run.workflow_id) == "PENDING"

    await helix.approve(handle.session_id, "d1")
    result = await asyncio.wait_for(result_task, 60)
    assert result.status == "completed" and result.output == "done"
    assert ran == ["/0"]
    assert parking.resumed_total == resumed + 1 and parking.parked == 0
    assert _workflow_status(database_url, run.workflow_id) == "SUCCESS"
    # One tool result, one assistant reply per step: the replay wrote nothing twice.
    roles = [m.role for m in await helix.get_messages(handle.session_id)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_parked_run_lets_go_of_its_sessions_transcript(
    helix, make_agent, mock_llm, parking
):
    """A parked run may wait for days: the process's cached transcript of its session
    goes with its coroutine, and its resume reads the transcript whole again."""
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)
    cached = helix.runtime.history._entries
    assert handle.session_id in cached
    await _parked(helix, parking, [handle.session_id])
    assert handle.session_id not in cached

    await helix.approve(handle.session_id, "d1")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/0"]
    last = [r for r in mock_llm.inputs if r.agent_name == agent.name][-1]
    assert [m.role for m in last.messages] == ["user", "assistant", "tool"]
    assert last.messages[0].content == "delete it"


async def test_a_raw_dbos_send_resumes_a_parked_run(helix, make_agent, mock_llm, parking):
    ran: list[str] = []
    handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
    run = await helix.get_run(handle.run_id)
    await DBOS.send_async(
        run.workflow_id, {"tool_call_id": "d1", "approved": True}, "helix.approval"
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/0"]


async def test_a_parked_run_whose_notification_was_lost_is_found_by_the_recheck(
    helix, make_agent, mock_llm, parking, database_url
):
    ran: list[str] = []
    handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
    sql(database_url, "ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger")
    try:
        await helix.approve(handle.session_id, "d1")
        await asyncio.sleep(0.5)
        assert parking.parked == 1, "no notification: still parked"
        woken = await asyncio.to_thread(MessageRecheck(interval_seconds=3600).sweep)
    finally:
        sql(
            database_url, "ALTER TABLE dbos.notifications ENABLE TRIGGER dbos_notifications_trigger"
        )
    assert woken >= 1
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/0"]


async def test_a_parked_run_times_out_at_its_deadline(
    helix, make_agent, mock_llm, parking, monkeypatch
):
    monkeypatch.setattr(wait_parking, "NEAR_DEADLINE_SECONDS", 0.5)
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran)
    helix.runtime.approval_timeout_seconds, saved = 4.0, helix.runtime.approval_timeout_seconds
    try:
        handle = await helix.execute(agent, "delete it")
        await _parked(helix, parking, [handle.session_id])
    finally:
        helix.runtime.approval_timeout_seconds = saved
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == []
    tool_rows = [m for m in await helix.get_messages(handle.session_id) if m.role == "tool"]
    assert "timed out" in str(tool_rows[0].content)


async def test_beyond_the_in_memory_limit_the_oldest_waits_are_parked(
    helix, make_agent, mock_llm, parking
):
    parking.max_in_memory = 2
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran, n=4)
    parked_before = parking.parked_total
    handles = []
    for i in range(4):
        handles.append(await helix.execute(agent, f"delete {i}"))
        await pending_calls(helix, handles[-1].session_id)

    async def two_parked() -> bool:  # the oldest two, once a second old (at most a sweep)
        return parking.parked_total - parked_before == 2

    await _until(two_parked)
    await _settled(parking)
    assert parking.parked_total - parked_before == 2 and parking.in_memory == 2
    for h in handles:
        await helix.approve(h.session_id, "d1")
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
    assert [r.status for r in results] == ["completed"] * 4
    assert sorted(ran) == ["/0", "/1", "/2", "/3"]


async def test_an_aborted_parked_run_is_not_resumed(
    helix, make_agent, mock_llm, parking, database_url
):
    ran: list[str] = []
    handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
    resumed = parking.resumed_total
    await helix.abort(handle.session_id, reason="no")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "aborted" and ran == []
    await asyncio.sleep(0.5)
    assert parking.resumed_total == resumed and parking.parked == 0
    run = await helix.get_run(handle.run_id)
    assert _workflow_status(database_url, run.workflow_id) == "CANCELLED"


async def test_a_message_stored_before_the_park_is_found_when_the_run_settles(
    helix, make_agent, mock_llm, parking, database_url
):
    """The answer is in the database but its notification never came (a listener cut
    off): parking the run looks for it once, and resumes the run without a sweep."""
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)

    async def recv_registered() -> bool:
        return _dbos_waits_for(handle.workflow_id)

    async def recv_looked() -> bool:
        """DBOS's recv looked in the database once: it records its durable sleep (the
        wait's deadline) only after that look (`recv_setup`)."""
        [(sleeps,)] = sql(
            database_url,
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s "
            "AND function_name = 'DBOS.sleep'",
            handle.workflow_id,
        )
        return bool(sleeps)

    # Not `parking.in_memory`: it counts the run from just before its `recv`, whose first
    # look in the database would find an answer sent now. DBOS registers the recv's
    # notification inside the parking's wait, then looks once, then records its sleep.
    await _until(recv_registered)
    await _until(recv_looked)
    resumed = parking.resumed_total
    sql(database_url, "ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger")
    try:
        await helix.approve(handle.session_id, "d1")
        await asyncio.sleep(0.3)
        assert (await helix.get_run(handle.run_id)).status == "waiting"
        assert parking.park_all() == 1
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        sql(
            database_url, "ALTER TABLE dbos.notifications ENABLE TRIGGER dbos_notifications_trigger"
        )
    assert result.status == "completed" and ran == ["/0"]
    assert parking.resumed_total == resumed + 1


async def test_a_resumed_run_takes_its_message_before_it_can_be_parked_again(
    helix, make_agent, mock_llm, parking
):
    """Every wait parked (`waiting_runs_in_memory=0`): a resumed run re-enters its wait
    and must get to take its message, not be parked again at once (which, its message
    waiting, would resume it again, without end)."""
    parking.max_in_memory = 0
    ran: list[str] = []
    agent = _gated_agent(make_agent, mock_llm, ran)
    parked_before, resumed_before = parking.parked_total, parking.resumed_total
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)

    async def parked() -> bool:
        return parking.parked_total > parked_before and parking.parked == 1

    await _until(parked)
    await helix.approve(handle.session_id, "d1")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/0"]
    assert parking.parked_total - parked_before == 1
    assert parking.resumed_total - resumed_before == 1


async def test_a_resumed_run_replays_its_recorded_steps_without_asking_the_database(
    helix, make_agent, mock_llm, parking, database_url
):
    """`execute_again` reads the recorded steps with its claim: the replay asks DBOS's
    table for none of them, only for the steps that run after the wait."""
    ran: list[str] = []
    handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
    run = await helix.get_run(handle.run_id)
    recorded = {
        row[0]
        for row in sql(
            database_url,
            "SELECT function_id FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            run.workflow_id,
        )
    }
    assert len(recorded) >= 3  # the model's step, the gate, the suspend (and the recv's timer)
    checked: list[int] = []

    def on_statement(conn, cursor, statement, parameters, context, executemany) -> None:
        if "FROM dbos.operation_outputs" not in statement or not isinstance(parameters, dict):
            return
        if run.workflow_id in parameters.values():
            checked.extend(v for k, v in parameters.items() if k.startswith("function_id"))

    engine = dbos_internals._dbos_module._get_dbos_instance()._sys_db.engine
    event.listen(engine, "before_cursor_execute", on_statement)
    try:
        await helix.approve(handle.session_id, "d1")
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
    assert result.status == "completed" and ran == ["/0"]
    assert checked, "the steps after the wait were checked"
    assert not recorded & set(checked), f"recorded steps {recorded} asked again: {checked}"
    replayed = dbos_internals._dbos_module._get_dbos_instance()._sys_db._helix_replayed_steps
    assert replayed.pending(run.workflow_id) == 0


async def test_the_claim_returns_the_status_dbos_would_read(
    helix, make_agent, mock_llm, parking, monkeypatch
):
    """The claim's statement returns the workflow's status, which DBOS's dispatch takes
    in place of its own read: the two are the same, field by field (a DBOS upgrade that
    adds or renames a field fails here)."""
    ran: list[str] = []
    handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
    sys_db = dbos_internals._dbos_module._get_dbos_instance()._sys_db
    dispatched = dbos_internals.execute_dequeued_workflow
    seen: list[tuple[dict, dict | None]] = []

    def dispatch(dbos, status, owner_xid):
        seen.append((dict(status), sys_db.get_workflow_status(status["workflow_uuid"])))
        return dispatched(dbos, status, owner_xid)

    monkeypatch.setattr(dbos_internals, "execute_dequeued_workflow", dispatch)
    await helix.approve(handle.session_id, "d1")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed" and ran == ["/0"]
    assert len(seen) == 1
    claimed, read = seen[0]
    assert read is not None and claimed == dict(read)
    assert claimed["status"] == "PENDING" and claimed["inputs"]


def test_replayed_steps_are_handed_out_once_in_order_and_dropped_past_the_replay():
    def row(function_id: int, name: str) -> SimpleNamespace:
        return SimpleNamespace(
            function_id=function_id,
            function_name=name,
            output=f'"{name}"',
            error=None,
            serialization="json",
            child_workflow_id=None,
        )

    steps = _ReplayedSteps()
    steps.add("wf", [row(1, "llm"), row(2, "gate"), row(4, "DBOS.sleep")])
    hit = steps.take("wf", 1, "llm")
    assert hit is not None and hit["output"] == '"llm"'
    assert steps.take("wf", 1, "llm") is None  # once: a second ask goes to the database
    # not recorded, a later one is: none, once, and the rest kept
    steps.add("wf", [row(1, "llm"), row(2, "gate"), row(4, "DBOS.sleep")])
    assert steps.take("wf", 1, "llm") is not None
    assert steps.take("wf", 3, "DBOS.recv") is dbos_internals.NOT_RECORDED
    assert steps.pending("wf") == 2
    assert steps.take("wf", 2, "gate") is not None
    assert steps.take("wf", 4, "DBOS.sleep") is not None and steps.pending("wf") == 0

    steps.add("wf2", [row(1, "llm"), row(2, "gate")])
    assert steps.take("wf2", 1, "other") is None  # a changed workflow: DBOS says so
    assert steps.pending("wf2") == 0 and steps.take("wf2", 2, "gate") is None

    steps.add("wf4", [row(1, "llm"), row(3, "DBOS.sleep")])
    assert steps.take("wf4", 2, "DBOS.recv") is dbos_internals.NOT_RECORDED
    assert steps.take("wf4", 2, "DBOS.recv") is None  # asked again: the database
    assert steps.pending("wf4") == 0

    steps.add("wf3", [row(1, "llm")])
    assert steps.take("wf3", 2, "tool") is None and steps.pending("wf3") == 0  # past it


async def test_a_parked_runs_workflow_span_ends_parked_not_failed(
    helix, make_agent, mock_llm, parking
):
    """DBOS ends the workflow's span when parking cancels its task: the span says
    parked (an event, an attribute, status OK), and the run's later execution, resumed
    by the answer, has a span of its own that ends OK without that mark."""
    trace = pytest.importorskip("opentelemetry.trace")
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        trace.set_tracer_provider(sdk.TracerProvider())
        provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk.TracerProvider):
        pytest.skip("another tracer provider is installed")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = in_memory.InMemorySpanExporter()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    # DBOS traces only when the application enables it (`enable_otlp` in its config),
    # which the session's HelixDBOS does not: on for this test alone.
    was_on = dbos_internals.set_tracing(True)
    try:
        ran: list[str] = []
        handle = await _one_parked(helix, make_agent, mock_llm, parking, ran)
        run = await helix.get_run(handle.run_id)
        await helix.approve(handle.session_id, "d1")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.status == "completed" and ran == ["/0"]

        def workflow_spans() -> list[Any]:
            return [
                s
                for s in exporter.get_finished_spans()
                if run.workflow_id in {str(v) for v in (s.attributes or {}).values()}
                and not (s.parent and s.parent.is_valid and _is_step(s))
            ]

        # The result is out at the run's final write; DBOS ends the execution's span just
        # after, when the workflow function returns (later on a loaded machine).
        def executions() -> int:
            spans = workflow_spans()
            names = {s.name for s in spans if "helix.parked" in (s.attributes or {})}
            return sum(1 for s in spans if s.name in names)

        deadline = time.monotonic() + 30
        while executions() < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        dbos_internals.set_tracing(was_on)
    workflow = workflow_spans()
    exporter.shutdown()  # the global provider outlives this test: it keeps nothing more
    roots = [s for s in workflow if "helix.parked" in (s.attributes or {})]
    assert len(roots) == 1, [(s.name, s.status.status_code) for s in workflow]
    parked = roots[0]
    assert parked.status.status_code == trace.StatusCode.OK
    assert [e.name for e in parked.events] == ["helix.run.parked"]
    # The `recv` DBOS ended inside the cancelled task: its error says it was parked.
    errors = [s for s in workflow if s.status.status_code == trace.StatusCode.ERROR]
    assert [(s.name, s.status.description) for s in errors] == [("recv", PARKED_MESSAGE)]
    # The execution the answer started is a span of its own that ends OK, unmarked.
    later = [s for s in workflow if s.name == parked.name and s is not parked]
    assert [s.status.status_code for s in later] == [trace.StatusCode.OK]
    assert later[0].start_time > parked.end_time


def _is_step(span) -> bool:
    return "step" in str((span.attributes or {}).get("operationType", "")).lower()
