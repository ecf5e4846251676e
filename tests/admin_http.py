"""The admin API over HTTP in this process: the daemon's admin app behind its gate, mounted on
the public listener (``gatewayd.app.Listener``) as ``gatewayd.server`` does, over a real
SQLite file and a ``Directory`` loaded from the default catalogue. Requests go through
``httpx.ASGITransport``, so the listener's rules run too. No process is started."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import httpx

from gatewayd.admin import openapi
from gatewayd.admin.api import create_admin_app
from gatewayd.admin.console_views import mount_operator_console
from gatewayd.admin.gate import LOCAL_OPERATOR, AdminGate, door
from gatewayd.api_routes import ApiRoutes
from gatewayd.app import Listener, create_app
from gatewayd.bodies import BodyPools
from gatewayd.billing.ledger import Ledger
from gatewayd.config import load_config
from gatewayd.console import mount_console
from gatewayd.directory import Directory
from gatewayd.providers.upstream import Upstream
from gatewayd.relay import Relay
from gatewayd.reload import Reloader
from gatewayd.routing import Router
from gatewayd.store.sqlite import SQLiteStore


@attrs.define
class AdminHTTP:
    directory: Directory
    store: SQLiteStore
    gate: AdminGate
    app: Any  # the public listener
    http: httpx.AsyncClient

    async def token(self, *scopes: str, **more: Any) -> str:
        """A new admin token with ``scopes`` (made by the local operator, as gatewayctl does)."""
        status, doc = await self.gate.call(LOCAL_OPERATOR, "POST", "/admin/v1/admin-tokens",
                                           {"name": "-".join(scopes) or "t", "scopes": list(scopes), **more})
        assert status == 201, doc
        return doc["token"]

    async def as_(self, token: str | None, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return await self.http.request(method, path, json=body, headers=headers, **kw)

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.store.close()


async def admin_http(tmp: Path, config_text: str = "", *, server_text: str = "", store: Any = None) -> AdminHTTP:
    """``config_text``: more of the config file (``[admin]``); ``server_text``: more ``[server]``
    keys (the public listener's body budgets); ``store``: an open store to serve (a PostgreSQL one
    shared with another instance); by default a new SQLite file in ``tmp``."""
    config_file = tmp / "gatewayd.toml"
    config_file.write_text(f'[server]\ndata_dir = "{tmp}"\n{server_text}\n{config_text}\n')
    config = load_config(config_file, environ={})
    store = store if store is not None else SQLiteStore(str(tmp / "gateway.db"))
    directory = Directory(config, store)
    await directory.load()
    reloader = Reloader(lambda: load_config(config_file, environ={}), lambda c: c, [directory])
    router = Router(config.routing)
    admin_app = create_admin_app(directory, store, time.time, reload=reloader.reload,
                                 routes=lambda: router.report(directory.config.models))
    gate = AdminGate(admin_app, store, openapi.document(), lambda: directory.config.admin,
                     lambda: directory.config.server.trusted_proxies)
    relay = Relay(config, directory, Ledger(store), Upstream(connect_timeout_s=5, stream_idle_timeout_s=5))
    public = create_app()
    console = await mount_console(public, directory, store, config)
    await mount_operator_console(public, gate, store, console)
    listener = Listener(public, config.server.max_body_bytes, relay.metrics, ApiRoutes(relay),
                        bodies=BodyPools.from_settings(config.server),
                        body_timeout_s=config.server.body_timeout_s, admin=door(gate))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=listener, client=("127.0.0.1", 50000)),
                             base_url="http://gateway.test")
    return AdminHTTP(directory, store, gate, listener, http)
