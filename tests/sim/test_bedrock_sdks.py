"""The simulator speaks Bedrock's real wire format: boto3's ``bedrock-runtime`` client and the
anthropic SDK's ``AnthropicBedrock`` client, pointed straight at it, sign their requests with
SigV4 (which the simulator verifies), and parse its answers and event streams.

Synchronous, as tests/sim/test_sdks.py: the SDKs run in the test thread, the simulator in
its own trio loop in a background thread.
"""

from __future__ import annotations

import json

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import pytest

from gatewayd.sim import bedrock as sim_bedrock
from tests.sim.provider_bill import provider_bill
from tests.sim.test_sdks import sim_port  # noqa: F401 - the fixture

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "amazon.nova-pro-v1:0"


def _client(port: int, secret: str = sim_bedrock.SECRET_ACCESS_KEY):
    return boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}/bedrock",
        aws_access_key_id=sim_bedrock.ACCESS_KEY_ID, aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def _messages_body(text: str, **extra) -> bytes:
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200,
                       "messages": [{"role": "user", "content": text}], **extra}).encode()


def test_boto3_invoke_model(sim_port):  # noqa: F811
    client = _client(sim_port)
    answer = client.invoke_model(modelId=CLAUDE, body=_messages_body("hello [[sim:words=5]]"))
    message = json.loads(answer["body"].read())
    assert message["type"] == "message" and message["model"] == CLAUDE
    assert len(message["content"][0]["text"].split()) == 5 and message["usage"]["output_tokens"] == 5

    streamed = client.invoke_model_with_response_stream(modelId=CLAUDE, body=_messages_body("hi [[sim:words=7]]"))
    events = [json.loads(e["chunk"]["bytes"]) for e in streamed["body"]]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-1]["type"] == "message_stop" and "amazon-bedrock-invocationMetrics" in events[-1]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert len(text.split()) == 7


def test_boto3_converse_with_tools(sim_port):  # noqa: F811
    client = _client(sim_port)
    tools = {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": SCHEMA}}}]}
    messages = [{"role": "user", "content": [{"text": "weather in Paris?"}]}]
    answer = client.converse(modelId=NOVA, messages=messages, toolConfig=tools,
                             inferenceConfig={"maxTokens": 300})
    use = answer["output"]["message"]["content"][0]["toolUse"]
    assert answer["stopReason"] == "tool_use" and use["name"] == "get_weather" and use["input"] == {"city": "sim-city"}
    usage = answer["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0

    streamed = client.converse_stream(modelId=NOVA, messages=[{"role": "user", "content": [
        {"text": "hi [[sim:words=6]] [[sim:cache_read=40]] [[sim:cache_write=10]]"}]}])
    events = list(streamed["stream"])
    assert list(events[0]) == ["messageStart"] and list(events[-1]) == ["metadata"]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    assert len(text.split()) == 6
    meta = events[-1]["metadata"]["usage"]
    assert meta["cacheReadInputTokens"] == 40 and meta["cacheWriteInputTokens"] == 10
    assert provider_bill("converse", meta, {"input": 100, "output": 500, "cached_input": 10}) == (
        meta["inputTokens"] * 100 + 40 * 10 + 10 * 125 + meta["outputTokens"] * 500)


def test_boto3_errors(sim_port):  # noqa: F811
    with pytest.raises(botocore.exceptions.ClientError) as wrong:
        _client(sim_port, secret="not-the-secret").invoke_model(modelId=CLAUDE, body=_messages_body("hi"))
    assert wrong.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert "signature we calculated does not match" in wrong.value.response["Error"]["Message"]
    assert wrong.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    with pytest.raises(botocore.exceptions.ClientError) as throttled:
        _client(sim_port).converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "[[sim:fault=status:429]]"}]}])
    assert throttled.value.response["Error"]["Code"] == "ThrottlingException"

    streamed = _client(sim_port).invoke_model_with_response_stream(
        modelId=CLAUDE, body=_messages_body("hi [[sim:words=30]] [[sim:fault=error_after:3]]"))
    with pytest.raises(botocore.exceptions.EventStreamError) as mid:
        for _ in streamed["body"]:
            pass
    assert mid.value.response["Error"]["Code"] == "modelStreamErrorException"

    with pytest.raises(botocore.exceptions.ClientError) as invalid:
        _client(sim_port).invoke_model(modelId=CLAUDE, body=b'{"max_tokens": 5, "messages": []}')
    assert invalid.value.response["Error"]["Code"] == "ValidationException"


def test_anthropic_bedrock_sdk(sim_port):  # noqa: F811
    client = anthropic.AnthropicBedrock(
        aws_access_key=sim_bedrock.ACCESS_KEY_ID, aws_secret_key=sim_bedrock.SECRET_ACCESS_KEY,
        aws_region="us-east-1", base_url=f"http://127.0.0.1:{sim_port}/bedrock", max_retries=0)
    tools = [{"name": "get_weather", "input_schema": SCHEMA}]
    done = client.messages.create(model=CLAUDE, max_tokens=300, tools=tools,
                                  messages=[{"role": "user", "content": "weather in Paris?"}])
    assert done.stop_reason == "tool_use" and done.content[-1].input == {"city": "sim-city"}

    with client.messages.stream(model=CLAUDE, max_tokens=4000,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                messages=[{"role": "user", "content": "think [[sim:words=4]] [[sim:thinking]]"}]) as s:
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature
    assert len(final.content[-1].text.split()) == 4 and final.usage.output_tokens > 4
