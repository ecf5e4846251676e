"""The operator console's pages (``gatewayd.admin.console``): sign-in, accounts (search, balance,
payments, pay, adjust), any account's keys (disable, enable, revoke), codes (create, list,
revoke), routes, prices, usage and revenue over time (chart and CSV), the audit log.

Each handler is a few admin calls through the gate (``api``): the rules, the scopes and the
audit are the API's; a page only gathers and shows. Money typed in a form is US dollars,
converted exactly to nano-dollars (``gatewayd.money``) before it is sent.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import hmac
import io
from urllib.parse import quote

import orjson
from quart import Blueprint, Response, g, redirect, request, url_for

from gatewayd.admin import tokens
from gatewayd.admin.console import (
    PACKAGE_FILES,
    PASSWORD_ACTOR,
    OperatorConsole,
    PageError,
    SignInRequired,
    api,
    back,
    checked_form,
    finish,
    load_session,
    page,
    password_matches,
    signed_in,
)
from gatewayd.admin.gate import Principal
from gatewayd.admin.route_reports import REPORT_EVERY_S
from gatewayd.billing.price_list import CatalogueModel, PriceListError, import_price_list
from gatewayd.admin.gate import ADMIN_LISTENER, AdminGate
from gatewayd.console.charts import daily_spend_svg
from gatewayd.console.session import Sessions, SignInThrottle, load_secret
from gatewayd.console.web import caller_address
from gatewayd.money import MoneyError, usd_to_nano
from gatewayd.records import utc_now_iso

A = "/admin/v1"
MAX_DAYS = 92
ACCOUNTS_SHOWN = 200  # a page of accounts (search for the others)
MAX_PRICE_LIST = 16 << 20  # LiteLLM's whole list is about 1.5 MB


def _seg(value: str) -> str:
    return quote(value, safe="")


def _dollars(text: str, *, signed: bool = False) -> int:
    """A dollar amount typed in a form, as exact nano-dollars (refused as the page's 400)."""
    raw = (text or "").strip().replace(",", "")
    negative = signed and raw.startswith("-")
    try:
        nano = usd_to_nano(raw[1:] if negative else raw)
    except MoneyError as e:
        raise PageError(400, "Not a dollar amount", f"{raw!r}: {e} (e.g. 10.50)") from None
    if nano <= 0:
        raise PageError(400, "Not a dollar amount", "the amount must be more than zero")
    return -nano if negative else nano


async def mount_operator_console(app, gate: AdminGate, store, console) -> OperatorConsole:
    """Register the operator console on the public app. Its session key is derived from the
    console secret every instance shares, so a session opened on one instance holds on all."""
    secret = await load_secret(console.config, store)
    derived = hmac.new(secret, b"gatewayd.operator.session", hashlib.sha256).hexdigest().encode()
    operator = OperatorConsole(gate, store, console, Sessions(derived, store),
                               SignInThrottle(store, limit=5, account_limit=20, address_limit=20, scope="operator"))
    bp = Blueprint("operator", __name__, url_prefix="/admin", template_folder=str(PACKAGE_FILES / "templates"),
                   static_folder=str(PACKAGE_FILES / "static"), static_url_path="/static")

    @bp.before_request
    async def before() -> None:
        if not operator.config.admin.http and not request.scope.get(ADMIN_LISTENER):
            g.session = g.principal = None
            raise PageError(404, "Not found", "The operator console is not served on this listener "
                                              "([admin] http is false).")
        await load_session(operator)

    @bp.after_request
    async def after(response: Response) -> Response:
        return finish(operator, response)

    @bp.errorhandler(PageError)
    async def refused(error: PageError):
        return await page(operator, "op_error.html", error.status, title=error.title, message=error.message)

    @bp.errorhandler(SignInRequired)
    async def sign_in_first(_error):
        return redirect(url_for("operator.signin"))

    add_views(bp, operator)
    app.register_blueprint(bp)
    return operator


def add_views(bp, operator: OperatorConsole) -> None:

    @bp.get("/")
    async def home():
        return redirect(url_for("operator.accounts") if g.principal else url_for("operator.signin"))

    @bp.get("/signin")
    async def signin():
        if g.principal is not None:
            return redirect(url_for("operator.accounts"))
        return await page(operator, "op_signin.html", error=None)

    @bp.post("/signin")
    async def signin_post():
        form = await checked_form(operator)
        secret = (form.get("token") or "").strip()
        password = form.get("password") or ""
        address = caller_address(operator.console)
        wait = await operator.throttle.reserve("operator", address)  # before any check
        if wait is not None:
            return await page(operator, "op_signin.html", 429, error=f"Too many attempts. Try again in {wait} s.")
        session = None
        if secret:
            token = await operator.store.admin_token_by_hash(tokens.token_hash(secret)) \
                if secret.startswith(tokens.PREFIX) else None
            if token is not None and token.state(utc_now_iso()) == "active" and token.allows_address(address):
                session = operator.sessions.signed_in(f"token:{token.id}", None)
        elif password:
            matched, stored = await password_matches(operator, password)
            if matched:
                session = operator.sessions.signed_in(PASSWORD_ACTOR, stored)  # a new password ends it
        if session is None:
            return await page(operator, "op_signin.html", 401,
                              error="That admin token or password is not valid here.")
        await operator.throttle.succeeded("operator", address)
        g.session = session
        return back("operator.accounts")

    @bp.post("/signout")
    async def signout():
        await checked_form(operator)
        if g.principal is not None:
            g.session = await operator.sessions.end(g.session)
        return back("operator.signin")

    # -- accounts -------------------------------------------------------------------------

    @bp.get("/accounts")
    async def accounts():
        signed_in()
        q = request.args.get("q", "").strip()
        listed = (await api(operator, "GET", f"{A}/accounts", query={"q": q or None, "limit": ACCOUNTS_SHOWN + 1}))["data"]
        return await page(operator, "op_accounts.html", nav="accounts", accounts=listed[:ACCOUNTS_SHOWN], q=q,
                          more=len(listed) > ACCOUNTS_SHOWN)

    @bp.get("/accounts/<account_id>")
    async def account(account_id: str):
        signed_in()
        shown = await api(operator, "GET", f"{A}/accounts/{_seg(account_id)}")
        payments = (await api(operator, "GET", f"{A}/accounts/{_seg(account_id)}/payments"))["data"]
        keys = (await api(operator, "GET", f"{A}/accounts/{_seg(account_id)}/keys"))["data"]
        return await page(operator, "op_account.html", nav="accounts", account=shown, payments=payments[:50],
                          keys=keys, notice=request.args.get("done"))

    @bp.post("/accounts/<account_id>/pay")
    async def pay(account_id: str):
        form = await checked_form(operator)
        await api(operator, "POST", f"{A}/accounts/{_seg(account_id)}/payments",
                  {"amount_nano": _dollars(form.get("amount", "")), "note": form.get("note", "")})
        return back("operator.account", account_id=account_id, done="Payment recorded.")

    @bp.post("/accounts/<account_id>/adjust")
    async def adjust(account_id: str):
        form = await checked_form(operator)
        await api(operator, "POST", f"{A}/accounts/{_seg(account_id)}/adjustments",
                  {"amount_nano": _dollars(form.get("amount", ""), signed=True), "note": form.get("note", ""),
                   "force": form.get("force") == "1"})  # a debit below a zero balance only when ticked
        return back("operator.account", account_id=account_id, done="Balance adjusted.")

    @bp.post("/keys/<key_id>/<action>")
    async def key_action(key_id: str, action: str):
        await checked_form(operator)
        if action not in ("disable", "enable", "revoke"):
            raise PageError(404, "Not found", f"No key action {action!r}.")
        key = await api(operator, "POST", f"{A}/keys/{_seg(key_id)}/{action}")
        return back("operator.account", account_id=key["account_id"], done=f"Key {key['name']}: {key['state']}.")

    # -- codes ----------------------------------------------------------------------------

    @bp.get("/codes")
    async def codes():
        signed_in()
        listed = (await api(operator, "GET", f"{A}/codes"))["data"]
        return await page(operator, "op_codes.html", nav="codes", codes=listed[:500], made=None)

    @bp.post("/codes")
    async def codes_create():
        form = await checked_form(operator)
        try:
            count = int(form.get("count") or "1")
        except ValueError:
            raise PageError(400, "Not a number", "How many codes: a whole number.") from None
        body = {"amount_nano": _dollars(form.get("amount", "")), "count": count,
                "note": form.get("note", "")}
        if form.get("expires"):
            body["expires_at"] = form["expires"]
        made = (await api(operator, "POST", f"{A}/codes", body))["data"]
        listed = (await api(operator, "GET", f"{A}/codes"))["data"]
        return await page(operator, "op_codes.html", nav="codes", codes=listed[:500], made=made)

    @bp.post("/codes/<code_id>/revoke")
    async def code_revoke(code_id: str):
        await checked_form(operator)
        await api(operator, "POST", f"{A}/codes/{_seg(code_id)}/revoke")
        return back("operator.codes")

    # -- routes, prices ---------------------------------------------------------------------

    @bp.get("/routes")
    async def routes():
        signed_in()
        listed = (await api(operator, "GET", f"{A}/routes", query={"instances": "all"}))["data"]
        listed.sort(key=lambda r: (r["model"], r["route"], r["host"], r["instance"]))
        return await page(operator, "op_routes.html", nav="routes", routes=listed, every_s=REPORT_EVERY_S)

    @bp.get("/prices")
    async def prices():
        signed_in()
        listed = (await api(operator, "GET", f"{A}/prices"))["data"]
        return await page(operator, "op_prices.html", nav="prices", prices=listed, diff=None, applied=None)

    @bp.post("/prices/import")
    async def prices_import():
        """A LiteLLM price list (uploaded): the diff against the catalogue, with an Apply form.
        The same conversion as ``gatewayctl prices import`` (gatewayd.billing.price_list)."""
        await checked_form(operator)
        upload = (await request.files).get("price_list")
        raw = upload.read(MAX_PRICE_LIST + 1) if upload is not None else b""
        if not raw:
            raise PageError(400, "No price list", "Choose a LiteLLM price list file (JSON) to import.")
        if len(raw) > MAX_PRICE_LIST:
            raise PageError(413, "Too large", f"A price list is at most {MAX_PRICE_LIST // (1 << 20)} MiB.")
        listed = (await api(operator, "GET", f"{A}/prices"))["data"]
        try:
            result = import_price_list(orjson.loads(raw), [CatalogueModel.from_doc(m["catalogue"]) for m in listed])
        except orjson.JSONDecodeError:
            raise PageError(400, "Not JSON", "The file is not a JSON price list.") from None
        except PriceListError as e:
            raise PageError(400, "Price list refused", str(e)) from None
        return await page(operator, "op_prices.html", nav="prices", prices=listed, diff=result.doc(),
                          overlay=orjson.dumps(result.overlay()).decode())

    @bp.post("/prices/apply")
    async def prices_apply():
        form = await checked_form(operator)
        try:
            overlay = orjson.loads(form.get("overlay") or "")
        except orjson.JSONDecodeError:
            raise PageError(400, "Not possible", "The changes to apply did not arrive whole; import again.") from None
        done = await api(operator, "POST", f"{A}/prices", {"models": overlay})
        listed = (await api(operator, "GET", f"{A}/prices"))["data"]
        return await page(operator, "op_prices.html", nav="prices", prices=listed, applied=done["applied"])

    # -- usage and revenue ------------------------------------------------------------------

    async def report() -> tuple[dict, list[dt.date], dict[str, str | None]]:
        today = dt.datetime.now(dt.timezone.utc).date()
        since = request.args.get("since") or (today - dt.timedelta(days=29)).isoformat()
        until = request.args.get("until") or today.isoformat()
        args = {"since": since, "until": until,
                "account": request.args.get("account") or None, "model": request.args.get("model") or None}
        if request.args.get("by", "model") not in ("model", "account"):
            raise PageError(400, "Not possible", "by must be model or account.")
        try:
            first, last = dt.date.fromisoformat(since), dt.date.fromisoformat(until)
        except ValueError:
            raise PageError(400, "Not a date", "Give the range as dates, YYYY-MM-DD.") from None
        if last < first or (last - first).days >= MAX_DAYS:
            raise PageError(400, "Range refused", f"The range must run forward and be at most {MAX_DAYS} days.")
        doc = await api(operator, "GET", f"{A}/report", query=args)
        return doc, [first + dt.timedelta(days=i) for i in range((last - first).days + 1)], \
            {**args, "by": request.args.get("by", "model")}

    def emails() -> dict[str, str]:
        """Account id -> email, to label the rows (the directory's cache, as the API lists it)."""
        return {a.id: a.email for a in operator.console.directory.accounts.values()}

    @bp.get("/usage")
    async def usage():
        signed_in()
        doc, days, args = await report()
        spend: dict[str, dict[dt.date, int]] = {}
        names = emails()
        rows, label = (doc["by_day_account"], lambda r: names.get(r["account_id"], r["account_id"])) \
            if args["by"] == "account" else (doc["by_day"], lambda r: r["model"])
        for row in rows:
            spend.setdefault(label(row), {})[dt.date.fromisoformat(row["day"])] = row["cost_nano"]
        chart, series = daily_spend_svg(days, spend)
        by_account: dict[str, dict] = {}
        for row in doc["by_key"]:
            sums = by_account.setdefault(row["account_id"], {"account_id": row["account_id"], "requests": 0,
                                                              "cost_nano": 0})
            sums["requests"] += row["requests"]
            sums["cost_nano"] += row["cost_nano"]
        ranked = [{**r, "email": names.get(r["account_id"], "")}
                  for r in sorted(by_account.values(), key=lambda r: -r["cost_nano"])]
        return await page(operator, "op_usage.html", nav="usage", report=doc, chart=chart, series=series,
                          by_account=ranked, args=args)

    @bp.get("/usage.csv")
    async def usage_csv():
        signed_in()
        doc, _, args = await report()
        out = io.StringIO()
        writer = csv.writer(out)
        per_account = args["by"] == "account"
        names = emails()
        writer.writerow(["day", *(("account_id", "email") if per_account else ("model",)), "requests", "input_tokens",
                         "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano", "cost_usd"])
        for row in doc["by_day_account" if per_account else "by_day"]:
            who = (row["account_id"], names.get(row["account_id"], "")) if per_account else (row["model"],)
            writer.writerow([row["day"], *who, row["requests"], row["input_tokens"], row["output_tokens"],
                             row["cached_tokens"], row["cache_write_tokens"], row["cost_nano"], row["cost_usd"]])
        name = f"gatewayd-usage-by-{args['by']}-{args['since']}-{args['until']}.csv"
        return Response(out.getvalue(), content_type="text/csv; charset=utf-8",
                        headers={"content-disposition": f'attachment; filename="{name}"'})

    # -- the audit log ------------------------------------------------------------------------

    @bp.get("/audit")
    async def audit():
        who: Principal = signed_in()
        query = {k: request.args.get(k) or None for k in ("actor", "target", "before")}
        query["changes"] = "true" if request.args.get("changes") else None
        query["limit"] = "100"
        doc = await api(operator, "GET", f"{A}/audit-log", query=query)
        return await page(operator, "op_audit.html", nav="audit", rows=doc["data"], following=doc["next_before"],
                          args=query, me=who)
