"""Builtin model formats (gxg/grammar/builtin_structural_tag.py, openai_tool_call_schema.py):
``get_model_structural_tag`` / ``get_builtin_structural_tag`` for every model format key of
XGrammar 0.2.8.

Specification:
1. the tag, as JSON data, equals XGrammar 0.2.8's (``model_dump_json``) for every model, tool
   choice (auto / required / none / a named tool / allowed tools / a builtin tool), reasoning
   mode, parallel calls on and off and the argument options;
2. compiled by gxg over an empty vocabulary, it accepts a realistic output of that model
   (reasoning section, free text where the format allows it, tool calls whose arguments follow
   the tool's JSON schema) and rejects broken ones (wrong or unavailable tool name, arguments
   that violate the schema, a missing end tag, a second call when parallel calls are off, a
   missing or forbidden reasoning section, a special token in free text); XGrammar gives the
   same verdicts on the same strings, which also checks the strings themselves, and on random
   near misses of them. The families
   whose arguments are XML parameters need gxg's XML ``style`` of ``json_schema``: while gxg
   refuses a style, the gxg half of those cases is skipped, naming the style;
3. invalid arguments raise ValueError, as XGrammar's do.
"""
from __future__ import annotations

import functools
import itertools
import json
import random
import zlib
from typing import Dict, List, Optional, Tuple

import pytest

import gxg
from gxg.grammar.builtin_structural_tag import (
    MODEL_FORMATS,
    get_builtin_structural_tag,
    get_llama_structural_tag,
    get_model_structural_tag,
    normalize_tool_choice,
    register_model_structural_tag,
)
from gxg.grammar.ir import GrammarError
from gxg.grammar.openai_tool_call_schema import BuiltinToolParam, FunctionToolParam
from gxg.grammar.structural_tag import (JSON_SCHEMA_STYLES, TOKEN_FORMAT_TYPES,
                                        parse_structural_tag)

import xgrammar_oracle
from xgrammar_oracle import needs_xgrammar, xgrammar

gxg_accepts = functools.partial(xgrammar_oracle.gxg_accepts, "structural_tag")
xgr_accepts = functools.partial(xgrammar_oracle.xgr_accepts, "structural_tag")

# ----------------------------------------------------------------------------- tools

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                   "required": ["q"]}}}
NO_ARGS = {"type": "function", "function": {"name": "now"}}
LOOSE = {"type": "function", "function": {"name": "loose", "strict": False,
                                          "parameters": {"type": "object"}}}
BROWSER = {"type": "web_search_preview", "name": "browser.search",
           "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                          "required": ["query"]}}
TOOLS = [WEATHER, SEARCH]
NAMED = {"type": "function", "function": {"name": "get_weather"}}

CHOICES = {"auto": "auto", "required": "required", "none": "none", "named": NAMED}

WEATHER_CALL = ("get_weather", {"city": "Paris", "days": 3})
SEARCH_CALL = ("search", {"q": "rain in Paris"})
BAD_TYPE_CALL = ("get_weather", {"city": "Paris", "days": "three"})   # days: integer
MISSING_CALL = ("get_weather", {"days": 3})                            # city is required
WRONG_NAME_CALL = ("get_wether", {"city": "Paris"})

XML_FAMILIES = {"qwen_3_5", "qwen_3_coder", "mimo", "deepseek_v3_2", "deepseek_v4",
                "deepseek_v4_1", "minimax", "minimax_m3", "glm_4_7", "cohere", "kimi_k3"}


# ----------------------------------------------------------------------------- renderers
# What each model writes: reasoning section, free text, tool calls (name, arguments). These
# are the model's chat-template spellings; the tests check them against XGrammar too.

THOUGHT = "The user wants the weather; I should call a tool."
TEXT = "Let me look that up. "
ANSWER = "It will be sunny in Paris."
NS = "]<]minimax[>["


def _json_value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _params(style: str, args: Dict) -> str:
    """The arguments in the model's parameter syntax (``json`` or an XML style)."""
    if style == "json":
        return json.dumps(args)
    out = []
    for key, value in args.items():
        raw, is_str = _json_value(value), isinstance(value, str)
        if style == "qwen_xml":
            out.append(f"<parameter={key}>\n{raw}\n</parameter>")
        elif style == "mimo":
            out.append(f"<parameter={key}>{raw}</parameter>")
        elif style in ("deepseek_xml", "deepseek_v4_1_xml"):
            sp = " " if style == "deepseek_v4_1_xml" else ""
            out.append(f'<｜DSML｜{sp}parameter name="{key}" string="{str(is_str).lower()}">'
                       f"{raw}</｜DSML｜{sp}parameter>\n")
        elif style == "minimax_xml":
            out.append(f'<parameter name="{key}">{raw}</parameter>\n')
        elif style == "minimax_m3_xml":
            out.append(f"{NS}<{key}>{raw}{NS}</{key}>")
        elif style == "glm_xml":
            out.append(f"<arg_key>{key}</arg_key><arg_value>{raw}</arg_value>")
        elif style == "cohere_xml":
            out.append(f'<cofl:value name="{key}" type="{"raw" if is_str else "json"}">{raw}'
                       f"</cofl:value>")
        elif style == "kimi_k3_xml":
            out.append(f'<|open|>argument key="{key}" type="{"string" if is_str else "number"}"'
                       f"<|sep|>{raw}<|close|>argument<|sep|>")
        else:
            raise AssertionError(style)
    return ("\n" if style == "qwen_xml" else "").join(out)


class Family:
    """How one model format writes an output. ``think``: (opener, closer, suffix) of the
    reasoning block, or None; ``prefilled``: the prompt already ends with the opener (so
    ``reasoning="enabled"`` continues it); ``call``: (index, name, args) -> one call;
    ``block``: (calls, tool_choice) -> the call section as written after the free text;
    ``text_auto``: free text may precede the calls in auto mode; ``call_end``: the end marker
    of a call (removed to make a truncated call); ``special``: a token that free text must not
    contain."""

    def __init__(self, call, block=None, think=("<think>", "</think>", ""), prefilled=True,
                 text_auto=True, call_end="", special="<think>", disabled_prefix=""):
        self.call, self.think, self.prefilled = call, think, prefilled
        self.block = block or (lambda calls, choice: "".join(calls))
        self.text_auto, self.call_end, self.special = text_auto, call_end, special
        self.disabled_prefix = disabled_prefix

    def reasoning(self, mode: str, with_block: bool = True) -> str:
        if self.think is None or mode == "disabled":
            return self.disabled_prefix if self.think is not None else ""
        opener, closer, suffix = self.think
        if not with_block:
            return ""
        if mode == "enabled":
            return (THOUGHT if self.prefilled else opener + THOUGHT) + closer + suffix
        return opener + THOUGHT + closer + suffix

    def render(self, mode: str, choice: str, calls: List[Tuple[str, Dict]],
               with_block: bool = True, text: str = TEXT) -> str:
        out = self.reasoning(mode, with_block)
        if not calls:
            return out + ANSWER
        rendered = [self.call(i, name, args) for i, (name, args) in enumerate(calls)]
        if choice == "auto" and self.text_auto:
            out += text
        return out + self.block(rendered, choice)


def _llama_call(i, name, args):
    return '{"name": "' + name + '", "parameters": ' + json.dumps(args) + "}"


def _qwen3_call(i, name, args):
    return '<tool_call>\n{"name": "' + name + '", "arguments": ' + json.dumps(args) + \
        "}\n</tool_call>"


def _exaone_call(i, name, args):
    return '<tool_call>{"name": "' + name + '", "arguments": ' + json.dumps(args) + \
        "}</tool_call>"


def _qwen_xml_call(i, name, args):
    return f"<tool_call>\n<function={name}>\n{_params('qwen_xml', args)}\n</function>\n" \
           f"</tool_call>"


def _mimo_call(i, name, args):
    return f"<tool_call><function={name}>{_params('mimo', args)}</function></tool_call>"


DS = {"calls_begin": "<｜tool▁calls▁begin｜>", "calls_end": "<｜tool▁calls▁end｜>",
      "call_begin": "<｜tool▁call▁begin｜>", "call_end": "<｜tool▁call▁end｜>",
      "sep": "<｜tool▁sep｜>"}


def _r1_call(i, name, args):
    return f"{DS['call_begin']}function{DS['sep']}{name}\n```json\n{json.dumps(args)}\n```" \
           f"{DS['call_end']}"


def _v31_call(i, name, args):
    return f"{DS['call_begin']}{name}{DS['sep']}{json.dumps(args)}{DS['call_end']}"


def _kimi_call(i, name, args):
    return f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>" \
           f"{json.dumps(args)}<|tool_call_end|>"


def _dsml(calls_word, invoke_word, style):
    def call(i, name, args):
        return f'<｜DSML｜{invoke_word} name="{name}">\n{_params(style, args)}' \
               f"</｜DSML｜{invoke_word}>\n"

    def block(calls, choice):
        lead = "" if choice == "auto" else "\n\n"
        return f"{lead}<｜DSML｜{calls_word}>\n{''.join(calls)}</｜DSML｜{calls_word}>"
    return call, block


def _minimax_call(i, name, args):
    return f'<invoke name="{name}">\n{_params("minimax_xml", args)}</invoke>\n'


def _minimax_block(calls, choice):
    lead = "" if choice == "auto" else "\n"
    return f"{lead}<minimax:tool_call>\n{''.join(calls)}</minimax:tool_call>"


def _m3_call(i, name, args):
    return f'{NS}<invoke name="{name}">{_params("minimax_m3_xml", args)}{NS}</invoke>\n'


def _glm_call(i, name, args):
    return f"<tool_call>{name}{_params('glm_xml', args)}</tool_call>"


def _cohere_call(i, name, args):
    return f'<cofl:tool_call id="{i}" name="{name}">{_params("cohere_xml", args)}' \
           f"</cofl:tool_call>"


def _k3_call(i, name, args):
    return f'<|open|>call tool="{name}" index="{i + 1}"<|sep|>{_params("kimi_k3_xml", args)}' \
           f"<|close|>call<|sep|>"


def _wrap(begin, end):
    return lambda calls, choice: begin + "".join(calls) + end


_V32 = _dsml("function_calls", "invoke", "deepseek_xml")
_V4 = _dsml("tool_calls", "invoke", "deepseek_xml")
_V41 = _dsml(" calls", " invoke", "deepseek_v4_1_xml")
_QWEN_XML = Family(_qwen_xml_call, lambda c, ch: "\n".join(c),
                   think=("<think>", "</think>", "\n\n"), call_end="</tool_call>")

FAMILIES: Dict[str, Family] = {
    "llama": Family(_llama_call, lambda c, ch: " ".join(c), think=None, call_end="}"),
    "qwen_3": Family(_qwen3_call, lambda c, ch: "\n".join(c),
                     think=("<think>", "</think>", "\n\n"), call_end="</tool_call>"),
    "qwen_3_5": _QWEN_XML,
    "qwen_3_coder": _QWEN_XML,
    "mimo": Family(_mimo_call, prefilled=False, call_end="</tool_call>"),
    "exaone": Family(_exaone_call, think=("<think>", "</think>", "\n\n"),
                     call_end="</tool_call>"),
    "deepseek_r1": Family(_r1_call, lambda c, ch: DS["calls_begin"] + "\n".join(c) +
                          DS["calls_end"], call_end=DS["call_end"]),
    "deepseek_v3_1": Family(_v31_call, _wrap(DS["calls_begin"], DS["calls_end"]),
                            call_end=DS["call_end"]),
    "deepseek_v3_2": Family(_V32[0], _V32[1], call_end="</｜DSML｜invoke>"),
    "deepseek_v4": Family(_V4[0], _V4[1], call_end="</｜DSML｜invoke>"),
    "deepseek_v4_1": Family(_V41[0], _V41[1], call_end="</｜DSML｜ invoke>"),
    "kimi": Family(_kimi_call, _wrap("<|tool_calls_section_begin|>",
                                     "<|tool_calls_section_end|>"),
                   call_end="<|tool_call_end|>"),
    "minimax": Family(_minimax_call, _minimax_block, think=("<think>", "</think>", "\n\n"),
                      call_end="</invoke>", disabled_prefix="\n</think>\n\n\n\n"),
    "minimax_m3": Family(_m3_call, _wrap(f"{NS}<tool_call>\n", f"{NS}</tool_call>"),
                         think=("<mm:think>", "</mm:think>", ""), call_end=f"{NS}</invoke>",
                         special="<mm:think>"),
    "glm_4_7": Family(_glm_call, call_end="</tool_call>"),
    "cohere": Family(_cohere_call, _wrap("<cofl:tool_calls>", "</cofl:tool_calls>"),
                     think=("<|START_THINKING|>", "<|END_THINKING|>", ""),
                     call_end="</cofl:tool_call>", special="<|START_THINKING|>"),
}


class Harmony(Family):
    """gpt-oss: messages separated by ``<|start|>assistant``; the analysis message is the
    reasoning (optional even when enabled), calls are messages ending in ``<|call|>``."""

    def __init__(self):
        super().__init__(None, think=None, call_end="<|call|>")

    def render(self, mode, choice, calls, with_block=True, text=TEXT):
        messages = []
        if mode != "disabled" and with_block:
            messages.append(f"<|channel|>analysis<|message|>{THOUGHT}<|end|>")
        for name, args in calls:
            if name == "browser.search":
                messages.append(f"<|channel|>commentary to={name} code<|message|>"
                                f"{json.dumps(args)}<|call|>")
            else:
                messages.append(f"<|channel|>commentary to=functions.{name}<|constrain|>json"
                                f"<|message|>{json.dumps(args)}<|call|>")
        if not calls:
            messages.append(f"<|channel|>final<|message|>{ANSWER}<|return|>")
        return "<|start|>assistant".join(messages)


class KimiK3(Family):
    """Kimi-K3: think block, response block, optional tools block, message end."""

    def __init__(self):
        super().__init__(_k3_call, call_end="<|close|>call<|sep|>", special="<|open|>")

    def render(self, mode, choice, calls, with_block=True, text=TEXT):
        if mode == "enabled":
            out = f"{THOUGHT}<|close|>think<|sep|><|open|>response<|sep|>"
        elif mode == "auto":
            out = (f"<|open|>think<|sep|>{THOUGHT}<|close|>think<|sep|>" if with_block
                   else "") + "<|open|>response<|sep|>"
        else:
            out = ""
        out += (text if calls else ANSWER) + "<|close|>response<|sep|>"
        if calls:
            out += "<|open|>tools<|sep|>" + "".join(
                self.call(i, n, a) for i, (n, a) in enumerate(calls)) + "<|close|>tools<|sep|>"
        return out + "<|close|>message<|sep|>"

    def reasoning(self, mode, with_block=True):
        raise AssertionError("KimiK3 renders whole outputs")


FAMILIES["harmony"] = Harmony()
FAMILIES["kimi_k3"] = KimiK3()


# ----------------------------------------------------------------------------- cases


def _cases(model: str, choice: str, reasoning: str, parallel: bool
           ) -> Tuple[List[str], List[Tuple[str, str]]]:
    """(accepted outputs, [(why, rejected output)]) for one configuration."""
    fam = FAMILIES[model]
    render = functools.partial(fam.render, reasoning, choice)
    accepted, rejected = [], []
    if choice == "none":
        accepted.append(render([]))
        if model == "harmony":
            rejected.append(("a call with tool_choice none", render([WEATHER_CALL])))
        else:
            answer = render([])
            at = answer.rindex(ANSWER) + len("It will be")
            rejected.append(("special token in free text",
                             answer[:at] + fam.special + answer[at:]))
        return accepted, rejected

    one = render([WEATHER_CALL])
    accepted.append(one)
    two = render([WEATHER_CALL, SEARCH_CALL])
    if choice == "named":
        rejected.append(("a tool other than the named one", render([SEARCH_CALL])))
        twice = render([WEATHER_CALL, WEATHER_CALL])
        if model == "harmony" and parallel:
            accepted.append(twice)  # XGrammar's harmony: any number of the forced tool's calls
        else:
            rejected.append(("two calls of a forced tool", twice))
    elif parallel:
        accepted.append(two)
    else:
        rejected.append(("a second call with parallel calls off", two))
    if choice == "required" and model not in ("harmony",):
        rejected.append(("no call", fam.reasoning(reasoning) + ANSWER)
                        if model != "kimi_k3" else ("no call", render([])))
    rejected.append(("wrong tool name", render([WRONG_NAME_CALL])))
    rejected.append(("argument of the wrong type", render([BAD_TYPE_CALL])))
    rejected.append(("required argument missing", render([MISSING_CALL])))
    at = one.rindex(fam.call_end)
    rejected.append(("missing end tag", one[:at]))
    if model == "harmony":
        if reasoning == "disabled":
            rejected.append(("analysis with reasoning disabled",
                             Harmony().render("enabled", choice, [WEATHER_CALL])))
    elif fam.think is not None or model == "kimi_k3":
        if reasoning == "auto":
            accepted.append(render([WEATHER_CALL], with_block=False))
        elif reasoning == "enabled":
            rejected.append(("missing reasoning", render([WEATHER_CALL], with_block=False)
                             if model != "kimi_k3" else
                             KimiK3().render("disabled", choice, [WEATHER_CALL])))
        else:
            rejected.append(("reasoning with reasoning disabled",
                             fam.render("auto", choice, [WEATHER_CALL])
                             if model != "minimax" else
                             fam.render("enabled", choice, [WEATHER_CALL])))
    return accepted, rejected


def _configs():
    for model in MODEL_FORMATS:
        for choice in CHOICES:
            for reasoning in ("enabled", "disabled", "auto"):
                for parallel in (True, False):
                    if choice in ("none", "named") and not parallel and reasoning != "enabled":
                        continue
                    if model == "llama" and reasoning != "enabled" and choice != "auto":
                        continue  # llama ignores reasoning
                    yield pytest.param(model, choice, reasoning, parallel,
                                       id=f"{model}-{choice}-{reasoning}-"
                                          f"{'parallel' if parallel else 'single'}")


def _tag_text(model, choice, reasoning, parallel, **options) -> str:
    return json.dumps(get_model_structural_tag(model, tools=TOOLS, tool_choice=CHOICES[choice],
                                               reasoning=reasoning,
                                               parallel_tool_calls=parallel, **options))


@functools.lru_cache(maxsize=None)
def _gxg_refusal(text: str) -> Optional[str]:
    """None if gxg compiles the tag; else the XML style it refuses (anything else fails)."""
    try:
        xgrammar_oracle.gxg_compiled("structural_tag", text)
    except GrammarError as error:
        message = str(error)
        for style in JSON_SCHEMA_STYLES:
            if style != "json" and style in message and "not supported" in message:
                return style
        raise
    return None


# ----------------------------------------------------------------------------- 1. the data


def _walk(data):
    yield data
    if isinstance(data, dict):
        for value in data.values():
            yield from _walk(value)
    elif isinstance(data, list):
        for value in data:
            yield from _walk(value)


def test_model_formats_are_xgrammars():
    assert "llama" in MODEL_FORMATS and "harmony" in MODEL_FORMATS and len(MODEL_FORMATS) == 18
    if xgrammar is not None:
        from xgrammar.builtin_structural_tag import _structural_tag_registry
        assert MODEL_FORMATS == tuple(_structural_tag_registry)


OPTION_SETS = [{}, {"any_order": True, "max_whitespace_cnt": 2},
               {"exclude_special_tokens": False}]
DATA_CHOICES = {**CHOICES, "allowed": {"type": "allowed_tools", "allowed_tools": {
    "mode": "required", "tools": [{"type": "function", "function": {"name": "search"}}]}}}
DATA_TOOLSETS = [TOOLS, [WEATHER, SEARCH, NO_ARGS, LOOSE]]


@needs_xgrammar
@pytest.mark.parametrize("model", MODEL_FORMATS)
@pytest.mark.parametrize("choice", list(DATA_CHOICES))
def test_tag_equals_xgrammars(model, choice):
    for tools, reasoning, parallel, options in itertools.product(
            DATA_TOOLSETS, ("enabled", "disabled", "auto"), (True, False), OPTION_SETS):
        kwargs = dict(tools=tools, tool_choice=DATA_CHOICES[choice], reasoning=reasoning,
                      parallel_tool_calls=parallel, **options)
        ours = get_model_structural_tag(model, **kwargs)
        theirs = xgrammar.get_model_structural_tag(model, **kwargs)
        assert ours == json.loads(theirs.model_dump_json()), kwargs
        # the same JSON text, field order included
        assert json.dumps(ours) == json.dumps(json.loads(theirs.model_dump_json()))
        parse_structural_tag(ours)              # gxg's reader reads every builtin tag
        assert not any(isinstance(node, dict) and node.get("type") in TOKEN_FORMAT_TYPES
                       for node in _walk(ours)), "no builtin format is token-level"


@needs_xgrammar
@pytest.mark.parametrize("model", ["harmony", "llama", "qwen_3", "mimo", "minimax_m3"])
def test_builtin_tools_equal_xgrammars(model):
    tools = [WEATHER, BROWSER]
    for choice in ("auto", "required", {"type": "web_search_preview"},
                   {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
                       {"type": "web_search_preview"}]}}):
        for parallel in (True, False):
            kwargs = dict(tools=tools, tool_choice=choice, parallel_tool_calls=parallel)
            try:
                theirs = json.loads(
                    xgrammar.get_model_structural_tag(model, **kwargs).model_dump_json())
            except (ValueError, AssertionError):
                with pytest.raises(ValueError):
                    get_model_structural_tag(model, **kwargs)
                continue
            assert get_model_structural_tag(model, **kwargs) == theirs, kwargs


def test_result_is_fresh_json_data():
    tools = [json.loads(json.dumps(WEATHER))]
    tag = get_model_structural_tag("harmony", tools=tools)
    assert json.loads(json.dumps(tag)) == tag
    schemas = [node["json_schema"] for node in _walk(tag)
               if isinstance(node, dict) and node.get("type") == "json_schema"]
    assert len(schemas) == 3 and schemas[0] == WEATHER["function"]["parameters"]
    schemas[0]["properties"]["city"]["type"] = "integer"     # no sharing: not with the tools
    assert tools[0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert schemas[1]["properties"]["city"]["type"] == "string"  # nor between tags


def test_aliases_and_exports():
    assert get_builtin_structural_tag is get_model_structural_tag
    assert gxg.get_builtin_structural_tag is get_model_structural_tag
    assert gxg.get_model_structural_tag is get_model_structural_tag
    assert gxg.normalize_tool_choice is normalize_tool_choice
    assert gxg.register_model_structural_tag is register_model_structural_tag
    assert "get_builtin_structural_tag" in gxg.__all__


def test_builders_take_dicts_directly():
    assert get_llama_structural_tag([WEATHER], tool_choice="forced") == \
        get_model_structural_tag("llama", tools=[WEATHER], tool_choice=NAMED)


def test_normalize_tool_choice():
    functions, builtins, choice = normalize_tool_choice([WEATHER, BROWSER, SEARCH], "auto")
    assert [t.function.name for t in functions] == ["get_weather", "search"]
    assert isinstance(functions[0], FunctionToolParam)
    assert [(t.type, t.name) for t in builtins] == [("web_search_preview", "browser.search")]
    assert isinstance(builtins[0], BuiltinToolParam) and choice == "auto"
    assert normalize_tool_choice([WEATHER, BROWSER], "none") == ([], [], "auto")
    functions, builtins, choice = normalize_tool_choice([WEATHER, SEARCH], NAMED)
    assert [t.function.name for t in functions] == ["get_weather"] and choice == "forced"
    functions, builtins, choice = normalize_tool_choice(
        [WEATHER, BROWSER], {"type": "web_search_preview"})
    assert functions == [] and len(builtins) == 1 and choice == "forced"
    assert normalize_tool_choice(None, None) == ([], [], "auto")


def test_registering_a_model_format():
    @register_model_structural_tag("test_only_echo")
    def echo(tools, builtin_tools, tool_choice, reasoning, **kwargs):
        return {"type": "structural_tag", "format": {"type": "const_string",
                                                       "value": f"{len(tools)}{tool_choice}"}}
    try:
        assert get_model_structural_tag("test_only_echo", tools=TOOLS, tool_choice="required") \
            == {"type": "structural_tag", "format": {"type": "const_string",
                                                    "value": "2required"}}
    finally:
        from gxg.grammar import builtin_structural_tag
        del builtin_structural_tag._structural_tag_registry["test_only_echo"]


# ----------------------------------------------------------------------------- 2. outputs


@pytest.mark.parametrize("model, choice, reasoning, parallel", list(_configs()))
def test_outputs(model, choice, reasoning, parallel):
    text = _tag_text(model, choice, reasoning, parallel)
    accepted, rejected = _cases(model, choice, reasoning, parallel)
    if xgrammar is not None:     # the strings are the model's: XGrammar agrees with them
        for string in accepted:
            assert xgr_accepts(text, string), ("XGrammar rejects", string)
        for why, string in rejected:
            assert not xgr_accepts(text, string), ("XGrammar accepts", why, string)
    refused = _gxg_refusal(text)
    if refused is not None:
        assert model in XML_FAMILIES, (model, refused)
        pytest.skip(f"gxg does not compile json_schema with {refused!r} yet "
                    f"(XML parameters of {model})")
    for string in accepted:
        assert gxg_accepts(text, string), ("gxg rejects", string)
    for why, string in rejected:
        assert not gxg_accepts(text, string), ("gxg accepts", why, string)


def _mutations(strings: List[str], rng: random.Random, count: int) -> List[str]:
    """Random near misses of ``strings``: a character inserted, deleted or replaced, or two
    strings spliced."""
    alphabet = sorted({c for string in strings for c in string})
    out = []
    for _ in range(count):
        text = rng.choice(strings)
        at = rng.randint(0, len(text))
        edit = rng.randrange(4)
        if edit == 0:
            text = text[:at] + rng.choice(alphabet) + text[at:]
        elif edit == 1:
            text = text[:at] + text[at + 1:]
        elif edit == 2:
            text = text[:at] + rng.choice(alphabet) + text[at + 1:]
        else:
            text = text[:at] + rng.choice(strings)[at:]
        out.append(text)
    return out


@needs_xgrammar
@pytest.mark.parametrize("model", MODEL_FORMATS)
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_mutated_outputs_agree_with_xgrammar(model, choice):
    text = _tag_text(model, choice, "auto", True)
    refused = _gxg_refusal(text)
    if refused is not None:
        pytest.skip(f"gxg does not compile json_schema with {refused!r} yet")
    accepted, rejected = _cases(model, choice, "auto", True)
    strings = accepted + [string for _, string in rejected]
    rng = random.Random(zlib.crc32(text.encode()))
    for string in _mutations(strings, rng, 60):
        if "-0" in string:   # gxg's JSON integers take -0, XGrammar's do not (issue 16)
            continue
        assert gxg_accepts(text, string) == xgr_accepts(text, string), string


@pytest.mark.parametrize("model", sorted(set(MODEL_FORMATS) - XML_FAMILIES))
def test_json_families_compile_in_gxg(model):
    for choice in CHOICES:
        assert _gxg_refusal(_tag_text(model, choice, "enabled", True)) is None


@pytest.mark.parametrize("model", sorted(XML_FAMILIES))
def test_xml_families_compile_or_name_the_style(model):
    """A tag with no tool has no json_schema and compiles; with tools it compiles once gxg
    supports the family's XML style, and until then the GrammarError names the style."""
    assert _gxg_refusal(_tag_text(model, "none", "enabled", True)) is None
    refused = _gxg_refusal(_tag_text(model, "auto", "enabled", True))
    assert refused is None or refused.endswith("_xml")


def test_harmony_builtin_tool():
    tools = [WEATHER, BROWSER]
    search = ("browser.search", {"query": "weather Paris"})
    fam = Harmony()
    forced = json.dumps(get_model_structural_tag(
        "harmony", tools=tools, tool_choice={"type": "web_search_preview"}))
    auto = json.dumps(get_model_structural_tag("harmony", tools=tools))
    cases = [(forced, fam.render("enabled", "named", [search]), True),
             (forced, fam.render("enabled", "named", [WEATHER_CALL]), False),
             (forced, fam.render("enabled", "named", [("browser.search", {"q": 1})]), False),
             (auto, fam.render("enabled", "auto", [search, WEATHER_CALL]), True),
             (auto, fam.render("enabled", "auto", []), True),
             (auto, fam.render("enabled", "auto", [("browser.open", {"query": "x"})]), False)]
    for text, string, verdict in cases:
        if xgrammar is not None:
            assert xgr_accepts(text, string) is verdict, string
        assert gxg_accepts(text, string) is verdict, string


def test_unconstrained_arguments():
    """No ``parameters`` or ``strict: false``: any JSON value."""
    text = json.dumps(get_model_structural_tag("qwen_3", tools=[NO_ARGS, LOOSE],
                                               tool_choice="required", reasoning="disabled"))
    for string, verdict in [(_qwen3_call(0, "now", {}), True),
                            (_qwen3_call(0, "loose", {"anything": [1, {"x": None}]}), True),
                            (_qwen3_call(0, "now", {"a": 1})[:-1], False)]:
        if xgrammar is not None:
            assert xgr_accepts(text, string) is verdict, string
        assert gxg_accepts(text, string) is verdict, string


# ----------------------------------------------------------------------------- 3. errors

INVALID = [
    ("unknown model", dict(model="gpt-17", tools=TOOLS), "Unknown format type"),
    ("tools not a list", dict(model="llama", tools=WEATHER), "must be a list"),
    ("tool not an object", dict(model="llama", tools=["get_weather"]), "tools[0]"),
    ("bad tool_choice string", dict(model="llama", tools=TOOLS, tool_choice="always"),
     "tool_choice"),
    ("named tool not in the list", dict(model="llama", tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "get_time"}}), "'get_time' is not found"),
    ("required without tools", dict(model="qwen_3", tools=[], tool_choice="required"),
     "'tools' list is empty"),
    ("required with tool_choice none", dict(model="qwen_3", tools=None,
                                            tool_choice="required"), "empty"),
    ("forced tool listed twice", dict(model="llama", tools=[WEATHER, WEATHER],
                                      tool_choice=NAMED), "exactly one tool"),
    ("builtin choice without the builtin tool", dict(
        model="harmony", tools=TOOLS, tool_choice={"type": "web_search_preview"}),
     "got 0 matches"),
    ("allowed tool missing", dict(model="llama", tools=TOOLS, tool_choice={
        "type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
            {"type": "function", "function": {"name": "get_time"}}]}}), "not found"),
    ("bad reasoning", dict(model="qwen_3", tools=TOOLS, reasoning="sometimes"), "reasoning"),
    ("bad parallel_tool_calls", dict(model="qwen_3", tools=TOOLS, parallel_tool_calls=1),
     "parallel_tool_calls"),
    ("builtin tools on mimo", dict(model="mimo", tools=[BROWSER]), "builtin tools"),
    ("builtin tools on minimax_m3", dict(model="minimax_m3", tools=[BROWSER]),
     "builtin tools"),
]


@pytest.mark.parametrize("why, kwargs, words", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_arguments(why, kwargs, words):
    with pytest.raises(ValueError) as info:
        get_model_structural_tag(**kwargs)
    assert words in str(info.value)
    if xgrammar is not None:
        with pytest.raises(ValueError):
            xgrammar.get_model_structural_tag(**kwargs)


# Stricter than XGrammar (it reads these through pydantic's lax union: a malformed function
# tool becomes a builtin tool named "function", "yes" a boolean, ...): a ValueError here.
STRICTER = [
    ("function tool without function", dict(model="llama", tools=[{"type": "function"}]),
     "needs a 'function' object"),
    ("flat Responses-API tool", dict(model="harmony", tools=[
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]),
     "needs a 'function' object"),
    ("function name not a string", dict(model="llama", tools=[
        {"type": "function", "function": {"name": 3}}]), "name: must be a string"),
    ("parameters not an object", dict(model="llama", tools=[
        {"type": "function", "function": {"name": "f", "parameters": True}}]),
     "parameters"),
    ("strict not a boolean", dict(model="llama", tools=[
        {"type": "function", "function": {"name": "f", "strict": "false"}}]), "strict"),
    ("function choice without function", dict(model="llama", tools=TOOLS,
                                              tool_choice={"type": "function"}),
     "needs a 'function' object"),
    ("any_order not a boolean", dict(model="llama", tools=TOOLS, any_order="yes"),
     "any_order"),
    ("max_whitespace_cnt not an int", dict(model="llama", tools=TOOLS, max_whitespace_cnt="2"),
     "max_whitespace_cnt"),
    ("required with builtin tools only", dict(model="llama", tools=[BROWSER],
                                              tool_choice="required"),
     "at least one function tool"),
]


@pytest.mark.parametrize("why, kwargs, words", STRICTER, ids=[c[0] for c in STRICTER])
def test_stricter_than_xgrammar(why, kwargs, words):
    with pytest.raises(ValueError) as info:
        get_model_structural_tag(**kwargs)
    assert words in str(info.value)
