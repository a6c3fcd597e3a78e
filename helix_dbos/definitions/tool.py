"""Tool definitions: what the model may call and how it runs.

`@tool` turns a plain function into a `Tool`: the name comes from the function,
the description from its docstring and the input schema from its signature
(or from a single pydantic-model parameter). Invalid combinations are rejected
here, at definition time, not when a run first meets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from helix_dbos import named_tools
from helix_dbos.definitions.tool_context import ToolContext
from helix_dbos.errors import ToolArgumentsError, ToolDefinitionError, ToolOutputError
from helix_dbos.orchestration.guardrails import Guardrail, guardrail_name
from helix_dbos.orchestration.types import FINISH_TOOL_NAME, ToolSpec

ApprovalPredicate = Callable[[Any, ToolContext], bool | Awaitable[bool]]
ExecuteMode = Literal["server", "client"]


class Tool:
    """A tool the model can call.

    `function` receives the validated arguments as keyword arguments (or a
    single pydantic model), plus the `ToolContext` when it declares one.
    """

    def __init__(
        self,
        name: str,
        function: Callable[..., Any] | None = None,
        *,
        description: str = "",
        input_model: type[BaseModel] | None = None,
        execute: ExecuteMode = "server",
        finish_with: bool = False,
        finish_with_transform: Callable[[Any], Any] | None = None,
        require_approval: bool | ApprovalPredicate = False,
        strict: bool = False,
        client_timeout_seconds: float | None = None,
        human_input: bool = False,
        runs_in_workflow: bool = False,
        output_schema: type[BaseModel] | None = None,
        guardrails: list[Guardrail] | None = None,
    ) -> None:
        _check_definition(
            name, function, execute, finish_with, finish_with_transform, require_approval
        )
        if human_input and (
            finish_with or require_approval or execute == "client" or runs_in_workflow
        ):
            raise ToolDefinitionError(
                f"Tool '{name}': human_input cannot be combined with finish_with, require_approval, "
                "execute='client' or runs_in_workflow"
            )
        if runs_in_workflow and (execute == "client" or require_approval):
            raise ToolDefinitionError(
                f"Tool '{name}': runs_in_workflow cannot be combined with execute='client' or require_approval"
            )
        # Paused for a human: the answer {human_input, approved} is the tool's result.
        self.human_input = human_input
        # Called in workflow code (not in a step), so it may start and await DBOS workflows;
        # it must then be deterministic, using only DBOS calls for anything that varies.
        self.runs_in_workflow = runs_in_workflow
        self.builtin = False
        self.name = name
        self.function = function
        self.description = description
        self.execute = execute
        self.finish_with = finish_with
        self.finish_with_transform = finish_with_transform
        self.require_approval = require_approval
        self.strict = strict
        self.client_timeout_seconds = client_timeout_seconds
        # What the function must return; a value that does not match is a tool error.
        self.output_schema = output_schema
        self._output_adapter = TypeAdapter(output_schema) if output_schema is not None else None
        # Checks of a call's arguments before it runs (and before an approval is asked):
        # a tripwire ends the run (docs/agent-controls.md).
        self.guardrails = list(guardrails or [])
        names = [guardrail_name(g) for g in self.guardrails]
        if not all(callable(g) for g in self.guardrails) or len(set(names)) != len(names):
            raise ToolDefinitionError(
                f"Tool '{name}': guardrails must be callables with distinct names"
            )
        self._ctx_param: str | None = None
        self._model_param: str | None = None
        if function is not None and input_model is None:
            input_model, self._ctx_param, self._model_param = _model_from_signature(name, function)
        elif function is not None:
            self._ctx_param = _context_parameter(function)
        self.input_model: type[BaseModel] = input_model or create_model(f"{name}_input")
        self._spec: ToolSpec | None = None

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def spec(self) -> ToolSpec:
        """The definition sent to the model (built once: schema generation is not free)."""
        if self._spec is None:
            self._spec = self._build_spec()
        return self._spec

    def _build_spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.input_model.model_json_schema(),
            strict=self.strict,
        )

    def validate_arguments(self, arguments: Any) -> BaseModel:
        """Parse the model's arguments, with an error message the model can act on."""
        if isinstance(arguments, dict) and "__parse_error__" in arguments:
            raise ToolArgumentsError(
                f"Invalid arguments for tool '{self.name}': not valid JSON "
                f"({arguments['__parse_error__']})"
            )
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"Invalid arguments for tool '{self.name}': expected a JSON object, "
                f"got {type(arguments).__name__}"
            )
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(
                f"Invalid arguments for tool '{self.name}': {_format_errors(exc)}"
            ) from exc

    def validate_output(self, value: Any) -> Any:
        """The function's return value checked against `output_schema` (JSON-ready);
        raises `ToolOutputError`, a message the model can act on, when it does not match."""
        return self._checked_output(value, f"Tool '{self.name}' returned output that")

    def check_client_result(self, value: Any) -> Any:
        """A client's result for this client-executed tool checked against `output_schema`
        (JSON-ready); raises `ToolOutputError` naming each field that does not match."""
        return self._checked_output(value, f"The result for client tool '{self.name}'")

    def _checked_output(self, value: Any, what: str) -> Any:
        if self._output_adapter is None:
            return value
        try:
            checked = self._output_adapter.validate_python(value)
        except ValidationError as exc:
            raise ToolOutputError(
                f"{what} does not match its output_schema: {_format_errors(exc)}"
            ) from exc
        return self._output_adapter.dump_python(checked, mode="json")

    async def call(self, arguments: BaseModel, ctx: ToolContext) -> Any:
        """Run the function: async tools on the loop, sync tools in a worker thread."""
        if self.function is None:
            raise ToolDefinitionError(f"Tool '{self.name}' has no server-side function")
        kwargs: dict[str, Any]
        if self._model_param is not None:
            kwargs = {self._model_param: arguments}
        else:
            kwargs = {field: getattr(arguments, field) for field in type(arguments).model_fields}
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        if inspect.iscoroutinefunction(self.function):
            return await self.function(**kwargs)
        result = await asyncio.to_thread(self.function, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    @property
    def waits_for_answer(self) -> bool:
        """A call may wait for someone: an approval, a client's result, a human's input."""
        return self.execute == "client" or bool(self.require_approval) or self.human_input

    async def needs_approval(self, arguments: Any, ctx: ToolContext) -> bool:
        """Evaluate `require_approval`; an exception means approval is required (fail closed)."""
        if not callable(self.require_approval):
            return bool(self.require_approval)
        try:
            verdict = self.require_approval(arguments, ctx)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)
        except Exception:
            return True


# Tools an agent may name instead of passing the object (`tools=["__complete__"]`);
# `helix_dbos.builtins` registers seed 003's built-ins here when it is imported.
_NAMED_TOOLS: dict[str, Callable[[], Tool]] = {}


def register_named_tool(name: str, factory: Callable[[], Tool]) -> None:
    _NAMED_TOOLS[name] = factory


def named_tool(name: str) -> Tool:
    """A fresh instance of the tool registered under `name`.

    The built-ins register themselves when `helix_dbos.builtins` is imported, which
    `import helix_dbos` does not do up front (it loads names lazily): a name not yet
    known runs the loaders the package's `__init__` handed in (`named_tools.py`)."""
    if name not in _NAMED_TOOLS:
        named_tools.load_sources()
    try:
        return _NAMED_TOOLS[name]()
    except KeyError:
        raise ToolDefinitionError(
            f"Unknown built-in tool '{name}'. Built-ins: {', '.join(_NAMED_TOOLS)}"
        ) from None


def _check_definition(
    name: str,
    function: Callable[..., Any] | None,
    execute: ExecuteMode,
    finish_with: bool,
    transform: Callable[[Any], Any] | None,
    require_approval: bool | ApprovalPredicate,
) -> None:
    if not name or not isinstance(name, str):
        raise ToolDefinitionError("A tool needs a non-empty string name")
    if name == FINISH_TOOL_NAME:
        raise ToolDefinitionError(
            f"'{FINISH_TOOL_NAME}' is reserved for the injected completion tool; choose another name"
        )
    if execute not in ("server", "client"):
        raise ToolDefinitionError(
            f"Tool '{name}': execute must be 'server' or 'client', not {execute!r}"
        )
    if execute == "client" and finish_with:
        raise ToolDefinitionError(
            f"Tool '{name}': execute='client' cannot be combined with finish_with"
        )
    if execute == "client" and require_approval:
        raise ToolDefinitionError(
            f"Tool '{name}': execute='client' cannot be combined with require_approval"
        )
    if finish_with and require_approval:
        raise ToolDefinitionError(
            f"Tool '{name}': require_approval cannot be combined with finish_with"
        )
    if transform is not None and not finish_with:
        raise ToolDefinitionError(f"Tool '{name}': finish_with_transform needs finish_with=True")
    if execute == "server" and function is None:
        raise ToolDefinitionError(f"Tool '{name}': a server tool needs a function")


def _context_parameter(function: Callable[..., Any]) -> str | None:
    hints = _hints(function)
    for param in inspect.signature(function).parameters.values():
        if hints.get(param.name) is ToolContext or param.name == "ctx":
            return param.name
    return None


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations, `Annotated` constraints kept.

    `@tool` records the namespace it was applied in, so names imported inside an
    enclosing function still resolve under `from __future__ import annotations`.
    A hint that cannot be resolved is an error, never a silent `Any`.
    """
    localns = getattr(function, "__helix_localns__", None)
    try:
        return get_type_hints(function, localns=localns, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"Cannot resolve the type hints of '{getattr(function, '__name__', function)}': {exc}; "
            "import the names it uses at module level, or pass input_model="
        ) from exc


def _model_from_signature(
    name: str, function: Callable[..., Any]
) -> tuple[type[BaseModel], str | None, str | None]:
    """Build the input model from the signature; returns (model, ctx param, model param)."""
    hints = _hints(function)
    ctx_param = _context_parameter(function)
    params = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.name != ctx_param and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if len(params) == 1:
        only = hints.get(params[0].name)
        if inspect.isclass(only) and issubclass(only, BaseModel):
            return only, ctx_param, params[0].name
    fields: dict[str, Any] = {}
    for param in params:
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(f"{name}_input", __config__=ConfigDict(extra="forbid"), **fields)
    return model, ctx_param, None


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        location = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{location}: {err['msg']}")
    return "; ".join(parts)


def _description(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n")[0].strip()


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    execute: ExecuteMode = "server",
    finish_with: bool = False,
    finish_with_transform: Callable[[Any], Any] | None = None,
    require_approval: bool | ApprovalPredicate = False,
    strict: bool = False,
    client_timeout_seconds: float | None = None,
    output_schema: type[BaseModel] | None = None,
    guardrails: list[Guardrail] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execute: ExecuteMode = "server",
    finish_with: bool = False,
    finish_with_transform: Callable[[Any], Any] | None = None,
    require_approval: bool | ApprovalPredicate = False,
    strict: bool = False,
    client_timeout_seconds: float | None = None,
    output_schema: type[BaseModel] | None = None,
    guardrails: list[Guardrail] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` from a function; usable bare (`@tool`) or with options (`@tool(...)`)."""

    caller_locals = sys._getframe(1).f_locals  # where @tool was applied (as pydantic does)

    def wrap(fn: Callable[..., Any]) -> Tool:
        with contextlib.suppress(AttributeError, TypeError):
            fn.__helix_localns__ = dict(caller_locals)  # type: ignore[attr-defined]
        return Tool(
            name or fn.__name__,
            fn,
            description=description if description is not None else _description(fn),
            execute=execute,
            finish_with=finish_with,
            finish_with_transform=finish_with_transform,
            require_approval=require_approval,
            strict=strict,
            client_timeout_seconds=client_timeout_seconds,
            output_schema=output_schema,
            guardrails=guardrails,
        )

    if function is not None:
        return wrap(function)
    return wrap
