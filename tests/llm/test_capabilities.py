"""Capability table, strict-schema rewriting and the strict-mode diagnosis."""

from __future__ import annotations

import copy
from enum import Enum
from typing import Any

import pytest
from pydantic import BaseModel, Field

from helix_dbos.llm.capabilities import (
    ANTHROPIC_STRUCTURED_OUTPUTS_BETA,
    anthropic_capabilities,
    describe_strict_rejection,
    drop_strict_nulls,
    is_retryable_status,
    make_anthropic_strict_schema,
    make_openai_strict_schema,
    openai_capabilities,
    strict_schema_issues,
)


class Color(str, Enum):
    red = "red"
    blue = "blue"


class Address(BaseModel):
    street: str
    zip_code: str | None = None


class Person(BaseModel):
    """A pydantic model with what output schemas usually contain."""

    name: str = Field(description="Full name")
    age: int = 30
    favourite: Color | None = None
    home: Address | None = Field(default=None, description="Where they live")
    past: list[Address] = []
    kind: Color = Color.red


def _objects(node: Any) -> list[dict[str, Any]]:
    """Every object schema inside `node`."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append(node)
        for value in node.values():
            found += _objects(value)
    elif isinstance(node, list):
        for value in node:
            found += _objects(value)
    return found


# --- Capability table --------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "strict"),
    [
        ("claude-sonnet-4-5", True),
        ("claude-sonnet-4-5-20250929", True),
        ("claude-opus-4-1-20250805", True),
        ("claude-opus-4-5", True),
        ("claude-haiku-4-5-20251001", True),
        ("claude-sonnet-4-6", True),
        ("claude-opus-5", True),
        ("claude-sonnet-4-20250514", False),
        ("claude-opus-4-0", False),
        ("claude-3-7-sonnet-latest", False),
        ("claude-3-5-haiku-20241022", False),
        ("claude-3-opus-20240229", False),
        ("some-proxy-model", False),
    ],
)
def test_anthropic_structured_output_support(model: str, strict: bool) -> None:
    caps = anthropic_capabilities(model)
    assert caps.strict_tools is strict
    assert caps.beta_headers == ((ANTHROPIC_STRUCTURED_OUTPUTS_BETA,) if strict else ())


def test_openai_strict_support() -> None:
    assert openai_capabilities("gpt-4o").strict_tools is True
    assert openai_capabilities("gpt-4o").max_tokens_field == "max_completion_tokens"
    assert openai_capabilities("gpt-4-0314").strict_tools is False
    compatible = openai_capabilities("gpt-4o", compatible_server=True)
    assert compatible.strict_tools is False
    assert compatible.max_tokens_field == "max_tokens"


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(429, True), (408, True), (409, True), (500, True), (503, True), (529, True)]
    + [(400, False), (401, False), (403, False), (404, False), (422, False), (None, False)],
)
def test_retryable_statuses(status: int | None, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


# --- make_openai_strict_schema -------------------------------------------------


def test_openai_strict_schema_of_a_pydantic_model_passes_its_own_checker() -> None:
    original = Person.model_json_schema()
    pristine = copy.deepcopy(original)

    strict = make_openai_strict_schema(original)

    assert original == pristine  # the input is not modified
    assert strict_schema_issues(strict, "openai") == []
    for obj in _objects(strict):
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])


def test_openai_strict_schema_makes_optional_properties_nullable() -> None:
    strict = make_openai_strict_schema(Person.model_json_schema())
    props = strict["properties"]

    assert props["age"] == {"title": "Age", "type": ["integer", "null"]}  # default dropped
    assert props["name"]["type"] == "string"  # required stays non-null
    assert {"type": "null"} in props["favourite"]["anyOf"]
    assert props["home"]["description"] == "Where they live"
    assert {"type": "null"} in props["home"]["anyOf"]
    # kind was `$ref` + default: the ref moves into anyOf, then null is added
    assert props["kind"]["anyOf"] == [{"$ref": "#/$defs/Color"}, {"type": "null"}]
    address = strict["$defs"]["Address"]
    assert address["required"] == ["street", "zip_code"]
    assert address["additionalProperties"] is False


def test_openai_strict_schema_handles_plain_shapes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"]},
            "fixed": {"const": "x"},
            "anything": {},
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
            "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }

    strict = make_openai_strict_schema(schema)
    props = strict["properties"]

    assert props["mode"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    assert props["fixed"] == {"anyOf": [{"const": "x"}, {"type": "null"}]}
    assert props["anything"] == {}
    assert props["items"]["items"] == {
        "type": "object",
        "properties": {"n": {"type": ["integer", "null"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert "oneOf" not in props["choice"]
    assert props["choice"]["anyOf"][-1] == {"type": "null"}


def test_openai_strict_schema_leaves_dict_fields_for_the_checker() -> None:
    schema = {
        "type": "object",
        "properties": {"scores": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "required": ["scores"],
    }

    strict = make_openai_strict_schema(schema)

    assert strict["properties"]["scores"]["additionalProperties"] == {"type": "integer"}
    issues = strict_schema_issues(strict, "openai")
    assert [(i.feature.split(" ")[0], i.path) for i in issues] == [
        ("additionalProperties", "$.properties.scores")
    ]


# --- make_anthropic_strict_schema ----------------------------------------------


def test_anthropic_strict_schema_closes_objects_but_keeps_optional_fields() -> None:
    original = Person.model_json_schema()

    strict = make_anthropic_strict_schema(original)

    assert "additionalProperties" not in original
    assert strict["required"] == ["name"]
    for obj in _objects(strict):
        assert obj["additionalProperties"] is False
    assert strict_schema_issues(strict, "anthropic") == []


# --- strict_schema_issues / describe_strict_rejection ----------------------------


def test_issues_name_feature_and_path() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
            "site": {"type": "string", "format": "uri"},
            "code": {"type": "string", "pattern": "^(?!tmp)[a-z]+$"},
            "count": {"type": "integer", "minimum": 1},
            "names": {"type": "array", "items": {"type": "string", "minLength": 2}},
        },
        "required": ["tags", "site", "code", "count", "names"],
        "additionalProperties": False,
    }
    for key in ("tags",):
        schema["properties"][key]["additionalProperties"] = False

    openai_issues = {str(i) for i in strict_schema_issues(schema, "openai")}
    anthropic_issues = {str(i) for i in strict_schema_issues(schema, "anthropic")}

    assert openai_issues == {
        "'patternProperties' at $.properties.tags",
        "'format: uri' at $.properties.site",
        "'pattern with lookaround or backreference' at $.properties.code",
        "'minLength' at $.properties.names.items",
    }
    # Anthropic accepts uri but not numeric bounds.
    assert "'minimum' at $.properties.count" in anthropic_issues
    assert "'format: uri' at $.properties.site" not in anthropic_issues


def test_openai_checker_flags_unclosed_objects_and_optional_properties() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    features = [i.feature for i in strict_schema_issues(schema, "openai")]
    assert features == [
        "additionalProperties must be false",
        "required must list every property (missing a)",
    ]


def test_describe_strict_rejection_message() -> None:
    bad = {
        "type": "object",
        "properties": {
            "tags": {"type": "object", "patternProperties": {}, "additionalProperties": False}
        },
        "required": ["tags"],
        "additionalProperties": False,
    }
    good = make_openai_strict_schema({"type": "object", "properties": {"x": {"type": "string"}}})

    message = describe_strict_rejection({"__finish__": bad, "lookup": good}, "openai")

    assert message == (
        "strict mode rejected tool '__finish__': schema uses 'patternProperties' at $.properties.tags"
    )
    assert describe_strict_rejection({"lookup": good}, "openai") is None


# --- drop_strict_nulls -----------------------------------------------------------


def test_strict_nulls_for_optional_fields_are_dropped_so_defaults_apply() -> None:
    sent_back = {
        "name": "Ada",
        "age": None,  # optional int: null means "not given"
        "favourite": None,  # Optional[Color]: null is a real value
        "home": {"street": "Main St", "zip_code": None},
        "past": [],
        "kind": None,  # $ref to an enum with a default
    }
    with pytest.raises(ValueError):
        Person.model_validate(sent_back)

    cleaned = drop_strict_nulls(sent_back, Person.model_json_schema())

    assert cleaned == {
        "name": "Ada",
        "favourite": None,
        "home": {"street": "Main St", "zip_code": None},
        "past": [],
    }
    assert Person.model_validate(cleaned).age == 30


def test_strict_nulls_are_dropped_in_nested_objects_and_arrays() -> None:
    schema = {
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"$ref": "#/$defs/Row"}},
            "extra": {},
        },
        "$defs": {
            "Row": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
                "required": ["id"],
            }
        },
    }

    cleaned = drop_strict_nulls(
        {"rows": [{"id": 1, "note": None}, {"id": None, "note": "x"}], "extra": None}, schema
    )

    # required keys keep their null (validation will report it); `{}` accepts null
    assert cleaned == {"rows": [{"id": 1}, {"id": None, "note": "x"}], "extra": None}
