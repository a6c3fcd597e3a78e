"""A research team: a lead fans out to two researcher sub-agents in parallel, and keeps
a persistent critic companion that reviews the draft.

    .venv/bin/python examples/research_team.py

Each researcher is a DBOS child workflow of the lead's run, in a session of its own;
its answer comes back to the lead as a tool result, and its chunks flow into the lead's
stream. The critic is a persistent child (`companion__spawnAgent`), in the stable session
`<lead session>-agent-critic-1`. It runs on the embedded PostgreSQL (./.helix/pgdata, or
HELIX_DATABASE_URL) with a scripted model, then prints what the root stream saw, the tree of sessions with each
agent's usage, and the tokens of the whole tree: plain SQL, as in docs/sub-agents.md.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from typing import Any

from pydantic import BaseModel

from helix_dbos import (
    Agent,
    HelixDBOS,
    LLMRequest,
    MockLLM,
    PersistentAgent,
    sub_agent_tool,
    tool,
)

# Output fits the terminal, or 100 columns when there is none (piped).
WIDTH = min(100, shutil.get_terminal_size((100, 24)).columns)


def fit(line: str) -> str:
    """One line of at most WIDTH characters, cut with "…"."""
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


FACTS = {
    "web": "Owls can turn their heads about 270 degrees.",
    "archive": "Barn owls hunt by sound alone in complete darkness.",
}


class Brief(BaseModel):
    summary: str
    sources: list[str]


@tool
def search(source: str, query: str) -> str:
    """Search one source ("web" or "archive") for a query."""
    return FACTS.get(source, "nothing found")


web = Agent("web_researcher", system_prompt="You search the web.", tools=[search])
archive = Agent("archive_researcher", system_prompt="You search the archive.", tools=[search])
critic = Agent("critic", system_prompt="You review drafts in one sentence.")
lead = Agent(
    "lead",
    system_prompt="You lead a research team: delegate, have the draft reviewed, write the brief.",
    tools=[sub_agent_tool(web, name="web"), sub_agent_tool(archive, name="archive")],
    persistent_agents=[PersistentAgent(critic, mode="blocking")],
    output_schema=Brief,
)


def scripted_model(request: LLMRequest) -> dict[str, Any]:
    """A stand-in for a real model, a function of the transcript."""
    results = [m for m in request.messages if m.role == "tool"]
    if request.agent_name == "critic":
        return {"type": "text", "content": "Solid: two independent sources agree."}
    if request.agent_name == "lead":
        if not results:
            return {
                "type": "tool_calls",
                "content": "I'll ask both researchers at once.",
                "tool_calls": [
                    {"id": "ask_web", "name": "subagent__web", "arguments": {"message": "owls"}},
                    {
                        "id": "ask_archive",
                        "name": "subagent__archive",
                        "arguments": {"message": "owls"},
                    },
                ],
            }
        findings = [m for m in results if (m.tool_name or "").startswith("subagent__")]
        draft = " ".join(str(m.content) for m in findings)
        if len(results) == len(findings):  # not reviewed yet: ask the critic
            review = {"agentType": "critic", "message": f"Review this draft: {draft}"}
            call = {"id": "review", "name": "companion__spawnAgent", "arguments": review}
            return {"type": "tool_calls", "tool_calls": [call]}
        brief = {
            "summary": f"{draft} (Review: {results[-1].content})",
            "sources": ["web", "archive"],
        }
        return {
            "type": "tool_calls",
            "tool_calls": [{"id": "fin", "name": "__finish__", "arguments": brief}],
        }
    source = "web" if request.agent_name == "web_researcher" else "archive"
    if not results:
        call = {"id": "s1", "name": "search", "arguments": {"source": source, "query": "owls"}}
        return {"type": "tool_calls", "tool_calls": [call]}
    return {"type": "text", "content": str(results[-1].content)}


TREE_SQL = """
WITH RECURSIVE tree AS (
    SELECT session_id, agent_name, status, 0 AS depth, ARRAY[session_id] AS path
    FROM helix.sessions WHERE session_id = :root
    UNION ALL
    SELECT s.session_id, s.agent_name, s.status, t.depth + 1, t.path || s.session_id
    FROM helix.sessions s JOIN tree t ON s.parent_session_id = t.session_id
)
SELECT t.depth, t.agent_name, t.session_id, t.status,
       count(u.*) FILTER (WHERE u.kind = 'llm') AS llm_calls,
       count(u.*) FILTER (WHERE u.kind = 'tool') AS tool_calls,
       count(u.*) FILTER (WHERE u.kind = 'subagent') AS subagent_calls,
       COALESCE(sum(u.input_tokens + u.output_tokens) FILTER (WHERE u.kind <> 'subagent'), 0)
           AS own_tokens
FROM tree t LEFT JOIN helix.usage u ON u.session_id = t.session_id
GROUP BY t.depth, t.agent_name, t.session_id, t.status, t.path
ORDER BY t.path
"""

ROOT_TOTAL_SQL = """
SELECT COALESCE(s.root_session_id, s.session_id) AS root_session_id,
       count(DISTINCT s.session_id) AS sessions,
       sum(u.input_tokens) AS input_tokens, sum(u.output_tokens) AS output_tokens
FROM helix.usage u JOIN helix.sessions s ON s.session_id = u.session_id
WHERE u.kind <> 'subagent' AND COALESCE(s.root_session_id, s.session_id) = :root
GROUP BY 1
"""


async def main() -> None:
    helix = HelixDBOS([lead, web, archive, critic], llm=MockLLM(scripted_model))
    helix.launch()
    try:
        handle = await helix.execute(lead, "Write a brief about owls.")
        print("The lead's stream (its own chunks, and its researchers' tagged with theirs):")
        async for chunk in helix.stream(handle.session_id, run_id=handle.run_id):
            who = chunk.agent_name or lead.name
            if chunk.type in ("run_started", "tool_start", "tool_end", "run_completed"):
                detail = chunk.payload.get("tool_name", "")
                print(f"  {chunk.seq:3} {who:<20} {chunk.type:<14} {detail}")
        result = await handle.result()
        print(f"\nBrief ({result.status}), as JSON:")
        for line in textwrap.wrap(json.dumps(result.output), WIDTH - 2):
            print(f"  {line}")
        print()
        await print_tree(helix, handle.session_id)
    finally:
        helix.shutdown()


async def print_tree(helix: HelixDBOS, root: str) -> None:
    tree = await helix.sql(TREE_SQL, {"root": root})
    [total] = await helix.sql(ROOT_TOTAL_SQL, {"root": root})
    print(f"Session tree (… is the lead's session, {root})")
    print("  agent                   status     llm tool sub  tokens   session")
    for depth, agent, session_id, status, llm, tools, subs, tokens in tree:
        name = "  " * depth + agent
        shown = "…" + session_id[len(root) :] if session_id.startswith(root) else session_id
        print(fit(f"  {name:<24}{status:<10}{llm:>4}{tools:>5}{subs:>4}{tokens:>8}   {shown}"))
    usage = await helix.get_usage(session_id=root, include_children=True)
    print(
        f"\nWhole tree: {total.sessions} sessions, {total.input_tokens} input and "
        f"{total.output_tokens} output tokens ({usage.llm_calls} LLM calls)"
    )


if __name__ == "__main__":
    asyncio.run(main())
