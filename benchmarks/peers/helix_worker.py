"""helix_dbos: an Agent with one `@tool` and an output_schema, scripted by MockLLM.

Every LLM call and every tool call is a DBOS step (helix's only mode); the final
answer is the injected `__finish__` tool. History: an existing session whose
transcript already holds the messages (written with SQL, as bench_agent_loop.py does).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import psycopg

from benchmarks.peers.common import (
    APP_VERSION,
    CRASH_STEPS,
    SCRIPT,
    Answer,
    final_answer,
    history_result_payload,
    history_turns,
    tool_body_async,
    worker_main,
)
from helix_dbos import Agent, HelixDBOS, MockLLM, tool
from helix_dbos.orchestration.types import LLMRequest

AGENT_NAME = "peer_agent"


@tool
async def ping(i: int) -> str:
    """Answers at once."""
    return await tool_body_async(i)


def respond(request: LLMRequest) -> dict[str, Any]:
    SCRIPT.called()
    done = 0
    for m in reversed(request.messages):  # back to the last user message only
        if m.role == "user":
            break
        done += m.role == "tool"
    if SCRIPT.wants_tool(done):
        call = {"id": f"c{done}", "name": "ping", "arguments": {"i": done}}
    else:
        call = {"id": "fin", "name": "__finish__", "arguments": final_answer(done)}
    # A usage of its own, as the OpenAI Agents worker's model reports `Usage()`: without
    # one, MockLLM counts the characters of every message of every request (harness
    # work that grows with the history).
    return {"type": "tool_calls", "tool_calls": [call], "usage": {}}


agent = Agent(
    AGENT_NAME,
    system_prompt="You ping.",
    tools=[ping],
    output_schema=Answer,
    max_steps=10_000,
)


def history_rows(count: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for kind, payload in history_turns(count):
        if kind == "user":
            rows.append(("user", payload, None, None, None))
        elif kind == "call":
            call = json.dumps([{"id": payload, "name": "ping", "arguments": {"i": 0}}])
            rows.append(("assistant", None, call, None, None))
        elif kind == "result":
            rows.append(("tool", history_result_payload(), None, payload, "ping"))
        else:
            rows.append(("assistant", payload, None, None, None))
    return rows


class Helix:
    name = "helix"

    def __init__(self) -> None:
        self.helix: HelixDBOS | None = None
        self.sql: psycopg.Connection[Any] | None = None
        self.mock = MockLLM(respond)

    def _make(self, database_url: str, executor_id: str) -> HelixDBOS:
        return HelixDBOS(
            [agent],
            database_url=database_url,
            llm=self.mock,
            executor_id=executor_id,
            application_version=APP_VERSION,
            worker_lease_seconds=4,  # a relaunch under the same id waits this long at most
        )

    async def setup(self, database_url: str) -> None:
        self.helix = self._make(database_url, f"peers-{uuid.uuid4().hex[:8]}")
        self.helix.launch()  # on this loop, as bench_agent_loop.py does
        self.sql = psycopg.connect(database_url, autocommit=True)

    async def prepare(self, history: int) -> Any:
        if history == 0:
            return None
        assert self.sql is not None
        session_id = f"ses_peers_{uuid.uuid4().hex}"
        with self.sql.transaction():
            self.sql.execute(
                "INSERT INTO helix.sessions (session_id, agent_name, status) "
                "VALUES (%s, %s, 'completed')",
                (session_id, AGENT_NAME),
            )
            with self.sql.cursor() as cur:
                cur.executemany(
                    "INSERT INTO helix.messages (session_id, seq, role, content, tool_calls, "
                    "tool_call_id, tool_name) VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s)",
                    [(session_id, seq, *row) for seq, row in enumerate(history_rows(history), 1)],
                )
        return session_id

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        assert self.helix is not None
        handle = await self.helix.execute(agent, "go", session_id=prepared)
        result = await handle.result()
        self.mock.inputs.clear()  # MockLLM keeps every request for tests; a model does not
        if result.status != "completed":
            raise RuntimeError(f"helix run ended {result.status}: {result.error}")
        return dict(result.output)

    async def shutdown(self) -> None:
        if self.sql is not None:
            self.sql.close()
        if self.helix is not None:
            self.helix.shutdown()

    async def crash_start(self, database_url: str) -> str:
        self.helix = self._make(database_url, "peers-crash")
        self.helix.launch()
        handle = await self.helix.execute(agent, "go")
        return handle.run_id

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        self.helix = self._make(database_url, "peers-crash")
        self.helix.launch()  # pending runs of this executor resume
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = await self.helix.get_run(run_id)
            if run.status not in ("running", "waiting"):
                return {"status": run.status, "output": run.output, "note": "resumed by launch()"}
            await asyncio.sleep(0.2)
        return {"status": "timeout", "output": None, "note": "not finished after 120 s"}


assert CRASH_STEPS > 1

if __name__ == "__main__":
    worker_main(Helix)
