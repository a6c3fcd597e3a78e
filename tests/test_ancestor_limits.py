"""A child run stops at its ancestors' usage limits (issue 50): a sub-agent, a companion's
turn, at any depth, checks before each of its model calls every limit handed down to it
against that ancestor's tree, so it does not spend past its parent's budget until it ends.
(The crash case is `test_usage_limits.py::test_kill_while_a_child_spends_the_budget...`.)"""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

from helpers import sql

from helix_dbos import Agent, PersistentAgent, UsageLimits, sub_agent_tool, tool
from helix_dbos.orchestration.usage_limits import AncestorLimits
from helix_dbos.runtime.starts.run_starts import queued_options
from helix_dbos.runtime.steps.step_types import RunOptions
from helix_dbos.store.features.queued_messages import QueuedMessage

GPT4O = "gpt-4o-2024-08-06"


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
        "usage": {"model": GPT4O, "input_tokens": 100, "output_tokens": 10},
    }


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def asked(mock_llm, agent: Agent) -> int:
    return sum(1 for r in mock_llm.inputs if r.agent_name == agent.name)


def counter() -> tuple[list[int], object]:
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count a call."""
        ran.append(n)
        return n

    return ran, count


def spends(mock_llm, agent: Agent, calls: int = 10) -> None:
    """The agent would call `count` `calls` times before it answers."""
    for i in range(calls):
        mock_llm.add_response(call(f"k{i}", "count", {"n": i}), agent=agent.name)
    mock_llm.add_response(text("spent it all"), agent=agent.name)


def child_runs(database_url: str, parent_session_id: str) -> list[tuple]:
    return sql(
        database_url,
        "SELECT s.session_id, r.status, r.stop_reason, r.error FROM helix.runs r "
        "JOIN helix.sessions s USING (session_id) WHERE s.parent_session_id = %s",
        parent_session_id,
    )


def tool_messages(database_url: str, session_id: str) -> tuple[int, int]:
    """The session's assistant messages and tool results: every call has its result."""
    [(calls, results)] = sql(
        database_url,
        "SELECT count(*) FILTER (WHERE role = 'assistant'), count(*) FILTER (WHERE role = "
        "'tool') FROM helix.messages WHERE session_id = %s",
        session_id,
    )
    return calls, results


def ancestor_error(limit: str, run_id: str, agent: Agent) -> str:
    return (
        f"Usage limit exceeded: {limit} (the limit of ancestor run {run_id}, agent {agent.name!r})"
    )


async def test_a_sub_agent_stops_at_its_parents_request_limit(
    helix, make_agent, mock_llm, database_url
):
    ran, count = counter()
    child = make_agent(tools=[count])
    parent = make_agent(tools=[sub_agent_tool(child)], usage_limits=UsageLimits(requests=3))
    mock_llm.add_response(
        call("s1", f"subagent__{child.name}", {"message": "go"}), agent=parent.name
    )
    mock_llm.add_response(text("parent never asked again"), agent=parent.name)
    spends(mock_llm, child)

    result = await (await helix.execute(parent, "delegate")).result()

    assert (result.status, result.stop_reason) == ("failed", "usage_limit"), result.error
    assert result.error == "Usage limit exceeded: requests limit 3, used 3"
    # The parent's call, then the child's two: the child's third was refused.
    assert (asked(mock_llm, parent), asked(mock_llm, child)) == (1, 2)
    assert ran == [0, 1], "each call the child made ran whole, and no other"
    [(child_session, status, stop, error)] = child_runs(database_url, result.session_id)
    assert (status, stop) == ("failed", "usage_limit")
    assert error == ancestor_error("requests limit 3, used 3", result.run_id, parent)
    assert tool_messages(database_url, child_session) == (2, 2)
    # The parent sees the failed child as its call's result.
    messages = await helix.get_messages(result.session_id)
    [answer] = [m for m in messages if m.role == "tool"]
    assert answer.is_error and "ancestor run" in (answer.content or "")


async def test_a_sub_agent_stops_at_the_token_limit_its_parent_was_executed_with(
    helix, make_agent, mock_llm, database_url
):
    ran, count = counter()
    child = make_agent(tools=[count])
    parent = make_agent(tools=[sub_agent_tool(child)])
    mock_llm.add_response(
        call("s1", f"subagent__{child.name}", {"message": "go"}), agent=parent.name
    )
    spends(mock_llm, child)
    limits = UsageLimits(total_tokens=350)  # 110 tokens a call: the fourth call is refused
    result = await (await helix.execute(parent, "delegate", usage_limits=limits)).result()
    assert (result.status, result.stop_reason) == ("failed", "usage_limit"), result.error
    assert result.error == "Usage limit exceeded: total_tokens limit 350, used 440"
    assert (asked(mock_llm, parent), asked(mock_llm, child)) == (1, 3)
    assert ran == [0, 1, 2]
    [(_, status, stop, error)] = child_runs(database_url, result.session_id)
    assert (status, stop) == ("failed", "usage_limit")
    assert error == ancestor_error("total_tokens limit 350, used 440", result.run_id, parent)


async def test_a_child_started_by_the_call_that_spent_the_budget_asks_nothing(
    helix, make_agent, mock_llm, database_url
):
    """The parent's model call that asked for the child is recorded before the child
    starts (its step's head), so the child's first check counts it."""
    ran, count = counter()
    child = make_agent(tools=[count])
    parent = make_agent(tools=[sub_agent_tool(child)], usage_limits=UsageLimits(input_tokens=100))
    mock_llm.add_response(
        call("s1", f"subagent__{child.name}", {"message": "go"}), agent=parent.name
    )
    spends(mock_llm, child)
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.error == "Usage limit exceeded: input_tokens limit 100, used 100"
    assert (asked(mock_llm, parent), asked(mock_llm, child)) == (1, 0)
    assert ran == []
    [(child_session, status, stop, error)] = child_runs(database_url, result.session_id)
    assert (status, stop) == ("failed", "usage_limit")
    assert error == ancestor_error("input_tokens limit 100, used 100", result.run_id, parent)
    assert tool_messages(database_url, child_session) == (0, 0)


async def test_a_grandchild_stops_at_its_grandparents_limit(
    helix, make_agent, mock_llm, database_url
):
    ran, count = counter()
    leaf = make_agent(tools=[count])
    # The middle agent's own limit is far off: the root's, checked after it, is reached.
    middle = make_agent(tools=[sub_agent_tool(leaf)], usage_limits=UsageLimits(requests=50))
    root = make_agent(tools=[sub_agent_tool(middle)], usage_limits=UsageLimits(requests=4))
    mock_llm.add_response(
        call("m1", f"subagent__{middle.name}", {"message": "go"}), agent=root.name
    )
    mock_llm.add_response(text("root never asked again"), agent=root.name)
    mock_llm.add_response(
        call("l1", f"subagent__{leaf.name}", {"message": "go"}), agent=middle.name
    )
    mock_llm.add_response(text("middle never asked again"), agent=middle.name)
    spends(mock_llm, leaf)

    result = await (await helix.execute(root, "delegate twice")).result()

    assert (result.status, result.stop_reason) == ("failed", "usage_limit"), result.error
    assert result.error == "Usage limit exceeded: requests limit 4, used 4"
    counts = (asked(mock_llm, root), asked(mock_llm, middle), asked(mock_llm, leaf))
    assert counts == (1, 1, 2)
    assert ran == [0, 1]
    reached = ancestor_error("requests limit 4, used 4", result.run_id, root)
    [(middle_session, status, stop, error)] = child_runs(database_url, result.session_id)
    assert (status, stop, error) == ("failed", "usage_limit", reached)
    [(leaf_session, status, stop, error)] = child_runs(database_url, middle_session)
    assert (status, stop, error) == ("failed", "usage_limit", reached)
    assert tool_messages(database_url, leaf_session) == (2, 2)
    assert tool_messages(database_url, middle_session) == (1, 1)


async def test_a_middle_limit_stops_only_its_own_tree(helix, make_agent, mock_llm, database_url):
    ran, count = counter()
    leaf = make_agent(tools=[count])
    middle = make_agent(tools=[sub_agent_tool(leaf)], usage_limits=UsageLimits(requests=2))
    root = make_agent(tools=[sub_agent_tool(middle)], usage_limits=UsageLimits(requests=100))
    mock_llm.add_response(
        call("m1", f"subagent__{middle.name}", {"message": "go"}), agent=root.name
    )
    mock_llm.add_response(text("the root goes on"), agent=root.name)
    mock_llm.add_response(
        call("l1", f"subagent__{leaf.name}", {"message": "go"}), agent=middle.name
    )
    mock_llm.add_response(text("middle never asked again"), agent=middle.name)
    spends(mock_llm, leaf)

    result = await (await helix.execute(root, "delegate twice")).result()

    assert result.status == "completed", result.error
    assert result.output == "the root goes on"
    assert (asked(mock_llm, middle), asked(mock_llm, leaf)) == (1, 1)
    assert ran == [0]
    [(middle_session, status, stop, error)] = child_runs(database_url, result.session_id)
    # The middle run reached its own limit (its own message); the leaf, the middle's.
    assert (status, stop, error) == (
        "failed",
        "usage_limit",
        "Usage limit exceeded: requests limit 2, used 2",
    )
    [(_, status, stop, error)] = child_runs(database_url, middle_session)
    [(middle_run,)] = sql(
        database_url, "SELECT run_id FROM helix.runs WHERE session_id = %s", middle_session
    )
    assert (status, stop) == ("failed", "usage_limit")
    assert error == ancestor_error("requests limit 2, used 2", middle_run, middle)


async def test_a_companions_turn_stops_at_the_limit_of_the_run_that_started_it(
    helix, make_agent, mock_llm, database_url
):
    ran, count = counter()
    critic = make_agent(tools=[count])
    writer = make_agent(
        persistent_agents=[PersistentAgent(critic)], usage_limits=UsageLimits(requests=3)
    )
    spawn = {"agentType": critic.name, "message": "review"}
    mock_llm.add_response(call("c1", "companion__spawnAgent", spawn), agent=writer.name)
    mock_llm.add_response(text("writer never asked again"), agent=writer.name)
    spends(mock_llm, critic)

    result = await (await helix.execute(writer, "write")).result()

    assert (result.status, result.stop_reason) == ("failed", "usage_limit"), result.error
    assert (asked(mock_llm, writer), asked(mock_llm, critic)) == (1, 2)
    assert ran == [0, 1]
    [(_, status, stop, error)] = child_runs(database_url, result.session_id)
    assert (status, stop) == ("failed", "usage_limit")
    assert error == ancestor_error("requests limit 3, used 3", result.run_id, writer)


async def test_a_child_of_an_unlimited_run_checks_nothing(helix, make_agent, mock_llm):
    ran, count = counter()
    child = make_agent(tools=[count])
    parent = make_agent(tools=[sub_agent_tool(child)])
    mock_llm.add_response(
        call("s1", f"subagent__{child.name}", {"message": "go"}), agent=parent.name
    )
    mock_llm.add_response(text("done"), agent=parent.name)
    spends(mock_llm, child, calls=4)
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.status == "completed", result.error
    assert ran == [0, 1, 2, 3]


# --- runs in flight from before ancestors' limits were handed down -------------------------


def test_a_workflow_input_pickled_without_the_field_reads_no_inherited_limits():
    """DBOS pickles a run's `RunOptions` into its workflow input: a run started before
    the field existed is recovered with `ancestor_limits == ()`."""
    options = RunOptions(tenant="acme", usage_limits=UsageLimits(requests=2))
    older = pickle.loads(pickle.dumps(options))
    del older.__dict__["ancestor_limits"]  # the instance as an older helix pickled it
    recovered = pickle.loads(pickle.dumps(older))
    assert "ancestor_limits" not in recovered.__dict__
    assert recovered.ancestor_limits == ()
    assert (recovered.tenant, recovered.usage_limits) == ("acme", UsageLimits(requests=2))
    # A new child's input keeps its ancestors' limits across the pickle.
    handed = AncestorLimits("run-1", "lead", UsageLimits(total_tokens=10))
    child = pickle.loads(pickle.dumps(RunOptions(ancestor_limits=(handed,))))
    assert child.ancestor_limits == (handed,)


def test_stored_options_without_the_field_read_no_inherited_limits():
    """A stored message's options JSON (`RunOptions.to_json`) has no such field: its run
    inherits no limits, and a top-level run's options never write one."""
    message = QueuedMessage(
        message_id="msg-1",
        seq=1,
        session_id="s",
        agent_name="a",
        strategy="enqueue",
        content="hi",
        state=None,
        target_run_id=None,
        status="queued",
        run_id=None,
        step=None,
        created_at=datetime.now(timezone.utc),
        taken_at=None,
        options={"tenant": "acme", "usage_limits": {"requests": 2}},
    )
    options = queued_options(message)
    assert options.ancestor_limits == ()
    assert options.usage_limits == UsageLimits(requests=2)
    assert "ancestor_limits" not in options.to_json()
