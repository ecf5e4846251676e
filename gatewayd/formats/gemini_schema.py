"""JSON schema -> Gemini ``Schema``: what tool parameters and ``response_format`` schemas
become for models whose provider speaks ``protocol = "gemini"``.

Gemini's ``Schema`` is an OpenAPI 3.0 subset: upper-case type names, ``nullable``,
``anyOf``, no ``$ref``. Sans-I/O: a dict in, a dict out, or a :class:`TranslationError`
naming the offending place in the client's body. The rules are tabulated in
``docs/translation.md`` (section "Request: chat -> Gemini").
"""

from __future__ import annotations

from gatewayd.formats.errors import TranslationError

__all__ = ["MAX_SCHEMA_DEPTH", "gemini_schema"]


# Keys of Gemini's Schema object (an OpenAPI 3.0 subset) that a JSON schema can map to as is.
_SCHEMA_KEYS = frozenset({
    "description", "title", "nullable", "minItems", "maxItems", "minProperties", "maxProperties",
    "minLength", "maxLength", "pattern", "minimum", "maximum", "example", "default", "propertyOrdering",
})
_FORMATS = {"STRING": {"enum", "date-time"}, "NUMBER": {"float", "double"}, "INTEGER": {"int32", "int64"}}
_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
          "array": "ARRAY", "object": "OBJECT", "null": "NULL"}


def gemini_schema(schema: dict, where: str = "schema") -> dict:
    """A JSON schema reduced to what Gemini's ``Schema`` accepts.

    Types become Gemini's upper-case names; ``["string", "null"]`` becomes ``STRING``
    with ``nullable``; ``oneOf`` becomes ``anyOf``; ``const`` a one-value ``enum``;
    local ``$ref``s into ``$defs``/``definitions`` are inlined (a recursive one is
    refused: Gemini's schema cannot say it); ``required`` keeps only properties that
    exist; keys Gemini does not know (``additionalProperties``, ``$schema``, ``strict``,
    unsupported ``format`` values, non-string ``enum``s ...) are dropped, since they only
    constrain, never change, what a valid call looks like.
    """
    defs: dict = {}
    for key in ("definitions", "$defs"):
        if isinstance(schema.get(key), dict):
            defs.update(schema[key])
    return _clean(schema, defs, where, ())


#: Deeper tool schemas are refused (a clear 400) rather than walked into Python's recursion limit.
MAX_SCHEMA_DEPTH = 64


def _clean(schema, defs: dict, where: str, refs: tuple[str, ...], depth: int = 0) -> dict:
    if not isinstance(schema, dict):
        raise TranslationError(f"{where} must be a JSON schema object", where)
    if depth > MAX_SCHEMA_DEPTH:
        raise TranslationError(f"{where} nests more than {MAX_SCHEMA_DEPTH} levels deep", where)
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith(("#/$defs/", "#/definitions/")) or name not in defs:
            raise TranslationError(f"{where}.$ref {ref!r} does not point into this schema's $defs", f"{where}.$ref")
        if name in refs:
            raise TranslationError(f"{where}.$ref {ref!r} is recursive, which this model's tool schemas cannot express",
                                   f"{where}.$ref")
        merged = {**defs[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        return _clean(merged, defs, where, (*refs, name), depth + 1)

    out: dict = {k: schema[k] for k in _SCHEMA_KEYS if k in schema}
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
        out["anyOf"] = [_clean(v, defs, f"{where}.anyOf[{i}]", refs, depth + 1) for i, v in enumerate(variants)]
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
            name: _clean(sub, defs, f"{where}.properties.{name}", refs, depth + 1) for name, sub in properties.items()
        }
        required = schema.get("required")
        if isinstance(required, list):
            kept = [r for r in required if isinstance(r, str) and r in properties]
            if kept:
                out["required"] = kept
    items = schema.get("items")
    if isinstance(items, dict):
        out["items"] = _clean(items, defs, f"{where}.items", refs, depth + 1)
    if "type" not in out and "anyOf" not in out:
        out["type"] = "OBJECT" if "properties" in out else "STRING"
    return out
