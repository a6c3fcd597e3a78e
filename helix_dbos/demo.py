"""`helix-dbos demo`: the quickstart agent, run end to end on the embedded database.

The same program as examples/quickstart.py, inside the package so the command
works from an installed wheel: a review analyst fetches reviews with a regular
tool and completes with a finish_with tool. The model is scripted unless
ANTHROPIC_API_KEY, OPENAI_API_KEY or HELIX_MODEL says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from helix_dbos.definitions.agent import Agent, LLMConfig
from helix_dbos.definitions.tool import tool
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.facade.helix import HelixDBOS
from helix_dbos.llm.mock import MockLLM
from helix_dbos.llm.providers import model_from_env
from helix_dbos.orchestration.types import LLMRequest
from helix_dbos.runtime.process.event_loop import on_target_loop
from helix_dbos.runtime.steps.results import AgentResult
from helix_dbos.server import queries

AGENT_NAME = "review_analyst"
QUESTION = "How do customers feel about helix?"
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
def submit_verdict(
    product: str, sentiment: str, evidence: list[str], ctx: ToolContext
) -> dict[str, Any]:
    """Submit the final verdict; this completes the task."""
    if not evidence:
        raise ValueError("Cite at least one review as evidence.")
    ctx.update_state({"submitted_for": product})
    return Verdict(product=product, sentiment=sentiment, evidence=evidence).model_dump()


def make_agent(model: str = "mock") -> Agent:
    return Agent(
        AGENT_NAME,
        system_prompt="You analyse product reviews. Fetch the reviews, then submit a verdict.",
        tools=[fetch_reviews, submit_verdict],
        output_schema=Verdict,
        llm=LLMConfig(model=model),
        max_steps=6,
    )


def scripted_model(request: LLMRequest) -> dict[str, Any]:
    """Stands in for a real model: fetch first, then submit what was fetched."""
    if not any(m.role == "tool" for m in request.messages):
        return {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "call_1", "name": "fetch_reviews", "arguments": {"product": "helix"}}
            ],
        }
    return {
        "type": "tool_calls",
        "content": "The reviews are mixed.",
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


def build(database_url: str | None = None) -> HelixDBOS:
    """The executor with the demo agent (starts the embedded PostgreSQL if no URL is set)."""
    model = model_from_env()
    agent = make_agent(model or "mock")
    return HelixDBOS(
        [agent], database_url=database_url, llm=None if model else MockLLM(scripted_model)
    )


@dataclass
class DemoRun:
    result: AgentResult
    transcript: list[dict[str, Any]]
    usage: list[dict[str, Any]]
    state: dict[str, Any]


async def run(helix: HelixDBOS, question: str = QUESTION) -> DemoRun:
    """One run to completion, then its transcript and usage, read with plain SQL."""
    handle = await helix.execute(AGENT_NAME, question)
    return await collect(helix, await handle.result())


async def collect(helix: HelixDBOS, result: AgentResult) -> DemoRun:
    """The finished run's transcript, usage and state, read back with plain SQL."""
    engine = helix.runtime.engine
    transcript = await on_target_loop(
        lambda: queries.fetch_async(engine, queries.transcript(result.session_id))
    )
    usage = await on_target_loop(
        lambda: queries.fetch_async(engine, queries.usage(by="model", session_id=result.session_id))
    )
    state = (await helix.get_session(result.session_id)).state
    return DemoRun(result=result, transcript=transcript, usage=usage, state=state)
