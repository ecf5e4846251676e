"""The real admin API (gatewayd/admin/api.py) in this process, for gatewayctl's tests.

The same app the daemon serves on its admin socket, over a real store on a fresh SQLite
file and a ``Directory`` loaded from the default catalogue, served by hypercorn's trio
worker on a real Unix socket from a thread of its own (gatewayctl is blocking code: the
CLI runs in the test's thread through typer's ``CliRunner``, the server in the other).
No process is started. Every request is recorded (method, raw path, query, JSON body) so
a test can check what the CLI sent as well as what the operator saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from gatewayd.admin import openapi
from gatewayd.admin.api import create_admin_app
from gatewayd.admin.gate import AdminGate
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.reload import Reloader
from gatewayd.routing import Router
from gatewayd.store.sqlite import SQLiteStore


@attrs.define
class Recorded:
    method: str
    path: str  # raw, still percent-encoded, without the query
    query: dict[str, list[str]]
    body: Any  # decoded JSON, or None when no body was sent


class RealAdmin:
    """The daemon's admin app on ``socket_path``, its store at ``data_dir/gateway.db``.

    ``call(fn)`` runs ``await fn(directory, store)`` on the server's trio loop (to set up
    or inspect state the way the daemon would) and returns its result."""

    def __init__(self, socket_path: str, data_dir: Path, config_path: Path | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        self.socket_path = socket_path
        self.tls = tls  # (certfile, keyfile): also serve the admin API over HTTPS at ``https_url``
        self.https_url: str | None = None
        self.gate: AdminGate | None = None
        self.data_dir = data_dir
        self.config_path = config_path  # None: the default catalogue
        self.requests: list[Recorded] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="real-admin")

    # -- the server's thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread, which raises it
            self._failure = e
            self._ready.set()

    async def _serve(self) -> None:
        def load():
            return load_config(self.config_path, overrides={"data_dir": str(self.data_dir), "admin_socket": self.socket_path},
                               environ={})

        config = load()
        store = SQLiteStore(str(self.data_dir / "gateway.db"))
        try:
            directory = Directory(config, store)
            await directory.load()
            self.directory, self.store = directory, store
            reloader = Reloader(load, lambda c: c, [directory])
            router = Router(config.routing)  # a fresh daemon's: every route healthy, nothing seen yet
            admin_app = create_admin_app(directory, store, time.time, reload=reloader.reload,
                                         routes=lambda: router.report(directory.config.models))
            # the daemon's gate in front, as gatewayd.server has it: scopes, throttle, audit log
            self.gate = AdminGate(admin_app, store, openapi.document(), lambda: directory.config.admin,
                                  lambda: directory.config.server.trusted_proxies)
            app = _Recorder(self.gate.socket_app, self.requests)
            hc = HypercornConfig()
            hc.bind = [f"unix:{self.socket_path}"]
            hc.accesslog = None
            hc.graceful_timeout = 0.5
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                await nursery.start(lambda task_status: serve(app, hc, shutdown_trigger=self._stop.wait,
                                                              task_status=task_status))
                if self.tls is not None:  # the admin API over HTTPS, as on the public listener
                    https = HypercornConfig()
                    https.bind = ["127.0.0.1:0"]
                    https.accesslog = None
                    https.graceful_timeout = 0.5
                    https.certfile, https.keyfile = self.tls
                    binds = await nursery.start(lambda task_status: serve(
                        _Recorder(self.gate, self.requests), https, shutdown_trigger=self._stop.wait,
                        task_status=task_status))
                    self.https_url = binds[0].replace("http://", "https://")
                self._ready.set()
        finally:
            await store.close()

    # -- the test's thread -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("the admin API did not start within 30 s")
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)

    def call(self, fn):
        """``await fn(directory, store)`` on the server's loop; its result."""
        return trio.from_thread.run(fn, self.directory, self.store, trio_token=self._token)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One admin API call made directly (not through gatewayctl): for a test's setup."""
        import httpx

        with httpx.Client(transport=httpx.HTTPTransport(uds=self.socket_path, verify=False), base_url="http://admin") as client:
            answer = client.request(method, "/admin/v1" + path, json=body)
        assert answer.is_success, answer.text
        return answer.json()

    @property
    def last(self) -> Recorded:
        assert self.requests, "the CLI sent no request"
        return self.requests[-1]


@contextlib.contextmanager
def running_admin(data_dir: Path, config_path: Path | None = None,
                  prices: dict[str, dict[str, Any]] | None = None,
                  tls: tuple[str, str] | None = None) -> Iterator[RealAdmin]:
    """A :class:`RealAdmin` started on a socket in a short directory (Unix socket paths: about
    100 bytes), stopped after; ``prices`` is written as the data dir's prices file first
    (``gatewayd.billing.price_overlay``: model -> field -> value in the config file's units)."""
    if prices is not None:
        (data_dir / "prices.json").write_text(json.dumps({"format": "gatewayd-prices/1", "models": prices}))
    short = tempfile.mkdtemp(prefix="gwctl-", dir="/tmp")
    real = RealAdmin(os.path.join(short, "admin.sock"), data_dir, config_path, tls)
    real.start()
    try:
        yield real
    finally:
        real.stop()
        shutil.rmtree(short, ignore_errors=True)


class _Recorder:
    """ASGI middleware: records each HTTP request (with its whole body) before the app sees it."""

    def __init__(self, app, requests: list[Recorded]) -> None:
        self.app = app
        self.requests = requests

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        self.requests.append(Recorded(scope["method"], scope["raw_path"].decode(),
                                      parse_qs(scope["query_string"].decode()), json.loads(raw) if raw else None))
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)
