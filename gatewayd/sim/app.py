"""The simulator's HTTP application: routes, the request log, faults and the stream driver.

Each endpoint runs the same steps: record the request, check the vendor's headers, parse
and validate the body, plan the reply (:mod:`.behaviour`), apply the faults the markers
asked for, then render the plan through the endpoint's wire module, as one JSON body or as
a stream driven by :func:`_drive`.

Connection-level faults (``disconnect``, ``drop_after``) need to close the TCP connection
under the app's feet, which ASGI cannot express. :func:`abort_connection` reaches
hypercorn's connection through the ASGI ``send`` callable (captured per request by a tiny
ASGI wrapper) and hands it hypercorn's own ``Closed`` event; see its docstring.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol
from functools import partial

import attrs
import orjson
import trio
from hypercorn.events import Closed
from quart import Response, request
from quart_trio import QuartTrio

from . import anthropic, bedrock, embeddings, gemini, openai_chat, openai_responses
from .behaviour import CONTENT, FINISH, NO_FAULTS, Faults, Plan, parse_markers, plan
from .operator_ids import operator_id_message
from .prompt_cache import PromptCache

LOG_LIMIT = 1000
RESPONSE_IDS_LIMIT = 100_000  #: Responses ids remembered for ``previous_response_id``
_SEND_KEY = "gatewayd.sim.send"
_BATCH_BYTES = 64 * 1024
_JSON = "application/json"


class SimulatedConnectionFault(RuntimeError):
    """Raised to break a response when the connection cannot be closed directly."""


# -- the request log -------------------------------------------------------------------


@attrs.define(eq=False)
class Recorded:
    """One request as received. Cheap to make: raw bytes now, decoding on GET."""

    seq: int
    time: float
    method: str
    path: str
    query: bytes
    headers: list
    body: bytes
    status: int | None = None
    stream: bool = False
    cancelled: bool = False  #: the client went away before the reply was complete
    dropped: bool = False  #: the simulator closed the connection on purpose (a fault)
    completed: bool = False  #: the whole answer was written (a stream: up to its last event)
    answer: Callable[[], dict] | None = None  #: renders the whole answer, non-stream shape (lazily)

    def to_json(self) -> dict:
        headers: dict[str, str] = {}
        for name, value in self.headers:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        try:
            parsed = orjson.loads(self.body) if self.body else None
        except orjson.JSONDecodeError:
            parsed = None
        return {
            "seq": self.seq,
            "time": self.time,
            "method": self.method,
            "path": self.path,
            "query": self.query.decode("latin-1"),
            "headers": headers,
            "body": self.body.decode("utf-8", "replace"),
            "json": parsed,
            "status": self.status,
            "stream": self.stream,
            "cancelled": self.cancelled,
            "dropped": self.dropped,
            "completed": self.completed,
            "answer": self.answer() if self.answer is not None else None,
        }


class SimState:
    """Per-app state: the request counter (ids) and the last ``LOG_LIMIT`` requests."""

    def __init__(self, limit: int = LOG_LIMIT) -> None:
        self.log: deque[Recorded] = deque(maxlen=limit)
        self._seq = itertools.count(1)
        self.markers = ""  #: markers applied to every request (``PUT /_sim/settings``): a provider outage
        self.prompt_cache: PromptCache | None = None  #: on with ``PUT /_sim/settings``
        self.response_ids: OrderedDict[str, None] = OrderedDict()  #: stored Responses ids, oldest first

    def remember_response(self, response_id: str) -> None:
        self.response_ids[response_id] = None
        while len(self.response_ids) > RESPONSE_IDS_LIMIT:
            self.response_ids.popitem(last=False)

    def unknown_previous(self, body: dict) -> str | None:
        """The ``previous_response_id`` when this simulator never issued (and stored) it."""
        previous = body.get("previous_response_id")
        if previous is None or (isinstance(previous, str) and previous in self.response_ids):
            return None
        return str(previous)

    def settings(self) -> dict:
        return {"markers": self.markers, "prompt_cache": self.prompt_cache is not None}

    def record(self, body: bytes) -> Recorded:
        scope: Mapping[str, Any] = request.scope
        entry = Recorded(
            next(self._seq), time.time(), scope["method"], scope["path"], scope["query_string"], list(scope["headers"]),
            body
        )
        self.log.append(entry)
        return entry


# -- errors in each vendor's shape -----------------------------------------------------

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# Each vendor's error, with its retry hint (``retry_after_s``) where that vendor puts it:
# OpenAI and Anthropic in a ``Retry-After`` header, Google in the body (google.rpc.RetryInfo).


SIMULATED_RETRY_AFTER_S = 7  # what a simulated 429 asks the caller to wait


def _with_retry_after(response: Response, retry_after_s: int | None) -> Response:
    if retry_after_s is not None:
        response.headers["retry-after"] = str(retry_after_s)
    return response


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after_s: int | None = None) -> Response:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if status == 429 and code is None:
        code = "rate_limit_exceeded"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return _with_retry_after(Response(orjson.dumps(body), status, content_type=_JSON), retry_after_s)


def anthropic_error(status: int, message: str, *, retry_after_s: int | None = None, **_: object) -> Response:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return _with_retry_after(Response(orjson.dumps(body), status, content_type=_JSON), retry_after_s)


def google_error(status: int, message: str, *, retry_after_s: int | None = None, **_: object) -> Response:
    body = gemini.error_body(status, message, retry_after_s=retry_after_s)
    return Response(orjson.dumps(body), status, content_type=_JSON)


def _bearer(headers) -> str:
    value = headers.get("authorization", "")
    return value[7:].strip() if value[:7].lower() == "bearer " else ""


def _openai_headers(headers) -> Response | None:
    if not _bearer(headers):
        return openai_error(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        )
    return None


def _anthropic_headers(headers) -> Response | None:
    if not _bearer(headers) and not headers.get("x-api-key"):
        return anthropic_error(401, "x-api-key header is required")
    if not headers.get("anthropic-version"):
        return anthropic_error(400, "anthropic-version: header is required")
    return None


def _google_headers(headers) -> Response | None:
    if not headers.get("x-goog-api-key") and not request.args.get("key"):
        return google_error(
            403, "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
        )
    return None


def _azure_headers(headers) -> Response | None:
    """Azure OpenAI: the key in ``api-key`` (or a bearer token), ``?api-version=`` on every call."""
    if not headers.get("api-key") and not _bearer(headers):
        return openai_error(401, "Access denied due to invalid subscription key or wrong API endpoint. Make sure "
                                 "to provide a valid key for an active subscription and use a correct regional "
                                 "API endpoint for your resource.", code="401")
    if not request.args.get("api-version"):
        return openai_error(404, "Resource not found", code="404")
    return None


# -- one wire protocol, as the handler sees it -----------------------------------------


@attrs.frozen
class Wire:
    error: Callable[..., Response]
    check_headers: Callable[..., Response | None]
    validate: Callable
    extract: Callable
    render: Callable
    events: Callable[..., Iterator[tuple[bytes, int]]]
    stream_error: Callable[[int], bytes]
    invalid_json: bytes
    invalid_stream: bytes
    protocol: str  #: "chat", "responses" or "messages" (token counting)


def with_prompt_cache(state, reply: Plan, body: dict, protocol: str,
                      count: Callable[[dict], int] | None = None) -> Plan:
    """``reply`` with the part of its input the simulator's prompt cache holds (when the
    setting is on) moved to cache reads."""
    if state.prompt_cache is None:
        return reply
    cached = min(state.prompt_cache.cached_tokens(body, protocol, count), reply.input_tokens)
    return attrs.evolve(reply, input_tokens=reply.input_tokens - cached, cache_read=reply.cache_read + cached)


class StreamFaults(Protocol):
    """What :func:`_drive` needs of a wire: the bytes of a mid-stream error (Bedrock's
    simulator, which frames its streams differently, gives only this)."""

    def stream_error(self, sent: int) -> bytes: ...


def _wire(module, protocol, error, check_headers) -> Wire:
    return Wire(
        error,
        check_headers,
        module.validate,
        module.extract,
        module.render,
        module.events,
        module.stream_error,
        module.INVALID_JSON,
        module.INVALID_STREAM,
        protocol,
    )


CHAT = _wire(openai_chat, "chat", openai_error, _openai_headers)
RESPONSES = _wire(openai_responses, "responses", openai_error, _openai_headers)
MESSAGES = _wire(anthropic, "messages", anthropic_error, _anthropic_headers)
AZURE_CHAT = _wire(openai_chat, "chat", openai_error, _azure_headers)
AZURE_RESPONSES = _wire(openai_responses, "responses", openai_error, _azure_headers)
GEMINI = _wire(gemini, "gemini", google_error, _google_headers)


# -- connection faults -----------------------------------------------------------------


async def _request_body() -> bytes:
    """The request's body as bytes (Quart types ``get_data`` as bytes only when every argument is given)."""
    return await request.get_data(cache=True, as_text=False, parse_form_data=False)


async def abort_connection(scope: Mapping[str, Any]) -> bool:
    """Close this request's client connection at once; False if the server is not hypercorn.

    The ASGI ``send`` hypercorn gives the app is ``HTTPStream.app_send``; the stream's
    ``send`` is the HTTP/1 (or HTTP/2) protocol's ``stream_send``; the protocol's ``send``
    is ``TCPServer.protocol_send``. Handing that a ``hypercorn.events.Closed`` makes the
    server close the socket (FIN after whatever was already written, no terminating
    chunk), tell the app ``http.disconnect``, and so cancel this handler. Checked with
    hypercorn 0.18; anything else falls back to raising (see callers).
    """
    stream = getattr(scope.get(_SEND_KEY), "__self__", None)
    protocol = getattr(getattr(stream, "send", None), "__self__", None)
    protocol_send = getattr(protocol, "send", None)
    if protocol_send is None or getattr(protocol_send, "__name__", "") != "protocol_send":
        return False
    await protocol_send(Closed())
    return True


async def _close_connection(entry: Recorded, scope: Mapping[str, Any]) -> None:
    """Close the connection and wait to be cancelled by the resulting disconnect."""
    entry.dropped = True
    if await abort_connection(scope):
        with trio.move_on_after(10):
            await trio.sleep_forever()
    raise SimulatedConnectionFault("simulated connection drop")


async def _before_reply(faults: Faults, entry: Recorded, error: Callable[..., Response]) -> Response | None:
    """Faults that act before the status line: delay, disconnect, status."""
    if faults is NO_FAULTS:
        return None
    try:
        if faults.delay_ms:
            await trio.sleep(faults.delay_ms / 1000)
        if faults.disconnect:
            await _close_connection(entry, request.scope)
    except trio.Cancelled:
        entry.cancelled = not entry.dropped
        raise
    if faults.status:
        message = f"simulated error {faults.status}"
        if faults.operator_ids:
            vendor = "anthropic" if error is anthropic_error else "google" if error is google_error else "openai"
            message = operator_id_message(vendor, faults.status)
        return error(faults.status, message,
                     retry_after_s=SIMULATED_RETRY_AFTER_S if faults.status == 429 else None)
    return None


async def _drive(
    events: Iterator[tuple[bytes, int]], faults: Faults, entry: Recorded, wire: StreamFaults, scope: Mapping[str, Any]
) -> AsyncIterator[bytes]:
    """Write a stream's events, applying the mid-stream faults.

    Without pacing faults the events are coalesced into few large writes (no latency, little
    CPU). Otherwise each event is its own write; ``cut`` faults fire just before content
    event N+1, or before the closing event when the reply has N or fewer content events.
    Runs outside Quart's request context (hence ``scope`` passed in). A client that goes
    away shows up here as trio.Cancelled (or GeneratorExit when Quart closes the generator)
    and is recorded as ``cancelled``.
    """
    try:
        if not faults.paced:
            buffer: list[bytes] = []
            size = 0
            for data, _ in events:
                buffer.append(data)
                size += len(data)
                if size >= _BATCH_BYTES:
                    yield b"".join(buffer)
                    buffer, size = [], 0
            if buffer:
                yield b"".join(buffer)
            entry.completed = True
            return
        cut = faults.cut
        delay = faults.chunk_delay_ms / 1000
        sent = content = 0
        for data, kind in events:
            if cut is not None and (kind == FINISH or (kind == CONTENT and content >= cut[1])):
                if cut[0] == "error":
                    yield wire.stream_error(sent)
                    return
                if cut[0] == "stall":
                    await trio.sleep_forever()
                await _close_connection(entry, scope)
            if sent and delay:
                await trio.sleep(delay)
            yield data
            sent += 1
            if kind == CONTENT:
                content += 1
        entry.completed = True
    except (trio.Cancelled, GeneratorExit):
        entry.cancelled = not entry.dropped
        raise


async def _single(chunk: bytes) -> AsyncIterator[bytes]:
    yield chunk


# -- handlers --------------------------------------------------------------------------


def _done(entry: Recorded, response: Response) -> Response:
    entry.status = response.status_code
    return response


def _load(raw: bytes) -> dict | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


_BAD_JSON = (
    "We could not parse the JSON body of your request. "
    "(HINT: This likely means you aren't using your HTTP library correctly.)"
)


async def _answer(state: SimState, wire: Wire, *, url_model: str | None = None, url_stream: bool | None = None,
                  as_array: bool = False) -> Response:
    """One model request. Gemini puts the model and the streaming choice in the URL
    (``url_model``, ``url_stream``); its ``streamGenerateContent`` without ``alt=sse``
    answers a JSON array (here of one element: the whole answer)."""
    raw = await _request_body()
    entry = state.record(raw)
    denied = wire.check_headers(request.headers)
    if denied is not None:
        return _done(entry, denied)
    body = _load(raw)
    if body is None:
        return _done(entry, wire.error(400, _BAD_JSON))
    problem = wire.validate(body)
    if problem is not None:
        code = problem[2] if len(problem) > 2 else None
        return _done(entry, wire.error(400, problem[0], param=problem[1], code=code))
    if wire.protocol == "responses" and (unknown := state.unknown_previous(body)) is not None:
        return _done(entry, wire.error(400, f"Previous response with id '{unknown}' not found.",
                                       param="previous_response_id", code="previous_response_not_found"))

    if url_model is not None:
        body["model"] = url_model
    prompt = wire.extract(body)
    if state.markers:
        prompt = attrs.evolve(prompt, user_text=f"{prompt.user_text} {state.markers}")
    reply = with_prompt_cache(state, plan(prompt), body, wire.protocol)
    faults = reply.faults
    stream = body.get("stream") is True if url_stream is None else url_stream
    entry.stream = stream
    early = await _before_reply(faults, entry, wire.error)
    if early is not None:
        return _done(entry, early)
    entry.status = 200
    entry.answer = partial(wire.render, reply, body, entry.seq)
    if wire.protocol == "responses" and body.get("store") is not False:
        state.remember_response(openai_responses.response_id(entry.seq))
    if stream:
        if faults.invalid_json:
            chunks = _single(wire.invalid_stream)
        else:
            chunks = _drive(wire.events(reply, body, entry.seq), faults, entry, wire, request.scope)
        return Response(chunks, 200, mimetype="text/event-stream", headers={"cache-control": "no-cache"})
    if faults.invalid_json:
        return Response(wire.invalid_json, 200, content_type=_JSON)
    rendered = wire.render(reply, body, entry.seq)
    entry.completed = True
    return Response(orjson.dumps([rendered] if as_array else rendered), 200, content_type=_JSON)


async def _embed(state: SimState, check_headers: Callable[..., Response | None] = _openai_headers) -> Response:
    raw = await _request_body()
    entry = state.record(raw)
    denied = check_headers(request.headers)
    if denied is not None:
        return _done(entry, denied)
    body = _load(raw)
    if body is None:
        return _done(entry, openai_error(400, _BAD_JSON))
    problem = embeddings.validate(body)
    if problem is not None:
        return _done(entry, openai_error(400, problem[0], param=problem[1]))
    faults = parse_markers(f"{embeddings.marker_text(body)} {state.markers}").faults
    early = await _before_reply(faults, entry, openai_error)
    if early is not None:
        return _done(entry, early)
    if faults.invalid_json:
        return _done(entry, Response(embeddings.INVALID_JSON, 200, content_type=_JSON))
    return _done(entry, Response(orjson.dumps(embeddings.render(body)), 200, content_type=_JSON))


def create_sim_app() -> QuartTrio:
    """A fresh simulator app with its own request log and id counter."""
    app = QuartTrio(__name__)
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None, MAX_CONTENT_LENGTH=None)
    state = SimState()
    app.extensions["gatewayd.sim"] = state

    quart_asgi = app.asgi_app

    async def asgi_app(scope, receive, send):
        if scope["type"] == "http":
            scope[_SEND_KEY] = send  # for abort_connection
        await quart_asgi(scope, receive, send)

    app.asgi_app = asgi_app  # type: ignore[method-assign]

    @app.post("/v1/chat/completions")
    async def chat_completions() -> Response:
        return await _answer(state, CHAT)

    @app.post("/v1/responses")
    async def responses() -> Response:
        return await _answer(state, RESPONSES)

    @app.post("/v1/messages")
    async def messages() -> Response:
        return await _answer(state, MESSAGES)

    @app.post("/v1beta/models/<path:target>")
    async def gemini_models(target: str) -> Response:
        model, _, method = target.rpartition(":")
        if not model or method not in ("generateContent", "streamGenerateContent"):
            entry = state.record(await _request_body())
            return _done(entry, google_error(404, f"Method not found: {request.path}"))
        sse = request.args.get("alt") == "sse"
        streaming = method == "streamGenerateContent"
        return await _answer(state, GEMINI, url_model=model, url_stream=streaming and sse,
                             as_array=streaming and not sse)

    bedrock.register(app, state)  # POST /bedrock/model/{modelId}/{action} (docs/simulator.md)

    @app.post("/v1/embeddings")
    async def embed() -> Response:
        return await _embed(state)

    # Azure OpenAI: deployments in the path, the Responses API beside them (docs/simulator.md)
    @app.post("/openai/deployments/<deployment>/chat/completions")
    async def azure_chat(deployment: str) -> Response:
        return await _answer(state, AZURE_CHAT)

    @app.post("/openai/deployments/<deployment>/embeddings")
    async def azure_embed(deployment: str) -> Response:
        return await _embed(state, _azure_headers)

    @app.post("/openai/responses")
    async def azure_responses() -> Response:
        return await _answer(state, AZURE_RESPONSES)

    @app.get("/_sim/requests")
    async def list_requests() -> Response:
        contains = request.args.get("contains")
        needle = contains.encode() if contains is not None else None
        path = request.args.get("path")
        found = [
            entry.to_json()
            for entry in state.log
            if (needle is None or needle in entry.body) and (path is None or entry.path == path)
        ]
        return Response(orjson.dumps(found), 200, content_type=_JSON)

    @app.delete("/_sim/requests")
    async def clear_requests() -> Response:
        cleared = len(state.log)
        state.log.clear()
        return Response(orjson.dumps({"cleared": cleared}), 200, content_type=_JSON)

    @app.get("/_sim/settings")
    async def get_settings() -> Response:
        return Response(orjson.dumps(state.settings()), 200, content_type=_JSON)

    @app.put("/_sim/settings")
    async def put_settings() -> Response:
        doc = _load(await _request_body())
        if doc is None or not set(doc) <= {"markers", "prompt_cache"} or not isinstance(
                doc.get("markers", ""), str) or not isinstance(doc.get("prompt_cache", False), bool):
            return openai_error(400, 'expected {"markers": "<markers>", "prompt_cache": true|false}')
        if "markers" in doc:
            state.markers = doc["markers"]
        if "prompt_cache" in doc:
            state.prompt_cache = PromptCache() if doc["prompt_cache"] else None
        return Response(orjson.dumps(state.settings()), 200, content_type=_JSON)

    @app.get("/_sim/health")
    async def health() -> Response:
        return Response(b'{"ok":true}', 200, content_type=_JSON)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    @app.route("/", defaults={"rest": ""}, methods=methods)
    @app.route("/<path:rest>", methods=methods)
    async def not_found(rest: str) -> Response:
        entry = state.record(await _request_body())
        message = f"Unknown request URL: {request.method} {request.path}."
        if request.path.startswith(("/v1beta/", "/vertex/")):
            return _done(entry, google_error(404, message))
        if request.headers.get("anthropic-version"):
            return _done(entry, anthropic_error(404, message))
        return _done(entry, openai_error(404, message))

    from .vertex import register as register_vertex  # imports this module: registered once it is loaded

    register_vertex(app, state, _answer, (MESSAGES, GEMINI))
    return app


def sim_state(app: QuartTrio) -> SimState:
    """The request log and counter of an app made by :func:`create_sim_app`."""
    return app.extensions["gatewayd.sim"]
