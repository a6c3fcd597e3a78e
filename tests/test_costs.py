"""Costs in USD on usage rows (issue 16), from the genai-prices table: cache and
reasoning tokens priced apart, per model, agent, session and root session."""

from __future__ import annotations

import json
from decimal import Decimal

from genai_prices import Usage, calc_price
from helpers import sql
from test_cli import helix_dbos

from helix_dbos import sub_agent_tool
from helix_dbos.llm.pricing import llm_cost_usd
from helix_dbos.orchestration.types import LLMUsage
from helix_dbos.server import queries


def per_token(model: str, provider: str) -> dict[str, Decimal]:
    """The table's own per-token prices of `model` (read from genai-prices, not typed in)."""
    price = calc_price(Usage(input_tokens=1), model, provider_id=provider).model_price
    per_m = {
        k: getattr(price, f"{k}_mtok") for k in ("input", "output", "cache_read", "cache_write")
    }
    # Tiered prices (above 200k input tokens) start at their base: the tests stay below.
    return {k: Decimal(getattr(v, "base", v) or 0) / 1_000_000 for k, v in per_m.items()}


def test_cached_input_is_priced_at_the_cache_prices_and_counted_once():
    """helix's input_tokens includes the cached tokens (migration 0006): they are billed
    at the cache prices, the rest at the input price, never both."""
    p = per_token("claude-sonnet-4-5", "anthropic")
    assert p["cache_read"] < p["input"] < p["cache_write"], "a table with cache prices"
    usage = LLMUsage(
        model="claude-sonnet-4-5-20250929",
        input_tokens=10_000,
        cache_read_tokens=6_000,
        cache_write_tokens=1_000,
        output_tokens=500,
    )
    expected = (
        3_000 * p["input"] + 6_000 * p["cache_read"] + 1_000 * p["cache_write"] + 500 * p["output"]
    )
    assert llm_cost_usd(usage, "anthropic") == expected
    uncached = usage.model_copy(update={"cache_read_tokens": 0, "cache_write_tokens": 0})
    assert llm_cost_usd(uncached, "anthropic") == 10_000 * p["input"] + 500 * p["output"]


def test_reasoning_tokens_are_part_of_the_output_not_added_to_it():
    p = per_token("o3", "openai")
    usage = LLMUsage(model="o3-2025-04-16", input_tokens=1_000, output_tokens=800)
    with_reasoning = usage.model_copy(update={"reasoning_tokens": 600})
    expected = 1_000 * p["input"] + 800 * p["output"]
    assert llm_cost_usd(usage, "openai") == llm_cost_usd(with_reasoning, "openai") == expected


def test_an_unknown_model_or_no_model_costs_nothing_known():
    assert llm_cost_usd(LLMUsage(model="mock", input_tokens=5), "mock") is None
    assert llm_cost_usd(LLMUsage(input_tokens=5)) is None
    # A compatible server's model under the openai prefix is not priced as someone else's.
    assert llm_cost_usd(LLMUsage(model="my-local-llama", input_tokens=5), "openai") is None


def priced(content: str, **tokens: int) -> dict:
    usage = {"model": "gpt-4o-2024-08-06", "input_tokens": 1_000, "output_tokens": 100}
    return {"type": "text", "content": content, "usage": {**usage, **tokens}}


async def test_usage_rows_carry_the_cost_and_sql_sums_it_per_root_session(
    helix, make_agent, mock_llm, database_url
):
    child = make_agent()
    parent = make_agent(tools=[sub_agent_tool(child)])
    mock_llm.add_response(
        {
            "type": "tool_calls",
            "tool_calls": [
                {"id": "s1", "name": f"subagent__{child.name}", "arguments": {"message": "go"}}
            ],
            "usage": {"model": "gpt-4o-2024-08-06", "input_tokens": 2_000, "output_tokens": 50},
        },
        agent=parent.name,
    )
    mock_llm.add_response(priced("child done", cache_read_tokens=400), agent=child.name)
    mock_llm.add_response(priced("all done"), agent=parent.name)
    result = await (await helix.execute(parent, "delegate")).result()
    assert result.status == "completed", result.error

    p = per_token("gpt-4o", "openai")
    parent_cost = (2_000 * p["input"] + 50 * p["output"]) + (1_000 * p["input"] + 100 * p["output"])
    child_cost = 600 * p["input"] + 400 * p["cache_read"] + 100 * p["output"]
    rows = sql(
        database_url,
        "SELECT u.kind, u.cost_usd FROM helix.usage u JOIN helix.sessions s USING (session_id) "
        "WHERE %s IN (u.session_id, s.root_session_id) ORDER BY u.kind",
        result.session_id,
    )
    by_kind: dict[str, list] = {}
    for kind, cost in rows:
        by_kind.setdefault(kind, []).append(cost)
    assert sorted(by_kind["llm"]) == sorted(
        [2_000 * p["input"] + 50 * p["output"], 1_000 * p["input"] + 100 * p["output"], child_cost]
    )
    assert by_kind["subagent"] == [None], "the child's cost is on its own rows, counted once"

    by_root = queries.usage(by="root", session_id=result.session_id)
    engine_rows = sql(database_url, by_root.sql.replace("%(sid)s", "%s"), result.session_id)
    [(key, llm_calls, _tools, input_tokens, *_rest, cost)] = engine_rows
    assert key == result.session_id and llm_calls == 3
    assert input_tokens == 2_000 + 1_000 + 1_000, "the subagent row's tokens are not added again"
    assert Decimal(str(cost)).quantize(Decimal("1e-9")) == (parent_cost + child_cost).quantize(
        Decimal("1e-9")
    )

    out = await helix_dbos(
        database_url, "usage", "--by", "root", "--session", result.session_id, "--json"
    )
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert row["root"] == result.session_id and row["llm_calls"] == 3
    assert abs(row["cost_usd"] - float(parent_cost + child_cost)) < 1e-9
    table = await helix_dbos(database_url, "usage", "--by", "agent")
    header = table.stdout.splitlines()[0]
    assert header.split()[-2:] == ["COST", "USD"]
    child_line = next(line for line in table.stdout.splitlines() if line.startswith(child.name))
    assert abs(float(child_line.split()[-1]) - float(child_cost)) < 1e-6
