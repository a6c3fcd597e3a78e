"""Many SSE readers of one stream share one reader of the database (server/http/sse_fanout.py),
each still getting every chunk once, in order, resumable from Last-Event-ID."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from live_server import serve

from helix_dbos import tool
from helix_dbos.server import create_app
from helix_dbos.server.http import sse_fanout
from helix_dbos.server.http.sse_fanout import SessionFanout, event_stream

READERS = 12


@pytest.fixture(scope="module")
def base_url(helix) -> Iterator[str]:
    app = create_app(helix, allow_unauthenticated=True, max_streams_per_session=READERS + 4)
    with serve(app) as url:
        yield url


@pytest.fixture
async def client(base_url) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        yield c


def approval_agent(make_agent, mock_llm):
    @tool(require_approval=True)
    def archive(name: str) -> str:
        """Archive a thing."""
        return f"archived {name}"

    agent = make_agent(tools=[archive])
    call = {"id": "a1", "name": "archive", "arguments": {"name": "x"}}
    mock_llm.add_responses(
        {"type": "tool_calls", "tool_calls": [call]},
        {"type": "text", "content": "archived it"},
        agent=agent.name,
    )
    return agent


async def read_events(
    client: httpx.AsyncClient,
    params: dict,
    headers: dict | None = None,
    first: asyncio.Event | None = None,
) -> list[dict]:
    events: list[dict] = []
    current: dict = {}
    async with client.stream("GET", "/sse", params=params, headers=headers or {}) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line == "":
                if "event" in current:
                    events.append(current)
                    if first is not None:
                        first.set()
                current = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                current[key] = json.loads(value) if key == "data" else value
    return events


async def wait_until_waiting(helix, session_id: str) -> None:
    for _ in range(400):
        if await helix.pending_tool_calls(session_id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never waited for its approval")


async def test_many_readers_share_one_database_reader_and_each_gets_every_chunk(
    client, helix, make_agent, mock_llm, monkeypatch
):
    followers: list[int] = []
    real_stream = helix.stream

    def counting_stream(*args, **kwargs):
        followers.append(kwargs.get("after_seq", 0))
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(helix, "stream", counting_stream)
    agent = approval_agent(make_agent, mock_llm)
    handle = await helix.execute(agent, "archive x")
    await wait_until_waiting(helix, handle.session_id)
    params = {"session_id": handle.session_id, "run_id": handle.run_id}

    attached = [asyncio.Event() for _ in range(READERS)]
    readers = [asyncio.create_task(read_events(client, params, first=e)) for e in attached]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in attached)), 30)
    # One more joins from a Last-Event-ID while the shared feed is live.
    so_far = [c async for c in real_stream(handle.session_id, run_id=handle.run_id, follow=False)]
    assert len(so_far) >= 2
    resumed_from = so_far[0].seq
    resumed_attached = asyncio.Event()
    resumed = asyncio.create_task(
        read_events(
            client, params, headers={"Last-Event-ID": str(resumed_from)}, first=resumed_attached
        )
    )
    await asyncio.wait_for(resumed_attached.wait(), 30)
    await helix.approve(handle.session_id, "a1")
    results = await asyncio.wait_for(asyncio.gather(*readers), 60)
    late = await asyncio.wait_for(resumed, 60)

    assert followers == [0], followers  # one database reader for all of them
    first = results[0]
    assert [e["event"] for e in first][-2:] == ["run_completed", "end"]
    seqs = [int(e["id"]) for e in first[:-1]]
    assert seqs == sorted(set(seqs))
    for events in results[1:]:
        assert events == first
    assert late == [e for e in first if e.get("id") is None or int(e["id"]) > resumed_from]
    assert late[0]["id"] == first[1]["id"]


async def test_a_reader_too_far_behind_is_told_to_resume_without_end(
    helix, make_agent, mock_llm, monkeypatch
):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "hello"}, agent=agent.name)
    result = await (await helix.execute(agent, "hi")).result()
    chunks = [c async for c in helix.stream(result.session_id, run_id=result.run_id, follow=False)]
    assert len(chunks) > 2
    fanout = SessionFanout(lambda sid, after, rid: helix.stream(sid, after_seq=after, run_id=rid))

    monkeypatch.setattr(sse_fanout, "MAX_BACKLOG", 2)
    texts = [
        t
        async for t in event_stream(
            fanout.subscription(result.session_id, result.run_id, 0), keepalive_seconds=5
        )
    ]
    body = "".join(texts)
    assert "event: end" not in body  # no `end`: an EventSource reconnects and resumes
    assert body.count("\nevent: ") == 3 and f"id: {chunks[2].seq}\n" in body

    monkeypatch.setattr(sse_fanout, "MAX_BACKLOG", 10_000)
    texts = [
        t
        async for t in event_stream(
            fanout.subscription(result.session_id, result.run_id, chunks[0].seq),
            keepalive_seconds=5,
        )
    ]
    body = "".join(texts)
    assert body.endswith("event: end\ndata: {}\n\n")
    assert [f"id: {c.seq}\n" in body for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert fanout.feeds == 0
