"""Control characters in names people read: refused on the way in, escaped on the way out.

C0 (ESC starts terminal escapes: a key name could retitle the operator's terminal, clear
it, or hide text), DEL, C1, and the bidirectional overrides (text shown in another order
than stored). The Directory refuses them in account and key names, emails and payment
notes; gatewayctl escapes any already stored before printing (``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

import re

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control_characters(text: str) -> str:
    """``text`` with each control character written as its escape, so it prints as itself."""
    return CONTROL_CHARACTERS.sub(_escaped, text) if CONTROL_CHARACTERS.search(text) else text
