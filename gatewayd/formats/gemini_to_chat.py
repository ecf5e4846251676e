"""Response translation: a Gemini ``generateContent`` answer becomes a chat-format
(OpenAI Chat Completions) answer, whole or as a stream; Gemini error bodies become the
chat error envelope.

Sans-I/O. :func:`gemini_response_to_chat` maps one ``GenerateContentResponse``;
:class:`GeminiToChatStream` is a small state machine fed each parsed event of a
``streamGenerateContent?alt=sse`` stream, handing back the chunks to send now. Ids and
the clock are the caller's (``completion_id``, ``created``), so the same answer always
translates to the same chunks.

Gemini streams differ from the other two upstream formats in ways that matter here:
every event is a whole ``GenerateContentResponse`` (no event names, no terminal event,
no ``[DONE]``: the stream is over when a candidate carries a ``finishReason``); a
function call arrives whole, arguments included, never in fragments; calls carry no
ids, so ours are made up (``call_<completion id>_<n>``); and a prompt the provider
refuses to answer comes back as a 200 whose ``promptFeedback.blockReason`` is set and
which has no candidate at all. That last case is raised as :class:`PromptBlocked`, so
the route can answer it as the error it is rather than as an empty success.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gatewayd.formats.chat_to_gemini import SIGNATURE_SEPARATOR
from gatewayd.formats.errors import InvalidAnswer, provider_json_or_none
from gatewayd.formats.usage import GeminiTally, Usage, from_gemini

__all__ = [
    "FINISH_REASONS",
    "SIGNATURE_SEPARATOR",
    "GeminiToChatStream",
    "PromptBlocked",
    "blocked_prompt_error",
    "chat_usage_from_gemini",
    "finish_reason",
    "gemini_error_to_chat",
    "gemini_response_to_chat",
]

#: Gemini ``finishReason`` -> chat ``finish_reason``. ``STOP`` after function calls is
#: ``tool_calls`` (Gemini says STOP there too). Every safety-like stop is
#: ``content_filter``; the rest (unknown included) read as a normal stop.
FINISH_REASONS: dict[str, str] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "LANGUAGE": "stop",
    "OTHER": "stop",
    "MALFORMED_FUNCTION_CALL": "stop",
    "UNEXPECTED_TOOL_CALL": "stop",
    "TOO_MANY_TOOL_CALLS": "stop",
    "FINISH_REASON_UNSPECIFIED": "stop",
}

#: Chat error ``type`` by HTTP status, for Gemini errors (which carry a gRPC status name instead).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


class PromptBlocked(Exception):
    """Gemini refused the prompt itself (``promptFeedback.blockReason``): nothing was
    generated. Not a ``ValueError`` on purpose: it is a provider answer, not an invalid one."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        self.reason = reason
        self.detail = detail
        text = f"the provider blocked the prompt (blockReason {reason})"
        if detail:
            text += f": {detail}"
        self.message = text + "; nothing was generated"
        super().__init__(self.message)


def blocked_prompt_error(blocked: PromptBlocked) -> dict[str, Any]:
    """The chat error body a blocked prompt is answered with (status 400)."""
    return {"error": {"message": blocked.message, "type": "invalid_request_error", "param": None,
                      "code": "content_filter"}}


def _check_blocked(doc: dict[str, Any]) -> None:
    feedback = doc.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason") and not doc.get("candidates"):
        detail = feedback.get("blockReasonMessage")
        raise PromptBlocked(str(feedback["blockReason"]), detail if isinstance(detail, str) else None)


def finish_reason(reason: str | None, *, called_tools: bool) -> str:
    mapped = FINISH_REASONS.get(reason or "STOP", "stop")
    return "tool_calls" if mapped == "stop" and called_tools and reason in (None, "STOP") else mapped


def chat_usage_from_gemini(usage: Usage | None, thoughts: int) -> dict[str, Any]:
    usage = usage or Usage()
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def _thoughts(meta: Any) -> int:
    value = meta.get("thoughtsTokenCount") if isinstance(meta, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _parts(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The first candidate's parts and finish reason (we never ask for more than one).

    What may be absent is: an event with no candidate (usage only), a candidate with no
    content (stopped for safety), content with no parts. What is there must have its
    documented type: a candidate, content or part that is not an object, parts that are
    not a list, a text that is not a string, a ``functionCall`` that is not an object with
    a string name. Skipping those would answer an empty success (and bill it); they are
    the provider's bad answer, :class:`InvalidAnswer`: a 502, or mid-stream "the provider
    stream broke off".
    """
    candidates = doc.get("candidates")
    if candidates is None or candidates == []:
        return [], None
    if not isinstance(candidates, list):
        raise InvalidAnswer("the Gemini answer's candidates is not a list")
    candidate = candidates[0]
    if not isinstance(candidate, dict):
        raise InvalidAnswer("a Gemini candidate is not an object")
    content = candidate.get("content")
    if content is None:
        content = {}
    if not isinstance(content, dict):
        raise InvalidAnswer("a Gemini candidate's content is not an object")
    parts = content.get("parts")
    if parts is None:
        parts = []
    if not isinstance(parts, list):
        raise InvalidAnswer("a Gemini candidate's parts is not a list")
    for part in parts:
        _check_part(part)
    reason = candidate.get("finishReason")
    return parts, reason if isinstance(reason, str) else None


def _check_part(part: Any) -> None:
    if not isinstance(part, dict):
        raise InvalidAnswer("a Gemini part is not an object")
    if part.get("text") is not None and not isinstance(part["text"], str):
        raise InvalidAnswer("a Gemini part's text is not a string")
    call = part.get("functionCall")
    if call is not None and not (isinstance(call, dict) and isinstance(call.get("name"), str)):
        raise InvalidAnswer("a Gemini functionCall is not an object with a string name")
    if isinstance(call, dict) and call.get("args") is not None and not isinstance(call["args"], dict):
        raise InvalidAnswer("a Gemini functionCall's args is not an object")


def _call_id(completion_id: str, index: int, part: dict[str, Any] | None = None) -> str:
    """``call_<completion id>_<n>``, plus ``__thought__<signature>`` when Gemini signed the
    call (``thoughtSignature``, sent with function calls when the model thought). The chat
    format has no field for it, and clients echo tool call ids back verbatim, so the id
    carries it to the next turn, where ``chat_to_gemini`` puts it back on the call: Gemini
    keeps its thought context across a tool loop that way, and Gemini 3 models refuse a
    function call turn that comes back without its signature."""
    base = f"call_{completion_id.removeprefix('chatcmpl-')}_{index}"
    signature = part.get("thoughtSignature") if part is not None else None
    return f"{base}{SIGNATURE_SEPARATOR}{signature}" if isinstance(signature, str) and signature else base


def _arguments(call: dict[str, Any]) -> str:
    args = call.get("args")
    return orjson.dumps(args if isinstance(args, dict) else {}).decode()


def gemini_response_to_chat(doc: dict[str, Any], *, model: str, created: int, completion_id: str) -> dict[str, Any]:
    """Translate a non-streamed Gemini answer into a ``chat.completion`` object.

    Raises :class:`PromptBlocked` for a refused prompt, :class:`InvalidAnswer` for an
    answer with neither a candidate nor a block reason (the provider's fault, a 502).
    """
    if not isinstance(doc, dict):
        raise InvalidAnswer("the Gemini answer is not an object")
    _check_blocked(doc)
    if not isinstance(doc.get("candidates"), list) or not doc["candidates"]:
        raise InvalidAnswer("the Gemini answer has neither a candidate nor a block reason")
    parts, reason = _parts(doc)
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for part in parts:  # each checked by _parts
        call = part.get("functionCall")
        if isinstance(call, dict):
            tool_calls.append({
                "id": _call_id(completion_id, len(tool_calls), part),
                "type": "function",
                "function": {"name": call.get("name"), "arguments": _arguments(call)},
            })
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") is True else texts).append(part["text"])
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not tool_calls else None,
        "refusal": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    meta = doc.get("usageMetadata")
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(reason, called_tools=bool(tool_calls))}],
        "usage": chat_usage_from_gemini(from_gemini(meta), _thoughts(meta)),
    }


class GeminiToChatStream:
    """Translate a Gemini SSE stream (``streamGenerateContent?alt=sse``) into chat chunks.

    ``feed(data)`` takes each event's parsed JSON. The first event opens the answer
    (``role`` chunk); text parts become ``content`` deltas, thought parts
    ``reasoning_content`` deltas; each ``functionCall`` part becomes a tool call with
    its own index (parallel calls, whether in one event or several): a first delta with
    ``id``, ``name`` and ``arguments: ""``, then one delta with the whole arguments
    JSON. The event whose candidate has a ``finishReason`` ends it: a finish chunk, then
    (``include_usage``) the usage chunk. ``usageMetadata`` is read from every event that
    has it; the last one wins.

    Attributes the relay reads: ``finished``, ``failed`` (an ``error`` event),
    ``usage`` (normalised, so far) and ``output_text`` (every generated character,
    to count tokens when the stream breaks before usage arrives).
    """

    def __init__(self, *, model: str, created: int, include_usage: bool, chunk_id: str) -> None:
        self._model = model
        self._created = created
        self._include_usage = include_usage
        self._chunk_id = chunk_id
        self._tally = GeminiTally()
        self._thoughts = 0
        self._calls = 0
        self._output: list[str] = []
        self._started = False
        self.finished = False
        self.failed = False

    @property
    def usage(self) -> Usage | None:
        """The last ``usageMetadata`` and the grounding queries so far (:class:`GeminiTally`)."""
        return self._tally.usage

    @property
    def output_text(self) -> str:
        return "".join(self._output)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._chunk_id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def usage_chunk(self) -> dict[str, Any]:
        return {
            "id": self._chunk_id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [],
            "usage": chat_usage_from_gemini(self._tally.reported, self._thoughts),
        }

    def feed(self, data: Any) -> list[dict[str, Any]]:
        """One event in; the chunks to send now out. Raises :class:`PromptBlocked` when
        the first event says the prompt was refused, :class:`InvalidAnswer` for a candidate
        of the wrong shape (see :func:`_parts`). An event that is not an object is skipped."""
        if self.finished or self.failed or not isinstance(data, dict):
            return []
        if "error" in data:
            return self._on_error(data["error"])
        _check_blocked(data)
        parts, reason = _parts(data)  # checked first: an event the provider got wrong changes nothing
        out: list[dict[str, Any]] = []
        if not self._started:
            self._started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        self._tally.feed(data)
        meta = data.get("usageMetadata")
        if isinstance(meta, dict):
            self._thoughts = _thoughts(meta)
        for part in parts:
            out.extend(self._part(part))
        if reason is not None:
            self.finished = True
            out.append(self._chunk({}, finish_reason(reason, called_tools=self._calls > 0)))
            if self._include_usage:
                out.append(self.usage_chunk())
        return out

    def _part(self, part: dict[str, Any]) -> list[dict[str, Any]]:
        call = part.get("functionCall")
        if isinstance(call, dict):
            index = self._calls
            self._calls += 1
            name = got if isinstance(got := call.get("name"), str) else ""
            arguments = _arguments(call)
            self._output.extend((name, arguments))
            start = {"index": index, "id": _call_id(self._chunk_id, index, part), "type": "function",
                     "function": {"name": name, "arguments": ""}}
            return [self._chunk({"tool_calls": [start]}),
                    self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})]
        text = part.get("text")
        if not isinstance(text, str) or not text:
            return []
        self._output.append(text)
        return [self._chunk({"reasoning_content" if part.get("thought") is True else "content": text})]

    def _on_error(self, error: Any) -> list[dict[str, Any]]:
        self.failed = True
        error = error if isinstance(error, dict) else {}
        status = error.get("status")
        return [{"error": {
            "message": got if isinstance(got := error.get("message"), str) else "the upstream stream failed",
            "type": "api_error",
            "param": None,
            "code": status.lower() if isinstance(status, str) else None,
        }}]


def gemini_error_to_chat(status: int, body: bytes) -> dict[str, Any]:
    """A Gemini error body (``{"error": {"code", "message", "status", "details"}}``) in the
    chat envelope; the message is kept word for word, the gRPC status name becomes the
    ``code`` (``resource_exhausted``, ``invalid_argument`` ...). A body already in the
    chat envelope (a blocked prompt) is kept; a body that is not JSON becomes its text."""
    doc = provider_json_or_none(body)
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        doc = doc[0]  # the array form a non-SSE stream answers errors in
    error = doc.get("error") if isinstance(doc, dict) else None
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        if isinstance(error.get("type"), str) and "status" not in error:
            return {"error": {"param": None, "code": None, **error}}
        grpc = error.get("status")
        return {"error": {"message": error["message"], "type": kind, "param": None,
                          "code": grpc.lower() if isinstance(grpc, str) else None}}
    text = body.decode("utf-8", "replace").strip()[:500] if isinstance(body, bytes) else ""
    return {"error": {"message": text or f"upstream answered {status}", "type": kind, "param": None, "code": None}}


RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
# A google.protobuf.Duration in its JSON form: seconds with up to nine decimals, then "s".
_DURATION = re.compile(r"(\d{1,12})(\.\d{1,9})?s")


def retry_delay_s(body: bytes) -> float | None:
    """How long a Gemini error asks the caller to wait, in seconds, or None.

    Google does not send ``Retry-After``: a 429 (or 503) carries the hint in the body, as a
    ``google.rpc.RetryInfo`` entry of ``error.details``: ``{"@type":
    "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}``. Anything else
    (no such entry, a delay that is not a Duration string) is no hint.
    """
    doc = provider_json_or_none(body)
    if isinstance(doc, list) and doc:
        doc = doc[0]  # the array form a non-SSE stream answers errors in
    error = doc.get("error") if isinstance(doc, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == RETRY_INFO_TYPE:
            delay = detail.get("retryDelay")
            match = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
            if match:
                return float(match[0][:-1])
    return None
