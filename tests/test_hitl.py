"""Human in the loop and run control over DBOS.recv/send (seed 002, issue 3)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import forkserver
import pytest
from checkpoint_shadow import shadow_checkpoints  # noqa: F401 - autouse: as the trigger gave
from dbos import DBOS
from helpers import calls, sql, wait_until_waiting

from helix_dbos import AgentHooks, ToolContext, tool
from helix_dbos.errors import (
    InvalidAnswerError,
    RunNotActiveError,
    SessionNotFoundError,
    ToolCallAlreadyAnsweredError,
    ToolCallNotFoundError,
)
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.store.database import libpq_url


def make_deleter(log: list):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        log.append(path)
        return f"deleted {path}"

    return delete_file


async def test_approved_call_runs_with_its_original_input(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/x"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /tmp/x")
    pending = await wait_until_waiting(helix, handle.session_id)

    assert (
        pending[0].tool_call_id == "d1"
        and pending[0].kind == "approval"
        and pending[0].input == {"path": "/tmp/x"}
    )
    assert ran == [], "nothing runs before approval"
    waiting = sql(
        database_url,
        "SELECT run_id, waiting_for, tool_name, waiting_since IS NOT NULL FROM helix.waiting_runs WHERE session_id = %s",
        handle.session_id,
    )
    assert waiting == [(handle.run_id, "approval", "delete_file", True)]
    chunk = sql(
        database_url,
        "SELECT type, payload FROM helix.stream_chunks WHERE run_id = %s AND type = 'tool_approval_request'",
        handle.run_id,
    )
    assert chunk[0][1]["tool_call_id"] == "d1" and chunk[0][1]["input"] == {"path": "/tmp/x"}

    await helix.approve(handle.session_id, "d1")
    result = await handle.result()
    assert result.status == "completed" and ran == ["/tmp/x"]
    status = sql(
        database_url,
        "SELECT status, resolved_at IS NOT NULL FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert status == [("approved", True)]
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.approve(handle.session_id, "d1")


async def test_denied_call_never_runs_and_the_model_gets_the_reason(helix, make_agent, mock_llm):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/etc"})),
        {"type": "text", "content": "ok, not deleting"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /etc")
    await wait_until_waiting(helix, handle.session_id)
    await helix.deny(handle.session_id, "d1", reason="never touch /etc")
    result = await handle.result()
    assert result.status == "completed" and ran == []
    denial = next(m for m in await helix.get_messages(handle.session_id) if m.tool_call_id == "d1")
    assert (
        denial.is_error
        and denial.content == "Tool call d1 was not approved by the user: never touch /etc"
    )


async def test_approval_predicate_is_evaluated_per_call_and_fails_closed(
    helix, make_agent, mock_llm
):
    executed: list[int] = []

    def over_limit(args, ctx: ToolContext) -> bool:
        if args.get("amount") == 13:
            raise RuntimeError("unlucky")
        return args["amount"] > 100

    @tool(require_approval=over_limit)
    def refund(amount: int) -> str:
        """Refund an amount."""
        executed.append(amount)
        return "refunded"

    agent = make_agent(tools=[refund])
    mock_llm.add_responses(
        calls(
            ("small", "refund", {"amount": 5}),
            ("big", "refund", {"amount": 500}),
            ("odd", "refund", {"amount": 13}),
        ),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "refunds")
    pending = await wait_until_waiting(helix, handle.session_id, count=2)
    assert sorted(p.tool_call_id for p in pending) == ["big", "odd"], (
        "the raising predicate requires approval"
    )
    assert executed == [5]
    await helix.approve(handle.session_id, "odd")
    await helix.deny(handle.session_id, "big")
    assert (await handle.result()).status == "completed"
    assert executed == [5, 13]


async def test_client_tool_result_error_and_usage(helix, make_agent, mock_llm, database_url):
    @tool(execute="client")
    def get_location() -> dict:
        """Ask the user's device for its location."""

    agent = make_agent(tools=[get_location])
    mock_llm.add_responses(
        calls(("loc", "get_location", {})),
        calls(("loc2", "get_location", {})),
        {"type": "text", "content": "thanks"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "where am I?")
    await wait_until_waiting(helix, handle.session_id)
    with pytest.raises(InvalidAnswerError, match="submit_tool_result"):
        await helix.approve(handle.session_id, "loc")
    await helix.submit_tool_result(handle.session_id, "loc", {"lat": 52.5, "lon": 13.4})
    await wait_until_waiting(helix, handle.session_id)
    await helix.submit_tool_result(handle.session_id, "loc2", error="permission denied")
    result = await handle.result()
    assert result.status == "completed"
    by_id = {
        m.tool_call_id: m for m in await helix.get_messages(handle.session_id) if m.role == "tool"
    }
    assert (
        json.loads(by_id["loc"].content) == {"lat": 52.5, "lon": 13.4} and not by_id["loc"].is_error
    )
    assert by_id["loc2"].is_error and by_id["loc2"].content == "permission denied"
    usage = sql(
        database_url,
        "SELECT tool_name, success, duration_ms > 0 FROM helix.usage WHERE run_id = %s AND kind = 'client_tool_wait_ms' ORDER BY step",
        handle.run_id,
    )
    assert usage == [("get_location", True, True), ("get_location", False, True)]


async def test_client_tool_deadline_gives_a_synthetic_error_and_fires_hooks(
    helix, make_agent, mock_llm, database_url
):
    seen: list[str] = []

    @tool(execute="client", client_timeout_seconds=0.5)
    def scan_badge() -> dict:
        """Scan a badge on the client."""

    hooks = AgentHooks(
        on_message=lambda e: seen.append(f"message:{e.message.content}"),
        after_tool=lambda e: seen.append(f"after:{e.success}"),
    )
    agent = make_agent(tools=[scan_badge], hooks=hooks)
    mock_llm.add_responses(
        calls(("b", "scan_badge", {})), {"type": "text", "content": "gave up"}, agent=agent.name
    )
    result = await (await helix.execute(agent, "scan")).result()
    assert result.status == "completed"
    message = next(m for m in await helix.get_messages(result.session_id) if m.tool_call_id == "b")
    assert message.is_error and "timed out after 0.5s" in message.content
    # Between the model's two messages (on_message fires for those too, issue 16).
    assert seen == ["message:None", f"message:{message.content}", "after:False", "message:gave up"]
    assert sql(
        database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", result.run_id
    ) == [("timed_out",)]
    assert sql(
        database_url,
        "SELECT success FROM helix.usage WHERE run_id = %s AND kind = 'client_tool_wait_ms'",
        result.run_id,
    ) == [(False,)]


async def test_several_pending_calls_are_waited_for_together_and_bad_answers_change_nothing(
    helix, make_agent, mock_llm, caplog
):
    ran: list[str] = []

    @tool(execute="client")
    def confirm(question: str) -> dict:
        """Ask the client to confirm."""

    agent = make_agent(tools=[make_deleter(ran), confirm])
    mock_llm.add_responses(
        calls(
            ("a1", "delete_file", {"path": "a"}),
            ("a2", "delete_file", {"path": "b"}),
            ("c1", "confirm", {"question": "sure?"}),
        ),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id, count=3)

    with pytest.raises(ToolCallNotFoundError):
        await helix.approve(handle.session_id, "nope")
    with pytest.raises(SessionNotFoundError):
        await helix.approve("no-such-session", "a1")
    with pytest.raises(InvalidAnswerError):
        await helix.submit_tool_result(handle.session_id, "c1", {"x": 1}, error="both")

    async def raw_sends() -> None:
        await DBOS.send_async(
            handle.workflow_id, {"tool_call_id": "zzz", "approved": True}, "helix.approval"
        )
        await DBOS.send_async(handle.workflow_id, {"bogus": 1}, "helix.approval")
        await DBOS.send_async(handle.workflow_id, "not even an object", "helix.approval")

    await on_target_loop(raw_sends)
    await helix.submit_tool_result(handle.session_id, "c1", {"yes": True})
    await helix.approve(handle.session_id, "a2")
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.deny(handle.session_id, "a2")
    # A raw duplicate through DBOS itself is ignored by the run.
    await on_target_loop(
        lambda: DBOS.send_async(
            handle.workflow_id, {"tool_call_id": "a2", "approved": False}, "helix.approval"
        )
    )
    await helix.deny(handle.session_id, "a1", reason="no")
    result = await handle.result()
    assert result.status == "completed"
    assert ran == ["b"]
    by_id = {
        m.tool_call_id: m for m in await helix.get_messages(handle.session_id) if m.role == "tool"
    }
    assert [k for k in by_id] == ["a1", "a2", "c1"]
    assert (
        by_id["a1"].is_error
        and not by_id["a2"].is_error
        and json.loads(by_id["c1"].content) == {"yes": True}
    )


async def test_answer_from_another_process_with_dbos_client(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("x", "delete_file", {"path": "p"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    script = (
        "import sys; from dbos import DBOSClient\n"
        "c = DBOSClient(system_database_url=sys.argv[1])\n"
        "c.send(sys.argv[2], {'tool_call_id': 'x', 'approved': True, 'reason': 'from afar'}, 'helix.approval')\n"
        "c.destroy()\n"
    )
    proc = forkserver.run(
        [sys.executable, "-c", script, libpq_url(database_url), handle.workflow_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (await handle.result()).status == "completed"
    assert ran == ["p"]


async def test_interrupt_then_resume(helix, make_agent, mock_llm, database_url):
    release = threading.Event()

    @tool
    def long_task() -> str:
        """Takes a while."""
        release.wait(30)
        return "finished"

    agent = make_agent(tools=[long_task])
    mock_llm.add_responses(calls(("l", "long_task", {})), agent=agent.name)
    handle = await helix.execute(agent, "work")
    for _ in range(200):
        if (
            sql(
                database_url,
                "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
                handle.workflow_id,
            )[0][0]
            >= 1
        ):
            break
        await asyncio.sleep(0.05)
    await helix.interrupt(handle.session_id, reason="user pressed stop")
    release.set()
    result = await handle.result()
    assert result.status == "interrupted" and "user pressed stop" in result.error
    messages = await helix.get_messages(handle.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool"], (
        "the step in flight completes, the transcript is consistent"
    )
    with pytest.raises(RunNotActiveError):
        await helix.interrupt(handle.session_id)

    mock_llm.add_response({"type": "text", "content": "resumed and done"}, agent=agent.name)
    resumed = await (await helix.resume(handle.session_id, "please continue")).result()
    assert resumed.status == "completed" and resumed.output == "resumed and done"
    assert [r.status for r in await helix.list_runs(handle.session_id)] == [
        "interrupted",
        "completed",
    ]


async def test_abort_pairs_dangling_calls_and_the_session_continues(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(calls(("d", "delete_file", {"path": "q"})), agent=agent.name)
    handle = await helix.execute(agent, "delete q")
    await wait_until_waiting(helix, handle.session_id)
    await helix.abort(handle.session_id, reason="changed my mind")
    result = await handle.result()
    assert result.status == "aborted" and "changed my mind" in result.error
    assert ran == []
    assert sql(
        database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", handle.run_id
    ) == [("aborted",)]
    messages = await helix.get_messages(handle.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool"], (
        "the model's request was stored before the wait; abort paired it"
    )
    assert [c.id for c in messages[1].tool_calls] == ["d"]
    assert messages[2].tool_call_id == "d" and messages[2].is_error
    assert messages[2].content == "Run aborted: changed my mind"
    usage = sql(database_url, "SELECT kind FROM helix.usage WHERE run_id = %s", handle.run_id)
    assert usage == [("llm",)], "the model call's tokens are recorded too"

    mock_llm.add_response({"type": "text", "content": "fresh start"}, agent=agent.name)
    again = await (await helix.execute(agent, "hello again", session_id=handle.session_id)).result()
    assert again.status == "completed"
    assert [r.status for r in await helix.list_runs(handle.session_id)] == ["aborted", "completed"]


async def test_retry_a_failed_run_with_a_fresh_step_budget(helix, make_agent, mock_llm):
    @tool
    def step() -> str:
        """One step."""
        return "ok"

    agent = make_agent(tools=[step], max_steps=1)
    mock_llm.add_responses(calls(("s1", "step", {})), agent=agent.name)
    failed = await (await helix.execute(agent, "go")).result()
    assert failed.status == "failed"
    mock_llm.add_response({"type": "text", "content": "done now"}, agent=agent.name)
    retried = await (await helix.retry(failed.session_id)).result()
    assert retried.status == "completed" and retried.output == "done now"
    with pytest.raises(RunNotActiveError):
        await helix.retry(failed.session_id)


async def test_suspend_and_resume_hooks(helix, make_agent, mock_llm):
    events: list[str] = []
    hooks = AgentHooks(
        on_agent_suspended=lambda e: events.append(f"suspended:{e.details['reason']}"),
        on_agent_resumed=lambda e: events.append(f"resumed:{e.details['tool_call_ids']}"),
    )
    agent = make_agent(tools=[make_deleter([])], hooks=hooks)
    mock_llm.add_responses(
        calls(("h", "delete_file", {"path": "z"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await wait_until_waiting(helix, handle.session_id)
    # The hook fires in its own step just after the suspend is written: wait for it too.
    for _ in range(400):
        if events:
            break
        await asyncio.sleep(0.05)
    assert events == ["suspended:approval"]
    await helix.approve(handle.session_id, "h")
    await handle.result()
    assert events == ["suspended:approval", "resumed:['h']"]


async def test_while_a_run_waits_the_models_request_and_its_tokens_are_in_sql(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("w1", "delete_file", {"path": "tmp"})),
        {"type": "text", "content": "deleted"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "clean up")
    await wait_until_waiting(helix, handle.session_id)
    waiting = await helix.get_messages(handle.session_id)
    assert [m.role for m in waiting] == ["user", "assistant"]
    assert [(c.id, c.name) for c in waiting[1].tool_calls] == [("w1", "delete_file")]
    assert sql(
        database_url, "SELECT kind, step FROM helix.usage WHERE run_id = %s", handle.run_id
    ) == [("llm", 1)]
    assert (await helix.get_run(handle.run_id)).step_count == 1

    await helix.approve(handle.session_id, "w1")
    result = await handle.result()
    assert result.status == "completed" and ran == ["tmp"]
    rows = sql(
        database_url,
        "SELECT seq, role FROM helix.messages WHERE session_id = %s ORDER BY seq",
        handle.session_id,
    )
    assert rows == [(1, "user"), (2, "assistant"), (3, "tool"), (4, "assistant")]
    usage = sql(
        database_url,
        "SELECT kind, count(*) FROM helix.usage WHERE run_id = %s GROUP BY kind ORDER BY kind",
        handle.run_id,
    )
    assert usage == [("llm", 2), ("tool", 1)]


async def test_interrupting_a_run_that_waits_for_approval_ends_the_wait_at_once(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[make_deleter(ran)])
    mock_llm.add_responses(
        calls(("i1", "delete_file", {"path": "x"}), ("i2", "delete_file", {"path": "y"})),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete both")
    await wait_until_waiting(helix, handle.session_id, count=2)
    await helix.approve(handle.session_id, "i1")  # answered, but interrupted before it runs
    await helix.interrupt(handle.session_id, reason="stop now")
    result = await asyncio.wait_for(handle.result(), timeout=15)
    assert result.status == "interrupted" and result.error == "Interrupted: stop now"
    assert ran == [], "no approved call runs after an interrupt"
    statuses = sql(
        database_url,
        "SELECT tool_call_id, status FROM helix.tool_calls WHERE run_id = %s ORDER BY tool_call_id",
        handle.run_id,
    )
    assert statuses == [("i1", "approved"), ("i2", "interrupted")]
    messages = await helix.get_messages(handle.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert {m.content for m in messages[2:]} == {"Interrupted: stop now"}
    chunks = sql(
        database_url,
        "SELECT type FROM helix.stream_chunks WHERE run_id = %s AND type LIKE 'run_%%'",
        handle.run_id,
    )
    assert ("run_interrupted",) in chunks

    mock_llm.add_response({"type": "text", "content": "ok, stopped"}, agent=agent.name)
    resumed = await (await helix.resume(handle.session_id, "never mind")).result()
    assert resumed.status == "completed" and resumed.output == "ok, stopped"


async def test_an_interrupt_sent_just_before_a_wait_keeps_the_run_from_suspending(
    helix, make_agent, mock_llm
):
    release = threading.Event()

    @tool
    def prepare() -> str:
        """Runs before the gated call, in the same step."""
        release.wait(30)
        return "ready"

    ran: list[str] = []
    agent = make_agent(tools=[prepare, make_deleter(ran)])
    mock_llm.add_responses(
        calls(("p", "prepare", {}), ("d", "delete_file", {"path": "z"})), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    for _ in range(100):
        if len(await helix.get_messages(handle.session_id)) > 1:
            break
        await asyncio.sleep(0.05)
    await helix.interrupt(handle.session_id, reason="changed plans")
    release.set()  # `prepare` ends; the approval of `delete_file` would wait next
    result = await asyncio.wait_for(handle.result(), timeout=15)
    assert result.status == "interrupted" and result.error == "Interrupted: changed plans"
    assert ran == [] and await helix.pending_tool_calls(handle.session_id) == []
