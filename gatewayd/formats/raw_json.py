"""Change one top-level string field of a JSON object in place, in its bytes.

A pass-through route maps the model id (catalogue id -> provider id) and must change
nothing else: re-encoding the body would reorder nothing but could still change bytes
(``2.50`` -> ``2.5``, ``\\u00e9`` -> ``é``, spacing), and a provider that signs or caches
by prefix, or a test that checks byte equality, would see a different request. So the
value is found by a small scanner over the bytes and only that span is replaced.

Sans-I/O, pure. The body has already been parsed once (orjson) by the caller, so it is
known to be valid JSON; the scanner only needs to track strings and nesting depth.
"""

from __future__ import annotations

import orjson

_WHITESPACE = b" \t\r\n"


def _string_end(raw: bytes, start: int) -> int:
    """Index just past the JSON string that opens at ``raw[start]`` (a quote)."""
    i = start + 1
    while True:
        c = raw[i]
        if c == 0x5C:  # backslash: skip the escaped character
            i += 2
        elif c == 0x22:  # closing quote
            return i + 1
        else:
            i += 1


def _skip_whitespace(raw: bytes, i: int) -> int:
    while raw[i] in _WHITESPACE:
        i += 1
    return i


def replace_top_level_string(raw: bytes, key: str, value: str) -> bytes | None:
    """``raw`` with every top-level ``key`` whose value is a string set to ``value``.

    Returns None when the document is not an object or has no such string field (the
    caller then re-encodes). Keys written with escapes (``"mod\\u0065l"``) are matched
    by their decoded text, as a JSON parser would.
    """
    i = _skip_whitespace(raw, 0) if raw else 0
    if not raw or raw[i] != 0x7B:  # "{"
        return None
    spans: list[tuple[int, int]] = []
    depth = 0
    expecting_key = False
    while i < len(raw):
        c = raw[i]
        if c == 0x22:  # a string: a key when at depth 1 and a key is expected
            end = _string_end(raw, i)
            if depth == 1 and expecting_key:
                name = orjson.loads(raw[i:end])
                colon = _skip_whitespace(raw, end)
                at = _skip_whitespace(raw, colon + 1)
                if name == key and raw[at] == 0x22:
                    value_end = _string_end(raw, at)
                    spans.append((at, value_end))
                    i = value_end
                else:
                    i = colon + 1
                expecting_key = False
                continue
            i = end
            continue
        if c in b"{[":
            depth += 1
            expecting_key = c == 0x7B and depth == 1
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 1:  # ","
            expecting_key = True
        i += 1
    if not spans:
        return None
    encoded = orjson.dumps(value)
    out = bytearray()
    last = 0
    for start, end in spans:
        out += raw[last:start] + encoded
        last = end
    out += raw[last:]
    return bytes(out)
