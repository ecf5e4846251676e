"""The Models page: every model the account may call and what it costs, before calling it.

Prices are the catalogue's (``gatewayd.catalogue.Model``, as ``gatewayd.billing.pricing``
charges them), per 1,000,000 tokens as the providers publish them, at the price ratio of
the group an unpinned key of this account uses (``gatewayd.access.authorize_model`` picks
it the same way); other groups the account may pin a key to are listed with their ratio.
"""

from __future__ import annotations

from quart import Blueprint

from gatewayd.catalogue import Model
from gatewayd.config import Config, Group
from gatewayd.console.web import Console, page, signed_in
from gatewayd.records import Account

ENDPOINTS = (("chat", "/v1/chat/completions"), ("responses", "/v1/responses"), ("messages", "/v1/messages"),
             ("embeddings", "/v1/embeddings"))


def default_group(config: Config, account: Account) -> Group:
    """The group an unpinned key's requests are priced at (``access.authorize_model``'s rule)."""
    return next((config.groups[g] for g in account.groups if g in config.groups and not config.groups[g].retired),
                config.groups["default"])


def model_row(model: Model, account: Account) -> dict:
    if model.kind == "embedding" and model.id not in account.embedding_models:
        state = "Not enabled for this account: ask your operator"
    elif not model.priced:
        state = "Not priced yet: refused (model_price_error)"
    else:
        state = ""
    return {
        "model": model,
        "endpoints": [path for name, path in ENDPOINTS
                      if name in model.client_formats and (name == "embeddings") == (model.kind == "embedding")],
        "state": state,
        "tools": sorted(model.tool_prices.items()),
        "tiers": sorted(model.service_tiers.items()),
    }


def register(bp: Blueprint, console: Console) -> None:
    @bp.get("/models")
    async def models():
        account = signed_in()
        config = console.config
        group = default_group(config, account)
        other_groups = [config.groups[g] for g in account.groups
                        if g in config.groups and not config.groups[g].retired and g != group.name]
        threshold = config.server.models_visible_after_paid_nano
        rows = [model_row(m, account) for m in config.models.values()]
        return await page(console, "models.html", nav="models", rows=rows, group=group, other_groups=other_groups,
                          missing_nano=max(0, threshold - account.total_paid_nano), threshold_nano=threshold)
