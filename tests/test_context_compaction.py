"""Context compaction (issue 49): the policies as pure functions over random histories,
and on the real runtime a long session whose model input stays under its budget, with
summaries written once and the full transcript kept."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from checkpoint_shadow import shadow_checkpoints  # noqa: F401 - autouse: as the trigger gave
from helpers import sql

from helix_dbos import (
    Agent,
    CharEstimate,
    DropToolResults,
    HistoryPolicy,
    KeepLastTurns,
    LLMRequest,
    Summarize,
    is_summary_request,
)
from helix_dbos.definitions.agent import LLMConfig
from helix_dbos.orchestration.history.compaction import SummaryRef, compact
from helix_dbos.orchestration.history.cuts import safe_cuts
from helix_dbos.orchestration.history.policy import ELIDED_TOOL_RESULT, message_tokens
from helix_dbos.orchestration.transcript import Transcript
from helix_dbos.orchestration.types import Message, ToolCall
from helix_dbos.runtime.loop.history_view import history_budget

# --- pure: random histories -------------------------------------------------------------


def random_history(rng: random.Random, turns: int) -> list[Message]:
    """Turns of a user message and rounds of (parallel) tool calls whose results may come
    late, after a steering user message or a notice, as in real sessions."""
    out: list[Message] = []
    n = 0
    for t in range(turns):
        out.append(Message(role="user", content=f"turn {t} " + "u" * rng.randint(0, 200)))
        for _ in range(rng.randint(0, 3)):
            calls = []
            for _ in range(rng.randint(1, 3)):
                n += 1
                calls.append(
                    ToolCall(id=f"c{n}", name="look", arguments={"q": "x" * rng.randint(0, 80)})
                )
            out.append(Message(role="assistant", content=None, tool_calls=calls))
            if rng.random() < 0.15:  # something lands between a call and its results
                out.append(Message(role="user", content="steer " + "s" * rng.randint(0, 50)))
            for call in calls:
                out.append(
                    Message(
                        role="tool",
                        tool_call_id=call.id,
                        tool_name=call.name,
                        content="r" * rng.randint(0, 400),
                    )
                )
        out.append(Message(role="assistant", content="a" * rng.randint(1, 300)))
    return out


def assert_pairs_kept(history: list[Message], shown: list[Message]) -> None:
    """Every call shown has all its results shown, and every result shown has its call."""
    calls_shown = {c.id for m in shown if m.role == "assistant" for c in m.tool_calls}
    results_shown = {m.tool_call_id for m in shown if m.role == "tool"}
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    assert results_shown <= calls_shown, "a tool result without its call"
    assert calls_shown & answered <= results_shown, "a tool call without its result"


def is_subsequence(shown: list[Message], history: list[Message]) -> bool:
    it = iter(history)
    return all(any(_same(s, h) for h in it) for s in shown)


def _same(shown: Message, original: Message) -> bool:
    if shown.role == "tool" and shown.content == ELIDED_TOOL_RESULT:
        return original.tool_call_id == shown.tool_call_id
    return shown == original


POLICIES = [
    HistoryPolicy(),
    HistoryPolicy(steps=(KeepLastTurns(3),)),
    HistoryPolicy(steps=(DropToolResults(older_than_turns=1),)),
    HistoryPolicy(steps=(DropToolResults(0), KeepLastTurns(5))),
    HistoryPolicy(steps=(Summarize(),)),
]


@pytest.mark.parametrize("seed", range(300))
def test_compaction_never_splits_a_tool_call_from_its_result(seed: int) -> None:
    rng = random.Random(seed)
    history = random_history(rng, rng.randint(1, 12))
    policy = rng.choice(POLICIES)
    budget = rng.choice([None, 50, 200, 800, 5000])
    safe = safe_cuts(history)
    turn_starts = [i for i, m in enumerate(history) if i and safe[i] and m.role == "user"]
    covers = rng.choice([0, *turn_starts])  # summaries end where a turn starts
    summary = SummaryRef(covers, "an earlier summary") if covers else None
    view = compact(history, policy, budget=budget, fixed_tokens=20, summary=summary)
    assert_pairs_kept(history, view.messages)
    assert is_subsequence(view.messages, history)
    if view.summary_needed is not None:
        needed = view.summary_needed
        assert needed.covers_from < needed.covers_through <= len(history)
        assert safe[needed.covers_through] and history[needed.covers_through].role == "user"
        return
    # Cut at a turn, or inside the last turn keeping its user message: a valid transcript.
    assert not view.messages or view.messages[0].role == "user"
    counter = policy.counter
    tokens = 20 + sum(message_tokens(counter, m) for m in view.messages)
    tokens += counter.count(view.note) + 1 if view.note else 0
    assert tokens == view.tokens or not (budget or policy.steps), "the estimate is reported"
    if budget is not None and tokens > budget:  # only the least that can be shown
        last = max(i for i, m in enumerate(history) if m.role == "user" and safe[i])
        rounds = [
            i for i in range(last + 1, len(history)) if safe[i] and history[i].role == "assistant"
        ]
        least = [history[last], *history[rounds[-1] :]] if rounds else history[last:]
        assert [m.content for m in view.messages] == [m.content for m in least], (tokens, budget)


def test_a_history_that_fits_is_shown_whole_and_unchanged() -> None:
    history = random_history(random.Random(7), 5)
    view = compact(history, HistoryPolicy(), budget=10**6)
    assert view.messages == history and view.note == "" and view.omitted == 0
    assert compact(history, HistoryPolicy(), budget=None).messages == history


def test_only_a_session_over_its_budget_builds_its_cuts() -> None:
    """`Transcript.cuts` is built on first use: a session that fits never asks for it."""
    transcript = Transcript(random_history(random.Random(7), 40))
    total = transcript.tokens(HistoryPolicy().counter)

    def view(budget: int) -> Any:
        return compact(
            transcript.messages,
            HistoryPolicy(),
            budget=budget,
            history_tokens=total,
            cuts=lambda: transcript.cuts.flags,
        )

    assert view(total).omitted == 0
    assert transcript._cuts is None
    assert view(total // 2).omitted > 0
    assert transcript._cuts is not None


def test_the_transcripts_running_token_count_is_the_sum_compaction_would_take() -> None:
    """A session that fits is counted from the transcript's running total, topped up with
    each step's rows, not walked each step: the total must stay the plain sum (any
    counter, any appends), and the input must be the transcript's own list, so the LLM
    step sends its cached messages without a walk either."""
    rng = random.Random(11)
    history = random_history(rng, 30)
    transcript = Transcript(history[:40])
    policy, other = HistoryPolicy(), HistoryPolicy(counter=CharEstimate(chars_per_token=2.0))
    for cut in (40, 41, 90, len(history)):
        transcript.extend(history[len(transcript) : cut])
        for counter in (policy.counter, other.counter, policy.counter):
            expected = sum(message_tokens(counter, m) for m in transcript.messages)
            assert transcript.tokens(counter) == expected
        counted = transcript.tokens(policy.counter)
        fast = compact(
            transcript.messages, policy, budget=10**6, fixed_tokens=9, history_tokens=counted
        )
        slow = compact(list(transcript.messages), policy, budget=10**6, fixed_tokens=9)
        assert fast.messages is transcript.messages and fast.tokens == slow.tokens
        assert fast.messages == slow.messages and slow.messages is not transcript.messages
    # Over the budget, the count only decides that the session does not fit.
    tight = compact(
        transcript.messages, policy, budget=500, history_tokens=transcript.tokens(policy.counter)
    )
    assert tight == compact(list(transcript.messages), policy, budget=500)
    assert tight.omitted > 0


def odd_history(rng: random.Random) -> list[Message]:
    """Few call ids, reused: results before their call, twice, or never; calls repeated."""
    ids = ["a", "b", "c"]
    out: list[Message] = []
    for _ in range(rng.randint(0, 14)):
        kind = rng.random()
        if kind < 0.4:
            calls = [
                ToolCall(id=i, name="f", arguments={})
                for i in rng.sample(ids, 2)[: rng.randint(1, 2)]
            ]
            out.append(Message(role="assistant", content=None, tool_calls=calls))
        elif kind < 0.75:
            out.append(
                Message(role="tool", tool_call_id=rng.choice(ids), tool_name="f", content="r")
            )
        else:
            out.append(Message(role="user", content="u" * rng.randint(0, 40)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_cuts_kept_as_the_transcript_grows_are_the_cuts_of_the_whole(seed: int) -> None:
    """`Transcript.cuts` is topped up with each step's rows: after any appends it must be
    `safe_cuts` of the whole transcript, odd transcripts included."""
    rng = random.Random(seed)
    for history in (random_history(rng, rng.randint(0, 25)), odd_history(rng)):
        transcript, i = Transcript(), 0
        while i < len(history):
            step = rng.randint(1, 7)
            transcript.extend(history[i : i + step])
            i += step
            assert transcript.cuts.flags == safe_cuts(transcript.messages)


@pytest.mark.parametrize("seed", range(60))
def test_compaction_from_the_kept_cuts_and_count_is_the_full_compaction(seed: int) -> None:
    """The LLM step compacts from the transcript's kept count and cuts (a session over
    its budget walked back from its end only): the input must be exactly the one the
    whole-transcript compaction gives, for every policy, budget and summary."""
    rng = random.Random(1000 + seed)
    history = random_history(rng, rng.randint(1, 30)) if seed % 4 else odd_history(rng)
    transcript = Transcript(history)
    policies = [
        HistoryPolicy(),
        HistoryPolicy(steps=(KeepLastTurns(rng.randint(1, 4)),)),
        HistoryPolicy(steps=(DropToolResults(1),)),
        HistoryPolicy(steps=(Summarize(),)),
    ]
    total = sum(message_tokens(CharEstimate(), m) for m in history)
    for policy in policies:
        for budget in (None, 10**6, max(total // 3, 1), rng.randint(1, max(total, 1))):
            fixed = rng.randint(0, 60)
            summary = None
            if policy.summarize is not None and len(history) > 2 and rng.random() < 0.5:
                summary = SummaryRef(rng.randint(1, len(history) - 1), "the gist")
            counted = transcript.tokens(policy.counter) if not policy.steps else None
            fast = compact(
                transcript.messages,
                policy,
                budget=budget,
                fixed_tokens=fixed,
                summary=summary,
                history_tokens=counted,
                cuts=lambda: transcript.cuts.flags,
            )
            full = compact(
                list(history), policy, budget=budget, fixed_tokens=fixed, summary=summary
            )
            assert fast == full, (policy, budget, fixed)


def test_keep_last_turns_and_elided_tool_results() -> None:
    history = random_history(random.Random(3), 6)
    view = compact(history, HistoryPolicy(steps=(KeepLastTurns(2),)), budget=None)
    assert [m.role for m in view.messages].count("user") >= 2
    assert view.messages[0].role == "user" and view.messages[-1] == history[-1]
    assert "Earlier messages of this conversation are not shown" in view.note
    elided = compact(history, HistoryPolicy(steps=(DropToolResults(1),)), budget=None)
    last_turn = max(i for i, m in enumerate(history) if m.role == "user" and safe_cuts(history)[i])
    for i, m in enumerate(elided.messages):
        if m.role == "tool":
            assert (m.content == ELIDED_TOOL_RESULT) == (i < last_turn)


def test_a_summary_is_due_only_over_budget_and_then_shown_in_the_system_prompt() -> None:
    history = random_history(random.Random(11), 20)
    policy = HistoryPolicy(steps=(Summarize(),))
    assert compact(history, policy, budget=10**6).summary_needed is None
    due = compact(history, policy, budget=600).summary_needed
    assert due is not None and due.covers_from == 0
    summary = SummaryRef(due.covers_through, "The user asked about looks.")
    view = compact(history, policy, budget=600, summary=summary)
    assert view.summary_needed is None
    assert view.messages == history[due.covers_through :]
    assert view.system("Be brief.").startswith("Be brief.\n\n## Summary of the earlier")
    assert "The user asked about looks." in view.system("")
    # Never two summaries in one step: without leave, what does not fit is dropped.
    dropped = compact(history, policy, budget=600, may_summarize=False)
    assert dropped.summary_needed is None and dropped.omitted > 0


def test_the_default_budget_comes_from_the_models_known_window(make_agent) -> None:
    known = Agent(
        "budget_known", llm=LLMConfig(model="anthropic:claude-sonnet-4-5", max_tokens=8000)
    )
    assert history_budget(known) == int((200_000 - 8000) * 0.9)
    assert history_budget(Agent("budget_mock")) is None, "no window known: no budget"
    explicit = Agent("budget_set", history=HistoryPolicy(max_input_tokens=1234))
    assert history_budget(explicit) == 1234
    assert CharEstimate().count("x" * 9) == 3
    with pytest.raises(ValueError):
        HistoryPolicy(steps=(Summarize(), Summarize()))


# --- the real runtime ---------------------------------------------------------------------

BUDGET = 400


def request_tokens(request: LLMRequest) -> int:
    """The same estimate the policy uses, over what the model actually received."""
    counter = CharEstimate()
    tools = json.dumps([t.model_dump(mode="json") for t in request.tools])
    system = request.messages[0].content if request.messages[0].role == "system" else ""
    body = [m for m in request.messages if m.role != "system"]
    return counter.count((system or "") + tools) + sum(message_tokens(counter, m) for m in body)


def chatty(request: LLMRequest) -> dict[str, Any]:
    if is_summary_request(request.messages):
        covered = request.messages[-1].content or ""
        return {"type": "text", "content": f"summary of {covered.count(chr(10))} lines"}
    last = request.messages[-1].content or ""
    return {"type": "text", "content": f"echo {last[:40]} " + "z" * 120}


async def test_a_2000_turn_session_completes_every_turn_under_its_budget(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(system_prompt="You echo.", history=HistoryPolicy(max_input_tokens=BUDGET))
    mock_llm.set_responder(chatty)
    mock_llm.inputs.clear()
    session_id = None
    started = time.perf_counter()
    try:
        for turn in range(2000):
            handle = await helix.execute(
                agent, f"message {turn} " + "q" * 60, session_id=session_id
            )
            result = await handle.result()
            assert result.status == "completed", (turn, result.error)
            session_id = result.session_id
    finally:
        mock_llm.set_responder(None)
    elapsed = time.perf_counter() - started
    asked = [r for r in mock_llm.inputs if r.agent_name == agent.name]
    assert len(asked) == 2000
    over = [i for i, r in enumerate(asked) if request_tokens(r) > BUDGET]
    assert not over, f"turns over budget: {over[:5]}"
    last = asked[-1]
    assert last.messages[-1].content.startswith("message 1999 ")
    assert "Earlier messages of this conversation are not shown" in (last.system or "")
    # The full transcript stays in SQL: 2 messages a turn, none compacted away.
    assert sql(
        database_url, "SELECT count(*) FROM helix.messages WHERE session_id = %s", session_id
    ) == [(4000,)]
    assert sql(
        database_url, "SELECT count(*) FROM helix.summaries WHERE session_id = %s", session_id
    ) == [(0,)]
    print(f"2000 turns in {elapsed:.1f} s")


async def test_summaries_are_durable_steps_written_once_and_time_travel_shows_everything(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(
        system_prompt="You echo.",
        history=HistoryPolicy(steps=(Summarize(),), max_input_tokens=BUDGET),
    )
    mock_llm.set_responder(chatty)
    mock_llm.inputs.clear()
    session_id = None
    try:
        for turn in range(60):
            handle = await helix.execute(
                agent, f"message {turn} " + "q" * 60, session_id=session_id
            )
            result = await handle.result()
            assert result.status == "completed", (turn, result.error)
            session_id = result.session_id
    finally:
        mock_llm.set_responder(None)
    asked = [r for r in mock_llm.inputs if r.agent_name == agent.name]
    summaries_asked = [r for r in asked if is_summary_request(r.messages)]
    turns_asked = [r for r in asked if not is_summary_request(r.messages)]
    assert len(turns_asked) == 60
    assert all(request_tokens(r) <= BUDGET for r in turns_asked)
    rows = sql(
        database_url,
        "SELECT covers_through_seq, covers_messages, text, run_id FROM helix.summaries "
        "WHERE session_id = %s ORDER BY covers_through_seq",
        session_id,
    )
    assert len(rows) == len(summaries_asked) >= 2, "one row per summary call"
    # Each summary call is priced and counted like any model call: one `llm` usage row.
    usage = sql(
        database_url,
        "SELECT u.run_id, u.input_tokens > 0 FROM helix.usage u WHERE u.session_id = %s "
        "AND u.kind = 'llm' AND u.usage_id LIKE %s ORDER BY u.usage_id",
        session_id,
        "%:summary:%",
    )
    assert sorted(usage) == sorted((r[3], True) for r in rows)
    assert [r[1] for r in rows] == sorted({r[1] for r in rows}), "each covers more"
    last_summary = rows[-1][2]
    assert f"## Summary of the earlier conversation\n\n{last_summary}" in (
        turns_asked[-1].system or ""
    )
    # The later summaries build on the earlier ones.
    assert "Summary so far:\nsummary of" in (summaries_asked[-1].messages[-1].content or "")
    # Each summary is a step of its own, in the run that needed it.
    steps = sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON o.workflow_uuid = r.workflow_id WHERE r.session_id = %s "
        "AND o.function_name = 'helix.summary'",
        session_id,
    )
    assert steps == [(len(rows),)]
    # The full transcript stays, and time travel shows all of it.
    messages = await helix.get_messages(session_id)
    assert len(messages) == 120 and messages[0].content.startswith("message 0 ")
    checkpoints = await helix.checkpoints.list(session_id)
    view = await helix.checkpoints.get(session_id, checkpoints[-1].checkpoint_id)
    assert [m.content for m in view.messages] == [m.content for m in messages]


async def test_a_fork_from_before_a_summary_does_not_use_it(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(
        system_prompt="You echo.",
        history=HistoryPolicy(steps=(Summarize(),), max_input_tokens=BUDGET),
    )
    mock_llm.set_responder(chatty)
    session_id = None
    try:
        for turn in range(12):
            result = await (
                await helix.execute(agent, f"message {turn} " + "q" * 60, session_id=session_id)
            ).result()
            session_id = result.session_id
        rows = sql(
            database_url,
            "SELECT covers_messages FROM helix.summaries WHERE session_id = %s",
            session_id,
        )
        assert rows, "the session was summarised"
        checkpoints = await helix.checkpoints.list(session_id)
        early = checkpoints[1]  # after the second turn: before any summary
        fork = await helix.checkpoints.fork(session_id, early.checkpoint_id)
        mock_llm.inputs.clear()
        done = await (await helix.execute(agent, "after the fork", session_id=fork)).result()
    finally:
        mock_llm.set_responder(None)
    assert done.status == "completed"
    sent = mock_llm.get_last_input()
    assert "Summary of the earlier conversation" not in (sent.system or "")
    assert [m.content for m in sent.messages[1:]][-1] == "after the fork"
    assert len(sent.messages) == 1 + 5, "the fork's own four messages and the new one"


async def test_a_failed_summary_falls_back_to_dropping_and_the_run_completes(
    helix, make_agent, mock_llm, database_url
):
    agent = make_agent(
        system_prompt="You echo.",
        history=HistoryPolicy(steps=(Summarize(),), max_input_tokens=BUDGET),
    )

    def no_summary(request: LLMRequest) -> dict[str, Any]:
        if is_summary_request(request.messages):
            return {"type": "text", "content": "  "}  # nothing usable
        return chatty(request)

    mock_llm.set_responder(no_summary)
    mock_llm.inputs.clear()
    session_id = None
    try:
        for turn in range(12):
            result = await (
                await helix.execute(agent, f"message {turn} " + "q" * 60, session_id=session_id)
            ).result()
            assert result.status == "completed", (turn, result.error)
            session_id = result.session_id
    finally:
        mock_llm.set_responder(None)
    asked = [r for r in mock_llm.inputs if r.agent_name == agent.name]
    turns = [r for r in asked if not is_summary_request(r.messages)]
    assert len(turns) == 12 and all(request_tokens(r) <= BUDGET for r in turns)
    assert any(is_summary_request(r.messages) for r in asked), "a summary was asked for"
    assert "Earlier messages of this conversation are not shown" in (turns[-1].system or "")
    assert sql(
        database_url, "SELECT count(*) FROM helix.summaries WHERE session_id = %s", session_id
    ) == [(0,)]
    failed = sql(
        database_url,
        "SELECT count(*) FROM dbos.operation_outputs o JOIN helix.runs r "
        "ON o.workflow_uuid = r.workflow_id WHERE r.session_id = %s "
        "AND o.function_name = 'helix.summary' AND o.error IS NOT NULL",
        session_id,
    )
    assert failed[0][0] >= 1, "the failed summary step is recorded, so a replay fails alike"
