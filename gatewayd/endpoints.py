"""The public endpoints: validate what the gateway itself needs, pick the route, run it.

Thin on purpose: the order of checks and the money live in ``relay``; the format
translation lives in ``formats``. What is here is which route an endpoint and model
take, and how the request body is (or is not) changed on its way upstream.
"""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

import orjson

from gatewayd import tokens
from gatewayd.billing.estimate import estimate_input_tokens, requested_output_tokens
from gatewayd.config import Model
from gatewayd.errors import MESSAGES_TYPE_BY_STATUS, GatewayError, UpstreamError
from gatewayd.formats import partial, pipes, usage as usage_mod
from gatewayd.formats.raw_json import replace_top_level_string
from gatewayd.relay import BodyError, Ctx, Relay, Route, field, parse_body, positive_int

KNOWN_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# "system" turns inside messages pass through for API betas that accept them; the provider decides
KNOWN_MESSAGES_ROLES = frozenset({"user", "assistant", "system"})


def passthrough_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """The provider's status and body, unchanged (plus Retry-After when it sent one)."""
    headers = {}
    for name in ("retry-after", "x-should-retry"):
        if name in error.headers:
            headers[name] = error.headers[name]
    body = error.body
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        body = orjson.dumps({"error": {"message": error.message(), "type": "upstream_error", "code": None}})
    return error.status, body, headers


def messages_passthrough_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """On /v1/messages: the provider's status and body unchanged when the body is already in
    the messages error shape; otherwise (an HTML page from a proxy, another vendor's shape)
    its message retold in that shape, so Anthropic clients can still read it."""
    status, body, headers = passthrough_error(error)
    try:
        doc = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("type") == "error" and isinstance(doc.get("error"), dict):
        return status, body, headers
    kind = MESSAGES_TYPE_BY_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, orjson.dumps({"type": "error", "error": {"type": kind, "message": error.message()}}), headers


def produced_usage(message: dict, input_estimate: int) -> usage_mod.Usage:
    """A messages-format reply without usage: the prompt as estimated and the output it
    carries, counted offline (never free output)."""
    return usage_mod.Usage(input_tokens=input_estimate, output_tokens=tokens.count(partial.message_text(message)))


def _with_changes(raw: bytes, body: dict, changes: dict[str, Any]) -> bytes:
    """The client's bytes when nothing changes; only the model value swapped in the bytes when
    that is the one change; re-encoded only when other fields must change."""
    if not changes:
        return raw
    if set(changes) == {"model"}:
        swapped = replace_top_level_string(raw, "model", changes["model"])
        if swapped is not None:
            return swapped
    return orjson.dumps({**body, **changes})


def _model_change(model: Model) -> dict[str, Any]:
    return {"model": model.upstream_id} if model.upstream_id != model.id else {}


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
    positive_int(body, "max_tokens")
    positive_int(body, "max_completion_tokens")
    options = field(body, "stream_options", dict, what="an object")
    if options is not None and "include_usage" in options and not isinstance(options["include_usage"], bool):
        raise BodyError("stream_options.include_usage must be true or false", param="stream_options.include_usage")
    return model_id, stream


async def chat_completions(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = parse_body(raw)
    model_id, stream = validate_chat_body(body)
    grant = relay.authorize(caller, model_id, kind="chat", endpoint="chat")
    model = grant.model
    if model.dual_format:
        from gatewayd.translated import chat_via_messages

        route, output_tokens = chat_via_messages(relay, ctx, body, model, stream)
    else:
        output_tokens = requested_output_tokens(body, model)
        wants_usage = stream and (body.get("stream_options") or {}).get("include_usage") is True
        changes = _model_change(model)
        if stream and not wants_usage:
            changes["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        payload = _with_changes(raw, body, changes)

        def finish(upstream: bytes):
            return upstream, usage_mod.from_chat(orjson.loads(upstream).get("usage"))

        route = Route(
            request=relay.upstream.openai_request(model.provider, "/chat/completions", payload, stream=stream),
            stream=stream,
            input_tokens_estimate=estimate_input_tokens(body),
            make_pipe=lambda: pipes.ChatPassthrough(wants_usage),
            finish=finish,
            upstream_error=passthrough_error,
        )
    return await relay.run(ctx, caller, grant, route, output_tokens=output_tokens)


def validate_messages_body(body: dict) -> tuple[str, bool]:
    model_id = field(body, "model", str, required=True, what="a string")
    positive = positive_int(body, "max_tokens")
    if positive is None:
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
    body = parse_body(raw)
    model_id, stream = validate_messages_body(body)
    grant = relay.authorize(caller, model_id, kind="chat", endpoint="messages")
    model = grant.model
    payload = _with_changes(raw, body, _model_change(model))
    betas = [b.strip() for value in ctx.headers.getlist("anthropic-beta") for b in value.split(",") if b.strip()]

    estimate = estimate_input_tokens(body)

    def finish(upstream: bytes):
        message = orjson.loads(upstream)
        return upstream, usage_mod.from_messages(message.get("usage")) or produced_usage(message, estimate)

    route = Route(
        request=relay.upstream.anthropic_request(
            model.provider, "/v1/messages", payload, stream=stream,
            version=ctx.headers.get("anthropic-version"), betas=betas,
        ),
        stream=stream,
        input_tokens_estimate=estimate,
        make_pipe=pipes.MessagesPassthrough,
        finish=finish,
        upstream_error=messages_passthrough_error,
    )
    return await relay.run(ctx, caller, grant, route, output_tokens=requested_output_tokens(body, model))


async def responses(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = parse_body(raw)
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    if not isinstance(body["input"], (str, list)):
        raise BodyError("field 'input' must be a string or an array of input items", param="input")
    stream = field(body, "stream", bool, what="true or false") or False
    positive_int(body, "max_output_tokens")
    grant = relay.authorize(caller, model_id, kind="chat", endpoint="responses")
    model = grant.model
    if not model.passes_responses_through:
        from gatewayd.translated import responses_via_chat

        route, output_tokens = responses_via_chat(relay, ctx, body, model, stream)
    else:
        output_tokens = requested_output_tokens(body, model, fields=("max_output_tokens",))
        payload = _with_changes(raw, body, _model_change(model))

        def finish(upstream: bytes):
            return upstream, usage_mod.from_responses(orjson.loads(upstream).get("usage"))

        route = Route(
            request=relay.upstream.openai_request(model.provider, "/responses", payload, stream=stream),
            stream=stream,
            input_tokens_estimate=estimate_input_tokens(body),
            make_pipe=pipes.ResponsesPassthrough,
            finish=finish,
            upstream_error=passthrough_error,
        )
    return await relay.run(ctx, caller, grant, route, output_tokens=output_tokens)


def _embedding_inputs(value: Any) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [value]
        if all(isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v)
               for v in value):
            return value
    raise BodyError("field 'input' must be a string, an array of strings, or token arrays", param="input")


def _convert_embeddings(upstream: bytes, wanted: str) -> bytes:
    """Give the client the encoding it asked for, converting only if the upstream differed."""
    doc = orjson.loads(upstream)
    changed = False
    for item in doc.get("data") or ():
        vector = item.get("embedding")
        if wanted == "base64" and isinstance(vector, list):
            item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            changed = True
        elif wanted == "float" and isinstance(vector, str):
            packed = base64.b64decode(vector)
            item["embedding"] = list(struct.unpack(f"<{len(packed) // 4}f", packed))
            changed = True
    return orjson.dumps(doc) if changed else upstream


async def embeddings(relay: Relay, ctx: Ctx, raw: bytes):
    caller = relay.admit(ctx)
    body = parse_body(raw)
    model_id = field(body, "model", str, required=True, what="a string")
    if body.get("input") is None:
        raise BodyError("missing required field 'input'", param="input")
    inputs = _embedding_inputs(body["input"])
    wanted = body.get("encoding_format", "float")
    if wanted not in ("float", "base64"):
        raise BodyError("encoding_format must be 'float' or 'base64'", param="encoding_format")
    positive_int(body, "dimensions")
    grant = relay.authorize(caller, model_id, kind="embedding", endpoint="embeddings")
    model = grant.model
    payload = _with_changes(raw, body, _model_change(model))
    token_arrays = sum(len(v) for v in inputs if isinstance(v, list))
    text_estimate = estimate_input_tokens({"input": [v for v in inputs if isinstance(v, str)]}, fields=("input",))

    def finish(upstream: bytes):
        doc = orjson.loads(upstream)
        if not isinstance(doc.get("data"), list):
            raise ValueError("no data")
        return _convert_embeddings(upstream, wanted), usage_mod.from_chat(doc.get("usage"))

    route = Route(
        request=relay.upstream.openai_request(model.provider, "/embeddings", payload, stream=False),
        stream=False,
        input_tokens_estimate=text_estimate + token_arrays,
        make_pipe=pipes.ChatPassthrough,  # never used: embeddings do not stream
        finish=finish,
        upstream_error=passthrough_error,
    )
    return await relay.run(ctx, caller, grant, route, output_tokens=0)


def models_list(relay: Relay, ctx: Ctx) -> bytes:
    from gatewayd.access import visible_models

    caller = relay.admit(ctx, accepts_x_api_key=True)
    models = visible_models(relay.config, caller)
    if ctx.headers.get("anthropic-version"):
        data = [
            {
                "type": "model",
                "id": m.id,
                "display_name": m.id,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.created)),
            }
            for m in models
        ]
        return orjson.dumps({
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        })
    return orjson.dumps({
        "object": "list",
        "data": [{"id": m.id, "object": "model", "created": m.created, "owned_by": m.provider.name} for m in models],
    })


__all__ = ["chat_completions", "messages", "responses", "embeddings", "models_list", "GatewayError"]
