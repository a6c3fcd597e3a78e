"""A fleet in one file: web processes enqueue, workers execute, one PostgreSQL.

    .venv/bin/helix-dbos worker --app examples/fleet.py:helix  # start one or more workers
    .venv/bin/python examples/fleet.py "How do I reset my password?"  # enqueue, print the result
    .venv/bin/helix-dbos workers                     # who is alive, what runs where

The enqueuing process executes no runs (`executes_runs=False`): the run waits on the
agent's DBOS queue until a worker that serves `fleet_assistant` takes it. Kill a worker
mid-run and another one finishes the run a few seconds later. Runs on
the embedded PostgreSQL unless HELIX_DATABASE_URL names a server; the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from pydantic import BaseModel

from helix_dbos import Agent, HelixDBOS, LLMRequest, MockLLM, RunQueue, tool


class Answer(BaseModel):
    answer: str
    worker: str


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the help centre."""
    return f"Help centre article on {topic!r} (served by worker pid {os.getpid()})"


def respond(request: LLMRequest) -> dict:
    """The scripted model: look the question up, then answer with what came back."""
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        question = next(m.content for m in request.messages if m.role == "user")
        call = {"id": "look", "name": "lookup", "arguments": {"topic": question}}
        return {"type": "tool_calls", "tool_calls": [call]}
    finish = {
        "id": "done",
        "name": "__finish__",
        "arguments": {"answer": str(results[-1].content), "worker": str(os.getpid())},
    }
    return {"type": "tool_calls", "tool_calls": [finish]}


assistant = Agent("fleet_assistant", tools=[lookup], output_schema=Answer)
helix = HelixDBOS(
    [assistant],
    llm=MockLLM(respond),
    # at most 8 runs of the assistant at once in the whole fleet, 2 on each worker
    queues=[RunQueue("fleet", [assistant], concurrency=8, worker_concurrency=2)],
)


async def ask(question: str) -> dict:
    handle = await helix.execute(assistant, question)
    result = await handle.result()
    return {"run_id": handle.run_id, "status": result.status, "output": result.output}


if __name__ == "__main__":
    helix.executes_runs = False  # this process only enqueues
    helix.launch()
    try:
        print(json.dumps(asyncio.run(ask(" ".join(sys.argv[1:]) or "hello")), indent=2))
    finally:
        helix.shutdown()
