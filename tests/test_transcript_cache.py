"""The transcript cache keeps what each LLM step derives from the transcript (issue 48).

A step used to walk the whole conversation in Python for the call ids it holds and the
messages the model is sent; `Transcript` keeps both and tops them up with the rows
each step appends. These tests check that what it keeps is what a walk of the stored
transcript gives, through real runs on PostgreSQL and DBOS (the scripted model reuses
ids across steps and runs, so a stale id set would let a call keep a taken id).
"""

from __future__ import annotations

from helpers import calls

from helix_dbos import tool
from helix_dbos.orchestration.call_ids import helix_call_id, transcript_call_ids
from helix_dbos.orchestration.messages import build_messages_for_llm, with_system_prompt
from helix_dbos.orchestration.parts import StoredBlob
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.process.process_runtime import HistoryCache
from helix_dbos.store import repository as repo


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def test_a_transcript_built_in_parts_derives_what_a_walk_of_it_does():
    parts = [
        [Message(role="system", content="be brief"), Message(role="user", content="hi")],
        [
            Message(role="assistant", tool_calls=[ToolCall(id="a", name="echo", arguments={})]),
            Message(role="tool", tool_call_id="a", tool_name="echo", content="x"),
        ],
        [],
        [Message(role="system", content="a note"), Message(role="assistant", content="done")],
    ]
    transcript = Transcript(parts[0])
    for part in parts[1:]:
        transcript.extend(iter(part))  # an iterator is consumed once, as rows are
    whole = [m for part in parts for m in part]
    assert transcript.messages == whole and len(transcript) == len(whole)
    assert transcript.call_ids == transcript_call_ids(whole) == {"a"}
    assert transcript.for_llm == build_messages_for_llm(whole, "", None)
    assert all(m.role != "system" for m in transcript.for_llm)
    prompt = lambda state: f"state {state}"  # noqa: E731
    assert with_system_prompt(transcript.for_llm, prompt, 7) == build_messages_for_llm(
        whole, prompt, 7
    )
    assert not transcript.holds_parts  # no request built from it has a part to resolve
    blob = StoredBlob(sha256="0" * 64, media_type="image/png", size=3)
    transcript.extend(iter([Message(role="user", content="look", attachments=[blob])]))
    assert transcript.holds_parts
    transcript.extend(iter([Message(role="assistant", content="a cat")]))
    assert transcript.holds_parts  # once it holds one, it does for good


@tool
def echo(text: str) -> str:
    """Say something back."""
    return text


async def stored_transcript(helix, session_id: str) -> list[Message]:
    async def load() -> list[Message]:
        async with helix.runtime.engine.connect() as conn:
            return [m for _, m in await repo.load_messages(conn, session_id, after_seq=0)]

    return await on_target_loop(load)


async def test_ids_reused_across_steps_and_runs_are_rekeyed_from_the_cache(
    helix, make_agent, mock_llm
):
    agent = make_agent(tools=[echo])
    mock_llm.add_responses(
        calls(("a", "echo", {"text": "1"})),
        calls(("b", "echo", {"text": "2"})),
        calls(("a", "echo", {"text": "3"})),  # step 1's id, taken by the cache's top-up
        text("done"),
        agent=agent.name,
    )
    first = await helix.execute(agent, "go")
    assert (await first.result()).status == "completed"
    mock_llm.add_responses(
        calls(("b", "echo", {"text": "4"}), ("c", "echo", {"text": "5"})),  # b: run 1's
        text("done again"),
        agent=agent.name,
    )
    second = await helix.execute(agent, "again", session_id=first.session_id)
    assert (await second.result()).status == "completed"

    stored = await stored_transcript(helix, first.session_id)
    ids = [c.id for m in stored for c in m.tool_calls]
    assert ids == ["a", "b", helix_call_id(f"{first.run_id}:3", 0)] + [
        helix_call_id(f"{second.run_id}:1", 0),
        "c",
    ]
    assert len(set(ids)) == len(ids)
    # The process's cached transcript is the stored one up to the run's final answer
    # (the final write's row, read by the session's next run), and so is what it derived.
    cached = helix.runtime.history._entries[first.session_id].transcript
    assert cached.messages == stored[:-1] and stored[-1].content == "done again"
    assert cached.call_ids == transcript_call_ids(stored) == set(ids)
    assert cached.for_llm == [m for m in stored[:-1] if m.role != "system"]
    # The last model call was sent all of it (after the system prompt, if any).
    sent = [r for r in mock_llm.inputs if r.agent_name == agent.name][-1].messages
    assert [m for m in sent if m.role != "system"] == cached.for_llm


def test_the_cache_is_bounded_by_messages_and_drops_the_least_recently_used():
    """A process serving many long sessions keeps at most `max_messages` cached messages
    (the least recently used sessions go first), and always the session just used."""
    cache = HistoryCache(max_sessions=10, max_messages=5)

    def said(*texts: str) -> list[Message]:
        return [Message(role="user", content=t) for t in texts]

    cache.seed_new_run("a", "ra", said("1", "2"), {})
    cache.seed_new_run("b", "rb", said("1", "2"), {})
    assert set(cache._entries) == {"a", "b"} and cache._held == 4
    cache.take("a", (3, said("3")))  # "a" is the most recently used now, 5 messages held
    assert list(cache._entries) == ["b", "a"] and cache._held == 5
    cache.take("a", (4, said("4")))  # 6 > 5: "b" goes
    assert list(cache._entries) == ["a"] and cache._held == 4
    cache.seed_new_run("c", "rc", said(*"123456"), {})  # alone beyond the bound: kept
    assert list(cache._entries) == ["c"] and cache._held == 6
    assert cache.take_new_run("a", "ra") is None  # its entry went: the step reads instead
    cache.forget("c")
    assert not cache._entries and cache._held == 0
