"""`helix-dbos` in subprocesses against the test database, next to the in-process runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import forkserver
import httpx
import pytest
from helpers import calls, sql, wait_until_waiting

from helix_dbos import tool
from tests.docs_text import TEXT

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "helix_dbos.cli"]


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    return {**env, "HELIX_DATABASE_URL": database_url, **extra}


async def helix_dbos(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI without blocking the event loop the in-process runs live on."""
    return await asyncio.to_thread(
        forkserver.run,
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(database_url),
        cwd=REPO,
    )


def gated(log: list[str]):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        log.append(path)
        return f"deleted {path}"

    return delete_file


@pytest.fixture
async def finished_run(helix, make_agent, mock_llm):
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = make_agent(tools=[add])
    mock_llm.add_responses(
        calls(("a1", "add", {"a": 2, "b": 3})),
        {"type": "text", "content": "2 + 3 = 5"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "what is 2 + 3?")
    result = await handle.result()
    assert result.status == "completed"
    return result, agent.name


async def test_runs_transcript_and_usage_as_json_and_tables(database_url, finished_run):
    result, agent_name = finished_run

    runs = await helix_dbos(database_url, "runs", "--session", result.session_id, "--json")
    assert runs.returncode == 0, runs.stderr
    [row] = json.loads(runs.stdout)
    assert row["run_id"] == result.run_id and row["status"] == "completed"
    assert row["step_count"] == 2 and row["agent_name"] == agent_name and row["tool_calls"] == []

    table = await helix_dbos(database_url, "runs", "--session", result.session_id)
    header, line = table.stdout.splitlines()
    assert header.split()[:6] == ["RUN", "SESSION", "AGENT", "TURN", "STATUS", "STEPS"]
    # Ids show as short unique prefixes (run_ and 8 hex digits), which commands take back.
    assert line.split()[:2] == [result.run_id[:12], result.session_id[:12]]
    assert " completed " in line
    assert line.index("completed") == header.index("STATUS"), "columns are aligned"

    transcript = await helix_dbos(database_url, "transcript", result.session_id, "--json")
    messages = json.loads(transcript.stdout)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["name"] == "add" and messages[2]["content"] == "5"
    text_table = (await helix_dbos(database_url, "transcript", result.session_id)).stdout
    lines = text_table.splitlines()
    assert lines[0].split() == ["SEQ", "ROLE", "MESSAGE"] and len(lines) == 5
    assert "what is 2 + 3?" in lines[1] and 'add({"a": 2, "b": 3})' in lines[2]
    assert "tool:add" in lines[3] and lines[4].rstrip().endswith("2 + 3 = 5")

    usage = await helix_dbos(
        database_url, "usage", "--by", "session", "--session", result.session_id, "--json"
    )
    assert json.loads(usage.stdout) == [
        {
            "session": result.session_id,
            "llm_calls": 2,
            "tool_calls": 1,
            "input_tokens": result.usage["input_tokens"],
            "output_tokens": result.usage["output_tokens"],
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "cost_usd": None,  # MockLLM's model "mock" is in no price table
        }
    ]
    by_agent = await helix_dbos(database_url, "usage", "--by", "agent")
    agent_line = next(line for line in by_agent.stdout.splitlines() if line.startswith(agent_name))
    assert agent_line.split()[1:3] == ["2", "1"]
    by_model = json.loads((await helix_dbos(database_url, "usage", "--json")).stdout)
    mock_row = next(r for r in by_model if r["model"] == "mock")
    assert mock_row["llm_calls"] >= 2 and all(r["tool_calls"] == 0 for r in by_model)
    assert [r["llm_calls"] for r in by_model] == sorted(
        (r["llm_calls"] for r in by_model), reverse=True
    )


async def test_approve_and_deny_from_the_cli_while_the_run_waits(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []
    agent = make_agent(tools=[gated(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/cli"})),
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete /tmp/cli")
    await wait_until_waiting(helix, handle.session_id)

    waiting = await helix_dbos(database_url, "runs", "--status", "waiting", "--json")
    mine = next(r for r in json.loads(waiting.stdout) if r["run_id"] == handle.run_id)
    assert mine["tool_calls"][0]["tool_call_id"] == "d1" and mine["tool_calls"][0]["input"] == {
        "path": "/tmp/cli"
    }
    table = (await helix_dbos(database_url, "runs", "--status", "waiting")).stdout
    assert "approval: delete_file (call d1)" in table

    wrong = await helix_dbos(database_url, "submit", handle.session_id, "d1", "--result", "1")
    assert wrong.returncode == 2 and "waits for approval" in wrong.stderr
    approved = await helix_dbos(database_url, "approve", handle.session_id, "d1", "--reason", "ok")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"Approved delete_file (call d1) of run {handle.run_id}."
    result = await handle.result()
    assert result.status == "completed" and ran == ["/tmp/cli"]
    again = await helix_dbos(database_url, "approve", handle.session_id, "d1")
    assert again.returncode == 2
    assert again.stderr.strip() == (
        "helix-dbos approve: error: Tool call 'd1' was already answered (status: approved); "
        "an answer applies once"
    )

    mock_llm.add_responses(
        calls(("d2", "delete_file", {"path": "/etc"})),
        {"type": "text", "content": "not deleting"},
        agent=agent.name,
    )
    second = await helix.execute(agent, "delete /etc", session_id=handle.session_id)
    await wait_until_waiting(helix, second.session_id)
    denied = await helix_dbos(
        database_url, "deny", second.session_id, "d2", "--reason", "never /etc"
    )
    assert denied.returncode == 0, denied.stderr
    assert (await second.result()).status == "completed" and ran == ["/tmp/cli"]
    denial = next(m for m in await helix.get_messages(second.session_id) if m.tool_call_id == "d2")
    assert denial.is_error and denial.content.endswith("never /etc")


async def test_submit_a_client_tool_result_from_the_cli(helix, make_agent, mock_llm):
    @tool(execute="client")
    def get_location() -> dict:
        """Where the user is."""

    agent = make_agent(tools=[get_location])
    mock_llm.add_responses(
        calls(("c1", "get_location", {})),
        {"type": "text", "content": "you are in Berlin"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "where am I?")
    await wait_until_waiting(helix, handle.session_id)
    submitted = await helix_dbos(
        helix.database_url, "submit", handle.session_id, "c1", "--result", '{"city": "Berlin"}'
    )
    assert submitted.returncode == 0, submitted.stderr
    assert (await handle.result()).status == "completed"
    result_message = next(
        m for m in await helix.get_messages(handle.session_id) if m.tool_call_id == "c1"
    )
    assert json.loads(result_message.content) == {"city": "Berlin"} and not result_message.is_error


async def test_interrupt_and_abort_from_the_cli(helix, make_agent, mock_llm, database_url):
    release = threading.Event()

    @tool
    def long_task() -> str:
        """Takes a while."""
        release.wait(30)
        return "finished"

    agent = make_agent(tools=[long_task])
    mock_llm.add_responses(calls(("l", "long_task", {})), agent=agent.name)
    handle = await helix.execute(agent, "work")
    for _ in range(200):
        if sql(
            database_url,
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            handle.workflow_id,
        )[0][0]:
            break
        await asyncio.sleep(0.05)
    stop = await helix_dbos(database_url, "interrupt", handle.session_id, "--reason", "stop now")
    assert stop.returncode == 0, stop.stderr
    release.set()
    result = await handle.result()
    assert result.status == "interrupted" and "stop now" in result.error

    ran: list[str] = []
    waiting_agent = make_agent(tools=[gated(ran)])
    mock_llm.add_responses(calls(("d", "delete_file", {"path": "q"})), agent=waiting_agent.name)
    waiting = await helix.execute(waiting_agent, "delete q")
    await wait_until_waiting(helix, waiting.session_id)
    aborted = await helix_dbos(
        database_url, "abort", waiting.session_id, "--reason", "changed my mind"
    )
    assert aborted.returncode == 0, aborted.stderr
    result = await waiting.result()
    assert result.status == "aborted" and "changed my mind" in result.error and ran == []
    assert sql(
        database_url, "SELECT status FROM helix.tool_calls WHERE run_id = %s", waiting.run_id
    ) == [("aborted",)]
    assert (await helix.get_session(waiting.session_id)).status == "aborted"
    again = await helix_dbos(database_url, "abort", waiting.session_id)
    assert again.returncode == 2 and "has no run in progress" in again.stderr

    mock_llm.add_response({"type": "text", "content": "fresh start"}, agent=waiting_agent.name)
    follow_up = await helix.execute(waiting_agent, "hello again", session_id=waiting.session_id)
    assert (await follow_up.result()).status == "completed", "the session continues after abort"


@pytest.mark.parametrize(
    "args",
    [
        ("transcript", "ses_unknown"),
        ("runs", "--session", "ses_unknown"),
        ("usage", "--session", "ses_unknown"),
        ("approve", "ses_unknown", "call_1"),
        ("deny", "ses_unknown", "call_1"),
        ("submit", "ses_unknown", "call_1", "--error", "x"),
        ("interrupt", "ses_unknown"),
        ("abort", "ses_unknown"),
    ],
)
async def test_unknown_ids_exit_2_with_one_line(database_url, args):
    proc = await helix_dbos(database_url, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr == f"helix-dbos {args[0]}: error: Session 'ses_unknown' does not exist\n"


async def test_unknown_call_in_a_known_session(database_url, finished_run):
    result, _ = finished_run
    proc = await helix_dbos(database_url, "approve", result.session_id, "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        f"Session '{result.session_id}' has no pending tool call 'nope'"
    )


async def test_demo_runs_the_quickstart_agent_end_to_end(database_url):
    proc = await helix_dbos(database_url, "demo", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["result"]["status"] == "completed"
    assert out["result"]["output"]["sentiment"] == "mixed"
    assert [m["role"] for m in out["transcript"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert out["usage"][0]["llm_calls"] == 2 and out["state"] == {"submitted_for": "helix"}

    table = await helix_dbos(database_url, "demo")
    assert table.returncode == 0, table.stderr
    assert "Transcript (helix-dbos transcript ses_" in table.stdout
    assert "submit_verdict(" in table.stdout and "MODEL  LLM CALLS" in table.stdout
    # A line per step on stderr, live from the run's stream (stdout stays the report).
    steps = table.stderr.splitlines()
    assert steps[0].startswith("run run_") and steps[0].endswith("started (turn 1)")
    assert 'step 1 · tool fetch_reviews({"product": "helix"})' in steps
    assert "step 2 · model: The reviews are mixed." in steps
    assert steps[-1] == "step 2 · run completed"

    # The documented sample (docs/getting-started.md) is this output (ids aside), COST USD
    # column included, and no line is wider than 100 columns (the report's width when piped).
    sample = TEXT.split("then reads the transcript and usage back with SQL:\n\n```\n")[1]
    sample = sample.split("```")[0]

    def ids_aside(text: str) -> str:
        return re.sub(r"(run|ses)_[0-9a-f]+", r"\1_ID", text)

    printed = table.stderr + "\n".join(line.rstrip() for line in table.stdout.splitlines())
    assert ids_aside(printed) + "\n" == ids_aside(sample)
    assert "COST USD" in sample and max(map(len, table.stdout.splitlines())) <= 100


async def test_resume_runs_a_new_turn_with_the_apps_agents(database_url):
    demo = json.loads((await helix_dbos(database_url, "demo", "--json")).stdout)
    session_id = demo["result"]["session_id"]
    no_app = await helix_dbos(database_url, "resume", session_id)
    assert no_app.returncode == 2 and "--app" in no_app.stderr
    bad_app = await helix_dbos(database_url, "resume", session_id, "--app", "helix_dbos.demo:nope")
    assert bad_app.returncode == 2 and "has no attribute 'nope'" in bad_app.stderr

    resumed = await helix_dbos(
        database_url,
        "resume",
        session_id,
        "--app",
        "helix_dbos.demo:build",
        "--message",
        "again?",
        "--json",
    )
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "completed" and result["session_id"] == session_id
    assert result["run_id"] != demo["result"]["run_id"]
    runs = json.loads(
        (await helix_dbos(database_url, "runs", "--session", session_id, "--json")).stdout
    )
    assert [(r["turn"], r["status"]) for r in runs] == [(2, "completed"), (1, "completed")]
    transcript = json.loads(
        (await helix_dbos(database_url, "transcript", session_id, "--json")).stdout
    )
    assert "again?" in [m["content"] for m in transcript if m["role"] == "user"]


async def test_serve_requires_auth_and_serves_the_api_with_a_token(database_url):
    refused = await helix_dbos(database_url, "serve", "--app", "examples/server.py:helix")
    assert refused.returncode == 2 and "refusing to serve without authentication" in refused.stderr

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = forkserver.Popen(
        [
            *CLI,
            "serve",
            "--app",
            "examples/server.py:helix",
            "--port",
            str(port),
        ],
        env=cli_env(database_url, HELIX_EXECUTOR_ID="cli-serve-test", HELIX_SERVER_TOKEN="s3cret"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    denied = await client.get("/runs")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[1]
                    assert time.monotonic() < deadline, "serve did not start"
                    await asyncio.sleep(0.2)
            assert denied.status_code == 401
            auth = {"Authorization": "Bearer s3cret"}
            assert (await client.get("/runs", headers=auth)).status_code == 200
            inbox = await client.get("/inbox?token=s3cret")
            assert inbox.status_code == 200 and "<title>helix inbox</title>" in inbox.text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    assert "inbox at" in stderr and proc.returncode == 0, stderr
    assert "s3cret" not in stderr and "token=" not in stderr  # issue 35.4: no token printed
