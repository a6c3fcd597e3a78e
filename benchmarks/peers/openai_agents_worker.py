"""OpenAI Agents SDK with dbos-openai-agents: `DBOSRunner.run()` inside a
`@DBOS.workflow()`, the tool `@function_tool` over `@DBOS.step()`, exactly as the
package's README prescribes. DBOSRunner makes each model call a DBOS step.

The model is a custom `agents.models.interface.Model` returning the scripted
responses (a function call, or the final message whose text is the JSON of
`output_type=Answer`). Tracing is disabled (no exporter here; the others trace nothing
either). History: the run's `input` as a list of input items (user / function_call /
function_call_output / assistant messages), the SDK's `to_input_list()` form.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.usage import Usage
from dbos import DBOS, SetWorkflowID
from dbos_openai_agents import DBOSRunner
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

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

set_tracing_disabled(True)
MAX_TURNS = 10_000  # the SDK's default is 10 turns


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedModel(Model):
    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        SCRIPT.called()
        items = kwargs.get("input", args[1] if len(args) > 1 else "")
        done = 0
        for item in reversed([] if isinstance(items, str) else items):  # to the last user one
            if _field(item, "role") == "user":
                break
            done += _field(item, "type") == "function_call_output"
        output: list[Any]
        if SCRIPT.wants_tool(done):
            call = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc{done}",
                call_id=f"c{done}",
                name="ping",
                arguments=json.dumps({"i": done}),
                status="completed",
            )
            output = [call]
        else:
            text = ResponseOutputText(
                type="output_text", text=json.dumps(final_answer(done)), annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    id="msg_fin",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError


@function_tool
@DBOS.step(name="peers.openai_agents.ping")
async def ping(i: int) -> str:
    """Answers at once."""
    return await tool_body_async(i)


agent = Agent(
    name="peer_agent",
    instructions="You ping.",
    model=ScriptedModel(),
    tools=[ping],
    output_type=Answer,
)


@DBOS.workflow(name="peers.openai_agents.run")
async def run_agent(input: str | list[TResponseInputItem]) -> dict[str, Any]:
    result = await DBOSRunner.run(
        agent, input, max_turns=MAX_TURNS, run_config=RunConfig(tracing_disabled=True)
    )
    output: Answer = result.final_output
    return output.model_dump()


def history_items(count: int) -> list[TResponseInputItem]:
    out: list[Any] = []
    for kind, payload in history_turns(count):
        if kind == "user":
            out.append({"role": "user", "content": payload})
        elif kind == "call":
            out.append(
                {
                    "type": "function_call",
                    "call_id": payload,
                    "name": "ping",
                    "arguments": json.dumps({"i": 0}),
                }
            )
        elif kind == "result":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": payload,
                    "output": history_result_payload(),
                }
            )
        else:
            out.append({"role": "assistant", "content": payload})
    return out


class OpenAIAgents:
    name = "openai_agents"

    async def setup(self, database_url: str) -> None:
        DBOS(
            config={
                "name": "peers-openai-agents",
                "system_database_url": database_url,
                "application_version": APP_VERSION,
                "log_level": "WARNING",
            }
        )
        DBOS.launch()

    async def prepare(self, history: int) -> Any:
        if history == 0:
            return "go"
        return [*history_items(history), {"role": "user", "content": "go"}]

    async def run(self, steps: int, prepared: Any) -> dict[str, Any]:
        return await run_agent(prepared)

    async def shutdown(self) -> None:
        DBOS.destroy()

    async def crash_start(self, database_url: str) -> str:
        await self.setup(database_url)
        workflow_id = f"peers-crash-{uuid.uuid4().hex[:8]}"
        with SetWorkflowID(workflow_id):
            await DBOS.start_workflow_async(run_agent, "go")
        return workflow_id

    async def crash_recover(self, database_url: str, run_id: str) -> dict[str, Any]:
        started = time.monotonic()
        await self.setup(database_url)  # DBOS.launch() recovers this executor's pending workflows
        handle = await DBOS.retrieve_workflow_async(run_id)
        output = await handle.get_result()
        note = f"recovered by DBOS.launch() in {time.monotonic() - started:.1f} s"
        return {"status": "completed", "output": output, "note": note}


if __name__ == "__main__":
    worker_main(OpenAIAgents)
