"""The Balance page's low-balance alert: show and set the threshold (gatewayd/alerts.py).

The amount is typed in dollars; empty removes the alert. The directory checks the range
(the admin API's rule), and a refusal comes back as the Balance page with the text as typed."""

from __future__ import annotations

from quart import Blueprint, redirect, url_for

from gatewayd.console import queries
from gatewayd.console.forms import nano_to_plain_usd
from gatewayd.console.web import Console, checked_form, page, signed_in
from gatewayd.directory import DirectoryError
from gatewayd.money import MoneyError, usd_to_nano


def register(bp: Blueprint, console: Console) -> None:
    bp.add_app_template_filter(nano_to_plain_usd, "plain_usd")

    @bp.post("/balance/alert")
    async def set_balance_alert():
        account = signed_in()
        typed = (await checked_form(console)).get("alert_below", "").strip()
        try:
            value = None if typed == "" else usd_to_nano(typed.removeprefix("$").strip())
            if value is not None and value < 0:
                raise MoneyError("negative")
            await console.directory.set_alert_below(account, value)
        except (MoneyError, DirectoryError):
            message = "Give the threshold in US dollars, from 0 up (e.g. 5.00), or leave it empty for no alert."
            payments = await queries.payments(console.store, account.id)
            return await page(console, "balance.html", 400, nav="balance", payments=payments,
                              alert_error=message, alert_typed=typed)
        return redirect(url_for("console.balance"))
