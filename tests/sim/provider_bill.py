"""What a provider bills for one answer, from the provider's own documents alone.

The independent check of gatewayd's charge: written from the vendors' published billing rules,
it imports nothing from ``gatewayd`` (least of all ``gatewayd.billing``). A property test
compares ``provider_bill(...)`` with the gateway's ``cost_nano`` for the same answer.

``answer`` is the provider's whole answer in its non-stream shape (a stream's answer is the
same document; the simulator's request log holds it as ``answer``):

- ``"chat"``: the ``chat.completion`` (``usage``, top-level ``service_tier``);
- ``"responses"``: the ``response`` (``usage``, ``service_tier``, and ``output`` for the
  built-in tool calls: each ``web_search_call`` and ``file_search_call`` is one call, code
  interpreter is billed per distinct ``container_id``);
- ``"messages"``: the Anthropic ``message`` (or its ``usage``; ``usage.service_tier`` and
  ``usage.server_tool_use.*_requests``);
- ``"converse"``: Bedrock's ``Converse`` answer (``usage``: ``inputTokens`` without the cache,
  ``cacheReadInputTokens`` at the cached rate, ``cacheWriteInputTokens`` at the write rate);
  Claude on Bedrock (InvokeModel) answers the Anthropic ``message``: ``"messages"``;
- ``"gemini"``: the ``GenerateContentResponse`` (``usageMetadata``; each
  ``groundingMetadata.webSearchQueries`` entry is one search, as Gemini 3 bills).

``prices`` (integer nano-dollars, as a provider's price list read in nano a token)::

    {"input": 3000, "output": 15000, "cached_input": 300,            # nano a token
     "cache_write": 3750, "cache_write_1h": 6000,                     # optional
     "long_context": {"above_input_tokens": 200000, "input": 6000, ...},   # optional
     "service_tiers": {"priority": {"input": ..., "output": ...}},    # optional
     "tools": {"web_search": 10_000_000, "code_interpreter": 30_000_000}}  # nano a call

Rules (the vendors'):

- OpenAI chat / responses: the prompt count includes cached tokens; cached tokens are billed at
  the cached rate, the rest of the prompt at the input rate (cache writes are not surcharged
  unless the price list has ``cache_write`` and the answer reports ``cache_write_tokens``);
  reasoning tokens are part of the output count and billed as output; ``n`` choices are all in
  the one usage.
- Anthropic: ``input_tokens`` excludes the cache; ``cache_read_input_tokens`` at the cached rate;
  writes at 1.25x input for 5 minutes and 2x for 1 hour (``cache_creation`` says which; without
  it all writes are 5-minute), unless the price list gives the write rates; thinking is in
  ``output_tokens``.
- Gemini: ``promptTokenCount`` includes ``cachedContentTokenCount`` and
  ``toolUsePromptTokenCount`` is extra input; output is ``candidatesTokenCount`` +
  ``thoughtsTokenCount``.
- Long context (Anthropic, Gemini, and OpenAI models that have it): when the whole input
  (uncached + cached + cache writes) is above ``above_input_tokens``, *every* token of the
  request takes the long-context rates (a rate missing there keeps the base rate).
- A service tier other than the default one (``default``, ``auto``, ``standard``) takes that
  tier's rates (missing ones keep the base rate).
- The total is exact (integer prices times integer counts); a fractional default rate (1.25x)
  is rounded half up once, on the total.
"""

from __future__ import annotations

from fractions import Fraction

DEFAULT_TIERS = ("default", "auto", "standard", None)
RATE_NAMES = ("input", "output", "cached_input", "cache_write", "cache_write_1h")


def _rates(prices: dict, tier: str | None, long_context: bool) -> dict:
    rates = {name: prices.get(name) for name in RATE_NAMES}
    if tier not in DEFAULT_TIERS:
        tiered = (prices.get("service_tiers") or {}).get(tier)
        if tiered is None:
            raise KeyError(f"no prices for service tier {tier!r}")
        rates.update({k: v for k, v in tiered.items() if k in RATE_NAMES and v is not None})
    if long_context:
        longer = prices["long_context"]
        rates.update({k: max(v, rates[k] or 0) for k, v in longer.items() if k in RATE_NAMES and v is not None})
    return rates


def _is_long(prices: dict, input_tokens: int) -> bool:
    long_context = prices.get("long_context")
    return long_context is not None and input_tokens > long_context["above_input_tokens"]


def _round(value: Fraction) -> int:
    return int(value + Fraction(1, 2)) if value >= 0 else -int(-value + Fraction(1, 2))


def _tools(prices: dict, counts: dict[str, int]) -> Fraction:
    total = Fraction(0)
    for name, count in counts.items():
        if count:
            total += count * prices["tools"][name]  # KeyError: an unpriced tool (the gateway must refuse it)
    return total


def _openai(answer: dict, prices: dict, *, usage_key_in: str, usage_key_out: str, details_in: str) -> Fraction:
    usage = answer.get("usage") if "usage" in answer else answer
    prompt = usage[usage_key_in]
    details = usage.get(details_in) or {}
    cached = details.get("cached_tokens") or 0
    writes = (details.get("cache_write_tokens") or 0) if prices.get("cache_write") is not None else 0
    r = _rates(prices, answer.get("service_tier"), _is_long(prices, prompt))
    return (Fraction(prompt - cached - writes) * r["input"]
            + Fraction(cached) * (r["cached_input"] if r["cached_input"] is not None else r["input"])
            + Fraction(writes) * (r["cache_write"] or 0)
            + Fraction(usage[usage_key_out]) * r["output"])


def _responses_tools(answer: dict) -> dict[str, int]:
    items = answer.get("output") or []
    return {
        "web_search": sum(1 for i in items if i.get("type") == "web_search_call"),
        "file_search": sum(1 for i in items if i.get("type") == "file_search_call"),
        "code_interpreter": len({i["container_id"] for i in items if i.get("type") == "code_interpreter_call"}),
    }


def _anthropic(answer: dict, prices: dict) -> Fraction:
    usage = answer.get("usage") if "usage" in answer else answer
    uncached = usage["input_tokens"]
    read = usage.get("cache_read_input_tokens") or 0
    writes = usage.get("cache_creation_input_tokens") or 0
    breakdown = usage.get("cache_creation")
    writes_1h = breakdown["ephemeral_1h_input_tokens"] if breakdown else 0
    writes_5m = breakdown["ephemeral_5m_input_tokens"] if breakdown else writes
    r = _rates(prices, usage.get("service_tier"), _is_long(prices, uncached + read + writes))
    write_5m = r["cache_write"] if r["cache_write"] is not None else Fraction(5, 4) * r["input"]
    write_1h = r["cache_write_1h"] if r["cache_write_1h"] is not None else 2 * r["input"]
    servers = usage.get("server_tool_use") or {}
    tools = {"web_search": servers.get("web_search_requests") or 0, "web_fetch": servers.get("web_fetch_requests") or 0}
    return (Fraction(uncached) * r["input"]
            + Fraction(read) * (r["cached_input"] if r["cached_input"] is not None else r["input"])
            + writes_5m * Fraction(write_5m) + writes_1h * Fraction(write_1h)
            + Fraction(usage["output_tokens"]) * r["output"] + _tools(prices, tools))


def _gemini(answer: dict, prices: dict) -> Fraction:
    meta = answer.get("usageMetadata") if "usageMetadata" in answer else answer
    prompt = (meta.get("promptTokenCount") or 0) + (meta.get("toolUsePromptTokenCount") or 0)
    cached = meta.get("cachedContentTokenCount") or 0
    output = (meta.get("candidatesTokenCount") or 0) + (meta.get("thoughtsTokenCount") or 0)
    r = _rates(prices, None, _is_long(prices, meta.get("promptTokenCount") or 0))
    searches = sum(len((c.get("groundingMetadata") or {}).get("webSearchQueries") or [])
                   for c in answer.get("candidates") or [])
    return (Fraction(prompt - cached) * r["input"]
            + Fraction(cached) * (r["cached_input"] if r["cached_input"] is not None else r["input"])
            + Fraction(output) * r["output"] + _tools(prices, {"web_search": searches}))


def _converse(answer: dict, prices: dict) -> Fraction:
    usage = answer.get("usage") if "usage" in answer else answer
    uncached = usage["inputTokens"]
    read = usage.get("cacheReadInputTokens") or 0
    writes = usage.get("cacheWriteInputTokens") or 0
    r = _rates(prices, None, _is_long(prices, uncached + read + writes))
    write = r["cache_write"] if r["cache_write"] is not None else Fraction(5, 4) * r["input"]
    return (Fraction(uncached) * r["input"]
            + Fraction(read) * (r["cached_input"] if r["cached_input"] is not None else r["input"])
            + writes * Fraction(write) + Fraction(usage["outputTokens"]) * r["output"])


def provider_bill(protocol: str, answer: dict, prices: dict) -> int:
    """Nano-dollars the provider bills for ``answer`` (see the module docstring)."""
    if protocol == "chat":
        total = _openai(answer, prices, usage_key_in="prompt_tokens", usage_key_out="completion_tokens",
                        details_in="prompt_tokens_details")
    elif protocol == "responses":
        total = _openai(answer, prices, usage_key_in="input_tokens", usage_key_out="output_tokens",
                        details_in="input_tokens_details") + _tools(prices, _responses_tools(answer))
    elif protocol == "messages":
        total = _anthropic(answer, prices)
    elif protocol == "gemini":
        total = _gemini(answer, prices)
    elif protocol == "converse":
        total = _converse(answer, prices)
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    return _round(total)
