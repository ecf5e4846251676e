"""What a stream is charged when the provider's final usage cannot be had.

The pump reads a stream on after the client left until the provider's usage arrives
(:mod:`gatewayd.pump`), so this is only for streams whose usage never came: the provider
broke off, went silent past the idle timeout, or a shutdown cut it. The rule cannot be
gamed by hanging up at the right moment:

- input: what the provider reported (Anthropic and Gemini report it first), else the
  prompt counted offline with the model family's tokenizer (``gatewayd.tokens``), not the
  hold's estimate;
- output: the larger of what was reported and what was streamed, counted offline
  (``gatewayd.tokens``) -- and, when the model may have produced hidden reasoning that
  the stream never shows (:func:`hidden_output_possible`), the hold's whole output
  allowance: the provider bills those tokens and nothing we saw can tell how many.
"""

from __future__ import annotations

from typing import Any

import attrs

from gatewayd.catalogue import Model
from gatewayd.formats.usage import Usage


def hidden_output_possible(model: Model, body: dict[str, Any]) -> bool:
    """The model may reason without showing it: a catalogue model marked ``reasoning``
    (OpenAI's o-series and GPT-5, Gemini 2.5, which think by default), or a request that
    asks for reasoning or thinking in any client format."""
    if model.reasoning:
        return True
    effort = body.get("reasoning_effort")
    if isinstance(effort, str) and effort != "none":
        return True
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") != "none":
        return True
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return True
    return _gemini_thinks(body.get("generationConfig") or body.get("generation_config"))


def _gemini_thinks(config: Any) -> bool:
    if not isinstance(config, dict):
        return False
    thinking = config.get("thinkingConfig") or config.get("thinking_config")
    if not isinstance(thinking, dict):
        return False
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    return budget != 0


def cut_usage(reported: Usage | None, *, produced: int, prompt: int, output_allowance: int,
              hidden_possible: bool) -> Usage:
    """The usage a stream without final usage is charged (see the module docstring);
    ``prompt`` is the prompt counted offline, charged when the provider reported no input."""
    base = reported or Usage()
    if not base.input_tokens:
        base = attrs.evolve(base, input_tokens=prompt)
    output = max(base.output_tokens, produced)
    if hidden_possible:
        output = max(output, output_allowance)
    return attrs.evolve(base, output_tokens=output)
