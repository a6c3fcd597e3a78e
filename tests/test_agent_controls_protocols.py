"""Issue 50's agent controls as each protocol's user sees them: a usage limit, an input,
an output and a tool guardrail, a fallback model and a handoff, over AG-UI, A2A, the Vercel AI
SDK UI stream and MCP, each posted to one real uvicorn serving create_app(helix).

Each protocol is driven as its clients drive it and read into a `Seen` (the answer's
text, the tool calls it showed, the failure and its stop reason where the protocol has
a place for one); the run's SQL row says the same. Plain HTTP (`/start`, `/status`,
`/runs`) for a guardrail is here too; for a usage limit it is in test_usage_limits.py."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest
from a2a.helpers import get_data_parts, get_text_parts
from a2a.types import GetTaskRequest, SendMessageRequest, TaskState
from helpers import calls, sql
from live_server import serve
from test_a2a import a2a, user_message
from test_ai_sdk import node_client, run_node  # noqa: F401 - the fixture
from test_mcp_server import session as mcp_session

from helix_dbos import GuardrailResult, LLMConfig, UsageLimits, tool
from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.openai import OpenAIAdapter
from helix_dbos.llm.providers import register_provider, unregister_provider
from helix_dbos.server import create_app

PROTOCOLS = ("ag-ui", "ai-sdk", "a2a", "mcp")


@dataclass
class Seen:
    """What one protocol showed of one run."""

    session_id: str
    text: str = ""
    tools: list[tuple[str, Any]] = field(default_factory=list)  # (tool name, its result)
    error: str | None = None
    stop_reason: str | None = None

    def run_row(self, database_url: str) -> tuple:
        [row] = sql(
            database_url,
            "SELECT status, stop_reason, error FROM helix.runs WHERE session_id = %s",
            self.session_id,
        )
        return row


@pytest.fixture(scope="module")
def base_url(helix) -> Iterator[str]:
    with serve(create_app(helix, allow_unauthenticated=True, mcp_agents=True)) as url:
        yield url


def sse_data(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in body.splitlines()
        if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


# --- the four protocols, as their clients drive them ---------------------------------------


async def over_ag_ui(url: str, agent: str, text: str) -> Seen:
    thread = f"ses_{uuid.uuid4().hex}"
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "u1", "role": "user", "content": text}],
    }
    async with httpx.AsyncClient(timeout=60) as http:
        got = await http.post(f"{url}/ag-ui/{agent}", json=body)
    assert got.status_code == 200, got.text
    events = sse_data(got.text)
    names = {e["toolCallId"]: e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"}
    seen = Seen(thread)
    seen.text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    seen.tools = [
        (names[e["toolCallId"]], e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"
    ]
    last = events[-1]
    assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), [e["type"] for e in events]
    if last["type"] == "RUN_ERROR":
        seen.error, seen.stop_reason = last["message"], last.get("code")
    return seen


async def over_ai_sdk(url: str, agent: str, text: str) -> Seen:
    chat = f"chat-{uuid.uuid4().hex}"
    body = {
        "id": chat,
        "agent": agent,
        "trigger": "submit-message",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}],
    }
    async with httpx.AsyncClient(timeout=60) as http:
        got = await http.post(f"{url}/ai-sdk/chat", json=body)
    assert got.status_code == 200, got.text
    chunks = sse_data(got.text)
    names = {c["toolCallId"]: c["toolName"] for c in chunks if c["type"] == "tool-input-start"}
    seen = Seen(chat)
    seen.text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    seen.tools = [
        (names[c["toolCallId"]], c["output"] if "output" in c else {"error": c["errorText"]})
        for c in chunks
        if c["type"] in ("tool-output-available", "tool-output-error")
    ]
    finish = chunks[-1]
    assert finish["type"] == "finish", chunks
    errors = [c["errorText"] for c in chunks if c["type"] == "error"]
    if finish["finishReason"] == "error":
        [seen.error] = errors
        metadata = [c["messageMetadata"] for c in chunks if c["type"] == "message-metadata"]
        seen.stop_reason = metadata[-1]["helix"]["stop_reason"] if metadata else None
    else:
        assert finish["finishReason"] == "stop" and errors == [], chunks
    return seen


async def over_a2a(url: str, agent: str, text: str) -> Seen:
    request = SendMessageRequest(message=user_message(text))
    async with a2a(f"{url}/a2a/{agent}", streaming=True) as client:
        events = [e async for e in client.send_message(request)]
        task_id = next(e.task.id for e in events if e.HasField("task"))
        stored = await client.get_task(GetTaskRequest(id=task_id))
    seen = Seen(stored.context_id)
    final = None
    for event in events:
        if event.HasField("task"):
            final = event.task.status
        elif event.HasField("status_update"):
            final = status = event.status_update.status
            for data in get_data_parts(status.message.parts):
                if data.get("type") == "tool_end":
                    seen.tools.append((data["tool_name"], data.get("result", data.get("error"))))
        elif event.HasField("artifact_update"):  # deltas, then the whole answer at the end
            update = event.artifact_update
            said = "".join(get_text_parts(update.artifact.parts))
            seen.text = seen.text + said if update.append else said
    assert final is not None and final.state == stored.status.state, events
    assert list(final.message.parts) == list(stored.status.message.parts), "as streamed"
    if final.state == TaskState.TASK_STATE_FAILED:
        seen.error = "\n".join(get_text_parts(final.message.parts))
        reasons = [d.get("stop_reason") for d in get_data_parts(final.message.parts)]
        seen.stop_reason = reasons[0] if reasons else None
    else:
        assert final.state == TaskState.TASK_STATE_COMPLETED, final
    return seen


async def over_mcp(url: str, agent: str, text: str) -> Seen:
    async with mcp_session(f"{url}/mcp", tasks=False) as mcp:
        result = await mcp.call_tool(agent, {"input": text})
    structured = result.structured_content or {}
    [content] = result.content
    seen = Seen(str(structured["session_id"]))
    if result.is_error:
        seen.error, seen.stop_reason = content.text, structured.get("stop_reason")  # type: ignore[union-attr]
    else:
        seen.text = content.text  # type: ignore[union-attr]
    return seen


DRIVERS: dict[str, Callable[[str, str, str], Awaitable[Seen]]] = {
    "ag-ui": over_ag_ui,
    "ai-sdk": over_ai_sdk,
    "a2a": over_a2a,
    "mcp": over_mcp,
}


# --- 1. a usage limit ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_usage_limit_is_a_failure_naming_the_limit(
    protocol, base_url, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool
    def ping() -> str:
        """Ping."""
        ran.append("ping")
        return "pong"

    agent = make_agent(tools=[ping], usage_limits=UsageLimits(requests=1))
    mock_llm.add_responses(
        calls(("p1", "ping", {})), {"type": "text", "content": "never asked"}, agent=agent.name
    )
    seen = await DRIVERS[protocol](base_url, agent.name, "ping")
    message = "Usage limit exceeded: requests limit 1, used 1"
    assert seen.error == message and seen.stop_reason == "usage_limit"
    assert "never asked" not in seen.text and ran == ["ping"]
    assert seen.run_row(database_url) == ("failed", "usage_limit", message)


async def test_the_ai_sdk_client_reports_the_limit_and_its_stop_reason(
    helix,
    node_client,  # noqa: F811 - the fixture imported above
    make_agent,
):
    """The official client (`AbstractChat`, as useChat runs it): `onError` gets the
    message, `onData` the helix event with the stop reason, and the assistant message
    has it in its metadata (the client reads no further than the `error` chunk)."""
    agent = make_agent(usage_limits=UsageLimits(requests=0))
    chat = f"chat-{uuid.uuid4().hex}"
    # useChat's body names no agent: the server's default agent answers.
    app = create_app(helix, allow_unauthenticated=True, default_agent=agent.name)
    with serve(app) as url:
        final = await asyncio.to_thread(run_node, node_client, "send", url, "-", chat, "hi")
    events = final["_events"]
    message = "Usage limit exceeded: requests limit 0, used 0"
    assert [e["message"] for e in events if e["event"] == "error"] == [message], events
    [helix_error] = [e["data"] for e in events if e.get("data", {}).get("type") == "error"]
    assert helix_error["payload"] == {"error": message, "stop_reason": "usage_limit"}
    assert [e["isError"] for e in events if e["event"] == "finish"] == [True]
    [answer] = [m for m in final["messages"] if m["role"] == "assistant"]
    assert answer["metadata"] == {"helix": {"stop_reason": "usage_limit"}}


# --- 2. guardrails -------------------------------------------------------------------------


def no_refunds(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire="refund" in text, reason="refunds go to a human")


def no_shouting(output: object) -> GuardrailResult:
    return GuardrailResult(tripwire=str(output).isupper(), reason="shouting")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_input_guardrail_is_a_failure_naming_it_and_no_tool_runs(
    protocol, base_url, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool
    def refund() -> str:
        """Refund the order."""
        ran.append("refund")
        return "refunded"

    agent = make_agent(tools=[refund], input_guardrails=[no_refunds])
    mock_llm.add_responses(calls(("r1", "refund", {})), agent=agent.name)
    seen = await DRIVERS[protocol](base_url, agent.name, "refund my order")
    message = "Guardrail 'no_refunds' (input) tripped: refunds go to a human"
    assert seen.error == message and seen.stop_reason == "guardrail"
    assert ran == [] and seen.tools == []
    assert not any(r.agent_name == agent.name for r in mock_llm.inputs), "the model was not asked"
    assert seen.run_row(database_url) == ("failed", "guardrail", message)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_output_guardrail_is_a_failure_naming_it(
    protocol, base_url, make_agent, mock_llm, database_url
):
    agent = make_agent(output_guardrails=[no_shouting])
    mock_llm.add_responses({"type": "text", "content": "HELLO"}, agent=agent.name)
    seen = await DRIVERS[protocol](base_url, agent.name, "say hello")
    message = "Guardrail 'no_shouting' (output) tripped: shouting"
    assert seen.error == message and seen.stop_reason == "guardrail"
    assert seen.run_row(database_url) == ("failed", "guardrail", message)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_tool_guardrail_fails_the_call_and_the_run(
    protocol, base_url, make_agent, mock_llm, database_url
):
    ran: list[int] = []

    def small_amounts(arguments: dict) -> GuardrailResult:
        return GuardrailResult(tripwire=arguments["amount"] > 100, reason="over 100")

    @tool(guardrails=[small_amounts])
    def pay(amount: int) -> str:
        """Pay an invoice."""
        ran.append(amount)
        return "paid"

    agent = make_agent(tools=[pay])
    mock_llm.add_responses(calls(("p1", "pay", {"amount": 500})), agent=agent.name)
    seen = await DRIVERS[protocol](base_url, agent.name, "pay it")
    message = "Guardrail 'pay.small_amounts' (tool) tripped: over 100"
    assert seen.error == message and seen.stop_reason == "guardrail" and ran == []
    if protocol != "mcp":  # the call, answered with the guardrail's error
        [(name, result)] = seen.tools
        assert name == "pay" and message in json.dumps(result)
    assert seen.run_row(database_url) == ("failed", "guardrail", message)


async def test_a_guardrail_over_plain_http(base_url, make_agent, mock_llm, database_url):
    agent = make_agent(input_guardrails=[no_refunds])
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        started = await http.post("/start", json={"agent": agent.name, "input": "refund it"})
        assert started.status_code == 200, started.text
        sid, rid = started.json()["session_id"], started.json()["run_id"]
        stream = await http.get("/sse", params={"session_id": sid, "run_id": rid})  # to its end
        status = await http.get("/status", params={"session_id": sid})
        runs = await http.get("/runs", params={"session_id": sid})
    message = "Guardrail 'no_refunds' (input) tripped: refunds go to a human"
    [failed] = [c for c in sse_data(stream.text) if c.get("type") == "run_failed"]
    assert failed["payload"] == {"error": message, "stop_reason": "guardrail"}
    last = status.json()["last_run"]
    assert (last["status"], last["stop_reason"], last["error"]) == ("failed", "guardrail", message)
    [row] = runs.json()
    assert (row["stop_reason"], row["error"]) == ("guardrail", message)


# --- 3. a fallback model -------------------------------------------------------------------


def openai_text(text: str) -> bytes:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    frames = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return ("".join(f"data: {json.dumps(f)}\n\n" for f in frames) + "data: [DONE]\n\n").encode()


@pytest.fixture(scope="module")
def providers() -> Iterator[dict[str, list[str]]]:
    """`controls-down:` answers every call with 529 overloaded (through the Anthropic
    SDK, as tests/llm/test_prompt_cache_and_fallback.py does); `controls-up:` answers
    through the OpenAI SDK. Each records the requests it got."""
    asked: dict[str, list[str]] = {"down": [], "up": []}

    def overloaded(request: httpx2.Request) -> httpx2.Response:
        asked["down"].append(request.url.path)
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}
        return httpx2.Response(529, json=body)

    def answer(request: httpx.Request) -> httpx.Response:
        asked["up"].append(request.url.path)
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, content=openai_text("From the fallback."), headers=headers)

    down = httpx2.AsyncClient(transport=httpx2.MockTransport(overloaded))
    up = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    register_provider(
        "controls-down", lambda m, **_: AnthropicAdapter(m, api_key="k", http_client=down)
    )
    register_provider("controls-up", lambda m, **_: OpenAIAdapter(m, api_key="k", http_client=up))
    yield asked
    unregister_provider("controls-down")
    unregister_provider("controls-up")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_fallback_model_answers_and_the_stream_completes(
    protocol, base_url, make_agent, providers, database_url
):
    llm = LLMConfig(
        model="controls-down:claude-sonnet-4-6",
        fallback=["controls-up:gpt-4o"],
        max_attempts=1,
    )
    agent = make_agent(llm=llm)
    before = {k: len(v) for k, v in providers.items()}
    seen = await DRIVERS[protocol](base_url, agent.name, "hi")
    assert seen.error is None and seen.text == "From the fallback."
    assert (len(providers["down"]), len(providers["up"])) == (before["down"] + 1, before["up"] + 1)
    assert seen.run_row(database_url) == ("completed", None, None)
    [(model,)] = sql(
        database_url,
        "SELECT model FROM helix.usage u JOIN helix.runs r USING (run_id) "
        "WHERE r.session_id = %s AND u.kind = 'llm'",
        seen.session_id,
    )
    assert "gpt-4o" in model


# --- 4. a handoff --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_handoff_answers_in_the_same_stream_and_shows_the_transfer(
    protocol, base_url, make_agent, mock_llm, database_url
):
    billing = make_agent()
    triage = make_agent(handoffs=[billing])
    name = f"transfer_to_{billing.name}"
    mock_llm.add_responses(calls(("h1", name, {})), agent=triage.name)
    mock_llm.add_responses({"type": "text", "content": "You owe 10 EUR."}, agent=billing.name)
    seen = await DRIVERS[protocol](base_url, triage.name, "What do I owe?")
    assert seen.error is None and seen.text == "You owe 10 EUR."
    if protocol != "mcp":  # a tools/call result has no place for the calls made on the way
        assert seen.tools == [(name, f"Transferred to {billing.name}")]
    assert seen.run_row(database_url) == ("completed", None, None)
    [(to_agent,)] = sql(
        database_url, "SELECT to_agent FROM helix.handoffs WHERE session_id = %s", seen.session_id
    )
    assert to_agent == billing.name
