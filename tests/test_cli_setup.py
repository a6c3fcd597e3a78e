"""The database in the open (db-url, db stop, doctor), JSON everywhere, tables that fit."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import forkserver
from helpers import has_pgvector, in_terminal, sql
from rich.console import Console

from helix_dbos import tool
from helix_dbos.cli.output import Column, build_table
from helix_dbos.store.embedded import embedded_pid

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "helix_dbos.cli"]
DBOS_CLI = Path(sys.executable).with_name("dbos")


def run(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return forkserver.run(
        [*CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=180
    )


def running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may never reap the detached postmaster)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        env.pop(key, None)
    return {**env, **extra}


def test_db_url_hides_the_password_unless_asked():
    url = "postgresql://app:s3cret@db.example:5432/agents"
    shown = run("db-url", "--database-url", url, env=clean_env())
    assert shown.returncode == 0 and shown.stdout == "postgresql://app:***@db.example:5432/agents\n"
    full = run("db-url", "--show-password", "--json", env=clean_env(HELIX_DATABASE_URL=url))
    assert json.loads(full.stdout) == {"url": url, "embedded": False, "data_dir": None}


def test_the_embedded_database_in_the_open(tmp_path):
    """db-url starts the folder's server, the DBOS CLI reads its workflows, db stop ends it."""
    data_dir = tmp_path / "pgdata"
    env = clean_env(HELIX_DATA_DIR=str(data_dir))
    try:
        described = run("db-url", "--show-password", "--json", env=env, cwd=tmp_path)
        assert described.returncode == 0, described.stderr
        info = json.loads(described.stdout)
        assert info["embedded"] and info["data_dir"] == str(data_dir)
        pid = embedded_pid(data_dir)
        assert pid is not None
        # The command that started it says so once, with the command that stops it.
        notice = (
            f"helix-dbos: started the embedded PostgreSQL in {data_dir}; it keeps running "
            "after this command (`helix-dbos db stop` stops it)."
        )
        assert [line for line in described.stderr.splitlines() if "embedded" in line] == [notice]
        # One already running is used silently: no notice, no spinner on a terminal.
        code, shown = in_terminal([*CLI, "runs"], env=env, columns=100, cwd=tmp_path)
        assert code == 2 and "the helix schema is missing" in shown, shown
        assert "embedded PostgreSQL" not in shown, shown
        status = json.loads(run("db", "status", "--json", env=env, cwd=tmp_path).stdout)
        assert status == {"data_dir": str(data_dir), "pid": pid, "running": True}

        demo = run("demo", "--json", "--quiet", env=env, cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        assert demo.stderr == "", "--quiet: no progress lines"
        run_id = json.loads(demo.stdout)["result"]["run_id"]
        # The recipes of docs/database.md: psql and the DBOS CLI on the embedded database.
        counted = subprocess.run(
            ["psql", info["url"], "-tAc", "SELECT count(*) FROM helix.runs"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert counted.returncode == 0 and counted.stdout.strip() == "1", counted.stderr
        listed = subprocess.run(
            [str(DBOS_CLI), "workflow", "list", "-s", info["url"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        workflows = json.loads(listed.stdout)
        assert [w["status"] for w in workflows if w["workflow_id"] == f"helix-{run_id}"] == [
            "SUCCESS"
        ]
        steps = subprocess.run(
            [str(DBOS_CLI), "workflow", "steps", f"helix-{run_id}", "-s", info["url"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert steps.returncode == 0, steps.stderr
        names = [s["function_name"] for s in json.loads(steps.stdout)]
        assert names.count("helix.llm") == 2 and "helix.tool:fetch_reviews" in names

        # Stopped, the next command on a terminal starts it again, spinner and notice.
        assert run("db", "stop", env=env, cwd=tmp_path).returncode == 0
        code, shown = in_terminal([*CLI, "db-url"], env=env, columns=100, cwd=tmp_path)
        assert code == 0 and "starting the embedded PostgreSQL" in shown, shown
        assert shown.count("helix-dbos db stop") == 1, shown
        pid = embedded_pid(data_dir)

        stopped = run("db", "stop", env=env, cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert (
            stopped.stdout.strip() == f"Stopped the embedded PostgreSQL in {data_dir} (pid {pid})."
        )
        assert embedded_pid(data_dir) is None
        assert not running(pid), "the postmaster exited"
        again = run("db", "stop", env=env, cwd=tmp_path)
        assert again.stdout.strip() == f"No embedded PostgreSQL runs in {data_dir}."
    finally:
        run("db", "stop", env=env, cwd=tmp_path)


def test_doctor_says_what_is_fine_and_what_to_fix(database_url, helix, tmp_path):
    env = clean_env(HELIX_DATABASE_URL=database_url)
    healthy = run("doctor", "--json", env=env)
    assert healthy.returncode == 0, healthy.stderr
    checks = {c["name"]: c for c in json.loads(healthy.stdout)}
    assert list(checks) == [
        "python",
        "dbos",
        "database",
        "migrations",
        "vector search",
        "pooler",
        "provider keys",
        "worker identity",
        "held runs",
        "run versions",
    ]
    assert checks["held runs"]["level"] == "ok", checks["held runs"]
    # the embedded PostgreSQL has pgvector, and helix's start set it up (issue 36); a
    # server without it (Debian's PostgreSQL 15 here) gets a warning saying how to add it
    if has_pgvector(database_url):
        assert checks["vector search"]["level"] == "ok", checks["vector search"]
        assert checks["vector search"]["found"].startswith("pgvector 0.")
    else:
        assert checks["vector search"]["level"] == "warn", checks["vector search"]
        assert "pgvector" in checks["vector search"]["found"]
    assert checks["database"]["level"] == "ok" and "PostgreSQL" in checks["database"]["found"]
    assert checks["migrations"]["level"] == "ok"
    assert checks["provider keys"]["level"] == "warn"
    assert "ANTHROPIC_API_KEY" in checks["provider keys"]["found"]

    # An executor id a live worker holds, and an app whose agent has no key: both fail.
    app = tmp_path / "keyless_app.py"
    app.write_text(
        textwrap.dedent(
            """
            from helix_dbos import Agent, HelixDBOS, LLMConfig

            helix = HelixDBOS([Agent("claude", llm=LLMConfig(model="anthropic:claude-sonnet-4-6"))])
            """
        )
    )
    live_id = helix.lease.identity.executor_id
    sick = run("doctor", "--app", f"{app}:helix", env={**env, "HELIX_EXECUTOR_ID": live_id})
    assert sick.returncode == 1, sick.stderr
    said = " ".join(sick.stdout.split())
    assert "in use by a live worker" in said and "unset HELIX_EXECUTOR_ID" in said
    assert "ANTHROPIC_API_KEY is not set" in said

    unreachable = run(
        "doctor", "--database-url", "postgresql://nobody@127.0.0.1:1/x", env=clean_env()
    )
    assert unreachable.returncode == 1
    assert "start that server" in " ".join(unreachable.stdout.split())


async def test_answers_and_control_print_json_and_chunks_carry_iso_deadlines(
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
            "tool_calls": [{"id": "j1", "name": "delete_file", "arguments": {"path": "x"}}],
        },
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "delete x")
    for _ in range(400):
        run_info = await helix.get_current_run(handle.session_id)
        if run_info is not None and run_info.status == "waiting":
            break
        await asyncio.sleep(0.05)
    env = clean_env(HELIX_DATABASE_URL=database_url)

    listed = await asyncio.to_thread(run, "runs", "--status", "waiting", "--json", env=env)
    mine = next(r for r in json.loads(listed.stdout) if r["run_id"] == handle.run_id)
    deadline_at = dt.datetime.fromisoformat(mine["tool_calls"][0]["deadline_at"])
    chunks = [c async for c in helix.stream(handle.session_id, run_id=handle.run_id, follow=False)]
    request = next(c for c in chunks if c.type == "tool_approval_request")
    in_chunk = dt.datetime.fromisoformat(request.payload["deadline"])  # ISO 8601, not an epoch
    assert abs((in_chunk - deadline_at).total_seconds()) < 1 and in_chunk.tzinfo is not None
    assert request.data.deadline == in_chunk

    approved = await asyncio.to_thread(run, "approve", handle.session_id, "j1", "--json", env=env)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout) == {
        "action": "approved",
        "session_id": handle.session_id,
        "run_id": handle.run_id,
        "workflow_id": handle.workflow_id,
        "tool_call_id": "j1",
        "tool_name": "delete_file",
    }
    assert (await handle.result()).status == "completed"
    [(status, answered_by)] = sql(
        database_url,
        "SELECT status, answered_by FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert status == "approved" and answered_by.endswith(" (cli)") and "@" in answered_by


def test_tables_fit_the_terminal_and_are_never_wrapped_when_piped():
    rows = [
        {"seq": 1, "role": "assistant", "text": "word " * 40},
        {"seq": 12, "role": "user", "text": "hi"},
    ]
    columns = [Column("seq", "SEQ"), Column("role", "ROLE"), Column("text", "MESSAGE", wraps=True)]
    narrow = io.StringIO()
    Console(file=narrow, width=50, color_system=None).print(
        build_table(rows, columns, width=1000, terminal=True)
    )
    lines = narrow.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 50 and len(lines) > 3, "wrapped to the width"
    assert " ".join(narrow.getvalue().split()).count("word") == 40, "nothing lost when wrapped"

    piped = forkserver.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
            from helix_dbos.cli.output import Column, print_table
            print_table({rows!r}, [Column("seq", "SEQ"), Column("role", "ROLE"),
                        Column("text", "MESSAGE", wraps=True)], width=30)
            """
            ),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "20"},
    )
    header, first, second = piped.stdout.splitlines()
    assert header.split() == ["SEQ", "ROLE", "MESSAGE"]
    assert first.endswith("…") and len(first.split("  ")[-1].strip()) == 30
    assert second.index("user") == header.index("ROLE") and first.startswith("  1")
    assert not any(line != line.rstrip() for line in piped.stdout.splitlines())
