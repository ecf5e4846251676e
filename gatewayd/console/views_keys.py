"""Key pages: list, create (secret shown once), edit, disable/enable, revoke with a confirmation.

Every change goes through ``Directory.create_key/update_key/set_key_status``, the
same validation the admin API uses; a refusal comes back as the form with the
person's input and the directory's message. Every key is looked up with the signed-in
account's id, so another account's key id is a 404 like a key that does not exist.

A new secret is not rendered by the POST: it is parked under the session id and the
browser is redirected to a page that shows it once and forgets it (a reload shows
nothing, and the secret never sits in the browser's form-resubmission history).
"""

from __future__ import annotations

import datetime as dt
import time

from quart import Blueprint, g, redirect, url_for

from gatewayd.budgets import budget_view
from gatewayd.console.forms import FormError, KeyForm, field_of, friendly
from gatewayd.console.web import Console, ConsoleError, checked_form, not_found, page, signed_in
from gatewayd.directory import MAX_KEY_NAME, MAX_KEYS_PER_ACCOUNT, DirectoryError
from gatewayd.records import Account, Key
from gatewayd.store.base import utc_iso

ACTIONS = {"disable": "disabled", "enable": "enabled"}


def key_row(key: Key, now: float, zone: str = "UTC") -> dict:
    """A key as the keys page shows it: its state and, with a budget, the period's spend and what is left."""
    now_iso = utc_iso(dt.datetime.fromtimestamp(now, dt.timezone.utc))
    return {"key": key, "state": key.state(now),
            "budget": budget_view(key.budget_nano, key.budget_period, key.budget_period_start,
                                  key.budget_spent_nano, key.held_nano, zone, now_iso)}


def model_choices(console: Console, account: Account, form: KeyForm) -> list[dict]:
    """Chat models, the embedding models this account may use, and whatever the key lists already."""
    out = []
    for model in console.config.models.values():
        usable = model.kind == "chat" or model.id in account.embedding_models
        if usable or model.id in form.models:
            out.append({"id": model.id, "kind": model.kind, "checked": model.id in form.models,
                        "priced": model.priced})
    return out


def group_choices(console: Console, account: Account, form: KeyForm) -> list[dict]:
    names = list(account.groups)
    if form.group and form.group not in names:
        names.append(form.group)
    out = []
    for name in names:
        group = console.config.groups.get(name)
        note = ""
        if name not in account.groups:
            note = "not available to this account"
        elif group is None or group.retired:
            note = "retired"
        out.append({"name": name, "note": note, "selected": name == form.group})
    return out


def register(bp: Blueprint, console: Console) -> None:
    directory = console.directory

    async def own_key(account: Account, key_id: str) -> Key:
        key = await directory.find_key(key_id)
        if key is None or key.account_id != account.id:
            raise not_found("This key")
        return key

    async def form_page(account: Account, form: KeyForm, *, key: Key | None = None, error: str | None = None,
                        field: str | None = None, status: int = 200):
        return await page(
            console, "key_form.html", status, nav="keys", form=form, key=key, error=error, error_field=field,
            models=model_choices(console, account, form), groups=group_choices(console, account, form),
            max_name=MAX_KEY_NAME, state=key.state(time.time()) if key else None,
            mcp_servers=sorted(console.config.mcp_servers),
        )

    @bp.get("/keys")
    async def keys():
        account = signed_in()
        now = time.time()
        mine = await console.store.refresh_keys(list(directory.keys_by_account.get(account.id, [])))
        live = [key_row(k, now, account.timezone) for k in mine if k.status != "deleted"]
        revoked = [key_row(k, now) for k in mine if k.status == "deleted"]
        live.sort(key=lambda r: r["key"].created_at, reverse=True)
        revoked.sort(key=lambda r: r["key"].created_at, reverse=True)
        return await page(console, "keys.html", nav="keys", live=live, revoked=revoked,
                          max_keys=MAX_KEYS_PER_ACCOUNT)

    @bp.get("/keys/new")
    async def new_key():
        account = signed_in()
        return await form_page(account, KeyForm())

    @bp.post("/keys/new")
    async def create_key():
        account = signed_in()
        form = KeyForm.from_form(await checked_form(console))
        try:
            key, secret = await directory.create_key(account, **form.fields())
        except FormError as e:
            return await form_page(account, form, error=e.message, field=e.field, status=400)
        except DirectoryError as e:
            return await form_page(account, form, error=friendly(e.message), field=field_of(e.message),
                                   status=e.status)
        console.sessions.park_reveal(g.session, key.id, secret)
        return redirect(url_for("console.key_created", key_id=key.id))

    @bp.get("/keys/<key_id>/created")
    async def key_created(key_id: str):
        account = signed_in()
        key = await own_key(account, key_id)
        secret = console.sessions.take_reveal(g.session, key.id)
        return await page(console, "key_created.html", nav="keys", key=key, secret=secret)

    @bp.get("/keys/<key_id>")
    async def edit_key(key_id: str):
        account = signed_in()
        key = await own_key(account, key_id)
        return await form_page(account, KeyForm.from_key(key), key=key)

    @bp.post("/keys/<key_id>")
    async def update_key(key_id: str):
        account = signed_in()
        key = await own_key(account, key_id)
        form = KeyForm.from_form(await checked_form(console))
        try:
            await directory.update_key(key, form.fields())
        except FormError as e:
            return await form_page(account, form, key=key, error=e.message, field=e.field, status=400)
        except DirectoryError as e:
            return await form_page(account, form, key=key, error=friendly(e.message), field=field_of(e.message),
                                   status=e.status)
        return redirect(url_for("console.keys"))

    @bp.post("/keys/<key_id>/<action>")
    async def key_action(key_id: str, action: str):
        account = signed_in()
        key = await own_key(account, key_id)
        form = await checked_form(console)
        if action == "revoke":
            if form.get("confirm", "").strip() != key.name.strip():
                return await page(console, "key_revoke.html", 400, nav="keys", key=key,
                                  error="Type the key's name exactly to confirm.")
            await directory.set_key_status(key, "deleted")
            return redirect(url_for("console.keys"))
        status = ACTIONS.get(action)
        if status is None:
            raise not_found("This action")
        if key.status == "deleted":
            raise ConsoleError(409, "Not possible", "This key was revoked; revoking is permanent.")
        await directory.set_key_status(key, status)
        return redirect(url_for("console.keys"))

    @bp.get("/keys/<key_id>/revoke")
    async def confirm_revoke(key_id: str):
        account = signed_in()
        key = await own_key(account, key_id)
        if key.status == "deleted":
            return redirect(url_for("console.keys"))
        return await page(console, "key_revoke.html", nav="keys", key=key, error=None)
