"""MCP servers as toolsets (extra `mcp`, the official `mcp` SDK).

`MCPToolset(MCPStdio(...))` or `MCPToolset(MCPHTTP(url))` lists the server's tools
once per process (cached on the toolset; with a `database_url`, also in
`helix.mcp_tool_lists`, which a process starting while the server is down falls back
to) and makes each a helix `Tool`: its call
runs in that tool's `helix.tool:<name>` DBOS step like any tool, so a completed call
is never made again after a crash. A server that is down, or a call it fails, is a
tool error the model reads, never a crashed run. `require_approval` and
`execute="client"` apply to the toolset's tools as to any tool.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict

from helix_dbos.definitions.tool import ApprovalPredicate, ExecuteMode, Tool
from helix_dbos.log_events import MCP_TOOLS_FROM_STORE, log_event
from helix_dbos.store.features import mcp_tool_lists as tool_lists


@dataclass(frozen=True)
class MCPStdio:
    """A server the toolset starts as a subprocess and talks to over stdio."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None


@dataclass(frozen=True)
class MCPHTTP:
    """A server reached over streamable HTTP (`http://host:port/mcp`)."""

    url: str


MCPServerConfig = MCPStdio | MCPHTTP


class MCPToolError(Exception):
    """An MCP call that failed: the server was unreachable, or it reported an error."""


@asynccontextmanager
async def _session(server: MCPServerConfig) -> AsyncIterator[ClientSession]:
    if isinstance(server, MCPStdio):
        params = StdioServerParameters(
            command=server.command, args=list(server.args), env=server.env, cwd=server.cwd
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    async with (
        _http_client() as http,
        streamable_http_client(server.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context MCP's own client would build (httpx2's default), built once: a
    context reads the CA bundle, about 25 ms of CPU, and a session is opened per call."""
    return httpx2.create_ssl_context()


def _http_client() -> httpx2.AsyncClient:
    """MCP's default client (`mcp.shared._httpx_utils.create_mcp_http_client`: 30 s, and
    300 s to read a stream held open), on the shared context."""
    return httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=300.0), verify=_tls())


class _Arguments(BaseModel):
    """Any JSON object: the MCP server validates its own tool's input."""

    model_config = ConfigDict(extra="allow")


class MCPToolset:
    """The tools of one MCP server, as helix tools (see the module docstring)."""

    def __init__(
        self,
        server: MCPServerConfig,
        *,
        prefix: str = "",
        include: Collection[str] | None = None,
        require_approval: bool | ApprovalPredicate | Collection[str] = False,
        execute: ExecuteMode = "server",
        timeout_seconds: float = 60.0,
        database_url: str | None = None,
    ) -> None:
        self.server = server
        self.database_url = database_url
        self.prefix = prefix
        self.include = set(include) if include is not None else None
        self.require_approval = require_approval
        self.execute = execute
        self.timeout_seconds = timeout_seconds
        self._listed: list[mcp_types.Tool] | None = None

    def tools(self) -> list[Tool]:
        """The server's tools (listed once per process; the list is cached)."""
        return [self._tool(t) for t in self.list_tools()]

    def list_tools(self) -> list[mcp_types.Tool]:
        if self._listed is None:
            listed = self._fetch_or_cached()
            self._listed = [t for t in listed if self.include is None or t.name in self.include]
        return self._listed

    @property
    def server_key(self) -> str:
        if isinstance(self.server, MCPStdio):
            return "stdio:" + " ".join([self.server.command, *self.server.args])
        return f"http:{self.server.url}"

    def _fetch_or_cached(self) -> list[mcp_types.Tool]:
        """The server's list (stored for later), or the stored one if it is down."""
        try:
            listed: list[mcp_types.Tool] = _run_sync(self._list())
        except Exception as exc:
            cached = tool_lists.load(self.database_url, self.server_key)
            if cached is None:
                raise MCPToolError(
                    f"MCP server {self.server_key} unavailable and no stored tool list: "
                    f"{_reason(exc)}"
                ) from exc
            log_event(
                MCP_TOOLS_FROM_STORE,
                logging.WARNING,
                f"using the stored tool list: {_reason(exc)}",
                server=self.server_key,
                error=_reason(exc),
            )
            return [mcp_types.Tool.model_validate(t) for t in cached]
        dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
        tool_lists.store(self.database_url, self.server_key, dumped)
        return listed

    async def _list(self) -> list[mcp_types.Tool]:
        async with _session(self.server) as session:
            return list((await session.list_tools()).tools)

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call one tool; its structured result, else its text. Raises `MCPToolError`."""
        try:
            result = await asyncio.wait_for(self._call(name, arguments), self.timeout_seconds)
        except Exception as exc:  # unreachable, timed out, protocol error
            raise MCPToolError(f"MCP server unavailable: {_reason(exc)}") from exc
        if not isinstance(result, mcp_types.CallToolResult):
            raise MCPToolError(f"MCP tool '{name}' asked for input helix cannot give")
        text = "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
        if result.is_error:
            raise MCPToolError(text or f"MCP tool '{name}' failed")
        if result.structured_content is not None:
            return result.structured_content
        return text

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        async with _session(self.server) as session:
            return await session.call_tool(name, arguments)

    def _tool(self, listed: mcp_types.Tool) -> Tool:
        name = f"{self.prefix}{listed.name}"
        remote = listed.name

        async def call_mcp(arguments: _Arguments) -> Any:
            return await self.call(remote, arguments.model_dump())

        tool = Tool(
            name,
            call_mcp if self.execute == "server" else None,
            description=listed.description or "",
            input_model=_Arguments,
            execute=self.execute,
            require_approval=self._approval_for(remote),
        )
        tool._model_param = "arguments"  # the function takes the arguments as one model
        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        tool._spec = tool.spec().model_copy(update={"parameters": schema})
        return tool

    def _approval_for(self, name: str) -> bool | ApprovalPredicate:
        gate = self.require_approval
        if isinstance(gate, bool) or callable(gate):
            return gate
        return name in set(gate)


def _reason(exc: BaseException) -> str:
    """The innermost cause of an error (anyio wraps them in exception groups)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _run_sync(coroutine: Any) -> Any:
    """Run `coroutine` to the end, also when called under a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=runner, name="helix-mcp-list")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def mcp_tools(server: MCPServerConfig, **options: Any) -> list[Tool]:
    """Shorthand: `Agent(tools=[*mcp_tools(MCPStdio("server")), ...])`."""
    return MCPToolset(server, **options).tools()
