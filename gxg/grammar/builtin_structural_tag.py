"""Builtin structural tags for models' tool-calling and reasoning formats: XGrammar 0.2.8's
``get_model_structural_tag`` / ``get_builtin_structural_tag`` (``python/xgrammar/
builtin_structural_tag.py``), ported.

In:  a model format key (``"llama"``, ``"qwen_3"``, ``"qwen_3_coder"``, ``"deepseek_r1"``,
     ``"harmony"``, ``"glm_4_7"``, ... — ``MODEL_FORMATS``), an OpenAI Chat Completions tool list
     and ``tool_choice`` (``gxg.grammar.openai_tool_call_schema``), the reasoning mode and the
     options below, with XGrammar's names and defaults.
Out: the structural tag as JSON data — a dict ``{"type": "structural_tag", "format": {...}}``
     equal to ``json.loads(xgrammar_tag.model_dump_json())`` of XGrammar's result for the same
     arguments (every field written, defaults included, in XGrammar's field order). gxg's
     ``Grammar.from_structural_tag`` / ``GrammarCompiler.compile_structural_tag`` take it as it
     is, and so do XGrammar's (a dict, or ``json.dumps`` of it). Invalid arguments raise
     ``ValueError`` (an unknown model, a tools argument that is not a list, a malformed tool or
     tool choice, a named tool that is not in the list, ``"required"`` with no tool, ...).

What each model format writes is XGrammar's, format for format: a reasoning prefix
(``<think>...</think>`` or the model's own markers; ``reasoning="enabled"`` continues the opener
the prompt already ends with, ``"auto"`` makes a whole block optional, ``"disabled"`` drops it),
then free text whose trigger starts the model's tool-call syntax (``tool_choice="auto"``), the
calls alone (``"required"``: at least one; a named tool or a builtin type: exactly that one), or
free text only (``"none"``, or no tools). ``parallel_tool_calls=False`` stops after one call.

Compiling them in gxg: the JSON-argument families (llama, qwen_3, deepseek_r1, deepseek_v3_1,
kimi, harmony, exaone) compile. The families whose arguments are XML parameters (qwen_3_5 /
qwen_3_coder / mimo: ``qwen_xml``; deepseek_v3_2 / deepseek_v4: ``deepseek_xml``;
deepseek_v4_1: ``deepseek_v4_1_xml``; glm_4_7: ``glm_xml``; minimax: ``minimax_xml``;
minimax_m3: ``minimax_m3_xml``; cohere: ``cohere_xml``; kimi_k3: ``kimi_k3_xml`` with
``excludes``) compile as far as gxg's ``json_schema`` format supports that style; a style it
does not support is a ``GrammarError`` naming it (``gxg.grammar.structural_tag_emission``). A
tag with no tool (``tool_choice="none"``, no tools) has no json_schema and always compiles. No
builtin format of XGrammar 0.2.8 uses a token-level format (``token``, ``token_triggered_tags``,
...), so none of these tags is refused for that.

Deliberate differences from XGrammar, all on invalid input (valid input gives the same tag):
tools and tool choices are read without pydantic and without its lax coercions (see
``openai_tool_call_schema``: a malformed ``"type": "function"`` tool is a ValueError, not a
builtin tool named ``function``); ``any_order``, ``exclude_special_tokens`` must be booleans and
``max_whitespace_cnt`` an integer or None (pydantic coerces ``"yes"`` and ``"2"``); ``"required"``
with only builtin tools for a model that ignores builtin tools is a ValueError (XGrammar: a bare
AssertionError); a tool choice other than auto/required/forced given straight to a model builder
is a ValueError (XGrammar: UnboundLocalError).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union

from gxg.grammar.openai_tool_call_schema import (
    AllowedToolChoiceParam,
    BuiltinToolChoiceParam,
    BuiltinToolParam,
    FunctionDefinition,
    FunctionToolParam,
    NamedToolChoiceParam,
    ToolChoiceOptionParam,
    ToolParam,
    parse_tool,
    parse_tool_choice,
)

__all__ = [
    "get_model_structural_tag", "get_builtin_structural_tag", "normalize_tool_choice",
    "register_model_structural_tag", "MODEL_FORMATS",
    "get_llama_structural_tag", "get_kimi_structural_tag", "get_kimi_k3_structural_tag",
    "get_deepseek_r1_structural_tag", "get_deepseek_v3_1_structural_tag",
    "get_qwen_3_5_structural_tag", "get_qwen_3_coder_structural_tag",
    "get_mimo_structural_tag", "get_qwen_3_structural_tag", "get_harmony_structural_tag",
    "get_deepseek_v3_2_structural_tag", "get_minimax_structural_tag",
    "get_minimax_m3_structural_tag", "get_glm_4_7_structural_tag",
    "get_deepseek_v4_structural_tag", "get_deepseek_v4_1_structural_tag",
    "get_cohere_structural_tag", "get_exaone_structural_tag",
]

SimplifiedToolChoice = Literal["auto", "required", "forced"]
ReasoningMode = Literal["enabled", "disabled", "auto"]
BuiltinStructuralTagFn = Callable[..., Any]
StructuralTagData = Dict[str, Any]

_structural_tag_registry: Dict[str, BuiltinStructuralTagFn] = {}


# ----------------------------------------------------------------------------- API


def get_model_structural_tag(
    model: str,
    tools: Optional[List[Union[ToolParam, dict]]] = None,
    tool_choice: Union[ToolChoiceOptionParam, dict, None] = "auto",
    reasoning: Union[bool, ReasoningMode] = "enabled",
    force_reasoning: bool = False,
    any_order: bool = False,
    exclude_special_tokens: bool = True,
    max_whitespace_cnt: Optional[int] = None,
    parallel_tool_calls: bool = True,
) -> StructuralTagData:
    """The structural tag of ``model``'s reasoning and tool-call output, as JSON data.

    ``tools``: function tools ``{"type": "function", "function": {"name", "parameters", ...}}``
    and builtin tools ``{"type", "name"?, "parameters"?}`` (None: no tools). ``tool_choice``:
    ``"auto"`` (or None: text or calls), ``"none"`` (text only), ``"required"`` (at least one
    call), ``{"type": "function", "function": {"name": ...}}`` (that function),
    ``{"type": <builtin type>}`` (that builtin tool) or ``{"type": "allowed_tools",
    "allowed_tools": {"mode", "tools"}}``. ``reasoning``: ``"enabled"``, ``"disabled"``,
    ``"auto"`` (True/False: enabled/disabled). ``force_reasoning``: deprecated, ignored.
    ``any_order`` and ``max_whitespace_cnt`` go to every tool-argument json_schema;
    ``exclude_special_tokens`` keeps the model's special tokens out of free text;
    ``parallel_tool_calls=False`` allows at most one call.

    Returns ``{"type": "structural_tag", "format": ...}`` equal to XGrammar 0.2.8's result dumped
    as JSON. Raises ValueError on invalid arguments (see the module docstring).
    """
    func = _structural_tag_registry.get(model) if isinstance(model, str) else None
    if func is None:
        supported = list(_structural_tag_registry.keys())
        raise ValueError(f"Unknown format type: {model}, supported types: {supported}")

    function_tools, builtin_tools, simplified_tool_choice = normalize_tool_choice(
        tools, tool_choice)

    if isinstance(reasoning, bool):
        reasoning_mode = "enabled" if reasoning else "disabled"
    elif isinstance(reasoning, str) and reasoning in ("enabled", "disabled", "auto"):
        reasoning_mode = reasoning
    else:
        raise ValueError("The 'reasoning' argument must be a bool or one of: "
                         "'enabled', 'disabled', 'auto'.")
    if not isinstance(parallel_tool_calls, bool):
        raise ValueError("The 'parallel_tool_calls' argument must be a bool.")
    _check_options(any_order, exclude_special_tokens, max_whitespace_cnt)

    result = func(function_tools, builtin_tools, simplified_tool_choice, reasoning_mode,
                  any_order=any_order, exclude_special_tokens=exclude_special_tokens,
                  max_whitespace_cnt=max_whitespace_cnt,
                  parallel_tool_calls=parallel_tool_calls)
    return _as_structural_tag_data(result)


get_builtin_structural_tag = get_model_structural_tag
"""Alias of :func:`get_model_structural_tag` (XGrammar's older, deprecated name)."""


def normalize_tool_choice(
    tools: Optional[List[Union[ToolParam, dict]]] = None,
    tool_choice: Union[ToolChoiceOptionParam, dict, None] = "auto",
) -> Tuple[List[FunctionToolParam], List[BuiltinToolParam], SimplifiedToolChoice]:
    """The model-independent part of :func:`get_model_structural_tag`: ``(function_tools,
    builtin_tools, simplified_tool_choice)`` with the tools parsed and filtered by
    ``tool_choice``, and the choice simplified to ``"auto"`` (also for ``"none"``, with every
    tool removed), ``"required"`` or ``"forced"`` (exactly one tool left). ValueError when
    ``tools`` is not a list, a referenced tool is missing, a builtin choice does not match
    exactly one builtin tool, ``"required"`` leaves no tool, or ``"forced"`` not exactly one."""
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise ValueError("The 'tools' argument must be a list.")
    normalized_tools = [parse_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    function_tools = [t for t in normalized_tools if isinstance(t, FunctionToolParam)]
    builtin_tools = [t for t in normalized_tools if isinstance(t, BuiltinToolParam)]

    choice = parse_tool_choice(tool_choice)
    simplified: SimplifiedToolChoice
    if isinstance(choice, AllowedToolChoiceParam):
        function_tools, builtin_tools = _filter_allowed_tools(function_tools, builtin_tools,
                                                              choice)
        simplified = choice.allowed_tools.mode
    elif isinstance(choice, NamedToolChoiceParam):
        tool_name = choice.function.name
        function_tools = [t for t in function_tools if t.function.name == tool_name]
        if not function_tools:
            raise ValueError(f"The tool with name '{tool_name}' is not found in the tools list.")
        builtin_tools = []
        simplified = "forced"
    elif isinstance(choice, BuiltinToolChoiceParam):
        function_tools = []
        builtin_tools = [t for t in builtin_tools if t.type == choice.type]
        if len(builtin_tools) != 1:
            raise ValueError("Builtin tool choice must match exactly one builtin tool, "
                             f"got {len(builtin_tools)} matches.")
        simplified = "forced"
    elif choice == "none":
        # The builders treat auto with no tools as text only.
        function_tools, builtin_tools = [], []
        simplified = "auto"
    else:
        simplified = choice

    if simplified == "required" and not function_tools and not builtin_tools:
        raise ValueError("The 'tools' list is empty, which is not allowed when "
                         "'tool_choice' is 'required'.")
    if simplified == "forced" and len(function_tools) + len(builtin_tools) != 1:
        raise ValueError("Forced tool choice must resolve to exactly one tool.")
    return function_tools, builtin_tools, simplified


def register_model_structural_tag(name: str):
    """Decorator: register a model-specific builder under ``name`` for
    :func:`get_model_structural_tag`. The builder is called as ``func(function_tools,
    builtin_tools, tool_choice, reasoning, any_order=..., exclude_special_tokens=...,
    max_whitespace_cnt=..., parallel_tool_calls=...)`` with ``tool_choice`` one of
    ``"auto"``, ``"required"``, ``"forced"`` and returns a structural tag: JSON data (a dict or
    a JSON text) or an object with ``model_dump_json`` (an XGrammar ``StructuralTag``)."""

    def decorator(func):
        _structural_tag_registry[name] = func
        return func

    return decorator


# ----------------------------------------------------------------------------- helpers


def _check_options(any_order, exclude_special_tokens, max_whitespace_cnt) -> None:
    if not isinstance(any_order, bool):
        raise ValueError("The 'any_order' argument must be a bool.")
    if not isinstance(exclude_special_tokens, bool):
        raise ValueError("The 'exclude_special_tokens' argument must be a bool.")
    if max_whitespace_cnt is not None and (isinstance(max_whitespace_cnt, bool)
                                           or not isinstance(max_whitespace_cnt, int)):
        raise ValueError("The 'max_whitespace_cnt' argument must be an int or None.")


def _as_structural_tag_data(result) -> StructuralTagData:
    """A builder's result as fresh JSON data (no structure shared with the tool schemas or
    between tags)."""
    if isinstance(result, (str, bytes, bytearray)):
        text = result
    elif callable(getattr(result, "model_dump_json", None)):
        text = result.model_dump_json()
    else:
        try:
            text = json.dumps(result, ensure_ascii=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"The structural tag is not JSON data (a tool's parameters "
                             f"schema holds a value JSON cannot write?): {error}") from None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("A structural tag builder must return a structural tag object.")
    return data


def _function_tools(tools) -> List[FunctionToolParam]:
    """Builders take parsed tools; dicts are read here, so a builder can be called directly."""
    out = []
    for i, tool in enumerate(tools or []):
        tool = parse_tool(tool, f"tools[{i}]")
        if not isinstance(tool, FunctionToolParam):
            raise ValueError(f"tools[{i}]: expected a function tool, got a builtin tool "
                             f"of type {tool.type!r}")
        out.append(tool)
    return out


def _builtin_tools(tools) -> List[BuiltinToolParam]:
    out = []
    for i, tool in enumerate(tools or []):
        tool = parse_tool(tool, f"builtin_tools[{i}]")
        if not isinstance(tool, BuiltinToolParam):
            raise ValueError(f"builtin_tools[{i}]: expected a builtin tool, got a function "
                             f"tool")
        out.append(tool)
    return out


def _get_function_parameters(function: Union[FunctionDefinition, BuiltinToolParam]):
    """The JSON schema of a tool's arguments: ``True`` (any JSON) for no ``parameters`` or a
    non-strict function."""
    if isinstance(function, FunctionDefinition) and function.strict is False:
        return True
    if function.parameters is None:
        return True
    return function.parameters


def _get_builtin_tool_name(tool: BuiltinToolParam) -> str:
    return tool.name or tool.type


def _text_excludes(exclude_special_tokens: bool, tokens: List[str]) -> List[str]:
    return list(tokens) if exclude_special_tokens else []


def _unsupported_choice(tool_choice) -> ValueError:
    return ValueError(f"Unsupported tool choice: {tool_choice!r} (a builder takes 'auto', "
                      f"'required' or 'forced')")


def _forced_error() -> ValueError:
    return ValueError("Forced tool choice must resolve to exactly one tool.")


def _required_error() -> ValueError:
    return ValueError("Required tool choice needs at least one function tool.")


# -- the formats, as XGrammar's pydantic models dump them (every field, in their order)


def _const(value: str) -> dict:
    return {"type": "const_string", "value": value}


def _regex(pattern: str) -> dict:
    return {"type": "regex", "pattern": pattern}


def _json(json_schema, any_order: bool, max_whitespace_cnt: Optional[int],
          style: str = "json", excludes: Optional[List[str]] = None) -> dict:
    return {"type": "json_schema", "json_schema": json_schema, "style": style,
            "any_order": any_order, "max_whitespace_cnt": max_whitespace_cnt,
            "excludes": list(excludes or [])}


def _arguments(function, any_order: bool, max_whitespace_cnt: Optional[int],
               style: str = "json", **options) -> dict:
    """A call's arguments: the function's parameters as a json_schema format."""
    return _json(_get_function_parameters(function), any_order, max_whitespace_cnt, style,
                 **options)


def _any_text(excludes: Optional[List[str]] = None) -> dict:
    return {"type": "any_text", "excludes": list(excludes or []), "max_tokens": None,
            "max_chars": None}


def _tag(begin: str, content: dict, end: Union[str, List[str]]) -> dict:
    return {"type": "tag", "begin": begin, "content": content,
            "end": list(end) if isinstance(end, (list, tuple)) else end}


def _triggered(triggers: List[str], tags: List[dict], excludes: List[str],
               at_least_one: bool = False, stop_after_first: bool = False) -> dict:
    return {"type": "triggered_tags", "triggers": list(triggers), "tags": list(tags),
            "at_least_one": at_least_one, "stop_after_first": stop_after_first,
            "excludes": list(excludes)}


def _with_separator(tags: List[dict], separator: str, at_least_one: bool = False,
                    stop_after_first: bool = False) -> dict:
    return {"type": "tags_with_separator", "tags": list(tags), "separator": separator,
            "at_least_one": at_least_one, "stop_after_first": stop_after_first}


def _sequence(elements: List[dict]) -> dict:
    return {"type": "sequence", "elements": list(elements)}


def _or(elements: List[dict]) -> dict:
    return {"type": "or", "elements": list(elements)}


def _optional(content: dict) -> dict:
    return {"type": "optional", "content": content}


def _structural_tag(fmt: dict) -> StructuralTagData:
    return {"type": "structural_tag", "format": fmt}


def _build_reasoning_prefix(*, reasoning_mode: str, think_tag_begin: str, think_tag_end: str,
                            exclude_special_tokens: bool, reasoning_exclude_tokens: List[str],
                            prompt_end_with_think: bool = True,
                            reasoning_suffix: str = "") -> Optional[dict]:
    """A leading reasoning block: ``enabled`` continues the opener the prompt ends with (unless
    ``prompt_end_with_think`` is False), ``auto`` makes a whole block optional, ``disabled``
    omits it."""
    if reasoning_mode not in ("enabled", "disabled", "auto"):
        raise ValueError("The 'reasoning_mode' argument must be one of: 'enabled', 'disabled', "
                         "'auto'.")
    if reasoning_mode == "disabled":
        return None
    begin = "" if reasoning_mode == "enabled" and prompt_end_with_think else think_tag_begin
    prefix = _tag(begin, _any_text(_text_excludes(exclude_special_tokens,
                                                  reasoning_exclude_tokens)), think_tag_end)
    if reasoning_suffix:
        prefix = _sequence([prefix, _const(reasoning_suffix)])
    if reasoning_mode == "auto":
        prefix = _optional(prefix)
    return prefix


def _assemble_structural_tag(prefix: Optional[dict], suffix: dict) -> StructuralTagData:
    if prefix is None:
        return _structural_tag(suffix)
    return _structural_tag(_sequence([prefix, suffix]))


def _filter_allowed_tools(tools: List[FunctionToolParam], builtin_tools: List[BuiltinToolParam],
                          tool_choice: AllowedToolChoiceParam):
    allowed_function_names = set()
    allowed_builtin_types = set()
    for allowed_tool in tool_choice.allowed_tools.tools:
        if allowed_tool.type == "function":
            if allowed_tool.function is None:
                raise ValueError("Allowed function tool references must include 'function'.")
            allowed_function_names.add(allowed_tool.function.name)
        else:
            allowed_builtin_types.add(allowed_tool.type)

    missing_function_names = allowed_function_names - {t.function.name for t in tools}
    if missing_function_names:
        raise ValueError(f"Allowed function tools are not found in the tools list: "
                         f"{missing_function_names}.")
    filtered_builtin_tools = [t for t in builtin_tools if t.type in allowed_builtin_types]
    missing_builtin_refs = allowed_builtin_types - {t.type for t in filtered_builtin_tools}
    if missing_builtin_refs:
        raise ValueError(f"Allowed builtin tools are not found in the tools list: "
                         f"{missing_builtin_refs}.")
    filtered_tools = [t for t in tools if t.function.name in allowed_function_names]
    return filtered_tools, filtered_builtin_tools


# ----------------------------------------------------------------------------- model formats
# Each builder: (tools, builtin_tools, tool_choice in auto/required/forced, reasoning mode,
# options) -> the structural tag's JSON data. Same constants, same formats, same order as
# XGrammar 0.2.8's builder of the same name.

_THINK = ["<think>", "</think>"]


@register_model_structural_tag("llama")
def get_llama_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                             reasoning="enabled", any_order=False, exclude_special_tokens=True,
                             max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """Llama 3.x (Meta-Llama-3, Llama-3.1, Llama-3.2): ``{"name": "f", "parameters": {...}}``;
    no reasoning section (``reasoning`` is ignored)."""
    tools = _function_tools(tools)

    def call(function):
        return _tag('{"name": "' + function.name + '", "parameters": ',
                    _arguments(function, any_order, max_whitespace_cnt),
                    "}")

    tags = [call(t.function) for t in tools]
    excludes = _text_excludes(exclude_special_tokens, _THINK)
    if tool_choice == "auto":
        suffix = (_triggered(['{"name": '], tags, excludes,
                             stop_after_first=not parallel_tool_calls)
                  if tags else _any_text(excludes))
    elif tool_choice == "forced":
        if not tools:
            raise _forced_error()
        suffix = tags[0]
    elif tool_choice == "required":
        if not tags:
            raise _required_error()
        suffix = _triggered(['{"name": '], tags, excludes, at_least_one=True,
                            stop_after_first=not parallel_tool_calls)
    else:
        raise _unsupported_choice(tool_choice)
    return _structural_tag(suffix)


@register_model_structural_tag("kimi")
def get_kimi_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                            reasoning="enabled", any_order=False, exclude_special_tokens=True,
                            max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """Kimi-K2 / K2.5: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
    <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``."""
    TOOL_CALL_BEGIN = "<|tool_call_begin|>"
    SECTION_BEGIN = "<|tool_calls_section_begin|>"
    SECTION_END = "<|tool_calls_section_end|>"
    tools = _function_tools(tools)

    def call(function):
        return _tag(f"{TOOL_CALL_BEGIN}functions.{function.name}:",
                    _sequence([_regex(r"\d+"), _const("<|tool_call_argument_begin|>"),
                               _arguments(function, any_order, max_whitespace_cnt)]),
                    "<|tool_call_end|>")

    tags = [call(t.function) for t in tools]
    if tool_choice == "auto":
        if tags:
            section = _tag(SECTION_BEGIN, _with_separator(
                tags, "", at_least_one=True, stop_after_first=not parallel_tool_calls),
                SECTION_END)
            suffix = _triggered([SECTION_BEGIN], [section],
                                _text_excludes(exclude_special_tokens,
                                               [*_THINK, TOOL_CALL_BEGIN]),
                                stop_after_first=not parallel_tool_calls)
        else:
            suffix = _any_text(_text_excludes(exclude_special_tokens, _THINK))
    elif tool_choice == "forced":
        if not tools:
            raise _forced_error()
        suffix = _sequence([_const(SECTION_BEGIN), tags[0], _const(SECTION_END)])
    elif tool_choice == "required":
        if not tags:
            raise _required_error()
        suffix = _sequence([_const(SECTION_BEGIN),
                            _with_separator(tags, "", at_least_one=True,
                                            stop_after_first=not parallel_tool_calls),
                            _const(SECTION_END)])
    else:
        raise _unsupported_choice(tool_choice)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens,
        # Kimi-K2 does not prefill <think>; enabled mode keeps accepting it (XGrammar).
        reasoning_exclude_tokens=_THINK if reasoning == "auto" else [])
    return _assemble_structural_tag(prefix, suffix)


@register_model_structural_tag("kimi_k3")
def get_kimi_k3_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                               reasoning="enabled", any_order=False,
                               exclude_special_tokens=True, max_whitespace_cnt=None,
                               parallel_tool_calls=True, **kwargs):
    """Kimi-K3: ``<|open|>think<|sep|>...<|close|>think<|sep|>`` blocks, a response block, an
    optional tools block of ``<|open|>call tool="f" index="1"<|sep|>`` calls whose arguments
    are ``kimi_k3_xml`` parameters, then ``<|close|>message<|sep|>``."""
    OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
    TOOLS_BEGIN, TOOLS_END = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
    SPECIAL = [OPEN, CLOSE]
    tools = _function_tools(tools)

    def call(function):
        return _tag(f'{OPEN}call tool="{function.name}" index="',
                    _sequence([_regex(r"\d+"), _const(f'"{SEP}'),
                               _arguments(function, any_order, max_whitespace_cnt,
                                          style="kimi_k3_xml",
                                          excludes=_text_excludes(exclude_special_tokens,
                                                                  [OPEN, CLOSE, SEP]))]),
                    f"{CLOSE}call{SEP}")

    tags = [call(t.function) for t in tools]
    tools_part = None
    if tool_choice == "auto":
        if tags:
            tools_part = _optional(_tag(TOOLS_BEGIN, _with_separator(
                tags, "", at_least_one=True, stop_after_first=not parallel_tool_calls),
                TOOLS_END))
    elif tool_choice == "forced":
        if not tools:
            raise _forced_error()
        tools_part = _sequence([_const(TOOLS_BEGIN), tags[0], _const(TOOLS_END)])
    elif tool_choice == "required":
        if not tags:
            raise _required_error()
        tools_part = _sequence([_const(TOOLS_BEGIN),
                                _with_separator(tags, "", at_least_one=True,
                                                stop_after_first=not parallel_tool_calls),
                                _const(TOOLS_END)])
    else:
        raise _unsupported_choice(tool_choice)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin=f"{OPEN}think{SEP}",
        think_tag_end=f"{CLOSE}think{SEP}", exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=SPECIAL)
    elements = [] if prefix is None else [prefix]
    elements.append(_tag("" if reasoning == "disabled" else f"{OPEN}response{SEP}",
                         _any_text(_text_excludes(exclude_special_tokens, SPECIAL)),
                         f"{CLOSE}response{SEP}"))
    if tools_part is not None:
        elements.append(tools_part)
    elements.append(_const(f"{CLOSE}message{SEP}"))
    return _structural_tag(_sequence(elements))


_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"


def _think_prefix(reasoning, exclude_special_tokens, reasoning_suffix=""):
    return _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens, reasoning_exclude_tokens=_THINK,
        reasoning_suffix=reasoning_suffix)


def _deepseek_calls(tools, tool_choice, call, separator, excludes, parallel_tool_calls):
    """DeepSeek R1 / V3.1's calls after the reasoning: ``call(function, begin_prefix="",
    end_suffix="")`` is one call's tag; the calls sit between <｜tool▁calls▁begin｜> and
    <｜tool▁calls▁end｜>, ``separator`` between them; auto — free text whose trigger starts them;
    forced — that one call alone; required — the calls alone."""
    tags = [call(t.function) for t in tools]

    def all_calls():
        return _tag(_DS_CALLS_BEGIN, _with_separator(
            tags, separator, at_least_one=True, stop_after_first=not parallel_tool_calls),
            _DS_CALLS_END)
    if tool_choice == "auto":
        if not tags:
            return _any_text(excludes)
        return _triggered([_DS_CALLS_BEGIN], [all_calls()], excludes,
                          stop_after_first=not parallel_tool_calls)
    if tool_choice == "forced":
        if not tools:
            raise _forced_error()
        return call(tools[0].function, _DS_CALLS_BEGIN, _DS_CALLS_END)
    if tool_choice == "required":
        if not tags:
            raise _required_error()
        return all_calls()
    raise _unsupported_choice(tool_choice)


@register_model_structural_tag("deepseek_r1")
def get_deepseek_r1_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                   reasoning="enabled", any_order=False,
                                   exclude_special_tokens=True, max_whitespace_cnt=None,
                                   parallel_tool_calls=True, **kwargs):
    """DeepSeek-R1 / R1-0528: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f
    \\n```json\\n{...}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``."""
    tools = _function_tools(tools)
    JSON_BEGIN, JSON_END = "\n```json\n", "\n```"

    def call(function, begin_prefix="", end_suffix=""):
        return _tag(f"{begin_prefix}{_DS_CALL_BEGIN}function{_DS_SEP}{function.name}"
                    f"{JSON_BEGIN}",
                    _arguments(function, any_order, max_whitespace_cnt),
                    f"{JSON_END}{_DS_CALL_END}{end_suffix}")

    suffix = _deepseek_calls(tools, tool_choice, call, "\n",
                             _text_excludes(exclude_special_tokens, _THINK), parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens), suffix)


@register_model_structural_tag("deepseek_v3_1")
def get_deepseek_v3_1_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                     reasoning="enabled", any_order=False,
                                     exclude_special_tokens=True, max_whitespace_cnt=None,
                                     parallel_tool_calls=True, **kwargs):
    """DeepSeek-V3.1 / V3.2-Exp: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
    <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``."""
    tools = _function_tools(tools)

    def call(function, begin_prefix="", end_suffix=""):
        return _tag(f"{begin_prefix}{_DS_CALL_BEGIN}{function.name}{_DS_SEP}",
                    _arguments(function, any_order, max_whitespace_cnt),
                    f"{_DS_CALL_END}{end_suffix}")

    suffix = _deepseek_calls(tools, tool_choice, call, "",
                             _text_excludes(exclude_special_tokens, _THINK), parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens), suffix)


def _triggered_calls_tag(tools, tool_choice, make_tag, trigger, excludes, no_tool_excludes,
                         parallel_tool_calls):
    """The common suffix of the formats whose calls are triggered tags on their own: auto —
    free text with triggered calls; forced — the one call; required — at least one call."""
    tags = [make_tag(t.function) for t in tools]
    if tool_choice == "auto":
        if tags:
            return _triggered([trigger], tags, excludes,
                              stop_after_first=not parallel_tool_calls)
        return _any_text(no_tool_excludes)
    if tool_choice == "forced":
        if not tools:
            raise _forced_error()
        return tags[0]
    if tool_choice == "required":
        if not tags:
            raise _required_error()
        return _triggered([trigger], tags, excludes, at_least_one=True,
                          stop_after_first=not parallel_tool_calls)
    raise _unsupported_choice(tool_choice)


@register_model_structural_tag("qwen_3_5")
@register_model_structural_tag("qwen_3_coder")
def get_qwen_3_5_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                reasoning="enabled", any_order=False,
                                exclude_special_tokens=True, max_whitespace_cnt=None,
                                parallel_tool_calls=True, **kwargs):
    """Qwen3.5 / 3.6 / Qwen3-Coder (keys ``qwen_3_5`` and ``qwen_3_coder``): ``<tool_call>\\n
    <function=f>\\n<parameter=k>\\nv\\n</parameter>\\n</function>\\n</tool_call>`` (``qwen_xml``
    parameters)."""
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)

    def call(function):
        return _tag(f"<tool_call>\n<function={function.name}>\n",
                    _arguments(function, any_order, max_whitespace_cnt, style="qwen_xml"),
                    "\n</function>\n</tool_call>")

    suffix = _triggered_calls_tag(tools, tool_choice, call, "<tool_call>\n<function=",
                                  excludes, excludes, parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens, "\n\n"),
                                    suffix)


get_qwen_3_coder_structural_tag = get_qwen_3_5_structural_tag
"""Deprecated alias of :func:`get_qwen_3_5_structural_tag`."""


@register_model_structural_tag("mimo")
def get_mimo_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                            reasoning="enabled", any_order=False, exclude_special_tokens=True,
                            max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """MiMo-V2.6: Qwen XML parameters without the newlines, ``<tool_call><function=f>
    <parameter=k>v</parameter></function></tool_call>``; the prompt does not end with
    ``<think>``."""
    if builtin_tools:
        raise ValueError("MiMo does not support builtin tools.")
    tools = _function_tools(tools)
    tool_start = "<tool_call>"
    text_excludes = ["<think>", "</think>", "</tool_call>", "<function="]
    reasoning_excludes = [tool_start, *text_excludes]
    tags = [_tag(f"{tool_start}<function={t.function.name}>",
                 _json(_get_function_parameters(t.function), any_order, max_whitespace_cnt,
                       style="qwen_xml"),
                 "</function></tool_call>")
            for t in tools]
    if tool_choice == "forced":
        if not tags:
            raise _forced_error()
        suffix = tags[0]
    elif tool_choice in ("auto", "required"):
        if tool_choice == "required" and not tags:
            raise _required_error()
        if tags:
            suffix = _triggered([tool_start], tags,
                                _text_excludes(exclude_special_tokens, text_excludes),
                                at_least_one=tool_choice == "required",
                                stop_after_first=not parallel_tool_calls)
        else:
            suffix = _any_text(_text_excludes(exclude_special_tokens, reasoning_excludes))
    else:
        raise _unsupported_choice(tool_choice)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=reasoning_excludes, prompt_end_with_think=False)
    return _assemble_structural_tag(prefix, suffix)


@register_model_structural_tag("qwen_3")
def get_qwen_3_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                              reasoning="enabled", any_order=False, exclude_special_tokens=True,
                              max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """Qwen3 / Qwen3-Next: ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``."""
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)

    def call(function):
        return _tag('<tool_call>\n{"name": "' + function.name + '", "arguments": ',
                    _arguments(function, any_order, max_whitespace_cnt),
                    "}\n</tool_call>")

    suffix = _triggered_calls_tag(tools, tool_choice, call, "<tool_call>", excludes, excludes,
                                  parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens, "\n\n"),
                                    suffix)


@register_model_structural_tag("harmony")
def get_harmony_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                               reasoning="enabled", any_order=False,
                               exclude_special_tokens=True, max_whitespace_cnt=None,
                               parallel_tool_calls=True, **kwargs):
    """OpenAI harmony (gpt-oss): messages separated by ``<|start|>assistant`` — analysis
    (``<|channel|>analysis<|message|>...<|end|>``, unless reasoning is disabled), final, and
    tool calls ``<|channel|>commentary to=functions.f<|constrain|>json<|message|>{...}<|call|>``
    (three spellings; builtin tools ``to=<name> code``). As in XGrammar, the messages are
    ``tags_with_separator`` without ``at_least_one``: "required" and a forced tool do not
    demand a call here, and with parallel calls a forced tool may be called several times."""
    CALL_END = "<|call|>"
    FINAL_END = ["<|end|>", "<|return|>"]
    SEPARATOR = "<|start|>assistant"
    tools = _function_tools(tools)
    builtin_tools = _builtin_tools(builtin_tools)

    def function_tool_tags(name, parameters):
        def content():
            return _json(parameters, any_order, max_whitespace_cnt)
        return [
            _tag(f"<|channel|>commentary to=functions.{name}<|constrain|>json<|message|>",
                 content(), CALL_END),
            _tag(f" to=functions.{name}<|channel|>commentary <|constrain|>json<|message|>",
                 content(), CALL_END),
            _tag(f" to=functions.{name}<|channel|>commentary json<|message|>", content(),
                 CALL_END),
        ]

    def builtin_tool_tags(name, parameters):
        def content():
            return _json(parameters, any_order, max_whitespace_cnt)
        return [
            _tag(f"<|channel|>commentary to={name} code<|message|>", content(), CALL_END),
            _tag(f" to={name}<|channel|>commentary code<|message|>", content(), CALL_END),
        ]

    tags: List[dict] = []
    if tool_choice == "auto":
        for tool in tools:
            tags.extend(function_tool_tags(tool.function.name,
                                           _get_function_parameters(tool.function)))
        for tool in builtin_tools:
            tags.extend(builtin_tool_tags(_get_builtin_tool_name(tool),
                                          _get_function_parameters(tool)))
        tags.append(_tag("<|channel|>final<|message|>", _any_text(), FINAL_END))
    elif tool_choice == "forced":
        if builtin_tools:
            tags.extend(builtin_tool_tags(_get_builtin_tool_name(builtin_tools[0]),
                                          _get_function_parameters(builtin_tools[0])))
        elif tools:
            tags.extend(function_tool_tags(tools[0].function.name,
                                           _get_function_parameters(tools[0].function)))
        else:
            raise _forced_error()
    elif tool_choice == "required":
        for tool in builtin_tools:
            tags.extend(builtin_tool_tags(_get_builtin_tool_name(tool),
                                          _get_function_parameters(tool)))
        for tool in tools:
            tags.extend(function_tool_tags(tool.function.name,
                                           _get_function_parameters(tool.function)))
        if not tags:
            raise ValueError("Required tool choice needs at least one tool.")
    else:
        raise _unsupported_choice(tool_choice)

    if reasoning != "disabled":
        tags.append(_tag("<|channel|>analysis<|message|>", _any_text(), FINAL_END))

    call_tags = [tag for tag in tags if tag["end"] == CALL_END]
    message_tags = [tag for tag in tags if tag["end"] != CALL_END]
    if parallel_tool_calls or not call_tags:
        return _structural_tag(_with_separator(tags, SEPARATOR))
    # One message stream carries calls, analysis and final messages: cap the calls alone —
    # any number of other messages, then at most one call, which ends the turn (XGrammar).
    one_call = _with_separator(call_tags, SEPARATOR, at_least_one=True, stop_after_first=True)
    if not message_tags:
        return _structural_tag(_optional(one_call))
    messages_then_call = _sequence([
        _with_separator(message_tags, SEPARATOR, at_least_one=True),
        _const(SEPARATOR),
        one_call,
    ])
    return _structural_tag(_or([_with_separator(message_tags, SEPARATOR), one_call,
                                messages_then_call]))


def _dsml_calls(tools, tool_choice, *, invoke_begin_prefix, invoke_end, calls_begin, calls_end,
                calls_trigger, xml_style, excludes, no_tool_excludes, any_order,
                max_whitespace_cnt, parallel_tool_calls, separator="", forced_prefix="\n\n"):
    """The suffix of the DSML-like formats (DeepSeek V3.2/V4/V4.1, MiniMax): a calls block of
    ``<invoke name="f">`` tags with XML parameters; triggered in auto mode, after
    ``forced_prefix`` otherwise."""

    def invoke(function):
        return _tag(invoke_begin_prefix + function.name + '">\n',
                    _arguments(function, any_order, max_whitespace_cnt,
                          style=xml_style),
                    invoke_end)

    tags = [invoke(t.function) for t in tools]
    if tool_choice == "auto":
        if tags:
            block = _tag(calls_begin, _with_separator(
                tags, separator, at_least_one=True, stop_after_first=not parallel_tool_calls),
                calls_end)
            return _triggered([calls_trigger], [block], excludes,
                              stop_after_first=not parallel_tool_calls)
        return _any_text(no_tool_excludes)
    if tool_choice == "forced":
        if not tools:
            raise _forced_error()
        return _sequence([_const(forced_prefix + calls_begin), tags[0], _const(calls_end)])
    if tool_choice == "required":
        if not tags:
            raise _required_error()
        return _sequence([_const(forced_prefix + calls_begin),
                          _with_separator(tags, separator, at_least_one=True,
                                          stop_after_first=not parallel_tool_calls),
                          _const(calls_end)])
    raise _unsupported_choice(tool_choice)


@register_model_structural_tag("deepseek_v3_2")
def get_deepseek_v3_2_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                     reasoning="enabled", any_order=False,
                                     exclude_special_tokens=True, max_whitespace_cnt=None,
                                     parallel_tool_calls=True, **kwargs):
    """DeepSeek-V3.2: ``\\n\\n<｜DSML｜function_calls>\\n<｜DSML｜invoke name="f">\\n
    <｜DSML｜parameter name="k" string="true">v</｜DSML｜parameter>\\n</｜DSML｜invoke>\\n
    </｜DSML｜function_calls>`` (``deepseek_xml`` parameters)."""
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)
    suffix = _dsml_calls(
        tools, tool_choice, invoke_begin_prefix='<｜DSML｜invoke name="',
        invoke_end="</｜DSML｜invoke>\n", calls_begin="<｜DSML｜function_calls>\n",
        calls_end="</｜DSML｜function_calls>", calls_trigger="<｜DSML｜function_calls>",
        xml_style="deepseek_xml", excludes=excludes, no_tool_excludes=excludes,
        any_order=any_order, max_whitespace_cnt=max_whitespace_cnt,
        parallel_tool_calls=parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens), suffix)


@register_model_structural_tag("minimax")
def get_minimax_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                               reasoning="enabled", any_order=False,
                               exclude_special_tokens=True, max_whitespace_cnt=None,
                               parallel_tool_calls=True, **kwargs):
    """MiniMax-M2.5 / M2.7: ``<minimax:tool_call>\\n<invoke name="f">\\n<parameter name="k">v
    </parameter>\\n</invoke>\\n</minimax:tool_call>`` (``minimax_xml`` parameters)."""
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)
    suffix = _dsml_calls(
        tools, tool_choice, invoke_begin_prefix='<invoke name="', invoke_end="</invoke>\n",
        calls_begin="<minimax:tool_call>\n", calls_end="</minimax:tool_call>",
        calls_trigger="<minimax:tool_call>", xml_style="minimax_xml", excludes=excludes,
        no_tool_excludes=excludes, any_order=any_order,
        max_whitespace_cnt=max_whitespace_cnt, parallel_tool_calls=parallel_tool_calls,
        forced_prefix="\n")
    if reasoning == "disabled":
        return _structural_tag(_sequence([_const("\n</think>\n\n"), _const("\n\n"), suffix]))
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=[] if reasoning == "enabled" else _THINK,
        reasoning_suffix="\n\n")
    return _assemble_structural_tag(prefix, suffix)


@register_model_structural_tag("minimax_m3")
def get_minimax_m3_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                  reasoning="auto", any_order=False,
                                  exclude_special_tokens=True, max_whitespace_cnt=None,
                                  parallel_tool_calls=True, **kwargs):
    """MiniMax-M3: namespace-prefixed XML, ``]<]minimax[>[<tool_call>\\n]<]minimax[>[<invoke
    name="f">...]<]minimax[>[</invoke>\\n]<]minimax[>[</tool_call>`` (``minimax_m3_xml``);
    reasoning in ``<mm:think>...</mm:think>``. This builder's default reasoning is ``auto``."""
    NS = "]<]minimax[>["
    TOOL_CALL_BEGIN, TOOL_CALL_END = NS + "<tool_call>\n", NS + "</tool_call>"
    TRIGGER = NS + "<tool_call>"
    THINK_BEGIN, THINK_END = "<mm:think>", "</mm:think>"
    # Not the bare namespace: every M3 element and the trigger share it.
    stray_tool_markers = [TOOL_CALL_END, NS + "<invoke", NS + "</invoke>"]
    suffix_excludes = [THINK_BEGIN, THINK_END, *stray_tool_markers]
    reasoning_excludes = [TRIGGER, *suffix_excludes]
    if builtin_tools:
        raise ValueError("MiniMax M3 does not support builtin tools.")
    tools = _function_tools(tools)
    invoke_tags = [_tag(NS + '<invoke name="' + t.function.name + '">',
                        _json(_get_function_parameters(t.function), any_order,
                              max_whitespace_cnt, style="minimax_m3_xml"),
                        NS + "</invoke>\n")
                   for t in tools]

    def tool_call_tag(tags, allow_multiple=True):
        content = (_with_separator(tags, "", at_least_one=True,
                                   stop_after_first=not parallel_tool_calls)
                   if allow_multiple else tags[0])
        return _tag(TOOL_CALL_BEGIN, content, TOOL_CALL_END)

    if tool_choice == "auto":
        if invoke_tags:
            suffix = _triggered([TRIGGER], [tool_call_tag(invoke_tags)],
                                _text_excludes(exclude_special_tokens, suffix_excludes),
                                stop_after_first=not parallel_tool_calls)
        else:
            suffix = _any_text(_text_excludes(exclude_special_tokens,
                                              [TRIGGER, *suffix_excludes]))
    elif tool_choice == "forced":
        if not invoke_tags:
            raise _forced_error()
        suffix = tool_call_tag([invoke_tags[0]], allow_multiple=False)
    elif tool_choice == "required":
        if not invoke_tags:
            raise _required_error()
        suffix = _triggered([TRIGGER], [tool_call_tag(invoke_tags)],
                            _text_excludes(exclude_special_tokens, suffix_excludes),
                            at_least_one=True, stop_after_first=not parallel_tool_calls)
    else:
        raise _unsupported_choice(tool_choice)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin=THINK_BEGIN, think_tag_end=THINK_END,
        exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=reasoning_excludes)
    if prefix is not None and prefix["type"] == "optional":
        # The adaptive template writes a lone closing marker when it skips reasoning.
        prefix["content"] = _or([prefix["content"], _const(THINK_END)])
    return _assemble_structural_tag(prefix, suffix)


@register_model_structural_tag("glm_4_7")
def get_glm_4_7_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                               reasoning="enabled", any_order=False,
                               exclude_special_tokens=True, max_whitespace_cnt=None,
                               parallel_tool_calls=True, **kwargs):
    """GLM-4.7 / GLM-5: ``<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>
    </tool_call>`` (``glm_xml`` parameters); the tool-call control tokens are kept out of
    reasoning and free text."""
    tools = _function_tools(tools)
    ARG_TOKENS = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
    REASONING_EXCLUDES = _THINK + ["<tool_call>", "</tool_call>"] + ARG_TOKENS
    TEXT_EXCLUDES = _THINK + ["</tool_call>"] + ARG_TOKENS

    def call(function):
        return _tag(f"<tool_call>{function.name}",
                    _arguments(function, any_order, max_whitespace_cnt, style="glm_xml"),
                    "</tool_call>")

    suffix = _triggered_calls_tag(
        tools, tool_choice, call, "<tool_call>",
        _text_excludes(exclude_special_tokens, TEXT_EXCLUDES),
        _text_excludes(exclude_special_tokens, REASONING_EXCLUDES), parallel_tool_calls)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=REASONING_EXCLUDES)
    return _assemble_structural_tag(prefix, suffix)


def _deepseek_v4(tools, tool_choice, reasoning, any_order, exclude_special_tokens,
                 max_whitespace_cnt, parallel_tool_calls, *, v4_1: bool):
    invoke = " invoke" if v4_1 else "invoke"
    calls = " calls" if v4_1 else "tool_calls"
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)
    # V4.1: with no tool (tool_choice="none" included) a calls block must not slip through as
    # unconstrained text.
    no_tool_excludes = [*excludes, f"<｜DSML｜{calls}>"] if v4_1 else excludes
    suffix = _dsml_calls(
        tools, tool_choice, invoke_begin_prefix=f'<｜DSML｜{invoke} name="',
        invoke_end=f"</｜DSML｜{invoke}>\n", calls_begin=f"<｜DSML｜{calls}>\n",
        calls_end=f"</｜DSML｜{calls}>", calls_trigger=f"<｜DSML｜{calls}>",
        xml_style="deepseek_v4_1_xml" if v4_1 else "deepseek_xml", excludes=excludes,
        no_tool_excludes=no_tool_excludes, any_order=any_order,
        max_whitespace_cnt=max_whitespace_cnt, parallel_tool_calls=parallel_tool_calls)
    return _assemble_structural_tag(_think_prefix(reasoning, exclude_special_tokens), suffix)


@register_model_structural_tag("deepseek_v4")
def get_deepseek_v4_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                   reasoning="enabled", any_order=False,
                                   exclude_special_tokens=True, max_whitespace_cnt=None,
                                   parallel_tool_calls=True, **kwargs):
    """DeepSeek-V4: ``<｜DSML｜tool_calls>`` blocks of ``<｜DSML｜invoke name="f">`` calls
    (``deepseek_xml`` parameters)."""
    return _deepseek_v4(tools, tool_choice, reasoning, any_order, exclude_special_tokens,
                        max_whitespace_cnt, parallel_tool_calls, v4_1=False)


@register_model_structural_tag("deepseek_v4_1")
def get_deepseek_v4_1_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                                     reasoning="enabled", any_order=False,
                                     exclude_special_tokens=True, max_whitespace_cnt=None,
                                     parallel_tool_calls=True, **kwargs):
    """DeepSeek-V4.1-Flash: ``<｜DSML｜ calls>`` blocks of ``<｜DSML｜ invoke name="f">`` calls
    (``deepseek_v4_1_xml`` parameters)."""
    return _deepseek_v4(tools, tool_choice, reasoning, any_order, exclude_special_tokens,
                        max_whitespace_cnt, parallel_tool_calls, v4_1=True)


@register_model_structural_tag("cohere")
def get_cohere_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                              reasoning="enabled", any_order=False, exclude_special_tokens=True,
                              max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """Cohere Command: ``<cofl:tool_calls><cofl:tool_call id="0" name="f">...
    </cofl:tool_call></cofl:tool_calls>`` (``cohere_xml`` parameters); reasoning in
    ``<|START_THINKING|>...<|END_THINKING|>``."""
    TOOL_CALLS_BEGIN, TOOL_CALLS_END = "<cofl:tool_calls>", "</cofl:tool_calls>"
    THINK_EXCLUDE = ["<|START_THINKING|>", "<|END_THINKING|>"]
    tools = _function_tools(tools)

    def call(function):
        return _tag('<cofl:tool_call id="',
                    _sequence([_regex(r"\d+"), _const('" name="' + function.name + '">'),
                               _arguments(function, any_order, max_whitespace_cnt,
                                          style="cohere_xml")]),
                    "</cofl:tool_call>")

    tags = [call(t.function) for t in tools]
    if tool_choice == "auto":
        if tags:
            block = _tag(TOOL_CALLS_BEGIN, _with_separator(
                tags, "", at_least_one=True, stop_after_first=not parallel_tool_calls),
                TOOL_CALLS_END)
            suffix = _triggered([TOOL_CALLS_BEGIN], [block],
                                _text_excludes(exclude_special_tokens, THINK_EXCLUDE),
                                stop_after_first=not parallel_tool_calls)
        else:
            suffix = _any_text(_text_excludes(exclude_special_tokens, THINK_EXCLUDE))
    elif tool_choice == "forced":
        if not tools:
            raise _forced_error()
        suffix = _sequence([_const(TOOL_CALLS_BEGIN), tags[0], _const(TOOL_CALLS_END)])
    elif tool_choice == "required":
        if not tags:
            raise _required_error()
        suffix = _sequence([_const(TOOL_CALLS_BEGIN),
                            _with_separator(tags, "", at_least_one=True,
                                            stop_after_first=not parallel_tool_calls),
                            _const(TOOL_CALLS_END)])
    else:
        raise _unsupported_choice(tool_choice)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<|START_THINKING|>",
        think_tag_end="<|END_THINKING|>", exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=[] if reasoning == "enabled" else THINK_EXCLUDE)
    return _assemble_structural_tag(prefix, suffix)


@register_model_structural_tag("exaone")
def get_exaone_structural_tag(tools=None, builtin_tools=None, tool_choice="auto",
                              reasoning="enabled", any_order=False, exclude_special_tokens=True,
                              max_whitespace_cnt=None, parallel_tool_calls=True, **kwargs):
    """EXAONE 4.0: ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``."""
    tools = _function_tools(tools)
    excludes = _text_excludes(exclude_special_tokens, _THINK)

    def call(function):
        return _tag('<tool_call>{"name": "' + function.name + '", "arguments": ',
                    _arguments(function, any_order, max_whitespace_cnt),
                    "}</tool_call>")

    suffix = _triggered_calls_tag(tools, tool_choice, call, "<tool_call>", excludes, excludes,
                                  parallel_tool_calls)
    prefix = _build_reasoning_prefix(
        reasoning_mode=reasoning, think_tag_begin="<think>", think_tag_end="</think>",
        exclude_special_tokens=exclude_special_tokens,
        reasoning_exclude_tokens=[] if reasoning == "enabled" else _THINK,
        reasoning_suffix="\n\n")
    return _assemble_structural_tag(prefix, suffix)


MODEL_FORMATS: Tuple[str, ...] = tuple(_structural_tag_registry)
"""The model format keys registered here (XGrammar 0.2.8's, in its order)."""
