"""Usage out: ``gatewayctl usage`` filters and exports, ``gatewayctl report`` sums, against a live daemon.

The account lives in UTC+14 (Pacific/Kiritimati), so its calendar day is not the UTC day:
``--since``/``--until`` must be read in the account's zone to find today's requests.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import subprocess
import uuid
import zoneinfo

import httpx
import pytest

from gatewayd.billing.breakdown import CSV_COLUMNS, TOKEN_DIMENSIONS
from tests.live import BIN

ZONE = "Pacific/Kiritimati"


def gatewayctl(gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gatewayctl"), *args, "--socket", gateway.socket], capture_output=True,
                          text=True, timeout=60)


def chat(gateway, secret: str, model: str, text: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}]}, timeout=30)


@pytest.fixture(scope="module")
def traffic(gateway):
    """An account with two keys and six requests: 3 mini, 2 haiku (one on the second key), 1 failed."""
    admin = gateway.admin
    account = admin.account(f"export-{uuid.uuid4().hex[:8]}@example.com", timezone=ZONE)
    first, second = admin.key(account["id"], "first"), admin.key(account["id"], "second")
    for _ in range(3):
        assert chat(gateway, first["secret"], "gpt-4.1-mini", f"{uuid.uuid4().hex} hi").status_code == 200
    assert chat(gateway, first["secret"], "claude-haiku-4-5", "hello there").status_code == 200
    assert chat(gateway, second["secret"], "claude-haiku-4-5", "hello again").status_code == 200
    assert chat(gateway, first["secret"], "gpt-4.1-mini", "[[sim:fault=status:429]]").status_code == 429
    rows = admin.usage(account["id"])
    assert len(rows) == 6
    today = dt.datetime.now(zoneinfo.ZoneInfo(ZONE)).date()
    return {"account": account, "first": first, "second": second, "rows": rows, "today": today.isoformat(),
            "yesterday": (today - dt.timedelta(days=1)).isoformat()}


def csv_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_export_of_a_day_in_the_accounts_zone(gateway, traffic):
    done = gatewayctl(gateway, "usage", traffic["account"]["email"], "--since", traffic["today"], "--until",
                      traffic["today"], "--csv")
    assert done.returncode == 0, done.stderr
    rows = csv_rows(done.stdout)
    assert [r["request_id"] for r in rows] == [r["request_id"] for r in traffic["rows"]]  # newest first
    assert list(rows[0]) == ["request_id", "created_at", "key_id", "model", "endpoint", "stream", "status",
                             "http_status", "input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens",
                             "cost_nano", "duration_ms", "provider", "attempts", "cost_usd", *CSV_COLUMNS]
    assert all(r["provider"] == "openai" and r["attempts"] == "1" for r in rows if r["model"].startswith("gpt"))
    assert sum(int(r["cost_nano"]) for r in rows) == sum(r["cost_nano"] for r in traffic["rows"])
    # what each charge is made of: the dimension columns add up to it, and it stayed within its hold
    for r in rows:
        parts = sum(int(r[f"{d}_nano"]) for d in TOKEN_DIMENSIONS) + int(r["tools_nano"])
        assert parts == int(r["cost_nano"]) and int(r["cost_nano"]) <= int(r["hold_nano"]), r
        assert (r["tier"], r["long_context"]) == ("", "false")
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 5 and all(int(r["input_nano"]) > 0 and int(r["output_nano"]) > 0 for r in ok)


def test_usage_rows_carry_the_hold_and_the_bill(gateway, traffic):
    """``--json`` rows (as the admin API sends them): hold_nano, and the breakdown's lines priced
    at the model's rates, adding up to cost_nano; the failed request held and charged nothing."""
    done = gatewayctl(gateway, "usage", traffic["account"]["id"], "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    rates = {"gpt-4.1-mini": {"input": 400, "output": 1_600}, "claude-haiku-4-5": {"input": 1_000, "output": 5_000}}
    for row in rows:
        assert row["hold_nano"] > 0
        lines = row["breakdown"]["lines"]
        assert sum(line["nano"] for line in lines) == row["cost_nano"], row
        assert row["breakdown"]["tier"] is None and row["breakdown"]["long_context"] is False
        if row["status"] != "ok":
            assert lines == [] and row["cost_nano"] == 0
            continue
        by_dimension = {line["dimension"]: line for line in lines}
        assert by_dimension["input"]["quantity"] == row["input_tokens"] - row["cached_tokens"]
        assert by_dimension["output"]["quantity"] == row["output_tokens"]
        for dimension in ("input", "output"):
            line = by_dimension[dimension]
            assert line["unit_nano"] == rates[row["model"]][dimension]
            assert line["nano"] == line["quantity"] * line["unit_nano"]

    before = gatewayctl(gateway, "usage", traffic["account"]["id"], "--until", traffic["yesterday"], "--csv")
    assert before.returncode == 0 and csv_rows(before.stdout) == []


def test_filters_by_model_key_and_status(gateway, traffic):
    account = traffic["account"]["id"]
    by_model = gatewayctl(gateway, "usage", account, "--model", "claude-haiku-4-5", "--jsonl")
    lines = [json.loads(line) for line in by_model.stdout.splitlines()]
    assert len(lines) == 2 and {r["model"] for r in lines} == {"claude-haiku-4-5"}
    by_key = gatewayctl(gateway, "usage", account, "--key", traffic["second"]["id"], "--csv")
    assert [r["key_id"] for r in csv_rows(by_key.stdout)] == [traffic["second"]["id"]]
    failed = gatewayctl(gateway, "usage", account, "--status", "upstream_error", "--json")
    [row] = json.loads(failed.stdout)
    assert (row["status"], row["http_status"], row["cost_nano"]) == ("upstream_error", 429, 0)
    limited = gatewayctl(gateway, "usage", account, "--limit", "4", "--csv")
    assert len(csv_rows(limited.stdout)) == 4


def test_the_admin_api_pages_with_a_cursor(gateway, traffic):
    account = traffic["account"]["id"]
    seen, before = [], None
    while True:
        query = f"/accounts/{account}/usage?limit=4" + (f"&before={before}" if before else "")
        page = gateway.admin.call("GET", query)
        assert len(page["data"]) <= 4
        seen += [r["request_id"] for r in page["data"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == [r["request_id"] for r in traffic["rows"]]


def test_bad_range_arguments_are_refused(gateway, traffic):
    bad = gatewayctl(gateway, "usage", traffic["account"]["id"], "--since", "2026-13-01", "--csv")
    assert bad.returncode == 2 and "not a calendar date" in bad.stderr
    upside = gatewayctl(gateway, "report", traffic["account"]["id"], "--since", traffic["today"], "--until",
                        traffic["yesterday"])
    assert upside.returncode == 2
    api = gateway.admin.call("GET", f"/accounts/{traffic['account']['id']}/usage?since=yesterday", expect=400)
    assert "since must be a date" in api["error"]["message"]


def test_report_sums_per_model_and_per_key(gateway, traffic):
    done = gatewayctl(gateway, "report", traffic["account"]["email"], "--since", traffic["today"], "--until",
                      traffic["today"], "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = traffic["rows"]
    by_model = {m["model"]: m for m in report["by_model"]}
    for model in ("gpt-4.1-mini", "claude-haiku-4-5"):
        mine = [r for r in rows if r["model"] == model]
        assert by_model[model]["requests"] == len(mine)
        assert by_model[model]["input_tokens"] == sum(r["input_tokens"] for r in mine)
        assert by_model[model]["output_tokens"] == sum(r["output_tokens"] for r in mine)
        assert by_model[model]["cost_nano"] == sum(r["cost_nano"] for r in mine)
    by_key = {k["key_id"]: k for k in report["by_key"]}
    assert by_key[traffic["second"]["id"]]["requests"] == 1
    assert by_key[traffic["first"]["id"]]["requests"] == 5
    assert report["total"]["cost_nano"] == sum(r["cost_nano"] for r in rows)
    assert report["range"]["timezone"] == ZONE

    everyone = json.loads(gatewayctl(gateway, "report", "--json").stdout)
    assert everyone["total"]["requests"] >= 6 and everyone["range"]["account_id"] is None
    human = gatewayctl(gateway, "report", traffic["account"]["id"])
    assert human.returncode == 0 and "claude-haiku-4-5" in human.stdout and "Total: 6 requests" in human.stdout


def test_the_edges_of_the_calendar_are_clamped_not_a_500(gateway, traffic):
    account = traffic["account"]["id"]
    ids = [r["request_id"] for r in traffic["rows"]]
    # the end of 9999-12-31 is past the last representable day; 0001-01-01 in UTC+14 is before the first
    for args in (["--until", "9999-12-31"], ["--since", "0001-01-01"], ["--since", "0001-01-01", "--until", "9999-12-31"]):
        done = gatewayctl(gateway, "usage", account, *args, "--json")
        assert done.returncode == 0, done.stderr
        assert [r["request_id"] for r in json.loads(done.stdout)] == ids
        report = gatewayctl(gateway, "report", account, *args, "--json")
        assert report.returncode == 0, report.stderr
        assert json.loads(report.stdout)["total"]["requests"] == len(ids)
    everyone = gatewayctl(gateway, "report", "--until", "9999-12-31", "--json")
    assert everyone.returncode == 0, everyone.stderr
    admin = gateway.admin
    assert [r["request_id"] for r in admin.call("GET", f"/accounts/{account}/usage?before=99999999999999999999999"
                                                )["data"]] == ids
    late = admin.call("GET", f"/accounts/{account}/usage?since=9999-12-31T23:00:00-05:00")
    early = admin.call("GET", f"/accounts/{account}/usage?until=0001-01-01T00:30:00%2B01:00")
    assert late["data"] == [] and early["data"] == []
    assert admin.call("GET", "/report?until=9999-12-31")["range"]["until"] == "9999-12-31T23:59:59.999Z"
