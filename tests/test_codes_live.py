"""Redemption codes end to end on the shared daemon: `gatewayctl codes` over the admin socket, the
console's "Redeem a code" form over HTTP (CSRF, the throttle, every refusal), the admin API's
answers to bad input. The store's races (two instances at once): tests/test_codes.py.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import subprocess
import sys
import time
from pathlib import Path

from gatewayd.store.base import utc_iso
from gatewayd.console.formatting import usd_html
from tests.console_helpers import ConsoleClient, account_with_password
from tests.live import unique_email

BIN = Path(sys.executable).parent


def ctl(gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", gateway.socket], capture_output=True,
                          text=True, timeout=30)


def ctl_json(gateway, *args: str):
    run = ctl(gateway, *args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def signed_in(gateway, paid_usd: str | None = None) -> tuple[ConsoleClient, dict]:
    email = unique_email("codes")
    account = account_with_password(gateway.admin, email, paid_usd=paid_usd)
    client = ConsoleClient(gateway.url)
    assert client.sign_in(email).status_code == 302
    return client, account


def redeem(client: ConsoleClient, code: str):
    return client.post("/console/balance/redeem", {"code": code}, token_from="/console/balance")


def error_of(page) -> str:
    start = page.text.index('id="redeem-error"')
    return html.unescape(page.text[page.text.index(">", start) + 1:page.text.index("</div>", start)])


def code_row(gateway, code_id: str) -> dict:
    return next(c for c in ctl_json(gateway, "codes", "list") if c["id"] == code_id)


def test_codes_made_by_gatewayctl_are_redeemed_once_in_the_console(gateway):
    made = ctl_json(gateway, "codes", "create", "--amount", "2.50", "--count", "2", "--expires", "2999-12-31",
                    "--note", "spring promo")
    assert len(made) == 2 and all(c["code"].startswith("gwc-") and c["status"] == "unused" for c in made)
    assert made[0]["code"] != made[1]["code"] and made[0]["amount_nano"] == 2_500_000_000
    assert made[0]["expires_at"] == "3000-01-01T00:00:00.000Z"
    listed = ctl_json(gateway, "codes", "list")
    assert all("code" not in c for c in listed)  # shown once: never listed
    assert code_row(gateway, made[0]["id"])["hint"] == made[0]["code"][-4:]

    client, account = signed_in(gateway)
    typed = " " + made[0]["code"].lower().replace("-", " ") + " "  # as a person might type it
    done = redeem(client, typed)
    assert done.status_code == 302 and done.headers["location"].startswith("/console/balance?redeemed=")
    page = client.get(done.headers["location"])
    assert f"Code redeemed: {usd_html(2_500_000_000)} was added to your balance." in page.text
    assert f'id="balance">{usd_html(2_500_000_000)}<' in page.text and f"code {made[0]['id']}: spring promo" in page.text
    again = redeem(client, made[0]["code"])  # a reload, or the code shared
    assert again.status_code == 400 and error_of(again) == "This code has been redeemed already."
    assert gateway.admin.balance(account["id"])["balance_nano"] == 2_500_000_000
    payments = ctl_json(gateway, "account", "payments", account["id"])
    assert [(p["amount_nano"], p["source"], p["reference"]) for p in payments] == [
        (2_500_000_000, "code", made[0]["id"])]

    row = code_row(gateway, made[0]["id"])
    assert row["status"] == "redeemed" and row["redeemed_by"] == account["id"]
    assert row["redeemed_by_email"] == account["email"] and row["redeemed_at"]
    table = ctl(gateway, "codes", "list")
    assert table.returncode == 0 and "redeemed by" in table.stdout and "unused" in table.stdout

    revoked = ctl_json(gateway, "codes", "revoke", made[1]["id"])
    assert revoked["status"] == "revoked" and revoked["revoked_at"]
    refused = redeem(client, made[1]["code"])
    assert refused.status_code == 400 and error_of(refused) == "This code has been withdrawn by the operator."
    late = ctl(gateway, "codes", "revoke", made[0]["id"])
    assert late.returncode == 1 and "too late to revoke" in late.stderr
    missing = ctl(gateway, "codes", "revoke", "code_nosuch")
    assert missing.returncode == 1 and "no code 'code_nosuch'" in missing.stderr
    client.close()


def test_an_expired_code_is_refused(gateway):
    soon = utc_iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1))
    [code] = gateway.admin.call("POST", "/codes", {"amount_nano": 1_000, "count": 1, "expires_at": soon},
                                expect=201)["data"]
    client, account = signed_in(gateway)
    time.sleep(1.2)
    refused = redeem(client, code["code"])
    assert refused.status_code == 400 and error_of(refused) == "This code has expired."
    assert code_row(gateway, code["id"])["status"] == "expired"
    assert gateway.admin.balance(account["id"])["balance_nano"] == 0
    client.close()


def test_wrong_codes_are_throttled_and_a_locked_out_account_redeems_nothing(gateway):
    [code] = gateway.admin.call("POST", "/codes", {"amount_nano": 1_000, "count": 1}, expect=201)["data"]
    client, account = signed_in(gateway)
    for wrong in ("gwc-not-a-code", "gwc-" + "0" * 28, "", "x" * 5000, code["code"][:-1] + "0"
                  if not code["code"].endswith("0") else code["code"][:-1] + "1"):
        page = redeem(client, wrong)
        assert page.status_code == 400
        assert error_of(page).startswith("No such code.")
    blocked = redeem(client, code["code"])  # even the right code, until the lockout ends
    assert blocked.status_code == 429 and 0 < int(blocked.headers["retry-after"]) <= 15 * 60
    assert "Too many wrong codes" in blocked.text
    assert code_row(gateway, code["id"])["status"] == "unused"
    # another account at the same address is not locked out by this one's guesses
    other, other_account = signed_in(gateway)
    assert redeem(other, code["code"]).status_code == 302
    assert gateway.admin.balance(other_account["id"])["balance_nano"] == 1_000
    client.close()
    other.close()


def test_the_form_needs_its_csrf_token_and_a_signed_in_account(gateway):
    [code] = gateway.admin.call("POST", "/codes", {"amount_nano": 1_000, "count": 1}, expect=201)["data"]
    client, _ = signed_in(gateway)
    assert client.http.post("/console/balance/redeem", data={"code": code["code"]}).status_code == 400
    forged = client.http.post("/console/balance/redeem", data={"code": code["code"], "csrf_token": "f" * 64})
    assert forged.status_code == 403
    anonymous = ConsoleClient(gateway.url)
    token = anonymous.csrf("/console/signin")
    answer = anonymous.http.post("/console/balance/redeem", data={"code": code["code"], "csrf_token": token})
    assert answer.status_code == 302 and answer.headers["location"] == "/console/signin"
    assert code_row(gateway, code["id"])["status"] == "unused"
    client.close()
    anonymous.close()


def test_bad_creations_are_refused_with_a_clear_error(gateway):
    for body, word in (({"amount_nano": 0, "count": 1}, "amount_nano"), ({"amount_nano": 1, "count": 0}, "count"),
                       ({"amount_nano": 1, "count": 1, "expires_at": "2001-01-01"}, "in the past"),
                       ({"amount_nano": 1, "count": 1, "expiry": "2999-01-01"}, "unknown field")):
        answer = gateway.admin.call("POST", "/codes", body, expect=400)
        assert word in answer["error"]["message"]
    for args, word in ((("--amount", "0"), "more than zero"), (("--amount", "1", "--count", "0"), "--count"),
                       (("--amount", "1", "--expires", "2026-02-30"), "calendar date")):
        run = ctl(gateway, "codes", "create", *args)
        assert run.returncode == 2 and word in run.stderr, run.stderr
