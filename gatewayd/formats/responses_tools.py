"""Responses tools on a chat upstream: what each tool becomes, and what its calls come back as.

Chat knows one kind of tool, the function. The Responses API has more, and clients such
as Codex CLI send several on every turn:

- ``function``: a chat function, as is.
- ``custom`` (a free-form tool such as Codex's ``apply_patch``, whose input is raw text,
  optionally constrained by a grammar): a chat function with one string argument,
  ``input``, the grammar told in its description. A call to it comes back to the client as
  a ``custom_tool_call`` item carrying that string, which is what the client expects.
- ``namespace`` (a group of function and custom tools): each member becomes a chat
  function named ``<namespace>__<name>``; a call comes back with ``namespace`` and the
  member's own name.
- everything else (``web_search``, ``file_search``, ``code_interpreter``,
  ``image_generation``, ``mcp``, computer use, and the built-in client tools ``shell``,
  ``local_shell``, ``apply_patch``, ``tool_search`` whose call items chat cannot carry): no
  translation can honour it. It is dropped, and the route tells which in the
  ``x-gatewayd-dropped-tools`` response header, unless ``tool_choice`` requires it: then
  the request is refused with a 400 naming the tool.

:func:`plan_tools` is pure and cheap; the request translator and the answer translators
each call it on the same request body, so they agree without passing state around.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import attrs

from gatewayd.formats.errors import TranslationError

__all__ = ["ToolPlan", "plan_tools", "chat_tool_choice", "call_item", "custom_input", "chat_name",
           "custom_arguments", "DROPPED_REASON"]

NAMESPACE_SEPARATOR = "__"
DROPPED_REASON = "built-in tools run only on OpenAI's own Responses API; this model is served by translation"
_INPUT_DESCRIPTION = "The tool's whole input as raw text (a free-form tool: not JSON)."


@attrs.frozen
class ToolPlan:
    chat_tools: tuple[dict[str, Any], ...] = ()
    custom: frozenset[str] = frozenset()  # chat names of free-form tools
    namespaced: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)  # chat name -> (namespace, name)
    dropped: tuple[str, ...] = ()  # tool types that no translation can honour, in request order


def chat_name(name: str, namespace: str | None) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def plan_tools(tools: Any) -> ToolPlan:
    """The chat tools for a Responses ``tools`` list (None: no tools)."""
    if tools is None:
        return ToolPlan()
    if not isinstance(tools, list):
        raise TranslationError("tools must be a list", "tools")
    chat_tools: list[dict[str, Any]] = []
    custom: set[str] = set()
    namespaced: dict[str, tuple[str, str]] = {}
    dropped: list[str] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", where)
        kind = tool.get("type")
        if kind in ("function", "custom"):
            chat_tools.append(_member(tool, None, where, custom))
        elif kind == "namespace":
            namespace = tool.get("name")
            if not isinstance(namespace, str) or not namespace:
                raise TranslationError("namespace tool needs a name", f"{where}.name")
            members = tool.get("tools")
            if not isinstance(members, list):
                raise TranslationError("namespace tool needs a list of tools", f"{where}.tools")
            for j, member in enumerate(members):
                spot = f"{where}.tools[{j}]"
                if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                    raise TranslationError("a namespace holds function and custom tools only", spot)
                function = _member(member, namespace, spot, custom)
                namespaced[function["function"]["name"]] = (namespace, member["name"])
                chat_tools.append(function)
        elif isinstance(kind, str) and kind:
            if kind not in dropped:
                dropped.append(kind)
        else:
            raise TranslationError("each tool needs a type", f"{where}.type")
    return ToolPlan(tuple(chat_tools), frozenset(custom), namespaced, tuple(dropped))


def _member(tool: dict[str, Any], namespace: str | None, where: str, custom: set[str]) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise TranslationError(f"{tool.get('type')} tool needs a name", f"{where}.name")
    function: dict[str, Any] = {"name": chat_name(name, namespace)}
    description = tool.get("description")
    if tool["type"] == "custom":
        custom.add(function["name"])
        function["description"] = _custom_description(description, tool.get("format"), where)
        function["parameters"] = {"type": "object", "properties": {"input": {"type": "string",
                                                                             "description": _INPUT_DESCRIPTION}},
                                  "required": ["input"], "additionalProperties": False}
        return {"type": "function", "function": function}
    if description is not None:
        function["description"] = description
    for field in ("parameters", "strict"):
        if tool.get(field) is not None:
            function[field] = tool[field]
    return {"type": "function", "function": function}


def _custom_description(description: Any, fmt: Any, where: str) -> str:
    text = description if isinstance(description, str) else ""
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return text
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar" or not isinstance(fmt.get("definition"), str):
        raise TranslationError("custom tool format must be text, or a grammar with a definition", f"{where}.format")
    syntax = got if isinstance(got := fmt.get("syntax"), str) else "lark"
    rule = f"The input must match this {syntax} grammar:\n{fmt['definition']}"
    return f"{text}\n\n{rule}" if text else rule


def chat_tool_choice(choice: Any, plan: ToolPlan) -> str | dict[str, Any]:
    """A Responses ``tool_choice`` for the chat request; a 400 when it requires a tool
    that was dropped (or that there is no tool left to satisfy ``required``)."""
    if isinstance(choice, str) and choice in ("auto", "none"):
        return choice
    if choice == "required":
        if not plan.chat_tools and plan.dropped:
            raise TranslationError(
                f"tool_choice 'required' cannot be met: the only tools ({', '.join(plan.dropped)}) are not available "
                f"for this model ({DROPPED_REASON})", "tool_choice")
        return "required"
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("function", "custom"):
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise TranslationError(f"tool_choice of type {kind} needs a name", "tool_choice.name")
        namespace = got if isinstance(got := choice.get("namespace"), str) else None
        return {"type": "function", "function": {"name": chat_name(name, namespace)}}
    if isinstance(kind, str) and kind != "allowed_tools":
        raise TranslationError(f"tool_choice requires the {kind} tool, which is not available for this model "
                               f"({DROPPED_REASON})", "tool_choice")
    shown = kind if kind is not None else choice
    raise TranslationError(f"tool_choice {shown!r} is not supported for this model", "tool_choice")


def custom_arguments(text: str) -> str:
    """The chat arguments of a free-form call whose input was ``text`` (an earlier turn)."""
    return json.dumps({"input": text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The raw input of a free-form call from the chat arguments the model wrote. A model that
    answered with bare text instead of ``{"input": ...}`` meant that text."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(raw_input := value.get("input"), str):
        return raw_input
    return arguments


def call_item(plan: ToolPlan, id_: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """The Responses output item for a chat tool call named ``name``."""
    namespace, own = plan.namespaced.get(name, (None, name))
    if name in plan.custom:
        item = {"type": "custom_tool_call", "id": id_, "call_id": call_id, "name": own,
                "input": custom_input(arguments), "status": status}
    else:
        item = {"type": "function_call", "id": id_, "call_id": call_id, "name": own, "arguments": arguments,
                "status": status}
    if namespace is not None:
        item["namespace"] = namespace
    return item
