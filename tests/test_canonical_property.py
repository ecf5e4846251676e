"""Property: what goes upstream is what the hold priced, or the request is a 400 (issue 30, point 3).

For each client format, hypothesis writes request bodies as raw JSON text: billable fields under
every spelling the target accepts (Google's camelCase and snake_case), the same key twice in one
object (top level, inside ``generationConfig``, inside a ``tools[]`` entry), and values of the
wrong type. Each body goes through the gateway's own reading (parse, the endpoint's reader, the
canonical form, the route's builder), for every upstream protocol the model's format reaches.
Then either the gateway refused it (a 400 :class:`BodyError`, never another exception), or the
upstream body, read the way the *provider* reads it (an independent reader below: both
spellings, duplicate keys an error), asks for exactly the billable things the hold priced:
candidates / ``n``, the output cap, hosted tools and their call bound, the service tier, and no
context cache, stored file or MCP server.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import orjson
from hypothesis import HealthCheck, given, settings, strategies as st

from gatewayd.billing.features import DEFAULT_TIERS, HOSTED_TOOLS
from gatewayd.catalogue import Rates
from gatewayd.config import load_config
from gatewayd.endpoints import CHAT, GEMINI_GENERATE, MESSAGES, RESPONSES, Ctx, parse_body, read_canonical
from gatewayd.errors import BodyError
from gatewayd.providers import builder
from gatewayd.providers.base import Call

CONFIG = load_config(None, environ={})
TOOL_NAMES = ("web_search", "web_fetch", "code_interpreter", "file_search", "image_generation", "computer_use",
              "mcp", "google_maps")
TIERS = {"flex": Rates(input=1, output=1), "priority": Rates(input=9, output=90), "fast": Rates(input=9, output=90)}


def priced(model_id: str):
    """The catalogue model with every hosted tool and a few tiers priced: what is refused is
    then refused for its shape, not for a missing price."""
    model = CONFIG.models[model_id]
    return attrs.evolve(model, tool_prices={name: 1000 for name in TOOL_NAMES}, service_tiers=TIERS)


class _Upstream:
    def post(self, url, body, headers, *, stream):
        return httpx.Request("POST", url, content=body, headers=headers)


# -- raw JSON with duplicate keys --------------------------------------------------------------


class Obj:
    """A JSON object as a list of pairs: a key may be there twice."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs

    def __repr__(self) -> str:
        return dump(self)


def dump(value: Any) -> str:
    if isinstance(value, Obj):
        return "{" + ",".join(json.dumps(k) + ":" + dump(v) for k, v in value.pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


@st.composite
def obj(draw, fields: dict[str, Any]) -> Obj:
    """An object with some of ``fields`` (name -> strategy of its value), sometimes one pair twice."""
    pairs = [(name, draw(value)) for name, value in fields.items() if draw(st.booleans())]
    if pairs and draw(st.integers(0, 4)) == 0:
        name, _ = draw(st.sampled_from(pairs))
        pairs.insert(draw(st.integers(0, len(pairs))), (name, draw(fields[name])))
    return Obj(pairs)


def spelled(camel: str, snake: str) -> st.SearchStrategy[str]:
    return st.sampled_from((camel, snake))


WRONG = st.one_of(st.text(max_size=3), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
                  st.just([1]), st.just({"a": 1}))
COUNT = st.one_of(st.integers(-1, 9), st.just("8"), st.just(8.0), st.booleans())
CAP = st.one_of(st.integers(0, 200_000), st.just("100"), st.just(10.5))
TIER = st.one_of(st.sampled_from(("auto", "default", "flex", "priority", "fast", "scale", "standard")), WRONG)


# -- Gemini --------------------------------------------------------------------------------------


@st.composite
def gemini_body(draw) -> Obj:
    config_fields = {
        draw(spelled("candidateCount", "candidate_count")): COUNT,
        draw(spelled("maxOutputTokens", "max_output_tokens")): CAP,
        draw(spelled("candidateCount", "candidate_count")): COUNT,  # maybe both spellings
        draw(spelled("responseModalities", "response_modalities")): st.one_of(
            st.lists(st.sampled_from(("TEXT", "text", "AUDIO", "IMAGE")), max_size=2), WRONG),
        draw(spelled("thinkingConfig", "thinking_config")): st.one_of(
            obj({draw(spelled("thinkingBudget", "thinking_budget")): st.integers(-1, 300_000)}), WRONG),
    }
    tool = obj({draw(spelled("googleSearch", "google_search")): st.just(Obj([])),
                draw(spelled("codeExecution", "code_execution")): st.just(Obj([])),
                draw(spelled("urlContext", "url_context")): st.one_of(st.just(Obj([])), WRONG),
                draw(spelled("functionDeclarations", "function_declarations")): st.just(
                    [Obj([("name", "f"), ("parameters", Obj([("type", "OBJECT")]))])])})
    file_part = obj({draw(spelled("fileData", "file_data")): obj({
        draw(spelled("fileUri", "file_uri")): st.sampled_from((
            "gs://b/x.mp4", "https://generativelanguage.googleapis.com/v1beta/files/a", "https://example.com/c.png",
            "files/abc", "https://example.com/a.mp4")),
        draw(spelled("mimeType", "mime_type")): st.sampled_from(("image/png", "video/mp4", "application/pdf"))})})
    parts = [Obj([("text", "hello")])] + draw(st.lists(file_part, max_size=1))
    fields = {
        draw(spelled("generationConfig", "generation_config")): st.one_of(obj(config_fields), WRONG),
        draw(spelled("generationConfig", "generation_config")): obj(config_fields),
        "tools": st.one_of(st.lists(tool, max_size=2), WRONG),
        draw(spelled("cachedContent", "cached_content")): st.one_of(st.just("cachedContents/c"), WRONG),
        draw(spelled("serviceTier", "service_tier")): TIER,
    }
    body = draw(obj(fields))
    return Obj([("contents", [Obj([("role", "user"), ("parts", parts)])]), *body.pairs])


def gemini_reads(raw: bytes) -> dict[str, Any]:
    """A generateContent body as Google reads it: either spelling, never both."""

    def get(doc: Any, camel: str) -> Any:
        if not isinstance(doc, dict):
            return None
        snake = "".join("_" + c.lower() if c.isupper() else c for c in camel)
        assert snake == camel or not (camel in doc and snake in doc), f"{camel} sent upstream in both spellings"
        return doc.get(camel, doc.get(snake))

    body = strict_json(raw)
    config = get(body, "generationConfig") or {}
    assert isinstance(config, dict)
    tools = set()
    for tool in get(body, "tools") or ():
        for key in tool:
            name = "".join(w.capitalize() if i else w for i, w in enumerate(key.split("_")))
            if name != "functionDeclarations":
                tools.add(HOSTED_TOOLS.get(name, name))
    files = []
    for content in get(body, "contents") or ():
        for part in get(content, "parts") or ():
            data = get(part, "fileData")
            if data is not None:
                files.append((get(data, "fileUri"), get(data, "mimeType")))
    tier = get(body, "serviceTier")
    tier = None if tier is None or tier.lower() in DEFAULT_TIERS else tier
    return {"choices": get(config, "candidateCount") or 1, "cap": get(config, "maxOutputTokens"),
            "tools": tools, "cached": get(body, "cachedContent") or tier, "files": files, "tier": None}


# -- chat, messages, responses -------------------------------------------------------------------


USER = [Obj([("role", "user"), ("content", "hello")])]


@st.composite
def chat_body(draw) -> Obj:
    fields = {"n": COUNT, "max_tokens": CAP, "max_completion_tokens": CAP, "service_tier": TIER,
              "web_search_options": st.one_of(st.just(Obj([])), WRONG),
              "tools": st.one_of(st.just([Obj([("type", "function"), ("function", Obj([("name", "f")]))])]), WRONG)}
    return Obj([("model", "m"), ("messages", USER), *draw(obj(fields)).pairs])


@st.composite
def messages_body(draw) -> Obj:
    tool = obj({"type": st.sampled_from(("web_search_20250305", "web_fetch_20250910", "code_execution_20250825",
                                         "bash_20250124", "custom")),
                "name": st.just("t"), "max_uses": COUNT})
    fields = {"max_tokens": CAP, "service_tier": TIER, "speed": st.one_of(st.sampled_from(("standard", "fast")), WRONG),
              "tools": st.one_of(st.lists(tool, max_size=2), WRONG),
              "mcp_servers": st.one_of(st.just([Obj([("type", "url"), ("url", "https://m.example/x")])]), WRONG),
              "inference_geo": st.sampled_from(("global", "us"))}
    body = draw(obj(fields))
    return Obj([("model", "m"), ("messages", USER), *body.pairs])


@st.composite
def responses_body(draw) -> Obj:
    tool = obj({"type": st.sampled_from(("web_search", "code_interpreter", "function", "mcp", "image_generation")),
                "name": st.just("t")})
    fields = {"max_output_tokens": CAP, "service_tier": TIER, "max_tool_calls": COUNT,
              "tools": st.one_of(st.lists(tool, max_size=2), WRONG)}
    return Obj([("model", "m"), ("input", "hello"), *draw(obj(fields)).pairs])


def openai_chat_reads(raw: bytes) -> dict[str, Any]:
    body = strict_json(raw)
    caps = {body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None}
    assert len(caps) == 1, f"upstream chat caps {caps}"
    tier = body.get("service_tier")
    return {"choices": body.get("n", 1), "cap": caps.pop(), "cached": None, "files": [],
            "tools": {"web_search"} if body.get("web_search_options") is not None else set(),
            "tier": None if tier is None or tier in DEFAULT_TIERS else tier}


def anthropic_reads(raw: bytes) -> dict[str, Any]:
    body = strict_json(raw)
    tools, calls = set(), 0
    for tool in body.get("tools") or ():
        kind = tool.get("type", "custom")
        for prefix, name in (("web_search_", "web_search"), ("web_fetch_", "web_fetch"),
                             ("code_execution_", "code_interpreter")):
            if kind.startswith(prefix):
                tools.add(name)
                if name == "code_interpreter":
                    calls += tool.get("max_uses") or 1
                else:
                    assert isinstance(tool.get("max_uses"), int), "a server tool went upstream unbounded"
                    calls += tool["max_uses"]
    speed, tier = body.get("speed"), body.get("service_tier")
    tier = None if tier is None or tier in DEFAULT_TIERS else tier
    return {"choices": 1, "cap": body.get("max_tokens"), "tools": tools, "calls": calls,
            "cached": body.get("mcp_servers") or (body.get("inference_geo") not in (None, "global") or None),
            "files": [], "tier": speed if speed not in (None, "standard") else tier}


def responses_reads(raw: bytes) -> dict[str, Any]:
    body = strict_json(raw)
    tools = {HOSTED_TOOLS.get(t["type"], t["type"]) for t in body.get("tools") or ()
             if t.get("type") not in (None, "function", "custom")}  # no type: the provider's 400
    tier = body.get("service_tier")
    if tools:
        assert isinstance(body.get("max_tool_calls"), int), "hosted tools went upstream unbounded"
    return {"choices": 1, "cap": body.get("max_output_tokens"), "tools": tools, "cached": None, "files": [],
            "calls": body.get("max_tool_calls", 0) if tools else 0,
            "tier": None if tier is None or tier in DEFAULT_TIERS else tier}


def strict_json(raw: bytes) -> Any:
    def no_twice(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"a key twice in the upstream body: {keys}"
        return dict(pairs)

    return json.loads(raw, object_pairs_hook=no_twice)


READERS = {"/chat/completions": openai_chat_reads, "/messages": anthropic_reads, "/responses": responses_reads,
           ":generateContent": gemini_reads}


# -- the property --------------------------------------------------------------------------------


def held_and_sent(endpoint, model_id: str, doc: Obj, path: str = "") -> tuple[Any, dict[str, Any]] | None:
    """The route's asks and the provider's reading of its upstream body; None for a 400."""
    raw = dump(doc).encode()
    ctx = Ctx(request_id="t", client_ip=None, headers={}, endpoint=endpoint.name, path=path)
    model = priced(model_id)
    try:
        body = parse_body(raw)
        if endpoint is not GEMINI_GENERATE:
            body = {**body, "model": model_id} if isinstance(body.get("model"), str) else body
            raw = orjson.dumps(body) if raw != orjson.dumps(body) and "model" in body else raw
        body, raw, asked = read_canonical(endpoint, body, raw, ctx)
        call = Call(client_format=endpoint.client_format, model=model, body=body, raw=raw, stream=asked.stream)
        target = model.routes[0]
        route = builder(endpoint.client_format, target.provider.protocol)(call, target, _Upstream())
    except BodyError:
        return None  # the client's 400: nothing sent, nothing held
    url = str(route.request.url)
    reader = next(r for suffix, r in READERS.items() if url.endswith(suffix))
    return route.asks, reader(route.request.content)


def check(asks, reads: dict[str, Any]) -> None:
    assert reads["cached"] is None, "a context cache or an MCP server went upstream"
    for uri, mime in reads["files"]:
        assert uri.startswith("https://example.com/") and mime in ("image/png", "application/pdf"), uri
    assert asks.unpriceable == ()
    assert reads["choices"] == asks.choices
    assert reads["cap"] == asks.output_cap
    assert reads["tools"] == set(asks.tools)
    assert reads["tier"] == asks.tier
    if "calls" in reads:
        assert reads["calls"] == asks.max_tool_calls


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(gemini_body(), st.sampled_from(("gemini-2.5-flash", "gpt-4.1", "claude-sonnet-4-5")))
def test_gemini_bodies_send_what_the_hold_priced(doc, model_id):
    found = held_and_sent(GEMINI_GENERATE, model_id, doc, f"/v1beta/models/{model_id}:generateContent")
    if found is not None:
        check(*found)


@SETTINGS
@given(chat_body(), st.sampled_from(("gpt-4.1", "gemini-2.5-flash", "claude-sonnet-4-5")))
def test_chat_bodies_send_what_the_hold_priced(doc, model_id):
    found = held_and_sent(CHAT, model_id, doc)
    if found is not None:
        check(*found)


@SETTINGS
@given(messages_body())
def test_messages_bodies_send_what_the_hold_priced(doc):
    found = held_and_sent(MESSAGES, "claude-sonnet-4-5", doc)
    if found is not None:
        check(*found)


@SETTINGS
@given(responses_body())
def test_responses_bodies_send_what_the_hold_priced(doc):
    found = held_and_sent(RESPONSES, "gpt-4.1", doc)
    if found is not None:
        check(*found)


def test_n1_is_among_the_bodies():
    """The issue's body itself: refused or held for its eight candidates."""
    doc = Obj([("contents", [Obj([("role", "user"), ("parts", [Obj([("text", "hi")])])])]),
               ("generationConfig", Obj([("candidate_count", 8)]))])
    found = held_and_sent(GEMINI_GENERATE, "gemini-2.5-flash", doc, "/v1beta/models/gemini-2.5-flash:generateContent")
    assert found is not None
    asks, reads = found
    assert asks.choices == reads["choices"] == 8
