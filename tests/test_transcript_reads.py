"""What a transcript read gives back is what was stored (issue 48).

The reads of `helix.messages` (a run's first read, a top-up, a checkpoint's transcript)
take the JSON columns (tool calls, thinking, attachments) as text and validate them with
pydantic's JSON parser, where they used to take psycopg's decoded values. Each read is
compared, on generated messages stored in PostgreSQL, with the messages written and with
the old way of reading the same rows (the jsonb columns decoded by psycopg, then
validated): any value the two parsers read apart fails here.
"""

from __future__ import annotations

import copy
import json
import pickle
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helix_dbos import HelixDBOS
from helix_dbos.orchestration.parts import StoredBlob
from helix_dbos.orchestration.types import NO_ITEMS, Message, ThinkingBlock, ToolCall
from helix_dbos.store import checkpoint_rows
from helix_dbos.store import repository as repo
from helix_dbos.store.driver import DriverConnection

# Text PostgreSQL stores as given (helix replaces NUL and lone surrogates before storing:
# test_unstorable_text.py).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
CALLS = st.lists(st.builds(ToolCall, id=TEXT, name=TEXT, arguments=JSON_VALUES), max_size=3)
THINKING = st.lists(
    st.builds(
        ThinkingBlock,
        text=TEXT,
        signature=st.none() | TEXT,
        redacted=st.booleans(),
        item_id=st.none() | TEXT,
    ),
    max_size=2,
)
BLOBS = st.lists(
    st.builds(
        StoredBlob,
        sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
        media_type=st.sampled_from(["image/png", "application/pdf"]),
        size=st.integers(0, 2**40),
    ),
    max_size=2,
)
MESSAGES = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant", "tool"]),
        content=st.none() | TEXT,
        tool_calls=CALLS,
        tool_call_id=st.none() | TEXT,
        tool_name=st.none() | TEXT,
        thinking=THINKING,
        is_error=st.booleans(),
        attachments=BLOBS,
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture
async def conn(helix: HelixDBOS, session_database_url: str) -> AsyncIterator[DriverConnection]:
    """An autocommit connection under the driver helix's statements go through."""
    raw = await psycopg.AsyncConnection.connect(session_database_url, autocommit=True)
    try:
        yield DriverConnection(raw)
    finally:
        await raw.close()


async def new_session(conn: DriverConnection) -> str:
    session_id = f"ses_{uuid.uuid4().hex}"
    await conn.execute(
        repo._sql(
            "INSERT INTO helix.sessions (session_id, agent_name, status) "
            "VALUES (:sid, 'reads', 'completed')"
        ),
        {"sid": session_id},
    )
    return session_id


async def decoded_by_psycopg(conn: DriverConnection, session_id: str) -> list[Message]:
    """The old read: jsonb columns as psycopg decodes them, then validated as dicts."""
    rows = await conn.execute(
        repo._sql(
            "SELECT role, content, tool_calls, tool_call_id, tool_name, thinking, is_error, "
            "parts FROM helix.messages WHERE session_id = :sid ORDER BY seq"
        ),
        {"sid": session_id},
    )
    fields = ("role", "content", "tool_calls", "tool_call_id", "tool_name", "thinking")
    out = []
    for row in rows:
        values: dict[str, Any] = {k: v for k, v in zip(fields, row, strict=False) if v is not None}
        values["is_error"] = bool(row[6])
        if row[7] is not None:
            values["attachments"] = row[7]
        out.append(Message.model_validate(values))
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=MESSAGES)
async def test_every_read_gives_back_the_stored_messages(
    conn: DriverConnection, messages: list[Message]
) -> None:
    session_id = await new_session(conn)
    assert await repo.insert_messages(conn, session_id, None, 1, messages) == len(messages) + 1
    old = await decoded_by_psycopg(conn, session_id)
    loaded = [m for _, m in await repo.load_messages(conn, session_id)]
    first = await repo.first_read(conn, None, session_id, "run_none", after_seq=0)
    assert [seq for seq, _ in first.messages] == list(range(1, len(messages) + 1))
    later = await repo.first_read(conn, None, session_id, "run_none", after_seq=1)
    until = await checkpoint_rows.messages_until(conn, session_id, len(messages))
    assert loaded == old
    assert [m for _, m in first.messages] == old
    assert [m for _, m in later.messages] == old[1:]
    assert until == old
    # and what was written comes back: jsonb keeps a number's digits, not its type (1.0e15
    # reads back as an int, -0.0 as 0, equal to it; a float beyond 2**53 as an int that
    # is not, so the floats drawn stay below).
    assert loaded == messages


async def test_rows_written_with_sql_read_as_before(conn: DriverConnection) -> None:
    """JSON columns a user's SQL may leave empty in other ways than helix does (a JSON
    null, an empty list) read as the model's defaults, as the old decoding read them."""
    session_id = await new_session(conn)
    await conn.execute(
        repo._sql(
            "INSERT INTO helix.messages (session_id, seq, role, content, tool_calls, "
            "thinking, parts) VALUES (:sid, 1, 'assistant', 'a', 'null', 'null', 'null'), "
            "(:sid, 2, 'assistant', 'b', '[]', '[]', '[]'), "
            "(:sid, 3, 'assistant', 'c', NULL, NULL, NULL)"
        ),
        {"sid": session_id},
    )
    expected = [Message(role="assistant", content=c) for c in "abc"]
    assert await decoded_by_psycopg(conn, session_id) == expected
    assert [m for _, m in await repo.load_messages(conn, session_id)] == expected
    read = await repo.first_read(conn, None, session_id, "run_none", after_seq=0)
    assert [m for _, m in read.messages] == expected


async def test_read_messages_share_one_empty_list_that_refuses_to_grow(
    conn: DriverConnection,
) -> None:
    """A read message holds no empty list of its own (the collector walks each one a
    cached transcript holds, issue 48): its empty list fields are one shared list, which
    raises when changed, and whose copies, pickles and dumps are plain lists."""
    session_id = await new_session(conn)
    call = ToolCall(id="c1", name="ping", arguments={"n": 1})
    written = [
        Message(role="user", content="hi"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="pong", tool_call_id="c1", tool_name="ping"),
    ]
    await repo.insert_messages(conn, session_id, None, 1, written)
    first = await repo.first_read(conn, None, session_id, "run_none", after_seq=0)
    reads = [
        [m for _, m in await repo.load_messages(conn, session_id)],
        [m for _, m in first.messages],
        await checkpoint_rows.messages_until(conn, session_id, 3),
    ]
    for read in reads:
        assert read == written
        user, assistant, _ = read
        assert user.tool_calls is NO_ITEMS and user.thinking is NO_ITEMS
        assert user.attachments is NO_ITEMS
        assert assistant.tool_calls == [call] and assistant.tool_calls is not NO_ITEMS
    shared = reads[0][0].tool_calls
    for change in (
        lambda: shared.append(call),
        lambda: shared.extend([call]),
        lambda: shared.insert(0, call),
        lambda: shared.__iadd__([call]),
        lambda: shared.__setitem__(slice(0, 0), [call]),
    ):
        with pytest.raises(TypeError):
            change()
    assert NO_ITEMS == [] and len(NO_ITEMS) == 0
    # Changing a message means giving it a list of its own, as with any pydantic model.
    user = reads[0][0]
    copied = user.model_copy(deep=True)
    copied.tool_calls.append(call)
    assert copied.tool_calls == [call] and user.tool_calls == []
    user.tool_calls = [call]
    assert reads[1][0].tool_calls == []  # the other reads' messages are untouched
    for value in (
        copy.copy(NO_ITEMS),
        copy.deepcopy(NO_ITEMS),
        pickle.loads(pickle.dumps(NO_ITEMS)),
    ):
        assert type(value) is list and value == []
    again = pickle.loads(pickle.dumps(reads[1][0]))
    assert again == written[0] and type(again.thinking) is list
    assert reads[1][0].model_dump()["thinking"] == []
    assert json.loads(reads[1][0].model_dump_json())["attachments"] == []
