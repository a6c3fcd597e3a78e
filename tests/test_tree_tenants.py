"""A run's tenant (`execute(..., tenant=...)`) reaches every run it starts (issue 46,
hole 6): sub-agents, companions and remote children count against their root's tenant
in a limited model's fair share, and a resume or retry keeps the session's tenant."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from dbos import DBOS
from helpers import calls, text
from live_server import serve

from helix_dbos import LLMConfig, PersistentAgent, remote_sub_agent_tool, sub_agent_tool, tool
from helix_dbos.runtime.process import model_limits
from helix_dbos.server import create_app

MODEL = "mock:tree-tenant"


@pytest.fixture(autouse=True)
def drop_model_queue(helix) -> Iterator[None]:
    """The session's HelixDBOS would poll this test's model queue for the rest of it."""
    yield
    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        thread.submit(DBOS.delete_queue, model_limits.model_queue(MODEL)).result()


async def tenants_of_tree(helix, root_session_id: str) -> dict[str, str | None]:
    """Each run of the tree (its session's agent) with its tenant, from SQL."""
    rows = await helix.sql(
        "SELECT s.agent_name, r.tenant FROM helix.runs r JOIN helix.sessions s "
        "ON s.session_id = r.session_id WHERE s.root_session_id = :root "
        "OR s.session_id = :root",
        {"root": root_session_id},
    )
    return {r.agent_name: r.tenant for r in rows}


async def slot_partitions(helix, workflow_ids: list[str]) -> list[str]:
    """The tenant partition of each model slot the given runs' workflows took."""
    rows = await helix.sql(
        "SELECT queue_partition_key FROM dbos.workflow_status WHERE queue_name = :queue "
        "AND split_part(workflow_uuid, '-llm-', 1) = ANY(:ids)",
        {"queue": model_limits.model_queue(MODEL), "ids": workflow_ids},
    )
    return sorted(r.queue_partition_key for r in rows)


async def test_children_and_companions_take_their_roots_tenants_share(helix, make_agent, mock_llm):
    limited = LLMConfig(model=MODEL, max_concurrent=4)
    child = make_agent(llm=limited)
    critic = make_agent(llm=limited)
    parent = make_agent(
        llm=limited, tools=[sub_agent_tool(child)], persistent_agents=[PersistentAgent(critic)]
    )
    mock_llm.add_responses(
        calls(
            ("s1", f"subagent__{child.name}", {"message": "research"}),
            ("c1", "companion__spawnAgent", {"agentType": critic.name, "message": "judge"}),
        ),
        text("all done"),
        agent=parent.name,
    )
    mock_llm.add_response(text("found it"), agent=child.name)
    mock_llm.add_response(text("fine"), agent=critic.name)

    result = await (await helix.execute(parent, "go", tenant="acme")).result()

    assert result.status == "completed", result.error
    assert await tenants_of_tree(helix, result.session_id) == {
        parent.name: "acme",
        child.name: "acme",
        critic.name: "acme",
    }
    rows = await helix.sql(
        "SELECT r.workflow_id FROM helix.runs r JOIN helix.sessions s "
        "ON s.session_id = r.session_id WHERE s.root_session_id = :root OR s.session_id = :root",
        {"root": result.session_id},
    )
    # Two parent calls, one each for the child and the companion: all in acme's share.
    assert await slot_partitions(helix, [r.workflow_id for r in rows]) == ["acme"] * 4


async def test_resume_and_retry_keep_the_sessions_tenant(helix, make_agent, mock_llm):
    @tool
    def step() -> str:
        """One step."""
        return "ok"

    agent = make_agent(llm=LLMConfig(model=MODEL, max_concurrent=4), tools=[step], max_steps=1)
    mock_llm.add_responses(calls(("s1", "step", {})), agent=agent.name)
    failed = await (await helix.execute(agent, "go", tenant="globex")).result()
    assert failed.status == "failed"
    mock_llm.add_response(text("done now"), agent=agent.name)
    retried = await (await helix.retry(failed.session_id)).result()
    assert retried.status == "completed", retried.error
    mock_llm.add_response(text("again"), agent=agent.name)
    resumed = await (await helix.resume(failed.session_id, "more")).result()
    assert resumed.status == "completed", resumed.error
    rows = await helix.sql(
        "SELECT turn, tenant, workflow_id FROM helix.runs WHERE session_id = :sid ORDER BY turn",
        {"sid": failed.session_id},
    )
    assert [(r.turn, r.tenant) for r in rows] == [(1, "globex"), (2, "globex"), (3, "globex")]
    assert await slot_partitions(helix, [r.workflow_id for r in rows]) == ["globex"] * 3


async def test_a_remote_child_is_started_for_its_parents_tenant(helix, make_agent, mock_llm):
    """The remote server (this process's own, over real HTTP) gets the tenant in the
    start request: the child's run row there says so."""
    worker = make_agent()
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        lead = make_agent(tools=[remote_sub_agent_tool(url, worker.name, auth=None, name="far")])
        mock_llm.add_responses(
            calls(("r1", "subagent__far", {"message": "look"})),
            text("lead done"),
            agent=lead.name,
        )
        mock_llm.add_response(text("looked"), agent=worker.name)
        result = await (await helix.execute(lead, "go", tenant="initech")).result()
    assert (result.status, result.output) == ("completed", "lead done"), result.error
    rows = await helix.sql(
        "SELECT tenant FROM helix.runs WHERE agent_name = :agent", {"agent": worker.name}
    )
    assert [r.tenant for r in rows] == ["initech"]
