"""Terminating tool calls: an agent works on its own until it calls `complete_task`.

    .venv/bin/python examples/terminating.py

Seed 004's autonomous mode: the run may call any tools, a text-only reply gets a
nudge, and the first call to a terminating tool ends the run with that tool's
output as `result.response`. The model here is scripted: it searches, replies
with text once (and is nudged), searches again, then calls `complete_task` in
the same response as a call that is therefore never executed.
"""

from __future__ import annotations

import asyncio
import json
import shutil

from pydantic import BaseModel, Field

from helix_dbos import Agent, HelixDBOS, LLMRequest, MockLLM, TerminatingConfig, Tool, tool

# Output fits the terminal, or 100 columns when there is none (piped).
WIDTH = min(100, shutil.get_terminal_size((100, 24)).columns)


def fit(line: str) -> str:
    """One line of at most WIDTH characters, cut with "…"."""
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


PRICES = {"acme": "$49/month", "globex": "$59/month", "initech": "$39/month"}


@tool
def search(query: str) -> dict:
    """Search competitor pricing pages."""
    hits = {name: price for name, price in PRICES.items() if name in query.lower()}
    return {"query": query, "hits": hits or PRICES}


class CompleteTask(BaseModel):
    result: str = Field(description="The final result of the completed task")


def complete_task_func(result: str) -> str:
    return f"Task completed: {result}"


complete_task = Tool(
    "complete_task",
    complete_task_func,
    description="Return the final result of the task. Call it once, when you are done.",
    input_model=CompleteTask,
)

researcher = Agent(
    "pricing_researcher",
    system_prompt="You research competitor pricing and report the result.",
    tools=[search, complete_task],
)

AUTONOMOUS = TerminatingConfig(
    tool_ids=["complete_task"],
    consecutive_nudges=1,  # the default: one text reply is forgiven, two in a row fail
    max_invocations=20,  # default 64
)


def scripted_model(request: LLMRequest) -> dict:
    """Stands in for a real model: search, chat once (nudged), search again, complete."""
    replies = [m for m in request.messages if m.role == "assistant"]
    if len(replies) == 0:
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "call_1", "name": "search", "arguments": {"query": "pricing"}}],
        }
    if len(replies) == 1:
        return {"type": "text", "content": "Initech looks cheapest. Want me to dig deeper?"}
    if len(replies) == 2:
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "call_2", "name": "search", "arguments": {"query": "initech annual plan"}}
            ],
        }
    return {
        "type": "tool_calls",
        "tool_calls": [
            {
                "id": "call_3",
                "name": "complete_task",
                "arguments": {"result": "Initech is cheapest at $39/month; Acme $49, Globex $59."},
            },
            {"id": "call_4", "name": "search", "arguments": {"query": "never executed"}},
        ],
    }


async def main(helix: HelixDBOS) -> None:
    handle = await helix.execute(
        researcher, "Research competitor pricing and compile analysis", terminating=AUTONOMOUS
    )
    result = await handle.result()

    print(f"Run {result.run_id}: {result.status} after {result.step_count} LLM invocations")
    print(fit(f"response: {json.dumps(result.response)}") + "\n")
    print("generated_messages:")
    for message in result.generated_messages or []:
        print(fit(f"  {json.dumps(message)}"))
    if result.status != "completed":
        raise SystemExit(1)


if __name__ == "__main__":
    helix = HelixDBOS([researcher], llm=MockLLM(scripted_model))
    helix.launch()
    try:
        asyncio.run(main(helix))
    finally:
        helix.shutdown()
