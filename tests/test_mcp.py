"""MCP toolsets (issue 16, extra `mcp`) against a real MCP server the test starts, over
stdio and streamable HTTP: each call is a DBOS tool step, approval gates and
execute="client" compose, and a server that is down is a tool error."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import pytest

pytest.importorskip("mcp")

from helpers import calls, sql

from helix_dbos import mcp as helix_mcp
from helix_dbos.mcp import MCPHTTP, MCPStdio, MCPToolError, MCPToolset

SERVER = Path(__file__).parent / "apps" / "mcp_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path):
    """The test server over streamable HTTP, in its own process."""
    port = free_port()
    markers = tmp_path / "http-calls.log"
    proc = forkserver.Popen(
        [sys.executable, str(SERVER), "http", str(port), str(markers)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError("the MCP server did not start")
    yield f"http://127.0.0.1:{port}/mcp", markers, proc
    proc.kill()
    proc.wait(timeout=10)


def marks(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_stdio_server_s_tool_is_a_durable_tool_step(
    helix, make_agent, mock_llm, database_url, tmp_path
):
    markers = tmp_path / "stdio-calls.log"
    toolset = MCPToolset(MCPStdio(sys.executable, (str(SERVER), "stdio", "0", str(markers))))
    tools = await asyncio.to_thread(toolset.tools)
    assert [t.name for t in tools] == ["add", "shout", "explode"]
    add = next(t for t in tools if t.name == "add")
    assert add.spec().parameters["required"] == ["a", "b"], "the server's own input schema"
    assert add.spec().description == "Add two numbers."

    agent = make_agent(tools=tools)
    mock_llm.add_responses(
        calls(("m1", "add", {"a": 2, "b": 40}), ("m2", "explode", {})),
        {"type": "text", "content": "42, and explode failed"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "add")).result()
    assert result.status == "completed", result.error
    results = {
        m.tool_call_id: m for m in await helix.get_messages(result.session_id) if m.role == "tool"
    }
    assert json.loads(results["m1"].content) == {"result": 42} and not results["m1"].is_error
    assert results["m2"].is_error and "explode" in results["m2"].content
    assert sorted(marks(markers)) == ["add 2 40", "explode"], "each call made once"
    steps = sql(
        database_url,
        "SELECT function_name FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON r.workflow_id = o.workflow_uuid WHERE r.run_id = %s AND function_name LIKE "
        "'helix.tool:%%' ORDER BY function_name",
        result.run_id,
    )
    assert steps == [("helix.tool:add",), ("helix.tool:explode",)]


async def test_an_http_server_with_an_approval_gate_and_a_client_tool(
    helix, make_agent, mock_llm, http_server
):
    url, markers, _ = http_server
    opened = helix_mcp._tls.cache_info()
    gated = MCPToolset(MCPHTTP(url), include={"shout"}, require_approval={"shout"})
    client_side = MCPToolset(MCPHTTP(url), include={"add"}, prefix="client_", execute="client")
    tools = await asyncio.to_thread(lambda: gated.tools() + client_side.tools())
    assert [t.name for t in tools] == ["shout", "client_add"]
    agent = make_agent(tools=tools)
    mock_llm.add_responses(
        calls(("s1", "shout", {"text": "hi"}), ("c1", "client_add", {"a": 1, "b": 1})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "shout")
    for _ in range(400):
        pending = {
            p.tool_call_id: p.kind for p in await helix.pending_tool_calls(handle.session_id)
        }
        if len(pending) == 2:
            break
        await asyncio.sleep(0.05)
    assert pending == {"s1": "approval", "c1": "client"}
    assert marks(markers) == [], "nothing runs before the approval"
    await helix.approve(handle.session_id, "s1")
    await helix.submit_tool_result(handle.session_id, "c1", {"sum": 2})
    result = await handle.result()
    assert result.status == "completed", result.error
    results = {
        m.tool_call_id: m.content
        for m in await helix.get_messages(result.session_id)
        if m.role == "tool"
    }
    assert json.loads(results["s1"]) == {"result": "HI"}
    assert json.loads(results["c1"]) == {"sum": 2}, "the client's result, not the server's"
    assert marks(markers) == ["shout hi"], "approved: called once; the client tool never"
    # Three sessions (two tool lists, one call) took the process's one TLS context.
    used = helix_mcp._tls.cache_info()
    assert (used.hits + used.misses - opened.hits - opened.misses, used.misses) == (3, 1)


async def test_a_server_that_is_down_is_a_tool_error_and_its_stored_list_defines_the_tools(
    helix, make_agent, mock_llm, http_server, database_url
):
    url, _, proc = http_server
    listed = await asyncio.to_thread(
        MCPToolset(MCPHTTP(url), timeout_seconds=5, database_url=database_url).tools
    )
    [(stored,)] = sql(
        database_url,
        "SELECT jsonb_array_length(tools) FROM helix.mcp_tool_lists WHERE server_key = %s",
        f"http:{url}",
    )
    assert stored == 3
    proc.kill()
    proc.wait(timeout=10)
    # A process starting now (a fresh toolset) still defines the tools, from the store.
    tools = await asyncio.to_thread(
        MCPToolset(MCPHTTP(url), timeout_seconds=5, database_url=database_url).tools
    )
    assert [t.spec() for t in tools] == [t.spec() for t in listed]
    with pytest.raises(MCPToolError, match="no stored tool list"):
        await asyncio.to_thread(MCPToolset(MCPHTTP(url), timeout_seconds=5).tools)

    agent = make_agent(tools=tools)
    mock_llm.add_responses(
        calls(("a1", "add", {"a": 1, "b": 2})),
        {"type": "text", "content": "the server is down"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "add")).result()
    assert result.status == "completed", result.error
    [message] = [m for m in await helix.get_messages(result.session_id) if m.role == "tool"]
    assert message.is_error and "MCP server unavailable" in message.content
