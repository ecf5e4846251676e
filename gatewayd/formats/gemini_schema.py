"""JSON schema -> Gemini ``Schema``: what tool parameters and ``response_format`` schemas
become for models whose provider speaks ``protocol = "gemini"``.

Gemini's ``Schema`` is an OpenAPI 3.0 subset: upper-case type names, ``nullable``,
``anyOf``, no ``$ref``. Sans-I/O: a dict in, a dict out, or a :class:`TranslationError`
naming the offending place in the client's body. The rules are tabulated in
``docs/translation.md`` (section "Request: chat -> Gemini").
"""

from __future__ import annotations

from typing import Any

import orjson

from gatewayd.formats.errors import TranslationError

__all__ = ["MAX_SCHEMA_CHARS", "MAX_SCHEMA_DEPTH", "MAX_SCHEMA_NODES", "gemini_schema"]


# Keys of Gemini's Schema object (an OpenAPI 3.0 subset) that a JSON schema can map to as is.
_SCHEMA_KEYS = frozenset({
    "description", "title", "nullable", "minItems", "maxItems", "minProperties", "maxProperties",
    "minLength", "maxLength", "pattern", "minimum", "maximum", "example", "default", "propertyOrdering",
})
_FORMATS = {"STRING": {"enum", "date-time"}, "NUMBER": {"float", "double"}, "INTEGER": {"int32", "int64"}}
_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
          "array": "ARRAY", "object": "OBJECT", "null": "NULL"}


def gemini_schema(schema: dict[str, Any], where: str = "schema", what: str | None = None) -> dict[str, Any]:
    """A JSON schema reduced to what Gemini's ``Schema`` accepts.

    Types become Gemini's upper-case names; ``["string", "null"]`` becomes ``STRING``
    with ``nullable``; ``oneOf`` becomes ``anyOf``; ``const`` a one-value ``enum``;
    local ``$ref``s into ``$defs``/``definitions`` are inlined (a recursive one is
    refused: Gemini's schema cannot say it); ``required`` keeps only properties that
    exist; keys Gemini does not know (``additionalProperties``, ``$schema``, ``strict``,
    unsupported ``format`` values, non-string ``enum``s ...) are dropped, since they only
    constrain, never change, what a valid call looks like.

    Inlining copies: a result past :data:`MAX_SCHEMA_NODES` nodes or
    :data:`MAX_SCHEMA_CHARS` characters is refused (``what`` names the schema in the
    message, e.g. the tool), see :class:`_Walk`.
    """
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(schema.get(key), dict):
            defs.update(schema[key])
    return _clean(schema, _Walk(defs, where, what or where), where, ())


#: Deeper tool schemas are refused (a clear 400) rather than walked into Python's recursion limit.
MAX_SCHEMA_DEPTH = 64
#: The most nodes (subschemas) and characters (names, descriptions, enum values, examples ...)
#: one translated schema may have. Far above what a model can use (OpenAI caps a strict
#: schema at 5,000 properties and 120,000 characters), far below what freezes a worker.
MAX_SCHEMA_NODES = 10_000
MAX_SCHEMA_CHARS = 1_000_000


class _Walk:
    """What one schema's translation carries along: its ``$defs`` and what it has produced.

    Gemini's schema has no ``$ref``, so each reference is replaced by a copy of its
    definition, and a list of types becomes one ``anyOf`` variant per type, each repeating
    the rest of the schema. Both multiply: a 2 KB chain of ``$defs`` whose entries refer
    to the next one twice stands for 2**n nodes. Counting what is produced, and stopping
    at the limits, keeps the work proportional to the limits, not to the expansion.
    """

    def __init__(self, defs: dict[str, Any], where: str, what: str) -> None:
        self.defs = defs
        self.where = where
        self.what = what
        self.nodes = 0
        self.chars = 0

    def spend(self, out: dict[str, Any]) -> None:
        """Count one produced node: itself, and the text it carries (its subschemas are nodes
        counted on their own)."""
        self.nodes += 1
        self.chars += sum(_size(v) for k, v in out.items() if k not in _SUBSCHEMAS)
        self.chars += sum(len(name) for name in out.get("properties", ()))
        if self.nodes > MAX_SCHEMA_NODES or self.chars > MAX_SCHEMA_CHARS:
            raise TranslationError(
                f"{self.what} expands to more than {MAX_SCHEMA_NODES:,} subschemas or {MAX_SCHEMA_CHARS:,} "
                "characters once its $refs are inlined and its type lists spread into anyOf (Gemini's schemas "
                "cannot refer to a definition, so each $ref becomes a copy); simplify the schema",
                self.where,
            )


_SUBSCHEMAS = frozenset({"properties", "items", "anyOf"})


def _size(value: Any) -> int:
    """About how many characters ``value`` adds to the encoded schema."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, dict)):  # an enum, propertyOrdering, an example or a default
        try:
            return len(orjson.dumps(value))
        except orjson.JSONEncodeError:
            raise TranslationError("a schema example or default nests JSON more than 254 levels deep") from None
    return 8


def _clean(schema: Any, walk: _Walk, where: str, refs: tuple[str, ...], depth: int = 0) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise TranslationError(f"{where} must be a JSON schema object", where)
    if depth > MAX_SCHEMA_DEPTH:
        raise TranslationError(f"{where} nests more than {MAX_SCHEMA_DEPTH} levels deep", where)
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith(("#/$defs/", "#/definitions/")) or name not in walk.defs:
            raise TranslationError(f"{where}.$ref {ref!r} does not point into this schema's $defs", f"{where}.$ref")
        if not isinstance(walk.defs[name], dict):
            raise TranslationError(f"{where}.$ref {ref!r} points to a $defs entry that is not a schema object",
                                   f"{where}.$ref")
        if name in refs:
            raise TranslationError(f"{where}.$ref {ref!r} is recursive, which this model's tool schemas cannot express",
                                   f"{where}.$ref")
        merged = {**walk.defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        return _clean(merged, walk, where, (*refs, name), depth + 1)

    out: dict[str, Any] = {k: schema[k] for k in _SCHEMA_KEYS if k in schema}
    kind = schema.get("type")
    variants = schema.get("anyOf") if schema.get("anyOf") is not None else schema.get("oneOf")
    if isinstance(kind, list):
        names = [k for k in kind if k != "null"]
        if len(names) < len(kind):
            out["nullable"] = True
        if len(names) == 1:
            kind = names[0]
        elif names:
            variants = [{**{k: v for k, v in schema.items() if k not in ("type", "anyOf", "oneOf")}, "type": n} for n in names]
            kind = None
        else:
            kind = "null"
    if isinstance(kind, str):
        if kind.lower() not in _TYPES:
            raise TranslationError(f"{where}.type {kind!r} is not a JSON schema type", f"{where}.type")
        out["type"] = _TYPES[kind.lower()]
    if isinstance(variants, list) and variants:
        out["anyOf"] = [_clean(v, walk, f"{where}.anyOf[{i}]", refs, depth + 1) for i, v in enumerate(variants)]
    if "const" in schema and isinstance(schema["const"], str):
        out["enum"] = [schema["const"]]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        out["enum"] = enum
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS.get(out.get("type", ""), ()):
        out["format"] = fmt
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out.setdefault("type", "OBJECT")
        out["properties"] = {
            name: _clean(sub, walk, f"{where}.properties.{name}", refs, depth + 1) for name, sub in properties.items()
        }
        required = schema.get("required")
        if isinstance(required, list):
            kept = [r for r in required if isinstance(r, str) and r in properties]
            if kept:
                out["required"] = kept
    items = schema.get("items")
    if isinstance(items, dict):
        out["items"] = _clean(items, walk, f"{where}.items", refs, depth + 1)
    if "type" not in out and "anyOf" not in out:
        out["type"] = "OBJECT" if "properties" in out else "STRING"
    walk.spend(out)
    return out
