"""The Gemini API inbound (``/v1beta/models...``): what Gemini CLI and Google's google-genai
SDK call, served for every chat model of the catalogue.

- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (``?alt=sse``:
  SSE; without it: one streamed JSON array) run through the relay like every model endpoint
  (same key rules, hold, billing, rate limits, idle timeout, disconnect billing), as the
  ``"gemini"`` client format of the adapter table: passed through to Gemini providers,
  translated through the chat route to the others (``gatewayd.providers.gemini_client``);
- ``POST /v1beta/models/{model}:countTokens``: counted here with the model family's
  tokenizer, free (no hold, no usage row);
- ``GET /v1beta/models`` and ``GET /v1beta/models/{model}``: the chat models the key may use,
  in Google's model resource shape.

The key is read from ``x-goog-api-key``, ``?key=`` or ``Authorization: Bearer``. Errors: the
gateway's own refusals before the model step (key, IP, model list, group, balance, rate limit,
unknown model) keep the spec's chat envelope and status, as on /v1/messages; from the model
step on (the body, the provider, timeouts) they are in Google's envelope
(``{"error": {"code", "message", "status"}}``), see docs/gemini-api.md.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote

import orjson
import trio

from gatewayd import tokens
from gatewayd.access import authorize_model, visible_models
from gatewayd.api_routes import Headers, _cancel_on_disconnect, _count_body_against, _read_body, _send_answer
from gatewayd.billing.estimate import prompt_transcript
from gatewayd.endpoints import read_body
from gatewayd.errors import BodyError, GatewayError, our_fault
from gatewayd.formats.chat_to_gemini_response import google_error
from gatewayd.providers.base import Call
from gatewayd.relay import Ctx, Relay

PREFIX = "/v1beta/models"
METHODS = ("generateContent", "streamGenerateContent", "countTokens")
MAX_PAGE_SIZE = 1000


class GeminiHeaders(Headers):
    """The request's headers, with the Gemini API's key places read as ``Authorization``:
    ``x-goog-api-key`` or ``?key=`` when no ``Authorization`` header came."""

    __slots__ = ("_key",)

    def __init__(self, raw: list[tuple[bytes, bytes]], query: dict[str, list[str]]) -> None:
        super().__init__(raw)
        key = super().get("x-goog-api-key") or next(iter(query.get("key") or ()), None)
        self._key = key.strip() if isinstance(key, str) and key.strip() else None

    def get(self, name: str, default: str | None = None) -> str | None:
        found = super().get(name, default)
        if found is None and name.lower() == "authorization" and self._key is not None:
            return f"Bearer {self._key}"
        return found


def gemini_error_body(error: GatewayError, request_id: str) -> bytes:
    """A gateway error from the model step on, in Google's envelope; the gateway's code as
    the ``ErrorInfo`` reason."""
    return orjson.dumps(google_error(error.status, f"{error.message} (request id: {request_id})",
                                     error.code or error.type))


async def _send_error(send, error: GatewayError, ctx: Ctx) -> None:
    body = gemini_error_body(error, ctx.request_id) if error.model_step else error.chat_body(ctx.request_id)
    await _send_answer(send, error.status, error.headers, body, ctx)


def _model_and_method(path: str) -> tuple[str, str | None]:
    """``/v1beta/models/{model}[:method]`` -> (model id, method or None)."""
    rest = unquote(path[len(PREFIX) + 1:])
    model, sep, method = rest.rpartition(":") if ":" in rest else (rest, "", "")
    return model.removeprefix("models/"), (method if sep else None)


class GeminiRoutes:
    """``route(method, path)`` -> an ASGI callable for the ``/v1beta/models`` paths, or None."""

    def __init__(self, api) -> None:
        self.api = api  # the /v1 routes (gatewayd.api_routes.ApiRoutes): their request context is ours

    @property
    def relay(self) -> Relay:
        return self.api.relay

    def route(self, method: str, path: str):
        if path == PREFIX and method == "GET":
            return self._list
        if not path.startswith(PREFIX + "/") or len(path) <= len(PREFIX) + 1:
            return None
        model, action = _model_and_method(path)
        if method == "GET" and action is None:
            return self._get
        if method == "POST" and action in METHODS:
            return self._count if action == "countTokens" else self._generate
        return None

    def _context(self, scope: dict, endpoint: str) -> Ctx:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return self.api._context(scope, GeminiHeaders(scope["headers"], query), endpoint)

    async def _serve_body(self, scope, receive, send, handler) -> None:
        """Admit from the headers, read the body, run ``handler(ctx, raw)`` while watching
        for the client leaving (as ``api_routes`` does for /v1)."""
        ctx = self._context(scope, "gemini")
        try:
            caller = self.relay.admit(ctx)
            _count_body_against(scope, caller)
        except GatewayError as error:
            await _send_error(send, error, ctx)
            return
        raw = await _read_body(receive)
        if raw is None:
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            await _answer_gemini(send, ctx, handler(ctx, raw))
            nursery.cancel_scope.cancel()

    async def _generate(self, scope, receive, send) -> None:
        model_id, action = _model_and_method(scope["path"])
        stream = action == "streamGenerateContent"
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        sse = (query.get("alt") or [""])[0] == "sse"

        async def generate(ctx: Ctx, raw: bytes):
            caller = self.relay.admit(ctx)
            body = await read_body(raw)
            _check_contents(body)
            grant = await self.relay.authorize(caller, model_id, kind="chat", endpoint="gemini")
            call = Call(client_format="gemini", model=grant.model, body=body, raw=raw, stream=stream,
                        headers=ctx.headers, sse=sse)
            return await self.relay._hold_and_attempt(ctx, caller, grant, call)

        await self._serve_body(scope, receive, send, generate)

    async def _count(self, scope, receive, send) -> None:
        model_id, _ = _model_and_method(scope["path"])

        async def count(ctx: Ctx, raw: bytes):
            caller = self.relay.admit(ctx)
            body = await read_body(raw)
            inner = body.get("generateContentRequest")
            if inner is not None:
                if not isinstance(inner, dict):
                    raise BodyError("generateContentRequest must be an object", param="generateContentRequest")
                body = inner
            _check_contents(body)
            grant = authorize_model(self.relay.config, caller, model_id, kind="chat", endpoint="gemini")
            text, flat = prompt_transcript(body, "gemini")
            total = await tokens.count_off_loop(text, grant.model.family) + flat
            return 200, {}, orjson.dumps({"totalTokens": total})

        await self._serve_body(scope, receive, send, count)

    async def _list(self, scope, receive, send) -> None:
        ctx = self._context(scope, "models")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))

        async def listing():
            entries = self._entries(ctx)
            size = _page_size(query)
            start = _page_token(query, len(entries))
            page = entries[start:start + size]
            out: dict[str, Any] = {"models": page}
            if start + size < len(entries):
                out["nextPageToken"] = str(start + size)
            return 200, {}, orjson.dumps(out)

        await _answer_gemini(send, ctx, listing())

    async def _get(self, scope, receive, send) -> None:
        ctx = self._context(scope, "models")
        model_id, _ = _model_and_method(scope["path"])

        async def item():
            for entry in self._entries(ctx):
                if entry["name"] == f"models/{model_id}":
                    return 200, {}, orjson.dumps(entry)
            raise GatewayError(404, f"models/{model_id} is not found, or this key may not use it", "not_found",
                               model_step=True)

        await _answer_gemini(send, ctx, item())

    def _entries(self, ctx: Ctx) -> list[dict]:
        caller = self.relay.admit(ctx)
        return [{
            "name": f"models/{m.id}",
            "baseModelId": m.id,
            "version": "001",
            "displayName": m.id,
            "description": f"{m.id} through gatewayd ({m.provider.name})",
            "outputTokenLimit": m.max_output_tokens,
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
            "thinking": m.reasoning,
        } for m in visible_models(self.relay.config, caller) if m.kind == "chat"]


def _page_size(query: dict) -> int:
    raw = (query.get("pageSize") or query.get("page_size") or ["50"])[0]
    try:
        size = int(raw)
    except ValueError:
        raise GatewayError(400, "pageSize must be an integer", "invalid_request_error", model_step=True) from None
    return MAX_PAGE_SIZE if size <= 0 else min(size, MAX_PAGE_SIZE)


def _page_token(query: dict, total: int) -> int:
    raw = (query.get("pageToken") or query.get("page_token") or ["0"])[0] or "0"
    if not raw.isdigit() or int(raw) > total:
        raise GatewayError(400, "pageToken is not one this listing gave", "invalid_request_error", model_step=True)
    return int(raw)


def _check_contents(body: dict) -> None:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BodyError("contents must be a non-empty array of Content objects", param="contents")


async def _answer_gemini(send, ctx: Ctx, answering) -> None:
    """``api_routes._answer`` with this endpoint's envelopes: a refusal from the model step
    on, and a bug of ours (a logged 500), in Google's."""
    try:
        status, headers, body = await answering
    except GatewayError as error:
        await _send_error(send, error, ctx)
    except Exception as e:
        await _send_error(send, our_fault(ctx.request_id, "while handling the request", e), ctx)
    else:
        await _send_answer(send, status, headers, body, ctx)
