"""What Anthropic prompt caching saves over a 20-step run (docs/providers.md).

One agent, one fresh database, two runs of the same 20-step exchange (19 tool calls,
then the answer) through the real `AnthropicAdapter` and the official `anthropic` SDK:
one with `LLMConfig(cache=True)` (the default), one with `cache=False`. Only HTTP is
replaced: a transport that replays the recorded replies and reports usage as Anthropic
bills it, from the breakpoints the request actually carries: input up to a breakpoint
seen before is a cache read, input up to this request's last breakpoint past that is a
cache write, the rest is uncached (prefixes under 1,024 tokens are never cached, and a
token is counted as 4 bytes of the block's JSON). The figures are `helix.usage` as the
run recorded it: cached input tokens per step and the cost at genai-prices' prices.

usage: .venv/bin/python benchmarks/bench_prompt_cache.py [--steps N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import uuid
from decimal import Decimal
from typing import Any

import httpx2
import psycopg
from bench_agent_loop import fresh_database, server_url
from bench_common import rounded

from helix_dbos import Agent, HelixDBOS, LLMConfig, tool
from helix_dbos.llm.anthropic import AnthropicAdapter
from helix_dbos.llm.providers import register_provider
from helix_dbos.store.database import libpq_url

MODEL = "claude-sonnet-4-5-20250929"
MIN_CACHED_TOKENS = 1024
# A system prompt of the size real agents carry (about 3,000 tokens).
SYSTEM_PROMPT = "You are a research agent. " + " ".join(
    f"Rule {i}: cite the source of every figure you report and say how it was measured."
    for i in range(150)
)


@tool
def lookup(topic: str, page: int) -> str:
    """Look a topic up: one page of notes."""
    return f"notes on {topic}, page {page}: " + "a measured figure with its source. " * 40


class AnthropicCache:
    """Replays the exchange and bills each request as Anthropic's cache would."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.written: set[str] = set()

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        blocks, marks = _blocks(body)
        sizes = [len(json.dumps(b)) // 4 for b in blocks]
        prefix = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        read = max(
            (prefix[i] for i in range(len(blocks)) if _key(blocks[: i + 1]) in self.written),
            default=0,
        )
        write = 0
        for i in marks:
            if prefix[i] >= MIN_CACHED_TOKENS and _key(blocks[: i + 1]) not in self.written:
                self.written.add(_key(blocks[: i + 1]))
                write = max(write, prefix[i] - read)
        step = sum(1 for m in body["messages"] if m["role"] == "assistant") + 1
        usage = {
            "input_tokens": prefix[-1] - read - write,
            "output_tokens": 60,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }
        if step < self.steps:
            content = [
                {"type": "tool_use", "id": f"toolu_{step:02d}", "name": "lookup"}
                | {"input": {"topic": "prompt caching", "page": step}}
            ]
            stop = "tool_use"
        else:
            content, stop = (
                [{"type": "text", "text": "Cached input is billed at 0.1x."}],
                "end_turn",
            )
        return httpx2.Response(200, content=_sse(content, stop, usage))


def _blocks(body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The request's blocks in the cache's order (tools, system, messages) without their
    `cache_control`, and the positions of the breakpoints."""
    blocks: list[Any] = []
    marks: list[int] = []
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    items = [*body.get("tools", []), *system]
    items += [b | {"role": m["role"]} for m in body["messages"] for b in m["content"]]
    for block in items:
        if "cache_control" in block:
            marks.append(len(blocks))
        blocks.append({k: v for k, v in block.items() if k != "cache_control"})
    return blocks, marks


def _key(blocks: list[Any]) -> str:
    return hashlib.sha256(json.dumps(blocks, sort_keys=True).encode()).hexdigest()


def _sse(content: list[dict[str, Any]], stop: str, usage: dict[str, int]) -> bytes:
    message = {"id": "msg_bench", "type": "message", "role": "assistant", "model": MODEL}
    message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for i, block in enumerate(content):
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    frames = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return frames.encode()


async def one_run(helix: HelixDBOS, agent: Agent, database_url: str) -> list[tuple[Any, ...]]:
    result = await (await helix.execute(agent, "How much does prompt caching save?")).result()
    assert result.status == "completed", result.error
    with psycopg.connect(libpq_url(database_url)) as conn:
        return conn.execute(
            "SELECT step, input_tokens, cache_read_tokens, cache_write_tokens, cost_usd "
            "FROM helix.usage WHERE run_id = %s AND kind = 'llm' ORDER BY step",
            (result.run_id,),
        ).fetchall()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server, kind = server_url(args.database_url)
    caches = {on: AnthropicCache(args.steps) for on in ("on", "off")}

    def factory(model: str, **_: Any) -> AnthropicAdapter:
        transport = httpx2.MockTransport(caches[model].handle)
        return AnthropicAdapter(
            model, api_key="k", http_client=httpx2.AsyncClient(transport=transport)
        )

    register_provider("anthropic-bench", factory)
    agents = {
        on: Agent(
            f"bench_cache_{on}",
            system_prompt=SYSTEM_PROMPT,
            tools=[lookup],
            llm=LLMConfig(model=f"anthropic-bench:{on}", cache=on == "on"),
            max_steps=args.steps + 5,
        )
        for on in ("on", "off")
    }
    rows: dict[str, list[tuple[Any, ...]]] = {}
    with fresh_database(server) as database_url:
        helix = HelixDBOS(
            list(agents.values()),
            database_url=database_url,
            executor_id=f"bench-{uuid.uuid4().hex[:8]}",
            application_version="helix-bench",
        )
        helix.launch()
        try:
            for on, agent in agents.items():
                rows[on] = await one_run(helix, agent, database_url)
        finally:
            helix.shutdown()
    cost = {on: sum((Decimal(r[4]) for r in rows[on]), Decimal(0)) for on in rows}
    report = {
        "database": kind,
        "steps": len(rows["on"]),
        "input_tokens": sum(r[1] for r in rows["on"]),
        "cached_read_tokens_by_step": [r[2] for r in rows["on"]],
        "cache_write_tokens": sum(r[3] for r in rows["on"]),
        "first_step_with_cached_reads": next((r[0] for r in rows["on"] if r[2]), None),
        "cached_share_of_input": sum(r[2] for r in rows["on"]) / sum(r[1] for r in rows["on"]),
        "cost_usd_cache_on": float(cost["on"]),
        "cost_usd_cache_off": float(cost["off"]),
        "saved": float(1 - cost["on"] / cost["off"]),
        "cache_off_read_tokens": sum(r[2] for r in rows["off"]),
    }
    print(json.dumps(rounded(report), indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="model calls in the run (20)")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (default $HELIX_BENCH_DATABASE_URL, else embedded)",
    )
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
