"""The admin API's redemption code routes (``gatewayctl codes``).

``POST /admin/v1/codes`` ``{"amount_nano", "count", "expires_at"?, "note"?}`` creates codes and
answers them, each with its ``code``, this once (only their hashes are kept: ``gatewayd.codes``).
``GET /admin/v1/codes`` lists every code with its status (unused, redeemed, revoked, expired)
and who redeemed it when; ``POST /admin/v1/codes/{id}/revoke`` revokes an unused code (409 when
it was redeemed already).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import orjson
from quart import Response

from gatewayd import codes
from gatewayd.admin.answers import usd_beside
from gatewayd.directory import Directory, DirectoryError
from gatewayd.records import utc_now_iso
from gatewayd.store.redemption_codes import RedemptionCode


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(usd_beside(doc)), status=status, content_type="application/json")


def add_code_routes(app, directory: Directory, store, body: Callable[..., Awaitable[dict]]) -> None:
    """``body(*fields)``: the admin API's JSON body reader (unknown fields refused)."""

    def code_doc(code: RedemptionCode, now: str) -> dict:
        doc = code.doc(now)
        account = directory.accounts.get(code.redeemed_by) if code.redeemed_by else None
        doc["redeemed_by_email"] = account.email if account else None
        return doc

    @app.post("/admin/v1/codes")
    async def create_codes():
        doc = await body("amount_nano", "count", "expires_at", "note")
        made = codes.new_codes(doc.get("amount_nano"), doc.get("count", 1), doc.get("expires_at"),
                               "" if doc.get("note") is None else doc["note"])
        await store.insert_codes([(row, hashed) for row, _, hashed in made])
        now = utc_now_iso()
        return _json({"data": [{**code_doc(row, now), "code": code} for row, code, _ in made]}, 201)

    @app.get("/admin/v1/codes")
    async def list_codes():
        now = utc_now_iso()
        return _json({"data": [code_doc(c, now) for c in await store.redemption_codes()]})

    @app.post("/admin/v1/codes/<code_id>/revoke")
    async def revoke_code(code_id: str):
        await body()
        now = utc_now_iso()
        code = await store.revoke_code(code_id, now)
        if code is None:
            raise DirectoryError(f"no code {code_id!r}", status=404, code="not_found")
        if code.redeemed_at is not None:
            raise DirectoryError(f"code {code_id} was redeemed at {code.redeemed_at}: too late to revoke",
                                 status=409, code="conflict")
        return _json(code_doc(code, now))
