"""Bedrock's pure parts: the event-stream splitter, the Converse translation, the
InvokeModel body edits and the SigV4 round trip (the adapter signs, the simulator's check
recomputes), all in-process."""

from __future__ import annotations

import base64

import orjson
import pytest

from gatewayd.errors import UpstreamError
from gatewayd.formats.converse import (
    ConverseToMessagesStream, converse_response_to_message, messages_request_to_converse,
)
from gatewayd.formats.errors import InvalidAnswer, TranslationError
from gatewayd.formats.eventstream import EventStreamSplitter, StreamRefused, chunk_frame, event_frame, exception_frame
from gatewayd.formats.usage import MessagesTally
from gatewayd.providers.bedrock import RefusingSplitter, passthrough_body, uses_invoke
from gatewayd.cloud.bedrock_auth import AwsAuth
from gatewayd.sim import bedrock as sim_bedrock
from botocore.credentials import Credentials

START = b'{"type":"message_start","message":{"id":"m","usage":{"input_tokens":5,"output_tokens":1}}}'
DELTA = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}'


def test_invoke_chunks_become_the_anthropic_events_byte_for_byte_even_fed_one_byte_at_a_time():
    stream = chunk_frame(START) + chunk_frame(DELTA)
    splitter = EventStreamSplitter(invoke=True)
    events = [e for i in range(len(stream)) for e in splitter.feed(stream[i:i + 1])]
    assert [(e.event, e.data) for e in events] == [("message_start", START), ("content_block_delta", DELTA)]
    assert events[1].raw == b"event: content_block_delta\ndata: " + DELTA + b"\n\n"


def test_an_exception_frame_first_is_the_providers_refusal_and_later_an_error_event():
    with pytest.raises(StreamRefused) as told:
        EventStreamSplitter(invoke=True).feed(exception_frame("throttlingException", "slow down"))
    assert told.value.status == 429 and orjson.loads(told.value.body) == {"message": "slow down"}
    with pytest.raises(UpstreamError) as refused:  # the adapter's splitter: the provider's status
        RefusingSplitter(invoke=True).feed(exception_frame("throttlingException", "slow down"))
    assert refused.value.status == 429 and orjson.loads(refused.value.body) == {"message": "slow down"}
    assert refused.value.headers == {"x-amzn-errortype": "ThrottlingException"}
    [start, error] = EventStreamSplitter(invoke=True).feed(
        chunk_frame(START) + exception_frame("modelStreamErrorException", "broke"))
    assert error.event == "error"
    assert orjson.loads(error.data) == {"type": "error", "error": {"type": "api_error", "message": "broke"}}


def test_a_corrupt_frame_is_the_providers_invalid_answer():
    frame = bytearray(chunk_frame(START))
    frame[-1] ^= 0xFF  # the message CRC
    with pytest.raises(InvalidAnswer):
        EventStreamSplitter(invoke=True).feed(bytes(frame))
    bad = event_frame("chunk", orjson.dumps({"bytes": "***"}))
    with pytest.raises(InvalidAnswer):
        EventStreamSplitter(invoke=True).feed(bad)


def test_converse_events_keep_their_names():
    [ev] = EventStreamSplitter(invoke=False).feed(event_frame("messageStop", b'{"stopReason":"end_turn"}'))
    assert (ev.event, orjson.loads(ev.data)) == ("messageStop", {"stopReason": "end_turn"})


def test_messages_to_converse_carries_tools_images_pdfs_and_results():
    png = base64.b64encode(b"\x89PNG").decode()
    body = {
        "model": "x", "max_tokens": 100, "system": "terse", "temperature": 0.5, "stop_sequences": ["END"],
        "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": png}},
                                         {"type": "document", "source": {"type": "base64",
                                                                         "media_type": "application/pdf",
                                                                         "data": png}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
        ],
    }
    out = messages_request_to_converse(body)
    assert out["system"] == [{"text": "terse"}]
    assert out["inferenceConfig"] == {"maxTokens": 100, "temperature": 0.5, "stopSequences": ["END"]}
    assert out["toolConfig"] == {"tools": [{"toolSpec": {"name": "get_weather", "description": "w",
                                                         "inputSchema": {"json": {"type": "object"}}}}],
                                 "toolChoice": {"tool": {"name": "get_weather"}}}
    user = out["messages"][0]["content"]
    assert user[1] == {"image": {"format": "png", "source": {"bytes": png}}}
    assert user[2]["document"]["format"] == "pdf"
    assert out["messages"][1]["content"] == [{"toolUse": {"toolUseId": "t1", "name": "get_weather",
                                                          "input": {"city": "x"}}}]
    assert out["messages"][2]["content"] == [{"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}}]


@pytest.mark.parametrize("body, param", [
    ({"max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": []}, "reasoning_effort"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x"}}]}]}, "messages[0].content[0]"),
    ({"max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "web_search"}], "messages": []}, "tools[0]"),
])
def test_what_converse_cannot_carry_is_the_clients_400(body, param):
    with pytest.raises(TranslationError) as refused:
        messages_request_to_converse(body)
    assert refused.value.param == param


def test_converse_answer_and_stream_read_as_a_message_with_usage():
    doc = {"output": {"message": {"role": "assistant", "content": [
        {"text": "hi"}, {"toolUse": {"toolUseId": "t", "name": "f", "input": {"a": 1}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 10, "outputTokens": 4, "cacheReadInputTokens": 7, "cacheWriteInputTokens": 3}}
    message = converse_response_to_message(doc, model="nova", message_id="msg_1")
    assert message["stop_reason"] == "tool_use" and message["content"][1]["input"] == {"a": 1}
    assert message["usage"] == {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 7,
                                "cache_creation_input_tokens": 3}

    translator, tally, names = ConverseToMessagesStream(model="nova", message_id="m"), MessagesTally(), []
    for name, data in [("messageStart", {"role": "assistant"}),
                       ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
                       ("contentBlockStop", {"contentBlockIndex": 0}),
                       ("contentBlockStart", {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t",
                                                                                             "name": "f"}}}),
                       ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a":1}'}}}),
                       ("contentBlockStop", {"contentBlockIndex": 1}),
                       ("messageStop", {"stopReason": "tool_use"}),
                       ("metadata", {"usage": doc["usage"]})]:
        for event, out in translator.feed(name, data):
            names.append(event)
            tally.feed(event, out)
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    usage = tally.usage(True)
    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens) == (20, 7, 3, 4)


def test_invoke_body_is_edited_in_the_bytes():
    raw = b'{"model": "claude", "max_tokens": 10, "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    out = passthrough_body(raw, orjson.loads(raw), {}, ["b1"])
    assert out == (b'{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["b1"],"max_tokens": 10,  '
                   b'"messages": [{"role": "user", "content": "x"}]}')
    raw = b'{"max_tokens": 99999, "messages": [], "model": "c\\u00e9"}'  # an escape: re-encoded, same document
    out = orjson.loads(passthrough_body(raw, orjson.loads(raw), {"max_tokens": 10}, []))
    assert out == {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10, "messages": []}


def test_which_api_a_model_uses():
    assert uses_invoke("us.anthropic.claude-sonnet-4-5-20250929-v1:0") and uses_invoke("anthropic.claude-v2")
    assert not uses_invoke("amazon.nova-pro-v1:0") and not uses_invoke("meta.llama3-70b-instruct-v1:0")


def test_the_adapters_signature_is_what_the_simulator_recomputes():
    body = b'{"messages":[]}'
    url = "http://127.0.0.1:9/bedrock/model/us.anthropic.claude-x-v1%3A0/invoke"
    good = AwsAuth(region="us-east-1", source=Credentials(sim_bedrock.ACCESS_KEY_ID, sim_bedrock.SECRET_ACCESS_KEY))
    headers = {k.lower(): v for k, v in good.headers(url, body, {"content-type": "application/json"}).items()}
    headers["host"] = "127.0.0.1:9"
    path = "/bedrock/model/us.anthropic.claude-x-v1%3A0/invoke"
    assert sim_bedrock.check_signature("POST", path, "", headers, body) is None
    assert sim_bedrock.check_signature("POST", path, "", headers, body + b" ").status_code == 403
    bad = AwsAuth(region="us-east-1", source=Credentials(sim_bedrock.ACCESS_KEY_ID, "wrong"))
    headers = {k.lower(): v for k, v in bad.headers(url, body, {"content-type": "application/json"}).items()}
    headers["host"] = "127.0.0.1:9"
    refused = sim_bedrock.check_signature("POST", path, "", headers, body)
    assert refused.status_code == 403 and refused.headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")


async def test_a_large_body_is_hashed_in_a_worker_thread_and_signed_as_on_the_loop(monkeypatch):
    """Over 256 kB the body's SHA-256 is computed off the event loop and handed to the signer:
    the simulator's recomputation (of the whole request) accepts it; a small body is hashed
    in place."""
    import threading

    from gatewayd.cloud import bedrock_auth

    threads = []
    real = bedrock_auth._sha256_hex

    def hashing(body: bytes) -> str:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(body)

    monkeypatch.setattr(bedrock_auth, "_sha256_hex", hashing)
    auth = AwsAuth(region="us-east-1", source=Credentials(sim_bedrock.ACCESS_KEY_ID, sim_bedrock.SECRET_ACCESS_KEY))
    url = "http://127.0.0.1:9/bedrock/model/us.anthropic.claude-x-v1%3A0/invoke"
    path = "/bedrock/model/us.anthropic.claude-x-v1%3A0/invoke"
    for body in (b'{"messages":[]}', b'{"x":"' + b"y" * bedrock_auth.HASH_IN_THREAD_OVER + b'"}'):
        signed = await auth.signed_headers(url, body, {"content-type": "application/json"})
        headers = {k.lower(): v for k, v in signed.items()}
        headers["host"] = "127.0.0.1:9"
        assert "x-amz-content-sha256" not in headers  # the request botocore itself would sign
        assert sim_bedrock.check_signature("POST", path, "", headers, body) is None
        assert sim_bedrock.check_signature("POST", path, "", headers, body[:-1] + b" ").status_code == 403
    assert threads == [False]  # the large body only, and not on the loop's thread


async def test_temporary_credentials_are_refreshed_in_a_worker_thread_and_used_meanwhile():
    """Near expiry, a request starts one refresh off the event loop and signs with the still
    valid credentials; the next request signs with the new ones."""
    import threading
    from datetime import datetime, timedelta, timezone

    import trio
    from botocore.credentials import RefreshableCredentials

    calls = []

    def refresh():
        calls.append(threading.current_thread() is threading.main_thread())
        expiry = datetime.now(timezone.utc) + timedelta(hours=1)
        return {"access_key": f"AKIDNEW{len(calls)}", "secret_key": "s", "token": "t", "expiry_time": expiry.isoformat()}

    soon = (datetime.now(timezone.utc) + timedelta(minutes=20)).isoformat()  # inside neither window yet
    source = RefreshableCredentials.create_from_metadata(
        {"access_key": "AKIDOLD", "secret_key": "s", "token": "t", "expiry_time": soon}, refresh, "test")
    auth = AwsAuth(region="us-east-1", source=source)
    assert auth.credentials().access_key == "AKIDOLD" and calls == []
    source._expiry_time = datetime.now(timezone.utc) + timedelta(minutes=12)  # noqa: SLF001 - inside the advisory window
    assert auth.credentials().access_key == "AKIDOLD"  # signed with these while the refresh runs
    auth.credentials()  # one refresh at a time
    with trio.fail_after(5):
        while auth._refreshing:  # noqa: SLF001
            await trio.sleep(0.01)
    assert calls == [False]  # once, not on the event loop's thread
    assert auth.credentials().access_key == "AKIDNEW1"
