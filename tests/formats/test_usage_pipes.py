"""Stream pipes collect every billed dimension from the stream (reasoning, cache and audio
parts, tier, tool calls), pass-through pipes still forward each event's bytes untouched, and a
stream cut before its usage still knows the tool calls it made. Plus what a non-streamed
answer without usage is charged (its output counted offline)."""

from __future__ import annotations

import orjson
import pytest

from gatewayd import tokens
from gatewayd.formats import partial
from gatewayd.formats.pipes import ChatPassthrough, MessagesPassthrough, ResponsesPassthrough
from gatewayd.formats.sse import SSESplitter, encode
from gatewayd.formats.translating_pipes import MessagesToChatPipe, ToResponsesPipe
from gatewayd.formats.usage import Usage
from gatewayd.providers import anthropic, openai
from gatewayd.providers.gemini import GeminiToChatPipe, GeminiToResponsesPipe


def events(*docs) -> list:
    """SSE events as a splitter hands them to a pipe: (event name or None, JSON or raw bytes)."""
    raw = b""
    for name, doc in docs:
        raw += encode(doc, event=name) if not isinstance(doc, bytes) else b"data: " + doc + b"\n\n"
    return SSESplitter().feed(raw)


def chat_chunk(delta=None, usage=None, tier="priority", finish=None) -> dict:
    doc = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if tier is not None:
        doc["service_tier"] = tier
    if usage is not None:
        doc["usage"] = usage
    return doc


CHAT_USAGE = {"prompt_tokens": 50, "completion_tokens": 400, "prompt_tokens_details": {"cached_tokens": 20},
              "completion_tokens_details": {"reasoning_tokens": 380}}


# --- chat ----------------------------------------------------------------------------------------

def test_chat_passthrough_reads_the_final_usage_chunk_and_the_tier_and_forwards_bytes():
    pipe = ChatPassthrough(client_wants_usage=True)
    evs = events((None, chat_chunk({"role": "assistant", "content": "END"})),
                 (None, chat_chunk(None, usage=CHAT_USAGE, tier=None)), (None, b"[DONE]"))
    out = pipe.feed(evs)
    assert out == evs[0].raw + evs[1].raw and pipe.complete
    assert pipe.usage == Usage(50, 400, cached_tokens=20, reasoning_tokens=380, service_tier="priority")


def test_chat_passthrough_cut_before_usage_has_none_and_tier_in_content_is_not_read():
    pipe = ChatPassthrough(client_wants_usage=False)
    pipe.feed(events((None, chat_chunk({"content": '"service_tier": "flex"'}, tier=None))))
    assert pipe.usage is None and pipe.service_tier is None
    pipe.feed(events((None, chat_chunk({"content": "x"}, tier="flex"))))
    assert pipe.service_tier == "flex"


def test_chat_to_responses_pipe_reads_reasoning_and_tier():
    pipe = ToResponsesPipe({"model": "m", "input": "hi"}, messages_upstream=False, model="m", response_id="resp_1",
                           created=1)
    pipe.feed(events((None, chat_chunk({"role": "assistant", "content": "hi"}, tier="flex")),
                     (None, chat_chunk({}, finish="stop", tier=None)),
                     (None, chat_chunk(None, usage=CHAT_USAGE, tier=None)), (None, b"[DONE]")))
    assert pipe.usage == Usage(50, 400, cached_tokens=20, reasoning_tokens=380, service_tier="flex")


# --- messages ------------------------------------------------------------------------------------

MSG_START = ("message_start", {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude",
    "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 100,
              "cache_creation_input_tokens": 300,
              "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
              "service_tier": "priority"}}})
SEARCH_BLOCK = ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
    "type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}})
TEXT_BLOCK = ("content_block_start", {"type": "content_block_start", "index": 1,
                                      "content_block": {"type": "text", "text": ""}})
TEXT_DELTA = ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                      "delta": {"type": "text_delta", "text": "found it"}})
MSG_DELTA = ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {
    "output_tokens": 90, "server_tool_use": {"web_search_requests": 1}}})
MSG_STOP = ("message_stop", {"type": "message_stop"})

WHOLE = Usage(input_tokens=410, output_tokens=90, cached_tokens=100, cache_write_tokens=300,
              cache_write_1h_tokens=200, tool_calls=(("web_search", 1),), service_tier="priority")


def test_messages_passthrough_reads_1h_writes_searches_and_tier_and_forwards_bytes():
    pipe = MessagesPassthrough()
    evs = events(MSG_START, SEARCH_BLOCK, TEXT_BLOCK, TEXT_DELTA, MSG_DELTA, MSG_STOP)
    out = pipe.feed(evs)
    assert out == b"".join(ev.raw for ev in evs[:-1]) and pipe.closing() == evs[-1].raw
    assert pipe.usage == WHOLE


def test_messages_stream_cut_after_a_search_still_pays_for_it():
    for pipe in (MessagesPassthrough(), MessagesToChatPipe("claude", False, created=1),
                 ToResponsesPipe({"model": "m", "input": "hi"}, messages_upstream=True, model="claude",
                                 response_id="resp_1", created=1)):
        pipe.feed(events(MSG_START, SEARCH_BLOCK, TEXT_BLOCK, TEXT_DELTA))
        usage = pipe.usage
        assert usage.tool_calls == (("web_search", 1),) and usage.input_tokens == 410, type(pipe)
        assert usage.cache_write_1h_tokens == 200 and usage.service_tier == "priority"


def test_messages_translating_pipes_collect_the_same_usage():
    for pipe in (MessagesToChatPipe("claude", True, created=1),
                 ToResponsesPipe({"model": "m", "input": "hi"}, messages_upstream=True, model="claude",
                                 response_id="resp_1", created=1)):
        pipe.feed(events(MSG_START, SEARCH_BLOCK, TEXT_BLOCK, TEXT_DELTA, MSG_DELTA, MSG_STOP))
        assert pipe.complete and pipe.usage == WHOLE, type(pipe)


# --- responses -----------------------------------------------------------------------------------

def item_done(item: dict) -> tuple:
    return ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})


SEARCH_ITEM = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}}
CODE_ITEM = {"type": "code_interpreter_call", "id": "ci_1", "container_id": "cntr_1", "status": "completed"}
MESSAGE_ITEM = {"type": "message", "id": "m1", "content": [{"type": "output_text", "text": '"web_search_call"'}]}
COMPLETED = ("response.completed", {"type": "response.completed", "response": {
    "id": "resp_1", "status": "completed", "service_tier": "flex", "output": [SEARCH_ITEM, CODE_ITEM, MESSAGE_ITEM],
    "usage": {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 10}, "output_tokens": 600,
              "output_tokens_details": {"reasoning_tokens": 500}}}})


def test_responses_passthrough_reads_the_completed_response_and_forwards_bytes():
    pipe = ResponsesPassthrough()
    evs = events(item_done(SEARCH_ITEM), item_done(CODE_ITEM), item_done(MESSAGE_ITEM), COMPLETED)
    assert pipe.feed(evs) == b"".join(ev.raw for ev in evs[:-1]) and pipe.closing() == evs[-1].raw
    # each tool once, though both the item event and the completed response list it
    assert pipe.usage == Usage(30, 600, cached_tokens=10, reasoning_tokens=500, service_tier="flex",
                               tool_calls=(("code_interpreter", 1), ("web_search", 1)))


def test_responses_stream_cut_before_completed_knows_the_calls_made():
    pipe = ResponsesPassthrough()
    pipe.feed(events(item_done(SEARCH_ITEM), item_done({**SEARCH_ITEM, "id": "ws_2"}), item_done(MESSAGE_ITEM)))
    assert pipe.usage == Usage(tool_calls=(("web_search", 2),)) and not pipe.complete
    assert ResponsesPassthrough().usage is None


def test_responses_stream_unnamed_events_are_read_by_their_type():
    pipe = ResponsesPassthrough()
    pipe.feed(events((None, item_done(SEARCH_ITEM)[1]), (None, COMPLETED[1])))
    assert pipe.complete and pipe.usage.tool_calls == (("code_interpreter", 1), ("web_search", 1))


@pytest.mark.parametrize("data,calls", [
    (b'{"type":"response.output_item.done","item":"web_search_call"}', None),
    (b'{"type":"response.output_item.done","item":{"type":"web_search_call"}}', (("web_search", 1),)),
    (b'["web_search_call"]', None), (b'"web_search_call"', None)])
def test_responses_item_events_of_any_shape(data, calls):
    pipe = ResponsesPassthrough()
    pipe.feed(SSESplitter().feed(b"event: response.output_item.done\ndata: " + data + b"\n\n"))
    assert pipe.usage == (Usage(tool_calls=calls) if calls else None)


def test_responses_completed_without_usage_keeps_its_tool_calls():
    pipe = ResponsesPassthrough()
    pipe.feed(events(("response.completed", {"type": "response.completed", "response": {"output": [SEARCH_ITEM]}})))
    assert pipe.complete and pipe.usage == Usage(tool_calls=(("web_search", 1),))
    pipe = ResponsesPassthrough()
    pipe.feed(events(("response.completed", {"type": "response.completed", "response": "x"})))
    assert pipe.complete and pipe.usage is None


# --- gemini --------------------------------------------------------------------------------------

def gemini_event(parts, reason=None, meta=None, grounding=None) -> tuple:
    candidate = {"index": 0, "content": {"role": "model", "parts": parts}}
    if reason:
        candidate["finishReason"] = reason
    if grounding:
        candidate["groundingMetadata"] = {"webSearchQueries": grounding}
    doc = {"candidates": [candidate]}
    if meta:
        doc["usageMetadata"] = meta
    return (None, doc)


def test_gemini_pipes_read_thoughts_modalities_and_grounding():
    meta = {"promptTokenCount": 20, "candidatesTokenCount": 10, "thoughtsTokenCount": 70,
            "candidatesTokensDetails": [{"modality": "AUDIO", "tokenCount": 4}]}
    expected = Usage(20, 80, reasoning_tokens=70, audio_output_tokens=4, tool_calls=(("web_search", 2),))
    for pipe in (GeminiToChatPipe(model="g", include_usage=True, chunk_id="c", created=1),
                 GeminiToResponsesPipe({"model": "g", "input": "hi"}, model="g", response_id="resp_1", chunk_id="c",
                                       created=1)):
        pipe.feed(events(gemini_event([{"text": "hm", "thought": True}], meta={"promptTokenCount": 20})))
        pipe.feed(events(gemini_event([{"text": "hi"}], "STOP", meta, grounding=["a", "b"])))
        assert pipe.complete and pipe.usage == expected, type(pipe)


# --- non-streamed answers without usage ------------------------------------------------------------

def test_chat_completion_without_usage_is_charged_its_output():
    doc = {"service_tier": "priority", "choices": [
        {"message": {"content": "hello there", "refusal": "no", "reasoning_content": "think",
                     "tool_calls": [{"function": {"name": "f", "arguments": '{"a":1}'}}, 5, {"function": 3}]}},
        {"message": {"content": [{"type": "text", "text": " again"}, 7], "function_call": {"name": "g"}}},
        {"message": None}, 3]}
    text = partial.chat_completion_text(doc)
    assert text == 'hello thereno' + 'think' + 'f{"a":1}' + ' again' + 'g'
    usage = openai.produced_chat_usage(doc, 42, "gpt")
    assert usage == Usage(42, tokens.count(text), service_tier="priority") and usage.output_tokens > 5
    assert openai.produced_chat_usage({"choices": "x"}, 1, "gpt") == Usage(1)


def test_response_without_usage_is_charged_its_output_and_tool_calls():
    doc = {"output": [
        {"type": "message", "content": [{"type": "output_text", "text": "hi"}, {"type": "refusal", "refusal": "no"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}],
         "content": [{"type": "reasoning_text", "text": "raw"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "name": "c", "input": "x"},
        {"type": "code_interpreter_call", "code": "print(1)", "container_id": "c1"},
        {"type": "web_search_call", "action": {"type": "search", "query": "q"}},
        None, {"type": "message", "content": "plain"}]}
    text = partial.response_output_text(doc)
    assert text == "hinosumrawf{}cxprint(1)qplain"
    usage = openai.produced_response_usage(doc, 9, "gpt")
    assert usage == Usage(9, tokens.count(text), tool_calls=(("code_interpreter", 1), ("web_search", 1)))


def test_message_without_usage_is_charged_its_output_by_claudes_count():
    message = {"content": [{"type": "text", "text": "hello world " * 20},
                           {"type": "server_tool_use", "name": "web_search", "input": {"query": "q"}}]}
    usage = anthropic.answer_usage(message, 7, "claude")
    assert usage.tool_calls == (("web_search", 1),) and usage.input_tokens == 7
    assert usage.output_tokens == tokens.count(partial.message_text(message), "claude") \
        > tokens.count(partial.message_text(message), "gpt")
    assert anthropic.answer_usage({**message, "usage": {"input_tokens": 3, "output_tokens": 4}}, 7, "claude") \
        == Usage(3, 4, tool_calls=(("web_search", 1),))


def test_deeply_nested_tool_input_is_counted_without_raising():
    nested = orjson.loads(b"[" * 300 + b"]" * 300)
    assert partial.message_text({"content": [{"type": "tool_use", "name": "f", "input": nested}]}) == "f"
