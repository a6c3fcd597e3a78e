"""Serve a helix agent to AG-UI front ends (CopilotKit, @ag-ui/client's HttpAgent, ...).

    .venv/bin/python examples/ag_ui_server.py        # http://127.0.0.1:8000/ag-ui/assistant

Then point an AG-UI client at it (docs/protocols/ag-ui.md), for example in Node:

    import { HttpAgent } from "@ag-ui/client";
    const agent = new HttpAgent({ url: "http://127.0.0.1:8000/ag-ui/assistant" });
    agent.addMessage({ id: "m1", role: "user", content: "pay 20" });
    await agent.runAgent({ runId: "r1" });     // ends with an interrupt: approve the payment?
    const [ask] = agent.pendingInterrupts;
    await agent.runAgent({ runId: "r2", resume: [{ interruptId: ask.id, status: "resolved",
                                                  payload: { approved: true } }] });

"weather in Oslo" calls a server tool; "pay N" calls an approval-gated one; any tool the
front end sends in `tools` runs as a client tool of that run. The model is scripted unless
ANTHROPIC_API_KEY / OPENAI_API_KEY / HELIX_MODEL is set. Without a token the server only
answers local requests from no other origin; serve it with `helix-dbos serve --app
examples/ag_ui_server.py:helix --token ...` to put the bearer token in front.
"""

from __future__ import annotations

from helix_dbos import Agent, HelixDBOS, LLMConfig, LLMRequest, MockLLM, model_from_env, tool


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@tool(require_approval=True)
def pay(amount: int) -> str:
    """Send a payment (a human approves each one)."""
    return f"paid {amount}"


def scripted_model(request: LLMRequest) -> dict:
    """Calls the tool the message asks for, then says what it returned."""
    last = request.messages[-1]
    if last.role == "tool":
        return {"type": "text", "content": f"Done: {last.content}"}
    asked = str(last.content or "")
    if asked.startswith("weather in "):
        call = {"id": "c1", "name": "weather", "arguments": {"city": asked[11:]}}
    elif asked.startswith("pay ") and asked[4:].isdigit():
        call = {"id": "c1", "name": "pay", "arguments": {"amount": int(asked[4:])}}
    else:
        return {"type": "text", "content": f"You said: {asked}"}
    return {"type": "tool_calls", "tool_calls": [call]}


model = model_from_env()
assistant = Agent(
    "assistant",
    system_prompt="You help with the weather and with payments.",
    tools=[weather, pay],
    llm=LLMConfig(model=model or "mock"),
)
helix = HelixDBOS([assistant], llm=None if model else MockLLM(scripted_model))

if __name__ == "__main__":
    import uvicorn

    from helix_dbos import create_app

    uvicorn.run(create_app(helix, allow_unauthenticated=True), host="127.0.0.1", port=8000)
