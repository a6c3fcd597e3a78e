"""The compaction: from a session's transcript (and its latest summary) to what the
model is shown, under a token budget. Pure and deterministic: the same transcript,
summary and policy give the same input, whichever process builds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from helix_dbos.orchestration.history.cuts import safe_cuts, turn_starts, unit_starts
from helix_dbos.orchestration.history.policy import (
    DropToolResults,
    HistoryPolicy,
    KeepLastTurns,
    Summarize,
    TokenCounter,
    message_tokens,
)
from helix_dbos.orchestration.types import Message

SUMMARY_HEADING = "## Summary of the earlier conversation"
# The same words whatever was left out: the system prompt stays byte-identical from step
# to step while turns are dropped, so a provider's prompt cache still holds it.
OMITTED_NOTE = "(Earlier messages of this conversation are not shown.)"


@dataclass(frozen=True)
class SummaryRef:
    """A stored summary: it stands for `messages[:covers_through]` of the session."""

    covers_through: int
    text: str


@dataclass(frozen=True)
class SummaryNeeded:
    """The older part of the transcript should be summarised before the model is asked:
    `messages[covers_from:covers_through]`, on top of the summary through `covers_from`."""

    covers_from: int
    covers_through: int


@dataclass(frozen=True)
class ModelInput:
    """What the model is shown: `messages` (a tail of the transcript, some tool results
    maybe elided), and a note for the system prompt (a summary, or what was left out)."""

    messages: list[Message]
    note: str = ""
    omitted: int = 0  # transcript messages not shown (summarised or dropped)
    tokens: int = 0  # the estimate of the whole input (0: not counted, with no budget)
    summary_needed: SummaryNeeded | None = field(default=None)

    def system(self, prompt: str) -> str:
        """The system prompt with the note appended (unchanged without one)."""
        if not self.note:
            return prompt
        return f"{prompt}\n\n{self.note}" if prompt else self.note


def compact(
    history: Sequence[Message],
    policy: HistoryPolicy,
    *,
    budget: int | None,
    fixed_tokens: int = 0,
    summary: SummaryRef | None = None,
    may_summarize: bool = True,
    history_tokens: int | None = None,
    cuts: Callable[[], Sequence[bool]] | None = None,
) -> ModelInput:
    """The model's input. `budget`: input tokens allowed (None: no budget); `fixed_tokens`:
    what the system prompt and tools take; `summary`: the session's latest summary;
    `may_summarize`: False once this step has taken its summary (never two per step);
    `history_tokens`: the messages' tokens by the policy's counter, when the caller keeps
    them (`Transcript.tokens`), so a session that fits is not walked every step; `cuts`:
    gives `safe_cuts(history)`, when the caller keeps them (`Transcript.cuts`), so a
    session over its budget is walked back from its end only as far as what it keeps;
    called only then, so a session that fits never builds them.

    When all of `history` is shown, a list `history` is the input's `messages` itself
    (not a copy): the caller then knows the model sees the whole transcript."""
    if not policy.steps and budget is None:
        return ModelInput(_as_list(history))
    counter = policy.counter
    if not policy.steps and summary is None:  # the default policy: most sessions fit
        if history_tokens is None:
            history_tokens = sum(message_tokens(counter, m) for m in history)
        total = fixed_tokens + history_tokens
        if budget is not None and total <= budget:
            return ModelInput(_as_list(history), tokens=total)
        if budget is not None and cuts is not None:  # over: keep the newest turns that fit
            room = budget - fixed_tokens - _note_tokens(counter, _note("", 1))
            kept = _fit_from_end(
                history, cuts(), lambda i: message_tokens(counter, history[i]), room
            )
            if kept is not None:
                c, size = kept
                note = _note("", c)
                tokens = fixed_tokens + _note_tokens(counter, note) + size
                return ModelInput(list(history[c:]), note=note, omitted=c, tokens=tokens)
    safe = cuts() if cuts is not None else safe_cuts(history)
    start, summary_text = 0, ""
    # A summary whose end is not a cut this transcript allows is not used.
    if summary is not None and 0 < summary.covers_through <= len(history):
        start = summary.covers_through if safe[summary.covers_through] else 0
        summary_text = summary.text if start else ""
    shown = list(history[start:])
    for step in policy.steps:
        local = safe[len(history) - len(shown) :]
        if isinstance(step, DropToolResults):
            shown = _elide_tool_results(shown, local, step)
        elif isinstance(step, KeepLastTurns):
            shown = shown[_keep_last_turns_cut(shown, local, step.turns) :]
    kept_from = len(history) - len(shown)  # absolute index of the first message shown
    sizes = [message_tokens(counter, m) for m in shown]
    dropped = kept_from - start
    head = fixed_tokens + _note_tokens(counter, _note(summary_text, dropped))
    if budget is not None and head + sum(sizes) > budget:
        wanted = policy.summarize
        if wanted is not None and may_summarize:
            through = _summary_cut(shown, safe[kept_from:], sizes, budget - fixed_tokens, wanted)
            if through is not None:
                needed = SummaryNeeded(covers_from=start, covers_through=kept_from + through)
                return ModelInput(shown, summary_needed=needed)
        room = budget - fixed_tokens - _note_tokens(counter, _note(summary_text, 1))
        shown, sizes, more = _fit(shown, sizes, safe[kept_from:], room)
        dropped += more
    note = _note(summary_text, dropped)
    tokens = fixed_tokens + _note_tokens(counter, note) + sum(sizes)
    return ModelInput(shown, note=note, omitted=start + dropped, tokens=tokens)


def _as_list(history: Sequence[Message]) -> list[Message]:
    return history if isinstance(history, list) else list(history)


def _note(summary_text: str, dropped: int) -> str:
    parts = [f"{SUMMARY_HEADING}\n\n{summary_text}"] if summary_text else []
    if dropped:
        parts.append(OMITTED_NOTE)
    return "\n\n".join(parts)


def _note_tokens(counter: TokenCounter, text: str) -> int:
    """The note's tokens in the system prompt (with the blank line before it)."""
    return counter.count(text) + 1 if text else 0


def _turns(shown: Sequence[Message], safe: Sequence[bool]) -> list[int]:
    return turn_starts(shown, safe)


def _keep_last_turns_cut(shown: Sequence[Message], safe: Sequence[bool], turns: int) -> int:
    starts = _turns(shown, safe)
    return starts[-turns] if len(starts) >= turns else 0


def _elide_tool_results(
    shown: list[Message], safe: Sequence[bool], step: DropToolResults
) -> list[Message]:
    starts = _turns(shown, safe)
    if len(starts) <= step.older_than_turns:
        return shown
    limit = starts[len(starts) - step.older_than_turns] if step.older_than_turns else len(shown)
    return [
        _elided(m, step.placeholder)
        if i < limit and m.role == "tool" and m.content != step.placeholder
        else m
        for i, m in enumerate(shown)
    ]


# The elided copy of each tool result, by original message object (as policy._SIZES): the
# same copy every step, so it is made and counted once.
_ELIDED: dict[int, tuple[Message, str, Message]] = {}
_MAX_ELIDED = 50_000


def _elided(message: Message, placeholder: str) -> Message:
    hit = _ELIDED.get(id(message))
    if hit is not None and hit[0] is message and hit[1] == placeholder:
        return hit[2]
    copy = message.model_copy(update={"content": placeholder})
    if len(_ELIDED) >= _MAX_ELIDED:
        _ELIDED.clear()
    _ELIDED[id(message)] = (message, placeholder, copy)
    return copy


def _fit(
    shown: list[Message], sizes: list[int], safe: Sequence[bool], room: int
) -> tuple[list[Message], list[int], int]:
    """Drop the oldest turns until the rest fits in `room`; if the last turn alone does
    not fit, keep its opening user message and its most recent rounds that fit. Returns
    the messages kept, their sizes, and how many were dropped."""
    kept = _fit_from_end(shown, safe, sizes.__getitem__, room)
    if kept is not None:
        c = kept[0]
        return shown[c:], sizes[c:], c
    suffix = _suffix_sums(sizes)
    starts = _turns(shown, safe)
    last = starts[-1] if starts else None
    if last is None:  # no user message to keep: the most recent rounds that fit
        cuts = [c for c in range(1, len(shown)) if safe[c] and shown[c].role == "assistant"]
        c = next((c for c in cuts if suffix[c] <= room), cuts[-1] if cuts else 0)
        return shown[c:], sizes[c:], c
    cuts = unit_starts(shown, safe, last)
    opening = sizes[last]
    if not cuts:
        return shown[last:], sizes[last:], last
    c = next((c for c in cuts if opening + suffix[c] <= room), cuts[-1])
    # The turn's request stays; the rounds between it and `c` are left out.
    return [shown[last], *shown[c:]], [opening, *sizes[c:]], last + (c - last - 1)


def _fit_from_end(
    history: Sequence[Message], safe: Sequence[bool], size_of: Callable[[int], int], room: int
) -> tuple[int, int] | None:
    """The earliest turn start whose suffix fits in `room`, and that suffix's tokens
    (`size_of(i)`: message i's); None when no turn start fits (then `_fit`'s fallbacks
    decide). Each message costs at least its overhead, so the suffixes shrink towards the
    end: the walk from the end stops at the first that does not fit, having looked only
    at what is kept."""
    suffix, best = 0, None
    for c in range(len(history) - 1, -1, -1):
        suffix += size_of(c)
        if suffix > room:
            break
        if history[c].role == "user" and safe[c]:
            best = (c, suffix)
    return best


def _summary_cut(
    shown: Sequence[Message],
    safe: Sequence[bool],
    sizes: list[int],
    room: int,
    summarize: Summarize,
) -> int | None:
    """Where (in `shown`) the summary should end: the earliest turn start after the first
    message whose tail fits in the kept fraction of the room, else the last turn start."""
    keep = room * summarize.keep_fraction
    suffix = _suffix_sums(sizes)
    starts = [c for c in _turns(shown, safe) if c > 0]
    if not starts:
        return None
    return next((c for c in starts if suffix[c] <= keep), starts[-1])


def _suffix_sums(sizes: Sequence[int]) -> list[int]:
    out = [0] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        out[i] = out[i + 1] + sizes[i]
    return out
