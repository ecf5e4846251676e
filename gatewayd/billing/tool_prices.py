"""The providers' list prices for their hosted tools: what a model whose config says nothing
about ``tool_prices`` is charged for them.

A model's hosted tools are billed by its provider per call (a web search, a code container);
the gateway refuses a request asking for one it has no price for (400 ``unpriced_feature``,
:func:`gatewayd.billing.features.require_prices`). Codex sends a hosted ``web_search`` tool
with every request: a model an operator adds without ``tool_prices`` would refuse every Codex
turn. So a model whose config has no ``tool_prices`` key gets its provider protocol's list
prices from this table; ``tool_prices = {}`` refuses them all, and a table of its own replaces
this one whole. A protocol not here (Azure, Bedrock, Vertex: the clouds price the tools
differently, or not per call) gets none: its hosted tools are refused until the operator
prices them.

The figures are the providers' price pages, checked 2026-11-29 (the same as the default
catalogue's ``tool_prices``, gatewayd/data/catalogue.toml):

- OpenAI (platform.openai.com/docs/pricing, "Built-in tools"): web search $10 / 1k calls on
  reasoning models; the preview tool on non-reasoning models $25 / 1k (the higher is taken:
  the client chooses the tool's version); file search $2.50 / 1k calls; code interpreter
  $0.03 a container.
- Anthropic (docs.anthropic.com pricing, "Server tools"): web search $10 / 1k searches; web
  fetch costs only its tokens.
- Google (ai.google.dev/gemini-api/docs/pricing): grounding with Google Search $35 / 1k
  grounded prompts.

Every figure is USD per call, as a string (exact in nano-dollars).
"""

from __future__ import annotations

from collections.abc import Mapping

from gatewayd.money import usd_to_nano

_OPENAI_TOOLS = {"file_search": "0.0025", "code_interpreter": "0.03"}

# protocol -> (prices for a non-reasoning model, prices for a reasoning model)
PROVIDER_TOOL_PRICES: Mapping[str, tuple[Mapping[str, str], Mapping[str, str]]] = {
    "openai": ({"web_search": "0.025", **_OPENAI_TOOLS}, {"web_search": "0.01", **_OPENAI_TOOLS}),
    "anthropic": ({"web_search": "0.01", "web_fetch": "0"},) * 2,
    "gemini": ({"web_search": "0.035"},) * 2,
}


def default_tool_prices(protocols: list[str], reasoning: bool) -> dict[str, int]:
    """Nano-dollars a call for each hosted tool every one of ``protocols`` (a model's routes)
    prices, at the highest of their prices: the charge never falls short of what any route's
    provider bills. A protocol without list prices here leaves the model with none."""
    tables = []
    for protocol in protocols:
        table = PROVIDER_TOOL_PRICES.get(protocol)
        if table is None:
            return {}
        tables.append(table[1 if reasoning else 0])
    common = set.intersection(*(set(t) for t in tables)) if tables else set()
    return {name: max(usd_to_nano(t[name]) for t in tables) for name in sorted(common)}
