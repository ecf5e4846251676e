"""The admin API's price routes: each model's full schedule, and applying imported prices.

``GET /admin/v1/prices`` and ``GET /admin/v1/prices/{model}`` describe what the running daemon
charges (``gatewayctl prices show``, and the catalogue ``gatewayctl prices import`` diffs
against). ``POST /admin/v1/prices`` sets fields in the prices file and reloads;
``DELETE /admin/v1/prices/{model}`` removes a model's fields from it (back to the config
file's prices) and reloads. The file and its merge are :mod:`gatewayd.billing.price_overlay`.

A model's document: each price as ``*_nano`` (nano-dollars a token; for tools, a call) with
``*_usd`` beside it (USD per 1,000,000 tokens, as in the config file; for tools, USD per
call), ``fields`` (the flat schedule, :mod:`gatewayd.billing.price_list`) and ``sources``
(field -> ``"config"`` or ``"prices_file"``).
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
from quart import Response, request

from gatewayd.billing import price_overlay
from gatewayd.billing.price_list import RATE_FIELDS, CatalogueModel, PriceListError, check_field, schedule, usd_text
from gatewayd.catalogue import Model, Rates
from gatewayd.directory import DirectoryError

SOURCE_CONFIG = "config"
SOURCE_FILE = "prices_file"


def _price(doc: dict, name: str, nano: int | None) -> None:
    doc[f"{name}_nano"] = nano
    doc[f"{name}_usd"] = usd_text("input_price", nano)  # USD per 1M tokens


def _rates(rates: Rates) -> dict:
    doc: dict[str, Any] = {}
    for field in RATE_FIELDS:
        _price(doc, field, getattr(rates, field.removesuffix("_price")))
    return doc


def schedule_doc(model: Model, overlay: dict[str, int], prices_file: str) -> dict:
    """Everything that prices ``model``, and where each price came from."""
    doc: dict[str, Any] = {"model": model.id, "kind": model.kind,
                           "routes": [{"provider": r.provider.name, "protocol": r.provider.protocol,
                                       "upstream_id": r.upstream_id} for r in model.routes],
                           "max_output_tokens": model.max_output_tokens}
    doc.update(_rates(model.base_rates))
    for field in ("audio_input_price", "audio_output_price", "image_output_price"):
        _price(doc, field, getattr(model, field))
    doc["long_context"] = None if model.long_context is None else {
        "above_input_tokens": model.long_context.above_input_tokens, **_rates(model.long_context.rates)}
    doc["service_tiers"] = {tier: _rates(rates) for tier, rates in sorted(model.service_tiers.items())}
    doc["tool_prices"] = {name: {"price_nano": nano, "price_usd": usd_text("tool_prices." + name, nano)}
                          for name, nano in sorted(model.tool_prices.items())}
    fields = schedule(model)
    doc["fields"] = fields
    doc["sources"] = {f: SOURCE_FILE if f in overlay else SOURCE_CONFIG for f in fields}
    doc["catalogue"] = CatalogueModel.of(model).doc()
    doc["prices_file"] = prices_file
    return doc


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status=status, content_type="application/json")


def add_price_routes(app, directory, reload: Callable[[str], dict] | None) -> None:
    """``directory.config`` is the config in force (a reload replaces it)."""

    def prices_file() -> str:
        return str(price_overlay.path_in(directory.config.server.data_dir))

    def model_of(model_id: str) -> Model:
        model = directory.config.models.get(model_id)
        if model is None:
            raise DirectoryError(f"no model {model_id!r} in the catalogue", status=404, code="not_found")
        return model

    def doc_of(model: Model) -> dict:
        return schedule_doc(model, directory.config.price_overlay.get(model.id, {}), prices_file())

    @app.get("/admin/v1/prices")
    async def list_prices():
        return _json({"prices_file": prices_file(), "data": [doc_of(m) for m in directory.config.models.values()]})

    @app.get("/admin/v1/prices/<path:model_id>")
    async def show_prices(model_id: str):
        return _json(doc_of(model_of(model_id)))

    def rewrite(change: Callable[[dict[str, dict[str, int]]], None], source: str) -> dict:
        """Read the file, change it, write it, reload; a reload that fails puts the old file back."""
        from gatewayd.config import ConfigError

        if reload is None:
            raise DirectoryError("this daemon cannot reload its config", status=501, code="not_implemented")
        path = price_overlay.path_in(directory.config.server.data_dir)
        try:
            before = price_overlay.read_raw(path)
            overlay = price_overlay.read(path)
        except (OSError, price_overlay.OverlayError) as e:
            raise DirectoryError(f"the prices file cannot be used: {e}", code="prices_file_error") from None
        change(overlay)
        try:
            price_overlay.apply(directory.config.models, overlay, str(path))  # a bad field: refused before writing
        except price_overlay.OverlayError as e:
            raise DirectoryError(str(e)) from None
        try:
            price_overlay.write(path, overlay)
        except OSError as e:
            raise DirectoryError(f"{path}: cannot be written: {e.strerror or type(e).__name__}", status=500,
                                 code="prices_file_error") from None
        try:
            return reload(source)
        except ConfigError as e:
            if before is None:
                path.unlink(missing_ok=True)
            else:
                price_overlay.write_raw(path, before)
            raise DirectoryError(f"gatewayd: config error: {e}; the prices were not applied", status=400,
                                 code="config_error") from None

    @app.post("/admin/v1/prices")
    async def set_prices():
        raw = await request.get_data()
        try:
            body = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError:
            raise DirectoryError("the request body is not valid JSON") from None
        if not isinstance(body, dict) or set(body) - {"models"} or not isinstance(body.get("models"), dict):
            raise DirectoryError('the request body must be {"models": {MODEL: {FIELD: VALUE}}}')
        wanted: dict[str, dict[str, int]] = body["models"]
        for model_id, fields in wanted.items():
            model_of(model_id)
            if not isinstance(fields, dict) or not fields:
                raise DirectoryError(f"models.{model_id}: must be an object of at least one price field")
            for field, value in fields.items():
                try:
                    check_field(field, value)
                except PriceListError as e:
                    raise DirectoryError(f"models.{model_id}.{e}") from None

        def merge(overlay: dict[str, dict[str, int]]) -> None:
            for model_id, fields in wanted.items():
                overlay.setdefault(model_id, {}).update(fields)

        result = rewrite(merge, "gatewayctl prices import")
        return _json({"prices_file": prices_file(), "applied": wanted, "reload": result})

    @app.delete("/admin/v1/prices/<path:model_id>")
    async def reset_prices(model_id: str):
        model_of(model_id)
        removed: dict[str, int] = {}

        def drop(overlay: dict[str, dict[str, int]]) -> None:
            removed.update(overlay.pop(model_id, {}))

        result = rewrite(drop, "gatewayctl prices reset")
        return _json({"prices_file": prices_file(), "model": model_id, "removed": sorted(removed),
                      "reload": result})
