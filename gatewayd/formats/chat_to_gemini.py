"""Request translation: a chat-format (OpenAI Chat Completions) body becomes a Gemini
``generateContent`` body (Google's Generative Language API), for models whose provider
speaks ``protocol = "gemini"``.

A pure writer: :func:`gatewayd.formats.chat_request.read_chat_request` reads and checks
the body (one rule per field, shared with the messages translator); this module only says
how the neutral :class:`ChatRequest` is written for Gemini, and refuses what Gemini cannot
carry (a tool result that answers no call, images in tool results, an image URL whose type
it cannot tell) naming the client's field, so a client is never answered about a
different question than it asked.

The rules are tabulated in ``docs/translation.md`` (section "Chat format ⇄ Gemini"); each
rule lives in exactly one function below. Gemini's wire names are camelCase (the REST
API's JSON mapping of its protobufs): ``systemInstruction``, ``generationConfig``,
``functionDeclarations``, ``inlineData``...
"""

from __future__ import annotations

from typing import Any

from gatewayd.formats.chat_request import (
    AssistantTurn,
    Audio,
    ChatRequest,
    Document,
    Image,
    ImageUrl,
    Part,
    ResponseFormat,
    Tool,
    ToolChoice,
    ToolResult,
    UserTurn,
    pdf_only,
    read_chat_request,
)
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.gemini_schema import gemini_schema

#: Between a tool call id the gateway made and the Gemini thought signature it carries.
SIGNATURE_SEPARATOR = "__thought__"

__all__ = [
    "EFFORT_THINKING_BUDGET",
    "chat_request_to_gemini",
    "gemini_request",
    "gemini_schema",
]

#: ``reasoning_effort`` -> ``thinkingConfig.thinkingBudget``. low/medium/high are the
#: budgets Google's own OpenAI-compatible endpoint uses (1K, 8K, 24K); ``minimal`` is
#: 512, the smallest budget every Gemini 2.5 model accepts (Flash-Lite's floor); above
#: ``high`` stays at 24576, the largest budget Flash and Flash-Lite accept. ``none`` is 0
#: (thinking off; Gemini 2.5 Pro cannot switch it off and answers 400, which the client
#: then sees with its status kept).
EFFORT_THINKING_BUDGET: dict[str, int] = {
    "none": 0,
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
    "max": 24576,
}

#: Image types Gemini documents for inline data.
_IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
#: By file extension, for ``fileData`` URLs (Gemini fetches those itself, but needs their type).
_URL_MEDIA_TYPES = {
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
    ".heic": "image/heic", ".heif": "image/heif", ".pdf": "application/pdf",
}

_TOOL_CHOICE_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def chat_request_to_gemini(body: dict[str, Any], *, upstream_model: str | None = None) -> dict[str, Any]:
    """Translate a chat-format request body into a Gemini ``generateContent`` body.

    The model is not part of a Gemini body (it is in the URL), and neither is ``stream``
    (the URL's method says it: ``generateContent`` or ``streamGenerateContent``).
    ``upstream_model`` (the provider's id) only tells which thinking budgets it accepts.
    """
    return gemini_request(read_chat_request(body), upstream_model=upstream_model)


def gemini_request(request: ChatRequest, *, upstream_model: str | None = None) -> dict[str, Any]:
    """The ``generateContent`` body for a read chat request (see :func:`chat_request_to_gemini`)."""
    out: dict[str, Any] = {"contents": _contents(request)}
    if request.system:
        out["systemInstruction"] = {"parts": [{"text": text} for text in request.system]}
    if request.tools:
        out["tools"] = [{"functionDeclarations": [_declaration(tool) for tool in request.tools]}]
        if request.tool_choice is not None:
            out["toolConfig"] = _tool_config(request.tool_choice)
    generation = _generation_config(request, upstream_model)
    if generation:
        out["generationConfig"] = generation
    return out


# --- messages ---------------------------------------------------------------------------------


def _contents(request: ChatRequest) -> list[dict[str, Any]]:
    """Contents alternate ``user`` / ``model``: consecutive turns of one side (tool results
    count as user) merge into one. The reader left out the messages with nothing to say
    (Gemini refuses empty ``parts`` and empty text) and put the tool results first on the
    user's side: they answer the model's calls of the content just before, and any text
    the client added follows them."""
    contents: list[dict[str, Any]] = []
    for turn in request.turns:
        if isinstance(turn, str):  # a user message of one text, the commonest turn
            role, parts = "user", [{"text": turn}]
        elif isinstance(turn, UserTurn):
            role, parts = "user", [_user_part(part) for part in turn.parts]
        elif isinstance(turn, AssistantTurn):
            role, parts = "model", _model_parts(turn)
        else:
            role, parts = "user", [_function_response(turn)]
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return contents


def _user_part(part: Part) -> dict[str, Any]:
    if isinstance(part, str):
        return {"text": part}
    if isinstance(part, Image):
        if part.media_type not in _IMAGE_MEDIA_TYPES:
            raise TranslationError(
                f"image type {part.media_type!r} is not supported; use one of {', '.join(sorted(_IMAGE_MEDIA_TYPES))}",
                f"{part.where}.image_url.url",
            )
        return {"inlineData": {"mimeType": part.media_type, "data": part.data}}
    if isinstance(part, ImageUrl):
        return {"fileData": _file_data(part)}
    if isinstance(part, Document):
        return {"inlineData": {"mimeType": "application/pdf", "data": pdf_only(part)}}
    assert isinstance(part, Audio)
    return {"inlineData": {"mimeType": part.media_type, "data": part.data}}


def _file_data(image: ImageUrl) -> dict[str, Any]:
    """Inline images go as ``inlineData``; http(s) URLs as ``fileData`` (Gemini fetches
    them where it accepts them, and answers 400 where it does not: that status reaches the
    client). Gemini needs a ``fileData`` part's ``mimeType`` (it is optional in the schema,
    but Google asks for it with every file). It is told by the URL's extension; the gateway
    does not fetch the URL to find out (that would be I/O here, and a way into the
    gateway's network), so a URL that does not tell is refused with what would work."""
    path = image.url.split("#", 1)[0].split("?", 1)[0].lower()
    media_type = next((t for ext, t in _URL_MEDIA_TYPES.items() if path.endswith(ext)), None)
    if media_type is None:
        raise TranslationError(
            "this model needs the type of an image URL, and this URL's path does not end in "
            f"{', '.join(_URL_MEDIA_TYPES)}: send the image inline as a base64 data URL instead",
            f"{image.where}.image_url.url")
    return {"mimeType": media_type, "fileUri": image.url}


def _model_parts(turn: AssistantTurn) -> list[dict[str, Any]]:
    """Text first, then one ``functionCall`` part per tool call (parallel calls are
    several parts of one content, as Gemini sends them). Echoed thinking is not carried:
    Gemini does not take thoughts back."""
    parts = [{"text": text} for text in turn.parts] if turn.parts else []
    for call in turn.tool_calls:
        part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.arguments}}
        if SIGNATURE_SEPARATOR in call.id:
            _, _, signature = call.id.partition(SIGNATURE_SEPARATOR)
            if signature:
                part["thoughtSignature"] = signature  # Gemini's, carried in our id (see gemini_to_chat._call_id)
        parts.append(part)
    return parts


def _function_response(result: ToolResult) -> dict[str, Any]:
    """Gemini pairs a result with its call by the function's name, so the call must be
    in the conversation. The result text goes under ``output`` (Gemini's documented key
    for a function's output)."""
    if result.name is None:
        where = f"messages[{result.message}].tool_call_id"
        raise TranslationError(
            f"{where} {result.call_id!r} matches no tool call of an earlier assistant message", where)
    content = result.content
    output = content if content.__class__ is str else _tool_text(content)
    return {"functionResponse": {"name": result.name, "response": {"output": output}}}


def _tool_text(content: str | tuple[Part, ...]) -> str:
    """Text parts joined with newlines; anything else is refused."""
    if isinstance(content, str):
        return content
    for part in content:
        if not isinstance(part, str):
            raise TranslationError("tool results of this model carry text only; put images in a user message",
                                   part.where)
    return "\n".join(content)  # type: ignore[arg-type]  # all str, checked above


# --- tools ------------------------------------------------------------------------------------


def _declaration(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        out["description"] = tool.description
    if tool.parameters is not None:
        schema = gemini_schema(tool.parameters, f"tools[{tool.position}].function.parameters",
                               f"the parameters of tool {tool.name!r}")
        # Gemini refuses an OBJECT schema without properties: a tool that takes nothing has no parameters.
        if schema.get("properties"):
            out["parameters"] = schema
    return out


def _tool_config(choice: ToolChoice) -> dict[str, Any]:
    """``tool_choice`` -> ``toolConfig.functionCallingConfig``. ``parallel_tool_calls``
    has no Gemini equivalent and is not carried."""
    if choice.mode == "function":
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice.name]}}
    return {"functionCallingConfig": {"mode": _TOOL_CHOICE_MODES[choice.mode]}}


# --- generationConfig -------------------------------------------------------------------------


def _generation_config(request: ChatRequest, upstream_model: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {}
    max_tokens = request.max_tokens
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    # Gemini's ranges (temperature 0..2, topP 0..1) are the chat format's: not clamped
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.seed is not None:
        config["seed"] = request.seed
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.response_format is not None:
        config.update(_response_format(request.response_format))
    if request.reasoning_effort is not None:
        config["thinkingConfig"] = _thinking_config(EFFORT_THINKING_BUDGET[request.reasoning_effort], max_tokens,
                                                    upstream_model)
    return config


def _response_format(value: ResponseFormat) -> dict[str, Any]:
    """JSON output is carried (Gemini has it): ``json_object`` -> JSON MIME type,
    ``json_schema`` -> JSON MIME type and the schema, cleaned like tool schemas."""
    if value.schema is None:
        return {"responseMimeType": "application/json"}
    return {"responseMimeType": "application/json",
            "responseSchema": gemini_schema(value.schema, "response_format.json_schema.schema")}


def _thinking_config(budget: int, max_tokens: int | None, upstream_model: str | None) -> dict[str, Any]:
    if max_tokens is not None and budget > max_tokens:
        budget = max_tokens  # the cap includes the thinking (as the chat format's max_completion_tokens does)
    floor, may_stop = _thinking_floor(upstream_model)
    if 0 < budget < floor:
        budget = 0 if may_stop else floor
    thinking: dict[str, Any] = {"thinkingBudget": budget}
    if budget:
        thinking["includeThoughts"] = True  # thought summaries become reasoning_content
    return thinking


#: The least non-zero ``thinkingBudget`` each Gemini 2.5 model accepts, and whether 0 (no
#: thinking) is allowed: Google's thinking guide (Pro 128-32768 and always thinks; Flash
#: 0-24576; Flash-Lite 0 or 512-24576). By the start of the provider's model id, longest first.
THINKING_FLOORS: tuple[tuple[str, int, bool], ...] = (
    ("gemini-2.5-flash-lite", 512, True),
    ("gemini-2.5-flash", 1, True),
    ("gemini-2.5-pro", 128, False),
)
#: Another (or an unknown) model: the strictest of the above, which every one of them accepts.
DEFAULT_THINKING_FLOOR = (512, False)


def _thinking_floor(upstream_model: str | None) -> tuple[int, bool]:
    """(least budget, may be 0) for the model. A cap below the least budget turns thinking
    off where the model allows it (there is no room to think within the cap), and is
    otherwise raised to the least budget, which Gemini would refuse to go below."""
    model = (upstream_model or "").removeprefix("models/")
    return next(((floor, may_stop) for prefix, floor, may_stop in THINKING_FLOORS if model.startswith(prefix)),
                DEFAULT_THINKING_FLOOR)

