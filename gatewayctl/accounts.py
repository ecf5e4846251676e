"""``gatewayctl account ...``: accounts, their payments, groups and embedding models."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gatewayctl import render
from gatewayctl.client import segment
from gatewayctl.alert_options import AlertBelowOpt, NoAlertBelowOpt, alert_below_field
from gatewayctl.fair_share import MaxConcurrentOpt, NoMaxConcurrentOpt, max_concurrent_field
from gatewayctl.common import (
    account_path, AccountArg, app, data, exclusive, force_option, help_type, JsonOpt, nothing_to_change, parse_name,
    parse_payment, parse_timezone, parse_usd, read_password, session, SocketOpt, split_names,
)
from gatewayd.control_chars import escape_control_characters
from gatewayd.money import format_usd


account_app = typer.Typer(no_args_is_help=True)  # help: the group callback's docstring
app.add_typer(account_app, name="account")


@account_app.callback()
def _account_group(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Accounts, their payments, groups and embedding models."""


@account_app.command("create")
def account_create(
    email: Annotated[str, typer.Argument(help="Login email of the new account.")],
    name: Annotated[Optional[str], typer.Option(help="Display name.", parser=parse_name)] = None,
    timezone: Annotated[
        Optional[str],
        typer.Option(metavar="Area/City", help="IANA time zone; key expiry dates use it.",
                     parser=parse_timezone),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read a console password from stdin.")
    ] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Create an account."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"email": email}
    if name is not None:
        body["name"] = name
    if timezone is not None:
        body["timezone"] = timezone
    if password_stdin:
        body["password"] = read_password("--password-stdin")
    account = s.api.post("/admin/v1/accounts", body)
    s.emit(account, lambda c: render.show_object(c, account, render.ACCOUNT, "Account created"))


@account_app.command("invite")
def account_invite(
    email: Annotated[str, typer.Argument(help="Email to send a sign-up link to.")],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Email a sign-up link (needs [console] signup = "invite" or "open"); prints the link too."""
    s = session(socket, json_output)
    sent = s.api.post("/admin/v1/invitations", {"email": email})

    def show(c: Console) -> None:
        c.print(f"Invitation for {escape_control_characters(sent['email'])}"
                f" ({'emailed' if sent['emailed'] else 'NOT emailed: the outbox is full, hand the link over'}),"
                f" valid {sent['expires_in_s'] // 3600} h:")
        c.print(escape_control_characters(sent["link"]), soft_wrap=True)

    s.emit(sent, show)


@account_app.command("list")
def account_list(socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """List all accounts."""
    s = session(socket, json_output)
    accounts = data(s.api.get("/admin/v1/accounts"))
    s.emit(accounts, lambda c: render.show_list(
        c, accounts, render.ACCOUNT_COLUMNS, empty="No accounts."))


@account_app.command("show")
def account_show(account: AccountArg, socket: SocketOpt = None, json_output: JsonOpt = False
                 ) -> None:
    """Show one account."""
    s = session(socket, json_output)
    found = s.api.get(account_path(account))
    s.emit(found, lambda c: render.show_object(c, found, render.ACCOUNT))


@account_app.command("update")
def account_update(
    account: AccountArg,
    name: Annotated[Optional[str], typer.Option(help="New display name.", parser=parse_name)
                    ] = None,
    timezone: Annotated[
        Optional[str],
        typer.Option(metavar="Area/City", help="New IANA time zone.", parser=parse_timezone),
    ] = None,
    max_concurrent: MaxConcurrentOpt = None,
    no_max_concurrent: NoMaxConcurrentOpt = False,
    alert_below: AlertBelowOpt = None,
    no_alert_below: NoAlertBelowOpt = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Change an account's name, time zone, cap on requests in flight or low-balance alert."""
    exclusive({"--max-concurrent": max_concurrent is not None, "--no-max-concurrent": no_max_concurrent})
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if timezone is not None:
        body["timezone"] = timezone
    max_concurrent_field(body, max_concurrent, no_max_concurrent)
    alert_below_field(body, alert_below, no_alert_below)
    if not body:
        raise nothing_to_change()
    s = session(socket, json_output)
    updated = s.api.patch(account_path(account), body)
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, "Account updated"))


@account_app.command("password")
def account_password(account: AccountArg, socket: SocketOpt = None,
                     json_output: JsonOpt = False) -> None:
    """Set the console password: read from stdin, or prompted twice (hidden) on a terminal."""
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "password"), {"password": read_password("stdin")})
    done = escape_control_characters(f"Password set for {updated.get('email', account)}.")
    s.emit(updated, lambda c: c.print(done, markup=False))


@account_app.command("unlock")
def account_unlock(account: AccountArg, socket: SocketOpt = None, json_output: JsonOpt = False) -> None:
    """Lift the console's sign-in lockouts of the account's email, from every address."""
    s = session(socket, json_output)
    answer = s.api.post(account_path(account, "unlock"), {})
    email = (answer.get("account") or {}).get("email", account)
    done = escape_control_characters(f"Sign-in unlocked for {email} ({answer.get('buckets_cleared', 0)} "
                                     "throttle entries cleared).")
    s.emit(answer, lambda c: c.print(done, markup=False))


@account_app.command("pay")
def account_pay(
    account: AccountArg,
    amount: Annotated[
        int, typer.Argument(metavar="AMOUNT_USD", help="US dollars, e.g. 10.50.",
                            parser=parse_payment)
    ],
    note: Annotated[Optional[str], typer.Option(metavar="TEXT", help="Kept with the payment.")
                    ] = None,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Record a payment: adds to the balance and to the total paid."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"amount_nano": amount}
    if note is not None:
        body["note"] = note
    answer = s.api.post(account_path(account, "payments"), body)

    def human(c: Console) -> None:
        paid = answer.get("account") or {}
        render.show_object(c, answer.get("payment") or {}, render.PAYMENT, "Payment recorded")
        c.print(escape_control_characters(f"{paid.get('email', account)}: balance "
                                          f"{format_usd(paid.get('balance_nano'))}, "
                                          f"total paid {format_usd(paid.get('total_paid_nano'))}"), markup=False)

    s.emit(answer, human)


@help_type("signed decimal")
def parse_adjustment(value: str) -> int:
    """A signed dollar amount, not zero: ``2.50`` credits, ``-2.50`` debits."""
    text = value.strip()
    nano = -parse_usd(text[1:]) if text.startswith("-") else parse_usd(text.removeprefix("+"))
    if nano == 0:
        raise typer.BadParameter(f"{value!r}: an adjustment of nothing changes nothing")
    return nano


@account_app.command("adjust")
def account_adjust(
    account: AccountArg,
    amount: Annotated[int, typer.Argument(
        metavar="AMOUNT_USD", parser=parse_adjustment,
        help="US dollars, signed: 2.50 credits, -2.50 debits (put -- before a negative amount).")],
    note: Annotated[str, typer.Option("--note", metavar="TEXT", help="The reason (required; kept in the ledger "
                                      "and the audit log).", parser=parse_name)],
    force: Annotated[bool, force_option("Allow a debit below a zero balance")] = False,
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Correct a balance up or down, with the reason: a payment row of source adjustment.

    A debit may not take the balance below zero (409 below_floor) unless --force."""
    s = session(socket, json_output)
    body: dict[str, Any] = {"amount_nano": amount, "note": note}
    if force:
        body["force"] = True
    answer = s.api.post(account_path(account, "adjustments"), body)

    def human(c: Console) -> None:
        adjusted = answer.get("account") or {}
        render.show_object(c, answer.get("adjustment") or {}, render.PAYMENT, "Balance adjusted")
        c.print(escape_control_characters(f"{adjusted.get('email', account)}: balance "
                                          f"{format_usd(adjusted.get('balance_nano'))}, "
                                          f"total paid {format_usd(adjusted.get('total_paid_nano'))}"), markup=False)

    s.emit(answer, human)


@account_app.command("payments")
def account_payments(account: AccountArg, socket: SocketOpt = None,
                     json_output: JsonOpt = False) -> None:
    """List an account's payments."""
    s = session(socket, json_output)
    payments = data(s.api.get(account_path(account, "payments")))
    s.emit(payments, lambda c: render.show_list(
        c, payments, render.PAYMENT_COLUMNS, empty="No payments."))


@account_app.command("groups")
def account_groups(
    account: AccountArg,
    groups: Annotated[
        str, typer.Argument(metavar="G1,G2", help='Groups the account may use; "" clears.')
    ],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Set the groups an account may use (replaces the list)."""
    names = split_names(groups, "G1,G2", allow_empty=True)
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "groups"), {"groups": names})
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, "Groups set"))


@account_app.command("embeddings")
def account_embeddings(
    account: AccountArg,
    model: Annotated[str, typer.Argument(help="Embedding model id.")],
    enable: Annotated[
        bool, typer.Option("--enable/--disable", help="Allow or stop the model for this account.")
    ],
    socket: SocketOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Turn one embedding model on or off for an account."""
    s = session(socket, json_output)
    updated = s.api.put(account_path(account, "embeddings", segment(model)), {"enabled": enable})
    title = f"Embedding model {model} {'enabled' if enable else 'disabled'}"
    s.emit(updated, lambda c: render.show_object(c, updated, render.ACCOUNT, title))
