"""Errors users can catch; each message says what went wrong and what to do."""

from __future__ import annotations


class HelixError(Exception):
    """Base class of every helix_dbos error."""


class ToolDefinitionError(HelixError, ValueError):
    """A tool was defined with an invalid combination of options."""


class AgentDefinitionError(HelixError, ValueError):
    """An agent was defined with an invalid configuration."""


class ToolArgumentsError(HelixError):
    """The model called a tool with arguments that do not match its schema."""


class ToolOutputError(HelixError):
    """A tool returned a value that does not match its declared `output_schema`."""


class SessionNotFoundError(HelixError, LookupError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session '{session_id}' does not exist")
        self.session_id = session_id

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.session_id,))


class RunNotFoundError(HelixError, LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run '{run_id}' does not exist")
        self.run_id = run_id

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.run_id,))


class CheckpointNotFoundError(HelixError, LookupError):
    """No checkpoint with this id in this session (a typo, another session's id, or one
    removed by `prune`)."""

    def __init__(self, session_id: str, checkpoint_id: str) -> None:
        super().__init__(
            f"Checkpoint '{checkpoint_id}' does not exist in session '{session_id}' "
            "(list them with get_checkpoints / `helix-dbos checkpoints SESSION`)"
        )
        self.session_id = session_id
        self.checkpoint_id = checkpoint_id

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.session_id, self.checkpoint_id))


class AgentNotRegisteredError(HelixError, LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(
            f"Agent '{name}' is not registered with HelixDBOS (registered: {listed}); "
            "pass it in HelixDBOS(agents=[...]) before launch"
        )
        self.name = name
        self.known = known

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:
        return (type(self), (self.name, self.known))


class AgentAlreadyRunningError(HelixError):
    def __init__(self, session_id: str, run_id: str | None = None) -> None:
        where = f" (run '{run_id}')" if run_id else ""
        super().__init__(
            f"Session '{session_id}' already has a run in progress{where}; "
            "wait for it, interrupt it or abort it before starting another"
        )
        self.session_id = session_id
        self.run_id = run_id

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return (type(self), (self.session_id, self.run_id))


class SessionAgentMismatchError(HelixError, ValueError):
    def __init__(self, session_id: str, session_agent: str, agent: str) -> None:
        super().__init__(
            f"Session '{session_id}' belongs to agent '{session_agent}', not '{agent}'"
        )
        self.args_ = (session_id, session_agent, agent)

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), self.args_)


class StateUpdateError(HelixError, ValueError):
    """A tool produced a state that does not match the agent's state_schema."""


class ToolCallNotFoundError(HelixError, LookupError):
    def __init__(self, session_id: str, tool_call_id: str) -> None:
        super().__init__(f"Session '{session_id}' has no pending tool call '{tool_call_id}'")
        self.session_id = session_id
        self.tool_call_id = tool_call_id

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.session_id, self.tool_call_id))


class AmbiguousToolCallError(HelixError):
    """An answer sent through an ancestor session for a call id that several of its
    descendants wait on (call ids are unique per session, not per tree): nothing was
    answered; send it to one of `session_ids`, the sessions that own such a call."""

    def __init__(self, session_id: str, tool_call_id: str, session_ids: list[str]) -> None:
        listed = ", ".join(f"'{s}'" for s in session_ids)
        super().__init__(
            f"Tool call '{tool_call_id}' is pending in several sessions below '{session_id}' "
            f"({listed}); answer it through the session that owns it"
        )
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.session_ids = session_ids

    def __reduce__(self) -> tuple[type, tuple[str, str, list[str]]]:
        return (type(self), (self.session_id, self.tool_call_id, self.session_ids))


class ToolCallAlreadyAnsweredError(HelixError):
    def __init__(self, tool_call_id: str, status: str) -> None:
        super().__init__(
            f"Tool call '{tool_call_id}' was already answered (status: {status}); an answer applies once"
        )
        self.tool_call_id = tool_call_id
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.tool_call_id, self.status))


class InvalidAnswerError(HelixError, ValueError):
    """An answer of the wrong kind or shape for a pending tool call."""


class RunNotActiveError(HelixError):
    """The session has no live run to interrupt or abort, or its last run cannot be retried."""


class InvalidInputError(HelixError, ValueError):
    """Input the database cannot store (a NUL character, a lone surrogate); the message
    names the field."""


class ContentPartError(InvalidInputError):
    """A content part (an image, a document) that cannot go to the agent's model: a media
    type or URL no provider takes, or one the model cannot read (HTTP 422). Raised by
    `execute()`, before the run opens, so the run never meets the provider's 400."""


class ContentTooLargeError(ContentPartError):
    """A content part, or a message's parts together, over the size limit (HTTP 413)."""


class ExecutorIdInUseError(HelixError):
    """Another live process heartbeats under this executor id: taking over its runs
    silently would run them twice."""

    def __init__(self, executor_id: str, host: str, pid: int) -> None:
        self.executor_id = executor_id
        super().__init__(
            f"Executor id '{executor_id}' is in use by a live worker (pid {pid} on {host}): "
            "give this process another id (HELIX_EXECUTOR_ID or HelixDBOS(executor_id=...); "
            "DBOSConfig's executor_id if your app configures DBOS itself), or leave it unset "
            "for a unique one"
        )


class HelixShutDownError(HelixError, RuntimeError):
    """A statement of helix's after `shutdown()` in this process (which launches helix
    once): refused, rather than opening connections that no one would close."""


class RunOnOtherVersionError(HelixError):
    """The run was started by an application version that no live worker executes: an
    answer or an interrupt sent to it would be accepted and never taken. Nothing was
    sent; the message says how to finish or end the run (docs/upgrading.md)."""

    def __init__(self, run_id: str, version: str, served: list[str]) -> None:
        serving = ", ".join(f"'{v}'" for v in served) or "none"
        super().__init__(
            f"Run '{run_id}' was started by application version '{version}', which no live "
            f"worker runs (live workers run: {serving}), so nothing would ever take this. "
            f"Start a worker of that version (HELIX_APP_VERSION={version} helix-dbos worker "
            "... with the release that started it) and answer again, or abort its runs "
            f"(helix-dbos abort --version {version}); see docs/upgrading.md"
        )
        self.run_id = run_id
        self.version = version
        self.served = served

    def __reduce__(self) -> tuple[type, tuple[str, str, list[str]]]:
        return (type(self), (self.run_id, self.version, self.served))


class WorkerNotDeadError(HelixError):
    """`recover` refuses a worker whose heartbeat is live."""


class LLMConfigurationError(HelixError, ValueError):
    """An agent's model cannot be called as configured (no API key, an unknown provider
    prefix, `mock` without a MockLLM): raised by `launch()` and `execute()` so the fix is
    named at start-up instead of in a failed run."""


class DatabaseUnavailableError(HelixError):
    """A call outside a run (`execute()` and the like) got no database connection in
    time: the server refused new ones (its `max_connections` taken by others: SQLSTATE
    53300) or was unreachable. Runs under way are not failed by it: they wait."""

    def __init__(self, what: str, waited_seconds: float, cause: str) -> None:
        self.what = what
        self.waited_seconds = waited_seconds
        self.cause = cause
        super().__init__(
            f"{what}: no database connection within {waited_seconds:g}s ({cause}); retry "
            "once the database accepts connections again (if it has too many clients, "
            "raise its max_connections or shrink the pools of what holds them), or give "
            "HelixDBOS(connection_timeout_seconds=...) a longer wait"
        )

    def __reduce__(self) -> tuple[type, tuple[str, float, str]]:
        return (type(self), (self.what, self.waited_seconds, self.cause))


class QueuedMessageNotFoundError(HelixError, LookupError):
    """No stored (double-texted) message with this id on the session."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f"No queued message '{message_id}'")
        self.message_id = message_id

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.message_id,))


class QueuedMessageTakenError(HelixError):
    """A stored message was taken (its run started, or a live run took it in) or
    cancelled before this could act on it."""

    def __init__(self, message_id: str, status: str | None = None) -> None:
        what = f" (it is {status})" if status else ""
        super().__init__(f"Queued message '{message_id}' is no longer waiting{what}")
        self.message_id = message_id
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return (type(self), (self.message_id, self.status))


class ScheduleNotFoundError(HelixError, LookupError):
    """No helix schedule with this name (`HelixDBOS.schedule` creates one)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"No schedule named '{name}'")
        self.name = name

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.name,))


class UsageLimitExceeded(HelixError):
    """A run's tree reached one of its `UsageLimits` (`stop_reason="usage_limit"`); the
    message names the limit and the amounts (`AgentResult.raise_for_stop()` raises it)."""


class GuardrailTripped(HelixError):
    """A guardrail's tripwire ended the run (`stop_reason="guardrail"`); the message names
    the guardrail and its reason (`AgentResult.raise_for_stop()` raises it)."""
