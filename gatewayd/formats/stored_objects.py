"""What in a client body points at an object stored at the provider, and what an answer gives out.

Sans-I/O. The providers behind gatewayd store things under the operator's account: Responses
(``previous_response_id``), conversations, prompt templates, uploaded files, vector stores,
code containers. Every tenant of gatewayd reaches the provider with the operator's one
credential, so an id is all it takes to use (and read back, through the model) what another
tenant or the operator stored. gatewayd offers no Files API, no vector stores, no stored
prompts and no containers, so a body naming one is refused; response and conversation ids are
let through only for the account that received them through gatewayd (``gatewayd.received_ids``
keeps that record; this module only finds the ids).

Each format is read by its structure, as ``billing.estimate`` reads it, never by key names
found anywhere in the body: a tool's JSON schema may well have a property called ``file_id``,
and that is text for the model. Input items that carry an ``id`` of their own (Codex sends
its earlier output items back with theirs) are content, not references, and pass.

A finding is a :class:`TranslationError` naming the field (``input[0].content[2].file_id``),
which the endpoint answers as a 400 before anything is held.
"""

from __future__ import annotations

from typing import Any

from gatewayd.formats.errors import TranslationError

__all__ = [
    "refuse_stored_objects",
    "asked_response_ids",
    "answer_received_ids",
    "MAX_ID_CHARS",
    "item_reference_refused",
]

MAX_ID_CHARS = 256  # longer than any provider's ids; a longer one is refused without a look-up

_NO_FILES = "gatewayd offers no Files API, so no stored file can be used; send the file inline"
_NO_CONTAINERS = "gatewayd does not offer the provider's containers; leave it out"


def item_reference_refused(where: str) -> TranslationError:
    """The refusal of an ``item_reference`` input item, saying what to change.

    Clients send one for an earlier output item when they believe the provider stored the
    response (``store`` on, the Responses default): the Vercel AI SDK does so for every earlier
    assistant turn. gatewayd keeps responses unstored, so the fix is on the client's side:
    ``store: false`` makes such a client send the items themselves."""
    return TranslationError(
        f"{where}: item_reference points at an item of a stored response, and gatewayd does not store responses; "
        "send store: false so that your client sends the earlier items themselves (Vercel AI SDK: "
        "providerOptions: { openai: { store: false } }; docs/responses.md)", where)


def refuse_stored_objects(client_format: str, body: dict[str, Any]) -> None:
    """Raise ``TranslationError`` at the first field of ``body`` that names a stored file,
    vector store, prompt template or container, or asks for a background response."""
    if client_format == "chat":
        _chat(body)
    elif client_format == "messages":
        _messages(body)
    elif client_format == "responses":
        _responses(body)


def asked_response_ids(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(param, id)`` for the ``previous_response_id`` and ``conversation`` (a string id, or
    an object with ``id``) of a Responses body; wrong types are the client's 400."""
    asked = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise TranslationError("previous_response_id must be a string", "previous_response_id")
        asked.append(("previous_response_id", previous))
    conversation = body.get("conversation")
    if conversation is not None:
        if isinstance(conversation, dict):
            ref = conversation.get("id")
            if not isinstance(ref, str):
                raise TranslationError("conversation.id must be a string", "conversation.id")
            asked.append(("conversation.id", ref))
        elif isinstance(conversation, str):
            asked.append(("conversation", conversation))
        else:
            raise TranslationError("conversation must be a conversation id or an object with its id", "conversation")
    return asked


def answer_received_ids(doc: Any) -> tuple[str, ...]:
    """The ids a Responses ``response`` object gives its client: its own ``id`` (usable as a
    ``previous_response_id``) and the ``conversation.id`` it belongs to, if any."""
    if not isinstance(doc, dict):
        return ()
    out = []
    own = doc.get("id")
    if isinstance(own, str) and 0 < len(own) <= MAX_ID_CHARS:
        out.append(own)
    conversation = doc.get("conversation")
    ref = conversation.get("id") if isinstance(conversation, dict) else None
    if isinstance(ref, str) and 0 < len(ref) <= MAX_ID_CHARS and ref not in out:
        out.append(ref)
    return tuple(out)


# -- chat ---------------------------------------------------------------------------------


def _chat(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        audio = message.get("audio")
        if message.get("role") == "assistant" and isinstance(audio, dict) and audio.get("id") is not None:
            raise TranslationError(
                f"messages[{i}].audio.id refers to an audio answer stored by the provider, which gatewayd does not "
                "offer; send the earlier turn as text", f"messages[{i}].audio.id")
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "file":
                continue
            file = part.get("file")
            if isinstance(file, dict) and file.get("file_id") is not None:
                where = f"messages[{i}].content[{j}].file.file_id"
                raise TranslationError(f"{where}: {_NO_FILES} as file_data", where)


# -- messages -----------------------------------------------------------------------------


def _messages(body: dict[str, Any]) -> None:
    if body.get("container") is not None:
        raise TranslationError(f"container: {_NO_CONTAINERS} (a code execution container or its skills)",
                               "container")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            _blocks(message["content"], f"messages[{i}].content")


def _blocks(blocks: list[Any], where: str) -> None:
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        here = f"{where}[{j}]"
        kind = block.get("type")
        if kind == "container_upload":
            raise TranslationError(f"{here}: container_upload names a stored file; {_NO_FILES}", f"{here}.file_id")
        if kind in ("document", "image"):
            source = block.get("source")
            if not isinstance(source, dict):
                continue
            if source.get("type") == "file" or source.get("file_id") is not None:
                raise TranslationError(f"{here}.source: a {kind} from a stored file; {_NO_FILES} (base64, text or url)",
                                       f"{here}.source.file_id")
            if source.get("type") == "content" and isinstance(source.get("content"), list):
                _blocks(source["content"], f"{here}.source.content")
        elif kind == "tool_result" and isinstance(block.get("content"), list):
            _blocks(block["content"], f"{here}.content")


# -- responses ----------------------------------------------------------------------------


def _responses(body: dict[str, Any]) -> None:
    background = body.get("background")
    if background is not None and background is not False:
        raise TranslationError(
            "background responses are not offered: gatewayd bills a response while it relays it, and a background "
            "run goes on upstream where it can be neither billed nor streamed; leave background out", "background")
    if body.get("prompt") is not None:
        raise TranslationError("prompt names a prompt template stored at the provider, which gatewayd does not "
                               "offer; send instructions and input instead", "prompt")
    items = body.get("input")
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, dict):
                _input_item(item, f"input[{i}]")
    tools = body.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            if isinstance(tool, dict):
                _tool(tool, f"tools[{i}]")


def _input_item(item: dict[str, Any], where: str) -> None:
    kind = item.get("type")
    if kind == "item_reference":
        raise item_reference_refused(where)
    if kind in (None, "message"):
        content = item.get("content")
        if isinstance(content, list):
            _parts(content, f"{where}.content")
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if isinstance(output, list):
            _parts(output, f"{where}.output")
    elif kind == "computer_call_output":
        output = item.get("output")
        if isinstance(output, dict) and output.get("file_id") is not None:
            raise TranslationError(f"{where}.output.file_id: {_NO_FILES} as image_url", f"{where}.output.file_id")


def _parts(parts: list[Any], where: str) -> None:
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") not in ("input_image", "input_file"):
            continue
        if part.get("file_id") is not None:
            inline = "image_url" if part["type"] == "input_image" else "file_data"
            here = f"{where}[{j}].file_id"
            raise TranslationError(f"{here}: {_NO_FILES} as {inline}", here)


def _tool(tool: dict[str, Any], where: str) -> None:
    kind = tool.get("type")
    if kind == "file_search":
        raise TranslationError(f"{where}.vector_store_ids: file_search searches vector stores kept by the provider, "
                               "which gatewayd does not offer", f"{where}.vector_store_ids")
    if kind == "code_interpreter":
        container = tool.get("container")
        if isinstance(container, str):
            raise TranslationError(f"{where}.container: {_NO_CONTAINERS}, or use {{\"type\": \"auto\"}}",
                                   f"{where}.container")
        if isinstance(container, dict) and container.get("file_ids"):
            raise TranslationError(f"{where}.container.file_ids: {_NO_FILES} in the input",
                                   f"{where}.container.file_ids")
    elif kind == "image_generation":
        mask = tool.get("input_image_mask")
        if isinstance(mask, dict) and mask.get("file_id") is not None:
            raise TranslationError(f"{where}.input_image_mask.file_id: {_NO_FILES} as image_url",
                                   f"{where}.input_image_mask.file_id")
