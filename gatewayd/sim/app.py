"""The simulator's HTTP application: routes, the request log and each vendor's wire.

Each endpoint runs the same steps: record the request, check the vendor's headers, parse
and validate the body, plan the reply (:mod:`.behaviour`), apply the faults the markers
asked for, then render the plan through the endpoint's wire module, as one JSON body or as
a stream driven by :func:`.exchange.drive` (the faults, the vendors' error shapes and the
request log's entry are in :mod:`.exchange`, shared with the Bedrock and Vertex routes).
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from functools import partial

import attrs
import orjson
from quart import Response, request
from quart_trio import QuartTrio

from . import anthropic, bedrock, embeddings, gemini, openai_chat, openai_responses
from .behaviour import parse_markers, plan
from .exchange import (SEND_KEY, Recorded, anthropic_error, before_reply, done, drive, google_error, load_body,
                       openai_error, request_body, single, with_prompt_cache)
from .prompt_cache import PromptCache
from .vertex import register as register_vertex

LOG_LIMIT = 1000
RESPONSE_IDS_LIMIT = 100_000  #: Responses ids remembered for ``previous_response_id``
_JSON = "application/json"


# -- the request log -------------------------------------------------------------------


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
#: ``POST /v1/responses/compact``: a responses body, answered whole as a ``response.compaction``
COMPACT = attrs.evolve(RESPONSES, render=openai_responses.render_compact)
GEMINI = _wire(gemini, "gemini", google_error, _google_headers)


# -- handlers --------------------------------------------------------------------------


_BAD_JSON = (
    "We could not parse the JSON body of your request. "
    "(HINT: This likely means you aren't using your HTTP library correctly.)"
)


async def _answer(state: SimState, wire: Wire, *, url_model: str | None = None, url_stream: bool | None = None,
                  as_array: bool = False) -> Response:
    """One model request. Gemini puts the model and the streaming choice in the URL
    (``url_model``, ``url_stream``); its ``streamGenerateContent`` without ``alt=sse``
    answers a JSON array (here of one element: the whole answer)."""
    raw = await request_body()
    entry = state.record(raw)
    denied = wire.check_headers(request.headers)
    if denied is not None:
        return done(entry, denied)
    body = load_body(raw)
    if body is None:
        return done(entry, wire.error(400, _BAD_JSON))
    problem = wire.validate(body)
    if problem is not None:
        code = problem[2] if len(problem) > 2 else None
        return done(entry, wire.error(400, problem[0], param=problem[1], code=code))
    if wire.protocol == "responses" and (unknown := state.unknown_previous(body)) is not None:
        return done(entry, wire.error(400, f"Previous response with id '{unknown}' not found.",
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
    early = await before_reply(faults, entry, wire.error)
    if early is not None:
        return done(entry, early)
    entry.status = 200
    entry.answer = partial(wire.render, reply, body, entry.seq)
    if wire.protocol == "responses" and body.get("store") is not False:
        state.remember_response(openai_responses.response_id(entry.seq))
    if stream:
        if faults.invalid_json:
            chunks = single(wire.invalid_stream)
        else:
            chunks = drive(wire.events(reply, body, entry.seq), faults, entry, wire, request.scope)
        return Response(chunks, 200, mimetype="text/event-stream", headers={"cache-control": "no-cache"})
    if faults.invalid_json:
        return Response(wire.invalid_json, 200, content_type=_JSON)
    rendered = wire.render(reply, body, entry.seq)
    entry.completed = True
    return Response(orjson.dumps([rendered] if as_array else rendered), 200, content_type=_JSON)


async def _embed(state: SimState, check_headers: Callable[..., Response | None] = _openai_headers) -> Response:
    raw = await request_body()
    entry = state.record(raw)
    denied = check_headers(request.headers)
    if denied is not None:
        return done(entry, denied)
    body = load_body(raw)
    if body is None:
        return done(entry, openai_error(400, _BAD_JSON))
    problem = embeddings.validate(body)
    if problem is not None:
        return done(entry, openai_error(400, problem[0], param=problem[1]))
    faults = parse_markers(f"{embeddings.marker_text(body)} {state.markers}").faults
    early = await before_reply(faults, entry, openai_error)
    if early is not None:
        return done(entry, early)
    if faults.invalid_json:
        return done(entry, Response(embeddings.INVALID_JSON, 200, content_type=_JSON))
    return done(entry, Response(orjson.dumps(embeddings.render(body)), 200, content_type=_JSON))


def create_sim_app() -> QuartTrio:
    """A fresh simulator app with its own request log and id counter."""
    app = QuartTrio(__name__)
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None, MAX_CONTENT_LENGTH=None)
    state = SimState()
    app.extensions["gatewayd.sim"] = state

    quart_asgi = app.asgi_app

    async def asgi_app(scope, receive, send):
        if scope["type"] == "http":
            scope[SEND_KEY] = send  # for abort_connection
        await quart_asgi(scope, receive, send)

    app.asgi_app = asgi_app  # type: ignore[method-assign]

    @app.post("/v1/chat/completions")
    async def chat_completions() -> Response:
        return await _answer(state, CHAT)

    @app.post("/v1/responses")
    async def responses() -> Response:
        return await _answer(state, RESPONSES)

    @app.post("/v1/responses/compact")
    async def responses_compact() -> Response:
        return await _answer(state, COMPACT)

    @app.post("/v1/messages")
    async def messages() -> Response:
        return await _answer(state, MESSAGES)

    @app.post("/v1beta/models/<path:target>")
    async def gemini_models(target: str) -> Response:
        model, _, method = target.rpartition(":")
        if not model or method not in ("generateContent", "streamGenerateContent"):
            entry = state.record(await request_body())
            return done(entry, google_error(404, f"Method not found: {request.path}"))
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
        doc = load_body(await request_body())
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
        entry = state.record(await request_body())
        message = f"Unknown request URL: {request.method} {request.path}."
        if request.path.startswith(("/v1beta/", "/vertex/")):
            return done(entry, google_error(404, message))
        if request.headers.get("anthropic-version"):
            return done(entry, anthropic_error(404, message))
        return done(entry, openai_error(404, message))

    register_vertex(app, state, _answer, (MESSAGES, GEMINI))
    return app


def sim_state(app: QuartTrio) -> SimState:
    """The request log and counter of an app made by :func:`create_sim_app`."""
    return app.extensions["gatewayd.sim"]
