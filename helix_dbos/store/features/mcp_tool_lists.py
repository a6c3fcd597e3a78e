"""`helix.mcp_tool_lists`: the last tool list each MCP server gave (migration 0010).

Plain psycopg, since toolsets are listed while agents are defined, before anything
is launched. Best effort: without the table (migrations not applied yet) or the
database, nothing is stored and nothing is found.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from helix_dbos.log_events import logger
from helix_dbos.store.database import libpq_url


def store(database_url: str | None, server_key: str, tools: list[dict[str, Any]]) -> None:
    if database_url is None:
        return
    try:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO helix.mcp_tool_lists (server_key, tools) VALUES (%s, %s) "
                "ON CONFLICT (server_key) DO UPDATE SET tools = EXCLUDED.tools, "
                "fetched_at = now()",
                (server_key, json.dumps(tools)),
            )
    except psycopg.Error as exc:
        logger.warning("helix could not store the tool list of %s: %s", server_key, exc)


def load(database_url: str | None, server_key: str) -> list[dict[str, Any]] | None:
    if database_url is None:
        return None
    try:
        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT tools FROM helix.mcp_tool_lists WHERE server_key = %s", (server_key,)
            ).fetchone()
    except psycopg.Error as exc:
        logger.warning("helix could not read the tool list of %s: %s", server_key, exc)
        return None
    return list(row[0]) if row else None
