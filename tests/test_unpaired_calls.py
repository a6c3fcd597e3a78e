"""Whatever ends a run, its transcript holds no tool call without its one result (issue 26).

A step's tool results live in memory until the next LLM step's write-ahead (or the
run's final write) writes them. Each test ends a run at a moment when such rows are
unwritten: the model fails after them, an interrupt arrives while they wait, and the
database refuses them for good (a trigger of the test's, on the real table: in the
write-ahead, and in the final write). A refused write cannot be retried into success:
the run fails, and the statement that ends it pairs each dangling call with an error.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
from helpers import calls, sql

from helix_dbos import ToolContext, tool


def dangling(database_url: str, session_id: str) -> list[tuple[str, int]]:
    """Each tool call of the session with the number of its results, if not exactly one."""
    return sql(
        database_url,
        "SELECT c ->> 'id', (SELECT count(*) FROM helix.messages t WHERE t.session_id = "
        "m.session_id AND t.role = 'tool' AND t.tool_call_id = c ->> 'id') AS n "
        "FROM helix.messages m, jsonb_array_elements(m.tool_calls) c "
        "WHERE m.session_id = %s AND m.role = 'assistant' "
        "AND (SELECT count(*) FROM helix.messages t WHERE t.session_id = m.session_id "
        "AND t.role = 'tool' AND t.tool_call_id = c ->> 'id') <> 1",
        session_id,
    )


@pytest.fixture
def refused(database_url: str) -> Iterator[str]:
    """A word that helix.messages refuses (a trigger raises), like a row PostgreSQL
    cannot take: any message holding it fails its insert, every time."""
    word = f"REFUSED{uuid.uuid4().hex[:8]}"
    fn = f"helix.refuse_{word.lower()}"
    sql(
        database_url,
        f"CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.content LIKE '%%{word}%%' THEN RAISE EXCEPTION 'refused by the test'; "
        "END IF; RETURN NEW; END $$",
    )
    sql(
        database_url,
        f"CREATE TRIGGER {word.lower()} BEFORE INSERT ON helix.messages "
        f"FOR EACH ROW EXECUTE FUNCTION {fn}()",
    )
    yield word
    sql(database_url, f"DROP TRIGGER {word.lower()} ON helix.messages")
    sql(database_url, f"DROP FUNCTION {fn}()")


def calls_to(*names: str) -> dict[str, object]:
    """Calls of `names` without arguments, ids c0, c1..."""
    return calls(*((f"c{i}", n, {}) for i, n in enumerate(names)))


def slow_tools(word: str = "fine"):  # type: ignore[no-untyped-def]
    @tool
    async def slow() -> str:
        """Runs past the live start, so the step's head (the calls) is written first."""
        await asyncio.sleep(0.3)
        return f"slow {word}"

    @tool
    def quick() -> str:
        """Returns at once."""
        return "quick"

    return slow, quick


async def test_the_model_fails_after_a_steps_rows(helix, make_agent, mock_llm, database_url):
    """The model's next call fails for good: the rows went ahead of it, paired."""
    agent = make_agent(tools=list(slow_tools()))
    mock_llm.add_responses(calls_to("slow", "quick"), agent=agent.name)  # then nothing: it fails
    handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "failed" and "LLM call failed" in (result.error or "")
    assert dangling(database_url, handle.session_id) == []
    roles = [m.role for m in await helix.get_messages(handle.session_id)]
    assert roles == ["user", "assistant", "tool", "tool"]


async def test_an_interrupt_while_a_steps_rows_are_in_memory(
    helix, make_agent, mock_llm, database_url
):
    started = threading.Event()

    @tool
    async def slow(ctx: ToolContext) -> str:
        """Tells the test it runs, then takes a while."""
        started.set()
        await asyncio.sleep(1.0)
        return "slow"

    agent = make_agent(tools=[slow])
    mock_llm.add_responses(calls_to("slow", "slow"), agent=agent.name)
    handle = await helix.execute(agent, "go")
    assert await asyncio.to_thread(started.wait, 30)
    await helix.interrupt(handle.session_id, reason="stop")
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "interrupted"
    assert dangling(database_url, handle.session_id) == []


async def test_a_write_ahead_the_database_refuses(
    helix, make_agent, mock_llm, database_url, refused
):
    """The step's results cannot be written (its head, the calls, was): the run fails,
    and its end pairs both calls with an error. Before: two calls without a result."""
    agent = make_agent(tools=list(slow_tools(refused)))
    mock_llm.add_responses(
        calls_to("slow", "quick"), {"type": "text", "content": "x"}, agent=agent.name
    )
    handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "failed"
    assert dangling(database_url, handle.session_id) == []
    messages = await helix.get_messages(handle.session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert all(m.is_error and "Not completed" in (m.content or "") for m in messages[2:])
    assert mock_llm.call_count >= 1
    row = sql(
        database_url,
        "SELECT r.status, s.status FROM helix.runs r JOIN helix.sessions s USING (session_id) "
        "WHERE r.run_id = %s",
        handle.run_id,
    )
    assert row == [("failed", "failed")]


async def test_a_final_write_the_database_refuses(
    helix, make_agent, mock_llm, database_url, refused
):
    """The run's last step (a tool and the finish_with tool that ends it) cannot be
    written: the run fails instead of staying live, its calls paired with an error."""
    slow, _ = slow_tools(refused)

    @tool(finish_with=True)
    def submit() -> str:
        """Ends the run."""
        return "submitted"

    agent = make_agent(tools=[slow, submit])
    mock_llm.add_responses(calls_to("slow", "submit"), agent=agent.name)
    handle = await helix.execute(agent, "go")
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.status == "failed"
    assert "could not be written" in (result.error or "")
    assert dangling(database_url, handle.session_id) == []
    row = sql(database_url, "SELECT status, error FROM helix.runs WHERE run_id = %s", handle.run_id)
    assert row[0][0] == "failed" and "could not be written" in row[0][1]
