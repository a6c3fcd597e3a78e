"""A process whose primary model is down and whose fallback answers, for crash tests.

usage: fallback_crash_app.py start|recover DATABASE_URL EXECUTOR_ID MARKER_DIR [RUN_ID]

The primary (`anthropic-down:`) answers every call with 529 overloaded; the fallback
(`openai-up:`) answers the first step with a tool call and the second with text, both
through the official SDKs over a recording transport. Every HTTP request is appended to
`primary.log` / `fallback.log` in MARKER_DIR. In `start`, the tool SIGKILLs the process:
the fallback has answered, its LLM step is checkpointed, the next step has not run.
`recover` relaunches under the same executor id and prints how the run ended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import httpx2
from app_marks import marker
from crash_main import crash_main, kill_once_printed

sys.path.insert(0, str(Path(__file__).parents[1] / "llm"))  # the wire formats
from wire import openai_sse, openai_stream_text_and_tool

from helix_dbos import Agent, HelixDBOS, LLMConfig, tool
from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.openai import OpenAIAdapter
from helix_dbos.llm.providers import register_provider

mode, database_url, executor_id, marker_dir = sys.argv[1:5]
markers = Path(marker_dir)


mark = marker(markers)


def overloaded(request: httpx2.Request) -> httpx2.Response:
    mark("primary.log")
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return httpx2.Response(529, json=body)


def fallback_answer(request: httpx.Request) -> httpx.Response:
    after_tool = any(m["role"] == "tool" for m in json.loads(request.content)["messages"])
    mark("fallback.log", "text" if after_tool else "tool")
    if after_tool:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
        delta = {"role": "assistant", "content": "Sunny for 3 days."}
        stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
        body = openai_sse(
            [{**chunk, "choices": [{"index": 0, "delta": delta}]}, {**chunk, "choices": [stop]}]
        )
    else:
        body = openai_stream_text_and_tool()
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


register_provider(
    "anthropic-down",
    lambda model, **_: AnthropicAdapter(
        model,
        api_key="k",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(overloaded)),
    ),
)
register_provider(
    "openai-up",
    lambda model, **_: OpenAIAdapter(
        model,
        api_key="k",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(fallback_answer)),
    ),
)


@tool
def get_weather(city: str, days: int = 1) -> str:
    """Weather forecast for a city."""
    mark("tool.log", city)
    if mode == "start":  # after the fallback's answer was checkpointed, before the next step
        kill_once_printed()
    return f"{city}: sunny for {days} days"


agent = Agent(
    "fallback_crash_agent",
    tools=[get_weather],
    llm=LLMConfig(
        model="anthropic-down:claude-sonnet-4-6",
        fallback=["openai-up:gpt-4o"],
        max_attempts=1,
    ),
)
helix = HelixDBOS(
    [agent],
    database_url=database_url,
    executor_id=executor_id,
    application_version="fallback-crash-test",
    worker_lease_seconds=4,
)
helix.launch()


crash_main(helix, agent, "Weather in Paris?", mode=mode, run_id_arg=5, seconds=60)
