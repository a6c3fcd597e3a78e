"""Tool-call ids unique within a session (issue 35, item 1): an approval answers one call.

A model (or a prompt injection steering it) controls the ids of its calls. Two calls
under one id once showed one card and ran both on one Approve. Every test here scripts
such a reply and checks, through the Python API, over HTTP and in the inbox (headless
Chromium), that each call a human is asked about has its own id, its own arguments,
and runs only when it is approved.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import httpx
import pytest
from helpers import calls, sql
from live_server import serve

from helix_dbos import tool
from helix_dbos.orchestration.call_ids import (
    HELIX_ID_PREFIX,
    MAX_CALL_ID_LENGTH,
    helix_call_id,
    is_safe_call_id,
    transcript_call_ids,
    unique_call_ids,
)
from helix_dbos.orchestration.types import (
    Message,
    SubAgentCall,
    TextStepResult,
    ToolCall,
    ToolCallsStepResult,
)
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.server import create_app
from helix_dbos.store import repository as repo

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # the Messages API's tool_use id pattern
LONG_ID = "x" * 300


def text(content: str) -> dict:
    return {"type": "text", "content": content}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A harmless file and an important one; the tools below really delete files."""
    out = {"harmless": tmp_path / "harmless.txt", "important": tmp_path / "IMPORTANT"}
    for path in out.values():
        path.write_text("keep me")
    return out


def file_tools(deleted: list[str]):
    @tool(require_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        Path(path).unlink()
        deleted.append(path)
        return f"deleted {path}"

    @tool
    def echo(text: str) -> str:
        """Say something back."""
        return text

    return [delete_file, echo]


async def pending_calls(helix, session_id: str, count: int) -> list[dict]:
    """The run's unanswered calls once `count` of them wait (fails after ~20 s), as
    dicts, the shape `/status` shows them in (`by_path` reads both)."""
    for _ in range(400):
        run = await helix.get_current_run(session_id)
        pending = [p for p in await helix.pending_tool_calls(session_id) if not p.answered]
        if run is not None and run.status == "waiting" and len(pending) >= count:
            return [p.model_dump() for p in pending]
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never waited on {count} unanswered call(s)")


def by_path(pending: list[dict], path: Path) -> dict:
    [call] = [p for p in pending if p["input"] == {"path": str(path)}]
    return call


def assert_paired_for_the_provider(request_messages: list[Message]) -> None:
    """What the model is sent: every call id safe for every provider, used by one call
    only, and answered by exactly one tool result carrying the same id."""
    call_ids = [c.id for m in request_messages if m.role == "assistant" for c in m.tool_calls]
    result_ids = [m.tool_call_id for m in request_messages if m.role == "tool"]
    assert len(call_ids) == len(set(call_ids)), call_ids
    assert sorted(call_ids) == sorted(i for i in result_ids if i is not None), (
        call_ids,
        result_ids,
    )
    for call_id in call_ids:
        assert ANTHROPIC_ID.match(call_id) and len(call_id) <= MAX_CALL_ID_LENGTH, call_id


def last_request(mock_llm, agent) -> list[Message]:
    return [r for r in mock_llm.inputs if r.agent_name == agent.name][-1].messages


# --- the pure re-keying ----------------------------------------------------------------


def test_safe_ids_stay_and_the_rest_get_deterministic_helix_ids():
    reply = ToolCallsStepResult(
        tool_calls=[
            ToolCall(id="call_a", name="t"),
            ToolCall(id="call_a", name="t"),  # duplicate in the reply
            ToolCall(id="old", name="t"),  # used in an earlier step
            ToolCall(id="", name="t"),
            ToolCall(id=LONG_ID, name="t"),
            ToolCall(id="functions.Bash:0", name="t"),  # outside Anthropic's pattern
            ToolCall(id="call_b", name="t"),
        ],
        sub_agent_calls=[SubAgentCall(id="call_b", agent_type="child")],
    )
    out, rekeyed = unique_call_ids(reply, {"old"}, "run-1:2")
    assert isinstance(out, ToolCallsStepResult)
    ids = [c.id for c in out.tool_calls] + [c.id for c in out.sub_agent_calls]
    assert ids[0] == "call_a" and ids[6] == "call_b", "the first safe, unused id stays"
    assert len(set(ids)) == len(ids) and "old" not in ids
    for position in (1, 2, 3, 4, 5, 7):
        assert ids[position] == helix_call_id("run-1:2", position)
        assert ids[position].startswith(HELIX_ID_PREFIX) and is_safe_call_id(ids[position])
        assert ANTHROPIC_ID.match(ids[position]) and len(ids[position]) <= 40
    assert [r.provider_id for r in rekeyed] == [
        "call_a",
        "old",
        "",
        LONG_ID,
        "functions.Bash:0",
    ] + ["call_b"]
    assert [r.clash for r in rekeyed] == [True, True, False, False, False, True]
    assert [r.reason for r in rekeyed][:5] == [
        "is used by another call of the same reply",
        "was used earlier in the session",
        "is empty",
        "is longer than 40 characters",
        "has characters other than A-Z, a-z, 0-9, _ and -",
    ]
    # Arguments and names never move between calls.
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        (c.name, c.arguments) for c in reply.tool_calls
    ]
    # The same reply in the same place gets the same ids (a replay, a recovery).
    again, _ = unique_call_ids(reply, {"old"}, "run-1:2")
    assert again == out
    elsewhere, _ = unique_call_ids(reply, {"old"}, "run-1:3")
    assert isinstance(elsewhere, ToolCallsStepResult)
    assert elsewhere.tool_calls[1].id != out.tool_calls[1].id


def test_a_helix_id_the_model_already_used_is_not_given_twice():
    taken = helix_call_id("run-1:2", 1)  # a model that guessed helix's next id
    reply = ToolCallsStepResult(
        tool_calls=[ToolCall(id="a", name="t"), ToolCall(id="a", name="t")],
    )
    out, _ = unique_call_ids(reply, {taken}, "run-1:2")
    assert isinstance(out, ToolCallsStepResult)
    assert out.tool_calls[1].id == helix_call_id("run-1:2", 1, attempt=1) != taken
    # ...and one the same reply keeps is not given to another call of it either.
    reply = ToolCallsStepResult(
        tool_calls=[ToolCall(id="", name="t"), ToolCall(id=helix_call_id("s", 0), name="t")]
    )
    out, _ = unique_call_ids(reply, set(), "s")
    assert isinstance(out, ToolCallsStepResult)
    assert len({c.id for c in out.tool_calls}) == 2


def test_unique_ids_are_left_alone():
    reply = ToolCallsStepResult(tool_calls=[ToolCall(id="call_1", name="t")])
    assert unique_call_ids(reply, {"call_0"}, "s") == (reply, [])
    text_reply = TextStepResult(content="hi")
    assert unique_call_ids(text_reply, set(), "s") == (text_reply, [])
    history = [
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="t")]),
        Message(role="tool", tool_call_id="a", content="ok"),
        Message(role="tool", tool_call_id="orphan", content="ok"),
    ]
    assert transcript_call_ids(history) == {"a", "orphan"}


# --- through the Python API ------------------------------------------------------------


@pytest.mark.parametrize("harmless_first", [True, False])
async def test_two_gated_calls_under_one_id_are_two_approvals(
    helix, make_agent, mock_llm, files, harmless_first
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    harmless = ("dup", "delete_file", {"path": str(files["harmless"])})
    important = ("dup", "delete_file", {"path": str(files["important"])})
    pair = (harmless, important) if harmless_first else (important, harmless)
    mock_llm.add_responses(calls(*pair), text("done"), agent=agent.name)
    handle = await helix.execute(agent, "clean up")
    pending = await pending_calls(helix, handle.session_id, 2)

    assert len(pending) == 2 and len({p["tool_call_id"] for p in pending}) == 2
    card = by_path(pending, files["harmless"])
    other = by_path(pending, files["important"])
    assert card["tool_name"] == other["tool_name"] == "delete_file"
    assert "dup" in {card["tool_call_id"], other["tool_call_id"]}, "the first keeps its id"

    await helix.approve(handle.session_id, card["tool_call_id"])
    assert deleted == [] and files["important"].exists(), "one approval ran nothing else"
    await helix.deny(handle.session_id, other["tool_call_id"], reason="no")
    result = await handle.result()

    assert result.status == "completed"
    assert deleted == [str(files["harmless"])]
    assert files["important"].exists() and not files["harmless"].exists()
    assert_paired_for_the_provider(last_request(mock_llm, agent))


@pytest.mark.parametrize("gated_first", [True, False])
async def test_a_gated_and_a_plain_call_under_one_id(
    helix, make_agent, mock_llm, files, gated_first, database_url
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    plain = ("same", "echo", {"text": "hi"})
    gated = ("same", "delete_file", {"path": str(files["important"])})
    mock_llm.add_responses(
        calls(*((gated, plain) if gated_first else (plain, gated))), text("ok"), agent=agent.name
    )
    handle = await helix.execute(agent, "say hi")
    [card] = await pending_calls(helix, handle.session_id, 1)

    # The card shows the call that runs if approved, and nothing else.
    assert card["tool_name"] == "delete_file"
    assert card["input"] == {"path": str(files["important"])}
    rows = sql(
        database_url,
        "SELECT tool_call_id, tool_name, input FROM helix.tool_calls WHERE run_id = %s",
        handle.run_id,
    )
    assert rows == [(card["tool_call_id"], "delete_file", {"path": str(files["important"])})]

    await helix.deny(handle.session_id, card["tool_call_id"])
    result = await handle.result()
    assert result.status == "completed" and deleted == [] and files["important"].exists()
    transcript = last_request(mock_llm, agent)
    assert_paired_for_the_provider(transcript)
    results = {m.tool_name: m.content for m in transcript if m.role == "tool"}
    assert results["echo"] == "hi" and "not approved" in (results["delete_file"] or "")


async def test_an_id_reused_from_an_earlier_step_is_asked_about_again(
    helix, make_agent, mock_llm, files
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls(("r1", "delete_file", {"path": str(files["harmless"])})),
        calls(("r1", "delete_file", {"path": str(files["important"])})),
        text("done"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "clean up")
    [first] = await pending_calls(helix, handle.session_id, 1)
    assert first["tool_call_id"] == "r1"
    await helix.approve(handle.session_id, "r1")

    # The second step's call waits for its own answer, under an id of its own.
    for _ in range(400):
        pending = [p for p in await helix.pending_tool_calls(handle.session_id) if not p.answered]
        if pending:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the second call never waited for an answer")
    [second] = pending
    assert second.tool_call_id != "r1"
    assert second.input == {"path": str(files["important"])}
    await helix.deny(handle.session_id, second.tool_call_id)

    result = await handle.result()
    assert result.status == "completed"
    assert deleted == [str(files["harmless"])] and files["important"].exists()
    assert_paired_for_the_provider(last_request(mock_llm, agent))


@pytest.mark.parametrize("model_id", ["", LONG_ID], ids=["empty", "300-characters"])
async def test_an_empty_or_over_long_id_gets_an_answerable_one(
    helix, make_agent, mock_llm, files, model_id, caplog
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls((model_id, "delete_file", {"path": str(files["harmless"])})),
        text("done"),
        agent=agent.name,
    )
    with caplog.at_level(logging.INFO, logger="helix_dbos"):
        handle = await helix.execute(agent, "clean up")
        [card] = await pending_calls(helix, handle.session_id, 1)
    call_id = card["tool_call_id"]
    assert call_id.startswith(HELIX_ID_PREFIX) and is_safe_call_id(call_id)
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "tool_call.rekeyed"]
    assert event.tool_call_id == call_id and event.run_id == handle.run_id  # type: ignore[attr-defined]
    assert event.levelno == logging.INFO  # a format, not a clash

    await helix.approve(handle.session_id, call_id)
    assert (await handle.result()).status == "completed"
    assert deleted == [str(files["harmless"])]
    assert_paired_for_the_provider(last_request(mock_llm, agent))


async def test_a_recorded_id_is_never_recorded_again_for_another_call(
    helix, make_agent, mock_llm, files
):
    """Behind the unique ids, the store refuses a second, different call under a recorded
    id (the old upsert kept the first row and answered both), while a retried insert of
    the same call still finds its row."""
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls(("g1", "delete_file", {"path": str(files["harmless"])})),
        text("done"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "clean up")
    [card] = await pending_calls(helix, handle.session_id, 1)
    run = await helix.get_run(handle.run_id)

    async def record(path: Path, name: str = "delete_file") -> dict[str, float]:
        call = repo.PendingToolCall("g1", name, "approval", {"path": str(path)}, 60.0)

        async def insert() -> dict[str, float]:
            async with helix.runtime.engine.begin() as conn:
                return await repo.insert_pending_tool_calls(
                    conn, handle.session_id, handle.run_id, run.workflow_id, [call]
                )

        return await on_target_loop(insert)

    deadline = card["deadline_at"].timestamp()
    assert (await record(files["harmless"]))["g1"] == pytest.approx(deadline, abs=1e-3)
    with pytest.raises(repo.DuplicateToolCallIdError):
        await record(files["important"])
    with pytest.raises(repo.DuplicateToolCallIdError):
        await record(files["harmless"], name="echo")
    [card] = await helix.pending_tool_calls(handle.session_id)
    assert card.input == {"path": str(files["harmless"])}
    await helix.deny(handle.session_id, "g1")
    assert (await handle.result()).status == "completed" and deleted == []


# --- over HTTP -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        yield url


async def http_pending(client: httpx.AsyncClient, session_id: str, count: int) -> list[dict]:
    """The pending calls `/status` and the inbox's `/runs?status=waiting` list (the same)."""
    for _ in range(400):
        status = (await client.get("/status", params={"session_id": session_id})).json()
        pending = [p for p in status.get("pending_tool_calls", []) if not p["answered"]]
        if len(pending) >= count:
            runs = (await client.get("/runs", params={"status": "waiting"})).json()
            [run] = [r for r in runs if r["session_id"] == session_id]
            listed = {
                (c["tool_call_id"], c["tool_name"], str(c["input"])) for c in run["tool_calls"]
            }
            assert listed == {(p["tool_call_id"], p["tool_name"], str(p["input"])) for p in pending}
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"the run never waited on {count} unanswered call(s)")


async def answer(client: httpx.AsyncClient, session_id: str, call_id: str, approved: bool):
    return await client.post(
        "/submit-tool-result",
        json={
            "session_id": session_id,
            "tool_call_id": call_id,
            "kind": "approval-response",
            "approved": approved,
        },
    )


async def test_over_http_one_approve_runs_one_call(helix, base_url, make_agent, mock_llm, files):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls(
            ("dup", "delete_file", {"path": str(files["harmless"])}),
            ("dup", "delete_file", {"path": str(files["important"])}),
            ("", "echo", {"text": "hi"}),
        ),
        text("done"),
        agent=agent.name,
    )
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        started = await client.post("/start", json={"agent": agent.name, "input": "clean up"})
        session_id = started.json()["session_id"]
        pending = await http_pending(client, session_id, 2)
        card = by_path(pending, files["harmless"])
        other = by_path(pending, files["important"])
        assert card["tool_call_id"] != other["tool_call_id"]

        assert (await answer(client, session_id, card["tool_call_id"], True)).status_code == 200
        assert deleted == [] and files["important"].exists()
        assert (await answer(client, session_id, other["tool_call_id"], False)).status_code == 200
        for _ in range(400):
            status = (await client.get("/status", params={"session_id": session_id})).json()
            if status["last_run"]["status"] == "completed":
                break
            await asyncio.sleep(0.05)
        assert status["last_run"]["status"] == "completed"
    assert deleted == [str(files["harmless"])] and files["important"].exists()
    assert_paired_for_the_provider(last_request(mock_llm, agent))


@pytest.mark.parametrize("model_id", ["", LONG_ID], ids=["empty", "300-characters"])
async def test_over_http_an_empty_or_over_long_id_can_be_answered(
    helix, base_url, make_agent, mock_llm, files, model_id
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls((model_id, "delete_file", {"path": str(files["harmless"])})),
        text("done"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "clean up")
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        [card] = await http_pending(client, handle.session_id, 1)
        assert is_safe_call_id(card["tool_call_id"]), card["tool_call_id"]
        response = await answer(client, handle.session_id, card["tool_call_id"], True)
        assert response.status_code == 200, response.text
    assert (await handle.result()).status == "completed"
    assert deleted == [str(files["harmless"])]
    assert_paired_for_the_provider(last_request(mock_llm, agent))


# --- an answer is checked whole before it is applied (issue 35, item 6) ----------------


async def test_an_answer_with_a_bad_field_changes_nothing(
    helix, base_url, make_agent, mock_llm, files
):
    deleted: list[str] = []
    agent = make_agent(tools=file_tools(deleted))
    mock_llm.add_responses(
        calls(("a1", "delete_file", {"path": str(files["harmless"])})),
        text("done"),
        agent=agent.name,
    )
    handle = await helix.execute(agent, "clean up")
    sid = handle.session_id
    await pending_calls(helix, sid, 1)
    body = {"session_id": sid, "tool_call_id": "a1", "kind": "approval-response", "approved": True}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        refused = [
            await client.post("/submit-tool-result", json={**body, "answered_by": "x" * 300}),
            await client.post("/submit-tool-result", json={**body, "answered_by": "eve\u0000"}),
            await client.post("/submit-tool-result", json={**body, "reason": "r" * 1_010_000}),
        ]
        assert [r.status_code for r in refused] == [422, 422, 413], [r.text for r in refused]
        # Nothing was applied: the call still waits, unanswered, and nothing ran.
        await asyncio.sleep(0.5)
        [card] = await helix.pending_tool_calls(sid)
        assert card.tool_call_id == "a1" and not card.answered
        assert deleted == [] and files["harmless"].exists()
        # The Python API refuses a bad field the same way, before anything is sent.
        with pytest.raises(Exception, match="NUL"):
            await helix.approve(sid, "a1", reason="bad\u0000")
        [card] = await helix.pending_tool_calls(sid)
        assert not card.answered and deleted == []

        accepted = await client.post("/submit-tool-result", json={**body, "answered_by": "alice"})
        assert accepted.status_code == 200, accepted.text
    assert (await handle.result()).status == "completed"
    assert deleted == [str(files["harmless"])]


# --- in the inbox (headless Chromium) -------------------------------------------------


async def open_inbox(helix, make_agent, mock_llm, deleted: list[str], scripts: dict[str, dict]):
    """Start a run per script (each its own agent) and wait until each waits."""
    handles = {}
    for name, script in scripts.items():
        agent = make_agent(tools=file_tools(deleted))
        mock_llm.add_responses(script, text("done"), agent=agent.name)
        handles[name] = await helix.execute(agent, name)
        await pending_calls(helix, handles[name].session_id, 1)
    return handles


def inbox_call(page, handle, path: str):
    """The inbox entry showing the call with this `path` in the run's card."""
    card = page.locator(f'#waiting [data-run-id="{handle.run_id}"]')
    return card.locator(".call").filter(has_text=f'"path": "{path}"')


async def test_in_the_inbox_each_card_approves_the_call_it_shows(
    browser_page, helix, make_agent, mock_llm, files
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    deleted: list[str] = []
    harmless, important = str(files["harmless"]), str(files["important"])
    handles = await open_inbox(
        helix,
        make_agent,
        mock_llm,
        deleted,
        {
            "two gated": calls(
                ("dup", "delete_file", {"path": harmless}),
                ("dup", "delete_file", {"path": important}),
            ),
            "gated and plain": calls(
                ("same", "echo", {"text": "hi"}), ("same", "delete_file", {"path": important})
            ),
        },
    )
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        two = page.locator(f'#waiting [data-run-id="{handles["two gated"].run_id}"]')

        # Two gated calls under one id: two entries, each its own id and arguments.
        await expect(two.locator(".call")).to_have_count(2)
        ids = await two.locator(".call").evaluate_all(
            "nodes => nodes.map(n => n.dataset.toolCallId)"
        )
        assert len(set(ids)) == 2 and all(is_safe_call_id(i) for i in ids), ids
        approve = inbox_call(page, handles["two gated"], harmless)
        await approve.locator('[data-action="approve"]').click()
        await expect(approve.locator(".answered-note")).to_be_visible()
        assert deleted == [] and files["important"].exists(), "one Approve ran nothing else"
        await (
            inbox_call(page, handles["two gated"], important)
            .locator('[data-action="deny"]')
            .click()
        )
        assert (await handles["two gated"].result()).status == "completed"
        assert deleted == [harmless] and files["important"].exists()

        # A plain call and a gated one under one id: the card is the gated call, exactly.
        one = page.locator(f'#waiting [data-run-id="{handles["gated and plain"].run_id}"]')
        await expect(one.locator(".call")).to_have_count(1)
        await expect(one.locator(".call-title")).to_contain_text("delete_file")
        await expect(one.locator(".input")).to_have_text(f'{{\n  "path": "{important}"\n}}')
        await one.locator('[data-action="deny"]').click()
        assert (await handles["gated and plain"].result()).status == "completed"
        assert deleted == [harmless] and files["important"].exists()

    assert errors == [], errors


async def test_in_the_inbox_an_empty_or_over_long_id_is_answered_with_a_click(
    browser_page, helix, make_agent, mock_llm, files
):
    page, errors = browser_page
    deleted: list[str] = []
    paths = {"300 characters": str(files["harmless"]), "empty": str(files["important"])}
    handles = await open_inbox(
        helix,
        make_agent,
        mock_llm,
        deleted,
        {
            "300 characters": calls((LONG_ID, "delete_file", {"path": paths["300 characters"]})),
            "empty": calls(("", "delete_file", {"path": paths["empty"]})),
        },
    )
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        await page.goto(f"{url}/inbox")
        for name, path in paths.items():
            node = inbox_call(page, handles[name], path)
            call_id = await node.get_attribute("data-tool-call-id")
            await node.locator('[data-action="approve"]').click()
            # Answered (a refused answer leaves the run waiting for days).
            result = await asyncio.wait_for(handles[name].result(), timeout=60)
            assert result.status == "completed"
            assert call_id is not None and is_safe_call_id(call_id), call_id
        assert deleted == list(paths.values())

    assert errors == [], errors
