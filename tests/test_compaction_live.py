"""Issue 36, compaction on every route, live: the official openai SDK (``responses.compact()``,
and ``/v1/responses`` with a ``compaction_trigger`` item as Codex sends it, streamed and not,
over HTTP and over the Responses WebSocket) through gatewayd to the simulator.

A GPT-like model passes both through (the simulator compacts as OpenAI does: its own opaque
``compaction`` item). A Claude model is compacted by the gateway: one summarising request to
the model (one usage row, billed as any request), answered as one ``compaction`` item, which the
gateway takes back as input on the next turn, its summary reaching the model.
"""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from websockets.sync.client import connect

from gatewayd.formats.compaction import COMPACTION_PROMPT, SUMMARY_HEADING

CLAUDE, GPT = "claude-sonnet-4-5", "gpt-4.1-mini"
PRICES = {CLAUDE: (3000, 15000, 300, 3750), GPT: (400, 1600, 100, 400)}  # nano-USD: in, out, cached, write
SHELL = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {
    "command": {"type": "string"}}, "required": ["command"]}}
TRIGGER = {"type": "compaction_trigger"}


def client(gateway, secret) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)


def history(marker: str) -> list[dict]:
    """A short Codex-shaped conversation: a task, a tool call and its output, an answer."""
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Fix the test {marker}"}]},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command": "pytest -x"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "1 failed: test_parse"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "test_parse fails."}]},
    ]


def billed(gateway, account, model: str) -> dict:
    """The newest usage row, checked against its own numbers at the model's prices."""
    row = gateway.admin.usage(account["id"], limit=1)[0]
    inp, out, cached, write = PRICES[model]
    uncached = row["input_tokens"] - row["cached_tokens"] - row["cache_write_tokens"]
    assert row["cost_nano"] == (uncached * inp + row["cached_tokens"] * cached + row["cache_write_tokens"] * write
                                + row["output_tokens"] * out)
    assert (row["model"], row["endpoint"], row["status"]) == (model, "responses", "ok")
    assert gateway.admin.balance(account["id"])["held_nano"] == 0
    return row


def the_compaction_item(output) -> dict:
    items = [item if isinstance(item, dict) else item.model_dump() for item in output]
    compactions = [item for item in items if item["type"] == "compaction"]
    assert len(compactions) == 1 and items[-1] is compactions[0], items
    return compactions[0]


# -- Claude: the gateway compacts -----------------------------------------------------------------


def test_compact_endpoint_on_claude_summarises_with_the_model_and_the_summary_comes_back(gateway, sim, funded):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = "cmp-" + uuid.uuid4().hex[:10]
    compacted = c.responses.compact(model=CLAUDE, input=history(marker), instructions="You are Codex.")
    assert compacted.object == "response.compaction"
    item = the_compaction_item(compacted.output)
    users = [i for i in compacted.output if i.type == "message"]
    assert [u.role for u in users] == ["user"]  # the user messages, then the one compaction item
    # one summarising request to the model: the conversation, then the compaction prompt
    upstream = sim.last_request(marker)
    assert upstream["path"] == "/v1/messages"
    last = upstream["json"]["messages"][-1]
    assert last["role"] == "user" and COMPACTION_PROMPT in json.dumps(last)
    row = billed(gateway, account, CLAUDE)
    assert (compacted.usage.input_tokens, compacted.usage.output_tokens) == (row["input_tokens"], row["output_tokens"])
    assert len(gateway.admin.usage(account["id"])) == 1

    # the next turn: the compacted history and a new message; the summary reaches the model
    nxt = "next-" + uuid.uuid4().hex[:8]
    reply = c.responses.create(model=CLAUDE, input=[*[u.model_dump(exclude_none=True) for u in users], item,
                                                    {"role": "user", "content": f"go on {nxt}"}])
    assert reply.output_text.startswith("This is a simulated reply to:")
    told = json.dumps(sim.last_request(nxt)["json"]["messages"])
    summary_at = told.find(SUMMARY_HEADING)
    assert 0 < summary_at < told.find(f"go on {nxt}")  # the summary, then the new message
    assert "This is a simulated reply to: The conversation above" in told[summary_at:]  # the model's summary
    billed(gateway, account, CLAUDE)


@pytest.mark.parametrize("stream", [False, True])
def test_a_compaction_trigger_on_claude_is_answered_with_exactly_one_compaction_item(gateway, sim, funded, stream):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = "trg-" + uuid.uuid4().hex[:10]
    body = {"model": CLAUDE, "input": [*history(marker), TRIGGER], "tools": [SHELL], "store": False,
            "instructions": "You are Codex."}
    if stream:
        events = list(c.responses.create(stream=True, **body))
        kinds = [e.type for e in events]
        assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.output_item.done", "response.completed"]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        done = events[3].item.model_dump()
        response = events[-1].response
        assert [i.model_dump() for i in response.output] == [done]
    else:
        response = c.responses.create(**body)
    item = the_compaction_item(response.output)
    assert item["encrypted_content"] and item["id"].startswith("cmp_")
    upstream = sim.last_request(marker)["json"]
    assert COMPACTION_PROMPT in json.dumps(upstream["messages"][-1])
    assert upstream["tool_choice"] == {"type": "none"} and upstream["tools"][0]["name"] == "shell"
    assert "thinking" not in upstream
    row = billed(gateway, account, CLAUDE)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (row["input_tokens"], row["output_tokens"])


def test_a_compaction_trigger_over_the_websocket(gateway, sim, funded):
    account, _, secret = funded
    marker = "ws-" + uuid.uuid4().hex[:10]
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {secret}"}, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "response.create", "model": CLAUDE, "store": False,
                            "input": [*history(marker), TRIGGER]}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(json.loads(ws.recv(timeout=30)))
    assert [e["type"] for e in events][-3:] == ["response.output_item.added", "response.output_item.done",
                                                "response.completed"]
    the_compaction_item(events[-1]["response"]["output"])
    assert COMPACTION_PROMPT in json.dumps(sim.last_request(marker)["json"])


def test_an_item_another_provider_compacted_is_a_400_before_the_provider(gateway, sim, funded):
    account, _, secret = funded
    marker = "foreign-" + uuid.uuid4().hex[:8]
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway, secret).responses.create(model=CLAUDE, input=[
            {"type": "compaction", "encrypted_content": "gAAAAABopaque-openai-ciphertext"},
            {"role": "user", "content": f"go on {marker}"}])
    assert refused.value.body["param"] == "input[0].encrypted_content"
    assert sim.requests(marker) == [] and gateway.admin.usage(account["id"]) == []


def test_a_trigger_that_is_not_last_is_a_400(gateway, sim, funded):
    _, _, secret = funded
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway, secret).responses.create(model=CLAUDE, input=[TRIGGER, {"role": "user", "content": "hi"}])
    assert refused.value.body["param"] == "input[0]"


# -- GPT-like: passed through ----------------------------------------------------------------------


def test_compact_endpoint_and_trigger_on_a_gpt_model_pass_through(gateway, sim, funded):
    account, _, secret = funded
    c = client(gateway, secret)
    marker = "gpt-" + uuid.uuid4().hex[:10]
    compacted = c.responses.compact(model=GPT, input=history(marker))
    item = the_compaction_item(compacted.output)
    assert item["encrypted_content"].startswith("sim-compaction:")  # the provider's own item
    upstream = sim.last_request(marker)
    assert upstream["path"] == "/v1/responses/compact" and upstream["json"]["input"] == history(marker)
    billed(gateway, account, GPT)

    marker = "gpt-" + uuid.uuid4().hex[:10]
    events = list(c.responses.create(model=GPT, input=[*history(marker), TRIGGER], stream=True))
    the_compaction_item(events[-1].response.output)
    assert sim.last_request(marker)["json"]["input"][-1] == TRIGGER  # passed through as sent
    billed(gateway, account, GPT)
    # the provider's item goes back to the provider as it came
    nxt = "next-" + uuid.uuid4().hex[:8]
    c.responses.create(model=GPT, input=[item, {"role": "user", "content": f"go on {nxt}"}])
    assert sim.last_request(nxt)["json"]["input"][0] == item


@pytest.mark.parametrize("model,path", [("gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
                                        ("deepseek-chat", "/v1/chat/completions")])
def test_other_translated_routes_compact_with_their_model(gateway, sim, funded, model, path):
    """Gemini (responses -> chat -> Gemini) and an OpenAI-compatible chat provider (responses ->
    chat) compact the same way: one summarising request to the model, one compaction item."""
    account, _, secret = funded
    marker = "oth-" + uuid.uuid4().hex[:10]
    events = list(client(gateway, secret).responses.create(
        model=model, input=[*history(marker), TRIGGER], tools=[SHELL], stream=True))
    the_compaction_item(events[-1].response.output)
    upstream = sim.last_request(marker)
    assert upstream["path"].startswith(path) and COMPACTION_PROMPT in json.dumps(upstream["json"])
    row = gateway.admin.usage(account["id"], limit=1)[0]
    assert (row["model"], row["endpoint"], row["status"]) == (model, "responses", "ok")
    assert gateway.admin.balance(account["id"])["held_nano"] == 0
