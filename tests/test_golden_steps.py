"""Golden step sequences (issue 45): each helix workflow, in each scenario below, records
the operations its fixture in tests/golden/ lists, in that order.

A run in flight is replayed after an upgrade against what it recorded; a change here
without a named patch strands it. On a mismatch the failure says what to do; after
putting a change behind a patch, regenerate with `HELIX_UPDATE_GOLDEN=1 pytest
tests/test_golden_steps.py` and commit the fixtures with the change.

Each scenario runs fresh on the session's HelixDBOS (the LLM scripted per agent); the
recorder walks the workflow tree from the scenario's roots (children in the order their
parent recorded them), and names per test (agents, tools) are replaced by roles.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS
from golden_steps import check, record
from helpers import (
    approval_gated_delete,
    calls,
    client_confirm,
    park_waiting_runs,
    pending_calls,
    sql,
    wait_for,
)
from live_server import serve
from schedule_support import firings_run_here  # noqa: F401 - autouse fixture

from helix_dbos import (
    Agent,
    AgentHooks,
    BinaryContent,
    GuardrailResult,
    HelixDBOS,
    HistoryPolicy,
    LLMConfig,
    MockLLM,
    PersistentAgent,
    Summarize,
    input_guardrail,
    remote_sub_agent_tool,
    sub_agent_tool,
    tool,
)
from helix_dbos.llm import LLMProviderError
from helix_dbos.llm.providers import register_provider, unregister_provider
from helix_dbos.runtime.process import model_limits
from helix_dbos.runtime.sessions.session_queue import QueuedRunHandle
from helix_dbos.server import create_app

SLOT_MODEL = "mock:golden-slot"


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


@tool
def lookup(topic: str) -> str:
    """Completes at once."""
    return f"about {topic}"


class Gate:
    """A tool that holds its run live until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

        @tool
        def gate() -> str:
            """Wait until released."""
            self.entered.set()
            self.release.wait(60)
            return "opened"

        self.tool = gate

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30), "the run never reached its gate"


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.release.set()


def workflow_of(database_url: str, run_id: str) -> str:
    [(workflow_id,)] = sql(
        database_url, "SELECT workflow_id FROM helix.runs WHERE run_id = %s", run_id
    )
    return str(workflow_id)


def roles(*agents: Agent, **more: str) -> dict[str, str]:
    """Per-test names -> roles: agents by their order (agent, child, ...) unless named."""
    default = ["agent", "child", "grandchild"]
    found = {a.name: default[i] for i, a in enumerate(agents)}
    return found | {v: k for k, v in more.items()}


async def test_plain_run(helix, make_agent, mock_llm, database_url):
    agent = make_agent()
    mock_llm.add_responses(text("hello"), agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("plain_run", await record(database_url, roots, roles(agent)))


async def test_summarized_turn(helix, make_agent, mock_llm, database_url):
    """Context compaction (docs/context.md): a turn whose input is over budget with an
    agent that summarises takes `helix.summary` between two `helix.llm` steps; only then."""
    agent = make_agent(history=HistoryPolicy(steps=(Summarize(),), max_input_tokens=50))
    mock_llm.add_responses(text("hello"), text("a summary"), text("hello again"), agent=agent.name)
    first = await (await helix.execute(agent, "x" * 100)).result()
    result = await (await helix.execute(agent, "y" * 100, session_id=first.session_id)).result()
    assert result.status == "completed"
    assert sql(
        database_url, "SELECT text FROM helix.summaries WHERE session_id = %s", first.session_id
    ) == [("a summary",)]
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("summarized_turn", await record(database_url, roots, roles(agent)))


async def test_tool_run(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=[lookup])
    mock_llm.add_responses(
        calls(("t1", "lookup", {"topic": "owls"}), ("t2", "lookup", {"topic": "bats"})),
        text("done"),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "look up")).result()
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("tool_run", await record(database_url, roots, roles(agent)))


@tool
def snapshot() -> list[object]:
    """A caption and an image (content parts, issue 49)."""
    return ["a chart", BinaryContent(data=b"\x89PNG golden", media_type="image/png")]


async def test_content_parts(helix, make_agent, mock_llm, database_url):
    """A PDF in the input and an image from a tool checkpoint the steps of a plain tool run:
    the bytes go to helix.blobs, never into a step of their own."""
    agent = make_agent(tools=[snapshot])
    mock_llm.add_responses(calls(("s1", "snapshot", {})), text("done"), agent=agent.name)
    pdf = BinaryContent(data=b"%PDF-1.4 golden", media_type="application/pdf")
    result = await (await helix.execute(agent, ["read", pdf])).result()
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("content_parts", await record(database_url, roots, roles(agent)))


def _gated(make_agent: Callable[..., Agent], mock_llm: MockLLM, ran: list[str]) -> Agent:
    agent = make_agent(tools=[approval_gated_delete(ran)])
    mock_llm.add_responses(
        calls(("d1", "delete_file", {"path": "/tmp/x"})), text("done"), agent=agent.name
    )
    return agent


async def test_approval_answered(helix, make_agent, mock_llm, database_url):
    ran: list[str] = []
    agent = _gated(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)
    await helix.approve(handle.session_id, "d1")
    assert (await handle.result()).status == "completed" and ran == ["/tmp/x"]
    roots = {"run": workflow_of(database_url, handle.run_id)}
    check("approval_answered", await record(database_url, roots, roles(agent)))


async def test_parked_wait_resumed(helix: HelixDBOS, make_agent, mock_llm, database_url):
    ran: list[str] = []
    agent = _gated(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)
    await park_waiting_runs(helix)
    await helix.approve(handle.session_id, "d1")
    assert (await handle.result()).status == "completed" and ran == ["/tmp/x"]
    roots = {"run": workflow_of(database_url, handle.run_id)}
    check("parked_wait_resumed", await record(database_url, roots, roles(agent)))


async def test_sub_agent_call(helix, make_agent, mock_llm, database_url):
    child = make_agent(tools=[lookup])
    parent = make_agent(tools=[sub_agent_tool(child)])
    mock_llm.add_responses(
        calls(("s1", f"subagent__{child.name}", {"message": "owls"})),
        text("parent done"),
        agent=parent.name,
    )
    mock_llm.add_responses(
        calls(("l1", "lookup", {"topic": "owls"})), text("child done"), agent=child.name
    )
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("sub_agent_call", await record(database_url, roots, roles(parent, child)))


async def test_companion(helix, make_agent, mock_llm, database_url):
    critic = make_agent()
    writer = make_agent(persistent_agents=[PersistentAgent(critic)])
    mock_llm.add_responses(
        calls(("c1", "companion__spawnAgent", {"agentType": critic.name, "message": "draft 1"})),
        calls(("c2", "companion__sendMessage", {"name": f"{critic.name}-1", "message": "draft 2"})),
        text("published"),
        agent=writer.name,
    )
    mock_llm.add_responses(text("too long"), text("better"), agent=critic.name)
    result = await (await helix.execute(writer, "write")).result()
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("companion", await record(database_url, roots, roles(writer, critic)))


async def test_remote_child(helix, make_agent, mock_llm, database_url):
    worker = make_agent(tools=[lookup])
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        lead = make_agent(tools=[remote_sub_agent_tool(url, worker.name, auth=None, name="remote")])
        mock_llm.add_responses(
            calls(("r1", "subagent__remote", {"message": "owls"})),
            text("lead done"),
            agent=lead.name,
        )
        mock_llm.add_responses(
            calls(("l1", "lookup", {"topic": "owls"})), text("worker done"), agent=worker.name
        )
        result = await (await helix.execute(lead, "delegate")).result()
    assert result.status == "completed", result.error
    [(remote_run,)] = sql(
        database_url,
        "SELECT remote_run_id FROM helix.remote_children WHERE parent_session_id = %s",
        result.session_id,
    )
    roots = {
        "run": workflow_of(database_url, result.run_id),
        "remote": workflow_of(database_url, remote_run),
    }
    check("remote_child", await record(database_url, roots, roles(lead, worker)))


async def test_scheduled_firing(helix, make_agent, mock_llm, database_url):
    agent = make_agent()
    mock_llm.add_responses(text("tock"), agent=agent.name)
    name = f"{agent.name}-golden"
    await helix.schedules.create(
        agent, "0 0 1 1 *", input="tick", name=name
    )  # fires only when told
    try:
        firing_id = await helix.schedules.trigger(name)
        wait_for(
            lambda: (
                sql(
                    database_url,
                    "SELECT r.status FROM helix.schedule_firings f JOIN helix.runs r USING (run_id) "
                    "WHERE f.firing_id = %s",
                    firing_id,
                )
                == [("completed",)]
            )
        )
    finally:
        await helix.schedules.delete(name)
    roots = {"firing": firing_id}
    check("scheduled_firing", await record(database_url, roots, roles(agent, schedule=name)))


@pytest.fixture
def slot_queue(helix: HelixDBOS) -> Iterator[None]:
    """The model queue goes with the test (the session's process would poll it)."""
    yield
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        thread.submit(DBOS.delete_queue, model_limits.model_queue(SLOT_MODEL)).result()


async def test_model_slot_wait(helix, make_agent, mock_llm, database_url, slot_queue):
    entered, release = threading.Event(), threading.Event()

    async def hold(event: Any) -> None:  # the first run's call holds the only slot
        if event.context.run_id == first.run_id:
            entered.set()
            await asyncio.to_thread(release.wait, 60)

    agent = make_agent(
        llm=LLMConfig(model=SLOT_MODEL, max_concurrent=1), hooks=AgentHooks(before_llm_call=hold)
    )
    mock_llm.add_responses(text("one"), text("two"), agent=agent.name)
    first = await helix.execute(agent, "first")
    await asyncio.to_thread(entered.wait, 60)
    second = await helix.execute(agent, "second")
    wait_for(
        lambda: (
            sql(database_url, "SELECT queued_for FROM helix.runs WHERE run_id = %s", second.run_id)
            == [(model_limits.model_queue(SLOT_MODEL),)]
        )
    )
    release.set()
    assert [(await h.result()).status for h in (first, second)] == ["completed"] * 2
    roots = {"waited": workflow_of(database_url, second.run_id)}
    check("model_slot_wait", await record(database_url, roots, roles(agent)))


async def test_queued_double_text(helix, make_agent, mock_llm, database_url, gate):
    agent = make_agent(tools=[gate.tool])
    mock_llm.add_responses(
        calls(("g", "gate", {})), text("first done"), text("second done"), agent=agent.name
    )
    first = await helix.execute(agent, "hold")
    await gate.wait_entered()
    second = await helix.execute(
        agent, "two", session_id=first.session_id, multitask_strategy="enqueue"
    )
    assert isinstance(second, QueuedRunHandle)
    gate.release.set()
    assert [(await h.result()).status for h in (first, second)] == ["completed"] * 2
    roots = {"run": workflow_of(database_url, first.run_id), "queued": second.workflow_id}
    check("queued_double_text", await record(database_url, roots, roles(agent)))


async def test_interrupt(helix, make_agent, mock_llm, database_url, gate):
    agent = make_agent(tools=[gate.tool])
    mock_llm.add_responses(calls(("g", "gate", {})), text("never"), agent=agent.name)
    handle = await helix.execute(agent, "hold")
    await gate.wait_entered()
    await helix.interrupt(handle.session_id, reason="stop")
    gate.release.set()
    assert (await handle.result()).status == "interrupted"
    roots = {"run": workflow_of(database_url, handle.run_id)}
    check("interrupt", await record(database_url, roots, roles(agent)))


async def _in_its_wait(database_url: str, workflow_id: str) -> None:
    """Until the run has recorded an operation after the one that stored its pending call
    (its `recv` records its deadline before it waits): an abort sooner would cut the
    sequence at a point that depends on timing. Gives up after 10 s, and the comparison
    shows what was recorded."""
    for _ in range(200):
        names = [
            r[0]
            for r in sql(
                database_url,
                "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s "
                "ORDER BY function_id",
                workflow_id,
            )
        ]
        if "helix.suspend" in names and names[-1] != "helix.suspend":
            return
        await asyncio.sleep(0.05)


async def test_abort_while_waiting(helix, make_agent, mock_llm, database_url):
    ran: list[str] = []
    agent = _gated(make_agent, mock_llm, ran)
    handle = await helix.execute(agent, "delete it")
    await pending_calls(helix, handle.session_id)
    await _in_its_wait(database_url, workflow_of(database_url, handle.run_id))
    await helix.abort(handle.session_id, reason="stop")
    assert (await handle.result()).status == "aborted" and ran == []
    roots = {"run": workflow_of(database_url, handle.run_id)}
    check("abort_while_waiting", await record(database_url, roots, roles(agent)))


def test_a_changed_sequence_fails_with_the_fix(tmp_path, monkeypatch):
    """The failure names the fix: a patch, the old branch kept, the regeneration."""
    import golden_steps  # noqa: PLC0415

    monkeypatch.setattr(golden_steps, "GOLDEN_DIR", tmp_path)
    monkeypatch.delenv(golden_steps.UPDATE_ENV, raising=False)
    old = [golden_steps.RecordedWorkflow("run", "helix.agent_run", ["helix.llm", "a"])]
    new = [golden_steps.RecordedWorkflow("run", "helix.agent_run", ["helix.llm", "b", "a"])]
    (tmp_path / "s.json").write_text(
        json.dumps({"scenario": "s", "workflows": [vars(w) for w in old]})
    )
    check("s", old)
    with pytest.raises(AssertionError) as failed:
        check("s", new)
    message = str(failed.value)
    assert "step sequence of scenario 's' changed" in message
    assert "named patch" in message and "docs/upgrading.md" in message
    assert "keep the old branch" in message and "HELIX_UPDATE_GOLDEN=1" in message


class _Down:
    """A provider whose every call is overloaded: the agent's fallback answers."""

    async def generate_step(self, request: Any, on_text_delta: Any = None) -> Any:
        raise LLMProviderError("529 overloaded_error: Overloaded", retryable=True)


async def test_fallback_answered(helix, make_agent, mock_llm, database_url):
    """A fallback model answers inside the one `helix.llm` step: the same sequence as
    `tool_run`, whose agent has no fallback."""
    register_provider("golden-down", lambda model, **_: _Down())
    try:
        agent = make_agent(
            tools=[lookup],
            llm=LLMConfig(
                model="golden-down:primary",
                fallback=["mock"],
                max_attempts=2,
                retry_interval_seconds=0,
            ),
        )
        mock_llm.add_responses(
            calls(("t1", "lookup", {"topic": "owls"}), ("t2", "lookup", {"topic": "bats"})),
            text("done"),
            agent=agent.name,
        )
        result = await (await helix.execute(agent, "look up")).result()
    finally:
        unregister_provider("golden-down")
    assert result.status == "completed" and result.output == "done"
    roots = {"run": workflow_of(database_url, result.run_id)}
    recorded = await record(database_url, roots, roles(agent))
    check("fallback_answered", recorded)
    tool_run = json.loads((Path(__file__).parent / "golden" / "tool_run.json").read_text())
    assert [asdict(w) for w in recorded] == tool_run["workflows"]


async def test_handoff(helix, make_agent, mock_llm, database_url):
    """A handoff (issue 50): the run reads the session's current agent once, the handoff
    call is answered in workflow code and its row written by one transaction, and the
    target's model call follows in the same workflow. Only agents with handoffs take the
    two new steps."""
    target = make_agent()
    agent = make_agent(tools=[lookup], handoffs=[target])
    mock_llm.add_responses(
        calls(("t1", "lookup", {"topic": "owls"}), ("h1", f"transfer_to_{target.name}", {})),
        agent=agent.name,
    )
    mock_llm.add_responses(text("done"), agent=target.name)
    result = await (await helix.execute(agent, "look up")).result()
    assert result.status == "completed" and result.output == "done"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("handoff", await record(database_url, roots, roles(agent, target)))


def screened(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire=False)


@input_guardrail(run_in_parallel=True)
async def moderated(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire=False)


async def test_parallel_guardrail(helix, make_agent, mock_llm, database_url):
    """An input guardrail that runs in parallel (issue 50): a blocking one's step first,
    then the parallel one's, reserved before the first `helix.llm` and run alongside it;
    then `tool_run`'s sequence. Only agents with a parallel guardrail reserve it there."""
    agent = make_agent(tools=[lookup], input_guardrails=[screened, moderated])
    mock_llm.add_responses(
        calls(("t1", "lookup", {"topic": "owls"}), ("t2", "lookup", {"topic": "bats"})),
        text("done"),
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "look up")).result()
    assert result.status == "completed" and result.output == "done"
    roots = {"run": workflow_of(database_url, result.run_id)}
    check("parallel_guardrail", await record(database_url, roots, roles(agent)))


async def test_client_call_timed_out(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=[client_confirm(0.5)])
    mock_llm.add_responses(
        calls(("c1", "confirm", {"question": "sure?"})), text("done"), agent=agent.name
    )
    handle = await helix.execute(agent, "ask")
    result = await handle.result()  # nobody answers: the call times out
    assert result.status == "completed"
    roots = {"run": workflow_of(database_url, handle.run_id)}
    check("client_call_timed_out", await record(database_url, roots, roles(agent)))
