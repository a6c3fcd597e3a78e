"""Quickstart: a durable structured-output agent with a regular tool and a finish_with tool.

    python examples/quickstart.py

Runs on an embedded PostgreSQL (./.helix/pgdata) with a scripted LLM, so it
needs no server and no API key. Set ANTHROPIC_API_KEY or OPENAI_API_KEY (or
HELIX_MODEL=provider:model) to run the same agent on a real model.
"""

from __future__ import annotations

import asyncio
import os

from pydantic import BaseModel, Field

from helix_dbos import Agent, HelixDBOS, LLMConfig, MockLLM, ToolContext, tool
from helix_dbos.orchestration.types import LLMRequest

REVIEWS = {
    "helix": ["Setup took two minutes.", "It survived a kill -9 mid-run!", "Docs could be longer."],
}


class Verdict(BaseModel):
    product: str
    sentiment: str = Field(description="positive, negative or mixed")
    evidence: list[str]


@tool
async def fetch_reviews(product: str) -> list[str]:
    """Fetch customer reviews for a product."""
    return REVIEWS.get(product.lower(), [])


@tool(finish_with=True)
def submit_verdict(product: str, sentiment: str, evidence: list[str], ctx: ToolContext) -> dict:
    """Submit the final verdict; this completes the task."""
    if not evidence:
        raise ValueError("Cite at least one review as evidence.")
    ctx.update_state({"submitted_for": product})
    return Verdict(product=product, sentiment=sentiment, evidence=evidence).model_dump()


analyst = Agent(
    "review_analyst",
    system_prompt="You analyse product reviews. Fetch the reviews, then submit a verdict.",
    tools=[fetch_reviews, submit_verdict],
    output_schema=Verdict,
    llm=LLMConfig(model="mock"),
    max_steps=6,
)


def scripted_model(request: LLMRequest) -> dict:
    """Stands in for a real model: fetch first, then submit what was fetched."""
    tool_results = [m for m in request.messages if m.role == "tool"]
    if not tool_results:
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "call_1", "name": "fetch_reviews", "arguments": {"product": "helix"}}
            ],
        }
    return {
        "type": "tool_calls",
        "content": "The reviews are mostly positive.",
        "tool_calls": [
            {
                "id": "call_2",
                "name": "submit_verdict",
                "arguments": {
                    "product": "helix",
                    "sentiment": "mixed",
                    "evidence": REVIEWS["helix"][1:],
                },
            }
        ],
    }


def choose_model() -> str | None:
    if os.environ.get("HELIX_MODEL"):
        return os.environ["HELIX_MODEL"]
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-6"
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o"
    return None


async def main(helix: HelixDBOS) -> None:
    handle = await helix.execute(analyst, "How do customers feel about helix?")
    result = await handle.result()

    print(f"\nRun {result.run_id} of session {result.session_id}: {result.status}")
    print(f"Output: {result.output}\n")
    print("Transcript (SELECT seq, role, ... FROM helix.messages):")
    for i, message in enumerate(await helix.get_messages(result.session_id), start=1):
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        text = " ".join(part for part in (message.content, calls) if part)
        print(f"  {i:>2} {message.role:<9} {text[:110]}")
    print("\nUsage (SELECT ... FROM helix.usage):")
    for key, value in result.usage.items():
        print(f"  {key:<19} {value}")
    state = (await helix.get_session(result.session_id)).state
    print(f"\nSession state: {state}")


if __name__ == "__main__":
    model = choose_model()
    if model:
        analyst.llm = LLMConfig(model=model)
    helix = HelixDBOS([analyst], llm=None if model else MockLLM(scripted_model))
    helix.launch()
    try:
        asyncio.run(main(helix))
    finally:
        helix.shutdown()
