"""Answers addressed through any ancestor of the session that owns the call (issue 46,
hole 6): call ids are unique per session, not per tree, so an id that two descendants
wait on is refused (409 over HTTP, naming their sessions) and answers nothing, while
the owner's session, or any ancestor below which one call waits, answers it."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from helpers import calls, sql, text
from live_server import serve

from helix_dbos import sub_agent_tool, tool
from helix_dbos.errors import AmbiguousToolCallError
from helix_dbos.server import create_app
from helix_dbos.server.remote import RemoteControl


async def until(predicate, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def answered(database_url: str, root: str) -> list[tuple]:
    """Every call of the tree: (session, call id, status, answered?)."""
    return sql(
        database_url,
        "SELECT c.session_id, c.tool_call_id, c.status, c.answered_at IS NOT NULL "
        "FROM helix.tool_calls c JOIN helix.sessions s ON s.session_id = c.session_id "
        "WHERE s.root_session_id = %s OR s.session_id = %s ORDER BY 1, 2",
        root,
        root,
    )


def children_of(database_url: str, session_id: str) -> list[str]:
    return [
        r[0]
        for r in sql(
            database_url,
            "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s "
            "ORDER BY session_id",
            session_id,
        )
    ]


async def test_an_id_two_children_wait_on_is_refused_at_the_root_and_answered_exactly(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool(require_approval=True)
    def publish(post: str) -> str:
        """Publish a post (needs a human's approval)."""
        ran.append(post)
        return f"published {post}"

    child = make_agent(tools=[publish])
    parent = make_agent(tools=[sub_agent_tool(child, name="writer")])
    mock_llm.add_response(
        calls(
            ("w1", "subagent__writer", {"message": "one"}),
            ("w2", "subagent__writer", {"message": "two"}),
        ),
        agent=parent.name,
    )
    mock_llm.add_responses(  # each child asks under the same call id
        calls(("x", "publish", {"post": "a"})),
        calls(("x", "publish", {"post": "b"})),
        text("posted"),
        text("posted"),
        agent=child.name,
    )
    mock_llm.add_response(text("both posted"), agent=parent.name)
    handle = await helix.execute(parent, "go")
    root = handle.session_id

    async def both_wait() -> bool:
        return len(await helix.pending_tool_calls(root)) == 2

    await until(both_wait)
    first, second = children_of(database_url, root)

    with pytest.raises(AmbiguousToolCallError) as refused:
        await helix.approve(root, "x")
    assert refused.value.session_ids == [first, second]
    assert first in str(refused.value) and second in str(refused.value)
    # The CLI's path (SQL and DBOSClient, no DBOS here) refuses it the same way.
    with pytest.raises(AmbiguousToolCallError):
        await asyncio.to_thread(RemoteControl(database_url).approve, root, "x", True)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            reply = await client.post(
                "/submit-tool-result",
                json={
                    "session_id": root,
                    "tool_call_id": "x",
                    "kind": "approval-response",
                    "approved": True,
                },
            )
    assert reply.status_code == 409, reply.text
    assert first in reply.text and second in reply.text
    assert [row[3] for row in answered(database_url, root) if row[1] == "x"] == [False, False]

    # Addressed exactly: the owner's session answers its own call.
    await helix.approve(first, "x")
    # Now one call waits below the root under that id: the root answers it.
    await helix.approve(root, "x")
    result = await handle.result()
    assert (result.status, result.output) == ("completed", "both posted"), result.error
    assert sorted(ran) == ["a", "b"]
    assert await helix.pending_tool_calls(root) == []


async def test_a_grandchilds_call_is_answered_through_its_middle_session(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool(require_approval=True)
    def launch(target: str) -> str:
        """Launch (needs a human's approval)."""
        ran.append(target)
        return f"launched {target}"

    leaf = make_agent(tools=[launch])
    middle = make_agent(tools=[sub_agent_tool(leaf, name="leaf")])
    top = make_agent(tools=[sub_agent_tool(middle, name="middle")])
    mock_llm.add_responses(
        calls(("m", "subagent__middle", {"message": "go"})), text("top done"), agent=top.name
    )
    mock_llm.add_responses(
        calls(("l", "subagent__leaf", {"message": "go"})), text("middle done"), agent=middle.name
    )
    mock_llm.add_responses(
        calls(("g1", "launch", {"target": "moon"})), text("leaf done"), agent=leaf.name
    )
    handle = await helix.execute(top, "go")
    root = handle.session_id

    async def leaf_waits() -> bool:
        return len(await helix.pending_tool_calls(root)) == 1

    await until(leaf_waits)
    [middle_session] = children_of(database_url, root)
    [leaf_session] = children_of(database_url, middle_session)
    # An id nobody below the middle session waits on: not found, as before.
    with pytest.raises(Exception, match="no pending tool call 'nope'"):
        await helix.approve(middle_session, "nope")
    await helix.approve(middle_session, "g1")
    result = await handle.result()
    assert (result.status, result.output) == ("completed", "top done"), result.error
    assert ran == ["moon"]
    assert answered(database_url, root) == [(leaf_session, "g1", "approved", True)]
    # Answered once: the same answer again, through the root, says so.
    with pytest.raises(Exception, match="already answered"):
        await helix.approve(root, "g1")
