"""Response translation: a messages-format (Anthropic Messages) answer becomes a
chat-format (OpenAI Chat Completions) answer, whole or as a stream.

Sans-I/O. :func:`messages_response_to_chat` maps one message object;
:class:`MessagesToChatStream` is a small state machine in the h11 style: the
caller parses upstream SSE events, feeds each one in, and writes out the chunks it
gets back, in order, as they come (nothing is held back until the end). The caller
also writes the final ``data: [DONE]``.

Thinking is surfaced twice: as ``reasoning_content`` text (what chat clients that
show reasoning read) and as ``thinking_blocks`` carrying the signatures, so a
client can echo them back on the next turn and keep a tool loop with thinking
valid upstream (see ``chat_to_messages``).
"""

from __future__ import annotations

from typing import Any

import orjson

from gatewayd.formats.usage import MessagesTally, Usage, from_messages

__all__ = [
    "FINISH_REASONS",
    "MessagesToChatStream",
    "chat_usage",
    "finish_reason",
    "messages_response_to_chat",
]

#: ``stop_reason`` -> ``finish_reason``. A stop the chat format has no word for
#: (``pause_turn``: the server paused a long turn) reads as a normal stop.
FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
}


def finish_reason(stop_reason: str | None) -> str:
    return FINISH_REASONS.get(stop_reason or "end_turn", "stop")


def chat_usage(usage: Usage | None) -> dict[str, Any]:
    """Chat-format usage: the prompt count includes cache reads and writes (the
    messages format reports those apart), the cached part is broken out."""
    usage = usage or Usage()
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _json_arguments(value: Any) -> str:
    return orjson.dumps(value if value is not None else {}).decode()


def _thinking_block(block: dict[str, Any]) -> dict[str, Any]:
    """The echo-able form of a thinking or redacted_thinking block: exactly what Anthropic accepts back."""
    if block.get("type") == "thinking":
        return {"type": "thinking", "thinking": block.get("thinking") or "", "signature": block.get("signature") or ""}
    return {"type": "redacted_thinking", "data": block.get("data") or ""}


def messages_response_to_chat(message: dict[str, Any], *, model: str, created: int) -> dict[str, Any]:
    """Translate a non-streamed message into a ``chat.completion`` object.

    ``model`` is the id the client asked for (not the upstream's). ``content`` is
    ``None`` when the answer is only tool calls, as OpenAI returns it, and ``""``
    when there is nothing at all.
    """
    texts: list[str] = []
    reasoning: list[str] = []
    thinking_blocks: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind in ("thinking", "redacted_thinking"):
            if kind == "thinking":
                reasoning.append(block.get("thinking") or "")
            thinking_blocks.append(_thinking_block(block))
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": _json_arguments(block.get("input"))},
                }
            )

    chat_message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not tool_calls else None,
        "refusal": None,
    }
    if tool_calls:
        chat_message["tool_calls"] = tool_calls
    if thinking_blocks:
        chat_message["reasoning_content"] = "".join(reasoning)
        chat_message["thinking_blocks"] = thinking_blocks
    return {
        "id": f"chatcmpl-{message.get('id', '')}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": chat_message,
                "logprobs": None,
                "finish_reason": finish_reason(message.get("stop_reason")),
            }
        ],
        "usage": chat_usage(from_messages(message.get("usage"))),
    }


class MessagesToChatStream:
    """Translate a messages-format event stream into chat-completion chunks.

    Content blocks are numbered across all kinds upstream; tool calls in the chat
    format are numbered among themselves from 0, so block indexes are mapped to
    tool indexes as tool_use blocks start. A thinking block's text is streamed as
    ``reasoning_content``; when the block ends, one extra chunk carries the whole
    block with its signature in ``delta.thinking_blocks`` (each entry with its own
    ``index`` among thinking blocks, so OpenAI's stream accumulator merges them).

    Attributes the relay reads: ``finished`` (``message_stop`` seen), ``failed``
    (an ``error`` event seen), ``usage`` (normalised, so far) and ``output_text``
    (every generated character so far, to count tokens after a disconnect).
    """

    def __init__(self, *, model: str, created: int, include_usage: bool, chunk_id: str | None = None) -> None:
        self._model = model
        self._created = created
        self._include_usage = include_usage
        self._chunk_id = chunk_id
        self._tally = MessagesTally()
        # keyed by each event's "index" as the provider sent it (an int, unless it misbehaves)
        self._tool_index_by_block: dict[Any, int] = {}
        self._tool_block_input: dict[Any, object] = {}
        self._tool_block_got_json: set[Any] = set()
        self._thinking_by_block: dict[Any, dict[str, Any]] = {}
        self._thinking_count = 0
        self._output: list[str] = []
        self._finish_sent = False
        self.finished = False
        self.failed = False

    @property
    def usage(self) -> Usage | None:
        """What the stream reported so far (:class:`~gatewayd.formats.usage.MessagesTally`)."""
        return self._tally.usage(self.finished)

    @property
    def output_text(self) -> str:
        return "".join(self._output)

    def feed(self, event: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        """One upstream event in; the chunks to send now out, in order. Unknown
        events and delta types produce nothing, so upstream additions do not break us."""
        if not isinstance(data, dict):
            return []
        handler = self._HANDLERS.get(event or data.get("type") or "")
        return handler(self, data) if handler is not None else []

    # --- chunk shapes ---

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._chunk_id or "chatcmpl-",
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _usage_chunk(self) -> dict[str, Any]:
        return {
            "id": self._chunk_id or "chatcmpl-",
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [],
            "usage": chat_usage(self.usage),
        }

    def _text(self, field: str, text: Any) -> list[dict[str, Any]]:
        if not isinstance(text, str) or not text:
            return []
        self._output.append(text)
        return [self._chunk({field: text})]

    def _tool_arguments(self, tool_index: int, fragment: str) -> list[dict[str, Any]]:
        self._output.append(fragment)
        return [self._chunk({"tool_calls": [{"index": tool_index, "function": {"arguments": fragment}}]})]

    def _thinking_blocks_chunk(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        entry = {"index": self._thinking_count, **block}
        self._thinking_count += 1
        return [self._chunk({"thinking_blocks": [entry]})]

    # --- event handlers ---

    def _on_message_start(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        message = got if isinstance(got := data.get("message"), dict) else {}
        if self._chunk_id is None and message.get("id"):
            self._chunk_id = f"chatcmpl-{message['id']}"
        self._tally.start(data)
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_block_start(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        block = data.get("content_block")
        index = data.get("index")
        if not isinstance(block, dict):
            return []
        self._tally.block_start(data)
        kind = block.get("type")
        if kind == "text":
            return self._text("content", block.get("text"))
        if kind == "thinking":
            self._thinking_by_block[index] = {"thinking": [block.get("thinking") or ""], "signature": block.get("signature") or ""}
            return self._text("reasoning_content", block.get("thinking"))
        if kind == "redacted_thinking":
            return self._thinking_blocks_chunk(_thinking_block(block))
        if kind == "tool_use":
            tool_index = len(self._tool_index_by_block)
            self._tool_index_by_block[index] = tool_index
            self._tool_block_input[index] = block.get("input")
            name = got if isinstance(got := block.get("name"), str) else ""  # output_text joins strings
            self._output.append(name)
            call = {
                "index": tool_index,
                "id": block.get("id"),
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        return []

    def _on_block_delta(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        delta = data.get("delta")
        index = data.get("index")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            return self._text("content", delta.get("text"))
        if kind == "thinking_delta":
            if index in self._thinking_by_block and isinstance(delta.get("thinking"), str):
                self._thinking_by_block[index]["thinking"].append(delta["thinking"])
            return self._text("reasoning_content", delta.get("thinking"))
        if kind == "signature_delta":
            if index in self._thinking_by_block and isinstance(delta.get("signature"), str):
                self._thinking_by_block[index]["signature"] += delta["signature"]
            return []
        if kind == "input_json_delta" and index in self._tool_index_by_block:
            fragment = delta.get("partial_json")
            if not isinstance(fragment, str) or not fragment:
                return []
            self._tool_block_got_json.add(index)
            return self._tool_arguments(self._tool_index_by_block[index], fragment)
        return []

    def _on_block_stop(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        index = data.get("index")
        thinking = self._thinking_by_block.pop(index, None)
        if thinking is not None:
            block = {"type": "thinking", "thinking": "".join(thinking["thinking"]), "signature": thinking["signature"]}
            return self._thinking_blocks_chunk(block)
        if index in self._tool_index_by_block and index not in self._tool_block_got_json:
            # The input arrived whole in content_block_start (no deltas): send it as one fragment.
            start_input = self._tool_block_input.get(index)
            if start_input:
                return self._tool_arguments(self._tool_index_by_block[index], _json_arguments(start_input))
        return []

    def _on_message_delta(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        self._tally.delta(data)
        delta = got if isinstance(got := data.get("delta"), dict) else {}
        if self._finish_sent:
            return []
        self._finish_sent = True
        return [self._chunk({}, finish_reason(delta.get("stop_reason")))]

    def _on_message_stop(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        self.finished = True
        chunks = []
        if not self._finish_sent:
            self._finish_sent = True
            chunks.append(self._chunk({}, "stop"))
        if self._include_usage:
            chunks.append(self._usage_chunk())
        return chunks

    def _on_error(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The chat format has no error event; OpenAI's SDK raises on a data chunk
        carrying ``error``, which is what an OpenAI upstream sends mid-stream."""
        self.failed = True
        error = got if isinstance(got := data.get("error"), dict) else {}
        return [
            {
                "error": {
                    "message": error.get("message") or "the upstream stream failed",
                    "type": error.get("type") or "api_error",
                    "param": None,
                    "code": error.get("code"),
                }
            }
        ]

    def _on_ping(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    _HANDLERS = {
        "message_start": _on_message_start,
        "content_block_start": _on_block_start,
        "content_block_delta": _on_block_delta,
        "content_block_stop": _on_block_stop,
        "message_delta": _on_message_delta,
        "message_stop": _on_message_stop,
        "error": _on_error,
        "ping": _on_ping,
    }
