"""Gemini-API clients (Gemini CLI, google-genai) on every protocol: the ``"gemini"`` client
format of the adapter table.

- To a Gemini provider it is pass-through (:func:`passthrough_to`): the client's bytes go
  upstream as they came (the model is in the URL, not the body), edited only where the
  hold needs it (``generationConfig.maxOutputTokens``), and the answer comes back as sent.
- To any other provider it is composed (:func:`via_chat`): the Gemini body is translated to
  a chat body (:mod:`gatewayd.formats.gemini_request_to_chat`), the adapter's own chat route
  carries it (so the upstream body, the hold, the usage and the errors are exactly those of a
  chat client), and the chat answer is translated back
  (:mod:`gatewayd.formats.chat_to_gemini_response`).

Provider errors reach the client in Google's envelope either way.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import orjson

from gatewayd import tokens
from gatewayd.billing.estimate import GEMINI_MEDIA, estimate_input_tokens
from gatewayd.billing.features import gemini_asks, gemini_cap, require_prices
from gatewayd.catalogue import ModelRoute
from gatewayd.errors import BodyError, UpstreamError
from gatewayd.formats.chat_to_gemini_response import (
    ChatToGeminiStream, Framing, chat_response_to_gemini, google_error,
)
from gatewayd.formats.errors import answer_object, provider_json, provider_json_or_none
from gatewayd.formats.gemini_request_to_chat import gemini_request_to_chat
from gatewayd.formats.pipes import Pipe
from gatewayd.formats.sse import SSEEvent, SSESplitter
from gatewayd.formats.usage import GeminiTally, Usage
from gatewayd.providers.base import Builder, Call, Route, encode_body, translate, with_changes

DROPPED_FIELDS_HEADER = "x-gatewayd-dropped-fields"
#: Chat targets that cannot constrain their output to JSON (the messages translation drops
#: ``response_format``): a Gemini client asking for it is refused rather than answered in prose.
NO_JSON_OUTPUT = frozenset({"anthropic"})


def _framing(call: Call) -> Framing:
    return Framing(sse=call.sse)


def _headers(call: Call) -> dict[str, str]:
    """A JSON-array stream is ``application/json`` (SSE's type is the listener's default)."""
    return {"content-type": "application/json"} if call.stream and not call.sse else {}


def google_envelope(status: int, body: bytes) -> bytes:
    """An error body of any shape (chat, messages, Google's own) in Google's envelope."""
    doc = provider_json_or_none(body)
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("status"), str):
        return body  # already Google's
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    reason = (error.get("code") or error.get("type")) if isinstance(error, dict) else None
    text = message if isinstance(message, str) else body.decode("utf-8", "replace")[:500] or f"upstream answered {status}"
    return orjson.dumps(google_error(status, text, reason if isinstance(reason, str) else None))


# -- Gemini provider: pass-through -------------------------------------------------------------


def _parts_text(doc: dict) -> list[str]:
    out = []
    for candidate in doc.get("candidates") or ():
        content = candidate.get("content") if isinstance(candidate, dict) else None
        for part in (content.get("parts") or ()) if isinstance(content, dict) else ():
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif isinstance(part.get("functionCall"), dict):
                    out.append(orjson.dumps(part["functionCall"]).decode())
    return out


def _finished(doc: dict) -> bool:
    return any(isinstance(c, dict) and c.get("finishReason") for c in doc.get("candidates") or ())


class GeminiPassthroughPipe(Pipe):
    """Gemini SSE upstream -> the Gemini client, framed as it asked. Each event's data is
    forwarded as received (SSE: the raw event); its ``usageMetadata`` read. The event with
    the ``finishReason`` ends the answer and is held back until the bill is settled."""

    def __init__(self, framing: Framing) -> None:
        self.framing = framing
        self.tally = GeminiTally()
        self.texts: list[str] = []
        self._last = b""

    @property
    def usage(self) -> Usage | None:
        return self.tally.usage

    def feed(self, events: list[SSEEvent]) -> bytes:
        out = []
        for ev in events:
            if self.complete or self.failed:
                break
            doc = provider_json(ev.data)  # the provider's bytes: invalid JSON is its fault (a 502)
            doc = doc if isinstance(doc, dict) else {}
            if "error" in doc:
                self.failed = True
                error = doc["error"] if isinstance(doc["error"], dict) else {}
                self.error_message = str(error.get("message") or "upstream stream error")
                out.append(self.framing.frame_raw(ev.data) + self.framing.end())
                continue
            self.tally.feed(doc)
            self.texts.extend(_parts_text(doc))
            framed = ev.raw if self.framing.sse else self.framing.frame_raw(ev.data)
            if _finished(doc):
                self.complete = True
                self._last = framed
                continue
            out.append(framed)
        return b"".join(out)

    def closing(self) -> bytes:
        return self._last + self.framing.end()

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        return self.framing.frame(google_error(500, message, kind)) + self.framing.end()

    def produced_text(self) -> str:
        return "".join(self.texts)


def passthrough_to(request: Callable[..., Any], gemini_error: Callable[[UpstreamError], tuple[int, bytes, dict[str, str]]],
                   retry_after: Callable[[UpstreamError], float | None]) -> Builder:
    """The route of a Gemini client to a Gemini model: the client's bytes, with the cap the hold
    covers. Made by the Gemini adapter with its own wire (``request``, its error mapping and
    retry hint), so this module does not import the adapter that imports it."""

    def passthrough(call: Call, target: ModelRoute, upstream) -> Route:
        body, model = call.body, call.model
        capped = gemini_cap(body, model)
        asks = gemini_asks(capped, model)
        require_prices(model, asks)
        changes = {} if capped["generationConfig"] == body.get("generationConfig") else {
            "generationConfig": capped["generationConfig"]}
        estimate = estimate_input_tokens(body, "gemini", GEMINI_MEDIA)

        def finish(raw: bytes):
            doc = answer_object(raw)
            tally = GeminiTally()
            tally.feed(doc)
            usage = tally.usage
            if tally.reported is None:  # never free output: count what it produced
                usage = attrs.evolve(usage or Usage(), input_tokens=estimate,
                                     output_tokens=tokens.count("".join(_parts_text(doc)), model.family))
            return raw, usage

        def upstream_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
            status, _, headers = gemini_error(error)  # the retry hint as Retry-After too
            return status, google_envelope(status, error.body), headers

        return Route(
            request=request(upstream, target, with_changes(call.raw, body, changes), stream=call.stream),
            stream=call.stream,
            input_tokens_estimate=estimate,
            output_tokens=asks.output_tokens,
            asks=asks,
            make_pipe=lambda: GeminiPassthroughPipe(_framing(call)),
            finish=finish,
            upstream_error=upstream_error,
            headers=_headers(call),
            retry_after=retry_after,
        )

    return passthrough


# -- any other provider: through its chat route ------------------------------------------------


class ChatToGeminiPipe(Pipe):
    """Wraps the chat route's pipe: its chat chunks, re-read, become Gemini chunks."""

    def __init__(self, inner: Pipe, stream: ChatToGeminiStream, framing: Framing) -> None:
        self.inner = inner
        self.stream = stream
        self.framing = framing
        self.splitter = SSESplitter()
        self._ended = False

    @property
    def usage(self) -> Usage | None:  # type: ignore[override]
        return self.inner.usage

    @property
    def complete(self) -> bool:  # type: ignore[override]
        return self.inner.complete

    @property
    def failed(self) -> bool:  # type: ignore[override]
        return self.inner.failed or self.stream.failed

    @property
    def error_message(self) -> str | None:  # type: ignore[override]
        return self.inner.error_message

    def _translate(self, chat_bytes: bytes) -> bytes:
        out = []
        for ev in self.splitter.feed(chat_bytes):
            if ev.data == b"[DONE]":
                continue
            for doc in self.stream.feed(orjson.loads(ev.data)):
                out.append(self.framing.frame(doc))
        if self.stream.failed and not self._ended:
            self._ended = True
            out.append(self.framing.end())
        return b"".join(out)

    def feed(self, events: list[SSEEvent]) -> bytes:
        return self._translate(self.inner.feed(events))

    def closing(self) -> bytes:
        tail = self._translate(self.inner.closing())
        last = b"".join(self.framing.frame(doc) for doc in self.stream.finish(self.usage))
        self._ended = True
        return tail + last + self.framing.end()

    def error_event(self, message: str, kind: str = "api_error") -> bytes:
        self.stream.failed = True
        self._ended = True
        return self.framing.frame(google_error(500, message, kind)) + self.framing.end()

    def produced_text(self) -> str:
        return self.inner.produced_text()


def via_chat(chat: Builder) -> Builder:
    """The ``"gemini"`` builder of a protocol whose ``"chat"`` builder is ``chat``."""

    def gemini(call: Call, target: ModelRoute, upstream) -> Route:
        asked = translate(gemini_request_to_chat, call.body, model=call.model.id, stream=call.stream)
        if "response_format" in asked.body and target.provider.protocol in NO_JSON_OUTPUT:
            raise BodyError(f"responseMimeType application/json is not supported by {call.model.id}; "
                            "ask for JSON in the prompt instead", param="generationConfig.responseMimeType")
        chat_call = attrs.evolve(call, client_format="chat", body=asked.body, raw=encode_body(asked.body))
        inner = chat(chat_call, target, upstream)
        model_id = call.model.id

        def finish(raw: bytes):
            chat_bytes, usage = inner.finish(raw)
            if usage is None:
                usage = Usage(input_tokens=inner.input_tokens_estimate)
            doc = chat_response_to_gemini(orjson.loads(chat_bytes), usage, model=model_id,
                                          include_thoughts=asked.include_thoughts)
            return orjson.dumps(doc), usage

        def upstream_error(error: UpstreamError) -> tuple[int, bytes, dict[str, str]]:
            status, body, headers = inner.upstream_error(error)
            return status, google_envelope(status, body), headers

        headers = {**inner.headers, **_headers(call)}
        if asked.dropped:
            headers[DROPPED_FIELDS_HEADER] = ", ".join(asked.dropped)
        return attrs.evolve(
            inner,
            make_pipe=lambda: ChatToGeminiPipe(inner.make_pipe(), ChatToGeminiStream(
                model=model_id, include_thoughts=asked.include_thoughts), _framing(call)),
            finish=finish,
            upstream_error=upstream_error,
            headers=headers,
            received_ids=None,
        )

    return gemini


__all__ = ["ChatToGeminiPipe", "GeminiPassthroughPipe", "google_envelope", "passthrough_to", "via_chat"]
