"""examples/embedded_app.py: agents inside an app that owns DBOS (FastAPI, its lifespan),
answered from another process with DBOSClient.send."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import forkserver
import httpx
from helpers import sql

REPO = Path(__file__).resolve().parent.parent


def wait_for(
    fetch: Any, ready: Any, what: str, proc: subprocess.Popen[str], timeout: float = 60
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fetch()
            if ready(value):
                return value
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_an_existing_dbos_app_runs_an_agent_as_its_child_workflow(database_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        env.pop(key, None)
    env["HELIX_DATABASE_URL"] = database_url
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = forkserver.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            "examples",
            "embedded_app:app",
            "--port",
            str(port),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        started = wait_for(
            lambda: client.post("/refunds/42"), lambda r: r.status_code == 200, "the app", proc
        ).json()
        app_workflow = started["workflow_id"]
        [call] = wait_for(lambda: client.get("/approvals").json(), bool, "the approval", proc)
        assert call["tool_name"] == "refund" and call["input"] == {"order_id": "42", "amount": 19.9}

        answered = forkserver.run(
            [
                sys.executable,
                "examples/embedded_app.py",
                "approve",
                call["workflow_id"],
                call["tool_call_id"],
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert answered.returncode == 0, answered.stderr
        done = wait_for(
            lambda: client.get(f"/refunds/{app_workflow}").json(),
            lambda body: body["status"] == "done",
            "the app's workflow",
            proc,
        )
        assert done["result"]["status"] == "completed"
        assert done["result"]["output"] == "Done: refunded 19.90 for order 42"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr

    # The agent run is a child of the app's workflow, under the app's name and version.
    [(parent, version, name)] = sql(
        database_url,
        "SELECT parent_workflow_id, application_version, name FROM dbos.workflow_status "
        "WHERE workflow_uuid = %s",
        call["workflow_id"],
    )
    assert parent == app_workflow and version == "orders-1" and name == "helix.agent_run"
    assert sql(
        database_url,
        "SELECT application_version FROM dbos.workflow_status WHERE workflow_uuid = %s",
        app_workflow,
    ) == [("orders-1",)]
    assert sql(
        database_url,
        "SELECT application_name, state FROM helix.workers WHERE application_version = 'orders-1'",
    ) == [("orders", "stopped")], "helix leased the app's executor id and released it on shutdown"
