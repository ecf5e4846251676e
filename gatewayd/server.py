"""The daemon: store, directory, relay, and the two listeners, in one trio nursery.

The public listener(s) and the admin Unix socket are two ``hypercorn.trio.serve``
calls with their own Config. SIGINT/SIGTERM trigger a graceful shutdown: both stop
accepting, open streams get ``shutdown_grace_s`` to finish, then they are cut (and
settled as incomplete by the relay's shielded ``finally``).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import socket
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from gatewayd.admin import openapi
from gatewayd.admin.api import create_admin_app
from gatewayd.admin.console_views import mount_operator_console
from gatewayd.admin.gate import AdminGate, AdminOnly, door
from gatewayd.admin.route_reports import publish_forever
from gatewayd.alert_delivery import AlertDeliverer
from gatewayd.api_routes import ApiRoutes
from gatewayd.app import Listener, create_app
from gatewayd.bodies import BodyPools
from gatewayd.billing.ledger import Ledger
from gatewayd.config import Config, parse_host_port
from gatewayd.console import mount_console
from gatewayd.console.views_self_service import invite
from gatewayd.payments.stripe_webhook import mount_stripe_webhook
from gatewayd.directory import Directory
from gatewayd.drain import BACKSTOP_S
from gatewayd import hypercorn_patches, local_files, logs, loopwatch
from gatewayd.demo import DEMO_EMAIL, DEMO_PASSWORD, restore_demo_key, retire_demo_account
from gatewayd.money import usd_to_nano
from gatewayd.drain import Drain
from gatewayd.metrics import Metrics
from gatewayd.ops import Readiness
from gatewayd.providers.upstream import Upstream
from gatewayd.changes import ChangeFollower
from gatewayd.ratelimit import StoreWindows, open_rate_limiter
from gatewayd.relay import Relay
from gatewayd.console.session import load_secret
from gatewayd.mcp.gateway import McpGateway
from gatewayd.reload import Reloader
from gatewayd.workers import WorkerSockets
from gatewayd.store import open_store

log = logging.getLogger("gatewayd")

if TYPE_CHECKING:
    from gatewayd.telemetry.otel import Telemetry


def _hypercorn_config(**kwargs) -> HypercornConfig:
    hc = HypercornConfig()
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # through gatewayd's handler (JSON or text)
    hc.loglevel = "WARNING"
    hc.read_timeout = None
    hc.keep_alive_timeout = 75
    hc.include_server_header = False
    # ours, not hypercorn's (so set by name): gatewayd.hypercorn_patches.CLEARTEXT_H2: no HTTP/2 without TLS
    # unless [server] h2c
    setattr(hc, hypercorn_patches.H2C_ATTRIBUTE, False)
    for name, value in kwargs.items():
        setattr(hc, name, value)
    return hc


def _public_config(config: Config, worker: WorkerSockets | None = None) -> HypercornConfig:
    binds = []
    for listen in config.server.listen:
        host, port = parse_host_port(listen)
        binds.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if worker is not None:  # the supervisor's sockets (gatewayd.workers)
        binds = [f"fd://{fd}" for fd in worker.listen_fds]
    # the relay cuts streams at the grace period's end (gatewayd.drain); hypercorn's cut is the backstop
    hc = _hypercorn_config(graceful_timeout=config.server.shutdown_grace_s + BACKSTOP_S,
                           gatewayd_h2c=config.server.h2c,
                           # a Responses WebSocket message is a request body (gatewayd.responses_ws)
                           websocket_max_message_size=config.server.max_body_bytes)
    if config.server.tls_cert:
        hc.certfile = config.server.tls_cert
        hc.keyfile = config.server.tls_key
        hc.bind = binds
    else:
        hc.bind = binds
    return hc


def listen_refusal(config: Config) -> str | None:
    """Why a listen address cannot be bound, in one line naming it and how to pick another, or
    None. Checked before start: left to hypercorn, a port in use was a 257-line traceback."""
    flags = {address: "--listen HOST:PORT (or [server] listen)" for address in config.server.listen}
    if config.server.metrics_listen:
        flags.setdefault(config.server.metrics_listen, "[server] metrics_listen")
    for address in config.admin.listen:
        flags.setdefault(address, "[admin] listen")
    for address, flag in flags.items():
        host, port = parse_host_port(address)
        if port == 0:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as hypercorn binds: TIME_WAIT is no conflict
            try:
                probe.bind((host, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return (f"port {port} on {host} is already in use (another gatewayd, or another program); "
                            f"stop it, or choose another port with {flag}")
                return f"cannot listen on {address}: {e.strerror}; choose another address with {flag}"
    return None


def _admin_listen_config(config: Config) -> HypercornConfig:
    """``[admin] listen``: the admin API and the operator console on a listener of their own
    (TLS as the public listener has it)."""
    binds = []
    for listen in config.admin.listen:
        host, port = parse_host_port(listen)
        binds.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    hc = _hypercorn_config(bind=binds, graceful_timeout=5)
    if config.server.tls_cert:
        hc.certfile = config.server.tls_cert
        hc.keyfile = config.server.tls_key
    return hc


def admin_socket_refusal(path: str) -> str | None:
    """Why the admin socket cannot be made at ``path``, in one line, or None. A path held by
    something that is not a socket (a file, a directory) is the operator's to clear: left to
    hypercorn, the bind failed deep in the nursery as a 258-line ``TrioInternalError``."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"admin socket {path}: {e.strerror}"
    if stat.S_ISSOCK(mode):
        return None  # a stale socket from a previous run: replaced
    kind = "a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else "a file"
    return (f"admin socket {path} is taken by {kind}, not a socket; remove it or set another "
            "[server] admin_socket / --admin-socket")


def _admin_config(path: str, worker: WorkerSockets | None = None) -> HypercornConfig:
    if worker is not None:  # shared by every worker; the supervisor made it (mode 0600)
        return _hypercorn_config(bind=[f"fd://{worker.admin_fd}"], graceful_timeout=5)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)  # stale socket from a previous run
    except FileNotFoundError:
        pass
    return _hypercorn_config(bind=[f"unix:{path}"], umask=0o177, graceful_timeout=5)


async def _ensure_demo_account(directory: Directory, data_dir: str) -> str:
    """The first ``--demo`` run: an account with $10 and a key, its secret kept in the data dir."""
    secret_file = Path(data_dir) / "demo-key"
    if DEMO_EMAIL.lower() in directory.accounts_by_email:
        account = directory.account(DEMO_EMAIL)
        if account.password_hash is None:  # a demo data dir from before the console
            await directory.set_password(account, DEMO_PASSWORD)
        try:
            secret = local_files.read_text_nofollow(secret_file).strip()
        except FileNotFoundError:
            pass
        else:
            await restore_demo_key(directory, account, secret)  # a non-demo start disabled it
            return secret
    else:
        account = await directory.create_account(DEMO_EMAIL, "Demo", "UTC", DEMO_PASSWORD)
        await directory.pay(account, usd_to_nano("10"), "demo credit")
    _, secret = await directory.create_key(account, name="demo")
    local_files.write_private(secret_file, (secret + "\n").encode())
    return secret


def _print_demo_banner(base_url: str, secret: str) -> None:
    print(
        f"""
gatewayd demo is running at {base_url}  (every model answers from the built-in simulator)

  demo key: {secret}
  console:  {base_url}/console/  (sign in as {DEMO_EMAIL} / {DEMO_PASSWORD})

  curl {base_url}/v1/chat/completions \\
    -H "Authorization: Bearer {secret}" -H "Content-Type: application/json" \\
    -d '{{"model": "gpt-4.1-mini", "messages": [{{"role": "user", "content": "Hello!"}}]}}'

  python -c "from openai import OpenAI; c = OpenAI(base_url='{base_url}/v1', api_key='{secret}'); \\
print(c.chat.completions.create(model='claude-sonnet-4-5', messages=[{{'role': 'user', 'content': 'Hi'}}]).choices[0].message.content)"
""",
        flush=True,
    )


async def serve(config: Config, loader=None, *, worker: WorkerSockets | None = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run until SIGINT/SIGTERM. ``loader`` re-reads the config file for a reload (SIGHUP,
    ``gatewayctl reload``); without one, a reload re-applies the config in force. ``worker``:
    one of ``serve --workers N``, on the supervisor's sockets.

    The three signals are caught for the daemon's whole life, until "gatewayd stopped": a
    receiver closed at the first SIGTERM would give SIGHUP back its default action
    (terminate), so a reload sent during the drain would kill the process, cutting the open
    streams with no error event and leaving their holds for the next start."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        await _serve(config, loader, signals, worker, task_status)


async def _serve(config: Config, loader, signals, worker: WorkerSockets | None, task_status) -> None:
    hypercorn_patches.install_all()  # raises PatchRefused (``serve`` checked first); logs any skipped
    for note in local_files.prepare_data_dir(config.server.data_dir, tighten=True):
        logs.event(f"gatewayd: {note}", logging.WARNING)
    store = await open_store(config, worker_index=worker.index if worker is not None else 0)
    try:
        recovered = await store.release_dead_holds()
        if recovered:
            log.warning("released %d holds left by a stopped instance (recorded as interrupted)", recovered)
        # SQLite: one process serves the file, so the limiter's memory is exact; PostgreSQL: the
        # database's log, shared by every instance
        shared = StoreWindows(store) if store.kind == "postgres" else None
        async with open_rate_limiter(config, shared=shared) as limiter, trio.open_nursery() as nursery:
            adapt: Callable[[Config], Config] = _keep
            if config.demo:
                from gatewayd.sim import serve_simulator

                sim_port = await nursery.start(serve_simulator, "127.0.0.1", 0)
                sim = f"http://127.0.0.1:{sim_port}"
                config = config.with_simulator(sim)
                adapt = lambda c: c.with_simulator(sim)  # noqa: E731
            directory = Directory(config, store)
            await directory.load()
            if not config.demo:
                await retire_demo_account(directory)
            await nursery.start(ChangeFollower(store, directory).run)  # changes made on other instances
            upstream = Upstream(
                connect_timeout_s=config.server.upstream_connect_timeout_s,
                stream_idle_timeout_s=config.server.stream_idle_timeout_s,
            )
            ledger = Ledger(store)
            drain, metrics = Drain(), Metrics()  # the shutdown and the metrics, shared by their users
            metrics.watch_holds(lambda: ledger.open_holds, lambda: ledger.held_nano)
            relay = Relay(config, directory, ledger, upstream, limiter, drain=drain, metrics=metrics)
            await nursery.start(relay.hangups.run)  # tasks that may outlive their client (gatewayd.hangups)
            telemetry = start_telemetry(config, metrics)
            nursery.start_soon(store.maintain)
            if store.kind == "postgres":  # route health across instances (gatewayd.admin.route_reports)
                nursery.start_soon(publish_forever, store, lambda: relay.router.report(relay.config.models))
            # the alert outbox (gatewayd.alert_delivery); [alerts] as reloaded
            nursery.start_soon(AlertDeliverer(store, directory, lambda: relay.config.alerts, metrics.registry).run)
            readiness = Readiness(store, metrics, drain)
            await readiness.check()  # gateway_store_up and gateway_ready right before the first scrape
            nursery.start_soon(readiness.watch)
            metrics_listen = config.server.metrics_listen
            if metrics_listen is not None and worker is not None:
                metrics_listen = worker.metrics_listen(metrics_listen)
            public_app = create_app(readiness if metrics_listen is None else None)
            console = await mount_console(public_app, directory, store, config)
            nursery.start_soon(console.outbox.run)  # the console's sign-up and reset emails
            mount_stripe_webhook(public_app, console)  # the console holds the config in force
            # /mcp: its sessions are signed with the store's shared secret (valid on every instance)
            api = ApiRoutes(relay)
            mcp = McpGateway(api, await load_secret(config, store))
            await nursery.start(mcp.run)
            api.mcp = mcp
            first = config
            reloader = Reloader(loader or (lambda: first), adapt, [relay, directory, console, mcp], metrics)
            reload = reloader.reload if worker is None else worker.reload_everywhere(reloader.reload)
            admin_app = create_admin_app(directory, store, time.time, reload=reload,
                                         routes=lambda: relay.router.report(relay.config.models),
                                         invite=lambda email: invite(console, email))
            # one gate for the socket, HTTP and the operator console: scopes, throttle, audit log
            admin_gate = AdminGate(admin_app, store, openapi.document(), lambda: relay.config.admin,
                                   lambda: relay.config.server.trusted_proxies)
            # the operator console, /admin/: on the public listener unless [admin] http is false, and on
            # [admin] listen (the blueprint says where it is served: gatewayd.admin.console_views)
            await mount_operator_console(public_app, admin_gate, store, console)
            shutdown = trio.Event()
            ops_shutdown = trio.Event()
            admin_path = config.server.admin_socket
            if metrics_listen is not None:
                ops_binds = await nursery.start(_serve_ops, readiness, metrics_listen, ops_shutdown)
            # in the outer nursery: signals are still handled while the listeners drain
            nursery.start_soon(_watch_signals, signals, shutdown, drain, config.server.drain_delay_s, reloader)
            async with trio.open_nursery() as servers:
                servers.start_soon(_drain_on_shutdown, shutdown, drain, config.server.shutdown_grace_s)
                await servers.start(
                    lambda task_status: hypercorn_serve(admin_gate.socket_app, _admin_config(admin_path, worker),
                                                        shutdown_trigger=shutdown.wait, task_status=task_status)
                )
                os.chmod(admin_path, 0o600)
                binds = await servers.start(
                    lambda task_status: hypercorn_serve(
                        _public_listener(public_app, config, api, telemetry, admin_gate),
                        _public_config(config, worker),
                        shutdown_trigger=shutdown.wait, task_status=task_status,
                    )
                )
                if config.admin.listen and (worker is None or worker.index == 0):
                    fields_admin = await servers.start(lambda task_status: hypercorn_serve(
                        AdminOnly(Listener(public_app, config.admin.max_body_bytes, relay.metrics,
                                           body_timeout_s=config.server.body_timeout_s,
                                           admin=door(admin_gate, dedicated=True))),
                        _admin_listen_config(config), shutdown_trigger=shutdown.wait, task_status=task_status))
                    # (not "listening on": that line names the public listener, which scripts wait for)
                    logs.event(f"gatewayd admin API and operator console at {', '.join(fields_admin)}",
                               admin_listen=fields_admin)
                loopwatch.freeze_startup_heap()  # full GC passes stop walking the startup objects
                fields = {"listen": binds, "admin_socket": admin_path, "models": len(config.models),
                          "providers": len(config.providers), "database": _database_label(config.database_url)}
                if metrics_listen is not None:
                    fields["metrics_listen"] = ops_binds
                if worker is not None:
                    # the supervisor says "listening" once every worker is ready
                    logs.event(f"gatewayd worker {worker.index} serving on {', '.join(binds)}", worker=worker.index,
                               **fields)
                    worker.ready(binds)
                else:
                    logs.event(f"gatewayd listening on {', '.join(binds)}; admin socket {admin_path}", **fields)
                    if not logging.getLogger("gatewayd").isEnabledFor(logging.INFO):
                        print(f"gatewayd listening on {', '.join(binds)}; admin socket {admin_path}", flush=True)
                if config.demo:
                    _print_demo_banner(binds[0], await _ensure_demo_account(directory, config.server.data_dir))
                task_status.started(binds)
            # both listeners finished (grace period, then cut); the relay settled what was cut, and
            # what clients that hung up left is settled within its grace (or the drain's cut)
            with trio.move_on_after(relay.hangups.grace_s + config.server.shutdown_grace_s + BACKSTOP_S):
                await relay.hangups.wait_idle()
            ops_shutdown.set()
            nursery.cancel_scope.cancel()
        await upstream.aclose()
        if telemetry is not None:  # the last spans and metrics, bounded by the export timeout
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(telemetry.shutdown)
    finally:
        with trio.CancelScope(shield=True):
            await store.close()
    logs.event("gatewayd stopped")


def _public_listener(app, config: Config, api: ApiRoutes, telemetry: "Telemetry | None" = None,
                     admin: AdminGate | None = None) -> Listener:
    """The public listener: bodies read after the key, within the deadline and their pool's budget;
    the admin API (``/admin/v1/``) and the operator console behind their own door."""
    server = config.server
    return Listener(app, server.max_body_bytes, api.relay.metrics, api,
                    bodies=BodyPools.from_settings(server), body_timeout_s=server.body_timeout_s,
                    telemetry=telemetry, admin=door(admin) if admin is not None else None)


def start_telemetry(config: Config, metrics: Metrics) -> "Telemetry | None":
    """OpenTelemetry when ``[telemetry]`` is on (the SDK is imported only then), else None."""
    if config.telemetry is None:
        return None
    from gatewayd.telemetry.otel import Telemetry

    telemetry = Telemetry(config.telemetry)
    telemetry.watch(metrics)
    settings = config.telemetry
    logs.event("telemetry: exporting over OTLP", endpoint=settings.endpoint or "(OTEL_EXPORTER_OTLP_* / default)",
               protocol=settings.protocol, traces=settings.traces, metrics=settings.metrics,
               sample_ratio=settings.sample_ratio)
    return telemetry


def _keep(config: Config) -> Config:
    return config


def _database_label(url: str) -> str:
    """The database's kind and place, never a password."""
    return url.split("://", 1)[0] + "://" + url.rsplit("@", 1)[-1].split("://", 1)[-1]


async def _serve_ops(readiness: Readiness, listen: str, stop: trio.Event, *,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:
    """``/metrics``, ``/healthz`` and ``/readyz`` on their own listener. It stops only after
    the public listener has drained, so /readyz can answer 503 for the whole drain."""
    from quart_trio import QuartTrio

    from gatewayd.ops import add_ops_routes

    app = QuartTrio("gatewayd.ops")
    add_ops_routes(app, readiness)
    host, port = parse_host_port(listen)
    hc = _hypercorn_config(bind=[f"[{host}]:{port}" if ":" in host else f"{host}:{port}"], graceful_timeout=1)
    await hypercorn_serve(Listener(app, 1 << 20), hc, shutdown_trigger=stop.wait, task_status=task_status)


async def _drain_on_shutdown(shutdown: trio.Event, drain: Drain, grace_s: float) -> None:
    await shutdown.wait()
    drain.begin(grace_s)


async def _watch_signals(signals, shutdown: trio.Event, drain: Drain, drain_delay_s: float,
                         reloader: Reloader) -> None:
    """SIGHUP reloads the config; SIGINT/SIGTERM start the shutdown: /readyz answers 503 at
    once, the listeners stop accepting ``drain_delay_s`` later, open streams get the grace
    period. Runs until the daemon stops, so that during the shutdown a SIGHUP is ignored
    (logged: a reload then would change nothing that is still served), a second
    SIGINT/SIGTERM skips the rest of the delay, and one after that ends the grace period at
    once: open streams are cut as at its end (an error event, settled as ``shutdown``)."""
    async with trio.open_nursery() as nursery:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                if drain.draining:
                    logs.event("gatewayd: SIGHUP ignored: shutting down", logging.WARNING, signal=name)
                    continue
                try:
                    reloader.reload("SIGHUP")
                except Exception:  # noqa: BLE001 - logged by the reloader; the old config stays
                    pass
                continue
            if not drain.draining:
                drain.draining = True
                logs.event(f"gatewayd: {name} received, shutting down", logging.WARNING, signal=name,
                           drain_delay_s=drain_delay_s)
                nursery.start_soon(_stop_accepting_after, drain_delay_s, shutdown)
            elif not shutdown.is_set():
                logs.event(f"gatewayd: {name} received again, stopping without the rest of the drain delay",
                           logging.WARNING, signal=name)
                shutdown.set()
            else:
                logs.event(f"gatewayd: {name} received again, cutting open streams now", logging.WARNING,
                           signal=name)
                drain.begin(0)


async def _stop_accepting_after(delay_s: float, shutdown: trio.Event) -> None:
    await trio.sleep(delay_s)
    shutdown.set()


def run(config: Config, loader=None, worker: WorkerSockets | None = None) -> None:
    logs.setup(config.log.format, config.log.level)
    trio.run(functools.partial(serve, config, loader, worker=worker), instruments=loopwatch.from_environment())


__all__ = ["serve", "run", "attrs"]
