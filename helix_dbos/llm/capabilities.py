"""What each provider/model accepts, and how to make a tool schema pass strict mode.

Strict tool use (schema-constrained decoding) is the only place where the two
providers differ in ways the runtime must know about: which models support it,
what the schema must look like, and which JSON-schema features make the
provider reject the request with a 400. The tables here are data on purpose so
they are easy to update when a provider widens its support.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

StrictDialect = Literal["openai", "anthropic"]
#: Body fields that carry the output-token limit (OpenAI-compatible servers use the first).
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
MAX_TOKENS_FIELDS: tuple[MaxTokensField, ...] = ("max_tokens", "max_completion_tokens")
#: Tool name -> the JSON schema sent for it with `strict: true`.
StrictSchemas = dict[str, dict[str, Any]]

# --- Retry policy ------------------------------------------------------------

#: Statuses worth retrying as a new DBOS step attempt (rate limit, timeout,
#: conflict, Anthropic's 529 overloaded); every 5xx is retryable as well.
RETRYABLE_STATUS_CODES: frozenset[int] = frozenset({408, 409, 429, 529})


def is_retryable_status(status_code: int | None) -> bool:
    """True for statuses where the same request may succeed later."""
    if status_code is None:
        return False
    return status_code in RETRYABLE_STATUS_CODES or status_code >= 500


#: Error kinds that blame the request: the same request fails again.
REQUEST_ERROR_KINDS: frozenset[str] = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "billing_error",
        "context_length_exceeded",
        "insufficient_quota",
        "invalid_prompt",
    }
)


def error_status(code: object) -> int | None:
    """An error body's `code` as an HTTP status, when it is one (`400`, `"429"`)."""
    if isinstance(code, bool):
        return None
    if isinstance(code, int):
        return code if 100 <= code <= 599 else None
    if isinstance(code, str) and code.strip().isdigit():
        return error_status(int(code.strip()))
    return None


def is_retryable_stream_error(error_type: str | None, code: object) -> bool:
    """Classify an error event inside a 200 stream like an HTTP error.

    A status in `code` (OpenRouter and other gateways send
    `{"error": {"code": 400, "message": ...}}`) decides as the HTTP status
    would; otherwise a known `type` or `code` kind does. An error that names
    neither is retried: a stream that breaks without blaming the request is
    most often a server-side hiccup, and DBOS bounds the attempts.
    """
    status = error_status(code)
    if status is not None:
        return is_retryable_status(status)
    kinds = {k for k in (error_type, code) if isinstance(k, str)}
    return not kinds & REQUEST_ERROR_KINDS


# --- Model capability table --------------------------------------------------

#: Beta header for Anthropic structured outputs (strict tools). Sent with every
#: strict request so older API versions accept `strict`; harmless once GA.
ANTHROPIC_STRUCTURED_OUTPUTS_BETA = "structured-outputs-2025-11-13"


@dataclass(frozen=True)
class ModelCapabilities:
    """What a model accepts, as far as the adapters need to know."""

    strict_tools: bool = False
    """Tools may carry `strict: true` (schema-constrained arguments)."""
    beta_headers: tuple[str, ...] = ()
    """`anthropic-beta` values to send when strict tools are used."""
    max_tokens_field: MaxTokensField = "max_tokens"
    """Body field carrying the output-token limit."""
    native_output: bool = False
    """The reply itself can be constrained to a JSON schema (`output_mode="native"`);
    without it the schema goes into the system prompt (the prompted mode)."""
    forced_tool_choice: bool = False
    """A request may force a tool call (`tool_choice` "required" / `{"type": "any"}`)."""


# claude-<family>-<major>[-<minor>][-<yyyymmdd>], e.g. claude-opus-4-1-20250805.
# Old ids (claude-3-5-sonnet-...) put the version first and never match.
_CLAUDE_ID = re.compile(r"^claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?(?:$|[-@:])")

#: (family, major, minor) tuples that support strict tools below the 4.5 line.
_ANTHROPIC_STRICT_EXTRAS: frozenset[tuple[str, int, int]] = frozenset({("opus", 4, 1)})


def anthropic_capabilities(model: str) -> ModelCapabilities:
    """Structured outputs: Claude 4.5+ (and Opus 4.1); never claude-3* or Claude 4.0."""
    match = _CLAUDE_ID.match(model)
    if match is None:
        return ModelCapabilities(forced_tool_choice=True)
    family, major, minor = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    strict = (
        major >= 5
        or (major == 4 and minor >= 5)
        or (family, major, minor) in _ANTHROPIC_STRICT_EXTRAS
    )
    if not strict:
        return ModelCapabilities(forced_tool_choice=True)
    return ModelCapabilities(
        strict_tools=True,
        beta_headers=(ANTHROPIC_STRUCTURED_OUTPUTS_BETA,),
        native_output=True,
        forced_tool_choice=True,
    )


#: OpenAI models older than strict function calling (added with the -0613 snapshots).
_OPENAI_NO_STRICT_PREFIXES: tuple[str, ...] = (
    "gpt-3.5-turbo-0301",
    "gpt-4-0314",
    "gpt-4-32k-0314",
    "davinci",
    "babbage",
    "text-",
)


def openai_capabilities(model: str, *, compatible_server: bool = False) -> ModelCapabilities:
    """Strict function calling on api.openai.com; off for OpenAI-compatible servers.

    vLLM, Ollama and friends accept the OpenAI wire format but not necessarily
    `strict` or `tool_choice: "required"`, and most of them only know
    `max_tokens`, so a custom base URL gets the conservative answer (callers can
    override these on the adapter). They do take a non-strict `json_schema`
    `response_format`, so the native output mode stays on.
    """
    if compatible_server:
        return ModelCapabilities(
            strict_tools=False, max_tokens_field="max_tokens", native_output=True
        )
    strict = not model.startswith(_OPENAI_NO_STRICT_PREFIXES)
    return ModelCapabilities(
        strict_tools=strict,
        max_tokens_field="max_completion_tokens",
        native_output=strict,
        forced_tool_choice=strict,
    )


#: OpenAI reasoning model families: their reasoning items are worth carrying across
#: turns (the Responses API returns them encrypted when asked).
_OPENAI_REASONING_PREFIXES: tuple[str, ...] = ("o1", "o3", "o4", "gpt-5", "codex")


def is_openai_reasoning_model(model: str) -> bool:
    """o-series, gpt-5 and codex models reason; gpt-4o and older do not."""
    return model.startswith(_OPENAI_REASONING_PREFIXES)


# --- Making schemas strict ---------------------------------------------------

_NULL = {"type": "null"}


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _accepts_null(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(isinstance(v, dict) and _accepts_null(v) for v in node.get("anyOf", []))


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`node` or null: how OpenAI strict mode expresses an optional property."""
    if not node or _accepts_null(node):
        return node  # `{}` already accepts anything, null included
    node = dict(node)
    if "anyOf" in node:
        node["anyOf"] = [*node["anyOf"], dict(_NULL)]
        return node
    if "type" in node and "const" not in node and "$ref" not in node:
        kind = node["type"]
        node["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
        if "enum" in node and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        return node
    # $ref, const or a type-less enum: wrap, keeping the description outside.
    outer: dict[str, Any] = {key: node.pop(key) for key in ("description", "title") if key in node}
    outer["anyOf"] = [node, dict(_NULL)]
    return outer


def _map_children(node: dict[str, Any], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Apply `fn` to every sub-schema of `node` in place; non-objects (`false`) stay."""

    def apply(sub: Any) -> Any:
        return fn(sub) if isinstance(sub, dict) else sub

    for key in ("properties", "$defs", "definitions", "patternProperties"):
        if isinstance(node.get(key), dict):
            node[key] = {name: apply(sub) for name, sub in node[key].items()}
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            node[key] = [apply(sub) for sub in node[key]]
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if isinstance(node.get(key), dict):
            node[key] = fn(node[key])


def make_openai_strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a JSON schema into the shape OpenAI strict mode demands.

    Every object lists all its properties in `required` and gets
    `additionalProperties: false`; properties that were optional become
    nullable instead. `oneOf` becomes `anyOf`, `default` is dropped and `$ref`
    siblings move out of the way. Features strict mode cannot express (e.g. a
    `dict[str, X]` additionalProperties schema) are left as they are so the
    provider's 400 can be explained by `strict_schema_issues`. The input is
    not modified.
    """
    return _openai_strict_node(copy.deepcopy(schema))


def _openai_strict_node(node: dict[str, Any]) -> dict[str, Any]:
    node = copy.copy(node)
    node.pop("default", None)
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node.pop("oneOf")
    _map_children(node, _openai_strict_node)
    if "$ref" in node and len(node) > 1:
        node["anyOf"] = [{"$ref": node.pop("$ref")}, *node.get("anyOf", [])]
    if _is_object(node):
        properties: dict[str, Any] = node.setdefault("properties", {})
        required = set(node.get("required", []))
        for name, sub in properties.items():
            if name not in required and isinstance(sub, dict):
                properties[name] = _nullable(sub)
        node["required"] = list(properties)
        node.setdefault("additionalProperties", False)
    return node


def drop_strict_nulls(value: Any, schema: dict[str, Any]) -> Any:
    """Undo the nullable-optional rewrite on what the model sent back.

    Under `make_openai_strict_schema` an optional property must still be
    present, so the model sends `null` for "not given". Dropping those nulls
    (where the original `schema` did not allow null) lets defaults apply when
    the runtime validates the output. Values of other shapes pass unchanged.
    """
    defs: dict[str, Any] = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            target = defs.get(ref.rsplit("/", 1)[-1])
            return target if isinstance(target, dict) else node
        return node

    def object_branch(node: dict[str, Any]) -> dict[str, Any] | None:
        node = resolve(node)
        if _is_object(node):
            return node
        for option in node.get("anyOf", []):
            if isinstance(option, dict) and _is_object(resolve(option)):
                return resolve(option)
        return None

    def walk(val: Any, node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth > 64:
            return val
        if isinstance(val, list):
            items = resolve(node).get("items")
            return [walk(v, items, depth + 1) for v in val] if isinstance(items, dict) else val
        target = object_branch(node) if isinstance(val, dict) else None
        if target is None:
            return val
        props: dict[str, Any] = target.get("properties", {})
        required = set(target.get("required", []))
        out: dict[str, Any] = {}
        for key, sub in val.items():
            spec = props.get(key)
            optional = sub is None and key not in required
            if optional and isinstance(spec, dict) and not _may_be_null(resolve(spec)):
                continue  # a null the strict rewrite asked for: "not given"
            out[key] = walk(sub, spec, depth + 1)
        return out

    return walk(value, schema, 0)


def _may_be_null(node: dict[str, Any]) -> bool:
    constraining = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")
    if not any(key in node for key in constraining):
        return True  # `{}` accepts anything
    return _accepts_null(node) or None in node.get("enum", [])


def make_anthropic_strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Close every object (`additionalProperties: false`) and turn `oneOf` into `anyOf`.

    Anthropic strict mode keeps optional properties optional, so `required`
    is left alone. The input is not modified.
    """
    return _anthropic_strict_node(copy.deepcopy(schema))


def _anthropic_strict_node(node: dict[str, Any]) -> dict[str, Any]:
    node = copy.copy(node)
    if "oneOf" in node and "anyOf" not in node:
        node["anyOf"] = node.pop("oneOf")
    _map_children(node, _anthropic_strict_node)
    if _is_object(node):
        node.setdefault("additionalProperties", False)
    return node


# --- Explaining a strict-mode rejection ---------------------------------------

_COMMON_UNSUPPORTED: tuple[str, ...] = (
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "minLength",
    "maxLength",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
)

#: Keywords each provider's strict mode rejects (beyond the per-node checks below).
UNSUPPORTED_STRICT_KEYWORDS: dict[StrictDialect, tuple[str, ...]] = {
    "openai": (*_COMMON_UNSUPPORTED, "allOf", "default"),
    "anthropic": (
        *_COMMON_UNSUPPORTED,
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "maxItems",
    ),
}

#: String formats each strict mode understands.
SUPPORTED_STRICT_FORMATS: dict[StrictDialect, frozenset[str]] = {
    "openai": frozenset(
        {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
    ),
    "anthropic": frozenset(
        {
            "date-time",
            "time",
            "date",
            "duration",
            "email",
            "hostname",
            "uri",
            "ipv4",
            "ipv6",
            "uuid",
        }
    ),
}

_UNSUPPORTED_REGEX = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]")


@dataclass(frozen=True)
class SchemaIssue:
    """One schema feature that strict mode rejects, and where it is."""

    feature: str
    path: str

    def __str__(self) -> str:
        return f"'{self.feature}' at {self.path}"


def _walk(node: Any, path: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Yield every sub-schema with its `$.a.b` path."""
    if not isinstance(node, dict):
        return
    yield node, path
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield from _walk(sub, f"{path}.{key}.{name}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield from _walk(sub, f"{path}.{key}[{i}]")
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{path}.{key}")


def strict_schema_issues(schema: dict[str, Any], dialect: StrictDialect) -> list[SchemaIssue]:
    """The features of `schema` (as sent) that `dialect`'s strict mode rejects.

    Best effort: it knows the documented limits, so it can name the culprit of
    a strict-mode 400 instead of leaving the user with a generic message.
    """
    issues: list[SchemaIssue] = []
    if dialect == "openai" and not _is_object(schema):
        issues.append(SchemaIssue("root must be an object schema", "$"))
    for node, path in _walk(schema, "$"):
        issues.extend(
            SchemaIssue(k, path) for k in UNSUPPORTED_STRICT_KEYWORDS[dialect] if k in node
        )
        fmt = node.get("format")
        if isinstance(fmt, str) and fmt not in SUPPORTED_STRICT_FORMATS[dialect]:
            issues.append(SchemaIssue(f"format: {fmt}", path))
        pattern = node.get("pattern")
        if isinstance(pattern, str) and _UNSUPPORTED_REGEX.search(pattern):
            issues.append(SchemaIssue("pattern with lookaround or backreference", path))
        if (
            dialect == "anthropic"
            and isinstance(node.get("minItems"), int)
            and node["minItems"] > 1
        ):
            issues.append(SchemaIssue("minItems > 1", path))
        if _is_object(node):
            issues.extend(_object_issues(node, path, dialect))
    return issues


def _object_issues(
    node: dict[str, Any], path: str, dialect: StrictDialect
) -> Iterator[SchemaIssue]:
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) or extra is True:
        yield SchemaIssue("additionalProperties (free-form object such as dict[str, X])", path)
    elif extra is None:
        yield SchemaIssue("additionalProperties must be false", path)
    if dialect == "openai":
        missing = [
            name for name in node.get("properties", {}) if name not in node.get("required", [])
        ]
        if missing:
            yield SchemaIssue(
                f"required must list every property (missing {', '.join(missing)})", path
            )


def describe_strict_rejection(tools: StrictSchemas, dialect: StrictDialect) -> str | None:
    """Name the schema features at fault among the strict `tools` (name -> schema sent)."""
    parts = []
    for name, schema in tools.items():
        issues = strict_schema_issues(schema, dialect)
        if issues:
            uses = "; ".join(str(issue) for issue in issues)
            parts.append(f"strict mode rejected tool '{name}': schema uses {uses}")
    return "; ".join(parts) or None
