"""Run integrity: every run ends in a status that matches its workflow, keeps the cause of
its error, and neither races nor aborts leave it stuck, doubled or short of its transcript."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos import error as dbos_errors
from helpers import sql

from helix_dbos import AgentAlreadyRunningError, AgentHooks, LLMConfig, RunHandle, ToolContext, tool
from helix_dbos.llm.base import LLMProviderError
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.loop import agent_loop, final_write
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.starts.run_starts import CANCEL_GRACE_SECONDS
from helix_dbos.runtime.steps.step_types import RunOptions


def test_a_provider_error_survives_a_pickle_round_trip_alone_and_inside_dbos_retries():
    error = LLMProviderError("429 Too Many Requests: slow down", retryable=True, status_code=429)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.retryable, copy.status_code) == (
        LLMProviderError,
        "429 Too Many Requests: slow down",
        True,
        429,
    )
    exceeded = dbos_errors.DBOSMaxStepRetriesExceeded("helix.llm", 6, [error])
    replayed = pickle.loads(pickle.dumps(exceeded))
    assert isinstance(replayed.errors[-1], LLMProviderError)
    assert replayed.errors[-1].status_code == 429


async def test_when_llm_retries_run_out_the_run_error_names_the_providers_last_message(
    helix, make_agent, mock_llm
):
    agent = make_agent(llm=LLMConfig(max_attempts=2, retry_interval_seconds=0.01))
    calls: list[str] = []

    def rate_limited(request: LLMRequest) -> None:
        if request.agent_name != agent.name:
            raise LookupError("not this test's agent")
        calls.append(request.agent_name)
        raise LLMProviderError(
            f"429 Too Many Requests: Token limit reached (attempt {len(calls)})",
            retryable=True,
            status_code=429,
        )

    mock_llm.set_responder(rate_limited)
    try:
        handle = await helix.execute(agent, "hi")
        result = await asyncio.wait_for(handle.result(), timeout=30)
    finally:
        mock_llm.set_responder(None)
    assert len(calls) == 2
    assert result.status == "failed"
    assert result.error is not None
    assert "exceeded its maximum of 2 retries" in result.error
    assert "Token limit reached (attempt 2)" in result.error
    assert (await helix.get_run(result.run_id)).error == result.error


def test_llm_retry_settings_are_checked_when_the_agent_is_defined():
    for bad in ({"max_attempts": 0}, {"retry_interval_seconds": -1}, {"retry_backoff": 0.5}):
        try:
            LLMConfig(**bad)  # type: ignore[arg-type]
        except ValueError as exc:
            assert "LLMConfig" in str(exc)
        else:
            raise AssertionError(f"LLMConfig({bad}) was accepted")


async def test_concurrent_starts_on_an_idle_session_let_exactly_one_run_in(
    helix, make_agent, mock_llm
):
    """Three callers start a run on one completed session at once, twenty times over:
    each time one wins, the others get AgentAlreadyRunningError and store nothing.
    The winner's model answers only once all three calls returned (a caller slower
    than a whole run would otherwise rightly start the next turn)."""
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "turn 0"}, agent=agent.name)
    session_id = (await (await helix.execute(agent, "turn 0")).result()).session_id
    winners: list[str] = []
    callers_back = threading.Event()

    async def after_the_callers(request: LLMRequest) -> dict[str, Any]:
        while not callers_back.is_set():
            await asyncio.sleep(0.005)
        said = request.messages[-1].content or ""
        return {"type": "text", "content": said.split(" caller")[0]}

    mock_llm.set_responder(after_the_callers)
    try:
        for turn in range(1, 21):
            callers_back.clear()
            outcomes = await asyncio.gather(
                *(
                    helix.execute(agent, f"turn {turn} caller {caller}", session_id=session_id)
                    for caller in range(3)
                ),
                return_exceptions=True,
            )
            callers_back.set()
            handles = [o for o in outcomes if isinstance(o, RunHandle)]
            refused = [o for o in outcomes if isinstance(o, AgentAlreadyRunningError)]
            assert (len(handles), len(refused)) == (1, 2), outcomes
            result = await asyncio.wait_for(handles[0].result(), timeout=30)
            assert result.status == "completed" and result.output == f"turn {turn}"
            winners.append(result.run_id)
    finally:
        mock_llm.set_responder(None)
    runs = await helix.list_runs(session_id)
    assert len(runs) == 21 and {r.status for r in runs} == {"completed"}
    users = [m.content for m in await helix.get_messages(session_id) if m.role == "user"]
    assert len(users) == 21 and len(set(users)) == 21, users


async def test_while_a_slow_tool_runs_the_models_request_is_already_in_the_transcript(
    helix, make_agent, mock_llm
):
    release = threading.Event()

    @tool
    def slow() -> str:
        """Runs until the test lets it finish."""
        release.wait(30)
        return "ok"

    agent = make_agent(tools=[slow])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "s1", "name": "slow", "arguments": {}}]},
        {"type": "text", "content": "done"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    roles: list[str] = []
    for _ in range(100):
        roles = [m.role for m in await helix.get_messages(handle.session_id)]
        if len(roles) > 1:
            break
        await asyncio.sleep(0.05)
    assert roles == ["user", "assistant"]
    release.set()
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "completed"
    roles = [m.role for m in await helix.get_messages(handle.session_id)]
    assert roles == ["user", "assistant", "tool", "assistant"], "the head is not written twice"


async def test_abort_cancels_a_running_async_tool_and_flags_a_sync_one(helix, make_agent, mock_llm):
    events: list[str] = []
    started = threading.Event()

    @tool
    async def crawl() -> str:
        """A long async tool."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("crawl cancelled")
            raise
        return "crawled"

    @tool
    def compute(ctx: ToolContext) -> str:
        """A long sync tool that watches ctx.cancelled."""
        started.set()
        for _ in range(600):
            if ctx.cancelled:
                events.append("compute saw cancelled")
                return "stopped early"
            time.sleep(0.05)
        return "computed"

    agent = make_agent(tools=[crawl, compute])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "a", "name": "crawl", "arguments": {}},
                {"id": "b", "name": "compute", "arguments": {}},
            ],
        },
        agent=agent.name,
    )
    handle = await helix.execute(agent, "work")
    await asyncio.to_thread(started.wait, 10)
    await asyncio.sleep(0.3)  # both tools past their live start
    began = time.monotonic()
    await helix.abort(handle.session_id, reason="enough")
    result = await asyncio.wait_for(handle.result(), timeout=15)
    assert result.status == "aborted" and result.error == "Run aborted: enough"
    for _ in range(100):
        if len(events) == 2:
            break
        await asyncio.sleep(0.05)
    assert sorted(events) == ["compute saw cancelled", "crawl cancelled"]
    assert time.monotonic() - began < 10, "the tools stopped; they did not run to the end"
    messages = await helix.get_messages(handle.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert all(m.is_error and m.content == "Run aborted: enough" for m in messages[2:])


async def test_a_workflow_cancelled_behind_helix_back_closes_its_run_as_aborted(
    helix, make_agent, mock_llm
):
    release = threading.Event()

    @tool
    def wait_a_bit() -> str:
        """Blocks until released."""
        release.wait(30)
        return "done"

    agent = make_agent(tools=[wait_a_bit])
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [{"id": "w", "name": "wait_a_bit", "arguments": {}}]},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    await on_target_loop(lambda: DBOS.cancel_workflow_async(handle.workflow_id))
    release.set()
    # The periodic sweep leaves a workflow cancelled moments ago to its canceller (an
    # abort closes the run with its own reason right after): CANCEL_GRACE_SECONDS.
    swept = await helix._starts.reconcile_runs(cancel_grace_seconds=CANCEL_GRACE_SECONDS)
    assert handle.run_id not in swept
    assert (await helix.get_run(handle.run_id)).status == "running"
    assert handle.run_id in await helix.reconcile_runs()  # asked for: no grace
    run = await helix.get_run(handle.run_id)
    assert run.status == "aborted" and run.error == "Run aborted: its workflow was cancelled"
    result = await asyncio.wait_for(handle.result(), timeout=15)
    assert result.status == "aborted"
    assert (await helix.get_session(handle.session_id)).status == "aborted"
    assert handle.run_id not in await helix.reconcile_runs(), "a closed run is left alone"


async def test_a_run_whose_last_write_is_rejected_ends_failed_and_result_returns(
    helix, make_agent, mock_llm, monkeypatch
):
    async def rejected(session, commit, pending=None, **options):
        raise ValueError("the database rejected the final write")

    monkeypatch.setattr(final_write, "commit_final", rejected)
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "never recorded"}, agent=agent.name)
    handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.status == "failed"
    assert result.error is not None
    assert "ended as ERROR" in result.error and "rejected the final write" in result.error
    run = await helix.get_run(handle.run_id)
    assert (run.status, run.error) == (result.status, result.error)
    status = await on_target_loop(lambda: DBOS.get_workflow_status_async(handle.workflow_id))
    assert status is not None and status.status == "ERROR"


@contextlib.contextmanager
def opening_trigger(database_url: str, agent_name: str, body: str) -> Iterator[None]:
    """A real PostgreSQL trigger on the insert of `agent_name`'s new sessions (the open of
    a new session's run), running `body`, for the length of the block."""
    name = f"open_{agent_name}"[:60]
    sql(
        database_url,
        f"CREATE FUNCTION helix.{name}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN {body} END $$",
    )
    sql(
        database_url,
        f"CREATE TRIGGER {name} BEFORE INSERT ON helix.sessions FOR EACH ROW "
        f"WHEN (NEW.agent_name = '{agent_name}') EXECUTE FUNCTION helix.{name}()",
    )
    try:
        yield
    finally:
        sql(database_url, f"DROP TRIGGER {name} ON helix.sessions")
        sql(database_url, f"DROP FUNCTION helix.{name}()")


async def test_a_new_sessions_open_that_fails_while_its_workflow_starts_leaves_no_run(
    helix, make_agent, mock_llm, database_url
):
    """A new session's run is opened while its workflow starts. When PostgreSQL refuses
    the open (slowly: the workflow is well under way by then), the caller gets the
    error, and the workflow ends without asking the model or writing anything: no
    session, no run, nothing live."""
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "never asked"}, agent=agent.name)
    refuse = "PERFORM pg_sleep(0.3); RAISE EXCEPTION 'the open is refused';"
    with opening_trigger(database_url, agent.name, refuse):
        try:
            await helix.execute(agent, "go")
        except Exception as exc:
            assert "the open is refused" in str(exc)
        else:
            raise AssertionError("execute() returned for a run whose open failed")

    async def started_for_agent() -> list[Any]:
        found = await on_target_loop(
            lambda: DBOS.list_workflows_async(name=agent_loop.WORKFLOW_NAME, load_input=True)
        )
        return [w for w in found if w.input and w.input["args"][2] == agent.name]

    deadline = time.monotonic() + 15
    while not (workflows := await started_for_agent()) or workflows[0].status == "PENDING":
        assert time.monotonic() < deadline, "the workflow did not end"
        await asyncio.sleep(0.05)
    assert len(workflows) == 1 and workflows[0].status == "SUCCESS"
    assert workflows[0].output.status == "failed"
    assert "never opened" in workflows[0].output.error
    assert not [r for r in mock_llm.inputs if r.agent_name == agent.name], "the model was asked"
    assert sql(
        database_url, "SELECT count(*) FROM helix.runs WHERE agent_name = %s", agent.name
    ) == [(0,)]
    # the next run of the agent opens and completes as usual
    handle = await helix.execute(agent, "again")
    assert (await asyncio.wait_for(handle.result(), timeout=30)).output == "never asked"


async def test_a_slow_open_of_a_new_session_delays_its_first_step_and_nothing_else(
    helix, make_agent, mock_llm, database_url
):
    """The workflow starts alongside the open of its run; its first step waits for the
    open, so a slow one (300 ms here) loses nothing: the model's reply is streamed and
    written, the run completes with the whole transcript."""
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "after the open"}, agent=agent.name)
    with opening_trigger(database_url, agent.name, "PERFORM pg_sleep(0.3); RETURN NEW;"):
        handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert (result.status, result.output) == ("completed", "after the open")
    messages = await helix.get_messages(handle.session_id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "go"),
        ("assistant", "after the open"),
    ]
    kinds = [
        kind
        for (kind,) in sql(
            database_url,
            "SELECT type FROM helix.stream_chunks WHERE run_id = %s ORDER BY seq",
            handle.run_id,
        )
    ]
    assert kinds[0] == "run_started" and "text_delta" in kinds and kinds[-1] == "run_completed"


async def test_a_recovered_workflow_whose_run_was_never_opened_ends_without_asking(
    helix, make_agent, mock_llm, database_url
):
    """What recovery finds when a process died after DBOS committed a new session's
    workflow but before the run's open committed: a workflow with no run row. It ends
    failed at its first step, without a model call, a hook or a row."""
    completed: list[str] = []
    agent = make_agent(hooks=AgentHooks(on_agent_failed=lambda event: completed.append("x")))
    mock_llm.add_response({"type": "text", "content": "never asked"}, agent=agent.name)
    run_id, session_id = f"run_orphan_{time.time_ns()}", f"ses_orphan_{time.time_ns()}"

    async def start() -> Any:
        with SetWorkflowID(f"helix-{run_id}"):
            handle = await DBOS.start_workflow_async(
                agent_loop.agent_run_workflow, run_id, session_id, agent.name, RunOptions()
            )
        return await handle.get_result()

    result = await asyncio.wait_for(on_target_loop(start), timeout=30)
    assert (result.status, result.run_id) == ("failed", run_id)
    assert "never opened" in result.error
    assert not [r for r in mock_llm.inputs if r.agent_name == agent.name], "the model was asked"
    assert completed == [], "a hook fired for a run that never existed"
    assert sql(
        database_url, "SELECT count(*) FROM helix.sessions WHERE session_id = %s", session_id
    ) == [(0,)]


async def test_a_run_whose_row_ended_meanwhile_asks_the_model_nothing_more(
    helix, make_agent, mock_llm, database_url
):
    """What a recovered step finds after a final write committed and its LLM step's
    checkpoint did not (the crash test shows that case): the run's row has ended. Here a
    tool ends the row itself; the next LLM step's write-ahead reads the run's status,
    asks the model nothing, and the run's result is its row."""

    @tool
    def close_my_run(ctx: ToolContext) -> str:
        """Ends this run's row, as a committed final write would have."""
        sql(
            database_url,
            "UPDATE helix.runs SET status = 'completed', output = '\"from the row\"', "
            "finished_at = now() WHERE run_id = %s",
            ctx.run_id,
        )
        return "closed"

    agent = make_agent(tools=[close_my_run])
    mock_llm.add_responses(
        {
            "type": "tool_calls",
            "tool_calls": [{"id": "c", "name": "close_my_run", "arguments": {}}],
        },
        {"type": "text", "content": "never asked"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert (result.status, result.output) == ("completed", "from the row")
    assert len([r for r in mock_llm.inputs if r.agent_name == agent.name]) == 1
    roles = [m.role for m in await helix.get_messages(handle.session_id)]
    assert roles == ["user", "assistant", "tool"], "the step before the end is written, once"
