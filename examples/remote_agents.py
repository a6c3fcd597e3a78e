"""A parent agent delegating to an agent on another helix server, in one file.

    .venv/bin/python examples/remote_agents.py

starts two helix servers (two processes, each with its own DBOS executor and its own
database): "research" serves the agent `researcher`; "front" serves `lead`, whose tool
`subagent__researcher` runs `researcher` on the research server (`remote_sub_agent_tool`).
Then, as a client of the front server (`HelixClient`), it asks `lead` a question, prints
the researcher's chunks as they come through the lead's stream, and the answer. Kill
either server mid-run and start it again: the run goes on where it was. The models are
scripted (no API key needed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import uvicorn

from helix_dbos import (
    Agent,
    HelixClient,
    HelixDBOS,
    LLMRequest,
    MockLLM,
    bearer_token,
    create_app,
    remote_sub_agent_tool,
    resolve_database_url,
    tool,
    with_database,
)

TOKEN = os.environ.get("HELIX_SERVER_TOKEN", "example-token")


@tool
def lookup(topic: str) -> str:
    """Facts about a topic."""
    return f"{topic} are nocturnal"


def researcher_model(request: LLMRequest) -> dict:
    topic = next(str(m.content) for m in request.messages if m.role == "user")
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        call = {"id": "l1", "name": "lookup", "arguments": {"topic": topic}}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": f"Found: {results[0].content}."}


def lead_model(request: LLMRequest) -> dict:
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        call = {"id": "d1", "name": "subagent__researcher", "arguments": {"message": "owls"}}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": f"The researcher says: {results[0].content}"}


def serve(role: str, database_url: str, port: int, research_url: str) -> None:
    """One server: `research` (the remote agent) or `front` (the parent)."""
    if role == "research":
        agents, model = [Agent("researcher", tools=[lookup])], researcher_model
    else:
        remote = remote_sub_agent_tool(research_url, "researcher", auth=TOKEN)
        agents, model = [Agent("lead", tools=[remote])], lead_model
    helix = HelixDBOS(agents, database_url=database_url, llm=MockLLM(model), executor_id=role)
    app = create_app(helix, authenticate=bearer_token(TOKEN))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(url: str, server: subprocess.Popen[bytes]) -> None:
    with HelixClient(url, token=TOKEN, max_retries=0, timeout=2) as client:
        for _ in range(600):
            if server.poll() is not None:
                raise SystemExit(f"the server for {url} exited")
            try:
                client.workspaces()
                return
            except Exception:
                time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def main() -> None:
    front_db = resolve_database_url(None)  # HELIX_DATABASE_URL, or the embedded PostgreSQL
    research_db = os.environ.get("RESEARCH_DATABASE_URL") or with_database(
        front_db, "helix_research"
    )
    ports = {"research": free_port(), "front": free_port()}
    research_url = f"http://127.0.0.1:{ports['research']}"
    front_url = f"http://127.0.0.1:{ports['front']}"
    servers = []
    try:
        for role, db in (("research", research_db), ("front", front_db)):
            args = [sys.executable, __file__, "serve", role, db, str(ports[role]), research_url]
            servers.append(subprocess.Popen(args))
            wait_until_up(f"http://127.0.0.1:{ports[role]}", servers[-1])
        with HelixClient(front_url, token=TOKEN) as client:
            run = client.start("lead", "What do you know about owls?")
            for chunk in client.stream(run.session_id, run_id=run.run_id):
                where = "research" if chunk.session_id != run.session_id else "front"
                print(f"[{where}] {chunk.agent_name}: {chunk.type}")
            final = client.wait(run.session_id, run.run_id)
            print(final.status, final.output)
            usage = client.get_usage(run.session_id).totals
            print("sub-agent calls:", usage.subagent_calls)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
