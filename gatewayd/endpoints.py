"""The public model endpoints as data: what each one is, and the reader of its body.

An :class:`Endpoint` says everything that differs between endpoints -- its path, its
body reader, which models it may name, its client format (which the adapter table,
``gatewayd.providers``, turns into a route builder per upstream protocol) and its error
envelope. Everything that is the same -- the order of the steps, the money, the routes --
is :meth:`gatewayd.relay.Relay.serve`, one function read top to bottom.

A body reader (``read(body, ctx) -> Asked``) checks the few fields the gateway itself reads,
strictly and with the client's 400 naming the field, refuses what the gateway does not
carry (stored objects), and says what was asked: the model, whether to stream, and the
stored responses the body names. It is pure: no store, no config.

Adding an endpoint (a Gemini-API ``/v1beta/models/{model}:generateContent``, say):

1. write its reader here (a model named in the path is read from ``ctx.path``);
2. add its :class:`Endpoint` to ``ENDPOINTS`` (a new ``client_format`` needs route builders
   in ``gatewayd.providers``, and the prompt reader of ``billing.estimate`` that counts a
   cut stream's input, as ``gatewayd.failover`` lists; a new error envelope a writer in
   ``gatewayd.errors.ENVELOPES``; its name goes in ``gatewayd.metrics.MODEL_ENDPOINTS``, the
   bounded label set);
3. a path may name the model as ``{model}`` (``/v1beta/models/{model}:generateContent``):
   ``gatewayd.api_routes`` routes fixed paths and such patterns from ``ENDPOINTS`` alike.

An endpoint may take the key in more places than ``Authorization: Bearer``
(``key_headers``, ``key_query``), and one whose answer the gateway makes itself once the
model is authorized (``answer_here``: Gemini's ``countTokens``) has no route, no hold and no
usage row; it runs under the same rate limit and in-flight caps as a billable request, on a
body of at most ``[server] max_free_body_bytes``, its work in threads of its own
(``Relay.free_threads``).

A transport that is not one HTTP request (Responses over WebSocket, ``gatewayd.responses_ws``)
calls ``Relay.serve`` once a message with the same spec; the steps and the money do not change.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs

import attrs
import orjson
import trio

from gatewayd import tokens
from gatewayd.access import Caller, Grant, visible_models
from gatewayd.billing.estimate import prompt_transcript
from gatewayd.billing.features import check_cap_fields, check_n
from gatewayd.errors import BodyError, GatewayError
from gatewayd.formats.embeddings import embedding_inputs
from gatewayd.formats.gemini_body import canonical_count_tokens, canonical_gemini
from gatewayd.formats.raw_json import duplicate_key
from gatewayd.formats.stored_objects import asked_response_ids, refuse_stored_objects
from gatewayd.providers.base import encode_body, translate

LARGE_BODY_BYTES = 256 * 1024  # bodies over this get checkpoints between parsing, routing and building


@attrs.define
class Ctx:
    """One request as the listener saw it."""

    request_id: str
    client_ip: str | None
    headers: Any  # case-insensitive mapping
    endpoint: str  # "chat" | "messages" | "responses" | "embeddings" | "models": usage rows, metrics, log line
    caller: Caller | None = None  # set by ``Relay.admit``: the API routes admit before reading the body
    envelope: str = "openai"  # the endpoint's error envelope (``gatewayd.errors.error_body``)
    path: str = ""
    query: str = ""  # the query string, decoded (Gemini's ``?alt=sse``, ``?key=``)


@attrs.frozen
class Asked:
    """What a body reader found the client asks for."""

    model_id: str
    stream: bool = False
    response_ids: tuple[tuple[str, str], ...] = ()  # (param, id) of stored responses named: the account must own them
    sse: bool = True  # a stream framed as SSE events (a Gemini client without ``?alt=sse``: one JSON array)
    # the body in its canonical form when that differs from the client's (a Gemini body with a
    # snake_case field): everything after the reader reads it, and it is what goes upstream,
    # re-encoded (``Relay._read``); None: the client's body and bytes are canonical as they are
    canonical: dict | None = None


@attrs.frozen
class Endpoint:
    """One public model endpoint (module doc)."""

    name: str  # the usage row's and the metrics' endpoint
    method: str
    path: str
    read: Callable[[dict, Ctx], Asked]  # the body reader
    client_format: str  # what the route builders are looked up by
    kind: str = "chat"  # which models it may name: "chat" | "embedding"
    envelope: str = "openai"  # errors at the model step and after
    key_headers: tuple[str, ...] = ()  # headers read for the key when no Authorization came (x-api-key)
    key_query: str | None = None  # a query parameter read for the key last (Gemini's ``?key=``)
    # the gateway answers itself once the model is authorized: (body, grant, threads) -> the answer's bytes
    answer_here: Callable[[dict, Grant, trio.CapacityLimiter], Awaitable[bytes]] | None = None

    def path_match(self, path: str) -> bool:
        """Whether ``path`` is this endpoint's (a ``{model}`` in its path matches any model id)."""
        head, model, tail = self.path.partition("{model}")
        if not model:
            return path == head
        return len(path) > len(head) + len(tail) and path.startswith(head) and path.endswith(tail)


def parse_body(raw: bytes) -> dict:
    """The request body as a JSON object, or the client's 400 saying what it is instead."""
    if not raw:
        raise BodyError("the request body is empty; send a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BodyError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise BodyError("the request body must be a JSON object")
    refuse_duplicate_keys(raw, body)
    return body


def refuse_duplicate_keys(raw: bytes | str, body: Any, what: str = "the request body") -> None:
    """400 for a key given twice in one object of ``raw`` at any depth (``body`` is its parse):
    the gateway would read the last one, a provider perhaps the first."""
    twice = duplicate_key(raw.encode() if isinstance(raw, str) else raw, body)
    if twice is not None:
        key, path = twice
        where = "" if path == key else f" (at {path})"
        raise BodyError(f"{what} has the key {key!r} more than once in one object{where}; send each field once",
                        param=path)


async def read_body(raw: bytes) -> dict:
    """``parse_body``, then other tasks' turn when the body is large: parsing one takes a
    millisecond or more (orjson: about 1 ms a MB), and what follows until the relay's own
    checkpoint (checks, authorization, the route plan) as much again."""
    body = parse_body(raw)
    if len(raw) > LARGE_BODY_BYTES:
        await trio.lowlevel.checkpoint()
    return body


def read_canonical(endpoint: "Endpoint", body: dict, raw: bytes, ctx: Ctx) -> tuple[dict, bytes, Asked]:
    """The endpoint's reader over a parsed body, and the body and bytes every later step reads
    and sends upstream: the client's when they are canonical, else the reader's canonical form
    and its encoding (issue 30: never the client's bytes when they say something else). The
    re-encoding is paid only by a body the reader rewrote (agent bodies are 100-600 KB)."""
    asked = endpoint.read(body, ctx)  # the fields the gateway reads, caps, stored objects
    if asked.canonical is None:
        return body, raw, asked
    return asked.canonical, encode_body(asked.canonical), asked


def field(body: dict, name: str, kind: type | tuple, *, required: bool = False, what: str = "") -> Any:
    """Strict type check for the few fields the gateway reads itself (no coercion)."""
    value = body.get(name)
    if value is None:
        if required:
            raise BodyError(f"missing required field '{name}'", param=name)
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int,)))
    if kind is int and isinstance(value, bool):
        ok = False
    if not ok:
        raise BodyError(f"field '{name}' must be {what or getattr(kind, '__name__', kind)}", param=name)
    return value


def positive_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BodyError(f"field '{name}' must be a positive integer", param=name)
    return value


KNOWN_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# "system" turns inside messages pass through for API betas that accept them; the provider decides
KNOWN_MESSAGES_ROLES = frozenset({"user", "assistant", "system"})


def read_chat(body: dict, ctx: Ctx) -> Asked:
    model_id = field(body, "model", str, required=True, what="a string")
    messages = field(body, "messages", list, required=True, what="an array of messages")
    if not messages:
        raise BodyError("'messages' must contain at least one message", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BodyError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in KNOWN_CHAT_ROLES:
            raise BodyError(
                f"messages[{i}].role must be one of system, developer, user, assistant, tool (got {role!r})",
                param=f"messages[{i}].role",
            )
    stream = field(body, "stream", bool, what="true or false") or False
    check_cap_fields(body, "chat")  # the cap fields chat has, positive, agreeing; no other protocol's
    check_n(body)
    options = field(body, "stream_options", dict, what="an object")
    if options is not None and "include_usage" in options and not isinstance(options["include_usage"], bool):
        raise BodyError("stream_options.include_usage must be true or false", param="stream_options.include_usage")
    translate(refuse_stored_objects, "chat", body)
    return Asked(model_id, stream)


def read_messages(body: dict, ctx: Ctx) -> Asked:
    model_id = field(body, "model", str, required=True, what="a string")
    if check_cap_fields(body, "messages") is None:
        raise BodyError("missing required field 'max_tokens'", param="max_tokens")
    messages = field(body, "messages", list, required=True, what="an array of messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BodyError(f"messages[{i}] must be an object", param=f"messages[{i}]")
        if not isinstance(message.get("role"), str) or message["role"] not in KNOWN_MESSAGES_ROLES:
            raise BodyError(f"messages[{i}].role must be user or assistant (got {message.get('role')!r})",
                            param=f"messages[{i}].role")
    stream = field(body, "stream", bool, what="true or false") or False
    translate(refuse_stored_objects, "messages", body)
    return Asked(model_id, stream)


def read_responses(body: dict, ctx: Ctx) -> Asked:
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    if not isinstance(body["input"], (str, list)):
        raise BodyError("field 'input' must be a string or an array of input items", param="input")
    stream = field(body, "stream", bool, what="true or false") or False
    positive_int(body, "max_output_tokens")
    translate(refuse_stored_objects, "responses", body)
    response_ids = tuple(translate(asked_response_ids, body))
    check_cap_fields(body, "responses")
    return Asked(model_id, stream, response_ids)


def read_compact(body: dict, ctx: Ctx) -> Asked:
    """``POST /v1/responses/compact``: a responses body that is answered whole (never streamed)."""
    if body.get("stream") is True:
        raise BodyError("responses/compact does not stream; leave stream out", param="stream")
    asked = read_responses({**body, "stream": False}, ctx)
    return attrs.evolve(asked, stream=False)


def read_embeddings(body: dict, ctx: Ctx) -> Asked:
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    if embedding_inputs(body["input"]) is None:
        raise BodyError("field 'input' must be a string, an array of strings, or token arrays", param="input")
    wanted = body.get("encoding_format", "float")
    if wanted not in ("float", "base64"):
        raise BodyError("encoding_format must be 'float' or 'base64'", param="encoding_format")
    positive_int(body, "dimensions")
    return Asked(model_id)


CHAT = Endpoint("chat", "POST", "/v1/chat/completions", read_chat, client_format="chat")
MESSAGES = Endpoint("messages", "POST", "/v1/messages", read_messages, client_format="messages",
                    envelope="anthropic", key_headers=("x-api-key",))
RESPONSES = Endpoint("responses", "POST", "/v1/responses", read_responses, client_format="responses")
# usage rows and metrics name it a responses request: it is one (a summarising turn), billed as such
COMPACT = Endpoint("responses", "POST", "/v1/responses/compact", read_compact, client_format="compact")
EMBEDDINGS = Endpoint("embeddings", "POST", "/v1/embeddings", read_embeddings, client_format="embeddings",
                      kind="embedding")


# -- the Gemini API (Gemini CLI, google-genai): docs/gemini-api.md ---------------------------

GEMINI_MODELS = "/v1beta/models"


def path_model(path: str) -> str:
    """The model a ``/v1beta/models/{model}[:method]`` path names (``models/`` once more is
    the resource name google-genai may send)."""
    rest = path[len(GEMINI_MODELS) + 1:]
    model = rest.rpartition(":")[0] if ":" in rest else rest
    return model.removeprefix("models/")


def query_value(ctx: Ctx, name: str) -> str | None:
    found = parse_qs(ctx.query).get(name)
    return found[0] if found else None


def _gemini_contents(body: dict) -> None:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BodyError("contents must be a non-empty array of Content objects", param="contents")


def _gemini_body(body: dict) -> tuple[dict, dict | None]:
    """The canonical Gemini body (one camelCase spelling a field, types checked:
    ``gatewayd.formats.gemini_body``), and it again when it differs from the client's."""
    canonical, changed = translate(canonical_gemini, body)
    _gemini_contents(canonical)
    return canonical, canonical if changed else None


def read_gemini(body: dict, ctx: Ctx) -> Asked:
    """``:generateContent``: the model from the path; the body canonicalised and its contents
    checked (the rest is the translator's, or the Gemini provider's)."""
    _, changed = _gemini_body(body)
    return Asked(path_model(ctx.path), canonical=changed)


def read_gemini_stream(body: dict, ctx: Ctx) -> Asked:
    """``:streamGenerateContent``: SSE with ``?alt=sse``, else one JSON array as it grows."""
    _, changed = _gemini_body(body)
    return Asked(path_model(ctx.path), stream=True, sse=query_value(ctx, "alt") == "sse", canonical=changed)


def read_gemini_count(body: dict, ctx: Ctx) -> Asked:
    """``:countTokens``: the contents, or a whole ``generateContentRequest``."""
    canonical, changed = translate(canonical_count_tokens, body)
    inner = canonical.get("generateContentRequest")
    _gemini_contents(inner if inner is not None else canonical)
    return Asked(path_model(ctx.path), canonical=canonical if changed else None)


def free_body_too_large(limit: int) -> GatewayError:
    """The 413 for a body over ``[server] max_free_body_bytes`` to an answer the gateway makes itself."""
    return GatewayError(413, f"the request body is larger than {limit} bytes, the limit for requests the "
                        "gateway answers itself (max_free_body_bytes)", "request_too_large")


async def count_gemini_tokens(body: dict, grant: Grant, threads: trio.CapacityLimiter | None = None) -> bytes:
    """Counted here with the model family's tokenizer, as the hold estimates a prompt: free,
    in the free answers' own ``threads`` (``Relay.counting``)."""
    inner = body.get("generateContentRequest")
    text, flat = prompt_transcript(inner if isinstance(inner, dict) else body, "gemini")
    total = await tokens.count_off_loop(text, grant.model.family, limiter=threads) + flat
    return orjson.dumps({"totalTokens": total})


GEMINI_GENERATE = Endpoint("gemini", "POST", GEMINI_MODELS + "/{model}:generateContent", read_gemini,
                           client_format="gemini", envelope="google", key_headers=("x-goog-api-key",),
                           key_query="key")
GEMINI_STREAM = attrs.evolve(GEMINI_GENERATE, path=GEMINI_MODELS + "/{model}:streamGenerateContent",
                             read=read_gemini_stream)
GEMINI_COUNT = attrs.evolve(GEMINI_GENERATE, path=GEMINI_MODELS + "/{model}:countTokens", read=read_gemini_count,
                            answer_here=count_gemini_tokens)

ENDPOINTS = (CHAT, MESSAGES, RESPONSES, COMPACT, EMBEDDINGS, GEMINI_GENERATE, GEMINI_STREAM, GEMINI_COUNT)


def model_entries(config, caller: Caller, ctx: Ctx) -> list[dict]:
    """The models the caller's key may use, as items of the listing: Anthropic's shape when
    the request says ``anthropic-version``, OpenAI's otherwise."""
    models = visible_models(config, caller)
    if ctx.headers.get("anthropic-version"):
        return [
            {
                "type": "model",
                "id": m.id,
                "display_name": m.id,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.created)),
            }
            for m in models
        ]
    return [{"id": m.id, "object": "model", "created": m.created, "owned_by": m.provider.name} for m in models]


def models_list(config, caller: Caller, ctx: Ctx) -> bytes:
    data = model_entries(config, caller, ctx)
    if ctx.headers.get("anthropic-version"):
        return orjson.dumps({
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        })
    return orjson.dumps({"object": "list", "data": data})


# -- the Gemini API's model resources ------------------------------------------------------

MAX_PAGE_SIZE = 1000


def gemini_model_entries(config, caller: Caller) -> list[dict]:
    """The chat models the key may use, in Google's ``Model`` resource shape."""
    return [{
        "name": f"models/{m.id}",
        "baseModelId": m.id,
        "version": "001",
        "displayName": m.id,
        "description": f"{m.id} through gatewayd ({m.provider.name})",
        "outputTokenLimit": m.max_output_tokens,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
        "thinking": m.reasoning,
    } for m in visible_models(config, caller) if m.kind == "chat"]


def gemini_models_page(config, caller: Caller, ctx: Ctx) -> bytes:
    """``GET /v1beta/models``: a page of the listing (``pageSize``, ``pageToken``)."""
    entries = gemini_model_entries(config, caller)
    raw_size = query_value(ctx, "pageSize") or query_value(ctx, "page_size") or "50"
    try:
        size = int(raw_size)
    except ValueError:
        raise GatewayError(400, "pageSize must be an integer", "invalid_request_error", model_step=True) from None
    size = MAX_PAGE_SIZE if size <= 0 else min(size, MAX_PAGE_SIZE)
    token = query_value(ctx, "pageToken") or query_value(ctx, "page_token") or "0"
    if not token.isdigit() or int(token) > len(entries):
        raise GatewayError(400, "pageToken is not one this listing gave", "invalid_request_error", model_step=True)
    start = int(token)
    out: dict[str, Any] = {"models": entries[start:start + size]}
    if start + size < len(entries):
        out["nextPageToken"] = str(start + size)
    return orjson.dumps(out)


def gemini_model(config, caller: Caller, ctx: Ctx) -> bytes:
    """``GET /v1beta/models/{model}``: one model of the key's listing, or Google's 404."""
    model_id = path_model(ctx.path)
    for entry in gemini_model_entries(config, caller):
        if entry["name"] == f"models/{model_id}":
            return orjson.dumps(entry)
    raise GatewayError(404, f"models/{model_id} is not found, or this key may not use it", "not_found",
                       model_step=True)
