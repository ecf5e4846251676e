"""Admin API request bodies are strict: a misspelt field is refused naming it, values are never coerced.

Every write route answers 400 with one line naming the field, and changes nothing, when the
body carries a field the route does not take (``"nots"`` for ``"note"`` would otherwise lose
the note silently) or a value of the wrong type (``"name": false`` is not turned into ``""``,
``"amount_nano": "1000"`` is not turned into 1000).
"""

from __future__ import annotations

import pytest

from tests.live import unique_email

START = 10_000_000_000


@pytest.fixture
def account(gateway):
    return gateway.admin.account(unique_email("bodies"))


def refused(gateway, method: str, path: str, body: dict) -> str:
    error = gateway.admin.call(method, path, body, expect=400)["error"]
    assert error["code"] == "invalid_request"
    assert "\n" not in error["message"]
    return error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("PATCH", "/accounts/{id}", {"timezon": "Europe/Paris"}, "timezon"),
        ("PUT", "/accounts/{id}/password", {"password": "long enough pw", "pasword": "x"}, "pasword"),
        ("POST", "/accounts/{id}/payments", {"amount_nano": 1_000, "nots": "invoice 7"}, "nots"),
        ("PUT", "/accounts/{id}/groups", {"group": ["default"]}, "group"),
        ("PUT", "/accounts/{id}/embeddings/text-embedding-3-small", {"enable": True}, "enable"),
        ("POST", "/accounts/{id}/keys", {"name": "k", "spend_limit": 5_000}, "spend_limit"),
    ],
)
def test_a_misspelt_field_is_refused_naming_it_and_nothing_changes(gateway, account, method, path, body, field):
    before = gateway.admin.call("GET", f"/accounts/{account['id']}")
    message = refused(gateway, method, path.format(id=account["id"]), body)
    assert message.startswith(f"unknown field {field!r}")
    assert gateway.admin.call("GET", f"/accounts/{account['id']}") == before
    assert gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"] == []
    assert gateway.admin.call("GET", f"/accounts/{account['id']}/payments")["data"][0]["amount_nano"] == START


def test_a_misspelt_field_on_account_create_creates_nothing(gateway):
    email = unique_email("typo")
    assert refused(gateway, "POST", "/accounts", {"email": email, "nmae": "Ann"}).startswith("unknown field 'nmae'")
    assert email not in [a["email"] for a in gateway.admin.call("GET", "/accounts")["data"]]


def test_a_misspelt_field_on_key_update_changes_nothing(gateway, account):
    key = gateway.admin.key(account["id"], spend_limit_nano=5_000)
    message = refused(gateway, "PATCH", f"/keys/{key['id']}", {"spend_limit": None})
    assert message.startswith("unknown field 'spend_limit'")
    assert gateway.admin.call("GET", f"/keys/{key['id']}")["spend_limit_nano"] == 5_000


@pytest.mark.parametrize(
    ("method", "path", "body", "names"),
    [
        ("POST", "/accounts", {"email": "x-{n}@example.com", "name": False}, "name"),
        ("POST", "/accounts", {"email": "x-{n}@example.com", "timezone": 0}, "timezone"),
        ("POST", "/accounts/{id}/payments", {"amount_nano": "1000"}, "amount_nano"),
        ("POST", "/accounts/{id}/payments", {"amount_nano": True}, "amount_nano"),
        ("POST", "/accounts/{id}/payments", {"amount_nano": 1_000, "note": 7}, "note"),
        ("PUT", "/accounts/{id}/embeddings/text-embedding-3-small", {"enabled": "false"}, "enabled"),
        ("POST", "/accounts/{id}/keys", {"name": "k", "spend_limit_nano": "5"}, "spend_limit_nano"),
    ],
)
def test_values_are_never_coerced(gateway, account, method, path, body, names):
    body = {k: (v.format(n=account["id"]) if isinstance(v, str) and "{n}" in v else v) for k, v in body.items()}
    before = gateway.admin.call("GET", f"/accounts/{account['id']}")
    message = refused(gateway, method, path.format(id=account["id"]), body)
    assert names in message
    assert gateway.admin.call("GET", f"/accounts/{account['id']}") == before
    assert f"x-{account['id']}@example.com" not in [a["email"] for a in gateway.admin.call("GET", "/accounts")["data"]]


def test_null_optional_fields_take_their_defaults(gateway):
    created = gateway.admin.call("POST", "/accounts", {"email": unique_email("nulls"), "name": None,
                                                      "timezone": None}, expect=201)
    assert (created["name"], created["timezone"]) == ("", "UTC")
    paid = gateway.admin.call("POST", f"/accounts/{created['id']}/payments", {"amount_nano": 1, "note": None},
                              expect=201)
    assert paid["payment"]["note"] == ""


def test_payments_are_bounded_so_every_sum_stays_inside_64_bits(gateway, account):
    from gatewayd.money import MAX_PAID_NANO
    from tests.live import BIN
    import subprocess

    payments = f"/accounts/{account['id']}/payments"
    for amount in (9_223_372_036_854_775_807, MAX_PAID_NANO - START + 1):
        message = refused(gateway, "POST", payments, {"amount_nano": amount})
        assert message.startswith("amount_nano: an account may be paid at most $1000000000.00 in total"), message
    assert gateway.admin.balance(account["id"])["balance_nano"] == START
    up_to = gateway.admin.call("POST", payments, {"amount_nano": MAX_PAID_NANO - START}, expect=201)
    assert up_to["account"]["total_paid_nano"] == MAX_PAID_NANO
    assert "paid $1000000000.00" in refused(gateway, "POST", payments, {"amount_nano": 1})
    done = subprocess.run([str(BIN / "gatewayctl"), "account", "pay", account["id"], "9999999999", "--socket",
                           gateway.socket], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "at most $1000000000.00 in total" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "500" not in done.stderr
    huge_limit = refused(gateway, "POST", f"/accounts/{account['id']}/keys", {"name": "k", "spend_limit_nano": 2**63})
    assert huge_limit.startswith("spend_limit_nano must be at most")
    assert gateway.admin.audit()["ok"]
