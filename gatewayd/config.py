"""Configuration: the TOML file, environment overrides, and the catalogue it resolves to.

Everything is validated once at start-up into frozen values, so a bad file fails with
one line naming the key and the problem (``ConfigError``) and the request path never
checks a setting again. Prices become integer nano-dollars per token here.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from fractions import Fraction
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Mapping

import attrs

from gatewayd import alerts, protocols
from gatewayd.alerts import AlertSettings
from gatewayd.billing import price_overlay
from gatewayd.config_tables import ConfigError, Section as _Section
from gatewayd.mcp import access as mcp_access
from gatewayd.mcp.settings import McpServer, read_servers as read_mcp_servers
from gatewayd.catalogue import Model, ModelRoute, Provider, RateLimit
from gatewayd.money import MoneyError, ratio, usd_to_nano
from gatewayd.payments.stripe_settings import StripeSettings, read_payments
from gatewayd.telemetry import settings as telemetry_settings
from gatewayd.telemetry.settings import TelemetrySettings
from gatewayd.self_service import ConsoleSettings, read_settings as read_console_settings
from gatewayd.catalogue_config import read_model_aliases, read_models, read_providers

__all__ = [  # the catalogue's values are re-exported: most of gatewayd reads them from here
    "Config", "ConfigError", "DEFAULT_CATALOGUE", "Group", "LogSettings", "Model", "ModelRoute", "Provider",
    "RateLimit", "RoutingSettings", "ServerSettings", "load_config", "parse_host_port",
]

# Package data, so an installed wheel finds it wherever the daemon is started from.
DEFAULT_CATALOGUE: Traversable = resources.files("gatewayd") / "data" / "catalogue.toml"
DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_DATA_DIR = "var"
DEMO_DATA_DIR = "var/demo"  # serve --demo: never the database a real daemon uses by default (gatewayd.demo)
@attrs.frozen
class RoutingSettings:
    """``[routing]`` in the config file (documented in docs/operations.md)."""

    max_attempts: int = 3  # routes tried per request, the first included
    # no new attempt starts later than this after the request's first; above the non-streaming
    # first-byte limit, so that a route cut by it leaves time for another
    deadline_s: float = 90.0
    first_byte_timeout_s: float = 20.0  # a stream's headers and first event, when another route remains
    # a non-streaming answer's status line, when another route remains; 0 = no limit. Providers
    # send it only once the whole answer is generated: a minute covers most answers.
    non_stream_first_byte_timeout_s: float = 60.0
    non_stream_timeout_s: float = 0.0  # non-streaming answer, when another route remains; 0 = no limit
    failures_to_cool: int = 3
    cooldown_s: float = 30.0
    max_cooldown_s: float = 300.0
    sticky_ttl_s: float = 3600.0
    sticky_max: int = 100_000


@attrs.frozen
class Group:
    name: str
    price_ratio: Fraction
    retired: bool
    mcp: tuple[str, ...] | None = None  # MCP servers / server:tool patterns its accounts may use; None: all


@attrs.frozen
class ServerSettings:
    listen: tuple[str, ...]
    admin_socket: str
    data_dir: str
    stream_idle_timeout_s: float
    max_body_bytes: int
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    models_visible_after_paid_nano: int
    shutdown_grace_s: float
    tls_cert: str | None
    tls_key: str | None
    upstream_connect_timeout_s: float
    console_secret: str | None
    metrics_listen: str | None = None  # HOST:PORT: /metrics, /healthz, /readyz there instead of the public listener
    drain_delay_s: float = 0.0  # on SIGTERM: /readyz answers 503 this long before the listeners stop accepting
    body_timeout_s: float = 60.0  # a request body not all in this long after its headers: 408 (gatewayd.app)
    max_buffered_bytes: int = 1 << 30  # API request bodies held at once (gatewayd.bodies)
    max_buffered_bytes_per_account: int | None = None  # of those, one account's; None: a quarter
    console_buffered_bytes: int = 64 << 20  # the console's (and other app paths') own body budget
    webhook_buffered_bytes: int = 16 << 20  # POST /webhooks/stripe's own body budget
    h2c: bool = False  # HTTP/2 without TLS (prior knowledge or Upgrade); HTTP/2 over TLS (ALPN) is always on
    max_concurrent_per_account: int = 256  # requests in flight per account and instance; 0 = no cap
    max_concurrent_per_key: int = 0  # the same per key; 0 = no cap (gatewayd/concurrency.py)
    hangup_grace_s: float = 2.0  # a client gone: its provider request is closed this long after (gatewayd/hangups.py)
    max_sockets_per_key: int = 16  # Responses WebSockets open per key and instance; 0 = no cap (socket_limits)
    max_sockets_per_account: int = 64  # the same per account
    max_free_body_bytes: int = 1 << 20  # bodies of requests the gateway answers itself (countTokens, warm-ups)
    free_answer_threads: int = 1  # threads those answers' tokenizer may use (gatewayd.relay)
    password_checks_per_s: float = 10.0  # console sign-in password checks a second, all callers (console.session)


@attrs.frozen
class AdminSettings:
    """``[admin]``: the admin API over HTTP (``gatewayd.admin.gate``), beside the Unix socket."""

    http: bool = True  # /admin/v1/ and the operator console /admin/ on the public listener(s)
    listen: tuple[str, ...] = ()  # HOST:PORT: a listener of their own for them (an internal interface)
    requests_per_minute: int = 600  # per admin token (and per address for calls without a valid one)
    max_body_bytes: int = 4 << 20  # one admin request's body; its own budget, not the API's
    max_buffered_bytes: int = 16 << 20  # admin request bodies held at once (every caller together)


@attrs.frozen
class LogSettings:
    format: str | None  # "json" | "text"; None: JSON unless stdout is a terminal
    level: str  # "debug" | "info" | "warning" | "error"


@attrs.frozen
class Config:
    server: ServerSettings
    database_url: str
    redis_url: str | None
    redis_prefix: str
    providers: dict[str, Provider]
    models: dict[str, Model]
    groups: dict[str, Group]
    routing: RoutingSettings = RoutingSettings()
    demo: bool = False
    log: LogSettings = LogSettings(format=None, level="info")
    database_pool_size: int = 10  # PostgreSQL connections per instance ([database] pool_size)
    # the prices file's fields (gatewayd.billing.price_overlay), already set over ``models``:
    # model id -> field -> value, kept to say where each price came from
    price_overlay: dict[str, dict[str, int]] = attrs.field(factory=dict)
    alerts: AlertSettings | None = None  # [alerts] (gatewayd.alerts): None, no alert is sent
    stripe: StripeSettings | None = None  # [payments.stripe]: card top-ups (gatewayd.payments)
    aliases: dict[str, str] = attrs.field(factory=dict)  # other id -> catalogue model id (gatewayd.config_aliases)

    def model(self, model_id: str) -> tuple[Model | None, str | None]:
        """The catalogue model ``model_id`` names, by its id or an alias; and the alias, if it was one."""
        found = self.models.get(model_id)
        if found is not None:
            return found, None
        target = self.aliases.get(model_id)
        return (self.models[target], model_id) if target is not None else (None, None)

    def left_out_warning(self) -> str | None:
        """The one line saying which default-catalogue providers were left out for an unset key
        variable, naming each variable (None: none was)."""
        left = [f"{p.name} ({p.missing_key_env})" for p in self.providers.values() if not p.usable]
        if not left:
            return None
        return (f"providers left out, their key variable not set: {', '.join(left)}; their models are not listed "
                "and are refused saying why (set the variable to serve them)")
    admin: AdminSettings = AdminSettings()  # [admin]: the admin API over HTTP
    console: ConsoleSettings = ConsoleSettings()  # [console]: sign-up and reset links (gatewayd.self_service)
    mcp_servers: dict[str, McpServer] = attrs.field(factory=dict)  # [[mcp_servers]] (gatewayd.mcp)
    telemetry: TelemetrySettings | None = None  # [telemetry]: OTLP traces and metrics (gatewayd.telemetry); None: off

    def with_simulator(self, sim_url: str) -> "Config":
        """Every provider pointed at the simulator (``--demo``): same catalogue, no real keys.
        ``gatewayd.protocols`` says where under the simulator each protocol's API lives."""
        providers = {name: protocols.simulated(p, sim_url) for name, p in self.providers.items()}
        models = {
            mid: attrs.evolve(m, routes=tuple(attrs.evolve(r, provider=providers[r.provider.name]) for r in m.routes))
            for mid, m in self.models.items()
        }
        return attrs.evolve(self, providers=providers, models=models, demo=True)


# --------------------------------------------------------------------------- loading


def _read_toml(path: Path | Traversable) -> dict[str, Any]:
    """The file as TOML, or the one-line ``ConfigError`` for every way it can be unreadable:
    a reload (SIGHUP, ``gatewayctl reload``) and ``check-config`` rely on nothing else
    escaping, since the daemon must keep running on the config in force."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a file") from None
    except OSError as e:  # permission denied, an I/O error, ...
        raise ConfigError(f"{path}: cannot be read: {e.strerror or type(e).__name__}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None


def _listen_list(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: must be HOST:PORT or a list of them")
    for item in items:
        parse_host_port(item, where)
    return tuple(items)


def parse_host_port(value: Any, where: str = "listen") -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: must be HOST:PORT (got {value!r})")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where}: bad port in {value!r}")
    return host or "0.0.0.0", int(port)


def _server(raw: Any, overrides: dict[str, Any]) -> ServerSettings:
    s = _Section(raw or {}, "server")
    s.unknown({
        "listen", "admin_socket", "data_dir", "stream_idle_timeout_s", "max_body_bytes",
        "trusted_proxies", "models_visible_after_paid", "shutdown_grace_s", "hangup_grace_s", "tls_cert", "tls_key",
        "upstream_connect_timeout_s", "console_secret", "metrics_listen", "drain_delay_s",
        "body_timeout_s", "max_buffered_bytes", "max_buffered_bytes_per_account", "console_buffered_bytes",
        "webhook_buffered_bytes", "h2c",
        "max_concurrent_per_account", "max_concurrent_per_key", "max_sockets_per_key", "max_sockets_per_account",
        "max_free_body_bytes", "free_answer_threads", "password_checks_per_s",
    })
    proxies = []
    raw_proxies = s.table.get("trusted_proxies", [])
    if not isinstance(raw_proxies, list):
        raise ConfigError("server.trusted_proxies: must be a list of CIDRs")
    for entry in raw_proxies:
        try:
            proxies.append(ipaddress.ip_network(str(entry), strict=False))
        except ValueError:
            raise ConfigError(f"server.trusted_proxies: not an IP network: {entry!r}") from None
    threshold = s.number("models_visible_after_paid", 3.00)
    try:
        threshold_nano = usd_to_nano(str(threshold))
    except MoneyError as e:
        raise ConfigError(f"server.models_visible_after_paid: {e}") from None
    default_data_dir = DEMO_DATA_DIR if overrides.get("demo") else DEFAULT_DATA_DIR  # "demo": serve --demo
    data_dir = overrides.get("data_dir") or s.str("data_dir", default_data_dir)
    listen = overrides.get("listen") or s.table.get("listen", DEFAULT_LISTEN)
    tls_cert = overrides.get("tls_cert") or s.str("tls_cert", None)
    tls_key = overrides.get("tls_key") or s.str("tls_key", None)
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("server.tls_cert and server.tls_key: give both or neither")
    return ServerSettings(
        listen=_listen_list(listen, "server.listen"),
        admin_socket=overrides.get("admin_socket") or s.str("admin_socket", str(Path(data_dir) / "admin.sock")),
        data_dir=data_dir,
        stream_idle_timeout_s=float(s.number("stream_idle_timeout_s", 300, minimum=0.001)),
        max_body_bytes=s.number("max_body_bytes", 134_217_728, minimum=1, integer=True),
        trusted_proxies=tuple(proxies),
        models_visible_after_paid_nano=threshold_nano,
        shutdown_grace_s=float(s.number("shutdown_grace_s", 30)),
        hangup_grace_s=float(s.number("hangup_grace_s", 2, minimum=0)),
        tls_cert=tls_cert,
        tls_key=tls_key,
        upstream_connect_timeout_s=float(s.number("upstream_connect_timeout_s", 10, minimum=0.001)),
        console_secret=s.str("console_secret", None),
        metrics_listen=_metrics_listen(s.str("metrics_listen", None)),
        drain_delay_s=float(s.number("drain_delay_s", 0)),
        body_timeout_s=float(s.number("body_timeout_s", 60, minimum=0.001)),
        max_buffered_bytes=s.number("max_buffered_bytes", 1 << 30, minimum=1, integer=True),
        max_buffered_bytes_per_account=s.number("max_buffered_bytes_per_account", None, minimum=1, integer=True),
        console_buffered_bytes=s.number("console_buffered_bytes", 64 << 20, minimum=1, integer=True),
        webhook_buffered_bytes=s.number("webhook_buffered_bytes", 16 << 20, minimum=1, integer=True),
        h2c=s.bool("h2c", False),
        max_concurrent_per_account=s.number("max_concurrent_per_account", 256, integer=True),
        max_concurrent_per_key=s.number("max_concurrent_per_key", 0, integer=True),
        max_sockets_per_key=s.number("max_sockets_per_key", 16, integer=True),
        max_sockets_per_account=s.number("max_sockets_per_account", 64, integer=True),
        max_free_body_bytes=s.number("max_free_body_bytes", 1 << 20, minimum=1, integer=True),
        free_answer_threads=s.number("free_answer_threads", 1, minimum=1, integer=True),
        password_checks_per_s=float(s.number("password_checks_per_s", 10, minimum=0.01)),
    )


def _metrics_listen(value: str | None) -> str | None:
    if value is not None:
        parse_host_port(value, "server.metrics_listen")
    return value


LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")


def _log(raw: Any, env: Any, overrides: dict[str, Any]) -> LogSettings:
    """``[log]``, then ``GATEWAY_LOG_FORMAT`` / ``GATEWAY_LOG_LEVEL``, then the flags."""
    s = _Section(raw or {}, "log")
    s.unknown({"format", "level"})
    fmt = s.str("format", None, choices=LOG_FORMATS)
    level = s.str("level", "info", choices=LOG_LEVELS)
    for key, choices, where in (("format", LOG_FORMATS, "GATEWAY_LOG_FORMAT"), ("level", LOG_LEVELS, "GATEWAY_LOG_LEVEL")):
        value = overrides.get(f"log_{key}")
        origin = f"--log-{key}"
        if value is None and env.get(where):
            value, origin = env[where], where
        if value is None:
            continue
        value = value.lower()
        if value not in choices:
            raise ConfigError(f"{origin}: must be one of {', '.join(choices)} (got {value!r})")
        if key == "format":
            fmt = value
        else:
            level = value
    return LogSettings(format=fmt, level=level)


def _groups(raw: Any) -> dict[str, Group]:
    if not isinstance(raw, list):
        raise ConfigError("groups: must be an array of tables ([[groups]])")
    groups: dict[str, Group] = {}
    for i, table in enumerate(raw):
        s = _Section(table, f"groups[{i}]")
        s.unknown({"name", "price_ratio", "retired", "mcp"})
        name = s.str("name")
        if name in groups:
            raise ConfigError(f"groups[{i}].name: duplicate group {name!r}")
        try:
            price_ratio = ratio(s.number("price_ratio", 1.0))
        except MoneyError as e:
            raise ConfigError(f"groups[{i}].price_ratio: {e}") from None
        mcp = None
        if "mcp" in s.table:
            try:
                mcp = mcp_access.parse_list(s.table["mcp"])
            except mcp_access.AccessListError as e:
                raise ConfigError(f"groups[{i}].mcp: {e}") from None
        groups[name] = Group(name=name, price_ratio=price_ratio, retired=s.bool("retired", False), mcp=mcp)
    if "default" not in groups:
        groups["default"] = Group(name="default", price_ratio=Fraction(1), retired=False)
    return groups


def _admin(raw: Any) -> AdminSettings:
    s = _Section(raw, "admin")
    s.unknown({f.name for f in attrs.fields(AdminSettings)})
    d = AdminSettings()
    return AdminSettings(
        http=s.bool("http", d.http),
        listen=_listen_list(s.table["listen"], "admin.listen") if "listen" in s.table else (),
        requests_per_minute=s.number("requests_per_minute", d.requests_per_minute, minimum=1, integer=True),
        max_body_bytes=s.number("max_body_bytes", d.max_body_bytes, minimum=1024, integer=True),
        max_buffered_bytes=s.number("max_buffered_bytes", d.max_buffered_bytes, minimum=1024, integer=True),
    )


def _routing(raw: Any) -> RoutingSettings:
    s = _Section(raw, "routing")
    s.unknown({f.name for f in attrs.fields(RoutingSettings)})
    d = RoutingSettings()
    return RoutingSettings(
        max_attempts=s.number("max_attempts", d.max_attempts, minimum=1, integer=True),
        deadline_s=float(s.number("deadline_s", d.deadline_s)),
        first_byte_timeout_s=float(s.number("first_byte_timeout_s", d.first_byte_timeout_s, minimum=0.001)),
        non_stream_first_byte_timeout_s=float(s.number("non_stream_first_byte_timeout_s",
                                                       d.non_stream_first_byte_timeout_s)),
        non_stream_timeout_s=float(s.number("non_stream_timeout_s", d.non_stream_timeout_s)),
        failures_to_cool=s.number("failures_to_cool", d.failures_to_cool, minimum=1, integer=True),
        cooldown_s=float(s.number("cooldown_s", d.cooldown_s)),
        max_cooldown_s=float(s.number("max_cooldown_s", d.max_cooldown_s)),
        sticky_ttl_s=float(s.number("sticky_ttl_s", d.sticky_ttl_s)),
        sticky_max=s.number("sticky_max", d.sticky_max, minimum=0, integer=True),
    )


def load_config(
    path: str | os.PathLike | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """The config file (or the embedded defaults), then the environment, then CLI flags.

    Providers, models and groups come from the file when it has any ``[[models]]``,
    otherwise from the default catalogue (package data: ``gatewayd/data/catalogue.toml``).
    """
    env = os.environ if environ is None else environ
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = path or env.get("GATEWAY_CONFIG")
    raw: dict[str, Any] = _read_toml(Path(path)) if path else {}
    allowed = {"server", "database", "redis", "providers", "models", "groups", "log", "routing", "alerts",
               "payments", "aliases", "console", "mcp_servers", "telemetry", "admin"}
    extra = sorted(set(raw) - allowed)
    if extra:
        raise ConfigError(f"{extra[0]}: unknown top-level key")
    if env.get("GATEWAY_ADMIN_SOCKET") and "admin_socket" not in overrides:
        overrides["admin_socket"] = env["GATEWAY_ADMIN_SOCKET"]
    server = _server(raw.get("server"), overrides)

    catalogue = raw if "models" in raw else _read_toml(DEFAULT_CATALOGUE)
    # under --demo every provider is the simulator: no key is needed from the environment
    providers = read_providers(catalogue.get("providers", []), env, own=catalogue is raw and not overrides.get("demo"))
    models = read_models(catalogue.get("models", []), providers)
    try:  # prices applied with `gatewayctl prices import --apply`, over the catalogue's
        overlay = price_overlay.read(price_overlay.path_in(server.data_dir))
        models = price_overlay.apply(models, overlay, str(price_overlay.path_in(server.data_dir)))
    except price_overlay.OverlayError as e:
        raise ConfigError(str(e)) from None
    groups = _groups(raw.get("groups", catalogue.get("groups", [])))

    db = _Section(raw.get("database", {}), "database")
    db.unknown({"url", "pool_size"})
    pool_size = db.number("pool_size", 10, minimum=1, integer=True)
    database_url = env.get("GATEWAY_DATABASE_URL") or db.str("url", f"sqlite:///{Path(server.data_dir) / 'gateway.db'}")
    if not database_url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ConfigError("database.url: must start with sqlite:/// or postgresql://")
    redis = _Section(raw.get("redis", {}), "redis")
    redis.unknown({"url", "key_prefix"})
    redis_url = env.get("GATEWAY_REDIS_URL") or redis.str("url", None)
    if redis_url is not None and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("redis.url: must start with redis://, rediss:// or unix://")
    redis_prefix = redis.str("key_prefix", "gatewayd:")
    alert_settings = alerts.read_settings(raw.get("alerts"), env)
    mcp_servers = read_mcp_servers(raw.get("mcp_servers"), env)
    for group in groups.values():
        unknown = [e for e in group.mcp or () if e.partition(":")[0] not in mcp_servers]
        if unknown:
            raise ConfigError(f"groups: group {group.name!r} names MCP server {unknown[0].partition(':')[0]!r}, "
                              "which is not in [[mcp_servers]]")
    return Config(
        server=server,
        database_url=database_url,
        database_pool_size=pool_size,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        providers=providers,
        models=models,
        groups=groups,
        log=_log(raw.get("log"), env, overrides),
        routing=_routing(raw.get("routing", {})),
        price_overlay={m: dict(f) for m, f in overlay.items() if m in models},
        alerts=alert_settings,
        aliases=read_model_aliases(raw, catalogue, models),
        stripe=read_payments(raw.get("payments"), env),
        console=read_console_settings(raw.get("console"), mail_configured=alert_settings is not None
                                      and alert_settings.smtp is not None, env=env),
        mcp_servers=mcp_servers,
        telemetry=telemetry_settings.read_settings(raw.get("telemetry"), env),
        admin=_admin(raw.get("admin", {})),
    )
