"""``gatewayctl prices``: a model's full price schedule, and prices imported from a community list.

``prices show MODEL`` asks the running daemon, so it shows what new requests are charged and
where each price came from (the config file, or the prices file that ``import --apply``
writes). ``prices import FILE`` reads LiteLLM's ``model_prices_and_context_window.json``
here, converts the entries of the catalogue's models (gatewayd.billing.price_list) and
prints the diff; ``--apply`` sends the changed prices to the daemon, which keeps them in its
data dir and reloads. ``prices reset MODEL`` drops a model's imported prices.

A price list that cannot be read (not JSON, a negative, NaN or mistyped price in an entry
the catalogue uses) is one line on stderr and exit status 2; nothing is applied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gatewayctl import render
from gatewayctl.client import AdminError, segment
from gatewayctl.common import JsonOpt, SocketOpt, app, data, session
from gatewayctl.render import Field
from gatewayd.billing.price_list import (
    RATE_FIELDS, CatalogueModel, PriceListError, field_unit, import_price_list, usd_text,
)

prices_app = typer.Typer(no_args_is_help=True)
app.add_typer(prices_app, name="prices")

ModelArg = Annotated[str, typer.Argument(metavar="MODEL", help="Catalogue model id.")]
_RATE_TITLES = {
    "input_price": "input", "output_price": "output", "cached_input_price": "cached input",
    "cache_write_price": "cache write, 5 min", "cache_write_1h_price": "cache write, 1 hour",
    "audio_input_price": "audio input", "audio_output_price": "audio output", "image_output_price": "image output",
}
SOURCE_WORDS = {"config": "config", "prices_file": "prices file"}


@prices_app.callback()
def _prices_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Price schedules: show what a model costs; import a community price list."""


def fail(message: str) -> typer.Exit:
    """Bad input given to a command (its file): one line, exit status 2."""
    typer.echo(f"gatewayctl: {message}", err=True)
    return typer.Exit(2)


def value_text(field: str, value: int | None) -> str:
    if value is None:
        return "-"
    unit = field_unit(field)
    if unit == "tokens":
        return f"{value:,}"
    return f"${usd_text(field, value)}" + (" /1M" if unit == "token" else " /call")


# --- show --------------------------------------------------------------------------------


SCHEDULE_COLUMNS = (Field("price", "price"), Field("usd", "USD"), Field("rate_nano", "nano-USD"),
                    Field("source", "source"))
DIFF_COLUMNS = (Field("model", "model"), Field("field", "field"), Field("old", "old"), Field("new", "new"),
                Field("note", "note"))


def show_schedule(console: Console, doc: dict[str, Any]) -> None:
    """One row a price: what it is for, USD (per 1M tokens or per call), nano-dollars, source."""
    fields = doc.get("fields") or {}
    sources = doc.get("sources") or {}
    rows: list[dict[str, str]] = []

    def row(title: str, field: str, *, always: bool = False) -> None:
        value = fields.get(field)
        if value is None and not always:
            return
        unit = field_unit(field)
        nano = "" if value is None or unit == "tokens" else f"{value:,}" + (" /token" if unit == "token" else " /call")
        if value is not None:
            source = SOURCE_WORDS.get(sources.get(field, ""), sources.get(field, ""))
        else:  # billing.pricing's fallbacks
            source = "not set: input rate" if field in ("cached_input_price", "cache_write_price") else "not priced"
        rows.append({"price": title, "usd": value_text(field, value), "rate_nano": nano, "source": source})

    for field in (*RATE_FIELDS, "audio_input_price", "audio_output_price", "image_output_price"):
        row(_RATE_TITLES[field], field, always=True)
    if "long_context.above_input_tokens" in fields:
        row("long context: above input tokens", "long_context.above_input_tokens")
        for field in RATE_FIELDS:
            row(f"long context: {_RATE_TITLES[field]}", f"long_context.{field}")
    for tier in sorted({f.split(".")[1] for f in fields if f.startswith("service_tiers.")}):
        for field in RATE_FIELDS:
            row(f"tier {tier}: {_RATE_TITLES[field]}", f"service_tiers.{tier}.{field}")
    for field in sorted(f for f in fields if f.startswith("tool_prices.")):
        row(f"tool {field.split('.', 1)[1]}", field)
    row("max output tokens", "max_output_tokens", always=True)
    routes = ", ".join(f"{r.get('provider')}/{r.get('upstream_id')}" for r in doc.get("routes") or [])
    render.show_list(console, rows, SCHEDULE_COLUMNS, empty="No prices.",
                     title=f"Prices of {doc.get('model')} ({routes})")
    if any(s == "prices_file" for s in sources.values()):
        console.print(f"Prices from the prices file: {doc.get('prices_file')} (gatewayctl prices reset "
                      f"{doc.get('model')} returns to the config's).", markup=False)


@prices_app.command("show")
def prices_show(model: ModelArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Show a model's full price schedule, as the running daemon charges it.

    Each price says where it came from: the config file, or the prices file that
    `prices import --apply` writes in the daemon's data dir."""
    s = session(socket, json_output)
    doc = s.api.get("/admin/v1/prices/" + segment(model))
    if not isinstance(doc, dict):
        raise AdminError("gatewayd answered the prices request with something that is not an object")
    s.emit(doc, lambda c: show_schedule(c, doc))


# --- import ------------------------------------------------------------------------------


def read_price_list(path: str) -> Any:
    """The file's JSON, or exit status 2 with one line saying why not."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise fail(f"{path}: file not found") from None
    except IsADirectoryError:
        raise fail(f"{path}: is a directory, not a file") from None
    except OSError as e:
        raise fail(f"{path}: cannot be read: {e.strerror or type(e).__name__}") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise fail(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise fail(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise fail(f"{path}: not valid JSON: nested too deeply") from None


def show_import(console: Console, doc: dict[str, Any], *, applied: bool) -> None:
    changes = doc["changes"]
    if changes:
        rows = [{"model": c["model"], "field": c["field"],
                 "old": value_text(c["field"], c["old"]) if c["old"] is not None else "(new)",
                 "new": value_text(c["field"], c["new"]), "note": c["note"] or ""} for c in changes]
        render.show_list(console, rows, DIFF_COLUMNS, empty="", title="Price changes")
    else:
        console.print("No changes: the catalogue's models already have the list's prices.")
    if doc["unchanged"]:
        console.print(f"Unchanged: {', '.join(doc['unchanged'])}.", markup=False)
    if doc["missing"]:
        console.print(f"Skipped (the list has no entry): {', '.join(doc['missing'])}.", markup=False)
    for model, keys in doc["ignored"].items():
        console.print(f"Not imported for {model} (no such price in gatewayd): {', '.join(keys)}.", markup=False)
    others = doc["not_in_catalogue"]
    if others:
        names = f": {', '.join(others)}" if len(others) <= 10 else ""
        console.print(f"Skipped {len(others)} entries of the list that name no catalogue model{names}.", markup=False)
    if changes:
        if applied:
            console.print(f"Applied: new requests are charged these prices (kept in {doc.get('prices_file')}).",
                          markup=False)
        else:
            console.print("Nothing applied: run again with --apply to charge these prices.")


@prices_app.command("import")
def prices_import(
    file: Annotated[str, typer.Argument(metavar="FILE", help="LiteLLM's model_prices_and_context_window.json.")],
    apply: Annotated[bool, typer.Option("--apply", help="Charge the new prices (kept in the daemon's data dir).")
                     ] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Diff a LiteLLM-format price list against the catalogue; --apply charges it.

    With --apply the new prices take effect for new requests, as a reload does.
    Only the catalogue's models are read, matched by id or upstream id, with or
    without a provider prefix (anthropic/...). A price that is not a whole
    nano-dollar a token is rounded up, and the diff says so."""
    price_list = read_price_list(file)
    s = session(socket, json_output)
    answer = s.api.get("/admin/v1/prices")
    catalogue = [CatalogueModel.from_doc(m["catalogue"]) for m in data(answer)]
    try:
        result = import_price_list(price_list, catalogue)
    except PriceListError as e:
        raise fail(f"{file}: {e}") from None
    doc = {**result.doc(), "applied": False, "prices_file": answer.get("prices_file")}
    if apply and result.changes:
        done = s.api.post("/admin/v1/prices", {"models": result.overlay()})
        doc.update(applied=True, prices_file=done.get("prices_file"), reload=done.get("reload"))
    s.emit(doc, lambda c: show_import(c, doc, applied=doc["applied"]))


@prices_app.command("reset")
def prices_reset(model: ModelArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Drop a model's imported prices: it is charged the config file's prices again."""
    s = session(socket, json_output)
    answer = s.api.request("DELETE", "/admin/v1/prices/" + segment(model))
    removed = answer.get("removed") or []
    s.emit(answer, lambda c: c.print(
        f"{model}: {len(removed)} imported prices removed; the config's prices apply." if removed
        else f"{model} had no imported prices.", markup=False))
