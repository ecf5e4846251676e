"""gatewayctl balance and usage: the hold, the rows, their breakdown, CSV and JSON Lines."""

from __future__ import annotations

import csv
import io
import json
from urllib.parse import quote

from gatewayd.store.base import Hold, Settlement
from tests.admin_inproc import RealAdmin
from tests.gatewayctl_cli import BILLED, Made, gatewayctl, make_account, ok, one_json, settle
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
    assert "$1.062000*" in table.stdout  # the table marks a cost with more in it than tokens, and says where
    assert "* billed besides tokens (tools, tier, long context): --breakdown shows each line." in table.stdout
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


def test_usage_table_fits_100_columns_one_line_a_request(admin: RealAdmin) -> None:
    """60 requests at 110 columns: the newest 50, one line each, none over 100 characters, numbers
    whole (issue 32: ~850 lines of blocks before); the key shown and chosen by its name."""
    ann = make_account(admin, pay="100")
    long_name = "ci-runner-for-the-nightly-integration-suite"
    keys = [admin.api("POST", f"/accounts/{ann.id}/keys", {"name": name}) for name in ("laptop", long_name)]
    for n in range(60):
        settle(admin, ann.id, keys[n % 2]["id"], f"req_{n:03d}_{ann.id}", 5_000_000,
               Settlement("ok", 200, input_tokens=1_234_567, output_tokens=300, cached_tokens=1000,
                          cost_nano=4_700_000))
    run = gatewayctl(admin, "usage", ann.id, env={"COLUMNS": "110"})
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    requests = [line for line in lines if "1,234,567" in line]
    assert len(requests) == 50 and len(lines) <= 50 + 6
    assert all("$0.004700" in line and "gpt-4.1" in line for line in requests)
    assert sum("laptop" in line for line in requests) == 25 and sum("ci-runner" in line for line in requests) == 25
    assert "The newest 50 shown: --limit N for more" in run.stdout
    by_name = gatewayctl(admin, "usage", ann.id, "--key", long_name, "--model", "gpt-4.1", "--limit", "3", "--json")
    assert by_name.exit_code == 0, by_name.stderr
    assert admin.last.query == {"key": [keys[1]["id"]], "model": ["gpt-4.1"], "limit": ["3"]}
    assert [row["key_id"] for row in one_json(by_name)] == [keys[1]["id"]] * 3
    by_id = one_json(ok(admin, "usage", ann.id, "--key", keys[0]["id"], "--limit", "2", "--json"))
    assert [row["key_id"] for row in by_id] == [keys[0]["id"]] * 2
    admin.api("POST", f"/accounts/{ann.id}/keys", {"name": "laptop"})  # a second key named laptop
    twice = gatewayctl(admin, "usage", ann.id, "--key", "laptop")
    assert twice.exit_code == 1 and "2 keys of" in twice.err and keys[0]["id"] in twice.err, twice.err
    other = gatewayctl(admin, "usage", ann.id, "--model", "no-such-model")
    assert other.exit_code == 0 and other.stdout == "No usage.\n"


def test_usage_table_on_a_narrow_terminal_shrinks_names_never_numbers() -> None:
    import io

    from rich.console import Console

    from gatewayctl import usage_table

    row = {"created_at": "2026-11-04T10:00:00.000Z", "key_id": "key_1", "model": "anthropic.claude-sonnet-4-5-v1:0",
           "status": "upstream_error", "input_tokens": 1_234_567, "output_tokens": 300, "cached_tokens": 1000,
           "cost_nano": 4_700_000}
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    usage_table.show_usage(console, [row], {"key_1": "the nightly integration runner"}, limit=50)
    table = [line for line in out.getvalue().splitlines() if "1,234,567" in line]
    assert len(table) == 1 and len(table[0]) <= 80, table
    assert "$0.004700" in table[0] and "11-04 10:00:00" in table[0] and "…" in table[0]
