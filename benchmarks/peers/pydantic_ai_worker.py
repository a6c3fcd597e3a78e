"""pydantic-ai with DBOS: an Agent scripted by FunctionModel, made durable the way
pydantic-ai documents it, with the tool a DBOS step.

Two configurations (one worker process each):

- `capability` (system `pydantic_ai`): `Agent(..., capabilities=[DBOSDurability()])`,
  `agent.run()` called inside our own `@DBOS.workflow`. This is what pydantic-ai's
  current docs prescribe (`DBOSAgent` is deprecated in its favour since 2.x).
- `wrapper` (system `pydantic_ai_dbosagent`): the wrapper `DBOSAgent(agent)`, whose
  `run()` is itself a DBOS workflow (the configuration the issue names).

Either way each model request is a DBOS step (pydantic-ai's), and the function tool
is decorated with `@DBOS.step()` so that a completed call is not re-run on recovery
(pydantic-ai does not make function tools steps by itself: its docs say to decorate
tools that do I/O). The output is `output_type=Answer` (pydantic-ai's output tool).
History: `message_history=` (a list of ModelRequest / ModelResponse).
"""

from __future__ import annotations

import sys
import time
import uuid
import warnings
from typing import Any

from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSAgent, DBOSDurability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from benchmarks.peers.common import (
    APP_VERSION,
    SCRIPT,
    Answer,
    final_answer,
    history_result_payload,
    history_turns,
    tool_body_async,
    worker_main,
)

VARIANT = "wrapper" if "--wrapper" in sys.argv else "capability"
NAME = "pydantic_ai_dbosagent" if VARIANT == "wrapper" else "pydantic_ai"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    SCRIPT.called()
    done = 0
    for part in (p for m in reversed(messages) for p in reversed(m.parts)):  # to the last user part
        if isinstance(part, UserPromptPart):
            break
        done += isinstance(part, ToolReturnPart) and part.tool_name == "ping"
    if SCRIPT.wants_tool(done):
        return ModelResponse(parts=[ToolCallPart("ping", {"i": done}, tool_call_id=f"c{done}")])
    output_tool = info.output_tools[0].name
    return ModelResponse(parts=[ToolCallPart(output_tool, final_answer(done), tool_call_id="fin")])


@DBOS.step(name="peers.pydantic_ai.ping")
async def ping(i: int) -> str:
    """Answers at once."""
    return await tool_body_async(i)


if VARIANT == "capability":
    agent: Agent[None, Answer] = Agent(
        FunctionModel(script),
        name="peer_agent",
        instructions="You ping.",
        output_type=Answer,
        capabilities=[DBOSDurability()],
    )
    agent.tool_plain(ping)

    @DBOS.workflow(name="peers.pydantic_ai.run")
    async def run_agent(prompt: str, history: list[ModelMessage] | None) -> dict[str, Any]:
        result = await agent.run(prompt, message_history=history)
        return result.output.model_dump()

else:
    base: Agent[None, Answer] = Agent(
        FunctionModel(script), name="peer_agent", instructions="You ping.", output_type=Answer
    )
    base.tool_plain(ping)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DBOSAgent is deprecated; measured on purpose
        dbos_agent = DBOSAgent(base)

    async def run_agent(prompt: str, history: list[ModelMessage] | None) -> dict[str, Any]:
        result = await dbos_agent.run(prompt, message_history=history)  # a workflow itself
        return result.output.model_dump()


def history_messages(count: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for kind, payload in history_turns(count):
        if kind == "user":
            out.append(ModelRequest(parts=[UserPromptPart(payload)]))
        elif kind == "call":
            out.append(ModelResponse(parts=[ToolCallPart("ping", {"i": 0}, tool_call_id=payload)]))
        elif kind == "result":
            part = ToolReturnPart("ping", history_result_payload(), tool_call_id=payload)
            out.append(ModelRequest(parts=[part]))
        else:
            out.append(ModelResponse(parts=[TextPart(payload)]))
    return out


class PydanticAI:
    name = NAME

    async def setup(self, database_url: str) -> None:
        DBOS(
            config={
                "name": f"peers-{NAME}".replace("_", "-"),
                "system_database_url": database_url,
                "application_version": APP_VERSION,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    async def prepare(self, history: int) -> Any:
        return history_messages(history) if history else None

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        return await run_agent("go", prepared)

    async def shutdown(self) -> None:
        DBOS.destroy()

    async def crash_start(self, database_url: str) -> str:
        await self.setup(database_url)
        workflow_id = f"peers-crash-{uuid.uuid4().hex[:8]}"
        with SetWorkflowID(workflow_id):
            await DBOS.start_workflow_async(_crash_workflow)
        return workflow_id

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        started = time.monotonic()
        await self.setup(database_url)  # DBOS.launch() recovers this executor's pending workflows
        handle = await DBOS.retrieve_workflow_async(run_id)
        output = await handle.get_result()
        note = f"recovered by DBOS.launch() in {time.monotonic() - started:.1f} s"
        return {"status": "completed", "output": output, "note": note}


@DBOS.workflow(name=f"peers.{NAME}.crash")
async def _crash_workflow() -> dict[str, Any]:
    return await run_agent("go", None)


if __name__ == "__main__":
    worker_main(PydanticAI, [a for a in sys.argv[1:] if a != "--wrapper"])
