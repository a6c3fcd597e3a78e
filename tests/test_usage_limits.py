"""Usage limits over a run's tree (issue 50): checked before each model call against
`helix.usage`, so a sub-agent's calls count against its parent's budget; reaching one
fails the run with `stop_reason="usage_limit"`, and a tool already called runs whole."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import forkserver
import httpx
import pytest
from helpers import lines, sql, wait_for
from live_server import serve
from test_cli import helix_dbos

from helix_dbos import (
    Agent,
    AgentDefinitionError,
    UsageLimitExceeded,
    UsageLimits,
    sub_agent_tool,
    tool,
)
from helix_dbos.client import AsyncHelixClient
from helix_dbos.errors import InvalidInputError
from helix_dbos.orchestration.usage_limits import TreeUsage, breach
from helix_dbos.server import create_app

GPT4O = "gpt-4o-2024-08-06"


def usage(input_tokens: int, output_tokens: int = 10) -> dict:
    return {"model": GPT4O, "input_tokens": input_tokens, "output_tokens": output_tokens}


def call(call_id: str, name: str, arguments: dict, tokens: int = 100) -> dict:
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
        "usage": usage(tokens),
    }


def asked(mock_llm, agent: Agent) -> int:
    """How many model calls this agent made (the session's MockLLM serves every test)."""
    return sum(1 for r in mock_llm.inputs if r.agent_name == agent.name)


def text(content: str, tokens: int = 100) -> dict:
    return {"type": "text", "content": content, "usage": usage(tokens)}


# --- the rules, without a database ------------------------------------------------------


def test_a_request_limit_is_reached_when_as_many_calls_were_made():
    limits = UsageLimits(requests=2)
    assert breach(limits, TreeUsage(requests=1)) is None
    reached = breach(limits, TreeUsage(requests=2))
    assert reached is not None and reached.limit == "requests"
    assert reached.message == "Usage limit exceeded: requests limit 2, used 2"


def test_token_and_cost_limits_are_reached_when_used_up():
    used = TreeUsage(3, input_tokens=900, output_tokens=150, cost_usd=Decimal("0.0125"))
    assert breach(UsageLimits(input_tokens=901, total_tokens=1051, cost_usd=0.02), used) is None
    total = breach(UsageLimits(input_tokens=5000, total_tokens=1050), used)
    assert total is not None and (total.limit, total.used) == ("total_tokens", 1050)
    cost = breach(UsageLimits(cost_usd=0.01), used)
    assert cost is not None and cost.limit == "cost_usd"
    assert cost.message == "Usage limit exceeded: cost_usd limit 0.01, used 0.0125"


@pytest.mark.parametrize(
    "bad",
    [{"requests": -1}, {"input_tokens": 1.5}, {"cost_usd": float("nan")}, {"requests": True}],
)
def test_bad_limits_are_refused(bad):
    with pytest.raises(ValueError, match="UsageLimits"):
        UsageLimits(**bad)
    with pytest.raises(ValueError, match="unknown"):
        UsageLimits.from_json({"tokens": 5})


def test_an_agent_takes_usage_limits_only():
    with pytest.raises(AgentDefinitionError, match="usage_limits"):
        Agent("a", usage_limits={"requests": 1})  # type: ignore[arg-type]


# --- runs -------------------------------------------------------------------------------


async def test_a_request_limit_ends_the_run_after_its_tools_ran_whole(
    helix, make_agent, mock_llm, database_url
):
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Count a call."""
        ran.append(n)
        return n

    agent = make_agent(tools=[count], usage_limits=UsageLimits(requests=2))
    for i in range(3):
        mock_llm.add_response(call(f"c{i}", "count", {"n": i}), agent=agent.name)
    mock_llm.add_response(text("never asked"), agent=agent.name)
    handle = await helix.execute(agent, "count")
    result = await handle.result()
    assert result.status == "failed" and result.stop_reason == "usage_limit"
    assert result.error == "Usage limit exceeded: requests limit 2, used 2"
    assert ran == [0, 1], "the second call's tool ran whole, the third call never happened"
    assert asked(mock_llm, agent) == 2
    with pytest.raises(UsageLimitExceeded, match="requests limit 2"):
        result.raise_for_stop()
    [(status, stop, error)] = sql(
        database_url,
        "SELECT status, stop_reason, error FROM helix.runs WHERE run_id = %s",
        result.run_id,
    )
    assert (status, stop) == ("failed", "usage_limit") and "used 2" in error
    # Every tool call has its result in the transcript: nothing is left unanswered.
    [(calls, results)] = sql(
        database_url,
        "SELECT count(*) FILTER (WHERE role = 'assistant'), count(*) FILTER (WHERE role = "
        "'tool') FROM helix.messages WHERE session_id = %s",
        result.session_id,
    )
    assert (calls, results) == (2, 2)
    assert (await helix.get_run(result.run_id)).status == "failed"


async def test_a_sub_agent_consuming_the_budget_stops_its_parent(
    helix, make_agent, mock_llm, database_url
):
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child)], usage_limits=UsageLimits(total_tokens=3_000))
    mock_llm.add_response(
        call("s1", f"subagent__{child.name}", {"message": "go"}, tokens=500), agent=parent.name
    )
    # The child's one call takes the tree past the parent's budget.
    mock_llm.add_response(text("child done", tokens=4_000), agent=child.name)
    mock_llm.add_response(text("parent never asked again"), agent=parent.name)
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.status == "failed" and result.stop_reason == "usage_limit", result.error
    assert result.error == "Usage limit exceeded: total_tokens limit 3000, used 4520"
    assert asked(mock_llm, parent) == 1, "the parent was not asked after its child's call"
    assert asked(mock_llm, child) == 1
    [(child_status,)] = sql(
        database_url,
        "SELECT r.status FROM helix.runs r JOIN helix.sessions s USING (session_id) "
        "WHERE s.parent_session_id = %s",
        result.session_id,
    )
    assert child_status == "completed", "the child's own call was not cut"


async def test_an_execute_cost_limit_counts_only_this_run(helix, make_agent, mock_llm):
    agent = make_agent(tools=[])
    mock_llm.add_response(text("first turn", tokens=50_000), agent=agent.name)
    first = await (await helix.execute(agent, "hi")).result()
    assert first.status == "completed"
    # A new turn of the same session: the first turn's cost is not this run's.
    mock_llm.add_response(text("second turn", tokens=50_000), agent=agent.name)
    second = await (
        await helix.execute(
            agent, "again", session_id=first.session_id, usage_limits=UsageLimits(cost_usd=0.1)
        )
    ).result()
    assert second.status == "completed", second.error
    # A run whose budget is spent before it starts is refused its first model call.
    third = await (
        await helix.execute(
            agent, "more", session_id=first.session_id, usage_limits=UsageLimits(cost_usd=0)
        )
    ).result()
    assert third.status == "failed" and third.stop_reason == "usage_limit"
    assert third.error == "Usage limit exceeded: cost_usd limit 0, used 0"
    assert asked(mock_llm, agent) == 2


async def test_execute_refuses_limits_that_are_not_usage_limits(helix, make_agent):
    agent = make_agent()
    with pytest.raises(InvalidInputError, match="usage_limits"):
        await helix.execute(agent, "hi", usage_limits={"requests": 1})  # type: ignore[arg-type]


# --- over HTTP and the CLI --------------------------------------------------------------


async def test_the_python_client_starts_a_run_with_usage_limits(helix, make_agent, mock_llm):
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    agent = make_agent(tools=[ping])
    mock_llm.add_response(call("c1", "ping", {}), agent=agent.name)
    mock_llm.add_response(text("never asked"), agent=agent.name)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with AsyncHelixClient(url) as client:
            started = await client.start(agent.name, "ping", usage_limits=UsageLimits(requests=1))
            result = await (await helix.get_handle(started.run_id)).result()
            assert (result.status, result.stop_reason) == ("failed", "usage_limit")
            last = (await client.status(result.session_id)).last_run
            assert last is not None and last.stop_reason == "usage_limit"
    assert asked(mock_llm, agent) == 1


async def test_usage_limits_over_http_and_the_cli(helix, make_agent, mock_llm, database_url):
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    agent = make_agent(tools=[ping])
    mock_llm.add_response(call("p1", "ping", {}), agent=agent.name)
    mock_llm.add_response(text("never asked"), agent=agent.name)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            for bad in ({"requests": -1}, {"cost_usd": "lots"}, {"tokens": 5}):
                refused = await client.post(
                    "/start", json={"agent": agent.name, "input": "x", "usage_limits": bad}
                )
                assert refused.status_code == 422, refused.text
            started = await client.post(
                "/start",
                json={"agent": agent.name, "input": "ping", "usage_limits": {"requests": 1}},
            )
            assert started.status_code == 200, started.text
            run_id = started.json()["run_id"]
            result = await (await helix.get_handle(run_id)).result()
            assert result.stop_reason == "usage_limit"
            status = await client.get("/status", params={"session_id": result.session_id})
            last = status.json()["last_run"]
            assert (last["status"], last["stop_reason"]) == ("failed", "usage_limit")
            assert last["error"] == "Usage limit exceeded: requests limit 1, used 1"
            runs = await client.get("/runs", params={"session_id": result.session_id})
            [row] = runs.json()
            assert row["stop_reason"] == "usage_limit"
    assert asked(mock_llm, agent) == 1
    [(options,)] = sql(database_url, "SELECT options FROM helix.runs WHERE run_id = %s", run_id)
    assert options["usage_limits"] == {"requests": 1}
    shown = await helix_dbos(database_url, "runs", "--session", result.session_id)
    assert shown.returncode == 0, shown.stderr
    assert "usage_limit: Usage limit exceeded" in shown.stdout.replace("\n", " ")


# --- a crash while a child runs ---------------------------------------------------------

CRASH_APP = Path(__file__).parent / "apps" / "controls_crash_app.py"


def spawn(mode: str, database_url: str, executor: str, markers: Path, *extra: str):
    return forkserver.Popen(
        [sys.executable, str(CRASH_APP), mode, database_url, executor, str(markers), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.crash
def test_kill_while_a_child_spends_the_budget_then_the_parent_stops_once(database_url, tmp_path):
    """The limit is reached while the child runs; SIGKILL then; after the relaunch the
    child finishes its tool call (no tool cut), stops at its parent's limit before its
    next model call, and the parent ends `usage_limit` before its own, each exactly
    once. The parent's input guardrail, which passed before the kill, is not run again."""
    executor = f"usage-crash-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database_url, executor, tmp_path)
    assert proc.stdout is not None
    started = json.loads(proc.stdout.readline())
    run_id, session_id = started["run_id"], started["session_id"]
    wait_for(lambda: (tmp_path / "in_slow").exists())
    proc.kill()
    proc.wait(timeout=30)

    relaunched = spawn("recover", database_url, executor, tmp_path, run_id)
    out, _ = relaunched.communicate(timeout=150)
    assert relaunched.returncode == 0, out
    outcome = json.loads(out.strip().splitlines()[-1])
    assert outcome == {
        "status": "failed",
        "error": "Usage limit exceeded: total_tokens limit 3000, used 5100",
        "stop_reason": "usage_limit",
    }
    assert lines(tmp_path, "guardrail.log") == ["delegate"], "a passed check is not re-run"
    assert lines(tmp_path, "llm_lead.log") == ["1"], "the lead was asked once, before the kill"
    assert len(lines(tmp_path, "llm_worker.log")) == 1, "the child stopped at the lead's limit"
    assert len(lines(tmp_path, "slow.log")) == 2, "the call in flight ran again, whole"
    # Exactly one ending each: the child's one run failed at its ancestor's limit.
    children = sql(
        database_url,
        "SELECT r.status, r.stop_reason, r.error FROM helix.runs r JOIN helix.sessions s "
        "USING (session_id) WHERE s.parent_session_id = %s",
        session_id,
    )
    assert children == [
        (
            "failed",
            "usage_limit",
            f"Usage limit exceeded: total_tokens limit 3000, used 5100 (the limit of "
            f"ancestor run {run_id}, agent 'lead')",
        )
    ]
    [(runs,)] = sql(
        database_url, "SELECT count(*) FROM helix.runs WHERE session_id = %s", session_id
    )
    assert runs == 1
    # The child's slow call and the parent's sub-agent call have one result each.
    [(results,)] = sql(
        database_url,
        "SELECT count(*) FROM helix.messages WHERE session_id = %s AND role = 'tool'",
        session_id,
    )
    assert results == 1
    [(child_results,)] = sql(
        database_url,
        "SELECT count(*) FROM helix.messages m JOIN helix.sessions s USING (session_id) "
        "WHERE s.parent_session_id = %s AND m.role = 'tool'",
        session_id,
    )
    assert child_results == 1
    [(llm_rows,)] = sql(
        database_url,
        "SELECT count(*) FROM helix.usage u JOIN helix.sessions s USING (session_id) "
        "WHERE (s.session_id = %s OR s.parent_session_id = %s) AND u.kind = 'llm'",
        session_id,
        session_id,
    )
    assert llm_rows == 2, "one lead call, one worker call: no model call was counted twice"
    # One ending each in its own session's stream: a failure, never a completion.
    endings = sql(
        database_url,
        "SELECT c.type, count(*) FROM helix.stream_chunks c JOIN helix.runs r "
        "ON r.run_id = c.run_id AND r.session_id = c.session_id JOIN helix.sessions s "
        "ON s.session_id = r.session_id WHERE (s.session_id = %s OR s.parent_session_id = %s) "
        "AND c.type IN ('run_failed', 'run_completed', 'run_aborted') GROUP BY c.type",
        session_id,
        session_id,
    )
    assert endings == [("run_failed", 2)]
