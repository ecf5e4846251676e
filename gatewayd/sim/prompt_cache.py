"""A prompt cache like the providers': a request whose leading turns repeat an earlier
request's reads them from the cache.

Off by default (the simulator's usage is otherwise a pure function of the request);
turned on per simulator with ``PUT /_sim/settings {"prompt_cache": true}``. Each
simulator keeps its own cache, as each provider (or deployment) does, which is what
makes conversation stickiness measurable: a conversation that moves to another
simulator starts cold there. No minimum prefix length (real providers want about 1024
tokens); the cached part is the longest run of leading turns seen before, together
with the system prompt (or instructions, or Gemini's ``systemInstruction``) and tools.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Callable

import orjson

from .behaviour import count_input_tokens

_TURNS = {"chat": "messages", "messages": "messages", "responses": "input", "gemini": "contents",
          "converse": "messages"}


class PromptCache:
    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()

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
