"""The one door into the admin API: who is calling, what they may do, and the audit log.

Every admin call passes through an ``AdminGate`` before the admin app
(``gatewayd.admin.api``) sees it, whichever way it came:

- the Unix socket (``socket_app``): the caller is the local operator, with every scope;
- HTTP on the public listener (``__call__``, under ``/admin/v1/``): an admin token
  (``gwa-...``) as ``Authorization: Bearer``, looked up in the store on every call (so a
  token revoked on one instance is refused by all), its expiry and address list checked;
  an API key (``sk-``) is refused with 401, never tried as a token;
- the operator console (``call``): the signed-in operator's scopes.

Then, in this order: the caller's throttle (``[admin] requests_per_minute``, per token, and
per address for calls without a valid token: 429); the body, read here whole under
``[admin] max_body_bytes`` and counted in a budget of its own (``[admin]
max_buffered_bytes``), never in the API's (``gatewayd.bodies``); the route's scope (the
``x-scope`` of its operation in the OpenAPI document, ``gatewayd.admin.openapi``: 403
when the caller lacks it); the target's state before a change; the app; the state after;
and one audit row (who, what, when, from where, before and after).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
import time
from typing import Any, Callable
from urllib.parse import quote, unquote

import attrs
import orjson
import trio

from gatewayd.access import client_address
from gatewayd.admin import tokens
from gatewayd.errors import GatewayError
from gatewayd.records import utc_now_iso
from gatewayd.store.admin_sql import AuditEntry
from gatewayd.store.base import StoreError

log = logging.getLogger("gatewayd.admin")
PREFIX = "/admin/v1/"
JSON = b"application/json"
SCOPE_KEY = "gateway.admin_principal"  # where the admin app finds the caller (``principal_of``)
ADMIN_LISTENER = "gateway.admin_listener"  # set on requests to [admin] listen (``AdminOnly``)
TOUCH_EVERY_S = 60.0  # a token's last_used_at is written at most this often per instance
REDACTED = "(shown once, not kept)"
SECRET_FIELDS = frozenset({"secret", "token", "code", "password", "link"})  # link: a sign-up invitation


@attrs.frozen
class Principal:
    """Who is calling: ``actor`` is a token id, ``"socket"`` or ``"operator"``."""

    actor: str
    name: str
    scopes: frozenset[str]
    via: str  # socket | http | console
    address: str | None = None

    def may(self, scope: str) -> bool:
        return tokens.grants(self.scopes, scope)


LOCAL_OPERATOR = Principal("socket", "local operator", frozenset({tokens.ADMIN}), "socket")


def principal_of(scope: dict) -> Principal:
    """The caller of the admin request being served (the socket's operator when none was set:
    the admin app served without a gate, as in tests of the app alone)."""
    return scope.get(SCOPE_KEY) or LOCAL_OPERATOR


def error_body(status: int, message: str, code: str) -> bytes:
    """The gateway's envelope (``{"error": {"message", "type", "code"}}``) for an admin refusal."""
    error = GatewayError(status, message, code)
    return orjson.dumps({"error": {"message": message, "type": error.type, "code": code}})


class AdminRefusal(Exception):
    def __init__(self, status: int, message: str, code: str, headers: list | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or []


class Throttle:
    """A token bucket per caller: ``per_minute`` calls a minute, bursts of up to a sixth of a
    minute's worth (at least 10). In memory, per instance; idle buckets are dropped."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}  # who -> (tokens, at)
        self.set_rate(per_minute)

    def set_rate(self, per_minute: int) -> None:
        """(A reload may change ``[admin] requests_per_minute``.)"""
        self.rate = per_minute / 60.0
        self.burst = max(10.0, per_minute / 6.0)

    def take(self, who: str) -> float | None:
        """None when the call may go; else the seconds until it could."""
        now = self.clock()
        if len(self.buckets) > 10_000:  # forget callers whose bucket has refilled
            self.buckets = {k: v for k, v in self.buckets.items() if v[0] + (now - v[1]) * self.rate < self.burst}
        level, at = self.buckets.get(who, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.rate)
        if level < 1.0:
            self.buckets[who] = (level, now)
            return (1.0 - level) / self.rate
        self.buckets[who] = (level - 1.0, now)
        return None


class BodyBudget:
    """Admin request bodies held at once, all callers together: small, and apart from the API's."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


@attrs.frozen
class Operation:
    method: str
    pattern: re.Pattern
    scope: str
    template: str


def operations_of(document: dict) -> list[Operation]:
    """(method, path pattern, scope) of every operation in the OpenAPI document. A parameter
    whose schema says ``x-slashes`` (a model id) may hold ``/``."""
    found = []
    for template, item in document["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            slashes = {p["name"] for p in [*item.get("parameters", []), *op.get("parameters", [])]
                       if p.get("in") == "path" and p.get("x-slashes")}
            regex = re.sub(r"\{(\w+)\}", lambda m: "(.+)" if m.group(1) in slashes else "([^/]+)",
                           re.escape(template).replace(r"\{", "{").replace(r"\}", "}"))
            found.append(Operation(method.upper(), re.compile(f"^{regex}$"), op["x-scope"], template))
    # literal segments first: /keys/{id}/revoke before a template that would swallow it
    found.sort(key=lambda o: (o.template.count("{"), -len(o.template)))
    return found


class AdminGate:
    """See the module docstring. ``app`` is the admin Quart app; ``document`` its OpenAPI
    document; ``settings`` the ``[admin]`` section (read at each call: a reload changes it)."""

    def __init__(self, app: Any, store, document: dict, settings: Callable[[], Any],
                 trusted_proxies: Callable[[], tuple], clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.store = store
        self.operations = operations_of(document)
        self.settings = settings
        self.trusted_proxies = trusted_proxies
        self.clock = clock
        self.throttle = Throttle(settings().requests_per_minute, clock)
        self.bodies = BodyBudget(settings().max_buffered_bytes)
        self._touched: dict[str, float] = {}

    def scope_for(self, method: str, path: str) -> str:
        for op in self.operations:
            if op.method == method and op.pattern.match(path):
                return op.scope
        return tokens.READ  # no such route: any caller may learn that (the app answers 404/405)

    # -- the three doors ----------------------------------------------------------------

    async def socket_app(self, scope, receive, send) -> None:
        """The admin socket: the local operator, every scope (file mode 0600 is the lock)."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        await self._serve(LOCAL_OPERATOR, scope, receive, send)

    async def __call__(self, scope, receive, send) -> None:
        """HTTP on the public listener: an admin token, or 401."""
        await self._http(scope, receive, send, dedicated=False)

    async def dedicated_app(self, scope, receive, send) -> None:
        """HTTP on the admin API's own listener (``[admin] listen``): served whatever ``[admin] http`` says."""
        await self._http(scope, receive, send, dedicated=True)

    async def _http(self, scope, receive, send, *, dedicated: bool) -> None:
        address = client_address(
            (scope.get("client") or (None,))[0],
            ", ".join(v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-forwarded-for") or None,
            self.trusted_proxies())
        try:
            if not dedicated and not self.settings().http:
                raise AdminRefusal(404, f"no admin API over HTTP on this gateway ({scope['path']}): "
                                        "[admin] http is false; use gatewayctl on the admin socket", "not_found")
            principal = await self.authenticate(scope, address)
        except AdminRefusal as refusal:
            await _respond(send, refusal.status, error_body(refusal.status, refusal.message, refusal.code),
                           refusal.headers)
            return
        await self._serve(principal, scope, receive, send)

    async def call(self, principal: Principal, method: str, path: str, body: Any = None,
                   query: dict[str, str] | None = None) -> tuple[int, Any]:
        """One admin call made in this process (the operator console): (status, JSON document)."""
        raw = b"" if body is None else orjson.dumps(body)
        query_string = "&".join(f"{quote(k)}={quote(str(v))}" for k, v in (query or {}).items() if v is not None)
        scope = _scope(method, path, query_string.encode(), raw, principal.address)
        status, _, out = await self._run(principal, scope, raw)
        return status, (orjson.loads(out) if out else None)

    # -- the steps ----------------------------------------------------------------------

    async def authenticate(self, scope: dict, address: str | None) -> Principal:
        auth = _header(scope, b"authorization")
        scheme, _, secret = auth.partition(" ")
        secret = secret.strip()
        if not auth or scheme.lower() != "bearer" or not secret:
            self._anonymous_throttle(address)
            raise AdminRefusal(401, "an admin token is required: send Authorization: Bearer gwa-...",
                               "missing_admin_token", [(b"www-authenticate", b'Bearer realm="gatewayd admin"')])
        if not secret.startswith(tokens.PREFIX):
            self._anonymous_throttle(address)
            what = "an API key (sk-...)" if secret.startswith(tokens.API_KEY_PREFIX) else "not an admin token"
            raise AdminRefusal(401, f"invalid admin token: this is {what}; the admin API takes an admin token "
                                    "(gwa-..., gatewayctl admin-token create)", "invalid_admin_token",
                               [(b"www-authenticate", b'Bearer realm="gatewayd admin", error="invalid_token"')])
        try:
            token = await self.store.admin_token_by_hash(tokens.token_hash(secret))
        except StoreError as e:
            raise AdminRefusal(503, f"the admin token cannot be checked: the database is unavailable ({e})",
                               "store_unavailable", [(b"retry-after", b"5")]) from None
        now = utc_now_iso()
        if token is None or token.state(now) != "active":
            self._anonymous_throttle(address)
            state = "unknown" if token is None else token.state(now)
            raise AdminRefusal(401, f"invalid admin token ({state})", "invalid_admin_token",
                               [(b"www-authenticate", b'Bearer realm="gatewayd admin", error="invalid_token"')])
        if not token.allows_address(address):
            await self._audit(Principal(token.id, token.name, frozenset(token.scopes), "http", address),
                              scope["method"], scope["path"], 403)
            raise AdminRefusal(403, f"admin token {token.id} may not be used from {address}", "ip_not_allowed")
        self.throttle.set_rate(self.settings().requests_per_minute)
        wait = self.throttle.take(token.id)
        if wait is not None:
            raise _too_many(wait)
        if self.clock() - self._touched.get(token.id, -math.inf) >= TOUCH_EVERY_S:
            self._touched[token.id] = self.clock()
            try:
                await self.store.touch_admin_token(token.id, now)
            except StoreError:
                pass  # last_used_at is a hint; the call itself may still be served
        return Principal(token.id, token.name, frozenset(token.scopes), "http", address)

    def _anonymous_throttle(self, address: str | None) -> None:
        """Calls without a valid token are throttled per address (each costs a database read)."""
        wait = self.throttle.take(f"address:{address}")
        if wait is not None:
            raise _too_many(wait)

    async def _serve(self, principal: Principal, scope, receive, send) -> None:
        async with self._body(scope, receive, send) as body:
            if body is None:
                return  # refused (answered) or the client left
            status, headers, out = await self._run(principal, scope, body)
        await _respond(send, status, out, headers, content_type=None)

    async def console_app(self, app: Any, scope, receive, send) -> None:
        """The operator console's pages (``/admin/`` on the public app): their bodies, too, are
        admin traffic, read under the admin API's cap and budget and never the API's."""
        if scope["type"] != "http":
            return await app(scope, receive, send)
        async with self._body(scope, receive, send) as body:
            if body is None:
                return
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, replay, send)

    @contextlib.asynccontextmanager
    async def _body(self, scope, receive, send):
        """The request body, whole, under ``[admin] max_body_bytes`` and counted in the admin
        budget until the block ends; None when it was refused (413, 503: answered here) or the
        client left."""
        settings = self.settings()
        self.bodies.limit = settings.max_buffered_bytes  # as reloaded
        declared = _declared_length(scope)
        if declared is not None and declared > settings.max_body_bytes:
            await _respond(send, 413, error_body(413, f"an admin request body is at most {settings.max_body_bytes} "
                                                      "bytes", "request_too_large"), [(b"connection", b"close")])
            yield None
            return
        reserved = declared or 0
        if not self.bodies.take(reserved):
            await _respond(send, 503, error_body(503, "the admin API is holding too many request bodies right "
                                                      "now; retry shortly", "server_busy"), [(b"retry-after", b"1")])
            yield None
            return
        try:
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    yield None
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > settings.max_body_bytes or (size > reserved and not self.bodies.take(len(chunk))):
                    status = 413 if size > settings.max_body_bytes else 503
                    await _respond(send, status, error_body(status, "the admin request body is too large"
                                                            if status == 413 else "the admin API is busy; retry",
                                                            "request_too_large" if status == 413 else "server_busy"),
                                   [(b"connection", b"close")])
                    yield None
                    return
                if size > reserved:
                    reserved = size
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            yield b"".join(chunks)
        finally:
            self.bodies.give(reserved)

    async def _run(self, principal: Principal, scope: dict, body: bytes) -> tuple[int, list, bytes]:
        """Scope check, before, the app, after, the audit row."""
        method, path = scope["method"], scope["path"]
        needed = self.scope_for(method, path)
        if not principal.may(needed):
            out = error_body(403, f"this admin token may not {method} {path}: it needs the {needed!r} scope "
                                  f"(it has {', '.join(sorted(principal.scopes))})", "insufficient_scope")
            await self._audit(principal, method, path, 403, request=_redact(_json_or_none(body)))
            return 403, [(b"content-type", JSON)], out
        changes = method not in ("GET", "HEAD", "OPTIONS")
        target_path = _target_path(path) if changes else None
        before = await self._state(target_path) if target_path else None
        scope = {**scope, SCOPE_KEY: principal}
        status, headers, out = await _asgi_call(self.app, scope, body)
        if changes:
            doc = _redact(_json_or_none(out))
            target: str | None
            after: Any
            if status == 201 and isinstance(doc, dict) and isinstance(doc.get("id"), str):
                # a new account, key or token: it is the target, and had no state before
                target, before, after = _created_name(path, doc), None, doc
            else:
                after = await self._state(target_path) if target_path and status < 400 else None
                if after is None and status < 400:
                    after = doc
                target = _target_name(target_path, before, after)
            await self._audit(principal, method, path, status, target=target, request=_redact(_json_or_none(body)),
                              before=before, after=after)
        else:
            await self._audit(principal, method, path, status)
        return status, headers, out

    async def _state(self, target_path: str) -> Any:
        """The target as its GET answers it, or None (not there, or no GET for it)."""
        status, _, out = await _asgi_call(self.app, {**_scope("GET", target_path, b"", b"", None),
                                                     SCOPE_KEY: LOCAL_OPERATOR}, b"")
        return _redact(_json_or_none(out)) if status == 200 else None

    async def _audit(self, principal: Principal, method: str, path: str, status: int, **change: Any) -> None:
        entry = AuditEntry(utc_now_iso(), principal.actor, principal.name, principal.via, principal.address,
                           method, path, status, **change)
        with trio.CancelScope(shield=True):  # a client gone mid-call does not erase the call's trace
            try:
                await self.store.append_admin_audit(entry)
            except StoreError as e:
                # the call happened (or was refused) all the same: its trace goes to the log instead
                log.error("admin audit entry not stored (%s): %s", e, orjson.dumps(entry.doc()).decode())


@attrs.frozen
class AdminDoor:
    """What a listener hands admin traffic to (``gatewayd.app.Listener``): ``api`` serves
    ``/admin/v1/``; ``console(app)`` wraps the operator console's pages of the public ``app``.
    Neither takes from the API's body budget."""

    api: Any
    console_app: Any

    def console(self, app: Any) -> Any:
        return functools.partial(self.console_app, app)


def door(gate: AdminGate, *, dedicated: bool = False) -> AdminDoor:
    """The public listener's door (``dedicated``: the one of ``[admin] listen``)."""
    return AdminDoor(gate.dedicated_app if dedicated else gate, gate.console_app)


class AdminOnly:
    """The app of the admin API's own listener (``[admin] listen``): the admin API, the operator
    console and the stylesheets it uses; every other path is 404 there (the API and the account
    console are on the public listener)."""

    SERVED = ("/admin/", "/console/static/")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(self.SERVED) and scope["path"] != "/admin":
            message = f"{scope['path']} is not served on the admin listener: it serves /admin/ and /admin/v1/ only"
            await _respond(send, 404, error_body(404, message, "not_found"))
            return
        await self.app({**scope, ADMIN_LISTENER: True}, receive, send)


def _too_many(wait: float) -> AdminRefusal:
    seconds = max(1, math.ceil(wait))
    return AdminRefusal(429, f"too many admin calls; retry in {seconds} s", "rate_limited",
                        [(b"retry-after", str(seconds).encode())])


# The target whose state is recorded before and after a change: the resource's GET
_TARGETS = (
    (re.compile(r"^/admin/v1/accounts/([^/]+)(/.*)?$"), "/admin/v1/accounts/{}"),
    (re.compile(r"^/admin/v1/keys/([^/]+)(/.*)?$"), "/admin/v1/keys/{}"),
    (re.compile(r"^/admin/v1/prices/(.+)$"), "/admin/v1/prices/{}"),
    (re.compile(r"^/admin/v1/admin-tokens/([^/]+)(/.*)?$"), "/admin/v1/admin-tokens/{}"),
)


def _target_path(path: str) -> str | None:
    for pattern, template in _TARGETS:
        match = pattern.match(path)
        if match:
            return template.format(quote(unquote(match.group(1)), safe=""))
    return None


def _target_name(target_path: str | None, before: Any, after: Any) -> str | None:
    """``account:<id>``, ``key:<id>``, ``prices:<model>``, ``admin-token:<id>``, ``code:<id>`` ..."""
    if target_path is None:
        doc = after if isinstance(after, dict) else {}
        if isinstance(doc.get("id"), str) and doc["id"].startswith("code_"):
            return f"code:{doc['id']}"
        return None
    kind = target_path.split("/")[3].removesuffix("s")
    doc = after if isinstance(after, dict) else before if isinstance(before, dict) else {}
    ident = doc.get("id") or doc.get("model") or unquote(target_path.rsplit("/", 1)[1])
    return f"{kind}:{ident}"


def _created_name(path: str, doc: dict) -> str:
    kind = {"/keys": "key", "/admin-tokens": "admin-token", "/accounts": "account"}
    for suffix, name in kind.items():
        if path.endswith(suffix):
            return f"{name}:{doc['id']}"
    return f"{path.rstrip('/').rsplit('/', 1)[-1]}:{doc['id']}"


def _redact(doc: Any) -> Any:
    """A document as the audit log may keep it: secrets, codes and passwords replaced."""
    if isinstance(doc, dict):
        return {k: (REDACTED if k in SECRET_FIELDS and isinstance(v, str) else v if k == "error" else _redact(v))
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact(v) for v in doc]
    return doc


def _json_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"unreadable_body_bytes": len(raw)}


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return ""


def _declared_length(scope: dict) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _scope(method: str, path: str, query: bytes, body: bytes, address: str | None) -> dict:
    headers = [(b"host", b"gatewayd"), (b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", JSON))
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": unquote(path), "raw_path": path.encode(), "query_string": query, "root_path": "",
            "headers": headers, "client": (address, 0) if address else None, "server": ("gatewayd", 0),
            "extensions": {}}


async def _asgi_call(app: Any, scope: dict, body: bytes) -> tuple[int, list, bytes]:
    """Run the admin app on one request held whole; its answer held whole (admin answers are
    JSON documents, none streamed)."""
    sent = False
    status, headers, chunks = 500, [], []
    done = trio.Event()

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    done.set()
    return status, headers, b"".join(chunks)


async def _respond(send, status: int, body: bytes, headers: list | None = None, *,
                   content_type: bytes | None = JSON) -> None:
    out = [(k, v) for k, v in (headers or []) if k.lower() != b"content-length"]
    if content_type is not None:
        out.append((b"content-type", content_type))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body, "more_body": False})

