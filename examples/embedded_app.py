"""Agents inside an existing DBOS application: a FastAPI app that owns DBOS.

    uvicorn --app-dir examples embedded_app:app           # the web app (port 8000)
    curl -s -X POST localhost:8000/refunds/42              # its own workflow runs the agent
    curl -s localhost:8000/approvals                       # what waits for a human
    .venv/bin/python examples/embedded_app.py approve WORKFLOW_ID CALL_ID  # from anywhere

The application creates `DBOS(config=...)` itself (its name, its explicit application
version, a unique executor id) before HelixDBOS, which then keeps that configuration, and
launches in FastAPI's lifespan with `helix.launch()`: that launches DBOS, the app's
workflows included, after taking the worker lease. The agent runs as a child workflow of
the app's own workflow. The answer to an approval comes from a process without helix,
with `DBOSClient.send`. The model is scripted unless HELIX_MODEL / a provider key is set.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient, DBOSConfig
from fastapi import FastAPI
from psycopg.rows import dict_row

from helix_dbos import (
    Agent,
    HelixDBOS,
    LLMConfig,
    LLMRequest,
    MockLLM,
    default_executor_id,
    libpq_url,
    model_from_env,
    resolve_database_url,
    tool,
)

# $HELIX_DATABASE_URL, else the embedded PostgreSQL: one database for the app, DBOS and helix.
DATABASE_URL = libpq_url(resolve_database_url(None))
APP_VERSION = "orders-1"  # explicit: a code edit must not strand in-flight runs


@tool(require_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order (a human approves each refund)."""
    return f"refunded {amount:.2f} for order {order_id}"


def scripted_model(request: LLMRequest) -> dict[str, Any]:
    """Asks to refund the order named in the request, then reports the result."""
    results = [m for m in request.messages if m.role == "tool"]
    if results:
        return {"type": "text", "content": f"Done: {results[-1].content}"}
    order_id = (request.messages[-1].content or "").rsplit(" ", 1)[-1]
    call = {
        "id": "call_refund",
        "name": "refund",
        "arguments": {"order_id": order_id, "amount": 19.9},
    }
    return {"type": "tool_calls", "tool_calls": [call]}


def create_helix() -> HelixDBOS:
    # 1. The application configures DBOS first, as it always did...
    config: DBOSConfig = {
        "name": "orders",
        "system_database_url": DATABASE_URL,
        "application_version": APP_VERSION,
        "executor_id": default_executor_id(),  # unique per process (helix leases it)
    }
    DBOS(config=config)
    # 2. ...then HelixDBOS sees DBOS configured and keeps that configuration.
    model = model_from_env()
    refunder = Agent(
        "refunder",
        system_prompt="You process refund requests.",
        tools=[refund],
        llm=LLMConfig(model=model or "mock"),
    )
    return HelixDBOS(
        [refunder], database_url=DATABASE_URL, llm=None if model else MockLLM(scripted_model)
    )


def approve(workflow_id: str, tool_call_id: str) -> None:
    """Answer from a process without helix: a plain DBOS message to the agent run."""
    client = DBOSClient(system_database_url=DATABASE_URL)
    try:
        client.send(workflow_id, {"tool_call_id": tool_call_id, "approved": True}, "helix.approval")
    finally:
        client.destroy()


if __name__ == "__main__":  # answering needs no helix: nothing below is built here
    if sys.argv[1:2] != ["approve"] or len(sys.argv) != 4:
        raise SystemExit(__doc__)
    approve(sys.argv[2], sys.argv[3])
    print(f"Approved {sys.argv[3]} of {sys.argv[2]}")
    raise SystemExit(0)

helix = create_helix()


@DBOS.workflow()
async def handle_refund_request(order_id: str) -> dict[str, Any]:
    """The app's own workflow: the agent runs as its durable child workflow."""
    handle = await helix.execute("refunder", f"Refund order {order_id}")
    result = await handle.result()
    return {"status": result.status, "output": result.output, "session_id": result.session_id}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # 3. helix.launch() instead of DBOS.launch(): it launches DBOS on this event loop.
    helix.launch()
    yield
    await helix.shutdown_async()  # closes helix's connections, its lease, DBOS


app = FastAPI(lifespan=lifespan)


@app.post("/refunds/{order_id}")
async def start_refund(order_id: str) -> dict[str, str]:
    handle = await DBOS.start_workflow_async(handle_refund_request, order_id)
    return {"workflow_id": handle.workflow_id}


@app.get("/refunds/{workflow_id}")
async def refund_status(workflow_id: str) -> dict[str, Any]:
    status = await DBOS.get_workflow_status_async(workflow_id)
    if status is None or status.status != "SUCCESS":
        return {"status": status.status if status else "unknown"}
    handle = await DBOS.retrieve_workflow_async(workflow_id)
    return {"status": "done", "result": await handle.get_result()}


@app.get("/approvals")
async def approvals() -> list[dict[str, Any]]:
    """Every agent run waiting for a human, with the workflow id to answer it at (SQL)."""
    return await asyncio.to_thread(waiting_calls)


def waiting_calls() -> list[dict[str, Any]]:
    with psycopg.connect(DATABASE_URL, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT r.workflow_id, w.run_id, w.session_id, w.tool_call_id, w.tool_name, w.input "
            "FROM helix.waiting_runs w JOIN helix.runs r USING (run_id) ORDER BY w.waiting_since"
        ).fetchall()
