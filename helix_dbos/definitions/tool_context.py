"""What a running tool sees of its run: state, identity, events and cancellation."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from helix_dbos.errors import StateUpdateError


class ToolContext:
    """Passed to a tool that declares a `ctx: ToolContext` parameter.

    State is the session's custom state. Changes made with `update_state` are
    returned by the tool's step and committed with the agent step, so they are
    durable exactly when the tool's result is.
    """

    def __init__(
        self,
        *,
        session_id: str,
        run_id: str,
        agent_name: str,
        tool_call_id: str = "",
        tool_name: str = "",
        step: int = 0,
        state: dict[str, Any] | None = None,
        state_schema: type[BaseModel] | None = None,
        cancel_event: asyncio.Event | None = None,
    ) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.agent_name = agent_name
        self.tool_call_id = tool_call_id
        self.tool_name = tool_name
        self.step = step
        self._state: dict[str, Any] = copy.deepcopy(state) if state is not None else {}
        self._state_schema = state_schema
        self._cancel_event = cancel_event or asyncio.Event()
        self.events: list[dict[str, Any]] = []

    def get_state(self) -> Any:
        """A copy of the current state: a `state_schema` instance, or a dict."""
        if self._state_schema is not None:
            return self._state_schema.model_validate(self._state)
        return copy.deepcopy(self._state)

    def update_state(self, update: Callable[[Any], Any] | dict[str, Any] | BaseModel) -> None:
        """Change the state.

        Pass a function that mutates the draft it is given (or returns a new
        state), a dict of keys to set, or a whole new `state_schema` instance.
        """
        if callable(update) and not isinstance(update, (dict, BaseModel)):
            draft = self.get_state()
            returned = update(draft)
            new_state = draft if returned is None else returned
        elif isinstance(update, BaseModel):
            new_state = update
        elif isinstance(update, dict):
            new_state = {**self._state, **update}
        else:
            raise StateUpdateError(
                f"update_state takes a function, a dict or a model, not {type(update).__name__}"
            )
        self._state = self._to_dict(new_state)

    @property
    def state_dict(self) -> dict[str, Any]:
        return self._state

    async def emit(self, event: str, data: Any = None) -> None:
        """Publish a custom event on the session's stream."""
        self.events.append({"event": event, "data": data})

    @property
    def cancelled(self) -> bool:
        """True once the run was aborted; long tools should check it and stop."""
        return self._cancel_event.is_set()

    def _to_dict(self, value: Any) -> dict[str, Any]:
        """Validate against state_schema (a mutated draft too), so bad state never persists."""
        if isinstance(value, BaseModel):
            if self._state_schema is not None and not isinstance(value, self._state_schema):
                raise StateUpdateError(
                    f"State must be a {self._state_schema.__name__}, not {type(value).__name__}"
                )
            value = value.model_dump(mode="python", warnings=False)
        if not isinstance(value, dict):
            raise StateUpdateError(
                f"State must be a dict or a pydantic model, not {type(value).__name__}"
            )
        if self._state_schema is not None:
            try:
                return self._state_schema.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                raise StateUpdateError(
                    f"State does not match {self._state_schema.__name__}: {exc}"
                ) from exc
        return copy.deepcopy(value)
