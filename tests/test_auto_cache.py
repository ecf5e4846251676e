"""Issue 36, in-process: a route's ``auto_cache`` decides whether a chat client's
``cache_control`` markers reach Anthropic, and whether the gateway places its own breakpoints
(the real app and relay; the provider is an ``httpx.MockTransport`` that keeps the body)."""

from __future__ import annotations

import httpx
import orjson

from tests.inproc import Gateway

NO_CACHE = """
[[models]]
id = "claude-no-cache"
provider = "anthropic"
upstream_id = "claude-sonnet-4-5"
family = "claude"
auto_cache = false
input_price = 3
output_price = 15
"""
ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
          "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
          "usage": {"input_tokens": 5, "output_tokens": 1}}
MARKED = [{"role": "system", "content": "rules"},
          {"role": "user", "content": [{"type": "text", "text": "long context", "cache_control": {"type": "ephemeral"}},
                                       {"type": "text", "text": "question"}]}]
PLAIN = [{"role": "system", "content": "rules"}, {"role": "user", "content": "question"}]


async def test_auto_cache_carries_markers_or_places_its_own_and_off_it_does_neither(tmp_path):
    sent: list[dict] = []

    def provider(request):
        sent.append(orjson.loads(request.content))
        return httpx.Response(200, json=ANSWER)

    gw = Gateway(tmp_path, provider, extra=NO_CACHE)
    try:
        _, secret = await gw.funded_key()
        auth = {"authorization": f"Bearer {secret}"}
        for model in ("claude-sonnet-4-5", "claude-no-cache"):
            for messages in (MARKED, PLAIN):
                r = await gw.http.post("/v1/chat/completions", headers=auth,
                                       json={"model": model, "messages": messages, "max_tokens": 20})
                assert r.status_code == 200, r.text
        on_marked, on_plain, off_marked, off_plain = sent
        # auto_cache (the default on Claude routes): the client's marker carried, none of ours beside it
        assert on_marked["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
        assert orjson.dumps(on_marked).count(b"cache_control") == 1
        # ... and for a client that sent none, the gateway's: the system prompt and the last block
        assert on_plain["system"] == [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
        assert on_plain["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "question", "cache_control": {"type": "ephemeral"}}]}]
        # auto_cache = false: the spec's rule, nothing carried and nothing placed
        assert b"cache_control" not in orjson.dumps(off_marked) + orjson.dumps(off_plain)
    finally:
        await gw.aclose()
