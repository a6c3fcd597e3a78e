"""Dispatch in one process: priorities put a run on its agent's DBOS queue, which this
worker listens to (agents registered after launch included); bad priorities and queue
settings are refused before anything is stored."""

from __future__ import annotations

import httpx
import pytest
from helpers import sql
from live_server import serve

from helix_dbos import Agent, RateLimit, RunQueue
from helix_dbos.errors import AgentDefinitionError, InvalidInputError
from helix_dbos.runtime.starts.dispatch import Dispatch
from helix_dbos.server import create_app


async def test_a_run_with_a_priority_is_enqueued_and_executed_by_this_worker(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent()  # registered after launch: its queue is registered and listened to
    mock_llm.add_response({"type": "text", "content": "from the queue"}, agent=agent.name)

    handle = await helix.execute(agent, "hi", priority=7)
    result = await handle.result()

    assert result.status == "completed" and result.output == "from the queue"
    assert sql(
        database_url,
        "SELECT status, queue_name, priority, executor_id FROM dbos.workflow_status "
        "WHERE workflow_uuid = %s",
        handle.workflow_id,
    ) == [("SUCCESS", f"helix.agent.{agent.name}", 7, helix.lease.identity.executor_id)]
    assert (
        agent.name
        in sql(
            database_url,
            "SELECT agents FROM helix.workers WHERE executor_id = %s",
            helix.lease.identity.executor_id,
        )[0][0]
    ), "the worker row lists the agent registered after launch"
    me = [w for w in await helix.workers() if w.executor_id == helix.lease.identity.executor_id]
    assert [(w.state, w.expired, agent.name in w.agents) for w in me] == [("live", False, True)]


@pytest.mark.parametrize("priority", [0, -1, 2**31])
async def test_a_priority_out_of_range_is_refused_and_stores_nothing(
    helix, make_agent, database_url, priority
):
    agent = make_agent()
    with pytest.raises(InvalidInputError, match="priority must be between 1 and"):
        await helix.execute(agent, "hi", priority=priority)
    assert sql(
        database_url, "SELECT count(*) FROM helix.runs WHERE agent_name = %s", agent.name
    ) == [(0,)]


async def test_http_start_takes_a_priority_and_refuses_a_bad_one(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "ok"}, agent=agent.name)
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            bad = await client.post("/start", json={"agent": agent.name, "priority": 0})
            assert bad.status_code == 422
            started = await client.post(
                "/start", json={"agent": agent.name, "input": "hi", "priority": 2}
            )
            assert started.status_code == 200, started.text
    handle = await helix.get_handle(started.json()["run_id"])
    assert (await handle.result()).status == "completed"
    assert sql(
        database_url,
        "SELECT priority FROM dbos.workflow_status WHERE workflow_uuid = %s",
        handle.workflow_id,
    ) == [(2,)]


def test_run_queue_settings_are_checked_when_declared():
    a, b = Agent("queue_a"), Agent("queue_b")
    with pytest.raises(AgentDefinitionError, match="not start with 'helix.agent.'"):
        RunQueue("helix.agent.mine", [a])
    with pytest.raises(AgentDefinitionError, match="names no agent"):
        RunQueue("empty", [])
    with pytest.raises(AgentDefinitionError, match="concurrency must be at least 1"):
        RunQueue("q", [a], concurrency=0)
    with pytest.raises(AgentDefinitionError, match="go together"):
        RunQueue("q", [a], partition_by="model")
    with pytest.raises(AgentDefinitionError, match="go together"):
        RunQueue("q", [a], per_partition_rate_limit=RateLimit(10, 60))
    with pytest.raises(AgentDefinitionError, match="limit >= 1"):
        RateLimit(0, 60)
    with pytest.raises(AgentDefinitionError, match="in two run queues"):
        Dispatch(
            [RunQueue("one", [a]), RunQueue("two", [a, b])], executes_runs=True, listen_queues=()
        )
    dispatch = Dispatch([RunQueue("both", [a, "typo"])], executes_runs=True, listen_queues=())
    with pytest.raises(AgentDefinitionError, match="unregistered agent\\(s\\): typo"):
        dispatch.check_agents(["queue_a"])


def test_a_worker_listens_to_a_shared_queue_only_if_it_serves_all_its_agents():
    dispatch = Dispatch(
        [RunQueue("ab", ["a", "b"]), RunQueue("c", ["c"])],
        executes_runs=True,
        listen_queues=["mine"],
    )
    assert dispatch.listen_list(["a", "c"]) == ["helix.agent.a", "helix.agent.c", "c", "mine"]
    assert dispatch.listen_list(["a", "b"]) == ["helix.agent.a", "helix.agent.b", "ab", "mine"]


def test_partition_keys_follow_the_agents_model_or_provider():
    by_model = RunQueue("m", ["a"], partition_by="model", per_partition_concurrency=2)
    by_provider = RunQueue("p", ["a"], partition_by="provider", per_partition_concurrency=2)
    assert by_model.partition_key("openai:gpt-5") == "openai:gpt-5"
    assert by_provider.partition_key("openai:gpt-5") == "openai"
    assert RunQueue("plain", ["a"]).partition_key("openai:gpt-5") is None
