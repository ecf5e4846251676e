"""The Balance page's "Redeem a code" form.

An attempt is taken from the code throttle first (the sign-in throttle's rules and store,
with buckets of its own: ``SignInThrottle(scope="code")``, keyed by the account and the
client address), then the code is redeemed in the store: its row and its payment in one
transaction, so it credits once even when redeemed on two instances at the same instant.
A refused code (unknown, redeemed, revoked, expired) keeps the attempt; a redeemed one
clears the account's count. Success redirects to the Balance page naming the payment, so
a reload does not post the code again.
"""

from __future__ import annotations

from quart import Blueprint, redirect, url_for

from gatewayd import codes
from gatewayd.console import queries
from gatewayd.console.session import SignInThrottle
from gatewayd.console.web import Console, ConsoleError, caller_address, checked_form, page, signed_in
from gatewayd.records import utc_now_iso
from gatewayd.store.base import PaymentTooLarge
from gatewayd.store.redemption_codes import EXPIRED, REDEEMED, REVOKED

REFUSED = {
    REDEEMED: "This code has been redeemed already.",
    REVOKED: "This code has been withdrawn by the operator.",
    EXPIRED: "This code has expired.",
}
UNKNOWN = "No such code. Check what you typed (dashes and case do not matter)."
MAX_TYPED = 200  # far above a code's length with any spacing


def register(bp: Blueprint, console: Console) -> None:
    throttle = SignInThrottle(console.store, scope="code", account_limit=20)  # the guesser is the account itself

    @bp.post("/balance/redeem")
    async def redeem_code():
        form = await checked_form(console)
        account = signed_in()
        typed = form.get("code", "")[:MAX_TYPED]
        address = caller_address(console)
        wait = await throttle.reserve(account.id, address)  # taken before the code is looked up
        if wait is not None:
            minutes = -(-wait // 60)
            raise ConsoleError(429, "Too many attempts",
                               f"Too many wrong codes. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                               {"Retry-After": str(wait)})
        canonical = codes.canonical(typed)
        refused = UNKNOWN
        if canonical is not None:
            try:
                payment, why = await console.store.redeem_code(account, codes.code_hash(canonical), utc_now_iso())
            except PaymentTooLarge:  # the whole redemption rolled back: the code stays unused
                raise ConsoleError(400, "Not possible", "This account has been paid the most an account may be"
                                   " paid in total; the code was not used.") from None
            if payment is not None:
                await throttle.succeeded(account.id, address)
                return redirect(url_for("console.balance", redeemed=payment.id))
            refused = REFUSED.get(why or "", UNKNOWN)
        payments = await queries.payments(console.store, account.id)
        return await page(console, "balance.html", 400, nav="balance", payments=payments, redeem_error=refused,
                          typed_code=typed)
