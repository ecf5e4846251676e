"""Stripe webhooks on two instances sharing PostgreSQL: deliveries racing on both credit once,
and a kill -9 after the payment row is committed but before the webhook's answer loses
nothing and, on Stripe's retry, credits nothing more."""

from __future__ import annotations

import threading
import time

import httpx
import psycopg
import pytest

from gatewayd.money import usd_to_nano
from tests import pg
from tests.console_helpers import ConsoleClient, account_with_password
from tests.faults import gatewayctl_audit
from tests.live import Daemon, unique_email
from tests.pgproxy import Proxy
from tests.stripe_fake import event
from tests.stripe_helpers import STRIPE_ENV, deliver_event, fake_fixture, nonce_of, stripe_section  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not pg.available(), reason="PostgreSQL is not running")]


@pytest.fixture(scope="module")
def database():
    name, url = pg.create_database()
    yield name, url
    pg.drop_database(name)


@pytest.fixture(scope="module")
def proxy():
    proxy = Proxy()
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def pair(sim, fake, database, proxy, tmp_path_factory):
    """Instance a reaches the database through the proxy (for the crash), b directly."""
    name, url = database
    through_proxy = url.replace(":5432/", f":{proxy.port}/")
    a = Daemon(tmp_path_factory.mktemp("card-a"), sim.url, extra=stripe_section(fake),
               env={**STRIPE_ENV, "GATEWAY_DATABASE_URL": through_proxy})
    b = Daemon(tmp_path_factory.mktemp("card-b"), sim.url, extra=stripe_section(fake),
               env={**STRIPE_ENV, "GATEWAY_DATABASE_URL": url})
    yield a, b
    for d in (a, b):
        d.stop()


def _paid_session(daemon, fake) -> tuple[dict, dict]:
    email = unique_email("card-pg")
    account = account_with_password(daemon.admin, email, paid_usd="10")
    console = ConsoleClient(daemon.url)
    console.sign_in(email)
    page = console.get("/console/balance").text
    answer = console.post("/console/balance/funds", {"amount": "40", "nonce": nonce_of(page)},
                          token_from="/console/balance")
    assert answer.status_code == 303, answer.text
    console.close()
    return account, fake.pay(answer.headers["location"].rsplit("/", 1)[1])


def _card_rows(url: str, session_id: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM payments WHERE source = 'card' AND reference = %s",
                            (session_id,)).fetchone()[0]


def test_deliveries_racing_on_two_instances_credit_once(pair, fake):
    a, b = pair
    account, session = _paid_session(a, fake)
    doc = event("checkout.session.completed", session)
    answers: list[httpx.Response] = []
    barrier = threading.Barrier(12)

    def send(daemon) -> None:
        barrier.wait()
        answers.append(deliver_event(daemon.url, doc))

    threads = [threading.Thread(target=send, args=(a if i % 2 else b,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [x.status_code for x in answers] == [200] * 12
    assert sum(x.json()["entries"][0]["recorded"] for x in answers) == 1
    for daemon in (a, b):
        assert daemon.admin.balance(account["id"])["balance_nano"] == usd_to_nano("50")
        code, report = gatewayctl_audit(daemon.socket)
        assert code == 0 and report["ok"], report


def test_a_kill_9_between_the_commit_and_the_answer_loses_nothing_and_the_retry_adds_nothing(
        pair, fake, proxy, database):
    a, b = pair
    _, url = database
    account, session = _paid_session(a, fake)
    doc = event("checkout.session.completed", session)
    proxy.hold_commit_after(session["id"].encode())
    answered: list = []
    delivery = threading.Thread(target=lambda: answered.append(_try_deliver(a.url, doc)))
    delivery.start()
    deadline = time.monotonic() + 20
    while _card_rows(url, session["id"]) == 0:  # committed in the database...
        assert time.monotonic() < deadline, "the payment row was never committed"
        time.sleep(0.02)
    assert not answered  # ... and Stripe has no answer yet
    a.proc.kill()  # kill -9
    a.proc.wait()
    delivery.join(30)
    assert answered and not isinstance(answered[0], httpx.Response), answered  # no 2xx ever reached Stripe
    a.admin.close()
    a.start()
    # Stripe retries (to either instance): 2xx, nothing recorded again
    for daemon in (a, b):
        retry = deliver_event(daemon.url, doc)
        assert retry.status_code == 200 and retry.json()["entries"][0]["recorded"] is False, retry.text
    assert _card_rows(url, session["id"]) == 1
    assert a.admin.balance(account["id"])["balance_nano"] == usd_to_nano("50")
    code, report = gatewayctl_audit(a.socket)
    assert code == 0 and report["ok"], report


def _try_deliver(url: str, doc: dict):
    try:
        return deliver_event(url, doc)
    except httpx.HTTPError as e:  # the daemon died mid-request: what Stripe sees as no answer
        return e


def test_a_store_outage_answers_503_and_stripe_retry_credits_once(pair, fake, proxy, database):
    a, _ = pair
    _, url = database
    account, session = _paid_session(a, fake)
    doc = event("checkout.session.completed", session)
    proxy.cut()  # instance a's database goes away
    try:
        outage = deliver_event(a.url, doc)
    finally:
        proxy.restore()
    assert outage.status_code == 503 and outage.json()["error"]["code"] == "store_unavailable", outage.text
    assert _card_rows(url, session["id"]) == 0
    deadline = time.monotonic() + 30
    while (retry := deliver_event(a.url, doc)).status_code == 503:  # the pool reconnects
        assert time.monotonic() < deadline, retry.text
        time.sleep(0.5)
    assert retry.status_code == 200 and retry.json()["entries"][0]["recorded"] is True
    assert _card_rows(url, session["id"]) == 1
    assert a.admin.balance(account["id"])["balance_nano"] == usd_to_nano("50")
