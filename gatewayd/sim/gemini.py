"""Google Gemini (Generative Language API) on the wire:
``POST /v1beta/models/{model}:generateContent`` and
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``.

The model is in the URL, not the body, and so is streaming (the method name); the key
comes in ``x-goog-api-key`` (or ``?key=``). A stream is ``data: <GenerateContentResponse>``
events separated by ``\\r\\n\\r\\n`` with no event names and no terminal marker: the last
event's candidate carries ``finishReason`` and the whole ``usageMetadata``. Function
calls arrive whole (one event each), never in fragments, and carry no id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

from .behaviour import CONTENT, FINISH, HEAD, Plan, Prompt, Tool, count_input_tokens, max_tokens_of, pieces

STREAM_ERROR = b'data: {"error":{"code":500,"message":"simulated mid-stream error","status":"INTERNAL"}}\r\n\r\n'
INVALID_JSON = b'{"candidates": [ this is not json'
INVALID_STREAM = b"data: {this is not json\r\n\r\n"

FINISH_REASON = {"end_turn": "STOP", "stop_sequence": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS"}

#: HTTP status -> the gRPC status name Google's errors carry.
GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(status: int, message: str, *, retry_after_s: int | None = None) -> dict:
    """Google's error shape. A retry hint goes where Google puts it: not in a ``Retry-After``
    header but in ``details``, as a ``google.rpc.RetryInfo`` (with the ``QuotaFailure`` a
    real 429 names the exhausted quota in)."""
    error: dict = {"code": status, "message": message,
                   "status": GRPC_STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")}
    if retry_after_s is not None:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                 "quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after_s}s"},
        ]
    return {"error": error}


#: cap fields of the other protocols: unknown to Gemini's request message (a 400, not ignored)
_FOREIGN = ("max_tokens", "maxTokens", "max_completion_tokens", "maxCompletionTokens")
MAX_CANDIDATES = 8


def _unknown(name: str, where: str | None) -> str:
    at = f" at '{where}'" if where else ""
    return f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.'


def validate(body: dict) -> tuple[str, str | None] | None:
    generation = body.get("generationConfig")
    generation = generation if isinstance(generation, dict) else {}
    for name in _FOREIGN:
        if name in body:
            return _unknown(name, None), name
        if name in generation:
            return _unknown(name, "generation_config"), "generationConfig"
    count = generation.get("candidateCount")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_CANDIDATES):
        return f"* GenerateContentRequest.generation_config.candidate_count: must be from 1 to {MAX_CANDIDATES}", "generationConfig"
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified", "contents"
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list) or not content["parts"]:
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.", "contents"
        if content.get("role", "user") not in ("user", "model"):
            return f"* GenerateContentRequest.contents[{i}].role: Please use a valid role: user, model.", "contents"
        for part in content["parts"]:
            if isinstance(part, dict) and part.get("text") == "":
                return "Unable to submit request because it has an empty text parameter.", "contents"
    return None


def _texts(content: dict) -> str:
    return "\n".join(p["text"] for p in content.get("parts") or () if isinstance(p, dict) and isinstance(p.get("text"), str))


def _responses(content: dict) -> list[dict]:
    return [p["functionResponse"] for p in content.get("parts") or ()
            if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]


def _result_text(response: dict) -> str:
    value = response.get("response")
    if isinstance(value, dict) and isinstance(value.get("output"), str):
        return value["output"]
    return json.dumps(value, ensure_ascii=False)


def _lower_types(schema):
    """Gemini schemas name types in upper case; the planner reads JSON schema names."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _thinking(body: dict) -> tuple[bool, bool]:
    """(thinks, shows thoughts): a non-zero ``thinkingBudget`` (-1 is dynamic) thinks;
    ``includeThoughts`` shows the thought parts."""
    config = (body.get("generationConfig") or {}).get("thinkingConfig")
    if not isinstance(config, dict):
        return False, False
    budget = config.get("thinkingBudget")
    thinks = isinstance(budget, int) and not isinstance(budget, bool) and budget != 0
    return thinks, config.get("includeThoughts") is True


def extract(body: dict) -> Prompt:
    contents = body["contents"]
    user_text = ""
    for content in reversed(contents):
        if content.get("role", "user") == "user":
            user_text = _texts(content)
            if user_text:
                break
    last = contents[-1]
    results = _responses(last) if last.get("role", "user") == "user" else []
    tools = tuple(
        Tool(decl["name"], _lower_types(decl.get("parameters")))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict)
        for decl in tool.get("functionDeclarations") or ()
        if isinstance(decl, dict) and isinstance(decl.get("name"), str)
    )
    calling = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {})
    mode = calling.get("mode", "AUTO")
    mode = mode if isinstance(mode, str) else "AUTO"
    allowed = calling.get("allowedFunctionNames")
    forced = allowed[0] if mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1 else None
    generation = body.get("generationConfig") or {}
    stop = generation.get("stopSequences")
    searches = tuple(("web_search", None) for tool in body.get("tools") or ()
                     if isinstance(tool, dict) and ("googleSearch" in tool or "google_search" in tool))
    return Prompt(
        user_text=user_text,
        tool_result=_result_text(results[-1]) if results else None,
        ends_with_user=last.get("role", "user") == "user" and not results,
        tools=tools,
        tool_choice={"NONE": "none", "ANY": "required"}.get(mode, "auto"),
        forced_tool=forced if isinstance(forced, str) else None,
        max_tokens=max_tokens_of(generation, "maxOutputTokens", "max_output_tokens"),
        stop=tuple(s for s in stop or () if isinstance(s, str)),
        thinking=_thinking(body)[0],
        input_tokens=count_input_tokens(body, "gemini"),
        choices=generation.get("candidateCount") or 1,
        server_tools=searches[:1],
    )


def response_id(n: int) -> str:
    return f"gemsim-{n}"


def usage(plan: Plan) -> dict:
    prompt = plan.prompt_tokens
    meta = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": plan.all_output_tokens - plan.all_thinking_tokens,
        "totalTokenCount": prompt + plan.all_output_tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if plan.thinking_tokens:
        meta["thoughtsTokenCount"] = plan.all_thinking_tokens
    if plan.cache_read:
        meta["cachedContentTokenCount"] = plan.cache_read
    return meta


def _prompt_usage(plan: Plan) -> dict:
    meta = {"promptTokenCount": plan.prompt_tokens, "totalTokenCount": plan.prompt_tokens}
    if plan.cache_read:
        meta["cachedContentTokenCount"] = plan.cache_read
    return meta


def _blocked(plan: Plan, body: dict, n: int) -> dict:
    doc = {
        "promptFeedback": {
            "blockReason": plan.blocked,
            "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}],
        },
        "usageMetadata": _prompt_usage(plan),
        "modelVersion": body["model"],
        "responseId": response_id(n),
    }
    if plan.faults.no_usage:
        del doc["usageMetadata"]
    return doc


def _call_part(call, plan: Plan) -> dict:
    """When the model thought, its first function call carries the thought signature (as
    Gemini signs the first call of a turn)."""
    part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.input}}
    if plan.thinking and call.index == 0:
        part["thoughtSignature"] = plan.signature
    return part


def grounding(plan: Plan) -> dict | None:
    """``groundingMetadata`` when Google Search ran: one ``webSearchQueries`` entry per search."""
    if not plan.server_calls:
        return None
    return {
        "webSearchQueries": [call.query for call in plan.server_calls],
        "searchEntryPoint": {"renderedContent": "<div>simulated search</div>"},
        "groundingChunks": [{"web": {"uri": f"https://example.com/sim/{c.index}", "title": f"sim result {c.index}"}}
                            for c in plan.server_calls],
    }


def render(plan: Plan, body: dict, n: int) -> dict:
    if plan.blocked:
        return _blocked(plan, body, n)
    parts: list[dict] = []
    if plan.thinking and _thinking(body)[1]:
        parts.append({"text": plan.thinking, "thought": True})
    if plan.text:
        parts.append({"text": plan.text})
    parts.extend(_call_part(call, plan) for call in plan.tool_calls)
    content: dict = {"role": "model"}
    if parts:
        content["parts"] = parts
    candidates = []
    for index in range(plan.choices):
        candidate = {"content": content, "finishReason": FINISH_REASON[plan.stop], "index": index}
        if (found := grounding(plan)) is not None:
            candidate["groundingMetadata"] = found
        candidates.append(candidate)
    reply = {
        "candidates": candidates,
        "usageMetadata": usage(plan),
        "modelVersion": body["model"],
        "responseId": response_id(n),
    }
    if plan.faults.no_usage:
        del reply["usageMetadata"]
    return reply


def _event(doc: dict) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\r\n\r\n"


def events(plan: Plan, body: dict, n: int) -> Iterator[tuple[bytes, int]]:
    """One event per word of thought and text, one per function call, then the closing
    event (an empty text part, ``finishReason`` and the whole ``usageMetadata``). Events
    before it carry only the prompt's counts, as Google's do."""
    if plan.blocked:
        yield _event(_blocked(plan, body, n)), HEAD
        return
    common = {"modelVersion": body["model"], "responseId": response_id(n)}
    partial = {} if plan.faults.no_usage else {"usageMetadata": _prompt_usage(plan)}

    def chunk(part: dict, index: int) -> bytes:
        return _event({"candidates": [{"content": {"parts": [part], "role": "model"}, "index": index}],
                       **partial, **common})

    for index in range(plan.choices):  # each candidate in turn
        if plan.thinking and _thinking(body)[1]:
            for piece in pieces(plan.thinking):
                yield chunk({"text": piece, "thought": True}, index), CONTENT
        for piece in pieces(plan.text):
            yield chunk({"text": piece}, index), CONTENT
        for call in plan.tool_calls:
            yield chunk(_call_part(call, plan), index), CONTENT
    closing_candidates = []
    for index in range(plan.choices):
        candidate = {"content": {"parts": [{"text": ""}], "role": "model"},
                     "finishReason": FINISH_REASON[plan.stop], "index": index}
        if (found := grounding(plan)) is not None:
            candidate["groundingMetadata"] = found
        closing_candidates.append(candidate)
    closing: dict = {"candidates": closing_candidates}
    if not plan.faults.no_usage:
        closing["usageMetadata"] = usage(plan)
    yield _event({**closing, **common}), FINISH


def stream_error(sent: int) -> bytes:
    return STREAM_ERROR
