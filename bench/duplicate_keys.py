"""The cost of refusing duplicate JSON keys (in any object, at any depth), beside the parse it follows.

``gatewayd.formats.raw_json.duplicate_key`` runs on every API body after
orjson's parse. This times both on ~600 KB chat and responses bodies written two ways: as
the OpenAI / Anthropic SDKs and httpx write them (compact, no needless escapes: the fast
path, one re-encoding compared with the bytes) and as ``json.dumps`` writes them by default
(spaces, ``\\uXXXX`` escapes: the standard library's C parser counts the pairs).

    .venv/bin/python bench/duplicate_keys.py
"""

from __future__ import annotations

import json
import random
import time

import orjson

from gatewayd.formats.raw_json import duplicate_key

WORDS = ["hello", "world", "résumé", "naïve", "日本語", "code", "def", "return", "\n", '"quoted"', "tab\t",
         '{"a": 1}']


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def bodies() -> dict[str, dict]:
    rng = random.Random(1)
    chat = {"model": "gpt-4.1-mini", "temperature": 0.2, "stream": True, "max_tokens": 1000,
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": text(rng, 800)}
                         for i in range(100)],
            "tools": [{"type": "function", "function": {"name": f"t{i}", "description": text(rng, 20),
                                                        "parameters": {"type": "object", "properties": {
                                                            f"p{j}": {"type": "string", "description": text(rng, 5)}
                                                            for j in range(10)}}}} for i in range(30)]}
    responses = {"model": "gpt-5", "instructions": text(rng, 300), "text": {"verbosity": "low"},
                 "reasoning": {"effort": "medium"}, "stream": True, "store": False,
                 "input": [{"type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": text(rng, 800)}]} for _ in range(100)]}
    return {"chat": chat, "responses": responses}


def best_ms(fn, rounds: int = 40) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    for name, body in bodies().items():
        for style, raw in (("sdk", json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()),
                           ("json.dumps", json.dumps(body).encode())):
            parsed = orjson.loads(raw)
            assert duplicate_key(raw, parsed) is None
            parse = best_ms(lambda: orjson.loads(raw))
            check = best_ms(lambda: duplicate_key(raw, parsed))
            print(f"{name:9} {style:10} {len(raw) / 1000:6.0f} KB  orjson.loads {parse:6.3f} ms  "
                  f"duplicate check {check:6.3f} ms ({check / parse:4.0%} of the parse)")


if __name__ == "__main__":
    main()
