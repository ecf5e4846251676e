"""The MCP protocol's pure parts (gatewayd/mcp/protocol.py, access.py, settings.py): bytes and values in,
values out; no gateway, no socket."""

from __future__ import annotations

import pytest

from gatewayd.config_tables import ConfigError
from gatewayd.mcp import access, protocol as p
from gatewayd.mcp.settings import HeaderAuth, OAuthClientCredentials, read_servers

KEY = p.session_key(b"secret")


@pytest.mark.parametrize("raw, code", [
    (b"{", p.PARSE_ERROR),
    (b"\xff\xfe", p.PARSE_ERROR),
    (b"[]", p.INVALID_REQUEST),  # batches: removed from MCP in 2025-06-18
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', p.INVALID_REQUEST),
    (b'"ping"', p.INVALID_REQUEST),
    (b'{"id": 1, "method": "ping"}', p.INVALID_REQUEST),  # no jsonrpc
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', p.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1}', p.INVALID_REQUEST),  # no method, no result
    (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', p.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', p.INVALID_REQUEST),  # MCP: an id is never null
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', p.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', p.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', p.INVALID_PARAMS),
])
def test_malformed_messages_get_json_rpc_errors(raw, code):
    with pytest.raises(p.RpcError) as caught:
        p.parse_message(raw)
    assert caught.value.code == code
    assert caught.value.doc()["error"]["code"] == code and caught.value.doc()["jsonrpc"] == "2.0"


def test_an_error_keeps_the_request_id_when_it_could_be_read():
    with pytest.raises(p.RpcError) as caught:
        p.parse_message(b'{"jsonrpc": "2.0", "id": "a", "method": "x", "params": 3}')
    assert caught.value.id == "a"


def test_requests_notifications_and_replies():
    assert p.parse_message(b'{"jsonrpc":"2.0","id":"7","method":"tools/list"}') == p.Request("7", "tools/list", {})
    assert p.parse_message(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == \
        p.Notification("notifications/initialized", {})
    assert p.parse_message(b'{"jsonrpc":"2.0","id":3,"result":{}}') == p.Reply(3)
    assert p.parse_message(b'{"jsonrpc":"2.0","id":3,"method":"x","params":null}') == p.Request(3, "x", {})


def test_version_negotiation():
    assert p.negotiate("2025-06-18") == "2025-06-18"
    assert p.negotiate("2024-11-05") == "2024-11-05"
    assert p.negotiate("2099-01-01") == p.LATEST == "2025-11-25"
    assert p.negotiate(None) == p.LATEST
    assert p.header_version(None) == "2025-03-26"  # the spec's assumption without the header
    assert p.header_version("2025-06-18") == "2025-06-18"
    with pytest.raises(p.RpcError):
        p.header_version("1999-01-01")


def test_session_ids_are_signed_and_bound():
    session = p.Session(key_id="key_1", scope="*", protocol_version="2025-11-25", issued_at=1, nonce="n")
    sid = p.issue_session(KEY, session)
    assert all(0x21 <= ord(c) <= 0x7E for c in sid)  # visible ASCII, as the transport requires
    assert p.open_session(KEY, sid) == session
    assert p.open_session(p.session_key(b"other secret"), sid) is None  # another gateway's
    payload, signature = sid[len(p.SESSION_PREFIX):].split(".")
    forged = p.issue_session(p.session_key(b"x"), p.Session("key_2", "*", "2025-11-25", 1, "n"))
    assert p.open_session(KEY, f"{p.SESSION_PREFIX}{forged.split('.')[1]}.{signature}") is None  # another payload
    assert p.open_session(KEY, sid[:-2] + ("AA" if not sid.endswith("AA") else "BB")) is None
    assert p.open_session(KEY, "not-a-session") is None
    assert p.open_session(KEY, p.SESSION_PREFIX + "x" * 1000) is None


def test_aggregate_names():
    assert p.qualified("github", "get_issue") == "github__get_issue"
    assert p.split_qualified("github__get_issue") == ("github", "get_issue")
    assert p.split_qualified("github__get__x") == ("github", "get__x")  # tools may contain __, servers never
    assert p.split_qualified("noseparator") is None
    assert p.split_qualified("__tool") is None and p.split_qualified("server__") is None


def test_tool_call_target_checks_its_params():
    assert p.tool_call_target({"name": "add", "arguments": {"a": 1}}, 1) == ("add", {"a": 1})
    assert p.tool_call_target({"name": "add"}, 1) == ("add", {})
    for params in ({}, {"name": 3}, {"name": "add", "arguments": [1]}):
        with pytest.raises(p.RpcError) as caught:
            p.tool_call_target(params, 1)
        assert caught.value.code == p.INVALID_PARAMS


def test_progress_tokens_are_replaced_without_touching_the_rest():
    params = {"name": "x", "_meta": {"progressToken": 5, "other": 1}}
    replaced = p.with_progress_token(params, "gw-1")
    assert replaced["_meta"] == {"progressToken": "gw-1", "other": 1} and params["_meta"]["progressToken"] == 5
    assert p.progress_token(replaced) == "gw-1" and p.progress_token({}) is None


def test_access_lists():
    assert access.parse_list(["calc", "files:read_*", "calc", " files:read_* "]) == ("calc", "files:read_*")
    for bad in ([], "calc", ["bad name"], ["a__b"], ["calc:"], ["calc:bad tool"], [3], ["x"] * 201):
        with pytest.raises(access.AccessListError):
            access.parse_list(bad)
    rules = access.rules(["calc", "files:read_*"])
    assert access.allows(rules, "calc", "anything")
    assert access.allows(rules, "files", "read_file") and not access.allows(rules, "files", "write_file")
    assert not access.allows(rules, "other", "read_file")
    assert access.allows(None, "other", "x") and access.allows_server(rules, "files")
    assert not access.allows_server(rules, "other")
    assert access.tool_in_server_list(("get_*",), "get_x") and not access.tool_in_server_list(("get_*",), "put")


def test_mcp_server_settings():
    env = {"TOKEN": "t0k", "CID": "client", "CSECRET": "s3cret", "PATH": "/usr/bin", "OPENAI_API_KEY": "sk-no"}
    servers = read_servers([
        {"name": "gh", "url": "https://mcp.example.com/mcp", "auth": {"value_env": "TOKEN"}, "price_per_call": 0.001,
         "tool_prices": {"search": 0.01, "free": 0}, "tools": ["search", "get_*"], "timeout_s": 30},
        {"name": "corp", "url": "https://corp.example/mcp",
         "auth": {"type": "oauth_client_credentials", "token_url": "https://auth.example/token",
                  "client_id_env": "CID", "client_secret_env": "CSECRET", "scope": "tools"}},
        {"name": "local", "command": "python", "args": ["-m", "srv"], "env": {"MODE": "x"},
         "env_from": {"API_TOKEN": "TOKEN"}},
    ], env)
    gh, corp, local = servers["gh"], servers["corp"], servers["local"]
    assert gh.auth == HeaderAuth("Authorization", "Bearer t0k") and "t0k" not in repr(gh)
    assert gh.price_nano("search") == 10_000_000 and gh.price_nano("other") == 1_000_000 and gh.price_nano("free") == 0
    assert gh.tools == ("search", "get_*") and gh.timeout_s == 30 and gh.transport == "http"
    assert isinstance(corp.auth, OAuthClientCredentials) and corp.auth.client_id == "client"
    assert local.transport == "stdio" and local.args == ("-m", "srv")
    # a stdio server gets PATH and what it names, never the daemon's other secrets
    assert dict(local.env) == {"PATH": "/usr/bin", "MODE": "x", "API_TOKEN": "t0k"}


@pytest.mark.parametrize("table, message", [
    ({"name": "a"}, "give url"),
    ({"name": "a", "url": "https://x", "command": "y"}, "not both"),
    ({"name": "a__b", "url": "https://x"}, "no '__'"),
    ({"name": "a", "url": "ftp://x"}, "http"),
    ({"name": "a", "url": "https://x", "args": ["1"]}, "only for a stdio"),
    ({"name": "a", "url": "https://x", "price_per_call": 0.0000000001}, "nine decimals"),
    ({"name": "a", "url": "https://x", "price_per_call": -1}, "between"),
    ({"name": "a", "url": "https://x", "price_per_call": True}, "price"),
    ({"name": "a", "url": "https://x", "auth": {"value_env": "MISSING"}}, "MISSING is not set"),
    ({"name": "a", "url": "https://x", "auth": {"type": "basic"}}, "must be one of"),
    ({"name": "a", "url": "https://x", "tools": []}, "tools"),
    ({"name": "a", "url": "https://x", "surprise": 1}, "unknown key"),
])
def test_bad_mcp_server_settings_name_the_key(table, message):
    with pytest.raises(ConfigError, match=message):
        read_servers([table], {})


def test_duplicate_servers_are_refused():
    with pytest.raises(ConfigError, match="duplicate"):
        read_servers([{"name": "a", "url": "https://x"}, {"name": "a", "url": "https://y"}], {})


def test_the_console_key_form_sends_the_mcp_list_only_when_it_shows_the_field():
    from gatewayd.console.forms import KeyForm, field_of

    class Form(dict):
        def getlist(self, name):
            return []

    shown = KeyForm.from_form(Form(name="k", mcp="calc\nfiles:read_*, calc:add\n"))
    assert shown.fields()["mcp"] == ["calc", "files:read_*", "calc:add"]
    assert KeyForm.from_form(Form(name="k", mcp="  \n")).fields()["mcp"] is None  # empty: every server
    assert "mcp" not in KeyForm.from_form(Form(name="k")).fields()  # no MCP servers, no field: the list stays
    assert field_of("no MCP server 'x' in the configuration") == "mcp" and field_of("mcp: 'a b': bad") == "mcp"


from hypothesis import given, settings, strategies as st  # noqa: E402

_json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text(),
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                            max_leaves=20)
_messages = st.fixed_dictionaries({}, optional={"jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
                                                "id": _json_values, "method": _json_values,
                                                "params": _json_values, "result": _json_values,
                                                "error": _json_values})


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), _messages.map(lambda d: __import__("orjson").dumps(d)),
                 _json_values.map(lambda d: __import__("orjson").dumps(d))))
def test_any_bytes_are_a_message_or_a_json_rpc_error(raw):
    try:
        message = p.parse_message(raw)
    except p.RpcError as e:
        assert e.code in (p.PARSE_ERROR, p.INVALID_REQUEST, p.INVALID_PARAMS)
        assert e.id is None or isinstance(e.id, (str, int))
    else:
        assert isinstance(message, (p.Request, p.Notification, p.Reply))
