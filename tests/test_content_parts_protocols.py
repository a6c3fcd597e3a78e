"""Files in the protocols' user messages become content parts (issue 49): the AI SDK's
UI `file` part and AG-UI's image and document parts, each as its front end sends it,
posted to a real uvicorn serving create_app(helix); the run's input message holds the
references and the model gets the bytes."""

from __future__ import annotations

import base64
import hashlib
import uuid

import httpx
import pytest
from helpers import sql
from live_server import serve

from helix_dbos.server import create_app

PNG = b"\x89PNG\r\n\x1a\n" + hashlib.sha256(b"protocols").digest()
PDF = b"%PDF-1.4\n" + hashlib.sha256(b"ag-ui").digest()


@pytest.fixture(scope="module")
def base_url(helix):
    with serve(create_app(helix, allow_unauthenticated=True)) as url:
        yield url


def input_parts(database_url: str, session_id: str) -> list[dict]:
    return sql(
        database_url,
        "SELECT parts FROM helix.messages WHERE session_id = %s AND seq = 1",
        session_id,
    )[0][0]


def test_an_ai_sdk_file_part_reaches_the_model(base_url, make_agent, mock_llm, database_url):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "a picture"}, agent=agent.name)
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    body = {
        "id": chat,
        "agent": agent.name,
        "trigger": "submit-message",
        "messages": [
            {
                "id": "m1",
                "role": "user",
                "parts": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "file",
                        "mediaType": "image/png",
                        "filename": "cat.png",
                        "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
                    },
                    {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/a.pdf"},
                ],
            }
        ],
    }  # fmt: skip
    with httpx.Client(base_url=base_url, timeout=60) as http:
        got = http.post("/ai-sdk/chat", json=body)
        assert got.status_code == 200, got.text
        assert "a picture" in got.text  # the stream ran to the end
    assert input_parts(database_url, chat) == [
        {"kind": "blob", "sha256": hashlib.sha256(PNG).hexdigest(), "media_type": "image/png", "size": len(PNG), "identifier": "cat.png"},
        {"kind": "document-url", "url": "https://example.com/a.pdf", "media_type": "application/pdf", "identifier": None},
    ]  # fmt: skip
    sent = next(m for m in mock_llm.get_last_input().messages if m.role == "user")
    assert sent.content == "What is this?" and sent.attachments[0].data == PNG


def test_an_ai_sdk_bad_file_is_a_4xx(base_url, make_agent):
    agent = make_agent()
    part = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,%%%"}
    body = {
        "id": f"chat-{uuid.uuid4().hex[:8]}",
        "agent": agent.name,
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "x"}, part]}],
    }
    with httpx.Client(base_url=base_url, timeout=60) as http:
        got = http.post("/ai-sdk/chat", json=body)
    assert got.status_code == 422, got.text
    assert "base64" in got.text


def ag_ui_input(thread: str, content: list[dict]) -> dict:
    return {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": content}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def test_ag_ui_image_and_document_parts_reach_the_model(
    base_url, make_agent, mock_llm, database_url
):
    agent = make_agent()
    mock_llm.add_response({"type": "text", "content": "a report"}, agent=agent.name)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    content = [
        {"type": "text", "text": "Read this"},
        {"type": "document", "id": "q3.pdf", "source": {"type": "data", "value": base64.b64encode(PDF).decode(), "mimeType": "application/pdf"}},
        {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.jpg"}},
    ]  # fmt: skip
    with httpx.Client(base_url=base_url, timeout=60) as http:
        got = http.post(f"/ag-ui/{agent.name}", json=ag_ui_input(thread, content))
        assert got.status_code == 200, got.text
        assert "RUN_FINISHED" in got.text
    assert input_parts(database_url, thread) == [
        {"kind": "blob", "sha256": hashlib.sha256(PDF).hexdigest(), "media_type": "application/pdf", "size": len(PDF), "identifier": "q3.pdf"},
        {"kind": "image-url", "url": "https://example.com/cat.jpg", "media_type": None, "identifier": None},
    ]  # fmt: skip
    sent = next(m for m in mock_llm.get_last_input().messages if m.role == "user")
    assert sent.content == "Read this" and sent.attachments[0].data == PDF


def test_ag_ui_audio_is_refused_with_a_4xx(base_url, make_agent):
    agent = make_agent()
    content = [{"type": "audio", "source": {"type": "url", "value": "https://x.org/a.mp3"}}]
    with httpx.Client(base_url=base_url, timeout=60) as http:
        got = http.post(f"/ag-ui/{agent.name}", json=ag_ui_input("t-audio", content))
    assert got.status_code == 422, got.text
    assert "image and document" in got.text
