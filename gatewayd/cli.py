"""``gatewayd serve`` and ``gatewayd simulate``: the operator's entry points."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

from gatewayd.config import ConfigError, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help="gatewayd: a multi-model LLM gateway.")


def _print_version(value: bool) -> None:
    if value:
        from gatewayd.version import describe

        print(describe())
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and the database schema it knows, and exit.")) -> None:
    """gatewayd: a multi-model LLM gateway."""


@app.command()
def serve(
    config: Optional[str] = typer.Option(None, "--config", help="TOML config file (env GATEWAY_CONFIG)."),
    listen: Optional[list[str]] = typer.Option(None, "--listen", help="HOST:PORT for the public API (repeatable)."),
    admin_socket: Optional[str] = typer.Option(None, "--admin-socket", help="Unix socket for gatewayctl."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="Where the SQLite database lives "
                                           "(default var, var/demo with --demo)."),
    tls_cert: Optional[str] = typer.Option(None, "--tls-cert", help="PEM certificate: serve HTTPS."),
    tls_key: Optional[str] = typer.Option(None, "--tls-key", help="PEM private key for --tls-cert."),
    demo: bool = typer.Option(False, "--demo", help="Route every model to the built-in simulator; make a demo key."),
    log_format: Optional[str] = typer.Option(None, "--log-format", help="json or text (env GATEWAY_LOG_FORMAT; "
                                             "default: json unless stdout is a terminal)."),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="debug, info, warning or error "
                                            "(env GATEWAY_LOG_LEVEL; default info)."),
    workers: int = typer.Option(1, "--workers", help="Processes sharing the listen address (N > 1 needs PostgreSQL)."),
) -> None:
    """Run the gateway. SIGHUP re-reads the config file's catalogue; SIGTERM drains and stops."""
    from gatewayd import hypercorn_patches
    from gatewayd.local_files import DAEMON_UMASK, LocalFileRefused, prepare_data_dir
    from gatewayd.server import run
    from gatewayd.store.base import SchemaTooNew, StoreError

    unfit = hypercorn_patches.refusal()  # a hypercorn the patches no longer fit: refuse, one line
    if unfit is not None:
        print(f"gatewayd: {unfit}", file=sys.stderr)
        raise typer.Exit(2)
    os.umask(DAEMON_UMASK)  # every file and socket the daemon makes is its own user's only
    overrides = {
        "listen": listen or None,
        "admin_socket": admin_socket,
        "data_dir": data_dir,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "log_format": log_format,
        "log_level": log_level,
        "demo": demo,  # the default data dir: var/demo, so a demo never shares a real daemon's database
    }

    def load():
        return checked_config(config, overrides)

    try:
        cfg = load()
    except ConfigError as e:
        print(f"gatewayd: config error: {e}", file=sys.stderr)
        raise typer.Exit(2)
    if demo:
        import attrs

        cfg = attrs.evolve(cfg, demo=True)
    elif cfg.left_out_warning():
        print(f"gatewayd: warning: {cfg.left_out_warning()}", file=sys.stderr)
    try:
        prepare_data_dir(cfg.server.data_dir, tighten=False)
    except LocalFileRefused as e:
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(2)
    from gatewayd.server import admin_socket_refusal, listen_refusal

    refusal = admin_socket_refusal(cfg.server.admin_socket) or listen_refusal(cfg)
    if refusal is not None:
        print(f"gatewayd: {refusal}", file=sys.stderr)
        raise typer.Exit(2)
    from gatewayd.workers import WorkersRefused, check_workers, run_workers

    try:
        check_workers(cfg, workers)
    except WorkersRefused as e:
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(2)
    try:
        if workers > 1:
            raise typer.Exit(run_workers(cfg, workers, load, run))
        run(cfg, load)
    except KeyboardInterrupt:
        pass
    except LocalFileRefused as e:  # a link where the database or a slot file goes
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(2)
    except SchemaTooNew as e:  # a newer gatewayd migrated the database: serving it could corrupt it
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(2)
    except StoreError as e:  # the database is in use by another process, unreachable, or refused us
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(1)
    except OSError as e:
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(1)


def checked_config(path, overrides=None):
    """The config as ``serve`` would start with it, or ``ConfigError`` (the one start-up line)."""
    return load_config(path, overrides=overrides)


@app.command("check-config")
def check_config(path: str = typer.Argument(..., metavar="FILE", help="The TOML config file to check.")) -> None:
    """Validate a config file as start-up would, without starting: exit 0, or 2 with the error line."""
    try:
        cfg = checked_config(path)
    except ConfigError as e:
        print(f"gatewayd: config error: {e}", file=sys.stderr)
        raise typer.Exit(2)
    if cfg.left_out_warning():
        print(f"gatewayd: warning: {cfg.left_out_warning()}", file=sys.stderr)
    mcp = f", {len(cfg.mcp_servers)} MCP servers" if cfg.mcp_servers else ""
    print(f"gatewayd: {path}: config ok ({len(cfg.providers)} providers, {len(cfg.models)} models, "
          f"{len(cfg.groups)} groups{mcp})")


@app.command()
def simulate(listen: str = typer.Option("127.0.0.1:9090", "--listen", help="HOST:PORT to serve on.")) -> None:
    """Run the upstream simulator alone: the OpenAI, Azure OpenAI, Anthropic, Gemini, AWS
    Bedrock and Vertex AI wire protocols (rules in docs/simulator.md)."""
    from gatewayd.sim import main_simulate

    main_simulate(listen)


@app.command()
def catalogue(
    check: Optional[str] = typer.Option(None, "--check", metavar="PRICES.json",
                                        help="Compare the prices with this price list (LiteLLM's JSON) instead."),
    config: Optional[str] = typer.Option(None, "--config", help="With --check: the config whose prices are compared "
                                         "(default: the default catalogue)."),
) -> None:
    """Print the default catalogue (providers, models, groups): a starting point for --config.
    With --check: print where its prices (or a config's) differ from a price list; exit 0
    when none does, 1 when some do, 2 when the list or the config cannot be read."""
    from gatewayd.config import DEFAULT_CATALOGUE

    if check is None:
        sys.stdout.write(DEFAULT_CATALOGUE.read_text(encoding="utf-8"))
        return
    raise typer.Exit(_check_catalogue(check, config))


def _check_catalogue(list_path: str, config_path: str | None) -> int:
    import orjson

    from gatewayd.billing.price_list import CatalogueModel, PriceListError, import_price_list

    try:
        cfg = load_config(config_path)  # the default catalogue's providers without keys are only left out
        with open(list_path, "rb") as f:
            doc = orjson.loads(f.read())
        result = import_price_list(doc, [CatalogueModel.of(m) for m in cfg.models.values()])
    except ConfigError as e:
        print(f"gatewayd: config error: {e}", file=sys.stderr)
        return 2
    except (OSError, orjson.JSONDecodeError, PriceListError) as e:
        print(f"gatewayd: price list {list_path}: {e}", file=sys.stderr)
        return 2
    for change in result.changes:
        c = change.doc()
        old = c["old_usd"] or ("-" if c["old"] is None else str(c["old"]))
        new = c["new_usd"] or str(c["new"])
        unit = {"token": "USD per 1M tokens", "call": "USD per call"}.get(c["unit"], c["unit"])
        print(f"{c['model']}: {c['field']} configured {old}, list {new} ({unit})")
    for model in result.missing:
        print(f"{model}: not in the price list")
    print(f"gatewayd: {len(result.changes)} price(s) differ, {len(result.missing)} model(s) not in the list, "
          f"{len(set(result.matched) - {c.model for c in result.changes})} model(s) match")
    return 1 if result.changes else 0


def main() -> None:
    app()


if __name__ == "__main__":
    main()
