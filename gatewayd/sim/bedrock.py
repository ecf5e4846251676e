"""AWS Bedrock runtime on the wire, under ``/bedrock`` (``POST /bedrock/model/{modelId}/{action}``).

- Authorization: SigV4 is *verified*: the signature is recomputed (botocore) from the
  signed headers, the path as received, the body and the simulator's secret
  (:data:`SECRET_ACCESS_KEY` for :data:`ACCESS_KEY_ID`, any region), and a mismatch is
  Bedrock's 403 (``InvalidSignatureException``, ``{"message": "The request signature we
  calculated does not match ..."}``). A Bedrock API key (``Authorization: Bearer``) must be
  :data:`API_KEY`.
- ``invoke`` / ``invoke-with-response-stream``: the Anthropic messages body (with
  ``anthropic_version: "bedrock-2023-05-31"``, no ``model``, no ``stream``), answered by the
  Anthropic simulator's behaviour; the stream is event-stream ``chunk`` frames, each an
  Anthropic event base64-encoded in ``{"bytes": ...}``; ``message_stop`` carries
  ``amazon-bedrock-invocationMetrics`` as Bedrock's does.
- ``converse`` / ``converse-stream``: the Converse API and its stream events
  (``messageStart``, ``contentBlockStart/Delta/Stop``, ``messageStop``, ``metadata``).
- Faults (the usual ``[[sim:...]]`` markers): ``status=429`` is a ``ThrottlingException``
  (``x-amzn-ErrorType``), other statuses Bedrock's exception for them; ``error_after=N`` ends
  the stream with a ``modelStreamErrorException`` frame (``:message-type: exception``).

Token counts are the Anthropic simulator's for invoke; for Converse the same rule over
``system``, ``messages`` and ``toolConfig`` (words, 3 a message, 3 for a system prompt).
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import partial
from urllib.parse import unquote

import attrs
import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from quart import Response, request

from gatewayd.catalogue import Provider
from gatewayd.cloud.bedrock_auth import AwsAuth
from gatewayd.formats.eventstream import chunk_frame, event_frame, exception_frame
from gatewayd.protocols import PROTOCOLS
from . import anthropic
from . import exchange
from .behaviour import CONTENT, FINISH, HEAD, Plan, Prompt, Tool, count_words, fragments, pieces, plan

ACCESS_KEY_ID = "AKIAGATEWAYDSIMULATOR"
SECRET_ACCESS_KEY = "gatewayd-simulator-secret-access-key"


def demo_provider(provider: Provider, sim_url: str) -> Provider:
    """``--demo``: a Bedrock provider pointed at this simulator, signed with its own access key
    and secret (``gatewayd.protocols`` names this hook)."""
    auth = AwsAuth(region=provider.settings["region"], source=Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY))
    return attrs.evolve(provider, base_url=sim_url + PROTOCOLS["bedrock"].sim_base_path, api_key="sim-key",
                        settings={**provider.settings, "auth": auth})
API_KEY = "bedrock-api-key-gatewayd-simulator"
VERSION = "bedrock-2023-05-31"
_VERSION = re.compile(r"^(bedrock-)?\d{4}-\d{2}-\d{2}$")  # the anthropic SDK sends its own dated version
MAX_SKEW_S = 300
_JSON = "application/json"
_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                408: "ModelTimeoutException", 424: "ModelErrorException", 429: "ThrottlingException",
                500: "InternalServerException", 503: "ServiceUnavailableException"}
_SIGNATURE_MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your "
                       "AWS Secret Access Key and signing method. Consult the service documentation for details.")


def error(status: int, message: str, *, retry_after_s: int | None = None, kind: str | None = None,
          **_: object) -> Response:
    """Bedrock's error: ``{"message": ...}`` and the exception's name in ``x-amzn-ErrorType``."""
    kind = kind or _ERROR_TYPES.get(status, "ServiceUnavailableException" if status >= 500 else "ValidationException")
    response = Response(orjson.dumps({"message": message}), status, content_type=_JSON)
    response.headers["x-amzn-ErrorType"] = f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    if retry_after_s is not None:
        response.headers["retry-after"] = str(retry_after_s)
    return response


def _parse_authorization(value: str) -> dict[str, str] | None:
    if not value.startswith("AWS4-HMAC-SHA256 "):
        return None
    fields = {}
    for part in value[len("AWS4-HMAC-SHA256 "):].split(","):
        key, _, val = part.strip().partition("=")
        fields[key] = val
    return fields if {"Credential", "SignedHeaders", "Signature"} <= set(fields) else None


def check_signature(method: str, raw_path: str, query: str, headers, body: bytes, now: float | None = None):
    """None when the request is authorized, else Bedrock's 403 (or 401) for it."""
    authorization = headers.get("authorization", "")
    if authorization[:7].lower() == "bearer ":
        if hmac.compare_digest(authorization[7:].strip(), API_KEY):
            return None
        return error(403, "Invalid API Key format: Must start with pre-defined prefix", kind="AccessDeniedException")
    fields = _parse_authorization(authorization)
    if fields is None:
        return error(403, "Missing Authentication Token", kind="MissingAuthenticationTokenException")
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return error(403, "Credential should be scoped to a valid region.", kind="IncompleteSignatureException")
    key_id, _date, region, service, _ = scope
    if key_id != ACCESS_KEY_ID:
        return error(403, "The security token included in the request is invalid.",
                     kind="UnrecognizedClientException")
    amz_date = headers.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return error(403, "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
                     kind="IncompleteSignatureException")
    if abs((now or time.time()) - signed_at) > MAX_SKEW_S:
        return error(403, f"Signature expired: {amz_date} is now earlier than the allowed window.",
                     kind="InvalidSignatureException")
    names = fields["SignedHeaders"].split(";")
    if "host" not in names:
        return error(403, "'Host' must be a 'SignedHeader' in the AWS Authorization.",
                     kind="IncompleteSignatureException")
    signed = {name: headers.get(name, "") for name in names}
    url = f"http://{signed['host']}{raw_path}" + (f"?{query}" if query else "")
    aws_request = AWSRequest(method=method, url=url, data=body, headers=signed)
    aws_request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(key_id, SECRET_ACCESS_KEY, headers.get("x-amz-security-token")), service, region)
    expected = signer.signature(signer.string_to_sign(aws_request, signer.canonical_request(aws_request)), aws_request)
    if not hmac.compare_digest(expected, fields["Signature"]):
        return error(403, _SIGNATURE_MISMATCH, kind="InvalidSignatureException")
    return None


# -- InvokeModel: the Anthropic simulator in Bedrock's envelope ------------------------------


def validate_invoke(body: dict) -> str | None:
    version = body.get("anthropic_version")
    if not isinstance(version, str) or not _VERSION.match(version):
        return f"anthropic_version: expected {VERSION!r} (or a dated API version)"
    for key in ("model", "stream"):
        if key in body:
            return f"extraneous key [{key}] is not permitted"
    beta = body.get("anthropic_beta")
    if beta is not None and not (isinstance(beta, list) and all(isinstance(b, str) for b in beta)):
        return "anthropic_beta: expected a list of strings"
    return None


def _metrics(reply: Plan) -> dict:
    return {"inputTokenCount": reply.input_tokens, "outputTokenCount": reply.output_tokens,
            "invocationLatency": 1, "firstByteLatency": 1,
            "cacheReadInputTokenCount": reply.cache_read, "cacheWriteInputTokenCount": reply.cache_write}


def invoke_events(reply: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    """The Anthropic simulator's events, each as one ``chunk`` frame."""
    for sse, kind in anthropic.events(reply, body, n):
        data = sse[sse.index(b"\ndata: ") + 7:-2]
        if data.startswith(b'{"type":"message_stop"'):
            data = orjson.dumps({"type": "message_stop", "amazon-bedrock-invocationMetrics": _metrics(reply)})
        elif data == b'{"type":"ping"}':
            continue  # Bedrock does not forward Anthropic's pings
        yield chunk_frame(data), kind


# -- Converse -----------------------------------------------------------------------------


def validate_converse(body: dict) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), list):
            return "messages: each message needs a role (user or assistant) and a content list"
    config = body.get("inferenceConfig") or {}
    if not isinstance(config, dict) or not isinstance(config.get("maxTokens", 1), int):
        return "inferenceConfig.maxTokens: must be an integer"
    return None


def _converse_text(content) -> str:
    return " ".join(b["text"] for b in content or () if isinstance(b, dict) and isinstance(b.get("text"), str))


def converse_input_tokens(body: dict) -> int:
    total = sum(count_words(body.get(k)) for k in ("system", "messages", "toolConfig") if body.get(k) is not None)
    return max(1, total + 3 * len(body.get("messages") or ()) + (3 if body.get("system") else 0))


def extract_converse(body: dict) -> Prompt:
    messages = body["messages"]
    user_text = next((t for m in reversed(messages) if m["role"] == "user" and (t := _converse_text(m["content"]))), "")
    last = messages[-1]
    results = [b["toolResult"] for b in last["content"] if isinstance(b, dict) and "toolResult" in b]
    config = body.get("toolConfig") or {}
    tools = tuple(Tool(t["toolSpec"]["name"], (t["toolSpec"].get("inputSchema") or {}).get("json"))
                  for t in config.get("tools") or () if isinstance(t, dict) and "toolSpec" in t)
    choice = config.get("toolChoice") or {}
    inference = body.get("inferenceConfig") or {}
    return Prompt(
        user_text=user_text,
        tool_result=_converse_text(results[-1].get("content")) if results else None,
        ends_with_user=last["role"] == "user" and not results,
        tools=tools,
        tool_choice="required" if ("any" in choice or "tool" in choice) else "auto",
        forced_tool=(choice.get("tool") or {}).get("name"),
        max_tokens=inference.get("maxTokens"),
        stop=tuple(inference.get("stopSequences") or ()),
        input_tokens=converse_input_tokens(body),
    )


def converse_usage(reply: Plan) -> dict:
    return {"inputTokens": reply.input_tokens, "outputTokens": reply.output_tokens,
            "totalTokens": reply.input_tokens + reply.output_tokens + reply.cache_read + reply.cache_write,
            "cacheReadInputTokens": reply.cache_read, "cacheWriteInputTokens": reply.cache_write}


def _tool_id(n: int, index: int) -> str:
    return f"tooluse_sim_{n}_{index}"


def render_converse(reply: Plan, body: dict, n: int) -> dict:
    content: list[dict] = []
    if reply.thinking:
        content.append({"reasoningContent": {"reasoningText": {"text": reply.thinking, "signature": reply.signature}}})
    if reply.text or not (reply.tool_calls or reply.thinking):
        content.append({"text": reply.text})
    for call in reply.tool_calls:
        content.append({"toolUse": {"toolUseId": _tool_id(n, call.index), "name": call.name, "input": call.input}})
    doc = {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": reply.stop,
           "usage": converse_usage(reply), "metrics": {"latencyMs": 1}}
    if reply.faults.no_usage:
        del doc["usage"]
    return doc


def converse_events(reply: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    def frame(name: str, doc: dict) -> bytes:
        return event_frame(name, orjson.dumps(doc))

    yield frame("messageStart", {"role": "assistant"}), HEAD
    index = 0
    if reply.thinking:
        for p in pieces(reply.thinking):
            yield frame("contentBlockDelta", {"contentBlockIndex": index,
                                              "delta": {"reasoningContent": {"text": p}}}), CONTENT
        yield frame("contentBlockDelta", {"contentBlockIndex": index,
                                          "delta": {"reasoningContent": {"signature": reply.signature}}}), HEAD
        yield frame("contentBlockStop", {"contentBlockIndex": index}), HEAD
        index += 1
    if reply.text or not (reply.tool_calls or reply.thinking):
        for p in pieces(reply.text):
            yield frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}}), CONTENT
        yield frame("contentBlockStop", {"contentBlockIndex": index}), HEAD
        index += 1
    for call in reply.tool_calls:
        yield frame("contentBlockStart", {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": _tool_id(n, call.index), "name": call.name}}}), HEAD
        for f in fragments(call.arguments):
            yield frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": f}}}), CONTENT
        yield frame("contentBlockStop", {"contentBlockIndex": index}), HEAD
        index += 1
    yield frame("messageStop", {"stopReason": reply.stop}), FINISH
    metadata: dict = {"metrics": {"latencyMs": 1}}
    if not reply.faults.no_usage:
        metadata["usage"] = converse_usage(reply)
    yield frame("metadata", metadata), HEAD


# -- the handler ------------------------------------------------------------------------------


@attrs.frozen
class _StreamWire:
    """What ``exchange.drive`` needs of a wire: the mid-stream error (an exception frame)."""

    @staticmethod
    def stream_error(sent: int) -> bytes:
        return exception_frame("modelStreamErrorException", "simulated mid-stream error")


async def answer(state, model_path: str) -> Response:
    """``POST /bedrock/model/{modelId}/{action}``."""
    raw = await exchange.request_body()
    entry = state.record(raw)
    scope = request.scope
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1").split("?", 1)[0]
    denied = check_signature(request.method, raw_path, scope["query_string"].decode("latin-1"), request.headers, raw)
    if denied is not None:
        return exchange.done(entry, denied)
    model_id, _, action = unquote(model_path).rpartition("/")
    if not model_id or action not in ("invoke", "invoke-with-response-stream", "converse", "converse-stream"):
        return exchange.done(entry, error(404, f"Unknown operation: {action}", kind="UnknownOperationException"))
    body = exchange.load_body(raw)
    if body is None:
        return exchange.done(entry, error(400, "Malformed input request, please reformat your input and try again."))
    invoke = action.startswith("invoke")
    if invoke:
        problem = validate_invoke(body)
        messages_body = {**body, "model": model_id}
        if problem is None and (found := anthropic.validate(messages_body)) is not None:
            problem = found[0]
        if problem is not None:
            return exchange.done(entry, error(400, problem))
        prompt = anthropic.extract(messages_body)
    else:
        problem = validate_converse(body)
        if problem is not None:
            return exchange.done(entry, error(400, problem))
        prompt = extract_converse(body)
    if state.markers:
        prompt = attrs.evolve(prompt, user_text=f"{prompt.user_text} {state.markers}")
    if invoke:
        reply = exchange.with_prompt_cache(state, plan(prompt), messages_body, "messages")
    else:
        reply = exchange.with_prompt_cache(state, plan(prompt), body, "converse", converse_input_tokens)
    faults = reply.faults
    stream = action.endswith("-stream")
    entry.stream = stream
    early = await exchange.before_reply(faults, entry, error, whole_by=None if stream else "bedrock")
    if early is not None:
        return exchange.done(entry, early)
    entry.status = 200
    render = (lambda p, b, n: anthropic.render(p, {**b, "model": model_id}, n)) if invoke else render_converse
    entry.answer = partial(render, reply, body, entry.seq)
    if stream:
        events = invoke_events(reply, {**body, "model": model_id}, entry.seq) if invoke else \
            converse_events(reply, body, entry.seq)
        chunks = exchange.drive(events, faults, entry, _StreamWire(), scope)
        return Response(chunks, 200, mimetype="application/vnd.amazon.eventstream",
                        headers={"x-amzn-bedrock-content-type": _JSON})
    entry.completed = True
    return Response(orjson.dumps(render(reply, body, entry.seq)), 200, content_type=_JSON)


def register(app, state) -> None:
    @app.post("/bedrock/model/<path:model_path>")
    async def bedrock_model(model_path: str) -> Response:
        return await answer(state, model_path)
