"""Content parts (issue 49) in each provider's wire format, through the official SDKs.

Each adapter is driven by its real SDK (`anthropic`, `openai`) against the recording
transport of the other wire tests (`tests/llm/wire.py`); the assertions are on the JSON
the SDK put on the wire, in the shapes of the providers' API references: Anthropic
`image`/`document` blocks with `base64`, `url` and `text` sources, in a user turn and in a
`tool_result`; Chat Completions `image_url` parts with data URLs and `file` parts with
`file_data` (a tool's parts follow its tool message in a user message); Responses
`input_image` and `input_file`, in a message and in a `function_call_output`.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import httpx2
import pytest

from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.content_support import part_problem
from helix_dbos.llm.openai import OpenAIAdapter
from helix_dbos.llm.openai_responses import OpenAIResponsesAdapter
from helix_dbos.orchestration.parts import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    StoredBlob,
    split_input,
    split_tool_value,
)
from helix_dbos.orchestration.types import LLMRequest, Message, TextStepResult, ToolCall
from tests.llm import wire

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
IMAGE = BinaryContent(data=PNG, media_type="image/png", identifier="chart.png")
REPORT = BinaryContent(data=PDF, media_type="application/pdf", identifier="report.pdf")
NOTES = BinaryContent(data=b"line one\nline two", media_type="text/plain")

#: The user asks about an image and a PDF; a tool then returns a second image.
TRANSCRIPT = [
    Message(role="system", content="You read documents."),
    Message(role="user", content="What do these show?", attachments=[IMAGE, REPORT]),
    Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="snapshot", arguments={})]),
    Message(
        role="tool",
        tool_call_id="call_1",
        tool_name="snapshot",
        content="Attached: chart.png",
        attachments=[IMAGE],
    ),
]


def request(model: str, messages: list[Message] | None = None) -> LLMRequest:
    return LLMRequest(agent_name="reader", model=model, messages=messages or TRANSCRIPT)


async def test_anthropic_sends_image_and_document_blocks_with_base64_sources() -> None:
    rec = wire.Recorder(httpx2, (200, wire.ANTHROPIC_TEXT))
    adapter = AnthropicAdapter(api_key="k", http_client=rec.client())
    result = await adapter.generate_step(request("anthropic:claude-sonnet-4-6"))
    assert isinstance(result, TextStepResult)
    user, _, tool_turn = rec.body["messages"]
    assert user == {
        "role": "user",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG}},
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": B64_PDF},
                "title": "report.pdf",
            },
            {"type": "text", "text": "What do these show?"},
        ],
    }  # fmt: skip
    assert tool_turn["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": [
                {"type": "text", "text": "Attached: chart.png"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG}},
            ],
        }
    ]  # fmt: skip


async def test_anthropic_sends_url_sources_and_text_documents_as_text() -> None:
    rec = wire.Recorder(httpx2, (200, wire.ANTHROPIC_TEXT))
    adapter = AnthropicAdapter(api_key="k", http_client=rec.client())
    parts = [
        ImageUrl(url="https://example.com/cat.jpg"),
        DocumentUrl(url="https://example.com/paper.pdf", identifier="paper"),
        NOTES,
    ]
    await adapter.generate_step(
        request("anthropic:claude-sonnet-4-6", [Message(role="user", attachments=parts)])
    )
    assert rec.body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/paper.pdf"}, "title": "paper"},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "line one\nline two"}},
    ]  # fmt: skip


async def test_openai_chat_sends_image_url_and_file_parts_and_tool_parts_after_the_tools() -> None:
    rec = wire.Recorder(httpx, (200, wire.OPENAI_TEXT))
    adapter = OpenAIAdapter(api_key="k", http_client=rec.client())
    result = await adapter.generate_step(request("openai:gpt-4o"))
    assert isinstance(result, TextStepResult)
    system, user, assistant, tool, after = rec.body["messages"]
    assert system["role"] == "system" and assistant["role"] == "assistant"
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What do these show?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{B64_PDF}"}},
        ],
    }  # fmt: skip
    # A tool message is text only on this API; its parts follow the step's tool messages.
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "Attached: chart.png"}
    assert after == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Content returned by tool call call_1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
        ],
    }


async def test_openai_chat_keeps_parallel_tool_messages_together() -> None:
    rec = wire.Recorder(httpx, (200, wire.OPENAI_TEXT))
    adapter = OpenAIAdapter(api_key="k", http_client=rec.client())
    calls = [
        ToolCall(id="a", name="snap", arguments={}),
        ToolCall(id="b", name="snap", arguments={}),
    ]
    messages = [
        Message(role="user", content="two snapshots"),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", tool_call_id="a", tool_name="snap", content="x", attachments=[IMAGE]),
        Message(role="tool", tool_call_id="b", tool_name="snap", content="y"),
        Message(role="user", content="and?"),
    ]
    await adapter.generate_step(request("openai:gpt-4o", messages))
    roles = [m["role"] for m in rec.body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user", "user"]
    assert rec.body["messages"][4]["content"][1]["type"] == "image_url"
    assert rec.body["messages"][5] == {"role": "user", "content": "and?"}


async def test_openai_responses_sends_input_image_and_input_file() -> None:
    rec = wire.Recorder(httpx, (200, wire.openai_response([wire.responses_message("ok")])))
    adapter = OpenAIResponsesAdapter(api_key="k", http_client=rec.client())
    result = await adapter.generate_step(request("openai-responses:gpt-4.1"))
    assert isinstance(result, TextStepResult)
    items = rec.body["input"]
    assert items[0] == {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What do these show?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{B64_PNG}", "detail": "auto"},
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{B64_PDF}"},
        ],
    }  # fmt: skip
    output = next(i for i in items if i.get("type") == "function_call_output")
    assert output == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "Attached: chart.png"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{B64_PNG}", "detail": "auto"},
        ],
    }  # fmt: skip


async def test_openai_responses_sends_urls_as_they_are() -> None:
    rec = wire.Recorder(httpx, (200, wire.openai_response([wire.responses_message("ok")])))
    adapter = OpenAIResponsesAdapter(api_key="k", http_client=rec.client())
    parts = [
        ImageUrl(url="https://example.com/a.png"),
        DocumentUrl(url="https://example.com/b.pdf"),
    ]
    await adapter.generate_step(
        request("openai-responses:gpt-4.1", [Message(role="user", content="hi", attachments=parts)])
    )
    assert rec.body["input"][0]["content"][1:] == [
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "file_url": "https://example.com/b.pdf"},
    ]


async def test_an_unresolved_reference_never_reaches_the_wire() -> None:
    rec = wire.Recorder(httpx2, (200, wire.ANTHROPIC_TEXT))
    adapter = AnthropicAdapter(api_key="k", http_client=rec.client())
    ref = StoredBlob(sha256="0" * 64, media_type="image/png", size=3)
    with pytest.raises(ValueError, match="not resolved"):
        await adapter.generate_step(
            request("anthropic:claude-sonnet-4-6", [Message(role="user", attachments=[ref])])
        )
    assert rec.requests == []


@pytest.mark.parametrize(
    ("model", "part", "refused"),
    [
        ("openai:gpt-3.5-turbo", IMAGE, True),
        ("openai:gpt-4", REPORT, True),
        ("openai:gpt-4o", IMAGE, False),
        ("openai:gpt-4o", DocumentUrl(url="https://x.org/a.pdf"), True),
        ("openai-responses:gpt-4.1", DocumentUrl(url="https://x.org/a.pdf"), False),
        ("anthropic:claude-2.1", IMAGE, True),
        ("anthropic:claude-sonnet-4-6", REPORT, False),
        ("openai:gpt-3.5-turbo", NOTES, False),  # text documents go as text anywhere
        ("mock", REPORT, False),
    ],
)
def test_which_models_take_which_parts(model: str, part: Any, refused: bool) -> None:
    assert (part_problem(model, part) is not None) is refused


def test_input_and_tool_values_split_into_text_and_parts() -> None:
    assert split_input(["Describe", IMAGE, "briefly"]) == ("Describe\n\nbriefly", [IMAGE])
    assert split_input("plain") == ("plain", [])
    with pytest.raises(ValueError, match=r"input\[1\] is a int"):
        split_input(["x", 3])
    with pytest.raises(ValueError, match="sequence"):
        split_input(b"raw bytes")  # type: ignore[arg-type]
    assert split_tool_value(IMAGE) == (None, [IMAGE])
    assert split_tool_value(["caption", IMAGE]) == ("caption", [IMAGE])
    assert split_tool_value({"a": 1}) == ({"a": 1}, [])
    assert "size=" in repr(IMAGE) and "\\x89" not in repr(IMAGE)
