"""Scheduled agents over HTTP (issue 34), on a real uvicorn through `HelixClient`:
create, read, pause, resume, trigger, backfill, firings, delete; bad input as 4xx; a
principal limited to some sessions may not manage schedules."""

from __future__ import annotations

from datetime import datetime, timezone

import httpx
import pytest
from helpers import wait_for
from live_server import serve
from schedule_support import firings_run_here  # noqa: F401 - autouse fixture

from helix_dbos.client import (
    AsyncHelixClient,
    HelixClient,
    NotFoundError,
    UnprocessableEntityError,
)
from helix_dbos.server import Principal, create_app

pytest_plugins = ["double_texting_support"]  # the scripted model


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        yield url


def test_the_client_manages_a_schedule_end_to_end(base_url, make_agent, scripted):
    agent = make_agent()
    name = f"{agent.name}-http"
    with HelixClient(base_url) as client:
        created = client.schedule(agent.name, "0 0 1 1 *", input="hello", name=name)
        assert (created.name, created.agent, created.status) == (name, agent.name, "active")
        assert client.get_schedule(name).input == "hello"
        assert [s.name for s in client.list_schedules(agent.name)] == [name]
        assert client.pause_schedule(name).status == "paused"
        assert client.resume_schedule(name).status == "active"
        fired = client.trigger_schedule(name)
        start = datetime(2023, 6, 1, tzinfo=timezone.utc)
        end = datetime(2025, 6, 1, tzinfo=timezone.utc)
        backfilled = client.backfill_schedule(name, start, end)
        assert len(backfilled) == 2
        assert client.backfill_schedule(name, start, end) == backfilled

        def all_recorded() -> bool:
            return len(client.get_schedule_firings(name)) == 3

        wait_for(all_recorded)
        recorded = client.get_schedule_firings(name)
        assert {f.firing_id for f in recorded} == {fired, *backfilled}
        assert all(f.outcome == "started" and f.run_id for f in recorded)
        assert len({f.session_id for f in recorded}) == 3
        assert client.delete_schedule(name).name == name
        with pytest.raises(NotFoundError):
            client.get_schedule(name)
        with pytest.raises(NotFoundError):
            client.pause_schedule(name)


async def test_bad_schedules_are_4xx(base_url, make_agent):
    agent = make_agent()
    async with AsyncHelixClient(base_url) as client:
        with pytest.raises(UnprocessableEntityError, match="cron"):
            await client.schedule(agent.name, "sometimes")
        with pytest.raises(NotFoundError):
            await client.schedule("no-such-agent", "* * * * *")
        with pytest.raises(NotFoundError):
            await client.trigger_schedule("no-such-schedule")
        assert await client.list_schedules(agent.name) == []
    async with httpx.AsyncClient(base_url=base_url) as http:
        extra = await http.post(
            "/schedules", json={"agent": agent.name, "cron": "* * * * *", "every": "day"}
        )
        assert extra.status_code == 422
        strategy = await http.post(
            "/schedules",
            json={"agent": agent.name, "cron": "* * * * *", "multitask_strategy": "rollback"},
        )
        assert strategy.status_code == 422


def test_a_principal_limited_to_some_sessions_may_not_manage_schedules(helix, make_agent):
    agent = make_agent()

    async def authenticate(_request: object) -> Principal:
        return Principal(name="alice", sessions={"ses_alice"})

    with (
        serve(create_app(helix, authenticate=authenticate)) as url,
        httpx.Client(base_url=url) as http,
    ):
        listed = http.get("/schedules")
        created = http.post("/schedules", json={"agent": agent.name, "cron": "* * * * *"})
    assert (listed.status_code, created.status_code) == (403, 403)
    assert "may not manage schedules" in created.json()["detail"]
