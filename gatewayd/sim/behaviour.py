"""What the simulated model answers: marker parsing, token counting and reply planning.

This is the one place that decides behaviour. Each wire module (``openai_chat``,
``openai_responses``, ``anthropic``) turns its request body into a protocol-neutral
:class:`Prompt`, calls :func:`plan`, and renders the resulting :class:`Plan` in its own
wire format. Because every protocol renders the same plan, a test can rely on the same
text, tool calls, stop reason and token counts whichever endpoint it talks to, and the
usage a stream reports always equals what the stream carried.

Everything here is pure: no I/O, no clock, no randomness. The rules are documented for
test authors in ``docs/simulator.md``; keep the two in step.
"""

from __future__ import annotations

import hashlib
import json
import re

import attrs

THINKING_TEXT = "Let me think about this step by step."
TEXT_BEFORE_TOOL = "Let me check."
TOOL_RESULT_PREFIX = "Tool result received: "

#: Stream event kinds, used by the stream driver to place injected faults.
HEAD = 0  #: framing: role chunk, block starts, pings, [DONE] ...
CONTENT = 1  #: carries generated output: a text, thinking or argument fragment
FINISH = 2  #: the first event that closes the reply (finish chunk, message_delta, ...)

#: Server (hosted) tools the simulator can run, by the marker that asks for calls of them.
SERVER_TOOLS = ("web_search", "web_fetch", "file_search", "code_interpreter")

#: OpenAI model ids that always reason (and refuse ``max_tokens`` on chat): o1, o3, o4-mini, gpt-5...
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")

MARKER_PREFIX = "[[sim:"
_MARKER = re.compile(r"\[\[sim:(.*?)\]\]", re.S)
_PIECE = re.compile(r"\s*\S+\s*")


# -- markers -----------------------------------------------------------------------------


@attrs.frozen
class Faults:
    """Injected failures, from ``[[sim:fault=...]]`` markers."""

    status: int | None = None  #: answer with this HTTP status, in the vendor's error shape
    delay_ms: int = 0  #: wait before answering (before the status line)
    chunk_delay_ms: int = 0  #: wait before each stream event after the first
    stall_after: int | None = None  #: after N content events, send nothing until cancelled
    error_after: int | None = None  #: after N content events, send an error event and end
    drop_after: int | None = None  #: after N content events, close the connection abruptly
    invalid_json: bool = False  #: 200 with a body (or first stream event) that is not JSON
    no_usage: bool = False  #: leave usage out (non-stream body, usage chunk, message usage)
    disconnect: bool = False  #: close the connection before sending any byte
    operator_ids: bool = False  #: with ``status``: the vendor's real wording, naming its organization and key

    @property
    def paced(self) -> bool:
        """True when stream events must be written one by one (timing matters)."""
        return bool(
            self.chunk_delay_ms
            or self.stall_after is not None
            or self.error_after is not None
            or self.drop_after is not None
        )

    @property
    def cut(self) -> tuple[str, int] | None:
        """The mid-stream fault, if any, as ``(kind, after_n_content_events)``."""
        for kind in ("drop", "error", "stall"):
            after = getattr(self, f"{kind}_after")
            if after is not None:
                return kind, after
        return None


NO_FAULTS = Faults()

_INT_FAULTS = {"status", "delay_ms", "chunk_delay_ms", "stall_after", "error_after", "drop_after"}
_FLAG_FAULTS = {"invalid_json", "no_usage", "disconnect", "operator_ids"}


@attrs.frozen
class Markers:
    """Everything the ``[[sim:...]]`` markers of one message asked for."""

    text: str | None = None
    words: int | None = None
    tools: int | None = None
    tool: str | None = None  #: ``[[sim:tool=NAME]]``: call this tool, as a named tool_choice would
    args: dict | None = None  #: ``[[sim:args={...}]]``: the calls' arguments, instead of the schema's
    text_then_tool: bool = False
    thinking: bool = False
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0  #: ``[[sim:cache_write_1h=K]]``: 1-hour cache writes (Anthropic)
    reasoning: int | None = None  #: ``[[sim:reasoning=N]]``: think N tokens, mostly hidden
    end: str | None = None  #: ``[[sim:end=WORD]]``: the visible text ends with WORD ...
    tail: int = 0  #: ... ``[[sim:tail=N]]``: ... then goes on for N more words
    input_tokens: int | None = None  #: ``[[sim:input_tokens=N]]``: the prompt counts as N tokens
    service_tier: str | None = None  #: ``[[sim:service_tier=X]]``: the tier the provider says it used
    server: tuple[tuple[str, int], ...] = ()  #: server tool calls asked for: ((name, count), ...)
    blocked: str | None = None  #: Gemini only: the prompt is refused with this blockReason
    faults: Faults = NO_FAULTS


NO_MARKERS = Markers()


def _int(value: str, default: int = 0) -> int:
    try:
        return max(0, int(value.strip()))
    except ValueError:
        return default


def parse_markers(text: str) -> Markers:
    """Read every ``[[sim:...]]`` marker in ``text``; unknown markers are ignored.

    One directive per marker (``[[sim:text=Hi]] [[sim:fault=status:429]]``); a later marker
    overrides an earlier one of the same name, fault markers add up.
    """
    if MARKER_PREFIX not in text:
        return NO_MARKERS
    found: dict = {}
    faults: dict = {}
    server: dict = {}
    for match in _MARKER.finditer(text):
        name, has_value, value = match.group(1).partition("=")
        name = name.strip()
        if name == "text":
            found["text"] = value
        elif name == "words":
            found["words"] = _int(value)
        elif name == "tools":
            found["tools"] = _int(value, 1) if has_value else 1
        elif name == "tool":
            found["tool"] = value.strip()
        elif name == "args":
            try:
                args = json.loads(value)
            except ValueError:
                args = None
            if isinstance(args, dict):
                found["args"] = args
        elif name in ("text_then_tool", "thinking"):
            found[name] = True
        elif name in ("cache_read", "cache_write", "cache_write_1h", "tail"):
            found[name] = _int(value)
        elif name in ("reasoning", "input_tokens"):
            found[name] = _int(value)
        elif name in ("end", "service_tier"):
            found[name] = value.strip()
        elif name in SERVER_TOOLS:
            server[name] = _int(value, 1) if has_value else 1
        elif name == "blocked":
            found["blocked"] = (value.strip() if has_value else "") or "SAFETY"
        elif name == "fault":
            kind, _, arg = value.strip().partition(":")
            if kind in _INT_FAULTS:
                faults[kind] = _int(arg)
            elif kind in _FLAG_FAULTS:
                faults[kind] = True
    if faults:
        found["faults"] = Faults(**faults)
    if server:
        found["server"] = tuple(sorted(server.items()))
    return Markers(**found)


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text) if MARKER_PREFIX in text else text


# -- token counting ----------------------------------------------------------------------


# Media as providers count them: by the image, page or second, never by the text of their data
# (an image whose "data" is words is counted as an image, or refused, never as the words)
MEDIA_TOKENS = 1_000  # an image of about 0.75 megapixels (Anthropic: width x height / 750)
DOCUMENT_TOKENS = 1_500  # a page of a PDF
# the media part types of each protocol (a type another protocol has is not media there: the
# provider refuses it, and it is counted as what it holds)
_MEDIA_TYPES = {
    "chat": {"image_url": MEDIA_TOKENS, "input_audio": MEDIA_TOKENS, "file": DOCUMENT_TOKENS},
    "messages": {"image": MEDIA_TOKENS, "document": DOCUMENT_TOKENS},
    "responses": {"input_image": MEDIA_TOKENS, "input_audio": MEDIA_TOKENS, "input_file": DOCUMENT_TOKENS,
                  "computer_screenshot": MEDIA_TOKENS},
    "gemini": {},
}
_GEMINI_MEDIA_KEYS = ("inlineData", "inline_data", "fileData", "file_data")


def count_words(value, protocol: str | None = None) -> int:
    """Whitespace-separated words (``str.split()``) in every string inside ``value``, and a
    flat count for each media part of ``protocol`` (an image, a document, an audio clip:
    ``MEDIA_TOKENS``, ``DOCUMENT_TOKENS``), whatever its data holds.

    Dict keys are not counted; numbers, booleans and null count nothing. A text block
    (``{"type": "text", "text": ...}``) counts its text only, as the same text given as a
    string does, and a ``cache_control`` marker counts nothing: marking a prompt for the cache
    does not change its size (a gateway that places breakpoints bills the same input).
    """
    if isinstance(value, str):
        return len(value.split())
    media_types = _MEDIA_TYPES.get(protocol or "", {})
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item.split())
        elif isinstance(item, dict):
            kind = item.get("type")
            if isinstance(kind, str) and kind in media_types:
                total += media_types[kind]
                continue
            if kind == "text" and isinstance(item.get("text"), str):
                total += len(item["text"].split())
                continue
            if "cache_control" in item:
                stack.extend(v for k, v in item.items() if k != "cache_control")
                continue
            media = next((k for k in _GEMINI_MEDIA_KEYS if k in item), None) if protocol == "gemini" else None
            if media is not None:
                total += MEDIA_TOKENS
                stack.extend(v for k, v in item.items() if k != media)
                continue
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


# protocol -> (fields counted, the list of messages, the separate system prompt field)
_COUNTED = {
    "chat": (("messages", "tools"), "messages", None),
    "messages": (("system", "messages", "tools"), "messages", "system"),
    "responses": (("instructions", "input", "tools"), "input", "instructions"),
    "gemini": (("systemInstruction", "contents", "tools"), "contents", "systemInstruction"),
}
_ALIASES = {"openai": "chat", "chat_completions": "chat", "anthropic": "messages"}


def count_input_tokens(body: dict, protocol: str) -> int:
    """The simulator's prompt token count for a request body (the uncached part).

    ``protocol`` is ``"chat"`` (alias ``"openai"``), ``"responses"``, ``"messages"``
    (alias ``"anthropic"``) or ``"gemini"``. The count is the number of words
    (:func:`count_words`) in every string value inside the counted fields (chat:
    ``messages``, ``tools``; messages: ``system``, ``messages``, ``tools``; responses:
    ``instructions``, ``input``, ``tools``; gemini: ``systemInstruction``, ``contents``,
    ``tools``), plus 3 per message, input item or content (a string ``input`` is one
    item), plus 3 when a top-level ``system``/``instructions``/``systemInstruction`` is
    present; at least 1.
    """
    protocol = _ALIASES.get(protocol, protocol)
    fields, list_field, system_field = _COUNTED[protocol]
    total = 0
    for field in fields:
        value = body.get(field)
        if value is not None:
            total += count_words(value, protocol)
    items = body.get(list_field)
    if isinstance(items, list):
        total += 3 * len(items)
    elif items:
        total += 3
    if system_field is not None and body.get(system_field):
        total += 3
    return max(total, 1)


# -- the neutral request and the plan ----------------------------------------------------


@attrs.frozen
class Tool:
    name: str
    schema: dict | None = None


@attrs.frozen
class Prompt:
    """What the planner needs to know about a request, whatever its wire protocol."""

    user_text: str = ""  #: text of the last user message that has text (markers live here)
    tool_result: str | None = None  #: text of the last tool result, when results end the request
    ends_with_user: bool = True  #: the last message is a user turn (not a tool result)
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  #: "auto", "none" or "required"
    forced_tool: str | None = None  #: tool_choice naming one tool
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    thinking: bool = False  #: the request itself asks for thinking / reasoning
    input_tokens: int = 1
    choices: int = 1  #: chat ``n``, Gemini ``candidateCount``: each choice is generated (and billed)
    service_tier: str | None = None  #: the tier the answer reports (each wire module maps the request's)
    server_tools: tuple[tuple[str, int | None], ...] = ()  #: offered server tools: (name, max_uses)
    server_tool_limit: int | None = None  #: Responses ``max_tool_calls``: all built-in calls together
    cache_ttl_1h: bool = False  #: the request's cache breakpoints ask for 1-hour writes (Anthropic)


@attrs.frozen
class ToolCall:
    index: int
    name: str
    arguments: str  #: the JSON text, exactly as streamed
    input: dict


@attrs.frozen
class ServerCall:
    """One call of a server (hosted) tool: the provider runs it and bills it per call."""

    index: int  #: 0, 1, ... over all server calls of the reply
    name: str  #: one of SERVER_TOOLS
    query: str


@attrs.frozen
class Plan:
    """The reply, decided once and rendered by every wire module."""

    thinking: str
    signature: str
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop: str  #: "end_turn", "max_tokens", "tool_use" or "stop_sequence"
    stop_sequence: str | None
    input_tokens: int  #: counted prompt, without the cache markers' tokens
    cache_read: int
    cache_write: int
    thinking_tokens: int
    output_tokens: int
    faults: Faults
    blocked: str | None = None  #: Gemini renders a refused prompt (promptFeedback.blockReason)
    cache_write_1h: int = 0  #: the 1-hour part of ``cache_write``
    choices: int = 1  #: identical choices generated; usage counts all of them
    service_tier: str | None = None  #: what the answer reports as the tier used
    server_calls: tuple[ServerCall, ...] = ()  #: server tool calls made (and billed)
    server_refused: tuple[str, ...] = ()  #: server tools asked past their ``max_uses`` (not run)

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt, chat-format style: counted + cache read + cache write."""
        return self.input_tokens + self.cache_read + self.cache_write

    @property
    def all_output_tokens(self) -> int:
        """Output of every choice together (what the provider bills)."""
        return self.output_tokens * self.choices

    @property
    def all_thinking_tokens(self) -> int:
        return self.thinking_tokens * self.choices

    def server_count(self, name: str) -> int:
        return sum(1 for call in self.server_calls if call.name == name)


def words(text: str) -> int:
    return len(text.split())


def pieces(text: str) -> list[str]:
    """Stream pieces: one per word, each with its surrounding whitespace; joins back exactly."""
    found = _PIECE.findall(text)
    if not found:
        return [text] if text else []
    return found


def fragments(text: str, parts: int = 3) -> list[str]:
    """Split a JSON string into about ``parts`` non-empty fragments (for argument deltas)."""
    size = len(text)
    if size < parts:
        return [text] if text else []
    cuts = [size * i // parts for i in range(parts + 1)]
    return [text[cuts[i] : cuts[i + 1]] for i in range(parts)]


def first_words(text: str, count: int) -> str:
    """The first ``count`` words of ``text``, with their original spacing."""
    return "".join(pieces(text)[:count]).rstrip()


def default_reply(user_text: str) -> str:
    head = strip_markers(user_text).split()[:8]
    if not head:
        return "This is a simulated reply."
    return "This is a simulated reply to: " + " ".join(head) + "."


def signature_for(thinking: str) -> str:
    return "sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


def arguments_for(schema: dict | None) -> dict:
    """Deterministic arguments from a JSON schema's top-level properties.

    string -> first enum value or ``"sim-<name>"``; number/integer -> 42; boolean -> true;
    anything else -> null.
    """
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return {}
    args = {}
    for name, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind == "string":
            enum = spec.get("enum")
            args[name] = enum[0] if isinstance(enum, list) and enum else f"sim-{name}"
        elif kind in ("number", "integer"):
            args[name] = 42
        elif kind == "boolean":
            args[name] = True
        else:
            args[name] = None
    return args


def is_reasoning_model(model) -> bool:
    """OpenAI's reasoning models by id (o1, o3, o4-mini, gpt-5...; a ``provider/`` prefix ignored)."""
    return isinstance(model, str) and bool(_REASONING_MODEL.match(model.rpartition("/")[2].lower()))


def _server_calls(prompt: Prompt, marks: Markers) -> tuple[list[ServerCall], list[str]]:
    """The server tool calls the markers ask for, for tools the request offers (in the request's
    order): each tool's ``max_uses`` and the request's ``server_tool_limit`` stop them (the first
    call past a limit is refused, the rest never asked)."""
    asked = dict(marks.server)
    calls: list[ServerCall] = []
    refused: list[str] = []
    for name, limit in prompt.server_tools:  # in the order the request offers them
        count = asked.pop(name, 0)
        for k in range(count):
            if (limit is not None and k >= limit) or (
                    prompt.server_tool_limit is not None and len(calls) >= prompt.server_tool_limit):
                refused.append(name)
                break
            calls.append(ServerCall(len(calls), name, f"sim {name.replace('_', ' ')} {k + 1}"))
    return calls, refused


def _call_count(prompt: Prompt, marks: Markers) -> int:
    if not prompt.tools or prompt.tool_choice == "none" or prompt.tool_result is not None:
        return 0
    forced = prompt.tool_choice == "required" or prompt.forced_tool is not None or marks.tool is not None
    if marks.tools is not None:
        return max(marks.tools, 1 if forced else 0)
    if marks.text_then_tool or forced:
        return 1
    if marks.text is not None or marks.words is not None:
        return 0
    return 1 if prompt.ends_with_user else 0


def _tool_calls(prompt: Prompt, count: int, marks: Markers = NO_MARKERS) -> list[ToolCall]:
    tools = prompt.tools
    wanted = prompt.forced_tool if prompt.forced_tool is not None else marks.tool
    if wanted is not None:
        named = [t for t in tools if t.name == wanted]
        tools = tuple(named) or tools
    calls = []
    for index in range(count):
        tool = tools[index % len(tools)]
        args = marks.args if marks.args is not None else arguments_for(tool.schema)
        calls.append(ToolCall(index, tool.name, json.dumps(args, ensure_ascii=False), args))
    return calls


def plan(prompt: Prompt) -> Plan:
    """Decide the reply for one request. See docs/simulator.md for the rules."""
    marks = parse_markers(prompt.user_text)
    thinks = prompt.thinking or marks.thinking or bool(marks.reasoning)
    if marks.reasoning == 0:
        thinks = False
    thinking = THINKING_TEXT if thinks else ""
    # the reasoning the model bills: the visible thinking text, or N tokens of which only a
    # summary (at most the thinking text) is ever shown
    thinking_tokens = marks.reasoning if (thinks and marks.reasoning) else words(thinking)
    if thinking_tokens < words(thinking):
        thinking = first_words(thinking, thinking_tokens)

    explicit = marks.text
    if explicit is None and marks.words is not None:
        explicit = " ".join(f"w{i}" for i in range(1, marks.words + 1))
    count = _call_count(prompt, marks)
    if prompt.tool_result is not None:
        text = TOOL_RESULT_PREFIX + prompt.tool_result[:60]
    elif count:
        text = explicit if explicit is not None else (TEXT_BEFORE_TOOL if marks.text_then_tool else "")
    else:
        text = explicit if explicit is not None else default_reply(prompt.user_text)
    if marks.end is not None and prompt.tool_result is None:
        text = f"{text} {marks.end}".strip()
    if marks.tail and prompt.tool_result is None:
        text = " ".join([text] + [f"t{i}" for i in range(1, marks.tail + 1)]).strip()
    calls = _tool_calls(prompt, count, marks) if count else []
    stop = "tool_use" if calls else "end_turn"
    stop_sequence = None

    # Stop sequences cut the visible text before the first one found; generation ends there.
    best = -1
    for candidate in prompt.stop:
        if candidate:
            at = text.find(candidate)
            if at != -1 and (best == -1 or at < best):
                best, stop_sequence = at, candidate
    if stop_sequence is not None:
        text, calls, stop = text[:best], [], "stop_sequence"

    # max_tokens: thinking (hidden reasoning included) spends the budget first, then text,
    # then whole tool calls.
    if prompt.max_tokens is not None:
        budget = max(prompt.max_tokens, 0)
        if thinking_tokens > budget:
            thinking, text, calls, stop = first_words(thinking, budget), "", [], "max_tokens"
            thinking_tokens = budget
        else:
            budget -= thinking_tokens
            if words(text) > budget:
                text, calls, stop = first_words(text, budget), [], "max_tokens"
            else:
                budget -= words(text)
                kept = []
                for call in calls:
                    cost = 1 + words(call.arguments)
                    if cost > budget:
                        stop = "max_tokens"
                        break
                    kept.append(call)
                    budget -= cost
                calls = kept
        if stop == "max_tokens":
            stop_sequence = None

    output = thinking_tokens + words(text) + sum(1 + words(c.arguments) for c in calls)
    server_calls, refused = _server_calls(prompt, marks)
    cache_write_1h = marks.cache_write_1h + (marks.cache_write if prompt.cache_ttl_1h else 0)
    return Plan(
        thinking=thinking,
        signature=signature_for(thinking) if thinking else "",
        text=text,
        tool_calls=tuple(calls),
        stop=stop,
        stop_sequence=stop_sequence,
        input_tokens=prompt.input_tokens if marks.input_tokens is None else marks.input_tokens,
        cache_read=marks.cache_read,
        cache_write=marks.cache_write + marks.cache_write_1h,
        thinking_tokens=thinking_tokens,
        output_tokens=output,
        faults=marks.faults,
        blocked=marks.blocked,
        cache_write_1h=cache_write_1h,
        choices=prompt.choices,
        service_tier=marks.service_tier or prompt.service_tier,
        server_calls=tuple(server_calls),
        server_refused=tuple(refused),
    )


# -- helpers shared by the wire modules --------------------------------------------------


def text_of(content, part_types: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """The text of a message ``content``: a string, or the text parts of a list joined by \\n."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") in part_types and isinstance(part.get("text"), str)
        ]
        return "\n".join(texts)
    return ""


def max_tokens_of(body: dict, *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
