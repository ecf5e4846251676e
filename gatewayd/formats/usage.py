"""Usage normalisation: every upstream format's token counts in one shape.

``input_tokens`` is the whole prompt, chat-format style: it includes the cached
reads and the cache writes. The messages format reports those three apart; it is
summed here, so billing has one rule: uncached input = input - cached - cache_write.
"""

from __future__ import annotations

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


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def from_chat(usage: dict | None) -> Usage | None:
    """``usage`` of a chat completion or its final chunk."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(details.get("cached_tokens")) if isinstance(details, dict) else 0,
    )


def from_responses(usage: dict | None) -> Usage | None:
    """``usage`` of a responses-format response object."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details") or {}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cached_tokens=_int(details.get("cached_tokens")) if isinstance(details, dict) else 0,
    )


def from_messages(usage: dict | None) -> Usage | None:
    """``usage`` of a message, of ``message_start.message`` or of ``message_delta``."""
    if not isinstance(usage, dict):
        return None
    read = _int(usage.get("cache_read_input_tokens"))
    write = _int(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_int(usage.get("input_tokens")) + read + write,
        output_tokens=_int(usage.get("output_tokens")),
        cached_tokens=read,
        cache_write_tokens=write,
    )


def from_gemini(usage: dict | None) -> Usage | None:
    """``usageMetadata`` of a Gemini answer (or of the last stream chunk that carried it).

    ``promptTokenCount`` already includes ``cachedContentTokenCount`` (the cached part is
    billed at the cached rate); ``toolUsePromptTokenCount`` (results of Google's built-in
    tools fed back in) is prompt too. Thoughts (``thoughtsTokenCount``) are billed as
    output, like reasoning tokens, on top of ``candidatesTokenCount``.
    """
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount")),
        output_tokens=_int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
        cached_tokens=_int(usage.get("cachedContentTokenCount")),
    )


def merge_messages_stream(start: Usage | None, delta: dict | None) -> Usage | None:
    """A messages stream reports input in ``message_start`` and output (cumulative) in
    ``message_delta``; a later ``message_delta`` may also restate the input counts."""
    if delta is None:
        return start
    latest = from_messages(delta)
    if start is None:
        return latest
    has_input = any(k in delta for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    if has_input and latest.input_tokens:
        return latest
    return attrs.evolve(start, output_tokens=latest.output_tokens)
