"""The official openai and anthropic SDKs parse everything the simulator sends.

Synchronous on purpose: the SDKs' sync clients run in the test thread while the simulator
runs in its own trio loop in a background thread.
"""

from __future__ import annotations

import json
import queue
import threading

import anthropic
import openai
import pytest
import trio

from gatewayd.sim import serve_simulator, sim_embedding

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}


@pytest.fixture
def sim_port():
    ready: queue.Queue = queue.Queue()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_simulator)
            ready.put((port, trio.lowlevel.current_trio_token(), nursery.cancel_scope))

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    port, token, scope = ready.get(timeout=10)
    try:
        yield port
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_openai_sdk(sim_port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{sim_port}/v1", api_key="sk-test", max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    messages = [{"role": "user", "content": "weather in Paris?"}]

    done = client.chat.completions.create(model="gpt-sim", messages=messages, tools=tools)
    call = done.choices[0].message.tool_calls[0]
    assert done.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == {"city": "sim-city", "days": 42}
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens == 1 + 4

    with client.chat.completions.stream(model="gpt-sim", messages=messages, tools=tools) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.arguments == call.function.arguments

    chunks = list(
        client.chat.completions.create(
            model="gpt-sim",
            messages=[{"role": "user", "content": "[[sim:words=5]]"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "w1 w2 w3 w4 w5"
    assert chunks[-1].usage.completion_tokens == 5

    response = client.responses.create(model="gpt-sim", input="hello responses")
    assert response.output_text == "This is a simulated reply to: hello responses."
    assert response.usage.output_tokens == 8
    with client.responses.stream(model="gpt-sim", input="hello stream") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final_response = stream.get_final_response()
    assert "".join(deltas) == final_response.output_text == "This is a simulated reply to: hello stream."
    resp_tools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    with client.responses.stream(model="gpt-sim", input="weather?", tools=resp_tools) as stream:
        tool_response = stream.get_final_response()
    assert tool_response.output[0].type == "function_call"
    assert json.loads(tool_response.output[0].arguments) == {"city": "sim-city", "days": 42}

    embedded = client.embeddings.create(model="emb-sim", input=["alpha", "beta gamma"])
    assert [d.embedding for d in embedded.data] == [sim_embedding("alpha"), sim_embedding("beta gamma")]
    assert embedded.usage.prompt_tokens == 3

    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-sim", messages=[{"role": "user", "content": "[[sim:fault=status:429]]"}])


def test_anthropic_sdk(sim_port):
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{sim_port}", api_key="sk-test", max_retries=0)
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}]
    common = dict(
        model="claude-sim",
        max_tokens=2048,
        tools=tools,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "[[sim:text_then_tool]] [[sim:cache_read=12]] weather?"}],
    )
    message = client.messages.create(**common)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"city": "sim-city", "days": 42}
    assert message.stop_reason == "tool_use"
    assert message.usage.cache_read_input_tokens == 12

    with client.messages.stream(**common) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "Let me check."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == message.content[0].thinking
    assert final.content[0].signature == message.content[0].signature
    assert final.content[2].input == message.content[2].input
    assert final.usage.output_tokens == message.usage.output_tokens
    assert final.usage.input_tokens == message.usage.input_tokens
    assert final.usage.cache_read_input_tokens == 12

    with pytest.raises(anthropic.APIStatusError) as failure:
        client.messages.create(model="claude-sim", max_tokens=10, messages=[{"role": "user", "content": "[[sim:fault=status:529]]"}])
    assert failure.value.status_code == 529


def test_sdk_streams_of_billed_features(sim_port):
    """The SDKs' stream helpers accept n choices, built-in tool calls and server tool blocks."""
    oa = openai.OpenAI(base_url=f"http://127.0.0.1:{sim_port}/v1", api_key="sk-test", max_retries=0)
    with oa.chat.completions.stream(model="o3", n=2, messages=[{"role": "user", "content": "[[sim:words=3]]"}],
                                    stream_options={"include_usage": True},
                                    service_tier="auto") as stream:
        final = stream.get_final_completion()
    assert [c.message.content for c in final.choices] == ["w1 w2 w3"] * 2
    assert final.service_tier == "default" and final.usage.completion_tokens == 2 * (3 + 8)

    tools = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]
    with oa.responses.stream(model="gpt-5", input="[[sim:web_search=1]] [[sim:code_interpreter=1]] [[sim:text=ok]]",
                             tools=tools) as stream:
        response = stream.get_final_response()
    assert [i.type for i in response.output] == ["reasoning", "web_search_call", "code_interpreter_call", "message"]
    assert response.output[2].container_id == "cntr_sim_2" and response.output_text == "ok"

    an = anthropic.Anthropic(base_url=f"http://127.0.0.1:{sim_port}", api_key="sk-test", max_retries=0)
    with an.messages.stream(model="claude-sim", max_tokens=100,
                            tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
                            messages=[{"role": "user", "content": "[[sim:web_search=1]] [[sim:cache_write_1h=9]]"}],
                            ) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert message.content[0].input == {"query": "sim web search 1"}
    assert message.usage.server_tool_use.web_search_requests == 1
    assert message.usage.cache_creation.ephemeral_1h_input_tokens == 9 == message.usage.cache_creation_input_tokens
