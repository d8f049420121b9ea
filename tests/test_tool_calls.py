"""``gxg generate --tools`` (gxg/tool_calls.py): an OpenAI-style tool list becomes a builtin
model format's structural tag, the tools are listed in a system turn, and the calls in the
generated text are parsed back through the tag's own begin and end strings.

Specification: bad tool files and options are usage errors naming the problem (status 2, no
traceback); the tag compiles and accepts what a model writes in that format; parsing finds
every well-formed call, in order, with its tool's name and arguments, and skips broken ones;
with the embedded model on the CPU, ``--tool-choice required`` ends with a valid tool call whose
arguments validate against the tool's JSON Schema.
"""
from __future__ import annotations

import json

import pytest

from cli_helpers import model_cache_dir, needs_smollm2, run_cli, run_gxg  # noqa: F401
from cli_helpers import use_session_model_cache  # noqa: F401
from gxg.generate import UsageError
from gxg.grammar import Grammar
from gxg.testing import grammar_accepts
from gxg.tool_calls import TOOL_FORMATS, read_tools, tool_request

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city for some days",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}}, "required": ["query"]}}}
TOOLS = json.dumps([WEATHER, SEARCH])


def qwen_call(name, arguments):
    return '<tool_call>\n{"name": "' + name + '", "arguments": ' + json.dumps(arguments) + \
        "}\n</tool_call>"


@pytest.mark.parametrize("text, message", [
    ("not json", "not JSON"),
    ("[]", "non-empty JSON list"),
    ('{"a": 1}', "non-empty JSON list"),
    ('[{"type": "function"}]', "tool 0 is not"),
    ('[{"type": "function", "function": {"name": ""}}]', "tool 0 is not"),
    ('[{"type": "web_search"}]', "tool 0 is not"),
    (json.dumps([WEATHER, WEATHER]), "two tools are named 'get_weather'"),
    ('[{"type": "function", "function": {"name": "f", "parameters": 3}}]', "not a JSON Schema"),
])
def test_bad_tool_lists_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        read_tools(text)


def test_a_request_body_tools_member_is_read_too():
    assert [t["function"]["name"] for t in read_tools(json.dumps({"tools": [SEARCH]}))] == \
        ["search"]


@pytest.mark.parametrize("tool_format, tool_choice, message", [
    ("qwen_3_coder", "auto", "--tool-format"),
    ("nonsense", "auto", "--tool-format"),
    ("qwen_3", "lookup", "--tool-choice 'lookup'"),
])
def test_bad_formats_and_choices_are_usage_errors(tool_format, tool_choice, message):
    with pytest.raises(UsageError, match=message):
        tool_request(TOOLS, tool_format, tool_choice)


@pytest.mark.parametrize("tool_choice, text, accepted", [
    ("auto", "No call needed.", True),
    ("auto", "Sure. " + qwen_call("search", {"query": "rye bread"}) + " Done.", True),
    ("auto", qwen_call("get_weather", {"city": "Oslo"}), False),           # days is required
    ("required", "No call needed.", False),
    ("required", qwen_call("get_weather", {"city": "Oslo", "days": 2}), True),
    ("none", "Just text.", True),
    # "none" is free text (XGrammar's format): a call's syntax is only text there, and no
    # call is parsed from it
    ("none", qwen_call("search", {"query": "x"}), True),
    ("search", qwen_call("search", {"query": "x"}), True),
    ("search", qwen_call("get_weather", {"city": "Oslo", "days": 2}), False),
])
def test_the_tag_accepts_what_the_format_writes(tool_choice, text, accepted):
    request = tool_request(TOOLS, "qwen_3", tool_choice)
    grammar = Grammar.from_structural_tag(json.dumps(request.structural_tag))
    assert grammar_accepts(grammar, text) == accepted


def test_calls_are_parsed_in_order_and_broken_ones_skipped():
    request = tool_request(TOOLS, "qwen_3", "auto")
    text = ("First " + qwen_call("search", {"query": "a"}) + " then "
            + qwen_call("get_weather", {"city": "Rome", "days": 3})
            + ' and <tool_call>\n{"name": "search", "arguments": {"query": }\n</tool_call>')
    assert request.parse_calls(text) == [
        {"name": "search", "arguments": {"query": "a"}},
        {"name": "get_weather", "arguments": {"city": "Rome", "days": 3}}]
    assert request.parse_calls("no calls here") == []
    assert tool_request(TOOLS, "qwen_3", "none").parse_calls(
        qwen_call("search", {"query": "a"})) == []
    assert "get_weather" in request.system_message() and "<tools>" in request.system_message()


@pytest.mark.parametrize("tool_format", TOOL_FORMATS)
def test_every_offered_format_compiles_and_parses_its_own_call(tool_format):
    request = tool_request(TOOLS, tool_format, "required")
    grammar = Grammar.from_structural_tag(json.dumps(request.structural_tag))
    assert grammar is not None
    begins = [begin for begin in _begins(request.structural_tag) if "search" in begin]
    assert begins, tool_format


def _begins(node):
    if isinstance(node, dict):
        if node.get("type") == "tag" and isinstance(node.get("begin"), str):
            yield node["begin"]
        for value in node.values():
            yield from _begins(value)
    elif isinstance(node, list):
        for value in node:
            yield from _begins(value)


@pytest.mark.parametrize("args, message", [
    (["--json", "--tool-choice", "required"], "tool options need --tools"),
    (["--tools", "missing.json"], "--tools 'missing.json'"),
    (["--tools", "{tools}", "--indent", "2"], "not to --tools"),
    (["--tools", "{tools}", "--tool-format", "nonsense"], "--tool-format 'nonsense'"),
])
def test_bad_tool_options_are_usage_errors(capsys, tmp_path, args, message):
    path = tmp_path / "tools.json"
    path.write_text(TOOLS)
    status, out, err = run_cli(capsys, *[str(path) if a == "{tools}" else a for a in args])
    assert status == 2 and message in err and "Traceback" not in err and out == ""


@pytest.mark.slow
@needs_smollm2
def test_the_embedded_model_writes_a_valid_tool_call(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    path = tmp_path / "tools.json"
    path.write_text(TOOLS)
    result = run_gxg("generate", "--tools", str(path), "--tool-choice", "required",
                     "--prompt", "What is the weather in Paris for the next 3 days?",
                     "--seed", "0", "--max-new-tokens", "64", "--device", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    *text, last = result.stdout.rstrip("\n").split("\n")
    calls = json.loads(last)["tool_calls"]
    assert calls, result.stdout
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, SEARCH)}
    for call in calls:
        assert call["name"] in schemas
        jsonschema.validate(call["arguments"], schemas[call["name"]])
    assert "<tool_call>" in "\n".join(text)
