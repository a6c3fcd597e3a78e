"""A session tree seen and steered from its root (issue 27): pending calls of descendants,
interrupt/abort reaching live descendants, companions' lifecycle, names and dispatch."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from helpers import sql
from live_server import serve

from helix_dbos import sub_agent_tool, tool
from helix_dbos.server import create_app

REPO = Path(__file__).resolve().parent.parent


def calls(*items: tuple[str, str, dict]) -> dict:
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in items],
    }


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def tool_results(messages) -> dict[str, tuple[str | None, bool]]:
    return {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}


async def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "helix_dbos.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HELIX_DATABASE_URL": database_url},
        cwd=REPO,
    )


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

            assert seen(await helix.pending_tool_calls(root)) == expected
            assert status["current_run"]["waiting_for"] == "awaiting_children"
            assert seen(status["pending_tool_calls"]) == expected
            # /chat's 202 answered once the child asked: at least that call is listed.
            chat_calls = seen(reply.json()["pending_tool_calls"])
            assert chat_calls and chat_calls <= expected
            # The child's own view: depth 0.
            own = await helix.pending_tool_calls(child_session)
            assert {(c["tool_call_id"], c["depth"]) for c in own} == {("p1", 0), ("l1", 0)}

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
            assert table.returncode == 0 and child_session in table.stdout, table.stderr
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
