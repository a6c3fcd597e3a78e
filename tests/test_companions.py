"""Persistent sub-agents, driven with the companion__* tools (seed 002, issue 13)."""

from __future__ import annotations

import asyncio
import json
import threading

from helpers import calls, sql

from helix_dbos import AgentHooks, PersistentAgent, tool
from helix_dbos.orchestration.types import LLMRequest


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def results(messages) -> dict[str, tuple[str | None, bool]]:
    return {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}


async def until(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def test_companion_tools_are_injected_and_wait_for_result_only_with_a_blocking_agent(make_agent):
    critic = make_agent()
    scout = make_agent()
    non_blocking = make_agent(persistent_agents=[PersistentAgent(scout, mode="non_blocking")])
    both = make_agent(
        persistent_agents=[PersistentAgent(critic), PersistentAgent(scout, mode="non_blocking")]
    )
    five = [
        "companion__spawnAgent",
        "companion__sendMessage",
        "companion__listChildren",
        "companion__getChildStatus",
        "companion__terminateChild",
    ]
    assert [t.name for t in non_blocking.tools] == five
    assert [t.name for t in both.tools] == [*five, "companion__waitForResult"]
    agent_type = both.tool("companion__spawnAgent").spec().parameters["properties"]["agentType"]
    assert set(agent_type["enum"]) == {critic.name, scout.name}


async def test_a_blocking_companion_answers_and_keeps_its_memory_across_turns(
    helix, make_agent, mock_llm, database_url
):
    critic = make_agent()
    writer = make_agent(persistent_agents=[PersistentAgent(critic)])
    mock_llm.add_responses(
        calls(("c1", "companion__spawnAgent", {"agentType": critic.name, "message": "draft 1"})),
        calls(("c2", "companion__sendMessage", {"name": f"{critic.name}-1", "message": "draft 2"})),
        calls(("c3", "companion__listChildren", {})),
        text("published"),
        agent=writer.name,
    )
    mock_llm.add_responses(text("too long"), text("better"), agent=critic.name)

    result = await (await helix.execute(writer, "write and get it reviewed")).result()

    assert result.status == "completed", result.error
    answers = results(await helix.get_messages(result.session_id))
    assert answers["c1"] == ("too long", False)
    assert answers["c2"] == ("better", False)
    child_session = f"{result.session_id}-agent-{critic.name}-1"
    assert json.loads(answers["c3"][0]) == [
        {
            "name": f"{critic.name}-1",
            "agent_type": critic.name,
            "mode": "blocking",
            "status": "completed",
            "session_id": child_session,
        }
    ]
    # One session, two turns: the second turn saw the first (seed 000's continuation).
    runs = await helix.list_runs(child_session)
    assert [(r.turn, r.status) for r in runs] == [(1, "completed"), (2, "completed")]
    second = [r for r in mock_llm.inputs if r.agent_name == critic.name][-1]
    assert [m.content for m in second.messages if m.role != "system"] == [
        "draft 1",
        "too long",
        "draft 2",
    ]
    [(parent, root, mode)] = sql(
        database_url,
        "SELECT s.parent_session_id, s.root_session_id, c.mode FROM helix.sessions s "
        "JOIN helix.companions c ON c.session_id = s.session_id WHERE s.session_id = %s",
        child_session,
    )
    assert (parent, root, mode) == (result.session_id, result.session_id, "blocking")
    assert (await helix.get_usage(session_id=result.session_id)).subagent_calls == 2


async def test_a_non_blocking_companion_reports_its_completion_in_the_next_model_input(
    helix, make_agent, mock_llm, database_url
):
    release = asyncio.Event()

    @tool
    async def explore(area: str) -> str:
        """Explore an area (until the test lets it finish)."""
        await asyncio.wait_for(release.wait(), 20)
        return f"{area}: three tunnels"

    @tool
    async def wait_for_scout(session_id: str) -> str:
        """Let the scout finish and wait until its session completed."""
        release.set()
        for _ in range(400):
            rows = await asyncio.to_thread(
                sql,
                database_url,
                "SELECT status FROM helix.sessions WHERE session_id = %s",
                session_id,
            )
            if rows and rows[0][0] == "completed":
                return "scout done"
            await asyncio.sleep(0.05)
        return "scout never finished"

    scout = make_agent(tools=[explore])
    lead = make_agent(
        tools=[wait_for_scout], persistent_agents=[PersistentAgent(scout, mode="non_blocking")]
    )
    seen: list[LLMRequest] = []

    def lead_reply(request: LLMRequest) -> dict:
        seen.append(request)
        step = len([m for m in request.messages if m.role == "assistant"])
        session = request.messages  # the session id is in the first spawn's result
        if step == 0:
            return calls(
                ("s", "companion__spawnAgent", {"agentType": scout.name, "message": "the cave"})
            )
        spawned = json.loads(next(m.content for m in session if m.tool_call_id == "s"))
        if step == 1:  # companions run after plain tools: ask first, in a step of its own
            return calls(("l", "companion__getChildStatus", {"name": spawned["name"]}))
        if step == 2:
            return calls(("w", "wait_for_scout", {"session_id": spawned["session_id"]}))
        return text("mapped")

    mock_llm.add_responses(
        calls(("e", "explore", {"area": "the cave"})), text("cave mapped"), agent=scout.name
    )
    mock_llm.set_responder(lead_reply)
    try:
        result = await (await helix.execute(lead, "map it")).result()
    finally:
        mock_llm.set_responder(None)

    assert result.status == "completed", result.error
    answers = results(await helix.get_messages(result.session_id))
    spawned = json.loads(answers["s"][0])
    assert spawned["status"] == "running" and spawned["name"] == f"{scout.name}-1"
    assert json.loads(answers["l"][0])["status"] == "running"
    notices = [
        m.content
        for m in await helix.get_messages(result.session_id)
        if m.role == "user" and m.content.startswith("[companion")
    ]
    assert notices == [f"[companion '{scout.name}-1' ({scout.name}) completed with: cave mapped]"]
    assert notices[0] in [m.content for m in seen[-1].messages], "the model heard it"


async def test_send_message_interrupts_a_running_child_and_terminate_stops_one(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool(require_approval=True)
    def dig(spot: str) -> str:
        """Dig (a human must approve)."""
        ran.append(spot)
        return "dug"

    digger = make_agent(tools=[dig])
    boss = make_agent(persistent_agents=[PersistentAgent(digger, mode="non_blocking")])
    spawn = {"agentType": digger.name, "message": "dig"}

    async def both_wait(session_id: str) -> bool:
        rows = await asyncio.to_thread(
            sql,
            database_url,
            "SELECT count(*) FROM helix.waiting_runs WHERE root_session_id = %s",
            session_id,
        )
        return rows[0][0] == 2

    async def boss_reply(request: LLMRequest) -> dict:
        step = len([m for m in request.messages if m.role == "assistant"])
        if step == 0:
            return calls(
                ("s1", "companion__spawnAgent", {**spawn, "name": "a"}),
                ("s2", "companion__spawnAgent", {**spawn, "name": "b"}),
            )
        if step == 1:
            await until(lambda: both_wait(sessions["boss"]))
            return calls(
                ("m", "companion__sendMessage", {"name": "a", "message": "just look"}),
                ("t", "companion__terminateChild", {"name": "b", "reason": "not needed"}),
                ("x", "companion__sendMessage", {"name": "nobody", "message": "hi"}),
            )
        return text("reorganized")

    sessions: dict[str, str] = {}
    mock_llm.add_responses(
        calls(("d", "dig", {"spot": "x"})),
        calls(("d", "dig", {"spot": "y"})),
        text("looked"),
        agent=digger.name,
    )
    mock_llm.set_responder(boss_reply)
    try:
        handle = await helix.execute(boss, "go")
        sessions["boss"] = handle.session_id
        result = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        mock_llm.set_responder(None)

    assert result.status == "completed", result.error
    answers = results(await helix.get_messages(handle.session_id))
    assert json.loads(answers["m"][0])["status"] == "running"
    assert json.loads(answers["t"][0]) == {"name": "b", "status": "aborted"}
    assert answers["x"] == ("No child named 'nobody'", True)
    session_a = f"{handle.session_id}-agent-a"
    session_b = f"{handle.session_id}-agent-b"

    async def a_done() -> bool:
        return (await helix.get_session(session_a)).status == "completed"

    await until(a_done)
    assert [(r.turn, r.status) for r in await helix.list_runs(session_a)] == [
        (1, "interrupted"),
        (2, "completed"),
    ]
    assert (await helix.get_session(session_a)).output == "looked"
    assert (await helix.get_session(session_b)).status == "aborted"
    assert ran == []


async def test_wait_for_result_and_a_second_spawn_of_a_running_child(helix, make_agent, mock_llm):
    release = asyncio.Event()

    @tool
    async def survey() -> str:
        """Survey (until the test lets it finish)."""
        await asyncio.wait_for(release.wait(), 20)
        return "surveyed"

    @tool
    def let_go() -> str:
        """Let the scout finish."""
        release.set()
        return "released"

    critic = make_agent()
    scout = make_agent(tools=[survey])
    lead = make_agent(
        tools=[let_go],
        persistent_agents=[PersistentAgent(critic), PersistentAgent(scout, mode="non_blocking")],
    )
    spawn = {"agentType": scout.name, "message": "survey", "name": "s"}
    mock_llm.add_responses(
        calls(("a", "companion__spawnAgent", spawn)),
        calls(("b", "companion__spawnAgent", spawn)),
        calls(("c", "let_go", {})),
        calls(("d", "companion__waitForResult", {"name": "s", "timeoutSeconds": 20})),
        text("done"),
        agent=lead.name,
    )
    mock_llm.add_responses(calls(("v", "survey", {})), text("the survey"), agent=scout.name)

    result = await (await helix.execute(lead, "go")).result()

    assert result.status == "completed", result.error
    answers = results(await helix.get_messages(result.session_id))
    assert answers["b"] == (
        "Child 's' is already running; send it a message with companion__sendMessage",
        True,
    )
    assert json.loads(answers["d"][0]) == {
        "name": "s",
        "agent_type": scout.name,
        "status": "completed",
        "output": "the survey",
    }


async def test_a_blocking_turn_and_wait_for_result_mark_the_parent_waiting_on_its_children(
    helix, make_agent, mock_llm, database_url
):
    """As for ephemeral sub-agents: while a blocking companion's turn or a waitForResult
    holds the parent, its run is `waiting` on `awaiting_children`, on_agent_suspended fired
    with that reason, and on_agent_resumed fires once the child is done."""
    events: list[tuple[str, str, list[str]]] = []
    hooks = AgentHooks(
        on_agent_suspended=lambda e: events.append(
            ("suspended", e.details["reason"], e.details["tool_call_ids"])
        ),
        on_agent_resumed=lambda e: events.append(
            ("resumed", e.details["reason"], e.details["tool_call_ids"])
        ),
    )
    gates = {"critic": threading.Event(), "scout": threading.Event()}

    @tool
    async def hold(who: str) -> str:
        """Work until the test has seen the parent wait."""
        await asyncio.to_thread(gates[who].wait, 20)
        return "held"

    critic = make_agent(tools=[hold])
    scout = make_agent(tools=[hold])
    lead = make_agent(
        persistent_agents=[PersistentAgent(critic), PersistentAgent(scout, mode="non_blocking")],
        hooks=hooks,
    )
    mock_llm.add_responses(
        calls(("b", "companion__spawnAgent", {"agentType": critic.name, "message": "review"})),
        calls(("n", "companion__spawnAgent", {"agentType": scout.name, "message": "scout"})),
        calls(("w", "companion__waitForResult", {"name": f"{scout.name}-1"})),
        text("done"),
        agent=lead.name,
    )
    mock_llm.add_responses(calls(("h", "hold", {"who": "critic"})), text("fine"), agent=critic.name)
    mock_llm.add_responses(
        calls(("h", "hold", {"who": "scout"})), text("scouted"), agent=scout.name
    )

    handle = await helix.execute(lead, "go")
    seen: list[tuple] = []
    try:
        for who, waits in (("critic", 1), ("scout", 2)):

            async def suspended(waits: int = waits) -> bool:
                return sum(e[0] == "suspended" for e in events) >= waits

            await until(suspended)
            seen += sql(
                database_url,
                "SELECT r.status, r.waiting_for, s.status FROM helix.runs r "
                "JOIN helix.sessions s ON s.session_id = r.session_id WHERE r.run_id = %s",
                handle.run_id,
            )
            gates[who].set()
        result = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        for gate in gates.values():
            gate.set()

    assert result.status == "completed", result.error
    assert seen == [("waiting", "awaiting_children", "waiting")] * 2
    assert events == [
        ("suspended", "awaiting_children", ["b"]),
        ("resumed", "children_done", ["b"]),
        ("suspended", "awaiting_children", ["w"]),
        ("resumed", "children_done", ["w"]),
    ]
    answers = results(await helix.get_messages(result.session_id))
    assert answers["b"] == ("fine", False)
    assert json.loads(answers["w"][0])["output"] == "scouted"
    [(status, waiting_for)] = sql(
        database_url, "SELECT status, waiting_for FROM helix.runs WHERE run_id = %s", handle.run_id
    )
    assert (status, waiting_for) == ("completed", None)
