"""One concise line per thing a run does, from its stream: for people watching a run.

`StepNarrator` turns chunks into lines ("step 1 · tool fetch_reviews({...})", "step 1 ·
waiting for approval of delete_file ..."); the CLI prints them live, and `log_steps`
logs them at INFO for programs that want the same from the Python API:

    task = asyncio.create_task(log_steps(helix.stream(handle.session_id, run_id=handle.run_id)))
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from helix_dbos.api.answers import HUMAN_REQUEST_KINDS
from helix_dbos.streaming.chunks import StreamChunk

progress_logger = logging.getLogger("helix_dbos.progress")

WAITS = {k.chunk_type: k.described for k in HUMAN_REQUEST_KINDS.values()}
# What answers each wait from a shell.
ANSWER_COMMANDS = {k.chunk_type: k.shell_hint for k in HUMAN_REQUEST_KINDS.values()}


def short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class StepNarrator:
    """Feed it a run's chunks in order; it returns the lines to show (often none)."""

    root_agent: str | None = None
    _text: dict[tuple[str | None, int | None], str] = field(default_factory=dict)

    def feed(self, chunk: StreamChunk) -> list[str]:
        key = (chunk.run_id, chunk.step)
        if chunk.type in ("text_delta", "thinking"):
            piece = chunk.payload.get("delta") or ""
            if chunk.type == "text_delta":
                self._text[key] = self._text.get(key, "") + piece
            return []
        lines = self._flush_text(key, chunk)
        line = self.describe(chunk)
        if line:
            lines.append(self._prefix(chunk) + line)
        return lines

    def finish(self) -> list[str]:
        """Text still held back (a run that ended on a text reply)."""
        lines = [
            f"step {step} · model: {short(text)}"
            for (_, step), text in self._text.items()
            if text.strip()
        ]
        self._text.clear()
        return lines

    def _flush_text(self, key: tuple[str | None, int | None], chunk: StreamChunk) -> list[str]:
        text = self._text.pop(key, "")
        return [self._prefix(chunk) + f"model: {short(text)}"] if text.strip() else []

    def _prefix(self, chunk: StreamChunk) -> str:
        who = ""
        if self.root_agent is None:
            self.root_agent = chunk.agent_name
        elif chunk.agent_name and chunk.agent_name != self.root_agent:
            who = f"{chunk.agent_name} "
        step = f"step {chunk.step} · " if chunk.step else ""
        return who + step

    @staticmethod
    def describe(chunk: StreamChunk) -> str | None:
        p = chunk.payload
        kind = chunk.type
        if kind == "run_started":
            return f"run {chunk.run_id} started (turn {p.get('turn')})"
        if kind == "run_resumed":
            return "resumed"
        if kind == "tool_start":
            return f"tool {p.get('tool_name')}({short(p.get('arguments'), 50)})"
        if kind == "tool_end":
            if p.get("success"):
                return f"tool {p.get('tool_name')} done: {short(p.get('result'), 50)}"
            return f"tool {p.get('tool_name')} failed: {short(p.get('error'), 80)}"
        if kind in WAITS:
            command = ANSWER_COMMANDS[kind].format(
                session=chunk.session_id, call=p.get("tool_call_id")
            )
            return (
                f"waiting for {WAITS[kind]}: {p.get('tool_name')}({short(p.get('input'), 50)}) "
                f"-> {command}"
            )
        if kind.startswith("run_"):
            detail = p.get("error") or p.get("reason")
            return f"run {kind.removeprefix('run_')}" + (
                f": {short(detail, 100)}" if detail else ""
            )
        if kind == "custom" and p.get("event") == "progress":
            return f"progress: {short((p.get('data') or {}).get('message'))}"
        return None


async def log_steps(
    chunks: AsyncIterator[StreamChunk],
    logger: logging.Logger = progress_logger,
    level: int = logging.INFO,
) -> None:
    """Log a line per step event of the stream (see the module docstring) until it ends."""
    narrator = StepNarrator()
    async for chunk in chunks:
        for line in narrator.feed(chunk):
            logger.log(level, line)
    for line in narrator.finish():
        logger.log(level, line)
