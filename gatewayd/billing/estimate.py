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

Text outside ASCII is where a third of the bytes stops being a bound: o200k makes up to a
token of every byte of some scripts (CJK Extension B, Yi, Braille, unassigned code points:
``bench/unicode_tokens.py``, the table in docs/billing.md), three times a bytes/3 estimate
(attack N9). No tokenizer makes more than a token a byte, so each non-ASCII string and JSON
part is held at that worst case, unless its tokens were counted exactly: the estimates record
the non-ASCII parts they read (:mod:`gatewayd.billing.foreign_text`), and when their worst case would weigh
on the hold the relay counts them with the model family's tokenizer, off the event loop, and
estimates again on the counts (``Relay._build_counted``). ASCII text pays nothing for this.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, AnyStr

import attrs
import orjson

from gatewayd.billing.foreign_text import ASCII_BYTES, ForeignText, counted_text, current, non_ascii_bytes
from gatewayd.catalogue import Model
from gatewayd.errors import BodyError
from gatewayd.formats.usage import Usage
from gatewayd.billing.features import TOOL_RESULT_TOKENS, Asks
from gatewayd.billing.pricing import bill, rates

BYTES_PER_TOKEN = 3  # o200k makes 3.7-4.7 bytes a token on prose, code and CJK (docs/billing.md)
# Dense text (random base64 or hex, digit runs, punctuation): o200k makes 1.46-3 bytes a token.
# Found by a sample of each long ASCII string (:func:`_density`) and measured at 7 bytes per 5 tokens.
DENSE_TOKENS_PER_BYTE = Fraction(5, 7)
DENSE_MIN_CHARS = 64  # shorter ASCII strings are all counted as dense (cheaper than judging them)
DENSE_SAMPLE = 128  # chars taken at the start and the middle of a long string
# byte -> "0" for a digit, " " for a space, newline or quote, 1 for a control character (each
# its own token to o200k), "a" for anything else
_CONTROLS = frozenset(range(0x20)) - {0x09, 0x0A, 0x0D} | {0x7F}
_CLASSES = bytes(48 if 48 <= c <= 57 else 32 if c in b' \n"' else 1 if c in _CONTROLS else 97 for c in range(256))
PLAIN, DENSE, RAW = 0, 1, 2  # what a string is measured as: bytes / 3, x 5/7, a token a byte
IMAGE_TOKENS = 1_600  # a large image when the provider is not known (Anthropic's ~1.15 megapixels)
AUDIO_TOKENS = 1_600  # an audio part whose data cannot be measured (a file id, a URL)
DOCUMENT_TOKENS = 6_000  # a few PDF pages; the hold only needs to be roughly right
PER_MESSAGE_TOKENS = 4  # role markers and separators around each message or input item

# The hold's input estimate may be this much below the provider's count (charge <= hold x
# (1 + HOLD_TOLERANCE)). Measured with o200k over prose, code, CJK, Russian, JSON, digit
# lists, base64 and hex, each as long and as short (< DENSE_MIN_CHARS) strings:
# tests/test_estimate.py::test_hold_tolerance_is_measured and docs/billing.md ("The
# tolerance"): the worst o200k / estimate is 0.99 (base64 in 8-character strings); the rest
# of the 10% is room for the providers' own tokenizers, which are not installable here.
HOLD_TOLERANCE = Fraction(1, 10)

FORMATS = ("chat", "messages", "responses")

_CHAT_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_CHAT_MEDIA = frozenset({"image_url", "input_audio", "file"})
_BLOCK_MEDIA = frozenset({"image", "document"})
_RESPONSES_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
_RESPONSES_MEDIA = frozenset({"input_image", "input_file", "input_audio", "computer_screenshot"})


@attrs.frozen
class Media:
    """How a provider counts non-text input: the most tokens one image can cost."""

    image: int = IMAGE_TOKENS


GENERIC_MEDIA = Media()
# OpenAI, per model family (platform.openai.com "Images and vision"): tiled models (gpt-4o,
# gpt-4.1, gpt-5, o-series) cost at most 85 + 170 x 8 tiles = 1,445 in high detail; patch
# models (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano) at most 1,536 patches x 2.46 = 3,779;
# gpt-4o-mini prices images like gpt-4o in dollars: 2,833 + 5,667 x 8 tiles = 48,169.
OPENAI_MEDIA = Media(image=3_800)
OPENAI_4O_MINI_MEDIA = Media(image=48_169)
# Anthropic: ~1,600 for an image scaled to 1.15 megapixels; newer models read up to ~3.75
# megapixels (~4,800 tokens): held at that.
ANTHROPIC_MEDIA = Media(image=4_800)
# Gemini: 258 tokens per 768x768 tile (258 in all up to 384x384); held at 16 tiles.
GEMINI_MEDIA = Media(image=4_128)


def media_for(protocol: str, upstream_id: str) -> Media:
    """How the provider behind a route counts images."""
    if protocol in ("openai", "azure-openai"):
        return OPENAI_4O_MINI_MEDIA if "4o-mini" in upstream_id else OPENAI_MEDIA
    if protocol == "anthropic":
        return ANTHROPIC_MEDIA
    if protocol == "gemini":
        return GEMINI_MEDIA
    return GENERIC_MEDIA


# Audio input: Gemini counts 32 tokens a second, OpenAI ~10. Data measured in base64
# characters: WAV (16-bit PCM, at least 8 kHz mono: 16,000 bytes a second) and compressed
# audio (at least 8 kbit/s: 1,000 bytes a second), held at 32 tokens a second.
_AUDIO_B64_CHARS_PER_TOKEN = {"wav": 16_000 * 4 // 3 // 32, "pcm16": 16_000 * 4 // 3 // 32}
_COMPRESSED_AUDIO_B64_CHARS_PER_TOKEN = 1_000 * 4 // 3 // 32


def audio_tokens(data: Any, fmt: Any = None) -> int:
    """The most tokens an audio part's base64 ``data`` can cost (a flat allowance when the
    data is not inline)."""
    if not isinstance(data, str) or not data:
        return AUDIO_TOKENS
    per = _AUDIO_B64_CHARS_PER_TOKEN.get(fmt, _COMPRESSED_AUDIO_B64_CHARS_PER_TOKEN) if isinstance(fmt, str) \
        else _COMPRESSED_AUDIO_B64_CHARS_PER_TOKEN
    return -(-len(data) // per)


def _density(value: AnyStr) -> int:
    """How an ASCII string (or a JSON text) tokenizes: ``RAW`` when a good part of it is control characters
    (o200k makes a token of each, and ``str.split`` a word separator of some: 1.4 times the
    dense estimate, found by the fuzz tests), ``DENSE`` for random base64 or hex (hardly a
    space or a quote), digit lists (a quarter digits) and one- and two-letter words, else
    ``PLAIN``. Judged on a sample (the first and the middle 128 characters), so a long string
    costs what a short one does: ~1 us."""
    n = len(value)
    if n > 2 * DENSE_SAMPLE:
        mid = n >> 1
        value = value[:DENSE_SAMPLE] + value[mid:mid + DENSE_SAMPLE]
    classes = (value if isinstance(value, bytes) else value.encode()).translate(_CLASSES)
    size = len(classes)
    if classes.count(1) * 8 >= size:
        return RAW
    # hardly a separator (random strings), a quarter digits, or words of one or two letters
    # ("a a a ...": o200k makes a token of every 2 bytes; a hostile prompt, found by the
    # property test of tests/test_money_property_live.py)
    dense = classes.count(32) * 24 < size or classes.count(48) * 4 >= size or classes.count(b" a") * 3 > size
    return DENSE if dense else PLAIN


class _Tally:
    """Bytes of text seen (plain and dense), and tokens allowed flat (media, per-message overhead)."""

    __slots__ = ("bytes", "dense", "raw", "tokens", "media", "extra3", "foreign")

    def __init__(self, media: "Media | None" = None) -> None:
        self.bytes = 0
        self.dense = 0
        self.raw = 0
        self.tokens = 0
        self.media = media or GENERIC_MEDIA
        self.extra3 = 0  # thirds of a token held for non-ASCII text beyond its bytes / 3
        self.foreign = current()

    def _foreign(self, part: Any, text: str | bytes, utf8_len: int, non_ascii: int) -> None:
        """A non-ASCII part of ``utf8_len`` bytes, already counted at a third of them: held at
        its counted tokens, or else a token for each of its ``non_ascii`` bytes (the most any
        byte-level tokenizer makes), and recorded for counting."""
        counted = self.foreign.counted(part) if self.foreign is not None else None
        if counted is not None:
            self.extra3 += max(0, 3 * counted - utf8_len)
            return
        self.extra3 += 2 * non_ascii
        if self.foreign is not None:
            self.foreign.saw(part, text, 2 * non_ascii)

    def text(self, value: Any) -> None:
        """A place that should hold a string; anything else there is measured as JSON."""
        if isinstance(value, str):
            # isascii() is O(1) on CPython; only non-ASCII text pays for an encode
            if value.isascii():
                n = len(value)
                if n < DENSE_MIN_CHARS and value.isprintable():
                    self.dense += n  # short strings are all counted dense (cheaper than judging them)
                else:
                    kind = _density(value)
                    if kind == RAW:
                        self.raw += n
                    elif kind == DENSE or n < DENSE_MIN_CHARS:
                        self.dense += n
                    else:
                        self.bytes += n
            else:
                n = len(value.encode("utf-8", "surrogatepass"))
                self.bytes += n
                self._foreign(value, value, n, non_ascii_bytes(value, n))
        elif value is not None:
            self.json(value)

    def sealed(self, value: Any) -> None:
        """Encrypted or signed text sent back (reasoning): random-looking, but what the provider
        counts is the plaintext inside, which is shorter: measured as plain text."""
        if isinstance(value, str) and value.isascii():
            self.bytes += len(value)
        else:
            self.text(value)

    def json(self, value: Any) -> None:
        """A part with no text shape of its own: its JSON text, as the provider renders it."""
        if value is None:
            return
        try:
            text = orjson.dumps(value)
        except orjson.JSONEncodeError:
            # orjson parses 1,024 levels but encodes only 254: a body between the two cannot
            # be measured (nor translated), and no real client nests that deep.
            raise BodyError("the request nests JSON more than 254 levels deep") from None
        kind = _density(text)  # as a string is judged: a JSON text of short words is dense too
        if kind == RAW:
            self.raw += len(text)
        elif kind == DENSE:
            self.dense += len(text)
        else:
            self.bytes += len(text)
        if not text.isascii():
            self._foreign(value, text, len(text), len(text.translate(None, ASCII_BYTES)))

    def image(self, part: Any = None) -> None:
        self.tokens += self.media.image

    def audio(self, data: Any, fmt: Any = None) -> None:
        self.tokens += audio_tokens(data, fmt)

    def total(self) -> int:
        return (-(-self.bytes // BYTES_PER_TOKEN) + math.ceil(self.dense * DENSE_TOKENS_PER_BYTE) + self.raw
                + self.tokens + -(-self.extra3 // 3))


class _Transcript(_Tally):
    """The prompt's text itself, read at the same places (for counting it with a tokenizer when
    a cut stream never got the provider's usage), and the flat allowances as in ``_Tally``."""

    __slots__ = ("parts",)

    def __init__(self, media: "Media | None" = None) -> None:
        super().__init__(media)
        self.parts: list[str] = []

    def text(self, value: Any) -> None:
        if isinstance(value, str):
            self.parts.append(value)
        elif value is not None:
            self.json(value)

    def sealed(self, value: Any) -> None:
        self.text(value)

    def json(self, value: Any) -> None:
        if value is not None:
            try:
                self.parts.append(orjson.dumps(value).decode())
            except orjson.JSONEncodeError:
                raise BodyError("the request nests JSON more than 254 levels deep") from None


# -- chat -------------------------------------------------------------------------------


def _chat(body: dict[str, Any], tally: _Tally) -> None:
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
    tally.json(body.get("response_format"))  # a JSON schema is rendered into the prompt
    prediction = body.get("prediction")
    if isinstance(prediction, dict):  # predicted output is read as input too (and held as output)
        _chat_content(prediction.get("content"), tally)


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
        elif kind in _CHAT_MEDIA:
            _media_part(kind, part, tally)
        else:
            tally.json(part)


# -- messages ---------------------------------------------------------------------------


def _messages(body: dict[str, Any], tally: _Tally) -> None:
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
    tally.json(body.get("output_format"))  # structured outputs: the schema is rendered into the prompt
    tally.json(body.get("output_config"))


def _blocks(blocks: list[Any], tally: _Tally, *, nested: bool) -> None:
    """Content blocks; ``nested`` inside a tool_result or search_result, where the format
    holds only plain blocks (anything deeper is measured as JSON, never walked again)."""
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            tally.json(block)
        elif kind == "text":
            tally.text(block.get("text"))
        elif kind in _BLOCK_MEDIA:
            source = block.get("source")
            if kind == "document" and isinstance(source, dict) and source.get("type") == "text":
                tally.text(source.get("data"))  # a plain-text document is just text
            elif kind == "image":
                tally.image()
            else:
                tally.tokens += DOCUMENT_TOKENS
        elif kind == "thinking":
            tally.text(block.get("thinking"))
        elif kind == "redacted_thinking":
            tally.sealed(block.get("data"))
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


def _responses(body: dict[str, Any], tally: _Tally) -> None:
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
    text = body.get("text")
    if isinstance(text, dict):
        tally.json(text.get("format"))  # a JSON schema for the answer is rendered into the prompt


def _items(items: list[Any], tally: _Tally) -> None:
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
            tally.sealed(item.get("encrypted_content"))  # sealed, but sent back and counted upstream
        else:
            tally.json(item)


def _parts(parts: list[Any], tally: _Tally) -> None:
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            tally.json(part)
        elif kind in _RESPONSES_TEXT_PARTS:
            tally.text(part.get("text"))
        elif kind == "refusal":
            tally.text(part.get("refusal"))
        elif kind in _RESPONSES_MEDIA:
            _media_part(kind, part, tally)
        else:
            tally.json(part)


# -- gemini (generateContent bodies from Gemini clients) -----------------------------------


def _gemini(body: dict[str, Any], tally: _Tally) -> None:
    instruction = body.get("systemInstruction", body.get("system_instruction"))
    if isinstance(instruction, dict) and isinstance(instruction.get("parts"), list):
        _gemini_parts(instruction["parts"], tally)
    else:
        tally.text(instruction)
    contents = body.get("contents")
    if isinstance(contents, list):
        for content in contents:
            tally.tokens += PER_MESSAGE_TOKENS
            parts = content.get("parts") if isinstance(content, dict) else None
            if isinstance(parts, list):
                _gemini_parts(parts, tally)
            else:
                tally.json(content)
    else:
        tally.json(contents)
    tally.json(body.get("tools"))
    config = body.get("generationConfig", body.get("generation_config"))
    if isinstance(config, dict):  # a response schema is rendered into the prompt
        tally.json(config.get("responseSchema", config.get("responseJsonSchema")))


def _gemini_parts(parts: list[Any], tally: _Tally) -> None:
    for part in parts:
        if not isinstance(part, dict):
            tally.json(part)
        elif isinstance(part.get("text"), str):
            tally.text(part["text"])
        elif isinstance(data := part.get("inlineData", part.get("inline_data")), dict):
            mime = str(data.get("mimeType", data.get("mime_type")) or "")
            if mime.startswith("image/"):
                tally.image(part)
            elif mime.startswith("audio/"):
                tally.audio(data.get("data"), mime.removeprefix("audio/"))
            else:
                tally.tokens += DOCUMENT_TOKENS
        elif part.get("fileData", part.get("file_data")) is not None:
            tally.tokens += DOCUMENT_TOKENS
        else:  # functionCall, functionResponse, executable code: their JSON text
            tally.json({k: v for k, v in part.items() if k != "thoughtSignature"})


_READERS = {"chat": _chat, "messages": _messages, "responses": _responses, "gemini": _gemini}


def _media_part(kind: str, part: dict[str, Any], tally: _Tally) -> None:
    if kind in ("image_url", "input_image", "computer_screenshot"):
        tally.image(part)
    elif kind == "input_audio":
        audio = part.get("input_audio", part)
        if isinstance(audio, dict):
            tally.audio(audio.get("data"), audio.get("format"))
        else:
            tally.tokens += AUDIO_TOKENS
    else:
        tally.tokens += DOCUMENT_TOKENS


def estimate_input_tokens(body: dict[str, Any], fmt: str, media: Media | None = None) -> int:
    """An upper-ish bound of the prompt tokens of a ``fmt`` request body (chat, messages,
    responses), read by that format's structure; images counted as ``media`` says the
    provider counts them. Raises a 400 :class:`BodyError` only for a body nested deeper
    than JSON can be re-encoded."""
    tally = _Tally(media)
    _READERS[fmt](body, tally)
    return tally.total()


def prompt_transcript(body: dict[str, Any], fmt: str) -> tuple[str, int]:
    """The text of a ``fmt`` request body's prompt (read as :func:`estimate_input_tokens`
    reads it) and the tokens allowed flat for what is not text (media, per-message overhead):
    a cut stream's input is counted from it, not estimated (docs/billing.md)."""
    transcript = _Transcript()
    _READERS[fmt](body, transcript)
    return "\n".join(transcript.parts), transcript.tokens


def counted_estimate(body: dict[str, Any], fmt: str, family: str, body_bytes: int = 0,
                     media: Media | None = None) -> int:
    """:func:`estimate_input_tokens` as the relay ends up holding it, in one call (tests,
    bench/): non-ASCII text counted by ``family``'s tokenizer when it weighs."""
    foreign = ForeignText()
    with counted_text(foreign):
        estimate = estimate_input_tokens(body, fmt, media)
        if not foreign.weighs(body_bytes):
            return estimate
        foreign.count(family)
        return estimate_input_tokens(body, fmt, media)


def estimate_text_tokens(texts: list[str]) -> int:
    """Embedding inputs: plain strings, measured the same way."""
    tally = _Tally()
    for text in texts:
        tally.text(text)
    return tally.total()


def worst_rates(model: Model, asks: Asks, input_tokens: int) -> tuple[int, int]:
    """(input, output) nano a token: the highest rate any of the request's tokens can be billed
    at, given what it asks for (the requested tier or the base rates, whichever is higher;
    long-context rates when the input could cross their threshold; cache writes when it
    marks cache breakpoints; audio and image rates when it asks for them)."""
    long = model.long_context is not None and \
        input_tokens * (1 + HOLD_TOLERANCE) > model.long_context.above_input_tokens
    sets = [rates(model, tier=None, long_context=long)]
    if asks.tier is not None:
        sets.append(rates(model, tier=asks.tier, long_context=long))
    inputs: list[int] = []
    outputs: list[int] = []
    for r in sets:
        if r is None:
            continue
        inputs += [r.input or 0, r.cached_input or 0]
        if asks.cache_write:
            inputs.append(r.cache_write if r.cache_write is not None else r.input or 0)
        if asks.cache_1h:
            inputs.append(r.cache_write_1h if r.cache_write_1h is not None else 2 * (r.input or 0))
        outputs.append(r.output or 0)
    if asks.audio_input:
        inputs.append(model.audio_input_price or 0)
    if asks.audio_output:
        outputs.append(model.audio_output_price or 0)
    if asks.image_output:
        outputs.append(model.image_output_price or 0)
    return max(inputs), max(outputs)


def hold_input_tokens(input_tokens: int, asks: Asks) -> int:
    """The input the provider may bill: the prompt once, and with hosted tools once more per
    call (each call's result is read in another model pass, with what came before it:
    results of up to :data:`TOOL_RESULT_TOKENS` each, and the output so far)."""
    calls = asks.max_tool_calls
    if not calls:
        return input_tokens
    return (calls + 1) * (input_tokens + calls * TOOL_RESULT_TOKENS + asks.output_tokens)


def hold_nano(model: Model, input_tokens: int, asks: Asks, price_ratio: Fraction) -> int:
    """The hold for a request: everything the provider can bill for its upstream body, at
    the worst rates that can apply (docs/billing.md, "What the hold covers"). The charge
    stays within it but for the input estimate's error: charge <= hold x (1 + HOLD_TOLERANCE)."""
    inputs = hold_input_tokens(input_tokens, asks)
    input_rate, output_rate = worst_rates(model, asks, inputs)
    fee = max((model.tool_prices.get(name, 0) for name in asks.tools), default=0)
    # each line rounded up, plus one nano a line the bill may round up (it has at most a dozen)
    return (_ceil(inputs * input_rate * price_ratio) + _ceil(asks.output_tokens * output_rate * price_ratio)
            + _ceil(asks.max_tool_calls * fee * price_ratio) + 12)


def _ceil(value: Fraction | int) -> int:
    return math.ceil(value)


def route_hold(model: Model, route: Any, price_ratio: Fraction) -> int:
    """The hold for one built route (:class:`gatewayd.providers.base.Route`): :func:`hold_nano`
    of its input estimate and asks; a route without asks (embeddings) holds its input and
    ``output_tokens`` at the base rates."""
    if route.asks is None:
        return estimate_cost(model, route.input_tokens_estimate, route.output_tokens, price_ratio)
    return hold_nano(model, route.input_tokens_estimate, route.asks, price_ratio)


def prediction_tokens(body: dict[str, Any]) -> int:
    """The tokens of a chat body's predicted output (``prediction.content``): rejected
    predicted tokens are billed as output."""
    prediction = body.get("prediction")
    if not isinstance(prediction, dict) or prediction.get("content") is None:
        return 0
    tally = _Tally()
    _chat_content(prediction.get("content"), tally)
    return tally.total()


def estimate_cost(model: Model, input_tokens: int, output_tokens: int, price_ratio: Fraction) -> int:
    """Input and output at the base rates (embeddings, and callers that know no more)."""
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return charge(model, usage, price_ratio)


def charge(model: Model, usage: Usage, price_ratio: Fraction) -> int:
    """The charge for ``usage``: the total of its :func:`gatewayd.billing.pricing.bill`."""
    return bill(model, usage, price_ratio).total_nano
