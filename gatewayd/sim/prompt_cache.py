"""A prompt cache like the providers': a request whose leading turns repeat an earlier
request's reads them from the cache.

Off by default (the simulator's usage is otherwise a pure function of the request);
turned on per simulator with ``PUT /_sim/settings {"prompt_cache": true}``. Each
simulator keeps its own cache, as each provider (or deployment) does, which is what
makes conversation stickiness measurable: a conversation that moves to another
simulator starts cold there.

Two kinds, as the providers have them:

- OpenAI, Gemini, Converse (:meth:`PromptCache.cached_tokens`): automatic. No minimum
  prefix length (real providers want about 1024 tokens); the cached part is the longest
  run of leading turns seen before, together with the system prompt (or instructions, or
  Gemini's ``systemInstruction``) and tools.
- Anthropic Messages (:meth:`PromptCache.anthropic`; Bedrock InvokeModel and Vertex too):
  only what ``cache_control`` breakpoints mark. The prefix (tools, then system, then the
  messages' blocks) up to a breakpoint is written (billed as a cache write) when it is at
  least :data:`MIN_CACHEABLE_TOKENS` long; a later request reads the longest written prefix
  it finds looking back at most :data:`LOOKBACK_BLOCKS` blocks from one of its breakpoints.
  A request without breakpoints reads and writes nothing, however often it repeats; more
  than :data:`MAX_CACHE_BREAKPOINTS` is refused (:func:`count_breakpoints`).
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any, Callable

import orjson

from .behaviour import count_input_tokens

_TURNS = {"chat": "messages", "messages": "messages", "responses": "input", "gemini": "contents",
          "converse": "messages"}


#: Anthropic: at most this many ``cache_control`` breakpoints a request (a 5th is a 400).
MAX_CACHE_BREAKPOINTS = 4
#: Anthropic: a marked prefix shorter than this is not cached (most models' minimum).
MIN_CACHEABLE_TOKENS = 1024
#: Anthropic: how many blocks before a breakpoint are checked for an earlier cache entry.
LOOKBACK_BLOCKS = 20


def _marked(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("cache_control"), dict)


def count_breakpoints(body: dict) -> int:
    """The ``cache_control`` breakpoints of a messages body (tools, system blocks, content
    blocks, and the blocks inside tool results)."""
    found = sum(1 for tool in body.get("tools") or () if _marked(tool))
    system = body.get("system")
    found += sum(1 for block in system if _marked(block)) if isinstance(system, list) else 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            found += _marked(block)
            inner = block.get("content") if isinstance(block, dict) else None
            found += sum(1 for b in inner if _marked(b)) if isinstance(inner, list) else 0
    return found


def _unmarked(block: Any) -> Any:
    """A block as the cache sees it: a breakpoint is where a prefix ends, not part of it."""
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


class _Blocks:
    """A messages body as Anthropic caches it: tools, then system, then each message's
    blocks, in order; a running digest of the prefix ending at each block, and which blocks
    are breakpoints (and their TTL)."""

    def __init__(self, body: dict) -> None:
        self.body = body
        self.places: list[tuple[str, int, int]] = []  # (where, index, block index or -1 for a string)
        self.digests: list[bytes] = []
        self.breakpoints: list[tuple[int, str]] = []  # (position, ttl)
        digest = hashlib.blake2b(b"anthropic")
        tools = body.get("tools") or []
        system = body.get("system")
        entries: list[tuple[str, int, int, Any]] = [("tools", k, -1, tool) for k, tool in enumerate(tools)]
        if isinstance(system, list):
            entries += [("system", k, k, block) for k, block in enumerate(system)]
        elif system:  # a string is one text block to the cache
            entries.append(("system", 0, -1, {"type": "text", "text": system}))
        for i, message in enumerate(body.get("messages") or []):
            content = message.get("content")
            if isinstance(content, list):
                entries += [("messages", i, j, block) for j, block in enumerate(content)]
            else:
                entries.append(("messages", i, -1, {"type": "text", "text": content}))
        for where, index, at, block in entries:
            role = self.body["messages"][index].get("role") if where == "messages" else where
            digest.update(orjson.dumps([role, index, _unmarked(block)]))
            self.digests.append(digest.copy().digest())
            self.places.append((where, index, at))
            if _marked(block):
                ttl = block["cache_control"].get("ttl")
                self.breakpoints.append((len(self.digests) - 1, ttl if isinstance(ttl, str) else "5m"))

    def tokens(self, position: int) -> int:
        """The simulator's token count of the prefix ending at ``position`` (inclusive)."""
        where, index, at = self.places[position]
        body = self.body
        prefix: dict[str, Any] = {}
        if where == "tools":
            prefix["tools"] = body["tools"][:index + 1]
        else:
            if body.get("tools"):
                prefix["tools"] = body["tools"]
            system: Any = body.get("system")
            if where == "system":
                prefix["system"] = system[:at + 1] if at >= 0 else system
            else:
                if system:
                    prefix["system"] = system
                message = body["messages"][index]
                last = {**message, "content": message["content"][:at + 1]} if at >= 0 else message
                prefix["messages"] = [*body["messages"][:index], last]
        return count_input_tokens(prefix, "messages")


class PromptCache:
    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._anthropic: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def anthropic(self, body: dict) -> tuple[int, int, bool]:
        """(tokens read, tokens written, written with the 1-hour TTL) for a messages body,
        by its ``cache_control`` breakpoints (module docstring); remembers what it wrote."""
        blocks = _Blocks(body)
        if not blocks.breakpoints:
            return 0, 0, False
        hit = -1
        for point, _ in blocks.breakpoints:
            for position in range(point, max(-1, point - LOOKBACK_BLOCKS), -1):
                if blocks.digests[position] in self._anthropic:
                    self._anthropic.move_to_end(blocks.digests[position])
                    hit = max(hit, position)
                    break
        read = blocks.tokens(hit) if hit >= 0 else 0
        last, ttl = blocks.breakpoints[-1]
        written = 0
        if last > hit:
            for point, _ in blocks.breakpoints:
                if point > hit and blocks.tokens(point) >= MIN_CACHEABLE_TOKENS:
                    self._anthropic[blocks.digests[point]] = None
                    written = blocks.tokens(last) - read
            while len(self._anthropic) > self.limit:
                self._anthropic.popitem(last=False)
        return read, written, ttl == "1h"

    def cached_tokens(self, body: dict, protocol: str, count: Callable[[dict], int] | None = None) -> int:
        """The prompt tokens this request reads from the cache; remembers its prefixes.
        ``count`` counts a body's tokens when :func:`count_input_tokens` does not know the
        protocol (Bedrock's Converse)."""
        field = _TURNS[protocol]
        turns = body.get(field)
        if isinstance(turns, str):
            turns = [{"role": "user", "content": turns}]
        if not isinstance(turns, list) or not turns:
            return 0
        head = [body.get(k) for k in ("system", "instructions", "systemInstruction", "tools", "toolConfig")]
        digest = hashlib.blake2b(orjson.dumps(head))
        found = 0
        for k, turn in enumerate(turns, 1):
            digest.update(orjson.dumps(turn))
            key = digest.copy().digest()
            if key in self._seen:
                found = k
                self._seen.move_to_end(key)
            else:
                self._seen[key] = None
        while len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        if not found:
            return 0
        prefix = {**body, field: turns[:found]}
        return count(prefix) if count is not None else count_input_tokens(prefix, protocol)
