"""The admin API: JSON, spoken by ``gatewayctl`` over the local Unix socket (mode 0600) and by
anyone with an admin token over HTTP under ``/admin/v1/``. This app is the one implementation;
every door reaches it through the gate (``gatewayd.admin.gate``: who may call what, the
throttle, the audit log), and its routes are described, each with its scope, in the OpenAPI
document (``gatewayd.admin.openapi``).

Every change goes through the ``Directory`` (validation, write-through), so it takes
effect on the very next public request. Reads of history (payments, usage) go to the
store; the audit checks the ledger's invariant from the stored rows (and the cache, where the
store keeps the truth in memory). Balances are refreshed from the store before they are shown:
with several instances on one database, another instance may have moved them.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Awaitable, Callable

import orjson
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from gatewayd.admin.answers import MAX_ROW_ID, json_response as _json, instant, int_arg
from gatewayd.admin.codes import add_code_routes
from gatewayd.admin.gate import error_body
from gatewayd.admin.operators import add_operator_routes
from gatewayd.admin.prices import add_price_routes
from gatewayd.admin.route_reports import every_instance
from gatewayd.budgets import budget_view
from gatewayd.directory import Directory, DirectoryError, parse_alert_below, parse_max_concurrent
from gatewayd.store.base import utc_iso
from gatewayd.store.usage_queries import UsageFilter

JSON = "application/json"
log = logging.getLogger("gatewayd.admin")
KEY_FIELDS = ("name", "spend_limit_nano", "expires_on", "models", "allow_ips", "group", "max_concurrent",
              "budget_nano", "budget_period", "mcp")


def create_admin_app(directory: Directory, store, clock, reload=None,
                     routes: Callable[[], list[dict]] | None = None,
                     invite: Callable[[Any], Awaitable[dict]] | None = None) -> QuartTrio:
    """``routes`` reports every model route's health (``Router.report``), for ``gatewayctl routes``;
    ``invite`` sends a sign-up link (``gatewayd.console.views_self_service.invite``)."""
    app = QuartTrio(__name__ + ".admin")
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None)

    async def body(*fields: str) -> dict:
        """The JSON object sent, holding only ``fields``. A misspelt field is refused, naming it,
        rather than ignored (a payment's ``"nots"`` would silently lose its note); the values'
        types and ranges are the Directory's to judge, one line naming the field."""
        raw = await request.get_data()
        if not raw:
            return {}
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise DirectoryError("the request body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise DirectoryError("the request body must be a JSON object")
        unknown = sorted(set(doc) - set(fields))
        if unknown:
            raise DirectoryError(f"unknown field {unknown[0]!r} (this request takes {', '.join(fields)})")
        return doc

    def given(doc: dict, field: str, default: str) -> Any:
        """An optional field: its default when absent or null, else the value as sent (``false``
        stays ``false`` for the Directory to refuse, instead of becoming the default)."""
        value = doc.get(field)
        return default if value is None else value

    def error_response(status: int, message: str, code: str) -> Response:
        return Response(error_body(status, message, code), status=status, content_type=JSON)

    @app.errorhandler(DirectoryError)
    async def refused(error: DirectoryError):
        return error_response(error.status, error.message, error.code)

    @app.errorhandler(Exception)
    async def failed(error: Exception):
        """Whatever escapes a route is answered in the JSON shape gatewayctl reads, never Quart's
        HTML page: an HTTP error with its own status, anything else a logged 500."""
        if isinstance(error, HTTPException):
            return error_response(error.code or 500, f"{error.name}: {error.description}", "http_error")
        log.error("admin: internal error on %s %s: %s", request.method, request.path, type(error).__name__,
                  exc_info=error)
        return error_response(500, f"the gateway failed on {request.method} {request.path} "
                              f"({type(error).__name__}); this is a gateway bug, its traceback is in the daemon's log",
                              "internal_error")

    @app.errorhandler(404)
    async def not_found(_error):
        return error_response(404, f"no admin route {request.method} {request.path}", "not_found")

    @app.errorhandler(405)
    async def not_allowed(_error):
        return error_response(405, f"{request.method} not allowed on {request.path}", "method_not_allowed")

    def key_doc(key) -> dict:
        now = clock()
        account = directory.accounts.get(key.account_id)
        zone = account.timezone if account is not None else "UTC"
        return {**key.public(now), **budget_view(key.budget_nano, key.budget_period, key.budget_period_start,
                                                  key.budget_spent_nano, key.held_nano, zone,
                                                  utc_iso(datetime.datetime.fromtimestamp(now, datetime.timezone.utc)))}

    @app.post("/admin/v1/accounts")
    async def create_account():
        doc = await body("email", "name", "timezone", "password")
        account = await directory.create_account(
            doc.get("email"), given(doc, "name", ""), given(doc, "timezone", "UTC"), doc.get("password")
        )
        return _json(account.public(), 201)

    @app.post("/admin/v1/invitations")
    async def invite_account():
        doc = await body("email")
        if invite is None:
            raise DirectoryError("this gateway has no console to invite to", status=409, code="signup_off")
        return _json(await invite(doc.get("email")), 201)

    @app.get("/admin/v1/accounts")
    async def list_accounts():
        """Every account, or (``q``) those whose email, name or id holds ``q`` (any case); at most
        ``limit`` of them (by email). Only those shown have their balance refreshed."""
        accounts = list(directory.accounts.values())
        q = (request.args.get("q") or "").strip().lower()
        if q:
            accounts = [a for a in accounts if q in a.email.lower() or q in a.name.lower() or q in a.id]
        limit = int_arg("limit", None, 1, None)
        if limit is not None:
            accounts = sorted(accounts, key=lambda a: a.email.lower())[:limit]
        for account in accounts:
            await store.refresh_balance(account)
        return _json({"data": [a.public() for a in accounts]})

    @app.get("/admin/v1/accounts/<ref>")
    async def show_account(ref: str):
        return _json((await store.refresh_balance(directory.account(ref))).public())

    @app.patch("/admin/v1/accounts/<ref>")
    async def update_account(ref: str):
        account = directory.account(ref)
        doc = await body("name", "timezone", "max_concurrent", "alert_below_nano")
        if "max_concurrent" in doc:
            parse_max_concurrent(doc["max_concurrent"])  # refused before anything else is changed
        if "alert_below_nano" in doc:
            parse_alert_below(doc["alert_below_nano"])
        kwargs = {k: doc[k] for k in ("name", "timezone") if k in doc}
        await directory.update_account(account, **kwargs)
        if "max_concurrent" in doc:  # null: back to the server's default
            await directory.set_max_concurrent(account, doc["max_concurrent"])
        if "alert_below_nano" in doc:  # null: no balance alert
            await directory.set_alert_below(account, doc["alert_below_nano"])
        return _json(account.public())

    @app.put("/admin/v1/accounts/<ref>/password")
    async def set_password(ref: str):
        account = directory.account(ref)
        doc = await body("password")
        return _json((await directory.set_password(account, doc.get("password"))).public())

    @app.post("/admin/v1/accounts/<ref>/unlock")
    async def unlock(ref: str):
        """The console's sign-in lockouts of the account's email lifted, at every address."""
        from gatewayd.console.session import SignInThrottle

        account = directory.account(ref)
        await body()
        cleared = await SignInThrottle(store).unlock(account.email)
        return _json({"account": account.public(), "buckets_cleared": cleared})

    @app.post("/admin/v1/accounts/<ref>/payments")
    async def pay(ref: str):
        account = directory.account(ref)
        doc = await body("amount_nano", "note")
        payment = await directory.pay(account, doc.get("amount_nano"), given(doc, "note", ""))
        return _json({"account": account.public(), "payment": payment}, 201)

    @app.post("/admin/v1/accounts/<ref>/adjustments")
    async def adjust(ref: str):
        """A correction of the balance, up or down, with its reason (``Directory.adjust``)."""
        account = directory.account(ref)
        doc = await body("amount_nano", "note", "force")
        adjustment = await directory.adjust(account, doc.get("amount_nano"), doc.get("note"), doc.get("force"))
        return _json({"account": account.public(), "adjustment": adjustment}, 201)

    @app.get("/admin/v1/accounts/<ref>/payments")
    async def payments(ref: str):
        account = directory.account(ref)
        return _json({"data": [p.doc() for p in await store.payments(account.id)]})

    @app.put("/admin/v1/accounts/<ref>/groups")
    async def groups(ref: str):
        account = directory.account(ref)
        doc = await body("groups")
        return _json((await directory.set_groups(account, doc.get("groups"))).public())

    @app.put("/admin/v1/accounts/<ref>/embeddings/<path:model>")
    async def embedding_model(ref: str, model: str):
        account = directory.account(ref)
        doc = await body("enabled")
        return _json((await directory.set_embedding_model(account, model, doc.get("enabled"))).public())

    @app.post("/admin/v1/accounts/<ref>/keys")
    async def create_key(ref: str):
        account = directory.account(ref)
        doc = await body(*KEY_FIELDS, "force")
        key, secret = await directory.create_key(account, **{k: doc.get(k) for k in (*KEY_FIELDS, "force")})
        return _json({**key_doc(key), "secret": secret}, 201)

    @app.get("/admin/v1/accounts/<ref>/keys")
    async def list_keys(ref: str):
        account = directory.account(ref)
        keys = directory.keys_by_account[account.id]
        for key in keys:
            await store.refresh_key(key)
        return _json({"data": [key_doc(k) for k in keys]})

    @app.get("/admin/v1/keys/<key_id>")
    async def show_key(key_id: str):
        return _json(key_doc(await store.refresh_key(directory.key(key_id))))

    @app.patch("/admin/v1/keys/<key_id>")
    async def update_key(key_id: str):
        key = directory.key(key_id)
        changes = await body(*KEY_FIELDS, "force")
        force = changes.pop("force", None)
        return _json(key_doc(await directory.update_key(key, changes, force)))

    @app.post("/admin/v1/keys/<key_id>/<action>")
    async def key_action(key_id: str, action: str):
        status = {"disable": "disabled", "enable": "enabled", "revoke": "deleted"}.get(action)
        if status is None:
            raise DirectoryError(f"unknown key action {action!r}", status=404, code="not_found")
        key = directory.key(key_id)
        return _json(key_doc(await directory.set_key_status(key, status)))

    @app.get("/admin/v1/accounts/<ref>/balance")
    async def balance(ref: str):
        return _json((await store.refresh_balance(directory.account(ref))).balance())

    @app.get("/admin/v1/accounts/<ref>/usage")
    async def usage(ref: str):
        """Usage rows, newest first, filtered; ``before`` pages on (``next_before`` of the last page)."""
        account = directory.account(ref)
        key_id = request.args.get("key")
        if key_id is not None:
            directory.key(key_id, account.id)
        where = usage_filter(account.id, account.timezone)
        limit = int_arg("limit", 50, 1, 10_000)
        before = int_arg("before", None, 1, MAX_ROW_ID)
        rows, following = await store.usage_export(where, before_id=before, limit=limit)
        return _json({"data": rows, "next_before": following})

    @app.get("/admin/v1/report")
    async def report():
        """Requests, tokens and cost per model and per key over a range, for one account or all."""
        ref = request.args.get("account")
        if ref:
            account = directory.account(ref)
            where = usage_filter(account.id, account.timezone)
        else:
            where = usage_filter(None, "UTC")
        doc = await store.usage_report(where)
        doc["range"] = {"since": where.since, "until": where.until, "account_id": where.account_id,
                        "timezone": directory.accounts[where.account_id].timezone if where.account_id else "UTC"}
        return _json(doc)

    def usage_filter(account_id: str | None, timezone: str) -> UsageFilter:
        key_id = request.args.get("key")
        since = instant(request.args.get("since"), timezone, "since")
        until = instant(request.args.get("until"), timezone, "until", end_of_day=True)
        if since and until and since >= until:
            raise DirectoryError("since must be before until")
        return UsageFilter(account_id=account_id, key_id=key_id, model=request.args.get("model") or None,
                           status=request.args.get("status") or None, since=since, until=until)

    @app.post("/admin/v1/reload")
    async def reload_config():
        """Re-read the config file (as SIGHUP does); a bad file is refused and the old config stays."""
        from gatewayd.config import ConfigError

        if reload is None:
            raise DirectoryError("this daemon cannot reload its config", status=501, code="not_implemented")
        try:
            return _json(reload("gatewayctl"))
        except ConfigError as e:
            raise DirectoryError(f"gatewayd: config error: {e}", status=400, code="config_error") from None

    @app.get("/admin/v1/audit")
    async def run_audit():
        return _json(await store.audit(directory.accounts.values(), directory.keys.values()))

    @app.get("/admin/v1/routes")
    async def list_routes():
        """This instance's routes; ``?instances=all``: every instance's (``gatewayd.admin.route_reports``)."""
        local = routes() if routes is not None else []
        scope = request.args.get("instances")
        if scope is None:
            return _json({"data": local})
        if scope != "all":
            raise DirectoryError("instances must be all (every instance's routes) or absent (this instance's)")
        return _json({"data": await every_instance(store, local)})

    add_price_routes(app, directory, reload)
    add_code_routes(app, directory, store, body)
    add_operator_routes(app, store, body)

    return app
