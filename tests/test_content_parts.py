"""Content parts on the real runtime (issue 49): images and PDFs stored once in
`helix.blobs`, referenced by transcripts and checkpoints, resolved for the model only.

Plain SQL checks what was written: a 20-step run that carries a 1 MB PDF writes it once,
its DBOS step outputs stay small, and the transcript rows hold only references.
"""

from __future__ import annotations

import hashlib
import os

import forkserver
import pytest
from helpers import calls, sql

from helix_dbos import (
    BinaryContent,
    ContentPartError,
    ContentTooLargeError,
    DocumentUrl,
    ImageUrl,
    InvalidInputError,
    LLMConfig,
    StoredBlob,
    tool,
)
from helix_dbos.orchestration.parts import MAX_PART_BYTES
from helix_dbos.runtime.steps import content_parts

MB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(2048)


def pdf_of(size: int) -> bytes:
    """A PDF-looking body of `size` bytes, unique to the test (random: not compressible)."""
    head = b"%PDF-1.7\n"
    return head + os.urandom(size - len(head))


@tool
def noop(i: int) -> str:
    """Does nothing; a step of the run."""
    return f"ok {i}"


async def test_a_20_step_run_carrying_a_1mb_pdf_writes_it_once(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=[noop], max_steps=30)
    pdf = pdf_of(MB)
    sha = hashlib.sha256(pdf).hexdigest()
    seen: list[bytes] = []

    def respond(request):
        first = next(m for m in request.messages if m.role == "user")
        seen.append(first.attachments[0].data)  # the adapter gets the bytes back
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if steps < 19:
            return calls((f"c{steps}", "noop", {"i": steps}))
        return {"type": "text", "content": "read it"}

    mock_llm.set_responder(respond)
    try:
        handle = await helix.execute(
            agent, ["Summarise this report.", BinaryContent(data=pdf, media_type="application/pdf", identifier="q3.pdf")]
        )  # fmt: skip
        result = await handle.result()
    finally:
        mock_llm.set_responder(None)
    assert result.status == "completed", result.error
    assert len(seen) == 20 and all(data == pdf for data in seen)
    assert sql(database_url, "SELECT count(*), sum(size), sum(octet_length(data)) FROM helix.blobs WHERE sha256 = %s", sha) == [(1, MB, MB)]  # fmt: skip
    # The transcript holds the reference, never the bytes.
    rows = sql(
        database_url,
        "SELECT content, parts FROM helix.messages WHERE session_id = %s AND role = 'user'",
        result.session_id,
    )
    assert rows == [
        (
            "Summarise this report.",
            [{"kind": "blob", "sha256": sha, "media_type": "application/pdf", "size": MB, "identifier": "q3.pdf"}],
        )
    ]  # fmt: skip
    total, largest, steps = sql(
        database_url,
        "SELECT COALESCE(sum(octet_length(output)), 0), COALESCE(max(octet_length(output)), 0), "
        "count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s",
        f"helix-{result.run_id}",
    )[0]
    assert steps >= 39  # 20 LLM steps and 19 tool steps
    assert largest < 8 * 1024 and total < 200 * 1024, (total, largest)
    inputs = sql(
        database_url,
        "SELECT COALESCE(octet_length(s.inputs), 0) + COALESCE(octet_length(i.inputs), 0) "
        "FROM dbos.workflow_status s LEFT JOIN dbos.workflow_input i USING (workflow_uuid) "
        "WHERE s.workflow_uuid = %s",
        f"helix-{result.run_id}",
    )[0][0]
    assert 0 < inputs < 8 * 1024  # the workflow's inputs name the run, not its input
    messages = await helix.get_messages(result.session_id)
    assert messages[0].attachments == [
        StoredBlob(sha256=sha, media_type="application/pdf", size=MB, identifier="q3.pdf")
    ]


async def test_the_same_bytes_in_two_sessions_are_one_blob(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent()
    image = BinaryContent(data=PNG, media_type="image/png")
    for _ in range(2):
        mock_llm.add_response({"type": "text", "content": "a cat"}, agent=agent.name)
        result = await (await helix.execute(agent, ["What is it?", image])).result()
        assert result.status == "completed"
    assert sql(database_url, "SELECT count(*) FROM helix.blobs WHERE sha256 = %s", image.sha256) == [(1,)]  # fmt: skip
    sent = mock_llm.get_last_input().messages[-1].attachments
    assert sent == [BinaryContent(data=PNG, media_type="image/png", identifier=f"{image.sha256[:12]}.png")]  # fmt: skip


@tool
def snapshot(caption: str) -> list[object]:
    """Returns a caption and an image."""
    return [caption, BinaryContent(data=PNG, media_type="image/png", identifier="snap.png")]


@tool
def only_image() -> BinaryContent:
    """Returns an image alone."""
    return BinaryContent(data=PNG, media_type="image/png", identifier="alone.png")


async def test_a_tool_returns_an_image_that_the_next_model_call_sees(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(tools=[snapshot, only_image])
    mock_llm.add_responses(
        calls(("s1", "snapshot", {"caption": "the dashboard"}), ("s2", "only_image", {})),
        {"type": "text", "content": "seen"},
        agent=agent.name,
    )
    result = await (await helix.execute(agent, "Take a snapshot")).result()
    assert result.status == "completed", result.error
    request = mock_llm.get_last_input()
    tools = [m for m in request.messages if m.role == "tool"]
    assert [(m.content, [a.identifier for a in m.attachments]) for m in tools] == [
        ("the dashboard", ["snap.png"]),
        ("Attached: alone.png", ["alone.png"]),
    ]
    assert all(isinstance(a, BinaryContent) and a.data == PNG for m in tools for a in m.attachments)
    rows = sql(
        database_url,
        "SELECT parts -> 0 ->> 'sha256', parts -> 0 ->> 'kind' FROM helix.messages "
        "WHERE session_id = %s AND role = 'tool' ORDER BY seq",
        result.session_id,
    )
    digest = hashlib.sha256(PNG).hexdigest()
    assert rows == [(digest, "blob"), (digest, "blob")]
    outputs = sql(
        database_url,
        "SELECT max(octet_length(output)) FROM dbos.operation_outputs "
        "WHERE workflow_uuid = %s AND function_name LIKE 'helix.tool:%%'",
        f"helix-{result.run_id}",
    )[0][0]
    assert outputs < len(PNG)  # the tool steps' outputs carry the reference only


async def test_parts_that_could_only_fail_later_are_refused_before_the_run(
    helix, make_agent, database_url, monkeypatch
):
    agent = make_agent()
    before = sql(database_url, "SELECT count(*) FROM helix.sessions")[0][0]
    big = BinaryContent(data=b"\0" * (MAX_PART_BYTES + 1), media_type="application/pdf")
    with pytest.raises(ContentTooLargeError, match="over the limit"):
        await helix.execute(agent, ["read", big])
    with pytest.raises(ContentPartError, match="neither an image nor a PDF"):
        await helix.execute(agent, [BinaryContent(data=b"x", media_type="application/zip")])
    with pytest.raises(ContentPartError, match="not an http"):
        await helix.execute(agent, [ImageUrl(url="javascript:alert(1)")])
    with pytest.raises(InvalidInputError, match=r"input\[1\] is a dict"):
        await helix.execute(agent, ["x", {"data": "..."}])
    with pytest.raises(InvalidInputError, match="NUL"):
        await helix.execute(agent, [ImageUrl(url="https://x.org/a\x00.png")])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the model is checked, not called
    old = make_agent(llm=LLMConfig(model="openai:gpt-3.5-turbo"))
    with pytest.raises(ContentPartError, match="takes no images or documents"):
        await helix.execute(old, ["what is it?", BinaryContent(data=PNG, media_type="image/png")])
    chat = make_agent(llm=LLMConfig(model="openai:gpt-4o"))
    with pytest.raises(ContentPartError, match="not by URL"):
        await helix.execute(chat, [DocumentUrl(url="https://x.org/a.pdf")])
    assert sql(database_url, "SELECT count(*) FROM helix.sessions")[0][0] == before
    assert sql(database_url, "SELECT count(*) FROM helix.blobs WHERE size > %s", MAX_PART_BYTES) == [(0,)]  # fmt: skip


def test_the_blob_cache_keeps_the_most_recent_within_its_budget():
    cache = content_parts.BlobCache(max_bytes=10)
    cache.put("a", b"12345")
    cache.put("b", b"12345")
    assert cache.get("a") == b"12345"  # a is now the most recent
    cache.put("c", b"123")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (b"12345", None, b"123")
    cache.put("huge", b"x" * 11)
    assert cache.get("huge") is None


async def test_the_cli_transcript_shows_a_part_by_name_never_its_bytes(
    helix, make_agent, mock_llm, database_url
):
    import asyncio  # noqa: PLC0415
    import sys  # noqa: PLC0415

    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "seen"}, agent=agent.name)
    pdf = BinaryContent(data=b"%PDF-1.4 secret bytes", media_type="application/pdf", identifier="evil\x1b[31m.pdf")  # fmt: skip
    result = await (await helix.execute(agent, ["read", pdf])).result()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    done = await asyncio.to_thread(
        forkserver.run,
        [sys.executable, "-m", "helix_dbos.cli", "transcript", result.session_id],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HELIX_DATABASE_URL": database_url},
    )
    assert done.returncode == 0, done.stderr
    user = done.stdout.splitlines()[1]
    assert "read [file evil" in user and "(application/pdf, 21 bytes)" in user
    assert f"sha256:{pdf.sha256[:16]}" in user  # the table may cut the rest
    assert "\x1b" not in done.stdout and "secret bytes" not in done.stdout


async def test_time_travel_and_forks_keep_the_parts(helix, make_agent, mock_llm, database_url):
    agent = make_agent(tools=[only_image])
    mock_llm.add_responses(
        calls(("o1", "only_image", {})), {"type": "text", "content": "done"}, agent=agent.name
    )
    pdf = BinaryContent(data=pdf_of(4096), media_type="application/pdf", identifier="a.pdf")
    result = await (await helix.execute(agent, ["look", pdf])).result()
    assert result.status == "completed", result.error
    *_, last = await helix.checkpoints.list(result.session_id)
    view = await helix.checkpoints.get(result.session_id, last.checkpoint_id)
    with_parts = [(m.role, [a.identifier for a in m.attachments]) for m in view.messages]
    assert with_parts[0] == ("user", ["a.pdf"]) and ("tool", ["alone.png"]) in with_parts
    fork = await helix.checkpoints.fork(result.session_id, last)
    assert [m.attachments for m in await helix.get_messages(fork)] == [
        m.attachments for m in view.messages
    ]
    assert sql(database_url, "SELECT count(*) FROM helix.blobs WHERE sha256 = %s", pdf.sha256) == [(1,)]  # fmt: skip


@tool(require_approval=True)
def publish(title: str) -> str:
    """Publish the document (needs approval)."""
    return f"published {title}"


async def test_a_rolled_back_turn_keeps_its_parts_for_audit(
    helix, make_agent, mock_llm, database_url
):
    from helpers import wait_until_waiting  # noqa: PLC0415

    agent = make_agent(tools=[publish])
    mock_llm.add_responses(
        calls(("p1", "publish", {"title": "q3"})), {"type": "text", "content": "again"}, agent=agent.name
    )  # fmt: skip
    pdf = BinaryContent(data=pdf_of(2048), media_type="application/pdf", identifier="q3.pdf")
    first = await helix.execute(agent, ["publish this", pdf])
    await wait_until_waiting(helix, first.session_id)
    second = await helix.execute(
        agent, "start over", session_id=first.session_id, multitask_strategy="rollback"
    )
    assert (await first.result()).status == "aborted"
    assert (await second.result()).status == "completed"
    audit = sql(
        database_url,
        "SELECT parts -> 0 ->> 'sha256', rolled_back_by IS NOT NULL, rolled_back_at IS NOT NULL "
        "FROM helix.rolled_back_messages WHERE run_id = %s AND role = 'user'",
        first.run_id,
    )
    assert audit == [(pdf.sha256, True, True)]
    assert [m.content for m in await helix.get_messages(first.session_id)] == [
        "start over",
        "again",
    ]


async def test_a_runs_last_write_keeps_a_tools_parts(helix, make_agent, mock_llm, database_url):
    """A run that ends right after its tools (the step cap) writes the tool's message in
    its last write (`helix.end_step_and_run`, migration 0022's version), parts included."""
    agent = make_agent(tools=[only_image], max_steps=1)
    mock_llm.add_responses(calls(("o1", "only_image", {})), agent=agent.name)
    result = await (await helix.execute(agent, "one step only")).result()
    assert result.status != "running"
    rows = sql(
        database_url,
        "SELECT parts -> 0 ->> 'identifier' FROM helix.messages "
        "WHERE session_id = %s AND role = 'tool'",
        result.session_id,
    )
    assert rows == [("alone.png",)]
