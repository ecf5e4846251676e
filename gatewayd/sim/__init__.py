"""An upstream simulator speaking the real OpenAI, Azure OpenAI, Anthropic and Gemini wire protocols.

Deterministic replies, tool calls, thinking, usage (cache included), streaming and injected
faults, driven by ``[[sim:...]]`` markers in the last user message. Used by
``gatewayd serve --demo``, the test suite and ``bench/``. Rules: ``docs/simulator.md``.
"""

from .app import create_sim_app, sim_state
from .behaviour import count_input_tokens
from .embeddings import sim_embedding
from .server import main_simulate, serve_simulator

__all__ = [
    "count_input_tokens",
    "create_sim_app",
    "main_simulate",
    "serve_simulator",
    "sim_embedding",
    "sim_state",
]
