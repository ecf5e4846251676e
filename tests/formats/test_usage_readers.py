"""The usage readers: every billed dimension from each provider's own report, in the wire
shapes of the official SDKs' types (openai-python ``CompletionUsage`` / ``ResponseUsage`` and
output items, anthropic-sdk-python ``Usage`` / ``MessageDeltaUsage``, google-genai
``GenerateContentResponseUsageMetadata``), and hostile shapes that must neither raise nor give
a negative count or a part larger than its total."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from gatewayd.formats import usage as u
from gatewayd.formats.usage import Usage

# --- OpenAI chat -------------------------------------------------------------------------------

CHAT_COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "service_tier": "priority",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {
        "prompt_tokens": 1000, "completion_tokens": 700, "total_tokens": 1700,
        "prompt_tokens_details": {"cached_tokens": 600, "audio_tokens": 50},
        "completion_tokens_details": {"reasoning_tokens": 400, "audio_tokens": 30,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    },
}


def test_chat_completion_reads_cached_audio_reasoning_and_tier():
    assert u.from_chat_completion(CHAT_COMPLETION) == Usage(
        input_tokens=1000, output_tokens=700, cached_tokens=600, audio_input_tokens=50,
        reasoning_tokens=400, audio_output_tokens=30, service_tier="priority")


def test_chat_usage_alone_and_the_final_chunk():
    chunk = {"object": "chat.completion.chunk", "choices": [], "service_tier": "default",
             "usage": {"prompt_tokens": 9, "completion_tokens": 2}}
    assert u.from_chat_completion(chunk) == Usage(9, 2, service_tier="default")
    assert u.from_chat({"prompt_tokens": 3}) == Usage(3)
    assert u.from_chat_completion({"choices": []}) is None
    assert u.from_chat_completion(None) is None and u.from_chat_completion([1]) is None


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": "10", "completion_tokens": 2.5},
    {"prompt_tokens": -10, "completion_tokens": True},
    {"prompt_tokens_details": "x", "completion_tokens_details": [1, 2]},
    {"prompt_tokens_details": {"cached_tokens": "5", "audio_tokens": None}},
    {"completion_tokens_details": {"reasoning_tokens": -1, "audio_tokens": {}}},
])
def test_chat_hostile_counts_are_zero(usage):
    assert u.from_chat(usage) == Usage()


def test_chat_parts_never_exceed_their_totals():
    usage = u.from_chat({"prompt_tokens": 10, "completion_tokens": 5,
                         "prompt_tokens_details": {"cached_tokens": 50, "audio_tokens": 99},
                         "completion_tokens_details": {"reasoning_tokens": 80, "audio_tokens": 70}})
    assert usage == Usage(10, 5, cached_tokens=10, audio_input_tokens=10, reasoning_tokens=5, audio_output_tokens=5)


@pytest.mark.parametrize("tier,read", [("flex", "flex"), ("", None), (5, None), ("x" * 65, None), (None, None),
                                       (["priority"], None)])
def test_service_tier_is_a_short_string_or_none(tier, read):
    assert u.from_chat_completion({"usage": {}, "service_tier": tier}).service_tier == read


# --- OpenAI Responses --------------------------------------------------------------------------

RESPONSE = {
    "id": "resp_1", "object": "response", "status": "completed", "service_tier": "priority",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "a"}},
        {"type": "web_search_call", "id": "ws_2", "status": "completed", "action": {"type": "open_page"}},
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
        {"type": "code_interpreter_call", "id": "ci_1", "container_id": "cntr_a", "status": "completed"},
        {"type": "code_interpreter_call", "id": "ci_2", "container_id": "cntr_a", "status": "completed"},
        {"type": "code_interpreter_call", "id": "ci_3", "container_id": "cntr_b", "status": "completed"},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "aGk="},
        {"type": "function_call", "id": "fc_1", "name": "f", "arguments": "{}"},
        {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
    ],
    "usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1500},
              "output_tokens": 900, "output_tokens_details": {"reasoning_tokens": 800}, "total_tokens": 2900},
}


def test_response_reads_tokens_tier_and_tool_calls_from_its_output():
    assert u.from_response(RESPONSE) == Usage(
        input_tokens=2000, output_tokens=900, cached_tokens=1500, reasoning_tokens=800,
        tool_calls=(("code_interpreter", 2), ("file_search", 1), ("image_generation", 1), ("web_search", 2)),
        service_tier="priority")


def test_response_without_usage_is_none_but_its_tool_calls_are_known():
    doc = {k: v for k, v in RESPONSE.items() if k != "usage"}
    assert u.from_response(doc) is None
    assert dict(u.response_tool_calls(doc["output"]))["web_search"] == 2


def test_code_interpreter_items_without_a_container_count_as_one_container():
    output = [{"type": "code_interpreter_call"}, {"type": "code_interpreter_call", "container_id": 5},
              {"type": "code_interpreter_call", "container_id": "c1"}]
    assert u.response_tool_calls(output) == (("code_interpreter", 2),)


@pytest.mark.parametrize("output", [None, "x", 5, [None, 1, "web_search_call", [], {"type": 5}, {"type": None},
                                                   {"type": "web_search_callx"}, {}]])
def test_hostile_output_counts_nothing(output):
    assert u.response_tool_calls(output) == ()
    assert u.from_response({"usage": {"input_tokens": 1}, "output": output}) == Usage(1)


def test_responses_usage_hostile_details():
    assert u.from_responses({"input_tokens": 5, "input_tokens_details": None, "output_tokens_details": "x"}) == Usage(5)
    assert u.from_responses({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 9},
                             "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 7}}) \
        == Usage(5, 2, cached_tokens=5, reasoning_tokens=2)
    assert u.from_response("resp") is None and u.from_response({"usage": [1]}) is None


def test_max_tool_calls_takes_the_larger_count_per_tool():
    assert u.max_tool_calls((("web_search", 2),), (("web_search", 3), ("file_search", 1)), ()) \
        == (("file_search", 1), ("web_search", 3))


# --- Anthropic messages ------------------------------------------------------------------------

MESSAGE_USAGE = {
    "input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 2000,
    "cache_creation_input_tokens": 3000,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
    "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 2},
    "service_tier": "priority",
    "output_tokens_details": {"thinking_tokens": 30},
}


def test_messages_usage_reads_1h_writes_server_tools_tier_and_thinking():
    assert u.from_messages(MESSAGE_USAGE) == Usage(
        input_tokens=5100, output_tokens=50, cached_tokens=2000, cache_write_tokens=3000,
        cache_write_1h_tokens=2000, reasoning_tokens=30,
        tool_calls=(("web_fetch", 2), ("web_search", 3)), service_tier="priority")


def test_cache_writes_are_at_least_the_breakdown():
    usage = u.from_messages({"input_tokens": 1, "cache_creation_input_tokens": 10,
                             "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30}})
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens, usage.input_tokens) == (50, 30, 51)
    only_1h = u.from_messages({"cache_creation": {"ephemeral_1h_input_tokens": 7}})
    assert (only_1h.cache_write_tokens, only_1h.cache_write_1h_tokens) == (7, 7)


@pytest.mark.parametrize("usage", [
    {"cache_creation": "1h", "server_tool_use": [3], "service_tier": 3},
    {"cache_creation": {"ephemeral_1h_input_tokens": "5"}, "server_tool_use": {"web_search_requests": -3}},
    {"server_tool_use": {"web_search_requests": True, "web_fetch_requests": 1.0}},
    {"input_tokens": None, "output_tokens": "7", "output_tokens_details": {"thinking_tokens": 99}},
])
def test_messages_hostile_usage_is_zero(usage):
    assert u.from_messages(usage) == Usage()


def test_message_counts_code_execution_containers_and_prefers_reported_tool_counts():
    message = {"type": "message", "container": {"id": "container_1", "expires_at": "x"},
               "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "a"}},
                           {"type": "server_tool_use", "id": "s2", "name": "web_search", "input": {"query": "b"}},
                           {"type": "server_tool_use", "id": "s3", "name": "code_execution", "input": {}},
                           {"type": "text", "text": "done"}],
               "usage": {"input_tokens": 10, "output_tokens": 5, "server_tool_use": {"web_search_requests": 1}}}
    # the provider says one search was billed (the other failed): its count stands
    assert u.from_message(message).tool_calls == (("code_interpreter", 1), ("web_search", 1))
    no_report = {**message, "usage": {"input_tokens": 10, "output_tokens": 5}}
    assert u.from_message(no_report).tool_calls == (("code_interpreter", 1), ("web_search", 2))
    assert u.from_message({**message, "usage": None}) is None
    assert u.message_tally({**message, "usage": None}).usage(complete=True).tool_calls \
        == (("code_interpreter", 1), ("web_search", 2))


def test_messages_stream_tally_start_delta_and_blocks():
    tally = u.MessagesTally()
    tally.feed("message_start", {"type": "message_start", "message": {"usage": {
        "input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5,
        "cache_creation": {"ephemeral_1h_input_tokens": 4}, "service_tier": "standard"}}})
    tally.feed("content_block_start", {"index": 0, "content_block": {"type": "server_tool_use", "name": "web_search"}})
    tally.feed("content_block_start", {"index": 1, "content_block": {"type": "server_tool_use", "name": "web_fetch"}})
    tally.feed("content_block_start", {"index": 2, "content_block": {"type": "server_tool_use", "name": "unknown"}})
    # cut here: the blocks seen are the calls made
    assert tally.usage(complete=False) == Usage(19, 1, cached_tokens=5, cache_write_tokens=4, cache_write_1h_tokens=4,
                                               tool_calls=(("web_fetch", 1), ("web_search", 1)),
                                               service_tier="standard")
    tally.feed(None, {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {
        "output_tokens": 80, "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}})
    done = tally.usage(complete=True)
    assert (done.input_tokens, done.output_tokens, done.cache_write_1h_tokens) == (19, 80, 4)
    assert done.tool_calls == (("web_search", 1),) and done.service_tier == "standard"


def test_message_delta_counts_are_cumulative_never_lowered():
    start = u.from_messages({"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 8})
    merged = u.merge_messages_stream(start, {"input_tokens": 3, "output_tokens": 40, "cache_creation_input_tokens": 6})
    assert merged == Usage(input_tokens=24, output_tokens=40, cached_tokens=8, cache_write_tokens=6)
    assert u.merge_messages_stream(None, {"output_tokens": 4}) == Usage(0, 4)
    assert u.merge_messages_stream(start, None) is start and u.merge_messages_stream(start, "x") is start


def test_messages_tally_container_in_message_delta():
    tally = u.MessagesTally()
    tally.feed("message_delta", {"delta": {"container": {"id": "c1"}}, "usage": {"output_tokens": 3}})
    tally.feed("message_delta", {"delta": {"container": {"id": "c1"}}, "usage": {"output_tokens": 4}})
    assert tally.usage(complete=True) == Usage(0, 4, tool_calls=(("code_interpreter", 1),))


@pytest.mark.parametrize("event,data", [("message_start", None), ("message_start", {"message": 5}),
                                        ("message_delta", []), ("message_delta", {"usage": "x", "delta": 3}),
                                        ("content_block_start", {"content_block": "server_tool_use"}),
                                        (None, 7), ("ping", {})])
def test_messages_tally_hostile_events(event, data):
    tally = u.MessagesTally()
    tally.feed(event, data)
    assert tally.usage(complete=True) is None


# --- Gemini ------------------------------------------------------------------------------------

GEMINI_META = {
    "promptTokenCount": 1000, "cachedContentTokenCount": 200, "candidatesTokenCount": 300,
    "thoughtsTokenCount": 500, "toolUsePromptTokenCount": 40, "totalTokenCount": 1840,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 700}, {"modality": "AUDIO", "tokenCount": 300}],
    "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": 40}, {"modality": "AUDIO", "tokenCount": 100},
                                {"modality": "IMAGE", "tokenCount": 160}],
}


def test_gemini_usage_reads_thoughts_and_modalities():
    assert u.from_gemini(GEMINI_META) == Usage(
        input_tokens=1040, output_tokens=800, cached_tokens=200, reasoning_tokens=500,
        audio_input_tokens=300, audio_output_tokens=100, image_output_tokens=160)


@pytest.mark.parametrize("meta", [
    {"promptTokensDetails": "AUDIO", "candidatesTokensDetails": {"modality": "AUDIO"}},
    {"promptTokensDetails": [None, 5, {"modality": "AUDIO", "tokenCount": "9"}, {"modality": "AUDIO", "tokenCount": -4}]},
    {"thoughtsTokenCount": -5, "cachedContentTokenCount": "3"},
])
def test_gemini_hostile_metadata_is_zero(meta):
    assert u.from_gemini(meta) == Usage()


def test_gemini_parts_never_exceed_totals():
    usage = u.from_gemini({"promptTokenCount": 5, "candidatesTokenCount": 10,
                           "promptTokensDetails": [{"modality": "AUDIO", "tokenCount": 50}],
                           "candidatesTokensDetails": [{"modality": "AUDIO", "tokenCount": 8},
                                                       {"modality": "IMAGE", "tokenCount": 8}]})
    assert (usage.audio_input_tokens, usage.audio_output_tokens, usage.image_output_tokens) == (5, 8, 2)


def test_gemini_grounding_queries_are_web_search_calls():
    doc = {"candidates": [{"index": 0, "groundingMetadata": {"webSearchQueries": ["a", "b", 3]}},
                          {"groundingMetadata": {"webSearchQueries": ["c"]}}],
           "usageMetadata": {"promptTokenCount": 5}}
    assert u.from_gemini_answer(doc) == Usage(5, tool_calls=(("web_search", 3),))
    assert u.from_gemini_answer({"candidates": doc["candidates"]}) is None


def test_gemini_stream_tally_keeps_the_most_queries_per_candidate():
    tally = u.GeminiTally()
    grounded = {"candidates": [{"index": 0, "groundingMetadata": {"webSearchQueries": ["a", "b"]}}]}
    tally.feed(grounded)
    assert tally.usage == Usage(tool_calls=(("web_search", 2),))  # no usage yet: the queries still known
    tally.feed({**grounded, "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3}})
    assert tally.usage == Usage(7, 3, tool_calls=(("web_search", 2),))


@pytest.mark.parametrize("doc", [None, [], {"candidates": "x"}, {"candidates": [None, {"groundingMetadata": 5}]},
                                 {"candidates": [{"groundingMetadata": {"webSearchQueries": "abc"}}]},
                                 {"candidates": [{"index": True, "groundingMetadata": {"webSearchQueries": []}}]}])
def test_gemini_hostile_grounding(doc):
    tally = u.GeminiTally()
    tally.feed(doc)
    assert tally.usage is None


# --- every reader, any JSON ------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**12) | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from([
                        "usage", "prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                        "prompt_tokens_details", "completion_tokens_details", "cached_tokens", "audio_tokens",
                        "reasoning_tokens", "service_tier", "output", "type", "container_id", "cache_creation",
                        "ephemeral_1h_input_tokens", "cache_creation_input_tokens", "server_tool_use",
                        "web_search_requests", "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
                        "promptTokensDetails", "modality", "tokenCount", "candidates", "groundingMetadata",
                        "webSearchQueries", "message", "content", "name", "delta", "container", "id",
                        "web_search_call", "code_interpreter_call", "server_tool_use", "AUDIO"]), inner, max_size=5),
                    max_leaves=25)


def _sound(usage: Usage | None) -> None:
    if usage is None:
        return
    counts = attrs.asdict(usage, recurse=False)
    assert all(v >= 0 for k, v in counts.items() if k.endswith("_tokens"))
    assert usage.cached_tokens <= usage.input_tokens and usage.audio_input_tokens <= usage.input_tokens
    assert usage.cache_write_1h_tokens <= usage.cache_write_tokens <= usage.input_tokens
    assert usage.reasoning_tokens <= usage.output_tokens
    assert usage.audio_output_tokens + usage.image_output_tokens <= usage.output_tokens
    assert all(isinstance(n, str) and c > 0 for n, c in usage.tool_calls)
    assert usage.service_tier is None or isinstance(usage.service_tier, str)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_no_reader_raises_or_goes_negative_on_any_json(doc):
    for reader in (u.from_chat, u.from_chat_completion, u.from_responses, u.from_response, u.from_messages,
                   u.from_message, u.from_gemini, u.from_gemini_answer):
        _sound(reader(doc))
    messages, gemini = u.MessagesTally(), u.GeminiTally()
    for event in ("message_start", "message_delta", "content_block_start", None):
        messages.feed(event, doc)
    gemini.feed(doc)
    _sound(messages.usage(complete=True))
    _sound(messages.usage(complete=False))
    _sound(gemini.usage)
    assert all(c > 0 for _, c in u.response_tool_calls(doc))


def test_messages_final_delta_lowers_the_placeholder_output():
    """message_start says output_tokens 1 before anything is generated; an empty answer's
    message_delta says 0, and that final count is what Anthropic bills (found by
    tests/test_money_property_live.py)."""
    tally = u.MessagesTally()
    tally.feed("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 6, "output_tokens": 1}}})
    tally.feed("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": 0}})
    usage = tally.usage(True)
    assert (usage.input_tokens, usage.output_tokens) == (6, 0)
