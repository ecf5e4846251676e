"""gatewayd.hypercorn_patches, in process: hypercorn's own trio ``TCPServer`` serves one
connection over a socketpair, driven by an h11 client, with trio's ``MockClock`` standing
in for the 75 s keep-alive timer. Each fix is shown against hypercorn's unpatched method
(the reproductions of ``docs/hypercorn-upstream.md``), and a hypercorn that lacks a name a
patch relies on is refused before anything is changed.
"""

from __future__ import annotations

import logging

import h11
import orjson
import pytest
import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from typer.testing import CliRunner

from gatewayd import cli, hypercorn_patches
from gatewayd.bodies import BodyBudget
from gatewayd.hypercorn_patches import (
    CLEARTEXT_H2, HANGUPS, MARK, PATCHES, PROTOCOL_ERRORS, WEBSOCKET_LIMITS, PatchRefused, original,
)

# a DeprecationWarning from hypercorn on the paths we patch is an early notice of the next break
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning:hypercorn.*")

KEEP_ALIVE_S = 75


@pytest.fixture
def pristine():
    """hypercorn as released for the test, whatever the process had installed; put back after."""
    saved = [(owner, name, getattr(owner, name)) for patch in PATCHES for owner, name in patch.replaces]
    for owner, name, method in saved:
        setattr(owner, name, getattr(method, MARK, method))
    yield
    for owner, name, method in saved:
        setattr(owner, name, method)


@pytest.fixture
def patched(pristine):
    assert hypercorn_patches.install_all() == []
    assert all(patch.applied() for patch in PATCHES)


class UnpatchedTCPServer(TCPServer):
    _read_data = original(TCPServer, "_read_data")
    _idle_timeout = original(TCPServer, "_idle_timeout")


async def ok_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def hypercorn_config(**settings) -> Config:
    config = Config()
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.read_timeout = None
    config.h11_max_incomplete_size = 1024
    for name, value in settings.items():
        setattr(config, name, value)
    return config


async def open_connection(nursery, config: Config, server_class=TCPServer, app=ok_app):
    """One hypercorn connection on a socketpair: (the client's stream, set when the server is done)."""
    server_socket, client_socket = trio.socket.socketpair()
    server = server_class(ASGIWrapper(app), config, WorkerContext(None), {}, trio.SocketStream(server_socket))
    done = trio.Event()

    async def run():
        await server.run()
        done.set()

    nursery.start_soon(run)
    return trio.SocketStream(client_socket), done


async def read_response(stream, client: h11.Connection) -> tuple[h11.Response | h11.InformationalResponse, bytes]:
    """The next response's head and body (a 101 has no body: the head alone)."""
    head, body = None, b""
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.InformationalResponse):
            return event, b""
        elif isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return head, body
        else:
            raise AssertionError(f"unexpected {event!r}")


async def get(stream, client: h11.Connection, *headers: tuple[str, str]):
    request = h11.Request(method="GET", target="/", headers=[("host", "gateway.test"), *headers])
    await stream.send_all(client.send(request) + client.send(h11.EndOfMessage()))
    return await read_response(stream, client)


async def receive_until_eof(stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


# -- hangups -------------------------------------------------------------------------------------


async def seconds_until_closed_after_client_leaves(server_class) -> float:
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, hypercorn_config(), server_class)
        head, body = await get(stream, h11.Connection(h11.CLIENT))
        assert (head.status_code, body) == (200, b"ok")
        await trio.sleep(1)  # the connection is idle, its keep-alive timer running
        left = trio.current_time()
        await stream.aclose()  # a pool dropping an idle kept-alive connection
        await done.wait()
        return trio.current_time() - left


async def test_hangups_closes_the_connection_when_the_client_leaves(patched, autojump_clock):
    assert await seconds_until_closed_after_client_leaves(TCPServer) < 1


async def test_without_hangups_the_connection_outlives_its_client_by_the_keep_alive_timeout(pristine, autojump_clock):
    assert await seconds_until_closed_after_client_leaves(UnpatchedTCPServer) >= KEEP_ALIVE_S - 1


async def test_hangups_leaves_a_kept_alive_connection_open_while_its_client_stays(patched, autojump_clock):
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, hypercorn_config())
        client = h11.Connection(h11.CLIENT)
        assert (await get(stream, client))[0].status_code == 200
        await trio.sleep(KEEP_ALIVE_S - 1)
        assert not done.is_set()
        client.start_next_cycle()
        assert (await get(stream, client))[0].status_code == 200  # the same connection, reused
        await trio.sleep(KEEP_ALIVE_S + 1)
        assert done.is_set()  # an idle client's connection still ends at the keep-alive timeout
        assert await receive_until_eof(stream) == b""


# -- protocol_errors -----------------------------------------------------------------------------


async def answer_to(raw: bytes, config: Config) -> tuple[h11.Response, bytes, bytes]:
    """Send ``raw`` bytes; the response, its body, and what came after it before EOF."""
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, config)
        await stream.send_all(raw)
        client = h11.Connection(h11.CLIENT)
        client.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))  # let h11 read a response
        client.send(h11.EndOfMessage())
        head, body = await read_response(stream, client)
        rest = await receive_until_eof(stream)
        await done.wait()
        return head, body, rest


@pytest.mark.parametrize(("raw", "status", "code"), [
    # more than h11_max_incomplete_size of head without its end
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-padding: " + b"a" * 2048, 431, "request_header_too_large"),
    (b"GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n", 400, "invalid_http_request"),
])
async def test_protocol_errors_answer_in_the_chat_envelope_with_a_request_id(patched, raw, status, code):
    head, body, rest = await answer_to(raw, hypercorn_config())
    headers = dict(head.headers)
    request_id = headers[b"x-request-id"].decode()
    assert head.status_code == status and headers[b"connection"] == b"close"
    assert headers[b"content-type"] == b"application/json"
    error = orjson.loads(body)["error"]
    assert error["code"] == code and request_id.startswith("req_") and request_id in error["message"]
    assert rest == b""


async def test_without_protocol_errors_hypercorn_answers_an_empty_body(pristine):
    hypercorn_patches.install_all([HANGUPS])
    head, body, _ = await answer_to(b"GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n", hypercorn_config())
    assert head.status_code == 400 and body == b"" and b"x-request-id" not in dict(head.headers)


# -- cleartext_h2 --------------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
UPGRADE = (("connection", "Upgrade, HTTP2-Settings"), ("upgrade", "h2c"), ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"))


async def test_cleartext_h2_refuses_the_preface_in_the_chat_envelope(patched):
    head, body, rest = await answer_to(PREFACE, hypercorn_config(gatewayd_h2c=False))
    assert head.status_code == 505 and orjson.loads(body)["error"]["code"] == "h2c_not_served"
    assert rest == b""  # and the connection closed, no HTTP/2 frames


async def test_cleartext_h2_answers_an_h2c_upgrade_in_http_1_1(patched):
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, hypercorn_config(gatewayd_h2c=False))
        head, body = await get(stream, h11.Connection(h11.CLIENT), *UPGRADE)
        assert (head.status_code, body) == (200, b"ok")
        await stream.aclose()


@pytest.mark.parametrize("settings", [{}, {"gatewayd_h2c": True}])
async def test_cleartext_h2_keeps_hypercorns_upgrade_where_h2c_is_allowed(patched, settings):
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, hypercorn_config(**settings))
        head, _ = await get(stream, h11.Connection(h11.CLIENT), *UPGRADE)
        assert head.status_code == 101  # HTTP/2 from here on
        nursery.cancel_scope.cancel()


async def test_without_cleartext_h2_hypercorn_switches_to_http2(pristine):
    hypercorn_patches.install_all([HANGUPS, PROTOCOL_ERRORS])
    async with trio.open_nursery() as nursery:
        stream, done = await open_connection(nursery, hypercorn_config(gatewayd_h2c=False))
        head, _ = await get(stream, h11.Connection(h11.CLIENT), *UPGRADE)
        assert head.status_code == 101  # HTTP/2 from here on
        nursery.cancel_scope.cancel()


# -- websocket_limits ---------------------------------------------------------------------------


async def accepting_app(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await receive()


async def extensions_agreed() -> str | None:
    """The handshake's answer to a client offering permessage-deflate: the extensions agreed."""
    headers = [("host", "gateway.test"), ("connection", "Upgrade"), ("upgrade", "websocket"),
               ("sec-websocket-version", "13"), ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
               ("sec-websocket-extensions", "permessage-deflate; client_max_window_bits")]
    async with trio.open_nursery() as nursery:
        stream, _ = await open_connection(nursery, hypercorn_config(), app=accepting_app)
        client = h11.Connection(h11.CLIENT)
        await stream.send_all(client.send(h11.Request(method="GET", target="/v1/responses", headers=headers)))
        head, _ = await read_response(stream, client)
        nursery.cancel_scope.cancel()
    assert head.status_code == 101
    return dict(head.headers).get(b"sec-websocket-extensions", b"").decode() or None


async def test_websocket_limits_declines_permessage_deflate(patched):
    """Issue 31, N2: with permessage-deflate agreed, about 1 MiB sent became about 1 GiB held
    (wsproto inflates a frame whole before any size cap). The patch answers the offer with no
    extension: messages arrive uncompressed, as large in memory as on the wire."""
    assert await extensions_agreed() is None


async def test_without_websocket_limits_hypercorn_agrees_to_it(pristine):
    hypercorn_patches.install_all([HANGUPS, PROTOCOL_ERRORS, CLEARTEXT_H2])
    assert (await extensions_agreed() or "").startswith("permessage-deflate")
    assert not WEBSOCKET_LIMITS.applied()


async def test_websocket_limits_counts_a_message_from_its_first_frame_and_cuts_it_over_the_lease(patched):
    """Issue 31, N2: hypercorn buffered a message until its last frame, counted by nothing. With
    a lease in the scope each frame's data is counted as it is buffered, and the frame that
    would take the lease's owner over its share closes the socket with 1009."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

    budget = BodyBudget(100_000, owner_max=5_000)
    lease = budget.lease("account:a")

    async def app(scope, receive, send):
        if scope["type"] != "websocket":
            return
        scope[hypercorn_patches.SCOPE_LEASE] = lease
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        assert scope[hypercorn_patches.SCOPE_COUNTED] is True
        while (await receive())["type"] != "websocket.disconnect":
            pass

    async with trio.open_nursery() as nursery:
        stream, _ = await open_connection(nursery, hypercorn_config(), app=app)
        client = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(client.send(Request(host="gateway.test", target="/v1/responses")))
        events: list = []
        with trio.fail_after(5):
            while not any(isinstance(e, AcceptConnection) for e in events):
                client.receive_data(await stream.receive_some(65536))
                events.extend(client.events())
            await stream.send_all(client.send(TextMessage(data="x" * 3000, message_finished=False)))
            while lease.held < 3000:  # counted while the message is still coming
                await trio.sleep(0.01)
            await stream.send_all(client.send(TextMessage(data="y" * 3000, message_finished=False)))
            while not any(isinstance(e, CloseConnection) for e in events):
                client.receive_data(await stream.receive_some(65536))
                events.extend(client.events())
        nursery.cancel_scope.cancel()
    [closed] = [e for e in events if isinstance(e, CloseConnection)]
    assert closed.code == 1009 and lease.held == 3000 and budget.held == 3000  # the refused frame took nothing


# -- the start-up check --------------------------------------------------------------------------


def test_the_installed_hypercorn_fits_every_patch():
    assert [patch.problems() for patch in PATCHES] == [[], [], [], []]
    assert hypercorn_patches.refusal() is None


def test_a_missing_method_refuses_the_start_and_changes_nothing(pristine, monkeypatch):
    monkeypatch.delattr(TCPServer, "_idle_timeout")
    assert HANGUPS.problems() == ["hypercorn.trio.tcp_server.TCPServer._idle_timeout is gone"]
    with pytest.raises(PatchRefused, match="'hangups' patch .*_idle_timeout is gone"):
        hypercorn_patches.install_all()
    assert not any(patch.applied() for patch in PATCHES)


def test_an_attribute_no_longer_set_in_init_is_found(pristine, monkeypatch):
    def __init__(self, app, config, context, state, stream):  # hypercorn renamed idle_task
        self.keep_alive_task = None

    monkeypatch.setattr(TCPServer, "__init__", __init__)
    assert HANGUPS.problems() == ["hypercorn.trio.tcp_server.TCPServer.__init__ no longer sets self.idle_task"]
    assert "'hangups'" in hypercorn_patches.refusal()


def test_a_method_hypercorn_no_longer_calls_is_found(pristine, monkeypatch):
    async def _check_protocol_elsewhere(self):
        pass

    monkeypatch.setattr(H11Protocol, "_handle_events", _check_protocol_elsewhere)
    assert CLEARTEXT_H2.problems() == [
        "hypercorn.protocol.h11.H11Protocol._handle_events no longer uses _check_protocol"]
    with pytest.raises(PatchRefused, match="'cleartext_h2'"):
        hypercorn_patches.install_all()


def test_an_optional_patch_that_cannot_apply_is_logged_and_the_rest_applied(pristine, monkeypatch, caplog):
    monkeypatch.delattr(H11Protocol, "_send_h11_event")
    with caplog.at_level(logging.ERROR, logger="gatewayd"):
        assert hypercorn_patches.install_all([HANGUPS, PROTOCOL_ERRORS]) == ["protocol_errors"]
    assert HANGUPS.applied() and not PROTOCOL_ERRORS.applied()
    [record] = caplog.records
    assert "'protocol_errors' not applied" in record.getMessage() and "_send_h11_event is gone" in record.getMessage()


def test_install_all_is_idempotent(patched):
    methods = [getattr(owner, name) for patch in PATCHES for owner, name in patch.replaces]
    assert hypercorn_patches.install_all() == []
    assert methods == [getattr(owner, name) for patch in PATCHES for owner, name in patch.replaces]
    assert ProtocolWrapper.handle is methods[-2] and WSStream._accept is methods[-1]


def test_serve_refuses_to_start_with_one_line_and_exit_2(pristine, monkeypatch, tmp_path):
    monkeypatch.delattr(TCPServer, "_initiate_server_close")
    result = CliRunner().invoke(cli.app, ["serve", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatewayd: hypercorn ") and "_initiate_server_close is gone" in lines[0]
    assert not (tmp_path / "gatewayd.db").exists()
