"""Usage normalisation: what every upstream format says it billed, in one shape.

``input_tokens`` is the whole prompt, chat-format style: it includes the cached
reads and the cache writes. The messages format reports those three apart; it is
summed here, so billing has one rule: uncached input = input - cached - cache_write.

One reader per wire format (``from_chat_completion``, ``from_response``,
``from_messages``, ``from_gemini_answer``) and one tally per stream format
(:class:`ResponsesTally`, :class:`MessagesTally`, :class:`GeminiTally`); the pipes and the
providers' ``finish`` callbacks call only these. The documents are the provider's and are
read field by field with a type check: a count that is not a non-negative integer is 0,
a part (cached, audio, reasoning ...) never exceeds its total, nothing raises.
docs/billing.md ("What the charge reads from each provider") lists the fields read.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Usage:
    """What a provider billed one request for, in one shape for every protocol.

    The four token counts are nested as the chat format nests them: ``input_tokens`` is the
    whole prompt (cache reads and writes included), ``output_tokens`` all generated tokens
    (hidden reasoning included). The ``*_tokens`` fields after them are *parts* of those
    totals that a provider prices apart (1-hour cache writes of ``cache_write_tokens``, audio
    of input or output, generated images of output), or say what they were
    (``reasoning_tokens``). ``tool_calls`` counts the provider's own billed tool uses by the
    catalogue's ``tool_prices`` names (``web_search``, ``file_search``, ``code_interpreter``,
    ``web_fetch`` ...), as ``(name, count)`` pairs sorted by name; ``service_tier`` is the
    tier the provider says it served at (None: the default tier).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # of cache_write_tokens: written with a 1-hour TTL
    reasoning_tokens: int = 0  # of output_tokens: hidden reasoning / thinking
    audio_input_tokens: int = 0  # of input_tokens
    audio_output_tokens: int = 0  # of output_tokens
    image_output_tokens: int = 0  # of output_tokens
    tool_calls: tuple[tuple[str, int], ...] = ()
    service_tier: str | None = None

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_tokens - self.cache_write_tokens)

    def tool_count(self, name: str) -> int:
        for tool, count in self.tool_calls:
            if tool == name:
                return count
        return 0


def tool_calls(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """``Usage.tool_calls`` from a dict: positive counts only, sorted by name."""
    return tuple(sorted((name, n) for name, n in counts.items() if n > 0))


TIER_MAX_CHARS = 64  # a service tier longer than this is no tier name: read as the default


def _int(value: Any) -> int:
    """A token or call count: a positive int, anything else (bool, float, str, negative) 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def tier_of(value: Any) -> str | None:
    """A reported ``service_tier``: a short non-empty string, else None (the default tier)."""
    if isinstance(value, str) and 0 < len(value) <= TIER_MAX_CHARS:
        return value
    return None


def _part(value: Any, total: int) -> int:
    return min(_int(value), total)


def from_chat(usage: dict[str, Any] | None, service_tier: Any = None) -> Usage | None:
    """``usage`` of a chat completion or of its final chunk (also of an embeddings answer).

    ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens`` and ``.audio_tokens``;
    ``completion_tokens`` includes ``completion_tokens_details.reasoning_tokens`` and
    ``.audio_tokens`` (openai-python's ``CompletionUsage``)."""
    if not isinstance(usage, dict):
        return None
    prompt = _dict(usage.get("prompt_tokens_details"))
    completion = _dict(usage.get("completion_tokens_details"))
    input_tokens = _int(usage.get("prompt_tokens"))
    output_tokens = _int(usage.get("completion_tokens"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=_part(prompt.get("cached_tokens"), input_tokens),
        audio_input_tokens=_part(prompt.get("audio_tokens"), input_tokens),
        reasoning_tokens=_part(completion.get("reasoning_tokens"), output_tokens),
        audio_output_tokens=_part(completion.get("audio_tokens"), output_tokens),
        service_tier=tier_of(service_tier),
    )


def from_chat_completion(doc: Any) -> Usage | None:
    """A chat completion (or a chunk): its ``usage`` and its top-level ``service_tier``."""
    doc = _dict(doc)
    return from_chat(doc.get("usage"), doc.get("service_tier"))


# --- Responses -------------------------------------------------------------------------------

# output item type -> the catalogue's tool_prices name (code_interpreter is per container)
RESPONSES_TOOL_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
}


class ResponsesTally:
    """Billed tool uses among Responses output items: one call per ``web_search_call``,
    ``file_search_call`` and ``image_generation_call`` item, one ``code_interpreter`` per
    distinct ``container_id`` (OpenAI bills code interpreter per container; items that name
    no container count as one more container between them)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.containers: set[str] = set()
        self.unnamed_container = False

    def add(self, item: Any) -> None:
        item = _dict(item)
        kind = item.get("type")
        name = RESPONSES_TOOL_ITEMS.get(kind) if isinstance(kind, str) else None
        if name is None:
            return
        if name == "code_interpreter":
            container = item.get("container_id")
            if isinstance(container, str) and container:
                self.containers.add(container)
            else:
                self.unnamed_container = True
            return
        self.counts[name] = self.counts.get(name, 0) + 1

    def add_all(self, output: Any) -> "ResponsesTally":
        for item in _list(output):
            self.add(item)
        return self

    def as_dict(self) -> dict[str, int]:
        counts = dict(self.counts)
        containers = len(self.containers) + (1 if self.unnamed_container else 0)
        if containers:
            counts["code_interpreter"] = containers
        return counts


def response_tool_calls(output: Any) -> tuple[tuple[str, int], ...]:
    """``Usage.tool_calls`` of a Responses ``output`` list."""
    return tool_calls(ResponsesTally().add_all(output).as_dict())


def from_responses(usage: dict[str, Any] | None) -> Usage | None:
    """``usage`` of a Responses object alone (openai-python's ``ResponseUsage``): tokens only.
    :func:`from_response` reads the whole response, tool calls and tier included."""
    if not isinstance(usage, dict):
        return None
    details = _dict(usage.get("input_tokens_details"))
    out_details = _dict(usage.get("output_tokens_details"))
    input_tokens = _int(usage.get("input_tokens"))
    output_tokens = _int(usage.get("output_tokens"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=_part(details.get("cached_tokens"), input_tokens),
        reasoning_tokens=_part(out_details.get("reasoning_tokens"), output_tokens),
    )


def from_response(response: Any) -> Usage | None:
    """A whole Responses object: ``usage``, ``service_tier`` and the billed tool calls among
    its ``output`` items. None when it carries no ``usage`` (see :func:`response_tool_calls`
    for what it did call all the same)."""
    response = _dict(response)
    usage = from_responses(response.get("usage"))
    if usage is None:
        return None
    return attrs.evolve(usage, tool_calls=response_tool_calls(response.get("output")),
                        service_tier=tier_of(response.get("service_tier")))


def max_tool_calls(*calls: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """Per tool, the largest count among several reports of the same calls (a stream's
    items counted as they passed, and the final response that lists them again)."""
    merged: dict[str, int] = {}
    for pairs in calls:
        for name, count in pairs:
            merged[name] = max(merged.get(name, 0), count)
    return tool_calls(merged)


# --- Messages (Anthropic) --------------------------------------------------------------------

# server_tool_use block name -> the catalogue's tool_prices name (code execution: per container)
MESSAGES_SERVER_TOOLS = {
    "web_search": "web_search",
    "web_fetch": "web_fetch",
    "code_execution": "code_interpreter",
    "bash_code_execution": "code_interpreter",
    "text_editor_code_execution": "code_interpreter",
}
# usage.server_tool_use fields -> tool_prices name
MESSAGES_SERVER_TOOL_FIELDS = {"web_search_requests": "web_search", "web_fetch_requests": "web_fetch"}


def from_messages(usage: dict[str, Any] | None) -> Usage | None:
    """``usage`` of a message, of ``message_start.message`` or of ``message_delta``
    (anthropic-sdk-python's ``Usage`` / ``MessageDeltaUsage``).

    ``cache_creation.ephemeral_1h_input_tokens`` are the 1-hour writes among the cache
    writes; the writes are the larger of ``cache_creation_input_tokens`` and the sum of the
    breakdown. ``server_tool_use.web_search_requests`` / ``.web_fetch_requests`` are the
    billed server tool calls (code execution containers: :class:`MessagesTally`)."""
    if not isinstance(usage, dict):
        return None
    read = _int(usage.get("cache_read_input_tokens"))
    creation = _dict(usage.get("cache_creation"))
    write_1h = _int(creation.get("ephemeral_1h_input_tokens"))
    write_5m = _int(creation.get("ephemeral_5m_input_tokens"))
    write = max(_int(usage.get("cache_creation_input_tokens")), write_5m + write_1h)
    output_tokens = _int(usage.get("output_tokens"))
    thinking = _dict(usage.get("output_tokens_details")).get("thinking_tokens")
    server = _dict(usage.get("server_tool_use"))
    calls = {name: _int(server.get(field)) for field, name in MESSAGES_SERVER_TOOL_FIELDS.items()}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")) + read + write,
        output_tokens=output_tokens,
        cached_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        reasoning_tokens=_part(thinking, output_tokens),
        tool_calls=tool_calls(calls),
        service_tier=tier_of(usage.get("service_tier")),
    )


def _larger(a: Usage, b: Usage) -> Usage:
    """Field by field the larger of two reports of the same request's cumulative usage (the
    input as the messages format reports it: uncached, cache reads and cache writes apart;
    tier: the later one's when it names one)."""
    cached = max(a.cached_tokens, b.cached_tokens)
    written = max(a.cache_write_tokens, b.cache_write_tokens)
    return Usage(
        input_tokens=max(a.uncached_input_tokens, b.uncached_input_tokens) + cached + written,
        output_tokens=max(a.output_tokens, b.output_tokens),
        cached_tokens=cached,
        cache_write_tokens=written,
        cache_write_1h_tokens=max(a.cache_write_1h_tokens, b.cache_write_1h_tokens),
        reasoning_tokens=max(a.reasoning_tokens, b.reasoning_tokens),
        audio_input_tokens=max(a.audio_input_tokens, b.audio_input_tokens),
        audio_output_tokens=max(a.audio_output_tokens, b.audio_output_tokens),
        image_output_tokens=max(a.image_output_tokens, b.image_output_tokens),
        tool_calls=max_tool_calls(a.tool_calls, b.tool_calls),
        service_tier=b.service_tier or a.service_tier,
    )


def merge_messages_stream(start: Usage | None, delta: dict[str, Any] | None) -> Usage | None:
    """A messages stream reports input in ``message_start`` and the cumulative counts in each
    ``message_delta`` (which may restate input, cache and server tool counts): field by field
    the larger of the two, as every count is cumulative."""
    latest = from_messages(delta)
    if latest is None:
        return start
    return latest if start is None else _larger(start, latest)


def server_tool_name(block: Any) -> str | None:
    """The tool_prices name of a ``server_tool_use`` content block, or None."""
    block = _dict(block)
    if block.get("type") != "server_tool_use":
        return None
    name = block.get("name")
    return MESSAGES_SERVER_TOOLS.get(name) if isinstance(name, str) else None


class MessagesTally:
    """A messages stream's usage: ``message_start``'s usage, each ``message_delta``'s
    (cumulative) usage and ``delta.container``, and the ``server_tool_use`` blocks as they
    start, so a stream cut before its last ``message_delta`` still knows the searches it
    made. Once the stream completed, the provider's ``server_tool_use`` counts stand when it
    sent them (a failed search is not billed); otherwise the blocks counted."""

    def __init__(self) -> None:
        self.reported: Usage | None = None
        self.tools_reported = False
        self.blocks: dict[str, int] = {}
        self.containers: set[str] = set()

    def start(self, data: Any) -> None:
        message = _dict(_dict(data).get("message"))
        usage = message.get("usage")
        self._report(usage, message.get("container"))

    def delta(self, data: Any) -> None:
        data = _dict(data)
        usage = data.get("usage")
        self._report(usage, _dict(data.get("delta")).get("container"))
        # message_delta's output count is cumulative and final, and may be lower than
        # message_start's placeholder (output_tokens 1 before anything was generated)
        if self.reported is not None and "output_tokens" in _dict(usage):
            self.reported = attrs.evolve(self.reported, output_tokens=_int(_dict(usage).get("output_tokens")))

    def _report(self, usage: Any, container: Any) -> None:
        container_id = _dict(container).get("id")
        if isinstance(container_id, str):
            self.containers.add(container_id)
        latest = from_messages(usage)
        if latest is None:
            return
        if isinstance(_dict(usage).get("server_tool_use"), dict):
            self.tools_reported = True
        self.reported = latest if self.reported is None else _larger(self.reported, latest)

    def block_start(self, data: Any) -> None:
        name = server_tool_name(_dict(data).get("content_block"))
        if name is not None:
            self.blocks[name] = self.blocks.get(name, 0) + 1

    def feed(self, event: str | None, data: Any) -> None:
        """Any event of the stream (by its SSE event name or its ``type``)."""
        kind = event or _dict(data).get("type")
        if kind == "message_start":
            self.start(data)
        elif kind == "message_delta":
            self.delta(data)
        elif kind == "content_block_start":
            self.block_start(data)

    def usage(self, complete: bool) -> Usage | None:
        """None until the provider reported usage or a billed tool was seen."""
        counted = dict(self.blocks)
        counted.pop("code_interpreter", None)  # billed per container, not per block
        if self.containers or self.blocks.get("code_interpreter"):
            counted["code_interpreter"] = max(1, len(self.containers))
        reported = self.reported.tool_calls if self.reported is not None else ()
        if complete and self.tools_reported:
            calls = max_tool_calls(reported, tool_calls({k: v for k, v in counted.items()
                                                         if k == "code_interpreter"}))
        else:
            calls = max_tool_calls(reported, tool_calls(counted))
        if self.reported is None:
            return Usage(tool_calls=calls) if calls else None
        return attrs.evolve(self.reported, tool_calls=calls)


def message_tally(message: Any) -> MessagesTally:
    """A whole messages-format reply read as :class:`MessagesTally` reads a completed
    stream: its ``usage``, its ``container`` and its ``server_tool_use`` blocks."""
    message = _dict(message)
    tally = MessagesTally()
    tally.start({"message": message})
    for block in _list(message.get("content")):
        tally.block_start({"content_block": block})
    return tally


def from_message(message: Any) -> Usage | None:
    """A whole messages-format reply's usage; None when it carries no ``usage``."""
    tally = message_tally(message)
    return tally.usage(complete=True) if tally.reported is not None else None


# --- Gemini ----------------------------------------------------------------------------------


def _modality_tokens(details: Any, modality: str) -> int:
    return sum(_int(entry.get("tokenCount")) for entry in _list(details)
               if isinstance(entry, dict) and entry.get("modality") == modality)


def from_gemini(usage: dict[str, Any] | None) -> Usage | None:
    """``usageMetadata`` of a Gemini answer (or of the last stream chunk that carried it;
    google-genai's ``GenerateContentResponseUsageMetadata``).

    ``promptTokenCount`` already includes ``cachedContentTokenCount`` (the cached part is
    billed at the cached rate); ``toolUsePromptTokenCount`` (results of Google's built-in
    tools fed back in) is prompt too. Thoughts (``thoughtsTokenCount``) are billed as
    output, like reasoning tokens, on top of ``candidatesTokenCount``. The AUDIO entries of
    ``promptTokensDetails`` are audio input; the AUDIO and IMAGE entries of
    ``candidatesTokensDetails`` are audio and image output.
    """
    if not isinstance(usage, dict):
        return None
    input_tokens = _int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount"))
    thoughts = _int(usage.get("thoughtsTokenCount"))
    output_tokens = _int(usage.get("candidatesTokenCount")) + thoughts
    audio_out = min(_modality_tokens(usage.get("candidatesTokensDetails"), "AUDIO"), output_tokens)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=_part(usage.get("cachedContentTokenCount"), input_tokens),
        reasoning_tokens=thoughts,
        audio_input_tokens=min(_modality_tokens(usage.get("promptTokensDetails"), "AUDIO"), input_tokens),
        audio_output_tokens=audio_out,
        image_output_tokens=min(_modality_tokens(usage.get("candidatesTokensDetails"), "IMAGE"),
                                output_tokens - audio_out),
    )


def gemini_search_queries(doc: Any) -> dict[int, int]:
    """Per candidate index, how many Google Search queries grounded it
    (``candidates[].groundingMetadata.webSearchQueries``)."""
    found: dict[int, int] = {}
    for position, candidate in enumerate(_list(_dict(doc).get("candidates"))):
        candidate = _dict(candidate)
        queries = _list(_dict(candidate.get("groundingMetadata")).get("webSearchQueries"))
        count = sum(1 for q in queries if isinstance(q, str))
        if count:
            index = candidate.get("index")
            key = index if isinstance(index, int) and not isinstance(index, bool) else position
            found[key] = max(found.get(key, 0), count)
    return found


class GeminiTally:
    """A Gemini answer's usage, whole or streamed: the last ``usageMetadata`` seen, and per
    candidate the most grounding queries any event listed for it (a stream may repeat the
    grounding metadata, or send it once at the end). Grounding queries are billed as
    ``web_search`` calls, one per query."""

    def __init__(self) -> None:
        self.reported: Usage | None = None
        self.queries: dict[int, int] = {}

    def feed(self, doc: Any) -> None:
        doc = _dict(doc)
        meta = doc.get("usageMetadata")
        if isinstance(meta, dict):
            self.reported = from_gemini(meta)
        for index, count in gemini_search_queries(doc).items():
            self.queries[index] = max(self.queries.get(index, 0), count)

    @property
    def tool_calls(self) -> tuple[tuple[str, int], ...]:
        return tool_calls({"web_search": sum(self.queries.values())})

    @property
    def usage(self) -> Usage | None:
        """None until the provider reported usage or grounded an answer."""
        calls = self.tool_calls
        if self.reported is None:
            return Usage(tool_calls=calls) if calls else None
        return attrs.evolve(self.reported, tool_calls=calls)


def from_gemini_answer(doc: Any) -> Usage | None:
    """A whole Gemini answer: ``usageMetadata`` and its grounding queries; None without
    usage metadata."""
    tally = GeminiTally()
    tally.feed(doc)
    return tally.usage if tally.reported is not None else None
