"""The console attacked as issue 20 found it, against the real daemon over loopback.

Sign-in: twenty concurrent wrong passwords for one email get five checks between them (on
one instance, and on two instances sharing one PostgreSQL database); a client behind a
trusted proxy cannot pick its throttle address with an X-Forwarded-For line of its own.
Sign-out: an anonymous visitor's writes nothing. Usage: out-of-range dates are a 400 page
(and a 400 before any CSV byte). Passwords: a hash made with the old scrypt parameters
still signs in and is replaced with today's. TLS: HSTS on every response.

"Checked" is what the answer says: a wrong password that was compared is a 400 "Wrong email
or password", an attempt refused before any comparison is a 429. Every loop here is bounded
(at most 20 requests, 60 s) and stays on 127.0.0.1.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest
import trustme

from gatewayd.passwords import N, hash_password
from tests.console_helpers import PASSWORD, ConsoleClient, account_with_password, csrf_of
from tests.faults import LIVENESS_S
from tests.live import Daemon, postgres_ready, unique_email

WRONG = "not the password at all"


def rows(daemon: Daemon, sql: str, args: tuple = ()) -> list[tuple]:
    """Read the daemon's own database (SQLite file, or its PostgreSQL database)."""
    url = daemon.env.get("GATEWAY_DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(sql.replace("?", "%s"), args).fetchall()
    with sqlite3.connect(f"file:{daemon.workdir / 'data' / 'gateway.db'}?mode=ro", uri=True) as conn:
        return conn.execute(sql, args).fetchall()


def concurrent_sign_ins(urls: list[str], email: str, password: str, count: int,
                        headers: dict | None = None) -> list[int]:
    """``count`` sign-ins released together (spread over ``urls``), each with its own session
    and CSRF token: their status codes."""
    clients = [ConsoleClient(urls[i % len(urls)], headers=headers or {}) for i in range(count)]
    tokens = [c.csrf() for c in clients]
    start = threading.Barrier(count)
    statuses: list[int] = [0] * count

    def attempt(i: int) -> None:
        start.wait(timeout=30)
        statuses[i] = clients[i].http.post(
            "/console/signin", data={"email": email, "password": password, "csrf_token": tokens[i]}).status_code

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIVENESS_S)
    assert not any(t.is_alive() for t in threads), "a sign-in never got its answer"
    for c in clients:
        c.close()
    return statuses


def test_twenty_concurrent_wrong_passwords_get_five_checks(gateway):
    email = unique_email("race")
    account_with_password(gateway.admin, email)
    statuses = concurrent_sign_ins([gateway.url], email, WRONG, 20)
    assert statuses.count(400) == 5 and statuses.count(429) == 15, statuses
    # the right password is refused too now: the lockout is the email's, not the guess's
    late = ConsoleClient(gateway.url)
    assert late.sign_in(email).status_code == 429
    late.close()


@pytest.mark.slow
@pytest.mark.skipif(not postgres_ready(), reason="two instances need PostgreSQL on 127.0.0.1:5432")
def test_two_instances_on_one_database_share_the_count(sim, tmp_path):
    from tests import pg

    name, url = pg.create_database()
    daemons = [Daemon(tmp_path / f"d{i}", sim.url, env={"GATEWAY_DATABASE_URL": url}) for i in range(2)]
    try:
        email = unique_email("race2")
        account_with_password(daemons[0].admin, email)
        time.sleep(0.5)  # the other instance learns of the account through the change feed
        statuses = concurrent_sign_ins([d.url for d in daemons], email, WRONG, 20)
        assert statuses.count(400) == 5 and statuses.count(429) == 15, statuses
    finally:
        for d in daemons:
            d.stop()
        pg.drop_database(name)


@pytest.fixture(scope="module")
def behind_proxy(sim, tmp_path_factory):
    """A daemon that believes X-Forwarded-For from 127.0.0.1 (the test plays the proxy)."""
    daemon = Daemon(tmp_path_factory.mktemp("gw-proxied"), sim.url, server='trusted_proxies = ["127.0.0.1/32"]\n')
    yield daemon
    daemon.stop()


def test_a_forwarded_for_line_of_the_clients_own_does_not_pick_its_address(behind_proxy):
    """The proxy appends its own X-Forwarded-For line (the real client, 10.7.7.7) after the
    client's (anything it likes): the address is the right-most one, as for the API."""
    email = unique_email("xff")
    account_with_password(behind_proxy.admin, email)

    def attempt(claimed: str, real: str) -> int:
        client = ConsoleClient(behind_proxy.url)
        token = client.csrf()
        headers = [("x-forwarded-for", claimed), ("x-forwarded-for", real)]
        status = client.http.post("/console/signin", headers=headers,
                                  data={"email": email, "password": WRONG, "csrf_token": token}).status_code
        client.close()
        return status

    statuses = [attempt(f"192.0.2.{i}", "10.7.7.7") for i in range(6)]
    assert statuses == [400] * 5 + [429], statuses  # the email at 10.7.7.7: five, whatever it claimed
    assert attempt("192.0.2.99", "10.7.7.8") == 400  # another real client of the same email: its own count


def test_anonymous_sign_out_writes_nothing_and_a_real_one_writes_its_row(gateway):
    before = rows(gateway, "SELECT count(*) FROM ended_sessions")[0][0]
    for _ in range(20):
        visitor = ConsoleClient(gateway.url)
        assert visitor.post("/console/signout", {}, token_from="/console/signin").status_code == 302
        visitor.close()
    assert rows(gateway, "SELECT count(*) FROM ended_sessions")[0][0] == before
    email = unique_email("signout")
    account_with_password(gateway.admin, email)
    client = ConsoleClient(gateway.url)
    assert client.sign_in(email).status_code == 302
    assert client.post("/console/signout", {}).status_code == 302
    assert rows(gateway, "SELECT count(*) FROM ended_sessions")[0][0] == before + 1
    client.close()


def test_out_of_range_dates_are_a_400_page_and_no_broken_csv(gateway):
    email = unique_email("dates")
    account_with_password(gateway.admin, email, timezone="Pacific/Kiritimati")  # UTC+14: 0001-01-01 has no UTC start
    client = ConsoleClient(gateway.url)
    assert client.sign_in(email).status_code == 302
    for query in ("to=9999-12-31", "from=0001-01-01", "from=9999-12-31&to=9999-12-31", "to=0001-01-01"):
        page = client.get(f"/console/usage?{query}")
        assert page.status_code == 400, (query, page.status_code)
        assert "must be a date between 1970-01-01 and 9998-12-31" in page.text, query
        export = client.get(f"/console/usage.csv?{query}")
        assert export.status_code == 400 and "must be a date between" in export.text, (query, export.text[:200])
    assert client.get("/console/usage?from=2020-01-01&to=9998-12-31").status_code == 200
    assert client.get("/console/usage.csv?to=9998-12-31").status_code == 200
    client.close()


@pytest.mark.slow
def test_an_old_parameter_hash_signs_in_and_is_upgraded(sim, tmp_path):
    daemon = Daemon(tmp_path / "d", sim.url)
    try:
        email = unique_email("oldhash")
        account = account_with_password(daemon.admin, email)
        daemon.stop()
        old = hash_password(PASSWORD, n=2**14)  # what gatewayd stored before issue 20
        if daemon.env.get("GATEWAY_DATABASE_URL"):
            rows(daemon, "UPDATE accounts SET password_hash = ? WHERE id = ? RETURNING id", (old, account["id"]))
        else:
            with sqlite3.connect(daemon.workdir / "data" / "gateway.db") as conn:
                conn.execute("UPDATE accounts SET password_hash = ? WHERE id = ?", (old, account["id"]))
        daemon.start()
        client = ConsoleClient(daemon.url)
        assert client.sign_in(email, "a wrong password").status_code == 400
        assert rows(daemon, "SELECT password_hash FROM accounts WHERE id = ?", (account["id"],))[0][0] == old
        assert client.sign_in(email).status_code == 302
        assert client.get("/console/keys").status_code == 200  # the session carries the new hash's fingerprint
        stored = rows(daemon, "SELECT password_hash FROM accounts WHERE id = ?", (account["id"],))[0][0]
        assert stored.startswith(f"scrypt${N}$8$1$") and stored != old
        assert "password hash upgraded" in daemon.output.text
        other = ConsoleClient(daemon.url)
        assert other.sign_in(email).status_code == 302  # the upgraded hash verifies
        client.close()
        other.close()
    finally:
        daemon.stop()


@pytest.mark.slow
def test_hsts_on_every_response_under_tls_and_not_on_plain_http(tmp_path, sim, gateway):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_pem, key_pem, ca_pem = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    daemon = Daemon(tmp_path / "d", sim.url, args=["--tls-cert", str(cert_pem), "--tls-key", str(key_pem)])
    try:
        with httpx.Client(base_url=daemon.url, verify=str(ca_pem), timeout=30) as http:
            for method, path in (("GET", "/healthz"), ("GET", "/console/signin"), ("GET", "/v1/models"),
                                 ("POST", "/v1/chat/completions"), ("GET", "/nowhere")):
                response = http.request(method, path)
                assert response.headers.get("strict-transport-security") == "max-age=31536000", (path, response)
                if path == "/console/signin":
                    assert "Secure" in response.headers["set-cookie"]
    finally:
        daemon.stop()
    plain = httpx.get(gateway.url + "/console/signin", timeout=30)
    assert "strict-transport-security" not in plain.headers
    assert csrf_of(plain.text)
