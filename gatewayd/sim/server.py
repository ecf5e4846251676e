"""Serving the simulator with hypercorn's trio worker, in-process or as a command.

The real port: ``hypercorn.trio.serve`` reports its listeners through ``task_status``
as URLs (``["http://127.0.0.1:54321"]``) built from the bound sockets, so binding
port 0 and starting ``serve`` with ``nursery.start`` tells us the port the kernel chose.
No socket juggling needed.
"""

from __future__ import annotations

import logging
import sys
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

from gatewayd import hypercorn_patches

from .app import create_sim_app


def make_config(host: str, port: int) -> Config:
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("gatewayd.sim.server")  # not straight to stderr
    config.read_timeout = None  # a quiet client must not cut a long stream
    config.keep_alive_timeout = 75
    config.graceful_timeout = 0.2
    config.h11_max_incomplete_size = 1024 * 1024
    return config


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def serve_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    app: QuartTrio | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the simulator until cancelled; ``task_status.started(actual_port)`` once bound.

    ``app`` lets a caller keep a handle on the app (see :func:`gatewayd.sim.app.sim_state`);
    by default a fresh one is made.
    """
    app = app if app is not None else create_sim_app()
    # the gateway's pool closes idle connections: free them at once here too
    hypercorn_patches.install_all([hypercorn_patches.HANGUPS])
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, make_config(host, port)))
        task_status.started(_port_of(binds[0]))


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (localhost) into (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def main_simulate(listen: str) -> None:
    """Run the simulator in the foreground (``gatewayd simulate --listen HOST:PORT``)."""
    host, port = parse_listen(listen)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            actual = await nursery.start(serve_simulator, host, port)
            shown = f"[{host}]" if ":" in host else host
            print(f"simulator listening on http://{shown}:{actual}", flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:  # Ctrl-C arrives wrapped by the nurseries
        _, rest = group.split(KeyboardInterrupt)
        if rest is not None:
            raise rest from None
    print("simulator stopped", file=sys.stderr, flush=True)
