"""Property test: the request translators refuse what they cannot read, and never crash.

Start from request bodies every translator accepts, replace one field a translator reads
as a name (a role, a part or tool type, a format, an effort, a tool choice, a ``$ref`` and
what it points to) with arbitrary JSON, and translate: the only exception allowed is
``TranslationError`` (the client's 400). A list or an object where a string is expected
used to reach a dict lookup or a set membership test as is, a ``TypeError`` (a 500).

Each body goes through every translation a client format takes: chat -> Gemini and chat
-> messages for chat clients; responses -> chat, then -> Gemini and -> messages, for
responses clients. Pure functions: no gateway, no provider.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings, strategies as st

from gatewayd.formats.chat_to_gemini import chat_request_to_gemini
from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.responses_request import responses_request_to_chat

SCHEMA = {"type": "object", "properties": {"city": {"$ref": "#/$defs/City"}, "when": {"type": "string",
                                                                                      "format": "date-time"}},
          "required": ["city"], "$defs": {"City": {"type": "string", "enum": ["Paris", "Rome"]}}}

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        ]},
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}],
    "tool_choice": {"type": "function", "function": {"name": "weather"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
    "reasoning_effort": "low",
    "max_completion_tokens": 4096,
}

# Audio input only Gemini carries (the messages translation refuses it).
CHAT_AUDIO = {**CHAT, "messages": [*CHAT["messages"], {"role": "user", "content": [
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}

RESPONSES = {
    "model": "m",
    "instructions": "Be brief.",
    "input": [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
        ]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "sunny"}]},
    ],
    "tools": [{"type": "function", "name": "weather", "parameters": SCHEMA},
              {"type": "custom", "name": "patch", "format": {"type": "grammar", "syntax": "lark", "definition": "x"}}],
    "tool_choice": {"type": "function", "name": "weather"},
    "reasoning": {"effort": "low"},
    "text": {"format": {"type": "json_schema", "name": "r", "schema": SCHEMA}},
    "max_output_tokens": 4096,
}

# Where each format has a field read as a name (a key into a table of known values).
CHAT_PATHS = [
    ("messages", 0, "role"), ("messages", 1, "role"), ("messages", 2, "role"), ("messages", 3, "role"),
    ("messages", 0, "content", 0, "type"),
    ("messages", 1, "content", 0, "type"), ("messages", 1, "content", 1, "type"),
    ("messages", 1, "content", 1, "image_url", "detail"), ("messages", 1, "content", 1, "image_url", "url"),
    ("messages", 1, "content", 2, "type"), ("messages", 1, "content", 2, "file", "filename"),
    ("messages", 1, "content", 2, "file", "file_data"),
    ("messages", 4, "content", 0, "type"), ("messages", 4, "content", 0, "input_audio"),
    ("messages", 4, "content", 0, "input_audio", "format"), ("messages", 4, "content", 0, "input_audio", "data"),
    ("messages", 2, "tool_calls", 0, "type"), ("messages", 2, "tool_calls", 0, "id"),
    ("messages", 2, "tool_calls", 0, "function", "name"), ("messages", 3, "tool_call_id"),
    ("messages", 3, "content", 0, "type"),
    ("tools", 0, "type"), ("tools", 0, "function", "name"), ("tool_choice",), ("tool_choice", "type"),
    ("response_format", "type"), ("reasoning_effort",), ("stop",), ("parallel_tool_calls",),
]
RESPONSES_PATHS = [
    ("input", 0, "role"), ("input", 1, "type"), ("input", 1, "role"),
    ("input", 1, "content", 0, "type"), ("input", 1, "content", 1, "type"), ("input", 1, "content", 1, "detail"),
    ("input", 1, "content", 2, "type"), ("input", 1, "content", 2, "filename"),
    ("input", 2, "type"), ("input", 2, "name"), ("input", 2, "call_id"), ("input", 3, "type"),
    ("input", 3, "output", 0, "type"),
    ("tools", 0, "type"), ("tools", 1, "type"), ("tools", 1, "format"), ("tools", 1, "format", "type"),
    ("tools", 1, "format", "syntax"), ("tool_choice",), ("tool_choice", "type"), ("reasoning",),
    ("reasoning", "effort"), ("text", "format", "type"), ("text", "format", "name"),
]
# The schema: tool parameters and output format alike.
SCHEMA_PATHS = [
    ("$defs",), ("$defs", "City"), ("$defs", "City", "type"), ("$defs", "City", "enum"),
    ("properties", "city", "$ref"), ("properties", "when", "format"), ("properties", "when", "type"),
    ("required",), ("type",), ("properties", "when"),
]

names = st.sampled_from(["text", "function", "user", "auto", "none", "high", "wav", "json_schema", "#/$defs/City",
                         "City", "input_text", "message", "low", "", "NaN"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.floats(allow_nan=False), names)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(names, st.text(max_size=3)), inner, max_size=3)),
    max_leaves=8)


def replaced(body: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(body)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


def chat_translations(body: dict) -> None:
    for translate in (chat_request_to_gemini,
                      lambda b: chat_request_to_messages(b, upstream_model="m", default_max_tokens=1024)):
        try:
            translate(body)
        except TranslationError:
            pass


def responses_translations(body: dict) -> None:
    try:
        chat = responses_request_to_chat(body)
    except TranslationError:
        return
    chat_translations(chat)


def test_the_base_bodies_translate():
    """Every field the property test breaks is read: the unbroken bodies go all the way."""
    chat_request_to_gemini(CHAT_AUDIO)
    chat_request_to_messages(CHAT, upstream_model="m", default_max_tokens=1024)
    chat = responses_request_to_chat(RESPONSES)
    chat_request_to_gemini(chat)
    chat_request_to_messages(chat, upstream_model="m", default_max_tokens=1024)


@settings(max_examples=400, deadline=None)
@given(path=st.sampled_from(CHAT_PATHS), value=values)
def test_any_json_where_chat_expects_a_name_is_refused_or_carried(path, value):
    chat_translations(replaced(CHAT_AUDIO if path[:2] == ("messages", 4) else CHAT, path, value))


@settings(max_examples=400, deadline=None)
@given(path=st.sampled_from(RESPONSES_PATHS), value=values)
def test_any_json_where_responses_expects_a_name_is_refused_or_carried(path, value):
    responses_translations(replaced(RESPONSES, path, value))


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(SCHEMA_PATHS), value=values, where=st.sampled_from(["tool", "output"]))
def test_any_json_in_a_schema_with_defs_is_refused_or_carried(path, value, where):
    schema = replaced(SCHEMA, path, value)
    if where == "tool":
        chat_translations(replaced(CHAT, ("tools", 0, "function", "parameters"), schema))
        responses_translations(replaced(RESPONSES, ("tools", 0, "parameters"), schema))
    else:
        chat_translations(replaced(CHAT, ("response_format", "json_schema", "schema"), schema))
        responses_translations(replaced(RESPONSES, ("text", "format", "schema"), schema))
