"""Chat-format request -> Gemini generateContent request: every rule of docs/translation.md."""

from __future__ import annotations

import copy

import pytest

from gatewayd.formats.chat_to_gemini import EFFORT_THINKING_BUDGET, chat_request_to_gemini, gemini_schema
from gatewayd.formats.errors import TranslationError

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PDF_B64 = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}


def user(content) -> dict:
    return {"role": "user", "content": content}


def body(*messages, **fields) -> dict:
    return {"model": "client-id", "messages": list(messages), **fields}


def call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def refused(request: dict) -> TranslationError:
    with pytest.raises(TranslationError) as info:
        chat_request_to_gemini(request)
    return info.value


# --- envelope ---------------------------------------------------------------------------------


def test_minimal_request_is_contents_only():
    assert chat_request_to_gemini(body(user("Hello"))) == {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}


def test_model_and_stream_are_not_in_the_body():
    out = chat_request_to_gemini(body(user("Hello"), stream=True, stream_options={"include_usage": True}))
    assert set(out) == {"contents"}


def test_input_is_not_mutated():
    request = body({"role": "system", "content": "Be brief."}, user("hi"),
                   {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", '{"city":"Paris"}')]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                   tools=[WEATHER], reasoning_effort="low", temperature=0.3)
    before = copy.deepcopy(request)
    chat_request_to_gemini(request)
    assert request == before


@pytest.mark.parametrize("not_an_object", [None, [], "text"])
def test_body_must_be_an_object(not_an_object):
    with pytest.raises(TranslationError):
        chat_request_to_gemini(not_an_object)


# --- messages ---------------------------------------------------------------------------------


def test_system_and_developer_anywhere_become_system_instruction_in_order():
    out = chat_request_to_gemini(body({"role": "system", "content": "One."}, user("hi"),
                                      {"role": "developer", "content": [{"type": "text", "text": "Two."}]}))
    assert out["systemInstruction"] == {"parts": [{"text": "One."}, {"text": "Two."}]}
    assert out["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_assistant_is_model_and_same_roles_merge():
    out = chat_request_to_gemini(body(user("a"), user([{"type": "text", "text": "b"}]),
                                      {"role": "assistant", "content": "c"}, {"role": "assistant", "content": "d"},
                                      user("e")))
    assert out["contents"] == [
        {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
        {"role": "model", "parts": [{"text": "c"}, {"text": "d"}]},
        {"role": "user", "parts": [{"text": "e"}]},
    ]


def test_blank_text_is_dropped_and_a_message_with_nothing_adds_no_content():
    out = chat_request_to_gemini(body(user("hi"), {"role": "assistant", "content": "  "}, user(" \n"),
                                      {"role": "system", "content": ""}, user("there")))
    assert out == {"contents": [{"role": "user", "parts": [{"text": "hi"}, {"text": "there"}]}]}


def test_model_first_conversation_is_kept_as_is():
    out = chat_request_to_gemini(body({"role": "assistant", "content": "Hello!"}, user("hi")))
    assert [c["role"] for c in out["contents"]] == ["model", "user"]


@pytest.mark.parametrize("messages,param", [
    ([], "messages"),
    ("hi", "messages"),
    ([{"role": "system", "content": "only system"}], "messages"),
    (["not an object"], "messages[0]"),
    ([{"role": "narrator", "content": "x"}], "messages[0].role"),
    ([{"role": "function", "name": "f", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 42}], "messages[0].content"),
    ([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
     "messages[0].content[0]"),
])
def test_bad_messages_are_refused_naming_the_field(messages, param):
    assert refused({"messages": messages}).param == param


# --- content parts ----------------------------------------------------------------------------


@pytest.mark.parametrize("media_type", ["image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"])
def test_inline_images_become_inline_data(media_type):
    out = chat_request_to_gemini(body(user([
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{PNG_B64}", "detail": "high"}},
    ])))
    assert out["contents"][0]["parts"] == [{"text": "What is this?"},
                                           {"inlineData": {"mimeType": media_type, "data": PNG_B64}}]


@pytest.mark.parametrize("url,file_data", [
    ("https://example.com/cat.png", {"mimeType": "image/png", "fileUri": "https://example.com/cat.png"}),
    ("https://example.com/CAT.JPG?size=2#x", {"mimeType": "image/jpeg", "fileUri": "https://example.com/CAT.JPG?size=2#x"}),
    ("http://example.com/doc.pdf", {"mimeType": "application/pdf", "fileUri": "http://example.com/doc.pdf"}),
])
def test_image_urls_become_file_data(url, file_data):
    out = chat_request_to_gemini(body(user([{"type": "image_url", "image_url": {"url": url}}])))
    assert out["contents"][0]["parts"] == [{"fileData": file_data}]


@pytest.mark.parametrize("url", ["https://example.com/image", "https://cdn.example.com/i?id=12.png",
                                 "https://example.com/cat.gif", "https://example.com/photo.png/"])
def test_an_image_url_whose_type_the_path_does_not_tell_is_refused(url):
    """Gemini needs the mimeType of a fileData part; the gateway does not fetch URLs to find it out."""
    error = refused(body(user([{"type": "image_url", "image_url": {"url": url}}])))
    assert error.param == "messages[0].content[0].image_url.url"
    assert "data URL" in error.message and ".png" in error.message


@pytest.mark.parametrize("url", ["data:image/gif;base64,R0lGOD", "data:image/png;base64,", "ftp://x/y.png", "",
                                 "data:image/png,rawbytes"])
def test_unsupported_images_are_refused(url):
    error = refused(body(user([{"type": "image_url", "image_url": {"url": url}}])))
    assert error.param == "messages[0].content[0].image_url.url"


def test_pdf_files_become_inline_data_and_others_are_refused():
    pdf = {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}}
    bare = {"type": "file", "file": {"filename": "b.PDF", "file_data": PDF_B64}}
    out = chat_request_to_gemini(body(user([pdf, bare])))
    assert out["contents"][0]["parts"] == [{"inlineData": {"mimeType": "application/pdf", "data": PDF_B64}}] * 2
    assert refused(body(user([{"type": "file", "file": {"file_id": "file-123"}}]))).param == \
        "messages[0].content[0].file.file_id"
    assert refused(body(user([{"type": "file", "file": {"file_data": "data:text/plain;base64,aGk="}}]))).param == \
        "messages[0].content[0].file.file_data"


def test_input_audio_becomes_inline_data():
    out = chat_request_to_gemini(body(user([{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                                            {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}}])))
    assert out["contents"][0]["parts"] == [{"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
                                           {"inlineData": {"mimeType": "audio/mp3", "data": "SUQz"}}]
    bad = refused(body(user([{"type": "input_audio", "input_audio": {"data": "x", "format": "flac"}}])))
    assert bad.param == "messages[0].content[0].input_audio.format"


def test_unknown_part_types_are_refused():
    assert refused(body(user([{"type": "video", "video": {}}]))).param == "messages[0].content[0].type"


def test_assistant_refusal_parts_are_what_it_said():
    out = chat_request_to_gemini(body(user("hi"), {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
                                      user("why")))
    assert out["contents"][1] == {"role": "model", "parts": [{"text": "No."}]}


# --- tool calls and results -------------------------------------------------------------------


def test_parallel_tool_calls_and_their_results():
    out = chat_request_to_gemini(body(
        user("Weather in Paris and Rome?"),
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            call("call_1", "get_weather", '{"city": "Paris"}'), call("call_2", "get_weather", '{"city":"Rome"}')]},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sun"},
                                                               {"type": "text", "text": "21 C"}]},
        user("Thanks"),
        tools=[WEATHER],
    ))
    assert out["contents"][1] == {"role": "model", "parts": [
        {"text": "Checking."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
    ]}
    assert out["contents"][2] == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"output": "rain"}}},
        {"functionResponse": {"name": "get_weather", "response": {"output": "sun\n21 C"}}},
        {"text": "Thanks"},
    ]}


def test_empty_arguments_are_an_empty_object_and_content_null_is_only_calls():
    out = chat_request_to_gemini(body(user("go"), {"role": "assistant", "content": None,
                                                   "tool_calls": [call("c", "now", ""), call("d", "later", "  ")]}))
    assert out["contents"][1]["parts"] == [{"functionCall": {"name": "now", "args": {}}},
                                           {"functionCall": {"name": "later", "args": {}}}]


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", "42", 7])
def test_unreadable_arguments_are_refused_never_an_empty_object(arguments):
    error = refused(body(user("go"), {"role": "assistant", "tool_calls": [call("c", "f", arguments)]}))
    assert error.param == "messages[1].tool_calls[0].function.arguments"


def test_a_tool_result_must_answer_a_call_in_the_conversation():
    error = refused(body(user("go"), {"role": "tool", "tool_call_id": "call_x", "content": "?"}))
    assert error.param == "messages[1].tool_call_id" and "call_x" in error.message
    assert refused(body(user("go"), {"role": "tool", "content": "?"})).param == "messages[1].tool_call_id"


def test_tool_results_carry_text_only():
    error = refused(body(user("go"), {"role": "assistant", "tool_calls": [call("c", "f", "{}")]},
                         {"role": "tool", "tool_call_id": "c",
                          "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}))
    assert error.param == "messages[2].content[0]"


def test_empty_tool_content_is_an_empty_output():
    out = chat_request_to_gemini(body(user("go"), {"role": "assistant", "tool_calls": [call("c", "f", "{}")]},
                                      {"role": "tool", "tool_call_id": "c", "content": ""}))
    assert out["contents"][2]["parts"] == [{"functionResponse": {"name": "f", "response": {"output": ""}}}]


@pytest.mark.parametrize("bad,param", [
    ({"type": "custom", "custom": {}}, "messages[1].tool_calls[0].type"),
    ({"type": "function", "id": "c", "function": {"arguments": "{}"}}, "messages[1].tool_calls[0].function.name"),
    ({"type": "function", "function": {"name": "f", "arguments": "{}"}}, "messages[1].tool_calls[0].id"),
])
def test_bad_tool_calls_are_refused(bad, param):
    assert refused(body(user("go"), {"role": "assistant", "tool_calls": [bad]})).param == param


# --- tools and tool_choice --------------------------------------------------------------------


def test_tools_become_function_declarations_with_cleaned_schemas():
    out = chat_request_to_gemini(body(user("hi"), tools=[WEATHER, {"type": "function", "function": {"name": "now"}}]))
    assert out["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "description": "Weather for a city",
         "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}},
        {"name": "now"},
    ]}]


def test_a_tool_taking_nothing_has_no_parameters():
    empty = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
    assert chat_request_to_gemini(body(user("hi"), tools=[empty]))["tools"][0]["functionDeclarations"] == [{"name": "now"}]


@pytest.mark.parametrize("choice,config", [
    ("auto", {"functionCallingConfig": {"mode": "AUTO"}}),
    ("required", {"functionCallingConfig": {"mode": "ANY"}}),
    ("none", {"functionCallingConfig": {"mode": "NONE"}}),
    ({"type": "function", "function": {"name": "get_weather"}},
     {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}),
])
def test_tool_choice_becomes_tool_config(choice, config):
    assert chat_request_to_gemini(body(user("hi"), tools=[WEATHER], tool_choice=choice))["toolConfig"] == config


def test_tool_choice_without_tools_is_dropped_and_parallel_flag_not_carried():
    out = chat_request_to_gemini(body(user("hi"), tool_choice="none", parallel_tool_calls=False))
    assert out == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.mark.parametrize("choice", ["any", {"type": "allowed_tools"}, {"type": "function", "function": {}}])
def test_bad_tool_choice_is_refused(choice):
    assert refused(body(user("hi"), tools=[WEATHER], tool_choice=choice)).param.startswith("tool_choice")


@pytest.mark.parametrize("tools,param", [
    ("x", "tools"),
    ([{"type": "web_search"}], "tools[0].type"),
    ([{"type": "function", "function": {"description": "no name"}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": "object"}}], "tools[0].function.parameters"),
])
def test_bad_tools_are_refused(tools, param):
    assert refused(body(user("hi"), tools=tools)).param == param


# --- schema cleaning --------------------------------------------------------------------------


def test_schema_cleaning_keeps_meaning_and_drops_what_gemini_refuses():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "format": "email", "description": "who"},
            "when": {"type": "string", "format": "date-time"},
            "size": {"type": ["integer", "null"], "minimum": 0, "format": "int64"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 3},
            "mode": {"const": "fast"},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "multi": {"type": ["string", "number"]},
            "free": {},
        },
        "required": ["name", "ghost"],
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "name": {"type": "STRING", "minLength": 1, "description": "who"},
            "when": {"type": "STRING", "format": "date-time"},
            "size": {"type": "INTEGER", "nullable": True, "minimum": 0, "format": "int64"},
            "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]}, "maxItems": 3},
            "mode": {"type": "STRING", "enum": ["fast"]},
            "level": {"type": "INTEGER"},
            "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
            "multi": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
            "free": {"type": "STRING"},
        },
        "required": ["name"],
    }


def test_schema_refs_are_inlined_and_recursive_ones_refused():
    schema = {"type": "object", "properties": {"home": {"$ref": "#/$defs/Address"}, "work": {"$ref": "#/definitions/Address"}},
              "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}},
              "definitions": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    address = {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}
    assert gemini_schema(schema)["properties"] == {"home": address, "work": address}
    recursive = {"type": "object", "properties": {"node": {"$ref": "#/$defs/Node"}},
                 "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    with pytest.raises(TranslationError, match="recursive"):
        gemini_schema(recursive)
    with pytest.raises(TranslationError, match="does not point"):
        gemini_schema({"type": "object", "properties": {"x": {"$ref": "https://example.com/schema"}}})


def test_a_schema_nested_too_deep_is_a_400_not_a_crash():
    schema: dict = {"type": "string"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"x": schema}}
    with pytest.raises(TranslationError, match="levels deep"):
        chat_request_to_gemini(body(user("hi"), tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}]))
    assert gemini_schema({"type": "object", "$defs": [1], "properties": {"a": {"type": "string"}}}) == {
        "type": "OBJECT", "properties": {"a": {"type": "STRING"}}}


def test_schema_with_an_unknown_type_is_refused():
    with pytest.raises(TranslationError) as info:
        chat_request_to_gemini(body(user("hi"), tools=[{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "decimal"}}}}}]))
    assert info.value.param == "tools[0].function.parameters.properties.x.type"


# --- generationConfig -------------------------------------------------------------------------


def test_scalar_fields_go_to_generation_config():
    out = chat_request_to_gemini(body(user("hi"), max_tokens=100, max_completion_tokens=50, temperature=1.7,
                                      top_p=0.9, seed=7, stop=["END", "", "STOP"]))
    assert out["generationConfig"] == {"maxOutputTokens": 50, "temperature": 1.7, "topP": 0.9, "seed": 7,
                                       "stopSequences": ["END", "STOP"]}


def test_single_stop_string_and_max_tokens():
    out = chat_request_to_gemini(body(user("hi"), max_tokens=100, stop="\n"))
    assert out["generationConfig"] == {"maxOutputTokens": 100, "stopSequences": ["\n"]}


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("max_completion_tokens", "10"), ("max_tokens", True), ("temperature", "hot"),
    ("top_p", "x"), ("seed", 1.5), ("stop", [1]), ("stream", "yes"),
])
def test_bad_scalars_are_refused(field, value):
    assert refused(body(user("hi"), **{field: value})).param == field


def test_response_format_is_carried():
    assert chat_request_to_gemini(body(user("hi"), response_format={"type": "json_object"}))["generationConfig"] == {
        "responseMimeType": "application/json"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    out = chat_request_to_gemini(body(user("hi"), response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}))
    assert out["generationConfig"] == {"responseMimeType": "application/json",
                                       "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}
    assert "generationConfig" not in chat_request_to_gemini(body(user("hi"), response_format={"type": "text"}))
    assert refused(body(user("hi"), response_format={"type": "grammar"})).param == "response_format.type"


@pytest.mark.parametrize("effort", sorted(EFFORT_THINKING_BUDGET))
def test_reasoning_effort_becomes_a_thinking_budget(effort):
    config = chat_request_to_gemini(body(user("hi"), reasoning_effort=effort))["generationConfig"]
    budget = EFFORT_THINKING_BUDGET[effort]
    expected = {"thinkingBudget": budget, "includeThoughts": True} if budget else {"thinkingBudget": 0}
    assert config == {"thinkingConfig": expected}


def test_budget_table_matches_googles_and_the_25_models_limits():
    assert (EFFORT_THINKING_BUDGET["low"], EFFORT_THINKING_BUDGET["medium"], EFFORT_THINKING_BUDGET["high"]) == (
        1024, 8192, 24576)
    assert EFFORT_THINKING_BUDGET["none"] == 0 and min(b for b in EFFORT_THINKING_BUDGET.values() if b) == 512
    assert max(EFFORT_THINKING_BUDGET.values()) == 24576


def test_thinking_budget_never_exceeds_the_cap():
    config = chat_request_to_gemini(body(user("hi"), reasoning_effort="high", max_tokens=3000))["generationConfig"]
    assert config == {"maxOutputTokens": 3000, "thinkingConfig": {"thinkingBudget": 3000, "includeThoughts": True}}


@pytest.mark.parametrize("model,cap,effort,budget", [
    # a cap below the effort's budget lowers it, but never below what the model accepts
    ("gemini-2.5-pro", 100, "low", 128),  # Pro: at least 128, cannot stop thinking
    ("gemini-2.5-pro-preview-06-05", 60, "high", 128),
    ("gemini-2.5-flash", 100, "low", 100),  # Flash: any budget from 1
    ("gemini-2.5-flash-lite", 300, "low", 0),  # Flash-Lite: 512 or more, or off: no room to think
    ("gemini-2.5-flash-lite-preview-06-17", 700, "medium", 700),
    ("models/gemini-2.5-pro", 50, "minimal", 128),
    ("some-future-gemini", 100, "low", 512),  # unknown: the strictest floor of the 2.5 models
    (None, 100, "low", 512),
    ("gemini-2.5-pro", 5000, "high", 5000),
])
def test_a_capped_thinking_budget_respects_the_models_minimum(model, cap, effort, budget):
    out = chat_request_to_gemini(body(user("hi"), reasoning_effort=effort, max_tokens=cap), upstream_model=model)
    thinking = {"thinkingBudget": budget, "includeThoughts": True} if budget else {"thinkingBudget": 0}
    assert out["generationConfig"] == {"maxOutputTokens": cap, "thinkingConfig": thinking}


def test_bad_reasoning_effort_is_refused():
    assert refused(body(user("hi"), reasoning_effort="extreme")).param == "reasoning_effort"


@pytest.mark.parametrize("fields,param", [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"functions": []}, "functions"),
    ({"function_call": "auto"}, "function_call"), ({"audio": {"voice": "x"}}, "modalities"),
    ({"modalities": ["text", "audio"]}, "modalities"),
])
def test_what_would_change_the_answer_if_dropped_is_refused(fields, param):
    assert refused(body(user("hi"), **fields)).param == param


def test_delivery_and_bookkeeping_fields_are_not_carried():
    out = chat_request_to_gemini(body(user("hi"), n=1, logprobs=False, user="u1", metadata={"a": "b"}, store=True,
                                      service_tier="auto", prompt_cache_key="k", parallel_tool_calls=True,
                                      frequency_penalty=0.5, presence_penalty=0.5))
    assert out == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
