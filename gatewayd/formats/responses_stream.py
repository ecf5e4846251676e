"""Chat-format stream chunks -> Responses-format stream events.

A state machine in the h11 manner: feed it each upstream ``chat.completion.chunk`` as it
arrives and it hands back the Responses events to send now; nothing is buffered beyond
the text of the item that is open (needed for its ``.done`` events). The event sequence
is the one openai-python's ``responses.stream()`` accumulator checks:

    response.created, response.in_progress,
    then per output item, one item at a time:
      response.output_item.added
        message:   content_part.added, output_text.delta..., output_text.done, content_part.done
        reasoning: reasoning_summary_part.added, reasoning_summary_text.delta...,
                   reasoning_summary_text.done, reasoning_summary_part.done
        function:  function_call_arguments.delta..., function_call_arguments.done
        custom:    custom_tool_call_input.delta, custom_tool_call_input.done
      response.output_item.done
    response.completed | response.incomplete        (finish)
    error, response.failed                          (fail)

Only one item is open at a time: when the kind of delta changes (thinking -> text ->
tool call, or one tool call -> the next) the open item is closed before the next one
opens. Chat streams send one tool call after another (OpenAI does, and so does the
messages->chat translator, since messages content blocks are sequential); a late
argument fragment for a call that was already closed cannot be reopened and is dropped.

A call to a free-form (custom) tool arrives as chat arguments ``{"input": "..."}``
(see ``responses_tools``); its fragments are gathered, and the raw input is sent when the
call closes, as one ``custom_tool_call_input.delta`` and its ``.done``.
"""

from __future__ import annotations

from typing import Any

import attrs

from gatewayd.formats.responses_output import (
    call_prefix,
    envelope,
    incomplete_reason,
    item_id,
    message_item,
    output_text_part,
    reasoning_item,
    reasoning_text,
    refusal_part,
    usage_from_chat,
)
from gatewayd.formats.responses_tools import call_item, plan_tools

__all__ = ["ChatToResponsesStream"]


@attrs.define
class _OpenItem:
    """The output item being streamed: its kind, id, place, and the text gathered so far."""

    kind: str  # "reasoning" | "message" | "function_call"
    id: str
    output_index: int
    chunks: list[str] = attrs.Factory(list)  # text of the open part / summary / arguments
    parts: list[dict[str, Any]] = attrs.Factory(list)  # message: content parts already closed
    part_kind: str | None = None  # message: "output_text" | "refusal" while a part is open
    call_id: str = ""
    name: str = ""
    chat_index: int | None = None
    custom: bool = False  # function_call: a call to a free-form tool, sent as custom_tool_call


def _response_error_code(code: Any) -> str:
    """The SDK's ``ResponseError.code`` is a closed set; the upstream's own code travels
    in the ``error`` event, and the response object gets the nearest member."""
    return "rate_limit_exceeded" if isinstance(code, str) and "rate_limit" in code else "server_error"


class ChatToResponsesStream:
    """Translate one chat stream into one Responses stream.

    ``feed`` each chunk, then exactly one of ``finish`` (the chat stream ended normally)
    or ``fail`` (an error chunk arrived, or the stream was cut). ``feed`` turns an error
    chunk into ``fail`` by itself. After either, every call returns ``[]``.
    """

    def __init__(self, *, request: dict[str, Any], response_id: str, created_at: int) -> None:
        self._request = request
        self._tools = plan_tools(request.get("tools"))
        self._response_id = response_id
        self._created_at = created_at
        self._sequence = 0
        self._started = False
        self._ended = False
        self._status = "in_progress"
        self._done: list[dict[str, Any]] = []  # closed output items, final form
        self._open: _OpenItem | None = None
        self._closed_tools: set[int] = set()
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._error: dict[str, Any] | None = None

    # -- public ------------------------------------------------------------------------

    @property
    def response(self) -> dict[str, Any]:
        """The response object as it stands; the open item (if any) as it is so far."""
        response = envelope(
            self._request, response_id=self._response_id, created_at=self._created_at, status=self._status
        )
        output = list(self._done)
        if self._open is not None:
            output.append(self._snapshot(self._open, "in_progress" if not self._ended else "incomplete"))
        response["output"] = output
        response["usage"] = usage_from_chat(self._usage)
        reason = incomplete_reason(self._finish_reason)
        if self._status == "incomplete" and reason:
            response["incomplete_details"] = {"reason": reason}
        response["error"] = self._error
        return response

    @property
    def usage(self) -> dict[str, Any] | None:
        """The upstream's chat ``usage``, untranslated, as last seen (for billing)."""
        return self._usage

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if self._ended or not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            return self.fail(chunk)
        events: list[dict[str, Any]] = []
        self._start(events)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 has no Responses counterpart; the first choice is the answer
            delta = got if isinstance(got := choice.get("delta"), dict) else {}
            thinking = reasoning_text(delta)
            if thinking:
                self._reasoning_delta(thinking, events)
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text_delta("output_text", content, events)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._text_delta("refusal", refusal, events)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._tool_delta(call, events)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict[str, Any]]:
        """Close the open item and end with ``response.completed``, or ``response.incomplete``
        when the upstream stopped on ``length`` / ``content_filter``."""
        if self._ended:
            return []
        events: list[dict[str, Any]] = []
        self._start(events)
        reason = incomplete_reason(self._finish_reason)
        if self._open is not None:
            self._close(events, "incomplete" if reason else "completed")
        self._status = "incomplete" if reason else "completed"
        self._ended = True
        kind = "response.incomplete" if reason else "response.completed"
        self._emit(events, kind, response=self.response)
        return events

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """End with an ``error`` event (carrying the upstream's code and message) and
        ``response.failed`` (whose output holds what was produced, marked incomplete).

        ``error`` is the upstream's error chunk ``{"error": {...}}`` or its inner object.
        """
        if self._ended:
            return []
        inner = error.get("error") if isinstance(error, dict) and isinstance(error.get("error"), dict) else error
        inner = inner if isinstance(inner, dict) else {}
        message = got if isinstance(got := inner.get("message"), str) else "upstream stream failed"
        code = inner.get("code") or inner.get("type")
        code = str(code) if code is not None else None
        events: list[dict[str, Any]] = []
        self._start(events)
        self._emit(events, "error", code=code, message=message, param=inner.get("param"))
        self._status = "failed"
        self._ended = True
        self._error = {"code": _response_error_code(code), "message": message}
        self._emit(events, "response.failed", response=self.response)
        return events

    # -- events ------------------------------------------------------------------------

    def _emit(self, events: list[dict[str, Any]], type_: str, **fields: Any) -> None:
        events.append({"type": type_, "sequence_number": self._sequence, **fields})
        self._sequence += 1

    def _start(self, events: list[dict[str, Any]]) -> None:
        if self._started:
            return
        self._started = True
        self._emit(events, "response.created", response=self.response)
        self._emit(events, "response.in_progress", response=self.response)

    def _open_item(self, events: list[dict[str, Any]], kind: str, prefix: str) -> _OpenItem:
        if self._open is not None:
            self._close(events, "completed")
        index = len(self._done)
        item = _OpenItem(kind=kind, id=item_id(prefix, self._response_id, index), output_index=index)
        self._open = item
        return item

    def _reasoning_delta(self, text: str, events: list[dict[str, Any]]) -> None:
        item = self._open
        if item is None or item.kind != "reasoning":
            item = self._open_item(events, "reasoning", "rs")
            self._emit(
                events, "response.output_item.added", output_index=item.output_index, item=reasoning_item(item.id, [])
            )
            self._emit(
                events,
                "response.reasoning_summary_part.added",
                item_id=item.id,
                output_index=item.output_index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        item.chunks.append(text)
        self._emit(
            events,
            "response.reasoning_summary_text.delta",
            item_id=item.id,
            output_index=item.output_index,
            summary_index=0,
            delta=text,
        )

    def _text_delta(self, part_kind: str, text: str, events: list[dict[str, Any]]) -> None:
        item = self._open
        if item is None or item.kind != "message":
            item = self._open_item(events, "message", "msg")
            self._emit(
                events,
                "response.output_item.added",
                output_index=item.output_index,
                item=message_item(item.id, [], "in_progress"),
            )
        if item.part_kind != part_kind:
            if item.part_kind is not None:
                self._close_part(item, events)
            item.part_kind = part_kind
            self._emit(
                events,
                "response.content_part.added",
                item_id=item.id,
                output_index=item.output_index,
                content_index=len(item.parts),
                part=output_text_part("") if part_kind == "output_text" else refusal_part(""),
            )
        item.chunks.append(text)
        where = {"item_id": item.id, "output_index": item.output_index, "content_index": len(item.parts)}
        if part_kind == "output_text":
            self._emit(events, "response.output_text.delta", **where, delta=text, logprobs=[])
        else:
            self._emit(events, "response.refusal.delta", **where, delta=text)

    def _tool_delta(self, call: dict[str, Any], events: list[dict[str, Any]]) -> None:
        item = self._open
        current = item.chat_index if item is not None and item.kind == "function_call" else None
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # No index (some upstreams): a new id starts a new call, otherwise it continues.
            same = item is not None and current is not None and (not call.get("id") or call.get("id") == item.call_id)
            seen = self._closed_tools | ({current} if current is not None else set())
            index = current if same else max(seen, default=-1) + 1
        function = got if isinstance(got := call.get("function"), dict) else {}
        name = got if isinstance(got := function.get("name"), str) else ""
        arguments = got if isinstance(got := function.get("arguments"), str) else ""
        if index in self._closed_tools:
            return
        if index != current:
            item = self._open_item(events, "function_call", call_prefix(self._tools, name))
            item.chat_index = index
            item.call_id = call.get("id") or item_id("call", self._response_id, item.output_index)
            item.name = name
            item.custom = name in self._tools.custom
            self._emit(
                events,
                "response.output_item.added",
                output_index=item.output_index,
                item=self._call(item, "", "in_progress"),
            )
        else:
            assert item is not None  # index == current: only an open call has a current index
            if name and not item.name:
                item.name = name
        if arguments:
            item.chunks.append(arguments)
            if item.custom:
                return  # JSON fragments of {"input": ...}: the raw input is sent at the close
            self._emit(
                events,
                "response.function_call_arguments.delta",
                item_id=item.id,
                output_index=item.output_index,
                delta=arguments,
            )

    # -- closing -------------------------------------------------------------------------

    def _close_part(self, item: _OpenItem, events: list[dict[str, Any]]) -> None:
        text = "".join(item.chunks)
        item.chunks = []
        where = {"item_id": item.id, "output_index": item.output_index, "content_index": len(item.parts)}
        if item.part_kind == "output_text":
            part = output_text_part(text)
            self._emit(events, "response.output_text.done", **where, text=text, logprobs=[])
        else:
            part = refusal_part(text)
            self._emit(events, "response.refusal.done", **where, refusal=text)
        self._emit(events, "response.content_part.done", **where, part=part)
        item.parts.append(part)
        item.part_kind = None

    def _close(self, events: list[dict[str, Any]], status: str) -> None:
        """Send the open item's closing events and move it to the finished output."""
        item = self._open
        assert item is not None
        where = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "reasoning":
            text = "".join(item.chunks)
            self._emit(events, "response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            self._emit(
                events,
                "response.reasoning_summary_part.done",
                **where,
                summary_index=0,
                part={"type": "summary_text", "text": text},
            )
            final = reasoning_item(item.id, [text])
        elif item.kind == "message":
            if item.part_kind is not None:
                self._close_part(item, events)
            final = message_item(item.id, item.parts, status)
        else:
            arguments = "".join(item.chunks)
            final = self._call(item, arguments, status)
            if item.custom:
                if final["input"]:
                    self._emit(events, "response.custom_tool_call_input.delta", **where, delta=final["input"])
                self._emit(events, "response.custom_tool_call_input.done", **where, input=final["input"])
            else:
                self._emit(events, "response.function_call_arguments.done", **where, name=final["name"],
                           arguments=arguments)
            assert item.chat_index is not None  # set when the call opened
            self._closed_tools.add(item.chat_index)
        self._emit(events, "response.output_item.done", output_index=item.output_index, item=final)
        self._done.append(final)
        self._open = None

    def _snapshot(self, item: _OpenItem, status: str) -> dict[str, Any]:
        """The open item as it is now, without closing it (for ``response`` and ``failed``)."""
        text = "".join(item.chunks)
        if item.kind == "reasoning":
            return reasoning_item(item.id, [text])
        if item.kind == "message":
            parts = list(item.parts)
            if item.part_kind == "output_text":
                parts.append(output_text_part(text))
            elif item.part_kind == "refusal":
                parts.append(refusal_part(text))
            return message_item(item.id, parts, status)
        return self._call(item, text, status)

    def _call(self, item: _OpenItem, arguments: str, status: str) -> dict[str, Any]:
        """The item of a tool call: a function call (with its namespace, if any) or a custom
        tool call, as ``responses_tools`` maps chat names back."""
        return call_item(self._tools, item.id, item.call_id, item.name, arguments, status)
