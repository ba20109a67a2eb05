"""The JSON-schema subset whose regex (outlines-core) enforces every keyword exactly.

outlines-core ignores some keywords (``minimum``, ``maximum``, ...) and turns free-form objects
into very large regexes, so a schema is checked against this subset first: anything outside it
fails fast with a ``SchemaError`` naming the keyword, never a silently unenforced constraint.
``validate`` checks a value against a schema of the subset (used to verify decoded answers).
"""

from __future__ import annotations

import json
import math
import re
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
# bounds outlines-core reads only when they are JSON integers (other values it silently ignores)
_BOUNDS = (("minItems", "maxItems"), ("minLength", "maxLength"))

# outlines-core's number regex allows any exponent: "1e+999" parses to infinity (null over HTTP)
# and "1e-999" to 0. Two exponent digits keep a number of the slot's at most 256 one-digit
# tokens finite unless its integer part alone has more than 209 digits. (Bounding the integer
# part's digits too makes outlines-core's index take minutes.)
_FINITE_EXPONENT = r"[eE][+-][0-9]{1,2})"
_UNBOUNDED_EXPONENT = r"[eE][+-][0-9]+)"


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
        # the regex is the enum alone: a const or type beside it would go unenforced
        if "enum" in schema and "const" in schema:
            raise SchemaError("give enum or const, not both", field)
        for value in values:
            _check_literal(value, f"{field}.enum" if "enum" in schema else f"{field}.const")
        if "type" in schema and not all(_of_type(v, schema["type"]) for v in values):
            raise SchemaError(
                f"every enum/const value must be of the schema's type {schema['type']!r}",
                f"{field}.type",
            )
        return
    kind = schema.get("type")
    if not isinstance(kind, str) or kind not in _BY_TYPE:
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
    _check_bounds(schema, field)
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise SchemaError("objects need a non-empty 'properties' map", f"{field}.properties")
        if schema.get("additionalProperties", False) is not False:
            raise SchemaError("only additionalProperties: false is supported", field)
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(
            isinstance(name, str) and name in properties for name in required
        ):
            raise SchemaError("'required' must list defined properties", f"{field}.required")
        for name, sub in properties.items():
            _check_name(name, f"{field}.properties")
            check_schema(sub, f"{field}.properties.{name}", depth + 1)
    elif kind == "array":
        if "items" not in schema:
            raise SchemaError("arrays need 'items'", f"{field}.items")
        check_schema(schema["items"], f"{field}.items", depth + 1)


# outlines-core writes an enum/const integer beyond 64 bits as a float (1e+30), which is no
# longer the enum's value
_INT64 = (-(2**63), 2**63 - 1)


def _check_name(name: str, field: str) -> None:
    """Refuse an object key JSON must escape (a quote, a backslash, a control character):
    outlines-core puts keys into the regex unescaped, so the answer would not parse or would
    parse to another key (``a\\b`` read as ``a`` + backspace)."""
    if any(ch in '"\\' or ord(ch) < 0x20 for ch in name):
        raise SchemaError(f"property name {name!r} holds a character JSON escapes (a quote, a "
                          "backslash or a control character), which is not supported", field)


def _float_read_back(value: float) -> float:
    """The number outlines-core's regex of the const ``value`` spells: it parses schema numbers
    without round-trip precision, so a float of many digits can come back as its neighbour
    (``123.45678901234567`` as ``123.45678901234568``)."""
    literal = build_regex_from_schema(json.dumps({"const": value}))
    return float(re.sub(r"\\(.)", r"\1", literal))


def _check_literal(value: Any, field: str) -> None:
    """Refuse an enum/const value the regex cannot give back as itself: an object key JSON
    escapes, an integer beyond 64 bits, or a float outlines-core reads as another number
    (anywhere inside the value)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, float):
        if math.isfinite(value):  # NaN and infinities are not JSON: json_regex refuses them
            read = _float_read_back(value)
            if read != value:
                raise SchemaError(f"number {value!r} in enum/const is read by outlines-core as "
                                  f"{read!r}, another number, which is not supported", field)
        return
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise SchemaError(f"integer {value} in enum/const is beyond 64 bits, which is not "
                              "supported", field)
    elif isinstance(value, list):
        for item in value:
            _check_literal(item, field)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_name(key, field)
            _check_literal_key(key, field)
            _check_literal(item, field)


# regex syntax outside a character class (``#&-~`` are text there, ``\\`` _check_name refuses)
_KEY_META = frozenset(".+*?()|[]{}^$")


def _check_literal_key(key: str, field: str) -> None:
    """Refuse an object key inside an enum/const value that holds regex syntax: outlines-core
    writes those keys into the regex unescaped (property names it escapes), so the const
    ``{"a.b": 0}`` allowed the answer ``{"axb": 0}`` and ``{"?": 0}`` the answer ``{"": 0}``."""
    meta = sorted(set(key) & _KEY_META)
    if meta:
        raise SchemaError(f"object key {key!r} in enum/const holds {''.join(meta)!r}, which "
                          "outlines-core reads as regex syntax; this is not supported", field)


def _of_type(value: Any, kind: Any) -> bool:
    """Whether the JSON value ``value`` is of the JSON type named ``kind``."""
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if not isinstance(kind, str) or kind not in _PY_TYPES:
        return False
    if isinstance(value, bool) and kind != "boolean":
        return False
    return isinstance(value, _PY_TYPES[kind])


def _check_bounds(schema: dict[str, Any], field: str) -> None:
    """Raise ``SchemaError`` unless every length/item bound is a non-negative integer and each
    minimum is at most its maximum (outlines-core ignores other values without a word)."""
    for pair in _BOUNDS:
        for name in pair:
            value = schema.get(name)
            if name in schema and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise SchemaError(f"{name} must be a non-negative integer, got {value!r}",
                                  f"{field}.{name}")
        low, high = (schema.get(name) for name in pair)
        if low is not None and high is not None and low > high:
            raise SchemaError(f"{pair[0]} {low} is above {pair[1]} {high}", f"{field}.{pair[0]}")


def json_regex(schema: dict[str, Any], field: str = "answer.schema") -> str:
    """The regex of JSON texts valid under ``schema`` (compact whitespace)."""
    check_schema(schema, field)
    try:
        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern=r"[ ]?")
    except Exception as exc:  # outlines-core raises ValueError/TypeError subclasses
        raise SchemaError(f"outlines-core cannot build a regex: {exc}", field) from exc
    return regex.replace(_UNBOUNDED_EXPONENT, _FINITE_EXPONENT)


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
    if not _of_type(value, kind):
        return False
    if kind == "string":
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
    return True
