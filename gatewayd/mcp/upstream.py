"""The gateway as an MCP client: links to the servers of ``[[mcp_servers]]``.

A link sends one JSON-RPC request and returns its result (or raises), handing the
notifications that come with it (progress, log messages) to a callback as they arrive.
The protocol (message shapes, versions, tokens) is ``gatewayd.mcp.protocol``; here is only
the I/O and the session life around it:

- :class:`HttpLink`: one upstream Streamable HTTP session (``initialize``, then requests with
  its ``Mcp-Session-Id``). Answers come as JSON or as an SSE stream. A server that no longer
  knows the session (404, as the transport says a lost session is answered) is initialised
  again and the request sent once more, so the client never sees the loss. One link per
  gateway session and server (``gatewayd.mcp.gateway``): no state of one caller is ever in
  another caller's upstream session.
- :class:`StdioLink`: a server the gateway runs (newline-delimited JSON-RPC on its stdin and
  stdout), one process per server shared by every session; requests are told apart by the
  link's own ids. A process that exits is started (and initialised) again at the next request.

Progress tokens are replaced by the link's own on the way up and put back on the way down,
so two callers using the same token cannot see each other's progress.

Failures: :class:`UpstreamRpcError` when the server answered with a JSON-RPC error (passed
on to the client as it is); :class:`UpstreamFailure` when it could not be reached, timed
out, broke off or did not speak the protocol (the gateway's -32002; nothing charged).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import subprocess
from typing import Any, Awaitable, Callable, Iterator

import httpx
import orjson
import trio

from gatewayd.formats.sse import SSESplitter
from gatewayd.mcp import protocol as p
from gatewayd.mcp.settings import HeaderAuth, McpServer, OAuthClientCredentials
from gatewayd.providers.upstream import _Handed

log = logging.getLogger("gatewayd.mcp")

OnNotification = Callable[[dict[str, Any]], Awaitable[None]]
MAX_ANSWER_BYTES = 64 << 20  # one upstream answer held in memory at most (a JSON answer, or one SSE event)
MAX_LINE_BYTES = 64 << 20  # one stdio message
CLIENT_INFO = {"name": "gatewayd", "version": "0.1.0"}
STDIO_STOP_GRACE_S = 2.0


class UpstreamFailure(Exception):
    """The server could not be reached, timed out, broke off, or did not speak MCP."""


class UpstreamRpcError(Exception):
    """The server answered the request with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]) -> None:
        code = error.get("code")
        message = error.get("message")
        self.code = code if isinstance(code, int) and not isinstance(code, bool) else p.INTERNAL_ERROR
        self.message = message if isinstance(message, str) else "the MCP server answered with an error"
        self.data = error.get("data")
        super().__init__(self.message)


class _SessionLost(Exception):
    """The server answered 404 to our session id: it forgot (restarted, expired) the session."""


def initialize_params(version: str) -> dict[str, Any]:
    # no client capabilities: the gateway answers no sampling, elicitation or roots requests
    return {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}


class ProgressTokens:
    """The link's own progress tokens, and the caller's each one stands for."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._ids = itertools.count(1)
        self.callers: dict[str, tuple[Any, OnNotification]] = {}

    def replace(self, params: dict[str, Any], on_notification: OnNotification | None) -> tuple[dict[str, Any], str | None]:
        token = p.progress_token(params)
        if token is None or on_notification is None:
            return params, None
        own = f"{self._prefix}{next(self._ids)}"
        self.callers[own] = (token, on_notification)
        return p.with_progress_token(params, own), own

    async def deliver(self, doc: dict[str, Any]) -> bool:
        """A ``notifications/progress`` for one of our tokens, handed back with the caller's."""
        params = doc.get("params")
        if doc.get("method") != "notifications/progress" or not isinstance(params, dict):
            return False
        found = self.callers.get(params.get("progressToken"))  # type: ignore[arg-type]
        if found is None:
            return False
        token, on_notification = found
        await on_notification({**doc, "params": {**params, "progressToken": token}})
        return True


# -- OAuth client credentials -------------------------------------------------------------


class TokenSource:
    """An access token from the OAuth client-credentials grant, renewed before it expires."""

    RENEW_BEFORE_S = 60.0

    def __init__(self, creds: OAuthClientCredentials, client: httpx.AsyncClient, timeout_s: float) -> None:
        self.creds = creds
        self.client = client
        self.timeout_s = timeout_s
        self._token: str | None = None
        self._expires = 0.0
        self._lock = trio.Lock()

    def invalidate(self, token: str) -> None:
        if self._token == token:
            self._token = None

    async def token(self) -> str:
        async with self._lock:
            if self._token is not None and trio.current_time() < self._expires:
                return self._token
            form = {"grant_type": "client_credentials", "client_id": self.creds.client_id,
                    "client_secret": self.creds.client_secret}
            for name in ("scope", "audience", "resource"):
                value = getattr(self.creds, name)
                if value:
                    form[name] = value
            try:
                with trio.fail_after(self.timeout_s):
                    response = await self.client.post(self.creds.token_url, data=form,
                                                      headers={"accept": "application/json"})
            except (httpx.HTTPError, trio.TooSlowError) as e:
                raise UpstreamFailure(f"the OAuth token endpoint could not be reached ({type(e).__name__})") from None
            if response.status_code != 200:
                raise UpstreamFailure(f"the OAuth token endpoint answered {response.status_code}")
            try:
                doc = response.json()
                token = doc["access_token"]
                lifetime = float(doc.get("expires_in") or 3600)
            except (ValueError, KeyError, TypeError):
                raise UpstreamFailure("the OAuth token endpoint's answer has no access_token") from None
            if not isinstance(token, str) or not token:
                raise UpstreamFailure("the OAuth token endpoint's answer has no access_token")
            self._token = token
            self._expires = trio.current_time() + max(0.0, lifetime - self.RENEW_BEFORE_S)
            return token


# -- Streamable HTTP -------------------------------------------------------------------------


class HttpLink:
    """One upstream Streamable HTTP session (see the module doc)."""

    def __init__(self, server: McpServer, client: httpx.AsyncClient, tokens: TokenSource | None = None) -> None:
        self.server = server
        self.client = client
        self.tokens = tokens
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._ready = False
        self._lock = trio.Lock()
        self._ids = itertools.count(1)
        self._progress = ProgressTokens("gw-")
        self.initializations = 0  # how many times this link (re)initialised: the tests read it

    async def request(self, method: str, params: dict[str, Any], on_notification: OnNotification | None = None,
                      on_sent: Callable[[], None] | None = None) -> Any:
        """The result of ``method``; a lost upstream session is initialised again, once."""
        with _deadline(self.server):
            await self._ensure()
            try:
                return await self._exchange(method, params, on_notification, on_sent)
            except _SessionLost:
                log.info("MCP server %s lost our session; initialising a new one", self.server.name,
                         extra={"fields": {"mcp_server": self.server.name}})
                self._forget()
                await self._ensure()
                try:
                    return await self._exchange(method, params, on_notification, on_sent)
                except _SessionLost:
                    raise UpstreamFailure("the MCP server lost the session again right after it was made") from None

    async def aclose(self) -> None:
        """End the upstream session (DELETE, as the transport asks; best effort)."""
        if self.session_id is None:
            return
        headers = await self._headers()
        self._forget()
        with trio.move_on_after(self.server.connect_timeout_s):
            try:
                await self.client.request("DELETE", self._url(), headers=headers)
            except (httpx.HTTPError, UpstreamFailure):
                pass

    def _forget(self) -> None:
        self._ready = False
        self.session_id = None
        self.protocol_version = None

    def _url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    async def _ensure(self) -> None:
        async with self._lock:
            if self._ready:
                return
            result = await self._post(p.request_doc(next(self._ids), "initialize", initialize_params(p.LATEST)),
                                      initializing=True)
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if version not in p.PROTOCOL_VERSIONS:
                raise UpstreamFailure(f"the MCP server speaks protocol version {version!r}, which the gateway "
                                      "does not")
            self.protocol_version = version
            await self._post(p.notification_doc("notifications/initialized"))
            self._ready = True
            self.initializations += 1

    async def _exchange(self, method: str, params: dict[str, Any], on_notification: OnNotification | None,
                        on_sent: Callable[[], None] | None) -> Any:
        params, own_token = self._progress.replace(params, on_notification)
        request_id = next(self._ids)
        sent = False

        def handed() -> None:
            nonlocal sent
            sent = True
            if on_sent is not None:
                on_sent()

        try:
            return await self._post(p.request_doc(request_id, method, params), on_notification=on_notification,
                                    on_sent=handed)
        except trio.Cancelled:
            # the caller left or cancelled: over HTTP a closed stream is no cancellation, so say it
            if sent:
                with trio.CancelScope(shield=True), trio.move_on_after(self.server.connect_timeout_s):
                    try:
                        await self._post(p.notification_doc("notifications/cancelled", {
                            "requestId": request_id, "reason": "the gateway's client cancelled the request"}))
                    except (UpstreamFailure, UpstreamRpcError, _SessionLost):
                        pass
            raise
        finally:
            if own_token is not None:
                self._progress.callers.pop(own_token, None)

    async def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.session_id is not None:
            headers["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            headers["mcp-protocol-version"] = self.protocol_version
        auth = self.server.auth
        if isinstance(auth, HeaderAuth):
            headers[auth.header] = auth.value
        elif self.tokens is not None:
            headers["authorization"] = f"Bearer {await self.tokens.token()}"
        return headers

    async def _post(self, doc: dict[str, Any], *, initializing: bool = False,
                    on_notification: OnNotification | None = None, on_sent: Callable[[], None] | None = None,
                    retried: bool = False) -> Any:
        """Send one message; for a request, its result. A 401 with an OAuth token renews it once."""
        headers = await self._headers()
        request = self.client.build_request("POST", self._url(), content=orjson.dumps(doc), headers=headers,
                                            timeout=httpx.Timeout(self.server.timeout_s,
                                                                  connect=self.server.connect_timeout_s))
        if on_sent is not None:
            request.stream = _Handed(request.stream, on_sent)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as e:
            raise UpstreamFailure(f"the MCP server could not be reached ({type(e).__name__})") from None
        try:
            if response.status_code == 401 and self.tokens is not None and not retried:
                self.tokens.invalidate(headers.get("authorization", "").removeprefix("Bearer "))
                await response.aclose()
                return await self._post(doc, initializing=initializing, on_notification=on_notification,
                                        on_sent=on_sent, retried=True)
            if response.status_code == 404 and self.session_id is not None and not initializing:
                raise _SessionLost()
            if initializing and response.status_code < 300:
                session_id = response.headers.get("mcp-session-id")
                if session_id:
                    self.session_id = session_id
            if "id" not in doc:  # a notification: 202 Accepted, no body
                if response.status_code >= 300:
                    raise UpstreamFailure(f"the MCP server answered a notification with HTTP {response.status_code}")
                return None
            return await self._answer(response, doc["id"], on_notification)
        except httpx.HTTPError as e:
            raise UpstreamFailure(f"the MCP server's answer broke off ({type(e).__name__})") from None
        finally:
            await response.aclose()

    async def _answer(self, response: httpx.Response, request_id: Any,
                      on_notification: OnNotification | None) -> Any:
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "text/event-stream" and response.status_code == 200:
            splitter = SSESplitter()
            async for chunk in response.aiter_raw():
                for event in splitter.feed(chunk):
                    found = await self._event(event.data, request_id, on_notification)
                    if found is not None:
                        return found[0]
                if splitter.pending > MAX_ANSWER_BYTES:
                    raise UpstreamFailure("the MCP server sent an event over the size the gateway holds")
            for event in splitter.flush():
                found = await self._event(event.data, request_id, on_notification)
                if found is not None:
                    return found[0]
            raise UpstreamFailure("the MCP server's stream ended before the answer")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise UpstreamFailure("the MCP server's answer is over the size the gateway holds")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamFailure(f"the MCP server answered HTTP {response.status_code} without a JSON-RPC "
                                  "message") from None
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            raise UpstreamRpcError(doc["error"])
        if response.status_code != 200 or not isinstance(doc, dict) or "result" not in doc:
            raise UpstreamFailure(f"the MCP server answered HTTP {response.status_code} without a result")
        return doc["result"]

    async def _event(self, data: bytes, request_id: Any, on_notification: OnNotification | None) -> tuple[Any] | None:
        """One message of an answer's stream: (result,) when it is the answer, else None."""
        if not data:
            return None  # a priming event (an id, no data)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise UpstreamFailure("the MCP server sent an event that is not JSON") from None
        if not isinstance(doc, dict):
            raise UpstreamFailure("the MCP server sent an event that is no JSON-RPC message")
        if "method" not in doc:
            if doc.get("id") != request_id:
                return None
            if isinstance(doc.get("error"), dict):
                raise UpstreamRpcError(doc["error"])
            if "result" not in doc:
                raise UpstreamFailure("the MCP server's answer has neither result nor error")
            return (doc["result"],)
        if "id" in doc:  # a request of the server's (sampling, elicitation ...): we offered none
            await self._refuse_server_request(doc["id"], str(doc.get("method")))
            return None
        if not await self._progress.deliver(doc) and on_notification is not None:
            await on_notification(doc)
        return None

    async def _refuse_server_request(self, request_id: Any, method: str) -> None:
        reply = p.error_doc(request_id, p.METHOD_NOT_FOUND, f"the gateway does not offer {method} to MCP servers")
        try:
            await self.client.post(self._url(), content=orjson.dumps(reply), headers=await self._headers())
        except httpx.HTTPError:
            pass


@contextlib.contextmanager
def _deadline(server: McpServer) -> Iterator[None]:
    """``timeout_s`` for one request, initialisation included: a silent server becomes an
    ``UpstreamFailure``, never a hang."""
    with trio.move_on_after(server.timeout_s) as scope:
        yield
    if scope.cancelled_caught:
        raise UpstreamFailure(f"the MCP server {server.name} did not answer within {server.timeout_s:g} s")


# -- stdio --------------------------------------------------------------------------------------


class StdioLink:
    """A server the gateway runs, one process shared by every session (see the module doc).

    ``nursery`` runs the process's reader tasks; the process lives until :meth:`aclose` (a
    reload that removes or changes the server, or the daemon's stop)."""

    def __init__(self, server: McpServer, nursery: trio.Nursery) -> None:
        assert server.command is not None
        self.server = server
        self.nursery = nursery
        self.process: trio.Process | None = None
        self._ready = False
        self._lock = trio.Lock()
        self._write_lock = trio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, trio.MemorySendChannel[dict[str, Any] | Exception]] = {}
        self._progress = ProgressTokens("gw-")
        self.starts = 0  # processes started: the tests read it
        self.closed = False

    async def request(self, method: str, params: dict[str, Any], on_notification: OnNotification | None = None,
                      on_sent: Callable[[], None] | None = None) -> Any:
        with _deadline(self.server):
            await self._ensure()
            return await self._call(method, params, on_notification, on_sent)

    async def _ensure(self) -> None:
        async with self._lock:
            if self._ready and self.process is not None and self.process.returncode is None:
                return
            if self.closed:
                raise UpstreamFailure(f"the MCP server {self.server.name} was removed")
            await self._start()
            result = await self._call("initialize", initialize_params(p.LATEST), None, None)
            if not isinstance(result, dict) or result.get("protocolVersion") not in p.PROTOCOL_VERSIONS:
                raise UpstreamFailure(f"the MCP server {self.server.name} speaks a protocol version the gateway "
                                      "does not")
            await self._write(p.notification_doc("notifications/initialized"))
            self._ready = True

    async def _start(self) -> None:
        self._ready = False
        if self.process is not None:
            await self._stop()
        assert self.server.command is not None
        try:
            process = await trio.lowlevel.open_process(
                [self.server.command, *self.server.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=dict(self.server.env), cwd=self.server.cwd)
        except OSError as e:
            raise UpstreamFailure(f"the MCP server {self.server.name} could not be started: {e.strerror}") from None
        self.process = process
        self.starts += 1
        self.nursery.start_soon(self._read, process)
        self.nursery.start_soon(self._log_stderr, process)

    async def _call(self, method: str, params: dict[str, Any], on_notification: OnNotification | None,
                    on_sent: Callable[[], None] | None) -> Any:
        request_id = next(self._ids)
        params, own_token = self._progress.replace(params, on_notification)
        send, receive = trio.open_memory_channel[dict[str, Any] | Exception](1)
        self._pending[request_id] = send
        answered = False
        try:
            await self._write(p.request_doc(request_id, method, params))
            if on_sent is not None:
                on_sent()
            doc = await receive.receive()
            answered = True
        finally:
            self._pending.pop(request_id, None)
            if own_token is not None:
                self._progress.callers.pop(own_token, None)
            if not answered and self.process is not None and self.process.returncode is None:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    try:  # the caller left (or timed out): the server may stop working on it
                        await self._write(p.notification_doc("notifications/cancelled", {"requestId": request_id}))
                    except UpstreamFailure:
                        pass
        if isinstance(doc, Exception):
            raise doc
        if isinstance(doc.get("error"), dict):
            raise UpstreamRpcError(doc["error"])
        if "result" not in doc:
            raise UpstreamFailure("the MCP server's answer has neither result nor error")
        return doc["result"]

    async def _write(self, doc: dict[str, Any]) -> None:
        process = self.process
        if process is None or process.stdin is None or process.returncode is not None:
            raise UpstreamFailure(f"the MCP server {self.server.name} is not running")
        async with self._write_lock:
            try:
                await process.stdin.send_all(orjson.dumps(doc) + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise UpstreamFailure(f"the MCP server {self.server.name} exited") from None

    async def _read(self, process: trio.Process) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            while True:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
                while (end := buffer.find(b"\n")) != -1:
                    line = bytes(buffer[:end]).strip()
                    del buffer[:end + 1]
                    if line:
                        await self._dispatch(line)
                if len(buffer) > MAX_LINE_BYTES:
                    log.warning("MCP server %s sent a line over %d bytes; stopping it", self.server.name,
                                MAX_LINE_BYTES, extra={"fields": {"mcp_server": self.server.name}})
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            if self.process is process:
                self._ready = False
                with trio.CancelScope(shield=True):
                    await self._fail_pending(UpstreamFailure(f"the MCP server {self.server.name} exited"))
                    with trio.move_on_after(STDIO_STOP_GRACE_S):
                        await process.wait()
                if process.returncode is None:
                    process.kill()

    async def _dispatch(self, line: bytes) -> None:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            log.warning("MCP server %s wrote a line that is not JSON on stdout", self.server.name,
                        extra={"fields": {"mcp_server": self.server.name}})
            return
        if not isinstance(doc, dict):
            return
        if "method" in doc:
            if "id" in doc:  # the server's own request: we offered no capability that allows one
                reply = p.error_doc(doc["id"], p.METHOD_NOT_FOUND, "the gateway does not offer this to MCP servers")
                try:
                    await self._write(reply)
                except UpstreamFailure:
                    pass
            else:
                await self._progress.deliver(doc)  # other notifications have no caller to go to
            return
        pending = self._pending.get(doc.get("id"))  # type: ignore[arg-type]
        if pending is not None:
            try:
                pending.send_nowait(doc)
            except (trio.WouldBlock, trio.BrokenResourceError):
                pass

    async def _fail_pending(self, error: Exception) -> None:
        for send in list(self._pending.values()):
            try:
                send.send_nowait(error)
            except (trio.WouldBlock, trio.BrokenResourceError):
                pass

    async def _log_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        buffer = bytearray()
        try:
            while chunk := await process.stderr.receive_some(65536):
                buffer += chunk
                while (end := buffer.find(b"\n")) != -1:
                    text = bytes(buffer[:end]).decode("utf-8", "replace").rstrip()[:2000]
                    del buffer[:end + 1]
                    if text:
                        log.info("MCP server %s: %s", self.server.name, text,
                                 extra={"fields": {"mcp_server": self.server.name}})
                del buffer[:max(0, len(buffer) - 65536)]
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _stop(self) -> None:
        process, self.process = self.process, None
        self._ready = False
        if process is None:
            return
        with trio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()  # the transport's way to ask a server to stop
            with trio.move_on_after(STDIO_STOP_GRACE_S):
                await process.wait()
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(STDIO_STOP_GRACE_S):
                    await process.wait()
            if process.returncode is None:
                process.kill()
            await self._fail_pending(UpstreamFailure(f"the MCP server {self.server.name} was stopped"))

    async def aclose(self) -> None:
        self.closed = True
        await self._stop()


Link = HttpLink | StdioLink
__all__ = ["HttpLink", "Link", "StdioLink", "TokenSource", "UpstreamFailure", "UpstreamRpcError"]
