"""Embedding vectors in the encoding the client asked for (``float`` or ``base64``)."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson

from gatewayd.formats.errors import provider_json


def convert_embeddings(upstream: bytes, wanted: str) -> bytes:
    """Give the client the encoding it asked for, converting only if the upstream differed
    (base64 is little-endian float32, what openai-python decodes)."""
    doc = provider_json(upstream)
    changed = False
    for item in doc.get("data") or ():
        vector = item.get("embedding")
        if wanted == "base64" and isinstance(vector, list):
            item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            changed = True
        elif wanted == "float" and isinstance(vector, str):
            packed = base64.b64decode(vector)
            item["embedding"] = list(struct.unpack(f"<{len(packed) // 4}f", packed))
            changed = True
    return orjson.dumps(doc) if changed else upstream


def embedding_inputs(value: Any) -> list[Any] | None:
    """The ``input`` of an embeddings request as a list of strings or token arrays; None when
    it is none of the accepted shapes (a string, strings, a token array, token arrays)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return value
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [value]
        if all(isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v)
               for v in value):
            return value
    return None
