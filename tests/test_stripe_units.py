"""``[payments.stripe]`` validation, the form's amount, and what each Stripe event records (pure)."""

from __future__ import annotations

import subprocess

import pytest

from gatewayd.config import ConfigError, load_config
from gatewayd.console.views_funds import amount_cents
from gatewayd.payments import stripe_api
from gatewayd.payments.stripe_events import Entry, Ignored, dispute_entries, refund_entries, session_entry
from gatewayd.payments.stripe_settings import StripeSettings
from tests.live import BIN

ENV = {"STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_1"}
SECTION = ('[payments.stripe]\nsecret_key_env = "STRIPE_SECRET_KEY"\nwebhook_secret_env = "STRIPE_WEBHOOK_SECRET"\n'
           'currency = "usd"\nmin_amount = 5.00\nmax_amount = 1000.00\napi_base = "https://api.stripe.com"\n')
SETTINGS = StripeSettings("sk", "whsec", "usd", 500, 100_000, "http://127.0.0.1:1")


def _load(tmp_path, text: str, env=ENV):
    path = tmp_path / "gatewayd.toml"
    path.write_text(text)
    return load_config(path, environ=env)


def test_the_issue_section_reads_and_without_it_there_is_none(tmp_path):
    stripe = _load(tmp_path, SECTION).stripe
    assert stripe == StripeSettings("sk_test_1", "whsec_1", "usd", 500, 100_000, "https://api.stripe.com")
    assert "sk_test_1" not in repr(stripe) and "whsec_1" not in repr(stripe)
    assert _load(tmp_path, "").stripe is None
    assert _load(tmp_path, "[payments]\n").stripe is None


@pytest.mark.parametrize("change,message", [
    (("min_amount = 5.00", "min_amount = 5.001"), "payments.stripe.min_amount: must be a whole number of cents"),
    (("max_amount = 1000.00", "max_amount = 4"), "payments.stripe.max_amount: must be at least min_amount"),
    (("min_amount = 5.00", "min_amount = 0"), "payments.stripe.min_amount: must be at least 0.5"),
    (("max_amount = 1000.00", "max_amount = 'lots'"), "payments.stripe.max_amount: must be a number"),
    (('currency = "usd"', 'currency = "eur"'), "payments.stripe.currency: must be one of usd"),
    (('api_base = "https://api.stripe.com"', 'api_base = "ftp://x"'), "payments.stripe.api_base: must start with"),
    (('currency = "usd"', 'currency = "usd"\nwebhook_url = "x"'), "payments.stripe.webhook_url: unknown key"),
    (('secret_key_env = "STRIPE_SECRET_KEY"', 'secret_key_env = "NOT_SET_HERE"'),
     "payments.stripe.secret_key_env: the environment variable NOT_SET_HERE is not set"),
])
def test_a_bad_section_names_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, SECTION.replace(*change))
    assert message in str(info.value)


def test_other_payment_tables_and_missing_secrets_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="payments.paypal: unknown key"):
        _load(tmp_path, "[payments.paypal]\n")
    with pytest.raises(ConfigError, match="STRIPE_WEBHOOK_SECRET is not set"):
        _load(tmp_path, SECTION, env={"STRIPE_SECRET_KEY": "sk"})


@pytest.mark.live
def test_check_config_prints_one_line_and_exits_2(tmp_path):
    path = tmp_path / "gatewayd.toml"
    path.write_text(SECTION.replace("max_amount = 1000.00", "max_amount = 1"))
    done = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(path)], capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", **ENV})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "gatewayd: config error: payments.stripe.max_amount: must be at least min_amount"]


@pytest.mark.parametrize("text,cents", [("5", 500), ("25.5", 2550), ("$1,000.00", 100_000), (" 12.34 ", 1234)])
def test_amounts_in_range(text, cents):
    assert amount_cents(text, SETTINGS) == cents


@pytest.mark.parametrize("text", ["4.99", "1000.01", "1e3", "5.001", "-5", "", "five", "NaN", "10.0.0"])
def test_amounts_refused(text):
    with pytest.raises(ValueError):
        amount_cents(text, SETTINGS)


def test_the_idempotency_key_is_one_per_form_and_amount():
    req = stripe_api.CheckoutRequest("acct_1", 500, "a" * 32, "s", "c")
    assert req.idempotency_key() == stripe_api.CheckoutRequest("acct_1", 500, "a" * 32, "x", "y").idempotency_key()
    others = {stripe_api.CheckoutRequest("acct_2", 500, "a" * 32, "s", "c").idempotency_key(),
              stripe_api.CheckoutRequest("acct_1", 600, "a" * 32, "s", "c").idempotency_key(),
              stripe_api.CheckoutRequest("acct_1", 500, "b" * 32, "s", "c").idempotency_key()}
    assert req.idempotency_key() not in others and len(others) == 3


SESSION = {"id": "cs_1", "payment_status": "paid", "amount_total": 2550, "currency": "usd",
           "metadata": {"gatewayd_account": "acct_1", "gatewayd_amount_nano": "25500000000"}}


def test_a_paid_session_credits_what_stripe_says_was_paid():
    assert session_entry(SESSION, SETTINGS) == Entry("acct_1", 25_500_000_000, "card", "cs_1",
                                                     "card top-up (Stripe cs_1)")
    for change in ({"payment_status": "unpaid"}, {"currency": "eur"}, {"amount_total": 0}, {"metadata": {}},
                   {"amount_total": True}):
        assert isinstance(session_entry({**SESSION, **change}, SETTINGS), Ignored), change


def test_each_refund_is_its_own_negative_entry():
    refunds = [{"id": "re_2", "amount": 500, "currency": "usd", "status": "pending"},
               {"id": "re_1", "amount": 1500, "currency": "usd", "status": "succeeded"},
               {"id": "re_0", "amount": 700, "currency": "usd", "status": "failed"}]
    entries = refund_entries({"id": "ch_1"}, refunds, "acct_1", SETTINGS)
    assert [(e.reference, e.amount_nano) for e in entries if isinstance(e, Entry)] == [
        ("re_2", -5_000_000_000), ("re_1", -15_000_000_000)]
    assert isinstance(entries[2], Ignored)


def test_a_dispute_holds_its_amount_from_its_opening_and_gives_it_back_when_won():
    """``charge.dispute.created`` holds the disputed amount (issue 31); closed lost, the same row
    (once, whichever came first); closed won, the same row and the amount given back."""
    opened = {"id": "dp_1", "status": "needs_response", "amount": 8000, "currency": "usd", "charge": "ch_1"}
    held = Entry("acct_1", -80_000_000_000, "dispute", "dp_1", "card dispute (Stripe dp_1 of ch_1)")
    assert dispute_entries("charge.dispute.created", opened, "acct_1", SETTINGS) == [held]
    lost = {**opened, "status": "lost"}
    assert dispute_entries("charge.dispute.closed", lost, "acct_1", SETTINGS) == [held]
    for status in ("won", "warning_closed"):
        assert dispute_entries("charge.dispute.closed", {**opened, "status": status}, "acct_1", SETTINGS) == [
            held, Entry("acct_1", 80_000_000_000, "dispute_won", "dp_1", f"card dispute closed {status} (Stripe dp_1)")]
    [ignored] = dispute_entries("charge.dispute.closed", {**opened, "status": "under_review"}, "acct_1", SETTINGS)
    assert isinstance(ignored, Ignored)


def test_the_checkout_origins_the_balance_page_lets_its_form_go_to():
    assert StripeSettings("sk", "wh", "usd", 500, 900, "https://api.stripe.com").checkout_origins == (
        "https://checkout.stripe.com",)
    assert SETTINGS.checkout_origins == ("https://checkout.stripe.com", "http://127.0.0.1:1")
