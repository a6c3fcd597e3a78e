"""The documentation's code runs as written: the README's Quickstart as pasted (against a
stand-in for the Anthropic API), the getting-started agent without a key, the SQL recipes of
docs/, and every command the README or a page of docs/ shows is run by some test; the README
stays a front door."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import forkserver
import psycopg
import pytest

from helix_dbos import tool
from helix_dbos.store.database import libpq_url
from tests.docs_text import PAGES, TEXT, code_blocks, env_for, run_pasted, section
from tests.llm import wire

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


class FakeAnthropic(BaseHTTPRequestHandler):
    """Answers /v1/messages like Claude would for the review analyst: fetch, then submit."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        fetched = any(
            isinstance(m["content"], list)
            and any(b.get("type") == "tool_result" for b in m["content"])
            for m in body["messages"]
        )
        if not fetched:
            stream = wire.anthropic_stream_tool_use(
                "toolu_1", "fetch_reviews", {"product": "helix"}
            )
        else:
            stream = wire.anthropic_stream_tool_use(
                "toolu_2",
                "submit_verdict",
                {
                    "product": "helix",
                    "sentiment": "positive",
                    "evidence": ["It survived a kill -9 mid-run!"],
                },
            )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(stream)))
        self.end_headers()
        self.wfile.write(stream)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def anthropic_api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAnthropic)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def test_the_quickstart_runs_as_pasted(database_url, anthropic_api, tmp_path):
    [snippet] = code_blocks(section("Quickstart"), "python")
    script = tmp_path / "quickstart.py"
    script.write_text(snippet)
    base_url = f"http://127.0.0.1:{anthropic_api.server_port}"

    without_key = forkserver.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_for(database_url),
        cwd=tmp_path,
    )
    assert without_key.returncode == 1
    claimed = "ANTHROPIC_API_KEY is not set"
    assert claimed in section("Quickstart") and claimed in without_key.stderr.splitlines()[-1]
    assert "LLMConfigurationError: Agent 'review_analyst'" in without_key.stderr

    done = forkserver.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_for(database_url, ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL=base_url),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("completed {'product': 'helix', 'sentiment': 'positive'")
    assert [r["model"] for r in anthropic_api.requests] == ["claude-sonnet-4-6"] * 2  # type: ignore[attr-defined]

    # The README's "ANTHROPIC_API_KEY=sk-ant-... helix-dbos demo" takes the same path.
    demo = forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", "demo", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env_for(database_url, ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL=base_url),
    )
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["result"]["output"]["sentiment"] == "positive"


def test_the_transcript_recipe_shows_text_and_tool_calls_together(database_url):
    demo = forkserver.run(
        [sys.executable, "-m", "helix_dbos.cli", "demo", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env_for(database_url),
    )
    session_id = json.loads(demo.stdout)["result"]["session_id"]
    recipe = next(q for q in code_blocks(section("Database"), "sql") if "helix.messages" in q)
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(recipe.replace("'ses_...'", "%s"), (session_id,)).fetchall()
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"]
    both = rows[3][2]
    assert both.startswith("The reviews are mixed. submit_verdict({")
    assert rows[1][2] == 'fetch_reviews({"product": "helix"})'


def test_the_approval_example_in_two_terminals(database_url):
    """`python examples/approval.py` waits; `... approve SESSION_ID` from another process."""
    env = env_for(database_url)
    first = forkserver.Popen(
        [sys.executable, "examples/approval.py"],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert first.stdout is not None
        lines = []
        while not any("approval.py approve" in line for line in lines):
            line = first.stdout.readline()
            assert line, first.communicate()[1]
            lines.append(line)
        command = next(line for line in lines if "approval.py approve" in line).split()
        assert lines[0].startswith("Run run_") and "waiting for approval of delete_file" in lines[0]
        second = forkserver.run(
            [sys.executable, *command[1:]],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 0, second.stderr
        assert second.stdout.startswith("Approved delete_file in session ses_")
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert "Run completed: The deletion is done." in out and "File still there: False" in out


def _tests_text() -> str:
    return "\n".join(p.read_text() for p in sorted(TESTS.rglob("test_*.py")))


def test_every_command_the_readme_shows_is_run_by_a_test():
    tests = _tests_text()
    ci = (REPO / ".ci" / "run").read_text()
    lines = [
        line.split("  #")[0].strip()
        for block in code_blocks(TEXT, "bash")
        for line in block.splitlines()
        if line.strip()
    ]
    uncovered = []
    for line in lines:
        # `VAR=value /usr/bin/time -v .venv/bin/pytest ...` is the pytest command it prefixes
        line = re.sub(r"^(?:[A-Z_]+=\S+ )*(?:/usr/bin/time -v )?", "", line)
        subcommands = re.findall(r"helix-dbos ([a-z][a-z-]*)(?: (stop|status))?", line)
        examples = re.findall(r"examples/(\w+\.py)", line)
        if line.startswith(("python3 -m venv", ".venv/bin/pytest")):
            covered = line.split(" && ")[0].split()[0] in ci
        elif subcommands:
            covered = all(
                f'"{sub}"' in tests and (not extra or f'"{extra}"' in tests)
                for sub, extra in subcommands
            )
            if line.startswith("psql"):
                covered = covered and '"psql"' in tests
            if "dbos workflow" in line:
                covered = covered and '"workflow", "' + line.split()[2] + '"' in tests
        elif examples:
            covered = all(f"{name}" in tests for name in examples)
        elif line.startswith("curl"):
            path = re.search(r"localhost:\d+(/\w+)", line)
            covered = (
                path is not None and f'"{path.group(1)}' in (TESTS / "test_server.py").read_text()
            )
        else:
            covered = False
        if not covered:
            uncovered.append(line)
    assert uncovered == [], "commands of the README or docs/ that no test runs"


def test_the_database_section_names_every_table_and_view_of_the_migrations():
    """Issue 27: the list under "Database" had fallen behind the migrations."""
    created = set()
    for path in sorted((REPO / "migrations").glob("*.sql")):
        created |= set(
            re.findall(
                r"CREATE (?:TABLE IF NOT EXISTS|OR REPLACE VIEW|VIEW) helix\.(\w+)",
                path.read_text(),
            )
        )
    created.add("schema_migrations")  # created by the migration runner itself
    listed = set(re.findall(r"^- `(\w+)`", section("Database"), re.M))
    assert created - listed == set(), "tables or views docs/database.md does not list"
    assert listed - created == set(), "docs/database.md lists tables that do not exist"


async def test_answering_from_anywhere_reads_the_workflow_id_from_waiting_runs(
    helix, make_agent, mock_llm, database_url, tmp_path
):
    """The DBOSClient snippet of docs/human-in-the-loop.md, as pasted: `helix.waiting_runs.workflow_id` is
    where the answer goes, from a process that never imports helix."""
    ran: list[str] = []

    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    agent = make_agent(tools=[delete_file])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "c1", "name": "delete_file", "arguments": {"path": "p"}}],
        },
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    while not await helix.pending_tool_calls(handle.session_id):
        await asyncio.sleep(0.05)
    human = section("Human in the loop and run control")
    recipe = next(q for q in code_blocks(human, "sql") if "workflow_id" in q)
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute(recipe).fetchall()
    assert (handle.workflow_id, "c1") in [(r[3], r[6]) for r in rows]

    [snippet] = [b for b in code_blocks(TEXT, "python") if "helix.waiting_runs" in b]
    assert "helix_dbos" not in snippet
    script = tmp_path / "answer.py"
    script.write_text(
        snippet.replace(
            '"postgresql://user:password@localhost:5432/helix"', repr(libpq_url(database_url))
        ).replace('"ses_..."', repr(handle.session_id))
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-I", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_for(database_url),
    )
    assert done.returncode == 0, done.stderr
    assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
    assert ran == ["p"]


def test_your_own_agent_without_a_key_runs_as_pasted(database_url, tmp_path):
    """Getting started: `MockLLM` with a function of the request, no key, no network; the
    page's claims about the output hold."""
    part = section("Your own agent, without an API key")
    [snippet] = code_blocks(part, "python")
    done = run_pasted(snippet, database_url, tmp_path, name="my_agent.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0] == "completed 2 + 3 = 5"
    assert "prints `completed 2 + 3\n= 5` and the four messages" in part
    assert [line.split()[0] for line in printed[1:]] == ["user", "assistant", "tool", "assistant"]
    assert printed[-1] == "assistant 2 + 3 = 5"


def test_the_readme_is_a_front_door():
    """Issue 28: the README holds what a newcomer needs (300 lines at most); everything
    else is a page of docs/, every page is in the site's navigation, and every page the
    README links to exists."""
    readme = PAGES["README.md"]
    assert len(readme.splitlines()) <= 300
    nav = (REPO / "mkdocs.yml").read_text()
    pages = {path.removeprefix("docs/") for path in PAGES if path.startswith("docs/")}
    assert {page for page in pages if f": {page}" not in nav} == set()
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", readme))
    assert len(linked) >= 15 and {path for path in linked if path not in PAGES} == set()
