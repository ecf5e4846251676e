"""Answer translation for Gemini clients of non-Gemini models: a chat completion (or its
stream of chunks) becomes a ``GenerateContentResponse`` (or Google's stream of them), and
the gateway's and providers' errors take Google's error envelope.

Sans-I/O. The usage told in ``usageMetadata`` is the one the gateway bills (a
:class:`~gatewayd.formats.usage.Usage`), so a client's count and its usage row agree.

A stream goes out framed as the client asked (:class:`Framing`): with ``?alt=sse``,
``data: <response>`` events separated by ``\\r\\n\\r\\n`` (what Google sends); without it,
one JSON array written as it grows (``[{...}``, then ``,\\r\\n{...}`` per chunk, then ``]``),
which is what Google's REST endpoint streams.
"""

from __future__ import annotations

from typing import Any

import orjson

from gatewayd.formats.errors import GRPC_STATUS, google_error  # Google's error envelope: one writer, with the others
from gatewayd.formats.usage import Usage

__all__ = ["ChatToGeminiStream", "Framing", "GRPC_STATUS", "chat_response_to_gemini", "google_error",
           "usage_metadata"]

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "function_call": "STOP", "length": "MAX_TOKENS",
           "content_filter": "SAFETY"}


def usage_metadata(usage: Usage | None) -> dict[str, Any]:
    """Google's ``usageMetadata`` for what the gateway bills: the prompt with its cached part,
    the answer without the thoughts, the thoughts apart (Gemini counts them so)."""
    usage = usage or Usage()
    thoughts = min(usage.reasoning_tokens, usage.output_tokens)
    meta = {"promptTokenCount": usage.input_tokens, "candidatesTokenCount": usage.output_tokens - thoughts,
            "totalTokenCount": usage.input_tokens + usage.output_tokens}
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    if usage.cached_tokens:
        meta["cachedContentTokenCount"] = usage.cached_tokens
    return meta


def _function_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    try:
        args = orjson.loads(function.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        args = {"arguments": function.get("arguments")}  # the model wrote invalid JSON: kept, not lost
    if not isinstance(args, dict):
        args = {"value": args}
    out = {"name": function.get("name") or "", "args": args}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return {"functionCall": out}


def _message_parts(message: dict[str, Any], include_thoughts: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if include_thoughts:
        found = message.get("thinking_blocks")
        blocks: list[Any] = found if isinstance(found, list) else []
        signed = [b for b in blocks if isinstance(b, dict) and isinstance(b.get("thinking"), str)]
        if signed:
            for block in signed:
                part = {"text": block["thinking"], "thought": True}
                if isinstance(block.get("signature"), str):
                    part["thoughtSignature"] = block["signature"]
                parts.append(part)
        elif isinstance(message.get("reasoning_content"), str) and message["reasoning_content"]:
            parts.append({"text": message["reasoning_content"], "thought": True})
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append({"text": content})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict):
            parts.append(_function_call(call))
    return parts


def chat_response_to_gemini(doc: dict[str, Any], usage: Usage | None, *, model: str, include_thoughts: bool) -> dict[str, Any]:
    """A ``chat.completion`` -> a ``GenerateContentResponse`` (one candidate per choice)."""
    candidates = []
    for position, choice in enumerate(doc.get("choices") or ()):
        if not isinstance(choice, dict):
            continue
        found = choice.get("message")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        candidates.append({
            "content": {"role": "model", "parts": _message_parts(message, include_thoughts)},
            "finishReason": _FINISH.get(str(choice.get("finish_reason")), "OTHER"),
            "index": choice.get("index", position),
        })
    out = {"candidates": candidates, "usageMetadata": usage_metadata(usage), "modelVersion": model}
    if isinstance(doc.get("id"), str):
        out["responseId"] = doc["id"]
    return out


class ChatToGeminiStream:
    """Chat chunks in, ``GenerateContentResponse`` chunks out.

    Text and thoughts go out as they come; a tool call's argument fragments are gathered
    and sent whole, as Gemini sends function calls, when its choice finishes. The finish
    reason is held until the usage chunk (or the end) so that the last chunk carries both
    ``finishReason`` and ``usageMetadata``, as Google's last chunk does.
    """

    def __init__(self, *, model: str, include_thoughts: bool) -> None:
        self.model = model
        self.include_thoughts = include_thoughts
        self.response_id: str | None = None
        self._calls: dict[int, dict[int, dict[str, Any]]] = {}  # choice index -> tool call index -> call so far
        self._finished: dict[int, str] = {}  # choice index -> Gemini finish reason, held
        self.failed = False
        self.done = False

    def _doc(self, candidates: list[dict[str, Any]], usage: Usage | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"candidates": candidates, "modelVersion": self.model}
        if usage is not None:
            out["usageMetadata"] = usage_metadata(usage)
        if self.response_id:
            out["responseId"] = self.response_id
        return out

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """One chat chunk (``usage`` is what the gateway bills once the usage chunk came)."""
        if self.done or not isinstance(chunk, dict):
            return []
        if "error" in chunk:
            self.failed = True
            error = chunk["error"] if isinstance(chunk["error"], dict) else {}
            return [google_error(500, str(error.get("message") or "the provider stream failed"),
                                 error.get("code") or error.get("type"))]
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        out = []
        for position, choice in enumerate(chunk.get("choices") or ()):
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", position)
            found = choice.get("delta")
            delta: dict[str, Any] = found if isinstance(found, dict) else {}
            parts = []
            if self.include_thoughts and isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
                parts.append({"text": delta["reasoning_content"], "thought": True})
            if isinstance(delta.get("content"), str) and delta["content"]:
                parts.append({"text": delta["content"]})
            for call in delta.get("tool_calls") or ():
                self._gather(index, call)
            if parts:
                out.append(self._doc([{"content": {"role": "model", "parts": parts}, "index": index}]))
            if choice.get("finish_reason"):
                self._finished[index] = _FINISH.get(choice["finish_reason"], "OTHER")
        return out

    def _gather(self, choice: int, call: Any) -> None:
        if not isinstance(call, dict):
            return
        calls = self._calls.setdefault(choice, {})
        entry = calls.setdefault(call.get("index", len(calls)), {"id": None, "type": "function",
                                                                 "function": {"name": "", "arguments": ""}})
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        found = call.get("function")
        function: dict[str, Any] = found if isinstance(found, dict) else {}
        if isinstance(function.get("name"), str):
            entry["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            entry["function"]["arguments"] += function["arguments"]

    def finish(self, usage: Usage | None) -> list[dict[str, Any]]:
        """The last chunk: the gathered function calls, the finish reasons, the usage."""
        if self.done or self.failed:
            return []
        self.done = True
        candidates = []
        for index in sorted(set(self._finished) | set(self._calls) or {0}):
            calls = self._calls.get(index, {})
            candidate: dict[str, Any] = {"content": {"role": "model",
                                           "parts": [_function_call(calls[k]) for k in sorted(calls)]},
                               "index": index}
            candidate["finishReason"] = self._finished.get(index, "STOP")
            candidates.append(candidate)
        return [self._doc(candidates, usage)]


class Framing:
    """How a stream's chunks go on the wire: SSE (``?alt=sse``) or one growing JSON array."""

    def __init__(self, sse: bool) -> None:
        self.sse = sse
        self._opened = False

    @property
    def content_type(self) -> str:
        return "text/event-stream" if self.sse else "application/json"

    def frame(self, doc: dict[str, Any]) -> bytes:
        return self.frame_raw(orjson.dumps(doc))

    def frame_raw(self, data: bytes) -> bytes:
        if self.sse:
            return b"data: " + data + b"\r\n\r\n"
        if not self._opened:
            self._opened = True
            return b"[" + data
        return b",\r\n" + data

    def end(self) -> bytes:
        """What closes the stream: nothing for SSE; the array's ``]`` (``[]`` if empty)."""
        if self.sse:
            return b""
        if not self._opened:
            self._opened = True
            return b"[]"
        return b"]"
