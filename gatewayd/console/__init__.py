"""The web console for account holders, served by gatewayd under ``/console``.

Server-rendered pages (Quart templates), one vendored stylesheet and a few lines of
script for the copy button; no build step and nothing loaded from elsewhere. The
admin CLI stays the operator's tool; the console is where an account holder manages
keys and reads the balance and the usage log.
"""

from __future__ import annotations

from quart import Quart

from gatewayd.config import Config
from gatewayd.directory import Directory


async def mount_console(app: Quart, directory: Directory, store, config: Config):
    """Register the console blueprint on the public app; returns the ``Console`` (a config
    reload replaces its ``config``). The session secret comes from the store. The caller runs
    ``console.outbox.run`` in a nursery of its own: the sign-up and reset emails."""
    from gatewayd.console.session import CheckCeiling, Sessions, SignInThrottle, load_secret
    from gatewayd.console.views import create_blueprint
    from gatewayd.console.web import Console
    from gatewayd.mail import Outbox
    from gatewayd.oidc import OidcClient
    from gatewayd.self_service import Links

    secret = await load_secret(config, store)
    console = Console(
        directory=directory, store=store, config=config, sessions=Sessions(secret, store),
        throttle=SignInThrottle(store), links=Links(secret), oidc=OidcClient(),
        outbox=Outbox(lambda: console.config.alerts.smtp if console.config.alerts else None),  # as reloaded
        ceiling=CheckCeiling(lambda: console.config.server.password_checks_per_s),
    )
    from gatewayd.ratelimit import MemoryWindows, StoreWindows

    # SQLite: one process serves the file, its memory is exact; PostgreSQL: the database's log
    console.checkouts = StoreWindows(store) if getattr(store, "kind", "") == "postgres" else MemoryWindows()
    app.register_blueprint(create_blueprint(console))
    return console


__all__ = ["mount_console"]
