"""docs/deploy/nginx.conf, run by Debian's nginx in front of gatewayd.

Two instances on one PostgreSQL database (one instance on SQLite where PostgreSQL is not
available) plus an upstream that is down. What the example config must give: requests
spread over the instances, SSE streams passed through as they come (the official SDK streams
through it), the client's address reaching key IP allowlists through X-Forwarded-For, and an
instance that is down (or killed) skipped without a request running twice.
"""

from __future__ import annotations

import json

import signal
import time

import httpx
import openai
import pytest
import trustme

from gatewayd.version import version
from tests.live import Daemon, Nginx, free_port, nginx_binary, postgres_ready, unique_email

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (.ci/run installs Debian's nginx)"),
]


@pytest.fixture(scope="module")
def instances(sim, tmp_path_factory):
    server = 'trusted_proxies = ["127.0.0.1/32"]\n'
    if not postgres_ready():
        daemon = Daemon(tmp_path_factory.mktemp("gw-nginx"), sim.url, server=server)
        yield [daemon]
        daemon.stop()
        return
    from tests import pg

    name, url = pg.create_database()
    daemons = [Daemon(tmp_path_factory.mktemp(f"gw-nginx-{i}"), sim.url, server=server,
                      env={"GATEWAY_DATABASE_URL": url}) for i in range(2)]
    yield daemons
    for d in daemons:
        d.stop()
    pg.drop_database(name)


@pytest.fixture(scope="module")
def behind_nginx(instances, tmp_path_factory):
    dead = f"127.0.0.1:{free_port()}"  # an instance that is down: nothing listens there
    nginx = Nginx(tmp_path_factory.mktemp("nginx"), [d.url.removeprefix("http://") for d in instances] + [dead])
    yield nginx, instances[0]
    nginx.stop()


def test_streams_pass_through_and_settle(behind_nginx):
    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"])
    client = openai.OpenAI(base_url=nginx.url + "/v1", api_key=key["secret"], max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "Count to twenty please"}], stream=True,
        stream_options={"include_usage": True}, max_tokens=200,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    rows = daemon.admin.usage(account["id"])
    assert len(rows) == 1 and rows[0]["status"] == "ok" and rows[0]["stream"] is True
    assert daemon.admin.audit()["ok"]


def test_a_responses_websocket_passes_through_nginx(behind_nginx):
    """The upgrade reaches gatewayd (docs/deploy/nginx.conf maps Upgrade through): a response
    over the socket, billed; a wrong key is refused at the handshake, through nginx too."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"])
    url = nginx.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {key['secret']}"}, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4.1-mini", "input": "hi [[sim:words=3]]"}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(ws.recv(timeout=30)))
    assert events[-1]["type"] == "response.completed"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers={"Authorization": "Bearer sk-wrong"}, open_timeout=10)
    assert refused.value.response.status_code == 401
    [row] = daemon.admin.usage(account["id"])
    assert row["status"] == "ok" and row["endpoint"] == "responses"
    assert daemon.admin.audit()["ok"]


def test_a_gemini_key_in_the_query_is_not_written_to_the_access_log(behind_nginx):
    """Issue 31: the documented config logged ``?key=`` (the Gemini API's key in the query)
    in its access log. Its log format leaves the query out: the request is logged, the key not."""
    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"])
    answer = httpx.post(f"{nginx.url}/v1beta/models/gemini-2.5-flash:countTokens?key={key['secret']}",
                        json={"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}, timeout=30)
    assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 5  # nginx writes the line once the response is sent
    while ":countTokens" not in (nginx.access_log.read_text() if nginx.access_log.exists() else ""):
        assert time.monotonic() < deadline, "the request was not logged"
        time.sleep(0.05)
    logged = nginx.access_log.read_text()
    assert "/v1beta/models/gemini-2.5-flash:countTokens" in logged and " 200 " in logged
    assert key["secret"] not in logged and "key=" not in logged


def test_instance_down_is_skipped(behind_nginx):
    """One of the two upstream servers refuses connections: every request still answers 200, once."""
    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"])
    with httpx.Client(base_url=nginx.url, timeout=30) as http:
        for _ in range(6):
            response = http.post("/v1/chat/completions", headers={"authorization": f"Bearer {key['secret']}"},
                                 json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 200, response.text
    assert len(daemon.admin.usage(account["id"])) == 6  # each request ran (and was charged) once


def test_allowlist_sees_the_client_not_nginx(behind_nginx):
    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"], allow_ips=["127.0.0.3/32"])
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {key['secret']}"}

    def post(local_address: str, extra: dict | None = None) -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=local_address)
        with httpx.Client(base_url=nginx.url, transport=transport, timeout=30) as http:
            return http.post("/v1/chat/completions", headers={**headers, **(extra or {})}, json=body)

    assert post("127.0.0.3").status_code == 200
    refused = post("127.0.0.4")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "access_denied"
    assert "Your IP 127.0.0.4 is not allowed" in refused.json()["error"]["message"]
    # a client claiming the allowed address in its own X-Forwarded-For is not believed
    # (127.0.0.1, nginx's own address, is the trusted proxy; clients come from elsewhere)
    spoofed = post("127.0.0.4", {"x-forwarded-for": "127.0.0.3"})
    assert spoofed.status_code == 403 and spoofed.json()["error"]["code"] == "access_denied"


@pytest.mark.skipif(not postgres_ready(), reason="two instances need PostgreSQL on 127.0.0.1:5432")
def test_requests_spread_over_instances_and_one_killed_is_skipped(behind_nginx, instances):
    """Both instances serve; after kill -9 of one, every request still answers 200 exactly once."""
    nginx, daemon = behind_nginx
    account = daemon.admin.account(unique_email())
    key = daemon.admin.key(account["id"])
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {key['secret']}"}
    with httpx.Client(base_url=nginx.url, timeout=30) as http:
        for _ in range(8):
            assert http.post("/v1/chat/completions", headers=headers, json=body).status_code == 200
        used = nginx.upstreams_used()
        for d in instances:
            assert any(d.url.removeprefix("http://") in u for u in used), (d.url, used)
        victim = instances[1]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        for _ in range(8):
            response = http.post("/v1/chat/completions", headers=headers, json=body)
            assert response.status_code == 200, response.text
    assert len(daemon.admin.usage(account["id"])) == 16
    assert daemon.admin.audit()["ok"]


def test_metrics_and_readyz_are_not_public_but_healthz_is(behind_nginx):
    nginx, daemon = behind_nginx
    with httpx.Client(base_url=nginx.url, timeout=30) as http:
        for path in ("/metrics", "/metrics?x=1", "/%6detrics", "/readyz"):
            assert http.get(path).status_code == 403, path
        for path in ("/metrics/", "/METRICS"):  # not the exact location: gatewayd has no such route
            assert http.get(path).status_code == 404, path
        assert http.get("/healthz").json() == {"ok": True, "version": version()}
    assert "gateway_requests_total" in httpx.get(f"{daemon.url}/metrics").text  # scraped on the instance itself


def test_console_cookie_is_secure_behind_tls_and_a_client_cannot_claim_tls(behind_nginx, instances, tmp_path):
    """nginx sets X-Forwarded-Proto to its own scheme: the console marks its cookie Secure behind
    `listen 443 ssl` (and HSTS is sent), and a client's own X-Forwarded-Proto is replaced."""
    nginx, _ = behind_nginx
    with httpx.Client(base_url=nginx.url, timeout=30, headers={"x-forwarded-proto": "https"}) as http:
        assert "Secure" not in http.get("/console/signin").headers["set-cookie"]
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_pem, key_pem, ca_pem = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_pem))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_pem), append=True)
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    tls = Nginx(tmp_path / "nginx-tls", [d.url.removeprefix("http://") for d in instances],
                tls=(str(cert_pem), str(key_pem)))
    try:
        with httpx.Client(base_url=tls.url, verify=str(ca_pem), timeout=30) as http:
            response = http.get("/console/signin")
            assert response.status_code == 200
            assert "Secure" in response.headers["set-cookie"]
            assert response.headers["strict-transport-security"] == "max-age=31536000"
    finally:
        tls.stop()
