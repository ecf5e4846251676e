"""Cost: the up-front estimate a request is held for, and the exact charge from real usage.

Both are integer nano-dollars. The estimate assumes the whole output allowance is used
(the request's own max, else the model's ``max_output_tokens``), so a lower
``max_tokens`` lowers the hold, as the spec promises.

The prompt side is read by each format's structure, never by key names found anywhere
in the body: a tool's JSON schema may well have a property called ``type`` or
``image_url``, and that is text for the model, not a content block. Only the places a
format carries content are read (chat ``messages`` and ``tools``; messages ``system``,
``messages`` and ``tools``; responses ``instructions``, ``input`` and ``tools``), and
text is *measured*, not tokenized: UTF-8 bytes divided by :data:`BYTES_PER_TOKEN`.
Running a tokenizer over a 600 KB Claude Code turn costs ~45 ms of event loop; measuring
its strings costs well under 1 us per KB. On prose, code and CJK text the o200k tokenizer
makes one token of every 3.7-4.7 bytes, so a third of the bytes is an upper-ish bound;
only digit runs and random strings (base64, hex) tokenize denser. Figures and the
comparison with the simulator's and the real tokenizer's counts: docs/billing.md.

Parts the gateway cannot measure as text get a flat allowance (images, audio, documents).
Parts whose shape a format does not define (tool definitions, tool inputs, unknown block
types) are measured as their JSON text, which is what the provider renders them into.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import orjson

from gatewayd.catalogue import Model
from gatewayd.errors import BodyError
from gatewayd.formats.usage import Usage
from gatewayd.billing.pricing import bill

BYTES_PER_TOKEN = 3  # o200k makes 3.7-4.7 bytes a token on prose, code and CJK (docs/billing.md)
IMAGE_TOKENS = 1_600  # a large image in either vendor's accounting
AUDIO_TOKENS = 1_600  # a minute or so of input audio
DOCUMENT_TOKENS = 6_000  # a few PDF pages; the hold only needs to be roughly right
PER_MESSAGE_TOKENS = 4  # role markers and separators around each message or input item

# How far a charge may exceed its hold: charge <= hold x (1 + HOLD_TOLERANCE), for the
# tokenizer error of the input estimate. ``gatewayctl audit`` fails any usage row beyond it
# (gatewayd/store/audit.py). Placeholder until measured: docs/billing.md gives the measured figure.
HOLD_TOLERANCE = Fraction(1, 2)

FORMATS = ("chat", "messages", "responses")

_CHAT_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_CHAT_FLAT = {"image_url": IMAGE_TOKENS, "input_audio": AUDIO_TOKENS, "file": DOCUMENT_TOKENS}
_BLOCK_FLAT = {"image": IMAGE_TOKENS, "document": DOCUMENT_TOKENS}
_RESPONSES_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_RESPONSES_FLAT = {"input_image": IMAGE_TOKENS, "input_file": DOCUMENT_TOKENS, "input_audio": AUDIO_TOKENS,
                   "computer_screenshot": IMAGE_TOKENS}


class _Tally:
    """Bytes of text seen, and tokens allowed flat (media, per-message overhead)."""

    __slots__ = ("bytes", "tokens")

    def __init__(self) -> None:
        self.bytes = 0
        self.tokens = 0

    def text(self, value: Any) -> None:
        """A place that should hold a string; anything else there is measured as JSON."""
        if isinstance(value, str):
            # isascii() is O(1) on CPython; only non-ASCII text pays for an encode
            self.bytes += len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
        elif value is not None:
            self.json(value)

    def json(self, value: Any) -> None:
        """A part with no text shape of its own: its JSON text, as the provider renders it."""
        if value is None:
            return
        try:
            self.bytes += len(orjson.dumps(value))
        except orjson.JSONEncodeError:
            # orjson parses 1,024 levels but encodes only 254: a body between the two cannot
            # be measured (nor translated), and no real client nests that deep.
            raise BodyError("the request nests JSON more than 254 levels deep") from None

    def total(self) -> int:
        return -(-self.bytes // BYTES_PER_TOKEN) + self.tokens


# -- chat -------------------------------------------------------------------------------


def _chat(body: dict, tally: _Tally) -> None:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            tally.tokens += PER_MESSAGE_TOKENS
            if not isinstance(message, dict):
                tally.json(message)
                continue
            _chat_content(message.get("content"), tally)
            tally.text(message.get("name"))
            tally.text(message.get("reasoning_content"))
            tally.text(message.get("refusal"))
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict):
                        tally.text(function.get("name"))
                        tally.text(function.get("arguments"))
                    else:
                        tally.json(call)
            else:
                tally.json(calls)
            tally.json(message.get("function_call"))
    else:
        tally.json(messages)
    tally.json(body.get("tools"))
    tally.json(body.get("functions"))


def _chat_content(content: Any, tally: _Tally) -> None:
    if not isinstance(content, list):
        tally.text(content)
        return
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            tally.json(part)
        elif kind in _CHAT_TEXT_PARTS:
            tally.text(part.get("text"))
        elif kind == "refusal":
            tally.text(part.get("refusal"))
        elif kind in _CHAT_FLAT:
            tally.tokens += _CHAT_FLAT[kind]
        else:
            tally.json(part)


# -- messages ---------------------------------------------------------------------------


def _messages(body: dict, tally: _Tally) -> None:
    system = body.get("system")
    if isinstance(system, list):
        _blocks(system, tally, nested=False)
    else:
        tally.text(system)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            tally.tokens += PER_MESSAGE_TOKENS
            if not isinstance(message, dict):
                tally.json(message)
                continue
            content = message.get("content")
            if isinstance(content, list):
                _blocks(content, tally, nested=False)
            else:
                tally.text(content)
    else:
        tally.json(messages)
    tally.json(body.get("tools"))


def _blocks(blocks: list, tally: _Tally, *, nested: bool) -> None:
    """Content blocks; ``nested`` inside a tool_result or search_result, where the format
    holds only plain blocks (anything deeper is measured as JSON, never walked again)."""
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            tally.json(block)
        elif kind == "text":
            tally.text(block.get("text"))
        elif kind in _BLOCK_FLAT:
            source = block.get("source")
            if kind == "document" and isinstance(source, dict) and source.get("type") == "text":
                tally.text(source.get("data"))  # a plain-text document is just text
            else:
                tally.tokens += _BLOCK_FLAT[kind]
        elif kind == "thinking":
            tally.text(block.get("thinking"))
        elif kind == "redacted_thinking":
            tally.text(block.get("data"))
        elif kind in ("tool_use", "server_tool_use") and not nested:
            tally.text(block.get("name"))
            tally.json(block.get("input"))
        elif kind in ("tool_result", "search_result") and not nested:
            tally.text(block.get("title"))
            content = block.get("content")
            if isinstance(content, list):
                _blocks(content, tally, nested=True)
            else:
                tally.text(content)
        else:
            tally.json(block)


# -- responses --------------------------------------------------------------------------


def _responses(body: dict, tally: _Tally) -> None:
    instructions = body.get("instructions")
    if isinstance(instructions, list):
        _items(instructions, tally)
    else:
        tally.text(instructions)
    items = body.get("input")
    if isinstance(items, list):
        _items(items, tally)
    elif items is not None:
        tally.tokens += PER_MESSAGE_TOKENS
        tally.text(items)
    tally.json(body.get("tools"))


def _items(items: list, tally: _Tally) -> None:
    for item in items:
        tally.tokens += PER_MESSAGE_TOKENS
        if not isinstance(item, dict):
            tally.json(item)
            continue
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                _parts(content, tally)
            else:
                tally.text(content)
        elif kind == "function_call":
            tally.text(item.get("name"))
            tally.text(item.get("arguments"))
        elif kind == "custom_tool_call":
            tally.text(item.get("name"))
            tally.text(item.get("input"))
        elif kind in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
            output = item.get("output")
            if isinstance(output, list):
                _parts(output, tally)
            elif isinstance(output, dict):
                _parts([output], tally)
            else:
                tally.text(output)
        elif kind == "reasoning":
            for field in ("summary", "content"):
                value = item.get(field)
                if isinstance(value, list):
                    _parts(value, tally)
                else:
                    tally.json(value)
            tally.text(item.get("encrypted_content"))  # sealed, but sent back and counted upstream
        else:
            tally.json(item)


def _parts(parts: list, tally: _Tally) -> None:
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            tally.json(part)
        elif kind in _RESPONSES_TEXT_PARTS:
            tally.text(part.get("text"))
        elif kind == "refusal":
            tally.text(part.get("refusal"))
        elif kind in _RESPONSES_FLAT:
            tally.tokens += _RESPONSES_FLAT[kind]
        else:
            tally.json(part)


_READERS = {"chat": _chat, "messages": _messages, "responses": _responses}


def estimate_input_tokens(body: dict, fmt: str) -> int:
    """An upper-ish bound of the prompt tokens of a ``fmt`` request body (chat, messages,
    responses), read by that format's structure. Raises a 400 :class:`BodyError` only
    for a body nested deeper than JSON can be re-encoded."""
    tally = _Tally()
    _READERS[fmt](body, tally)
    return tally.total()


def estimate_text_tokens(texts: list[str]) -> int:
    """Embedding inputs: plain strings, measured the same way."""
    tally = _Tally()
    for text in texts:
        tally.text(text)
    return tally.total()


def requested_output_tokens(body: dict, model: Model, fields=("max_completion_tokens", "max_tokens", "max_output_tokens")) -> int:
    for field in fields:
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return model.max_output_tokens


def estimate_cost(model: Model, input_tokens: int, output_tokens: int, price_ratio: Fraction) -> int:
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return charge(model, usage, price_ratio)


def charge(model: Model, usage: Usage, price_ratio: Fraction) -> int:
    """The charge for ``usage``: the total of its :func:`gatewayd.billing.pricing.bill`."""
    return bill(model, usage, price_ratio).total_nano
