"""Issue 36, prompt caching across translation, live: the official openai SDK, shaped like Codex
(Responses, long instructions, tools, the whole history every turn, ``store: false``,
``prompt_cache_key``), on a Claude model through gatewayd; the simulator caches as Anthropic
does (only what ``cache_control`` breakpoints mark: gatewayd/sim/prompt_cache.py).

Without breakpoints Anthropic would bill every turn's prefix at the full input rate; the
gateway's own breakpoints (``auto_cache``, on by default for Claude routes) make the second
turn read the first turn's prompt from the cache, billed at the cache-read rate, and the first
turn write it, billed at the 5-minute write rate.
"""

from __future__ import annotations

import uuid

import openai
import pytest

from gatewayd.sim import count_input_tokens

CLAUDE = "claude-sonnet-4-5"
SONNET = {"input": 3000, "output": 15000, "cached": 300, "cache_write": 3750}  # nano-USD a token
INSTRUCTIONS = "You are Codex, a coding agent working in the user's repository. " * 150  # ~1,650 words
SHELL = {"type": "function", "name": "shell", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@pytest.fixture
def prompt_cache(sim):
    sim.http.put("/_sim/settings", json={"prompt_cache": True}).raise_for_status()
    yield
    sim.http.put("/_sim/settings", json={"prompt_cache": False}).raise_for_status()


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def cost(row: dict) -> int:
    uncached = row["input_tokens"] - row["cached_tokens"] - row["cache_write_tokens"]
    return (uncached * SONNET["input"] + row["cached_tokens"] * SONNET["cached"]
            + row["cache_write_tokens"] * SONNET["cache_write"] + row["output_tokens"] * SONNET["output"])


@pytest.mark.parametrize("stream", [False, True])
def test_the_second_turn_of_a_codex_session_reads_the_prefix_from_the_cache(gateway, sim, funded, prompt_cache,
                                                                            stream):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = "cx-" + uuid.uuid4().hex[:10]
    common = {"model": CLAUDE, "instructions": INSTRUCTIONS, "tools": [SHELL], "store": False,
              "prompt_cache_key": marker, "include": ["reasoning.encrypted_content"]}
    history: list = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": f"Fix the failing test {marker}"}]}]

    def turn():
        if not stream:
            return c.responses.create(input=history, **common)
        with c.responses.stream(input=history, **common) as s:
            return s.get_final_response()

    first = turn()
    [call] = [item for item in first.output if item.type == "function_call"]
    first_upstream = sim.last_request(marker)["json"]
    assert "prompt_cache_key" not in first_upstream  # Anthropic has no such field: dropped
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "1 failed, 41 passed"})
    second = turn()
    assert second.output_text == "Tool result received: 1 failed, 41 passed"

    first_row, second_row = reversed(gateway.admin.usage(account["id"])[:2])
    # turn 1 wrote its whole prompt (the breakpoint on its last block) at the write rate
    assert first_row["cache_write_tokens"] == count_input_tokens(first_upstream, "messages") > 1024
    assert first_row["cached_tokens"] == 0
    # turn 2 read exactly that prefix back, at the cache-read rate, and wrote only what it added
    assert second_row["cached_tokens"] == first_row["cache_write_tokens"]
    second_upstream = sim.last_request("1 failed, 41 passed")["json"]
    assert second_row["input_tokens"] == count_input_tokens(second_upstream, "messages")
    assert 0 < second_row["cache_write_tokens"] < 100
    assert second.usage.input_tokens_details.cached_tokens == second_row["cached_tokens"]
    for row in (first_row, second_row):
        assert row["cost_nano"] == cost(row) and row["status"] == "ok"
    # what turn 2 would have cost with nothing cached (as before issue 36): over 4 times as much
    uncached = second_row["input_tokens"] * SONNET["input"] + second_row["output_tokens"] * SONNET["output"]
    assert second_row["cost_nano"] * 4 < uncached
    assert gateway.admin.balance(account["id"])["held_nano"] == 0


def test_without_breakpoints_anthropic_caches_nothing(gateway, sim, funded, prompt_cache):
    """The simulator is not generous: the same long prompt sent twice to /v1/messages without
    markers is billed at the full input rate both times (what translated routes paid before)."""
    account, _, secret = funded
    import anthropic

    marker = "nc-" + uuid.uuid4().hex[:10]
    a = anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
    for _ in range(2):
        a.messages.create(model=CLAUDE, max_tokens=50, system=INSTRUCTIONS,
                          messages=[{"role": "user", "content": f"hello {marker}"}])
    rows = gateway.admin.usage(account["id"])[:2]
    assert [(r["cached_tokens"], r["cache_write_tokens"]) for r in rows] == [(0, 0), (0, 0)]


def test_prompt_cache_fields_reach_openai_and_are_dropped_for_others(gateway, sim, funded):
    _, _, secret = funded
    c = client(gateway, secret)
    marker = "pk-" + uuid.uuid4().hex[:10]
    c.responses.create(model="gpt-4.1-mini", input=f"hi {marker}", prompt_cache_key=marker,
                       prompt_cache_retention="24h")
    upstream = sim.last_request(marker)["json"]
    assert (upstream["prompt_cache_key"], upstream["prompt_cache_retention"]) == (marker, "24h")
    marker = "pk-" + uuid.uuid4().hex[:10]
    c.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": f"hi {marker}"}],
                              prompt_cache_key=marker)
    assert sim.last_request(marker)["json"]["prompt_cache_key"] == marker
    marker = "pk-" + uuid.uuid4().hex[:10]
    c.chat.completions.create(model="deepseek-chat", messages=[{"role": "user", "content": f"hi {marker}"}],
                              prompt_cache_key=marker, max_completion_tokens=50)
    upstream = sim.last_request(marker)["json"]
    assert "prompt_cache_key" not in upstream and upstream["max_tokens"] == 50  # and the rest as the route sends it
    for model in (CLAUDE, "gemini-2.5-flash", "deepseek-chat"):
        marker = "pk-" + uuid.uuid4().hex[:10]
        c.responses.create(model=model, input=f"hi {marker}", prompt_cache_key=marker,
                           prompt_cache_retention="24h")
        upstream = sim.last_request(marker)["json"]
        assert "prompt_cache_key" not in upstream and "prompt_cache_retention" not in upstream, model
