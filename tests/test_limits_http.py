"""Tenants and model slots over HTTP and the Python client, in one process: `tenant` on
`POST /start` and `/chat` lands in `helix.runs.tenant`, and a run waiting for a call
slot is listed by `GET /runs?status=queued`, queued, never failed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from dbos import DBOS
from live_server import serve

from helix_dbos import AgentHooks, AsyncHelixClient, LLMConfig
from helix_dbos.runtime.process import model_limits
from helix_dbos.server import create_app


@pytest.fixture(autouse=True)
def drop_model_queues(helix) -> Iterator[None]:
    """The session's HelixDBOS would poll this test's model queues (4 times a second)
    for the rest of the session: they go, as `make_agent`'s agent queues do."""
    yield
    with ThreadPoolExecutor(max_workers=1) as thread:  # DBOS refuses the sync call on a loop
        for model in ("mock:slot-http", "mock:slot-inbox", "mock:slot-interrupt"):
            thread.submit(DBOS.delete_queue, model_limits.model_queue(model)).result()


async def test_tenants_over_http_and_a_run_queued_for_its_models_slot(helix, make_agent, mock_llm):
    entered, gate = threading.Event(), threading.Event()

    async def hold(event) -> None:  # the first call holds the model's only slot
        entered.set()
        await asyncio.to_thread(gate.wait, 60)

    agent = make_agent(
        llm=LLMConfig(model="mock:slot-http", max_concurrent=1),
        hooks=AgentHooks(before_llm_call=hold),
    )
    mock_llm.add_responses(
        *[{"type": "text", "content": f"answer {i}"} for i in range(3)], agent=agent.name
    )
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        async with AsyncHelixClient(url) as client:
            first = await client.start(agent.name, "first", tenant="acme-http")
            await asyncio.to_thread(entered.wait, 60)
            second = await client.start(agent.name, "second", tenant="globex-http")
            for _ in range(600):
                queued = await client.list_runs(status="queued")
                if queued:
                    break
                await asyncio.sleep(0.05)
            assert [(r.run_id, r.tenant, r.queued_for, r.status) for r in queued] == [
                (second.run_id, "globex-http", "helix-llm-mock:slot-http", "running")
            ]
            gate.set()
            chat = await client.chat(
                f"ses_{agent.name}", "third", agent=agent.name, tenant="acme-http"
            )
            assert chat.status == "completed"
            for started in (first, second):
                result = await (await helix.get_handle(started.run_id)).result()
                assert result.status == "completed"
    rows = await helix.sql(
        "SELECT tenant, count(*) AS runs, count(queued_for) AS queued FROM helix.runs "
        "WHERE agent_name = :agent GROUP BY tenant ORDER BY tenant",
        {"agent": agent.name},
    )
    assert [(r.tenant, r.runs, r.queued) for r in rows] == [
        ("acme-http", 2, 0),
        ("globex-http", 1, 0),
    ]


async def test_the_inbox_lists_a_run_queued_for_its_models_slot(
    browser_page,
    helix,
    make_agent,
    mock_llm,
):
    from playwright.async_api import expect  # noqa: PLC0415 - optional, as in browser_page

    page, errors = browser_page
    entered, gate = threading.Event(), threading.Event()

    async def hold(event) -> None:
        entered.set()
        await asyncio.to_thread(gate.wait, 60)

    agent = make_agent(
        llm=LLMConfig(model="mock:slot-inbox", max_concurrent=1),
        hooks=AgentHooks(before_llm_call=hold),
    )
    mock_llm.add_responses(
        *[{"type": "text", "content": f"answer {i}"} for i in range(2)], agent=agent.name
    )
    first = await helix.execute(agent, "first", tenant="acme-http")
    await asyncio.to_thread(entered.wait, 60)
    second = await helix.execute(agent, "second", tenant="globex-http")
    try:
        with serve(create_app(helix, allow_unauthenticated=True)) as url:
            await page.goto(f"{url}/inbox")
            row = page.locator(f'#queued-runs [data-run-id="{second.run_id}"]')
            await expect(row).to_be_visible(timeout=15_000)
            await expect(row.locator(".run-status")).to_have_text("queued")
            await expect(row).to_contain_text("helix-llm-mock:slot-inbox")
            await expect(row).to_contain_text("globex-http")
            await expect(page.locator("#queued-count")).to_have_text("1")
            gate.set()
            await expect(row).to_have_count(0, timeout=20_000)
            await expect(page.locator("#queued-heading")).to_be_hidden()
    finally:
        gate.set()
    assert (await first.result()).status == "completed"
    assert (await second.result()).status == "completed"
    assert errors == [], errors


async def test_an_interrupt_of_a_run_waiting_for_a_slot_asks_no_model(helix, make_agent, mock_llm):
    entered, gate = threading.Event(), threading.Event()
    asked: list[str] = []

    async def hold(event) -> None:
        asked.append(event.context.run_id)
        entered.set()
        await asyncio.to_thread(gate.wait, 60)

    agent = make_agent(
        llm=LLMConfig(model="mock:slot-interrupt", max_concurrent=1),
        hooks=AgentHooks(before_llm_call=hold),
    )
    mock_llm.add_responses({"type": "text", "content": "first"}, agent=agent.name)
    first = await helix.execute(agent, "first")
    await asyncio.to_thread(entered.wait, 60)
    second = await helix.execute(agent, "second")
    try:
        for _ in range(600):
            rows = await helix.sql(
                "SELECT queued_for FROM helix.runs WHERE run_id = :r", {"r": second.run_id}
            )
            if rows[0].queued_for:
                break
            await asyncio.sleep(0.05)
        await helix.interrupt(second.session_id, reason="not now")
    finally:
        gate.set()
    assert (await second.result()).status == "interrupted"
    assert (await first.result()).status == "completed"
    assert asked == [first.run_id], "the interrupted run asked no model"
