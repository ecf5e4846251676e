"""MCP over JSON-RPC 2.0, sans-I/O: messages in, messages out, no sockets and no clock.

What the gateway's MCP endpoint (``gatewayd.mcp.gateway``) and its upstream links
(``gatewayd.mcp.upstream``) both need from the protocol, as plain functions and frozen
values, testable with bytes alone (tests/test_mcp_protocol.py):

- parsing one JSON-RPC message (request, notification, or a client's response) with the
  errors JSON-RPC 2.0 names for each way it can be wrong: -32700 for bytes that are not
  JSON, -32600 for JSON that is no request (batches included: MCP 2025-06-18 removed
  them), -32602 for params that are not an object. An unknown method is -32601, as
  JSON-RPC says (the Python SDK's low-level server answers -32602 there; we do not);
- protocol version negotiation (the client's version when we speak it, else our latest)
  and the ``MCP-Protocol-Version`` header check;
- the aggregate endpoint's tool names (``server__tool``);
- the session id: signed, so that every instance of the gateway recognises the sessions any
  other issued (state travels in the id, not in one process's memory), and bound to the key
  and endpoint that opened it;
- SSE framing of a message (``event: message``), as the SDKs read it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import attrs
import orjson

# newest first; the SDKs of 2025 and 2026 (Python mcp 1.x, TypeScript 1.x) speak these
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST = PROTOCOL_VERSIONS[0]
# a request without MCP-Protocol-Version: the spec (2025-06-18) says assume 2025-03-26
VERSION_WITHOUT_HEADER = "2025-03-26"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800  # as LSP names it: the client cancelled the request (notifications/cancelled)
# the gateway's own, in JSON-RPC's range for implementation-defined server errors
REFUSED = -32001  # balance, key spend limit or budget, concurrency: ``data`` carries the gateway's code
UPSTREAM_FAILED = -32002  # the MCP server could not be reached or broke off; nothing was charged

SEPARATOR = "__"  # /mcp names a tool server__tool
SESSION_PREFIX = "g1."


class RpcError(Exception):
    """A JSON-RPC error to answer (``id`` None when the request's id could not be read)."""

    def __init__(self, code: int, message: str, *, id: Any = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id
        self.data = data

    def doc(self) -> dict[str, Any]:
        return error_doc(self.id, self.code, self.message, self.data)


@attrs.frozen
class Request:
    id: str | int
    method: str
    params: dict[str, Any]


@attrs.frozen
class Notification:
    method: str
    params: dict[str, Any]


@attrs.frozen
class Reply:
    """A client's answer to a request of ours (we send none; accepted and dropped)."""

    id: str | int | None


Message = Request | Notification | Reply


def _valid_id(value: Any) -> bool:
    # MCP: a request id is a string or an integer, never null (and a bool is no integer)
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_message(raw: bytes) -> Message:
    """One message of a POST body, or the ``RpcError`` to answer."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RpcError(PARSE_ERROR, "Parse error: the body is not JSON") from None
    return read_message(doc)


def read_message(doc: Any) -> Message:
    if isinstance(doc, list):
        raise RpcError(INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 "
                                        "removed them); send one message per POST")
    if not isinstance(doc, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    raw_id = doc.get("id")
    id_ = raw_id if _valid_id(raw_id) else None
    if doc.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', id=id_)
    method = doc.get("method")
    if method is None:
        if "result" in doc or "error" in doc:
            return Reply(id_)
        raise RpcError(INVALID_REQUEST, 'Invalid Request: no "method"', id=id_)
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string', id=id_)
    if "id" in doc and id_ is None:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    params = doc.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, 'Invalid params: "params" must be an object', id=id_)
    if id_ is None:
        return Notification(method, params)
    return Request(id_, method, params)


def result_doc(id_: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def error_doc(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def request_doc(id_: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        doc["params"] = params
    return doc


def notification_doc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        doc["params"] = params
    return doc


def encode(doc: Any) -> bytes:
    return orjson.dumps(doc)


def sse_event(doc: Any) -> bytes:
    """One message as the Streamable HTTP transport frames it in a stream."""
    return b"event: message\ndata: " + orjson.dumps(doc) + b"\n\n"


# -- versions -------------------------------------------------------------------------


def negotiate(requested: Any) -> str:
    """The version to answer ``initialize`` with: the client's when we speak it, else our
    latest (the client then decides whether it can go on)."""
    return requested if isinstance(requested, str) and requested in PROTOCOL_VERSIONS else LATEST


def header_version(value: str | None) -> str:
    """The version a request's ``MCP-Protocol-Version`` header names, or the ``RpcError``
    (answered with HTTP 400) for one we do not speak."""
    if value is None:
        return VERSION_WITHOUT_HEADER
    if value.strip() not in PROTOCOL_VERSIONS:
        raise RpcError(INVALID_REQUEST, f"Bad Request: unsupported MCP-Protocol-Version {value[:40]!r} "
                                        f"(supported: {', '.join(PROTOCOL_VERSIONS)})")
    return value.strip()


# -- the aggregate endpoint's names -----------------------------------------------------


def qualified(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_qualified(name: str) -> tuple[str, str] | None:
    """``server__tool`` -> (server, tool); server names never contain ``__``, tools may."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        return None
    return server, tool


# -- sessions -----------------------------------------------------------------------------


@attrs.frozen
class Session:
    """What a session id carries: who opened it, where, and the version agreed."""

    key_id: str
    scope: str  # the server's name, or "*" for the aggregate endpoint
    protocol_version: str
    issued_at: int  # Unix seconds
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def session_key(secret: bytes) -> bytes:
    """The signing key of session ids, derived from the gateway's shared secret (the one every
    instance reads from the store: ``gatewayd.console.session.load_secret``)."""
    return hmac.new(secret, b"gatewayd.mcp.session", hashlib.sha256).digest()


def issue_session(key: bytes, session: Session) -> str:
    """A session id: ``g1.<payload>.<signature>``, visible ASCII as the transport requires."""
    payload = _b64(orjson.dumps([session.key_id, session.scope, session.protocol_version, session.issued_at,
                                 session.nonce]))
    signature = _b64(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest()[:18])
    return f"{SESSION_PREFIX}{payload}.{signature}"


MAX_SESSION_ID = 512


def open_session(key: bytes, session_id: str) -> Session | None:
    """The session a signed id carries, or None (not ours, altered, or unreadable)."""
    if len(session_id) > MAX_SESSION_ID or not session_id.startswith(SESSION_PREFIX):
        return None
    payload, _, signature = session_id[len(SESSION_PREFIX):].partition(".")
    expected = _b64(hmac.new(key, payload.encode("ascii", "replace"), hashlib.sha256).digest()[:18])
    if not hmac.compare_digest(signature.encode("ascii", "replace"), expected.encode("ascii")):
        return None
    try:
        key_id, scope, version, issued_at, nonce = orjson.loads(_unb64(payload))
    except (ValueError, TypeError, orjson.JSONDecodeError):
        return None
    if not all(isinstance(v, str) for v in (key_id, scope, version, nonce)) or not isinstance(issued_at, int):
        return None
    return Session(key_id=key_id, scope=scope, protocol_version=version, issued_at=issued_at, nonce=nonce)


# -- tools ---------------------------------------------------------------------------------


def tool_call_target(params: dict[str, Any], request_id: Any) -> tuple[str, dict[str, Any]]:
    """``tools/call``'s tool name and arguments, or the -32602 for a call without them."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise RpcError(INVALID_PARAMS, 'Invalid params: tools/call needs "name" (a string)', id=request_id)
    arguments = params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, 'Invalid params: "arguments" must be an object', id=request_id)
    return name, arguments


def unknown_tool(name: str, request_id: Any) -> RpcError:
    """A tool the caller may not use and a tool that does not exist get the same answer: a key
    learns nothing of the tools outside its list."""
    return RpcError(INVALID_PARAMS, f"Unknown tool: {name}", id=request_id)


def progress_token(params: dict[str, Any]) -> Any:
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, dict) else None


def with_progress_token(params: dict[str, Any], token: Any) -> dict[str, Any]:
    """``params`` with ``_meta.progressToken`` replaced (the upstream link's own token)."""
    meta = params.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta["progressToken"] = token
    return {**params, "_meta": meta}
