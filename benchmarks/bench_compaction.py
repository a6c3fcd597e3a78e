"""Context compaction (issue 49): what the history policy costs an LLM step, in CPU.

The policy is a pure function the `helix.llm` step calls once per step on the transcript
it already holds (`orchestration/history/compaction.py`): no query unless a summarising
agent's session is over budget (then one read of its latest summary). This measures that
function at 10 and 1,000 messages of history (turns of a user message, two tool rounds
with ~400-character results, an answer), for each policy shape, median of `--reps`.

usage: .venv/bin/python benchmarks/bench_compaction.py [--reps 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from helix_dbos.orchestration.history.compaction import SummaryRef, compact
from helix_dbos.orchestration.history.policy import (
    DropToolResults,
    HistoryPolicy,
    KeepLastTurns,
    Summarize,
)
from helix_dbos.orchestration.messages import build_messages_for_llm
from helix_dbos.orchestration.types import Message, ToolCall


def history(messages: int) -> list[Message]:
    out: list[Message] = []
    n = 0
    while len(out) < messages:
        out.append(Message(role="user", content=f"question {n}: " + "q" * 120))
        for _ in range(2):
            n += 1
            call = ToolCall(id=f"c{n}", name="search", arguments={"query": "w" * 40})
            out.append(Message(role="assistant", tool_calls=[call]))
            out.append(
                Message(role="tool", tool_call_id=call.id, tool_name="search", content="r" * 400)
            )
        out.append(Message(role="assistant", content="answer " + "a" * 300))
    return out[:messages]


def median_us(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    reps = parser.parse_args().reps
    summarize = HistoryPolicy(steps=(Summarize(),))
    cases: list[tuple[str, HistoryPolicy, Callable[[int], int | None], bool]] = [
        ("default, model window unknown (no budget)", HistoryPolicy(), lambda n: None, False),
        ("default, fits the window (172,800 tokens)", HistoryPolicy(), lambda n: 172_800, False),
        ("default, over budget: oldest turns dropped", HistoryPolicy(), lambda n: 8_000, False),
        (
            "KeepLastTurns(20) + DropToolResults(5)",
            HistoryPolicy(steps=(DropToolResults(5), KeepLastTurns(20))),
            lambda n: None,
            False,
        ),
        ("Summarize, over budget, with a summary", summarize, lambda n: 8_000, True),
    ]
    print(f"{'policy':48} {'10 msgs':>9} {'1,000 msgs':>11}  (median µs per step)")
    for name, policy, budget, with_summary in cases:
        row = []
        for size in (10, 1000):
            msgs = history(size)
            summary = None
            if with_summary:
                starts = [i for i, m in enumerate(msgs) if m.role == "user"]
                summary = (
                    SummaryRef(starts[len(starts) // 2], "s" * 2000) if len(starts) > 1 else None
                )

            def step(
                msgs: list[Message] = msgs,
                policy: HistoryPolicy = policy,
                allowed: int | None = budget(size),
                summary: SummaryRef | None = summary,
            ) -> object:
                return compact(msgs, policy, budget=allowed, fixed_tokens=300, summary=summary)

            row.append(median_us(step, reps))
        print(f"{name:48} {row[0]:9.1f} {row[1]:11.1f}")
    for size in (10, 1000):
        msgs = history(size)
        base = median_us(lambda m=msgs: build_messages_for_llm(m, "You help.", {}), reps)
        print(f"{'reference: build_messages_for_llm, ' + str(size) + ' msgs':48} {base:9.1f}")


if __name__ == "__main__":
    main()
