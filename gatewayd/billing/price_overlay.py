"""The prices file: applied prices, kept in the data dir, merged over the config's ``[[models]]``.

``gatewayctl prices import --apply`` does not edit the operator's config file: the daemon
writes the changed prices to ``{data_dir}/prices.json`` (atomically: a temporary file, fsync,
rename) and reloads. The config loader reads that file after the catalogue and sets each
field it names over the catalogue's value, so the prices survive a restart and a reload
(SIGHUP, ``gatewayctl reload``), and ``gatewayctl prices show`` names where each price came
from. The file names only the fields an import changed; every other price stays the config
file's. ``gatewayctl prices reset MODEL`` removes a model's entries (back to the config).

The file, in the config file's units so a value can be copied into a ``[[models]]`` table::

    {"format": "gatewayd-prices/1",
     "models": {"claude-sonnet-4-5": {"input_price": "3", "long_context.above_input_tokens": 200000,
                                      "tool_prices.web_search": "0.01"}}}

Rates are USD per 1,000,000 tokens and tool prices USD per call, as decimal strings (exact);
token counts are integers. A model the catalogue no longer has is kept in the file and not
applied; a field that does not parse makes the whole load fail with one line naming the
file, the model and the field (as a bad config file does).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from gatewayd.billing.price_list import PriceListError, check_field, field_unit, usd_text, with_prices
from gatewayd.catalogue import Model
from gatewayd.local_files import LocalFileRefused, open_nofollow
from gatewayd.money import MoneyError, price_per_million_to_nano_per_token, usd_to_nano

__all__ = ["FORMAT", "PRICES_FILE", "OverlayError", "apply", "decode", "encode", "encode_value", "path_in", "read",
           "read_raw", "write", "write_raw"]

PRICES_FILE = "prices.json"
FORMAT = "gatewayd-prices/1"

Overlay = Mapping[str, Mapping[str, int]]  # model id -> field -> value in our units (nano / tokens)


class OverlayError(ValueError):
    """The prices file cannot be used; one line naming it."""


def path_in(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / PRICES_FILE


def encode_value(field: str, value: int) -> Any:
    return value if field_unit(field) == "tokens" else usd_text(field, value)


def decode_value(field: str, value: Any) -> int:
    unit = field_unit(field)
    if unit == "tokens":
        if isinstance(value, bool) or not isinstance(value, int):
            raise PriceListError(f"{field}: must be a whole number of tokens (got {value!r})")
        return value
    if not isinstance(value, str):
        raise PriceListError(f"{field}: must be a decimal string of USD (got {value!r})")
    try:
        return usd_to_nano(value) if unit == "call" else price_per_million_to_nano_per_token(value)
    except MoneyError as e:
        raise PriceListError(f"{field}: {e}") from None


def encode(overlay: Overlay) -> dict[str, Any]:
    return {"format": FORMAT, "models": {
        model: {field: encode_value(field, value) for field, value in sorted(fields.items())}
        for model, fields in sorted(overlay.items()) if fields}}


def decode(doc: Any, where: str) -> dict[str, dict[str, int]]:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("models"), dict):
        raise OverlayError(f"{where}: not a gatewayd prices file (expected {{\"format\": \"{FORMAT}\", \"models\": "
                           "{...}})")
    out: dict[str, dict[str, int]] = {}
    for model, fields in doc["models"].items():
        if not isinstance(fields, dict):
            raise OverlayError(f"{where}: models.{model}: must be an object of prices")
        out[model] = {}
        for field, value in fields.items():
            try:
                out[model][field] = decoded = decode_value(field, value)
                check_field(field, decoded)
            except PriceListError as e:
                raise OverlayError(f"{where}: models.{model}.{e}") from None
    return out


def read(path: Path) -> dict[str, dict[str, int]]:
    """The file's prices; none when there is no file."""
    raw = read_raw(path)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise OverlayError(f"{path}: not valid JSON: {e}") from None
    return decode(doc, str(path))


def read_raw(path: Path) -> bytes | None:
    """The file's bytes (``None`` when there is none), never through a link planted at ``path``."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except LocalFileRefused as e:
        raise OverlayError(str(e)) from None
    except OSError as e:
        raise OverlayError(f"{path}: cannot be read: {e.strerror or type(e).__name__}") from None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def apply(models: Mapping[str, Model], overlay: Overlay, where: str = PRICES_FILE) -> dict[str, Model]:
    """``models`` with the overlay's prices set over them (models it names that the catalogue
    has not are left out: the catalogue decides which models exist)."""
    out = dict(models)
    for model_id, fields in overlay.items():
        if model_id in out and fields:
            try:
                out[model_id] = with_prices(out[model_id], fields)
            except PriceListError as e:
                raise OverlayError(f"{where}: models.{model_id}.{e}") from None
    return out


def write(path: Path, overlay: Overlay) -> None:
    """Replace the file atomically: readers see the old file or the new one, never half of one."""
    write_raw(path, json.dumps(encode(overlay), indent=2, sort_keys=False).encode() + b"\n")


def write_raw(path: Path, data: bytes) -> None:
    """``write``'s bytes (also used to put a previous file back). The new file is made with
    ``O_EXCL`` (mkstemp) and renamed over ``path``: a link there is replaced, never followed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".prices-", suffix=".tmp", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
