"""JSON schema -> Gemini Schema: the limits that keep a small schema from standing for a huge one.

Gemini's schema has no ``$ref``, so local references are inlined, and a list of types
becomes ``anyOf`` variants that each repeat the rest of the schema. Both copy subschemas:
a chain of ``$defs`` whose entries each refer to the next twice doubles at every link.
The translation must refuse such a schema quickly (a 400 naming the tool), never build it.
"""

from __future__ import annotations

import time

import orjson
import pytest

from gatewayd.formats.chat_to_gemini import chat_request_to_gemini
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.gemini_schema import MAX_SCHEMA_NODES, gemini_schema


def doubling_chain(n: int) -> dict:
    """``d0`` refers to ``d1`` twice, ``d1`` to ``d2`` twice ...: 2**n nodes once inlined."""
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"},
                                                        "y": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n - 1)}
    defs[f"d{n - 1}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def tool_body(parameters: dict) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "explode", "parameters": parameters}}]}


def test_a_doubling_ref_chain_is_refused_quickly_naming_the_tool():
    schema = doubling_chain(30)  # 2**30 nodes, within the depth limit (two levels a link)
    assert len(orjson.dumps(schema)) < 4096  # a small request ...
    started = time.monotonic()
    with pytest.raises(TranslationError) as info:
        chat_request_to_gemini(tool_body(schema))
    assert time.monotonic() - started < 1  # ... refused before it grows
    assert info.value.param == "tools[0].function.parameters"
    assert "'explode'" in info.value.message and "$ref" in info.value.message


def test_a_type_list_at_every_level_is_bounded_too():
    """``["string", "number", ...]`` becomes one ``anyOf`` variant per type, each repeating the
    properties: nested, that multiplies as a $ref chain does, without any $ref."""
    schema: dict = {"type": "string"}
    for _ in range(20):
        schema = {"type": ["object", "string", "number", "integer", "boolean", "array"], "properties": {"a": schema}}
    started = time.monotonic()
    with pytest.raises(TranslationError, match="expands"):
        gemini_schema(schema, "response_format.json_schema.schema")
    assert time.monotonic() - started < 1


def test_a_big_string_inlined_many_times_is_bounded_by_size():
    """Few nodes, but each copy carries a long description: the output size counts as well."""
    schema = doubling_chain(9)
    schema["$defs"]["d8"] = {"type": "string", "description": "x" * 100_000}
    with pytest.raises(TranslationError, match="expands"):
        gemini_schema(schema)


def test_schemas_within_the_limits_are_inlined_as_before():
    out = gemini_schema(doubling_chain(8))  # 255 nodes
    assert out["properties"]["x"]["properties"]["y"]["type"] == "OBJECT"
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 50}
                                             for i in range(MAX_SCHEMA_NODES // 2)}}
    assert len(gemini_schema(wide)["properties"]) == MAX_SCHEMA_NODES // 2


@pytest.mark.parametrize("entry", [5, "string", ["a"], None, True])
def test_a_ref_to_a_defs_entry_that_is_not_a_schema_is_refused(entry):
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/x"}}, "$defs": {"x": entry}}
    with pytest.raises(TranslationError) as info:
        chat_request_to_gemini(tool_body(schema))
    assert info.value.param == "tools[0].function.parameters.properties.x.$ref"
