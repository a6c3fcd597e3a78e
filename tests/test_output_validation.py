"""Outputs are validated, never passed through: finish_with outputs against the agent's
output_schema, tool results against the tool's own output_schema (seed 000), on the real
runtime with a scripted LLM."""

from __future__ import annotations

import json
import logging

from helpers import calls
from pydantic import BaseModel

from helix_dbos import MockLLM, tool


class Answer(BaseModel):
    answer: str
    score: int


async def test_a_finish_with_output_that_fails_the_output_schema_goes_back_to_the_model(
    helix, make_agent, mock_llm: MockLLM, caplog
):
    ran: list[dict] = []

    @tool(finish_with=True)
    def submit(answer: str, score: str) -> dict:
        """Submit the answer."""
        ran.append({"answer": answer, "score": score})
        return {"answer": answer, "score": score}

    agent = make_agent(tools=[submit], output_schema=Answer)
    mock_llm.add_responses(
        calls(("s1", "submit", {"answer": "42", "score": "high"})),
        calls(("s2", "submit", {"answer": "42", "score": "7"})),
        agent=agent.name,
    )
    with caplog.at_level(logging.WARNING, logger="helix_dbos"):
        result = await (await helix.execute(agent, "go")).result()

    assert result.status == "completed"
    assert result.output == {"answer": "42", "score": 7}, "the validated (coerced) output"
    assert len(ran) == 2
    messages = await helix.get_messages(result.session_id)
    first = next(m for m in messages if m.tool_call_id == "s1")
    assert first.is_error and "Invalid output from submit" in first.content
    assert "score" in first.content
    assert any(
        "invalid output from submit" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )


async def test_invalid_finish_with_outputs_are_bounded_like_finish(
    helix, make_agent, mock_llm: MockLLM
):
    @tool(finish_with=True, finish_with_transform=lambda out: {"answer": out})
    def submit(text: str) -> str:
        """Submit."""
        return text

    agent = make_agent(tools=[submit], output_schema=Answer, max_output_retries=1)
    mock_llm.add_responses(
        calls(("a", "submit", {"text": "x"})),
        calls(("b", "submit", {"text": "y"})),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()

    assert result.status == "failed"
    assert "Output validation failed 2 times" in result.error and "score" in result.error
    session = await helix.get_session(result.session_id)
    assert session.output is None


async def test_a_later_valid_finish_with_call_in_the_same_step_wins(
    helix, make_agent, mock_llm: MockLLM
):
    @tool(finish_with=True)
    def submit(answer: str, score: int | str) -> dict:
        """Submit."""
        return {"answer": answer, "score": score}

    agent = make_agent(tools=[submit], output_schema=Answer, max_output_retries=0)
    mock_llm.add_response(
        calls(
            ("a", "submit", {"answer": "x", "score": "bad"}),
            ("b", "submit", {"answer": "y", "score": 3}),
        ),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()

    assert result.status == "completed" and result.output == {"answer": "y", "score": 3}


async def test_a_tool_output_that_fails_its_output_schema_is_a_tool_error(
    helix, make_agent, mock_llm: MockLLM
):
    class Forecast(BaseModel):
        city: str
        celsius: float

    @tool(output_schema=Forecast)
    def weather(city: str) -> dict:
        """Weather for a city."""
        if city == "Atlantis":
            return {"city": city, "celsius": "unknown"}
        return {"city": city, "celsius": 18}

    agent = make_agent(tools=[weather])
    mock_llm.add_responses(
        calls(("w1", "weather", {"city": "Atlantis"}), ("w2", "weather", {"city": "Paris"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "go")).result()

    assert result.status == "completed"
    messages = {m.tool_call_id: m for m in await helix.get_messages(result.session_id)}
    bad = messages["w1"]
    assert bad.is_error
    assert bad.content.startswith(
        "Tool 'weather' returned output that does not match its output_schema: celsius:"
    )
    assert not messages["w2"].is_error
    assert json.loads(messages["w2"].content) == {"city": "Paris", "celsius": 18.0}
