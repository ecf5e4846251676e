"""In-process gateway for tests that need to shape the provider's answer byte by byte.

The real pieces (config from the catalogue, a SQLite file, the directory, the ledger, the
relay and the public app with its listener), with one difference: the provider is an
``httpx.MockTransport`` whose handler the test writes. Requests go through
``httpx.ASGITransport``, so the listener (request id, logging, metrics) runs too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import attrs
import httpx
import trio

from gatewayd.api_routes import ApiRoutes
from gatewayd.app import Listener, create_app
from gatewayd.bodies import BodyPools
from gatewayd.billing.ledger import Ledger
from gatewayd.config import load_config
from gatewayd.directory import Directory
from gatewayd.ops import Readiness
from gatewayd.providers.upstream import Upstream
from gatewayd.relay import Relay
from gatewayd.store.base import UsageQuery
from gatewayd.store.contract import Store
from gatewayd.store.sqlite import SQLiteStore
from tests.live import catalogue_pointed_at

UPSTREAM = "http://provider.test"


class Gateway:
    """``handler`` answers as the provider; or, with ``upstream`` (a real ``Upstream``, its
    connection pool included), ``upstream_url`` is a real provider (the simulator). ``store``: a
    store of the test's (conftest's ``store`` fixture: SQLite and PostgreSQL), else a SQLite file."""

    def __init__(self, tmp: Path, handler: Callable[[httpx.Request], httpx.Response] | None,
                 *, upstream: Upstream | None = None, upstream_url: str = UPSTREAM, server: str = "",
                 store: Store | None = None, extra: str = "", budgets: bool = False, telemetry=None) -> None:
        config_file = tmp / "gatewayd.toml"
        config_file.write_text(f'[server]\ndata_dir = "{tmp}"\n{server}\n' + catalogue_pointed_at(upstream_url, extra))
        self.config = load_config(config_file)
        self._own_store = store is None
        self.store = store if store is not None else SQLiteStore(str(tmp / "gateway.db"))
        self.directory = Directory(self.config, self.store)  # empty database: nothing to load
        if upstream is None:
            upstream = Upstream(connect_timeout_s=5, stream_idle_timeout_s=5)
            upstream.transport = httpx.MockTransport(handler)
        self.ledger = Ledger(self.store)
        self.relay = Relay(self.config, self.directory, self.ledger, upstream)
        readiness = Readiness(self.store, self.relay.metrics, self.relay.drain)
        self.quart = create_app(readiness)
        # ``budgets``: the body pools and deadline of the public listener (gatewayd.bodies), as ``serve`` makes them
        self.pools = BodyPools.from_settings(self.config.server) if budgets else None
        self.app = Listener(self.quart, self.config.server.max_body_bytes, self.relay.metrics,
                            ApiRoutes(self.relay), bodies=self.pools,
                            body_timeout_s=self.config.server.body_timeout_s if budgets else None,
                            telemetry=telemetry)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://gateway.test")

    async def mount_console(self):
        """The console and the Stripe webhook on the public app, as ``serve`` mounts them."""
        from gatewayd.console import mount_console
        from gatewayd.payments.stripe_webhook import mount_stripe_webhook

        self.console = await mount_console(self.quart, self.directory, self.store, self.config)
        mount_stripe_webhook(self.quart, self.console)
        return self.console

    async def funded_key(self, usd: int = 10) -> tuple[str, str]:
        """A new account with ``usd`` paid, embeddings enabled, and one key: (account id, secret)."""
        account = await self.directory.create_account(f"u{len(self.directory.accounts)}@example.com")
        await self.directory.pay(account, usd * 10**9)
        for model in self.config.models.values():
            if model.kind == "embedding":
                await self.directory.set_embedding_model(account, model.id, True)
        _, secret = await self.directory.create_key(account, name="t")
        return account.id, secret

    async def usage(self, account_id: str) -> list[dict]:
        await self.store.flush()
        rows = await self.store.usage_rows(UsageQuery(account_id), 10_000)
        return [attrs.asdict(r) for r in reversed(rows)]

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._own_store:
            await self.store.close()


def post_scope(path: str, secret: str, raw: bytes, query: bytes = b"") -> dict:
    """The ASGI scope of a POST with a Bearer key, as hypercorn hands it over: for tests that
    drive the app directly, to decide when the client's disconnect arrives."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"authorization", f"Bearer {secret}".encode()),
                        (b"anthropic-version", b"2023-06-01"), (b"content-length", str(len(raw)).encode())],
            "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8080)}


def body_then_disconnect(raw: bytes, leave: trio.Event):
    """An ASGI ``receive``: the whole body, then ``http.disconnect`` once ``leave`` is set."""
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    return receive
