"""What every adapter builds and what the relay runs: a ``Call`` in, a ``Route`` out.

An endpoint validates what the gateway itself needs and describes the request as a
``Call`` (client format, model, body). For each attempt the relay picks one of the
model's routes (a provider and its id for the model) and asks the adapter table
(:mod:`gatewayd.providers`) for the builder of (client format, upstream protocol); the
builder returns a ``Route``: the upstream request, the stream pipe, the non-stream
reader, the error mapping and where the provider's retry hint is. The relay knows
nothing of protocols.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import httpx
import orjson

from gatewayd.billing.features import Asks
from gatewayd.catalogue import Model, ModelRoute
from gatewayd.errors import BodyError, UpstreamError, retry_after_seconds
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.pipes import Pipe
from gatewayd.formats.raw_json import set_top_level_fields
from gatewayd.formats.sse import SSESplitter
from gatewayd.formats.responses_tools import DROPPED_REASON, plan_tools
from gatewayd.formats.usage import Usage
from gatewayd.formats.errors import InvalidAnswer, provider_json


@attrs.frozen
class Call:
    """One client request as the route builders see it (validated by its endpoint)."""

    client_format: str  # "chat" | "messages" | "responses" | "embeddings" | "gemini"
    model: Model
    body: dict
    raw: bytes  # the client's bytes: pass-through routes forward them unchanged when they can
    stream: bool
    headers: Any = None  # the client's headers (anthropic-version / anthropic-beta are forwarded)
    sse: bool = True  # a streaming Gemini-API client asked ``?alt=sse`` (else: one JSON array)


def header_retry_after(error: UpstreamError) -> float | None:
    """The provider's ``Retry-After`` header: where OpenAI, Anthropic and Azure put their hint."""
    return retry_after_seconds(error.headers.get("retry-after"))


@attrs.define
class Route:
    """Where one attempt goes and how its answer comes back."""

    request: httpx.Request
    stream: bool
    input_tokens_estimate: int
    output_tokens: int  # the hold's output allowance (asks.output_tokens)
    make_pipe: Callable[[], Pipe]
    # non-stream: upstream body -> (client body, usage or None when the upstream gave none)
    finish: Callable[[bytes], tuple[bytes, Usage | None]]
    upstream_error: Callable[[UpstreamError], tuple[int, bytes, dict[str, str]]]
    headers: dict[str, str] = attrs.Factory(dict)  # sent to the client with the answer (e.g. dropped tools)
    # a 429/5xx -> how long the provider asks us to wait (seconds) or None: cools the route
    retry_after: Callable[[UpstreamError], float | None] = header_retry_after
    # a pass-through Responses route: the non-stream answer -> the response / conversation ids it
    # gives the client, which the account may name again (``gatewayd.received_ids``)
    received_ids: Callable[[bytes], tuple[str, ...]] | None = None
    # what the upstream body may be billed for besides its input (billing.estimate.hold_nano);
    # None: input and output_tokens at the base rates (embeddings)
    asks: Asks | None = None
    # the upstream stream's framing -> events for the pipe: SSE, or AWS's event stream (Bedrock)
    make_splitter: Callable[[], Any] = SSESplitter


Builder = Callable[[Call, ModelRoute, Any], Route]  # (call, route, upstream transport) -> Route


def with_changes(raw: bytes, body: dict, changes: dict[str, Any]) -> bytes:
    """The client's bytes when nothing changes; edited in the bytes when the changes are
    top-level strings and numbers (the model id, the output cap held for) and the bytes allow
    it (:func:`~gatewayd.formats.raw_json.set_top_level_fields`); re-encoded otherwise (a
    changed ``tools`` list, or a key spelled twice in a large body)."""
    if not changes:
        return raw
    edited = set_top_level_fields(raw, body, changes)
    if edited is not None:
        return edited
    return encode_body({**body, **changes})


def encode_body(body: dict) -> bytes:
    """A body the gateway re-encodes. orjson parses 1,024 levels of nesting but encodes only
    254: a client body between the two (a freak tool schema) is the client's 400, not a 500."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        raise BodyError("the request nests JSON more than 254 levels deep") from None


DROPPED_TOOLS_HEADER = "x-gatewayd-dropped-tools"


def dropped_tools_headers(body: dict) -> dict[str, str]:
    """A translated responses request's tools that no translation can honour (hosted and
    built-in tools it did not require) were dropped: say which, and why, to the client."""
    dropped = plan_tools(body.get("tools")).dropped
    return {DROPPED_TOOLS_HEADER: f'{", ".join(dropped)}; reason="{DROPPED_REASON}"'} if dropped else {}


def model_change(call: Call, target: ModelRoute) -> dict[str, Any]:
    """The provider's id for the model, when it differs from the id the client sent (the
    catalogue id, or an alias of it: gatewayd.config_aliases)."""
    return {"model": target.upstream_id} if target.upstream_id != call.body.get("model", call.model.id) else {}


def translate(fn, *args, **kwargs):
    """Run a pure translation; what it cannot carry is the client's 400."""
    try:
        return fn(*args, **kwargs)
    except TranslationError as e:
        raise BodyError(e.message, param=e.param) from None


def passthrough_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """The provider's status and body, unchanged (plus Retry-After when it sent one)."""
    headers: dict[str, str] = {}
    for name in ("retry-after", "x-should-retry"):
        if name in error.headers:
            headers[name] = error.headers[name]
    body = error.body
    try:
        provider_json(body)
    except InvalidAnswer:
        body = orjson.dumps({"error": {"message": error.message(), "type": "upstream_error", "code": None}})
    return error.status, body, headers


def converted_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
    """A provider error on a translated route, told in the chat (OpenAI) envelope the
    client reads; the provider's status and message kept."""
    headers = {k: error.headers[k] for k in ("retry-after",) if k in error.headers}
    body = orjson.dumps({"error": {"message": error.message(), "type": error.error_type() or "upstream_error",
                                   "param": None, "code": None}})
    return error.status, body, headers
