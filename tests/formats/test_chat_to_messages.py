"""Chat-format request -> messages-format request: every rule of docs/translation.md."""

from __future__ import annotations

import copy

import pytest

from gatewayd.formats.chat_to_messages import (
    CONTINUE_PLACEHOLDER,
    EFFORT_BUDGET_TOKENS,
    THINKING_ANSWER_ROOM,
    chat_request_to_messages,
)
from gatewayd.formats.errors import TranslationError

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PDF_B64 = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}
SIGNED_THINKING = {"type": "thinking", "thinking": "Need the weather.", "signature": "sig-abc"}


def translate(body: dict, default_max_tokens: int = 4096) -> dict:
    return chat_request_to_messages(body, upstream_model="claude-up", default_max_tokens=default_max_tokens)


def user(content) -> dict:
    return {"role": "user", "content": content}


def with_messages(*messages, **fields) -> dict:
    return {"model": "client-id", "messages": list(messages), **fields}


def call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def refused(body: dict) -> TranslationError:
    with pytest.raises(TranslationError) as info:
        translate(body)
    return info.value


# --- envelope -------------------------------------------------------------------------------


def test_minimal_request_has_model_max_tokens_and_messages():
    out = translate(with_messages(user("Hello")))
    assert out == {"model": "claude-up", "max_tokens": 4096, "messages": [{"role": "user", "content": "Hello"}]}


def test_input_body_is_not_mutated():
    body = with_messages(
        {"role": "system", "content": "Be brief."},
        user("hi"),
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", '{"city":"Paris"}')]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        tools=[WEATHER_TOOL],
        parallel_tool_calls=False,
        reasoning_effort="low",
        temperature=0.3,
    )
    before = copy.deepcopy(body)
    translate(body)
    assert body == before


# --- rule 1: system and developer -----------------------------------------------------------


def test_system_and_developer_messages_anywhere_become_top_level_system_in_order():
    out = translate(
        with_messages(
            {"role": "system", "content": "First."},
            user("hi"),
            {"role": "developer", "content": [{"type": "text", "text": "Second."}, {"type": "text", "text": "Third."}]},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "Fourth."},
            user("again"),
        )
    )
    assert out["system"] == [
        {"type": "text", "text": "First."},
        {"type": "text", "text": "Second."},
        {"type": "text", "text": "Third."},
        {"type": "text", "text": "Fourth."},
    ]
    assert [t["role"] for t in out["messages"]] == ["user", "assistant", "user"]


def test_only_system_messages_is_refused():
    error = refused(with_messages({"role": "system", "content": "Be brief."}))
    assert error.param == "messages"


def test_system_content_must_be_text():
    error = refused(with_messages({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}, user("hi")))
    assert error.param == "messages[0].content[0]"


# --- rule 2: merging ------------------------------------------------------------------------


def test_consecutive_same_role_turns_merge_into_one_block_list():
    out = translate(with_messages(user("one"), user([{"type": "text", "text": "two"}]), {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}))
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]


def test_single_text_part_turn_is_sent_as_a_string():
    out = translate(with_messages(user([{"type": "text", "text": "only"}])))
    assert out["messages"] == [{"role": "user", "content": "only"}]


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_blank_text_is_dropped_and_empty_messages_add_no_turn(blank):
    out = translate(with_messages(user("q"), {"role": "assistant", "content": blank}, user("q2")))
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "q2"}]}]


# --- rules 3 and 4: tool calls and tool results ---------------------------------------------


def test_tool_round_trip():
    out = translate(
        with_messages(
            user("Weather in Paris and Rome?"),
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [call("call_1", "get_weather", '{"city":"Paris"}'), call("call_2", "get_weather", '{"city": "Rome"}')],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
            user("And tomorrow?"),
            tools=[WEATHER_TOOL],
        )
    )
    assert out["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]


def test_assistant_null_content_with_tool_calls_has_only_tool_use():
    out = translate(with_messages(user("q"), {"role": "assistant", "content": None, "tool_calls": [call("call_1", "f", "")]}))
    assert out["messages"][1] == {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}]}


def test_tool_results_are_moved_before_text_in_their_user_turn():
    out = translate(
        with_messages(
            user("q"),
            {"role": "assistant", "content": None, "tool_calls": [call("call_1", "f", "{}")]},
            user("(interjection)"),
            {"role": "tool", "tool_call_id": "call_1", "content": "done"},
        )
    )
    assert [b["type"] for b in out["messages"][2]["content"]] == ["tool_result", "text"]


def test_empty_tool_result_omits_content_and_ids_are_made_anthropic_safe():
    out = translate(
        with_messages(
            user("q"),
            {"role": "assistant", "content": None, "tool_calls": [call("call:1/x", "f", "{}")]},
            {"role": "tool", "tool_call_id": "call:1/x", "content": ""},
        )
    )
    assert out["messages"][1]["content"][0]["id"] == "call_1_x"
    assert out["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1_x"}]


@pytest.mark.parametrize(
    ("arguments", "why"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"), ('"text"', "JSON object"), ("42", "JSON object")],
)
def test_unreadable_tool_arguments_are_refused_naming_the_message(arguments, why):
    error = refused(
        with_messages(
            user("q"),
            {"role": "assistant", "content": "ok"},
            user("go"),
            {"role": "assistant", "content": None, "tool_calls": [call("c0", "f", "{}"), call("c1", "f", arguments)]},
        )
    )
    assert error.param == "messages[3].tool_calls[1].function.arguments"
    assert why in error.message


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "tool", "content": "x"}, "messages[1].tool_call_id"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}, "messages[1].tool_calls[0].type"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}, "messages[1].tool_calls[0].function.name"),
        ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "messages[1].tool_calls[0].id"),
        ({"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}, "messages[1].function_call"),
    ],
)
def test_malformed_tool_messages_are_refused(message, param):
    assert refused(with_messages(user("q"), message)).param == param


# --- rule 5: images, PDFs, audio ------------------------------------------------------------


def test_data_url_image_becomes_base64_source():
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "high"}}
    out = translate(with_messages(user([{"type": "text", "text": "What is this?"}, part])))
    assert out["messages"][0]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}


def test_https_image_becomes_url_source():
    part = {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
    out = translate(with_messages(user([part])))
    assert out["messages"][0]["content"] == [{"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}]


def test_pdf_file_part_becomes_document_block():
    part = {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}}
    out = translate(with_messages(user([part, {"type": "text", "text": "Summarise."}])))
    assert out["messages"][0]["content"][0] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
    }


@pytest.mark.parametrize(
    ("part", "param", "words"),
    [
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "messages[0].content[0]", "audio input is not supported for this model"),
        ({"type": "file", "file": {"file_data": "data:text/plain;base64,aGk="}}, "messages[0].content[0].file.file_data", "only PDF"),
        ({"type": "file", "file": {"file_id": "file-123"}}, "messages[0].content[0].file.file_id", "file ids"),
        ({"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}, "messages[0].content[0].image_url.url", "not supported"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,rawnotbase64"}}, "messages[0].content[0].image_url.url", "data URLs"),
        ({"type": "image_url", "image_url": {"url": "ftp://example.com/x.png"}}, "messages[0].content[0].image_url.url", "http(s)"),
        ({"type": "video_url", "video_url": {"url": "https://x"}}, "messages[0].content[0].type", "unsupported"),
        ("just a string", "messages[0].content[0].type", "unsupported"),
    ],
)
def test_uncarriable_content_parts_are_refused(part, param, words):
    error = refused(with_messages(user([part])))
    assert error.param == param
    assert words in error.message


# --- rule 6: tools --------------------------------------------------------------------------


def test_function_tools_become_input_schema_tools_without_strict():
    out = translate(with_messages(user("q"), tools=[WEATHER_TOOL, {"type": "function", "function": {"name": "now"}}]))
    assert out["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]


def test_schema_without_type_is_made_an_object_schema():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"properties": {}}}}
    assert translate(with_messages(user("q"), tools=[tool]))["tools"][0]["input_schema"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "custom", "custom": {"name": "grammar"}}, "tools[0].type"),
        ({"type": "function", "function": {"description": "no name"}}, "tools[0].function.name"),
        ({"type": "function", "function": {"name": "f", "parameters": "string"}}, "tools[0].function.parameters"),
    ],
)
def test_bad_tools_are_refused(tool, param):
    assert refused(with_messages(user("q"), tools=[tool])).param == param


# --- rule 7: tool_choice and parallel_tool_calls --------------------------------------------


@pytest.mark.parametrize(
    ("tool_choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        ({"type": "function", "function": {"name": "get_weather"}}, None, {"type": "tool", "name": "get_weather"}),
        (None, None, None),
        (None, True, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ({"type": "function", "function": {"name": "get_weather"}}, False, {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
        ("none", False, {"type": "none"}),
    ],
)
def test_tool_choice_table(tool_choice, parallel, expected):
    fields = {"tools": [WEATHER_TOOL]}
    if tool_choice is not None:
        fields["tool_choice"] = tool_choice
    if parallel is not None:
        fields["parallel_tool_calls"] = parallel
    assert translate(with_messages(user("q"), **fields)).get("tool_choice") == expected


def test_tool_choice_without_tools_is_dropped():
    out = translate(with_messages(user("q"), tool_choice="none", parallel_tool_calls=False))
    assert "tool_choice" not in out and "tools" not in out


@pytest.mark.parametrize("tool_choice", ["sometimes", {"type": "custom", "custom": {"name": "x"}}, {"type": "allowed_tools", "allowed_tools": {}}])
def test_unknown_tool_choice_is_refused(tool_choice):
    assert refused(with_messages(user("q"), tools=[WEATHER_TOOL], tool_choice=tool_choice)).param == "tool_choice"


# --- rules 8, 9, 11: scalar fields ----------------------------------------------------------


@pytest.mark.parametrize(("stop", "expected"), [("END", ["END"]), (["a", "b"], ["a", "b"]), ([], None), (None, None)])
def test_stop_becomes_stop_sequences(stop, expected):
    assert translate(with_messages(user("q"), stop=stop)).get("stop_sequences") == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, 4096),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 200}, 200),
        ({"max_completion_tokens": 200, "max_tokens": 100}, 200),
        ({"max_completion_tokens": None, "max_tokens": 100}, 100),
    ],
)
def test_max_tokens_prefers_max_completion_tokens_then_default(fields, expected):
    assert translate(with_messages(user("q"), **fields))["max_tokens"] == expected


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 0), ("max_tokens", "10"), ("max_completion_tokens", True), ("max_completion_tokens", -5)])
def test_bad_max_tokens_is_refused(field, value):
    assert refused(with_messages(user("q"), **{field: value})).param == field


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (0.7, 0.7), (1, 1), (1.5, 1), (2, 1)])
def test_temperature_is_clamped_into_unit_interval(value, expected):
    assert translate(with_messages(user("q"), temperature=value))["temperature"] == expected


def test_top_p_and_stream_are_carried():
    out = translate(with_messages(user("q"), top_p=0.5, stream=True))
    assert out["top_p"] == 0.5 and out["stream"] is True


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"user": "u-1"}, {"user_id": "u-1"}),
        ({"metadata": {"user_id": "m-1"}, "user": "u-1"}, {"user_id": "m-1"}),
        ({"safety_identifier": "s-1"}, {"user_id": "s-1"}),
        ({"metadata": {"tag": "x"}}, None),
    ],
)
def test_user_id_is_carried_in_metadata(fields, expected):
    assert translate(with_messages(user("q"), **fields)).get("metadata") == expected


def test_fields_without_equivalent_are_not_carried():
    out = translate(
        with_messages(
            user("q"),
            response_format={"type": "json_object"},
            stream_options={"include_usage": True},
            seed=7,
            frequency_penalty=0.5,
            presence_penalty=0.5,
            store=False,
            service_tier="auto",
            prompt_cache_key="k",
            n=1,
            logprobs=False,
            parallel_tool_calls=True,
        )
    )
    assert out == {"model": "claude-up", "max_tokens": 4096, "messages": [{"role": "user", "content": "q"}]}


def test_cache_control_on_parts_is_not_carried():
    part = {"type": "text", "text": "long prefix", "cache_control": {"type": "ephemeral"}}
    out = translate(with_messages({"role": "system", "content": [part]}, user([part, {"type": "text", "text": "q"}])))
    assert "cache_control" not in out["system"][0]
    assert all("cache_control" not in block for block in out["messages"][0]["content"])


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"stop": [1]}, "stop"),
        ({"temperature": "hot"}, "temperature"),
        ({"stream": "yes"}, "stream"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ],
)
def test_uncarriable_fields_are_refused(fields, param):
    assert refused(with_messages(user("q"), **fields)).param == param


# --- rule 10: reasoning_effort -> thinking --------------------------------------------------


@pytest.mark.parametrize(("effort", "budget"), sorted(EFFORT_BUDGET_TOKENS.items()))
def test_effort_table_sets_thinking_budget_and_keeps_room_for_the_answer(effort, budget):
    out = translate(with_messages(user("q"), reasoning_effort=effort), default_max_tokens=4096)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["max_tokens"] > budget
    assert out["max_tokens"] == (4096 if budget < 4096 else budget + THINKING_ANSWER_ROOM)


def test_budget_table_is_the_documented_one():
    assert EFFORT_BUDGET_TOKENS == {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 49152}


def test_effort_none_means_no_thinking():
    assert "thinking" not in translate(with_messages(user("q"), reasoning_effort="none"))


def test_explicit_cap_above_budget_is_kept():
    out = translate(with_messages(user("q"), reasoning_effort="medium", max_completion_tokens=30000))
    assert out["max_tokens"] == 30000


def test_explicit_cap_at_or_below_budget_is_raised():
    out = translate(with_messages(user("q"), reasoning_effort="medium", max_tokens=8192))
    assert out["max_tokens"] == 8192 + THINKING_ANSWER_ROOM


@pytest.mark.parametrize(
    ("sampling", "expected"),
    [
        ({"temperature": 0.2}, {}),
        ({"temperature": 1}, {"temperature": 1}),
        ({"temperature": 1.8}, {"temperature": 1}),
        ({"top_p": 0.5}, {"top_p": 0.95}),
        ({"top_p": 0.97}, {"top_p": 0.97}),
    ],
)
def test_thinking_adjusts_sampling_as_anthropic_requires(sampling, expected):
    out = translate(with_messages(user("q"), reasoning_effort="low", **sampling))
    assert {k: out[k] for k in ("temperature", "top_p") if k in out} == expected


@pytest.mark.parametrize(("tool_choice", "thinking"), [("required", False), ({"type": "function", "function": {"name": "get_weather"}}, False), ("auto", True), ("none", True)])
def test_forced_tool_choice_wins_over_thinking(tool_choice, thinking):
    out = translate(with_messages(user("q"), tools=[WEATHER_TOOL], tool_choice=tool_choice, reasoning_effort="high", temperature=0.2))
    assert ("thinking" in out) is thinking
    assert ("temperature" in out) is not thinking


def test_thinking_is_skipped_when_the_tool_loop_lacks_echoed_thinking():
    out = translate(
        with_messages(
            user("Weather?"),
            {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", '{"city":"Paris"}')]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            tools=[WEATHER_TOOL],
            reasoning_effort="medium",
        )
    )
    assert "thinking" not in out


# --- rule 12: thinking echoed back ----------------------------------------------------------


def test_multi_turn_tool_conversation_with_thinking_echoed_back():
    redacted = {"type": "redacted_thinking", "data": "opaque=="}
    out = translate(
        with_messages(
            {"role": "system", "content": "You are a weather bot."},
            user("Weather in Paris?"),
            {
                "role": "assistant",
                "content": "Let me look.",
                "reasoning_content": "Need the weather.",
                "thinking_blocks": [{**SIGNED_THINKING, "index": 0}, {**redacted, "index": 1}],
                "tool_calls": [call("toolu_01", "get_weather", '{"city":"Paris"}')],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "18C, sunny"},
            tools=[WEATHER_TOOL],
            reasoning_effort="medium",
            max_completion_tokens=16000,
            stream=True,
        )
    )
    assert out == {
        "model": "claude-up",
        "max_tokens": 16000,
        "system": [{"type": "text", "text": "You are a weather bot."}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    SIGNED_THINKING,
                    redacted,
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C, sunny"}]},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": WEATHER_TOOL["function"]["parameters"],
            }
        ],
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 8192},
    }


def test_reasoning_content_alone_and_unsigned_thinking_are_dropped():
    out = translate(
        with_messages(
            user("q"),
            {"role": "assistant", "content": "a", "reasoning_content": "hmm", "thinking_blocks": [{"type": "thinking", "thinking": "hmm"}]},
            user("q2"),
        )
    )
    assert out["messages"][1] == {"role": "assistant", "content": "a"}


def test_malformed_thinking_blocks_are_refused():
    error = refused(with_messages(user("q"), {"role": "assistant", "content": "a", "thinking_blocks": [{"type": "summary"}]}))
    assert error.param == "messages[1].thinking_blocks[0]"


# --- rule 13: validation and turn order -----------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        ("hi", "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([{"role": "function", "name": "f", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]}], "messages[1].content[0]"),
    ],
)
def test_malformed_messages_are_refused(messages, param):
    assert refused({"model": "m", "messages": messages}).param == param


def test_function_role_is_refused_with_a_clear_message():
    error = refused(with_messages({"role": "function", "name": "f", "content": "x"}))
    assert "tool messages" in error.message


def test_assistant_first_conversation_gets_a_user_turn_in_front():
    out = translate(with_messages({"role": "system", "content": "s"}, {"role": "assistant", "content": "Hi, how can I help?"}, user("Weather?")))
    assert out["messages"] == [
        {"role": "user", "content": CONTINUE_PLACEHOLDER},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "Weather?"},
    ]


def test_assistant_refusal_part_is_kept_as_text():
    out = translate(with_messages(user("q"), {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}, user("ok")))
    assert out["messages"][1] == {"role": "assistant", "content": "I can't."}


def test_body_must_be_an_object():
    with pytest.raises(TranslationError):
        chat_request_to_messages([], upstream_model="m", default_max_tokens=1)  # type: ignore[arg-type]


def test_final_assistant_prefill_loses_trailing_whitespace():
    out = translate(with_messages(user("Write JSON."), {"role": "assistant", "content": '{"a": \n'}))
    assert out["messages"][-1] == {"role": "assistant", "content": '{"a":'}
