"""Issue 36, in-process: a route's ``auto_cache`` decides whether the gateway places its own
prompt-cache breakpoints in a chat client's translated request, and whether the client's own
``cache_control`` markers reach Anthropic (the real app and relay; the provider is an
``httpx.MockTransport`` that keeps the body). The spec: translation does not carry the
markers; so only an operator's explicit ``auto_cache = true`` carries them, the default (on for
Claude routes) places the gateway's breakpoints and keeps the spec's rule."""

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

[[models]]
id = "claude-operator-cache"
provider = "anthropic"
upstream_id = "claude-sonnet-4-5"
family = "claude"
auto_cache = true
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
        for model in ("claude-sonnet-4-5", "claude-no-cache", "claude-operator-cache"):
            for messages in (MARKED, PLAIN):
                r = await gw.http.post("/v1/chat/completions", headers=auth,
                                       json={"model": model, "messages": messages, "max_tokens": 20})
                assert r.status_code == 200, r.text
        on_marked, on_plain, off_marked, off_plain, operator_marked, operator_plain = sent
        ours = {"type": "ephemeral"}
        # the default on Claude routes: the gateway's breakpoints (the system prompt and the last
        # block), and the client's own marker not carried (the spec's rule for translation)
        for body in (on_plain, operator_plain):
            assert body["system"] == [{"type": "text", "text": "rules", "cache_control": ours}]
            assert body["messages"] == [{"role": "user", "content": [
                {"type": "text", "text": "question", "cache_control": ours}]}]
        assert on_marked["messages"][0]["content"][0] == {"type": "text", "text": "long context"}
        assert on_marked["messages"][0]["content"][-1]["cache_control"] == ours  # ours, on the last block
        # auto_cache = true set by the operator: the client's marker carried, none of ours beside it
        assert operator_marked["messages"][0]["content"][0]["cache_control"] == ours
        assert orjson.dumps(operator_marked).count(b"cache_control") == 1
        # auto_cache = false: nothing carried and nothing placed
        assert b"cache_control" not in orjson.dumps(off_marked) + orjson.dumps(off_plain)
    finally:
        await gw.aclose()
