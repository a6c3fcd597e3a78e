"""Stream chunks: durable rows, live readers woken by NOTIFY, resume from a sequence."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from helpers import calls, sql

from helix_dbos import ToolContext, tool
from helix_dbos.streaming import CHUNK_TYPES, PAYLOAD_MODELS, StreamChunk
from helix_dbos.streaming.stream_reads import SharedChunkReads


async def collect(helix, session_id: str, **kwargs) -> list[StreamChunk]:
    return [c async for c in helix.stream(session_id, **kwargs)]


async def test_a_run_streams_its_lifecycle_tools_state_and_output(
    helix, make_agent, mock_llm, database_url
):
    @tool
    async def note(text: str, ctx: ToolContext) -> str:
        """Save a note."""
        ctx.update_state({"last": text})
        await ctx.emit("note_saved", {"text": text})
        return "saved"

    agent = make_agent(tools=[note])
    mock_llm.add_responses(
        calls(("n1", "note", {"text": "hi"})),
        {"type": "text", "content": "All noted."},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "note hi")
    chunks = await asyncio.wait_for(
        collect(helix, handle.session_id, run_id=handle.run_id), timeout=30
    )

    types = [c.type for c in chunks]
    assert types == [
        "run_started",
        "tool_start",
        "custom",
        "tool_end",
        "state_patch",
        "text_delta",
        "output",
        "run_completed",
    ]
    assert [c.seq for c in chunks] == sorted(c.seq for c in chunks) and len(
        {c.seq for c in chunks}
    ) == len(chunks)
    by_type = {c.type: c for c in chunks}
    assert by_type["tool_start"].payload == {
        "tool_call_id": "n1",
        "tool_name": "note",
        "arguments": {"text": "hi"},
    }
    assert by_type["tool_end"].payload == {
        "tool_call_id": "n1",
        "tool_name": "note",
        "success": True,
        "result": "saved",
    }
    assert by_type["custom"].payload == {"event": "note_saved", "data": {"text": "hi"}}
    assert by_type["state_patch"].payload == {"set": {"last": "hi"}, "removed": []}
    assert by_type["text_delta"].payload == {"delta": "All noted."}
    assert by_type["run_completed"].payload == {"output": "All noted."}
    for c in chunks:
        assert (c.session_id, c.run_id, c.agent_name) == (
            handle.session_id,
            handle.run_id,
            agent.name,
        )
        assert c.timestamp is not None and c.step is not None
    assert {c.step for c in chunks if c.type.startswith("tool")} == {1}
    assert chunks[-1].data.output == "All noted." and by_type["tool_end"].data.success is True
    assert by_type["state_patch"].data.set == {"last": "hi"}


def test_every_chunk_type_has_a_typed_payload():
    assert set(PAYLOAD_MODELS) == set(CHUNK_TYPES)


async def test_every_chunk_the_runtime_writes_parses_into_its_typed_payload(helix, database_url):
    rows = sql(database_url, "SELECT type, payload FROM helix.stream_chunks")
    assert rows, "earlier tests in this session wrote chunks"
    for kind, payload in rows:
        PAYLOAD_MODELS[kind].model_validate(payload)


async def test_live_reader_is_woken_by_notify_not_by_polling(helix, make_agent, mock_llm):
    release = threading.Event()

    @tool
    def slow() -> str:
        """Waits for the test."""
        release.wait(30)
        return "done"

    agent = make_agent(tools=[slow])
    mock_llm.add_responses(
        calls(("s", "slow", {})), {"type": "text", "content": "finished"}, agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    received: list[tuple[float, str]] = []

    async def read() -> None:
        # A 60 s safety poll: only NOTIFY can deliver these chunks within the test's timeout.
        async for chunk in helix.stream(handle.session_id, run_id=handle.run_id, poll_seconds=60):
            received.append((time.monotonic(), chunk.type))

    reader = asyncio.create_task(read())
    for _ in range(200):
        if any(t == "tool_start" for _, t in received):
            break
        await asyncio.sleep(0.05)
    assert [t for _, t in received] == ["run_started", "tool_start"]
    released_at = time.monotonic()
    release.set()
    await asyncio.wait_for(reader, timeout=20)
    assert [t for _, t in received][-1] == "run_completed"
    assert [t for _, t in received].count("tool_start") == 1, "live once, not repeated"
    tool_end_at = next(at for at, t in received if t == "tool_end")
    assert tool_end_at - released_at < 10, "the reader was woken by the notification"


async def test_reader_resumes_from_a_sequence_and_filters_by_run(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent()
    mock_llm.add_responses(
        {"type": "text", "content": "one"}, {"type": "text", "content": "two"}, agent=agent.name
    )
    first = await (await helix.execute(agent, "1")).result()
    second_handle = await helix.execute(agent, "2", session_id=first.session_id)
    await second_handle.result()

    everything = await collect(helix, first.session_id, follow=False)
    assert [c.type for c in everything].count("run_started") == 2
    middle = everything[3].seq
    rest = await collect(helix, first.session_id, after_seq=middle, follow=False)
    assert [c.seq for c in rest] == [c.seq for c in everything if c.seq > middle]

    second_only = await collect(helix, first.session_id, run_id=second_handle.run_id)
    assert {c.run_id for c in second_only} == {second_handle.run_id}
    assert second_only[-1].payload == {"output": "two"}
    start_sequence = sql(
        database_url,
        "SELECT start_sequence FROM helix.runs WHERE run_id = %s",
        second_handle.run_id,
    )[0][0]
    assert [c.seq for c in everything if c.seq > start_sequence] == [c.seq for c in second_only]


async def test_approval_request_and_resume_are_streamed(helix, make_agent, mock_llm):
    @tool(require_approval=True)
    def launch(target: str) -> str:
        """Launch something."""
        return "launched"

    agent = make_agent(tools=[launch])
    mock_llm.add_responses(
        calls(("l", "launch", {"target": "moon"})),
        {"type": "text", "content": "ok"},
        agent=agent.name,
    )
    handle = await helix.execute(agent, "go")
    seen: list[StreamChunk] = []

    async def read() -> None:
        async for chunk in helix.stream(handle.session_id, run_id=handle.run_id):
            seen.append(chunk)
            if chunk.type == "tool_approval_request":
                await helix.approve(handle.session_id, chunk.payload["tool_call_id"])

    await asyncio.wait_for(read(), timeout=30)
    types = [c.type for c in seen]
    assert (
        types.index("tool_approval_request") < types.index("run_resumed") < types.index("tool_end")
    )
    request = next(c for c in seen if c.type == "tool_approval_request")
    assert (
        request.payload["input"] == {"target": "moon"} and request.payload["tool_name"] == "launch"
    )
    assert types[-1] == "run_completed"
    # Every chunk names its agent and step, `run_resumed` too (the step that waited).
    resumed = next(c for c in seen if c.type == "run_resumed")
    assert (resumed.agent_name, resumed.step) == (agent.name, request.step) and request.step
    assert all(c.agent_name == agent.name and c.step is not None for c in seen)


async def test_an_aborted_runs_last_chunk_names_its_agent_and_step(helix, make_agent, mock_llm):
    @tool(require_approval=True)
    def launch(target: str) -> str:
        """Launch something."""
        return "launched"

    agent = make_agent(tools=[launch])
    mock_llm.add_responses(calls(("l", "launch", {"target": "moon"})), agent=agent.name)
    handle = await helix.execute(agent, "go")
    seen: list[StreamChunk] = []

    async def read() -> None:
        async for chunk in helix.stream(handle.session_id, run_id=handle.run_id):
            seen.append(chunk)
            if chunk.type == "tool_approval_request":
                await helix.abort(handle.session_id, reason="no")

    await asyncio.wait_for(read(), timeout=30)
    request = next(c for c in seen if c.type == "tool_approval_request")
    assert seen[-1].type == "run_aborted"
    assert (seen[-1].agent_name, seen[-1].step) == (agent.name, request.step)


async def test_concurrent_readers_of_a_session_share_one_query():
    calls: list[tuple] = []
    gate = asyncio.Event()

    async def loader(session_id, after_seq, run_id):
        calls.append((session_id, after_seq, run_id))
        await gate.wait()
        if session_id == "broken":
            raise RuntimeError("database gone")
        return [after_seq]

    reads = SharedChunkReads(loader)
    same = [asyncio.create_task(reads.load("s", 5, None)) for _ in range(100)]
    other = asyncio.create_task(reads.load("s", 7, None))
    failing = [asyncio.create_task(reads.load("broken", 0, None)) for _ in range(3)]
    await asyncio.sleep(0.01)
    gate.set()
    assert [await t for t in same] == [[5]] * 100
    assert await other == [7]
    for task in failing:
        with pytest.raises(RuntimeError, match="database gone"):
            await task
    assert sorted(calls) == [("broken", 0, None), ("s", 5, None), ("s", 7, None)]
    assert await reads.load("s", 5, None) == [5] and len(calls) == 4, (
        "a finished query is not cached"
    )
