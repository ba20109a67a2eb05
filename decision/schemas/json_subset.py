"""The JSON-schema subset whose regex (outlines-core) enforces every keyword exactly.

outlines-core ignores some keywords (``minimum``, ``maximum``, ...) and turns free-form objects
into very large regexes, so a schema is checked against this subset first: anything outside it
fails fast with a ``SchemaError`` naming the keyword, never a silently unenforced constraint.
``validate`` checks a value against a schema of the subset (used to verify decoded answers).
"""

from __future__ import annotations

import json
from typing import Any

from outlines_core.json_schema import build_regex_from_schema

from decision.errors import SchemaError

_ANNOTATIONS = {"title", "description", "$schema", "examples", "default"}
_BY_TYPE: dict[str, set[str]] = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "minItems", "maxItems"},
    "string": {"minLength", "maxLength"},
    "integer": set(),
    "number": set(),
    "boolean": set(),
    "null": set(),
}
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
MAX_DEPTH = 4


def check_schema(schema: Any, field: str, depth: int = 0) -> None:
    """Raise ``SchemaError`` unless ``schema`` is in the supported subset."""
    if not isinstance(schema, dict):
        raise SchemaError("a JSON schema must be an object", field)
    if depth > MAX_DEPTH:
        raise SchemaError(f"JSON schema nests deeper than {MAX_DEPTH} levels", field)
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        if not isinstance(values, list) or not values:
            raise SchemaError("enum must be a non-empty list", f"{field}.enum")
        extra = set(schema) - _ANNOTATIONS - {"enum", "const", "type"}
        if extra:
            raise SchemaError(f"unsupported keyword(s) beside enum: {sorted(extra)}", field)
        return
    kind = schema.get("type")
    if kind not in _BY_TYPE:
        raise SchemaError(
            f"unsupported or missing type {kind!r}; use one of {sorted(_BY_TYPE)} or enum/const",
            f"{field}.type",
        )
    extra = set(schema) - _ANNOTATIONS - {"type"} - _BY_TYPE[kind]
    if extra:
        raise SchemaError(
            f"keyword(s) {sorted(extra)} are not enforced for type {kind!r}; "
            "use an integer question for ranges, a pattern question for regexes",
            field,
        )
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise SchemaError("objects need a non-empty 'properties' map", f"{field}.properties")
        if schema.get("additionalProperties", False) is not False:
            raise SchemaError("only additionalProperties: false is supported", field)
        required = schema.get("required", [])
        if not isinstance(required, list) or not set(required) <= set(properties):
            raise SchemaError("'required' must list defined properties", f"{field}.required")
        for name, sub in properties.items():
            check_schema(sub, f"{field}.properties.{name}", depth + 1)
    elif kind == "array":
        if "items" not in schema:
            raise SchemaError("arrays need 'items'", f"{field}.items")
        check_schema(schema["items"], f"{field}.items", depth + 1)


def json_regex(schema: dict[str, Any], field: str = "answer.schema") -> str:
    """The regex of JSON texts valid under ``schema`` (compact whitespace)."""
    check_schema(schema, field)
    try:
        return build_regex_from_schema(json.dumps(schema), whitespace_pattern=r"[ ]?")
    except Exception as exc:  # outlines-core raises ValueError/TypeError subclasses
        raise SchemaError(f"outlines-core cannot build a regex: {exc}", field) from exc


def validate(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` satisfies ``schema`` (a schema of the supported subset)."""
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return any(value == v and type(value) is type(v) for v in values)
    kind = schema["type"]
    if kind == "object":
        if not isinstance(value, dict) or not set(value) <= set(schema["properties"]):
            return False
        if not set(schema.get("required", [])) <= set(value):
            return False
        return all(validate(v, schema["properties"][k]) for k, v in value.items())
    if kind == "array":
        if not isinstance(value, list):
            return False
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            return False
        return all(validate(v, schema["items"]) for v in value)
    if isinstance(value, bool) and kind != "boolean":
        return False
    if not isinstance(value, _PY_TYPES[kind]):
        return False
    if kind == "string":
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
    return True
