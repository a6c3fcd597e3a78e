"""A session tree seen and steered from its root (issue 27): pending calls of descendants,
interrupt/abort reaching live descendants, companions' lifecycle, names and dispatch."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid

import httpx
import pytest
from dbos import DBOS, SetWorkflowID
from helpers import calls, cli, sql
from live_server import serve
from sqlalchemy import text as sql_text

from helix_dbos import Agent, PersistentAgent, sub_agent_tool, tool
from helix_dbos.errors import AgentDefinitionError, RunNotActiveError
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.sessions.run_opening import companion_run_id, workflow_id
from helix_dbos.server import create_app
from helix_dbos.store import repository as repo
from helix_dbos.store.features import companion_rows as companions_sql


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def tool_results(messages) -> dict[str, tuple[str | None, bool]]:
    return {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}


async def until(predicate, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


# --- 1. the root lists its descendants' pending calls ---------------------------------


async def test_the_root_lists_its_descendants_pending_calls_everywhere(
    helix, make_agent, mock_llm, database_url
):
    """A sub-agent waits for an approval and a client tool: the root's
    `pending_tool_calls`, `/status`, `/chat`'s 202 and `helix-dbos runs --session` all
    list both, with the child's session, agent and depth; answers through the root end it."""
    ran: list[str] = []

    @tool(require_approval=True)
    def publish(post: str) -> str:
        """Publish a post (needs a human's approval)."""
        ran.append(post)
        return f"published {post}"

    @tool(execute="client")
    def get_location() -> dict:
        """Ask the user's device for its location."""

    child = make_agent(tools=[publish, get_location])
    parent = make_agent(tools=[sub_agent_tool(child, name="writer")])
    mock_llm.add_response(calls(("w", "subagent__writer", {"message": "post"})), agent=parent.name)
    mock_llm.add_responses(
        calls(("p1", "publish", {"post": "hi"}), ("l1", "get_location", {})),
        text("posted from here"),
        agent=child.name,
    )
    mock_llm.add_response(text("all done"), agent=parent.name)
    root = "ctx-tree-pending"

    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            reply = await client.post(
                "/chat", json={"context_id": root, "agent": parent.name, "message": "go"}
            )
            assert reply.status_code == 202, reply.text
            await until(lambda: _pending_count(helix, root, 2))
            status = (await client.get("/status", params={"session_id": root})).json()

            [(child_session,)] = sql(
                database_url,
                "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s",
                root,
            )
            expected = {
                ("p1", "publish", "approval", child_session, child.name, 1),
                ("l1", "get_location", "client", child_session, child.name, 1),
            }

            def seen(calls: list[dict]) -> set[tuple]:
                return {
                    (
                        c["tool_call_id"],
                        c["tool_name"],
                        c["kind"],
                        c["session_id"],
                        c["agent_name"],
                        c["depth"],
                    )
                    for c in calls
                }

            assert seen([c.model_dump() for c in await helix.pending_tool_calls(root)]) == expected
            assert status["current_run"]["waiting_for"] == "awaiting_children"
            assert seen(status["pending_tool_calls"]) == expected
            # /chat's 202 answered once the child asked: at least that call is listed.
            chat_calls = seen(reply.json()["pending_tool_calls"])
            assert chat_calls and chat_calls <= expected
            # The child's own view: depth 0.
            own = await helix.pending_tool_calls(child_session)
            assert {(c.tool_call_id, c.depth) for c in own} == {("p1", 0), ("l1", 0)}

            listed = await cli(
                database_url, "runs", "--status", "waiting", "--session", root, "--json"
            )
            assert listed.returncode == 0, listed.stderr
            runs = {r["session_id"]: r for r in json.loads(listed.stdout)}
            assert set(runs) == {root, child_session}
            assert (runs[child_session]["depth"], runs[child_session]["root_session_id"]) == (
                1,
                root,
            )
            assert seen(runs[child_session]["tool_calls"]) == expected
            table = await cli(database_url, "runs", "--status", "waiting", "--session", root)
            # Tables show ids as short unique prefixes (`ses_` and 8 hex digits).
            assert table.returncode == 0 and child_session[:12] in table.stdout, table.stderr
            inbox = (await client.get("/runs", params={"status": "waiting"})).json()
            [card] = [r for r in inbox if r["session_id"] == child_session]
            assert (card["root_session_id"], card["depth"]) == (root, 1)

            await helix.approve(root, "p1")
            await helix.submit_tool_result(root, "l1", {"lat": 1.0})
            result = await (await helix.get_handle(status["current_run"]["run_id"])).result()

    assert result.status == "completed" and result.output == "all done"
    assert ran == ["hi"]
    assert await helix.pending_tool_calls(root) == []


async def _pending_count(helix, session_id: str, count: int) -> bool:
    return len(await helix.pending_tool_calls(session_id)) == count


# --- 4. companion auto-names never collide ---------------------------------------------


async def test_an_auto_name_skips_a_name_taken_explicitly(helix, make_agent, mock_llm):
    """After spawnAgent(name="<type>-2"), unnamed spawns are `<type>-1` then `<type>-3`:
    none continues the explicitly named child."""
    critic = make_agent()
    writer = make_agent(persistent_agents=[PersistentAgent(critic)])
    mock_llm.add_responses(
        calls(
            (
                "a",
                "companion__spawnAgent",
                {"agentType": critic.name, "message": "one", "name": f"{critic.name}-2"},
            )
        ),
        calls(("b", "companion__spawnAgent", {"agentType": critic.name, "message": "two"})),
        calls(("c", "companion__spawnAgent", {"agentType": critic.name, "message": "three"})),
        calls(("d", "companion__listChildren", {})),
        text("done"),
        agent=writer.name,
    )
    mock_llm.add_responses(text("r1"), text("r2"), text("r3"), agent=critic.name)

    result = await (await helix.execute(writer, "go")).result()

    assert result.status == "completed", result.error
    listed = json.loads(tool_results(await helix.get_messages(result.session_id))["d"][0])
    assert sorted(c["name"] for c in listed) == [f"{critic.name}-{n}" for n in (1, 2, 3)]
    # Each child saw only its own message: the explicitly named one was not continued.
    for child in listed:
        seen = [m.content for m in await helix.get_messages(child["session_id"])]
        assert len(seen) == 2, seen


async def test_concurrent_unnamed_spawns_never_get_the_same_name(helix, make_agent):
    """Two transactions spawn an unnamed child of the same parent at once: the second
    waits on the first's insert and, once it commits, takes the next free name."""
    critic = make_agent()
    engine = helix.runtime.engine
    parent = f"ses_names_{id(critic)}"

    async def setup() -> None:
        async with engine.begin() as conn:
            await repo.insert_session(conn, parent, critic.name, {})
            await companions_sql.find_or_create(
                conn,
                parent,
                critic.name,
                f"{critic.name}-1",
                mode="blocking",
                state={},
                create=True,
            )

    async def spawn(conn) -> str:
        ref = await companions_sql.find_or_create(
            conn, parent, critic.name, None, mode="blocking", state={}, create=True
        )
        assert not isinstance(ref, str)
        return ref.name

    async def race() -> tuple[str, str, list[str]]:
        first_tx = await engine.connect()
        try:
            await first_tx.begin()
            first = await spawn(first_tx)  # inserted, not committed yet
            second_task = asyncio.ensure_future(_in_tx(engine, spawn))
            await _until_a_backend_waits_on_a_lock(engine, second_task)
            await first_tx.commit()
        finally:
            await first_tx.close()
        second = await second_task
        many = await asyncio.gather(*(_in_tx(engine, spawn) for _ in range(6)))
        return first, second, many

    await on_target_loop(setup)
    first, second, many = await on_target_loop(race)

    assert (first, second) == (f"{critic.name}-2", f"{critic.name}-3")
    assert sorted(many, key=lambda n: int(n.rsplit("-", 1)[1])) == [
        f"{critic.name}-{n}" for n in range(4, 10)
    ]


async def _in_tx(engine, func):
    async with engine.begin() as conn:
        return await func(conn)


async def _until_a_backend_waits_on_a_lock(engine, task) -> None:
    for _ in range(600):
        assert not task.done(), "the second spawn did not wait for the first"
        async with engine.connect() as conn:
            waiting = (
                await conn.execute(
                    sql_text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                )
            ).scalar_one()
        if waiting:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the second spawn never waited on the first")


# --- 5. companion dispatch failures are those of a sub-agent ---------------------------


def dispatch_failures(caplog) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.tool_call_id)
        for r in caplog.records
        if getattr(r, "event", None) == "subagent.dispatch_failed"
    ]


def error_chunks(database_url: str, session_id: str) -> list[dict]:
    return [
        p
        for (p,) in sql(
            database_url,
            "SELECT payload FROM helix.stream_events WHERE session_id = %s AND type = 'error' "
            "ORDER BY seq",
            session_id,
        )
    ]


async def test_a_companion_whose_agent_is_not_registered_is_a_dispatch_failure(
    helix, make_agent, mock_llm, database_url, caplog
):
    ghost = Agent(f"nowhere_{id(mock_llm)}")  # never registered
    lead = make_agent(persistent_agents=[PersistentAgent(ghost, mode="non_blocking")])
    mock_llm.add_responses(
        calls(("g", "companion__spawnAgent", {"agentType": ghost.name, "message": "boo"})),
        text("carried on"),
        agent=lead.name,
    )

    with caplog.at_level(logging.ERROR, logger="helix_dbos"):
        result = await (await helix.execute(lead, "go")).result()

    assert result.status == "completed" and result.output == "carried on"
    content, is_error = tool_results(await helix.get_messages(result.session_id))["g"]
    assert is_error and content.startswith(f"Sub-agent '{ghost.name}' could not be dispatched")
    assert "not registered" in content
    assert dispatch_failures(caplog) == [(logging.ERROR, "g")]
    [payload] = error_chunks(database_url, result.session_id)
    assert (payload["tool_call_id"], payload["tool_name"], payload["error"]) == (
        "g",
        "companion__spawnAgent",
        content,
    )


async def test_a_companion_whose_workflow_cannot_start_is_a_dispatch_failure(
    helix, make_agent, mock_llm, database_url, caplog
):
    """The start fails for real: the child turn's workflow id is taken by another DBOS
    workflow. The call is a tool error with an error chunk and one ERROR event, and the
    opened child turn is closed, not left running."""

    async def squatter() -> None:
        return None

    taken_by = DBOS.workflow(name=f"squatter_{uuid.uuid4().hex[:8]}")(squatter)
    critic = make_agent()
    lead = make_agent(persistent_agents=[PersistentAgent(critic, mode="non_blocking")])
    ready = threading.Event()

    async def respond(request):
        if request.agent_name == critic.name:
            return text("never")
        if not any(m.role == "tool" for m in request.messages):
            await asyncio.to_thread(ready.wait, 30)  # until the child's workflow id is taken
            return calls(("c", "companion__spawnAgent", {"agentType": critic.name, "message": "x"}))
        return text("carried on")

    async def occupy(run_id: str) -> None:
        child_run = companion_run_id(run_id, 1, "c")
        with SetWorkflowID(workflow_id(child_run)):
            await DBOS.start_workflow_async(taken_by)

    mock_llm.set_responder(respond)
    try:
        with caplog.at_level(logging.ERROR, logger="helix_dbos"):
            handle = await helix.execute(lead, "go")
            await on_target_loop(lambda: occupy(handle.run_id))
            ready.set()
            result = await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        mock_llm.set_responder(None)
        ready.set()

    assert result.status == "completed" and result.output == "carried on", result.error
    content, is_error = tool_results(await helix.get_messages(result.session_id))["c"]
    assert is_error and content.startswith(
        f"Sub-agent '{critic.name}' could not be dispatched: its workflow could not be started"
    )
    assert dispatch_failures(caplog) == [(logging.ERROR, "c")]
    [payload] = error_chunks(database_url, result.session_id)
    assert payload["tool_call_id"] == "c" and payload["error"] == content
    child_session = f"{result.session_id}-agent-{critic.name}-1"
    [(status, error)] = sql(
        database_url, "SELECT status, error FROM helix.runs WHERE session_id = %s", child_session
    )
    assert status == "failed" and "could not be started" in error


# --- 2. stopping a session reaches its live descendants --------------------------------


def scout_setup(make_agent, mock_llm, release: asyncio.Event, **persistent):
    @tool
    async def explore(area: str) -> str:
        """Explore an area (until the test lets it finish)."""
        await asyncio.wait_for(release.wait(), 60)
        return f"{area}: three tunnels"

    scout = make_agent(tools=[explore])
    lead = make_agent(persistent_agents=[PersistentAgent(scout, mode="non_blocking", **persistent)])
    mock_llm.add_responses(
        calls(("s", "companion__spawnAgent", {"agentType": scout.name, "message": "caves"})),
        text("lead done"),
        agent=lead.name,
    )
    mock_llm.add_responses(
        calls(("e", "explore", {"area": "caves"})), text("scouted"), agent=scout.name
    )
    return scout, lead


async def scout_run_once_lead_done(helix, lead, scout, database_url) -> tuple[str, str, str]:
    result = await (await helix.execute(lead, "go")).result()
    assert result.status == "completed" and result.output == "lead done", result.error
    scout_session = f"{result.session_id}-agent-{scout.name}-1"
    [(run_id, workflow_id)] = sql(
        database_url,
        "SELECT run_id, workflow_id FROM helix.runs WHERE session_id = %s",
        scout_session,
    )
    return result.session_id, scout_session, run_id


async def test_interrupting_a_session_reaches_a_companion_that_outlived_its_run(
    helix, make_agent, mock_llm, database_url
):
    release = asyncio.Event()
    scout, lead = scout_setup(make_agent, mock_llm, release)
    lead_session, scout_session, scout_run = await scout_run_once_lead_done(
        helix, lead, scout, database_url
    )
    # keep_running (the default): the companion works on after its parent's run ended.
    assert await helix.get_current_run(lead_session) is None
    assert (await helix.get_run(scout_run)).status == "running"

    assert await helix.interrupt(lead_session, reason="enough") == [scout_run]
    release.set()
    await until(lambda: _run_ended(helix, scout_run))

    assert (await helix.get_run(scout_run)).status == "interrupted"
    with pytest.raises(RunNotActiveError, match="nor has any session below it"):
        await helix.interrupt(lead_session)


async def test_aborting_a_session_by_cli_and_http_reaches_a_companion_that_outlived_its_run(
    helix, make_agent, mock_llm, database_url
):
    release = asyncio.Event()
    scout, lead = scout_setup(make_agent, mock_llm, release)
    lead_session, scout_session, scout_run = await scout_run_once_lead_done(
        helix, lead, scout, database_url
    )
    try:
        aborted = await cli(database_url, "abort", lead_session, "--reason", "stop", "--json")
        assert aborted.returncode == 0, aborted.stderr
        assert json.loads(aborted.stdout) == {
            "action": "aborted",
            "session_id": lead_session,
            "run_id": None,
            "workflow_id": None,
            "run_ids": [scout_run],
        }
        run = await helix.get_run(scout_run)
        assert (run.status, run.error) == ("aborted", "Run aborted: stop")
        [(status,)] = sql(
            database_url,
            "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
            run.workflow_id,
        )
        assert status == "CANCELLED"
        # Nothing live in the tree any more: HTTP says so (409), naming the tree.
        with serve(create_app(helix, allow_unauthenticated=True)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                reply = await client.post("/abort", json={"session_id": lead_session})
        assert reply.status_code == 409 and "below it" in reply.json()["detail"]
    finally:
        release.set()


async def test_http_interrupt_of_a_session_without_a_run_reaches_its_companion(
    helix, make_agent, mock_llm, database_url
):
    release = asyncio.Event()
    scout, lead = scout_setup(make_agent, mock_llm, release)
    lead_session, _, scout_run = await scout_run_once_lead_done(helix, lead, scout, database_url)
    try:
        with serve(create_app(helix, allow_unauthenticated=True)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                reply = await client.post("/interrupt", json={"session_id": lead_session})
        assert reply.status_code == 200, reply.text
        assert reply.json() == {
            "session_id": lead_session,
            "run_id": None,
            "run_ids": [scout_run],
            "action": "interrupt_requested",
        }
    finally:
        release.set()
    await until(lambda: _run_ended(helix, scout_run))
    assert (await helix.get_run(scout_run)).status == "interrupted"


async def test_a_companion_set_to_stop_with_its_parent_is_aborted_when_the_parents_run_ends(
    helix, make_agent, mock_llm, database_url
):
    release = asyncio.Event()
    scout, lead = scout_setup(make_agent, mock_llm, release, on_parent_end="stop")
    try:
        _, _, scout_run = await scout_run_once_lead_done(helix, lead, scout, database_url)
        await until(lambda: _run_ended(helix, scout_run))
    finally:
        release.set()

    run = await helix.get_run(scout_run)
    assert (run.status, run.error) == ("aborted", "Stopped: its parent's run ended")
    [(status,)] = sql(
        database_url,
        "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s",
        run.workflow_id,
    )
    assert status == "CANCELLED"


def test_on_parent_end_takes_keep_running_or_stop(make_agent):
    scout = make_agent()
    with pytest.raises(AgentDefinitionError, match="on_parent_end"):
        PersistentAgent(scout, on_parent_end="linger")  # type: ignore[arg-type]


async def _run_ended(helix, run_id: str) -> bool:
    return (await helix.get_run(run_id)).status not in ("running", "waiting", "paused")
