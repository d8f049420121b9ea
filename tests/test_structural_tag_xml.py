"""Structural tags' json_schema XML styles and json_schema.excludes (gxg.grammar.json_schema_xml),
specification-style: per style, tables of (schema, argument sets) rendered as that style writes
them, plus whitespace variants and mutations (stable seeds: zlib.crc32), checked through gxg's
full CPU pipeline and, when installed, through XGrammar 0.2.8; then the refusals."""
from __future__ import annotations

import json
import random
import warnings
import zlib

import pytest

from gxg.grammar.ir import Grammar, GrammarError
from xgrammar_oracle import gxg_accepts, needs_xgrammar, xgr_accepts

DS = "\uff5cDSML\uff5c"
STYLES = ["qwen_xml", "minimax_xml", "deepseek_xml", "deepseek_v4_1_xml", "glm_xml",
          "kimi_k3_xml"]


def _tag(schema, style, **options) -> str:
    return json.dumps({"type": "structural_tag", "format": {
        "type": "json_schema", "json_schema": schema, "style": style, **options}})


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _kimi_type(value) -> str:
    return {str: "string", bool: "boolean", int: "number", float: "number", list: "array",
            dict: "object", type(None): "null"}[type(value)]


def render(style: str, args: dict) -> str:
    """The arguments as the style writes them (strings raw, other values as JSON)."""
    out = []
    for key, value in args.items():
        text = _text(value)
        flag = "true" if isinstance(value, str) else "false"
        if style == "qwen_xml":
            out.append(f"<parameter={key}>{text}</parameter>")
        elif style == "minimax_xml":
            out.append(f'<parameter name="{key}">{text}</parameter>')
        elif style == "deepseek_xml":
            out.append(f'<{DS}parameter name="{key}" string="{flag}">{text}</{DS}parameter>')
        elif style == "deepseek_v4_1_xml":
            out.append(f'<{DS} parameter name="{key}" string="{flag}">{text}</{DS} parameter>')
        elif style == "glm_xml":
            out.append(f"<arg_key>{key}</arg_key><arg_value>{text}</arg_value>")
        else:
            out.append(f'<|open|>argument key="{key}" type="{_kimi_type(value)}"<|sep|>{text}'
                       f"<|close|>argument<|sep|>")
    return "\n".join(out)


def mutations(text: str, count: int):
    rng = random.Random(zlib.crc32(text.encode()))
    alphabet = sorted(set(text)) + list(' "<>/=1a\n{}[],')
    for _ in range(count):
        chars = list(text)
        for _ in range(rng.randint(1, 2)):
            op, i = rng.randrange(3), rng.randrange(len(chars) + 1)
            if op == 0 and i < len(chars):
                del chars[i]
            elif op == 1:
                chars.insert(i, rng.choice(alphabet))
            elif i < len(chars):
                chars[i] = rng.choice(alphabet)
        yield "".join(chars)


PERSON = {"type": "object", "required": ["name", "age"], "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}}}}
VALUES = {"type": "object", "properties": {
    "e": {"enum": ["x", 1, 1.5, True, None, [1, "a"], {"k": "v"}]}, "c": {"const": "hi"},
    "u": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "n": {"type": ["number", "null"]}, "any": {}, "f": {"enum": [0.1, 2.0]}}}
STRINGS = {"type": "object", "properties": {
    "p": {"type": "string", "pattern": "^a+b$"},
    "l": {"type": "string", "minLength": 2, "maxLength": 3},
    "d": {"type": "string", "format": "date"}, "b": {"type": "boolean"}, "z": {"type": "null"}}}
EXTRA = {"type": "object", "properties": {"a": {"type": "integer"}},
         "additionalProperties": {"type": "string"}}
REFS = {"type": "object", "$defs": {
    "s": {"type": "string"},
    "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
    "properties": {"a": {"$ref": "#/$defs/s"}, "r": {"$ref": "#/$defs/node"}}}
EXCLUDED = {"type": "object", "additionalProperties": {"type": "integer"}, "properties": {
    "s": {"type": "string"}, "xab": {"type": "integer"}, "e": {"enum": ["zab", "q", ["ab"]]},
    "arr": {"type": "array", "items": {"type": "string"}},
    "o": {"type": "object", "properties": {"kab": {"type": "integer"}, "k": {"type": "string"}}},
    "any": {}}}
ORDER = {"type": "object", "required": ["b"], "additionalProperties": {"type": "string"},
         "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}

# (schema, options, argument sets: valid and invalid ones alike; the oracle decides)
CASES = {
    "person": (PERSON, {}, [
        {"name": "Bob", "age": 3}, {"name": "B o\nb", "age": -1, "tags": ["a", "b"],
                                    "address": {"city": "x", "zip": 1}},
        {"age": 3}, {"name": "x", "age": 1.5}, {"name": "x", "age": 1, "zz": 1},
        {"age": 3, "name": "x"}, {"name": "a</parameter>", "age": 1},
        {"name": "x", "age": 1, "address": {"zip": 1}}]),
    "values": (VALUES, {}, [
        {"e": "x"}, {"e": 1, "c": "hi"}, {"e": [1, "a"]}, {"e": {"k": "v"}}, {"e": True},
        {"e": None}, {"u": "s"}, {"u": 5}, {"n": None}, {"n": 2.5e3}, {"any": "t"},
        {"any": [1, {"a": None}]}, {"any": {"q": 1}}, {"any": 3}, {"c": "ho"}, {"e": "y"},
        {"f": "0.10000000000000001"}, {"f": 0.1}, {"f": 2}, {"f": 2.0}]),
    "strings": (STRINGS, {}, [
        {"p": "aab"}, {"p": "b"}, {"p": "xaab"}, {"l": "ab"}, {"l": "abcd"}, {"l": "a"},
        {"d": "2024-01-31"}, {"d": "2024-1-31"}, {"b": True}, {"b": "yes"}, {"z": None}]),
    "extra": (EXTRA, {}, [
        {"a": 1, "b": "x"}, {"b": "x", "c": "y"}, {"a": 1, "_b9": "x"}, {"a": 1, "9b": "x"},
        {"b": "x", "a": 1}, {"a": "x"}]),
    "anything": (True, {}, [{}, {"a": "x", "b": [1]}, {"a": {"x": 1}}, {"a-b": 1}]),
    "any_of_objects": ({"anyOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}, {},
        [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}]),
    "refs": (REFS, {}, [{"a": "s"}, {"r": {"next": {"next": {}}}}, {"r": {"next": 1}},
                        {"a": 1}]),
    "excludes": (EXCLUDED, {"excludes": ["ab"]}, [
        {"s": "xy"}, {"s": "xaby"}, {"s": "a b"}, {"e": "q"}, {"e": "zab"}, {"arr": ["ab"]},
        {"arr": ["a\\u0062"]}, {"arr": ["a", "b"]}, {"o": {"k": "ab"}}, {"o": {"k": "x"}},
        {"cab": 1}, {"c": 1}, {"any": {"ab": 1}}, {"any": ["xab"]}, {"any": "ab"},
        {"xab": 1}]),
    "excluded_values": ({"type": "object", "properties": {
        "a": {"enum": [12, 3, True, "x2", "trx", [2], {"k": 2}, ["2"], {"k2": 1}]}}},
        {"excludes": ["2", "tr"]}, [{"a": v} for v in (12, 3, True, "x2", "trx", [2], {"k": 2},
                                                      ["2"], {"k2": 1})]),
    "any_order": (ORDER, {"any_order": True}, [
        {"b": "x"}, {"a": 1, "b": "x"}, {"b": "x", "a": 1}, {"a": 1}, {"zz": "q", "a": 1}, {}]),
    "whitespace": ({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}}},
        {"max_whitespace_cnt": 2}, [{"a": 1}, {"a": 1, "b": [1, 2]}, {"b": []}]),
    "pattern_properties": ({"type": "object", "properties": {"name": {"type": "string"}},
                            "required": ["name"], "additionalProperties": False,
                            "patternProperties": {"^metric_[a-z]+$": {"type": "number"},
                                                  "^flag_[a-z]+$": {"type": "boolean"}}}, {}, [
        {"name": "w"}, {"name": "w", "metric_cpu": 0.5}, {"name": "w", "flag_hot": True,
                                                           "metric_a": 1},
        {"name": "w", "metric_cpu": "x"}, {"name": "w", "flag_hot": 2}, {"name": "w", "other": 1},
        {"name": "w", "metric_": 1}, {"metric_cpu": 1, "name": "w"}, {"name": "w", "name2": 1}]),
    "names": ({"type": "object", "$defs": {"i": {"type": "integer"}}, "properties": {
        'a"&b': {"type": "integer"}, "m": {"enum": ["x", 1]}, "r": {"$ref": "#/$defs/i"}}},
        {}, [{'a"&b': 1}, {"a&quot;&amp;b": 1}, {"m": "x"}, {"m": 1}, {"r": 3}]),
}


def strings_for(style: str, docs, mutated: int):
    texts = [render(style, doc) for doc in docs]
    texts += [text.replace("\n", "\n  \n") for text in texts]
    texts += ["  " + text + "\n " for text in texts[:len(docs)]]
    texts += [m for text in texts[:len(docs)] for m in mutations(text, mutated)]
    return list(dict.fromkeys(texts))


def _run(source: str, texts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [gxg_accepts("structural_tag", source, text) for text in texts]


def assert_agrees_with_xgrammar(source: str, texts) -> None:
    """gxg's verdict on every text is XGrammar's, and some texts are accepted."""
    ours = _run(source, texts)
    theirs = [xgr_accepts("structural_tag", source, text) for text in texts]
    differing = [(t, o, x) for t, o, x in zip(texts, ours, theirs) if o != x]
    assert not differing, differing[:5]
    assert any(ours), "the table should hold accepted strings"


def assert_specification(source: str, accepted, rejected) -> None:
    assert all(_run(source, accepted)), accepted
    assert not any(_run(source, rejected)), rejected


@needs_xgrammar
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_style_matches_xgrammar(style, case):
    schema, options, docs = CASES[case]
    assert_agrees_with_xgrammar(_tag(schema, style, **options), strings_for(style, docs, 4))


# minimax_m3_xml: every value an element body (M<name>value M</name>, arrays as M<item>s)
M3 = "]<]minimax[>["


def render_m3(value, ws: str = "") -> str:
    """A value as minimax_m3_xml writes it: strings raw, objects and arrays as elements (each
    after ``ws``, ``ws`` after the last), other scalars as JSON."""
    if isinstance(value, dict):
        items = [f"{ws}{M3}<{k}>{render_m3(v, ws)}{M3}</{k}>" for k, v in value.items()]
    elif isinstance(value, list):
        items = [f"{ws}{M3}<item>{render_m3(v, ws)}{M3}</item>" for v in value]
    else:
        return value if isinstance(value, str) else json.dumps(value)
    return "".join(items) + ws if items else ""


M3_VALUES = {"type": "object", "required": ["e"], "properties": {
    "e": {"enum": ["x", 1, 1.5, True, None, [1, "a"], {"k": "v"}, {}, []]}, "c": {"const": "hi"},
    "u": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]},
    "n": {"type": ["number", "null"]}, "b": {"type": "boolean"},
    "o": {"oneOf": [{"type": "integer"}, {"type": "null"}]}}}
M3_ARRAYS = {"type": "object", "properties": {
    "t": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
          "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4},
    "p": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}],
          "minItems": 2},
    "r": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
    "f": {"type": "array", "items": False}}}
M3_CASES = {
    "person": (PERSON, {}, CASES["person"][2] + [
        {"name": "x", "age": 1, "address": {"city": "c"}}, {"name": "x", "age": 1, "tags": []},
        {"name": "a" + M3 + "b", "age": 1}]),
    "values": (M3_VALUES, {}, [
        {"e": v} for v in ("x", 1, 1.5, True, None, [1, "a"], {"k": "v"}, {}, [], "y", 2)] + [
        {"e": 1, "c": "hi"}, {"e": 1, "c": "ho"}, {"e": 1, "u": "s"}, {"e": 1, "u": 3},
        {"e": 1, "u": 2}, {"e": 1, "n": 2.5}, {"e": 1, "n": None}, {"e": 1, "b": False},
        {"e": 1, "o": 3}, {"e": 1, "o": None}, {"c": "hi"}, {"e": 1, "b": 1}]),
    "arrays": (M3_ARRAYS, {}, [
        {"t": ["a"]}, {"t": ["a", 1]}, {"t": ["a", 1, True, False]}, {"t": ["a", 1, True, True,
                                                                          True]},
        {"t": []}, {"t": [1]}, {"p": [1, 2]}, {"p": [1]}, {"p": [1, 2, 3]}, {"r": [1]},
        {"r": [1, 2, 3]}, {"r": []}, {"f": []}, {"f": [1]}]),
    "refs": ({"type": "object", "$defs": {"n": {"type": "object", "properties": {
        "v": {"type": "integer"}, "n": {"$ref": "#/$defs/n"}}}},
        "properties": {"a": {"$ref": "#/$defs/n"}, "s": {"$ref": "#"}}}, {}, [
        {"a": {"v": 1}}, {"a": {"n": {"n": {"v": 2}}}}, {"s": {"s": {}}}, {"a": {"v": "x"}},
        {"s": {"a": {"w": 1}}}]),
    "any_order": ({"type": "object", "required": ["b"], "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}}}, {"any_order": True}, [
        {"b": "x"}, {"a": 1, "b": "x"}, {"b": "x", "a": 1}, {"a": 1}, {"a": 1, "a ": 2}, {}]),
    "optional_any_order": ({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}}}, {"any_order": True}, [
        {}, {"b": "x"}, {"b": "x", "a": 1}, {"a": 1, "a ": 2}]),
    "whitespace": ({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}}},
        {"max_whitespace_cnt": 2}, [{"a": 1}, {"a": 1, "b": [1, 2]}, {"b": []}]),
    "bounds": ({"type": "object", "minProperties": 1, "maxProperties": 2, "properties": {
        "a": {"type": "integer"}, "b": {"type": "null"}, "c": {"type": "string"}}}, {}, [
        {}, {"a": 1}, {"a": 1, "b": None}, {"a": 1, "b": None, "c": "x"}, {"c": "x"}]),
    "names": ({"type": "object", "properties": {"a/b": {"type": "string"},
                                                "x y": {"type": "null"}}}, {},
              [{"a/b": "q"}, {"x y": None}, {"a/b": "q", "x y": None}, {"x": None}]),
    "scalar_root": ({"type": ["string", "integer"]}, {}, ["text", 12, "a" + M3]),
}


def rendered_strings(render, docs, mutated: int, targeted=lambda text: ()):
    """``docs`` rendered (``render(doc, ws)``) without whitespace and with some, then near
    misses of the compact ones: ``targeted`` damage and random ``mutations``."""
    texts = [render(doc) for doc in docs]
    texts += [render(doc, ws) for ws in (" ", "\n\t", " \r\n") for doc in docs]
    texts += [m for text in texts[:len(docs)] for m in targeted(text)]
    texts += [m for text in texts[:len(docs)] for m in mutations(text, mutated)]
    return list(dict.fromkeys(texts))


@needs_xgrammar
@pytest.mark.parametrize("case", sorted(M3_CASES))
def test_minimax_m3_matches_xgrammar(case):
    schema, options, docs = M3_CASES[case]
    assert_agrees_with_xgrammar(_tag(schema, "minimax_m3_xml", **options),
                                rendered_strings(render_m3, docs, 6))


def test_minimax_m3_specification():
    source = _tag(PERSON, "minimax_m3_xml")
    accepted = [f"{M3}<name>Bob{M3}</name> {M3}<age>3{M3}</age>\n",
                f"\n{M3}<name>B{M3}</name>{M3}<age>-1{M3}</age>{M3}<tags> {M3}<item>t{M3}</item>"
                f"{M3}</tags>{M3}<address>{M3}<city>P{M3}</city>{M3}</address>"]
    rejected = [f"{M3}<age>3{M3}</age>{M3}<name>B{M3}</name>",
                f"{M3}<name>B{M3}</name>{M3}<age> 3{M3}</age>",
                f"{M3}<name>B{M3}</name>{M3}<age>3{M3}</wrong>"]
    assert_specification(source, accepted, rejected)


# (style, schema, options, accepted, rejected): the specification without the oracle.
SPEC = [
    ("qwen_xml", PERSON, {}, ["<parameter=name>\nBob\n</parameter>\n<parameter=age>\n3\n"
                              "</parameter>\n",
                              '<parameter=name>x</parameter><parameter=age>1</parameter>'
                              '<parameter=address>{"city": "P"}</parameter>'],
     ["<parameter=age>3</parameter><parameter=name>x</parameter>",
      "<parameter=name>x</parameter><parameter=age>\"3\"</parameter>",
      "<parameter=name>a</parameter>b</parameter><parameter=age>1</parameter>"]),
    ("minimax_xml", EXTRA, {}, ['<parameter name="a">1</parameter><parameter name="q">x'
                                "</parameter>"],
     # (a declared name is also a valid additional name, as XGrammar: "a" with a string value
     # is an additional parameter)
     ['<parameter name="a-b">x</parameter>', '<parameter name="1q">x</parameter>',
      '<parameter name="q">1</parameter>x']),
    ("deepseek_xml", VALUES, {}, [f'<{DS}parameter name="u" string="true">s</{DS}parameter>',
                                  f'<{DS}parameter name="u" string="false"> 5 </{DS}parameter>'],
     [f'<{DS}parameter name="u" string="false">s</{DS}parameter>']),
    ("deepseek_v4_1_xml", PERSON, {}, [f'<{DS} parameter name="name" string="true">x'
                                       f'</{DS} parameter><{DS} parameter name="age" '
                                       f'string="false">1</{DS} parameter>'], ["x"]),
    ("glm_xml", STRINGS, {}, ["<arg_key>p</arg_key>\n<arg_value>aab</arg_value>",
                              "<arg_key>d</arg_key><arg_value> 2024-02-29 </arg_value>"],
     ["<arg_key>p</arg_key><arg_value>ba</arg_value>"]),
    ("kimi_k3_xml", VALUES, {}, ['<|open|>argument key="e" type="string"<|sep|>x'
                                 "<|close|>argument<|sep|>",
                                 '<|open|>argument key="c" type="string"<|sep|>hi'
                                 "<|close|>argument<|sep|>"],
     ['<|open|>argument key="c" type="number"<|sep|>hi<|close|>argument<|sep|>']),
    ("qwen_xml", EXCLUDED, {"excludes": ["ab"]}, ["<parameter=s>xy</parameter>",
                                                  '<parameter=arr>["a", "b"]</parameter>'],
     ["<parameter=s>xaby</parameter>", '<parameter=arr>["ab"]</parameter>',
      "<parameter=xab>1</parameter>", "<parameter=cab>1</parameter>"]),
]


@pytest.mark.parametrize("style, schema, options, accepted, rejected", SPEC)
def test_style_specification(style, schema, options, accepted, rejected):
    source = _tag(schema, style, **options)
    assert_specification(source, accepted, rejected)


def test_a_pattern_that_needs_helper_rules_keeps_them():
    """A pattern nested deeper than the IR's expression depth compiles to several rules (the
    regex front end's helper rules); all of them come along (they were dropped once)."""
    pattern = "(a" * 150 + ")?" * 150
    schema = {"type": "object", "properties": {"u": {"type": "string", "pattern": pattern}},
              "required": ["u"]}
    source = _tag(schema, "qwen_xml")
    assert _run(source, ["<parameter=u>\naaa\n</parameter>"]) == [True]
    assert _run(source, ["<parameter=u>\nab\n</parameter>"]) == [False]


def test_deprecated_qwen_xml_parameter_is_qwen_xml():
    old = json.dumps({"type": "structural_tag", "format": {
        "type": "qwen_xml_parameter", "json_schema": PERSON}})
    texts = strings_for("qwen_xml", CASES["person"][2], 2)
    assert _run(old, texts) == _run(_tag(PERSON, "qwen_xml"), texts)


# json style with excludes
JSON_EXCLUDED = {"type": "object", "properties": {
    "s": {"type": "string"}, "kab": {"type": "integer"}, "e": {"enum": ["ab", "c", 12]},
    "p": {"type": "string", "pattern": "^a.*$"}, "o": {"type": "object"}}}
JSON_DOCS = ['{"s": "x"}', '{"s": "xab"}', '{"s": "a\\u0062"}', '{"kab": 1}', '{"e": "c"}',
             '{"e": "ab"}', '{"p": "abab"}', '{"o": {"ab": 1}}', '{"o": {"x": "y"}}',
             '{"e": 12}', '{"s": "a\\nb"}']


@needs_xgrammar
@pytest.mark.parametrize("excludes", [["ab"], ["2"], ["\\n", "zz"]])
def test_json_style_excludes_match_xgrammar(excludes):
    source = json.dumps({"type": "structural_tag", "format": {
        "type": "json_schema", "json_schema": JSON_EXCLUDED, "excludes": excludes}})
    texts = JSON_DOCS + [m for doc in JSON_DOCS for m in mutations(doc, 3)]
    ours = _run(source, texts)
    theirs = [xgr_accepts("structural_tag", source, text) for text in texts]
    assert ours == theirs, [(t, o, x) for t, o, x in zip(texts, ours, theirs) if o != x][:5]


# cohere_xml: every value an element <cofl:value[ name="N"] type="raw|json|dict|list">...
COHERE_OPEN, COHERE_CLOSE = "<cofl:value", "</cofl:value>"


def _cohere_name(name: str) -> str:
    return "".join({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}.get(c, c)
                   for c in name)


def cohere_element(value, name=None, ws: str = "") -> str:
    """One value as cohere_xml writes it: strings raw, objects ``dict`` (their members named),
    arrays ``list`` (their items unnamed, nothing between them), other values JSON; ``ws``
    around JSON and container bodies and between members."""
    attribute = "" if name is None else f' name="{_cohere_name(name)}"'
    if isinstance(value, str):
        kind, body = "raw", value
    elif isinstance(value, dict):
        kind, body = "dict", ws + cohere_body(value, ws) + ws
    elif isinstance(value, list):
        kind, body = "list", ws + cohere_body(value, ws) + ws
    else:
        kind, body = "json", ws + json.dumps(value) + ws
    return f'{COHERE_OPEN}{attribute} type="{kind}">{body}{COHERE_CLOSE}'


def cohere_body(value, ws: str = "") -> str:
    """A body alone (the root): an object's members, an array's items, a scalar as it is."""
    if isinstance(value, dict):
        return "".join(ws + cohere_element(v, k, ws) for k, v in value.items()) + ws
    if isinstance(value, list):
        return "".join(cohere_element(v, None, ws) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def cohere_mutations(text: str):
    """Targeted damage: a type attribute swapped for each other one, a close tag or a name
    attribute dropped, an item given a name."""
    kinds = ("raw", "json", "dict", "list")
    for kind in kinds:
        if f'type="{kind}"' in text:
            for other in kinds:
                if other != kind:
                    yield text.replace(f'type="{kind}"', f'type="{other}"', 1)
    if COHERE_CLOSE in text:
        yield text.replace(COHERE_CLOSE, "", 1)
        yield text[::-1].replace(COHERE_CLOSE[::-1], "", 1)[::-1]
    if ' name="' in text:
        start = text.index(' name="')
        yield text[:start] + text[text.index('"', start + 7) + 1:]
    if f"{COHERE_OPEN} type=" in text:
        yield text.replace(f"{COHERE_OPEN} type=", f'{COHERE_OPEN} name="0" type=', 1)


COHERE_VALUES = {"type": "object", "properties": {
    "e": {"enum": ["x", 1, 1.5, True, None, [1, "a"], {"k": "v"}]}, "c": {"const": "hi"},
    "u": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3},
                    {"type": "object", "properties": {"k": {"type": "null"}}}]},
    "t": {"type": ["number", "null", "array"], "items": {"type": "boolean"}},
    "o": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
    "one": {"allOf": [{"type": "boolean"}]}, "any": {}, "f": {"enum": [0.1, 2.0]},
    "s": {"enum": ["a<b", "c&d"]}}}
COHERE_ARRAYS = {"type": "object", "properties": {
    "t": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
          "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4},
    "p": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "null"}]},
    "r": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
    "n": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
    "o": {"type": "array", "items": {"type": "object", "properties": {
        "k": {"type": "string"}}, "required": ["k"]}},
    "a": {"type": "array", "items": {}}, "e": {"type": "array"},
    "u": {"type": "array", "unevaluatedItems": {"type": "null"}}}}
COHERE_OBJECTS = {"type": "object", "properties": {
    "plain": {"type": "object", "title": "any dictionary"},
    "closed": {"type": "object", "required": []},
    "open": {"type": "object", "properties": {"a": {"type": "integer"}},
             "additionalProperties": True},
    "typed": {"type": "object", "additionalProperties": {"type": "integer"},
              "minProperties": 1, "maxProperties": 2},
    "inferred": {"properties": {"x": {"type": "string"}}, "unevaluatedProperties": False}}}
COHERE_EXTRA = {"type": "object", "required": ["a"], "properties": {
    "a": {"type": "integer"}, 'b"&<c>': {"type": "null"}},
    "additionalProperties": {"type": "string"}}
COHERE_RECURSIVE = {"type": "object", "$defs": {
    "s": {"type": "string"},
    "node": {"type": "object", "properties": {"v": {"type": "integer"},
                                              "next": {"$ref": "#/$defs/node"}}},
    "choice": {"anyOf": [{"$ref": "#/$defs/s"}, {"type": "array", "items": {
        "$ref": "#/$defs/choice"}}]}},
    "properties": {"a": {"$ref": "#/$defs/s"}, "r": {"$ref": "#/$defs/node"},
                   "c": {"$ref": "#/$defs/choice"}, "self": {"$ref": "#"}}}
COHERE_NUMBERS = {"type": "object", "properties": {
    "i": {"type": "integer", "minimum": -3, "exclusiveMaximum": 120},
    "m": {"type": "integer", "multipleOf": 3}, "n": {"type": "number"},
    "b": {"type": "boolean"}, "z": {"type": "null"}}}
COHERE_CASES = {
    "person": (PERSON, {}, CASES["person"][2] + [
        {"name": "x", "age": 1, "address": {"city": "c"}}, {"name": "x", "age": 1, "tags": []},
        {"name": "a</cofl:value>b", "age": 1}, {"name": "<cofl:value>", "age": 1}]),
    "values": (COHERE_VALUES, {}, [
        {"e": v} for v in ("x", 1, 1.5, True, None, [1, "a"], {"k": "v"}, "y", 2)] + [
        {"e": "[1,\"a\"]"}, {"c": "hi"}, {"c": "ho"}, {"u": "s"}, {"u": 3}, {"u": 2},
        {"u": {"k": None}}, {"u": {}}, {"t": 2.5}, {"t": None}, {"t": [True, False]}, {"t": []},
        {"t": "x"}, {"o": 3}, {"o": "x"}, {"one": True}, {"one": "true"}, {"any": "t"},
        {"any": 3.5e-2}, {"any": [1, {"a": None}, "s"]}, {"any": {"q": {"r": [False]}}},
        {"any": None}, {"f": "0.10000000000000001"}, {"f": 0.1}, {"f": 2}, {"f": 2.0},
        {"s": "a<b"}, {"s": "a&lt;b"}, {"e": "x", "c": "hi", "u": "s", "t": None, "o": 1}]),
    # (known formats are gxg's languages of them, as in the other styles: 2024-02-30 is no
    # date for gxg, XGrammar's regex takes it)
    "strings": (STRINGS, {}, CASES["strings"][2] + [{"p": "ab"}, {"l": "a b"},
                                                    {"d": "2024-02-28"}]),
    "arrays": (COHERE_ARRAYS, {}, [
        {"t": ["a", 1]}, {"t": ["a", 1, True, False]}, {"t": ["a", 1, True, True, True]},
        {"t": ["a"]}, {"t": []}, {"p": [1, None]}, {"p": [1]}, {"p": [1, None, 2]},
        {"r": [1]}, {"r": [1, 2, 3]}, {"r": []}, {"n": [["a", "b"], []]}, {"n": ["a"]},
        {"o": [{"k": "x"}, {"k": "y"}]}, {"o": [{}]}, {"a": [1, "x", [None], {"q": True}]},
        {"e": []}, {"e": [1]}, {"u": [None, None]}, {"u": [1]}]),
    "objects": (COHERE_OBJECTS, {}, [
        {"plain": {}}, {"plain": {"a": 1, "b c": ["x"], "é": {"d": None}}},
        {"closed": {}}, {"closed": {"a": 1}}, {"open": {"a": 1, "b": "x", "c": [2]}},
        {"open": {"b": {"a": 1}}}, {"typed": {"x": 1}}, {"typed": {"x": 1, "y": 2}},
        {"typed": {"x": 1, "y": 2, "z": 3}}, {"typed": {}}, {"typed": {"x": "1"}},
        {"inferred": {"x": "s"}}, {"inferred": {"y": "s"}}]),
    "extra": (COHERE_EXTRA, {}, [
        {"a": 1}, {"a": 1, "b": "x"}, {"a": 1, 'b"&<c>': None}, {"a": 1, 'b"&<c>': "x"},
        {"a": 1, 'b"&<c>d': "x"}, {"a": 1, "a ": "x"}, {"a": 1, "é q": "x", "z": "y"},
        {"b": "x", "a": 1}, {"a": "x"}, {"a": 1, "b": 2}]),
    "anything": (True, {}, [{}, {"a": "x", "b": [1]}, {"a": {"x": 1}}, {"a-b": None},
                            {"a": [{"b": 1}, "s", []]}, {"a": "x", "a&amp;": 1}]),
    "any_of_objects": ({"anyOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]}, {},
        [{"a": 1}, {"b": "x"}, {"a": 1, "b": "x"}, {}]),
    "refs": (COHERE_RECURSIVE, {}, [
        {"a": "s"}, {"r": {"v": 1, "next": {"next": {"v": 2}}}}, {"r": {"next": 1}},
        {"c": "x"}, {"c": ["x", ["y", []]]}, {"c": [1]}, {"self": {"self": {"a": "q"}}},
        {"self": {"b": 1}}, {"a": 1}]),
    "numbers": (COHERE_NUMBERS, {}, [
        {"i": -3}, {"i": -4}, {"i": 119}, {"i": 120}, {"i": 0}, {"m": 9}, {"m": 10},
        {"m": -12}, {"n": 1.5e-3}, {"n": -0.0}, {"n": 1e5}, {"b": False}, {"z": None},
        {"i": "1"}]),
    "any_order": ({"type": "object", "required": ["b"], "additionalProperties": {"type": "null"},
                   "properties": {"a": {"type": "integer"}, "b": {"type": "object", "properties": {
                       "x": {"type": "null"}, "y": {"type": "null"}}, "required": ["y"]}}},
                  {"any_order": True}, [
        {"b": {"y": None}}, {"b": {"y": None, "x": None}}, {"b": {"x": None}, "a": 1},
        {"a": 1}, {"zz": None, "b": {"y": None}}, {"b": {}, "a": 1}, {}]),
    "any_order_bounds": ({"type": "object", "minProperties": 1, "maxProperties": 2,
                          "properties": {"a": {"type": "null"}, "b": {"type": "null"},
                                         "c": {"type": "null"}}}, {"any_order": True}, [
        {}, {"c": None}, {"c": None, "a": None}, {"a": None, "b": None, "c": None}]),
    "bounds": ({"type": "object", "minProperties": 1, "maxProperties": 2, "properties": {
        "a": {"type": "integer"}, "b": {"type": "null"}, "c": {"type": "string"}}}, {}, [
        {}, {"a": 1}, {"a": 1, "b": None}, {"a": 1, "b": None, "c": "x"}, {"c": "x"}]),
    "whitespace": ({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}},
        "c": {"type": "object", "properties": {"d": {"type": "string"}}}}},
        {"max_whitespace_cnt": 2}, [{"a": 1}, {"a": 1, "b": [1, 2]}, {"b": []},
                                    {"c": {"d": " x "}}]),
    "scalar_root": ({"type": ["string", "integer"]}, {}, ["text", 12, "a" + COHERE_CLOSE]),
    "array_root": ({"type": "array", "items": {"enum": ["x", 2]}}, {}, [[], ["x", 2], ["y"]]),
    "enum_root": ({"enum": ["a", 1, {"k": [1]}]}, {}, ["a", 1, {"k": [1]}, "b"]),
    "ref_root": ({"$ref": "#/$defs/o", "$defs": {"o": {"type": "object", "properties": {
        "x": {"anyOf": [{}, {"type": "integer"}]}}}}}, {}, [{"x": 1}, {"x": [None]}, {},
                                                            {"y": 1}]),
    "literals": ({"type": "object", "properties": {"e": {"enum": [
        "a\nb", "", "é<&>", {"ü": "\u0001"}, [True, None], -1.25e-7, 12345678901234567890]}}},
        {}, [{"e": v} for v in ("a\nb", "", "é<&>", {"ü": "\u0001"}, [True, None], -1.25e-7,
                                12345678901234567890)]),
    "type_lists": ({"type": "object", "properties": {
        "a": {"type": ["object", "null"]},
        "b": {"type": ["object", "null"], "properties": {"q": {"type": "integer"}}},
        "c": {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "null"}]},
                        {"type": ["integer", "boolean"]},
                        {"allOf": [{"type": "array", "items": {"type": "string"}}]}]},
        "d": {"items": {"type": "integer"}}, "e": {"properties": {"x": {"type": "null"}}}}},
        {}, [{"a": {"z": 1}}, {"a": None}, {"b": {"q": 1}}, {"b": {"z": 1}}, {"b": None},
             {"c": "x"}, {"c": None}, {"c": 1}, {"c": True}, {"c": ["x"]}, {"c": {}},
             {"d": [1, 2]}, {"d": "x"}, {"e": {"x": None}}, {"e": {"y": None}}]),
    "additional_bounds": ({"type": "object", "properties": {"": {"type": "null"}},
                           "additionalProperties": {"type": "integer"}, "minProperties": 2}, {}, [
        {"": None}, {"": None, "b": 1}, {"b": 1, "c": 2}, {"b": 1}, {"": 1, "b": 2}]),
}


@needs_xgrammar
@pytest.mark.parametrize("case", sorted(COHERE_CASES))
def test_cohere_matches_xgrammar(case):
    schema, options, docs = COHERE_CASES[case]
    assert_agrees_with_xgrammar(_tag(schema, "cohere_xml", **options),
                                rendered_strings(cohere_body, docs, 6, cohere_mutations))


def test_cohere_specification():
    source = _tag(PERSON, "cohere_xml")
    accepted = [
        '<cofl:value name="name" type="raw"> Bob\n</cofl:value>\n'
        '<cofl:value name="age" type="json"> 3 </cofl:value>',
        '<cofl:value name="name" type="raw">B</cofl:value><cofl:value name="age" type="json">-1'
        '</cofl:value><cofl:value name="tags" type="list"> <cofl:value type="raw">t</cofl:value>'
        '<cofl:value type="raw">u</cofl:value> </cofl:value><cofl:value name="address" '
        'type="dict"><cofl:value name="city" type="raw">P</cofl:value></cofl:value>']
    rejected = [
        '<cofl:value name="age" type="json">3</cofl:value>'
        '<cofl:value name="name" type="raw">B</cofl:value>',
        '<cofl:value name="name" type="raw">B</cofl:value>'
        '<cofl:value name="age" type="raw">3</cofl:value>',
        '<cofl:value name="name" type="raw">B</cofl:value><cofl:value name="age" type="json">1'
        '</cofl:value><cofl:value name="tags" type="list"><cofl:value type="raw">t</cofl:value>'
        ' <cofl:value type="raw">u</cofl:value></cofl:value>',
        '<cofl:value name="name" type="raw">B</cofl:value><cofl:value name="age" type="json">1'
        '</cofl:value><cofl:value name="tags" type="list"><cofl:value name="0" type="raw">t'
        '</cofl:value></cofl:value>']
    assert_specification(source, accepted, rejected)


# refusals: the path of the format and the keyword's JSON pointer in the message
def _cohere_property(schema) -> dict:
    return {"type": "object", "properties": {"a": schema}}


REFUSED = [
    ("qwen_xml", PERSON, {"excludes": [" x"]}, "$.format.excludes[0]", "whitespace"),
    ("qwen_xml", {"type": "string"}, {}, "$.format.json_schema", "'type' at #"),
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "string"}},
                  "required": ["b"]}, {}, "$.format.json_schema", "'required' at #"),
    ("glm_xml", {"type": "object", "minProperties": 1}, {}, "$.format.json_schema",
     "'minProperties' at #"),
    ("kimi_k3_xml", {"type": "object", "patternProperties": {"a": {}},
                     "additionalProperties": {"type": "string"}}, {},
     "$.format.json_schema", "'patternProperties' at #"),
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "string", "pattern": "a",
                                                         "maxLength": 3}}}, {},
     "$.format.json_schema", "at #/properties/a"),
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "string",
                                                         "format": "no-such"}}}, {},
     "$.format.json_schema", "'format' at #/properties/a"),
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}},
     {"excludes": ["x"]}, "$.format.json_schema", "'minLength' at #/properties/a"),
    ("json", {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2}}},
     {"excludes": ["x"]}, "$.format.json_schema", "'maxLength' at #/properties/a"),
    ("minimax_xml", {"type": "object", "properties": {"a": {"minimum": 1}}}, {},
     "$.format.json_schema", "no 'type'"),
    # minimax_m3_xml: what XGrammar 0.2.8 refuses, and what it ignores (gxg would honour it)
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {}}}, {}, "$.format.json_schema",
     "'type' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "additionalProperties": {"type": "string"}}, {},
     "$.format.json_schema", "'additionalProperties' at #"),
    ("minimax_m3_xml", {"type": "object", "patternProperties": {"a": {"type": "string"}}}, {},
     "$.format.json_schema", "'patternProperties' at #"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {"type": "string",
                                                               "pattern": "a"}}}, {},
     "$.format.json_schema", "'pattern' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a>": {"type": "string"}}}, {},
     "$.format.json_schema", "'properties' at #/properties/a>"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {"enum": [M3 + "x"]}}}, {},
     "$.format.json_schema", "'enum' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {"type": "string"}},
                        "required": ["b"]}, {}, "$.format.json_schema", "'required' at #"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {
        "allOf": [{"type": "integer"}, {"minimum": 3}]}}}, {}, "$.format.json_schema",
     "'allOf' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {
        "anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 3}}}, {},
     "$.format.json_schema", "'anyOf' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {
        "type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}, {},
     "$.format.json_schema", "'uniqueItems' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {"type": "integer",
                                                               "not": {"const": 3}}}}, {},
     "$.format.json_schema", "'not' at #/properties/a"),
    ("minimax_m3_xml", {"type": "object", "properties": {"a": {
        "type": "array", "minItems": 2}}}, {}, "$.format.json_schema", "'minItems' at #"),
    ("minimax_m3_xml", PERSON, {"excludes": ["x"]}, "$.format.json_schema", "excludes"),
    # cohere_xml: what XGrammar 0.2.8 refuses, and what it ignores (gxg would honour it)
    ("cohere_xml", PERSON, {"excludes": ["x"]}, "$.format.json_schema", "excludes"),
    ("cohere_xml", {"type": "object", "properties": {"a": {"type": "string"}},
                    "required": ["b"]}, {}, "$.format.json_schema", "'required' at #"),
    ("cohere_xml", _cohere_property({"allOf": [{"type": "integer"}, {"minimum": 3}]}), {},
     "$.format.json_schema", "'allOf' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "integer", "not": {"const": 3}}), {},
     "$.format.json_schema", "'not' at #/properties/a"),
    ("cohere_xml", _cohere_property({"anyOf": [{"type": "integer"}], "minimum": 3}), {},
     "$.format.json_schema", "'anyOf' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "string", "enum": ["x", 1]}), {},
     "$.format.json_schema", "'enum' at #/properties/a"),
    ("cohere_xml", _cohere_property({"minimum": 1}), {}, "$.format.json_schema", "no 'type'"),
    ("cohere_xml", _cohere_property({"type": "number", "multipleOf": 0.5}), {},
     "$.format.json_schema", "'multipleOf' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "string", "format": "no-such"}), {},
     "$.format.json_schema", "'format' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "string", "pattern": "a", "minLength": 2}), {},
     "$.format.json_schema", "at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "object", "patternProperties": {"x": {}}}), {},
     "$.format.json_schema", "'patternProperties' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "array", "items": [{"type": "null"}]}), {},
     "$.format.json_schema", "'items' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "array", "minItems": 1}), {},
     "$.format.json_schema", "'minItems' at #/properties/a"),
    ("cohere_xml", _cohere_property({"type": "array", "prefixItems": [{}, {}], "maxItems": 1}),
     {}, "$.format.json_schema", "'maxItems' at #/properties/a"),
    ("cohere_xml", {"type": "object", "properties": {"a\u0000": {"type": "null"}}}, {},
     "$.format.json_schema", "NUL"),
    ("cohere_xml", {"type": "object", "$defs": {"o": {"type": "object", "title": "t"}},
                    "properties": {"a": {"$ref": "#/$defs/o"}}}, {}, "$.format.json_schema",
     "'$ref' at #/properties/a"),
]


@pytest.mark.parametrize("style, schema, options, path, words", REFUSED)
def test_refused_parts_name_their_place(style, schema, options, path, words):
    with pytest.raises(GrammarError) as info:
        Grammar.from_structural_tag(_tag(schema, style, **options))
    message = str(info.value)
    assert message.startswith(path + ":") and words in message, message


def test_any_order_with_required_members_warns():
    from gxg.grammar.json_schema import JsonSchemaRelaxationWarning
    with pytest.warns(JsonSchemaRelaxationWarning, match="any_order"):
        Grammar.from_structural_tag(_tag(ORDER, "qwen_xml", any_order=True))
