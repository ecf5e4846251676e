"""The one reader of a chat-format (OpenAI Chat Completions) request that the gateway
translates: :func:`read_chat_request` parses the body once into a neutral, typed
:class:`ChatRequest`, and every chat -> X translator is a pure writer from it
(``chat_to_messages``, ``chat_to_gemini``; a Converse writer would be the third).

One rule per field lives here, with its error text: what a message, a content part, a
tool call, a tool, ``tool_choice``, ``stop``, the caps, the sampling fields,
``response_format`` and ``reasoning_effort`` must look like. Bad input raises
:class:`TranslationError` naming the client's own field (``messages[3].content[0]``),
answered 400. Fields no writer can carry (``n > 1``, ``logprobs``, audio output, the
deprecated ``functions``) are refused here, because the neutral form cannot hold them.
What one target cannot carry but another can (audio input, an image type, an image URL
whose type is unknown, images in a tool result) is the writer's refusal; the parts such
refusals name carry their ``where``.

The neutral form, for a writer's author:

- ``system``: the text of every ``system`` / ``developer`` message, in order, blank
  text dropped (the roles mean the same to every target we write).
- ``turns``: one value per message that says something: a ``str`` (a user message that
  is one text: the commonest turn, made without a value around it), :class:`UserTurn`
  (a user message of parts), :class:`AssistantTurn` (text, tool calls, echoed thinking)
  and :class:`ToolResult` (on the user's side for every target). In the client's order,
  but for one rule: in a run of the user's side (the turns between two assistant turns)
  the tool results come first, in their order (Anthropic and Converse need them right
  after the calls they answer, and Gemini takes them so). Runs of one side are not
  merged: each writer merges them into one message of its own, concatenating what each
  turn writes. A message whose text is all blank (and that carries nothing else) is left
  out, since no target accepts empty text; ``turns`` is never empty, and may start with
  the assistant's.
- a part is a ``str`` (text, never blank; the cheap common case), :class:`Image` (base64),
  :class:`ImageUrl` (http(s)), :class:`Document` (base64, any media type: see
  :func:`pdf_only`) or :class:`Audio` (base64 ``wav`` / ``mp3``).
- tool call arguments are parsed (a dict, never a silent ``{}`` for bad JSON); a tool
  result knows the ``name`` of the call it answers (``None`` when no earlier call has its
  id: targets that pair by name refuse it, targets that pair by id may not need it).
- ``tools`` (function tools only), ``tool_choice`` (:class:`ToolChoice`, kept even when
  there are no tools: writers drop it then), ``parallel_tool_calls``.
- the client's prompt-cache markers (``cache_control``, Anthropic's, which some chat and
  responses clients send): ``UserTurn.cache`` and ``ChatRequest.system_cache`` (the marked
  parts' indexes), ``ToolResult.cache``, ``Tool.cache``; empty or None in the common case.
  Only the messages writer reads them, and only when the route carries them.
- scalars, validated, not converted: ``max_tokens`` (``max_completion_tokens`` first),
  ``temperature`` / ``top_p`` (numbers, in the chat format's ranges: targets clamp),
  ``seed``, ``stop`` (non-empty strings), ``response_format`` (``None`` for text),
  ``reasoning_effort`` (one of :data:`REASONING_EFFORTS`: each writer maps every value),
  ``stream``, ``include_usage``, ``user_id``.

A Converse writer, for one, would map it so: ``system`` -> ``system`` text blocks; a
run of one side -> a message, ``str`` -> ``text``, :class:`Image` -> ``image`` (its format from the
media type), :class:`Document` -> ``document`` (``pdf_only`` or its own list of types, ``filename`` as
the name), :class:`ToolCall` -> ``toolUse`` (the id as is, arguments as ``input``),
:class:`ToolResult` -> ``toolResult``, :class:`Thinking` -> ``reasoningContent`` (text and
signature); ``tools`` -> ``toolConfig.tools[].toolSpec``, :class:`ToolChoice` ->
``toolChoice`` (``auto`` / ``any`` / ``tool``); ``max_tokens``, ``temperature``, ``top_p``,
``stop`` -> ``inferenceConfig``; and refuse :class:`ImageUrl` and :class:`Audio` with the
part's ``where``, as the messages writer refuses audio.

Every part but text carries ``where``, the client's content part
(``messages[1].content[0]``), so a writer's refusal names the client's field.

Pure and fast: no I/O, the body is read once, and the location of an error (the
``param``) is only formatted when there is an error. The values there is one of per
request (:class:`ChatRequest`, :class:`ToolChoice`, :class:`ResponseFormat`) are frozen
attrs classes; those there is one of per message, part, tool call or tool are typed
``NamedTuple``s, equally immutable and less than half as dear to make (0.2 us against
0.45 us for a frozen slotted attrs class, measured here): an agent body of a few hundred
KB makes three or four of them per tool round, and with attrs the two-step translation was
7-15 % slower than the one-step translators it replaces (for the same reason a user
message of one text is its ``str``). Writers tell them apart by class
(``isinstance(turn, UserTurn)``), never by equality: two NamedTuples of equal fields
compare equal whatever their class.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Union

import attrs
import orjson

from gatewayd.formats.chat_fields import parse_data_url, stop_sequences, text_part
from gatewayd.formats.errors import TranslationError

__all__ = [
    "REASONING_EFFORTS",
    "AssistantTurn",
    "Audio",
    "CacheMarks",
    "ChatRequest",
    "Document",
    "Image",
    "ImageUrl",
    "Part",
    "RedactedThinking",
    "ResponseFormat",
    "Thinking",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolResult",
    "Turn",
    "UserTurn",
    "pdf_only",
    "read_chat_request",
]

#: The ``reasoning_effort`` values the gateway accepts for every translated model, least
#: first: OpenAI's list (``none`` ... ``xhigh``) and ``max``. Each writer maps every one of
#: them to what its target has (a budget, a level), saturating at the target's largest.
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_EFFORTS = frozenset(REASONING_EFFORTS)

#: ``input_audio.format`` -> the media type of the audio.
AUDIO_MEDIA_TYPES: dict[str, str] = {"wav": "audio/wav", "mp3": "audio/mp3"}

_TOOL_CHOICE_MODES = frozenset({"auto", "required", "none"})


class Image(NamedTuple):
    """An inline (base64) image; its type is checked by each writer (targets differ)."""

    media_type: str
    data: str
    where: str


class ImageUrl(NamedTuple):
    """An ``http(s)://`` image the target fetches itself."""

    url: str
    where: str


class Document(NamedTuple):
    """An inline file (``file.file_data``)."""

    media_type: str
    data: str
    filename: str | None
    where: str


class Audio(NamedTuple):
    """Inline audio input."""

    format: str
    data: str
    where: str

    @property
    def media_type(self) -> str:
        return AUDIO_MEDIA_TYPES[self.format]


Part = Union[str, Image, ImageUrl, Document, Audio]


class ToolCall(NamedTuple):
    id: str
    name: str
    arguments: dict[str, Any]


class Thinking(NamedTuple):
    """Signed thinking our own answers carried, echoed back (unsigned thinking is dropped:
    no target accepts thinking it cannot verify)."""

    thinking: str
    signature: str


class RedactedThinking(NamedTuple):
    data: str


#: Prompt-cache markers of a turn: (index of the marked part, the client's ``cache_control``),
#: empty for the common turn that has none. Only the messages writer reads them.
CacheMarks = tuple[tuple[int, dict[str, Any]], ...]


class UserTurn(NamedTuple):
    parts: tuple[Part, ...]
    cache: CacheMarks = ()


class AssistantTurn(NamedTuple):
    """Text (refusals included: they are what the assistant said), then tool calls; echoed
    thinking beside them."""

    parts: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: tuple[Thinking | RedactedThinking, ...] = ()


class ToolResult(NamedTuple):
    """A ``tool`` message. ``content`` is the client's string as sent (possibly empty) or
    its parts (blank text dropped); ``message`` is its position in ``messages``, for errors."""

    call_id: str
    name: str | None
    content: str | tuple[Part, ...]
    message: int
    cache: dict[str, Any] | None = None  # a part of the result was marked for the prompt cache


Turn = Union[str, UserTurn, AssistantTurn, ToolResult]


class Tool(NamedTuple):
    """A function tool; ``parameters`` is the client's JSON schema (``None`` when absent);
    ``position`` its place in ``tools``, for errors."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None
    position: int
    cache: dict[str, Any] | None = None  # the tool's ``cache_control``


@attrs.frozen
class ToolChoice:
    mode: Literal["auto", "required", "none", "function"]
    name: str | None = None  # the function, when mode is "function"


@attrs.frozen
class ResponseFormat:
    kind: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None  # json_schema only
    name: str | None = None
    strict: bool | None = None


@attrs.frozen
class ChatRequest:
    system: tuple[str, ...]
    turns: tuple[Turn, ...]
    system_cache: CacheMarks = ()  # marked system texts: (index in ``system``, ``cache_control``)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    stream: bool | None = None
    include_usage: bool = False
    user_id: str | None = None


def read_chat_request(body: object) -> ChatRequest:
    """Parse a chat-format request body; raise :class:`TranslationError` on bad input."""
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    _refuse_uncarried_features(body)
    system, turns, system_cache = _read_messages(body.get("messages"))
    stream_options = body.get("stream_options")
    return ChatRequest(
        system=system,
        turns=turns,
        system_cache=system_cache,
        tools=_read_tools(body.get("tools")),
        tool_choice=_read_tool_choice(body.get("tool_choice")),
        parallel_tool_calls=_optional_bool(body, "parallel_tool_calls"),
        max_tokens=_max_tokens(body),
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        seed=_seed(body),
        stop=tuple(stop_sequences(body.get("stop"))),
        response_format=_read_response_format(body.get("response_format")),
        reasoning_effort=_reasoning_effort(body.get("reasoning_effort")),
        stream=_optional_bool(body, "stream"),
        include_usage=isinstance(stream_options, dict) and stream_options.get("include_usage") is True,
        user_id=_user_id(body),
    )


def pdf_only(document: Document) -> str:
    """The base64 data of a PDF; another file type is refused. The rule of every target
    written so far (a target that reads more types reads ``document.media_type`` itself)."""
    if document.media_type != "application/pdf":
        raise TranslationError(f"file type {document.media_type!r} is not supported for this model; only PDF",
                               f"{document.where}.file.file_data")
    return document.data


# --- fields that no writer can carry ----------------------------------------------------------


def _refuse_uncarried_features(body: dict[str, Any]) -> None:
    """Refuse what would change the answer if dropped. Fields that only tune delivery
    (``seed`` where a target has none, penalties, ``store``, ``service_tier``...) are read
    or ignored by the writers."""
    n = body.get("n")
    if n is not None and n != 1:
        raise TranslationError("n > 1 is not supported for this model; send one request per choice", "n")
    if body.get("logprobs") is True:
        raise TranslationError("logprobs are not supported for this model", "logprobs")
    if body.get("functions") is not None or body.get("function_call") is not None:
        param = "functions" if body.get("functions") is not None else "function_call"
        raise TranslationError("the deprecated functions/function_call fields are not supported; use tools", param)
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        raise TranslationError("audio output is not supported for this model", "modalities")


# --- messages ---------------------------------------------------------------------------------


def _blank(text: str) -> bool:
    """No target accepts empty or whitespace-only text (``isspace`` copies nothing)."""
    return not text or text.isspace()


def _cache_control(part: Any) -> dict[str, Any] | None:
    """A content part's (or tool's) prompt-cache marker, as the client wrote it (its shape is
    the provider's to judge), or None."""
    control = part.get("cache_control") if isinstance(part, dict) else None
    return control if isinstance(control, dict) else None


def _read_messages(messages: Any) -> tuple[tuple[str, ...], tuple[Turn, ...], CacheMarks]:
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages must be a non-empty array", "messages")
    system: list[str] = []
    system_cache: list[tuple[int, dict[str, Any]]] = []
    turns: list[Turn] = []
    append = turns.append
    results_end = -1  # where the next tool result goes: after those opening the user's run; -1 out of one
    call_names: dict[str, str] = {}  # tool call id -> function name, for the results that answer them
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TranslationError(f"messages[{i}] must be an object", f"messages[{i}]")
        role = message.get("role")
        if role == "user":
            content = message.get("content")
            if isinstance(content, str):  # the common case, inline (and the blank test of _blank)
                if content and not content.isspace():
                    if results_end < 0:
                        results_end = len(turns)
                    append(content)  # a user message of one text is its str
            else:
                marks: list[tuple[int, dict[str, Any]]] = []
                parts = _parts(content, i, marks)
                if parts:
                    if results_end < 0:
                        results_end = len(turns)
                    append(UserTurn(parts, tuple(marks)))
        elif role == "assistant":
            turn = _assistant_turn(message, i, call_names)
            if turn is not None:
                results_end = -1
                append(turn)
        elif role == "tool":
            if results_end < 0:
                results_end = len(turns)
            turns.insert(results_end, _tool_result(message, i, call_names))
            results_end += 1
        elif role in ("system", "developer"):
            system.extend(_system_texts(message.get("content"), i, len(system), system_cache))
        elif role == "function":
            raise TranslationError("the deprecated function role is not supported; use tool messages",
                                   f"messages[{i}].role")
        else:
            raise TranslationError(f"messages[{i}].role must be one of system, developer, user, assistant, tool",
                                   f"messages[{i}].role")
    if not turns:
        raise TranslationError("messages must contain at least one user or assistant message", "messages")
    return tuple(system), tuple(turns), tuple(system_cache)


def _system_texts(content: Any, i: int, first: int, marks: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """Content of system/developer messages: a string or text parts (a marked part's marker
    goes to ``marks``, at its index among all system texts, which start at ``first``)."""
    if isinstance(content, str):
        return [] if _blank(content) else [content]
    where = f"messages[{i}].content"
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string or an array of text parts", where)
    texts = []
    for j, part in enumerate(content):
        text = text_part(part, f"{where}[{j}]")
        if not _blank(text):
            texts.append(text)
            control = _cache_control(part)
            if control is not None:
                marks.append((first + len(texts) - 1, control))
    return texts


def _parts(content: Any, i: int, marks: list[tuple[int, dict[str, Any]]] | None = None) -> tuple[Part, ...]:
    """User (and tool) content: a string or content parts; blank text dropped."""
    if isinstance(content, str):
        return () if _blank(content) else (content,)
    if not isinstance(content, list):
        where = f"messages[{i}].content"
        raise TranslationError(f"{where} must be a string or an array of content parts", where)
    parts: list[Part] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                text = text_part(part, f"messages[{i}].content[{j}]")  # raises
            if not _blank(text):
                parts.append(text)
                if marks is not None and "cache_control" in part and (control := _cache_control(part)):
                    marks.append((len(parts) - 1, control))
            continue
        where = f"messages[{i}].content[{j}]"
        if kind == "image_url":
            parts.append(_image(part.get("image_url"), where))
        elif kind == "file":
            parts.append(_document(part.get("file"), where))
        elif kind == "input_audio":
            parts.append(_audio(part.get("input_audio"), where))
        else:
            raise TranslationError(f"{where} has an unsupported content part type: {kind!r}", f"{where}.type")
        if marks is not None and "cache_control" in part and (control := _cache_control(part)):
            marks.append((len(parts) - 1, control))
    return tuple(parts)


def _image(image_url: Any, where: str) -> Image | ImageUrl:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    url_where = f"{where}.image_url.url"
    if not isinstance(url, str) or not url:
        raise TranslationError(f"{url_where} must be a non-empty string", url_where)
    if url.startswith("data:"):
        media_type, data = parse_data_url(url, url_where)
        return Image(media_type, data, where)
    if url.startswith(("https://", "http://")):
        return ImageUrl(url, where)
    raise TranslationError("image URLs must be http(s) URLs or base64 data URLs", url_where)


def _document(file: Any, where: str) -> Document:
    """Inline files only: an uploaded file id lives at the other vendor."""
    if not isinstance(file, dict):
        raise TranslationError(f"{where}.file must be an object", f"{where}.file")
    file_data = file.get("file_data")
    filename = file.get("filename")
    filename = filename if isinstance(filename, str) else None
    data_where = f"{where}.file.file_data"
    if not isinstance(file_data, str) or not file_data:
        if file.get("file_id") is not None:
            raise TranslationError("uploaded file ids are not supported for this model; send file_data",
                                   f"{where}.file.file_id")
        raise TranslationError(f"{data_where} must be a base64 data URL", data_where)
    if file_data.startswith("data:"):
        media_type, data = parse_data_url(file_data, data_where)
    elif filename is not None and filename.lower().endswith(".pdf"):
        media_type, data = "application/pdf", file_data  # bare base64 with a .pdf name
    else:
        raise TranslationError(f"{data_where} must be a base64 data URL", data_where)
    return Document(media_type, data, filename, where)


def _audio(audio: Any, where: str) -> Audio:
    inner = f"{where}.input_audio"
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str) or not audio["data"]:
        raise TranslationError(f"{inner}.data must be base64 audio", f"{inner}.data")
    fmt = audio.get("format")
    if not isinstance(fmt, str) or fmt not in AUDIO_MEDIA_TYPES:  # a list is no key: check first
        raise TranslationError(f"{inner}.format must be one of {', '.join(AUDIO_MEDIA_TYPES)}", f"{inner}.format")
    return Audio(fmt, audio["data"], where)


def _assistant_turn(message: dict[str, Any], i: int, call_names: dict[str, str]) -> AssistantTurn | None:
    if message.get("function_call") is not None:
        raise TranslationError("the deprecated function_call field is not supported; use tool_calls",
                               f"messages[{i}].function_call")
    thinking_blocks = message.get("thinking_blocks")
    thinking = () if thinking_blocks is None else _echoed_thinking(thinking_blocks, f"messages[{i}].thinking_blocks")
    content = message.get("content")
    if content is None:
        texts: tuple[str, ...] = ()
    elif isinstance(content, str):
        texts = () if _blank(content) else (content,)
    else:
        texts = _assistant_texts(content, f"messages[{i}].content")
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        calls: tuple[ToolCall, ...] = ()
    elif isinstance(tool_calls, list):
        calls = tuple([_tool_call(call, i, k, call_names) for k, call in enumerate(tool_calls)])
    else:
        raise TranslationError(f"messages[{i}].tool_calls must be an array", f"messages[{i}].tool_calls")
    if not (texts or calls or thinking):
        return None
    return AssistantTurn(texts, calls, thinking)


def _echoed_thinking(thinking_blocks: Any, where: str) -> tuple[Thinking | RedactedThinking, ...]:
    """Only the fields a target accepts are kept (streamed blocks also carry an ``index``);
    a thinking block without a signature cannot be verified upstream, so it is dropped, as
    is a bare ``reasoning_content``."""
    if not isinstance(thinking_blocks, list):
        raise TranslationError(f"{where} must be an array", where)
    blocks: list[Thinking | RedactedThinking] = []
    for k, block in enumerate(thinking_blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking":
            signature, thinking = block.get("signature"), block.get("thinking")
            if isinstance(signature, str) and signature and isinstance(thinking, str):
                blocks.append(Thinking(thinking, signature))
        elif kind == "redacted_thinking":
            if not isinstance(block.get("data"), str):
                raise TranslationError(f"{where}[{k}].data must be a string", f"{where}[{k}].data")
            blocks.append(RedactedThinking(block["data"]))
        else:
            raise TranslationError(f"{where}[{k}] must be a thinking or redacted_thinking block", f"{where}[{k}]")
    return tuple(blocks)


def _assistant_texts(content: Any, where: str) -> tuple[str, ...]:
    if not isinstance(content, list):
        raise TranslationError(f"{where} must be a string, an array of text parts, or null", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            text = part["refusal"]  # what the assistant said, so it stays in the history
        else:
            text = text_part(part, f"{where}[{j}]")
        if not _blank(text):
            texts.append(text)
    return tuple(texts)


def _tool_call(call: Any, i: int, k: int, call_names: dict[str, str]) -> ToolCall:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        where = f"messages[{i}].tool_calls[{k}]"
        raise TranslationError(f"{where} must be a function tool call", f"{where}.type")
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    name = function.get("name")
    if not isinstance(name, str) or not name:
        where = f"messages[{i}].tool_calls[{k}].function.name"
        raise TranslationError(f"{where} must be a non-empty string", where)
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        where = f"messages[{i}].tool_calls[{k}].id"
        raise TranslationError(f"{where} must be a non-empty string", where)
    call_names[call_id] = name
    return ToolCall(call_id, name, _arguments(function.get("arguments"), i, k))


def _arguments(arguments: Any, i: int, k: int) -> dict[str, Any]:
    """Never a silent ``{}`` for arguments we cannot read: the model would be told it
    called the tool with nothing."""
    if isinstance(arguments, str):
        if not arguments or arguments.isspace():
            return {}
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            where = f"messages[{i}].tool_calls[{k}].function.arguments"
            raise TranslationError(f"{where} is not valid JSON: {exc}", where) from None
        if isinstance(parsed, dict):
            return parsed
        where = f"messages[{i}].tool_calls[{k}].function.arguments"
        raise TranslationError(f"{where} must encode a JSON object", where)
    if isinstance(arguments, dict):
        return arguments
    if arguments is None:
        return {}
    where = f"messages[{i}].tool_calls[{k}].function.arguments"
    raise TranslationError(f"{where} must be a JSON-encoded string", where)


def _tool_result(message: dict[str, Any], i: int, call_names: dict[str, str]) -> ToolResult:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        where = f"messages[{i}].tool_call_id"
        raise TranslationError(f"{where} must be a non-empty string", where)
    content = message.get("content")
    marks: list[tuple[int, dict[str, Any]]] = []
    if isinstance(content, str):
        pass
    elif content is None:
        content = ""
    elif isinstance(content, list):
        content = _parts(content, i, marks)
    else:
        where = f"messages[{i}].content"
        raise TranslationError(f"{where} must be a string or an array of content parts", where)
    return ToolResult(call_id, call_names.get(call_id), content, i, marks[-1][1] if marks else None)


# --- tools ------------------------------------------------------------------------------------


def _read_tools(tools: Any) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise TranslationError("tools must be an array", "tools")
    return tuple(_tool(tool, i) for i, tool in enumerate(tools))


def _tool(tool: Any, i: int) -> Tool:
    """``strict`` is not read: no target written so far has a per-tool equivalent."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise TranslationError(f"tool type {kind!r} is not supported for this model; only function tools",
                               f"tools[{i}].type")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        where = f"tools[{i}].function.name"
        raise TranslationError(f"{where} must be a non-empty string", where)
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        where = f"tools[{i}].function.parameters"
        raise TranslationError(f"{where} must be a JSON schema object", where)
    description = function.get("description")
    description = description if isinstance(description, str) and description else None
    return Tool(function["name"], description, parameters, i, _cache_control(tool))


def _read_tool_choice(choice: Any) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str) and choice in _TOOL_CHOICE_MODES:
        return ToolChoice(choice)  # type: ignore[arg-type]
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise TranslationError("tool_choice.function.name must be a non-empty string", "tool_choice.function.name")
        return ToolChoice("function", function["name"])
    raise TranslationError(
        'tool_choice must be "auto", "required", "none" or {"type": "function", "function": {"name": ...}}',
        "tool_choice",
    )


# --- scalar fields ----------------------------------------------------------------------------


def _optional_bool(body: dict[str, Any], field: str) -> bool | None:
    value = body.get(field)
    if value is not None and not isinstance(value, bool):
        raise TranslationError(f"{field} must be a boolean", field)
    return value


def _max_tokens(body: dict[str, Any]) -> int | None:
    """``max_completion_tokens`` (the current name) first, else ``max_tokens``."""
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TranslationError(f"{field} must be a positive integer", field)
        return value
    return None


def _number(body: dict[str, Any], field: str) -> float | None:
    value = body.get(field)
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise TranslationError(f"{field} must be a number", field)
    return value


def _seed(body: dict[str, Any]) -> int | None:
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise TranslationError("seed must be an integer", "seed")
    return seed


def _read_response_format(value: Any) -> ResponseFormat | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise TranslationError("response_format.json_schema.schema must be a JSON schema object",
                                   "response_format.json_schema.schema")
        name, strict = spec.get("name"), spec.get("strict")
        return ResponseFormat("json_schema", schema, name if isinstance(name, str) else None,
                              strict if isinstance(strict, bool) else None)
    raise TranslationError('response_format.type must be "text", "json_object" or "json_schema"',
                           "response_format.type")


def _reasoning_effort(effort: Any) -> str | None:
    if effort is None:
        return None
    if not isinstance(effort, str) or effort not in _EFFORTS:  # a list is no key: check first
        raise TranslationError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}", "reasoning_effort")
    return effort


def _user_id(body: dict[str, Any]) -> str | None:
    """Who the end user is, for the target's abuse tracking: ``metadata.user_id``, else
    ``user``, else ``safety_identifier`` (the first non-empty string)."""
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        user_id = metadata.get("user_id")
        if isinstance(user_id, str) and user_id:
            return user_id
    for field in ("user", "safety_identifier"):
        user_id = body.get(field)
        if isinstance(user_id, str) and user_id:
            return user_id
    return None
