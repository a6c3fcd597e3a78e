"""A real helix_dbos process for memory crash tests: started, SIGKILLed, relaunched.

usage: memory_app.py MODE DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

- `save`: saves 20 memories with a background executor whose embedder blocks (and
  marks `embedding` when it starts), prints {"saved": [...ids]}, and waits to be killed.
- `embed`: `process_unembedded()` with a counting embedder; prints the outcome and every
  text it embedded.
- `inject-start`: runs an agent with `recall_hooks` whose model call (MockLLM) records
  the system prompt and then SIGKILLs this process; `inject-recover`: relaunched, prints
  the run's end once it finished.
- `remember-start`: runs an agent that calls `__remember__`, then `__recall__`, then
  answers with what it recalled; prints {"run_id": ...} and waits to be killed (the
  test holds the save step's checkpoint); `remember-recover`: relaunched, prints the
  run's end.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from app_marks import marker
from crash_main import kill_once_printed_async, print_ids, wait_for_end

from helix_dbos import Agent, HelixDBOS, MockLLM
from helix_dbos.memory import BackgroundEmbeddingExecutor, HashingEmbedder, recall_hooks
from helix_dbos.orchestration.types import LLMRequest

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)
RESOURCE = "crash-user"


mark = marker(markers)


class BlockingEmbedder(HashingEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        mark("embedding", str(len(texts)))
        await asyncio.sleep(3600)
        raise AssertionError("killed before this")


class CountingEmbedder(HashingEmbedder):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        for text in texts:
            mark("embedded.log", text)
        return await super().embed(texts)


def remember_then_recall(request: LLMRequest) -> dict[str, Any]:
    """Save a fact, search for it in the same run, answer with what the search found."""
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        fact = {"text": "The user drinks oolong tea"}
        call = {"id": "r1", "name": "__remember__", "arguments": fact}
        return {"type": "tool_calls", "tool_calls": [call]}
    if len(results) == 1:
        call = {"id": "q1", "name": "__recall__", "arguments": {"query": "oolong tea"}}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": results[-1].content}


def respond(request: LLMRequest) -> dict[str, Any] | Coroutine[Any, Any, None]:
    if mode.startswith("remember"):
        return remember_then_recall(request)
    mark("prompts.log", json.dumps(request.system))
    if mode == "inject-start":
        # Mid-step (the recall is recorded, no reply), once the run id is out.
        return kill_once_printed_async()  # awaited by MockLLM
    return {"type": "text", "content": "done"}


agent = Agent("memory_crash_agent", system_prompt="You help.", hooks=recall_hooks(top_k=2))
rememberer = Agent(
    "memory_crash_rememberer", system_prompt="You remember.", tools=["__remember__", "__recall__"]
)
helix = HelixDBOS(
    [agent, rememberer],
    database_url=database_url,
    llm=MockLLM(respond),
    executor_id=executor_id,
    application_version="memory-crash-test",
    worker_lease_seconds=4,
)
if mode == "save":
    helix.use_memory(embedder=BlockingEmbedder(64), executor=BackgroundEmbeddingExecutor(2))
elif mode == "embed" or mode.startswith("remember"):
    helix.use_memory(embedder=CountingEmbedder(64))
else:
    helix.use_memory(embedder=HashingEmbedder(64))
helix.launch()


async def main() -> None:
    memory = helix.memory
    if mode == "save":
        ids = [
            (
                await memory.save(f"crash memory number {i} about tea", resource_id=RESOURCE)
            ).memory_id
            for i in range(20)
        ]
        print(json.dumps({"saved": ids}), flush=True)
        await asyncio.sleep(3600)
    elif mode == "embed":
        outcome = await memory.process_unembedded()
        print(json.dumps({"embedded": outcome.embedded, "pending": outcome.pending}), flush=True)
    elif mode == "remember-start":
        handle = await helix.execute(rememberer, "Remember my tea", resource_id=RESOURCE)
        print(json.dumps({"run_id": handle.run_id}), flush=True)
        await asyncio.sleep(3600)
    elif mode == "inject-start":
        await memory.save("The user drinks oolong tea", resource_id=RESOURCE)
        await memory.save("The user likes green tea too", resource_id=RESOURCE)
        handle = await helix.execute(agent, "Which tea does the user drink?", resource_id=RESOURCE)
        print_ids({"run_id": handle.run_id})
        await asyncio.sleep(3600)
    else:
        await wait_for_end(
            helix, sys.argv[5], show=lambda run: {"status": run.status, "output": run.output}
        )


asyncio.run(main())
helix.shutdown()
