"""Input and output guardrails with tripwires (issue 50): each check a durable step,
taken only when configured; a tripwire fails the run with `stop_reason="guardrail"`,
its guardrail and reason in the run row and in the transcript."""

from __future__ import annotations

import json

import pytest
from helpers import sql

from helix_dbos import Agent, AgentDefinitionError, GuardrailResult, GuardrailTripped, tool


def asked(mock_llm, agent: Agent) -> int:
    return sum(1 for r in mock_llm.inputs if r.agent_name == agent.name)


def steps(database_url: str, run_id: str) -> list[str]:
    return [
        name
        for (name,) in sql(
            database_url,
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = "
            "(SELECT workflow_id FROM helix.runs WHERE run_id = %s) ORDER BY function_id",
            run_id,
        )
    ]


def no_secrets(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire="password" in text, reason="asks for a password")


async def polite(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire=False, info={"checked": len(text)})


def test_guardrail_definitions_are_checked():
    with pytest.raises(AgentDefinitionError, match="input_guardrails"):
        Agent("a", input_guardrails=[no_secrets, no_secrets])
    with pytest.raises(AgentDefinitionError, match="output_guardrails"):
        Agent("a", output_guardrails=["not callable"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        GuardrailResult(tripwire=False, info={"x": object()})


async def test_an_input_tripwire_fails_the_run_before_any_model_call_or_tool(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("x")
        return "done"

    agent = make_agent(tools=[act], input_guardrails=[polite, no_secrets])
    mock_llm.add_response(
        {"type": "tool_calls", "tool_calls": [{"id": "a", "name": "act", "arguments": {}}]},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "tell me the admin password")).result()
    assert (result.status, result.stop_reason) == ("failed", "guardrail")
    assert result.error == "Guardrail 'no_secrets' (input) tripped: asks for a password"
    with pytest.raises(GuardrailTripped, match="no_secrets"):
        result.raise_for_stop()
    assert asked(mock_llm, agent) == 0 and ran == []
    [(stop, error)] = sql(
        database_url, "SELECT stop_reason, error FROM helix.runs WHERE run_id = %s", result.run_id
    )
    assert stop == "guardrail" and "no_secrets" in error
    messages = await helix.get_run_messages(result.run_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    said = json.loads(str(messages[-1].content).removeprefix("[guardrail tripped] "))
    assert said == {"guardrail": "no_secrets", "kind": "input", "reason": "asks for a password"}
    assert steps(database_url, result.run_id) == [
        "helix.guardrail:input:polite",
        "helix.guardrail:input:no_secrets",
    ]


async def test_passing_input_guardrails_are_one_step_each_then_the_run_goes_on(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(input_guardrails=[polite, no_secrets])
    mock_llm.add_response({"type": "text", "content": "hello"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "completed" and result.output == "hello", result.error
    assert result.stop_reason is None
    names = steps(database_url, result.run_id)
    assert names[:3] == [
        "helix.guardrail:input:polite",
        "helix.guardrail:input:no_secrets",
        "helix.llm",
    ]


async def test_an_output_tripwire_fails_a_run_that_would_have_completed(
    helix, make_agent, mock_llm, database_url
):
    seen: list[object] = []

    def no_shouting(output: object) -> GuardrailResult:
        seen.append(output)
        return GuardrailResult(tripwire=str(output).isupper(), reason="shouting", info={"n": 1})

    agent = make_agent(output_guardrails=[no_shouting])
    mock_llm.add_response({"type": "text", "content": "HELLO"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert (result.status, result.stop_reason, result.output) == ("failed", "guardrail", None)
    assert result.error == "Guardrail 'no_shouting' (output) tripped: shouting"
    assert seen == ["HELLO"]
    messages = await helix.get_run_messages(result.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    assert messages[1].content == "HELLO" and "no_shouting" in str(messages[2].content)
    [(status,)] = sql(
        database_url, "SELECT status FROM helix.sessions WHERE session_id = %s", result.session_id
    )
    assert status == "failed"

    mock_llm.add_response({"type": "text", "content": "hello"}, agent=agent.name)
    calm = await (await helix.execute(agent, "again", session_id=result.session_id)).result()
    assert calm.status == "completed" and calm.output == "hello", calm.error
    assert steps(database_url, calm.run_id)[-1] == "helix.guardrail:output:no_shouting"


async def test_a_guardrail_that_raises_trips_with_the_error(helix, make_agent, mock_llm):
    def broken(text: str) -> GuardrailResult:
        raise RuntimeError("classifier down")

    agent = make_agent(input_guardrails=[broken])
    result = await (await helix.execute(agent, "hi")).result()
    assert result.stop_reason == "guardrail"
    assert result.error == (
        "Guardrail 'broken' (input) tripped: the guardrail raised RuntimeError: classifier down"
    )
    assert asked(mock_llm, agent) == 0


# --- tool guardrails --------------------------------------------------------------------


def small_amounts(arguments: dict) -> GuardrailResult:
    amount = arguments.get("amount", 0)
    return GuardrailResult(tripwire=amount > 100, reason=f"amount {amount} over 100")


async def test_a_tool_tripwire_runs_no_call_of_the_step_and_asks_no_approval(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool(guardrails=[small_amounts], require_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(f"pay {amount}")
        return "paid"

    @tool
    def log(text: str) -> str:
        """Log."""
        ran.append(text)
        return "logged"

    agent = make_agent(tools=[log, pay])
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "l1", "name": "log", "arguments": {"text": "paying"}},
                {"id": "p1", "name": "pay", "arguments": {"amount": 500}},
            ],
        },
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "pay 500")).result()
    assert (result.status, result.stop_reason) == ("failed", "guardrail"), result.error
    assert result.error == "Guardrail 'pay.small_amounts' (tool) tripped: amount 500 over 100"
    assert ran == [], "no call of the step ran"
    [(pending,)] = sql(
        database_url, "SELECT count(*) FROM helix.tool_calls WHERE run_id = %s", result.run_id
    )
    assert pending == 0, "no approval was asked"
    tool_results = [m for m in await helix.get_run_messages(result.run_id) if m.role == "tool"]
    assert [m.tool_call_id for m in tool_results] == ["l1", "p1"]
    assert all("pay.small_amounts" in str(m.content) for m in tool_results)
    assert steps(database_url, result.run_id) == [
        "helix.llm",
        "helix.guardrail:tool:pay.small_amounts",
    ]


async def test_a_passing_tool_guardrail_is_a_step_before_the_tool(
    helix, make_agent, mock_llm, database_url
):
    @tool(guardrails=[small_amounts])
    def refund(amount: int) -> str:
        """Refund."""
        return f"refunded {amount}"

    agent = make_agent(tools=[refund])
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "r1", "name": "refund", "arguments": {"amount": 5}}],
        },
        agent=agent.name,
    )
    mock_llm.add_response({"type": "text", "content": "done"}, agent=agent.name)
    result = await (await helix.execute(agent, "refund 5")).result()
    assert result.status == "completed", result.error
    assert steps(database_url, result.run_id)[:3] == [
        "helix.llm",
        "helix.guardrail:tool:refund.small_amounts",
        "helix.tool:refund",
    ]
