"""A parent's `subagent` usage row rolls up what its child spent (issue 37): the
child's own tokens and its own children's, whether the child completed, failed or
was interrupted; and the documented ways of summing a tree's tokens (docs/sub-agents.md,
docs/database.md) agree."""

from __future__ import annotations

import asyncio
import re

from checkpoint_shadow import shadow_checkpoints  # noqa: F401 - autouse: as the trigger gave
from helpers import calls, sql

from helix_dbos import sub_agent_tool, tool
from tests.docs_text import TEXT

TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
COLUMNS = ", ".join(f"COALESCE(sum({c}), 0)" for c in TOKENS)


def usage(input_tokens: int, output_tokens: int, cache_read_tokens: int = 0) -> dict:
    """Explicit token counts, each agent's distinct, so a sum shows what it added up."""
    return {
        "model": "mock",
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
    }


def text(content: str, tokens: dict) -> dict:
    return {"type": "text", "content": content, "usage": tokens}


def spent(database_url: str, session_id: str) -> tuple[int, ...]:
    """A session's own work: its rows of every kind but `subagent`."""
    [row] = sql(
        database_url,
        f"SELECT {COLUMNS} FROM helix.usage WHERE session_id = %s AND kind <> 'subagent'",
        session_id,
    )
    return tuple(row)


def subagent_rows(database_url: str, session_id: str) -> dict[str, tuple]:
    """A session's `subagent` rows by tool name: (success, *tokens)."""
    rows = sql(
        database_url,
        f"SELECT tool_name, success, {', '.join(TOKENS)} FROM helix.usage "
        "WHERE session_id = %s AND kind = 'subagent'",
        session_id,
    )
    return {name: tuple(rest) for name, *rest in rows}


def child_of(database_url: str, session_id: str, agent_name: str) -> str:
    [(child,)] = sql(
        database_url,
        "SELECT session_id FROM helix.sessions WHERE parent_session_id = %s AND agent_name = %s",
        session_id,
        agent_name,
    )
    return child


def added(*rows: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*rows, strict=True))


async def test_a_subagent_row_rolls_up_the_grandchildrens_tokens(
    helix, make_agent, mock_llm, database_url
):
    """docs/sub-agents.md: a `subagent` row carries "the child's tokens including its own children's".
    Three levels: the root's row is the middle agent's own tokens plus the grandchild's."""
    grandchild = make_agent()
    child = make_agent(tools=[sub_agent_tool(grandchild, name="deep")])
    root = make_agent(tools=[sub_agent_tool(child, name="mid")])
    mock_llm.add_responses(
        calls(("m", "subagent__mid", {"message": "go deeper"}), usage=usage(1, 2)),
        text("top", usage(3, 4)),
        agent=root.name,
    )
    mock_llm.add_responses(
        calls(("d", "subagent__deep", {"message": "deepest"}), usage=usage(100, 20, 10)),
        text("mid", usage(300, 40)),
        agent=child.name,
    )
    mock_llm.add_response(text("bottom", usage(50_000, 6_000, 7_000)), agent=grandchild.name)

    result = await (await helix.execute(root, "go")).result()

    assert result.status == "completed", result.error
    mid = child_of(database_url, result.session_id, child.name)
    deep = child_of(database_url, mid, grandchild.name)
    assert spent(database_url, deep) == (50_000, 6_000, 7_000, 0)
    assert spent(database_url, mid) == (400, 60, 10, 0)
    assert subagent_rows(database_url, mid) == {"subagent__deep": (True, 50_000, 6_000, 7_000, 0)}
    assert subagent_rows(database_url, result.session_id) == {
        "subagent__mid": (True, *added(spent(database_url, mid), spent(database_url, deep)))
    }, "the middle agent's tokens and its own child's"
    tree = await helix.get_usage(session_id=result.session_id, include_children=True)
    assert (tree.input_tokens, tree.llm_calls) == (4 + 400 + 50_000, 5)


async def test_failed_and_interrupted_children_roll_up_the_tokens_they_spent(
    helix, make_agent, mock_llm, database_url
):
    """A delegation that failed or was interrupted still cost what its child spent: its
    `subagent` row carries those tokens, so a root's own rows plus its `subagent` rows
    (the docs' "equivalently") agree with `get_usage(include_children=True)` and the
    docs' SQL over the tree."""
    ran: list[str] = []

    @tool
    def note(value: str) -> str:
        """Completes at once."""
        ran.append(value)
        return f"noted {value}"

    @tool(require_approval=True)
    def publish(post: str) -> str:
        """Needs a human's approval (never given: the child is interrupted)."""
        ran.append(post)
        return f"published {post}"

    flaky = make_agent(tools=[note])
    writer = make_agent(tools=[publish])
    root = make_agent(tools=[sub_agent_tool(flaky, name="flaky"), sub_agent_tool(writer)])
    mock_llm.add_responses(
        calls(
            ("f", "subagent__flaky", {"message": "try"}),
            ("w", f"subagent__{writer.name}", {"message": "post it"}),
            usage=usage(1, 2),
        ),
        text("both helpers stopped", usage(3, 4)),
        agent=root.name,
    )
    mock_llm.add_responses(
        calls(("n", "note", {"value": "first"}), usage=usage(700, 80, 9)),
        {"type": "error", "error": "provider exploded", "usage": usage(20, 1)},
        agent=flaky.name,
    )
    mock_llm.add_response(
        calls(("p", "publish", {"post": "hello"}), usage=usage(6_000, 500, 40)), agent=writer.name
    )

    handle = await helix.execute(root, "delegate")
    waiting = await wait_for_pending_call(database_url, handle.session_id, "p")
    await helix.interrupt(waiting, reason="enough")
    result = await asyncio.wait_for(handle.result(), timeout=30)

    assert result.status == "completed", result.error
    assert ran == ["first"], "the failed child ran its tool; the interrupted one published nothing"
    failed = child_of(database_url, handle.session_id, flaky.name)
    assert waiting == child_of(database_url, handle.session_id, writer.name)
    statuses = sql(
        database_url,
        "SELECT session_id, status FROM helix.runs WHERE session_id IN (%s, %s)",
        failed,
        waiting,
    )
    assert sorted(statuses) == sorted([(failed, "failed"), (waiting, "interrupted")])
    assert spent(database_url, failed) == (720, 81, 9, 0), "the failed call reported tokens"
    assert spent(database_url, waiting) == (6_000, 500, 40, 0)
    assert subagent_rows(database_url, handle.session_id) == {
        "subagent__flaky": (False, 720, 81, 9, 0),
        f"subagent__{writer.name}": (False, 6_000, 500, 40, 0),
    }, "each row carries the tokens its child spent"

    own = spent(database_url, handle.session_id)
    [rolled_up] = sql(
        database_url,
        f"SELECT {COLUMNS} FROM helix.usage WHERE session_id = %s AND kind = 'subagent'",
        handle.session_id,
    )
    tree = await helix.get_usage(session_id=handle.session_id, include_children=True)
    assert added(own, tuple(rolled_up)) == tuple(getattr(tree, c) for c in TOKENS)
    assert tree.input_tokens == 4 + 720 + 6_000
    per_root = readme_query("count(DISTINCT s.session_id) AS sessions")
    [(_, sessions, _cost, input_tokens, output_tokens)] = sql(
        database_url, f"SELECT * FROM ({per_root}) q WHERE root_session_id = %s", handle.session_id
    )
    assert (sessions, input_tokens, output_tokens) == (
        3,
        tree.input_tokens,
        tree.output_tokens,
    )
    by_root = readme_query("coalesce(s.root_session_id, u.session_id) AS root")
    [(_, _usd, input_tokens)] = sql(
        database_url, f"SELECT * FROM ({by_root}) q WHERE root = %s", handle.session_id
    )
    assert input_tokens == tree.input_tokens


def readme_query(marker: str) -> str:
    """The documented SQL block that contains `marker`, as a subquery."""
    [query] = [q for q in re.findall(r"```sql\n(.*?)```", TEXT, re.S) if marker in q]
    return query.strip().rstrip(";")


async def wait_for_pending_call(database_url: str, root_session_id: str, call_id: str) -> str:
    """The session of the descendant whose call `call_id` waits for a human."""
    for _ in range(400):
        rows = sql(
            database_url,
            "SELECT session_id FROM helix.waiting_runs "
            "WHERE root_session_id = %s AND tool_call_id = %s",
            root_session_id,
            call_id,
        )
        if rows:
            return rows[0][0]
        await asyncio.sleep(0.05)
    raise AssertionError("the child never waited")
