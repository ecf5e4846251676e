"""gatewayctl balance and usage: the hold, the rows, their breakdown, CSV and JSON Lines."""

from __future__ import annotations

import csv
import io
import json
from urllib.parse import quote

from gatewayd.store.base import Hold
from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import BILLED, Made, gatewayctl, one_json
from tests.gatewayctl_cli import (  # noqa: F401  (fixtures)
    admin_fixture, ann_fixture, laptop_fixture, shared_admin_fixture, used_fixture,
)


def test_balance(admin: RealAdmin, ann: Made, laptop: dict) -> None:
    async def hold(directory, store):
        return await store.reserve(directory.account(ann.id), directory.key(laptop["id"]), 250_000,
                                   request_id="req_open", model="gpt-4.1", endpoint="chat", stream=False)

    assert isinstance(admin.call(hold), Hold)  # a request still running
    run = gatewayctl(admin, "balance", ann.email)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{quote(ann.email, safe='')}/balance")
    assert "$10.499750" in run.stdout and "$0.000250" in run.stdout
    balance = one_json(gatewayctl(admin, "balance", ann.id, "--json"))
    assert (balance["balance_nano"], balance["held_nano"], balance["total_paid_nano"]) == (
        10_499_750_000, 250_000, 10_500_000_000)


def test_usage_default_limit(admin: RealAdmin, used: Made) -> None:
    run = gatewayctl(admin, "usage", used.id)
    assert run.exit_code == 0, run.stderr
    assert (admin.last.method, admin.last.path) == ("GET", f"/admin/v1/accounts/{used.id}/usage")
    assert admin.last.query == {"limit": ["50"]}
    assert "gpt-4.1" in run.stdout and "$0.004700" in run.stdout


def test_usage_key_and_limit(admin: RealAdmin, used: Made, laptop: dict) -> None:
    run = gatewayctl(admin, "usage", used.id, "--key", laptop["id"], "--limit", "1", "--json")
    assert run.exit_code == 0, run.stderr
    assert admin.last.query == {"key": [laptop["id"]], "limit": ["1"]}
    [row] = one_json(run)  # the newest
    assert (row["request_id"], row["key_id"], row["cost_nano"], row["hold_nano"]) == (
        f"req_billed_{used.id}", laptop["id"], BILLED.cost_nano, 1_100_000_000)
    nobody = gatewayctl(admin, "usage", used.id, "--key", "key_nobody", "--json")
    assert nobody.exit_code == 1 and nobody.stderr == "gatewayctl: no key 'key_nobody'\n"


def test_usage_csv_writes_booleans_as_jsonl_and_the_console_do(admin: RealAdmin, used: Made) -> None:
    run = gatewayctl(admin, "usage", used.id, "--csv")
    assert run.exit_code == 0, run.stderr
    rows = {row["request_id"]: row for row in csv.DictReader(io.StringIO(run.stdout))}
    plain = rows[f"req_plain_{used.id}"]
    assert plain["stream"] == "true" and plain["cost_usd"] == "0.004700"
    jsonl = gatewayctl(admin, "usage", used.id, "--jsonl")
    assert '"stream": true' in jsonl.stdout


def test_usage_rows_carry_the_hold_and_the_breakdown(admin: RealAdmin, used: Made) -> None:
    billed, plain = one_json(gatewayctl(admin, "usage", used.id, "--json"))  # newest first, as the API sends
    assert billed["breakdown"] == BILLED.breakdown and plain.get("breakdown") is None
    assert (billed["hold_nano"], plain["hold_nano"]) == (1_100_000_000, 5_000_000)
    table = gatewayctl(admin, "usage", used.id)
    assert table.exit_code == 0, table.stderr
    assert "web_search x3 $0.030000, tier priority, long context" in table.stdout
    assert "$1.100000" in table.stdout  # held
    lines = gatewayctl(admin, "usage", used.id, "--breakdown")
    assert lines.exit_code == 0, lines.stderr
    assert "input: 250,000 x $0.00000412 = $1.030000" in lines.stdout
    assert "web_search: 3 x $0.010000 = $0.030000" in lines.stdout
    assert "service tier priority rates" in lines.stdout and "long-context rates" in lines.stdout
    assert "no breakdown recorded" in lines.stdout  # the older row
    assert gatewayctl(admin, "usage", used.id, "--breakdown", "--json").exit_code == 2


def test_usage_csv_has_a_column_per_dimension_that_adds_up_to_the_cost(admin: RealAdmin, used: Made) -> None:
    from gatewayd.billing.breakdown import CSV_COLUMNS, TOKEN_DIMENSIONS

    run = gatewayctl(admin, "usage", used.id, "--csv")
    assert run.exit_code == 0, run.stderr
    reader = csv.DictReader(io.StringIO(run.stdout))
    assert reader.fieldnames is not None and reader.fieldnames[-len(CSV_COLUMNS):] == list(CSV_COLUMNS)
    billed, older = list(reader)
    assert (billed["hold_nano"], billed["input_nano"], billed["output_nano"], billed["tools_nano"]) == (
        "1100000000", "1030000000", "2000000", "30000000")
    assert (billed["tool_calls"], billed["tier"], billed["long_context"]) == ("web_search=3", "priority", "true")
    assert billed["cached_input_nano"] == "0"
    parts = sum(int(billed[f"{d}_nano"]) for d in TOKEN_DIMENSIONS) + int(billed["tools_nano"])
    assert parts == int(billed["cost_nano"])
    assert older["hold_nano"] == "5000000"  # a row settled with no breakdown: its hold, and nothing else
    assert all(older[c] == "" for c in CSV_COLUMNS if c != "hold_nano")
    jsonl = gatewayctl(admin, "usage", used.id, "--jsonl")
    assert json.loads(jsonl.stdout.splitlines()[0])["breakdown"] == BILLED.breakdown


def test_usage_limit_must_be_positive(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "usage", "acct", "--limit", "0")
    assert run.exit_code == 2
    assert admin.requests == []
