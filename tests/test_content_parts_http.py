"""Content parts over HTTP (issue 49): `/chat` and `/start` take parts as JSON (base64
bytes or URLs), the transcript lists references, and a part downloads as an attachment
that no browser renders; bad parts are a 4xx, never a 5xx. Through `AsyncHelixClient`
and plain httpx, against a real uvicorn serving create_app(helix)."""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest
from live_server import serve

from helix_dbos import AsyncHelixClient, BinaryContent, ImageUrl
from helix_dbos.client.errors import NotFoundError, PayloadTooLargeError
from helix_dbos.server import create_app

PDF = b"%PDF-1.4\n" + hashlib.sha256(b"http").digest() * 64
HTML = b"<html><script>alert(document.cookie)</script></html>"


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        yield url


async def test_chat_with_a_pdf_lists_its_reference_and_downloads_it(base_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "a report"}, agent=agent.name)
    pdf = BinaryContent(data=PDF, media_type="application/pdf", identifier="Q3 report.pdf")
    async with AsyncHelixClient(base_url) as client:
        answer = await client.chat("ctx-parts-1", "What is this?", agent=agent.name, parts=[pdf])
        assert answer.status == "completed" and answer.response == "a report"
        sent = mock_llm.get_last_input().messages[-1]
        assert sent.content == "What is this?" and sent.attachments[0].data == PDF
        [user, _] = await client.get_messages(answer.session_id)
        [ref] = user.parts
        assert (ref.kind, ref.sha256, ref.size) == ("blob", pdf.sha256, len(PDF))
        assert await client.get_part(answer.session_id, pdf.sha256) == PDF
        with pytest.raises(NotFoundError):
            await client.get_part(answer.session_id, "0" * 64)
    async with httpx.AsyncClient(base_url=base_url) as http:
        got = await http.get(f"/sessions/{answer.session_id}/parts/{pdf.sha256}")
    assert got.headers["content-type"] == "application/pdf"
    assert got.headers["content-disposition"].startswith('attachment; filename="Q3_report.pdf"')
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in got.headers["content-security-policy"]


async def test_a_part_another_session_references_is_not_served(base_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_responses(
        {"type": "text", "content": "one"}, {"type": "text", "content": "two"}, agent=agent.name
    )
    image = BinaryContent(data=b"\x89PNG\r\n\x1a\nsecret", media_type="image/png")
    async with AsyncHelixClient(base_url) as client:
        owner = await client.chat("ctx-parts-owner", "look", agent=agent.name, parts=[image])
        other = await client.chat("ctx-parts-other", "hi", agent=agent.name)
        assert await client.get_part(owner.session_id, image.sha256) == image.data
        with pytest.raises(NotFoundError):
            await client.get_part(other.session_id, image.sha256)


async def test_html_sent_as_a_part_is_refused_and_never_served_as_html(
    base_url, make_agent, mock_llm
):
    agent = make_agent()
    body = {
        "agent": agent.name,
        "input": "render this",
        "parts": [
            {"kind": "binary", "data": base64.b64encode(HTML).decode(), "media_type": "text/html"}
        ],
    }
    mock_llm.add_response({"type": "text", "content": "plain text"}, agent=agent.name)
    async with httpx.AsyncClient(base_url=base_url) as http:
        started = await http.post("/start", json=body)
        # text/* goes to the model as text; its download is an attachment, not a page.
        assert started.status_code == 200, started.text
        sid = started.json()["session_id"]
        sha = hashlib.sha256(HTML).hexdigest()
        # The input message is written when the run opens, before /start answers.
        assert (await http.get(f"/sessions/{sid}/messages")).json()[0]["parts"][0]["sha256"] == sha
        got = await http.get(f"/sessions/{sid}/parts/{sha}")
    assert got.content == HTML
    assert got.headers["content-disposition"].startswith("attachment")
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == "default-src 'none'; sandbox"


@pytest.mark.parametrize(
    ("part", "status"),
    [
        ({"kind": "binary", "data": "not base64!!", "media_type": "image/png"}, 422),
        ({"kind": "binary", "data": "AAAA", "media_type": "application/zip"}, 422),
        ({"kind": "image-url", "url": "file:///etc/passwd"}, 422),
        ({"kind": "document-url", "url": "https://x.org/a\u0000.pdf"}, 422),
        ({"kind": "unknown", "url": "https://x.org"}, 422),
        ({"kind": "binary", "data": "AAAA"}, 422),
    ],
)
async def test_bad_parts_are_a_4xx(base_url, make_agent, part, status):
    agent = make_agent()
    async with httpx.AsyncClient(base_url=base_url) as http:
        got = await http.post(
            "/chat", json={"context_id": "ctx-bad-part", "agent": agent.name, "message": "x", "parts": [part]}
        )  # fmt: skip
    assert got.status_code == status, got.text
    assert "detail" in got.json()


async def test_a_part_over_the_size_limit_is_a_413(base_url, make_agent, monkeypatch):
    from helix_dbos.runtime.steps import content_parts  # noqa: PLC0415

    monkeypatch.setattr(content_parts, "MAX_PART_BYTES", 1000)
    agent = make_agent()
    big = BinaryContent(data=b"\0" * 2000, media_type="application/pdf")
    async with AsyncHelixClient(base_url) as client:
        with pytest.raises(PayloadTooLargeError, match="over the limit of 1000"):
            await client.chat("ctx-big-part", "x", agent=agent.name, parts=[big])


async def test_a_url_part_is_kept_as_its_url(base_url, make_agent, mock_llm):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "a cat"}, agent=agent.name)
    url = ImageUrl(url="https://example.com/cat.png")
    async with AsyncHelixClient(base_url) as client:
        started = await client.start(agent.name, "what is it?", parts=[url])
        [user, *_] = await client.get_messages(started.session_id)
    assert [p.model_dump() for p in user.parts] == [
        {"kind": "image-url", "url": "https://example.com/cat.png", "media_type": None, "identifier": None}
    ]  # fmt: skip
