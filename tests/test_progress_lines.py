"""log_steps: one concise INFO line per thing a run does, from the Python API."""

from __future__ import annotations

import asyncio
import logging

from helix_dbos import tool
from helix_dbos.streaming.progress import log_steps


async def test_log_steps_logs_a_line_per_step_at_info(helix, make_agent, mock_llm, caplog):
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "content": "Let me add.",
            "tool_calls": [{"id": "p1", "name": "add", "arguments": {"a": 2, "b": 3}}],
        },
        {"type": "text", "content": "2 + 3 = 5"},
        agent=agent.name,
    )
    caplog.set_level(logging.INFO, logger="helix_dbos.progress")
    handle = await helix.execute(agent, "add 2 and 3")
    await asyncio.wait_for(log_steps(helix.stream(handle.session_id, run_id=handle.run_id)), 30)
    lines = [r.getMessage() for r in caplog.records if r.name == "helix_dbos.progress"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "helix_dbos.progress")
    assert lines == [
        f"run {handle.run_id} started (turn 1)",
        "step 1 · model: Let me add.",
        'step 1 · tool add({"a": 2, "b": 3})',
        "step 1 · tool add done: 5",
        "step 2 · model: 2 + 3 = 5",
        "step 2 · run completed",
    ]
