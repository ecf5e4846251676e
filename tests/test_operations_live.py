"""Operations against a live daemon: the request log line, /metrics, /readyz, reload, check-config.

Each claim of docs/operations.md is checked the way an operator would see it: the JSON
lines on the daemon's stdout, the Prometheus text a scraper reads, the status a load
balancer gets, and the money in the usage rows after a catalogue reload.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gatewayd.version import version
from tests.live import BIN, Daemon, unique_email

MINI = (400, 1600)  # gpt-4.1-mini, nano-dollars per token (catalogue: 0.40 / 1.60 per 1M)


def nonce() -> str:
    return "n" + uuid.uuid4().hex[:12]


def funded(d: Daemon) -> tuple[dict, dict, str]:
    account = d.admin.account(unique_email("ops"))
    key = d.admin.key(account["id"])
    return account, key, key["secret"]


def log_lines(d: Daemon) -> list[dict]:
    out = []
    for line in d.output.lines:
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def request_line(d: Daemon, request_id: str, timeout: float = 5) -> dict:
    """The request's log line (written once the last byte has been sent: wait for it)."""
    deadline = time.monotonic() + timeout
    while True:
        for doc in log_lines(d):
            if doc.get("msg") == "request" and doc.get("request_id") == request_id:
                return doc
        assert time.monotonic() < deadline, f"no request line for {request_id}:\n{d.output.text[-3000:]}"
        time.sleep(0.05)


def row_of(d: Daemon, account_id: str, request_id: str) -> dict:
    deadline = time.monotonic() + 5
    while True:
        for row in d.admin.usage(account_id):
            if row["request_id"] == request_id:
                return row
        assert time.monotonic() < deadline, f"no usage row for {request_id}"
        time.sleep(0.05)


def chat(d: Daemon, secret: str, model: str, text: str, *, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{d.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}], "stream": stream},
                      timeout=30)


@pytest.fixture(scope="module")
def daemon(sim, tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("ops"), sim.url)
    yield d
    d.stop()


# -- the request log line --------------------------------------------------------------------


@pytest.mark.parametrize("model,route,stream", [
    ("gpt-4.1-mini", "openai/gpt-4.1-mini", False),
    ("claude-haiku-4-5", "anthropic/claude-haiku-4-5", True),
], ids=["passthrough", "translated-stream"])
def test_request_line_carries_every_field(daemon, model, route, stream):
    account, key, secret = funded(daemon)
    text = f"{nonce()} secret-prompt-words"
    response = chat(daemon, secret, model, text, stream=stream)
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    line = request_line(daemon, request_id)
    row = row_of(daemon, account["id"], request_id)
    assert line["level"] == "info" and line["logger"] == "gatewayd.request"
    assert (line["account_id"], line["key_id"], line["client"]) == (account["id"], key["id"], "127.0.0.1")
    assert (line["method"], line["path"], line["endpoint"]) == ("POST", "/v1/chat/completions", "chat")
    assert (line["model"], line["route"], line["stream"], line["status"]) == (model, route, stream, 200)
    assert line["provider"] == route.split("/")[0]
    assert line["usage_status"] == "ok"
    for field in ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nano"):
        assert line[field] == row[field], field
    assert line["cost_nano"] > 0
    assert 0 < line["upstream_ttfb_ms"] <= line["duration_ms"]
    assert 0 < line["first_byte_ms"] <= line["duration_ms"]
    raw = json.dumps(line)
    assert secret not in raw and secret.removeprefix("sk-") not in raw
    assert "secret-prompt-words" not in daemon.output.text, "a prompt reached the log"


def test_request_line_of_a_failed_request(daemon):
    account, key, secret = funded(daemon)
    response = chat(daemon, secret, "gpt-4.1-mini", f"{nonce()} [[sim:fault=status:429]]")
    assert response.status_code == 429
    line = request_line(daemon, response.headers["x-request-id"])
    assert (line["status"], line["usage_status"], line["cost_nano"]) == (429, "upstream_error", 0)
    assert (line["model"], line["key_id"]) == ("gpt-4.1-mini", key["id"])

    refused = httpx.post(f"{daemon.url}/v1/chat/completions", headers={"authorization": "Bearer sk-nope"},
                         json={"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "x"}]})
    assert refused.status_code == 401
    line = request_line(daemon, refused.headers["x-request-id"])
    assert (line["status"], line["account_id"], line["key_id"], line["usage_status"]) == (401, None, None, None)
    assert "sk-nope" not in json.dumps(line)


def test_start_up_is_logged_as_json(daemon):
    [start] = [doc for doc in log_lines(daemon) if doc.get("msg", "").startswith("gatewayd listening on")]
    assert start["listen"] == [daemon.url] and start["admin_socket"] == daemon.socket
    assert start["models"] >= 11 and start["database"].startswith("sqlite://")


# -- metrics -----------------------------------------------------------------------------------


def scrape(url: str) -> dict[tuple, float]:
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def moved(before: dict, after: dict) -> dict[tuple, float]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def test_metrics_move_by_exactly_what_a_request_adds(daemon):
    account, _, secret = funded(daemon)
    before = scrape(daemon.url)
    response = chat(daemon, secret, "gpt-4.1-mini", f"{nonce()} hello")
    assert response.status_code == 200
    row = row_of(daemon, account["id"], response.headers["x-request-id"])
    request_line(daemon, response.headers["x-request-id"])  # the request is finished
    delta = moved(before, scrape(daemon.url))
    labels = (("endpoint", "chat"), ("model", "gpt-4.1-mini"), ("provider", "openai"), ("status", "200"))
    assert delta.pop(("gateway_requests_total", labels)) == 1
    assert delta.pop(("gateway_tokens_total", (("kind", "input"), ("model", "gpt-4.1-mini")))) == row["input_tokens"]
    assert delta.pop(("gateway_tokens_total", (("kind", "output"), ("model", "gpt-4.1-mini")))) == row["output_tokens"]
    assert delta.pop(("gateway_cost_nano_total", (("model", "gpt-4.1-mini"),))) == row["cost_nano"]
    assert delta.pop(("gateway_request_duration_seconds_count", (("endpoint", "chat"), ("stream", "false")))) == 1
    assert delta.pop(("gateway_upstream_latency_seconds_count", (("provider", "openai"),))) == 1
    assert delta.pop(("gateway_store_write_seconds_count", ())) == 1
    # the first scrape itself, and the histograms' sums and buckets: nothing else moved
    assert delta.pop(("gateway_requests_total", (("endpoint", "ops"), ("model", ""), ("provider", ""),
                                                 ("status", "200")))) == 1
    # the route's health may move too: earlier tests here made it fail, and this success heals it
    route_up = ("gateway_route_up", (("route", "openai/gpt-4.1-mini"),))
    delta.pop(route_up, None)
    rest = {k: v for k, v in delta.items() if not k[0].endswith(("_sum", "_bucket"))}
    assert rest == {}, rest
    after = scrape(daemon.url)
    assert after[("gateway_holds_open", ())] == 0
    assert after[route_up] == 1


def test_open_streams_and_holds_are_gauges(daemon):
    _, _, secret = funded(daemon)
    with httpx.stream("POST", f"{daemon.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                      json={"model": "gpt-4.1-mini", "stream": True, "messages": [
                          {"role": "user", "content": f"{nonce()} [[sim:words=40]] [[sim:fault=chunk_delay_ms:100]]"}]},
                      timeout=30) as response:
        chunks = response.iter_raw()  # kept: a dropped iterator closes the connection
        next(chunks)
        during = scrape(daemon.url)
        assert during[("gateway_open_streams", ())] == 1
        assert during[("gateway_holds_open", ())] == 1 and during[("gateway_held_nano", ())] > 0
        for _ in chunks:
            pass
    time.sleep(0.2)
    after = scrape(daemon.url)
    assert after[("gateway_open_streams", ())] == 0 and after[("gateway_holds_open", ())] == 0


# -- health ------------------------------------------------------------------------------------


def test_healthz_and_readyz(daemon):
    assert httpx.get(f"{daemon.url}/healthz").json() == {"ok": True, "version": version()}
    ready = httpx.get(f"{daemon.url}/readyz")
    assert (ready.status_code, ready.json()) == (200, {"ready": True})


@pytest.mark.slow
def test_store_up_and_ready_are_right_from_start_up_without_a_readyz_poll(sim, tmp_path):
    d = Daemon(tmp_path, sim.url)
    try:
        first = scrape(d.url)  # nothing has asked /readyz
        assert first[("gateway_store_up", ())] == 1 and first[("gateway_ready", ())] == 1
    finally:
        d.stop()


@pytest.mark.slow
def test_readyz_is_503_while_draining_and_streams_finish(sim, tmp_path):
    d = Daemon(tmp_path, sim.url, server="drain_delay_s = 3\nshutdown_grace_s = 10\n")
    try:
        _, _, secret = funded(d)
        body = {"model": "gpt-4.1-mini", "stream": True, "messages": [
            {"role": "user", "content": f"{nonce()} [[sim:words=30]] [[sim:fault=chunk_delay_ms:100]]"}]}
        with httpx.stream("POST", f"{d.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                          json=body, timeout=30) as stream:
            chunks = stream.iter_raw()
            next(chunks)
            d.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            ready = httpx.get(f"{d.url}/readyz")
            assert ready.status_code == 503 and "draining" in ready.json()["reason"]
            assert httpx.get(f"{d.url}/healthz").status_code == 200
            text = b"".join(chunks)
        assert text.rstrip().endswith(b"data: [DONE]"), "the open stream was not let finish"
        assert d.proc.wait(20) == 0
        assert any(doc.get("msg") == "gatewayd stopped" for doc in log_lines(d))
    finally:
        d.stop()


def slow_stream(d: Daemon, secret: str, words: int = 30):
    body = {"model": "gpt-4.1-mini", "stream": True, "messages": [
        {"role": "user", "content": f"{nonce()} [[sim:words={words}]] [[sim:fault=chunk_delay_ms:100]]"}]}
    return httpx.stream("POST", f"{d.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                        json=body, timeout=30)


@pytest.mark.slow
def test_a_sighup_during_the_drain_is_ignored_and_the_stream_finishes(sim, tmp_path):
    d = Daemon(tmp_path, sim.url, server="shutdown_grace_s = 10\n")
    try:
        account, _, secret = funded(d)
        with slow_stream(d, secret) as stream:
            chunks = stream.iter_raw()
            next(chunks)
            d.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            d.proc.send_signal(signal.SIGHUP)
            text = b"".join(chunks)
            request_id = stream.headers["x-request-id"]
        assert text.rstrip().endswith(b"data: [DONE]"), text[-300:]
        assert d.proc.wait(20) == 0
        messages = [doc.get("msg") for doc in log_lines(d)]
        assert "gatewayd: SIGHUP ignored: shutting down" in messages and "gatewayd stopped" in messages
        d.start()
        assert not any("released" in line for line in d.output.lines), "a hold was left for the next start"
        assert row_of(d, account["id"], request_id)["status"] == "ok"
        assert d.admin.audit()["ok"]
    finally:
        d.stop()


@pytest.mark.slow
def test_a_second_sigterm_during_the_drain_cuts_the_streams_with_an_error_event(sim, tmp_path):
    d = Daemon(tmp_path, sim.url, server="shutdown_grace_s = 30\n")
    try:
        account, _, secret = funded(d)
        with slow_stream(d, secret, words=100) as stream:
            chunks = stream.iter_raw()
            next(chunks)
            d.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            d.proc.send_signal(signal.SIGTERM)
            text = b"".join(chunks).decode()  # ends: 100 words at its pace would outlast the test
            request_id = stream.headers["x-request-id"]
        last = json.loads(text.strip().split("\n\n")[-1].removeprefix("data: "))
        assert "shutting down" in last["error"]["message"]
        assert d.proc.wait(20) == 0
        messages = [doc.get("msg") for doc in log_lines(d)]
        assert "gatewayd: SIGTERM received again, cutting open streams now" in messages
        assert "gatewayd stopped" in messages
        d.start()
        row = row_of(d, account["id"], request_id)
        assert row["status"] == "shutdown" and row["output_tokens"] > 0
        assert d.admin.audit()["ok"]
    finally:
        d.stop()


@pytest.mark.slow
def test_metrics_listen_moves_the_ops_endpoints(sim, tmp_path):
    d = Daemon(tmp_path, sim.url, server='metrics_listen = "127.0.0.1:0"\n')
    try:
        [start] = [doc for doc in log_lines(d) if doc.get("msg", "").startswith("gatewayd listening on")]
        [ops_url] = start["metrics_listen"]
        for path in ("/metrics", "/healthz", "/readyz"):
            assert httpx.get(f"{d.url}{path}").status_code == 404, path
            assert httpx.get(f"{ops_url}{path}").status_code == 200, path
        assert "gateway_requests_total" in httpx.get(f"{ops_url}/metrics").text
    finally:
        d.stop()


# -- reload and check-config -------------------------------------------------------------------


def gatewayctl(d: Daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", d.socket], capture_output=True, text=True,
                          timeout=30)


def check_config(path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayd"), "check-config", str(path)], capture_output=True, text=True,
                          timeout=30)


def reprice(d: Daemon, old: str, new: str) -> None:
    text = d.config.read_text()
    assert old in text
    d.config.write_text(text.replace(old, new, 1))


MINI_PRICES = 'provider = "openai"\nfamily = "gpt"\ninput_price = 0.40\noutput_price = 1.60'  # gpt-4.1-mini's


@pytest.mark.slow
def test_reload_reprices_new_requests_and_bills_running_streams_at_the_old_price(sim, tmp_path):
    d = Daemon(tmp_path, sim.url)
    try:
        account, _, secret = funded(d)
        body = {"model": "gpt-4.1-mini", "stream": True, "messages": [
            {"role": "user", "content": f"{nonce()} [[sim:words=30]] [[sim:fault=chunk_delay_ms:60]]"}]}
        with httpx.stream("POST", f"{d.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                          json=body, timeout=30) as stream:
            chunks = stream.iter_raw()
            next(chunks)  # admitted and streaming at the old price
            reprice(d, MINI_PRICES, MINI_PRICES.replace("input_price = 0.40\noutput_price = 1.60",
                                                        "input_price = 4.00\noutput_price = 16.00"))
            assert check_config(d.config).returncode == 0
            done = gatewayctl(d, "reload", "--json")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["changed"] == ["gpt-4.1-mini"]
            after = chat(d, secret, "gpt-4.1-mini", f"{nonce()} after the reload")
            assert after.status_code == 200
            b"".join(chunks)
            streamed_id = stream.headers["x-request-id"]
        old_row = row_of(d, account["id"], streamed_id)
        new_row = row_of(d, account["id"], after.headers["x-request-id"])
        assert old_row["cost_nano"] == old_row["input_tokens"] * 400 + old_row["output_tokens"] * 1600
        assert new_row["cost_nano"] == new_row["input_tokens"] * 4000 + new_row["output_tokens"] * 16000
        assert d.admin.audit()["ok"]
        assert any(doc.get("msg") == "config reloaded" and doc.get("changed") == ["gpt-4.1-mini"]
                   for doc in log_lines(d))
    finally:
        d.stop()


def test_a_bad_reload_is_refused_with_the_start_up_line_and_the_old_config_stays(daemon):
    account, _, secret = funded(daemon)
    good = daemon.config.read_text()
    try:
        daemon.config.write_text(good.replace("input_price = 0.40", "input_price = 0.0001", 1))
        checked = check_config(daemon.config)
        assert checked.returncode == 2
        [line] = checked.stderr.strip().splitlines()
        assert line.startswith("gatewayd: config error: models[") and "more than three decimals" in line
        refused = gatewayctl(daemon, "reload")
        assert refused.returncode == 1
        assert refused.stderr.strip() == line
        daemon.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while sum(doc.get("msg", "").startswith("config reload refused") for doc in log_lines(daemon)) < 2:
            assert time.monotonic() < deadline, "SIGHUP with a bad file was not logged"
            time.sleep(0.05)
        assert [doc["error"] for doc in log_lines(daemon) if doc.get("msg", "").startswith("config reload refused")
                ][-1] == line
        response = chat(daemon, secret, "gpt-4.1-mini", f"{nonce()} still the old price")
        row = row_of(daemon, account["id"], response.headers["x-request-id"])
        assert row["cost_nano"] == row["input_tokens"] * MINI[0] + row["output_tokens"] * MINI[1]
        # a provider of the operator's own file whose key variable is unset (issue 32): refused the same way
        daemon.config.write_text(good.replace('api_key = "sim-provider-key"', 'api_key_env = "GATEWAYD_UNSET_TEST_KEY"', 1))
        refused = gatewayctl(daemon, "reload")
        assert refused.returncode == 1
        assert refused.stderr.strip() == ("gatewayd: config error: providers[0].api_key_env: the environment variable "
                                          "GATEWAYD_UNSET_TEST_KEY is not set (provider 'openai' would be called "
                                          "without a key)")
        response = chat(daemon, secret, "gpt-4.1-mini", f"{nonce()} still served")
        assert response.status_code == 200
    finally:
        daemon.config.write_text(good)


def refused_reloads(d: Daemon) -> list[str]:
    return [doc["error"] for doc in log_lines(d) if doc.get("msg", "").startswith("config reload refused")]


def test_a_reload_of_any_unreadable_file_is_refused_and_the_daemon_keeps_serving(daemon, tmp_path):
    _, _, secret = funded(daemon)
    path = daemon.config
    good = path.read_text()
    kept = tmp_path / "kept.toml"
    start = len(daemon.output.lines)

    def not_utf8():
        path.write_bytes(good.encode() + b"\n# caf\xe9\n")

    def infinite_ratio():
        path.write_text(good + "\n[[groups]]\nname = \"inf\"\nprice_ratio = inf\n")

    def directory():
        path.rename(kept)
        path.mkdir()

    def unreadable():  # root reads any mode: /proc/self/mem is unreadable from offset 0 for everyone
        path.rename(kept)
        path.symlink_to("/proc/self/mem")

    cases = [(not_utf8, "not UTF-8 text"), (infinite_ratio, "price_ratio: must be a finite number (got inf)"),
             (directory, "is a directory"), (unreadable, "cannot be read")]
    try:
        for make_bad, message in cases:
            make_bad()
            checked = check_config(path)
            assert checked.returncode == 2, checked.stderr
            [line] = checked.stderr.strip().splitlines()
            assert line.startswith(f"gatewayd: config error: {path}") or line.startswith("gatewayd: config error: groups")
            assert message in line, line
            refused = gatewayctl(daemon, "reload")
            assert (refused.returncode, refused.stderr.strip()) == (1, line)
            before = len(refused_reloads(daemon))
            daemon.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while len(refused_reloads(daemon)) == before:
                assert daemon.proc.poll() is None, f"SIGHUP killed the daemon:\n{daemon.output.text[-3000:]}"
                assert time.monotonic() < deadline, "SIGHUP with a bad file was not logged"
                time.sleep(0.05)
            assert refused_reloads(daemon)[-1] == line
            assert chat(daemon, secret, "gpt-4.1-mini", f"{nonce()} still serving").status_code == 200
            if path.is_symlink() or path.is_dir():
                path.unlink() if path.is_symlink() else path.rmdir()
                kept.rename(path)
            path.write_text(good)
        assert "Traceback" not in "".join(daemon.output.lines[start:])
    finally:
        if path.is_symlink():
            path.unlink()
        elif path.is_dir():
            path.rmdir()
        if kept.exists():
            kept.rename(path)
        path.write_text(good)


def test_check_config_matches_the_start_up_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nlisten = "127.0.0.1:0"\n[log]\nformat = "xml"\n')
    checked = check_config(bad)
    assert (checked.returncode, checked.stdout) == (2, "")
    started = subprocess.run([str(BIN / "gatewayd"), "serve", "--config", str(bad)], capture_output=True, text=True,
                             timeout=30)
    assert started.returncode == 2
    assert checked.stderr == started.stderr == "gatewayd: config error: log.format: must be one of json, text (got 'xml')\n"
    good = tmp_path / "good.toml"
    good.write_text('[server]\nlisten = "127.0.0.1:0"\n[log]\nformat = "text"\nlevel = "warning"\n')
    ok = check_config(good)
    assert ok.returncode == 0 and "config ok" in ok.stdout


# -- log format and level: file, environment, flag ------------------------------------------------


@pytest.mark.slow
def test_log_format_and_level_follow_flag_then_env_then_file(sim, tmp_path):
    # the file says json/warning; the environment says info; the flag says text: text at info
    d = Daemon(tmp_path / "text", sim.url, extra='\n[log]\nformat = "json"\nlevel = "warning"\n',
               args=["--log-format", "text"], env={"GATEWAY_LOG_LEVEL": "info"})
    try:
        _, key, secret = funded(d)
        response = chat(d, secret, "gpt-4.1-mini", f"{nonce()} hi")
        request_id = response.headers["x-request-id"]
        deadline = time.monotonic() + 5
        while not [line for line in d.output.lines if f"request_id={request_id}" in line]:
            assert time.monotonic() < deadline, d.output.text[-2000:]
            time.sleep(0.05)
        [line] = [line for line in d.output.lines if f"request_id={request_id}" in line]
        assert " INFO    request " in line and f"key_id={key['id']}" in line and "status=200" in line
        assert not log_lines(d), "a JSON line in text format"
        # a path that decodes to a newline cannot forge a second line
        forged = "2020-01-01T00:00:00.000Z ERROR   forged"
        injected = httpx.get(f"{d.url}/v1/x%0A{forged.replace(' ', '%20')}")
        assert injected.status_code == 404
        deadline = time.monotonic() + 5
        while not [line for line in d.output.lines if f"request_id={injected.headers['x-request-id']}" in line]:
            assert time.monotonic() < deadline, d.output.text[-2000:]
            time.sleep(0.05)
        assert not [line for line in d.output.lines if line.startswith(forged)], d.output.text[-2000:]
        [line] = [line for line in d.output.lines if f"request_id={injected.headers['x-request-id']}" in line]
        assert f'path="/v1/x\\n{forged}"' in line
    finally:
        d.stop()
    # warning from the environment: no request lines, and the listening line is still printed
    quiet = Daemon(tmp_path / "quiet", sim.url, env={"GATEWAY_LOG_LEVEL": "warning"})
    try:
        _, _, secret = funded(quiet)
        assert chat(quiet, secret, "gpt-4.1-mini", f"{nonce()} hi").status_code == 200
        time.sleep(0.3)
        assert not [doc for doc in log_lines(quiet) if doc.get("msg") == "request"]
    finally:
        quiet.stop()
