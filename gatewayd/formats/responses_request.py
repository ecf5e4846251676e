"""Responses-format request -> chat-format request, for upstreams that do not speak Responses.

Sans-I/O: a dict in, a dict out, or a :class:`TranslationError` naming the offending
field. The result is a plain chat-completions body; for messages-format models another
translator turns it into a messages body, so everything here only has to be valid chat.

What cannot be carried is refused rather than silently dropped, because a client that
relies on it (a stored conversation, a required hosted tool) would otherwise get a
confidently wrong answer. Tools are the one exception (``responses_tools``): agents such
as Codex CLI offer a hosted web search on every turn, so a hosted tool the request does
not require is dropped, and the route says so in a response header. What is only bookkeeping on OpenAI's side (``store``, ``include``,
``prompt_cache_key`` ...) is ignored: nothing is stored here, so there is nothing to keep.
"""

from __future__ import annotations

from typing import Any

from gatewayd.formats.compaction import summary_message
from gatewayd.formats.errors import TranslationError
from gatewayd.formats.stored_objects import item_reference_refused
from gatewayd.formats.responses_tools import chat_name, chat_tool_choice, custom_arguments, plan_tools

__all__ = ["responses_request_to_chat"]

# Fields that only steer storage, caching or accounting upstream: dropped without a word.
IGNORED_FIELDS = frozenset(
    {
        "store",
        "include",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "service_tier",
        "truncation",
        "user",
        "metadata",
        "stream_options",
        "max_tool_calls",
        "top_logprobs",
    }
)

_NOT_STORED = "responses are not stored; send the whole conversation in input"

_MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def responses_request_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """Translate a ``POST /v1/responses`` body into a ``POST /v1/chat/completions`` body.

    ``developer`` messages become ``system`` messages: the two mean the same to a model,
    and several chat-speaking upstreams know only ``system``.
    """
    if not isinstance(body, dict):
        raise TranslationError("request body must be a JSON object", None)
    for field in ("previous_response_id", "conversation"):
        if body.get(field) is not None:
            raise TranslationError(f"{field} is not supported for this model: {_NOT_STORED}", field)
    if body.get("background") is True:
        raise TranslationError("background is not supported for this model: " + _NOT_STORED, "background")
    if body.get("prompt") is not None:
        raise TranslationError(
            "prompt (a stored prompt template) is not supported for this model; send instructions and input",
            "prompt",
        )

    chat: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise TranslationError("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    messages.extend(_input_to_messages(body.get("input")))
    chat["messages"] = messages

    plan = plan_tools(body.get("tools"))  # custom and namespaced tools become functions; built-ins drop
    if plan.chat_tools:
        chat["tools"] = list(plan.chat_tools)
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = chat_tool_choice(body["tool_choice"], plan)
    if body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]

    if body.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = body["max_output_tokens"]
    for field in ("temperature", "top_p"):
        if body.get(field) is not None:
            chat[field] = body[field]

    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise TranslationError("reasoning must be an object", "reasoning")
        effort = reasoning.get("effort")
        if effort is not None:
            if not isinstance(effort, str):
                raise TranslationError("reasoning.effort must be a string such as \"low\", \"medium\" or \"high\"",
                                       "reasoning.effort")
            chat["reasoning_effort"] = effort

    text = body.get("text")
    if text is not None:
        response_format = _text_format(text)
        if response_format is not None:
            chat["response_format"] = response_format

    if body.get("stream") is True:
        # Billing needs the upstream's own count, whatever the client asked for.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


# -- input ----------------------------------------------------------------------------


def _input_to_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise TranslationError("input must be a string or a list of input items", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise TranslationError("each input item must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            _append_message(messages, item, where)
        elif kind in ("function_call", "custom_tool_call"):
            _append_function_call(messages, item, where)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(_function_call_output(item, where))
        elif kind == "reasoning":
            # A summary of earlier thinking; its encrypted_content is sealed for OpenAI's
            # models, so there is nothing another upstream could do with it.
            continue
        elif kind == "item_reference":
            raise item_reference_refused(where)
        elif kind == "compaction":  # the gateway's own summary of the earlier conversation
            messages.append(summary_message(item, where))
        elif kind == "compaction_trigger":  # answered by the gateway before any translation
            raise TranslationError("compaction_trigger must be the last input item", where)
        else:
            raise TranslationError(f"input item type {kind!r} is not supported for this model", where)
    return messages


def _append_message(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    role = item.get("role")
    role = _MESSAGE_ROLES.get(role) if isinstance(role, str) else None  # a list is no key: check first
    if role is None:
        raise TranslationError(
            "role must be one of user, assistant, system, developer", f"{where}.role"
        )
    content = item.get("content")
    if isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = [_content_part(part, f"{where}.content[{j}]") for j, part in enumerate(content)]
    else:
        raise TranslationError("content must be a string or a list of content parts", f"{where}.content")

    if role == "user":
        if len(parts) == 1 and parts[0]["type"] == "text" and "cache_control" not in parts[0]:
            messages.append({"role": "user", "content": parts[0]["text"]})
        else:
            messages.append({"role": "user", "content": parts})
        return

    if any(part["type"] != "text" for part in parts):
        raise TranslationError(f"{role} messages may hold text only", f"{where}.content")
    # One string: the shape every chat-speaking upstream accepts for these roles.
    text = ("\n\n" if role == "system" else "").join(part["text"] for part in parts)
    previous = messages[-1] if messages else None
    if role == "assistant" and previous is not None and previous.get("tool_calls") and previous["role"] == "assistant":
        # Text after tool calls of the same turn: chat wants tool results right after
        # the message holding the calls, so the text joins that message.
        previous["content"] = text if not previous.get("content") else previous["content"] + "\n\n" + text
        return
    messages.append({"role": role, "content": text})


def _content_part(part: Any, where: str) -> dict[str, Any]:
    """A content part as the chat format has it, with the client's ``cache_control`` marker
    (Anthropic's, which some Responses clients send) kept on it for the messages writer."""
    chat_part = _chat_part(part, where)
    control = part.get("cache_control")
    if isinstance(control, dict):
        chat_part["cache_control"] = control
    return chat_part


def _chat_part(part: Any, where: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise TranslationError("content part must be an object", where)
    kind = part.get("type")
    if isinstance(kind, str) and kind in _TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            raise TranslationError("text must be a string", f"{where}.text")
        return {"type": "text", "text": text}
    if kind == "refusal":
        # An earlier refusal is just what the assistant said.
        return {"type": "text", "text": str(part.get("refusal") or "")}
    if kind == "input_image":
        return _image_part(part, where)
    if kind == "input_file":
        return _file_part(part, where)
    raise TranslationError(f"content part type {kind!r} is not supported for this model", where)


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = part.get("image_url")
    if part.get("file_id") is not None and url is None:
        raise TranslationError(
            "input_image.file_id is not supported for this model: files are not stored; "
            "send image_url as a data URL or an https address",
            f"{where}.file_id",
        )
    if not isinstance(url, str) or not url.startswith(("data:", "https://")):
        raise TranslationError("image_url must be a data URL or an https address", f"{where}.image_url")
    image = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    data = part.get("file_data")
    if data is None:
        field = "file_id" if part.get("file_id") is not None else "file_url" if part.get("file_url") else "file_data"
        raise TranslationError(
            f"input_file.{field} is not supported for this model: send the PDF inline as file_data",
            f"{where}.{field}",
        )
    if not isinstance(data, str):
        raise TranslationError("file_data must be a string", f"{where}.file_data")
    if data.startswith("data:"):
        media_type = data[5:].split(";", 1)[0].split(",", 1)[0].strip().lower()
        if media_type != "application/pdf":
            raise TranslationError(
                f"input_file of type {media_type or 'unknown'} is not supported for this model: PDF only",
                f"{where}.file_data",
            )
    else:
        # Bare base64, as some clients send it: the only kind we can carry is a PDF.
        data = "data:application/pdf;base64," + data
    filename = part.get("filename")
    return {
        "type": "file",
        "file": {"filename": filename if isinstance(filename, str) and filename else "document.pdf", "file_data": data},
    }


def _append_function_call(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    """A ``function_call`` or a ``custom_tool_call`` (free-form: its raw ``input`` becomes the
    one string argument of the function it was offered as, see ``responses_tools``)."""
    kind = item.get("type")
    call_id = item.get("call_id")
    name = item.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError(f"{kind} needs a call_id", f"{where}.call_id")
    if not isinstance(name, str) or not name:
        raise TranslationError(f"{kind} needs a name", f"{where}.name")
    if kind == "custom_tool_call":
        text = item.get("input", "")
        if not isinstance(text, str):
            raise TranslationError("custom_tool_call input must be a string", f"{where}.input")
        arguments = custom_arguments(text)
    else:
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            raise TranslationError("function_call arguments must be a JSON string", f"{where}.arguments")
    namespace = item.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise TranslationError("namespace must be a string", f"{where}.namespace")
    call = {"id": call_id, "type": "function", "function": {"name": chat_name(name, namespace), "arguments": arguments}}
    previous = messages[-1] if messages else None
    if previous is not None and previous["role"] == "assistant":
        # Chat holds one turn's text and all its calls in a single assistant message.
        previous.setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_call_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError(f"{item.get('type')} needs a call_id", f"{where}.call_id")
    output = item.get("output")
    content: str | list[dict[str, Any]]
    if isinstance(output, str):
        content = output
    elif isinstance(output, list):
        parts = [_content_part(part, f"{where}.output[{j}]") for j, part in enumerate(output)]
        if all(part["type"] == "text" for part in parts):
            content = "".join(part["text"] for part in parts)
        else:
            content = parts
    else:
        raise TranslationError("output must be a string or a list of content parts", f"{where}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# -- output format ---------------------------------------------------------------------


def _text_format(text: Any) -> dict[str, Any] | None:
    """The chat ``response_format`` for a Responses ``text`` field (None: plain text)."""
    if not isinstance(text, dict):
        raise TranslationError("text must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name") or "response", "schema": fmt.get("schema")}
        for field in ("strict", "description"):
            if fmt.get(field) is not None:
                schema[field] = fmt[field]
        return {"type": "json_schema", "json_schema": schema}
    raise TranslationError(f"text.format type {kind!r} is not supported", "text.format.type")
