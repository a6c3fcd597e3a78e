"""Helix agents over A2A 1.0, both ways, in one file (needs the `a2a` extra).

    .venv/bin/python examples/a2a_agents.py

starts a helix server (a process of its own) that serves every agent over A2A at
`/a2a/<agent>`: `researcher` looks a topic up with a tool; `lead` delegates to the
researcher through the researcher's A2A endpoint (`remote_sub_agent_tool(...,
protocol="a2a")`, as it would to any A2A agent). Then, as an A2A client (`a2a-sdk`'s own),
it reads the lead's agent card, sends it a message over `SendStreamingMessage`, prints
the events and the answer. The models are scripted (no API key needed).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid

import httpx
import uvicorn
from a2a.client import ClientConfig
from a2a.client.client_factory import ClientFactory
from a2a.helpers import get_text_parts, new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState

from helix_dbos import (
    Agent,
    HelixDBOS,
    LLMRequest,
    MockLLM,
    bearer_token,
    create_app,
    remote_sub_agent_tool,
    resolve_database_url,
    tool,
)

TOKEN = os.environ.get("HELIX_SERVER_TOKEN", "example-token")


@tool
def lookup(topic: str) -> str:
    """Facts about a topic."""
    return f"{topic} are nocturnal"


def model(request: LLMRequest) -> dict:
    topic = next(str(m.content) for m in request.messages if m.role == "user")
    results = [m for m in request.messages if m.role == "tool"]
    name = "lookup" if request.agent_name == "researcher" else "subagent__researcher"
    if not results:
        arguments = {"topic": topic} if name == "lookup" else {"message": "owls"}
        call = {"id": "c1", "name": name, "arguments": arguments}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": f"{request.agent_name}: {results[0].content}"}


def serve(port: int) -> None:
    url = f"http://127.0.0.1:{port}"
    researcher = Agent("researcher", system_prompt="Looks topics up.", tools=[lookup])
    delegate = remote_sub_agent_tool(
        f"{url}/a2a/researcher", "researcher", auth=TOKEN, protocol="a2a"
    )
    lead = Agent("lead", system_prompt="Answers with the researcher's help.", tools=[delegate])
    helix = HelixDBOS(
        [researcher, lead], database_url=resolve_database_url(None), llm=MockLLM(model)
    )
    uvicorn.run(create_app(helix, authenticate=bearer_token(TOKEN)), port=port, log_level="warning")


async def ask(url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        factory = ClientFactory(ClientConfig(streaming=True, httpx_client=http))
        client = await factory.create_from_url(f"{url}/a2a/lead")  # reads the agent card
        message = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=[new_text_part("What do you know about owls?")],
        )
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("task"):
                print("task", TaskState.Name(event.task.status.state))
            elif event.HasField("status_update"):
                print("status", TaskState.Name(event.status_update.status.state))
            elif event.HasField("artifact_update"):
                print("answer:", " ".join(get_text_parts(event.artifact_update.artifact.parts)))
        await client.close()


def main() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = subprocess.Popen([sys.executable, __file__, "serve", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # until the card answers
            assert server.poll() is None, "the server exited"
            try:
                card = httpx.get(
                    f"{url}/a2a/lead/.well-known/agent-card.json",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                if card.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        asyncio.run(ask(url))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        main()
