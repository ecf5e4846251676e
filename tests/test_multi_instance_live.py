"""Two real gatewayd processes on one PostgreSQL database (a fresh one per module, dropped after).

Every rule of the spec must hold whichever instance a request reaches: keys made or changed
on one apply on the other within a second (measured and printed), holds never admit more
than the balance or a key's limit across both, a per-model rate limit counts across both,
a console session opened on one is valid on the other, and kill -9 of one mid-stream leaves
the other serving and the money exact. ``gatewayctl audit`` holds after each.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import httpx
import pytest

from gatewayd.console.formatting import usd_html
from tests import pg
from tests.faults import LIVENESS_S, gatewayctl_audit
from tests.live import Daemon, postgres_ready, unique_email

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not postgres_ready(), reason="no PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)"),
]

LIMITED = """
[[models]]
id = "limited-mini"
provider = "openai"
upstream_id = "gpt-4.1-mini"
input_price = 0.40
output_price = 1.60
max_output_tokens = 1000
rate_limit = { requests = 2, minutes = 1 }
"""
SERVER = "models_visible_after_paid = 0\n"


@pytest.fixture(scope="module")
def database():
    name, url = pg.create_database()
    yield url
    pg.drop_database(name)


@pytest.fixture(scope="module")
def pair(sim, database, tmp_path_factory):
    env = {"GATEWAY_DATABASE_URL": database}
    a = Daemon(tmp_path_factory.mktemp("inst-a"), sim.url, server=SERVER, extra=LIMITED, env=env)
    b = Daemon(tmp_path_factory.mktemp("inst-b"), sim.url, server=SERVER, extra=LIMITED, env=env)
    yield a, b
    for d in (a, b):
        d.stop()


def chat(daemon: Daemon, secret: str, text: str = "hi", *, model: str = "gpt-4.1-mini", **extra) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 20, **extra}
    return httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {secret}"})


def until(check, what: str) -> float:
    """Seconds until ``check()`` is true (polled as fast as a request allows), printed; fails only
    if it never comes (``LIVENESS_S``): how fast it comes depends on how busy the machine is, so
    it is reported, not asserted."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < LIVENESS_S, f"{what}: never reached the other instance"
        time.sleep(0.01)
    took = time.monotonic() - start
    print(f"propagation: {what} in {took * 1000:.0f} ms")
    return took


def audit_holds(*daemons: Daemon) -> None:
    for d in daemons:
        code, report = gatewayctl_audit(d.socket)
        assert code == 0 and report["ok"] is True, report


def status(daemon: Daemon, secret: str, **kw) -> int:
    return chat(daemon, secret, **kw).status_code


def listing(daemon: Daemon, secret: str) -> tuple[int, list[str]]:
    """GET /v1/models with the key: (status, model ids). A cheap probe that holds and charges
    nothing, so the time measured is the change's, not a chat request's on a loaded machine."""
    r = httpx.get(daemon.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}, timeout=30)
    return r.status_code, [m["id"] for m in r.json()["data"]] if r.status_code == 200 else []


def known(daemon: Daemon, secret: str) -> bool:
    """The key works on ``daemon`` (a model listing: nothing held or charged)."""
    return httpx.get(daemon.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}, timeout=30).status_code == 200


# -- keys and accounts changed on one, applied on the other --------------------------------------


def test_key_made_on_one_works_on_the_other(pair):
    a, b = pair
    account = a.admin.account(unique_email("multi"))
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "new key usable on the other instance")
    assert status(b, key["secret"]) == 200
    rows = b.admin.usage(account["id"])
    assert len(rows) == 1 and rows[0]["key_id"] == key["id"]
    audit_holds(a, b)


def test_disable_enable_revoke_apply_on_the_other_within_a_second(pair):
    a, b = pair
    account = a.admin.account(unique_email("multi"))
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "new key")
    a.admin.call("POST", f"/keys/{key['id']}/disable")
    until(lambda: listing(b, key["secret"])[0] == 401, "disable")
    assert status(b, key["secret"]) == 401
    b.admin.call("POST", f"/keys/{key['id']}/enable")  # and the other way round
    until(lambda: listing(a, key["secret"])[0] == 200, "enable")
    assert status(a, key["secret"]) == 200
    a.admin.call("PATCH", f"/keys/{key['id']}", {"models": ["gpt-4.1"]})
    until(lambda: listing(b, key["secret"])[1] == ["gpt-4.1"], "model list edit")
    assert status(b, key["secret"]) == 403
    a.admin.call("PATCH", f"/keys/{key['id']}", {"models": None})
    until(lambda: len(listing(b, key["secret"])[1]) > 1, "model list cleared")
    assert status(b, key["secret"]) == 200
    a.admin.call("POST", f"/keys/{key['id']}/revoke")
    until(lambda: listing(b, key["secret"])[0] == 401, "revoke")
    assert status(b, key["secret"]) == 401
    assert b.admin.call("GET", f"/keys/{key['id']}")["state"] == "deleted"
    audit_holds(a, b)


def test_payment_and_groups_apply_on_the_other(pair):
    a, b = pair
    account = a.admin.account(unique_email("multi"), paid_usd=None)
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "new key, no balance")
    assert status(b, key["secret"]) == 403
    a.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 5_000_000_000})
    until(lambda: status(b, key["secret"]) == 200, "payment (a hold the database takes)")
    assert b.admin.balance(account["id"])["total_paid_nano"] == 5_000_000_000
    pinned = a.admin.key(account["id"], name="pinned", group="default")
    until(lambda: known(b, pinned["secret"]), "pinned key")
    assert status(b, pinned["secret"]) == 200
    a.admin.call("PUT", f"/accounts/{account['id']}/groups", {"groups": []})
    until(lambda: listing(b, pinned["secret"]) == (200, []), "group removed from the account")
    assert status(b, pinned["secret"]) == 403
    audit_holds(a, b)


# -- money: holds taken by the database -----------------------------------------------------------

HOLDING = "[[sim:fault=delay_ms:1500]] hold me"  # each admitted request holds for 1.5 s
ESTIMATE_APPROX = 1000 * 1600  # max_tokens 1000 of gpt-4.1-mini output; the prompt adds a few thousand


def _storm(pair, secret: str, sample) -> tuple[list[int], list[int]]:
    """40 requests released together, alternating instances; the balance is sampled meanwhile."""
    a, b = pair
    statuses = [0] * 40
    barrier = threading.Barrier(40)
    samples: list[int] = []
    done = threading.Event()

    def one(i: int) -> None:
        d = (a, b)[i % 2]
        with httpx.Client(timeout=60) as http:
            barrier.wait()
            r = http.post(d.url + "/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                          json={"model": "gpt-4.1-mini", "max_tokens": 1000,
                                "messages": [{"role": "user", "content": HOLDING}]})
            statuses[i] = r.status_code

    def watch() -> None:
        while not done.is_set():
            samples.append(sample())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    watcher.join()
    return statuses, samples


def test_forty_requests_over_both_admit_at_most_eight_estimates(pair):
    a, b = pair
    account = a.admin.account(unique_email("storm"), paid_usd=None)
    paid = ESTIMATE_APPROX * 17 // 2  # 8.5 estimates: 8 fit, a 9th does not
    a.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": paid})
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "key on b")
    statuses, samples = _storm(pair, key["secret"], lambda: b.admin.balance(account["id"])["balance_nano"])
    admitted = statuses.count(200)
    print(f"storm: {admitted} admitted of 40 over two instances; balance min sample {min(samples)}")
    assert set(statuses) <= {200, 403}, statuses
    assert 1 <= admitted <= 8, statuses
    assert min(samples) >= 0
    rows = a.admin.usage(account["id"], limit=100)
    assert len(rows) == admitted and all(r["status"] == "ok" for r in rows)
    balance = a.admin.balance(account["id"])
    assert balance["held_nano"] == 0
    assert balance["balance_nano"] == paid - sum(r["cost_nano"] for r in rows) >= 0
    audit_holds(a, b)


def test_forty_requests_over_both_respect_a_key_spend_limit(pair):
    a, b = pair
    account = a.admin.account(unique_email("storm-key"), paid_usd="100")
    limit = ESTIMATE_APPROX * 17 // 2
    key = a.admin.key(account["id"], spend_limit_nano=limit)
    until(lambda: known(b, key["secret"]), "key on b")
    spent_before = a.admin.call("GET", f"/keys/{key['id']}")["spent_nano"]
    statuses, samples = _storm(pair, key["secret"], lambda: b.admin.call("GET", f"/keys/{key['id']}")["spent_nano"])
    admitted = statuses.count(200)
    print(f"storm on a key limit: {admitted} admitted of 40 over two instances")
    assert set(statuses) <= {200, 403}, statuses
    assert 1 <= admitted <= 8, statuses
    key_now = a.admin.call("GET", f"/keys/{key['id']}")
    assert max(samples) <= limit and key_now["spent_nano"] <= limit
    rows = a.admin.usage(account["id"], limit=100)
    assert key_now["spent_nano"] == spent_before + sum(r["cost_nano"] for r in rows[:admitted])
    audit_holds(a, b)


def test_a_key_used_up_through_one_is_the_same_401_on_the_other(pair):
    """A charge above its hold (within the tolerance the audit allows) used the key's limit up
    through a; charges do not notify, so b's cache still has the old spend. b's hold is
    refused by the database, and the answer is the spec's 401 for a used-up key, not the 403
    of a limit merely short."""
    a, b = pair
    account = a.admin.account(unique_email("used-up"), paid_usd="10")
    # the provider counts the prompt as N tokens (its tokenizer), the same body every time
    text = "lorem " * 600 + "[[sim:words=0]] [[sim:input_tokens={n:06d}]]"
    probe = a.admin.key(account["id"], name="probe")
    assert chat(a, probe["secret"], text.format(n=1), max_tokens=1).status_code == 200
    [row] = a.admin.usage(account["id"])
    hold = row["hold_nano"]
    # a prompt counted 5% above what was held: a charge within the audit's 10% tolerance
    n = hold * 105 // 100 // 400  # gpt-4.1-mini input: 400 nano a token
    key = a.admin.key(account["id"], spend_limit_nano=hold)
    until(lambda: known(b, key["secret"]), "key on b")
    assert chat(a, key["secret"], text.format(n=n), max_tokens=1).status_code == 200
    spent = a.admin.call("GET", f"/keys/{key['id']}")["spent_nano"]
    assert spent > key["spend_limit_nano"]
    for daemon in (a, b):
        answer = chat(daemon, key["secret"], "again")
        assert answer.status_code == 401, (daemon.url, answer.text)
        assert answer.json()["error"]["message"].startswith("Invalid token")
    audit_holds(a, b)


# -- a per-model rate limit counts across both ------------------------------------------------------


def test_rate_limit_counts_across_instances(pair):
    a, b = pair
    account = a.admin.account(unique_email("limited"))
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "key on b")
    statuses = [status((a, b)[i % 2], key["secret"], model="limited-mini") for i in range(8)]
    assert statuses.count(200) == 2 and statuses.count(429) == 6, statuses
    audit_holds(a, b)


# -- console ---------------------------------------------------------------------------------------


def test_console_session_opened_on_one_works_on_the_other(pair):
    """Signed in on a, the cookie works on b; signed out on b, it no longer works on a."""
    a, b = pair
    email = unique_email("console")
    a.admin.call("POST", "/accounts", {"email": email, "password": "correct horse battery"})

    def csrf(page: httpx.Response) -> str:
        return re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)

    with httpx.Client(base_url=a.url, follow_redirects=False, timeout=30) as on_a:
        form = {"email": email, "password": "correct horse battery", "csrf_token": csrf(on_a.get("/console/signin"))}
        signed_in = on_a.post("/console/signin", data=form)
        assert signed_in.status_code in (302, 303), signed_in.text
        with httpx.Client(base_url=b.url, follow_redirects=False, cookies=on_a.cookies, timeout=30) as on_b:
            keys_page = on_b.get("/console/keys")
            assert keys_page.status_code == 200 and email in keys_page.text
            signed_out = on_b.post("/console/signout", data={"csrf_token": csrf(keys_page)})
            assert signed_out.status_code in (302, 303)
        # the same cookie, replayed on a after signing out on b
        after = on_a.get("/console/keys")
        assert after.status_code in (302, 303) and "/console/signin" in after.headers["location"]
    audit_holds(a, b)


def test_console_key_made_on_one_is_revealed_on_the_other_and_money_is_fresh(pair):
    """Behind a balancer the redirect after creating a key lands anywhere: the other instance
    shows the secret once (it travels in the session cookie, not in one process's memory),
    and a charge made through one instance shows on the other's console pages at once."""
    a, b = pair
    email = unique_email("reveal")
    account = a.admin.call("POST", "/accounts", {"email": email, "password": "correct horse battery"})
    a.admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 10 * 10**9})

    def csrf(page: httpx.Response) -> str:
        return re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)

    with httpx.Client(base_url=a.url, follow_redirects=False, timeout=30) as on_a:
        form = {"email": email, "password": "correct horse battery", "csrf_token": csrf(on_a.get("/console/signin"))}
        assert on_a.post("/console/signin", data=form).status_code in (302, 303)
        created = on_a.post("/console/keys/new", data={"name": "made on a", "model_scope": "all",
                                                       "csrf_token": csrf(on_a.get("/console/keys/new"))})
        assert created.status_code in (302, 303), created.text
        with httpx.Client(base_url=b.url, follow_redirects=False, cookies=on_a.cookies, timeout=30) as on_b:
            shown = on_b.get(created.headers["location"])
            assert shown.status_code == 200, shown.text
            secret = re.search(r'id="secret" class="mono" value="(sk-[^"]+)"', shown.text).group(1)
            on_b.cookies.update(shown.cookies)
            again = on_b.get(created.headers["location"])  # shown once
            assert again.status_code == 200 and secret not in again.text
            def shown_balance() -> str:
                return re.search(r'id="balance">(.*?)</p>', on_b.get("/console/balance").text).group(1)

            assert shown_balance() == usd_html(10 * 10**9)
            assert chat(a, secret, "spend a little").status_code == 200  # charged through a
            balance = a.admin.call("GET", f"/accounts/{account['id']}/balance")["balance_nano"]
            assert balance < 10 * 10**9
            assert shown_balance() == usd_html(balance), "b's console shows a stale balance"
            [key] = a.admin.call("GET", f"/accounts/{account['id']}/keys")["data"]
            assert key["spent_nano"] > 0
            assert usd_html(key["spent_nano"]) in on_b.get("/console/keys").text, "b's key list shows a stale spend"
    audit_holds(a, b)


# -- kill -9 of one, mid-stream ----------------------------------------------------------------------


def test_kill_one_mid_stream_the_other_keeps_streaming(pair):
    a, b = pair
    account = a.admin.account(unique_email("crash"))
    key = a.admin.key(account["id"])
    until(lambda: known(b, key["secret"]), "key on b")
    slow = {"model": "gpt-4.1-mini", "stream": True, "max_tokens": 400,
            "messages": [{"role": "user", "content": "[[sim:words=60]] [[sim:fault=chunk_delay_ms:50]]"}]}
    results: dict[str, object] = {}

    def stream(name: str, d: Daemon) -> None:
        try:
            with httpx.Client(timeout=60) as http:
                with http.stream("POST", d.url + "/v1/chat/completions", json=slow,
                                 headers={"authorization": f"Bearer {key['secret']}"}) as r:
                    results[name] = r.read()
        except httpx.HTTPError as e:
            results[name] = e

    threads = {n: threading.Thread(target=stream, args=(n, d)) for n, d in (("a", a), ("b", b))}
    for t in threads.values():
        t.start()
    time.sleep(1.0)  # both are streaming now (60 words at 50 ms each take 3 s)
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    for t in threads.values():
        t.join(60)
    assert isinstance(results["b"], bytes) and results["b"].rstrip().endswith(b"data: [DONE]")
    assert not (isinstance(results["a"], bytes) and results["a"].rstrip().endswith(b"data: [DONE]"))
    assert status(b, key["secret"]) == 200  # b keeps serving
    # a's hold is released by b once a's heartbeat has stopped
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b.admin.balance(account["id"])["held_nano"] == 0:
            break
        time.sleep(0.5)
    rows = b.admin.usage(account["id"])
    statuses = sorted(r["status"] for r in rows)
    assert b.admin.balance(account["id"])["held_nano"] == 0, rows
    # silence is no proof of death (a partition looks the same): a's hold is charged provisionally
    assert statuses.count("unsettled") == 1 and statuses.count("ok") == 2, statuses  # b's stream, the request after
    assert len({r["request_id"] for r in rows}) == len(rows)  # nothing recorded (or charged) twice
    [lost] = [r for r in rows if r["status"] == "unsettled"]
    assert lost["cost_nano"] > 0
    audit_holds(b)
    a.start()  # a restarts on the same database (and data dir) and serves again
    # its slot says its previous life is certainly dead: the provisional charge is refunded
    [lost] = [r for r in b.admin.usage(account["id"]) if r["request_id"] == lost["request_id"]]
    assert (lost["status"], lost["cost_nano"]) == ("interrupted", 0)
    assert status(a, key["secret"]) == 200
    audit_holds(a, b)
