"""A real helix_dbos process for context compaction's crash tests: started, SIGKILLed,
relaunched.

usage: compaction_app.py MODE DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

- `start-hold`: runs turns of one session with an agent that summarises (a small budget)
  until a run takes long (the test holds the `helix.summary` step's checkpoint and kills
  this process); prints {"run_id": ...} before each turn.
- `start-kill`: the same, but the first summary call (MockLLM) SIGKILLs this process.
- `recover`: relaunched; prints the run's end once it finished.
Every summary request is logged to `summaries.log` ("pid"), every turn's system prompt
to `prompts.log`; a summary's text names the process that made it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import PRINTED, kill_once_printed_async, print_ids, wait_for_end

from helix_dbos import Agent, HelixDBOS, HistoryPolicy, MockLLM, Summarize, is_summary_request
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


mark = marker(markers)


async def respond(request: LLMRequest) -> dict[str, Any]:
    if is_summary_request(request.messages):
        mark("summaries.log", str(os.getpid()))
        if mode == "start-kill":
            # Not before the turn's run id is out: else the test waits on the turn before.
            await kill_once_printed_async()  # inside the summary step, before its row
        return {"type": "text", "content": f"summary by {os.getpid()}"}
    mark("prompts.log", json.dumps(request.system))
    last = request.messages[-1].content or ""
    return {"type": "text", "content": f"echo {last[:40]} " + "z" * 120}


agent = Agent(
    "compaction_crash_agent",
    system_prompt="You echo.",
    history=HistoryPolicy(steps=(Summarize(),), max_input_tokens=400),
)
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="compaction-crash-test",
    worker_lease_seconds=4,
)
helix.launch()


async def main() -> None:
    if mode.startswith("start"):
        session_id = None
        for turn in range(100):
            PRINTED.clear()
            handle = await helix.execute(
                agent, f"message {turn} " + "q" * 60, session_id=session_id
            )
            print_ids({"run_id": handle.run_id})
            session_id = (await handle.result()).session_id
        print(json.dumps({"status": "no summary"}), flush=True)
        await asyncio.sleep(3600)
    else:
        await wait_for_end(
            helix,
            sys.argv[5],
            show=lambda run: {"status": run.status, "session_id": run.session_id},
        )


asyncio.run(main())
helix.shutdown()
