"""Hyphen's built-in tools (seed 003) on the real runtime: every documented field, default,
result shape and error text."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from typing import Any

import pytest
from dbos import DBOS
from helpers import calls, sql
from pydantic import BaseModel, ConfigDict

from helix_dbos import (
    Agent,
    AgentDefinitionError,
    PendingToolCall,
    TerminatingConfig,
    ToolDefinitionError,
    tool,
)
from helix_dbos.builtins import (
    BUILTINS,
    DEFAULT_RESULT_KEY,
    builtin_tools,
    complete_tool,
    get_builtin,
    run_workflow_tool,
)
from helix_dbos.errors import InvalidAnswerError, ToolArgumentsError, ToolCallAlreadyAnsweredError
from helix_dbos.runtime.process.event_loop import on_target_loop

_names = itertools.count()


def complete(call_id: str = "done", **arguments: Any) -> dict:
    return calls((call_id, "__complete__", {"answer": "ok", **arguments}))


def requests_of(mock_llm, agent: Agent) -> list:
    return [r for r in mock_llm.inputs if r.agent_name == agent.name]


async def tool_result(helix, session_id: str, call_id: str):
    return next(m for m in await helix.get_messages(session_id) if m.tool_call_id == call_id)


async def tool_json(helix, session_id: str, call_id: str) -> Any:
    message = await tool_result(helix, session_id, call_id)
    assert not message.is_error, message.content
    return json.loads(message.content)


def register_workflow(fn, prefix: str = "test_wf") -> str:
    """Register a DBOS workflow after launch under a unique name (DBOS 3.4 allows it)."""
    name = f"{prefix}_{next(_names)}"
    DBOS.workflow(name=name)(fn)
    return name


async def screening(payload: dict) -> dict:
    return {"screening_result": "clear", "matches_found": 0, "customer": payload["customer_name"]}


SCREENING = register_workflow(screening, "sanctions_screening")


# --- definitions --------------------------------------------------------------------------------


def test_every_builtin_is_available_by_name():
    assert list(BUILTINS) == [
        "__complete__",
        "__run_workflow__",
        "__workflow_status__",
        "__pause_for_human__",
        "__store_memory__",
        "__retrieve_memory__",
        "__log_progress__",
    ]
    tools = builtin_tools()
    assert [t.name for t in tools] == list(BUILTINS)
    assert all(t.builtin for t in tools)
    assert [t.name for t in builtin_tools("__complete__", "__log_progress__")] == [
        "__complete__",
        "__log_progress__",
    ]
    assert get_builtin("__store_memory__").name == "__store_memory__"


@pytest.mark.parametrize(
    ("name", "required", "defaults"),
    [
        ("__complete__", ["answer"], {"confidence": 1.0, "summary": None}),
        ("__run_workflow__", ["input"], {"wait": True, "timeout_ms": 60000, "workflow_id": None}),
        ("__pause_for_human__", ["question"], {"options": None, "urgency": None}),
        ("__store_memory__", ["key", "value"], {"ttl_seconds": None}),
        ("__retrieve_memory__", ["key"], {}),
        ("__log_progress__", ["message"], {"milestone": None, "data": None}),
    ],
)
def test_builtin_schemas(name, required, defaults):
    params = get_builtin(name).spec().parameters
    assert sorted(params.get("required", [])) == sorted(required)
    assert "ctx" not in params["properties"], "the ToolContext is not part of the schema"
    for field, default in defaults.items():
        assert params["properties"][field].get("default") == default, field


def test_complete_confidence_bounds_and_urgency_enum_are_in_the_schema():
    confidence = get_builtin("__complete__").spec().parameters["properties"]["confidence"]
    assert confidence["minimum"] == 0 and confidence["maximum"] == 1
    urgency = get_builtin("__pause_for_human__").spec().parameters["properties"]["urgency"]
    assert {"enum": ["low", "medium", "high"], "type": "string"} in urgency["anyOf"]


def test_builtin_fields_are_described_for_the_model():
    props = get_builtin("__complete__").spec().parameters["properties"]
    assert props["answer"]["description"] == "The final answer or result"
    assert props["summary"]["description"] == "Brief summary of work performed"
    props = get_builtin("__run_workflow__").spec().parameters["properties"]
    assert set(props) == {"workflow_id", "workflow_name", "input", "wait", "timeout_ms"}
    props = get_builtin("__pause_for_human__").spec().parameters["properties"]
    assert set(props) == {"question", "options", "context_summary", "urgency"}
    props = get_builtin("__store_memory__").spec().parameters["properties"]
    assert props["ttl_seconds"]["anyOf"][0]["exclusiveMinimum"] == 0


def test_annotated_field_constraints_on_a_tool_parameter_are_kept():
    # Local on purpose: with postponed annotations, @tool must resolve these names from the
    # enclosing function's scope (no other test does).
    from typing import Annotated  # noqa: PLC0415 - names must be local to this test (above)

    from pydantic import Field  # noqa: PLC0415 - names must be local to this test (above)

    @tool
    def rate(score: Annotated[float, Field(ge=0, le=1, description="A score 0-1")]) -> float:
        """Rate."""
        return score

    assert rate.spec().parameters["properties"]["score"]["maximum"] == 1
    with pytest.raises(ToolArgumentsError):
        rate.validate_arguments({"score": 2})


def test_unknown_builtin_name_is_a_definition_error():
    with pytest.raises(ToolDefinitionError) as info:
        Agent("unknown_builtin", tools=["__complete__", "__teleport__"])
    assert str(info.value) == (
        "Unknown built-in tool '__teleport__'. Built-ins: __complete__, __run_workflow__, "
        "__workflow_status__, __pause_for_human__, __store_memory__, __retrieve_memory__, "
        "__log_progress__, __remember__, __recall__"  # the last two: helix_dbos.memory
    )
    with pytest.raises(ToolDefinitionError, match="Unknown built-in tool 'search'"):
        get_builtin("search")


def test_builtins_without_a_way_to_finish_fail_at_definition_time():
    with pytest.raises(AgentDefinitionError) as info:
        Agent("no_finish", tools=["__log_progress__", "__store_memory__"])
    assert str(info.value) == (
        "Agent 'no_finish' uses the built-in tools but has no way to finish: include "
        "'__complete__' (or a finish_with tool, an output_schema or a terminating config)"
    )


def test_other_ways_to_finish_are_accepted():
    class Out(BaseModel):
        x: int

    @tool(finish_with=True)
    def submit(x: int) -> int:
        """Submit."""
        return x

    assert Agent("a1", tools=["__log_progress__", "__complete__"]).completion.tool_names == (
        "__complete__",
    )
    Agent("a2", tools=["__log_progress__"], output_schema=Out)
    Agent("a3", tools=["__log_progress__", submit])
    Agent(
        "a4", tools=["__log_progress__", submit], terminating=TerminatingConfig(tool_ids=["submit"])
    )


def test_terminating_ids_must_name_the_agents_tools():
    with pytest.raises(
        AgentDefinitionError, match="has no tool 'nope' named in terminating_config"
    ):
        Agent("a5", tools=["__log_progress__"], terminating=TerminatingConfig(tool_ids=["nope"]))


def test_builtins_by_name_and_by_object_are_the_same_tool():
    by_name = Agent("by_name", tools=["__complete__", "__log_progress__"])
    by_object = Agent("by_object", tools=[complete_tool(), get_builtin("__log_progress__")])
    assert [t.spec() for t in by_name.tools] == [t.spec() for t in by_object.tools]


def test_a_builtin_twice_is_a_duplicate():
    with pytest.raises(AgentDefinitionError, match="duplicate tool name '__complete__'"):
        Agent("twice", tools=["__complete__", complete_tool()])


# --- __complete__ ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["by_name", "by_object"])
async def test_complete_ends_the_run_with_the_agent_result(
    how, helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=["__complete__"] if how == "by_name" else [complete_tool()])
    answer = "Approve. Expense of $847 is within the $1,000 limit."
    mock_llm.add_responses(
        complete(
            "c1",
            answer=answer,
            confidence=0.95,
            summary="Verified receipt, checked policy.",
        ),
        {"type": "text", "content": "never asked"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "Review expense #42")
    result = await handle.result()

    expected = {
        "answer": answer,
        "confidence": 0.95,
        "summary": "Verified receipt, checked policy.",
    }
    assert result.status == "completed", result.error
    assert result.output == {"@agentResult": expected}
    assert DEFAULT_RESULT_KEY == "@agentResult"
    assert len(requests_of(mock_llm, agent)) == 1, "the loop ends at __complete__"
    session = await helix.get_session(handle.session_id)
    assert session.state["@agentResult"] == expected, "stored in context under the result key"
    assert sql(database_url, "SELECT output FROM helix.runs WHERE run_id = %s", handle.run_id) == [
        ({"@agentResult": expected},)
    ]
    assert await tool_json(helix, handle.session_id, "c1") == expected


async def test_complete_applies_the_defaults(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__complete__"])
    mock_llm.add_responses(calls(("c1", "__complete__", {"answer": "42"})), agent=agent.name)
    result = await (await helix.execute(agent, "answer")).result()
    assert result.output == {"@agentResult": {"answer": "42", "confidence": 1.0, "summary": None}}


async def test_complete_result_key_is_configurable(helix, make_agent, mock_llm):
    agent = make_agent(tools=[complete_tool(result_key="verdict")])
    mock_llm.add_responses(complete("c1", answer="yes", confidence=0.5), agent=agent.name)
    handle = await helix.execute(agent, "decide")
    result = await handle.result()
    assert result.output == {"verdict": {"answer": "yes", "confidence": 0.5, "summary": None}}
    state = (await helix.get_session(handle.session_id)).state
    assert "verdict" in state and "@agentResult" not in state


@pytest.mark.parametrize(
    ("confidence", "error"),
    [
        (1.5, "confidence: Input should be less than or equal to 1"),
        (-0.1, "confidence: Input should be greater than or equal to 0"),
    ],
)
async def test_complete_confidence_outside_0_1_is_a_tool_error(
    confidence, error, helix, make_agent, mock_llm
):
    agent = make_agent(tools=["__complete__"])
    mock_llm.add_responses(
        complete("bad", answer="x", confidence=confidence),
        complete("good", answer="x", confidence=1),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    result = await handle.result()
    assert result.status == "completed"
    assert result.output["@agentResult"]["confidence"] == 1
    bad = await tool_result(helix, handle.session_id, "bad")
    assert bad.is_error
    assert bad.content == f"Invalid arguments for tool '__complete__': {error}"
    assert requests_of(mock_llm, agent)[1].messages[-1].content == bad.content, (
        "the model sees the error"
    )


async def test_complete_works_with_a_strict_state_schema(helix, make_agent, mock_llm):
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        step: int = 0

    agent = make_agent(tools=["__complete__"], state_schema=Strict)
    mock_llm.add_responses(complete("c1", answer="fine"), agent=agent.name)
    handle = await helix.execute(agent, "go")
    result = await handle.result()
    assert result.status == "completed", result.error
    assert result.output == {"@agentResult": {"answer": "fine", "confidence": 1.0, "summary": None}}
    assert (await helix.get_session(handle.session_id)).state == {"step": 0}


async def test_complete_without_answer_is_a_tool_error(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__complete__"])
    mock_llm.add_responses(
        calls(("bad", "__complete__", {"confidence": 0.5})), complete("good"), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    bad = await tool_result(helix, handle.session_id, "bad")
    assert bad.is_error
    assert bad.content == "Invalid arguments for tool '__complete__': answer: Field required"


async def test_text_reply_with_complete_available_is_nudged(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__complete__"])
    mock_llm.add_responses(
        {"type": "text", "content": "the answer is 42"},
        complete("c", answer="42"),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()
    assert result.status == "completed" and result.output["@agentResult"]["answer"] == "42"
    assert "`__complete__`" in requests_of(mock_llm, agent)[1].messages[-1].content


# --- __run_workflow__ -----------------------------------------------------------------------------


async def test_run_workflow_by_name_waits_for_the_result(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=["__run_workflow__", "__complete__"])
    mock_llm.add_responses(
        calls(
            (
                "w1",
                "__run_workflow__",
                {
                    "workflow_name": SCREENING,
                    "input": {"customer_name": "Acme Corp", "country": "DE"},
                    "wait": True,
                    "timeout_ms": 120000,
                },
            )
        ),
        complete("c1"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "onboard Acme")
    result = await handle.result()
    assert result.status == "completed", result.error

    out = await tool_json(helix, handle.session_id, "w1")
    child_id = f"{handle.run_id}-w1"
    assert out == {
        "workflow_run_id": child_id,
        "workflow_id": SCREENING,
        "status": "completed",
        "result": {"screening_result": "clear", "matches_found": 0, "customer": "Acme Corp"},
        "context": {},
    }
    status = await on_target_loop(lambda: DBOS.get_workflow_status_async(child_id))
    assert status is not None and status.status == "SUCCESS"
    assert status.parent_workflow_id == handle.workflow_id, "a durable child of the agent run"
    assert requests_of(mock_llm, agent)[1].messages[-1].content == json.dumps(
        out, separators=(",", ":")
    ), "the next observation is the workflow result"
    usage = sql(
        database_url,
        "SELECT tool_name, success FROM helix.usage WHERE run_id = %s AND kind = 'tool'",
        handle.run_id,
    )
    assert ("__run_workflow__", True) in usage


async def test_run_workflow_by_id_from_a_catalogue(helix, make_agent, mock_llm):
    seen: list[dict] = []

    async def lookup(payload: dict) -> dict:
        seen.append(payload)
        return {"rows": payload["n"] * 2}

    name = register_workflow(lookup)
    wf = DBOS.workflow(name=f"{name}_obj")(lookup)  # the decorated function itself
    agent = make_agent(
        tools=[run_workflow_tool({"wf_abc123": wf, "wf_by_name": name}), "__complete__"]
    )
    mock_llm.add_responses(
        calls(
            ("w1", "__run_workflow__", {"workflow_id": "wf_abc123", "input": {"n": 2}}),
            ("w2", "__run_workflow__", {"workflow_id": "wf_by_name", "input": {"n": 5}}),
        ),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    first = await tool_json(helix, handle.session_id, "w1")
    second = await tool_json(helix, handle.session_id, "w2")
    assert first["workflow_id"] == "wf_abc123" and first["result"] == {"rows": 4}
    assert second["workflow_id"] == "wf_by_name" and second["result"] == {"rows": 10}
    assert first["status"] == second["status"] == "completed"
    assert sorted(p["n"] for p in seen) == [2, 5]


async def test_run_workflow_without_wait_returns_at_once_and_the_child_completes(
    helix, make_agent, mock_llm
):
    async def slow(payload: dict) -> str:
        await DBOS.sleep_async(0.4)
        return f"finished {payload['job']}"

    name = register_workflow(slow)
    agent = make_agent(tools=["__run_workflow__", "__complete__"])
    mock_llm.add_responses(
        calls(
            ("w1", "__run_workflow__", {"workflow_name": name, "input": {"job": 7}, "wait": False})
        ),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "dispatch")
    assert (await handle.result()).status == "completed"
    child_id = f"{handle.run_id}-w1"
    assert await tool_json(helix, handle.session_id, "w1") == {
        "workflow_run_id": child_id,
        "workflow_id": name,
        "status": "running",
        "result": None,
        "context": {},
    }
    status = await on_target_loop(lambda: DBOS.get_workflow_status_async(child_id))
    assert status is not None and status.status in ("PENDING", "ENQUEUED"), (
        "the run finished before its child"
    )
    assert status.parent_workflow_id == handle.workflow_id
    for _ in range(100):
        status = await on_target_loop(lambda: DBOS.get_workflow_status_async(child_id))
        if status.status == "SUCCESS":
            break
        await asyncio.sleep(0.05)
    assert status.status == "SUCCESS"
    child = await on_target_loop(lambda: DBOS.retrieve_workflow_async(child_id))
    assert await on_target_loop(child.get_result) == "finished 7"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"workflow_name": "no_such_workflow", "input": {}},
            "Tool '__run_workflow__' failed: Unknown workflow 'no_such_workflow'",
        ),
        (
            {"workflow_id": "wf_missing", "input": {}},
            "Tool '__run_workflow__' failed: Unknown workflow 'wf_missing'",
        ),
        (
            {"input": {}},
            "Tool '__run_workflow__' failed: Either workflow_id or workflow_name is required",
        ),
        (
            {"workflow_name": SCREENING},
            "Invalid arguments for tool '__run_workflow__': input: Field required",
        ),
        (
            {"workflow_name": SCREENING, "input": {"customer_name": "x"}, "timeout_ms": 0},
            "Invalid arguments for tool '__run_workflow__': timeout_ms: Input should be greater than 0",
        ),
    ],
)
async def test_run_workflow_errors_go_back_to_the_model(
    arguments, error, helix, make_agent, mock_llm
):
    agent = make_agent(tools=["__run_workflow__", "__complete__"])
    mock_llm.add_responses(
        calls(("w1", "__run_workflow__", arguments)), complete(), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed", "the run continues"
    message = await tool_result(helix, handle.session_id, "w1")
    assert message.is_error and message.content == error
    assert requests_of(mock_llm, agent)[1].messages[-1].content == error


async def test_run_workflow_timeout_is_a_tool_error_and_the_child_continues(
    helix, make_agent, mock_llm
):
    async def sleepy(payload: dict) -> str:
        await DBOS.sleep_async(1.0)
        return "late"

    name = register_workflow(sleepy)
    agent = make_agent(tools=["__run_workflow__", "__complete__"])
    mock_llm.add_responses(
        calls(("w1", "__run_workflow__", {"workflow_name": name, "input": {}, "timeout_ms": 200})),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    child_id = f"{handle.run_id}-w1"
    message = await tool_result(helix, handle.session_id, "w1")
    assert message.is_error
    assert message.content == (
        f"Tool '__run_workflow__' failed: Workflow '{name}' did not finish within 200 ms; "
        f"it continues as run {child_id}"
    )
    child = await on_target_loop(lambda: DBOS.retrieve_workflow_async(child_id))
    assert await on_target_loop(child.get_result) == "late"


async def test_run_workflow_failing_child_is_a_tool_error(helix, make_agent, mock_llm):
    async def broken(payload: dict) -> None:
        raise RuntimeError("screening service down")

    name = register_workflow(broken)
    agent = make_agent(tools=["__run_workflow__", "__complete__"])
    mock_llm.add_responses(
        calls(("w1", "__run_workflow__", {"workflow_name": name, "input": {}})),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    message = await tool_result(helix, handle.session_id, "w1")
    assert message.is_error
    assert message.content.startswith(
        f"Tool '__run_workflow__' failed: Workflow '{name}' (run {handle.run_id}-w1) failed:"
    )
    assert "screening service down" in message.content


# --- __pause_for_human__ --------------------------------------------------------------------------


async def wait_until_paused(helix, session_id: str) -> list[PendingToolCall]:
    for _ in range(200):
        run = await helix.get_current_run(session_id)
        pending = [p for p in await helix.pending_tool_calls(session_id) if not p.answered]
        if run is not None and run.status == "paused" and pending:
            return pending
        await asyncio.sleep(0.02)
    raise AssertionError("run never paused")


PAUSE_INPUT = {
    "question": "Two customers match 'John Smith'. Which should I use for this refund?",
    "options": ["John Smith (ID: C-001)", "John Smith (ID: C-047)"],
    "context_summary": "Processing refund #RF-789 for order #12345. Amount: $234.00.",
    "urgency": "medium",
}


@pytest.mark.parametrize("answer_with", ["submit_human_input", "dbos_send"])
async def test_pause_for_human_pauses_durably_and_resumes_with_the_answer(
    answer_with, helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=["__pause_for_human__", "__complete__"])
    mock_llm.add_responses(
        calls(("p1", "__pause_for_human__", PAUSE_INPUT)),
        complete("c1", answer="Refund C-001"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "Refund John Smith")
    pending = await wait_until_paused(helix, handle.session_id)

    assert [(p.tool_call_id, p.tool_name, p.kind, p.input) for p in pending] == [
        ("p1", "__pause_for_human__", "human_input", PAUSE_INPUT)
    ]
    assert sql(
        database_url,
        "SELECT status, waiting_for, waiting_since IS NOT NULL FROM helix.runs WHERE run_id = %s",
        handle.run_id,
    ) == [("paused", "human_input", True)]
    assert sql(
        database_url, "SELECT status FROM helix.sessions WHERE session_id = %s", handle.session_id
    ) == [("paused",)]
    assert sql(
        database_url,
        "SELECT run_id, waiting_for, tool_call_id, tool_name, kind, input FROM helix.waiting_runs "
        "WHERE session_id = %s",
        handle.session_id,
    ) == [(handle.run_id, "human_input", "p1", "__pause_for_human__", "human_input", PAUSE_INPUT)]
    chunks = sql(
        database_url,
        "SELECT payload FROM helix.stream_chunks WHERE run_id = %s AND type = 'human_input_request'",
        handle.run_id,
    )
    assert len(chunks) == 1
    assert chunks[0][0]["tool_call_id"] == "p1" and chunks[0][0]["input"] == PAUSE_INPUT
    assert len(requests_of(mock_llm, agent)) == 1, "no LLM call while paused"

    human_input = "Use John Smith C-001, the premium customer."
    if answer_with == "submit_human_input":
        await helix.submit_human_input(handle.session_id, "p1", human_input, approved=True)
    else:
        payload = {"tool_call_id": "p1", "human_input": human_input, "approved": True}
        await on_target_loop(
            lambda: DBOS.send_async(handle.workflow_id, payload, "helix.human_input")
        )
    result = await handle.result()

    assert result.status == "completed", result.error
    assert result.output["@agentResult"]["answer"] == "Refund C-001"
    observation = await tool_json(helix, handle.session_id, "p1")
    assert observation == {"human_input": human_input, "approved": True}
    next_request = requests_of(mock_llm, agent)[1]
    assert next_request.messages[-1].role == "tool"
    assert json.loads(next_request.messages[-1].content) == observation
    assert sql(
        database_url,
        "SELECT status, result FROM helix.tool_calls WHERE run_id = %s AND tool_call_id = 'p1'",
        handle.run_id,
    ) == [("completed", {"tool_call_id": "p1", "human_input": human_input, "approved": True})]
    assert sql(
        database_url,
        "SELECT count(*) FROM helix.waiting_runs WHERE session_id = %s",
        handle.session_id,
    ) == [(0,)]


async def test_pause_for_human_with_only_a_question_and_a_rejection(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__pause_for_human__", "__complete__"])
    mock_llm.add_responses(
        calls(("p1", "__pause_for_human__", {"question": "Proceed?"})),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    pending = await wait_until_paused(helix, handle.session_id)
    assert pending[0].input == {"question": "Proceed?"}
    await helix.submit_human_input(handle.session_id, "p1", approved=False)
    assert (await handle.result()).status == "completed"
    assert await tool_json(helix, handle.session_id, "p1") == {
        "human_input": None,
        "approved": False,
    }


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"question": "Which?", "urgency": "critical"},
            "Invalid arguments for tool '__pause_for_human__': urgency: "
            "Input should be 'low', 'medium' or 'high'",
        ),
        (
            {"options": ["a", "b"]},
            "Invalid arguments for tool '__pause_for_human__': question: Field required",
        ),
    ],
)
async def test_pause_for_human_invalid_arguments_are_a_tool_error(
    arguments, error, helix, make_agent, mock_llm
):
    agent = make_agent(tools=["__pause_for_human__", "__complete__"])
    mock_llm.add_responses(
        calls(("p1", "__pause_for_human__", arguments)), complete(), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    paused = False
    for _ in range(100):
        run = await helix.get_run(handle.run_id)
        if run.status in ("paused", "completed", "failed"):
            paused = run.status == "paused"
            break
        await asyncio.sleep(0.02)
    if paused:
        await helix.abort(handle.session_id, reason="test cleanup")
    assert not paused, "an invalid call must not pause the run"
    assert (await handle.result()).status == "completed"
    message = await tool_result(helix, handle.session_id, "p1")
    assert message.is_error and message.content == error


async def test_pause_for_human_wrong_answers_are_rejected(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__pause_for_human__", "__complete__"])
    mock_llm.add_responses(
        calls(("p1", "__pause_for_human__", {"question": "Go?"})), complete(), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    await wait_until_paused(helix, handle.session_id)
    with pytest.raises(InvalidAnswerError, match="answer it with submit_human_input"):
        await helix.approve(handle.session_id, "p1")
    # A malformed raw message changes nothing: the run keeps waiting.
    await on_target_loop(
        lambda: DBOS.send_async(
            handle.workflow_id, {"tool_call_id": "p1", "bogus": 1}, "helix.human_input"
        )
    )
    await asyncio.sleep(0.2)
    assert (await helix.get_run(handle.run_id)).status == "paused"
    await helix.submit_human_input(handle.session_id, "p1", "yes", approved=True)
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.submit_human_input(handle.session_id, "p1", "again")
    assert (await handle.result()).status == "completed"


# --- __store_memory__ / __retrieve_memory__ ---------------------------------------------------------

STORED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
CUSTOMER = {
    "name": "Jane Doe",
    "email": "jane@example.com",
    "tier": "premium",
    "account_age_years": 4,
}


async def test_store_and_retrieve_memory_shapes(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=["__store_memory__", "__retrieve_memory__", "__complete__"])
    mock_llm.add_responses(
        calls(
            ("s1", "__store_memory__", {"key": "customer_info", "value": CUSTOMER}),
            ("s2", "__store_memory__", {"key": "count", "value": 3}),
            ("s3", "__store_memory__", {"key": "tags", "value": ["a", "b"]}),
            ("s4", "__store_memory__", {"key": "note", "value": "draft"}),
        ),
        calls(
            ("r1", "__retrieve_memory__", {"key": "customer_info"}),
            ("r2", "__retrieve_memory__", {"key": "count"}),
            ("r3", "__retrieve_memory__", {"key": "tags"}),
            ("r4", "__retrieve_memory__", {"key": "note"}),
            ("r5", "__retrieve_memory__", {"key": "unknown_key"}),
        ),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "remember")
    assert (await handle.result()).status == "completed"
    sid = handle.session_id

    assert await tool_json(helix, sid, "s1") == {
        "stored": True,
        "key": "customer_info",
        "message": 'Stored value under key "customer_info"',
    }
    found = await tool_json(helix, sid, "r1")
    assert set(found) == {"found", "key", "value", "stored_at"}
    assert found["found"] is True and found["key"] == "customer_info"
    assert found["value"] == CUSTOMER, "objects come back as objects, not JSON text"
    assert STORED_AT.match(found["stored_at"]), found["stored_at"]
    assert (await tool_json(helix, sid, "r2"))["value"] == 3
    assert (await tool_json(helix, sid, "r3"))["value"] == ["a", "b"]
    assert (await tool_json(helix, sid, "r4"))["value"] == "draft"
    assert await tool_json(helix, sid, "r5") == {
        "found": False,
        "key": "unknown_key",
        "message": 'No memory found for key "unknown_key"',
    }
    rows = sql(
        database_url,
        "SELECT key, value, expires_at FROM helix.memory WHERE run_id = %s ORDER BY key",
        handle.run_id,
    )
    assert rows == [
        ("count", 3, None),
        ("customer_info", CUSTOMER, None),
        ("note", "draft", None),
        ("tags", ["a", "b"], None),
    ]


async def test_storing_a_key_again_overwrites_it(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__store_memory__", "__retrieve_memory__", "__complete__"])
    mock_llm.add_responses(
        calls(("s1", "__store_memory__", {"key": "k", "value": "old"})),
        calls(("s2", "__store_memory__", {"key": "k", "value": {"v": "new"}})),
        calls(("r1", "__retrieve_memory__", {"key": "k"})),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    assert (await tool_json(helix, handle.session_id, "r1"))["value"] == {"v": "new"}


async def test_memory_is_scoped_to_one_run(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=["__store_memory__", "__retrieve_memory__", "__complete__"])
    mock_llm.add_responses(
        calls(("s1", "__store_memory__", {"key": "k", "value": "first run"})),
        complete("c1"),
        calls(("r1", "__retrieve_memory__", {"key": "k"})),
        complete("c2"),
        agent=agent.name,
    )
    first = await helix.execute(agent, "store")
    assert (await first.result()).status == "completed"
    second = await helix.execute(agent, "retrieve", session_id=first.session_id)
    assert (await second.result()).status == "completed"
    assert second.session_id == first.session_id and second.run_id != first.run_id
    assert await tool_json(helix, first.session_id, "r1") == {
        "found": False,
        "key": "k",
        "message": 'No memory found for key "k"',
    }
    assert sql(
        database_url,
        "SELECT run_id, value FROM helix.memory WHERE run_id IN (%s, %s)",
        first.run_id,
        second.run_id,
    ) == [(first.run_id, "first run")], "durable in helix.memory, under the first run"


async def test_memory_ttl_is_honoured(helix, make_agent, mock_llm, database_url):
    @tool
    async def wait_a_moment(seconds: float) -> str:
        """Wait."""
        await asyncio.sleep(seconds)
        return "waited"

    agent = make_agent(
        tools=["__store_memory__", "__retrieve_memory__", "__complete__", wait_a_moment]
    )
    mock_llm.add_responses(
        calls(
            ("s1", "__store_memory__", {"key": "short", "value": 1, "ttl_seconds": 1}),
            ("s2", "__store_memory__", {"key": "long", "value": 2, "ttl_seconds": 3600}),
        ),
        calls(("r1", "__retrieve_memory__", {"key": "short"})),
        calls(("w", "wait_a_moment", {"seconds": 1.1})),
        calls(
            ("r2", "__retrieve_memory__", {"key": "short"}),
            ("r3", "__retrieve_memory__", {"key": "long"}),
        ),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    sid = handle.session_id
    assert (await tool_json(helix, sid, "r1"))["found"] is True, "not expired yet"
    assert await tool_json(helix, sid, "r2") == {
        "found": False,
        "key": "short",
        "message": 'No memory found for key "short"',
    }
    assert (await tool_json(helix, sid, "r3"))["value"] == 2
    ttl = sql(
        database_url,
        "SELECT key, round(extract(epoch FROM expires_at - stored_at)) FROM helix.memory "
        "WHERE run_id = %s ORDER BY key",
        handle.run_id,
    )
    assert [(k, int(v)) for k, v in ttl] == [("long", 3600), ("short", 1)]


async def test_memory_ttl_must_be_positive(helix, make_agent, mock_llm):
    agent = make_agent(tools=["__store_memory__", "__complete__"])
    mock_llm.add_responses(
        calls(("s1", "__store_memory__", {"key": "k", "value": 1, "ttl_seconds": 0})),
        complete(),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    message = await tool_result(helix, handle.session_id, "s1")
    assert message.is_error and message.content == (
        "Invalid arguments for tool '__store_memory__': ttl_seconds: Input should be greater than 0"
    )


# --- __log_progress__ -----------------------------------------------------------------------------


async def test_log_progress_records_a_milestone_without_changing_the_flow(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=["__log_progress__", "__complete__"])
    data = {"articles_found": 3, "contacts_found": 2, "sources": ["TechCrunch", "SEC Filing"]}
    mock_llm.add_responses(
        calls(
            (
                "l1",
                "__log_progress__",
                {
                    "message": "Research phase complete.",
                    "milestone": "research_complete",
                    "data": data,
                },
            )
        ),
        calls(("l2", "__log_progress__", {"message": "Drafting."})),
        complete("c1", answer="report"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "research")
    result = await handle.result()

    assert result.status == "completed" and result.output["@agentResult"]["answer"] == "report"
    assert len(requests_of(mock_llm, agent)) == 3, "logging does not end or skip a step"
    assert await tool_json(helix, handle.session_id, "l1") == {
        "logged": True,
        "milestone": "research_complete",
        "message": "Progress logged",
    }
    assert await tool_json(helix, handle.session_id, "l2") == {
        "logged": True,
        "milestone": None,
        "message": "Progress logged",
    }
    rows = sql(
        database_url,
        "SELECT tool_call_id, session_id, agent_name, message, milestone, data "
        "FROM helix.progress WHERE run_id = %s ORDER BY created_at, tool_call_id",
        handle.run_id,
    )
    assert rows == [
        (
            "l1",
            handle.session_id,
            agent.name,
            "Research phase complete.",
            "research_complete",
            data,
        ),
        ("l2", handle.session_id, agent.name, "Drafting.", None, None),
    ]
    chunks = sql(
        database_url,
        "SELECT payload FROM helix.stream_events WHERE run_id = %s AND type = 'custom' ORDER BY seq",
        handle.run_id,
    )
    assert [c[0] for c in chunks] == [
        {
            "event": "progress",
            "data": {
                "message": "Research phase complete.",
                "milestone": "research_complete",
                "data": data,
            },
        },
        {"event": "progress", "data": {"message": "Drafting.", "milestone": None, "data": None}},
    ]
    session = await helix.get_session(handle.session_id)
    assert set(session.state) == {"@agentResult"}, "progress does not touch the state"


async def test_log_progress_needs_a_message(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=["__log_progress__", "__complete__"])
    mock_llm.add_responses(
        calls(("l1", "__log_progress__", {"milestone": "m"})), complete(), agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    assert (await handle.result()).status == "completed"
    message = await tool_result(helix, handle.session_id, "l1")
    assert message.is_error
    assert (
        message.content == "Invalid arguments for tool '__log_progress__': message: Field required"
    )
    assert sql(
        database_url, "SELECT count(*) FROM helix.progress WHERE run_id = %s", handle.run_id
    ) == [(0,)]


async def test_workflow_status_reports_a_child_started_without_wait_and_its_result(
    helix, make_agent, mock_llm, database_url
):
    """Seed 003: with `wait: false` the agent "can check status later": `__workflow_status__`
    says `running` while the child works and gives its result once it completed; a
    workflow this session did not start is not visible."""
    release = asyncio.Event()

    async def job(payload: dict) -> dict:
        await release.wait()  # in-process, for the test: the child works until released
        return {"rows": payload["n"] * 3}

    name = register_workflow(job)

    @tool
    async def release_job(workflow_run_id: str) -> str:
        """Let the job finish and wait until DBOS recorded its success."""
        release.set()
        for _ in range(600):
            rows = await asyncio.to_thread(
                sql,
                database_url,
                "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
                workflow_run_id,
            )
            if rows and rows[0][0] == "SUCCESS":
                return "released"
            await asyncio.sleep(0.05)
        return "never finished"

    agent = make_agent(
        tools=["__run_workflow__", "__workflow_status__", release_job, "__complete__"]
    )
    other = make_agent(tools=["__workflow_status__", "__complete__"])

    def respond(request) -> dict:
        """The model reads the workflow_run_id from __run_workflow__'s result."""
        results = [m for m in request.messages if m.role == "tool"]
        if request.agent_name == other.name:
            if not results:
                return calls(("x", "__workflow_status__", {"workflow_run_id": spied[0]}))
            return complete()
        if not results:
            arguments = {"workflow_name": name, "input": {"n": 2}, "wait": False}
            return calls(("w1", "__run_workflow__", arguments))
        child = json.loads(str(results[0].content))["workflow_run_id"]
        spied[:] = [child]
        steps = [
            calls(("s1", "__workflow_status__", {"workflow_run_id": child})),
            calls(("r", "release_job", {"workflow_run_id": child})),
            calls(("s2", "__workflow_status__", {"workflow_run_id": child})),
            complete(),
        ]
        return steps[len(results) - 1]

    spied: list[str] = []
    mock_llm.set_responder(respond)
    try:
        handle = await helix.execute(agent, "dispatch")
        assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
        nosy = await (await helix.execute(other, "peek")).result()
    finally:
        mock_llm.set_responder(None)
        release.set()
    child_id = f"{handle.run_id}-w1"

    assert await tool_json(helix, handle.session_id, "s1") == {
        "workflow_run_id": child_id,
        "status": "running",
        "result": None,
    }
    assert await tool_json(helix, handle.session_id, "s2") == {
        "workflow_run_id": child_id,
        "status": "completed",
        "result": {"rows": 6},
    }
    # Another session cannot read this session's workflow.
    assert nosy.status == "completed"
    message = await tool_result(helix, nosy.session_id, "x")
    assert message.is_error and f"No workflow run '{child_id}'" in message.content
