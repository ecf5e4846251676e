"""Messages-format answers -> chat-format answers, whole and streamed."""

from __future__ import annotations

import orjson
import pytest

from gatewayd.formats.chat_to_messages import chat_request_to_messages
from gatewayd.formats.messages_to_chat import MessagesToChatStream, chat_usage, messages_response_to_chat
from gatewayd.formats.usage import Usage

USAGE = {"input_tokens": 100, "output_tokens": 40, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 20}
CHAT_USAGE = {"prompt_tokens": 150, "completion_tokens": 40, "total_tokens": 190, "prompt_tokens_details": {"cached_tokens": 30}}


def message(*content, stop_reason="end_turn", usage=USAGE) -> dict:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def to_chat(msg: dict) -> dict:
    return messages_response_to_chat(msg, model="client-id", created=1700000000)


# --- whole responses ------------------------------------------------------------------------


def test_text_answer():
    out = to_chat(message({"type": "text", "text": "Hello"}, {"type": "text", "text": " world"}))
    assert out == {
        "id": "chatcmpl-msg_01",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "client-id",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello world", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": CHAT_USAGE,
    }


def test_tool_calls_only_have_null_content_and_compact_json_arguments():
    out = to_chat(
        message(
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
            stop_reason="tool_use",
        )
    )
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    ]


def test_text_then_tool_call_keeps_both():
    out = to_chat(
        message({"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}, stop_reason="tool_use")
    )
    assert out["choices"][0]["message"]["content"] == "Checking."
    assert len(out["choices"][0]["message"]["tool_calls"]) == 1


def test_empty_answer_has_empty_string_content():
    assert to_chat(message())["choices"][0]["message"]["content"] == ""


def test_thinking_becomes_reasoning_content_and_echoable_thinking_blocks():
    thinking = {"type": "thinking", "thinking": "Step 1. ", "signature": "sig-1"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    thinking2 = {"type": "thinking", "thinking": "Step 2.", "signature": "sig-2"}
    out = to_chat(message(thinking, redacted, thinking2, {"type": "text", "text": "Answer"}))
    chat_message = out["choices"][0]["message"]
    assert chat_message["content"] == "Answer"
    assert chat_message["reasoning_content"] == "Step 1. Step 2."
    assert chat_message["thinking_blocks"] == [thinking, redacted, thinking2]


def test_no_thinking_means_no_reasoning_fields():
    chat_message = to_chat(message({"type": "text", "text": "x"}))["choices"][0]["message"]
    assert "reasoning_content" not in chat_message and "thinking_blocks" not in chat_message


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        (None, "stop"),
        ("something_new", "stop"),
    ],
)
def test_stop_reason_table(stop_reason, finish_reason):
    assert to_chat(message(stop_reason=stop_reason))["choices"][0]["finish_reason"] == finish_reason


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (USAGE, CHAT_USAGE),
        ({"input_tokens": 7, "output_tokens": 3}, {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}}),
        (None, {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": 0}}),
    ],
)
def test_usage_counts_cache_reads_and_writes_as_prompt(usage, expected):
    assert to_chat(message(usage=usage))["usage"] == expected


def test_chat_usage_of_a_normalised_usage():
    assert chat_usage(Usage(input_tokens=10, output_tokens=5, cached_tokens=4, cache_write_tokens=2)) == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_answer_with_thinking_and_tools_round_trips_through_request_translation():
    """What we emit, a client echoes back; the echo must be a valid Anthropic turn."""
    answer = message(
        {"type": "thinking", "thinking": "Need weather.", "signature": "sig"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        stop_reason="tool_use",
    )
    assistant = to_chat(answer)["choices"][0]["message"]
    body = {
        "model": "client-id",
        "messages": [{"role": "user", "content": "Weather?"}, assistant, {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}],
        "reasoning_effort": "low",
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    }
    out = chat_request_to_messages(body, upstream_model="claude-up", default_max_tokens=8000)
    assert out["messages"][1]["content"] == answer["content"]
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048}


# --- streams --------------------------------------------------------------------------------


def start(input_tokens=100, cache_read=30, cache_write=20):
    usage = {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": cache_write}
    msg = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-up", "content": [], "stop_reason": None, "usage": usage}
    return ("message_start", {"type": "message_start", "message": msg})


def block_start(index, block):
    return ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def delta(index, delta_body):
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta_body})


def text(index, value):
    return delta(index, {"type": "text_delta", "text": value})


def json_fragment(index, value):
    return delta(index, {"type": "input_json_delta", "partial_json": value})


def block_stop(index):
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason="end_turn", output_tokens=40):
    return ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": output_tokens}})


STOP = ("message_stop", {"type": "message_stop"})
PING = ("ping", {"type": "ping"})


def run(events, include_usage=False, chunk_id=None):
    stream = MessagesToChatStream(model="client-id", created=1700000000, include_usage=include_usage, chunk_id=chunk_id)
    chunks = []
    for event, data in events:
        chunks.extend(stream.feed(event, data))
    return stream, chunks


def deltas(chunks):
    return [c["choices"][0]["delta"] for c in chunks if c.get("choices")]


def accumulated_tool_calls(chunks) -> dict[int, dict]:
    """What a chat client rebuilds from the stream, by tool index."""
    calls: dict[int, dict] = {}
    for d in deltas(chunks):
        for piece in d.get("tool_calls", []):
            entry = calls.setdefault(piece["index"], {"id": None, "name": None, "arguments": ""})
            entry["id"] = piece.get("id") or entry["id"]
            entry["name"] = piece.get("function", {}).get("name") or entry["name"]
            entry["arguments"] += piece.get("function", {}).get("arguments", "")
    return calls


TEXT_STREAM = [
    start(),
    block_start(0, {"type": "text", "text": ""}),
    PING,
    text(0, "Hel"),
    text(0, "lo"),
    block_stop(0),
    message_delta(),
    STOP,
]


def test_text_stream_chunk_by_chunk():
    stream, chunks = run(TEXT_STREAM)
    envelope = {"id": "chatcmpl-msg_01", "object": "chat.completion.chunk", "created": 1700000000, "model": "client-id"}
    assert chunks == [
        {**envelope, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]},
        {**envelope, "choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": None, "finish_reason": None}]},
        {**envelope, "choices": [{"index": 0, "delta": {"content": "lo"}, "logprobs": None, "finish_reason": None}]},
        {**envelope, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]},
    ]
    assert stream.finished and not stream.failed
    assert stream.output_text == "Hello"


@pytest.mark.parametrize("include_usage", [True, False])
def test_include_usage_adds_a_final_usage_chunk_with_empty_choices(include_usage):
    stream, chunks = run(TEXT_STREAM, include_usage=include_usage)
    assert stream.usage == Usage(input_tokens=150, output_tokens=40, cached_tokens=30, cache_write_tokens=20)
    if include_usage:
        assert chunks[-1] == {
            "id": "chatcmpl-msg_01",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "client-id",
            "choices": [],
            "usage": CHAT_USAGE,
        }
        assert len(chunks) == 5
    else:
        assert all(c["choices"] for c in chunks) and len(chunks) == 4


def test_chunk_id_given_by_the_caller_is_used():
    _, chunks = run(TEXT_STREAM, chunk_id="chatcmpl-fixed")
    assert {c["id"] for c in chunks} == {"chatcmpl-fixed"}


def test_tool_call_after_text_gets_tool_index_zero():
    _, chunks = run(
        [
            start(),
            block_start(0, {"type": "text", "text": ""}),
            text(0, "Checking."),
            block_stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
            json_fragment(1, ""),
            json_fragment(1, '{"city":'),
            json_fragment(1, ' "Paris"}'),
            block_stop(1),
            message_delta("tool_use"),
            STOP,
        ]
    )
    ds = deltas(chunks)
    assert ds[2] == {"tool_calls": [{"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}
    assert ds[3] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_parallel_tool_calls_with_fragmented_arguments():
    first, second = {"city": "Paris", "unit": "c"}, {"city": "Rome", "days": [1, 2]}
    first_json, second_json = orjson.dumps(first).decode(), orjson.dumps(second).decode()
    events = [start(), block_start(0, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}})]
    events += [json_fragment(0, first_json[i : i + 5]) for i in range(0, len(first_json), 5)]
    events += [block_stop(0), block_start(1, {"type": "tool_use", "id": "toolu_b", "name": "forecast", "input": {}})]
    events += [json_fragment(1, second_json[i : i + 3]) for i in range(0, len(second_json), 3)]
    events += [block_stop(1), message_delta("tool_use"), STOP]
    stream, chunks = run(events)
    calls = accumulated_tool_calls(chunks)
    assert sorted(calls) == [0, 1]
    assert calls[0] == {"id": "toolu_a", "name": "get_weather", "arguments": first_json}
    assert calls[1] == {"id": "toolu_b", "name": "forecast", "arguments": second_json}
    assert orjson.loads(calls[0]["arguments"]) == first and orjson.loads(calls[1]["arguments"]) == second
    assert first_json in stream.output_text and second_json in stream.output_text


def test_tool_input_sent_whole_at_block_start_is_emitted_at_block_stop():
    _, chunks = run([start(), block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}), block_stop(0), message_delta("tool_use"), STOP])
    assert accumulated_tool_calls(chunks)[0]["arguments"] == '{"a":1}'


def test_thinking_stream_emits_reasoning_content_then_signed_thinking_blocks():
    stream, chunks = run(
        [
            start(),
            block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
            delta(0, {"type": "thinking_delta", "thinking": "think."}),
            delta(0, {"type": "signature_delta", "signature": "sig-xyz"}),
            block_stop(0),
            block_start(1, {"type": "redacted_thinking", "data": "opaque"}),
            block_stop(1),
            block_start(2, {"type": "text", "text": ""}),
            text(2, "42"),
            block_stop(2),
            message_delta(),
            STOP,
        ]
    )
    assert deltas(chunks)[1:] == [
        {"reasoning_content": "Let me "},
        {"reasoning_content": "think."},
        {"thinking_blocks": [{"index": 0, "type": "thinking", "thinking": "Let me think.", "signature": "sig-xyz"}]},
        {"thinking_blocks": [{"index": 1, "type": "redacted_thinking", "data": "opaque"}]},
        {"content": "42"},
        {},
    ]
    assert stream.output_text == "Let me think.42"


def test_error_event_mid_stream():
    stream, chunks = run(
        [
            start(),
            block_start(0, {"type": "text", "text": ""}),
            text(0, "partial"),
            ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ],
        include_usage=True,
    )
    assert chunks[-1] == {"error": {"message": "Overloaded", "type": "overloaded_error", "param": None, "code": None}}
    assert stream.failed and not stream.finished
    assert stream.output_text == "partial"
    assert stream.usage == Usage(input_tokens=150, output_tokens=1, cached_tokens=30, cache_write_tokens=20)


def test_usage_is_none_before_message_start():
    assert MessagesToChatStream(model="m", created=0, include_usage=True).usage is None


def test_message_delta_may_restate_input_usage():
    events = [start(input_tokens=10, cache_read=0, cache_write=0), ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 12, "output_tokens": 5}}), STOP]
    stream, _ = run(events)
    assert stream.usage == Usage(input_tokens=12, output_tokens=5)


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"), ("refusal", "content_filter"), ("stop_sequence", "stop"), ("pause_turn", "stop")],
)
def test_stream_finish_reason_table(stop_reason, finish_reason):
    _, chunks = run([start(), message_delta(stop_reason), STOP])
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}


def test_message_stop_without_message_delta_still_finishes():
    stream, chunks = run([start(), STOP])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert stream.finished


@pytest.mark.parametrize(
    "event",
    [
        PING,
        ("unknown_event", {"type": "unknown_event"}),
        delta(0, {"type": "citations_delta", "citation": {}}),
        delta(0, {"type": "future_delta"}),
        block_start(3, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
        block_stop(9),
        ("content_block_delta", "not a dict"),
    ],
)
def test_unknown_and_ignored_events_produce_nothing(event):
    stream = MessagesToChatStream(model="m", created=0, include_usage=False)
    stream.feed(*start())
    assert stream.feed(*event) == []


def test_streamed_chunks_accumulate_like_the_openai_sdk():
    """The SDK's own stream accumulator must be able to merge every chunk we send,
    thinking_blocks included (list entries need an ``index``)."""
    from openai.lib.streaming._deltas import accumulate_delta

    _, chunks = run(
        [
            start(),
            block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            delta(0, {"type": "thinking_delta", "thinking": "a"}),
            delta(0, {"type": "signature_delta", "signature": "s1"}),
            block_stop(0),
            block_start(1, {"type": "redacted_thinking", "data": "r"}),
            block_stop(1),
            block_start(2, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}),
            json_fragment(2, '{"x":'),
            json_fragment(2, "1}"),
            block_stop(2),
            block_start(3, {"type": "tool_use", "id": "t2", "name": "g", "input": {}}),
            json_fragment(3, "{}"),
            block_stop(3),
            message_delta("tool_use"),
            STOP,
        ],
        include_usage=True,
    )
    acc: dict = {}
    for d in deltas(chunks):
        acc = accumulate_delta(acc, orjson.loads(orjson.dumps(d)))
    assert acc["reasoning_content"] == "a"
    assert [(b["type"], b.get("signature")) for b in acc["thinking_blocks"]] == [("thinking", "s1"), ("redacted_thinking", None)]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in acc["tool_calls"]] == [("t1", "f", '{"x":1}'), ("t2", "g", "{}")]


def test_chunks_parse_as_openai_sdk_types():
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    _, chunks = run(TEXT_STREAM, include_usage=True)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    ChatCompletion.model_validate(to_chat(message({"type": "tool_use", "id": "t", "name": "f", "input": {}}, stop_reason="tool_use")))
