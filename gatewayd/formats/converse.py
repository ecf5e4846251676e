"""Bedrock's Converse API (Llama, Mistral, Amazon Nova ...) through the messages format.

Sans-I/O. Chat and responses clients of a Converse model go the way they go to Claude
(chat -> messages, :mod:`.chat_to_messages`), then one more step here, messages ->
Converse; the answer comes back Converse -> messages and then through the existing
messages -> chat translators and pipes. So every chat rule (tools, images, PDFs, stop
sequences, caps) is written once, and this module holds only the Converse wire shape:

- :func:`messages_request_to_converse`: a messages body -> a ``Converse`` body
  (``messages[].content[]`` of ``text`` / ``image`` / ``document`` / ``toolUse`` /
  ``toolResult`` / ``reasoningContent``, ``system``, ``inferenceConfig``, ``toolConfig``).
- :func:`converse_response_to_message`: a ``Converse`` answer -> an Anthropic message.
- :class:`ConverseToMessagesStream`: ``ConverseStream`` events (``messageStart``,
  ``contentBlockStart/Delta/Stop``, ``messageStop``, ``metadata``) -> Anthropic stream
  events. Converse sends its usage in ``metadata``, after ``messageStop``: the
  ``message_delta`` (stop reason and usage) and ``message_stop`` are sent then.
- :func:`converse_usage`: Converse's ``usage`` (``inputTokens`` without the cache,
  ``cacheReadInputTokens``, ``cacheWriteInputTokens``, ``outputTokens``) in Anthropic's
  shape, which :func:`gatewayd.formats.usage.from_messages` reads.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from gatewayd.formats.errors import InvalidAnswer, TranslationError

__all__ = ["ConverseToMessagesStream", "converse_response_to_message", "converse_usage",
           "messages_request_to_converse"]

_IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
_TOOL_CHOICE: dict[str, dict[str, Any]] = {"auto": {"auto": {}}, "any": {"any": {}}}
#: Converse ``stopReason`` -> Anthropic ``stop_reason`` (the rest keep their name)
_STOP = {"content_filtered": "refusal", "guardrail_intervened": "refusal"}


def _bytes(data: Any, where: str) -> str:
    """Base64 data kept as base64: Converse's JSON carries ``bytes`` base64-encoded too."""
    if not isinstance(data, str):
        raise TranslationError(f"{where} must be base64 data", where)
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error:
        raise TranslationError(f"{where} is not valid base64", where) from None
    return data


def _block(block: Any, where: str) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        raise TranslationError(f"{where} must be an object", where)
    kind = block.get("type")
    if kind == "text":
        return {"text": block.get("text", "")} if block.get("text") else None
    if kind == "image":
        source = block.get("source") or {}
        if source.get("type") != "base64":
            raise TranslationError("this model takes images as base64 data only (no URLs)", where)
        fmt = _IMAGE_FORMATS.get(str(source.get("media_type")))
        if fmt is None:
            raise TranslationError(f"image type {source.get('media_type')!r} is not supported by this model", where)
        return {"image": {"format": fmt, "source": {"bytes": _bytes(source.get("data"), f"{where}.source.data")}}}
    if kind == "document":
        source = block.get("source") or {}
        if source.get("type") != "base64" or source.get("media_type") != "application/pdf":
            raise TranslationError("this model takes documents as base64 PDFs only", where)
        name = "".join(c for c in str(block.get("title") or "document") if c.isalnum() or c in " -()[]")[:200]
        return {"document": {"format": "pdf", "name": name.strip() or "document",
                             "source": {"bytes": _bytes(source.get("data"), f"{where}.source.data")}}}
    if kind == "tool_use":
        return {"toolUse": {"toolUseId": block["id"], "name": block["name"], "input": block.get("input") or {}}}
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            parts = [{"text": content}] if content else []
        else:
            parts = [b for k, p in enumerate(content or ()) if (b := _block(p, f"{where}.content[{k}]"))]
        result: dict[str, Any] = {"toolUseId": block["tool_use_id"], "content": parts or [{"text": ""}]}
        if block.get("is_error"):
            result["status"] = "error"
        return {"toolResult": result}
    if kind == "thinking":
        return {"reasoningContent": {"reasoningText": {"text": block.get("thinking", ""),
                                                       "signature": block.get("signature", "")}}}
    raise TranslationError(f"content of type {kind!r} is not supported by this model", where)


def _content(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [b for k, part in enumerate(content or ()) if (b := _block(part, f"{where}[{k}]")) is not None]


def messages_request_to_converse(body: dict[str, Any]) -> dict[str, Any]:
    """A messages-format body (the chat translation's output) as a ``Converse`` body; the
    model goes in the URL. What Converse cannot carry is the client's 400."""
    if body.get("thinking") is not None:
        raise TranslationError("reasoning_effort is not supported by this model", "reasoning_effort")
    messages = []
    for i, message in enumerate(body.get("messages") or ()):
        content = _content(message.get("content"), f"messages[{i}].content")
        if content:
            messages.append({"role": message["role"], "content": content})
    for k, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") not in (None, "custom"):
            raise TranslationError(f"tool type {tool.get('type')!r} is not supported by this model", f"tools[{k}]")
    out: dict[str, Any] = {"messages": messages}
    system = body.get("system")
    if system:
        out["system"] = [{"text": system}] if isinstance(system, str) else _content(system, "system")
    config: dict[str, Any] = {"maxTokens": body["max_tokens"]}
    for ours, theirs in (("temperature", "temperature"), ("top_p", "topP"), ("stop_sequences", "stopSequences")):
        if body.get(ours) is not None:
            config[theirs] = body[ours]
    out["inferenceConfig"] = config
    tools = body.get("tools")
    choice = body.get("tool_choice") or {}
    if tools and choice.get("type") != "none":
        tool_config: dict[str, Any] = {"tools": [
            {"toolSpec": {"name": t["name"], **({"description": t["description"]} if t.get("description") else {}),
                          "inputSchema": {"json": t.get("input_schema") or {"type": "object"}}}}
            for t in tools
        ]}
        if choice.get("type") == "tool":
            tool_config["toolChoice"] = {"tool": {"name": choice["name"]}}
        elif choice.get("type") in _TOOL_CHOICE:
            tool_config["toolChoice"] = _TOOL_CHOICE[choice["type"]]
        out["toolConfig"] = tool_config
    return out


def converse_usage(usage: Any) -> dict[str, int] | None:
    """Converse's ``usage`` in Anthropic's shape (input without the cache, as both report it)."""
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    return {"input_tokens": count("inputTokens"), "output_tokens": count("outputTokens"),
            "cache_read_input_tokens": count("cacheReadInputTokens"),
            "cache_creation_input_tokens": count("cacheWriteInputTokens")}


def _stop(reason: Any) -> str:
    return _STOP.get(reason, reason) if isinstance(reason, str) else "end_turn"


def _message_block(block: dict[str, Any]) -> dict[str, Any] | None:
    if "text" in block:
        return {"type": "text", "text": block["text"]}
    if "toolUse" in block:
        use = block["toolUse"]
        return {"type": "tool_use", "id": use["toolUseId"], "name": use["name"], "input": use.get("input") or {}}
    if "reasoningContent" in block:
        text = (block["reasoningContent"] or {}).get("reasoningText") or {}
        return {"type": "thinking", "thinking": text.get("text", ""), "signature": text.get("signature", "")}
    return None


def converse_response_to_message(doc: dict[str, Any], *, model: str, message_id: str) -> dict[str, Any]:
    """A ``Converse`` answer as an Anthropic message (usage absent when Converse gave none)."""
    message = (doc.get("output") or {}).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise InvalidAnswer("a Converse answer without output.message.content")
    content = [b for b in map(_message_block, message["content"]) if b is not None]
    out: dict[str, Any] = {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
           "stop_reason": _stop(doc.get("stopReason")), "stop_sequence": None}
    usage = converse_usage(doc.get("usage"))
    if usage is not None:
        out["usage"] = usage
    return out


class ConverseToMessagesStream:
    """``ConverseStream`` events in, Anthropic stream events (name, data) out."""

    def __init__(self, *, model: str, message_id: str) -> None:
        self.model = model
        self.message_id = message_id
        self._open: dict[int, str] = {}  # Converse block index -> the Anthropic block type started
        self._index: dict[int, int] = {}  # Converse block index -> Anthropic index
        self._stop = "end_turn"
        self._started = False

    def _start(self, out: list[tuple[str, dict[str, Any]]], index: int, block: dict[str, Any]) -> int:
        if index not in self._index:
            self._index[index] = len(self._index)
            self._open[index] = block["type"]
            out.append(("content_block_start", {"type": "content_block_start", "index": self._index[index],
                                                "content_block": block}))
        return self._index[index]

    def _message_start(self, out: list[tuple[str, dict[str, Any]]]) -> None:
        if not self._started:
            self._started = True
            out.append(("message_start", {"type": "message_start", "message": {
                "id": self.message_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                # Converse reports usage only at the end (metadata): zeros here, as SDKs require the field
                "usage": {"input_tokens": 0, "output_tokens": 0}}}))

    def feed(self, name: str | None, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if name == "error":
            return [("error", data)]
        self._message_start(out)
        index = data.get("contentBlockIndex", 0) if isinstance(data, dict) else 0
        if name == "contentBlockStart":
            use = ((data.get("start") or {}).get("toolUse")) or {}
            self._start(out, index, {"type": "tool_use", "id": use.get("toolUseId", ""), "name": use.get("name", ""),
                                     "input": {}})
        elif name == "contentBlockDelta":
            delta = data.get("delta") or {}
            if "text" in delta:
                at = self._start(out, index, {"type": "text", "text": ""})
                out.append(("content_block_delta", {"type": "content_block_delta", "index": at,
                                                    "delta": {"type": "text_delta", "text": delta["text"]}}))
            elif "toolUse" in delta:
                at = self._start(out, index, {"type": "tool_use", "id": "", "name": "", "input": {}})
                out.append(("content_block_delta", {"type": "content_block_delta", "index": at, "delta": {
                    "type": "input_json_delta", "partial_json": (delta["toolUse"] or {}).get("input", "")}}))
            elif "reasoningContent" in delta:
                reasoning = delta["reasoningContent"] or {}
                at = self._start(out, index, {"type": "thinking", "thinking": "", "signature": ""})
                if "text" in reasoning:
                    out.append(("content_block_delta", {"type": "content_block_delta", "index": at, "delta": {
                        "type": "thinking_delta", "thinking": reasoning["text"]}}))
                if "signature" in reasoning:
                    out.append(("content_block_delta", {"type": "content_block_delta", "index": at, "delta": {
                        "type": "signature_delta", "signature": reasoning["signature"]}}))
        elif name == "contentBlockStop":
            if index in self._index:
                out.append(("content_block_stop", {"type": "content_block_stop", "index": self._index[index]}))
        elif name == "messageStop":
            self._stop = _stop(data.get("stopReason"))
        elif name == "metadata":
            usage = converse_usage(data.get("usage")) or {}
            out.append(("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": self._stop, "stop_sequence": None},
                                          "usage": usage}))
            out.append(("message_stop", {"type": "message_stop"}))
        return out


def encode_event(name: str, data: dict[str, Any]) -> bytes:
    """An Anthropic event as SSE bytes (what the messages pipes read as ``raw``)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
