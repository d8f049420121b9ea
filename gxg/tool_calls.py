"""Tool calling for ``gxg generate --tools``: an OpenAI-style tool list in, the structural tag of
a builtin model format, the prompt that presents the tools, and the calls parsed back out.

In:  the tools as JSON text (a list of ``{"type": "function", "function": {"name",
     "description"?, "parameters"?}}``, OpenAI's Chat Completions form), a model format of
     ``gxg.grammar.builtin_structural_tag`` whose tool arguments are JSON (``TOOL_FORMATS``),
     a ``tool_choice`` ("auto", "required", "none" or a tool's name).
Out: ``ToolRequest``: the tools, the structural tag (``get_model_structural_tag``'s data, which
     ``Grammar.from_structural_tag`` compiles), the system message that lists the tools, and
     ``parse_calls(text)``: the calls in a generated text as ``[{"name", "arguments"}]``, read
     through the tag's own begin and end strings (each call's arguments are the JSON value
     between them). Bad input is a ``UsageError`` naming what is wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, List, Tuple

from gxg.generate import UsageError

#: Model formats whose tool arguments are JSON (the XML-parameter families need their own
#: parsing). "qwen_3": ``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>``.
TOOL_FORMATS = ("qwen_3", "llama", "deepseek_r1", "deepseek_v3_1", "kimi", "harmony")
DEFAULT_TOOL_FORMAT = "qwen_3"


def read_tools(text: str) -> List[dict]:
    """The tool list of ``--tools``'s file, checked enough to name what is wrong."""
    try:
        tools = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"--tools: not JSON ({error.msg} at line {error.lineno}, column "
                         f"{error.colno})") from None
    if isinstance(tools, dict) and isinstance(tools.get("tools"), list):
        tools = tools["tools"]  # {"tools": [...]}, as in a request body
    if not isinstance(tools, list) or not tools:
        raise UsageError("--tools: expected a non-empty JSON list of tools")
    names = set()
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not function["name"]:
            raise UsageError(f"--tools: tool {index} is not {{\"type\": \"function\", "
                             f"\"function\": {{\"name\": ..., \"parameters\": ...}}}}")
        if function["name"] in names:
            raise UsageError(f"--tools: two tools are named {function['name']!r}")
        names.add(function["name"])
        if not isinstance(function.get("parameters", {}), dict):
            raise UsageError(f"--tools: the parameters of {function['name']!r} are not a JSON "
                             "Schema object")
    return tools


@dataclass(frozen=True)
class ToolRequest:
    tools: Tuple[dict, ...]
    tool_format: str
    tool_choice: str
    structural_tag: dict

    @property
    def names(self) -> List[str]:
        return [tool["function"]["name"] for tool in self.tools]

    def system_message(self) -> str:
        """The tools as the system turn presents them (Hermes / Qwen style, which the default
        format's syntax follows; the grammar enforces the syntax whatever the model knows)."""
        listing = "\n".join(json.dumps(tool) for tool in self.tools)
        how = {"required": "You must call at least one of these functions.",
               "none": "Do not call any function."}.get(
            self.tool_choice, f"Call {self.tool_choice} now." if self.tool_choice != "auto"
            else "Call a function when it helps to answer.")
        return ("You are a helpful assistant with access to the following functions:\n"
                f"<tools>\n{listing}\n</tools>\n{how} For each call, write the function name "
                "and its arguments as JSON within <tool_call></tool_call> tags.")

    def parse_calls(self, text: str) -> List[dict]:
        """The calls in ``text``, in order: for every tag of the structural tag whose content is
        a JSON schema, each place where the text has its begin string, a JSON value, then its
        end string; the tool is the one whose name the begin string holds (the longest)."""
        decoder = json.JSONDecoder()
        found = []
        for begin, end in _json_tags(self.structural_tag):
            start = text.find(begin)
            while start >= 0:
                at = start + len(begin)
                try:
                    value, stop = decoder.raw_decode(text, at)
                except json.JSONDecodeError:
                    value, stop = None, -1
                if stop >= 0 and any(text.startswith(e, stop) for e in end):
                    found.append((start, begin, value))
                start = text.find(begin, start + 1)
        calls = []
        for start, begin, value in sorted(found, key=lambda f: f[0]):
            names = [name for name in self.names if name in begin]
            calls.append({"name": max(names, key=len) if names else None, "arguments": value})
        return calls


def _json_tags(node) -> Iterator[Tuple[str, Tuple[str, ...]]]:
    """(begin, ends) of every ``tag`` format inside ``node`` whose content is a json_schema."""
    if isinstance(node, dict):
        if node.get("type") == "tag" and isinstance(node.get("content"), dict) \
                and node["content"].get("type") == "json_schema" \
                and isinstance(node.get("begin"), str):
            end = node.get("end")
            yield node["begin"], tuple(end) if isinstance(end, list) else (end,)
        for value in node.values():
            yield from _json_tags(value)
    elif isinstance(node, list):
        for value in node:
            yield from _json_tags(value)


def tool_request(tools_text: str, tool_format: str = DEFAULT_TOOL_FORMAT,
                 tool_choice: str = "auto") -> ToolRequest:
    """The ToolRequest of ``--tools`` (its file's text), ``--tool-format``, ``--tool-choice``."""
    from gxg.grammar.builtin_structural_tag import get_model_structural_tag
    if tool_format not in TOOL_FORMATS:
        raise UsageError(f"--tool-format {tool_format!r}: one of {', '.join(TOOL_FORMATS)}")
    tools = read_tools(tools_text)
    names = [tool["function"]["name"] for tool in tools]
    if tool_choice in ("auto", "required", "none"):
        choice = tool_choice
    elif tool_choice in names:
        choice = {"type": "function", "function": {"name": tool_choice}}
    else:
        raise UsageError(f"--tool-choice {tool_choice!r}: auto, required, none or a tool's "
                         f"name ({', '.join(names)})")
    try:
        tag = get_model_structural_tag(tool_format, tools=tools, tool_choice=choice,
                                       reasoning="disabled")
    except ValueError as error:
        raise UsageError(f"--tools: {error}") from None
    return ToolRequest(tuple(tools), tool_format, tool_choice, tag)
