"""Handoffs (issue 50): `transfer_to_<name>` continues the run, in the same session, with
the target agent; one `helix.handoffs` row per handoff; later runs go to the current agent."""

from __future__ import annotations

import uuid

import pytest
from helpers import calls, sql

from helix_dbos import Agent, Handoff, tool
from helix_dbos.definitions.handoffs import check_handoffs_registered
from helix_dbos.errors import AgentDefinitionError
from helix_dbos.orchestration.types import Message


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def step_names(database_url: str, run_id: str) -> list[str]:
    rows = sql(
        database_url,
        "SELECT o.function_name FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON r.workflow_id = o.workflow_uuid WHERE r.run_id = %s ORDER BY o.function_id",
        run_id,
    )
    return [r[0] for r in rows]


def test_handoff_tools_take_openai_agents_names_and_refuse_a_target_twice():
    billing = Agent("Billing Agent")
    triage = Agent("triage", handoffs=[billing, Handoff(Agent("refunds"), tool_name="go_refunds")])
    assert [t.name for t in triage.tools] == ["transfer_to_billing_agent", "go_refunds"]
    assert triage.tool("transfer_to_billing_agent").spec().parameters["properties"] == {}
    with pytest.raises(AgentDefinitionError, match="listed twice"):
        Agent("twice", handoffs=[billing, Handoff(billing, tool_name="other")])


async def test_a_handoff_continues_the_run_with_the_target_agent(
    helix, make_agent, mock_llm, database_url
):
    billing = make_agent(system_prompt="You are billing.")
    triage = make_agent(system_prompt="You are triage.", handoffs=[billing])
    name = f"transfer_to_{billing.name}"
    mock_llm.add_responses(calls(("h1", name, {})), agent=triage.name)
    mock_llm.add_responses(text("Your bill is 10 EUR."), agent=billing.name)

    result = await (await helix.execute(triage, "what do I owe?")).result()

    assert result.status == "completed" and result.output == "Your bill is 10 EUR."
    asked = [r for r in mock_llm.inputs if r.agent_name in (triage.name, billing.name)][-2:]
    assert [r.agent_name for r in asked] == [triage.name, billing.name]
    assert asked[1].messages[0].content.startswith("You are billing.")
    assert name not in [t.name for t in asked[1].tools]  # the target's own tools
    messages = await helix.get_messages(result.session_id)
    assert [(m.role, m.content) for m in messages][1:] == [
        ("assistant", None),
        ("tool", f"Transferred to {billing.name}"),
        ("assistant", "Your bill is 10 EUR."),
    ]
    assert messages[1].tool_calls[0].name == name
    rows = sql(
        database_url,
        "SELECT run_id, step, tool_call_id, from_agent, to_agent FROM helix.handoffs "
        "WHERE session_id = %s",
        result.session_id,
    )
    assert rows == [(result.run_id, 1, "h1", triage.name, billing.name)]
    session = await helix.get_session(result.session_id)
    assert session.agent_name == triage.name and session.current_agent == billing.name
    # The handoff costs one transaction, and no tool step; the run's first read of the
    # current agent one more.
    assert step_names(database_url, result.run_id) == [
        "helix.handoff_current",
        "helix.llm",
        "helix.handoff",
        "helix.llm",
    ]
    chunks = sql(
        database_url,
        "SELECT type, payload->>'tool_name' FROM helix.stream_chunks WHERE run_id = %s "
        "AND type IN ('tool_start', 'tool_end') ORDER BY seq",
        result.run_id,
    )
    assert ("tool_end", name) in chunks

    # A later message goes on with the current agent, which sees the whole transcript.
    mock_llm.add_responses(text("Paid, thanks."), agent=billing.name)
    again = await (await helix.execute(triage, "I paid it", session_id=result.session_id)).result()
    assert again.status == "completed" and again.output == "Paid, thanks."
    last = mock_llm.get_last_input()
    assert last.agent_name == billing.name
    assert [m.content for m in last.messages if m.role == "user"] == [
        "what do I owe?",
        "I paid it",
    ]
    assert step_names(database_url, again.run_id) == ["helix.handoff_current", "helix.llm"]


async def test_only_the_first_handoff_of_a_reply_is_taken(
    helix, make_agent, mock_llm, database_url
):
    calls_made: list[str] = []

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        calls_made.append(order)
        return f"order {order}: shipped"

    first = make_agent()
    second = make_agent()
    triage = make_agent(tools=[lookup], handoffs=[first, second])
    mock_llm.add_responses(
        calls(
            ("a", "lookup", {"order": "42"}),
            ("b", f"transfer_to_{second.name}", {}),
            ("c", f"transfer_to_{first.name}", {}),
        ),
        agent=triage.name,
    )
    mock_llm.add_responses(text("second here"), agent=second.name)

    result = await (await helix.execute(triage, "help")).result()

    assert result.output == "second here" and calls_made == ["42"]
    answers = {
        m.tool_call_id: (m.content, m.is_error)
        for m in await helix.get_messages(result.session_id)
        if m.role == "tool"
    }
    assert answers["a"] == ("order 42: shipped", False)
    assert answers["b"] == (f"Transferred to {second.name}", False)
    assert answers["c"][1] is True and "Multiple handoffs" in (answers["c"][0] or "")
    rows = sql(database_url, "SELECT to_agent FROM helix.handoffs WHERE run_id = %s", result.run_id)
    assert rows == [(second.name,)]


async def test_an_input_filter_decides_what_the_target_sees(helix, make_agent, mock_llm):
    def last_user_message(history: list[Message]) -> list[Message]:
        return [m for m in history if m.role == "user"][-1:]

    expert = make_agent()
    triage = make_agent(handoffs=[Handoff(expert, input_filter=last_user_message)])
    mock_llm.add_responses(
        text("let me think"),  # no tool call: a plain answer ends the first run
        agent=triage.name,
    )
    first = await (await helix.execute(triage, "secret context")).result()
    mock_llm.add_responses(calls(("h", f"transfer_to_{expert.name}", {})), agent=triage.name)
    mock_llm.add_responses(text("expert answer"), agent=expert.name)

    result = await (
        await helix.execute(triage, "the real question", session_id=first.session_id)
    ).result()

    assert result.output == "expert answer"
    seen = mock_llm.get_last_input()
    assert seen.agent_name == expert.name
    assert [(m.role, m.content) for m in seen.messages if m.role != "system"] == [
        ("user", "the real question")
    ]
    # The transcript itself keeps everything.
    assert len(await helix.get_messages(result.session_id)) == 6


def test_a_handoff_to_an_unregistered_agent_is_refused(helix):
    stranger = Agent(f"stranger_{uuid.uuid4().hex[:6]}")
    lonely = Agent(f"lonely_{uuid.uuid4().hex[:6]}", handoffs=[stranger])
    with pytest.raises(AgentDefinitionError, match="not registered"):
        helix.register(lonely)  # after launch
    assert lonely.name not in helix.agents
    # `launch()` runs the same check over the agents given to HelixDBOS(agents=[...]).
    with pytest.raises(AgentDefinitionError, match=f"hands off to '{stranger.name}'"):
        check_handoffs_registered({lonely.name: lonely})
    check_handoffs_registered({lonely.name: lonely, stranger.name: stranger})
    impostor = Agent(stranger.name)  # the same name is not the same definition
    with pytest.raises(AgentDefinitionError, match="not registered"):
        check_handoffs_registered({lonely.name: lonely, stranger.name: impostor})
