-- MCP tool lists (issue 16): the last list each MCP server gave, so a process that
-- starts while a server is down still defines its agents' tools (their calls are then
-- tool errors until the server is back). server_key names the server: 'stdio:<command>
-- <args>' or 'http:<url>'. tools is the MCP tools/list result's tools, as JSON.

CREATE TABLE IF NOT EXISTS helix.mcp_tool_lists (
    server_key  text PRIMARY KEY,
    tools       jsonb NOT NULL,
    fetched_at  timestamptz NOT NULL DEFAULT now()
);
