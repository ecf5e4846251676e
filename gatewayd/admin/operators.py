"""The admin API's routes about the operators themselves: admin tokens, the audit log, the
console password, the caller's own identity and the OpenAPI document.

``POST /admin/v1/admin-tokens`` ``{"name", "scopes", "expires_at"?, "allow_ips"?}`` makes a
token and answers it with its ``token`` (``gwa-...``), this once; ``GET`` lists them (never a
secret, never a hash), ``POST /admin/v1/admin-tokens/{id}/revoke`` revokes one. Making and
revoking tokens and setting the operator's password need the ``admin`` scope (the local
socket's operator has it), so no token can make a token stronger than ``admin`` allows.
``GET /admin/v1/audit-log`` pages through the audit rows, newest first.
"""

from __future__ import annotations

import datetime
from typing import Any, Awaitable, Callable

import orjson
from quart import Response, request

from gatewayd import passwords
from gatewayd.admin import tokens
from gatewayd.admin.answers import MAX_ROW_ID, instant, int_arg
from gatewayd.admin.gate import principal_of
from gatewayd.directory import DirectoryError
from gatewayd.records import utc_now_iso
from gatewayd.store.admin_sql import OPERATOR_PASSWORD

MIN_PASSWORD = 12
MAX_PASSWORD = 1024


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status=status, content_type="application/json")


def add_operator_routes(app, store, body: Callable[..., Awaitable[dict]]) -> None:
    """``body(*fields)``: the admin API's JSON body reader (unknown fields refused)."""

    @app.get("/admin/v1/openapi.json")
    async def openapi():
        from gatewayd.admin.openapi import document

        return _json(document())

    @app.get("/admin/v1/me")
    async def me():
        """Who the caller is to the admin API (the console's sign-in asks this of a token)."""
        who = principal_of(request.scope)
        return _json({"actor": who.actor, "name": who.name, "scopes": sorted(who.scopes), "via": who.via,
                      "address": who.address})

    @app.post("/admin/v1/admin-tokens")
    async def create_token():
        doc = await body("name", "scopes", "expires_at", "allow_ips")
        now = datetime.datetime.now(datetime.timezone.utc)
        try:
            name = tokens.check_name(doc.get("name"))
            scopes = tokens.check_scopes(doc.get("scopes"))
            expires_at = tokens.check_expires(doc.get("expires_at"), now)
            allow_ips = tokens.check_allow_ips(doc.get("allow_ips"))
        except tokens.TokenError as e:
            raise DirectoryError(str(e)) from None
        secret = tokens.new_token()
        who = principal_of(request.scope)
        token = tokens.AdminToken(tokens.new_token_id(), name, secret[-4:], scopes, allow_ips, utc_now_iso(),
                                  f"{who.actor} ({who.name})", expires_at)
        await store.insert_admin_token(token, tokens.token_hash(secret))
        return _json({**token.doc(utc_now_iso()), "token": secret}, 201)

    @app.get("/admin/v1/admin-tokens")
    async def list_tokens():
        now = utc_now_iso()
        return _json({"data": [t.doc(now) for t in await store.admin_tokens()]})

    @app.get("/admin/v1/admin-tokens/<token_id>")
    async def show_token(token_id: str):
        now = utc_now_iso()
        for token in await store.admin_tokens():
            if token.id == token_id:
                return _json(token.doc(now))
        raise DirectoryError(f"no admin token {token_id!r}", status=404, code="not_found")

    @app.post("/admin/v1/admin-tokens/<token_id>/revoke")
    async def revoke_token(token_id: str):
        await body()
        now = utc_now_iso()
        token = await store.revoke_admin_token(token_id, now)
        if token is None:
            raise DirectoryError(f"no admin token {token_id!r}", status=404, code="not_found")
        return _json(token.doc(now))

    @app.get("/admin/v1/audit-log")
    async def audit_log():
        args = request.args
        since = instant(args.get("since"), "UTC", "since")
        until = instant(args.get("until"), "UTC", "until", end_of_day=True)
        limit = int_arg("limit", 50, 1, 1000)
        before = int_arg("before", None, 1, MAX_ROW_ID)
        changes = args.get("changes", "false")
        if changes not in ("true", "false"):
            raise DirectoryError("changes must be true or false")
        rows = await store.admin_audit(actor=args.get("actor") or None, target=args.get("target") or None,
                                       since=since, until=until, changes_only=changes == "true", before_id=before,
                                       limit=limit)
        following = rows[-1].id if len(rows) == limit else None
        return _json({"data": [r.doc() for r in rows], "next_before": following})

    @app.put("/admin/v1/operator/password")
    async def set_operator_password():
        doc = await body("password")
        password = doc.get("password")
        if not isinstance(password, str) or not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
            raise DirectoryError(f"password must be a string of {MIN_PASSWORD} to {MAX_PASSWORD} characters")
        await store.set_operator_setting(OPERATOR_PASSWORD, await passwords.hashed(password))
        return _json({"operator_password": True, "changed_at": utc_now_iso()})
