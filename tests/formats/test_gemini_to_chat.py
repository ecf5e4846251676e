"""Gemini answer -> chat answer, whole and streamed; usage; errors. Plus property tests:
random valid chat requests translate without error, and a stream translates to the same
answer and usage as the whole reply."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from gatewayd.formats.chat_to_gemini import chat_request_to_gemini
from gatewayd.formats.errors import InvalidAnswer
from gatewayd.formats.gemini_to_chat import (
    FINISH_REASONS,
    GeminiToChatStream,
    PromptBlocked,
    blocked_prompt_error,
    gemini_error_to_chat,
    gemini_response_to_chat,
    retry_delay_s,
)
from gatewayd.formats.sse import SSESplitter
from gatewayd.formats.usage import Usage, from_gemini
from gatewayd.sim.behaviour import plan
from gatewayd.sim import gemini as sim_gemini

CID = "chatcmpl-abc"
USAGE = {"promptTokenCount": 120, "candidatesTokenCount": 30, "thoughtsTokenCount": 50,
         "cachedContentTokenCount": 100, "totalTokenCount": 200}


def answer(parts, reason="STOP", usage=USAGE, **extra) -> dict:
    doc = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason, "index": 0}],
           "modelVersion": "gemini-2.5-flash", "responseId": "r1", **extra}
    if usage is not None:
        doc["usageMetadata"] = usage
    return doc


def translate(doc) -> dict:
    return gemini_response_to_chat(doc, model="client-model", created=1700000000, completion_id=CID)


# --- usage ------------------------------------------------------------------------------------


def test_usage_thoughts_are_output_and_cached_content_is_part_of_the_prompt():
    usage = from_gemini(USAGE)
    assert usage == Usage(input_tokens=120, output_tokens=80, cached_tokens=100, reasoning_tokens=50)
    assert usage.uncached_input_tokens == 20


def test_usage_tool_use_prompt_is_input_and_missing_fields_are_zero():
    assert from_gemini({"promptTokenCount": 5, "toolUsePromptTokenCount": 7}) == Usage(12, 0, 0)
    assert from_gemini(None) is None and from_gemini({}) == Usage()
    assert from_gemini({"promptTokenCount": -3, "candidatesTokenCount": True}) == Usage()


# --- whole answers ----------------------------------------------------------------------------


def test_text_answer():
    chat = translate(answer([{"text": "Hello "}, {"text": "world"}]))
    assert chat == {
        "id": CID, "object": "chat.completion", "created": 1700000000, "model": "client-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello world", "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200,
                  "prompt_tokens_details": {"cached_tokens": 100},
                  "completion_tokens_details": {"reasoning_tokens": 50}},
    }


def test_thoughts_become_reasoning_content():
    message = translate(answer([{"text": "Plan. ", "thought": True}, {"text": "Answer."}]))["choices"][0]["message"]
    assert message["content"] == "Answer." and message["reasoning_content"] == "Plan. "


def test_parallel_function_calls_get_generated_ids_and_tool_calls_finish():
    chat = translate(answer([{"text": "Checking."},
                             {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                             {"functionCall": {"name": "now", "args": {}}},
                             {"functionCall": {"name": "bare"}}]))
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Checking."
    assert choice["message"]["tool_calls"] == [
        {"id": "call_abc_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "call_abc_1", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        {"id": "call_abc_2", "type": "function", "function": {"name": "bare", "arguments": "{}"}},
    ]


def test_only_calls_means_content_null_and_nothing_means_empty_string():
    assert translate(answer([{"functionCall": {"name": "f", "args": {}}}]))["choices"][0]["message"]["content"] is None
    empty = translate(answer([], reason="STOP"))
    assert empty["choices"][0]["message"]["content"] == "" and empty["choices"][0]["finish_reason"] == "stop"
    no_content = translate({"candidates": [{"finishReason": "SAFETY"}]})
    assert no_content["choices"][0]["message"]["content"] == ""
    assert no_content["choices"][0]["finish_reason"] == "content_filter"


@pytest.mark.parametrize("reason,expected", [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
    ("BLOCKLIST", "content_filter"), ("PROHIBITED_CONTENT", "content_filter"), ("SPII", "content_filter"),
    ("IMAGE_SAFETY", "content_filter"), ("LANGUAGE", "stop"), ("OTHER", "stop"), ("MALFORMED_FUNCTION_CALL", "stop"),
    ("FINISH_REASON_UNSPECIFIED", "stop"), ("SOMETHING_NEW", "stop"),
])
def test_finish_reasons(reason, expected):
    assert translate(answer([{"text": "x"}], reason=reason))["choices"][0]["finish_reason"] == expected


def test_calls_cut_by_max_tokens_still_read_length():
    chat = translate(answer([{"functionCall": {"name": "f", "args": {}}}], reason="MAX_TOKENS"))
    assert chat["choices"][0]["finish_reason"] == "length"


def test_every_mapped_finish_reason_is_a_chat_one():
    assert set(FINISH_REASONS.values()) <= {"stop", "length", "content_filter"}


def test_a_blocked_prompt_raises_with_its_reason():
    doc = {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []}, "usageMetadata": {"promptTokenCount": 9}}
    with pytest.raises(PromptBlocked) as info:
        translate(doc)
    assert info.value.reason == "SAFETY"
    error = blocked_prompt_error(info.value)["error"]
    assert error["code"] == "content_filter" and error["type"] == "invalid_request_error"
    assert "blockReason SAFETY" in error["message"]
    with pytest.raises(PromptBlocked, match="because reasons"):
        translate({"promptFeedback": {"blockReason": "OTHER", "blockReasonMessage": "because reasons"}})


def test_prompt_feedback_without_block_is_a_normal_answer():
    chat = translate(answer([{"text": "ok"}], promptFeedback={"safetyRatings": []}))
    assert chat["choices"][0]["message"]["content"] == "ok"


@pytest.mark.parametrize("doc", [{}, {"candidates": []}, [], {"usageMetadata": USAGE}])
def test_no_candidate_and_no_block_is_an_invalid_answer(doc):
    with pytest.raises(InvalidAnswer):
        translate(doc)


def test_no_usage_gives_zero_usage_in_the_chat_shape():
    assert translate(answer([{"text": "x"}], usage=None))["usage"]["prompt_tokens"] == 0


# --- streams ----------------------------------------------------------------------------------


def stream(include_usage=True) -> GeminiToChatStream:
    return GeminiToChatStream(model="client-model", created=1700000000, include_usage=include_usage, chunk_id=CID)


def deltas(chunks) -> list:
    return [c["choices"][0]["delta"] for c in chunks if c.get("choices")]


def test_stream_text_thoughts_finish_and_usage():
    s = stream()
    out = s.feed(answer([{"text": "Hmm", "thought": True}], reason=None, usage={"promptTokenCount": 120}))
    out += s.feed(answer([{"text": "Hi "}], reason=None, usage=None))
    assert s.usage == Usage(input_tokens=120) and not s.finished
    out += s.feed(answer([{"text": "there"}], reason="STOP"))
    assert s.finished and s.usage == Usage(120, 80, 100, reasoning_tokens=50)
    assert deltas(out) == [{"role": "assistant", "content": ""}, {"reasoning_content": "Hmm"}, {"content": "Hi "},
                           {"content": "there"}, {}]
    assert out[-2]["choices"][0]["finish_reason"] == "stop"
    assert out[-1]["choices"] == [] and out[-1]["usage"]["completion_tokens"] == 80
    assert {c["id"] for c in out} == {CID} and s.output_text == "HmmHi there"
    assert s.feed(answer([{"text": "late"}])) == []  # nothing after the end


def test_stream_parallel_calls_in_one_event_and_across_events_get_their_own_indexes():
    s = stream(include_usage=False)
    out = s.feed(answer([{"functionCall": {"name": "a", "args": {"x": 1}}},
                         {"functionCall": {"name": "b", "args": {}}}], reason=None))
    out += s.feed(answer([{"functionCall": {"name": "c", "args": {"y": "z"}}}], reason=None))
    out += s.feed(answer([{"text": ""}], reason="STOP"))
    calls = [tc for d in deltas(out) for tc in d.get("tool_calls", ())]
    assert calls == [
        {"index": 0, "id": "call_abc_0", "type": "function", "function": {"name": "a", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"x":1}'}},
        {"index": 1, "id": "call_abc_1", "type": "function", "function": {"name": "b", "arguments": ""}},
        {"index": 1, "function": {"arguments": "{}"}},
        {"index": 2, "id": "call_abc_2", "type": "function", "function": {"name": "c", "arguments": ""}},
        {"index": 2, "function": {"arguments": '{"y":"z"}'}},
    ]
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c.get("choices") for c in out), "no usage chunk without include_usage"


def test_stream_blocked_prompt_raises_on_the_first_event():
    with pytest.raises(PromptBlocked):
        stream().feed({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})


def test_stream_error_event_is_a_chat_error_chunk():
    s = stream()
    s.feed(answer([{"text": "a"}], reason=None))
    out = s.feed({"error": {"code": 500, "message": "boom", "status": "INTERNAL"}})
    assert out == [{"error": {"message": "boom", "type": "api_error", "param": None, "code": "internal"}}]
    assert s.failed and not s.finished


def test_stream_ignores_non_objects():
    assert stream().feed([1, 2]) == []


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status,grpc,kind", [(400, "INVALID_ARGUMENT", "invalid_request_error"),
                                              (403, "PERMISSION_DENIED", "permission_error"),
                                              (429, "RESOURCE_EXHAUSTED", "rate_limit_error"),
                                              (500, "INTERNAL", "api_error"), (503, "UNAVAILABLE", "api_error")])
def test_gemini_errors_in_the_chat_envelope(status, grpc, kind):
    body = orjson.dumps({"error": {"code": status, "message": "It went wrong.", "status": grpc, "details": []}})
    assert gemini_error_to_chat(status, body) == {"error": {"message": "It went wrong.", "type": kind, "param": None,
                                                            "code": grpc.lower()}}


def test_error_array_html_and_chat_shaped_bodies():
    array = orjson.dumps([{"error": {"code": 404, "message": "models/x is not found", "status": "NOT_FOUND"}}])
    assert gemini_error_to_chat(404, array)["error"]["message"] == "models/x is not found"
    assert gemini_error_to_chat(502, b"<html>Bad Gateway</html>")["error"] == {
        "message": "<html>Bad Gateway</html>", "type": "api_error", "param": None, "code": None}
    assert gemini_error_to_chat(500, b"")["error"]["message"] == "upstream answered 500"
    blocked = blocked_prompt_error(PromptBlocked("SAFETY"))
    assert gemini_error_to_chat(400, orjson.dumps(blocked)) == blocked


def _quota(*details) -> bytes:
    return orjson.dumps({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED",
                                   "details": list(details)}})


RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@pytest.mark.parametrize("delay,seconds", [("37s", 37.0), ("1.5s", 1.5), ("0.250s", 0.25), ("0s", 0.0),
                                           ("3600s", 3600.0)])
def test_the_retry_delay_is_read_from_retry_info(delay, seconds):
    """Google sends its hint in the body (a google.protobuf.Duration), not in Retry-After."""
    quota = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "PerMinute"}]}
    assert retry_delay_s(_quota(quota, {"@type": RETRY_INFO, "retryDelay": delay})) == seconds


@pytest.mark.parametrize("body", [
    _quota(), _quota({"@type": RETRY_INFO}), _quota({"@type": RETRY_INFO, "retryDelay": 37}),
    _quota({"@type": RETRY_INFO, "retryDelay": "37"}), _quota({"@type": RETRY_INFO, "retryDelay": "-3s"}),
    _quota({"@type": RETRY_INFO, "retryDelay": "soon"}), _quota({"@type": "other", "retryDelay": "37s"}),
    _quota([{"@type": RETRY_INFO, "retryDelay": "37s"}]), _quota(5),
    orjson.dumps({"error": {"details": {"@type": RETRY_INFO, "retryDelay": "37s"}}}), orjson.dumps({"error": 5}),
    orjson.dumps([{"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "9s"}]}}])[:-3], b"<html>", b"",
])
def test_no_retry_delay_without_a_readable_retry_info(body):
    assert retry_delay_s(body) is None


def test_the_array_form_of_an_error_is_read_too():
    body = orjson.dumps([{"error": {"code": 429, "details": [{"@type": RETRY_INFO, "retryDelay": "9s"}]}}])
    assert retry_delay_s(body) == 9.0


# --- the simulator agrees with the translators -------------------------------------------------


def sim_round(chat_body: dict, stream_it: bool):
    """Translate ``chat_body``, let the simulator's Gemini wire module answer it, translate back."""
    upstream = {**chat_request_to_gemini(chat_body), "model": "gemini-2.5-flash"}
    reply = plan(sim_gemini.extract(upstream))
    if not stream_it:
        return translate(sim_gemini.render(reply, upstream, 1))
    s = stream()
    splitter = SSESplitter()
    chunks = []
    for data, _ in sim_gemini.events(reply, upstream, 1):
        for event in splitter.feed(data):
            chunks.extend(s.feed(orjson.loads(event.data)))
    assert s.finished
    return chunks


def accumulate(chunks: list[dict]) -> dict:
    """What a client gets from a chat stream, in the shape of a whole answer."""
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for tc in delta.get("tool_calls") or ():
                call = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.get("id") or call["id"]
                call["name"] += (tc.get("function") or {}).get("name") or ""
                call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {"content": content, "reasoning": reasoning, "calls": [calls[i] for i in sorted(calls)],
            "finish": finish, "usage": usage}


def whole(chat: dict) -> dict:
    message = chat["choices"][0]["message"]
    return {"content": message["content"] or "", "reasoning": message.get("reasoning_content", ""),
            "calls": [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                      for c in message.get("tool_calls", ())],
            "finish": chat["choices"][0]["finish_reason"], "usage": chat["usage"]}


# --- property tests ---------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_word = st.text("abcdefgh", min_size=1, max_size=8)
_schema_leaf = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
                                {"type": ["string", "null"]}, {"type": "array", "items": {"type": "string"}},
                                {"type": "string", "enum": ["a", "b"]}, {}])
_tool = st.builds(
    lambda name, props, required: {"type": "function", "function": {
        "name": name, "description": "d",
        "parameters": {"type": "object", "properties": props, "required": required[: len(props)],
                       "additionalProperties": False}}},
    _word, st.dictionaries(_word, _schema_leaf, max_size=4), st.lists(_word, max_size=2))
_user_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}),
    st.just({"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "low"}}),
)
_user = st.builds(lambda c: {"role": "user", "content": c}, st.one_of(_text, st.lists(_user_part, max_size=3)))
_system = st.builds(lambda role, c: {"role": role, "content": c}, st.sampled_from(["system", "developer"]), _text)


@st.composite
def _turns(draw):
    """A conversation whose tool results answer earlier calls (what a real client sends)."""
    messages = [draw(_system)] if draw(st.booleans()) else []
    messages.append({"role": "user", "content": draw(_text.filter(str.strip))})  # something to answer
    for turn in range(draw(st.integers(0, 3))):
        messages.append(draw(_user))
        if draw(st.booleans()):
            calls = [{"id": f"call_{turn}_{k}", "type": "function",
                      "function": {"name": draw(_word), "arguments": json.dumps({"q": draw(_text)})}}
                     for k in range(draw(st.integers(0, 3)))]
            messages.append({"role": "assistant", "content": draw(st.one_of(st.none(), _text)),
                             **({"tool_calls": calls} if calls else {})})
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": draw(_text)})
    return messages


_requests = st.builds(
    lambda messages, tools, extra: {"model": "m", "messages": messages, **({"tools": tools} if tools else {}), **extra},
    _turns(), st.lists(_tool, max_size=3),
    st.fixed_dictionaries({}, optional={
        "max_completion_tokens": st.integers(1, 100000), "temperature": st.floats(0, 2), "top_p": st.floats(0, 1),
        "stop": st.one_of(_text, st.lists(_text, max_size=4)), "seed": st.integers(-2**31, 2**31),
        "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"]),
        "tool_choice": st.sampled_from(["auto", "none", "required"]), "stream": st.booleans(),
        "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
        "parallel_tool_calls": st.booleans(), "user": _text,
    }))


@settings(max_examples=200, deadline=None)
@given(_requests)
def test_random_valid_chat_requests_translate(request):
    out = chat_request_to_gemini(request)
    assert out["contents"] or request["messages"]
    for content in out["contents"]:
        assert content["role"] in ("user", "model") and content["parts"]
        for part in content["parts"]:
            assert len(part) == 1 and part.get("text", "x").strip()
    roles = [c["role"] for c in out["contents"]]
    assert all(a != b for a, b in zip(roles, roles[1:])), "same roles merge"
    orjson.dumps(out)  # plain JSON all the way down


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["[[sim:words=5]]", "[[sim:tools=3]]", "[[sim:text_then_tool]] [[sim:tools=2]]",
                        "[[sim:thinking]] [[sim:words=4]]", "[[sim:cache_read=30]] hi", "plain question",
                        "[[sim:words=30]]"]),
       st.lists(_tool, min_size=0, max_size=3, unique_by=lambda t: t["function"]["name"]),
       st.one_of(st.none(), st.integers(1, 40)), st.sampled_from([None, "low", "none"]))
def test_stream_translation_is_consistent_with_the_whole_answer(prompt, tools, max_tokens, effort):
    request = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    if tools:
        request["tools"] = tools
    if max_tokens is not None:
        request["max_completion_tokens"] = max_tokens
    if effort is not None:
        request["reasoning_effort"] = effort
    streamed = accumulate(sim_round(request, True))
    expected = whole(sim_round(request, False))
    assert streamed == expected


# --- thought signatures ride in tool call ids ---------------------------------------------------


def test_a_signed_call_carries_its_signature_in_the_id_and_back():
    doc = answer([{"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2lnbmVk/+="},
                  {"functionCall": {"name": "g", "args": {}}}])
    calls = translate(doc)["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_abc_0__thought__c2lnbmVk/+=", "call_abc_1"]
    s = stream()
    chunks = s.feed(doc)
    assert [tc["id"] for d in deltas(chunks) for tc in d.get("tool_calls", ()) if "id" in tc] == [c["id"] for c in calls]
    echoed = chat_request_to_gemini({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "one"},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "two"}]})
    assert echoed["contents"][1]["parts"] == [
        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2lnbmVk/+="},
        {"functionCall": {"name": "g", "args": {}}}]
    assert [p["functionResponse"]["name"] for p in echoed["contents"][2]["parts"]] == ["f", "g"]


WRONG_SHAPES = [
    {"candidates": 5}, {"candidates": [5]}, {"candidates": [{"content": 5}]},
    {"candidates": [{"content": {"parts": 5}}]}, {"candidates": [{"content": {"parts": [5]}}]},
    {"candidates": [{"content": {"parts": [{"text": 5}]}}]},
    {"candidates": [{"content": {"parts": [{"functionCall": 5}]}}]},
    {"candidates": [{"content": {"parts": [{"functionCall": {"name": 5}}]}}]},
    {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": [1]}}]}}]},
]


@pytest.mark.parametrize("doc", WRONG_SHAPES)
def test_a_candidate_of_the_wrong_shape_is_an_invalid_answer_not_an_empty_success(doc):
    with pytest.raises(InvalidAnswer):
        translate(doc)


@pytest.mark.parametrize("doc", WRONG_SHAPES)
def test_a_stream_event_of_the_wrong_shape_is_an_invalid_answer_and_changes_nothing(doc):
    s = stream()
    first = s.feed(answer([{"text": "a"}], reason=None, usage={"promptTokenCount": 5}))
    with pytest.raises(InvalidAnswer):
        s.feed({**doc, "usageMetadata": {"promptTokenCount": 99}})
    assert s.usage == Usage(input_tokens=5) and s.output_text == "a" and not s.finished
    assert deltas(first)[-1] == {"content": "a"}


def test_absent_content_and_parts_are_not_wrong_shapes():
    assert stream().feed({"candidates": [{"finishReason": "STOP"}]})[-2]["choices"][0]["finish_reason"] == "stop"
    assert stream().feed({"candidates": [{"content": {"role": "model"}}], "usageMetadata": USAGE})
    assert stream().feed({"usageMetadata": USAGE}) and stream().feed({"candidates": []})
    assert translate(answer([{"text": None, "functionCall": {"name": "f"}}]))["choices"][0]["message"]["tool_calls"]
