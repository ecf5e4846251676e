"""Google Vertex AI as an upstream protocol (``protocol = "vertex"``): Claude and Gemini
models in the operator's Google Cloud project.

Which wire a route speaks is decided by its ``upstream_id`` (the publisher's model id):

- ``claude...`` (or ``anthropic/<id>``): Anthropic's Messages API through
  ``{base}/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{id}:rawPredict``
  (``:streamRawPredict`` when streaming: Anthropic's own SSE). The body is the messages body
  with ``anthropic_version: "vertex-2023-10-16"`` and without ``model`` (the URL names it);
  ``anthropic-beta`` is forwarded as a header. Dual-format: ``/v1/messages`` passes through
  with only those two edits, made in the bytes; chat and responses clients are translated
  by the Anthropic adapter's builders.
- anything else (``gemini...``, or ``google/<id>``): Gemini's ``generateContent`` /
  ``streamGenerateContent?alt=sse`` under ``publishers/google/models/{id}``, the same wire as
  Google's public Gemini API: the Gemini adapter's builders, translation and error mapping.
  Chat, responses and Gemini-API clients (``route_formats`` in ``gatewayd.protocols``; the last
  pass through): the router plans no such route for ``/v1/messages``, and a model whose routes
  are all such is refused there up front.

The builders of both adapters address their request through the ``upstream`` they are
handed (``upstream.post(url, body, headers)``); this module hands them one that re-addresses
it to Vertex (:class:`_OnVertex`): the Vertex URL, the body edits, no API-key header, and an
``Authorization: Bearer`` OAuth2 token set just before sending (:mod:`gatewayd.cloud.vertex_auth`: cached,
refreshed in a worker thread before it expires; a token that cannot be had fails the attempt
as an unreachable route, so the relay fails over).

Errors: Vertex's own (``{"error": {"code", "message", "status"}}``: 429
``RESOURCE_EXHAUSTED``, 503 ``UNAVAILABLE``, 400 ``INVALID_ARGUMENT``, 401
``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``) and Anthropic's shape from Claude's model
server keep their status and message and are told in the client's envelope; a retry hint
in the body (``google.rpc.RetryInfo``) or a ``Retry-After`` header cools the route that long
and is told to the client as ``Retry-After``. A 401 means the token was revoked before its
expiry: it is forgotten, the next request fetches a new one (this request is not retried:
its 401 is answered, as every provider's is).
"""

from __future__ import annotations

import math
from typing import Any, TYPE_CHECKING
from urllib.parse import quote

import attrs
import httpx
import orjson

from gatewayd.catalogue import ModelRoute
from gatewayd.errors import BodyError, UpstreamError
from gatewayd.formats.gemini_to_chat import retry_delay_s
from gatewayd.formats.raw_json import replace_top_level_member
from gatewayd.providers import anthropic, gemini
from gatewayd.protocols import PROTOCOLS, vertex_publisher_model as publisher_model
from gatewayd.providers.base import Builder, Call, Route, encode_body
from gatewayd.providers.gemini_client import via_chat
from gatewayd.providers.upstream import AUTHORIZE_EXTENSION

if TYPE_CHECKING:  # the credentials' module (and its cloud library) loads only when such a provider is configured
    from gatewayd.cloud.vertex_auth import AccessTokens

ANTHROPIC_VERSION = "vertex-2023-10-16"
# headers of the adapters' requests that Vertex reads; the API-key headers and anthropic-version go
_FORWARDED_HEADERS = ("content-type", "accept", "anthropic-beta")


def model_url(target: ModelRoute, method: str) -> str:
    settings = target.provider.settings
    publisher, model = publisher_model(target.upstream_id)
    return (f"{target.provider.base_url}/v1/projects/{quote(settings['project'], safe='')}"
            f"/locations/{settings['region']}/publishers/{publisher}/models/{quote(model, safe='-._~@')}:{method}")


def messages_body(raw: bytes, parsed: dict | None) -> bytes:
    """A messages body as Vertex takes it: ``anthropic_version`` where ``model`` was. Edited
    in the bytes when ``parsed`` (the body's parse, before the Anthropic builder set the cap
    in the bytes) allows; re-encoded otherwise."""
    if parsed is not None:
        edited = replace_top_level_member(raw, parsed, "model", {"anthropic_version": ANTHROPIC_VERSION})
        if edited is not None:
            return edited
    body = orjson.loads(raw)
    body.pop("model", None)
    body["anthropic_version"] = ANTHROPIC_VERSION
    return encode_body(body)


@attrs.define
class _OnVertex:
    """The ``upstream`` the Anthropic and Gemini builders are handed: their request,
    re-addressed to Vertex and authorized with an OAuth2 token when it is sent."""

    upstream: Any
    target: ModelRoute
    publisher: str
    parsed: dict | None  # the client's parsed body when the builder passes its bytes through
    used: list[str] = attrs.Factory(list)  # the token sent (forgotten on a 401)

    def post(self, url: str, body: bytes, headers: dict[str, str], *, stream: bool) -> httpx.Request:
        if self.publisher == "anthropic":
            method = "streamRawPredict" if stream else "rawPredict"
            body = messages_body(body, self.parsed)
        else:
            method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        kept = {k: v for k, v in headers.items() if k in _FORWARDED_HEADERS}
        request = self.upstream.post(model_url(self.target, method), body, kept, stream=stream)
        request.extensions[AUTHORIZE_EXTENSION] = self.authorize
        return request

    async def authorize(self, request: httpx.Request) -> None:
        token = await self.target.provider.settings["credentials"].token()
        self.used.append(token)
        request.headers["authorization"] = f"Bearer {token}"


def retry_after(error: UpstreamError) -> float | None:
    """Google's hint in the body (``RetryInfo``), else a ``Retry-After`` header."""
    return gemini.retry_after(error)


def _vertex_route(build: Builder, call: Call, target: ModelRoute, upstream, parsed: dict | None) -> Route:
    """The route ``build`` (an Anthropic or Gemini builder) makes, sent to Vertex: its errors
    told with Google's retry hint, a 401 forgetting the token it was sent with."""
    on_vertex = _OnVertex(upstream, target, publisher_model(target.upstream_id)[0], parsed)
    # a pass-through builder sees the client's model id as the provider's, so it leaves the
    # body's model alone (Vertex drops it, the URL names the model): one edit of the bytes less
    seen = attrs.evolve(target, upstream_id=call.model.id) if parsed is not None else target
    route = build(call, seen, on_vertex)
    told = route.upstream_error
    tokens: AccessTokens = target.provider.settings["credentials"]

    def upstream_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
        if error.status == 401 and on_vertex.used:
            tokens.forget(on_vertex.used[-1])
        status, body, headers = told(error)
        delay = retry_delay_s(error.body)
        if delay is not None and "retry-after" not in headers:
            headers = {**headers, "retry-after": str(math.ceil(delay))}
        return status, body, headers

    route.upstream_error = upstream_error
    route.retry_after = retry_after
    return route


def _claude(target: ModelRoute) -> bool:
    return PROTOCOLS["vertex"].serves_claude(target.upstream_id)


def messages(call: Call, target: ModelRoute, upstream) -> Route:
    """A messages client: Claude on Vertex, the client's bytes with two edits (a Gemini route
    is never planned for messages: ``gatewayd.protocols``; refused here all the same)."""
    if not _claude(target):
        raise BodyError(f"model {call.model.id} is served by a Gemini model on Vertex AI, which does not speak "
                        "the messages format: call it on /v1/chat/completions or /v1/responses")
    return _vertex_route(anthropic.messages, call, target, upstream, call.body)


def chat(call: Call, target: ModelRoute, upstream) -> Route:
    """A chat client: Claude (chat -> messages) or Gemini (chat -> generateContent) on Vertex."""
    build = anthropic.chat if _claude(target) else gemini.chat
    return _vertex_route(build, call, target, upstream, None)


def responses(call: Call, target: ModelRoute, upstream) -> Route:
    """A responses client: through chat to Claude or Gemini on Vertex, and back."""
    build = anthropic.responses if _claude(target) else gemini.responses
    return _vertex_route(build, call, target, upstream, None)


def gemini_client(call: Call, target: ModelRoute, upstream) -> Route:
    """A Gemini-API client: Gemini on Vertex speaks its wire, so its bytes pass through (with
    the cap the hold covers); Claude gets it through chat (:func:`gemini_client.via_chat`)."""
    if _claude(target):
        return via_chat(chat)(call, target, upstream)
    return _vertex_route(gemini.passthrough, call, target, upstream, None)


ROUTES = {"messages": messages, "chat": chat, "responses": responses, "gemini": gemini_client}
