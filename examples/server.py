"""Serve agents over HTTP, with the approvals inbox, in one file.

    .venv/bin/python examples/server.py      # http://127.0.0.1:8000/inbox, no auth (local only)
    HELIX_SERVER_TOKEN=s3cret .venv/bin/helix-dbos serve --app examples/server.py:helix  # with a token

Then, from another terminal, start a run that needs a human:

    curl -s localhost:8000/start -H 'content-type: application/json' \\
         -d '{"agent": "janitor", "input": "clean up /tmp/helix-demo.txt"}'

open http://127.0.0.1:8000/inbox and approve it (or `helix-dbos approve SESSION CALL`),
and follow it live: `curl -N 'localhost:8000/sse?session_id=SESSION'`. The model is
scripted unless ANTHROPIC_API_KEY / OPENAI_API_KEY / HELIX_MODEL is set.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from helix_dbos import Agent, HelixDBOS, LLMConfig, LLMRequest, MockLLM, model_from_env, tool


@tool(require_approval=True)
def delete_file(path: str) -> str:
    """Delete a file from disk (a human must approve)."""
    Path(path).unlink(missing_ok=True)
    return f"deleted {path}"


@tool(execute="client")
def get_location() -> dict:
    """The user's location, supplied by the client."""


def scripted_model(request: LLMRequest) -> dict:
    """Asks to delete the file named in the request, then reports what happened."""
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        asked = next((m.content or "" for m in request.messages if m.role == "user"), "")
        path = asked.split()[-1] if asked.split() else str(Path(tempfile.gettempdir()) / "x")
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "call_delete", "name": "delete_file", "arguments": {"path": path}}
            ],
        }
    outcome = "was refused: " + (results[-1].content or "") if results[-1].is_error else "is done"
    return {"type": "text", "content": f"The clean-up {outcome}."}


model = model_from_env()
janitor = Agent(
    "janitor",
    system_prompt="You clean up files when asked. Ask before deleting anything.",
    tools=[delete_file, get_location],
    llm=LLMConfig(model=model or "mock"),
)
helix = HelixDBOS([janitor], llm=None if model else MockLLM(scripted_model))


if __name__ == "__main__":
    import uvicorn

    from helix_dbos import create_app

    app = create_app(helix, allow_unauthenticated=True, default_agent="janitor")
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
