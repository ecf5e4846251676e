"""Keys and accounts against the live session gateway: every state, limit and permission.

One table per rule of the spec ("API key", "States and transitions", "Authentication",
"403 causes", "Limits"). Each row asserts the HTTP status, ``error.code``, the message
prefix, that nothing was charged, and the key's state as the admin API shows it (the
document ``gatewayctl key show --json`` prints). Rules that need a daemon with its own
configuration (groups, rate limits, trusted proxies, IPv6) are in test_keys_config_live.py.
"""

from __future__ import annotations

import datetime as dt
import json
from zoneinfo import ZoneInfo

import anthropic
import httpx
import openai
import pytest

from gatewayd.money import usd_to_nano
from tests.keys_helpers import (
    CHAT,
    EMBEDDINGS,
    MESSAGES,
    RESPONSES,
    ctl,
    key_state,
    nothing_charged,
    ok,
    one_line,
    post,
    refused,
    without_request_id,
)
from tests.live import unique_email

INVALID_TOKEN = b'{"error":{"message":"Invalid token (request id: <id>)","type":"invalid_request_error","code":""}}'


def gateway_get_models(gateway, secret: str, headers: dict | None = None) -> httpx.Response:
    return httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}", **(headers or {})})


def gateway_get_models_one(gateway, secret: str, model: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/v1/models/{model}", headers={"authorization": f"Bearer {secret}"})


def new_key(gateway, **fields) -> tuple[dict, dict]:
    """A fresh $10 account and one key with ``fields``: (account, key incl. secret)."""
    account = gateway.admin.account(unique_email("keys"))
    return account, gateway.admin.key(account["id"], **fields)


def spend_something(gateway, key: dict) -> int:
    """One successful request so the key has spent something; returns its spent_nano."""
    ok(post(gateway, key["secret"], max_tokens=20))
    spent = gateway.admin.call("GET", f"/keys/{key['id']}")["spent_nano"]
    assert spent > 0
    return spent


# --- 1. states and transitions -------------------------------------------------------------


def _action(action):
    return lambda admin, key, spent: admin.call("POST", f"/keys/{key['id']}/{action}")


def _patch(**fields):
    def change(admin, key, spent):
        values = {k: (v(spent) if callable(v) else v) for k, v in fields.items()}
        return admin.call("PATCH", f"/keys/{key['id']}", values)
    return change


TRANSITIONS = [
    # (id, change into the state, state, change back)
    ("disable-then-enable", _action("disable"), "disabled", _action("enable")),
    ("expired-then-later-date", _patch(expires_on="2020-01-01", force=True), "expired", _patch(expires_on="2999-12-31")),
    ("expired-then-cleared", _patch(expires_on="2020-01-01", force=True), "expired", _patch(expires_on=None)),
    ("used-up-then-raised", _patch(spend_limit_nano=lambda s: s), "used_up",
     _patch(spend_limit_nano=lambda s: s + 10**9)),
    ("used-up-then-cleared", _patch(spend_limit_nano=lambda s: s), "used_up", _patch(spend_limit_nano=None)),
]


@pytest.mark.parametrize("into, state, back", [row[1:] for row in TRANSITIONS], ids=[row[0] for row in TRANSITIONS])
def test_transition_refuses_then_works_on_the_very_next_request(gateway, into, state, back):
    admin = gateway.admin
    account, key = new_key(gateway)
    spent = spend_something(gateway, key)
    assert into(admin, key, spent)["state"] == state
    assert key_state(admin, key["id"]) == state
    with nothing_charged(admin, account["id"]):
        for path, model in ((CHAT, "gpt-4.1-mini"), (MESSAGES, "claude-haiku-4-5"), (RESPONSES, "gpt-4.1-mini")):
            r = post(gateway, key["secret"], model, path=path)
            refused(r, 401, "", "Invalid token")
            assert without_request_id(r) == INVALID_TOKEN
    assert back(admin, key, spent)["state"] == "enabled"
    assert key_state(admin, key["id"]) == "enabled"
    ok(post(gateway, key["secret"], max_tokens=20))  # the very next request, no cache to expire


REVOKE_FROM = [
    ("enabled", None),
    ("disabled", _action("disable")),
    ("expired", _patch(expires_on="2020-01-01", force=True)),
    ("used_up", _patch(spend_limit_nano=lambda s: s)),
]


@pytest.mark.parametrize("state, into", REVOKE_FROM, ids=[r[0] for r in REVOKE_FROM])
def test_revoke_is_permanent_from_every_state(gateway, state, into):
    admin = gateway.admin
    account, key = new_key(gateway)
    spent = spend_something(gateway, key)
    if into is not None:
        into(admin, key, spent)
    assert key_state(admin, key["id"]) == state
    assert admin.call("POST", f"/keys/{key['id']}/revoke")["state"] == "deleted"
    with nothing_charged(admin, account["id"]):
        assert without_request_id(post(gateway, key["secret"])) == INVALID_TOKEN
        # no way back: enable, a later date, a raised limit are all refused with a clear error
        for method, path, doc in (("POST", "enable", None), ("PATCH", "", {"expires_on": None}),
                                  ("PATCH", "", {"spend_limit_nano": None}), ("POST", "disable", None)):
            error = admin.call(method, f"/keys/{key['id']}" + (f"/{path}" if path else ""), doc, expect=409)
            assert error["error"]["code"] == "key_deleted"
            assert "revoked" in error["error"]["message"]
        assert without_request_id(post(gateway, key["secret"])) == INVALID_TOKEN
    assert admin.call("POST", f"/keys/{key['id']}/revoke")["state"] == "deleted"  # revoking twice is harmless
    assert key_state(admin, key["id"]) == "deleted"


def test_every_cause_of_401_has_the_same_body(gateway):
    admin = gateway.admin
    account, key = new_key(gateway)
    causes, bodies = {}, {}
    for state, into in REVOKE_FROM[1:] + [("deleted", _action("revoke"))]:
        _, k = new_key(gateway)
        into(admin, k, 0)  # nothing spent: a limit of 0 is already used up
        causes[state] = k["secret"]
    with nothing_charged(admin, account["id"]):
        bodies["missing"] = post(gateway, None)
        bodies["mistyped"] = post(gateway, key["secret"][:-1] + ("A" if key["secret"][-1] != "A" else "B"))
        bodies["not-bearer"] = post(gateway, None, headers={"authorization": f"Basic {key['secret']}"})
        bodies["empty-bearer"] = post(gateway, None, headers={"authorization": "Bearer"})
        # x-api-key is read only on /v1/messages and /v1/models
        bodies["x-api-key-on-chat"] = post(gateway, None, headers={"x-api-key": key["secret"]})
        for state, secret in causes.items():
            bodies[state] = post(gateway, secret)
            bodies[f"{state}-messages-x-api-key"] = post(gateway, None, "claude-haiku-4-5", path=MESSAGES,
                                                         headers={"x-api-key": secret})
            bodies[f"{state}-models"] = gateway_get_models(gateway, secret)
    for cause, response in bodies.items():
        assert response.status_code == 401, cause
        assert without_request_id(response) == INVALID_TOKEN, cause
    # the key itself works, with or without its sk- prefix, in either header where read
    ok(post(gateway, key["secret"][3:], max_tokens=20))
    ok(post(gateway, None, "claude-haiku-4-5", path=MESSAGES, headers={"x-api-key": key["secret"]}))


@pytest.mark.slow  # a dozen gatewayctl processes
def test_gatewayctl_change_takes_effect_on_the_next_request(gateway):
    account, key = new_key(gateway)
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
    hello = dict(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    sdk.chat.completions.create(**hello)
    steps = [
        (("key", "disable", key["id"]), "disabled", False),
        (("key", "enable", key["id"]), "enabled", True),
        (("key", "update", key["id"], "--expires", "2020-01-01", "--force"), "expired", False),
        (("key", "update", key["id"], "--no-expiry"), "enabled", True),
        (("key", "update", key["id"], "--spend-limit", "0"), "used_up", False),
        (("key", "update", key["id"], "--no-spend-limit"), "enabled", True),
        (("key", "revoke", key["id"]), "deleted", False),
    ]
    for args, state, works in steps:
        run = ctl(gateway, *args, "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["state"] == state
        if args[1] in ("update", "revoke"):  # what `key show` prints, after a date, a limit, a revoke
            shown = ctl(gateway, "key", "show", key["id"], "--json")
            assert json.loads(shown.stdout)["state"] == state
        if works:
            sdk.chat.completions.create(**hello)
        else:
            with nothing_charged(gateway.admin, account["id"]), pytest.raises(openai.AuthenticationError) as e:
                sdk.chat.completions.create(**hello)
            assert e.value.status_code == 401 and e.value.code == ""
    run = ctl(gateway, "key", "enable", key["id"])
    assert run.returncode == 1 and "revoked" in one_line(run.stderr)


# --- 2. expiry: end of the day in the account's zone --------------------------------------


def date_over_in_kiritimati_not_in_pago_pago(now: dt.datetime) -> dt.date:
    """A date whose end has passed at UTC+14 and not at UTC-11, whatever the time of day.

    The end of day X is X 10:00 UTC in Kiritimati and X+1 11:00 UTC in Pago Pago: a
    25-hour window. Today (UTC) is in it from 10:00, yesterday until 11:00.
    """
    today = now.date()
    return today if now.hour >= 10 else today - dt.timedelta(days=1)


def test_expiry_follows_the_account_time_zone(gateway):
    admin = gateway.admin
    email = unique_email("zone")
    run = ctl(gateway, "account", "create", email, "--timezone", "Pacific/Kiritimati", "--json")
    assert run.returncode == 0, run.stderr
    account = json.loads(run.stdout)
    assert account["timezone"] == "Pacific/Kiritimati"
    admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano("10")})
    day = date_over_in_kiritimati_not_in_pago_pago(dt.datetime.now(dt.timezone.utc))
    # over in the account's zone: refused as a likely mistake (issue 32) unless forced
    assert admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "expires_on": day.isoformat()},
                      expect=400)["error"]["code"] == "expiry_in_past"
    key = admin.key(account["id"], expires_on=day.isoformat(), force=True)
    # the same date, local "today" in each zone: still alive there
    today_k = dt.datetime.now(ZoneInfo("Pacific/Kiritimati")).date() + dt.timedelta(days=1)
    alive = admin.key(account["id"], name="alive", expires_on=today_k.isoformat())
    assert key_state(admin, key["id"]) == "expired"
    assert key_state(admin, alive["id"]) == "enabled"
    with nothing_charged(admin, account["id"]):
        refused(post(gateway, key["secret"]), 401, "", "Invalid token")
    ok(post(gateway, alive["secret"], max_tokens=20))

    updated = admin.call("PATCH", f"/accounts/{account['id']}", {"timezone": "Pacific/Pago_Pago"})
    assert updated["timezone"] == "Pacific/Pago_Pago"
    assert key_state(admin, key["id"]) == "enabled"
    ok(post(gateway, key["secret"], max_tokens=20))

    run = ctl(gateway, "account", "update", account["id"], "--timezone", "Pacific/Kiritimati", "--json")
    assert run.returncode == 0, run.stderr
    assert key_state(admin, key["id"]) == "expired"
    with nothing_charged(admin, account["id"]):
        refused(post(gateway, key["secret"]), 401, "", "Invalid token")


@pytest.mark.parametrize("doc, message", [
    ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"timezone": ""}, "timezone must be an IANA zone name"),
])
def test_unknown_time_zone_is_refused(gateway, doc, message):
    account = gateway.admin.account(unique_email("zone"), paid_usd=None)
    error = gateway.admin.call("PATCH", f"/accounts/{account['id']}", doc, expect=400)
    assert error["error"]["message"].startswith(message)
    assert gateway.admin.call("GET", f"/accounts/{account['id']}")["timezone"] == "UTC"


@pytest.mark.parametrize("value", ["2026-02-30", "tomorrow", "2026/01/01", "20260101", 20260101, "2026-1-1"])
def test_bad_expiry_date_is_refused(gateway, value):
    account = gateway.admin.account(unique_email("date"), paid_usd=None)
    error = gateway.admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "expires_on": value},
                               expect=400)
    assert error["error"]["message"].startswith("expires_on must be a date YYYY-MM-DD")


# --- 3. spend limit ----------------------------------------------------------------------


def test_spend_limit_below_the_estimate_is_403_and_the_key_stays_enabled(gateway):
    admin = gateway.admin
    # gpt-4.1-mini with no max_tokens holds 32768 output tokens x 1600 nano = $0.052; the limit is $0.01
    account, key = new_key(gateway, spend_limit_nano=usd_to_nano("0.01"))
    rows = [
        (CHAT, "gpt-4.1-mini", {}),
        (CHAT, "gpt-4.1-mini", {"max_tokens": 100_000}),
        (RESPONSES, "gpt-4.1-mini", {}),
        (MESSAGES, "claude-haiku-4-5", {"max_tokens": 64_000}),
    ]
    for path, model, extra in rows:
        with nothing_charged(admin, account["id"]):
            error = refused(post(gateway, key["secret"], model, path=path, **extra), 403,
                            "pre_consume_token_quota_failed", "token quota is not enough")
            assert "$0.010000" in error["message"]  # what remains is told
        assert key_state(admin, key["id"]) == "enabled"
    ok(post(gateway, key["secret"], max_tokens=50))  # a smaller max_tokens lowers the hold
    shown = admin.call("GET", f"/keys/{key['id']}")
    assert shown["state"] == "enabled" and 0 < shown["spent_nano"] < shown["spend_limit_nano"]


def test_spend_limit_fully_spent_is_used_up_401(gateway):
    admin = gateway.admin
    account, key = new_key(gateway)
    spent = spend_something(gateway, key)
    admin.call("PATCH", f"/keys/{key['id']}", {"spend_limit_nano": spent + 1})
    assert key_state(admin, key["id"]) == "enabled"
    with nothing_charged(admin, account["id"]):  # 1 nano left: less than any estimate
        refused(post(gateway, key["secret"], max_tokens=1), 403, "pre_consume_token_quota_failed",
                "token quota is not enough")
    admin.call("PATCH", f"/keys/{key['id']}", {"spend_limit_nano": spent})
    assert key_state(admin, key["id"]) == "used_up"
    with nothing_charged(admin, account["id"]):
        refused(post(gateway, key["secret"], max_tokens=1), 401, "", "Invalid token")


def test_account_balance_applies_on_top_of_the_key_limit(gateway):
    admin = gateway.admin
    account = admin.account(unique_email("balance"), paid_usd="3")
    key = admin.key(account["id"], spend_limit_nano=usd_to_nano("100"))
    with nothing_charged(admin, account["id"]):
        # gpt-4.1 output is $8/M: 8 choices of 32,768 tokens (its maximum) hold $2.10, plus the
        # input; 16 choices hold $4.19, more than the $3 the account holds
        refused(post(gateway, key["secret"], "gpt-4.1", max_tokens=32768, n=16), 403, "insufficient_user_quota",
                "user quota is not enough")
    assert key_state(admin, key["id"]) == "enabled"
    ok(post(gateway, key["secret"], "gpt-4.1", max_tokens=20))


@pytest.mark.parametrize("value", [-1, 1.5, "10", True])
def test_bad_spend_limit_is_refused(gateway, value):
    account = gateway.admin.account(unique_email("limit"), paid_usd=None)
    error = gateway.admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "spend_limit_nano": value},
                               expect=400)
    assert error["error"]["message"].startswith("spend_limit_nano must be a non-negative integer")


# --- 4. model list -----------------------------------------------------------------------

MODEL_LIST_ROWS = [
    (CHAT, "gpt-4.1-nano"),
    (CHAT, "claude-sonnet-4-5"),  # a dual-format model through the chat endpoint
    (MESSAGES, "claude-sonnet-4-5"),
    (RESPONSES, "gpt-4.1"),
    (EMBEDDINGS, "text-embedding-3-small"),
    (CHAT, "no-such-model"),  # the list is checked before availability
    (CHAT, "o3-pro"),  # ... and before the price
]


def test_model_list_refuses_other_models_and_lists_only_its_own(gateway):
    admin = gateway.admin
    account, key = new_key(gateway, models=["gpt-4.1-mini", "claude-haiku-4-5"])
    assert admin.call("GET", f"/keys/{key['id']}")["models"] == ["claude-haiku-4-5", "gpt-4.1-mini"]
    with nothing_charged(admin, account["id"]):
        for path, model in MODEL_LIST_ROWS:
            error = refused(post(gateway, key["secret"], model, path=path), 403, "",
                            "This token has no access to model")
            assert model in error["message"]
    ok(post(gateway, key["secret"], "gpt-4.1-mini", max_tokens=20))
    ok(post(gateway, key["secret"], "claude-haiku-4-5", path=MESSAGES))
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
    assert sorted(m.id for m in sdk.models.list()) == ["claude-haiku-4-5", "gpt-4.1-mini"]
    with pytest.raises(openai.PermissionDeniedError) as e:
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 403 and e.value.code == ""
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key["secret"], max_retries=0)
    assert sorted(m.id for m in claude.models.list()) == ["claude-haiku-4-5", "gpt-4.1-mini"]
    refused(gateway_get_models_one(gateway, key["secret"], "gpt-4.1-nano"), 404, "model_not_found", "The model")
    # the list can be changed and cleared: the next request sees it
    admin.call("PATCH", f"/keys/{key['id']}", {"models": ["gpt-4.1-nano"]})
    ok(post(gateway, key["secret"], "gpt-4.1-nano", max_tokens=20))
    refused(post(gateway, key["secret"], "gpt-4.1-mini"), 403, "", "This token has no access to model")
    admin.call("PATCH", f"/keys/{key['id']}", {"models": None})
    ok(post(gateway, key["secret"], "gpt-4.1-mini", max_tokens=20))
    assert len(sdk.models.list().data) > 2


@pytest.mark.parametrize("models, message", [
    ([], "models must be a non-empty list"),
    (["gpt-4.1-mini", "nope"], "no model 'nope' in the catalogue"),
    ("gpt-4.1-mini", "models must be a non-empty list"),
    ([1], "models must be a non-empty list"),
])
def test_bad_model_list_is_refused(gateway, models, message):
    account = gateway.admin.account(unique_email("models"), paid_usd=None)
    error = gateway.admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "models": models},
                               expect=400)
    assert error["error"]["message"].startswith(message)


# --- 5. IP allowlist (the session gateway trusts no proxy; the peer is 127.0.0.1) ----------

IP_ROWS = [
    (["127.0.0.1"], True),
    (["127.0.0.0/8"], True),
    (["10.0.0.1", "127.0.0.1/32"], True),
    (["0.0.0.0/0"], True),
    (["10.0.0.0/8"], False),
    (["127.0.0.2"], False),
    (["::1"], False),  # the peer is IPv4
    (["2001:db8::/32", "192.0.2.0/24"], False),
]


@pytest.mark.parametrize("allow, allowed", IP_ROWS, ids=[",".join(r[0]) for r in IP_ROWS])
def test_ip_allowlist(gateway, allow, allowed):
    account, key = new_key(gateway, allow_ips=allow)
    if allowed:
        ok(post(gateway, key["secret"], max_tokens=20))
        return
    with nothing_charged(gateway.admin, account["id"]):
        refused(post(gateway, key["secret"]), 403, "access_denied", "Your IP 127.0.0.1 is not allowed")
        # a spoofed X-Forwarded-For from an untrusted peer changes nothing
        spoof = allow[0].split("/")[0]
        refused(post(gateway, key["secret"], headers={"x-forwarded-for": spoof}), 403, "access_denied",
                        "Your IP 127.0.0.1 is not allowed")
    assert key_state(gateway.admin, key["id"]) == "enabled"
    # widening the list lets the very next request through
    gateway.admin.call("PATCH", f"/keys/{key['id']}", {"allow_ips": [*allow, "127.0.0.1"]})
    ok(post(gateway, key["secret"], max_tokens=20))
    gateway.admin.call("PATCH", f"/keys/{key['id']}", {"allow_ips": allow})
    refused(post(gateway, key["secret"]), 403, "access_denied", "Your IP")
    gateway.admin.call("PATCH", f"/keys/{key['id']}", {"allow_ips": None})
    ok(post(gateway, key["secret"], max_tokens=20))


def test_ip_allowlist_is_checked_on_models_listing_too(gateway):
    account, key = new_key(gateway, allow_ips=["10.0.0.0/8"])
    refused(gateway_get_models(gateway, key["secret"]), 403, "access_denied", "Your IP 127.0.0.1 is not allowed")


BAD_IPS = ["999.1.1.1", "10.0.0.0/33", "2001:db8::/129", "example.com", "10.0.0.1-10.0.0.9", "", "1.2.3"]


@pytest.mark.parametrize("entry", BAD_IPS)
def test_bad_ip_entry_is_refused_by_the_admin_api(gateway, entry):
    admin = gateway.admin
    account = admin.account(unique_email("ip"), paid_usd=None)
    error = admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "allow_ips": ["10.0.0.1", entry]},
                       expect=400)
    assert error["error"]["message"] == f"allow_ips: {entry!r} is not an IP address or CIDR range"
    assert admin.call("GET", f"/accounts/{account['id']}/keys")["data"] == []
    key = admin.key(account["id"], allow_ips=["10.0.0.1"])
    error = admin.call("PATCH", f"/keys/{key['id']}", {"allow_ips": [entry]}, expect=400)
    assert entry in error["error"]["message"]
    assert admin.call("GET", f"/keys/{key['id']}")["allow_ips"] == ["10.0.0.1/32"]


def test_empty_ip_list_is_refused_not_taken_as_any(gateway):
    account = gateway.admin.account(unique_email("ip"), paid_usd=None)
    error = gateway.admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "k", "allow_ips": []}, expect=400)
    assert error["error"]["message"].startswith("allow_ips must be a non-empty list")


@pytest.mark.parametrize("entry", ["bad", "10.0.0.0/33", "::g"])
def test_bad_ip_entry_is_refused_by_gatewayctl(gateway, entry):
    account = gateway.admin.account(unique_email("ip"), paid_usd=None)
    run = ctl(gateway, "key", "create", account["id"], "--name", "k", "--allow-ip", "10.0.0.1", "--allow-ip", entry)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"'{entry}' is not an IP address or CIDR network" in one_line(run.stderr)
    assert gateway.admin.call("GET", f"/accounts/{account['id']}/keys")["data"] == []
    run = ctl(gateway, "key", "create", account["id"], "--name", "k", "--allow-ip", "10.0.0.0/8",
              "--allow-ip", "2001:db8::1", "--json")
    assert run.returncode == 0, run.stderr
    key = json.loads(run.stdout)
    assert key["allow_ips"] == ["10.0.0.0/8", "2001:db8::1/128"]
    run = ctl(gateway, "key", "update", key["id"], "--allow-ip", entry)
    assert run.returncode == 2 and f"'{entry}' is not an IP address or CIDR network" in one_line(run.stderr)
    assert gateway.admin.call("GET", f"/keys/{key['id']}")["allow_ips"] == ["10.0.0.0/8", "2001:db8::1/128"]


@pytest.mark.parametrize("day, state", [("9999-12-31", "enabled"), ("0001-01-01", "expired")])
def test_extreme_expiry_dates(gateway, day, state):
    """The last and first dates a key can carry: no 500 (9999-12-31 was an OverflowError after the write)."""
    admin = gateway.admin
    account = admin.account(unique_email("extreme"), timezone="Pacific/Kiritimati")
    past = state == "expired"  # a day already past is refused unless forced (issue 32), a 400 not a 500
    if past:
        refused_doc = admin.call("POST", f"/accounts/{account['id']}/keys", {"name": "t", "expires_on": day},
                                 expect=400)
        assert refused_doc["error"]["code"] == "expiry_in_past", refused_doc
    key = admin.key(account["id"], expires_on=day, force=past)
    assert (key["expires_on"], key["state"]) == (day, state)
    other = admin.key(account["id"], name="patched")
    assert admin.call("PATCH", f"/keys/{other['id']}", {"expires_on": day, "force": past})["state"] == state
    admin.call("PATCH", f"/accounts/{account['id']}", {"timezone": "Pacific/Pago_Pago"})
    for k in (key, other):
        assert key_state(admin, k["id"]) == state
        r = post(gateway, k["secret"], max_tokens=20)
        if state == "enabled":
            ok(r)
        else:
            refused(r, 401, "", "Invalid token")
