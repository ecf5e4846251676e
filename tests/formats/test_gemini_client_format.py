"""The Gemini client format's pure translators: a Gemini request -> chat, a chat answer and
stream -> Gemini (gatewayd.formats.gemini_request_to_chat, chat_to_gemini_response)."""

from __future__ import annotations

import orjson
import pytest

from gatewayd.formats.chat_to_gemini_response import ChatToGeminiStream, Framing, chat_response_to_gemini
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.gemini_request_to_chat import gemini_request_to_chat, json_schema_from_gemini
from gatewayd.formats.usage import Usage


def chat(body: dict, stream: bool = False):
    return gemini_request_to_chat(body, model="m", stream=stream)


def test_contents_system_tools_and_a_function_round_trip():
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief"}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather?"},
                                       {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
            {"role": "model", "parts": [{"text": "t", "thought": True, "thoughtSignature": "sig"},
                                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 21}}}]},
        ],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {
            "type": "OBJECT", "properties": {"city": {"type": "STRING", "nullable": True}}, "required": ["city"]}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "generationConfig": {"temperature": 0.5, "topP": 0.9, "topK": 40, "maxOutputTokens": 100,
                             "stopSequences": ["END"], "thinkingConfig": {"thinkingBudget": 2048,
                                                                          "includeThoughts": True}},
    }
    asked = chat(body, stream=True)
    out = asked.body
    assert out["messages"][0] == {"role": "system", "content": "Be brief"}
    assert out["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assistant = out["messages"][2]
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert assistant["thinking_blocks"] == [{"type": "thinking", "thinking": "t", "signature": "sig"}]
    assert out["messages"][3] == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"],
                                  "content": '{"temp":21}'}
    assert out["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"city": {"type": ["string", "null"]}}, "required": ["city"]}
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (out["temperature"], out["top_p"], out["max_completion_tokens"], out["stop"]) == (0.5, 0.9, 100, ["END"])
    assert out["reasoning_effort"] == "medium" and asked.include_thoughts
    assert out["stream_options"] == {"include_usage": True}
    assert asked.dropped == ("generationConfig.topK",)


@pytest.mark.parametrize(("body", "param"), [
    ({"contents": []}, "contents"),
    ({"contents": [{"parts": [{"text": "x"}]}], "tools": [{"googleSearch": {}}]}, "tools[0].googleSearch"),
    ({"contents": [{"parts": [{"fileData": {"fileUri": "files/abc"}}]}]}, "contents[0].parts[0].fileData"),
    ({"contents": [{"parts": [{"inlineData": {"mimeType": "video/mp4", "data": "AA"}}]}]},
     "contents[0].parts[0].inlineData"),
    ({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"responseMimeType": "text/x.enum"}},
     "generationConfig.responseMimeType"),
    ({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {"responseModalities": ["AUDIO"]}},
     "generationConfig.responseModalities"),
    ({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
     "contents[0].parts[0].functionResponse"),
])
def test_what_cannot_be_carried_is_refused_naming_the_field(body, param):
    with pytest.raises(TranslationError) as refused:
        chat(body)
    assert refused.value.param == param


def test_json_output_and_schema():
    out = chat({"contents": [{"parts": [{"text": "x"}]}], "generationConfig": {
        "responseMimeType": "application/json", "responseSchema": {"type": "ARRAY", "items": {"type": "INTEGER"}}}}).body
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "response", "schema": {"type": "array", "items": {"type": "integer"}}}}
    assert json_schema_from_gemini({"type": "STRING", "enum": ["a"]}) == {"type": "string", "enum": ["a"]}


def test_chat_answer_becomes_a_gemini_answer_with_the_billed_usage():
    doc = {"id": "c1", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "ok", "reasoning_content": "hmm",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}}]}
    usage = Usage(input_tokens=10, output_tokens=7, cached_tokens=4, reasoning_tokens=3)
    out = chat_response_to_gemini(doc, usage, model="m", include_thoughts=True)
    assert out["candidates"][0]["content"]["parts"] == [
        {"text": "hmm", "thought": True}, {"text": "ok"}, {"functionCall": {"name": "f", "args": {"a": 1}, "id": "call_1"}}]
    assert out["candidates"][0]["finishReason"] == "STOP"
    assert out["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 3,
                                    "cachedContentTokenCount": 4, "totalTokenCount": 17}
    hidden = chat_response_to_gemini(doc, usage, model="m", include_thoughts=False)
    assert {"text": "hmm", "thought": True} not in hidden["candidates"][0]["content"]["parts"]


def test_chat_stream_becomes_gemini_chunks_calls_whole_and_usage_last():
    stream = ChatToGeminiStream(model="m", include_thoughts=False)
    out = []
    for chunk in (
        {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a"'}}]}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": ":1}"}}]}, "finish_reason": "tool_calls"}]},
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ):
        out.extend(stream.feed(chunk))
    out.extend(stream.finish(Usage(input_tokens=3, output_tokens=2)))
    assert out[0]["candidates"][0]["content"]["parts"] == [{"text": "Hi"}]
    last = out[-1]
    assert last["candidates"][0]["content"]["parts"] == [{"functionCall": {"name": "f", "args": {"a": 1}, "id": "call_1"}}]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"]["totalTokenCount"] == 5 and len(out) == 2


def test_framing_sse_and_json_array():
    sse = Framing(sse=True)
    assert sse.frame({"a": 1}) == b'data: {"a":1}\r\n\r\n' and sse.end() == b""
    array = Framing(sse=False)
    text = array.frame({"a": 1}) + array.frame({"b": 2}) + array.end()
    assert orjson.loads(text) == [{"a": 1}, {"b": 2}]
    assert orjson.loads(Framing(sse=False).end()) == []
