"""Periodic key budgets at the edges: the gatewayctl flags, the console's key form and keys
page, and the spec's 403 through the OpenAI SDK against the daemon (issue 22 point 4)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.test_console_http import error_of, signed_in
from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import gatewayctl, make_account, make_key, one_json
from tests.gatewayctl_cli import admin_fixture, shared_admin_fixture  # noqa: F401  (fixtures)
from tests.live import unique_email


@pytest.mark.parametrize(("args", "body", "now"), [
    (["--budget", "25", "--budget-period", "day"], {"budget_nano": 25_000_000_000, "budget_period": "day"},
     (25_000_000_000, "day")),
    (["--budget", "2.5"], {"budget_nano": 2_500_000_000}, (2_500_000_000, "week")),
    (["--budget-period", "day"], {"budget_period": "day"}, (1_000_000_000, "day")),
    (["--no-budget"], {"budget_nano": None}, (None, None)),
    (["--budget", "none"], {"budget_nano": None}, (None, None)),
])
def test_key_update_budget_flags(admin: RealAdmin, args: list[str], body: dict[str, Any],
                                 now: tuple) -> None:
    key = make_key(admin, make_account(admin), "--budget", "1", "--budget-period", "week")
    run = gatewayctl(admin, "key", "update", key["id"], *args, "--json")
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path, admin.last.body) == ("PATCH", f"/admin/v1/keys/{key['id']}", body)
    updated = one_json(run)
    assert (updated["budget_nano"], updated["budget_period"]) == now


def test_key_create_budget_flags_and_refusals(admin: RealAdmin) -> None:
    account = make_account(admin)
    run = gatewayctl(admin, "key", "create", account.id, "--name", "k", "--budget", "10", "--budget-period", "month",
                     "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.body == {"name": "k", "budget_nano": 10_000_000_000, "budget_period": "month"}
    created = one_json(run)
    assert (created["budget_nano"], created["budget_period"], created["budget_left_nano"]) == (
        10_000_000_000, "month", 10_000_000_000)
    sent = len(admin.requests)
    for args, message in [(["--budget-period", "year"], "must be day, week or month"),
                          (["--budget", "-1", "--budget-period", "day"], "is negative"),
                          (["--budget", "none", "--budget-period", "day"], "a budget period needs a budget")]:
        run = gatewayctl(admin, "key", "create", account.id, "--name", "k", *args)
        assert run.exit_code == 2, (args, run.stdout)
        assert message in run.err, (args, run.err)
    run = gatewayctl(admin, "key", "update", created["id"], "--budget", "5", "--no-budget")
    assert run.exit_code == 2 and "these cannot be used together" in run.err
    assert len(admin.requests) == sent


def test_the_budget_refuses_with_the_specs_403_and_the_console_shows_what_is_left(gateway):
    client, account = signed_in(gateway)
    # the form: a bad amount is a form error, a good one is stored with its period
    bad = client.post("/console/keys/new", {"name": "b", "budget": "lots", "budget_period": "day"})
    assert bad.status_code == 400 and "budget must be a dollar amount" in error_of(bad)
    bad = client.post("/console/keys/new", {"name": "b", "budget": "5", "budget_period": "fortnight"})
    assert bad.status_code == 400 and "choose a budget period" in error_of(bad)
    assert client.post("/console/keys/new", {"name": "budgeted", "budget": "0.000001",
                                             "budget_period": "week"}).status_code == 302
    [key] = gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"]
    assert (key["budget_nano"], key["budget_period"], key["budget_left_nano"]) == (1_000, "week", 1_000)
    listing = client.get("/console/keys").text
    assert "left of" in listing and "this week" in listing
    form = client.get(f"/console/keys/{key['id']}").text
    assert 'value="0.000001"' in form and '<option value="week" selected>' in form
    # a key with a budget too small for any request: the spec's 403, and the key stays enabled
    secret = gateway.admin.key(account["id"], name="api", budget_nano=1_000, budget_period="day")["secret"]
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk.chat.completions.create(model="gpt-4.1-nano", messages=[{"role": "user", "content": "hi"}],
                                    max_tokens=50)
    assert refused.value.status_code == 403
    assert refused.value.body["code"] == "pre_consume_token_quota_failed"
    assert refused.value.body["message"].startswith("token quota is not enough")
    # cleared through the edit form: the same request passes
    edited = client.post(f"/console/keys/{key['id']}", {"name": "budgeted", "budget": "", "model_scope": "all"})
    assert edited.status_code == 302
    assert gateway.admin.call("GET", f"/keys/{key['id']}")["budget_nano"] is None
    client.close()
    assert unique_email("x")  # (helpers shared with the console tests)
