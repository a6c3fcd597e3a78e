"""Tool, Agent and ToolContext definitions: pure unit tests, no database, no DBOS."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from helix_dbos.definitions.agent import Agent, LLMConfig
from helix_dbos.definitions.tool import Tool, tool
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.errors import (
    AgentDefinitionError,
    StateUpdateError,
    ToolArgumentsError,
    ToolDefinitionError,
)
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, ToolSpec


class SearchInput(BaseModel):
    query: str
    limit: int = 5


class Answer(BaseModel):
    answer: str
    confidence: float


class Notes(BaseModel):
    notes: list[str] = []
    count: int = 0


class Other(BaseModel):
    unrelated: str = "x"


def make_ctx(
    state: dict[str, Any] | None = None, schema: type[BaseModel] | None = None
) -> ToolContext:
    return ToolContext(
        session_id="sess",
        run_id="run",
        agent_name="agent",
        tool_call_id="tc1",
        tool_name="t",
        step=2,
        state=state,
        state_schema=schema,
    )


# --- @tool: schema, description, parameters ---------------------------------------


@tool
async def search(query: str, limit: int = 3) -> list[str]:
    """Search for information.

    Longer explanation that is not part of the description.
    """
    return [f"{query}:{i}" for i in range(limit)]


def test_tool_from_signature_and_docstring() -> None:
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search for information."
    schema = search.spec().parameters
    assert schema["properties"]["query"]["type"] == "string"
    assert schema["properties"]["limit"]["type"] == "integer"
    assert schema["properties"]["limit"]["default"] == 3
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    assert search.execute == "server"
    assert search.finish_with is False
    assert search.require_approval is False


def test_tool_options_override_name_and_description_and_set_strict() -> None:
    @tool(name="lookup", description="Look something up", strict=True)
    def find(term: str) -> str:
        """Ignored docstring."""
        return term

    assert find.name == "lookup"
    assert find.description == "Look something up"
    spec = find.spec()
    assert isinstance(spec, ToolSpec)
    assert spec.name == "lookup"
    assert spec.description == "Look something up"
    assert spec.strict is True
    assert list(spec.parameters["properties"]) == ["term"]


def test_tool_without_docstring_has_empty_description() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.description == ""
    assert ping.spec().parameters["properties"] == {}


def test_single_pydantic_model_parameter_is_the_input_schema() -> None:
    received: list[Any] = []

    @tool
    def find(params: SearchInput) -> int:
        """Find things."""
        received.append(params)
        return params.limit

    assert find.input_model is SearchInput
    assert find.spec().parameters == SearchInput.model_json_schema()
    args = find.validate_arguments({"query": "q"})
    assert isinstance(args, SearchInput)
    assert asyncio.run(find.call(args, make_ctx())) == 5
    assert received == [SearchInput(query="q", limit=5)]


def test_context_parameter_by_annotation_is_detected_and_excluded_from_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    def note(text: str, context: ToolContext) -> str:
        seen.append(context)
        return text.upper()

    assert list(note.spec().parameters["properties"]) == ["text"]
    ctx = make_ctx()
    assert asyncio.run(note.call(note.validate_arguments({"text": "hi"}), ctx)) == "HI"
    assert seen == [ctx]


def test_context_parameter_named_ctx_is_detected_without_annotation() -> None:
    @tool
    def note(text: str, ctx) -> str:  # type: ignore[no-untyped-def]
        return f"{ctx.agent_name}:{text}"

    assert list(note.spec().parameters["properties"]) == ["text"]
    assert asyncio.run(note.call(note.validate_arguments({"text": "hi"}), make_ctx())) == "agent:hi"


def test_context_with_a_pydantic_model_parameter() -> None:
    @tool(finish_with=True)
    def submit(data: Answer, ctx: ToolContext) -> dict[str, Any]:
        ctx.update_state({"last": data.answer})
        return data.model_dump()

    assert submit.input_model is Answer
    ctx = make_ctx()
    out = asyncio.run(submit.call(submit.validate_arguments({"answer": "a", "confidence": 1}), ctx))
    assert out == {"answer": "a", "confidence": 1.0}
    assert ctx.state_dict == {"last": "a"}


async def test_sync_tools_run_in_a_worker_thread_and_async_tools_on_the_loop() -> None:
    loop_thread = threading.get_ident()

    @tool
    def sync_tool(x: int) -> tuple[int, int]:
        return x * 2, threading.get_ident()

    @tool
    async def async_tool(x: int) -> tuple[int, int]:
        await asyncio.sleep(0)
        return x * 3, threading.get_ident()

    doubled, sync_thread = await sync_tool.call(sync_tool.validate_arguments({"x": 2}), make_ctx())
    tripled, async_thread = await async_tool.call(
        async_tool.validate_arguments({"x": 2}), make_ctx()
    )
    assert doubled == 4 and tripled == 6
    assert sync_thread != loop_thread
    assert async_thread == loop_thread


async def test_tool_call_passes_validated_values_and_defaults() -> None:
    result = await search.call(search.validate_arguments({"query": "q"}), make_ctx())
    assert result == ["q:0", "q:1", "q:2"]


async def test_tool_exceptions_propagate_from_call() -> None:
    @tool
    def broken() -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        await broken.call(broken.validate_arguments({}), make_ctx())


def test_tool_with_explicit_input_model() -> None:
    def run(query: str, limit: int, ctx: ToolContext) -> str:
        return f"{query}/{limit}/{ctx.run_id}"

    t = Tool("explicit", run, description="d", input_model=SearchInput)
    assert t.input_model is SearchInput
    assert asyncio.run(t.call(t.validate_arguments({"query": "q"}), make_ctx())) == "q/5/run"


# --- validate_arguments ----------------------------------------------------------


def test_validate_arguments_missing_field_names_the_tool_and_the_field() -> None:
    with pytest.raises(ToolArgumentsError) as info:
        search.validate_arguments({"limit": 2})
    message = str(info.value)
    assert "search" in message
    assert "query" in message
    assert "Field required" in message


def test_validate_arguments_wrong_type_and_extra_field() -> None:
    with pytest.raises(ToolArgumentsError, match="limit"):
        search.validate_arguments({"query": "q", "limit": "many"})
    with pytest.raises(ToolArgumentsError, match="surprise"):
        search.validate_arguments({"query": "q", "surprise": True})


def test_validate_arguments_rejects_non_objects() -> None:
    with pytest.raises(ToolArgumentsError, match="expected a JSON object, got list"):
        search.validate_arguments(["q"])
    with pytest.raises(ToolArgumentsError, match="got str"):
        search.validate_arguments("q")


def test_validate_arguments_reports_unparseable_raw_arguments() -> None:
    raw = {"__raw_arguments__": '{"query": "q"', "__parse_error__": "invalid JSON: Expecting '}'"}
    with pytest.raises(ToolArgumentsError) as info:
        search.validate_arguments(raw)
    message = str(info.value)
    assert "search" in message
    assert "not valid JSON" in message
    assert "Expecting '}'" in message


def test_validate_arguments_returns_the_model_with_coercion() -> None:
    args = search.validate_arguments({"query": "q", "limit": "7"})
    assert args.model_dump() == {"query": "q", "limit": 7}


# --- definition-time rejection ---------------------------------------------------


def _fn() -> str:
    return "x"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        (
            {"execute": "client", "finish_with": True},
            "execute='client' cannot be combined with finish_with",
        ),
        ({"execute": "client", "require_approval": True}, "require_approval"),
        ({"execute": "client", "require_approval": lambda a, c: True}, "require_approval"),
        ({"finish_with": True, "require_approval": True}, "finish_with"),
        ({"finish_with_transform": lambda o: o}, "finish_with_transform needs finish_with"),
        ({"execute": "remote"}, "execute must be 'server' or 'client'"),
    ],
)
def test_invalid_tool_combinations_are_rejected(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ToolDefinitionError, match=fragment.replace("(", r"\(")):
        tool(name="bad", **kwargs)(_fn)


def test_reserved_and_empty_names_are_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="reserved"):
        tool(name=FINISH_TOOL_NAME)(_fn)
    with pytest.raises(ToolDefinitionError, match="reserved"):
        Tool(FINISH_TOOL_NAME, _fn)
    with pytest.raises(ToolDefinitionError, match="non-empty"):
        Tool("", _fn)


def test_server_tool_needs_a_function_but_a_client_tool_does_not() -> None:
    with pytest.raises(ToolDefinitionError, match="needs a function"):
        Tool("nothing")
    client = Tool("get_location", execute="client", description="Where the user is")
    assert client.execute == "client"
    assert client.spec().parameters["properties"] == {}
    with pytest.raises(ToolDefinitionError, match="no server-side function"):
        asyncio.run(client.call(client.validate_arguments({}), make_ctx()))


def test_client_tool_from_decorator_keeps_its_schema() -> None:
    @tool(execute="client", client_timeout_seconds=30)
    def get_location(precision: int = 2) -> dict[str, float]:
        """Ask the client for its location."""
        return {}

    assert get_location.execute == "client"
    assert get_location.client_timeout_seconds == 30
    assert get_location.spec().parameters["properties"]["precision"]["default"] == 2


def test_finish_with_and_transform_are_kept() -> None:
    def transform(out: dict[str, Any]) -> dict[str, Any]:
        return {"result": out["answer"].upper()}

    @tool(finish_with=True, finish_with_transform=transform)
    def submit_answer(answer: str) -> dict[str, Any]:
        return {"answer": answer}

    assert submit_answer.finish_with is True
    assert submit_answer.finish_with_transform is transform


# --- approval --------------------------------------------------------------------


async def test_needs_approval_with_booleans() -> None:
    always = tool(require_approval=True)(_fn)
    never = tool(_fn)
    assert await always.needs_approval({}, make_ctx()) is True
    assert await never.needs_approval({}, make_ctx()) is False


async def test_needs_approval_predicate_sees_arguments_and_context() -> None:
    seen: list[tuple[Any, ToolContext]] = []

    def predicate(arguments: Any, ctx: ToolContext) -> bool:
        seen.append((arguments, ctx))
        return arguments["path"].startswith("/etc")

    @tool(require_approval=predicate)
    def delete_file(path: str) -> str:
        return path

    ctx = make_ctx()
    assert await delete_file.needs_approval({"path": "/etc/passwd"}, ctx) is True
    assert await delete_file.needs_approval({"path": "/tmp/x"}, ctx) is False
    assert seen[0] == ({"path": "/etc/passwd"}, ctx)


async def test_needs_approval_async_predicate() -> None:
    async def predicate(arguments: Any, ctx: ToolContext) -> bool:
        await asyncio.sleep(0)
        return arguments.get("amount", 0) > 100

    pay = tool(name="pay", require_approval=predicate)(_fn)
    assert await pay.needs_approval({"amount": 500}, make_ctx()) is True
    assert await pay.needs_approval({"amount": 5}, make_ctx()) is False


async def test_needs_approval_fails_closed_when_the_predicate_raises() -> None:
    def broken(arguments: Any, ctx: ToolContext) -> bool:
        raise KeyError("path")

    async def broken_async(arguments: Any, ctx: ToolContext) -> bool:
        await asyncio.sleep(0)
        raise RuntimeError("policy service down")

    assert await tool(name="a", require_approval=broken)(_fn).needs_approval({}, make_ctx()) is True
    assert (
        await tool(name="b", require_approval=broken_async)(_fn).needs_approval({}, make_ctx())
        is True
    )


# --- Agent -----------------------------------------------------------------------


@tool(finish_with=True)
def submit_answer(answer: str) -> dict[str, str]:
    """Submit the final answer."""
    return {"answer": answer}


@tool(finish_with=True)
def reject(reason: str) -> dict[str, str]:
    """Reject the submission."""
    return {"reason": reason}


def test_agent_rejects_duplicate_tool_names() -> None:
    other_search = tool(name="search")(_fn)
    with pytest.raises(AgentDefinitionError, match="duplicate tool name 'search'"):
        Agent("dup", tools=[search, other_search])


def test_agent_rejects_a_tool_named_finish() -> None:
    sneaky = tool(name="sneaky")(_fn)
    sneaky.name = FINISH_TOOL_NAME  # bypasses the Tool check; the Agent still refuses it
    with pytest.raises(AgentDefinitionError, match="reserved"):
        Agent("clash", tools=[sneaky], output_schema=Answer)


def test_agent_rejects_non_tools_and_bad_settings() -> None:
    with pytest.raises(AgentDefinitionError, match="Tool objects"):
        Agent("raw", tools=[_fn])  # type: ignore[list-item]
    with pytest.raises(AgentDefinitionError):
        Agent("")
    with pytest.raises(AgentDefinitionError, match="max_steps"):
        Agent("zero", max_steps=0)
    with pytest.raises(AgentDefinitionError, match="negative"):
        Agent("neg", max_consecutive_nudges=-1)
    with pytest.raises(AgentDefinitionError, match="negative"):
        Agent("neg", max_output_retries=-1)


def test_completion_injects_finish_only_with_output_schema_and_no_finish_with_tool() -> None:
    mode = Agent("analyzer", tools=[search], output_schema=Answer).completion
    assert mode.tool_names == (FINISH_TOOL_NAME,)
    assert mode.inject_finish is True
    assert mode.requires_tool is True


def test_completion_lists_finish_with_tools_instead_of_finish() -> None:
    agent = Agent("submission", tools=[search, submit_answer, reject], output_schema=Answer)
    mode = agent.completion
    assert mode.tool_names == ("submit_answer", "reject")
    assert mode.inject_finish is False
    assert mode.primary_tool == "submit_answer"
    assert [t.name for t in agent.finish_with_tools] == ["submit_answer", "reject"]
    # A finish_with tool without an output schema still makes completion tool-driven.
    assert Agent("no_schema", tools=[submit_answer]).completion.tool_names == ("submit_answer",)


def test_completion_is_free_without_schema_or_finish_with_tools() -> None:
    mode = Agent("chat", tools=[search]).completion
    assert mode.tool_names == ()
    assert mode.inject_finish is False
    assert mode.requires_tool is False


def test_agent_tool_lookup_and_finish_parameters() -> None:
    agent = Agent("a", tools=[search], output_schema=Answer)
    assert agent.tool("search") is search
    assert agent.tool("missing") is None
    assert agent.finish_parameters() == Answer.model_json_schema()


def test_validate_output_returns_json_ready_data_or_raises() -> None:
    agent = Agent("a", output_schema=Answer)
    assert agent.validate_output({"answer": "yes", "confidence": "0.5"}) == {
        "answer": "yes",
        "confidence": 0.5,
    }
    assert agent.validate_output(Answer(answer="a", confidence=1)) == {
        "answer": "a",
        "confidence": 1.0,
    }
    with pytest.raises(ValidationError, match="confidence"):
        agent.validate_output({"answer": "yes"})
    # Without a schema any value passes through untouched.
    assert Agent("free").validate_output("text") == "text"


def test_initial_state_with_state_schema() -> None:
    agent = Agent("a", state_schema=Notes)
    assert agent.initial_state() == {"notes": [], "count": 0}
    assert agent.initial_state({"count": "3"}) == {"notes": [], "count": 3}
    assert agent.initial_state(Notes(notes=["x"])) == {"notes": ["x"], "count": 0}
    with pytest.raises(ValidationError):
        agent.initial_state({"count": "many"})


def test_initial_state_without_state_schema() -> None:
    agent = Agent("a")
    assert agent.initial_state() == {}
    given = {"k": 1}
    state = agent.initial_state(given)
    assert state == {"k": 1}
    state["k"] = 2
    assert given == {"k": 1}
    with pytest.raises(AgentDefinitionError, match="dict or a pydantic model"):
        agent.initial_state([1, 2])


def test_resolve_system_prompt_gives_a_callable_the_state_model() -> None:
    seen: list[Any] = []

    def prompt(state: Any) -> str:
        seen.append(state)
        return f"You have {len(state.notes)} notes."

    agent = Agent("a", system_prompt=prompt, state_schema=Notes)
    assert agent.resolve_system_prompt({"notes": ["a", "b"], "count": 2}) == "You have 2 notes."
    assert isinstance(seen[0], Notes)


def test_resolve_system_prompt_without_schema_or_static() -> None:
    dynamic = Agent("a", system_prompt=lambda s: f"count={s['count']}")
    assert dynamic.resolve_system_prompt({"count": 4}) == "count=4"
    assert Agent("b", system_prompt="Static.").resolve_system_prompt({"x": 1}) == "Static."


def test_llm_config_provider() -> None:
    assert LLMConfig(model="anthropic:claude-sonnet-4-5").provider == "anthropic"
    assert LLMConfig(model="openai:gpt-4o").provider == "openai"
    assert LLMConfig().provider == "mock"
    assert Agent("a").llm.model == "mock"


# --- ToolContext -----------------------------------------------------------------


def test_context_identity_and_initial_state_is_copied() -> None:
    initial = {"items": [1]}
    ctx = make_ctx(initial)
    assert (ctx.session_id, ctx.run_id, ctx.agent_name) == ("sess", "run", "agent")
    assert (ctx.tool_call_id, ctx.tool_name, ctx.step) == ("tc1", "t", 2)
    ctx.update_state(lambda d: d["items"].append(2))
    assert initial == {"items": [1]}
    assert ctx.state_dict == {"items": [1, 2]}


def test_get_state_returns_a_copy() -> None:
    ctx = make_ctx({"items": [1]})
    view = ctx.get_state()
    view["items"].append(99)
    assert ctx.get_state() == {"items": [1]}


def test_update_state_with_draft_mutation() -> None:
    ctx = make_ctx({"count": 1})

    def bump(draft: dict[str, Any]) -> None:
        draft["count"] += 1
        draft["submitted"] = "yes"

    ctx.update_state(bump)
    assert ctx.state_dict == {"count": 2, "submitted": "yes"}


def test_update_state_with_returned_value_replaces_the_state() -> None:
    ctx = make_ctx({"count": 1, "other": True})
    ctx.update_state(lambda draft: {"count": draft["count"] + 10})
    assert ctx.state_dict == {"count": 11}


def test_update_state_with_dict_merges() -> None:
    ctx = make_ctx({"a": 1, "b": 2})
    ctx.update_state({"b": 3, "c": 4})
    assert ctx.state_dict == {"a": 1, "b": 3, "c": 4}


def test_update_state_with_schema_and_model_draft() -> None:
    ctx = make_ctx({"notes": [], "count": 0}, Notes)
    state = ctx.get_state()
    assert isinstance(state, Notes)

    def add(draft: Notes) -> None:
        draft.notes.append("first")
        draft.count += 1

    ctx.update_state(add)
    assert ctx.state_dict == {"notes": ["first"], "count": 1}
    ctx.update_state(Notes(notes=["replaced"], count=9))
    assert ctx.state_dict == {"notes": ["replaced"], "count": 9}
    ctx.update_state({"count": "10"})
    assert ctx.state_dict == {"notes": ["replaced"], "count": 10}


def test_update_state_schema_violation_raises_state_update_error_and_keeps_state() -> None:
    ctx = make_ctx({"notes": [], "count": 1}, Notes)
    with pytest.raises(StateUpdateError, match="Notes"):
        ctx.update_state({"count": "many"})
    with pytest.raises(StateUpdateError):
        ctx.update_state(lambda d: {"count": "many"})
    assert ctx.state_dict == {"notes": [], "count": 1}


def test_update_state_rejects_a_non_dict_result() -> None:
    ctx = make_ctx({"a": 1})
    with pytest.raises(StateUpdateError, match="int"):
        ctx.update_state(lambda d: 5)
    assert ctx.state_dict == {"a": 1}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_update_state_draft_mutation_is_validated_against_the_schema() -> None:
    ctx = make_ctx({"notes": [], "count": 1}, Notes)

    def corrupt(draft: Notes) -> None:
        draft.count = "many"  # type: ignore[assignment]

    with pytest.raises(StateUpdateError):
        ctx.update_state(corrupt)
    assert ctx.state_dict == {"notes": [], "count": 1}


def test_update_state_with_a_foreign_model_is_rejected() -> None:
    ctx = make_ctx({"notes": [], "count": 1}, Notes)
    with pytest.raises(StateUpdateError):
        ctx.update_state(Other())
    assert ctx.state_dict == {"notes": [], "count": 1}


async def test_emit_records_events_in_order() -> None:
    ctx = make_ctx()
    await ctx.emit("analysis_saved", {"id": "42"})
    await ctx.emit("progress")
    assert ctx.events == [
        {"event": "analysis_saved", "data": {"id": "42"}},
        {"event": "progress", "data": None},
    ]


def test_cancelled_follows_the_cancel_event() -> None:
    event = asyncio.Event()
    ctx = ToolContext(session_id="s", run_id="r", agent_name="a", cancel_event=event)
    assert ctx.cancelled is False
    event.set()
    assert ctx.cancelled is True
    assert make_ctx().cancelled is False
