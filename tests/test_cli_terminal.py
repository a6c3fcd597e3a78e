"""The CLI in a terminal of 80 to 120 columns (a real pseudo-terminal with a fixed
COLUMNS): tables fit without cutting statuses, numbers or ids; ids are short prefixes
every command takes back; `--help` is plain and ordered; the docs show what a user
gets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
from helpers import in_terminal as terminal
from rich.cells import cell_len

from helix_dbos import tool
from tests.docs_text import TEXT

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "helix_dbos.cli"]


def cli_env(database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELIX_", "COLUMNS"))}
    return {**env, "HELIX_DATABASE_URL": database_url} if database_url else env


def in_terminal(database_url: str | None, *args: str, columns: int) -> tuple[int, str]:
    return terminal([*CLI, *args], env=cli_env(database_url), columns=columns, cwd=REPO)


def piped(database_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [*CLI, *args], capture_output=True, text=True, env=cli_env(database_url), cwd=REPO,
        timeout=60,
    )  # fmt: skip


@pytest.fixture
async def waiting_run(helix, make_agent, mock_llm):
    """A run waiting for approval, by an agent with a long name, after a completed one."""

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return "deleted"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        {"type": "text", "content": "first"},
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "call_x", "name": "delete_file", "arguments": {"path": "p"}}],
        },
        {"type": "text", "content": "deleted"},  # if a test approves the call
        agent=agent.name,
    )
    first = await (await helix.execute(agent, "one")).result()
    handle = await helix.execute(agent, "two", session_id=first.session_id)
    while not await helix.pending_tool_calls(handle.session_id):
        await asyncio.sleep(0.05)
    yield handle, agent.name
    with contextlib.suppress(Exception):  # a test may have answered it
        await helix.abort(handle.session_id, reason="test over")


@pytest.mark.parametrize("columns", [80, 100, 120])
async def test_runs_fits_the_terminal_and_never_cuts_status_or_numbers(
    database_url, waiting_run, columns
):
    handle, _ = waiting_run
    code, out = await asyncio.to_thread(
        in_terminal, database_url, "runs", "--session", handle.session_id, columns=columns
    )
    assert code == 0, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns, out
    header = lines[0]
    for name in ("RUN", "SESSION", "AGENT", "TURN", "STATUS", "STEPS"):
        assert re.search(rf"\b{name}\b", header), (name, out)
    assert "WAITING ON" in out
    waiting = next(line for line in lines if line.startswith(handle.run_id[:12]))
    completed = next(line for line in lines[1:] if " completed " in line)
    # RUN SESSION AGENT TURN STATUS STEPS, ids as 12-character prefixes, nothing cut
    assert waiting.split()[:2] == [handle.run_id[:12], handle.session_id[:12]]
    assert re.search(r" 2 +waiting +1 ", waiting), out
    assert re.search(r" 1 +completed +1 ", completed), out
    # the wrapped WAITING ON text, read across its lines
    assert "approval: delete_file (call call_x)" in " ".join(out.split())
    assert ("STARTED" in header) == (columns >= 100), "the start time goes first at 80"


async def test_usage_by_session_never_cuts_token_counts(database_url, waiting_run, helix):
    handle, _ = waiting_run
    usage = await helix.get_usage(session_id=handle.session_id)
    code, out = await asyncio.to_thread(
        in_terminal, database_url, "usage", "--by", "session", columns=80
    )
    assert code == 0, out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    row = next(line for line in out.splitlines() if line.startswith(handle.session_id[:12]))
    calls, tools, tokens_in, tokens_out = row.split()[1:5]
    assert (int(calls), int(tokens_in), int(tokens_out)) == (
        usage.llm_calls,
        usage.input_tokens,
        usage.output_tokens,
    )
    # A key may be cut to fit (an id, or another test's session id with spaces in it); a
    # number never: no "…" right of where the first number column's header starts.
    header, *rows = out.splitlines()
    numbers_at = header.index(header.split()[1])
    cut = [r for r in rows for i, c in enumerate(r) if c == "…" and cell_len(r[:i]) >= numbers_at]
    assert not cut, "no number is cut"


async def test_commands_take_the_short_ids_tables_show(database_url, waiting_run, helix):
    handle, agent_name = waiting_run
    table = await asyncio.to_thread(piped, database_url, "runs", "--session", handle.session_id)
    short = table.stdout.splitlines()[1].split()[1]
    assert short == handle.session_id[:12]

    transcript = await asyncio.to_thread(piped, database_url, "transcript", short, "--json")
    assert transcript.returncode == 0, transcript.stderr
    assert [m["content"] for m in json.loads(transcript.stdout)][:3] == ["one", "first", "two"]
    runs = await asyncio.to_thread(piped, database_url, "runs", "--session", short, "--json")
    assert handle.run_id in runs.stdout
    usage = await asyncio.to_thread(
        piped, database_url, "usage", "--by", "session", "--session", short, "--json"
    )
    assert handle.session_id in usage.stdout

    # Several sessions start with "ses_": a clear error, not a guess.
    ambiguous = await asyncio.to_thread(piped, database_url, "transcript", "ses_")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("helix-dbos transcript: error: session id prefix 'ses_'")
    assert "ambiguous" in ambiguous.stderr and len(ambiguous.stderr.splitlines()) == 1

    approved = await asyncio.to_thread(piped, database_url, "approve", short, "call_x")
    assert approved.returncode == 0, approved.stderr
    assert (await (await helix.get_handle(handle.run_id)).result()).status == "completed"


def test_help_is_plain_ordered_and_fits_80_columns():
    env = {**cli_env(None), "COLUMNS": "80"}
    main = forkserver.run(
        [*CLI, "--help"], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    commands = [line.split()[0] for line in main.split("Commands:\n")[1].splitlines() if line]
    assert commands[:4] == ["demo", "runs", "transcript", "usage"]
    assert commands.index("migrate") > commands.index("runs") and commands[-1] == "db"
    assert "..." not in main.split("Commands:")[1], "every command's line is whole"
    for args in (["runs", "--help"], ["usage", "--help"], ["demo", "--help"]):
        text = forkserver.run(
            [*CLI, *args], capture_output=True, text=True, env=env, timeout=60
        ).stdout
        assert "<bool>" not in text and max(len(line) for line in text.splitlines()) <= 80
    runs_help = forkserver.run(
        [*CLI, "runs", "--help"], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    assert "<waiting|queued|running|paused|completed|failed|interrupted|aborted>" in runs_help


async def test_the_readmes_runs_sample_is_what_a_user_gets(database_url, waiting_run):
    sample = TEXT.split("$ helix-dbos runs --status waiting\n", 1)[1].splitlines()[:2]
    handle, _ = waiting_run
    code, out = await asyncio.to_thread(
        in_terminal, database_url, "runs", "--session", handle.session_id, columns=120
    )
    header, row = (
        out.splitlines()[0],
        next(line for line in out.splitlines() if line.startswith(handle.run_id[:12])),
    )
    assert sample[0].split() == header.split()
    readme_row = sample[1].split()
    assert [len(readme_row[0]), len(readme_row[1])] == [12, 12] and "…" not in sample[1]
    assert readme_row[4:6] == row.split()[4:6] == ["waiting", "1"]
    assert sample[1].index("waiting") == sample[0].index("STATUS"), "aligned as printed"
