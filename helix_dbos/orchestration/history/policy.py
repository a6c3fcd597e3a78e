"""The history policies an agent declares (`Agent(history=HistoryPolicy(...))`).

A policy only shapes the model's input: the transcript in `helix.messages` stays whole
(time travel, audit). Each piece is a small typed value; `HistoryPolicy` composes them
under a token budget.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Protocol

from helix_dbos.orchestration.types import Message

#: What a summary request asks of the model, unless `Summarize(instructions=...)` says.
SUMMARY_INSTRUCTIONS = (
    "You compact a conversation between a user and an AI assistant so the assistant can "
    "continue it. Write a concise summary of the conversation below: the user's goals and "
    "requests, the facts and decisions established, tool results that still matter, and "
    "what is still open. Reply with the summary only."
)
ELIDED_TOOL_RESULT = "[tool result elided to save context]"
#: Per-message overhead of the chat formats (role markers, separators), in tokens.
MESSAGE_OVERHEAD_TOKENS = 4


class TokenCounter(Protocol):
    """Counts the tokens of a text. Plug in a provider's tokenizer if you have one."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class CharEstimate:
    """A cheap estimate: one token per `chars_per_token` characters (about 4 for English
    on OpenAI's and Anthropic's tokenizers). No dependency, no I/O."""

    chars_per_token: float = 4.0

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


@dataclass(frozen=True)
class KeepLastTurns:
    """Show only the last `turns` turns (a turn starts at a user message)."""

    turns: int

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError("KeepLastTurns: turns must be at least 1")


@dataclass(frozen=True)
class DropToolResults:
    """Replace the content of tool results older than the last `older_than_turns` turns
    with a short placeholder; the call and its (elided) result stay paired."""

    older_than_turns: int
    placeholder: str = ELIDED_TOOL_RESULT

    def __post_init__(self) -> None:
        if self.older_than_turns < 0:
            raise ValueError("DropToolResults: older_than_turns cannot be negative")


@dataclass(frozen=True)
class Summarize:
    """When the input would exceed the budget, summarise the older turns with a model
    call (the agent's own model) instead of dropping them. The summary covers everything
    but the most recent turns that fit in `keep_fraction` of the budget, so the next one
    is due only after the session grew by about that much again."""

    keep_fraction: float = 0.5
    instructions: str = SUMMARY_INSTRUCTIONS
    max_tokens: int | None = 1024

    def __post_init__(self) -> None:
        if not 0 < self.keep_fraction < 1:
            raise ValueError("Summarize: keep_fraction must be between 0 and 1")


HistoryStep = KeepLastTurns | DropToolResults | Summarize


@dataclass(frozen=True)
class HistoryPolicy:
    """How an agent's input is kept under `max_input_tokens` (None: the model's known
    context window, less its output tokens and a 10% margin; a model whose window is not
    known, such as `mock`, gets no budget). `steps` apply in order; whatever still
    exceeds the budget is dropped, oldest turns first (or summarised, with `Summarize`)."""

    steps: tuple[HistoryStep, ...] = ()
    max_input_tokens: int | None = None
    counter: TokenCounter = field(default_factory=CharEstimate)

    def __post_init__(self) -> None:
        if self.max_input_tokens is not None and self.max_input_tokens < 1:
            raise ValueError("HistoryPolicy: max_input_tokens must be positive")
        if sum(isinstance(s, Summarize) for s in self.steps) > 1:
            raise ValueError("HistoryPolicy: at most one Summarize step")

    @property
    def summarize(self) -> Summarize | None:
        return next((s for s in self.steps if isinstance(s, Summarize)), None)


# Message sizes by message object: the LLM step holds a session's transcript across its
# steps (the same objects), so each message is counted once, not once per step. The memo
# holds the message itself, so an id is never reused while its entry lives; it is
# emptied when full.
_SIZES: dict[int, tuple[Message, TokenCounter, int]] = {}
_MAX_SIZES = 50_000


def message_tokens(counter: TokenCounter, message: Message) -> int:
    """A message's tokens as the model reads them (remembered per message object)."""
    hit = _SIZES.get(id(message))
    if hit is not None and hit[0] is message and hit[1] is counter:
        return hit[2]
    total = count_message(counter, message)
    if len(_SIZES) >= _MAX_SIZES:
        _SIZES.clear()
    _SIZES[id(message)] = (message, counter, total)
    return total


def count_message(counter: TokenCounter, message: Message) -> int:
    """A message's tokens as the model reads them: text, tool calls, thinking."""
    total = MESSAGE_OVERHEAD_TOKENS + counter.count(message.content or "")
    for call in message.tool_calls:
        args = json.dumps(call.arguments, separators=(",", ":"), default=str)
        total += counter.count(call.name) + counter.count(args)
    for block in message.thinking:
        total += counter.count(block.text or "")
    return total
