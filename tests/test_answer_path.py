"""One way to answer a pending call (issue 47): `HelixDBOS.answer` with a typed answer.

The routes, the four protocols and the CLI build an `Approval`, `Denial`, `ClientResult`
or `HumanInput` and go through `HelixDBOS.answer` (the CLI, which launches no DBOS,
through the same checks and sender in `runtime/waits/answer_send.py`); the kinds of
wait are one table (`api/answers.py`). The first tests read the source; the last
round-trips each variant through a real run."""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from pathlib import Path

import pytest
from helpers import approval_gated_delete, calls, pending_calls, sql

from helix_dbos import (
    Answer,
    Approval,
    ClientResult,
    Denial,
    HumanInput,
    InvalidAnswerError,
    InvalidInputError,
    ToolCallAlreadyAnsweredError,
    tool,
)
from helix_dbos.api.answers import HUMAN_REQUEST_KINDS, HUMAN_REQUESTS
from tests.docs_text import PAGES, code_blocks, run_pasted

PACKAGE = Path(__file__).resolve().parent.parent / "helix_dbos"
OLD_ANSWERS = {"approve", "deny", "submit_tool_result", "submit_human_input"}
TOPICS = {k.topic for k in HUMAN_REQUEST_KINDS.values()}


def modules(*under: str) -> list[Path]:
    return sorted(p for u in under for p in (PACKAGE / u).rglob("*.py"))


@functools.cache
def nodes(path: Path) -> list[ast.AST]:
    """Every node of a module, parsed once for the three checks below."""
    return list(ast.walk(ast.parse(path.read_text())))


def rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_routes_protocols_and_cli_answer_through_answer():
    """No route, protocol or CLI command calls the older answer methods: each builds a
    typed answer and calls `answer()` (and at least one call per answering module)."""
    old, answering = [], set()
    for path in modules("server", "cli"):
        for node in nodes(path):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = ast.unparse(node.func.value)
                if node.func.attr in OLD_ANSWERS and receiver != "handlers":  # a route's
                    old.append(f"{rel(path)}:{node.lineno} .{node.func.attr}(")
                elif node.func.attr == "answer":
                    answering.add(rel(path))
    assert old == []
    assert {
        "server/endpoints/run_routes.py",
        "server/protocols/ag_ui_answers.py",
        "server/protocols/a2a/handler.py",
        "server/protocols/ai_sdk.py",
        "server/protocols/mcp_server.py",
        "cli/answers.py",
    } <= answering


def test_only_the_runtime_sends_on_an_answer_topic():
    """An answer topic is named (or its table imported) only in `runtime/` and in the
    table itself: nothing above the runtime sends an answer around `answer()`."""
    found = []
    for path in modules("."):
        where = rel(path)
        if where.startswith("runtime/") or where == "api/answers.py":
            continue
        for node in nodes(path):
            if isinstance(node, ast.Constant) and node.value in TOPICS:
                found.append(f"{where}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("hitl"):
                found += [
                    f"{where}:{node.lineno} {a.name}" for a in node.names if a.name == "TOPICS"
                ]
    assert found == []


def test_one_table_of_human_request_kinds():
    """No module spells out the three request chunk types as its own set or table of
    waits: they come from `HUMAN_REQUEST_KINDS` (the chunk models and AG-UI's own
    interrupt reasons excepted)."""
    own_vocabulary = {"api/answers.py", "streaming/chunks.py", "server/protocols/ag_ui_events.py"}
    copies = []
    for path in modules("."):
        if rel(path) in own_vocabulary:
            continue
        for node in nodes(path):
            if isinstance(node, ast.Set | ast.Dict):
                items = node.elts if isinstance(node, ast.Set) else node.keys
                values = {k.value for k in items if isinstance(k, ast.Constant)}
                if values >= HUMAN_REQUESTS:
                    copies.append(f"{rel(path)}:{node.lineno}")
    assert copies == []
    assert {"tool_approval_request", "client_tool_request", "human_input_request"} == HUMAN_REQUESTS


def test_each_answer_is_the_documented_message():
    """The payloads are the plain-JSON messages docs/human-in-the-loop.md documents."""
    assert Approval().payload("c") == {"tool_call_id": "c", "approved": True, "reason": None}
    assert Denial("no").payload("c") == {"tool_call_id": "c", "approved": False, "reason": "no"}
    assert ClientResult({"a": 1}).payload("c") == {"tool_call_id": "c", "result": {"a": 1}}
    assert ClientResult(error="e").payload("c") == {"tool_call_id": "c", "error": "e"}
    assert HumanInput("yes", approved=True).payload("c") == {
        "tool_call_id": "c",
        "human_input": "yes",
        "approved": True,
    }
    kinds = [a.kind for a in (Approval(), Denial(), ClientResult(), HumanInput())]
    assert kinds == ["approval", "approval", "client", "human_input"]


async def test_every_answer_round_trips_through_answer(helix, make_agent, mock_llm, database_url):
    ran: list[str] = []
    delete_file = approval_gated_delete(ran)

    @tool(execute="client")
    def get_location() -> dict:
        """Ask the user's device for its location."""

    agent = make_agent(tools=[delete_file, get_location, "__pause_for_human__", "__complete__"])
    mock_llm.add_responses(
        calls(("a1", "delete_file", {"path": "/a"}), ("a2", "delete_file", {"path": "/b"})),
        calls(("c1", "get_location", {})),
        calls(("p1", "__pause_for_human__", {"question": "Go?"})),
        calls(("done", "__complete__", {"answer": "ok"})),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    sid = handle.session_id
    await pending_calls(helix, sid, 2)
    with pytest.raises(InvalidAnswerError, match="answer it with approve"):
        await helix.answer(sid, "a1", HumanInput("yes"))
    with pytest.raises(InvalidAnswerError, match="Not an answer"):
        await helix.answer(sid, "a1", {"approved": True})  # type: ignore[arg-type]
    await helix.answer(sid, "a1", Approval())
    await helix.answer(sid, "a2", Denial("not that one"))
    with pytest.raises(ToolCallAlreadyAnsweredError):  # a duplicate, even of another kind
        await helix.answer(sid, "a2", Approval())

    await _unanswered(helix, sid, "c1")
    with pytest.raises(InvalidAnswerError, match="either result or error"):
        await helix.answer(sid, "c1", ClientResult({"x": 1}, error="e"))
    with pytest.raises(InvalidInputError, match="NUL"):
        await helix.answer(sid, "c1", ClientResult({"city": "Ber\x00lin"}))
    await helix.answer(sid, "c1", ClientResult({"city": "Berlin"}))

    await _unanswered(helix, sid, "p1")
    for bad in ("a\x00b", "lone \ud800 surrogate"):
        with pytest.raises(InvalidInputError, match="NUL character or a lone surrogate"):
            await helix.answer(sid, "p1", HumanInput(bad, approved=True))
    assert (await helix.get_run(handle.run_id)).status == "paused"  # refused: still waits
    answer: Answer = HumanInput("go ahead ✓", approved=True)
    await helix.answer(sid, "p1", answer)
    with pytest.raises(ToolCallAlreadyAnsweredError):
        await helix.answer(sid, "p1", answer)

    result = await handle.result()
    assert result.status == "completed" and ran == ["/a"]
    tools = {m.tool_call_id: m for m in await helix.get_messages(sid) if m.role == "tool"}
    assert tools["a1"].content == "deleted /a" and not tools["a1"].is_error
    assert tools["a2"].is_error and "not that one" in tools["a2"].content
    assert json.loads(tools["c1"].content) == {"city": "Berlin"}
    assert json.loads(tools["p1"].content) == {"human_input": "go ahead ✓", "approved": True}
    rows = sql(
        database_url,
        "SELECT tool_call_id, status FROM helix.tool_calls WHERE run_id = %s ORDER BY tool_call_id",
        handle.run_id,
    )
    assert rows == [("a1", "approved"), ("a2", "denied"), ("c1", "completed"), ("p1", "completed")]


async def _unanswered(helix, session_id: str, call_id: str) -> None:
    """Once `call_id` waits for its answer."""
    for _ in range(1200):
        pending = await helix.pending_tool_calls(session_id)
        if any(p.tool_call_id == call_id and not p.answered for p in pending):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id} never waited")


def test_the_docs_answer_example_runs_as_pasted(database_url, tmp_path):
    """docs/human-in-the-loop.md's `answer()` script runs as pasted and prints what the
    page says it prints."""
    page = PAGES["docs/human-in-the-loop.md"]
    snippet = next(b for b in code_blocks(page, "python") if "helix.answer(" in b)
    done = run_pasted(snippet, database_url, tmp_path, name="answer.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[:2] == ["d1: answered already", "completed"]
    assert len(printed) == 6
    shown = next(b for b in code_blocks(page, "text") if "answered already" in b)
    assert printed == shown.strip().splitlines()
