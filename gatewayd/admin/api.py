"""The admin API: JSON over the local Unix socket (mode 0600), spoken by ``gatewayctl``.

Every change goes through the ``Directory`` (validation, write-through), so it takes
effect on the very next public request. Reads of history (payments, usage) go to the
store; the audit compares the database's ledger with the in-memory balances.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson
from quart import Response, request
from quart_trio import QuartTrio

from gatewayd.billing.ledger import Ledger
from gatewayd.directory import Directory, DirectoryError
from gatewayd.store.sqlite import SQLiteStore

JSON = "application/json"

USAGE_COLUMNS = (
    "request_id, created_at, key_id, model, endpoint, stream, status, http_status, input_tokens, output_tokens,"
    " cached_tokens, cache_write_tokens, cost_nano, duration_ms"
)


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status=status, content_type=JSON)


def usage_row(row: sqlite3.Row) -> dict:
    doc = dict(row)
    doc["stream"] = bool(doc["stream"])
    return doc


def audit(conn: sqlite3.Connection, directory: Directory) -> dict:
    """balance == payments - charges - open holds, for every account; key spend within limits."""
    paid = dict(conn.execute("SELECT account_id, sum(amount_nano) FROM payments GROUP BY account_id").fetchall())
    charged = dict(conn.execute("SELECT account_id, sum(cost_nano) FROM usage GROUP BY account_id").fetchall())
    held_rows = dict(conn.execute("SELECT account_id, sum(amount_nano) FROM holds GROUP BY account_id").fetchall())
    key_charged = dict(conn.execute("SELECT key_id, sum(cost_nano) FROM usage GROUP BY key_id").fetchall())
    accounts_out, keys_out = [], []
    ok = True
    for row in conn.execute("SELECT id, email, credit_nano, total_paid_nano FROM accounts ORDER BY created_at"):
        account = directory.accounts.get(row["id"])
        problems = []
        expected_credit = (paid.get(row["id"]) or 0) - (charged.get(row["id"]) or 0)
        if row["credit_nano"] != expected_credit:
            problems.append(f"stored credit {row['credit_nano']} != payments - charges {expected_credit}")
        if row["total_paid_nano"] != (paid.get(row["id"]) or 0):
            problems.append("total paid differs from the sum of payments")
        held = account.held_nano if account else 0
        if account is not None and account.credit_nano != row["credit_nano"]:
            problems.append(f"in-memory credit {account.credit_nano} != stored {row['credit_nano']}")
        open_holds = held_rows.get(row["id"]) or 0
        if held != open_holds:
            problems.append(f"held {held} != open hold rows {open_holds}")
        ok = ok and not problems
        accounts_out.append({
            "account_id": row["id"],
            "email": row["email"],
            "balance_nano": expected_credit - held,
            "expected_balance_nano": (paid.get(row["id"]) or 0) - (charged.get(row["id"]) or 0) - open_holds,
            "held_nano": held,
            "open_holds_nano": open_holds,
            "ok": not problems,
            "problems": problems,
        })
    for key in directory.keys.values():
        problems = []
        stored_spent = key_charged.get(key.id) or 0
        if key.spent_nano != stored_spent:
            problems.append(f"spent {key.spent_nano} != sum of its usage rows {stored_spent}")
        keys_out.append({
            "key_id": key.id,
            "spent_nano": key.spent_nano,
            "spend_limit_nano": key.spend_limit_nano,
            "ok": not problems,
            "problems": problems,
        })
        ok = ok and not problems
    return {"ok": ok, "accounts": accounts_out, "keys": keys_out}


def create_admin_app(directory: Directory, store: SQLiteStore, clock, ledger: Ledger | None = None,
                     reload=None) -> QuartTrio:
    app = QuartTrio(__name__ + ".admin")
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None)

    async def body() -> dict:
        raw = await request.get_data()
        if not raw:
            return {}
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise DirectoryError("the request body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise DirectoryError("the request body must be a JSON object")
        return doc

    @app.errorhandler(DirectoryError)
    async def refused(error: DirectoryError):
        return _json({"error": {"message": error.message, "code": error.code}}, error.status)

    @app.errorhandler(404)
    async def not_found(_error):
        return _json({"error": {"message": f"no admin route {request.method} {request.path}", "code": "not_found"}},
                     404)

    @app.errorhandler(405)
    async def not_allowed(_error):
        return _json({"error": {"message": f"{request.method} not allowed on {request.path}", "code": "not_found"}},
                     405)

    def key_doc(key) -> dict:
        return key.public(clock())

    @app.post("/admin/v1/accounts")
    async def create_account():
        doc = await body()
        account = await directory.create_account(
            doc.get("email"), doc.get("name") or "", doc.get("timezone") or "UTC", doc.get("password")
        )
        return _json(account.public(), 201)

    @app.get("/admin/v1/accounts")
    async def list_accounts():
        return _json({"data": [a.public() for a in directory.accounts.values()]})

    @app.get("/admin/v1/accounts/<ref>")
    async def show_account(ref: str):
        return _json(directory.account(ref).public())

    @app.patch("/admin/v1/accounts/<ref>")
    async def update_account(ref: str):
        account = directory.account(ref)
        doc = await body()
        unknown = sorted(set(doc) - {"name", "timezone"})
        if unknown:
            raise DirectoryError(f"unknown account field {unknown[0]!r}")
        kwargs = {k: doc[k] for k in ("name", "timezone") if k in doc}
        return _json((await directory.update_account(account, **kwargs)).public())

    @app.put("/admin/v1/accounts/<ref>/password")
    async def set_password(ref: str):
        account = directory.account(ref)
        doc = await body()
        return _json((await directory.set_password(account, doc.get("password"))).public())

    @app.post("/admin/v1/accounts/<ref>/payments")
    async def pay(ref: str):
        account = directory.account(ref)
        doc = await body()
        payment = await directory.pay(account, doc.get("amount_nano"), doc.get("note") or "")
        return _json({"account": account.public(), "payment": payment}, 201)

    @app.get("/admin/v1/accounts/<ref>/payments")
    async def payments(ref: str):
        account = directory.account(ref)
        rows = await store.read(lambda conn: conn.execute(
            "SELECT id, account_id, amount_nano, note, created_at FROM payments WHERE account_id = ? ORDER BY id DESC",
            (account.id,),
        ).fetchall())
        return _json({"data": [dict(r) for r in rows]})

    @app.put("/admin/v1/accounts/<ref>/groups")
    async def groups(ref: str):
        account = directory.account(ref)
        doc = await body()
        return _json((await directory.set_groups(account, doc.get("groups"))).public())

    @app.put("/admin/v1/accounts/<ref>/embeddings/<path:model>")
    async def embedding_model(ref: str, model: str):
        account = directory.account(ref)
        doc = await body()
        return _json((await directory.set_embedding_model(account, model, doc.get("enabled"))).public())

    @app.post("/admin/v1/accounts/<ref>/keys")
    async def create_key(ref: str):
        account = directory.account(ref)
        doc = await body()
        unknown = sorted(set(doc) - {"name", "spend_limit_nano", "expires_on", "models", "allow_ips", "group"})
        if unknown:
            raise DirectoryError(f"unknown key field {unknown[0]!r}")
        key, secret = await directory.create_key(account, **{k: doc.get(k) for k in (
            "name", "spend_limit_nano", "expires_on", "models", "allow_ips", "group")})
        return _json({**key_doc(key), "secret": secret}, 201)

    @app.get("/admin/v1/accounts/<ref>/keys")
    async def list_keys(ref: str):
        account = directory.account(ref)
        return _json({"data": [key_doc(k) for k in directory.keys_by_account[account.id]]})

    @app.get("/admin/v1/keys/<key_id>")
    async def show_key(key_id: str):
        return _json(key_doc(directory.key(key_id)))

    @app.patch("/admin/v1/keys/<key_id>")
    async def update_key(key_id: str):
        key = directory.key(key_id)
        return _json(key_doc(await directory.update_key(key, await body())))

    @app.post("/admin/v1/keys/<key_id>/<action>")
    async def key_action(key_id: str, action: str):
        status = {"disable": "disabled", "enable": "enabled", "revoke": "deleted"}.get(action)
        if status is None:
            raise DirectoryError(f"unknown key action {action!r}", status=404, code="not_found")
        key = directory.key(key_id)
        return _json(key_doc(await directory.set_key_status(key, status)))

    @app.get("/admin/v1/accounts/<ref>/balance")
    async def balance(ref: str):
        return _json(directory.account(ref).balance())

    @app.get("/admin/v1/accounts/<ref>/usage")
    async def usage(ref: str):
        account = directory.account(ref)
        key_id = request.args.get("key")
        try:
            limit = max(1, min(10_000, int(request.args.get("limit", "50"))))
        except ValueError:
            raise DirectoryError("limit must be a whole number") from None
        if key_id is not None:
            directory.key(key_id, account.id)
            sql = f"SELECT {USAGE_COLUMNS} FROM usage WHERE account_id = ? AND key_id = ? ORDER BY id DESC LIMIT ?"
            args: tuple = (account.id, key_id, limit)
        else:
            sql = f"SELECT {USAGE_COLUMNS} FROM usage WHERE account_id = ? ORDER BY id DESC LIMIT ?"
            args = (account.id, limit)
        rows = await store.read(lambda conn: conn.execute(sql, args).fetchall())
        return _json({"data": [usage_row(r) for r in rows]})

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
        if ledger is not None:
            ledger.flush_holds()  # holds are written lazily; the audit compares them with memory
        await store.flush()
        return _json(await store.read(lambda conn: audit(conn, directory)))

    return app
