"""Human approval: an agent that wants to delete a file waits until someone says yes.

Terminal 1 (starts the agent; it waits, holding no thread, as long as needed):
    .venv/bin/python examples/approval.py

Terminal 2 (answers from another process):
    .venv/bin/python examples/approval.py approve SESSION_ID
    .venv/bin/python examples/approval.py deny SESSION_ID "keep it"

Kill terminal 1 while it waits and start it again with `.venv/bin/python
examples/approval.py recover`: the run picks up where it was and still waits for the answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, LLMRequest, MockLLM, tool

TARGET = Path(tempfile.gettempdir()) / "helix-approval-demo.txt"


@tool(require_approval=True)
def delete_file(path: str) -> str:
    """Delete a file from disk (a human must approve)."""
    Path(path).unlink(missing_ok=True)
    return f"deleted {path}"


janitor = Agent("janitor", system_prompt="You clean up files when asked.", tools=[delete_file])


def scripted_model(request: LLMRequest) -> dict:
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "call_delete", "name": "delete_file", "arguments": {"path": str(TARGET)}}
            ],
        }
    verdict = "was denied: " + (results[-1].content or "") if results[-1].is_error else "is done"
    return {"type": "text", "content": f"The deletion {verdict}."}


async def start(helix: HelixDBOS) -> None:
    TARGET.write_text("old data\n")
    handle = await helix.execute(janitor, f"Please delete {TARGET}")
    while (run := await helix.get_run(handle.run_id)).status != "waiting":
        await asyncio.sleep(0.1)
    pending = await helix.pending_tool_calls(handle.session_id)
    name, arguments = pending[0].tool_name, json.dumps(pending[0].input)
    print(f"Run {run.run_id} is waiting for approval of {name}:")
    print(f"    {name}({arguments})")
    print("Answer it from another terminal:")
    print(f"    .venv/bin/python examples/approval.py approve {handle.session_id}")
    print(f'    .venv/bin/python examples/approval.py deny {handle.session_id} "a reason"')
    await report(helix, handle.session_id, handle.run_id)


async def report(helix: HelixDBOS, session_id: str, run_id: str) -> None:
    result = await (await helix.get_handle(run_id)).result()
    print(f"\nRun {result.status}: {result.output or result.error}")
    print(f"File still there: {TARGET.exists()}")


async def recover(helix: HelixDBOS) -> None:
    runs = [r for r in await waiting_runs(helix)]
    if not runs:
        print("No janitor run is waiting.")
        return
    print(f"Recovered run {runs[0]} ; still waiting for its answer.")
    run = await helix.get_run(runs[0])
    await report(helix, run.session_id, run.run_id)


async def waiting_runs(helix: HelixDBOS) -> list[str]:
    rows = await helix.sql(
        "SELECT run_id FROM helix.waiting_runs WHERE agent_name = :agent", {"agent": janitor.name}
    )
    return [row.run_id for row in rows]


async def answer(helix: HelixDBOS, session_id: str, approved: bool, reason: str | None) -> None:
    pending = await helix.pending_tool_calls(session_id)
    if not pending:
        print(f"Session {session_id} has nothing waiting for approval.")
        return
    await helix.approve(session_id, pending[0].tool_call_id, approved, reason=reason)
    print(f"{'Approved' if approved else 'Denied'} {pending[0].tool_name} in session {session_id}.")


def main(argv: list[str]) -> None:
    command = argv[0] if argv else "start"
    # The answering process has its own executor id, so it never runs the agent itself.
    executor = "approval-cli" if command in ("approve", "deny") else None
    helix = HelixDBOS([janitor], llm=MockLLM(scripted_model), executor_id=executor)
    helix.launch()
    try:
        if command == "start":
            asyncio.run(start(helix))
        elif command == "recover":
            asyncio.run(recover(helix))
        elif command in ("approve", "deny") and len(argv) >= 2:
            reason = argv[2] if len(argv) > 2 else None
            asyncio.run(answer(helix, argv[1], command == "approve", reason))
        else:
            print(__doc__)
    finally:
        helix.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
