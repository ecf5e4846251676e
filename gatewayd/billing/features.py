"""What a request asks the provider for, in billing terms, and the refusals of what has no price.

The hold must cover everything the provider can bill for a body (docs/billing.md, "What the
hold covers"). Output is bounded by the cap field the *upstream* protocol reads, times every
multiplier of it; input by the estimate, times the model passes a hosted tool may add; rates
by the worst that can apply (requested tier, long context, cache writes, audio). This module
reads those asks from the body the provider will receive, per protocol:

- chat (OpenAI Chat Completions): ``max_completion_tokens`` / ``max_tokens`` (two that
  disagree are refused), ``n``, ``prediction``, ``service_tier``, ``modalities`` / ``audio``,
  ``input_audio`` parts, ``web_search_options``;
- responses (OpenAI Responses): ``max_output_tokens``, ``service_tier``, hosted tools and
  ``max_tool_calls``;
- messages (Anthropic): ``max_tokens``, ``service_tier``, ``speed``, server tools and their
  ``max_uses``, ``cache_control`` markers and their ``ttl``;
- gemini (generateContent): ``generationConfig.maxOutputTokens`` and ``candidateCount``,
  ``googleSearch`` / ``codeExecution`` tools.

A cap field the protocol does not have (``max_completion_tokens`` on /v1/messages) is the
client's 400 (:func:`check_cap_fields`): the provider would ignore it, or read it where we
did not. Anything billable the model has no price for is refused before the provider with
400 ``unpriced_feature`` naming it (:func:`require_prices`), and so is what no price can bound
(``Asks.unpriceable``: a Gemini ``cachedContent``, ``fileData`` naming a stored or remote file,
a Gemini ``serviceTier``, Anthropic's ``mcp_servers`` and ``inference_geo``). Wrong types in
the fields read here are the client's 400, never a 500. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import attrs

from gatewayd.catalogue import Model
from gatewayd.errors import BodyError
from gatewayd.formats.thinking import fit_budget

# Vendor tool types -> the catalogue's ``tool_prices`` names (one table for every protocol).
# Anthropic's server tools are versioned (``web_search_20250305``): matched by prefix below.
HOSTED_TOOLS = {
    # OpenAI Responses built-in tools
    "web_search": "web_search",
    "web_search_preview": "web_search",
    "web_search_2025_08_26": "web_search",
    "web_search_preview_2025_03_11": "web_search",
    "file_search": "file_search",
    "code_interpreter": "code_interpreter",
    "image_generation": "image_generation",
    "computer_use_preview": "computer_use",
    "computer_use": "computer_use",
    "computer": "computer_use",
    "mcp": "mcp",
    # Gemini tools (keys of a ``tools[]`` entry)
    "googleSearch": "web_search",
    "google_search": "web_search",
    "googleSearchRetrieval": "web_search",
    "google_search_retrieval": "web_search",
    "codeExecution": "code_interpreter",
    "code_execution": "code_interpreter",
    "urlContext": "web_fetch",
    "url_context": "web_fetch",
    "googleMaps": "google_maps",
    "fileSearch": "file_search",
}
ANTHROPIC_SERVER_TOOL_PREFIXES = {
    "web_search_": "web_search",
    "web_fetch_": "web_fetch",
    "code_execution_": "code_interpreter",  # billed per container, like OpenAI's
}
# Anthropic tool types the client runs itself (no fee): the model only asks for them
ANTHROPIC_CLIENT_TOOL_PREFIXES = ("custom", "bash_", "text_editor_", "computer_", "memory_", "tool_search_tool_")
# Responses tool types the client runs itself, or that the gateway translates to functions
RESPONSES_CLIENT_TOOLS = frozenset({"function", "custom", "namespace", "local_shell", "shell", "apply_patch",
                                    "tool_search"})
GEMINI_CLIENT_TOOLS = frozenset({"functionDeclarations", "function_declarations"})

# Most uses of a hosted tool per request when the client sets no bound: sent upstream
# (Anthropic ``max_uses`` per server tool, Responses ``max_tool_calls``) so the provider
# cannot make more calls than were held.
DEFAULT_MAX_TOOL_USES = 5
# Input one hosted call may add to the context (search results, a fetched page): the model
# reads it in the passes that follow. Anthropic's web_fetch is capped at this upstream
# (``max_content_tokens``) when the client sets no lower cap.
TOOL_RESULT_TOKENS = 10_000

# service_tier values that are the default tier (no entry in service_tiers needed)
DEFAULT_TIERS = frozenset({"auto", "default", "standard", "standard_only", "on_demand"})

CHAT_CAPS = ("max_completion_tokens", "max_tokens")
CAP_FIELDS = {"chat": CHAT_CAPS, "responses": ("max_output_tokens",), "messages": ("max_tokens",)}
ALL_CAPS = frozenset({"max_completion_tokens", "max_tokens", "max_output_tokens", "maxOutputTokens"})


class UnpricedFeature(BodyError):
    """400 ``unpriced_feature``: the request asks for something billable that its model has no
    price for. A :class:`BodyError`, so a model's other route that does not carry the feature
    (a translation that drops hosted tools) may still serve the request."""

    def __init__(self, feature: str, model: Model, param: str | None = None, *, what_to_do: str = "") -> None:
        super().__init__(f"{feature} is not priced for model {model.id} on this gateway; "
                         f"the request was not sent{what_to_do}", param=param)
        self.code = "unpriced_feature"
        self.feature = feature
        self.reason = f"{feature} has no price"


def _unpriced_tool(name: str, model: Model) -> UnpricedFeature:
    """A hosted tool without a price: what the client changes (leave the tool out; Codex sends
    web_search unless its config turns web search off) and what the operator configures."""
    client = "; leave the tool out of the request"
    if name == "web_search":
        client += ' (Codex: web_search = "disabled" in its config.toml)'
    operator = (f"; or the gateway's operator prices it: tool_prices = {{ {name} = USD_PER_CALL }} in the "
                f"model's [[models]] entry")
    return UnpricedFeature(f"the hosted tool {name!r}", model, "tools", what_to_do=client + operator)


@attrs.frozen
class Asks:
    """What one upstream request may be billed for, besides its input estimate."""

    output_cap: int  # output tokens per choice, as the upstream protocol reads them (sent upstream)
    choices: int = 1  # n / candidateCount: output and per-choice extras multiply by this
    prediction_tokens: int = 0  # OpenAI predicted outputs: rejected ones are billed as output, per choice
    tier: str | None = None  # a requested non-default service tier
    tools: tuple[str, ...] = ()  # hosted/server tools (catalogue names), sorted
    max_tool_calls: int = 0  # most hosted-tool calls in all (each a fee and one more model pass)
    cache_write: bool = False  # cache_control markers: input may be written to the cache
    cache_1h: bool = False  # ... with a 1-hour TTL
    audio_input: bool = False
    audio_output: bool = False
    image_output: bool = False
    # billable things no catalogue price can bound (a Gemini context cache, a stored or remote
    # file, Anthropic's MCP connector): (what, the field naming it); always refused
    unpriceable: tuple[tuple[str, str], ...] = ()

    @property
    def output_tokens(self) -> int:
        """The hold's output allowance: every choice's cap and rejected predictions."""
        return self.choices * (self.output_cap + self.prediction_tokens)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_cap_fields(body: dict[str, Any], fmt: str) -> int | None:
    """The client's output cap on a ``fmt`` (chat, messages, responses) body, or None.

    400 when the body sets a cap field its protocol does not have (``max_completion_tokens``
    on /v1/messages, ``max_tokens`` on /v1/responses ...), a cap that is not a positive
    integer, or two chat caps that disagree. Called by the endpoints before anything else
    reads the body."""
    own = CAP_FIELDS[fmt]
    for name in ALL_CAPS:
        if name in body and name not in own:
            raise BodyError(f"field '{name}' is not a {_FORMAT_NAMES[fmt]} field; the output cap here is "
                            f"{' or '.join(repr(f) for f in own)}", param=name)
    values = {}
    for name in own:
        value = body.get(name)
        if value is None:
            continue
        if _positive(value) is None:
            raise BodyError(f"field '{name}' must be a positive integer", param=name)
        values[name] = value
    if len(set(values.values())) > 1:
        raise BodyError("max_completion_tokens and max_tokens disagree; send one of them", param="max_tokens")
    return next(iter(values.values()), None)


_FORMAT_NAMES = {"chat": "chat completions", "responses": "Responses API", "messages": "Messages API"}


def check_n(body: dict[str, Any]) -> int:
    value = body.get("n")
    if value is None:
        return 1
    n = _positive(value)
    if n is None:
        raise BodyError("field 'n' must be a positive integer", param="n")
    return n


def tool_list(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A body's ``tools``: an array of objects, else the client's 400 (never forwarded for the
    provider to read some other way, never a 500)."""
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BodyError("field 'tools' must be an array of tool objects", param="tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise BodyError(f"tools[{i}] must be an object", param=f"tools[{i}]")
    return tools


def _tier(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BodyError("field 'service_tier' must be a string", param="service_tier")
    return None if value in DEFAULT_TIERS else value


def capped(requested: int | None, model: Model) -> int:
    """The cap sent upstream: the client's, lowered to the model's ``max_output_tokens``
    (clients that do not know a model send 128000), or the model's when the client set none."""
    return model.max_output_tokens if requested is None else min(requested, model.max_output_tokens)


# -- chat -----------------------------------------------------------------------------------


def _audio_input(messages: Any) -> bool:
    """An ``input_audio`` part in the content of any chat message or Responses input item
    (both formats name the part the same)."""
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "input_audio":
                    return True
    return False


def chat_asks(body: dict[str, Any], model: Model, *, prediction_tokens: int = 0) -> Asks:
    """A chat completions body as an OpenAI-protocol upstream reads it (the cap already the
    one sent upstream: see :func:`chat_cap_change`)."""
    cap = capped(check_cap_fields(body, "chat"), model)
    n = check_n(body)
    tool_list(body)
    modalities = body.get("modalities")
    modalities = modalities if isinstance(modalities, list) else []
    search = body.get("web_search_options") is not None
    return Asks(
        output_cap=cap, choices=n, prediction_tokens=prediction_tokens, tier=_tier(body.get("service_tier")),
        tools=("web_search",) if search else (),
        max_tool_calls=n if search else 0,  # a search model searches once per answer
        audio_input=_audio_input(body.get("messages")),
        audio_output="audio" in modalities or body.get("audio") is not None,
        image_output="image" in modalities,
    )


def chat_cap_change(body: dict[str, Any], model: Model) -> dict[str, int | None]:
    """The chat cap field to set upstream: the client's (lowered to the model's maximum), else
    the model's maximum in ``max_completion_tokens`` (GPT family; reasoning models refuse
    ``max_tokens``). Other OpenAI-compatible providers always get ``max_tokens`` (the field
    they all read; equal to ``max_completion_tokens`` when the client sent that one)."""
    requested = check_cap_fields(body, "chat")
    cap = capped(requested, model)
    present = [name for name in CHAT_CAPS if body.get(name) is not None]
    changes: dict[str, int | None] = {name: cap for name in present if body[name] != cap}
    if model.family != "gpt" and "max_tokens" not in present:
        changes["max_tokens"] = cap  # OpenAI-compatible providers read max_tokens; maybe not the other
        if "max_completion_tokens" in present:
            # null, not both: a provider that reads both refuses them together (as OpenAI does)
            changes["max_completion_tokens"] = None
    elif not present:
        changes["max_completion_tokens"] = cap
    return changes


# -- responses ------------------------------------------------------------------------------


def _responses_tools(tools: Any) -> list[tuple[str, str]]:
    """(vendor type, catalogue name) of each hosted tool of a Responses ``tools`` list."""
    out: list[tuple[str, str]] = []
    if not isinstance(tools, list):
        return out
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str) or kind in RESPONSES_CLIENT_TOOLS:
            continue
        out.append((kind, HOSTED_TOOLS.get(kind, kind)))
    return out


def responses_asks(body: dict[str, Any], model: Model) -> Asks:
    cap = capped(check_cap_fields(body, "responses"), model)
    hosted = _responses_tools(tool_list(body))
    calls = 0
    if hosted:
        calls = _positive(body.get("max_tool_calls")) or DEFAULT_MAX_TOOL_USES
    return Asks(
        output_cap=cap, tier=_tier(body.get("service_tier")), tools=tuple(sorted({n for _, n in hosted})),
        max_tool_calls=calls, audio_input=_audio_input(body.get("input")),
        image_output="image_generation" in {n for _, n in hosted},
    )


def responses_changes(body: dict[str, Any], model: Model) -> dict[str, int]:
    """``max_output_tokens`` (lowered, or the model's maximum) and, with hosted tools and no
    bound, ``max_tool_calls``."""
    changes = {}
    requested = check_cap_fields(body, "responses")
    cap = capped(requested, model)
    if requested != cap:
        changes["max_output_tokens"] = cap
    if _responses_tools(body.get("tools")) and _positive(body.get("max_tool_calls")) is None:
        changes["max_tool_calls"] = DEFAULT_MAX_TOOL_USES
    return changes


# -- messages -------------------------------------------------------------------------------


def _anthropic_tool(tool: Any) -> str | None:
    """The catalogue name of an Anthropic server tool; None for a client tool."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind is None or not isinstance(kind, str):
        return None
    for prefix, name in ANTHROPIC_SERVER_TOOL_PREFIXES.items():
        if kind.startswith(prefix):
            return name
    if kind.startswith(ANTHROPIC_CLIENT_TOOL_PREFIXES):
        return None
    return kind  # an unknown tool type: a server tool we cannot price unless the catalogue names it


def _cache_markers(body: dict[str, Any]) -> tuple[bool, bool]:
    """(any cache_control marker, any with ttl "1h") in the places Anthropic reads them."""
    found = one_hour = False

    def seen(holder: Any) -> None:
        nonlocal found, one_hour
        marker = holder.get("cache_control") if isinstance(holder, dict) else None
        if marker is not None:
            found = True
            if isinstance(marker, dict) and marker.get("ttl") == "1h":
                one_hour = True

    seen(body)
    for place in (body.get("system"), body.get("tools")):
        if isinstance(place, list):
            for block in place:
                seen(block)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for block in content:
                    seen(block)
                    inner = block.get("content") if isinstance(block, dict) else None
                    if isinstance(inner, list):  # tool_result content blocks
                        for nested in inner:
                            seen(nested)
    return found, one_hour


def messages_asks(body: dict[str, Any], model: Model) -> Asks:
    """A messages body as Anthropic reads it (after :func:`messages_changes`)."""
    cap = capped(_positive(body.get("max_tokens")), model)
    names: set[str] = set()
    calls = 0
    for tool in tool_list(body):
        name = _anthropic_tool(tool)
        if name is None:
            continue
        names.add(name)
        calls += _positive(tool.get("max_uses")) or (1 if name == "code_interpreter" else DEFAULT_MAX_TOOL_USES)
    cache, one_hour = _cache_markers(body)
    tier = _tier(body.get("service_tier"))
    speed = body.get("speed")
    if speed is not None and not isinstance(speed, str):
        raise BodyError("field 'speed' must be a string", param="speed")
    if speed is not None and speed != "standard":  # Anthropic's fast mode: priced as a tier
        tier = speed
    unpriceable: tuple[tuple[str, str], ...] = ()
    if body.get("mcp_servers") is not None:
        # the MCP connector: remote tool calls with no max_uses, whose results are input of any
        # size, read in as many model passes as the model likes: no hold can bound them
        unpriceable += (("the MCP connector (mcp_servers)", "mcp_servers"),)
    geo = body.get("inference_geo")
    if geo is not None and geo != "global":
        # data residency: Anthropic bills inference kept in one geography at a premium, which the
        # catalogue has no rates for (and the usage says only after the fact)
        unpriceable += ((f"inference_geo {geo!r} (a data-residency premium)", "inference_geo"),)
    return Asks(output_cap=cap, tier=tier, tools=tuple(sorted(names)), max_tool_calls=calls,
                cache_write=cache, cache_1h=one_hour, unpriceable=unpriceable)


def messages_changes(body: dict[str, Any], model: Model) -> dict[str, Any]:
    """``max_tokens`` lowered to the model's maximum, and a thinking budget the lowered cap no
    longer holds lowered with it (:func:`fit_budget`: Anthropic refuses a budget at or above
    the cap); server tools given ``max_uses`` (and web_fetch ``max_content_tokens``) when the
    client set none."""
    changes: dict[str, Any] = {}
    requested = _positive(body.get("max_tokens"))
    if requested is not None and requested > model.max_output_tokens:
        changes["max_tokens"] = model.max_output_tokens
        thinking = body.get("thinking")
        if not isinstance(thinking, dict):
            thinking = {}
        budget = _positive(thinking.get("budget_tokens"))
        if budget is not None and thinking.get("type") == "enabled" and budget < requested:
            fitted = fit_budget(budget, model.max_output_tokens)
            if fitted is not None and fitted != budget:
                changes["thinking"] = {**thinking, "budget_tokens": fitted}
    tools = body.get("tools")
    if isinstance(tools, list):
        bounded = []
        changed = False
        for tool in tools:
            name = _anthropic_tool(tool)
            if name in ("web_search", "web_fetch") and _positive(tool.get("max_uses")) is None:
                tool = {**tool, "max_uses": DEFAULT_MAX_TOOL_USES}
                changed = True
            if name == "web_fetch" and (_positive(tool.get("max_content_tokens")) or TOOL_RESULT_TOKENS + 1) \
                    > TOOL_RESULT_TOKENS:
                tool = {**tool, "max_content_tokens": TOOL_RESULT_TOKENS}
                changed = True
            bounded.append(tool)
        if changed:
            changes["tools"] = bounded
    return changes


# -- gemini ---------------------------------------------------------------------------------


def gemini_asks(body: dict[str, Any], model: Model) -> Asks:
    """A generateContent body as Google reads it: the canonical form
    (:mod:`gatewayd.formats.gemini_body`: one camelCase spelling, types checked) that the
    pass-through sends, or the translation's output."""
    config = _object(body.get("generationConfig"), "generationConfig")
    cap = capped(_int_field(config, "maxOutputTokens", "generationConfig"), model)
    choices = _int_field(config, "candidateCount", "generationConfig")
    if choices is not None and choices < 1:
        raise BodyError("generationConfig.candidateCount must be a positive integer",
                        param="generationConfig.candidateCount")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BodyError("tools must be an array of Tool objects", param="tools")
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, dict):
            raise BodyError(f"tools[{i}] must be an object", param=f"tools[{i}]")
        for key in tool:
            if key not in GEMINI_CLIENT_TOOLS:
                names.add(HOSTED_TOOLS.get(key) or key)
    modalities = config.get("responseModalities")
    if modalities is not None and not (isinstance(modalities, list) and all(isinstance(m, str) for m in modalities)):
        raise BodyError("generationConfig.responseModalities must be an array of strings",
                        param="generationConfig.responseModalities")
    upper = [m.upper() for m in modalities or ()]
    unpriceable = _gemini_references(body)
    tier = _gemini_tier(body.get("serviceTier"))
    if tier is not None:  # a Gemini answer does not say which tier served it: no charge could follow it
        unpriceable += ((f"serviceTier {tier!r} (a Gemini answer does not say the tier it was served at)",
                         "serviceTier"),)
    return Asks(output_cap=cap, choices=choices or 1, tools=tuple(sorted(names)),
                max_tool_calls=DEFAULT_MAX_TOOL_USES * len(names),
                audio_output="AUDIO" in upper, image_output="IMAGE" in upper, unpriceable=unpriceable)


def _object(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BodyError(f"{name} must be an object", param=name)
    return value


def _int_field(holder: dict[str, Any], name: str, at: str) -> int | None:
    value = holder.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BodyError(f"{at}.{name} must be an integer", param=f"{at}.{name}")
    return value


def _gemini_tier(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BodyError("serviceTier must be a string", param="serviceTier")
    return None if value.lower() in DEFAULT_TIERS else value


# Google's own hosts: a fileUri there names a Files API upload, a cache or a YouTube video
# under the operator's Google account, not a public file
_GOOGLE_FILE_HOSTS = ("googleapis.com", "youtube.com", "youtu.be", "google.com")
# public URLs Gemini fetches itself, counted like the same file sent inline (the estimate's
# image and document allowances)
_FETCHED_TYPES = ("image/", "application/pdf")


def _file_uri_refusal(data: Any) -> str | None:
    """Why a ``fileData`` part cannot be priced, or None for a public image or PDF URL."""
    if not isinstance(data, dict):
        return "fileData that is not an object"
    uri = data.get("fileUri")
    mime = data.get("mimeType")
    if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
        scheme = uri.partition(":")[0] + ":" if isinstance(uri, str) and ":" in uri else "a Files API name"
        return f"fileData.fileUri ({scheme} files are stored under the operator's account, of a size the hold cannot see)"
    host = uri.split("://", 1)[1].split("/", 1)[0].split("@")[-1].split(":")[0].lower()
    if any(host == h or host.endswith("." + h) for h in _GOOGLE_FILE_HOSTS):
        return f"fileData.fileUri on {host} (a Files API upload or a video, of a size the hold cannot see)"
    if not isinstance(mime, str) or not mime.lower().startswith(_FETCHED_TYPES):
        return "fileData.fileUri of a type other than an image or a PDF (video and audio are billed by length)"
    return None


def _gemini_references(body: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """What a Gemini body names that Google bills and no price can bound: a context cache
    (``cachedContent``: its tokens are billed on every use, its storage by the hour, and it
    belongs to the operator's project) and ``fileData`` other than a public image or PDF URL
    (Files API uploads and ``gs://`` objects of the operator's account, videos)."""
    found: list[tuple[str, str]] = []
    if body.get("cachedContent") is not None:
        found.append(("cachedContent (a Gemini context cache)", "cachedContent"))
    places: list[tuple[str, Any]] = [("systemInstruction", body.get("systemInstruction"))]
    contents = body.get("contents")
    if isinstance(contents, list):
        places += [(f"contents[{i}]", content) for i, content in enumerate(contents)]
    i = 0
    while i < len(places):
        at, content = places[i]
        i += 1
        parts = content.get("parts") if isinstance(content, dict) else None
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            if not isinstance(part, dict):
                continue
            if part.get("fileData") is not None:
                why = _file_uri_refusal(part["fileData"])
                if why is not None:
                    found.append((why, f"{at}.parts[{j}].fileData.fileUri"))
            if isinstance(part.get("functionResponse"), dict):  # a multimodal tool result has parts too
                places.append((f"{at}.parts[{j}].functionResponse", part["functionResponse"]))
    return tuple(found)


def gemini_cap(body: dict[str, Any], model: Model) -> dict[str, Any]:
    """The Gemini body with ``generationConfig.maxOutputTokens`` set to the cap that is held
    (Gemini has no required cap: without one it may write up to the model's maximum), and a
    thinking budget above it lowered to it (Gemini counts thinking inside the cap)."""
    config = dict(_object(body.get("generationConfig"), "generationConfig"))
    cap = capped(_positive(config.get("maxOutputTokens")), model)
    config["maxOutputTokens"] = cap
    thinking = config.get("thinkingConfig")
    if isinstance(thinking, dict) and (_positive(thinking.get("thinkingBudget")) or 0) > cap:
        config["thinkingConfig"] = {**thinking, "thinkingBudget": cap}
    return {**body, "generationConfig": config}


# -- refusals -------------------------------------------------------------------------------


def require_prices(model: Model, asks: Asks) -> None:
    """400 ``unpriced_feature`` for the first thing ``asks`` wants that ``model`` has no price for."""
    for feature, param in asks.unpriceable:  # named in the message too: Google's envelope has no param
        raise UnpricedFeature(feature if param in feature else f"{feature} at {param}", model, param)
    if asks.tier is not None and asks.tier not in model.service_tiers:
        raise UnpricedFeature(f"service_tier {asks.tier!r}", model, "service_tier")
    for name in asks.tools:
        if name not in model.tool_prices:
            raise _unpriced_tool(name, model)
    if asks.cache_1h and model.cache_write_1h_price is None:
        raise UnpricedFeature("1-hour prompt caching (cache_control ttl '1h')", model, "cache_control")
    if asks.audio_input and model.audio_input_price is None:
        raise UnpricedFeature("audio input", model, "messages")
    if asks.audio_output and model.audio_output_price is None:
        raise UnpricedFeature("audio output", model, "modalities")
    if asks.image_output and model.image_output_price is None and "image_generation" not in asks.tools:
        raise UnpricedFeature("image output", model, "modalities")
