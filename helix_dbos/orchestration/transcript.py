"""A session's transcript with what every model call derives from it, kept as it grows.

Each LLM step needs the set of tool-call ids the session already holds (so a new
call's id is unique, `call_ids.py`) and the messages the model is sent (the
transcript without system messages, `messages.build_messages_for_llm`). Derived
afresh, both walk the whole conversation in Python every step; kept here and
topped up with the rows each step appends, a step costs the same at message 10 and
message 1,000 (and so does whether any message has attachments, `holds_parts`, which
spares each request a walk for stored parts). Built from the same messages, they are
the same on a replay or in a fresh process (which builds them once from its first
read). So are the token count the history budget compares with the model's window
(`tokens`), summed once per message, and where the transcript may be cut (`cuts`),
which compaction starts from.
"""

from __future__ import annotations

from collections.abc import Iterable

from helix_dbos.orchestration.call_ids import transcript_call_ids
from helix_dbos.orchestration.history.cuts import SafeCuts
from helix_dbos.orchestration.history.policy import TokenCounter, message_tokens
from helix_dbos.orchestration.types import Message


class Transcript:
    """Append-only: `messages`, `call_ids` and `for_llm` grow together, never shrink.

    Shared by a session's steps in one process (`HistoryCache`), which run one at a
    time: readers use it within their step and must not change it.
    """

    __slots__ = ("_counted", "_cuts", "call_ids", "for_llm", "holds_parts", "messages")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self.messages: list[Message] = []
        self.call_ids: set[str] = set()
        self.for_llm: list[Message] = []  # without system messages
        # Whether a message has attachments (images, documents): without any, a request
        # built from the transcript has no stored part to resolve, and no walk looks.
        self.holds_parts = False
        self._cuts: SafeCuts | None = None  # built by the first `cuts`, then kept up
        # (counter, how many messages counted, their tokens): topped up by `tokens`.
        self._counted: tuple[TokenCounter, int, int] | None = None
        self.extend(messages)

    def extend(self, messages: Iterable[Message]) -> None:
        new = list(messages)
        self.messages.extend(new)
        self.call_ids.update(transcript_call_ids(new))
        self.for_llm.extend(m for m in new if m.role != "system")
        self.holds_parts = self.holds_parts or any(m.attachments for m in new)
        if self._cuts is not None:
            self._cuts.extend(new)

    @property
    def cuts(self) -> SafeCuts:
        """Where the transcript may be cut (`cuts.flags`), kept from the first ask on: a
        session whose model input is never compacted pays nothing for it."""
        if self._cuts is None:
            self._cuts = SafeCuts()
            self._cuts.extend(self.messages)
        return self._cuts

    def tokens(self, counter: TokenCounter) -> int:
        """The sum of `message_tokens(counter, m)` over the messages: what was counted
        before plus the messages appended since (all of them again for another counter)."""
        counted = self._counted
        done, total = (counted[1], counted[2]) if counted and counted[0] is counter else (0, 0)
        total += sum(message_tokens(counter, m) for m in self.messages[done:])
        self._counted = (counter, len(self.messages), total)
        return total

    def __len__(self) -> int:
        return len(self.messages)
