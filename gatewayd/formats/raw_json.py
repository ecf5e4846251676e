"""Change top-level fields of a JSON object in place, in its bytes.

A pass-through route maps the model id (catalogue id -> provider id) and must change
nothing else: re-encoding the body would reorder nothing but could still change bytes
(``2.50`` -> ``2.5``, ``\\u00e9`` -> ``é``, spacing), and a provider that signs or caches
by prefix, or a test that checks byte equality, would see a different request. So the
value is found by a small scanner over the bytes and only that span is replaced.

Sans-I/O, pure. The body has already been parsed once (orjson) by the caller, so it is
known to be valid JSON; the scanner only needs to track strings and nesting depth.

Speed: the scanner steps through the bytes in Python (about a quarter of a microsecond a
byte: 400 ms for a 1.6 MB prompt, all of it holding the event loop). So when the caller
passes the parsed body, the usual case is settled with C-speed byte searches instead: if
the key occurs exactly once as an object key in the bytes and no ``\\u`` escape occurs at
all (the only way to spell a key's letters differently), that one occurrence is the
top-level key the parser read. Otherwise the scanner runs on bodies up to
``SCAN_LIMIT`` bytes, and past that the function returns None and the caller re-encodes
(same document, C speed, other bytes not kept).

:func:`set_top_level_fields` does the same for the few other fields the gateway sets on a
pass-through body (the output cap it holds for, ``max_tool_calls``): a number or string
replaced in place, a field the body lacks inserted right after the opening brace (no scan
at all: the parse already says the key is absent).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_WHITESPACE = b" \t\r\n"
SCAN_LIMIT = 16 * 1024


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


_NUMBER = frozenset(b"-+.eE0123456789")


def _scalar_end(raw: bytes, at: int) -> int | None:
    """Index just past the string or number value at ``raw[at]``; None for anything else."""
    if raw[at] == 0x22:
        return _string_end(raw, at)
    if raw[at] in _NUMBER:
        end = at
        while end < len(raw) and raw[end] in _NUMBER:
            end += 1
        return end
    return None


def _only_key_span(raw: bytes, key: str, *, numbers: bool = False) -> tuple[int, int] | None:
    """The value span of ``key`` when it occurs exactly once as an object key, spelled
    plainly, with a string value (or a number, with ``numbers``), and the bytes hold no
    ``\\u`` escape; else None."""
    if b"\\u" in raw:
        return None
    needle = orjson.dumps(key)
    found = None
    at = raw.find(needle)
    while at != -1:
        backslashes = 0
        while at - backslashes > 0 and raw[at - backslashes - 1] == 0x5C:
            backslashes += 1
        if backslashes % 2 == 0:  # a real opening quote: a whole string token equal to the key
            colon = _skip_whitespace(raw, at + len(needle))
            if raw[colon] == 0x3A:  # ":": an object key
                if found is not None:
                    return None  # twice (nested, or a duplicate): only the scanner can tell
                value_at = _skip_whitespace(raw, colon + 1)
                end = _scalar_end(raw, value_at) if numbers else (
                    _string_end(raw, value_at) if raw[value_at] == 0x22 else None)
                if end is None:
                    return None
                found = (value_at, end)
        at = raw.find(needle, at + 1)
    return found


def replace_top_level_string(raw: bytes, key: str, value: str, parsed: dict[str, Any] | None = None) -> bytes | None:
    """``raw`` with every top-level ``key`` whose value is a string set to ``value``.

    Returns None when the document is not an object or has no such string field, or is
    over ``SCAN_LIMIT`` and not settled by the fast path (the caller then re-encodes).
    Keys written with escapes (``"mod\\u0065l"``) are matched by their decoded text, as a
    JSON parser would. ``parsed`` (the caller's parse of ``raw``) enables the fast path.
    """
    if isinstance(parsed, dict) and isinstance(parsed.get(key), str):
        span = _only_key_span(raw, key)
        if span is not None:
            return b"".join((raw[: span[0]], orjson.dumps(value), raw[span[1]:]))
    if len(raw) > SCAN_LIMIT:
        return None
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


def _insert_first(raw: bytes, fields: dict[str, object]) -> bytes | None:
    """``raw`` with ``fields`` (absent from it) inserted as the object's first members."""
    i = _skip_whitespace(raw, 0) if raw else 0
    if not raw or raw[i] != 0x7B:
        return None
    members = b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in fields.items())
    after = _skip_whitespace(raw, i + 1)
    joiner = b"" if raw[after] == 0x7D else b","
    return b"".join((raw[: i + 1], members, joiner, raw[i + 1:]))


def set_top_level_fields(raw: bytes, parsed: dict[str, Any], changes: dict[str, object]) -> bytes | None:
    """``raw`` with each top-level field of ``changes`` set to its value (a string or an
    integer), or None when the bytes cannot be edited so (the caller re-encodes).

    A field ``parsed`` (the caller's parse of ``raw``) lacks is inserted after the opening
    brace; a string field goes through :func:`replace_top_level_string`; a number field is
    replaced when it occurs once as a key (the fast path above)."""
    if not isinstance(parsed, dict):
        return None
    inserts = {k: v for k, v in changes.items() if k not in parsed}
    for key, value in changes.items():
        if key in inserts:
            continue
        current = parsed[key]
        if isinstance(value, str) and isinstance(current, str):
            edited = replace_top_level_string(raw, key, value, parsed)
        elif isinstance(value, int) and isinstance(current, (int, float)) and not isinstance(current, bool):
            span = _only_key_span(raw, key, numbers=True)
            edited = None if span is None else b"".join((raw[: span[0]], orjson.dumps(value), raw[span[1]:]))
        else:
            edited = None
        if edited is None:
            return None
        raw = edited
    return _insert_first(raw, inserts) if inserts else raw


def replace_top_level_member(raw: bytes, parsed: dict[str, Any], key: str, members: dict[str, object]) -> bytes | None:
    """``raw`` with its top-level member ``key`` replaced by ``members`` (keys ``parsed`` lacks;
    none: the member removed), or None when the bytes cannot be edited so: the key spelled
    more than once or with a ``\\u`` escape anywhere, or a value other than a string or
    number (the caller re-encodes). One copy of the bytes: Vertex AI takes a messages body
    with ``anthropic_version`` where ``model`` was (the URL names the model)."""
    if not isinstance(parsed, dict) or key not in parsed or any(k in parsed for k in members):
        return None
    value = parsed[key]
    span = _only_key_span(raw, key, numbers=isinstance(value, (int, float)) and not isinstance(value, bool))
    if span is None:
        return None
    start = raw.rfind(orjson.dumps(key), 0, span[0])
    end = span[1]
    if not members:
        after = _skip_whitespace(raw, end)
        if raw[after] == 0x2C:  # ",": a member follows; it takes this one's place
            end = _skip_whitespace(raw, after + 1)
        else:  # the last member: drop the comma before it, if any
            before = start - 1
            while before > 0 and raw[before] in _WHITESPACE:
                before -= 1
            if raw[before] == 0x2C:
                start = before
    replacement = b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in members.items())
    view = memoryview(raw)
    return b"".join((view[:start], replacement, view[end:]))


class _Twice(Exception):
    """A key seen twice in one object (raised from the parser's hook: the parse stops there)."""


def _count_unique(pairs: list[tuple[str, Any]]) -> int:
    """The parser's hook for every object: raise at a key given twice; else stand in for the
    object with a number (no dict is built: only the check's cost is paid)."""
    if len(pairs) > 1 and len({name for name, _ in pairs}) != len(pairs):
        raise _Twice
    return 0


def _first_twice(doc: Any) -> tuple[str, str] | None:
    """(key, path) of the first key given twice in a document parsed into lists of pairs
    (depth first, without recursion: a body may nest a thousand levels)."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, list) and node and isinstance(node[0], tuple):  # an object: its pairs
            seen: set[str] = set()
            for name, _ in node:
                if name in seen:
                    return name, f"{at}.{name}" if at else name
                seen.add(name)
            stack.extend((value, f"{at}.{name}" if at else name) for name, value in reversed(node))
        elif isinstance(node, list):
            stack.extend((item, f"{at}[{i}]") for i, item in reversed(list(enumerate(node))))
    return None


def duplicate_key(raw: bytes, parsed: Any) -> tuple[str, str] | None:
    """``(key, path)`` of a key that occurs more than once in one object of ``raw``, at any
    depth (``parsed`` is its orjson parse), else None. The path is where it is
    (``generationConfig.candidateCount``, ``tools[0].type``); a top-level key is its own path.

    orjson keeps the last of duplicate keys silently, while a provider handed the same bytes
    may read the first: the gateway would check and bill one ``model``, ``n`` or
    ``candidateCount`` and the provider act on another (issue 30: duplicates inside
    ``generationConfig`` and ``tools[]`` were forwarded byte for byte). So such a body is
    refused, whatever the depth.

    Two steps, the first settling the usual case at C speed: when ``raw`` is byte for byte
    the compact re-encoding of ``parsed`` (what the OpenAI and Anthropic SDKs, httpx and
    JSON.stringify send: no spaces, no needless escapes) it cannot hold a duplicate at any
    depth, since the re-encoding of a dict has none (about a sixth of the parse's time on a
    450 KB body). Otherwise the standard library's C parser reads the bytes once more with a
    hook on every object that checks its keys are distinct and builds nothing: about twice
    orjson's parse (2.5-2.8 ms for a 720 KB body), paid only by bodies written with spaces or
    escapes, as the top-level check it replaced was (``bench/duplicate_keys.py``: the same
    figures before and after).
    """
    try:
        if orjson.dumps(parsed) == raw:
            return None
    except orjson.JSONEncodeError:
        pass  # nested deeper than orjson encodes (254): the slow path; the estimate refuses it later
    try:
        json.loads(raw, object_pairs_hook=_count_unique)
        return None
    except _Twice:
        pass
    except (ValueError, RecursionError):  # orjson read it; the standard parser's limits are not ours to add
        return None
    # only for the error's message
    return _first_twice(json.loads(raw, object_pairs_hook=list))
