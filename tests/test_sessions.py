"""Sessions, runs, bad input and the DBOS mapping, on the real runtime."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import pytest
from dbos import DBOS
from helpers import calls, sql
from pydantic import BaseModel
from sqlalchemy.exc import TimeoutError as PoolTimeout

from helix_dbos import (
    AgentAlreadyRunningError,
    AgentNotRegisteredError,
    HelixDBOS,
    RunNotFoundError,
    SessionNotFoundError,
    tool,
)
from helix_dbos.errors import SessionAgentMismatchError
from helix_dbos.runtime.loop import agent_loop, final_write, step_ahead
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.process_runtime import is_transient_db_error
from helix_dbos.store import repository as repo


class Verdict(BaseModel):
    verdict: str


async def test_completed_session_continues_as_a_new_turn_with_its_memory(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(output_schema=Verdict)
    mock_llm.add_responses(
        calls(("f1", "__finish__", {"verdict": "first"})),
        calls(("f2", "__finish__", {"verdict": "second"})),
        agent=agent.name,
    )
    first = await (await helix.execute(agent, "one")).result()
    second = await (await helix.execute(agent, "two", session_id=first.session_id)).result()

    assert (first.output, second.output) == ({"verdict": "first"}, {"verdict": "second"})
    assert second.session_id == first.session_id and second.run_id != first.run_id
    sent = [(m.role, m.content) for m in mock_llm.get_last_input().messages[1:]]
    assert sent[0] == ("user", "one") and sent[-1] == ("user", "two")
    assert ("tool", '{"acknowledged":true}') in sent, "the first turn's __finish__ is paired"
    runs = await helix.list_runs(first.session_id)
    assert [(r.turn, r.status) for r in runs] == [(1, "completed"), (2, "completed")]
    assert await helix.get_current_run(first.session_id) is None
    rows = sql(
        database_url,
        "SELECT turn, status, step_count FROM helix.runs WHERE session_id = %s ORDER BY turn",
        first.session_id,
    )
    assert rows == [(1, "completed", 1), (2, "completed", 1)]


async def test_execute_on_a_running_session_raises(helix, make_agent, mock_llm):
    release = threading.Event()

    @tool
    def wait_for_release() -> str:
        """Block until released."""
        release.wait(30)
        return "released"

    agent = make_agent(tools=[wait_for_release])
    mock_llm.add_responses(
        calls(("w", "wait_for_release", {})), {"type": "text", "content": "done"}, agent=agent.name
    )
    handle = await helix.execute(agent, "start")
    try:
        with pytest.raises(AgentAlreadyRunningError, match="already has a run in progress"):
            await helix.execute(agent, "again", session_id=handle.session_id)
        current = await helix.get_current_run(handle.session_id)
        assert (
            current is not None and current.run_id == handle.run_id and current.status == "running"
        )
    finally:
        release.set()
    assert (await handle.result()).output == "done"


async def test_unknown_ids_and_agents_give_clear_errors(helix, make_agent):
    with pytest.raises(SessionNotFoundError, match="Session 'nope' does not exist"):
        await helix.get_session("nope")
    with pytest.raises(SessionNotFoundError):
        await helix.get_messages("nope")
    with pytest.raises(SessionNotFoundError):
        await helix.list_runs("nope")
    with pytest.raises(RunNotFoundError):
        await helix.get_run("run_nope")
    with pytest.raises(AgentNotRegisteredError, match="not registered"):
        await helix.execute("ghost_agent", "hi")


async def test_a_session_belongs_to_one_agent(helix, make_agent, mock_llm):
    a, b = make_agent(), make_agent()
    mock_llm.add_response({"type": "text", "content": "hi"}, agent=a.name)
    first = await (await helix.execute(a, "x")).result()
    with pytest.raises(SessionAgentMismatchError):
        await helix.execute(b, "y", session_id=first.session_id)


async def test_unknown_tool_and_malformed_arguments_go_back_to_the_model(
    helix, make_agent, mock_llm
):
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        calls(
            ("u", "delete_everything", {}),
            ("m", "add", {"a": "not a number"}),
            ("r", "add", {"__raw_arguments__": "{bad", "__parse_error__": "Expecting value"}),
        ),
        calls(("ok", "add", {"a": 2, "b": 3})),
        {"type": "text", "content": "5"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "add")).result()
    assert result.status == "completed" and result.output == "5"
    by_id = {
        m.tool_call_id: m for m in await helix.get_messages(result.session_id) if m.role == "tool"
    }
    assert (
        by_id["u"].is_error
        and by_id["u"].content == "Unknown tool 'delete_everything'. Available tools: add"
    )
    assert (
        by_id["m"].is_error
        and "Invalid arguments for tool 'add'" in by_id["m"].content
        and "b: Field required" in by_id["m"].content
    )
    assert by_id["r"].is_error and "not valid JSON" in by_id["r"].content
    assert json.loads(by_id["ok"].content) == 5


async def test_parallel_tool_calls_run_concurrently_in_call_order(
    helix, make_agent, mock_llm, database_url
):
    arrived: list[str] = []
    all_here = asyncio.Event()  # a barrier of three (asyncio.Barrier is 3.11+)
    loops = set()

    @tool
    async def meet(name: str) -> str:
        """Wait until all three calls are running at once."""
        loops.add(id(asyncio.get_running_loop()))
        arrived.append(name)
        if len(arrived) == 3:
            all_here.set()
        await asyncio.wait_for(all_here.wait(), timeout=10)
        return name

    agent = make_agent(tools=[meet])
    mock_llm.add_responses(
        calls(*[(f"p{i}", "meet", {"name": f"n{i}"}) for i in range(3)]),
        {"type": "text", "content": "met"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "meet")).result()
    assert result.status == "completed", result.error
    tool_msgs = [m for m in await helix.get_messages(result.session_id) if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == ["p0", "p1", "p2"]
    workflow_id = f"helix-{result.run_id}"
    steps = sql(
        database_url,
        "SELECT function_id, function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s ORDER BY function_id",
        workflow_id,
    )
    tool_steps = [(fid, name) for fid, name in steps if name.startswith("helix.tool:")]
    assert [name for _, name in tool_steps] == ["helix.tool:meet"] * 3
    assert [fid for fid, _ in tool_steps] == sorted(fid for fid, _ in tool_steps)


async def test_agent_runs_as_a_child_workflow_of_a_user_workflow(
    helix: HelixDBOS, make_agent, mock_llm
):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "from child"}, agent=agent.name)

    result_holder = {}

    async def parent(message: str) -> str:
        handle = await helix.execute(agent, message)
        result = await handle.result()
        result_holder["run_id"] = result.run_id
        return result.output

    wf = DBOS.workflow(name=f"user_parent_{agent.name}")(parent)

    async def start():
        return await DBOS.start_workflow_async(wf, "hello")

    parent_handle = await on_target_loop(start)
    assert await on_target_loop(parent_handle.get_result) == "from child"
    run = await helix.get_run(result_holder["run_id"])
    status = await DBOS.get_workflow_status_async(run.workflow_id)
    assert status is not None and status.status == "SUCCESS"
    assert status.parent_workflow_id == parent_handle.get_workflow_id()


def test_sync_api(helix, make_agent, mock_llm):
    @tool
    def shout(word: str) -> str:
        """Shout a word."""
        return word.upper()

    agent = make_agent(tools=[shout])
    mock_llm.add_responses(
        calls(("s", "shout", {"word": "hi"})), {"type": "text", "content": "HI"}, agent=agent.name
    )
    handle = helix.execute_sync(agent, "shout hi")
    result = handle.result_sync()
    assert result.status == "completed" and result.output == "HI"
    assert [m.role for m in helix.get_messages_sync(result.session_id)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert helix.get_usage_sync(session_id=result.session_id).tool_calls == 1


async def test_reopening_a_legacy_session_heals_an_unpaired_finish(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(output_schema=Verdict)
    session_id = f"legacy_{agent.name}"
    sql(
        database_url,
        "INSERT INTO helix.sessions (session_id, agent_name, status, turn_count) VALUES (%s, %s, 'completed', 1)",
        session_id,
        agent.name,
    )
    sql(
        database_url,
        "INSERT INTO helix.messages (session_id, seq, role, content) VALUES (%s, 1, 'user', 'old question')",
        session_id,
    )
    sql(
        database_url,
        "INSERT INTO helix.messages (session_id, seq, role, tool_calls) VALUES (%s, 2, 'assistant', %s::jsonb)",
        session_id,
        json.dumps([{"id": "legacy_f", "name": "__finish__", "arguments": {"verdict": "old"}}]),
    )
    mock_llm.add_response(calls(("f", "__finish__", {"verdict": "new"})), agent=agent.name)
    result = await (await helix.execute(agent, "new question", session_id=session_id)).result()
    assert result.output == {"verdict": "new"}
    sent = mock_llm.get_last_input().messages
    assert [(m.role, m.tool_call_id) for m in sent[1:4]] == [
        ("user", None),
        ("assistant", None),
        ("tool", "legacy_f"),
    ]
    assert sent[4].content == "new question"


@pytest.mark.parametrize(
    ("layout", "unpaired"),
    [
        # the legacy shape: the run's last message is its __finish__ call
        ([("user", None), ("assistant", ["f"])], ["f"]),
        # a call beside it was answered after it: the walk back passes that result
        ([("user", None), ("assistant", ["p", "f"]), ("tool", "p")], ["f"]),
        # healed already, or not the last assistant message: nothing to heal
        ([("assistant", ["f"]), ("tool", "f")], []),
        ([("assistant", ["f"]), ("user", None), ("assistant", None)], []),
        ([("user", None)], []),
        ([], []),
    ],
)
async def test_unpaired_finish_calls_are_those_of_the_last_assistant_message(
    helix, database_url, layout, unpaired
):
    session_id = f"unpaired_{uuid.uuid4().hex}"
    sql(
        database_url,
        "INSERT INTO helix.sessions (session_id, agent_name, status) VALUES (%s, 'x', 'completed')",
        session_id,
    )
    for seq, (role, what) in enumerate(layout, 1):
        names = {"f": "__finish__", "p": "ping"}
        calls_ = [{"id": c, "name": names[c], "arguments": {}} for c in what or []]
        sql(
            database_url,
            "INSERT INTO helix.messages (session_id, seq, role, content, tool_calls, tool_call_id) "
            "VALUES (%s, %s, %s, %s, %s::jsonb, %s)",
            session_id,
            seq * 10,  # seqs with gaps, as a rollback leaves them
            role,
            "text" if role != "assistant" else None,
            json.dumps(calls_) if role == "assistant" and calls_ else None,
            what if role == "tool" else None,
        )

    async def read() -> list[str]:
        async with helix.runtime.engine.connect() as conn:
            return await repo.unpaired_finish_call_ids(conn, session_id)

    assert await on_target_loop(read) == unpaired


async def test_usage_is_queryable_per_model_with_plain_sql(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent()
    mock_llm.add_response(
        {
            "type": "text",
            "content": "hi",
            "usage": {
                "model": "m-test",
                "input_tokens": 11,
                "output_tokens": 7,
                "cache_read_tokens": 3,
                "reasoning_tokens": 2,
            },
        },
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "hi")).result()
    rows = sql(
        database_url,
        "SELECT model, count(*), sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), sum(reasoning_tokens) "
        "FROM helix.usage WHERE session_id = %s AND kind = 'llm' GROUP BY model",
        result.session_id,
    )
    assert rows == [("m-test", 1, 11, 7, 3, 2)]


async def test_an_internal_error_fails_the_run_instead_of_leaving_it_running(
    helix, make_agent, mock_llm, monkeypatch
):
    def broken(*args):
        raise RuntimeError("a bug in the loop")

    # both where the LLM step takes a step early and where the workflow takes it
    monkeypatch.setattr(step_ahead, "reply_rows", broken)
    monkeypatch.setattr(agent_loop, "reply_rows", broken)
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "never seen"}, agent=agent.name)
    result = await asyncio.wait_for((await helix.execute(agent, "hi")).result(), timeout=30)
    assert (
        result.status == "failed"
        and result.error == "Internal error: RuntimeError: a bug in the loop"
    )
    assert (await helix.get_session(result.session_id)).status == "failed"


async def test_a_transient_database_error_in_a_commit_is_retried(
    helix, make_agent, mock_llm, monkeypatch
):
    assert is_transient_db_error(PoolTimeout("QueuePool limit of size 10 overflow 10 reached"))
    assert is_transient_db_error(
        RuntimeError("QueuePool limit of size 10 overflow 10 reached, connection timed out")
    )
    assert not is_transient_db_error(ValueError("bad input"))

    real_commit = final_write.commit_final
    failures = []

    async def flaky_commit(session, commit, pending=None, **options):
        if not failures:
            failures.append(commit.step)
            raise PoolTimeout(
                "QueuePool limit of size 10 overflow 10 reached, connection timed out"
            )
        return await real_commit(session, commit, pending, **options)

    monkeypatch.setattr(final_write, "commit_final", flaky_commit)
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "made it"}, agent=agent.name)
    result = await asyncio.wait_for((await helix.execute(agent, "hi")).result(), timeout=30)
    assert failures == [1]
    assert result.status == "completed" and result.output == "made it"
    assert [m.role for m in await helix.get_messages(result.session_id)] == ["user", "assistant"]


async def test_the_model_sees_exactly_the_stored_transcript_at_every_step(
    helix, make_agent, mock_llm
):
    """Each LLM step writes the previous step and takes it into its cached transcript
    without reading it back: what the model is sent must equal what a fresh read gives."""

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text.upper()

    agent = make_agent(tools=[echo])
    mock_llm.add_responses(
        calls(("e1", "echo", {"text": "one"})),
        calls(("e2", "echo", {"text": "two"}), ("e3", "echo", {"text": "three"})),
        {"type": "text", "content": "echoed"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "echo things")).result()
    assert result.status == "completed", result.error
    sent = [m for m in mock_llm.get_last_input().messages if m.role != "system"]
    stored = await helix.get_messages(result.session_id)
    assert len(sent) == len(stored) - 1 == 6  # the final reply is stored, not sent
    for got, want in zip(sent, stored, strict=False):
        assert got.model_dump(exclude={"id", "created_at"}) == want.model_dump(
            exclude={"id", "created_at"}
        )
