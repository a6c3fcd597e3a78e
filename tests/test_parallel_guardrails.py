"""Input guardrails that run in parallel with the first model call (issue 50): the
check and the first LLM step run at once, and the reply is acted on (tools, final
write) only after every such check passed; a tripwire discards it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import forkserver
import pytest
from helpers import lines, sql, wait_for

from helix_dbos import Agent, AgentDefinitionError, GuardrailResult, input_guardrail, tool
from helix_dbos.orchestration.guardrails import InputGuardrail, runs_in_parallel


def asked(mock_llm, agent: Agent) -> int:
    return sum(1 for r in mock_llm.inputs if r.agent_name == agent.name)


def steps(database_url: str, run_id: str) -> list[str]:
    return [
        name
        for (name,) in sql(
            database_url,
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = "
            "(SELECT workflow_id FROM helix.runs WHERE run_id = %s) ORDER BY function_id",
            run_id,
        )
    ]


def after_the_model_call(mock_llm, tripwire: bool):
    """A check that decides only once the model was asked: it can end only if it runs
    alongside the first LLM step (run before it, it would give up and say so)."""
    before = len(mock_llm.inputs)  # the session's MockLLM: tests run one at a time

    async def moderated(text: str) -> GuardrailResult:
        deadline = time.monotonic() + 30
        while len(mock_llm.inputs) == before:
            if time.monotonic() > deadline:
                return GuardrailResult(tripwire=True, reason="the model was never asked")
            await asyncio.sleep(0.01)
        return GuardrailResult(tripwire=tripwire, reason="off topic")

    return moderated


def screened(text: str) -> GuardrailResult:
    return GuardrailResult(tripwire=False)


def test_input_guardrail_declares_a_parallel_check():
    parallel = input_guardrail(screened, run_in_parallel=True)
    assert isinstance(parallel, InputGuardrail) and parallel.__name__ == "screened"
    assert runs_in_parallel(parallel) and not runs_in_parallel(screened)
    assert not runs_in_parallel(input_guardrail(screened))

    @input_guardrail(run_in_parallel=True)
    async def decorated(text: str) -> GuardrailResult:
        return GuardrailResult(tripwire=False)

    assert runs_in_parallel(decorated) and decorated.__name__ == "decorated"
    agent = Agent("a", input_guardrails=[screened, decorated])
    assert [g.__name__ for g in agent.input_guardrails] == ["screened", "decorated"]
    with pytest.raises(TypeError):
        input_guardrail("not callable", run_in_parallel=True)  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="only input guardrails run in parallel"):
        Agent("b", output_guardrails=[decorated])


async def test_a_tripwire_during_the_parallel_first_call_discards_the_reply(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("x")
        return "done"

    guard = input_guardrail(after_the_model_call(mock_llm, True), run_in_parallel=True)
    agent = make_agent(tools=[act], input_guardrails=[guard])
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "a", "name": "act", "arguments": {}}],
            "usage": {"input_tokens": 7, "output_tokens": 3},
        },
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "talk about football")).result()
    assert (result.status, result.stop_reason) == ("failed", "guardrail"), result.error
    assert result.error == "Guardrail 'moderated' (input) tripped: off topic"
    assert asked(mock_llm, agent) == 1, "the model was called, alongside the check"
    assert ran == [], "no tool runs before the guardrails passed"
    messages = await helix.get_run_messages(result.run_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert str(messages[-1].content).startswith("[guardrail tripped] ")
    assert steps(database_url, result.run_id) == ["helix.guardrail:input:moderated", "helix.llm"]
    # The discarded call is still counted.
    [(kind, tokens)] = sql(
        database_url,
        "SELECT kind, input_tokens + output_tokens FROM helix.usage WHERE run_id = %s",
        result.run_id,
    )
    assert (kind, tokens) == ("llm", 10)


async def test_a_tripwire_discards_a_final_text_reply(helix, make_agent, mock_llm, database_url):
    """A reply that would complete the run at once is not written either."""
    guard = input_guardrail(after_the_model_call(mock_llm, True), run_in_parallel=True)
    agent = make_agent(input_guardrails=[guard])
    mock_llm.add_response({"type": "text", "content": "the answer"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    assert (result.status, result.stop_reason, result.output) == ("failed", "guardrail", None)
    contents = [str(m.content) for m in await helix.get_run_messages(result.run_id)]
    assert "the answer" not in contents and len(contents) == 2


async def test_a_passing_parallel_guardrail_then_the_tools_run(
    helix, make_agent, mock_llm, database_url
):
    ran: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        ran.append("x")
        return "done"

    guard = input_guardrail(after_the_model_call(mock_llm, False), run_in_parallel=True)
    agent = make_agent(tools=[act], input_guardrails=[screened, guard])
    mock_llm.add_response(
        {"type": "tool_calls", "tool_calls": [{"id": "a", "name": "act", "arguments": {}}]},
        agent=agent.name,
    )
    mock_llm.add_response({"type": "text", "content": "acted"}, agent=agent.name)
    result = await (await helix.execute(agent, "act now")).result()
    assert (result.status, result.output) == ("completed", "acted"), result.error
    assert ran == ["x"]
    assert steps(database_url, result.run_id) == [
        "helix.guardrail:input:screened",  # a blocking one, before the model call
        "helix.guardrail:input:moderated",  # reserved first, ran alongside the call
        "helix.llm",
        "helix.tool:act",
        "helix.llm",
    ]


# --- a crash while the parallel check still runs ------------------------------------------

CRASH_APP = Path(__file__).parent / "apps" / "parallel_guard_crash_app.py"


def spawn(mode: str, database_url: str, executor: str, markers: Path, *extra: str):
    return forkserver.Popen(
        [sys.executable, str(CRASH_APP), mode, database_url, executor, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.crash
def test_kill_while_the_parallel_guardrail_runs_after_the_llm_step(database_url, tmp_path):
    """SIGKILL once the LLM step is checkpointed and the check is still running; after
    the relaunch the model is not asked again, the check decides once (a tripwire), and
    the tool the reply asked for never runs."""
    executor = f"pguard-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path)
    assert proc.stdout is not None
    run_id = json.loads(proc.stdout.readline())["run_id"]
    wait_for(lambda: (tmp_path / "in_guard").exists())
    wait_for(lambda: "helix.llm" in steps(database_url, run_id))
    assert "helix.guardrail:input:moderated" not in steps(database_url, run_id)
    proc.kill()
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, run_id)
    out, _ = relaunched.communicate(timeout=150)
    assert relaunched.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome == {
        "status": "failed",
        "error": "Guardrail 'moderated' (input) tripped: decided after the relaunch",
        "stop_reason": "guardrail",
    }
    assert lines(tmp_path, "llm.log") == ["1"], "the model was asked once, before the kill"
    assert lines(tmp_path, "tool.log") == [], "the reply's tool never ran"
    assert lines(tmp_path, "guardrail.log") == ["start", "recover"]
    assert steps(database_url, run_id) == ["helix.guardrail:input:moderated", "helix.llm"]
