"""Terminating tool calls (seed 004), as an agent option and as a run option, on the real runtime."""

from __future__ import annotations

import asyncio
import json

import pytest
from dbos import DBOS
from helpers import calls, sql
from pydantic import BaseModel, Field

from helix_dbos import Agent, AgentDefinitionError, TerminatingConfig, Tool, tool
from helix_dbos.orchestration.terminating import (
    generated_messages,
    response_text,
    truncate_at_terminating,
)
from helix_dbos.orchestration.types import Message, ToolCall

DEFAULT_NUDGE = (
    "You are currently in an autonomous execution mode with no user interaction. "
    "You must complete your task by calling one of the terminating tools."
)


def text(content: str) -> dict:
    return {"type": "text", "content": content}


# The seed's completion tool: a pydantic schema and a function returning a string.
class CompleteTask(BaseModel):
    result: str = Field(description="The final result of the completed task")


def complete_task_func(result: str) -> str:
    return f"Task completed: {result}"


def complete_task_tool() -> Tool:
    return Tool(
        "complete_task",
        complete_task_func,
        description="Finish the task with its result.",
        input_model=CompleteTask,
    )


def make_search(log: list[str] | None = None) -> Tool:
    @tool
    def search(query: str) -> list[str]:
        """Search the knowledge base."""
        if log is not None:
            log.append(f"search:{query}")
        return [f"hit for {query}"]

    return search


def requests_of(mock_llm, agent: Agent) -> list:
    return [r for r in mock_llm.inputs if r.agent_name == agent.name]


TERMINATING = TerminatingConfig(tool_ids=["complete_task"])


@pytest.fixture(params=["agent_option", "run_option"])
def autonomous(request, helix, make_agent):
    """Returns (make(config=None, tools=...) -> agent, start(agent, text) -> handle) for both ways."""
    where = request.param

    def make(config: TerminatingConfig | None = None, tools: list | None = None) -> Agent:
        config = config or TERMINATING
        tools = tools if tools is not None else [make_search(), complete_task_tool()]
        agent = make_agent(tools=tools, terminating=config if where == "agent_option" else None)
        agent._test_config = config  # type: ignore[attr-defined]
        return agent

    async def start(agent: Agent, message: str):
        if where == "agent_option":
            return await helix.execute(agent, message)
        return await helix.execute(agent, message, terminating=agent._test_config)  # type: ignore[attr-defined]

    return make, start


# --- the terminating tool ends the run with its output ------------------------------------------


async def test_terminating_tool_ends_the_run_with_its_output_as_response(
    autonomous, mock_llm, database_url
):
    make, start = autonomous
    agent = make()
    mock_llm.add_responses(
        calls(("c1", "search", {"query": "pricing"})),
        calls(("c2", "complete_task", {"result": "3 competitors found"})),
        text("never asked"),
        agent=agent.name,
    )
    handle = await start(agent, "Research competitor pricing")
    result = await handle.result()

    assert result.status == "completed", result.error
    assert result.output == "Task completed: 3 competitors found"
    assert result.response == "Task completed: 3 competitors found", (
        "a str output stays as is (not JSON-quoted)"
    )
    assert len(requests_of(mock_llm, agent)) == 2, "no LLM call after the terminating tool"
    assert result.generated_messages == [
        {"sender": "human", "message": "Research competitor pricing"},
        {
            "type": "tool_call",
            "tool_call_id": "c1",
            "tool_name": "search",
            "tool_input": {"query": "pricing"},
        },
        {"type": "tool_response", "tool_call_id": "c1", "tool_output": '["hit for pricing"]'},
        {
            "type": "tool_call",
            "tool_call_id": "c2",
            "tool_name": "complete_task",
            "tool_input": {"result": "3 competitors found"},
        },
        {
            "type": "tool_response",
            "tool_call_id": "c2",
            "tool_output": "Task completed: 3 competitors found",
        },
    ]
    rows = sql(
        database_url,
        "SELECT status, output, error FROM helix.runs WHERE run_id = %s",
        handle.run_id,
    )
    assert rows == [("completed", "Task completed: 3 competitors found", None)]
    options = sql(database_url, "SELECT options FROM helix.runs WHERE run_id = %s", handle.run_id)
    if agent.terminating is None:
        assert options[0][0]["terminating"]["tool_ids"] == ["complete_task"], (
            "the run option is stored with the run"
        )


async def test_dict_output_becomes_json_text_in_response(autonomous, mock_llm):
    @tool
    def submit_report(title: str, items: list[int]) -> dict:
        """Submit the final report."""
        return {"title": title, "items": items, "count": len(items)}

    make, start = autonomous
    agent = make(
        TerminatingConfig(tool_ids=["submit_report"]), tools=[make_search(), submit_report]
    )
    mock_llm.add_responses(
        calls(("r1", "submit_report", {"title": "Overdue", "items": [3, 5]})), agent=agent.name
    )
    result = await (await start(agent, "Find overdue invoices")).result()

    assert result.status == "completed", result.error
    assert result.output == {"title": "Overdue", "items": [3, 5], "count": 2}
    assert isinstance(result.response, str)
    assert json.loads(result.response) == {"title": "Overdue", "items": [3, 5], "count": 2}


async def test_any_of_several_tool_ids_terminates(helix, make_agent, mock_llm):
    @tool
    def report_error(reason: str) -> str:
        """Give up with a reason."""
        return f"error: {reason}"

    config = TerminatingConfig(tool_ids=["complete_task", "report_error"], max_invocations=30)
    agent = make_agent(tools=[make_search(), complete_task_tool(), report_error])
    mock_llm.add_responses(calls(("e1", "report_error", {"reason": "no data"})), agent=agent.name)
    result = await (await helix.execute(agent, "Fetch today's sales", terminating=config)).result()
    assert result.status == "completed" and result.response == "error: no data"


async def test_without_terminating_config_the_result_has_no_response(helix, make_agent, mock_llm):
    agent = make_agent(tools=[make_search(), complete_task_tool()])
    mock_llm.add_responses(
        calls(("c1", "complete_task", {"result": "x"})), text("plain end"), agent=agent.name
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.output == "plain end", (
        "complete_task is an ordinary tool without the config"
    )
    assert result.response is None and result.generated_messages is None


async def test_run_option_overrides_the_agent_option(helix, make_agent, mock_llm):
    @tool
    def other_end(note: str) -> str:
        """Another way to finish."""
        return f"other: {note}"

    agent = make_agent(
        tools=[complete_task_tool(), other_end],
        terminating=TerminatingConfig(tool_ids=["complete_task"]),
    )
    mock_llm.add_responses(
        calls(("a", "complete_task", {"result": "ignored"})),
        calls(("b", "other_end", {"note": "run option wins"})),
        agent=agent.name,
    )
    result = await (
        await helix.execute(agent, "go", terminating=TerminatingConfig(tool_ids=["other_end"]))
    ).result()
    assert result.status == "completed" and result.response == "other: run option wins"


async def test_a_failing_terminating_tool_goes_back_to_the_model(helix, make_agent, mock_llm):
    attempts: list[str] = []

    @tool
    def finish(result: str) -> str:
        """Finish."""
        attempts.append(result)
        if result == "bad":
            raise ValueError("result must not be 'bad'")
        return f"done: {result}"

    agent = make_agent(tools=[finish], terminating=TerminatingConfig(tool_ids=["finish"]))
    mock_llm.add_responses(
        calls(("f1", "finish", {"result": "bad"})),
        calls(("f2", "finish", {"result": "good"})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.response == "done: good"
    assert attempts == ["bad", "good"]
    second = requests_of(mock_llm, agent)[1]
    assert second.messages[-1].content == "Tool 'finish' failed: result must not be 'bad'"


# --- nudges ---------------------------------------------------------------------------------------


async def test_text_reply_gets_the_default_nudge_then_the_run_completes(autonomous, mock_llm):
    make, start = autonomous
    agent = make()
    mock_llm.add_responses(
        text("I think I am done."),
        calls(("c1", "complete_task", {"result": "ok"})),
        agent=agent.name,
    )
    result = await (await start(agent, "Summarise my emails")).result()
    assert result.status == "completed", result.error
    assert result.response == "Task completed: ok"
    second = requests_of(mock_llm, agent)[1]
    assert second.messages[-2].content == "I think I am done."
    assert second.messages[-1].role == "user" and second.messages[-1].content == DEFAULT_NUDGE
    assert result.generated_messages[:3] == [
        {"sender": "human", "message": "Summarise my emails"},
        {"sender": "ai", "message": "I think I am done."},
        {"sender": "system", "message": DEFAULT_NUDGE},
    ], "the nudge is injected by the runtime, not said by the human"


async def test_custom_nudge_message_and_consecutive_nudges(autonomous, mock_llm):
    make, start = autonomous
    config = TerminatingConfig(
        tool_ids=["complete_task"],
        consecutive_nudges=3,
        nudge_message="Remember: You must call the terminating tool when finished.",
    )
    agent = make(config)
    mock_llm.add_responses(
        text("one"),
        text("two"),
        text("three"),
        calls(("c1", "complete_task", {"result": "finally"})),
        agent=agent.name,
    )
    result = await (await start(agent, "Research the topic")).result()
    assert result.status == "completed", result.error
    requests = requests_of(mock_llm, agent)
    assert [r.messages[-1].content for r in requests[1:]] == [
        "Remember: You must call the terminating tool when finished."
    ] * 3


async def test_exceeding_consecutive_nudges_fails_the_run(autonomous, mock_llm, database_url):
    make, start = autonomous
    agent = make()
    mock_llm.add_responses(text("first"), text("second"), text("never asked"), agent=agent.name)
    handle = await start(agent, "go")
    result = await handle.result()
    assert result.status == "failed"
    assert result.error == "Max consecutive nudges exceeded"
    assert result.response is None
    assert len(requests_of(mock_llm, agent)) == 2
    rows = sql(
        database_url, "SELECT status, error FROM helix.runs WHERE run_id = %s", handle.run_id
    )
    assert rows == [("failed", "Max consecutive nudges exceeded")]


async def test_consecutive_nudges_zero_fails_on_the_first_text_reply(autonomous, mock_llm):
    make, start = autonomous
    agent = make(TerminatingConfig(tool_ids=["complete_task"], consecutive_nudges=0))
    mock_llm.add_responses(text("chatty"), text("never asked"), agent=agent.name)
    result = await (await start(agent, "go")).result()
    assert result.status == "failed" and result.error == "Max consecutive nudges exceeded"
    assert len(requests_of(mock_llm, agent)) == 1, "no nudge allowed: the first text reply fails"


async def test_the_nudge_counter_resets_on_any_tool_call(autonomous, mock_llm):
    make, start = autonomous
    agent = make()  # consecutive_nudges=1
    mock_llm.add_responses(
        text("thinking aloud"),
        calls(("s1", "search", {"query": "a"})),
        text("thinking aloud again"),
        calls(("s2", "search", {"query": "b"})),
        text("and again"),
        calls(("c1", "complete_task", {"result": "done"})),
        agent=agent.name,
    )
    result = await (await start(agent, "go")).result()
    assert result.status == "completed", result.error
    assert result.response == "Task completed: done"
    assert len(requests_of(mock_llm, agent)) == 6


# --- max invocations ------------------------------------------------------------------------------


async def test_custom_max_invocations_fails_the_run(autonomous, mock_llm, database_url):
    make, start = autonomous
    agent = make(TerminatingConfig(tool_ids=["complete_task"], max_invocations=3))
    for i in range(5):
        mock_llm.add_response(calls((f"s{i}", "search", {"query": str(i)})), agent=agent.name)
    handle = await start(agent, "loop forever")
    result = await handle.result()
    assert result.status == "failed"
    assert result.error == "Max invocations exceeded"
    assert len(requests_of(mock_llm, agent)) == 3
    assert sql(database_url, "SELECT error FROM helix.runs WHERE run_id = %s", handle.run_id) == [
        ("Max invocations exceeded",)
    ]


async def test_default_max_invocations_is_64_and_overrides_max_steps(helix, make_agent, mock_llm):
    agent = make_agent(tools=[make_search(), complete_task_tool()], max_steps=5)
    for i in range(70):
        mock_llm.add_response(calls((f"s{i}", "search", {"query": str(i)})), agent=agent.name)
    result = await (
        await helix.execute(
            agent, "loop", terminating=TerminatingConfig(tool_ids=["complete_task"])
        )
    ).result()
    assert result.status == "failed" and result.error == "Max invocations exceeded"
    assert len(requests_of(mock_llm, agent)) == 64


async def test_the_terminating_call_on_the_last_invocation_still_completes(autonomous, mock_llm):
    make, start = autonomous
    agent = make(TerminatingConfig(tool_ids=["complete_task"], max_invocations=2))
    mock_llm.add_responses(
        calls(("s1", "search", {"query": "x"})),
        calls(("c1", "complete_task", {"result": "just in time"})),
        agent=agent.name,
    )
    result = await (await start(agent, "go")).result()
    assert result.status == "completed" and result.response == "Task completed: just in time"


# --- several calls in one response -------------------------------------------------------------


async def test_calls_run_in_order_up_to_the_first_terminating_one(
    autonomous, mock_llm, database_url
):
    log: list[str] = []

    @tool
    def note(text: str) -> str:
        """Write a note."""
        log.append(f"note:{text}")
        return "noted"

    def complete_task_logged(result: str) -> str:
        log.append(f"complete:{result}")
        return complete_task_func(result)

    finisher = Tool("complete_task", complete_task_logged, input_model=CompleteTask)
    make, start = autonomous
    agent = make(tools=[make_search(log), note, finisher])
    mock_llm.add_responses(
        calls(
            ("a", "search", {"query": "first"}),
            ("b", "note", {"text": "second"}),
            ("c", "search", {"query": "third"}),
            ("d", "complete_task", {"result": "fourth"}),
            ("e", "note", {"text": "after"}),
            ("f", "complete_task", {"result": "again"}),
        ),
        agent=agent.name,
    )
    handle = await start(agent, "go")
    result = await handle.result()

    assert result.status == "completed" and result.response == "Task completed: fourth"
    assert log == ["search:first", "note:second", "search:third", "complete:fourth"], (
        "executed in call order; nothing after the terminating call"
    )
    assistant = sql(
        database_url,
        "SELECT tool_calls FROM helix.messages WHERE run_id = %s AND role = 'assistant'",
        handle.run_id,
    )
    assert [[c["id"] for c in row[0]] for row in assistant] == [["a", "b", "c", "d"]], (
        "the stored assistant message keeps only the executed calls"
    )
    tool_rows = sql(
        database_url,
        "SELECT tool_call_id FROM helix.messages WHERE run_id = %s AND role = 'tool' ORDER BY seq",
        handle.run_id,
    )
    assert [r[0] for r in tool_rows] == ["a", "b", "c", "d"]
    assert [m.get("tool_call_id") for m in result.generated_messages[1:]] == [
        "a",
        "b",
        "c",
        "d",
    ] * 2


async def test_workflow_tool_runs_before_a_later_terminating_call(helix, make_agent, mock_llm):
    log: list[str] = []
    name = f"order_child_strict_{id(log)}"

    async def child(payload: dict) -> dict:
        log.append("workflow")
        return {"ok": True}

    DBOS.workflow(name=name)(child)

    def complete_task_logged(result: str) -> str:
        log.append("complete")
        return complete_task_func(result)

    agent = make_agent(
        tools=[
            "__run_workflow__",
            Tool("complete_task", complete_task_logged, input_model=CompleteTask),
        ],
        terminating=TerminatingConfig(tool_ids=["complete_task"]),
    )
    mock_llm.add_responses(
        calls(
            ("w", "__run_workflow__", {"workflow_name": name, "input": {}}),
            ("c", "complete_task", {"result": "after the workflow"}),
        ),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed", result.error
    assert log == ["workflow", "complete"]


# --- the config itself ------------------------------------------------------------------------------


def test_terminating_config_defaults():
    config = TerminatingConfig(tool_ids=["complete_task"])
    assert config.tool_ids == ("complete_task",)
    assert config.consecutive_nudges == 1
    assert config.max_invocations == 64
    assert config.nudge_message == DEFAULT_NUDGE


def test_terminating_config_round_trips_through_a_dict():
    config = TerminatingConfig(
        tool_ids=["a", "b"], consecutive_nudges=3, nudge_message="call it", max_invocations=20
    )
    data = config.to_dict()
    assert data == {
        "tool_ids": ["a", "b"],
        "consecutive_nudges": 3,
        "nudge_message": "call it",
        "max_invocations": 20,
    }
    assert json.loads(json.dumps(data)) == data
    assert TerminatingConfig.from_dict(data) == config


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_ids": []}, "terminating_config needs at least one tool id"),
        ({"tool_ids": ()}, "terminating_config needs at least one tool id"),
        (
            {"tool_ids": ["x"], "consecutive_nudges": -1},
            "consecutive_nudges must be >= 0 and max_invocations >= 1",
        ),
        (
            {"tool_ids": ["x"], "max_invocations": 0},
            "consecutive_nudges must be >= 0 and max_invocations >= 1",
        ),
    ],
)
def test_terminating_config_validation(kwargs, message):
    with pytest.raises(AgentDefinitionError) as info:
        TerminatingConfig(**kwargs)
    assert str(info.value) == message


def test_terminating_config_needs_tool_ids():
    with pytest.raises(TypeError):
        TerminatingConfig()  # type: ignore[call-arg]


def test_seed_complete_task_tool_schema():
    spec = complete_task_tool().spec()
    assert spec.name == "complete_task"
    assert spec.parameters["required"] == ["result"]
    assert spec.parameters["properties"]["result"]["description"] == (
        "The final result of the completed task"
    )


# --- the pure rules -----------------------------------------------------------------------------


def test_truncate_at_terminating_keeps_calls_up_to_the_first_terminating_one():
    seq = [ToolCall(id=i, name=n, arguments={}) for i, n in [("1", "a"), ("2", "t"), ("3", "t")]]
    kept, hit = truncate_at_terminating(seq, ("t",))
    assert [c.id for c in kept] == ["1", "2"] and hit is not None and hit.id == "2"
    kept, hit = truncate_at_terminating(seq[:1], ("t",))
    assert [c.id for c in kept] == ["1"] and hit is None


def test_response_text():
    assert response_text("Task completed: x") == "Task completed: x"
    assert json.loads(response_text({"a": [1, 2]})) == {"a": [1, 2]}
    assert response_text(None) == "null"
    assert response_text(3) == "3"


def test_generated_messages_shape():
    messages = [
        Message(role="user", content="hello"),
        Message(
            role="assistant",
            content="let me look",
            tool_calls=[ToolCall(id="t1", name="search", arguments={"q": "x"})],
        ),
        Message(role="tool", tool_call_id="t1", tool_name="search", content="[]"),
    ]
    assert generated_messages(messages) == [
        {"sender": "human", "message": "hello"},
        {"sender": "ai", "message": "let me look"},
        {
            "type": "tool_call",
            "tool_call_id": "t1",
            "tool_name": "search",
            "tool_input": {"q": "x"},
        },
        {"type": "tool_response", "tool_call_id": "t1", "tool_output": "[]"},
    ]


def test_generated_messages_marks_injected_messages_as_system():
    messages = [
        Message(role="user", content="do it"),
        Message(role="assistant", content="chatting"),
        Message(role="user", content=DEFAULT_NUDGE),
        Message(role="assistant", tool_calls=[ToolCall(id="c", name="done", arguments={})]),
        Message(role="tool", tool_call_id="c", tool_name="done", content="ok"),
    ]
    assert generated_messages(messages) == [
        {"sender": "human", "message": "do it"},
        {"sender": "ai", "message": "chatting"},
        {"sender": "system", "message": DEFAULT_NUDGE},
        {"type": "tool_call", "tool_call_id": "c", "tool_name": "done", "tool_input": {}},
        {"type": "tool_response", "tool_call_id": "c", "tool_output": "ok"},
    ]


async def test_terminating_call_waits_for_an_earlier_pause_for_human(helix, make_agent, mock_llm):
    log: list[str] = []

    def complete_task_logged(result: str) -> str:
        log.append("complete")
        return complete_task_func(result)

    agent = make_agent(
        tools=[
            "__pause_for_human__",
            Tool("complete_task", complete_task_logged, input_model=CompleteTask),
        ],
        terminating=TerminatingConfig(tool_ids=["complete_task"]),
    )
    mock_llm.add_responses(
        calls(
            ("p", "__pause_for_human__", {"question": "May I finish?"}),
            ("c", "complete_task", {"result": "finished"}),
        ),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    for _ in range(200):
        if (await helix.get_run(handle.run_id)).status == "paused":
            break
        await asyncio.sleep(0.02)
    ran_before_answer = list(log)
    await helix.submit_human_input(handle.session_id, "p", "yes", approved=True)
    result = await handle.result()
    assert result.status == "completed", result.error
    assert ran_before_answer == [], "the terminating call ran before the human answered"
