"""OpenAI Embeddings (``POST /v1/embeddings``) with deterministic vectors.

A vector depends only on the input text and the dimension count, so a test can compute
the expected value with :func:`sim_embedding`. Every component is a multiple of 1/1024
in [-1, 1], hence exactly representable as float32: the ``base64`` encoding (little-endian
float32, what openai-python asks for by default) decodes to the very same numbers.
"""

from __future__ import annotations

import base64
import hashlib
import math
import sys
from array import array

from .behaviour import count_words

DEFAULT_DIMENSIONS = 8
MAX_DIMENSIONS = 4096
INVALID_JSON = b'{"object": "list", this is not json'


def sim_embedding(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The simulator's embedding of ``text``: about unit length, components k/1024.

    Bytes of sha256(text), then of sha256(seed + counter) as needed, each mapped to
    ``byte - 127.5``; the vector is normalised and each component rounded to 1/1024.
    """
    seed = hashlib.sha256(text.encode("utf-8")).digest()
    raw: list[float] = []
    block, counter = seed, 0
    while len(raw) < dimensions:
        raw.extend(byte - 127.5 for byte in block)
        counter += 1
        block = hashlib.sha256(seed + counter.to_bytes(4, "little")).digest()
    del raw[dimensions:]
    norm = math.sqrt(sum(x * x for x in raw))
    return [round(x / norm * 1024) / 1024 for x in raw]


def encode_base64(vector: list[float]) -> str:
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _inputs(value) -> list[tuple[str, int]] | None:
    """(text hashed, tokens counted) per input, or None when ``input`` is malformed."""

    def one(item) -> tuple[str, int] | None:
        if isinstance(item, str):
            return item, max(1, count_words(item))
        if isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            return " ".join(map(str, item)), len(item)
        return None

    if isinstance(value, str):
        found = [one(value)]
    elif not isinstance(value, list) or not value:
        return None
    elif all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        found = [one(value)]
    else:
        found = [one(item) for item in value]
    pairs = [pair for pair in found if pair is not None]
    return pairs if len(pairs) == len(found) else None


def validate(body: dict) -> tuple[str, str | None] | None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter", "model"
    if "input" not in body:
        return "'input' is a required property", "input"
    if _inputs(body["input"]) is None:
        return "'$.input' is invalid. Please check the API reference.", "input"
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_DIMENSIONS):
        return f"Invalid 'dimensions': expected an integer from 1 to {MAX_DIMENSIONS}.", "dimensions"
    fmt = body.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        return "Invalid 'encoding_format': expected 'float' or 'base64'.", "encoding_format"
    return None


def marker_text(body: dict) -> str:
    """The text in which ``[[sim:...]]`` markers are looked for: all string inputs."""
    value = body.get("input")
    if isinstance(value, str):
        return value
    return " ".join(item for item in value if isinstance(item, str)) if isinstance(value, list) else ""


def render(body: dict) -> dict:
    inputs = _inputs(body["input"]) or []
    dims = body.get("dimensions") or DEFAULT_DIMENSIONS
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, (text, _) in enumerate(inputs):
        vector = sim_embedding(text, dims)
        data.append(
            {"object": "embedding", "index": index, "embedding": encode_base64(vector) if as_base64 else vector}
        )
    tokens = sum(tokens for _, tokens in inputs)
    return {
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
