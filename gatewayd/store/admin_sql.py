"""The operator's rows, the SQL both stores share: admin tokens, the admin audit log and the
operator's settings (migrations 0033 / postgres 0033).

``AdminSQL`` is mixed into ``SQLStore`` (``gatewayd.store.sql``) and runs on its primitives
(``_write`` / ``_read`` with a ``Tx``). Nothing here is cached: a token is looked up in the
database on every admin call, so a token revoked on one instance is refused by every other
at its next call, with no change feed needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import ipaddress

import attrs
import orjson


if TYPE_CHECKING:
    from gatewayd.store.sql import R, Tx

TOKEN_COLUMNS = "id, name, hint, scopes, allow_ips, created_at, created_by, expires_at, revoked_at, last_used_at"
AUDIT_COLUMNS = "id, at, actor, actor_name, via, address, method, path, status, target, request, before, after"
OPERATOR_PASSWORD = "operator_password_hash"


@attrs.frozen
class AdminToken:
    """A token's row, without its hash. Times are the store's UTC text."""

    id: str
    name: str
    hint: str  # the token's last four characters
    scopes: tuple[str, ...]
    allow_ips: tuple[str, ...] | None  # None: any address
    created_at: str
    created_by: str
    expires_at: str | None = None
    revoked_at: str | None = None
    last_used_at: str | None = None

    def state(self, now: str) -> str:
        """active | revoked | expired (at ``now``, store time text)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def allows_address(self, address: str | None) -> bool:
        if self.allow_ips is None:
            return True
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        return any(ip in ipaddress.ip_network(net, strict=False) for net in self.allow_ips)

    def doc(self, now: str) -> dict[str, Any]:
        return {**attrs.asdict(self), "scopes": list(self.scopes),
                "allow_ips": None if self.allow_ips is None else list(self.allow_ips), "state": self.state(now)}



def token_from_row(row: Any) -> AdminToken:
    allow = orjson.loads(row["allow_ips"]) if row["allow_ips"] else None
    return AdminToken(row["id"], row["name"], row["hint"], tuple(s for s in row["scopes"].split(",") if s),
                      None if allow is None else tuple(allow), row["created_at"], row["created_by"],
                      row["expires_at"], row["revoked_at"], row["last_used_at"])


@attrs.frozen
class AuditEntry:
    """One admin call as the audit log keeps it (``before`` / ``after``: the target's state
    around a change, None for a read or when there is no target)."""

    at: str
    actor: str  # a token id, "socket" (the local operator) or "operator" (the console's password)
    actor_name: str
    via: str  # socket | http | console
    address: str | None
    method: str
    path: str
    status: int
    target: str | None = None
    request: Any = None
    before: Any = None
    after: Any = None
    id: int | None = None

    def doc(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _value(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def entry_from_row(row: Any) -> AuditEntry:
    return AuditEntry(row["at"], row["actor"], row["actor_name"], row["via"], row["address"], row["method"],
                      row["path"], row["status"], row["target"], _value(row["request"]), _value(row["before"]),
                      _value(row["after"]), row["id"])


class AdminSQL:
    """Mixed into ``SQLStore``: admin tokens, the admin audit log, the operator's settings."""

    if TYPE_CHECKING:  # provided by each store, declared by SQLStore, the one class this is mixed into
        async def _write(self, job: Callable[[Tx], R]) -> R: ...

        async def _read(self, job: Callable[[Tx], R]) -> R: ...

    # On every admin call's path (the token's check, its audit row): bounded like a request's
    # store call where the store has such a bound (PostgreSQL overrides these), so a database
    # that is away makes a quick 503, not a minute's wait.
    async def _bounded_read(self, job: Callable[[Tx], R]) -> R:
        return await self._read(job)

    async def _bounded_write(self, job: Callable[[Tx], R]) -> R:
        return await self._write(job)

    async def insert_admin_token(self, token: AdminToken, hashed: str) -> None:
        await self._write(lambda tx: tx.run(
            f"INSERT INTO admin_tokens ({TOKEN_COLUMNS}, token_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (token.id, token.name, token.hint, ",".join(token.scopes),
             None if token.allow_ips is None else orjson.dumps(list(token.allow_ips)).decode(), token.created_at,
             token.created_by, token.expires_at, token.revoked_at, token.last_used_at, hashed)))

    async def admin_token_by_hash(self, hashed: str) -> AdminToken | None:
        row = await self._bounded_read(lambda tx: tx.one(
            f"SELECT {TOKEN_COLUMNS} FROM admin_tokens WHERE token_hash = ?", (hashed,)))
        return None if row is None else token_from_row(row)

    async def admin_tokens(self) -> list[AdminToken]:
        rows = await self._read(lambda tx: tx.rows(
            f"SELECT {TOKEN_COLUMNS} FROM admin_tokens ORDER BY created_at DESC, id"))
        return [token_from_row(r) for r in rows]

    async def revoke_admin_token(self, token_id: str, now: str) -> AdminToken | None:
        """Revoke a token (revoking twice keeps the first time); the row as it is now, or None."""

        def revoke(tx: Tx) -> Any:
            tx.run("UPDATE admin_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, token_id))
            return tx.one(f"SELECT {TOKEN_COLUMNS} FROM admin_tokens WHERE id = ?", (token_id,))

        row = await self._write(revoke)
        return None if row is None else token_from_row(row)

    async def touch_admin_token(self, token_id: str, now: str) -> None:
        await self._bounded_write(lambda tx: tx.run("UPDATE admin_tokens SET last_used_at = ? WHERE id = ?",
                                                    (now, token_id)))

    async def append_admin_audit(self, entry: AuditEntry) -> None:
        await self._bounded_write(lambda tx: tx.run(
            "INSERT INTO admin_audit (at, actor, actor_name, via, address, method, path, status, target, request,"
            " before, after) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry.at, entry.actor, entry.actor_name, entry.via, entry.address, entry.method, entry.path,
             entry.status, entry.target, _text(entry.request), _text(entry.before), _text(entry.after))))

    async def admin_audit(self, *, actor: str | None = None, target: str | None = None, since: str | None = None,
                          until: str | None = None, changes_only: bool = False, before_id: int | None = None,
                          limit: int = 100) -> list[AuditEntry]:
        """Entries newest first, filtered; ``before_id`` pages on from the last entry's id."""
        where, args = [], []
        for clause, value in (("actor = ?", actor), ("target = ?", target), ("at >= ?", since), ("at < ?", until),
                              ("id < ?", before_id)):
            if value is not None:
                where.append(clause)
                args.append(value)
        if changes_only:
            where.append("method <> 'GET'")
        sql = f"SELECT {AUDIT_COLUMNS} FROM admin_audit"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = await self._read(lambda tx: tx.rows(sql, tuple(args)))
        return [entry_from_row(r) for r in rows]

    async def publish_route_report(self, instance_id: str, host: str, report: list[dict[str, Any]], now: str) -> None:
        """This instance's route health (``Router.report``), replacing its previous report."""
        text = orjson.dumps(report).decode()
        await self._write(lambda tx: tx.run(
            "INSERT INTO route_reports (instance_id, host, report, reported_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (instance_id) DO UPDATE SET host = excluded.host, report = excluded.report,"
            " reported_at = excluded.reported_at", (instance_id, host, text, now)))

    async def route_reports(self, since: str) -> list[tuple[str, str, str, list[dict[str, Any]]]]:
        """(instance id, host, reported at, report) of every instance that reported at ``since`` or later."""
        rows = await self._read(lambda tx: tx.rows(
            "SELECT instance_id, host, report, reported_at FROM route_reports WHERE reported_at >= ?"
            " ORDER BY host, instance_id", (since,)))
        return [(r["instance_id"], r["host"], r["reported_at"], orjson.loads(r["report"])) for r in rows]

    async def forget_route_report(self, instance_id: str) -> None:
        await self._write(lambda tx: tx.run("DELETE FROM route_reports WHERE instance_id = ?", (instance_id,)))

    async def operator_setting(self, name: str) -> str | None:
        row = await self._read(lambda tx: tx.one("SELECT value FROM operator_settings WHERE name = ?", (name,)))
        return None if row is None else row["value"]

    async def set_operator_setting(self, name: str, value: str) -> None:
        await self._write(lambda tx: tx.run(
            "INSERT INTO operator_settings (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value", (name, value)))
