"""Anthropic's extended thinking: a ``budget_tokens`` that fits the request's ``max_tokens``.

Anthropic requires ``1024 <= thinking.budget_tokens < max_tokens`` (a budget at or above the
cap is a 400). The gateway sets or edits both numbers in several places (the effort of a
chat, responses or Gemini-API client translated to messages; a messages client's cap lowered
to the model's maximum), so the rule that keeps the pair valid lives here, once:
:func:`fit_budget`. It keeps room for the answer after the thinking, and it is monotone in
the budget asked for, so a higher effort never thinks less than a lower one under one cap.
"""

from __future__ import annotations

__all__ = ["MIN_BUDGET_TOKENS", "THINKING_ANSWER_ROOM", "fit_budget"]

#: Anthropic's least ``budget_tokens``.
MIN_BUDGET_TOKENS = 1024

#: Room left for the answer after the thinking: this many tokens, or a quarter of a cap too
#: small to leave this many (a 2,048 cap thinks at most 1,536).
THINKING_ANSWER_ROOM = 4096


def fit_budget(wanted: int, max_tokens: int) -> int | None:
    """The budget to send for ``wanted`` under ``max_tokens``: ``wanted`` when it leaves the
    answer its room, else the most that does, never below Anthropic's floor and always below
    the cap. ``None`` when the cap is too small to think at all (``max_tokens <= 1024``)."""
    if max_tokens <= MIN_BUDGET_TOKENS:
        return None
    room = min(THINKING_ANSWER_ROOM, max_tokens // 4)
    return max(MIN_BUDGET_TOKENS, min(wanted, max_tokens - room))
