"""The one chat reader: every field rule of ``read_chat_request`` (docs/translation.md,
"one reader, one writer per target"), and that both writers refuse bad input in the same
words, because the rule is the reader's."""

from __future__ import annotations

import copy

import pytest

from gatewayd.formats.chat_request import (
    REASONING_EFFORTS,
    AssistantTurn,
    Audio,
    ChatRequest,
    Document,
    Image,
    ImageUrl,
    RedactedThinking,
    ResponseFormat,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    UserTurn,
    pdf_only,
    read_chat_request,
)
from gatewayd.formats.chat_to_gemini import EFFORT_THINKING_BUDGET, chat_request_to_gemini
from gatewayd.formats.chat_to_messages import EFFORT_BUDGET_TOKENS, chat_request_to_messages
from gatewayd.formats.errors import TranslationError

PDF_B64 = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                            "parameters": {"type": "object", "properties": {}}, "strict": True}}


def user(content) -> dict:
    return {"role": "user", "content": content}


def body(*messages, **fields) -> dict:
    return {"model": "m", "messages": list(messages) or [user("hi")], **fields}


def call(call_id: str, name: str = "f", arguments: str = "{}") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def refused(request) -> TranslationError:
    with pytest.raises(TranslationError) as info:
        read_chat_request(request)
    return info.value


# --- the envelope -----------------------------------------------------------------------------


@pytest.mark.parametrize("not_an_object", [None, [], "text", 3])
def test_the_body_must_be_an_object(not_an_object):
    assert refused(not_an_object).message == "the request body must be a JSON object"


def test_a_minimal_request_has_defaults_for_every_field():
    assert read_chat_request(body()) == ChatRequest(system=(), turns=("hi",))  # a user message of one text: its str


def test_a_user_message_of_parts_is_a_user_turn():
    assert read_chat_request(body(user([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))).turns == (
        UserTurn(("a", "b")),)


def test_the_body_is_not_mutated():
    request = body({"role": "system", "content": "s"}, user("q"), {"role": "assistant", "tool_calls": [call("c")]},
                   {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "r"}]},
                   tools=[WEATHER], tool_choice="auto", stop=["x", ""], response_format={"type": "json_object"})
    before = copy.deepcopy(request)
    read_chat_request(request)
    assert request == before


# --- messages ---------------------------------------------------------------------------------


def test_system_and_developer_text_is_gathered_in_order_and_blank_text_dropped():
    request = read_chat_request(body({"role": "system", "content": "One."}, user("hi"),
                                     {"role": "developer", "content": [{"type": "text", "text": "Two."},
                                                                       {"type": "text", "text": "  "}]},
                                     {"role": "system", "content": ""}))
    assert request.system == ("One.", "Two.")


def test_blank_messages_are_left_out_and_runs_are_not_merged():
    request = read_chat_request(body(user("a"), user(" \n"), {"role": "assistant", "content": ""},
                                     user([{"type": "text", "text": "b"}, {"type": "text", "text": ""}])))
    assert request.turns == ("a", UserTurn(("b",)))


def test_tool_results_come_first_among_the_users_turns_after_the_calls():
    request = read_chat_request(body(
        user("q"), {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2", "g")]},
        user("(interjection)"),
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "assistant", "content": "done"}, {"role": "tool", "tool_call_id": "c1", "content": "late"}))
    assert request.turns == (
        "q",
        AssistantTurn((), (ToolCall("c1", "f", {}), ToolCall("c2", "g", {})), ()),
        ToolResult("c1", "f", "one", 3), ToolResult("c2", "g", "two", 4), "(interjection)",
        AssistantTurn(("done",), (), ()),
        ToolResult("c1", "f", "late", 6),
    )


def test_a_tool_result_knows_the_name_of_the_call_it_answers_or_none():
    request = read_chat_request(body(user("q"), {"role": "tool", "tool_call_id": "nobody", "content": None}))
    assert request.turns == (ToolResult("nobody", None, "", 1), "q")  # results first on the user's side


def test_tool_result_content_is_the_string_as_sent_or_its_parts():
    request = read_chat_request(body(
        user("q"), {"role": "assistant", "tool_calls": [call("c")]},
        {"role": "tool", "tool_call_id": "c", "content": " "},
        {"role": "tool", "tool_call_id": "c", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": " "},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}))
    assert [t.content for t in request.turns[2:]] == [" ", ("a", ImageUrl("https://x/y.png", "messages[3].content[2]"))]


@pytest.mark.parametrize(("messages", "param", "words"), [
    (None, "messages", "non-empty array"),
    ([], "messages", "non-empty array"),
    ([{"role": "system", "content": "only"}], "messages", "at least one user or assistant"),
    ([user("  ")], "messages", "at least one user or assistant"),
    (["hi"], "messages[0]", "must be an object"),
    ([{"content": "x"}], "messages[0].role", "must be one of"),
    ([{"role": "robot", "content": "x"}], "messages[0].role", "must be one of"),
    ([{"role": "function", "name": "f", "content": "x"}], "messages[0].role", "use tool messages"),
    ([{"role": "user"}], "messages[0].content", "string or an array of content parts"),
    ([{"role": "system", "content": 5}], "messages[0].content", "array of text parts"),
    ([{"role": "system", "content": [{"type": "image_url"}]}], "messages[0].content[0]", "must be a text part"),
    ([user([{"type": "text", "text": 5}])], "messages[0].content[0]", "must be a text part"),
    ([user([{"type": "video", "video": {}}])], "messages[0].content[0].type", "unsupported content part type"),
    ([user(["bare"])], "messages[0].content[0].type", "unsupported content part type"),
    ([user("q"), {"role": "assistant", "content": 5}], "messages[1].content", "or null"),
    ([user("q"), {"role": "assistant", "content": [{"type": "image_url"}]}], "messages[1].content[0]", "text part"),
    ([user("q"), {"role": "tool", "content": "x"}], "messages[1].tool_call_id", "non-empty string"),
    ([user("q"), {"role": "tool", "tool_call_id": "c", "content": 5}], "messages[1].content", "array of content"),
])
def test_bad_messages_are_refused_naming_the_field(messages, param, words):
    error = refused({"messages": messages})
    assert error.param == param and words in error.message


# --- content parts ----------------------------------------------------------------------------


def test_parts_are_read_with_the_client_part_they_came_from():
    request = read_chat_request(body(user([
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,AAAA", "detail": "high"}},
        {"type": "image_url", "image_url": "https://example.com/a.jpg"},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF_B64}"}},
        {"type": "file", "file": {"filename": "b.PDF", "file_data": PDF_B64}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    ])))
    where = "messages[0].content"
    assert request.turns[0].parts == (
        "look",
        Image("image/png", "AAAA", f"{where}[1]"),
        ImageUrl("https://example.com/a.jpg", f"{where}[2]"),
        Document("application/pdf", PDF_B64, "a.pdf", f"{where}[3]"),
        Document("application/pdf", PDF_B64, "b.PDF", f"{where}[4]"),
        Audio("wav", "UklGRg==", f"{where}[5]"),
    )
    assert request.turns[0].parts[5].media_type == "audio/wav"


@pytest.mark.parametrize(("part", "param", "words"), [
    ({"type": "image_url", "image_url": {"url": ""}}, "image_url.url", "non-empty string"),
    ({"type": "image_url", "image_url": {"url": ["x"]}}, "image_url.url", "non-empty string"),
    ({"type": "image_url", "image_url": {"url": "data:image/png,raw"}}, "image_url.url", "data URLs"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}, "image_url.url", "data URLs"),
    ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "image_url.url", "http(s)"),
    ({"type": "file", "file": "x"}, "file", "must be an object"),
    ({"type": "file", "file": {"file_id": "file-1"}}, "file.file_id", "file ids"),
    ({"type": "file", "file": {"file_data": ""}}, "file.file_data", "base64 data URL"),
    ({"type": "file", "file": {"file_data": PDF_B64, "filename": "a.txt"}}, "file.file_data", "base64 data URL"),
    ({"type": "input_audio", "input_audio": {"format": "wav"}}, "input_audio.data", "base64 audio"),
    ({"type": "input_audio", "input_audio": {"data": "AA", "format": "flac"}}, "input_audio.format", "wav, mp3"),
    ({"type": "input_audio", "input_audio": {"data": "AA", "format": ["wav"]}}, "input_audio.format", "wav, mp3"),
])
def test_bad_parts_are_refused_naming_the_field(part, param, words):
    error = refused(body(user([part])))
    assert error.param == f"messages[0].content[0].{param}" and words in error.message


def test_only_pdf_documents_pass_pdf_only():
    assert pdf_only(Document("application/pdf", "AAAA", None, "messages[0].content[0]")) == "AAAA"
    with pytest.raises(TranslationError) as info:
        pdf_only(Document("text/plain", "aGk=", None, "messages[0].content[0]"))
    assert info.value.param == "messages[0].content[0].file.file_data" and "only PDF" in info.value.message


# --- the assistant: text, tool calls, echoed thinking ----------------------------------------


def test_assistant_turns_carry_text_refusals_calls_and_signed_thinking():
    request = read_chat_request(body(user("q"), {
        "role": "assistant", "reasoning_content": "dropped",
        "content": [{"type": "text", "text": "Let me look."}, {"type": "refusal", "refusal": "Not that."}],
        "thinking_blocks": [{"type": "thinking", "thinking": "t", "signature": "s", "index": 0},
                            {"type": "thinking", "thinking": "unsigned"},
                            {"type": "redacted_thinking", "data": "opaque"}],
        "tool_calls": [call("c1", "f", '{"a": 1}'), {"id": "c2", "function": {"name": "g", "arguments": {"b": 2}}},
                       call("c3", "h", " ")],
    }))
    assert request.turns[1] == AssistantTurn(
        ("Let me look.", "Not that."),
        (ToolCall("c1", "f", {"a": 1}), ToolCall("c2", "g", {"b": 2}), ToolCall("c3", "h", {})),
        (Thinking("t", "s"), RedactedThinking("opaque")),
    )


@pytest.mark.parametrize(("assistant", "param", "words"), [
    ({"function_call": {"name": "f"}}, "function_call", "use tool_calls"),
    ({"tool_calls": {"id": "c"}}, "tool_calls", "must be an array"),
    ({"tool_calls": ["c"]}, "tool_calls[0].type", "function tool call"),
    ({"tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}, "tool_calls[0].type", "function tool call"),
    ({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}, "tool_calls[0].function.name", "non-empty"),
    ({"tool_calls": [{"id": "c", "function": "f"}]}, "tool_calls[0].function.name", "non-empty"),
    ({"tool_calls": [{"function": {"name": "f"}}]}, "tool_calls[0].id", "non-empty"),
    ({"tool_calls": [call("c", "f", "{not json")]}, "tool_calls[0].function.arguments", "not valid JSON"),
    ({"tool_calls": [call("c", "f", "[1]")]}, "tool_calls[0].function.arguments", "JSON object"),
    ({"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 7}}]}, "tool_calls[0].function.arguments",
     "JSON-encoded string"),
    ({"thinking_blocks": "t"}, "thinking_blocks", "must be an array"),
    ({"thinking_blocks": [{"type": "summary"}]}, "thinking_blocks[0]", "thinking or redacted_thinking"),
    ({"thinking_blocks": [{"type": "redacted_thinking"}]}, "thinking_blocks[0].data", "must be a string"),
])
def test_bad_assistant_messages_are_refused_naming_the_field(assistant, param, words):
    error = refused(body(user("q"), {"role": "assistant", "content": "a", **assistant}))
    assert error.param == f"messages[1].{param}" and words in error.message


# --- tools and tool_choice --------------------------------------------------------------------


def test_tools_are_function_tools_with_their_schema_as_sent():
    now = {"type": "function", "function": {"name": "now", "description": ""}}
    request = read_chat_request(body(tools=[WEATHER, now]))
    assert request.tools == (Tool("get_weather", "Weather", {"type": "object", "properties": {}}, 0),
                             Tool("now", None, None, 1))


@pytest.mark.parametrize(("tools", "param"), [
    ("x", "tools"),
    ([{"type": "web_search"}], "tools[0].type"),
    (["f"], "tools[0].type"),
    ([{"type": "function", "function": {"description": "no name"}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": "object"}}], "tools[0].function.parameters"),
])
def test_bad_tools_are_refused(tools, param):
    assert refused(body(tools=tools)).param == param


@pytest.mark.parametrize(("choice", "read"), [
    ("auto", ToolChoice("auto")), ("required", ToolChoice("required")), ("none", ToolChoice("none")),
    ({"type": "function", "function": {"name": "f"}}, ToolChoice("function", "f")),
])
def test_tool_choice_is_read_even_without_tools(choice, read):
    assert read_chat_request(body(tool_choice=choice)).tool_choice == read


@pytest.mark.parametrize(("choice", "param"), [
    ("any", "tool_choice"), (["auto"], "tool_choice"), ({"type": "allowed_tools"}, "tool_choice"),
    ({"type": "function", "function": {}}, "tool_choice.function.name"),
])
def test_bad_tool_choice_is_refused_even_without_tools(choice, param):
    assert refused(body(tool_choice=choice)).param == param


# --- scalar fields ----------------------------------------------------------------------------


def test_scalars_are_read_as_sent():
    request = read_chat_request(body(max_tokens=100, max_completion_tokens=50, temperature=1.7, top_p=0.9, seed=7,
                                     stop=["END", "", "STOP"], stream=True, stream_options={"include_usage": True},
                                     parallel_tool_calls=False, reasoning_effort="xhigh"))
    assert (request.max_tokens, request.temperature, request.top_p, request.seed, request.stop, request.stream,
            request.include_usage, request.parallel_tool_calls, request.reasoning_effort) == (
        50, 1.7, 0.9, 7, ("END", "STOP"), True, True, False, "xhigh")


def test_max_tokens_is_read_when_max_completion_tokens_is_absent_and_a_single_stop_string_is_a_list():
    request = read_chat_request(body(max_tokens=100, stop="\n"))
    assert (request.max_tokens, request.stop) == (100, ("\n",))


@pytest.mark.parametrize(("field", "value", "words"), [
    ("max_tokens", 0, "positive integer"), ("max_completion_tokens", "10", "positive integer"),
    ("max_tokens", True, "positive integer"), ("temperature", "hot", "must be a number"),
    ("top_p", False, "must be a number"), ("seed", 1.5, "must be an integer"), ("seed", True, "must be an integer"),
    ("stop", [1], "string or an array of strings"), ("stop", 5, "string or an array of strings"),
    ("stream", "yes", "must be a boolean"), ("parallel_tool_calls", "false", "must be a boolean"),
    ("reasoning_effort", "extreme", "none, minimal, low, medium, high, xhigh, max"),
    ("reasoning_effort", ["high"], "none, minimal, low, medium, high, xhigh, max"),
])
def test_bad_scalars_are_refused(field, value, words):
    error = refused(body(**{field: value}))
    assert error.param == field and words in error.message


@pytest.mark.parametrize(("value", "read"), [
    ({"type": "text"}, None),
    ({"type": "json_object"}, ResponseFormat("json_object")),
    ({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": True}},
     ResponseFormat("json_schema", {"type": "object"}, "r", True)),
])
def test_response_format_is_read(value, read):
    assert read_chat_request(body(response_format=value)).response_format == read


@pytest.mark.parametrize(("value", "param"), [
    ({"type": "grammar"}, "response_format.type"), ("json", "response_format.type"),
    ({"type": "json_schema", "json_schema": {"name": "r"}}, "response_format.json_schema.schema"),
    ({"type": "json_schema"}, "response_format.json_schema.schema"),
])
def test_bad_response_format_is_refused(value, param):
    assert refused(body(response_format=value)).param == param


@pytest.mark.parametrize(("fields", "user_id"), [
    ({"metadata": {"user_id": "m"}, "user": "u", "safety_identifier": "s"}, "m"),
    ({"metadata": {"a": "b"}, "user": "u", "safety_identifier": "s"}, "u"),
    ({"user": "", "safety_identifier": "s"}, "s"),
    ({"user": 5}, None),
])
def test_the_end_user_id_is_the_first_of_metadata_user_and_safety_identifier(fields, user_id):
    assert read_chat_request(body(**fields)).user_id == user_id


@pytest.mark.parametrize(("fields", "param"), [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"functions": []}, "functions"),
    ({"function_call": "auto"}, "function_call"), ({"audio": {"voice": "x"}}, "modalities"),
    ({"modalities": ["text", "audio"]}, "modalities"),
])
def test_what_no_target_can_carry_is_refused(fields, param):
    assert refused(body(**fields)).param == param


def test_what_only_tunes_delivery_is_accepted():
    read_chat_request(body(n=1, logprobs=False, store=True, service_tier="auto", prompt_cache_key="k",
                           frequency_penalty=0.5, presence_penalty=0.5, stream_options="whatever"))


# --- one rule, every target -------------------------------------------------------------------


def test_every_writer_maps_every_reasoning_effort():
    assert set(EFFORT_THINKING_BUDGET) == set(REASONING_EFFORTS)
    assert set(EFFORT_BUDGET_TOKENS) == set(REASONING_EFFORTS) - {"none"}  # none: no thinking block at all
    for effort in REASONING_EFFORTS:
        chat_request_to_gemini(body(reasoning_effort=effort))
        chat_request_to_messages(body(reasoning_effort=effort), upstream_model="c", default_max_tokens=1024)


@pytest.mark.parametrize("bad", [
    body(seed="7"),
    body(parallel_tool_calls=1),
    body(response_format={"type": "json_schema"}),
    body(reasoning_effort="ultra"),
    body(user("q"), {"role": "assistant", "content": "a", "thinking_blocks": [{"type": "summary"}]}),
    body(user([{"type": "image_url", "image_url": {"url": "ftp://x"}}])),
    body(user("q"), {"role": "assistant", "tool_calls": [call("c", "f", "{oops")]}),
    body(tools=[{"type": "function", "function": {"name": ""}}]),
])
def test_both_writers_refuse_bad_input_in_the_same_words(bad):
    with pytest.raises(TranslationError) as to_gemini:
        chat_request_to_gemini(bad)
    with pytest.raises(TranslationError) as to_messages:
        chat_request_to_messages(bad, upstream_model="c", default_max_tokens=1024)
    assert (to_gemini.value.message, to_gemini.value.param) == (to_messages.value.message, to_messages.value.param)
