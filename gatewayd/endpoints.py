"""The public endpoints: validate what the gateway itself needs, describe the call, run it.

Thin on purpose: the order of checks, the choice of route and the money live in
``relay``; how each client format reaches each upstream protocol lives in the adapters
(``gatewayd.providers``); the format translation lives in ``formats``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import trio

from gatewayd.access import Caller, authorize_model, visible_models
from gatewayd.billing.ledger import refusal_error
from gatewayd.billing.features import check_cap_fields, check_n
from gatewayd.errors import BodyError, GatewayError
from gatewayd.formats.embeddings import embedding_inputs
from gatewayd.formats.raw_json import duplicate_top_level_key
from gatewayd.formats.stored_objects import asked_response_ids, refuse_stored_objects
from gatewayd.providers.base import Call, translate
from gatewayd.relay import LARGE_BODY_BYTES, Ctx, Relay
from gatewayd.store.base import Refusal


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


async def read_body_after_cheap_checks(relay: Relay, caller: Caller, raw: bytes, *, kind: str, endpoint: str) -> dict:
    """:func:`read_body`; then, for a large body, the checks that need only its model before
    anything walks the rest of it: the key's model list and group, the model's visibility and
    price, and a balance with nothing left. Parsing is the cheap part (orjson: about 0.35 ms a
    MB here, less than a byte search for the model would cost); the walks after it (the body
    checks, the stored-object check, the estimate, a translation) are not, and a refused
    request is spared them (issue 20). The same checks run again later, in the documented
    order."""
    body = await read_body(raw)
    model_id = body.get("model")
    if len(raw) > LARGE_BODY_BYTES and isinstance(model_id, str):
        authorize_model(relay.config, caller, model_id, kind=kind, endpoint=endpoint)
        if caller.account.balance_nano <= 0:
            raise refusal_error(Refusal("account", caller.account.balance_nano), 1)
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


def validate_chat_body(body: dict) -> tuple[str, bool]:
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
    return model_id, stream


async def chat_completions(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = await read_body_after_cheap_checks(relay, caller, raw, kind="chat", endpoint="chat")
    model_id, stream = validate_chat_body(body)
    translate(refuse_stored_objects, "chat", body)
    grant = await relay.authorize(caller, model_id, kind="chat", endpoint="chat")
    call = Call(client_format="chat", model=grant.model, body=body, raw=raw, stream=stream, headers=ctx.headers)
    return await relay.run(ctx, caller, grant, call)


def validate_messages_body(body: dict) -> tuple[str, bool]:
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
    return model_id, stream


async def messages(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx, accepts_x_api_key=True)
    body = await read_body_after_cheap_checks(relay, caller, raw, kind="chat", endpoint="messages")
    model_id, stream = validate_messages_body(body)
    translate(refuse_stored_objects, "messages", body)
    grant = await relay.authorize(caller, model_id, kind="chat", endpoint="messages")
    call = Call(client_format="messages", model=grant.model, body=body, raw=raw, stream=stream, headers=ctx.headers)
    return await relay.run(ctx, caller, grant, call)


async def responses(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = await read_body_after_cheap_checks(relay, caller, raw, kind="chat", endpoint="responses")
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    if not isinstance(body["input"], (str, list)):
        raise BodyError("field 'input' must be a string or an array of input items", param="input")
    stream = field(body, "stream", bool, what="true or false") or False
    positive_int(body, "max_output_tokens")
    translate(refuse_stored_objects, "responses", body)
    await relay.received_ids.check(caller.account.id, translate(asked_response_ids, body))
    check_cap_fields(body, "responses")
    grant = await relay.authorize(caller, model_id, kind="chat", endpoint="responses")
    call = Call(client_format="responses", model=grant.model, body=body, raw=raw, stream=stream, headers=ctx.headers)
    return await relay.run(ctx, caller, grant, call)


async def embeddings(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = await read_body_after_cheap_checks(relay, caller, raw, kind="embedding", endpoint="embeddings")
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    if embedding_inputs(body["input"]) is None:
        raise BodyError("field 'input' must be a string, an array of strings, or token arrays", param="input")
    wanted = body.get("encoding_format", "float")
    if wanted not in ("float", "base64"):
        raise BodyError("encoding_format must be 'float' or 'base64'", param="encoding_format")
    positive_int(body, "dimensions")
    grant = await relay.authorize(caller, model_id, kind="embedding", endpoint="embeddings")
    call = Call(client_format="embeddings", model=grant.model, body=body, raw=raw, stream=False)
    return await relay.run(ctx, caller, grant, call)


def model_entries(relay: Relay, ctx: Ctx) -> list[dict]:
    """The models the caller's key may use, as items of the listing: Anthropic's shape when
    the request says ``anthropic-version``, OpenAI's otherwise."""
    caller = relay.admit(ctx, accepts_x_api_key=True)
    models = visible_models(relay.config, caller)
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


def models_list(relay: Relay, ctx: Ctx) -> bytes:
    data = model_entries(relay, ctx)
    if ctx.headers.get("anthropic-version"):
        return orjson.dumps({
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        })
    return orjson.dumps({"object": "list", "data": data})


__all__ = ["chat_completions", "messages", "responses", "embeddings", "models_list", "model_entries", "GatewayError"]
