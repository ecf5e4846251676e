"""gatewayctl key create/update --mcp, --all-mcp: against the real admin API in-process
(tests/admin_inproc.py) over a config with MCP servers; the entries are checked by the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.admin_inproc import RealAdmin, running_admin
from tests.gatewayctl_cli import gatewayctl, make_account, ok, one_json

CONFIG = """
[[mcp_servers]]
name = "calc"
url = "http://127.0.0.1:9001/mcp"

[[mcp_servers]]
name = "files"
command = "true"
"""


@pytest.fixture(name="admin", scope="module")
def admin_fixture(tmp_path_factory) -> Iterator[RealAdmin]:
    data = tmp_path_factory.mktemp("mcp-admin")
    config: Path = data / "gatewayd.toml"
    config.write_text(CONFIG)
    with running_admin(data, config) as real:
        yield real


def test_key_create_and_update_set_and_clear_the_mcp_list(admin: RealAdmin) -> None:
    ann = make_account(admin)
    created = one_json(ok(admin, "key", "create", ann.id, "--name", "agent", "--mcp", "calc, files:read_*,calc",
                          "--json"))
    assert admin.last.body == {"name": "agent", "mcp": ["calc", "files:read_*"]}
    assert created["mcp"] == ["calc", "files:read_*"]
    shown = ok(admin, "key", "show", created["id"])
    assert "MCP tools" in shown.stdout and "files:read_*" in shown.stdout
    updated = one_json(ok(admin, "key", "update", created["id"], "--mcp", "files", "--json"))
    assert admin.last.body == {"mcp": ["files"]} and updated["mcp"] == ["files"]
    cleared = one_json(ok(admin, "key", "update", created["id"], "--all-mcp", "--json"))
    assert admin.last.body == {"mcp": None} and cleared["mcp"] is None
    plain = one_json(ok(admin, "key", "create", ann.id, "--name", "plain", "--json"))
    assert plain["mcp"] is None  # no list: every server


@pytest.mark.parametrize("value, message", [("nosuch", "no MCP server 'nosuch'"), ("calc:bad tool", "tool part"),
                                            ("a__b", "not an MCP server name")])
def test_a_bad_mcp_entry_is_refused_by_the_daemon(admin: RealAdmin, value: str, message: str) -> None:
    ann = make_account(admin)
    run = gatewayctl(admin, "key", "create", ann.id, "--name", "x", "--mcp", value)
    assert run.exit_code != 0 and message in run.stderr


def test_mcp_and_all_mcp_cannot_be_given_together(admin: RealAdmin) -> None:
    run = gatewayctl(admin, "key", "update", "key_x", "--mcp", "calc", "--all-mcp")
    assert run.exit_code != 0 and "cannot be used together" in run.stderr
