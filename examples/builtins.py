"""Built-in tools: progress, run memory, a durable pause for a human, and __complete__.

    .venv/bin/python examples/builtins.py

A refund agent logs its progress (`__log_progress__`), keeps the candidates it
found in run memory (`__store_memory__` / `__retrieve_memory__`), pauses to ask a
human which customer is meant (`__pause_for_human__`), and finishes with
`__complete__`. This program answers the pause itself, as soon as it sees it, with
`helix.submit_human_input(...)`; any other process could (or `DBOS.send` on the
`helix.human_input` topic). Runs on the embedded PostgreSQL with a scripted model.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import psycopg

from helix_dbos import Agent, HelixDBOS, LLMRequest, MockLLM, libpq_url

# Output fits the terminal, or 100 columns when there is none (piped).
WIDTH = min(100, shutil.get_terminal_size((100, 24)).columns)


def fit(line: str) -> str:
    """One line of at most WIDTH characters, cut with "…"."""
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


CANDIDATES = [
    {"id": "C-001", "name": "John Smith", "tier": "premium", "since": 2019},
    {"id": "C-047", "name": "John Smith", "tier": "standard", "since": 2023},
]

refund_agent = Agent(
    "refund_agent",
    system_prompt="You process refunds. Ask a human when the customer is ambiguous.",
    tools=[
        "__log_progress__",
        "__store_memory__",
        "__retrieve_memory__",
        "__pause_for_human__",
        "__complete__",
    ],
)


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "name": name, "arguments": arguments}


def scripted_model(request: LLMRequest) -> dict:
    """Stands in for a real model: the next move depends on which tools have answered."""
    answered = {m.tool_name: m for m in request.messages if m.role == "tool"}
    if "__store_memory__" not in answered:
        return {
            "type": "tool_calls",
            "content": "Two customers match; I'll note them and log where I am.",
            "tool_calls": [
                call(
                    "call_log_1",
                    "__log_progress__",
                    {
                        "message": "Customer lookup done: 2 candidates.",
                        "milestone": "lookup_complete",
                        "data": {"candidates": len(CANDIDATES)},
                    },
                ),
                call(
                    "call_store",
                    "__store_memory__",
                    {"key": "candidates", "value": CANDIDATES, "ttl_seconds": 3600},
                ),
            ],
        }
    if "__pause_for_human__" not in answered:
        return {
            "type": "tool_calls",
            "tool_calls": [
                call(
                    "call_pause",
                    "__pause_for_human__",
                    {
                        "question": "Two customers match 'John Smith'. Which one gets refund #RF-789?",
                        "options": [f"{c['name']} ({c['id']}), {c['tier']}" for c in CANDIDATES],
                        "context_summary": "Refund #RF-789 for order #12345, $234.00.",
                        "urgency": "medium",
                    },
                )
            ],
        }
    if "__retrieve_memory__" not in answered:
        human = json.loads(answered["__pause_for_human__"].content or "{}")
        return {
            "type": "tool_calls",
            "content": f"The reviewer said: {human.get('human_input')}",
            "tool_calls": [
                call("call_recall", "__retrieve_memory__", {"key": "candidates"}),
                call(
                    "call_log_2",
                    "__log_progress__",
                    {"message": "Reviewer picked the customer.", "milestone": "customer_chosen"},
                ),
            ],
        }
    recalled = json.loads(answered["__retrieve_memory__"].content or "{}")
    chosen = recalled["value"][0]
    return {
        "type": "tool_calls",
        "tool_calls": [
            call(
                "call_done",
                "__complete__",
                {
                    "answer": f"Refund #RF-789 ($234.00) issued to {chosen['name']} ({chosen['id']}).",
                    "confidence": 0.95,
                    "summary": "Found 2 candidates, asked a reviewer, refunded the chosen one.",
                },
            )
        ],
    }


def progress_rows(helix: HelixDBOS, run_id: str) -> list[tuple]:
    with psycopg.connect(libpq_url(helix.database_url)) as conn:
        return conn.execute(
            "SELECT created_at, milestone, message, data FROM helix.progress "
            "WHERE run_id = %s ORDER BY created_at, tool_call_id",
            (run_id,),
        ).fetchall()


async def main(helix: HelixDBOS) -> None:
    handle = await helix.execute(refund_agent, "Refund order #12345 for John Smith ($234).")

    # Wait until the run pauses for the human (it holds no thread while paused).
    while (run := await helix.get_run(handle.run_id)).status != "paused":
        if run.status in ("completed", "failed"):
            raise SystemExit(f"run ended before pausing: {run.status} {run.error}")
        await asyncio.sleep(0.05)
    pending = (await helix.pending_tool_calls(handle.session_id))[0]
    question = pending.input
    print(f"Run {run.run_id} is {run.status}, waiting for {run.waiting_for}:")
    print(f"  question: {question['question']}")
    for i, option in enumerate(question["options"], start=1):
        print(f"  option {i}: {option}")
    print(f"  (SELECT * FROM helix.waiting_runs WHERE session_id = '{handle.session_id}')")

    answer = "Use John Smith C-001, the premium customer."
    print(f"\nAnswering as the reviewer: {json.dumps(answer)}")
    await helix.submit_human_input(handle.session_id, pending.tool_call_id, answer, approved=True)

    result = await handle.result()
    print(f"\nRun {result.run_id}: {result.status}")
    print(f"Output: {json.dumps(result.output, indent=2)}\n")

    print("Transcript (helix.messages):")
    for i, message in enumerate(await helix.get_messages(result.session_id), start=1):
        calls = ", ".join(f"{c.name}({json.dumps(c.arguments)})" for c in message.tool_calls)
        text = " ".join(part for part in (message.content, calls) if part)
        print(fit(f"  {i:>2} {message.role:<9} {text}"))

    print("\nProgress (SELECT created_at, milestone, message, data FROM helix.progress):")
    for created_at, milestone, message, data in await asyncio.to_thread(
        progress_rows, helix, result.run_id
    ):
        shown = json.dumps(data) if data is not None else ""
        print(fit(f"  {created_at:%H:%M:%S} {milestone or '-':<16} {message} {shown}"))
    if result.status != "completed":
        raise SystemExit(1)


if __name__ == "__main__":
    helix = HelixDBOS([refund_agent], llm=MockLLM(scripted_model))
    helix.launch()
    try:
        asyncio.run(main(helix))
    finally:
        helix.shutdown()
