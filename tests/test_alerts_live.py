"""Alerts end to end (issue 22): a real gatewayd, a real SMTP server and a webhook receiver on
loopback that verifies every signature. A crossing is delivered once on each channel; a failing
receiver is retried with backoff until it answers; an alert written before a kill -9 is
delivered once after the restart; two instances on one PostgreSQL database deliver each alert
once between them."""

from __future__ import annotations

import signal

import httpx
import pytest

from gatewayd.money import usd_to_nano
from tests import pg
from tests.alert_receivers import SmtpSink, WebhookSink, alerts_config
from tests.faults import wait_until
from tests.faults import gatewayctl_audit
from tests.live import Daemon, postgres_ready, unique_email

pytestmark = pytest.mark.slow

SECRET = "whsec-test-0123456789"
ENV = {"ALERT_SECRET": SECRET}
SERVER = "models_visible_after_paid = 0\n"


@pytest.fixture(scope="module")
def sinks():
    smtp, webhook = SmtpSink(), WebhookSink(SECRET.encode())
    yield smtp, webhook
    smtp.stop()
    webhook.stop()


@pytest.fixture(scope="module")
def daemon(sim, sinks, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("alerts"), sim.url, server=SERVER, extra=alerts_config(*sinks), env=ENV)
    yield d
    code, report = gatewayctl_audit(d.socket)
    d.stop()
    assert code == 0, report


def chat(daemon: Daemon, secret: str) -> None:
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
    response = httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=30,
                          headers={"authorization": f"Bearer {secret}"})
    assert response.status_code == 200, response.text


def of(account_id: str, kind: str):
    return lambda doc: doc["account"]["id"] == account_id and doc["type"] == kind


def test_the_balance_crossing_its_threshold_is_emailed_and_posted_once(daemon, sinks):
    smtp, webhook = sinks
    email = unique_email("low")
    account = daemon.admin.account(email, paid_usd="10")
    key = daemon.admin.key(account["id"])
    # the threshold sits at the balance: the next charge crosses it, the one after is already below
    updated = daemon.admin.call("PATCH", f"/accounts/{account['id']}", {"alert_below_nano": account["balance_nano"]})
    assert updated["alert_below_nano"] == account["balance_nano"]
    chat(daemon, key["secret"])
    chat(daemon, key["secret"])
    [doc] = wait_until(lambda: webhook.delivered(of(account["id"], "balance.below")), what="the webhook", timeout=15)
    mails = wait_until(lambda: [m for m in smtp.to(email) if m["Subject"].startswith("Balance below")],
                       what="the email", timeout=15)
    assert doc["threshold_nano"] == account["balance_nano"] and doc["amount_nano"] < doc["threshold_nano"]
    assert doc["account"]["email"] == email and "below the alert threshold" in doc["message"]
    assert mails[0]["X-Gatewayd-Alert-Id"] == str(doc["id"])
    chat(daemon, key["secret"])
    # the payment alerts arrive after the crossing: waiting for one proves nothing else was queued before
    daemon.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano("1")})
    wait_until(lambda: webhook.delivered(lambda d: of(account["id"], "payment.received")(d)
                                         and d["amount_nano"] == usd_to_nano("1")),
               what="the payment alert", timeout=15)
    wait_until(lambda: [m for m in smtp.to(email) if m["Subject"] == "Payment received: $1.00"],
               what="the payment email", timeout=15)
    assert len(webhook.delivered(of(account["id"], "balance.below"))) == 1
    assert len([m for m in smtp.to(email) if m["Subject"].startswith("Balance below")]) == 1


def test_a_bad_threshold_is_refused_with_400(daemon):
    account = daemon.admin.account(unique_email("bad"), paid_usd=None)
    for bad in (-1, "5", 1.5, True):
        error = daemon.admin.call("PATCH", f"/accounts/{account['id']}", {"alert_below_nano": bad}, expect=400)
        assert "alert_below_nano" in error["error"]["message"]


def test_a_failing_webhook_is_retried_with_backoff_and_the_email_is_not_sent_twice(daemon, sinks):
    smtp, webhook = sinks
    email = unique_email("retry")
    account = daemon.admin.account(email, paid_usd=None)
    with webhook.lock:
        webhook.fail_next = 2
    daemon.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano("3")})
    [doc] = wait_until(lambda: webhook.delivered(of(account["id"], "payment.received")),
                       what="the third attempt", timeout=15)
    with webhook.lock:
        tries = [a for a in webhook.attempts if a["id"] == doc["id"]]
    assert [a["status"] for a in tries] == [500, 500, 200]
    assert len([m for m in smtp.to(email) if "received" in m["Subject"]]) == 1
    daemon.output.wait_for(rf"alert {doc['id']}: webhook delivery failed \(attempt 2\)", 5, daemon.proc)
    daemon.output.wait_for(rf"alert {doc['id']}: delivered by webhook \(attempt 3\)", 5, daemon.proc)
    metrics = httpx.get(daemon.url + "/metrics").text
    assert 'gateway_alert_deliveries_total{channel="webhook",outcome="failed"}' in metrics


def test_an_alert_written_before_a_kill_is_delivered_once_after_the_restart(sim, tmp_path):
    webhook = WebhookSink(SECRET.encode())
    try:
        d = Daemon(tmp_path, sim.url, server=SERVER, env=ENV)  # no [alerts]: nothing is delivered yet
        account = d.admin.account(unique_email("restart"), paid_usd="2")
        d.stop(signal.SIGKILL)
        d.config.write_text(d.config.read_text() + alerts_config(None, webhook))
        d.start()
        [doc] = wait_until(lambda: webhook.delivered(of(account["id"], "payment.received")),
                           what="the delivery", timeout=15)
        assert doc["amount_nano"] == usd_to_nano("2") and doc["payment_source"] == "operator"
        d.stop()  # a clean stop, then a restart: nothing is sent again
        d.start()
        d.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": usd_to_nano("1")})
        wait_until(lambda: len(webhook.delivered(of(account["id"], "payment.received"))) == 2,
                   what="the second payment", timeout=15)
        assert [x["amount_nano"] for x in webhook.delivered(of(account["id"], "payment.received"))] == [
            usd_to_nano("2"), usd_to_nano("1")]
        d.stop()
    finally:
        webhook.stop()


@pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)")
def test_two_instances_on_postgres_deliver_each_alert_once(sim, tmp_path_factory):
    name, url = pg.create_database()
    webhook = WebhookSink(SECRET.encode())
    env = {**ENV, "GATEWAY_DATABASE_URL": url}
    extra = alerts_config(None, webhook, poll_s=0.02)
    pair = [Daemon(tmp_path_factory.mktemp(f"pg-{n}"), sim.url, server=SERVER, extra=extra, env=env) for n in "ab"]
    try:
        account = pair[0].admin.account(unique_email("pair"), paid_usd=None)
        # the other instance learns of the account from the change feed
        wait_until(lambda: pair[1].admin.http.get(f"/admin/v1/accounts/{account['id']}").status_code == 200,
                 what="the account on the second instance", timeout=15)
        for i in range(30):
            pair[i % 2].admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": i + 1})
        wait_until(lambda: len({d["id"] for d in webhook.delivered(of(account["id"], "payment.received"))}) == 30,
                 what="thirty alerts", timeout=15)
        for d in pair:
            d.stop()
        ids = [d["id"] for d in webhook.delivered(of(account["id"], "payment.received"))]
        assert sorted(ids) == sorted(set(ids)), "an alert was delivered twice"
        assert sorted(d["amount_nano"] for d in webhook.delivered(of(account["id"], "payment.received"))) == list(
            range(1, 31))
    finally:
        for d in pair:
            d.stop()
        webhook.stop()
        pg.drop_database(name)


def test_the_console_balance_page_shows_and_sets_the_alert_threshold(daemon):
    from tests.console_helpers import ConsoleClient, account_with_password

    email = unique_email("console")
    account = account_with_password(daemon.admin, email)
    client = ConsoleClient(daemon.url)
    try:
        assert client.sign_in(email).status_code == 302
        assert "No alert is set" in client.get("/console/balance").text
        saved = client.post("/console/balance/alert", {"alert_below": "5.50"}, token_from="/console/balance")
        assert saved.status_code == 302
        assert daemon.admin.call("GET", f"/accounts/{account['id']}")["alert_below_nano"] == usd_to_nano("5.5")
        page = client.get("/console/balance").text
        assert 'value="5.50"' in page and "falls below $5.50" in page
        for bad in ("-1", "five", "1e400"):
            refused = client.post("/console/balance/alert", {"alert_below": bad}, token_from="/console/balance")
            assert refused.status_code == 400 and 'id="alert-error"' in refused.text and f'value="{bad}"' in refused.text
        assert daemon.admin.call("GET", f"/accounts/{account['id']}")["alert_below_nano"] == usd_to_nano("5.5")
        cleared = client.post("/console/balance/alert", {"alert_below": ""}, token_from="/console/balance")
        assert cleared.status_code == 302
        assert daemon.admin.call("GET", f"/accounts/{account['id']}")["alert_below_nano"] is None
        # without the form's token nothing changes
        forged = client.http.post("/console/balance/alert", data={"alert_below": "9"})
        assert forged.status_code == 400
        assert daemon.admin.call("GET", f"/accounts/{account['id']}")["alert_below_nano"] is None
    finally:
        client.close()


def test_gatewayctl_sets_and_removes_the_threshold(daemon):
    import json
    import subprocess

    from tests.live import BIN

    account = daemon.admin.account(unique_email("ctl"), paid_usd=None)

    def ctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "gatewayctl"), "account", "update", account["id"], *args, "--json",
                               "--socket", daemon.socket], capture_output=True, text=True, timeout=30)

    done = ctl("--alert-below", "2.50")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["alert_below_nano"] == usd_to_nano("2.5")
    assert json.loads(ctl("--alert-below", "none").stdout)["alert_below_nano"] is None
    ctl("--alert-below", "1")
    assert json.loads(ctl("--no-alert-below").stdout)["alert_below_nano"] is None
    refused = ctl("--alert-below", "-3")
    assert refused.returncode == 2 and "negative" in refused.stderr
