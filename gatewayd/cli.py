"""``gatewayd serve`` and ``gatewayd simulate``: the operator's entry points."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from gatewayd.config import ConfigError, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help="gatewayd: a multi-model LLM gateway.")


@app.command()
def serve(
    config: Optional[str] = typer.Option(None, "--config", help="TOML config file (env GATEWAY_CONFIG)."),
    listen: Optional[list[str]] = typer.Option(None, "--listen", help="HOST:PORT for the public API (repeatable)."),
    admin_socket: Optional[str] = typer.Option(None, "--admin-socket", help="Unix socket for gatewayctl."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="Where the SQLite database lives."),
    tls_cert: Optional[str] = typer.Option(None, "--tls-cert", help="PEM certificate: serve HTTPS."),
    tls_key: Optional[str] = typer.Option(None, "--tls-key", help="PEM private key for --tls-cert."),
    demo: bool = typer.Option(False, "--demo", help="Route every model to the built-in simulator; make a demo key."),
) -> None:
    """Run the gateway."""
    from gatewayd.server import run, sqlite_path

    try:
        cfg = load_config(config, overrides={
            "listen": listen or None,
            "admin_socket": admin_socket,
            "data_dir": data_dir,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
        })
        sqlite_path(cfg.database_url)
    except ConfigError as e:
        print(f"gatewayd: config error: {e}", file=sys.stderr)
        raise typer.Exit(2)
    if demo:
        import attrs

        cfg = attrs.evolve(cfg, demo=True)
    try:
        run(cfg)
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"gatewayd: {e}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
def simulate(listen: str = typer.Option("127.0.0.1:9090", "--listen", help="HOST:PORT to serve on.")) -> None:
    """Run the upstream simulator alone (OpenAI and Anthropic wire protocols)."""
    from gatewayd.sim import main_simulate

    main_simulate(listen)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
