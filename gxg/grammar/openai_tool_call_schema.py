"""OpenAI Chat Completions tools and ``tool_choice`` as the builtin structural tags read them
(XGrammar 0.2.8's ``python/xgrammar/openai_tool_call_schema.py``, without pydantic).

In:  a tool list and a ``tool_choice`` as an API request carries them: dicts (JSON data), this
     module's objects, or XGrammar's pydantic ones (anything with ``model_dump``).
Out: ``parse_tool(...) -> FunctionToolParam | BuiltinToolParam`` and
     ``parse_tool_choice(...) -> "none" | "auto" | "required" | NamedToolChoiceParam |
     AllowedToolChoiceParam | BuiltinToolChoiceParam``: plain dataclasses with XGrammar's class
     and field names, so a model-specific builder written against XGrammar's objects
     (``tool.function.name``, ``tool.function.parameters``, ``tool.type``, ...) reads them
     unchanged. Invalid input raises ``ValueError`` whose message starts with the path of the
     culprit (``tools[1].function.name: ...``), as XGrammar's pydantic ``ValidationError`` (a
     ``ValueError``) does.

The shapes (as XGrammar reads them; fields a shape does not know are ignored):

* a function tool: ``{"type": "function", "function": {"name", "description"?,
  "parameters"?, "strict"?}}`` (``type`` may be left out);
* a builtin tool: ``{"type": <builtin type>, "name"?, "parameters"?}``;
* a tool choice: ``"none" | "auto" | "required"``, a named function
  ``{"type": "function", "function": {"name"}}``, a builtin type ``{"type": <type>, "name"?}``,
  or ``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required",
  "tools": [refs]}}`` whose refs are ``{"type": "function", "function": {"name"}}`` or
  ``{"type": <builtin type>, "name"?}``.

Deliberate differences from XGrammar (stricter, never a different tag for valid input):
XGrammar validates each tool as ``Union[FunctionToolParam, BuiltinToolParam]`` in pydantic's
smart mode, so a ``"type": "function"`` tool whose ``function`` is missing or invalid (the flat
Responses-API shape ``{"type": "function", "name": ..., "parameters": ...}``, a ``name`` that is
not a string, ``parameters: true``, ...) silently becomes a *builtin* tool of type
``"function"`` — dropped by most models, emitted as a tool named ``function`` by harmony. Here it
is a ValueError that says what is wrong. Likewise ``{"type": "function"}`` and
``{"type": "allowed_tools"}`` as a tool choice without their ``function`` / ``allowed_tools``
object (XGrammar reads them as builtin tool choices: "Builtin tool choice must match exactly one
builtin tool, got 0 matches"). Fields are not coerced the way pydantic's lax mode does
(``"false"`` is not a boolean here).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union

from gxg.grammar.structural_tag import describe_json_value

__all__ = [
    "FunctionDefinition", "FunctionToolParam", "BuiltinToolParam", "ToolParam",
    "NamedToolChoiceFunction", "NamedToolChoiceParam", "BuiltinToolChoiceParam",
    "AllowedToolRef", "AllowedToolsParam", "AllowedToolChoiceParam", "ToolChoiceOptionParam",
    "parse_tool", "parse_tool_choice",
]


@dataclass
class FunctionDefinition:
    """``tools[].function``: the function's name and the JSON schema of its arguments
    (``parameters``; None: unconstrained JSON). ``strict=False`` also means unconstrained."""

    name: str
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    strict: Optional[bool] = None


@dataclass
class FunctionToolParam:
    """A function tool: ``{"type": "function", "function": {...}}``."""

    function: FunctionDefinition
    type: Literal["function"] = "function"


@dataclass
class BuiltinToolParam:
    """A builtin (hosted/server) tool: ``type`` (the provider's type, e.g.
    ``"web_search_preview"``), ``name`` (the name the model writes; defaults to ``type``) and
    ``parameters`` (the JSON schema of its arguments; None: unconstrained JSON)."""

    type: str
    name: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None


ToolParam = Union[FunctionToolParam, BuiltinToolParam]


@dataclass
class NamedToolChoiceFunction:
    name: str


@dataclass
class NamedToolChoiceParam:
    """``{"type": "function", "function": {"name": ...}}``: force that function tool."""

    function: NamedToolChoiceFunction
    type: Literal["function"] = "function"


@dataclass
class BuiltinToolChoiceParam:
    """``{"type": <builtin type>}``: force the builtin tool of that type (``name`` is read but
    not used for matching, as in XGrammar)."""

    type: str
    name: Optional[str] = None


@dataclass
class AllowedToolRef:
    type: str
    function: Optional[NamedToolChoiceFunction] = None
    name: Optional[str] = None


@dataclass
class AllowedToolsParam:
    mode: Literal["auto", "required"]
    tools: List[AllowedToolRef] = field(default_factory=list)


@dataclass
class AllowedToolChoiceParam:
    """``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}``: restrict the tools,
    then apply ``mode``."""

    allowed_tools: AllowedToolsParam
    type: Literal["allowed_tools"] = "allowed_tools"


ToolChoiceOptionParam = Union[Literal["none", "auto", "required"], NamedToolChoiceParam,
                              AllowedToolChoiceParam, BuiltinToolChoiceParam]

_TOOL_CHOICE_STRINGS = ("none", "auto", "required")


# ----------------------------------------------------------------------------- reading


def _as_data(value):
    """A pydantic model (XGrammar's tool objects) as its dict; anything else unchanged."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump()
    return value


def _object(value, path: str, what: str) -> dict:
    value = _as_data(value)
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {what} must be an object, not {describe_json_value(value)}")
    return value


def _string(obj: dict, key: str, path: str, required: bool = False) -> Optional[str]:
    if key not in obj or obj[key] is None:
        if required:
            raise ValueError(f"{path}: the field {key!r} is required")
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise ValueError(f"{path}.{key}: must be a string, not {describe_json_value(value)}")
    return value


def _schema(obj: dict, path: str) -> Optional[Dict[str, Any]]:
    value = _as_data(obj.get("parameters"))
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{path}.parameters: a JSON schema object or null"
                         f", not {describe_json_value(value)}")
    return value


def _function_definition(value, path: str) -> FunctionDefinition:
    if isinstance(value, FunctionDefinition):
        return value
    obj = _object(value, path, "a function definition")
    strict = obj.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ValueError(f"{path}.strict: must be a boolean or null"
                         f", not {describe_json_value(strict)}")
    return FunctionDefinition(name=_string(obj, "name", path, required=True),
                              description=_string(obj, "description", path),
                              parameters=_schema(obj, path), strict=strict)


def parse_tool(value, path: str = "tools[0]") -> ToolParam:
    """One entry of ``tools``: a function tool or a builtin tool (see the module docstring)."""
    if isinstance(value, (FunctionToolParam, BuiltinToolParam)):
        return value
    obj = _object(value, path, "a tool")
    kind = obj.get("type", "function" if "function" in obj else None)
    if kind is None:
        raise ValueError(f"{path}: a tool needs a 'type' (\"function\" with a 'function' "
                         f"object, or a builtin tool type)")
    if not isinstance(kind, str):
        raise ValueError(f"{path}.type: must be a string, not {describe_json_value(kind)}")
    if kind == "function":
        if obj.get("function") is None:
            raise ValueError(f"{path}: a function tool needs a 'function' object "
                             f"(Chat Completions shape: {{\"type\": \"function\", \"function\": "
                             f"{{\"name\": ..., \"parameters\": ...}}}})")
        return FunctionToolParam(function=_function_definition(obj["function"],
                                                               f"{path}.function"))
    return BuiltinToolParam(type=kind, name=_string(obj, "name", path),
                            parameters=_schema(obj, path))


def _named_function(value, path: str) -> NamedToolChoiceFunction:
    if isinstance(value, NamedToolChoiceFunction):
        return value
    obj = _object(value, path, "a function reference")
    return NamedToolChoiceFunction(name=_string(obj, "name", path, required=True))


def _allowed_tools(value, path: str) -> AllowedToolsParam:
    if isinstance(value, AllowedToolsParam):
        return value
    obj = _object(value, path, "allowed_tools")
    mode = obj.get("mode")
    if mode not in ("auto", "required"):
        raise ValueError(f"{path}.mode: must be 'auto' or 'required', not {mode!r}")
    refs = _as_data(obj.get("tools"))
    if not isinstance(refs, (list, tuple)):
        raise ValueError(f"{path}.tools: must be an array of tool references, not "
                         f"{describe_json_value(refs)}")
    out = []
    for i, ref in enumerate(refs):
        where = f"{path}.tools[{i}]"
        if isinstance(ref, AllowedToolRef):
            out.append(ref)
            continue
        ref = _object(ref, where, "a tool reference")
        kind = _string(ref, "type", where, required=True)
        function = ref.get("function")
        out.append(AllowedToolRef(
            type=kind,
            function=None if function is None else _named_function(function,
                                                                    f"{where}.function"),
            name=_string(ref, "name", where)))
    return AllowedToolsParam(mode=mode, tools=out)


def parse_tool_choice(value, path: str = "tool_choice") -> ToolChoiceOptionParam:
    """``tool_choice`` (None is ``"auto"``; see the module docstring for the shapes)."""
    if value is None:
        return "auto"
    if isinstance(value, (NamedToolChoiceParam, AllowedToolChoiceParam,
                          BuiltinToolChoiceParam)):
        return value
    if isinstance(value, str):
        if value not in _TOOL_CHOICE_STRINGS:
            raise ValueError(f"{path}: must be 'none', 'auto', 'required' or an object, not "
                             f"{value!r}")
        return value
    obj = _object(value, path, "tool_choice")
    kind = obj.get("type")
    if kind is None:
        if "function" in obj:
            kind = "function"
        elif "allowed_tools" in obj:
            kind = "allowed_tools"
        else:
            raise ValueError(f"{path}: a tool choice object needs a 'type'")
    if not isinstance(kind, str):
        raise ValueError(f"{path}.type: must be a string, not {describe_json_value(kind)}")
    if kind == "function":
        if obj.get("function") is None:
            raise ValueError(f"{path}: a function tool choice needs a 'function' object "
                             f"(Chat Completions shape: {{\"type\": \"function\", \"function\": "
                             f"{{\"name\": ...}}}})")
        return NamedToolChoiceParam(function=_named_function(obj["function"],
                                                             f"{path}.function"))
    if kind == "allowed_tools":
        if obj.get("allowed_tools") is None:
            raise ValueError(f"{path}: an allowed_tools tool choice needs an 'allowed_tools' "
                             f"object {{\"mode\": ..., \"tools\": [...]}}")
        return AllowedToolChoiceParam(allowed_tools=_allowed_tools(obj["allowed_tools"],
                                                                   f"{path}.allowed_tools"))
    return BuiltinToolChoiceParam(type=kind, name=_string(obj, "name", path))
