"""Text outside ASCII in the hold's estimate: its worst case, and its exact count when it weighs.

o200k makes up to a token of every byte of some scripts (CJK Extension B, Yi, Braille,
unassigned code points: ``bench/unicode_tokens.py``; the table in docs/billing.md, "Text
outside ASCII"), three times the bytes / 3 that ``gatewayd.billing.estimate`` counts for other
text (attack N9). No byte-level tokenizer makes more than a token a byte, so the estimate holds
each non-ASCII string and JSON part at that, unless the relay counted it: the estimates made
during a request's route builds record the parts in a :class:`ForeignText` (a context
variable, :func:`counted_text`); when their worst case weighs (:meth:`ForeignText.weighs`) the
relay counts them with the model family's tokenizer, off the event loop when large, and builds
again (``Relay._build_counted``). ASCII text never reaches this module.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Any, Iterator

from gatewayd import tokens as tokenizer

# the non-ASCII parts of a body are counted exactly when their worst case is above this many
# tokens and above this many tokens a byte of the body (1/32 of its bytes / 3: ForeignText.weighs)
COUNT_FOREIGN_ABOVE_TOKENS = 256
COUNT_FOREIGN_ABOVE_PER_BYTE = Fraction(1, 96)

ASCII_BYTES = bytes(range(0x80))  # bytes.translate(None, ASCII_BYTES): the non-ASCII bytes


def non_ascii_bytes(value: str, utf8_len: int) -> int:
    """An upper bound of the UTF-8 bytes of ``value``'s non-ASCII characters, from its length
    in characters and in bytes alone (no scan): each such character has at least 2 bytes, so
    k of them, of m bytes, make ``utf8_len = len - k + m`` with ``k <= m / 2``."""
    return min(utf8_len, 2 * (utf8_len - len(value)))


class ForeignText:
    """A request's non-ASCII parts (strings, and JSON values measured as their text): the
    estimates made while it is current (:func:`counted_text`) hold each at its worst case and
    record it; once :meth:`count` has run, at its exact tokens by the model family's tokenizer.
    Parts are known by identity: a part a route's body does not share with the counted ones
    (a translation rebuilt it) stays at its worst case."""

    __slots__ = ("_counted", "_seen")

    def __init__(self) -> None:
        self._counted: dict[int, tuple[Any, int]] = {}
        self._seen: dict[int, tuple[Any, str | bytes, int]] = {}  # id -> (part, its text, worst in thirds)

    def counted(self, part: Any) -> int | None:
        found = self._counted.get(id(part))
        return found[1] if found is not None and found[0] is part else None

    def saw(self, part: Any, text: str | bytes, worst3: int) -> None:
        self._seen[id(part)] = (part, text, worst3)

    def weighs(self, body_bytes: int) -> bool:
        """Whether the parts seen are worth counting: their worst case above
        :data:`COUNT_FOREIGN_ABOVE_TOKENS` and above :data:`COUNT_FOREIGN_ABOVE_PER_BYTE` of the
        body's bytes (below that, holding the worst case costs less than a count)."""
        worst = -(-sum(w for _, _, w in self._seen.values()) // 3)
        return worst > COUNT_FOREIGN_ABOVE_TOKENS and worst > body_bytes * COUNT_FOREIGN_ABOVE_PER_BYTE

    @property
    def chars(self) -> int:
        return sum(len(text) for _, text, _ in self._seen.values())

    def count(self, family: str) -> None:
        """Count every part seen with ``family``'s tokenizer (``gatewayd.tokens``: o200k,
        scaled for Claude). CPU-bound: the relay runs it in a worker thread when large."""
        for key, (part, text, _) in list(self._seen.items()):
            text = text if isinstance(text, str) else text.decode("utf-8", "surrogatepass")
            self._counted[key] = (part, tokenizer.count(text, family))
        self._seen.clear()


_FOREIGN: ContextVar[ForeignText | None] = ContextVar("gatewayd_foreign_text", default=None)


def current() -> ForeignText | None:
    """The request's :class:`ForeignText` the estimates record into (None outside the relay's
    builds: the worst case is held and nothing recorded)."""
    return _FOREIGN.get()


@contextmanager
def counted_text(foreign: ForeignText | None) -> Iterator[None]:
    """Estimates made inside record their non-ASCII parts in ``foreign`` and read its counts.
    The relay wraps the building of a request's routes in it (the builders make the estimates)."""
    token = _FOREIGN.set(foreign)
    try:
        yield
    finally:
        _FOREIGN.reset(token)
