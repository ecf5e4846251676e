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
3. a path with a parameter in it needs its match in ``gatewayd.api_routes.ApiRoutes.route``
   (as ``GET /v1/models/{id}`` has); a fixed path is routed from ``ENDPOINTS`` as it is.

A transport that is not one HTTP request (Responses over WebSocket, ``gatewayd.responses_ws``)
calls ``Relay.serve`` once a message with the same spec; the steps and the money do not change.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import attrs
import orjson
import trio

from gatewayd.access import Caller, visible_models
from gatewayd.billing.features import check_cap_fields, check_n
from gatewayd.errors import BodyError
from gatewayd.formats.embeddings import embedding_inputs
from gatewayd.formats.raw_json import duplicate_top_level_key
from gatewayd.formats.stored_objects import asked_response_ids, refuse_stored_objects
from gatewayd.providers.base import translate

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


@attrs.frozen
class Asked:
    """What a body reader found the client asks for."""

    model_id: str
    stream: bool = False
    response_ids: tuple[tuple[str, str], ...] = ()  # (param, id) of stored responses named: the account must own them


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
    accepts_x_api_key: bool = False  # Anthropic's SDKs send the key as x-api-key


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
    twice = duplicate_top_level_key(raw, body)
    if twice is not None:  # the gateway would read the last one, a provider perhaps the first
        raise BodyError(f"the request body has the key {twice!r} more than once; send each field once", param=twice)
    return body


async def read_body(raw: bytes) -> dict:
    """``parse_body``, then other tasks' turn when the body is large: parsing one takes a
    millisecond or more (orjson: about 1 ms a MB), and what follows until the relay's own
    checkpoint (checks, authorization, the route plan) as much again."""
    body = parse_body(raw)
    if len(raw) > LARGE_BODY_BYTES:
        await trio.lowlevel.checkpoint()
    return body


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
                    envelope="anthropic", accepts_x_api_key=True)
RESPONSES = Endpoint("responses", "POST", "/v1/responses", read_responses, client_format="responses")
EMBEDDINGS = Endpoint("embeddings", "POST", "/v1/embeddings", read_embeddings, client_format="embeddings",
                      kind="embedding")
ENDPOINTS = (CHAT, MESSAGES, RESPONSES, EMBEDDINGS)


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
