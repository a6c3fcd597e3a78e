"""Issue 35 in the CLI: passwords masked in every form, the server token kept out of `ps`
and of the startup line, and invisible characters shown as escapes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import forkserver
import httpx
import pytest

from helix_dbos import tool
from helix_dbos.cli.visible import escape_invisible, reveal
from helix_dbos.store.database import redact_secrets, redact_url

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "helix_dbos.cli"]


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    return {**base, **extra}


def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [*CLI, *args], capture_output=True, text=True, env=env(**extra), cwd=REPO, timeout=180
    )


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:@h/db", "postgresql://u:@h/db"),  # no password: nothing to mask
        (
            "postgresql://u@h/db?password=s3cret&sslmode=off",
            "postgresql://u@h/db?password=***&sslmode=off",
        ),
        ("postgresql://h/db?sslpassword=s3cret", "postgresql://h/db?sslpassword=***"),
        ("postgresql://u:p%40s3cret@h?password=s3cret", "postgresql://u:***@h?password=***"),
        ("host=h password=s3cret dbname=d", "host=h password=*** dbname=d"),
        ("host=h password = 's3 \\' cret' dbname=d", "host=h password = *** dbname=d"),
    ],
)
def test_every_password_form_is_masked(url, masked):
    assert redact_url(url) == masked
    assert "s3" not in redact_url(url).replace("sslmode", "")


def test_db_url_and_doctor_mask_query_and_keyword_passwords():
    url = "postgresql://app@127.0.0.1:1/agents?password=s3cret&connect_timeout=2"
    shown = run("db-url", "--database-url", url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "postgresql://app@127.0.0.1:1/agents?password=***&connect_timeout=2\n"
    shown_json = run("db-url", "--json", HELIX_DATABASE_URL=url)
    assert "s3cret" not in shown_json.stdout and "***" in json.loads(shown_json.stdout)["url"]
    doctor = run("doctor", "--json", HELIX_DATABASE_URL=url)
    assert "s3cret" not in doctor.stdout + doctor.stderr
    [database] = [c for c in json.loads(doctor.stdout) if c["name"] == "database"]
    assert database["level"] == "fail" and "password=***" in database["found"]
    assert redact_secrets("auth failed for s3cret; password=s3cret host=h", url) == (
        "auth failed for ***; password=*** host=h"
    )


def test_serve_refuses_blank_and_non_ascii_tokens_and_warns_on_token_in_argv(tmp_path):
    blank = run("serve", "--app", "examples/server.py:helix", "--token", " ")
    assert blank.returncode == 2 and "blank" in blank.stderr
    assert "--token is visible to every user" in blank.stderr  # prefer env or a file
    spaced = run("serve", "--app", "examples/server.py:helix", HELIX_SERVER_TOKEN="tök")
    assert spaced.returncode == 2 and "printable ASCII" in spaced.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    no_token = run("serve", "--app", "examples/server.py:helix", "--token-file", str(empty))
    assert no_token.returncode == 2 and "is empty" in no_token.stderr


async def test_serve_with_a_token_file_never_prints_the_token(database_url, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("file-s3cret\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = forkserver.Popen(
        [*CLI, "serve", "--app", "examples/server.py:helix", "--port", str(port)]
        + ["--token-file", str(token_file), "--header-timeout", "5"],
        env=env(HELIX_DATABASE_URL=database_url, HELIX_EXECUTOR_ID="cli-serve-file"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    denied = await c.get("/runs")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[1]
                    assert time.monotonic() < deadline, "serve did not start"
                    await asyncio.sleep(0.2)
            assert denied.status_code == 401
            authed = await c.get("/runs", headers={"Authorization": "Bearer file-s3cret"})
            assert authed.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    assert f"inbox at http://127.0.0.1:{port}/inbox (sign in" in stderr, stderr
    assert "file-s3cret" not in stderr and "token=" not in stderr
    assert "--token is visible" not in stderr


def test_invisible_characters_become_escapes():
    spoof = "invoice\u202efdp.exe"
    assert escape_invisible(spoof) == "invoice\\u202Efdp.exe"
    assert escape_invisible("a\u200bb\u2066c\ufeffd\u00a0e\U000e0041") == (
        "a\\u200Bb\\u2066c\\uFEFFd\\u00A0e\\U000E0041"
    )
    assert escape_invisible("café ✓ 日本\nnext\ttab") == "café ✓ 日本\nnext\ttab"
    text = reveal(spoof)
    assert text.plain == "invoice\\u202Efdp.exe" and text.spans  # highlighted on a terminal


async def test_the_transcript_and_runs_show_invisible_characters(
    helix, make_agent, mock_llm, database_url
):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "content": "Deleting invoice\u202efdp.exe now",
            "tool_calls": [
                {"id": "call\u200b1", "name": "delete_file", "arguments": {"path": "a\u202eb"}}
            ],
        },
        agent=agent.name,
    )
    handle = await helix.execute(agent, "tidy")
    for _ in range(400):
        run_now = await helix.get_current_run(handle.session_id)
        if run_now is not None and run_now.status == "waiting":
            break
        await asyncio.sleep(0.05)
    transcript = await asyncio.to_thread(
        run, "transcript", handle.session_id, HELIX_DATABASE_URL=database_url
    )
    runs = await asyncio.to_thread(
        run, "runs", "--session", handle.session_id, HELIX_DATABASE_URL=database_url
    )
    await helix.abort(handle.session_id)
    for out in (transcript, runs):
        assert out.returncode == 0, out.stderr
        assert "\u202e" not in out.stdout and "\u200b" not in out.stdout
    assert "invoice\\u202Efdp.exe" in transcript.stdout
    # An id with an invisible character never reaches a human: it is re-keyed when the
    # reply is planned (issue 35 item 1), so the table shows helix's own id.
    assert "(call helix_" in runs.stdout
