"""Ephemeral sub-agents (seed 002, issue 13): a child workflow per call, its own session,
its output as the tool result, usage rolled up, one stream for the whole tree."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import uuid
from pathlib import Path

import forkserver
import httpx
import pytest
from dbos import DBOS, SetWorkflowID
from helpers import calls, cli, sql
from live_server import serve
from pydantic import BaseModel

from helix_dbos import Agent, AgentHooks, TerminatingConfig, ToolContext, sub_agent_tool, tool
from helix_dbos.errors import ToolDefinitionError
from helix_dbos.orchestration.types import ToolCall
from helix_dbos.runtime.children.subagents import ChildRun
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.steps.commit import StepCommit
from helix_dbos.server import create_app

REPO = Path(__file__).resolve().parent.parent


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def tool_results(messages) -> dict[str, tuple[str | None, bool]]:
    return {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}


def assert_every_call_paired(messages) -> None:
    asked = [c.id for m in messages if m.role == "assistant" for c in m.tool_calls]
    answered = [m.tool_call_id for m in messages if m.role == "tool"]
    assert sorted(asked) == sorted(answered)


def child_sessions(database_url: str, parent_session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT session_id, agent_name, status, root_session_id, output FROM helix.sessions "
        "WHERE parent_session_id = %s ORDER BY created_at, session_id",
        parent_session_id,
    )


async def test_a_sub_agent_runs_in_its_own_session_and_its_output_is_the_tool_result(
    helix, make_agent, mock_llm, database_url
):
    child = make_agent(system_prompt="You research.")
    parent = make_agent(tools=[sub_agent_tool(child)])
    tool_name = f"subagent__{child.name}"
    mock_llm.add_response(
        calls(("s1", tool_name, {"message": "find the capital"})), agent=parent.name
    )
    mock_llm.add_response(text("Paris"), agent=child.name)
    mock_llm.add_response(text("The capital is Paris."), agent=parent.name)

    result = await (await helix.execute(parent, "What is the capital?")).result()

    assert result.status == "completed", result.error
    assert result.output == "The capital is Paris."
    messages = await helix.get_messages(result.session_id)
    assert tool_results(messages) == {"s1": ("Paris", False)}
    assert_every_call_paired(messages)
    [(child_id, agent_name, status, root, output)] = child_sessions(database_url, result.session_id)
    assert (agent_name, status, root, output) == (
        child.name,
        "completed",
        result.session_id,
        "Paris",
    )
    child_messages = await helix.get_messages(child_id)
    assert [(m.role, m.content) for m in child_messages] == [
        ("user", "find the capital"),
        ("assistant", "Paris"),
    ]
    # The model saw the sub-agent as a tool with a `message` parameter.
    first = next(r for r in mock_llm.inputs if r.agent_name == parent.name)
    spec = next(t for t in first.tools if t.name == tool_name)
    assert list(spec.parameters["properties"]) == ["message"]
    # The parent's `subagent` usage row carries the child's tokens, duration and success.
    [(kind, tool, tokens_in, tokens_out, duration, success)] = sql(
        database_url,
        "SELECT kind, tool_name, input_tokens, output_tokens, duration_ms, success "
        "FROM helix.usage WHERE session_id = %s AND kind = 'subagent'",
        result.session_id,
    )
    [(child_in, child_out)] = sql(
        database_url,
        "SELECT sum(input_tokens), sum(output_tokens) FROM helix.usage WHERE session_id = %s",
        child_id,
    )
    assert (kind, tool, success) == ("subagent", tool_name, True)
    assert (tokens_in, tokens_out) == (child_in, child_out) and child_in > 0
    assert duration > 0
    own = await helix.get_usage(session_id=result.session_id)
    tree = await helix.get_usage(session_id=result.session_id, include_children=True)
    assert own.subagent_calls == 1 and own.llm_calls == 2
    assert tree.llm_calls == 3
    assert tree.input_tokens == own.input_tokens + child_in


async def test_sub_agent_calls_in_one_response_run_concurrently(helix, make_agent, mock_llm):
    inside: list[str] = []
    both_inside = asyncio.Event()

    @tool
    async def dig(topic: str) -> str:
        """Research a topic."""
        inside.append(topic)
        if len(inside) == 2:
            both_inside.set()
        await asyncio.wait_for(both_inside.wait(), timeout=20)  # only if both run at once
        return f"notes on {topic}"

    researcher = make_agent(tools=[dig])
    lead = make_agent(tools=[sub_agent_tool(researcher, name="researcher")])
    mock_llm.add_response(
        calls(
            ("a", "subagent__researcher", {"message": "cats"}),
            ("b", "subagent__researcher", {"message": "dogs"}),
        ),
        agent=lead.name,
    )

    def researcher_reply(request):
        topic = next(m.content for m in request.messages if m.role == "user")
        if request.messages[-1].role == "tool":
            return text(f"done: {request.messages[-1].content}")
        return calls((f"d-{topic}", "dig", {"topic": topic}))

    mock_llm.set_responder(researcher_reply)
    mock_llm.add_response(text("summary"), agent=lead.name)
    try:
        result = await (await helix.execute(lead, "Compare cats and dogs")).result()
    finally:
        mock_llm.set_responder(None)

    assert result.status == "completed", result.error
    assert sorted(inside) == ["cats", "dogs"]
    results = tool_results(await helix.get_messages(result.session_id))
    assert results == {"a": ("done: notes on cats", False), "b": ("done: notes on dogs", False)}


async def test_sub_agents_run_even_when_a_finish_with_tool_in_the_same_response_succeeds(
    helix, make_agent, mock_llm, database_url
):
    @tool(finish_with=True)
    def submit(answer: str) -> dict:
        """Submit the final answer."""
        return {"answer": answer}

    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child), submit])
    mock_llm.add_response(
        calls(
            ("f", "submit", {"answer": "42"}),
            ("s", f"subagent__{child.name}", {"message": "double-check"}),
        ),
        agent=parent.name,
    )
    mock_llm.add_response(text("checked"), agent=child.name)

    result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed" and result.output == {"answer": "42"}
    results = tool_results(await helix.get_messages(result.session_id))
    assert results["s"] == ("checked", False)
    [(_, _, status, _, _)] = child_sessions(database_url, result.session_id)
    assert status == "completed"


async def test_a_failing_child_comes_back_as_a_tool_error(helix, make_agent, mock_llm):
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="flaky")])
    mock_llm.add_response(calls(("s", "subagent__flaky", {"message": "try"})), agent=parent.name)
    mock_llm.add_response({"type": "error", "error": "provider exploded"}, agent=child.name)
    mock_llm.add_response(text("the helper failed"), agent=parent.name)

    result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed"
    content, is_error = tool_results(await helix.get_messages(result.session_id))["s"]
    assert is_error and content == f"Sub-agent '{child.name}' failed: provider exploded"
    assert (await helix.get_usage(session_id=result.session_id)).subagent_calls == 1


async def test_a_dispatch_failure_is_a_tool_error_with_an_error_chunk_and_log_event(
    helix, make_agent, mock_llm, database_url, caplog
):
    unregistered = Agent(f"nowhere_{id(mock_llm)}")
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(unregistered, name="ghost"), sub_agent_tool(child)])
    mock_llm.add_response(
        calls(
            ("g", "subagent__ghost", {"message": "boo"}),
            ("c", f"subagent__{child.name}", {"message": "real work"}),
        ),
        agent=parent.name,
    )
    mock_llm.add_response(text("real result"), agent=child.name)
    mock_llm.add_response(text("ok"), agent=parent.name)

    with caplog.at_level(logging.ERROR, logger="helix_dbos"):
        result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed"
    results = tool_results(await helix.get_messages(result.session_id))
    content, is_error = results["g"]
    assert is_error and "could not be dispatched" in content and "not registered" in content
    assert results["c"] == ("real result", False)  # the sibling is unaffected
    events = [r for r in caplog.records if getattr(r, "event", None) == "subagent.dispatch_failed"]
    assert len(events) == 1 and events[0].levelno == logging.ERROR
    [(payload,)] = sql(
        database_url,
        "SELECT payload FROM helix.stream_events WHERE session_id = %s AND type = 'error'",
        result.session_id,
    )
    assert payload["tool_call_id"] == "g" and "could not be dispatched" in payload["error"]
    [(success,)] = sql(
        database_url,
        "SELECT success FROM helix.usage WHERE session_id = %s AND tool_name = 'subagent__ghost'",
        result.session_id,
    )
    assert success is False


async def test_a_child_whose_workflow_cannot_start_is_a_dispatch_failure_beside_its_sibling(
    helix, make_agent, mock_llm, database_url, caplog
):
    """Seed 002's "child workflow start failure": the call is a tool error the model sees,
    with an error chunk and one ERROR `subagent.dispatch_failed`; the opened child run is
    closed, not left running; its sibling in the same response runs as usual. The start
    fails for real: the child's workflow id is taken by another DBOS workflow."""

    async def squatter() -> None:
        return None

    taken_by = DBOS.workflow(name=f"squatter_{uuid.uuid4().hex[:8]}")(squatter)
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="helper")])
    ready = threading.Event()

    async def respond(request):
        if request.agent_name == child.name:
            return text(f"did {request.messages[-1].content}")
        if not any(m.role == "tool" for m in request.messages):
            await asyncio.to_thread(ready.wait, 30)
            return calls(
                ("x", "subagent__helper", {"message": "blocked"}),
                ("y", "subagent__helper", {"message": "free"}),
            )
        return text("reported")

    mock_llm.set_responder(respond)
    try:
        with caplog.at_level(logging.ERROR, logger="helix_dbos"):
            handle = await helix.execute(parent, "go")
            step_one = StepCommit(handle.session_id, handle.run_id, parent.name, 1)
            call = ToolCall(id="x", name="subagent__helper", arguments={})
            blocked = ChildRun.of(step_one, call, child.name, "blocked")

            async def occupy() -> None:
                with SetWorkflowID(blocked.workflow_id):
                    await DBOS.start_workflow_async(taken_by)

            await on_target_loop(occupy)
            ready.set()
            result = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        mock_llm.set_responder(None)
        ready.set()

    assert result.status == "completed" and result.output == "reported", result.error
    results = tool_results(await helix.get_messages(result.session_id))
    content, is_error = results["x"]
    assert is_error and content.startswith(
        f"Sub-agent '{child.name}' could not be dispatched: its workflow could not be started"
    )
    assert results["y"] == ("did free", False)  # the sibling is unaffected
    last = [r for r in mock_llm.inputs if r.agent_name == parent.name][-1]
    assert [m.content for m in last.messages if m.tool_call_id == "x"] == [content]
    events = [r for r in caplog.records if getattr(r, "event", None) == "subagent.dispatch_failed"]
    assert [(e.levelno, e.tool_call_id) for e in events] == [(logging.ERROR, "x")]
    [(payload,)] = sql(
        database_url,
        "SELECT payload FROM helix.stream_events WHERE session_id = %s AND type = 'error'",
        result.session_id,
    )
    assert payload["tool_call_id"] == "x" and payload["error"] == content
    # The child's run was opened before its start failed: it is closed, not left running.
    [(status, error)] = sql(
        database_url,
        "SELECT status, error FROM helix.runs WHERE run_id = %s",
        blocked.run_id,
    )
    assert status == "failed" and "could not be started" in error
    assert (await helix.get_session(blocked.session_id)).status == "failed"


async def test_sub_agent_calls_fire_the_tool_hooks_in_canonical_order(helix, make_agent, mock_llm):
    """Seed 002: DBOS fires the canonical sequence (beforeTool -> execute -> onMessage ->
    afterTool) for each call, inline; a sub-agent call's execute is its child's run, and
    a call that gets no child (here: its agent is not registered) fires them too."""
    events: list[tuple] = []
    hooks = AgentHooks(
        before_tool=lambda e: events.append(("before", e.call.id)),
        on_message=lambda e: (
            events.append(("message", e.message.tool_call_id)) if e.message.role == "tool" else None
        ),
        after_tool=lambda e: events.append(("after", e.call.id, e.success, e.result, e.error)),
    )
    child = make_agent(hooks=AgentHooks(before_llm_call=lambda e: events.append(("child_llm",))))
    ghost = Agent(f"ghost_{uuid.uuid4().hex[:8]}")
    parent = make_agent(
        tools=[sub_agent_tool(child, name="helper"), sub_agent_tool(ghost, name="ghost")],
        hooks=hooks,
    )
    mock_llm.add_responses(
        calls(
            ("s1", "subagent__helper", {"message": "work"}),
            ("s2", "subagent__ghost", {"message": "boo"}),
        ),
        text("done"),
        agent=parent.name,
    )
    mock_llm.add_response(text("worked"), agent=child.name)

    result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed", result.error
    ghost_error = tool_results(await helix.get_messages(result.session_id))["s2"][0]
    for_s1 = [e for e in events if e[0] == "child_llm" or e[1] == "s1"]
    assert for_s1 == [
        ("before", "s1"),
        ("child_llm",),
        ("message", "s1"),
        ("after", "s1", True, "worked", None),
    ]
    assert [e for e in events if e[0] != "child_llm" and e[1] == "s2"] == [
        ("before", "s2"),
        ("message", "s2"),
        ("after", "s2", False, None, ghost_error),
    ]
    assert events.index(("before", "s2")) < events.index(("child_llm",)), "before_tool first"


async def test_seed_001_sub_agent_calls_map_to_sub_agent_tools_or_get_a_clear_error(
    helix, make_agent, mock_llm
):
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child)])
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "toolCalls": [],
            "subAgentCalls": [
                {"id": "s1", "agentType": child.name, "input": {"message": "summarize"}},
                {"id": "s2", "agentType": "nobody", "input": {"message": "?"}},
            ],
        },
        agent=parent.name,
    )
    mock_llm.add_response(text("a summary"), agent=child.name)
    mock_llm.add_response(text("done"), agent=parent.name)

    result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed"
    messages = await helix.get_messages(result.session_id)
    assert_every_call_paired(messages)
    results = tool_results(messages)
    assert results["s1"] == ("a summary", False)
    content, is_error = results["s2"]
    assert is_error and content.startswith("Unknown tool 'subagent__nobody'")


async def test_a_child_with_an_input_schema_takes_it_as_the_tool_arguments(
    helix, make_agent, mock_llm
):
    class Query(BaseModel):
        topic: str
        depth: int = 1

    child = make_agent(input_schema=Query)
    parent = make_agent(tools=[sub_agent_tool(child, name="q", description="Ask q")])
    mock_llm.add_responses(
        calls(("bad", "subagent__q", {"message": "no topic"})),
        calls(("ok", "subagent__q", {"topic": "owls", "depth": 2})),
        agent=parent.name,
    )
    mock_llm.add_response(text("owl facts"), agent=child.name)
    mock_llm.add_response(text("done"), agent=parent.name)

    result = await (await helix.execute(parent, "go")).result()

    assert result.status == "completed"
    first = next(r for r in mock_llm.inputs if r.agent_name == parent.name)
    spec = next(t for t in first.tools if t.name == "subagent__q")
    assert spec.description == "Ask q" and set(spec.parameters["properties"]) == {"topic", "depth"}
    results = tool_results(await helix.get_messages(result.session_id))
    assert results["bad"][1] and "Invalid arguments for tool 'subagent__q'" in results["bad"][0]
    assert results["ok"] == ("owl facts", False)
    child_request = next(r for r in mock_llm.inputs if r.agent_name == child.name)
    assert json.loads(child_request.messages[-1].content) == {"topic": "owls", "depth": 2}


def test_sub_agent_tool_names_must_be_tool_names():
    with pytest.raises(ToolDefinitionError):
        sub_agent_tool(Agent("x"), name="has space")


async def test_the_root_stream_carries_the_childs_chunks_tagged_with_its_session_run_and_agent(
    helix, make_agent, mock_llm, database_url
):
    @tool
    async def note(topic: str, ctx: ToolContext) -> str:
        """Take a note."""
        await ctx.emit("noted", {"topic": topic})
        return "noted"

    child = make_agent(tools=[note])
    parent = make_agent(tools=[sub_agent_tool(child, name="kid")])
    mock_llm.add_response(calls(("s", "subagent__kid", {"message": "x"})), agent=parent.name)
    mock_llm.add_responses(calls(("n", "note", {"topic": "t"})), text("kid done"), agent=child.name)
    mock_llm.add_response(text("parent done"), agent=parent.name)

    result = await (await helix.execute(parent, "go")).result()
    assert result.status == "completed"
    [(child_session, child_run)] = sql(
        database_url,
        "SELECT r.session_id, r.run_id FROM helix.runs r JOIN helix.sessions s "
        "ON s.session_id = r.session_id WHERE s.parent_session_id = %s",
        result.session_id,
    )

    root = [c async for c in helix.stream(result.session_id, follow=False)]
    mine = [c for c in root if c.via_run_id is None]
    theirs = [c for c in root if c.via_run_id is not None]
    assert {c.session_id for c in mine} == {result.session_id}
    assert {(c.session_id, c.run_id, c.agent_name, c.via_run_id) for c in theirs} == {
        (child_session, child_run, child.name, result.run_id)
    }
    types = [c.type for c in theirs]
    assert types[0] == "run_started" and "custom" in types and types[-1] == "run_completed"
    assert [c.seq for c in root] == sorted(c.seq for c in root)
    # The child's own stream holds only the child.
    own = [c async for c in helix.stream(child_session, follow=False)]
    assert {c.session_id for c in own} == {child_session}
    assert [c.type for c in own] == types
    # A reader of the root run sees the child too, and is not ended by the child's end.
    by_run = [c async for c in helix.stream(result.session_id, run_id=result.run_id)]
    assert [c.seq for c in by_run] == [
        c.seq for c in root if c.run_id in (result.run_id, child_run)
    ]
    assert by_run[-1].run_id == result.run_id and by_run[-1].type == "run_completed"


# --- human in the loop inside a child, and control of the tree ------------------------


def make_guarded(ran: list[str]):
    @tool(require_approval=True)
    def publish(post: str) -> str:
        """Publish a post (needs a human's approval)."""
        ran.append(post)
        return f"published {post}"

    return publish


async def wait_for_child_wait(database_url: str, root_session_id: str) -> tuple:
    """The child's pending call, as `helix.waiting_runs` shows it under the root."""
    for _ in range(400):
        rows = sql(
            database_url,
            "SELECT run_id, session_id, workflow_id, tool_call_id, kind, root_session_id "
            "FROM helix.waiting_runs WHERE root_session_id = %s",
            root_session_id,
        )
        if rows:
            return rows[0]
        await asyncio.sleep(0.05)
    raise AssertionError("the child never waited")


def tree_setup(make_agent, mock_llm, ran: list[str], hooks=None):
    child = make_agent(tools=[make_guarded(ran)])
    parent = make_agent(tools=[sub_agent_tool(child, name="writer")], hooks=hooks)
    mock_llm.add_response(
        calls(("w", "subagent__writer", {"message": "post it"})), agent=parent.name
    )
    mock_llm.add_response(calls(("p1", "publish", {"post": "hello"})), agent=child.name)
    return child, parent


async def test_a_wait_in_a_child_shows_under_its_root_and_is_answered_with_its_workflow_id(
    helix, make_agent, mock_llm, database_url
):
    events: list[str] = []
    hooks = AgentHooks(
        on_agent_suspended=lambda e: events.append(f"suspended:{e.details['reason']}"),
        on_agent_resumed=lambda e: events.append(f"resumed:{e.details['reason']}"),
    )
    ran: list[str] = []
    child, parent = tree_setup(make_agent, mock_llm, ran, hooks)
    mock_llm.add_response(text("posted"), agent=child.name)
    mock_llm.add_response(text("all done"), agent=parent.name)

    handle = await helix.execute(parent, "write a post")
    run_id, session_id, workflow_id, call_id, kind, root = await wait_for_child_wait(
        database_url, handle.session_id
    )
    assert (call_id, kind, root) == ("p1", "approval", handle.session_id)
    assert session_id != handle.session_id
    parent_run = await helix.get_current_run(handle.session_id)
    assert parent_run is not None
    assert (parent_run.status, parent_run.waiting_for) == ("waiting", "awaiting_children")
    assert (await helix.get_session(handle.session_id)).status == "waiting"
    # Any DBOS client answers the child with its workflow id.
    await on_target_loop(
        lambda: DBOS.send_async(
            workflow_id, {"tool_call_id": "p1", "approved": True}, "helix.approval"
        )
    )
    result = await asyncio.wait_for(handle.result(), timeout=20)

    assert result.status == "completed" and result.output == "all done"
    assert ran == ["hello"]
    assert tool_results(await helix.get_messages(handle.session_id)) == {"w": ("posted", False)}
    assert events == ["suspended:awaiting_children", "resumed:children_done"]


async def test_an_answer_addressed_to_the_root_session_reaches_the_owning_child(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    child, parent = tree_setup(make_agent, mock_llm, ran)
    mock_llm.add_response(text("declined"), agent=child.name)
    mock_llm.add_response(text("ok"), agent=parent.name)

    handle = await helix.execute(parent, "write a post")
    await wait_for_child_wait(database_url, handle.session_id)
    [pending] = await helix.pending_tool_calls(handle.session_id)  # the child's, listed
    assert (pending.tool_call_id, pending.depth, pending.agent_name) == (
        "p1",
        1,
        child.name,
    )
    await helix.deny(handle.session_id, "p1", reason="not today")
    result = await asyncio.wait_for(handle.result(), timeout=20)

    assert result.status == "completed" and ran == []
    [(child_session,)] = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s",
        handle.session_id,
    )
    child_results = tool_results(await helix.get_messages(child_session))
    assert child_results["p1"][1] and "not today" in child_results["p1"][0]


async def test_interrupting_the_parent_interrupts_its_waiting_child(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    child, parent = tree_setup(make_agent, mock_llm, ran)

    handle = await helix.execute(parent, "write a post")
    _, child_session, *_ = await wait_for_child_wait(database_url, handle.session_id)
    await helix.interrupt(handle.session_id, reason="stop")
    result = await asyncio.wait_for(handle.result(), timeout=20)

    assert result.status == "interrupted" and ran == []
    child_info = await helix.get_session(child_session)
    assert child_info.status == "interrupted"
    messages = await helix.get_messages(handle.session_id)
    assert_every_call_paired(messages)
    content, is_error = tool_results(messages)["w"]
    assert is_error and content == f"Sub-agent '{child.name}' interrupted: Interrupted: stop"
    assert await helix.get_current_run(child_session) is None


async def test_aborting_the_parent_aborts_its_waiting_child(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    child, parent = tree_setup(make_agent, mock_llm, ran)

    handle = await helix.execute(parent, "write a post")
    _, child_session, child_workflow, *_ = await wait_for_child_wait(
        database_url, handle.session_id
    )
    await helix.abort(handle.session_id, reason="enough")
    result = await asyncio.wait_for(handle.result(), timeout=20)

    assert result.status == "aborted" and ran == []
    assert (await helix.get_session(child_session)).status == "aborted"
    assert_every_call_paired(await helix.get_messages(handle.session_id))
    assert_every_call_paired(await helix.get_messages(child_session))
    [(status,)] = sql(
        database_url,
        "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
        child_workflow,
    )
    assert status == "CANCELLED"


async def test_an_interrupt_while_the_parent_asks_for_children_starts_none_and_resume_redispatches(
    helix, make_agent, mock_llm, database_url
):
    """Issue 13, item 5: an interrupt that reaches the parent while its model is still
    deciding to delegate (no child exists yet for `interrupt()` to reach) must not leave
    the children it asks for running alone: none starts, the run ends interrupted, and a
    resume lets the model dispatch them again."""
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="helper")])
    asking, release = threading.Event(), threading.Event()

    async def respond(request):
        if request.agent_name == child.name:
            return text(f"answer to {request.messages[-1].content}")
        results = [m for m in request.messages if m.role == "tool"]
        if not results:  # the first model call: the interrupt comes while it thinks
            asking.set()
            await asyncio.to_thread(release.wait, 30)
            return calls(
                ("h1", "subagent__helper", {"message": "one"}),
                ("h2", "subagent__helper", {"message": "two"}),
            )
        if len(results) == 2:  # resumed: the model asks again
            return calls(("h3", "subagent__helper", {"message": "three"}))
        return text("done")

    mock_llm.set_responder(respond)
    try:
        handle = await helix.execute(parent, "delegate")
        assert await asyncio.to_thread(asking.wait, 30)
        await helix.interrupt(handle.session_id, reason="stop")
        release.set()
        result = await asyncio.wait_for(handle.result(), timeout=30)

        assert result.status == "interrupted", result.error
        assert child_sessions(database_url, handle.session_id) == [], "no child was started"
        assert not [r for r in mock_llm.inputs if r.agent_name == child.name]
        messages = await helix.get_messages(handle.session_id)
        assert_every_call_paired(messages)
        assert tool_results(messages) == {
            "h1": ("Interrupted: stop", True),
            "h2": ("Interrupted: stop", True),
        }
        [(status, waiting_for)] = sql(
            database_url,
            "SELECT status, waiting_for FROM helix.runs WHERE run_id = %s",
            handle.run_id,
        )
        assert (status, waiting_for) == ("interrupted", None)

        resumed = await (await helix.resume(handle.session_id)).result()
    finally:
        mock_llm.set_responder(None)
        release.set()

    assert resumed.status == "completed" and resumed.output == "done", resumed.error
    [(_, _, status, root, output)] = child_sessions(database_url, handle.session_id)
    assert (status, root, output) == ("completed", handle.session_id, "answer to three")
    assert tool_results(await helix.get_messages(handle.session_id))["h3"] == (
        "answer to three",
        False,
    )


async def test_an_abort_while_the_parent_asks_for_children_starts_none(
    helix, make_agent, mock_llm, database_url
):
    """The abort side of item 5: a parent aborted while its model is still deciding to
    delegate opens and starts no child once the model answers (its workflow is cancelled)."""
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="helper")])
    asking, release, answered = threading.Event(), threading.Event(), threading.Event()

    async def respond(request):
        if request.agent_name == child.name:
            return text("child done")
        asking.set()
        await asyncio.to_thread(release.wait, 30)
        answered.set()
        return calls(("h1", "subagent__helper", {"message": "one"}))

    mock_llm.set_responder(respond)
    try:
        handle = await helix.execute(parent, "delegate")
        assert await asyncio.to_thread(asking.wait, 30)
        await helix.abort(handle.session_id, reason="stop")
        release.set()
        assert await asyncio.to_thread(answered.wait, 30)
        for _ in range(40):  # the cancelled workflow would dispatch right after the answer
            assert child_sessions(database_url, handle.session_id) == [], "a child started"
            await asyncio.sleep(0.05)
    finally:
        mock_llm.set_responder(None)
        release.set()

    result = await asyncio.wait_for(handle.result(), timeout=20)
    assert result.status == "aborted"
    assert not [r for r in mock_llm.inputs if r.agent_name == child.name]
    assert_every_call_paired(await helix.get_messages(handle.session_id))


async def test_an_interrupt_sent_while_the_children_start_is_handed_to_them(
    helix, make_agent, mock_llm, database_url
):
    """An interrupt that reaches the parent after it opened its children, before any
    `interrupt()` could find them started (here sent with plain `DBOS.send`, as any DBOS
    client may, from the parent's on_agent_suspended hook), is handed to each child."""

    @tool
    def step_on() -> str:
        """One more step."""
        return "on"

    child = make_agent(tools=[step_on])

    async def interrupt_parent(event) -> None:
        [(workflow_id,)] = sql(
            database_url,
            "SELECT workflow_id FROM helix.runs WHERE run_id = %s",
            event.context.run_id,
        )
        await DBOS.send_async(workflow_id, {"reason": "late"}, "helix.interrupt")

    parent = make_agent(
        tools=[sub_agent_tool(child, name="helper")],
        hooks=AgentHooks(on_agent_suspended=interrupt_parent),
    )
    mock_llm.add_response(calls(("h", "subagent__helper", {"message": "go"})), agent=parent.name)

    def child_interrupt_sent() -> bool:
        rows = sql(
            database_url,
            "SELECT count(*) FROM dbos.notifications n JOIN helix.runs r "
            "ON r.workflow_id = n.destination_uuid WHERE r.agent_name = %s "
            "AND n.topic = 'helix.interrupt'",
            child.name,
        )
        return rows[0][0] > 0

    async def child_reply(request):
        if request.agent_name != child.name:
            return text("parent goes on")  # must not be needed: the parent is interrupted
        if request.messages[-1].role == "tool":
            return text("finished anyway")
        for _ in range(200):  # its first step ends once its interrupt is there (or after 10 s)
            if child_interrupt_sent():
                break
            await asyncio.sleep(0.05)
        return calls(("s", "step_on", {}))

    mock_llm.set_responder(child_reply)
    try:
        result = await asyncio.wait_for(
            (await helix.execute(parent, "delegate")).result(), timeout=60
        )
    finally:
        mock_llm.set_responder(None)

    assert result.status == "interrupted", result.error
    [(_, _, status, _, _)] = child_sessions(database_url, result.session_id)
    assert status == "interrupted", "the child ran on alone"
    content, is_error = tool_results(await helix.get_messages(result.session_id))["h"]
    assert is_error and content.startswith(f"Sub-agent '{child.name}' interrupted")


def test_the_research_team_example_prints_the_session_tree(database_url):
    done = forkserver.run(
        [sys.executable, str(REPO / "examples" / "research_team.py")],
        env={**os.environ, "HELIX_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert max(map(len, out.splitlines())) <= 100, "output fits 100 columns piped"
    words = " ".join(out.split())
    assert 'Brief (completed), as JSON: {"summary": "Owls can turn' in words
    assert "(Review: Solid: two independent sources agree.)" in words
    section = out.split("Session tree (… is the lead's session, ")[1]
    root, rows = section.split(")\n", 1)
    tree = [line.split() for line in rows.split("\n\n")[0].splitlines()[1:]]
    # lead (3 LLM calls; 2 sub-agent calls and 1 blocking companion turn), then its
    # children: the critic companion (1 LLM call), both researchers (2 LLM calls, 1 tool).
    assert all(int(row[5]) > 0 for row in tree)
    assert tree[0][:5] == ["lead", "completed", "3", "0", "3"] and tree[0][6] == "…"
    assert root.startswith("ses_") and len(root) == 36
    assert sorted(row[:5] for row in tree[1:]) == [
        ["archive_researcher", "completed", "2", "1", "0"],
        ["critic", "completed", "1", "0", "0"],
        ["web_researcher", "completed", "2", "1", "0"],
    ]
    critic_row = next(row for row in tree if row[0] == "critic")
    assert critic_row[6] == "…-agent-critic-1"
    assert "Whole tree: 4 sessions" in out and "(8 LLM calls)" in out
    # The root stream showed the researchers' own chunks, tagged with their agent.
    assert any("web_researcher" in line and "tool_end" in line for line in out.splitlines())


async def test_the_cli_answers_a_childs_wait_through_the_root_and_aborts_the_tree(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    child, parent = tree_setup(make_agent, mock_llm, ran)
    mock_llm.add_response(text("posted"), agent=child.name)
    mock_llm.add_response(
        calls(("w2", "subagent__writer", {"message": "again"})), agent=parent.name
    )
    mock_llm.add_response(calls(("p2", "publish", {"post": "again"})), agent=child.name)

    handle = await helix.execute(parent, "write two posts")
    await wait_for_child_wait(database_url, handle.session_id)
    approved = await cli(database_url, "approve", handle.session_id, "p1")
    assert approved.returncode == 0, approved.stderr
    for _ in range(400):  # the second child waits
        rows = sql(
            database_url,
            "SELECT session_id FROM helix.waiting_runs WHERE root_session_id = %s "
            "AND tool_call_id = 'p2'",
            handle.session_id,
        )
        if rows:
            break
        await asyncio.sleep(0.05)
    [(second_child,)] = rows
    aborted = await cli(database_url, "abort", handle.session_id, "--reason", "stop all")
    assert aborted.returncode == 0, aborted.stderr
    result = await asyncio.wait_for(handle.result(), timeout=20)

    assert result.status == "aborted" and ran == ["hello"]
    assert (await helix.get_session(second_child)).status == "aborted"
    assert_every_call_paired(await helix.get_messages(second_child))


async def test_the_cli_and_http_show_a_sessions_usage_with_or_without_its_descendants(
    helix, make_agent, mock_llm, database_url
):
    """`get_usage(include_children=True)` as `helix-dbos usage --session ID --children`
    and `GET /sessions/{id}/usage?children=true`, on a tree three levels deep."""
    grandchild = make_agent()
    child = make_agent(tools=[sub_agent_tool(grandchild, name="deep")])
    parent = make_agent(tools=[sub_agent_tool(child, name="mid")])
    mock_llm.add_responses(
        calls(("m", "subagent__mid", {"message": "go deeper"})), text("top"), agent=parent.name
    )
    mock_llm.add_responses(
        calls(("d", "subagent__deep", {"message": "deepest"})), text("mid"), agent=child.name
    )
    mock_llm.add_response(text("bottom"), agent=grandchild.name)
    result = await (await helix.execute(parent, "go")).result()
    assert result.status == "completed", result.error
    root = result.session_id
    [(mid, *_)] = child_sessions(database_url, root)
    [(deep, *_)] = child_sessions(database_url, mid)
    own = await helix.get_usage(session_id=root)
    tree = await helix.get_usage(session_id=root, include_children=True)
    assert (own.llm_calls, tree.llm_calls) == (2, 5)
    assert tree.input_tokens > own.input_tokens

    def tokens(row: dict) -> tuple:
        return row["llm_calls"], row["input_tokens"], row["output_tokens"]

    plain = await cli(database_url, "usage", "--session", root, "--json")
    whole = await cli(database_url, "usage", "--session", root, "--children", "--json")
    below = await cli(
        database_url, "usage", "--session", mid, "--children", "--by", "session", "--json"
    )
    assert plain.returncode == whole.returncode == below.returncode == 0, whole.stderr
    [plain_row] = json.loads(plain.stdout)
    [whole_row] = json.loads(whole.stdout)
    assert tokens(plain_row) == (2, own.input_tokens, own.output_tokens)
    assert tokens(whole_row) == (5, tree.input_tokens, tree.output_tokens)
    by_session = {r["session"]: r["llm_calls"] for r in json.loads(below.stdout)}
    assert by_session == {mid: 2, deep: 1}, "the session below and its own child, no parent"
    table = await cli(database_url, "usage", "--session", root, "--children")
    assert table.returncode == 0 and str(tree.input_tokens) in table.stdout
    alone = await cli(database_url, "usage", "--children")
    assert alone.returncode == 2 and "--children needs --session" in alone.stderr

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            path = f"/sessions/{root}/usage"
            without = (await client.get(path)).json()
            within = (await client.get(path, params={"children": "true"})).json()
            bad = await client.get(path, params={"children": "maybe"})
    assert (without["include_children"], without["totals"]) == (False, own.model_dump())
    assert (within["include_children"], within["totals"]) == (True, tree.model_dump())
    assert [tokens(r) for r in within["by_model"]] == [tokens(whole_row)]
    assert [tokens(r) for r in without["by_model"]] == [tokens(plain_row)]
    assert bad.status_code == 422


async def test_a_wide_fan_out_completes_without_lock_conflicts(helix, make_agent, mock_llm, caplog):
    """Thirty children from one step: the parent's live head write (after 0.1 s of tools)
    and the dispatch transaction lock the parent's run and session rows in one order."""
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="w")])
    width = 30
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": f"c{i}", "name": "subagent__w", "arguments": {"message": str(i)}}
                for i in range(width)
            ],
        },
        agent=parent.name,
    )
    mock_llm.add_responses(*(text(f"r{i}") for i in range(width)), agent=child.name)
    mock_llm.add_response(text("all in"), agent=parent.name)

    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        result = await (await helix.execute(parent, "fan out")).result()

    assert result.status == "completed"
    results = tool_results(await helix.get_messages(result.session_id))
    assert len(results) == width and not any(is_error for _, is_error in results.values())
    assert sorted(content for content, _ in results.values()) == sorted(
        f"r{i}" for i in range(width)
    )
    assert not [r for r in caplog.records if "deadlock" in r.getMessage().lower()]


async def test_a_sub_agent_before_a_terminating_call_runs_first_in_call_order(
    helix, make_agent, mock_llm
):
    @tool
    def complete_task(summary: str) -> dict:
        """End the task."""
        return {"summary": summary}

    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="helper"), complete_task])
    mock_llm.add_response(
        calls(
            ("h", "subagent__helper", {"message": "prepare"}),
            ("t", "complete_task", {"summary": "done"}),
            ("late", "subagent__helper", {"message": "never"}),
        ),
        agent=parent.name,
    )
    mock_llm.add_response(text("prepared"), agent=child.name)

    result = await (
        await helix.execute(parent, "go", terminating=TerminatingConfig(tool_ids=["complete_task"]))
    ).result()

    assert result.status == "completed" and result.output == {"summary": "done"}
    messages = await helix.get_messages(result.session_id)
    assert tool_results(messages) == {"h": ("prepared", False), "t": ('{"summary":"done"}', False)}
    assert [c.id for m in messages if m.role == "assistant" for c in m.tool_calls] == ["h", "t"]


async def test_a_finished_sub_agent_session_continues_with_a_new_turn(
    helix, make_agent, mock_llm, database_url
):
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child, name="kid")])
    mock_llm.add_response(calls(("k", "subagent__kid", {"message": "first"})), agent=parent.name)
    mock_llm.add_responses(text("one"), text("two"), agent=child.name)
    mock_llm.add_response(text("ok"), agent=parent.name)
    result = await (await helix.execute(parent, "go")).result()
    [(child_session,)] = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s",
        result.session_id,
    )

    again = await (await helix.execute(child, "second", session_id=child_session)).result()

    assert again.status == "completed" and again.output == "two"
    assert [m.content for m in await helix.get_messages(child_session)] == [
        "first",
        "one",
        "second",
        "two",
    ]
    # The continued turn's chunks still reach the root's stream, tagged with the child.
    root = [c async for c in helix.stream(result.session_id, follow=False)]
    assert [c.type for c in root if c.run_id == again.run_id][-1] == "run_completed"
