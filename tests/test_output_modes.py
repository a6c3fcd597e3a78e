"""Output modes (`output_mode="tool" | "native" | "prompted"`) end to end on the real
runtime with a scripted LLM: what the model is asked, and the same validation, bounded
retries and warning in every mode."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import BaseModel

from helix_dbos import Agent, MockLLM, tool
from helix_dbos.errors import AgentDefinitionError

FINISH = "__finish__"


class Verdict(BaseModel):
    label: str
    score: float


@tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: fine"


def text(content: str, stop_reason: str = "end_turn") -> dict:
    return {"type": "text", "content": content, "stop_reason": stop_reason}


async def test_tool_mode_forces_a_tool_call_and_finishes_with_finish(
    helix, make_agent, mock_llm: MockLLM
):
    agent = make_agent(tools=[lookup], output_schema=Verdict)
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "f", "name": FINISH, "arguments": {"label": "ok", "score": 1}}],
        },
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "ok", "score": 1.0}
    request = mock_llm.get_last_input()
    assert request.tool_choice == "required", "only a tool call can finish: forced"
    assert request.output_format is None
    assert [t.name for t in request.tools] == ["lookup", FINISH]


async def test_an_agent_that_may_finish_with_text_is_not_forced(
    helix, make_agent, mock_llm: MockLLM
):
    agent = make_agent(tools=[lookup])
    mock_llm.add_response(text("hello"), agent=agent.name)
    await (await helix.execute(agent, "hi")).result()
    assert mock_llm.get_last_input().tool_choice == "auto"


async def test_native_mode_sends_the_schema_and_validates_the_reply(
    helix, make_agent, mock_llm: MockLLM, caplog
):
    agent = make_agent(
        system_prompt="Judge.", tools=[lookup], output_schema=Verdict, output_mode="native"
    )
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "l", "name": "lookup", "arguments": {"term": "x"}}],
        },
        text('{"label": "good"}'),
        text('{"label": "good", "score": "0.75"}'),
        agent=agent.name,
    )
    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed"
    assert result.output == {"label": "good", "score": 0.75}, "validated and coerced"
    request = mock_llm.get_last_input()
    assert [t.name for t in request.tools] == ["lookup"], "no __finish__ in the native mode"
    assert request.tool_choice == "auto"
    assert request.output_format is not None
    assert request.output_format.name == "Verdict"
    assert request.output_format.json_schema == Verdict.model_json_schema()
    assert request.messages[0].content == "Judge.", "the provider enforces the schema"
    messages = await helix.get_messages(result.session_id)
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    correction = messages[4].content
    assert correction.startswith("Your reply is not valid output: score: Field required")
    assert any("invalid output from the reply" in r.getMessage() for r in caplog.records)


async def test_prompted_mode_puts_the_schema_in_the_prompt_and_parses_fenced_json(
    helix, make_agent, mock_llm: MockLLM
):
    agent = make_agent(system_prompt="Judge.", output_schema=Verdict, output_mode="prompted")
    mock_llm.add_responses(
        text("Sure! Here it is, as plain prose."),
        text('```json\n{"label": "bad", "score": 0.1}\n```'),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "bad", "score": 0.1}
    request = mock_llm.get_last_input()
    system = request.messages[0].content
    assert system.startswith("Judge.\n\n## Output Requirement\nReply with only a JSON object")
    assert json.dumps(Verdict.model_json_schema(), separators=(",", ":")) in system
    assert request.tools == [] and request.output_format is None
    messages = await helix.get_messages(result.session_id)
    assert "not valid JSON" in messages[2].content


@pytest.mark.parametrize("mode", ["native", "prompted"])
async def test_invalid_replies_are_bounded_in_every_mode(
    helix, make_agent, mock_llm: MockLLM, mode: str
):
    agent = make_agent(output_schema=Verdict, output_mode=mode, max_output_retries=1)
    mock_llm.add_responses(text("{}"), text("not json"), agent=agent.name)
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "failed"
    assert result.error.startswith("Output validation failed 2 times: Your reply is not valid")
    assert "not valid JSON" in result.error


async def test_a_structured_output_step_is_validated_too(helix, make_agent, mock_llm: MockLLM):
    agent = make_agent(output_schema=Verdict, output_mode="native")
    mock_llm.add_responses(
        {"type": "structured_output", "output": {"label": "x", "score": "high"}},
        {"type": "structured_output", "output": {"label": "x", "score": 0.5}},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output == {"label": "x", "score": 0.5}
    messages = await helix.get_messages(result.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert json.loads(messages[1].content) == {"label": "x", "score": "high"}


async def test_a_json_reply_cut_off_at_max_tokens_gets_one_correction(
    helix, make_agent, mock_llm: MockLLM
):
    agent = make_agent(output_schema=Verdict, output_mode="prompted")
    mock_llm.add_responses(
        text('{"label": "lo', stop_reason="max_tokens"),
        text('{"label": "long", "score": 1}'),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "judge")).result()

    assert result.status == "completed" and result.output["label"] == "long"
    messages = await helix.get_messages(result.session_id)
    assert messages[2].content.startswith("Your previous response was cut off")
    assert "JSON object" in messages[2].content and "`__finish__`" not in messages[2].content


def test_output_mode_definition_errors() -> None:
    with pytest.raises(AgentDefinitionError, match="needs an output_schema"):
        Agent("a", output_mode="native")
    with pytest.raises(AgentDefinitionError, match="must be 'tool', 'native' or 'prompted'"):
        Agent("a", output_schema=Verdict, output_mode="json")  # type: ignore[arg-type]

    @tool(finish_with=True)
    def submit(label: str) -> dict:
        """Submit."""
        return {"label": label}

    with pytest.raises(AgentDefinitionError, match="finish_with tools complete with a tool"):
        Agent("a", tools=[submit], output_schema=Verdict, output_mode="prompted")
