"""Another process of the fleet, for tests/test_rollback_cache.py: sends a `rollback`
message to a session whose live run the test's own process is running.

usage: rollback_elsewhere_app.py DATABASE_URL AGENT_NAME SESSION_ID TEXT

Prints `{"stored": true}` once `execute()` has returned (the message stored, the live
run aborted), then, once the message's run has ended, `{"status", "output", "seen"}`:
what the run ended with, and the user messages of each model call made in this process.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

from helix_dbos import Agent, HelixDBOS, MockLLM
from helix_dbos.orchestration.types import LLMRequest

database_url, agent_name, session_id, text = sys.argv[1:5]
seen: list[list[str]] = []


def respond(request: LLMRequest) -> dict[str, str]:
    users = [m.content or "" for m in request.messages if m.role == "user"]
    seen.append(users)
    return {"type": "text", "content": f"re: {users[-1]}"}


async def main() -> None:
    agent = Agent(agent_name)
    helix = HelixDBOS(
        [agent],
        database_url=database_url,
        llm=MockLLM(respond),
        executor_id=f"elsewhere-{uuid.uuid4().hex[:8]}",
        application_version="helix-test",
    )
    helix.launch()
    try:
        handle = await helix.execute(
            agent, text, session_id=session_id, multitask_strategy="rollback"
        )
        print(json.dumps({"stored": True}), flush=True)
        result = await asyncio.wait_for(handle.result(), 90)
        print(json.dumps({"status": result.status, "output": result.output, "seen": seen}))
    finally:
        await helix.shutdown_async()


asyncio.run(main())
