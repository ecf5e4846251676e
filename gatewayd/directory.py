"""The directory: every account and key in memory, every change written through first.

The request path authenticates with a dict lookup and reads limits from these objects.
Admin and console changes go through the methods here, which validate (the one place
for the spec's key and account rules), commit through the store's named operations,
and only then change memory, so the very next request sees them. Rules that must hold
across instances (the 1,000-key limit, a revoke beating a concurrent enable, unique
emails) are decided by the store inside its transaction, not by this cache.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from gatewayd.budgets import PERIODS
from gatewayd.config import Config
from gatewayd.control_chars import CONTROL_CHARACTERS
from gatewayd.mcp import access as mcp_access
from gatewayd.money import MAX_PAID_NANO, format_usd
from gatewayd.passwords import hashed
from gatewayd.records import (
    Account,
    Key,
    expiry_instant,
    new_id,
    new_secret,
    secret_hash,
    secret_hint,
    utc_now_iso,
)
from gatewayd.store.base import BelowFloor, EmailTaken, KeyRevoked, PaymentTooLarge, TooManyKeys

MAX_KEYS_PER_ACCOUNT = 1000
MAX_KEY_NAME = 50
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def valid_email(email: str) -> bool:
    """The shape an account's email must have (no more is checked: the mail is the proof)."""
    return bool(_EMAIL.match(email.strip()))
_UNSET: Any = object()


class DirectoryError(Exception):
    """A refused admin change: ``status`` 400 (invalid), 404 (not found) or 409 (conflict)."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def refuse_control_characters(value: str, field: str) -> str:
    """``value``, or the 400 naming ``field`` and the first control character it holds."""
    found = CONTROL_CHARACTERS.search(value)  # see gatewayd.control_chars
    if found is not None:
        raise DirectoryError(f"{field} must not contain control characters (found U+{ord(found.group()):04X} at "
                             f"position {found.start()})")
    return value


def parse_ip_list(entries: Any) -> tuple:
    """CIDR or single addresses, IPv4 or IPv6; a bad entry is named in the error."""
    if not isinstance(entries, list) or not entries:
        raise DirectoryError("allow_ips must be a non-empty list of IP addresses or CIDR ranges (or null for any)")
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise DirectoryError(f"allow_ips: {entry!r} is not an IP address or CIDR range") from None
    return tuple(networks)


def _validate_timezone(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise DirectoryError("timezone must be an IANA zone name such as Europe/Paris")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DirectoryError(f"unknown time zone {name!r} (use an IANA name such as Europe/Paris)") from None
    return name


def _parse_date(value: Any) -> dt.date:
    """Only the YYYY-MM-DD text: ``fromisoformat`` alone would also take 20260101 or a JSON number."""
    try:
        if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError(value)
        return dt.date.fromisoformat(value)
    except ValueError:
        raise DirectoryError(f"expires_on must be a date YYYY-MM-DD (got {value!r})") from None


def check_force(value: Any) -> bool:
    """The ``force`` field of a request: absent (null) is False; anything but a boolean is refused."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise DirectoryError(f"force must be true or false (got {value!r})")
    return value


def refuse_past_expiry(expires_on: dt.date, timezone: str, force: bool) -> None:
    """A key's expiry that has passed already (the end of that day in the account's time zone,
    as ``expiry_instant`` reckons it) is a typo far more often than a wish for a dead key: it is
    refused unless ``force`` says it is meant. One place for the admin API, gatewayctl and the console."""
    if force:
        return
    end = expiry_instant(expires_on, timezone)
    if end is not None and end <= time.time():
        raise DirectoryError(
            f"expires_on {expires_on.isoformat()} has passed already (the key would stop at the end of that day, "
            f"{timezone}); give a later date, or force: true (gatewayctl --force) to set it anyway",
            code="expiry_in_past")


MAX_CONCURRENT = 1_000_000  # a cap above this is no cap: 0 says that plainly


def parse_alert_below(value: Any) -> int | None:
    """An ``alert_below_nano`` as sent: null (no balance alert) or nano-dollars from 0 to ``MAX_PAID_NANO``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PAID_NANO:
        raise DirectoryError(f"alert_below_nano must be null or a whole number of nano-dollars from 0 to "
                             f"{MAX_PAID_NANO} (got {value!r})")
    return value


def parse_max_concurrent(value: Any) -> int | None:
    """A ``max_concurrent`` as sent: null (the server's default), 0 (no cap) or a positive count."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CONCURRENT:
        raise DirectoryError(f"max_concurrent must be a whole number from 0 (no cap) to {MAX_CONCURRENT}, "
                             "or null for the server's default")
    return value


def _money(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DirectoryError(f"{field} must be a non-negative integer number of nano-dollars")
    if value > MAX_PAID_NANO:  # stored in a 64-bit column; no account could spend more
        raise DirectoryError(f"{field} must be at most {MAX_PAID_NANO} ({format_usd(MAX_PAID_NANO, 2)})")
    return value


class Directory:
    def __init__(self, config: Config, store) -> None:
        self.config = config
        self.store = store
        self.accounts: dict[str, Account] = {}
        self.accounts_by_email: dict[str, Account] = {}
        self.keys: dict[str, Key] = {}
        self.keys_by_hash: dict[str, Key] = {}
        # presented secret -> key, filled only on hits: bounded by the keys that exist (at most
        # two spellings each, with and without ``sk-``), so random secrets cannot grow it
        self._keys_by_presented: dict[str, Key] = {}
        self.keys_by_account: dict[str, list[Key]] = {}

    # -- loading ------------------------------------------------------------------

    async def load(self) -> None:
        """Read every account and key once at start-up (before serving)."""
        accounts, keys = await self.store.load_directory()
        for account in accounts:
            self._remember_account(account)
        for key in keys:
            self._remember_key(key)

    def _remember_account(self, account: Account) -> None:
        self.accounts[account.id] = account
        self.accounts_by_email[account.email.lower()] = account
        self.keys_by_account.setdefault(account.id, [])

    def _remember_key(self, key: Key) -> None:
        self.keys[key.id] = key
        self.keys_by_hash[key.secret_hash] = key
        self.keys_by_account.setdefault(key.account_id, []).append(key)

    # -- lookups ------------------------------------------------------------------

    def account(self, ref: str) -> Account:
        """By id or by email."""
        account = self.accounts.get(ref) or self.accounts_by_email.get(ref.lower())
        if account is None:
            raise DirectoryError(f"no account {ref!r}", status=404, code="not_found")
        return account

    def key(self, key_id: str, account_id: str | None = None) -> Key:
        key = self.keys.get(key_id)
        if key is None or (account_id is not None and key.account_id != account_id):
            raise DirectoryError(f"no key {key_id!r}", status=404, code="not_found")
        return key

    async def find_key(self, key_id: str) -> Key | None:
        """The key, read from the store when this cache has not got it yet: a key created on
        another instance a moment ago (the console's redirect after creating one may land
        here before the change feed does)."""
        key = self.keys.get(key_id)
        if key is not None:
            return key
        fresh = await self.store.load_key(key_id)
        if fresh is None or fresh.account_id not in self.accounts:
            return None
        key = self.keys.get(key_id)  # the change feed may have brought it meanwhile
        if key is None:
            self._remember_key(fresh)
            key = fresh
        return key

    def key_for_secret(self, presented: str) -> Key | None:
        key = self._keys_by_presented.get(presented)
        if key is None:
            key = self.keys_by_hash.get(secret_hash(presented))
            if key is not None:
                self._keys_by_presented[presented] = key
        return key

    # -- accounts -----------------------------------------------------------------

    async def create_account(
        self, email: Any, name: Any = "", timezone: Any = "UTC", password: Any = None
    ) -> Account:
        if not isinstance(email, str) or not _EMAIL.match(email.strip()):
            raise DirectoryError(f"not an email address: {email!r}")
        email = refuse_control_characters(email.strip(), "email")
        if email.lower() in self.accounts_by_email:
            raise DirectoryError(f"an account with email {email} exists already", status=409, code="conflict")
        if not isinstance(name, str) or len(name) > 100:
            raise DirectoryError("name must be a string of at most 100 characters")
        refuse_control_characters(name, "name")
        timezone = _validate_timezone(timezone)
        if password is not None:
            self._check_password_rules(password)
        password_hash = await hashed(password) if password else None  # slow: a worker thread
        account = Account(
            id=new_id("acct_"),
            email=email,
            name=name,
            timezone=timezone,
            password_hash=password_hash,
            credit_nano=0,
            total_paid_nano=0,
            groups=("default",),
            embedding_models=frozenset(),
            created_at=utc_now_iso(),
        )

        try:
            await self.store.insert_account(account)
        except EmailTaken:
            raise DirectoryError(f"an account with email {email} exists already", status=409, code="conflict") from None
        # the change feed may have cached it while this call waited for the commit: one object per id
        known = self.accounts.get(account.id)
        if known is not None:
            return known
        self._remember_account(account)
        return account

    @staticmethod
    def _check_password_rules(password: Any) -> None:
        if not isinstance(password, str) or len(password) < 8:
            raise DirectoryError("password must be at least 8 characters")
        if len(password) > 1024:
            raise DirectoryError("password must be at most 1024 characters")

    async def update_account(self, account: Account, *, name: Any = _UNSET, timezone: Any = _UNSET) -> Account:
        new_name = account.name if name is _UNSET else name
        if not isinstance(new_name, str) or len(new_name) > 100:
            raise DirectoryError("name must be a string of at most 100 characters")
        if name is not _UNSET:
            refuse_control_characters(new_name, "name")
        new_tz = account.timezone if timezone is _UNSET else _validate_timezone(timezone)
        await self.store.update_account(account.id, name=new_name, timezone=new_tz)
        account.name = new_name
        if new_tz != account.timezone:
            account.timezone = new_tz
            for key in self.keys_by_account[account.id]:
                key.expires_at = expiry_instant(key.expires_on, new_tz)
        return account

    async def set_max_concurrent(self, account: Account, max_concurrent: Any) -> Account:
        """The account's cap on requests in flight (null: ``[server] max_concurrent_per_account``)."""
        value = parse_max_concurrent(max_concurrent)
        await self.store.set_account_max_concurrent(account.id, value)
        account.max_concurrent = value
        return account

    async def set_alert_below(self, account: Account, alert_below_nano: Any) -> Account:
        """The balance below which the account is alerted (null: no balance alert; gatewayd.alerts)."""
        value = parse_alert_below(alert_below_nano)
        await self.store.set_alert_below(account.id, value)
        account.alert_below_nano = value
        return account

    async def set_password(self, account: Account, password: Any) -> Account:
        self._check_password_rules(password)
        password_hash = await hashed(password)
        await self.store.set_password_hash(account.id, password_hash)
        account.password_hash = password_hash
        return account

    async def upgrade_password_hash(self, account: Account, old_hash: str, new_hash: str) -> None:
        """The same password hashed with today's parameters (at sign-in): stored only if the
        hash is still ``old_hash``, so a password changed meanwhile is never put back."""
        if await self.store.replace_password_hash(account.id, old_hash, new_hash):
            if account.password_hash == old_hash:
                account.password_hash = new_hash

    async def pay(self, account: Account, amount_nano: Any, note: Any = "") -> dict:
        if isinstance(amount_nano, bool) or not isinstance(amount_nano, int) or amount_nano <= 0:
            raise DirectoryError("amount_nano must be a positive integer number of nano-dollars")
        if not isinstance(note, str) or len(note) > 500:
            raise DirectoryError("note must be a string of at most 500 characters")
        refuse_control_characters(note, "note")
        try:
            if amount_nano > MAX_PAID_NANO:
                raise PaymentTooLarge(0)
            payment = await self.store.add_payment(account, amount_nano, note)
        except PaymentTooLarge as e:  # the store checks the stored total, in the payment's transaction
            raise DirectoryError(
                f"amount_nano: an account may be paid at most {format_usd(MAX_PAID_NANO, 2)} in total; it has been "
                f"paid {format_usd(e.total_paid_nano or account.total_paid_nano, 2)}, so this payment of "
                f"{format_usd(amount_nano, 2)} is refused") from None
        return payment.doc()

    async def adjust(self, account: Account, amount_nano: Any, note: Any, force: Any = None) -> dict:
        """The operator's correction of a balance, up or down (a payment row of source
        ``adjustment``): it moves the credit and the total paid together, as a refund does, so
        the ledger's invariant (total paid == the sum of the payment rows) holds unchanged.
        A reason is required: an adjustment is a decision someone must be able to explain.

        The floor: a debit may not take the account's balance (credit less open holds, as
        ``GET .../balance`` shows it) below zero, unless ``force`` is true (409 ``below_floor``
        otherwise). The floor is part of the debit's own UPDATE in the store (``credit_floor_nano``:
        the open holds, read fresh), so two debits at once, or another instance's charges, cannot
        both pass it."""
        if isinstance(amount_nano, bool) or not isinstance(amount_nano, int) or amount_nano == 0:
            raise DirectoryError("amount_nano must be a non-zero integer number of nano-dollars (negative lowers "
                                 "the balance)")
        if not isinstance(note, str) or not note.strip() or len(note) > 500:
            raise DirectoryError("note must be the adjustment's reason: a non-empty string of at most 500 characters")
        refuse_control_characters(note, "note")
        if abs(amount_nano) > MAX_PAID_NANO:
            raise DirectoryError(f"amount_nano: an adjustment is at most {format_usd(MAX_PAID_NANO, 2)} either way")
        floor = None
        if amount_nano < 0 and not check_force(force):
            floor = (await self.store.refresh_balance(account)).held_nano  # credit - held >= 0
        try:
            payment, _ = await self.store.record_payment(account, amount_nano, note, source="adjustment",
                                                         reference=None, credit_floor_nano=floor)
        except BelowFloor as e:  # checked in the debit's own UPDATE: concurrent debits cannot both pass
            balance = e.credit_nano - (floor or 0)
            raise DirectoryError(
                f"amount_nano: this debit of {format_usd(-amount_nano)} would take the balance of "
                f"{format_usd(balance)} below zero; debit at most {format_usd(max(balance, 0))}, or give "
                "force: true (gatewayctl --force) to go below zero anyway", status=409, code="below_floor") from None
        except PaymentTooLarge:
            raise DirectoryError(
                f"amount_nano: the account's total paid ({format_usd(account.total_paid_nano, 2)}) would go "
                f"{'below zero' if amount_nano < 0 else 'above ' + format_usd(MAX_PAID_NANO, 2)}; "
                "the adjustment is refused") from None
        return payment.doc()

    async def set_groups(self, account: Account, groups: Any) -> Account:
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise DirectoryError("groups must be a list of group names")
        unknown = [g for g in groups if g not in self.config.groups]
        if unknown:
            raise DirectoryError(f"no group named {unknown[0]!r} in the configuration")
        ordered = tuple(dict.fromkeys(groups))
        await self.store.set_groups(account.id, ordered)
        account.groups = ordered
        return account

    async def set_embedding_model(self, account: Account, model_id: str, enabled: Any) -> Account:
        model = self.config.models.get(model_id)
        if model is None or model.kind != "embedding":
            raise DirectoryError(f"{model_id!r} is not an embedding model of the catalogue")
        if not isinstance(enabled, bool):
            raise DirectoryError("enabled must be true or false")
        models = set(account.embedding_models)
        (models.add if enabled else models.discard)(model_id)
        frozen = frozenset(models)
        await self.store.set_embedding_models(account.id, frozen)
        account.embedding_models = frozen
        return account

    # -- keys ---------------------------------------------------------------------

    def _check_key_name(self, name: Any) -> str:
        if not isinstance(name, str) or not name.strip():
            raise DirectoryError("key name must not be empty")
        if len(name) > MAX_KEY_NAME:
            raise DirectoryError(f"key name is {len(name)} characters; at most {MAX_KEY_NAME} are allowed")
        return refuse_control_characters(name, "key name")

    def _check_models(self, models: Any) -> frozenset[str] | None:
        if models is None:
            return None
        if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
            raise DirectoryError("models must be a non-empty list of model ids (or null for every model)")
        unknown = [m for m in models if m not in self.config.models]
        if unknown:
            raise DirectoryError(f"no model {unknown[0]!r} in the catalogue")
        return frozenset(models)

    def _check_mcp(self, entries: Any) -> tuple[str, ...] | None:
        """A key's MCP access list (``gatewayd.mcp.access``): entries well formed, servers configured."""
        if entries is None:
            return None
        try:
            checked = mcp_access.parse_list(entries)
        except mcp_access.AccessListError as e:
            raise DirectoryError(str(e) if str(e).startswith("mcp") else f"mcp: {e}") from None
        unknown = [e for e in checked if e.partition(":")[0] not in self.config.mcp_servers]
        if unknown:
            raise DirectoryError(f"no MCP server {unknown[0].partition(':')[0]!r} in the configuration")
        return checked

    def _check_group(self, group: Any) -> str | None:
        if group is None:
            return None
        if not isinstance(group, str) or group not in self.config.groups:
            raise DirectoryError(f"no group named {group!r} in the configuration")
        return group

    def _check_budget(self, budget_nano: Any, budget_period: Any) -> tuple[int | None, str | None]:
        """A periodic budget is an amount and a period together, or neither (``gatewayd.budgets``)."""
        if budget_nano is None:
            if budget_period is not None:
                raise DirectoryError("budget_period needs budget_nano (or clear both with budget_nano null)")
            return None, None
        amount = _money(budget_nano, "budget_nano")
        if budget_period not in PERIODS:
            raise DirectoryError(f"budget_period must be one of {', '.join(PERIODS)} (got {budget_period!r})")
        return amount, budget_period

    async def create_key(
        self,
        account: Account,
        *,
        name: Any,
        spend_limit_nano: Any = None,
        expires_on: Any = None,
        models: Any = None,
        allow_ips: Any = None,
        group: Any = None,
        max_concurrent: Any = None,
        budget_nano: Any = None,
        budget_period: Any = None,
        mcp: Any = None,
        force: Any = None,
    ) -> tuple[Key, str]:
        """Returns the key and its secret; the secret is never stored, only its hash. An expiry
        already past is refused unless ``force`` (``refuse_past_expiry``)."""
        name = self._check_key_name(name)
        budget, period = self._check_budget(budget_nano, budget_period)
        secret = new_secret()
        key = Key(
            id=new_id("key_"),
            account_id=account.id,
            name=name,
            secret_hash=secret_hash(secret),
            secret_hint=secret_hint(secret),
            status="enabled",
            spend_limit_nano=None if spend_limit_nano is None else _money(spend_limit_nano, "spend_limit_nano"),
            spent_nano=0,
            expires_on=None if expires_on is None else _parse_date(expires_on),
            models=self._check_models(models),
            allow_ips=None if allow_ips is None else parse_ip_list(allow_ips),
            group=self._check_group(group),
            created_at=utc_now_iso(),
            last_used_at=None,
            max_concurrent=parse_max_concurrent(max_concurrent),
            budget_nano=budget,
            budget_period=period,
            mcp=self._check_mcp(mcp),
        )
        if key.expires_on is not None:
            refuse_past_expiry(key.expires_on, account.timezone, check_force(force))
        key.expires_at = expiry_instant(key.expires_on, account.timezone)
        try:
            # counted and inserted in one store transaction: concurrent creations on any instance cannot pass 1,000
            await self.store.insert_key(key, MAX_KEYS_PER_ACCOUNT)
        except TooManyKeys:
            raise DirectoryError(
                f"this account has {MAX_KEYS_PER_ACCOUNT} keys, the most allowed; revoke one first", status=409,
                code="too_many_keys",
            ) from None
        # the change feed may have cached it while this call waited for the commit: one object per id
        known = self.keys.get(key.id)
        if known is not None:
            return known, secret
        self._remember_key(key)
        return key, secret

    async def update_key(self, key: Key, changes: dict[str, Any], force: Any = None) -> Key:
        """Change only the fields present in ``changes``; null clears an optional field. A new
        expiry already past is refused unless ``force``; the key's own date, sent back unchanged
        (a console form), is not new."""
        if key.status == "deleted":
            raise DirectoryError("this key was revoked; revoked keys cannot be changed", status=409, code="key_deleted")
        allowed = {"name", "spend_limit_nano", "expires_on", "models", "allow_ips", "group", "max_concurrent",
                   "budget_nano", "budget_period", "mcp"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise DirectoryError(f"unknown key field {unknown[0]!r}")
        new: dict[str, Any] = {}
        if "name" in changes:
            new["name"] = self._check_key_name(changes["name"])
        if "spend_limit_nano" in changes:
            value = changes["spend_limit_nano"]
            new["spend_limit_nano"] = None if value is None else _money(value, "spend_limit_nano")
        if "expires_on" in changes:
            value = changes["expires_on"]
            new["expires_on"] = None if value is None else _parse_date(value)
            if new["expires_on"] is not None and new["expires_on"] != key.expires_on:
                refuse_past_expiry(new["expires_on"], self.accounts[key.account_id].timezone, check_force(force))
        if "models" in changes:
            new["models"] = self._check_models(changes["models"])
        if "allow_ips" in changes:
            value = changes["allow_ips"]
            new["allow_ips"] = None if value is None else parse_ip_list(value)
        if "group" in changes:
            new["group"] = self._check_group(changes["group"])
        if "max_concurrent" in changes:
            new["max_concurrent"] = parse_max_concurrent(changes["max_concurrent"])
        if "mcp" in changes:
            new["mcp"] = self._check_mcp(changes["mcp"])
        if "budget_nano" in changes or "budget_period" in changes:
            amount = changes.get("budget_nano", key.budget_nano)
            # clearing the amount clears the budget; a new amount alone keeps the period
            period = None if amount is None else changes.get("budget_period", key.budget_period)
            new["budget_nano"], new["budget_period"] = self._check_budget(amount, period)
        if not new:
            return key
        probe = attrs.evolve(key, **new)  # the key as it will be, stored before memory changes
        try:
            await self.store.update_key(probe)
        except KeyRevoked:
            key.status = "deleted"
            raise DirectoryError("this key was revoked; revoked keys cannot be changed", status=409,
                                 code="key_deleted") from None
        for field, value in new.items():
            setattr(key, field, value)
        if "budget_period" in new:  # the store recounted the period (gatewayd.budgets)
            key.budget_period_start, key.budget_spent_nano = probe.budget_period_start, probe.budget_spent_nano
        key.expires_at = expiry_instant(key.expires_on, self.accounts[key.account_id].timezone)
        return key

    async def set_key_status(self, key: Key, status: str) -> Key:
        """disable / enable / revoke. Revoked (deleted) is permanent."""
        if key.status == "deleted":
            if status == "deleted":
                return key
            raise DirectoryError("this key was revoked; revoking is permanent", status=409, code="key_deleted")
        # a revoke committed while this call waited (on any instance) wins, in the database and in memory
        stored = await self.store.set_key_status(key.id, status)
        if stored == "deleted" and status != "deleted":
            key.status = "deleted"
        if key.status == "deleted":
            if status == "deleted":
                return key
            raise DirectoryError("this key was revoked; revoking is permanent", status=409, code="key_deleted")
        key.status = status
        return key
