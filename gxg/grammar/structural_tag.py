"""Structural tags (XGrammar 0.2.8's ``response_format: {"type": "structural_tag", ...}``): the
format model and its reader.

In:  a structural tag as a JSON text, a dict, an XGrammar pydantic ``StructuralTag`` (anything
     with ``model_dump_json``), one of this module's ``StructuralTag`` objects, or the legacy
     ``(tags, triggers)`` pair (``tags``: ``StructuralTagItem`` objects — this module's,
     XGrammar's pydantic ones, or dicts ``{"begin", "schema", "end"}``).
Out: ``parse_structural_tag(...) -> StructuralTag``, plain frozen dataclasses, one per format
     type; ``structural_tag_to_grammar(..., tokenizer_info=None) -> Grammar`` runs the reader
     then ``gxg.grammar.structural_tag_emission`` (the grammar writer), which needs
     ``tokenizer_info`` (a ``gxg.tokenizer.TokenizerInfo``) only for tokens given as strings.
     Any invalid input is a ``GrammarError`` whose message starts with the JSON path of the
     culprit, e.g. ``$.format.tags[1].begin: ...``; never another exception.

What is read is XGrammar 0.2.8's C++ reader (``cpp/structural_tag.cc``; its pydantic models in
``python/xgrammar/structural_tag.py`` give the same names and defaults):

* the top level is an object with ``format`` and optionally ``"type": "structural_tag"``;
* a format is an object; with ``type`` it is that format, without it the reader tries, in this
  order, tag, const_string, json_schema, any_text (only with ``excludes``), sequence, or,
  triggered_tags, tags_with_separator, optional, plus, star, repeat, dispatch, and takes the
  first that reads;
* fields a format does not know are ignored (as XGrammar's reader and pydantic do);
* the deprecated ``qwen_xml_parameter`` is ``json_schema`` with ``style="qwen_xml"``;
* from XGrammar 0.2.9: ``grammar``'s ``syntax``, ``"ebnf"`` (the default) or ``"lark"`` (read
  by ``Grammar.from_lark``; named special tokens resolved with the writer's
  ``tokenizer_info``). XGrammar 0.2.8 ignores the field and reads the text as EBNF.

Deliberate differences from XGrammar's reader: a field of the wrong type is an error (XGrammar
ignores a non-string ``style``); a trigger that no tag uses is an error (XGrammar stops on an
internal check); an empty dispatch pattern is an error (XGrammar accepts it and builds a
degenerate automaton). Tokens (``token``, the token lists of ``exclude_token``, ``any_tokens``,
``token_triggered_tags`` and ``token_dispatch``) are read as given, an id or a string; the
writer resolves strings. What gxg cannot express yet is refused with a GrammarError that names
it (see ``gxg.grammar.structural_tag_emission``): what the XML styles of ``json_schema`` refuse
(``gxg.grammar.json_schema_xml``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple, Union

from gxg.grammar.ir import Grammar, GrammarError

__all__ = [
    "ConstStringFormat", "JSONSchemaFormat", "AnyTextFormat", "GrammarFormat", "RegexFormat",
    "SequenceFormat", "OrFormat", "TagFormat", "TriggeredTagsFormat", "TagsWithSeparatorFormat",
    "OptionalFormat", "PlusFormat", "StarFormat", "RepeatFormat", "DispatchFormat",
    "TokenFormat", "ExcludeTokenFormat", "AnyTokensFormat", "TokenTriggeredTagsFormat",
    "TokenDispatchFormat", "Format", "StructuralTag", "StructuralTagItem",
    "JSON_SCHEMA_STYLES", "TOKEN_FORMAT_TYPES", "parse_structural_tag", "structural_tag_key",
    "structural_tag_to_grammar",
]

INT32_MAX = 2_147_483_647

JSON_SCHEMA_STYLES = ("json", "qwen_xml", "minimax_xml", "minimax_m3_xml", "deepseek_xml",
                      "glm_xml", "cohere_xml", "kimi_k3_xml", "deepseek_v4_1_xml")
TOKEN_FORMAT_TYPES = ("token", "exclude_token", "any_tokens", "token_triggered_tags",
                      "token_dispatch")


# ----------------------------------------------------------------------------- the model
# Every format keeps ``path`` (where it was read, for error messages) and ``key`` (a canonical
# JSON text of what was read: two formats with equal keys write the same grammar in the same
# context). Neither takes part in equality.


def _meta():
    return field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class ConstStringFormat:
    value: str
    path: str = _meta()
    key: str = _meta()
    type = "const_string"


@dataclass(frozen=True)
class JSONSchemaFormat:
    json_schema: Any                      # a dict or a bool
    style: str = "json"
    any_order: bool = False
    max_whitespace_cnt: Optional[int] = None
    excludes: Tuple[str, ...] = ()
    path: str = _meta()
    key: str = _meta()
    type = "json_schema"


@dataclass(frozen=True)
class AnyTextFormat:
    excludes: Tuple[str, ...] = ()
    max_tokens: Optional[int] = None
    max_chars: Optional[int] = None
    path: str = _meta()
    key: str = _meta()
    type = "any_text"


GRAMMAR_SYNTAXES = ("ebnf", "lark")


@dataclass(frozen=True)
class GrammarFormat:
    grammar: str
    syntax: str = "ebnf"  # one of GRAMMAR_SYNTAXES
    path: str = _meta()
    key: str = _meta()
    type = "grammar"


@dataclass(frozen=True)
class RegexFormat:
    pattern: str
    path: str = _meta()
    key: str = _meta()
    type = "regex"


@dataclass(frozen=True)
class SequenceFormat:
    elements: Tuple["Format", ...]
    path: str = _meta()
    key: str = _meta()
    type = "sequence"


@dataclass(frozen=True)
class OrFormat:
    elements: Tuple["Format", ...]
    path: str = _meta()
    key: str = _meta()
    type = "or"


@dataclass(frozen=True)
class TokenFormat:
    token: Union[int, str]
    path: str = _meta()
    key: str = _meta()
    type = "token"


@dataclass(frozen=True)
class TagFormat:
    begin: Union[str, TokenFormat]
    content: "Format"
    end: Union[Tuple[str, ...], TokenFormat]   # one or more end strings, or a token
    path: str = _meta()
    key: str = _meta()
    type = "tag"


@dataclass(frozen=True)
class TriggeredTagsFormat:
    triggers: Tuple[str, ...]
    tags: Tuple[TagFormat, ...]
    at_least_one: bool = False
    stop_after_first: bool = False
    excludes: Tuple[str, ...] = ()
    path: str = _meta()
    key: str = _meta()
    type = "triggered_tags"


@dataclass(frozen=True)
class TagsWithSeparatorFormat:
    tags: Tuple[TagFormat, ...]
    separator: str
    at_least_one: bool = False
    stop_after_first: bool = False
    path: str = _meta()
    key: str = _meta()
    type = "tags_with_separator"


@dataclass(frozen=True)
class OptionalFormat:
    content: "Format"
    path: str = _meta()
    key: str = _meta()
    type = "optional"


@dataclass(frozen=True)
class PlusFormat:
    content: "Format"
    path: str = _meta()
    key: str = _meta()
    type = "plus"


@dataclass(frozen=True)
class StarFormat:
    content: "Format"
    path: str = _meta()
    key: str = _meta()
    type = "star"


@dataclass(frozen=True)
class RepeatFormat:
    min: int
    max: int                              # -1: unbounded
    content: "Format"
    path: str = _meta()
    key: str = _meta()
    type = "repeat"


@dataclass(frozen=True)
class DispatchFormat:
    rules: Tuple[Tuple[str, "Format"], ...]
    loop: bool = True
    excludes: Tuple[str, ...] = ()
    path: str = _meta()
    key: str = _meta()
    type = "dispatch"


@dataclass(frozen=True)
class ExcludeTokenFormat:
    exclude_tokens: Tuple[Union[int, str], ...] = ()
    path: str = _meta()
    key: str = _meta()
    type = "exclude_token"


@dataclass(frozen=True)
class AnyTokensFormat:
    exclude_tokens: Tuple[Union[int, str], ...] = ()
    max_tokens: Optional[int] = None
    path: str = _meta()
    key: str = _meta()
    type = "any_tokens"


@dataclass(frozen=True)
class TokenTriggeredTagsFormat:
    trigger_tokens: Tuple[Union[int, str], ...]
    tags: Tuple[TagFormat, ...]
    exclude_tokens: Tuple[Union[int, str], ...] = ()
    at_least_one: bool = False
    stop_after_first: bool = False
    path: str = _meta()
    key: str = _meta()
    type = "token_triggered_tags"


@dataclass(frozen=True)
class TokenDispatchFormat:
    rules: Tuple[Tuple[Union[int, str], "Format"], ...]
    loop: bool = True
    exclude_tokens: Tuple[Union[int, str], ...] = ()
    path: str = _meta()
    key: str = _meta()
    type = "token_dispatch"


Format = Union[ConstStringFormat, JSONSchemaFormat, AnyTextFormat, GrammarFormat, RegexFormat,
               SequenceFormat, OrFormat, TagFormat, TriggeredTagsFormat, TagsWithSeparatorFormat,
               OptionalFormat, PlusFormat, StarFormat, RepeatFormat, DispatchFormat, TokenFormat,
               ExcludeTokenFormat, AnyTokensFormat, TokenTriggeredTagsFormat,
               TokenDispatchFormat]


@dataclass(frozen=True)
class StructuralTag:
    """A whole structural tag: ``{"type": "structural_tag", "format": ...}``."""

    format: Format
    key: str = _meta()


@dataclass(frozen=True)
class StructuralTagItem:
    """One tag of the deprecated ``(tags, triggers)`` form: ``begin``, a JSON schema (a dict, a
    JSON text or a Pydantic model class) for what follows, ``end``."""

    begin: str
    schema: Any
    end: str


# ----------------------------------------------------------------------------- errors


def _fail(path: str, message: str) -> GrammarError:
    return GrammarError(f"{path}: {message}")


def describe_json_value(value) -> str:
    """What kind of JSON value ``value`` is, for error messages ("a string", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# ----------------------------------------------------------------------------- input forms


def _canonical(value) -> str:
    # Not sort_keys: the order of a JSON schema's properties is the order of the members.
    # The formats' own fields are written in a fixed order, so the text is still canonical.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _load_input(structural_tag) -> Any:
    """The structural tag as JSON data (dicts, lists, strings, numbers, booleans, None)."""
    if isinstance(structural_tag, StructuralTag):
        return json.loads(structural_tag.key)
    if isinstance(structural_tag, (bytes, bytearray)):
        try:
            structural_tag = bytes(structural_tag).decode("utf-8")
        except UnicodeDecodeError as error:
            raise GrammarError(f"$: the structural tag is not UTF-8 text: {error}") from None
    if isinstance(structural_tag, str):
        try:
            return json.loads(structural_tag)
        except ValueError as error:
            raise GrammarError(f"$: the structural tag is not valid JSON: {error}") from None
    if isinstance(structural_tag, dict):
        return structural_tag
    dump = getattr(structural_tag, "model_dump_json", None)
    if callable(dump):  # XGrammar's pydantic StructuralTag (or any pydantic model of one)
        try:
            return json.loads(dump(by_alias=True))
        except Exception as error:  # noqa: BLE001 - any failure of the model is bad input
            raise GrammarError(f"$: the structural tag object could not be dumped as JSON: "
                               f"{error}") from None
    raise GrammarError(f"$: a structural tag must be a JSON text, a dict or a StructuralTag, "
                       f"not {type(structural_tag).__name__}")


def _legacy_to_data(tags, triggers) -> dict:
    """The deprecated ``(tags, triggers)`` form as the triggered_tags structural tag XGrammar
    makes of it (``StructuralTag.from_legacy_structural_tag``)."""
    if not isinstance(tags, (list, tuple)):
        raise GrammarError(f"$.tags: the legacy form takes a list of tags, not "
                           f"{type(tags).__name__}")
    if not isinstance(triggers, (list, tuple)):
        raise GrammarError(f"$.triggers: the legacy form takes a list of triggers, not "
                           f"{type(triggers).__name__}")
    out_tags = []
    for i, item in enumerate(tags):
        path = f"$.tags[{i}]"
        if isinstance(item, dict):
            missing = [name for name in ("begin", "schema", "end") if name not in item]
            if missing:
                raise _fail(path, f"a legacy tag needs the field {missing[0]!r}")
            begin, schema, end = item["begin"], item["schema"], item["end"]
        elif all(hasattr(item, name) for name in ("begin", "end")) and \
                (hasattr(item, "schema_") or hasattr(item, "schema")):
            begin, end = item.begin, item.end
            # XGrammar's pydantic StructuralTagItem stores the schema as ``schema_``
            schema = item.schema_ if hasattr(item, "schema_") else item.schema
        else:
            raise _fail(path, f"a legacy tag must be a StructuralTagItem or a dict with begin, "
                              f"schema and end, not {type(item).__name__}")
        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except ValueError as error:
                raise _fail(f"{path}.schema", f"the schema is not valid JSON: {error}") from None
        elif isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        out_tags.append({"type": "tag", "begin": begin,
                         "content": {"type": "json_schema", "json_schema": schema}, "end": end})
    return {"type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": list(triggers), "tags": out_tags}}


def structural_tag_data(*args, **kwargs) -> Any:
    """The JSON data of a structural tag given as ``Grammar.from_structural_tag`` takes it:
    ``(structural_tag)``, ``(tags, triggers)``, ``structural_tag=...`` or
    ``tags=..., triggers=...``."""
    if len(args) == 1 and not kwargs:
        return _load_input(args[0])
    if len(args) == 2 and not kwargs:
        return _legacy_to_data(args[0], args[1])
    if not args and set(kwargs) == {"structural_tag"}:
        return _load_input(kwargs["structural_tag"])
    if not args and set(kwargs) == {"tags", "triggers"}:
        return _legacy_to_data(kwargs["tags"], kwargs["triggers"])
    raise GrammarError("$: from_structural_tag takes one structural tag (a JSON text, a dict or "
                       "a StructuralTag) or the legacy pair (tags, triggers)")


# ----------------------------------------------------------------------------- the reader


def parse_structural_tag(*args, **kwargs) -> StructuralTag:
    """Read a structural tag (see the module docstring for the accepted forms)."""
    data = structural_tag_data(*args, **kwargs)
    return _Reader().structural_tag(data)


def structural_tag_key(*args, **kwargs) -> str:
    """A canonical text of the structural tag (what a compile cache keys on)."""
    return parse_structural_tag(*args, **kwargs).key


def structural_tag_to_grammar(*args, tokenizer_info=None, **kwargs) -> Grammar:
    """The Grammar of a structural tag (root rule ``root``); ``tokenizer_info`` resolves the
    tokens given as strings (without it they are a GrammarError, as in XGrammar's
    ``Grammar.from_structural_tag``)."""
    from gxg.grammar.structural_tag_emission import emit_structural_tag
    return emit_structural_tag(parse_structural_tag(*args, **kwargs), tokenizer_info)


MAX_FORMAT_DEPTH = 200


class _Reader:
    def __init__(self):
        self.depth = 0

    # -- fields
    @staticmethod
    def _object(value, path: str, what: str) -> dict:
        if not isinstance(value, dict):
            raise _fail(path, f"{what} must be an object, not {describe_json_value(value)}")
        return value

    @staticmethod
    def _required(obj: dict, name: str, path: str, what: str):
        if name not in obj:
            raise _fail(path, f"{what} needs the field {name!r}")
        return obj[name]

    @staticmethod
    def _string(value, path: str, *, non_empty: bool = False) -> str:
        if not isinstance(value, str):
            raise _fail(path, f"must be a string, not {describe_json_value(value)}")
        if non_empty and not value:
            raise _fail(path, "must be a non-empty string")
        return value

    @staticmethod
    def _boolean(obj: dict, name: str, path: str, default: bool) -> bool:
        if name not in obj:
            return default
        value = obj[name]
        if not isinstance(value, bool):
            raise _fail(f"{path}.{name}", f"must be a boolean, not {describe_json_value(value)}")
        return value

    def _strings(self, obj: dict, name: str, path: str, *, non_empty_items: bool,
                 required: bool = False, non_empty_list: bool = False) -> Tuple[str, ...]:
        if name not in obj:
            if required:
                raise _fail(path, f"needs the field {name!r}")
            return ()
        value = obj[name]
        where = f"{path}.{name}"
        if not isinstance(value, list):
            raise _fail(where, f"must be an array of strings, not {describe_json_value(value)}")
        if non_empty_list and not value:
            raise _fail(where, "must not be empty")
        return tuple(self._string(item, f"{where}[{i}]", non_empty=non_empty_items)
                     for i, item in enumerate(value))

    @staticmethod
    def _integer(value, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
            raise _fail(path, f"must be an integer, not {describe_json_value(value)}"
                        + (f" {value!r}" if isinstance(value, float) else ""))
        return int(value)

    def _budget(self, obj: dict, name: str, path: str) -> Optional[int]:
        value = obj.get(name)
        if value is None:
            return None
        number = self._integer(value, f"{path}.{name}")
        if not 0 <= number <= INT32_MAX:
            raise _fail(f"{path}.{name}", f"must be a non-negative 32-bit integer or null, not "
                                          f"{number}")
        return number

    def _token_list(self, obj: dict, name: str, path: str, *,
                    required: bool = False) -> Tuple[Union[int, str], ...]:
        if name not in obj:
            if required:
                raise _fail(path, f"needs the field {name!r}")
            return ()
        value = obj[name]
        where = f"{path}.{name}"
        if not isinstance(value, list):
            raise _fail(where, f"must be an array of token ids or strings"
                               f", not {describe_json_value(value)}")
        out = []
        for i, item in enumerate(value):
            out.append(self._token(item, f"{where}[{i}]"))
        return tuple(out)

    def _token(self, item, path: str) -> Union[int, str]:
        if isinstance(item, str):
            if not item:
                raise _fail(path, "a token string must not be empty")
            return item
        number = self._integer(item, path)
        if number < 0:
            raise _fail(path, f"a token id must be non-negative, not {number}")
        return number

    # -- the top level
    def structural_tag(self, data) -> StructuralTag:
        obj = self._object(data, "$", "a structural tag")
        if "type" in obj and obj["type"] != "structural_tag":
            raise _fail("$.type", f"must be \"structural_tag\", not {obj['type']!r}")
        fmt = self.format(self._required(obj, "format", "$", "a structural tag"), "$.format")
        return StructuralTag(fmt, key=_canonical({"type": "structural_tag", "format":
                                                  json.loads(fmt.key)}))

    # -- formats
    def format(self, value, path: str) -> Format:
        self.depth += 1
        try:
            if self.depth > MAX_FORMAT_DEPTH:
                raise _fail(path, f"formats are nested more than {MAX_FORMAT_DEPTH} deep")
            obj = self._object(value, path, "a format")
            if "type" in obj:
                kind = obj["type"]
                if not isinstance(kind, str):
                    raise _fail(f"{path}.type", f"must be a string"
                                                f", not {describe_json_value(kind)}")
                if kind == "qwen_xml_parameter":  # deprecated spelling
                    return self._json_schema(obj, path, style="qwen_xml")
                reader = self._READERS.get(kind)
                if reader is None:
                    known = ", ".join(sorted([*self._READERS, "qwen_xml_parameter"]))
                    raise _fail(f"{path}.type", f"unknown format type {kind!r} (known: {known})")
                return reader(self, obj, path)
            # no type: the first format that reads, in XGrammar's order
            for kind in ("tag", "const_string", "json_schema", "any_text", "sequence", "or",
                         "triggered_tags", "tags_with_separator", "optional", "plus", "star",
                         "repeat", "dispatch", "token_dispatch"):
                if kind == "any_text" and "excludes" not in obj:
                    continue
                try:
                    return self._READERS[kind](self, obj, path)
                except GrammarError:
                    continue
            raise _fail(path, "a format without \"type\" that reads as no format type: "
                              f"{_canonical(obj)[:200]}")
        finally:
            self.depth -= 1

    @staticmethod
    def _done(fmt, obj: dict, fields: dict):
        """``fmt`` with its key: the type and the fields as read (defaults filled in)."""
        object.__setattr__(fmt, "key", _canonical({"type": fmt.type, **fields}))
        return fmt

    def _const_string(self, obj, path):
        value = self._string(self._required(obj, "value", path, "const_string"),
                             f"{path}.value")
        return self._done(ConstStringFormat(value, path=path), obj, {"value": value})

    @staticmethod
    def _one_of(obj, name: str, path: str, allowed: Tuple[str, ...]) -> str:
        """Field ``name``: one of the strings ``allowed``, the first when absent."""
        value = _Reader._string(obj.get(name, allowed[0]), f"{path}.{name}")
        if value not in allowed:
            raise _fail(f"{path}.{name}", f"unknown {name} {value!r} (one of "
                                          f"{', '.join(allowed)})")
        return value

    def _json_schema(self, obj, path, style: Optional[str] = None):
        schema = self._required(obj, "json_schema", path, "json_schema")
        if not isinstance(schema, (dict, bool)):
            raise _fail(f"{path}.json_schema", f"must be an object or a boolean, not "
                                               f"{describe_json_value(schema)}")
        if style is None:
            style = self._one_of(obj, "style", path, JSON_SCHEMA_STYLES)
        any_order = self._boolean(obj, "any_order", path, False)
        cap = obj.get("max_whitespace_cnt")
        if cap is not None:
            cap = self._integer(cap, f"{path}.max_whitespace_cnt")
        excludes = tuple(sorted(set(self._strings(obj, "excludes", path,
                                                  non_empty_items=True))))
        try:
            schema_key = json.loads(_canonical(schema))
        except ValueError as error:
            raise _fail(f"{path}.json_schema", f"is not JSON data: {error}") from None
        fmt = JSONSchemaFormat(schema, style, any_order, cap, excludes, path=path)
        return self._done(fmt, obj, {"json_schema": schema_key, "style": style,
                                     "any_order": any_order, "max_whitespace_cnt": cap,
                                     "excludes": list(excludes)})

    def _any_text(self, obj, path):
        max_tokens = self._budget(obj, "max_tokens", path)
        max_chars = self._budget(obj, "max_chars", path)
        excludes = self._strings(obj, "excludes", path, non_empty_items=False)
        fmt = AnyTextFormat(excludes, max_tokens, max_chars, path=path)
        return self._done(fmt, obj, {"excludes": list(excludes), "max_tokens": max_tokens,
                                     "max_chars": max_chars})

    def _grammar(self, obj, path):
        text = self._string(self._required(obj, "grammar", path, "grammar"), f"{path}.grammar",
                            non_empty=True)
        syntax = self._one_of(obj, "syntax", path, GRAMMAR_SYNTAXES)
        # the default stays out of the key: a tag without the field keeps its key (and cache)
        fields = {"grammar": text} if syntax == "ebnf" else {"grammar": text, "syntax": syntax}
        return self._done(GrammarFormat(text, syntax, path=path), obj, fields)

    def _regex(self, obj, path):
        pattern = self._string(self._required(obj, "pattern", path, "regex"),
                               f"{path}.pattern", non_empty=True)
        return self._done(RegexFormat(pattern, path=path), obj, {"pattern": pattern})

    def _elements(self, obj, path, what):
        value = self._required(obj, "elements", path, what)
        if not isinstance(value, list):
            raise _fail(f"{path}.elements", f"must be an array of formats"
                                            f", not {describe_json_value(value)}")
        if not value:
            raise _fail(f"{path}.elements", f"{what} needs at least one element")
        return tuple(self.format(item, f"{path}.elements[{i}]") for i, item in enumerate(value))

    def _sequence(self, obj, path):
        elements = self._elements(obj, path, "sequence")
        return self._done(SequenceFormat(elements, path=path), obj,
                          {"elements": [json.loads(e.key) for e in elements]})

    def _or(self, obj, path):
        elements = self._elements(obj, path, "or")
        return self._done(OrFormat(elements, path=path), obj,
                          {"elements": [json.loads(e.key) for e in elements]})

    def _content(self, obj, path, what):
        return self.format(self._required(obj, "content", path, what), f"{path}.content")

    def _tag(self, obj, path):
        if "type" in obj and obj["type"] != "tag":
            raise _fail(f"{path}.type", f"a tag's type must be \"tag\", not {obj['type']!r}")
        begin_value = self._required(obj, "begin", path, "tag")
        if isinstance(begin_value, dict):
            begin = self._token_format(begin_value, f"{path}.begin")
        else:
            begin = self._string(begin_value, f"{path}.begin")
        content = self._content(obj, path, "tag")
        end_value = self._required(obj, "end", path, "tag")
        if isinstance(end_value, str):
            end = (end_value,)
        elif isinstance(end_value, list):
            if not end_value:
                raise _fail(f"{path}.end", "the array of end strings must not be empty")
            end = tuple(self._string(item, f"{path}.end[{i}]")
                        for i, item in enumerate(end_value))
        elif isinstance(end_value, dict):
            end = self._token_format(end_value, f"{path}.end")
        else:
            raise _fail(f"{path}.end", f"must be a string, an array of strings or a token "
                                       f"format, not {describe_json_value(end_value)}")
        fmt = TagFormat(begin, content, end, path=path)
        key_of = (lambda part: json.loads(part.key) if isinstance(part, TokenFormat)
                  else (list(part) if isinstance(part, tuple) else part))
        return self._done(fmt, obj, {"begin": key_of(begin), "content": json.loads(content.key),
                                     "end": key_of(end)})

    def _tag_list(self, obj, path, what) -> Tuple[TagFormat, ...]:
        value = self._required(obj, "tags", path, what)
        if not isinstance(value, list):
            raise _fail(f"{path}.tags", f"must be an array of tags"
                                        f", not {describe_json_value(value)}")
        if not value:
            raise _fail(f"{path}.tags", f"{what} needs at least one tag")
        tags = []
        for i, item in enumerate(value):
            where = f"{path}.tags[{i}]"
            self._object(item, where, "a tag")
            tags.append(self._tag(item, where))
        return tuple(tags)

    def _triggered_tags(self, obj, path):
        triggers = self._strings(obj, "triggers", path, non_empty_items=True, required=True,
                                 non_empty_list=True)
        tags = self._tag_list(obj, path, "triggered_tags")
        excludes = self._strings(obj, "excludes", path, non_empty_items=True)
        at_least_one = self._boolean(obj, "at_least_one", path, False)
        stop_after_first = self._boolean(obj, "stop_after_first", path, False)
        fmt = TriggeredTagsFormat(triggers, tags, at_least_one, stop_after_first, excludes,
                                  path=path)
        return self._done(fmt, obj, {"triggers": list(triggers),
                                     "tags": [json.loads(t.key) for t in tags],
                                     "at_least_one": at_least_one,
                                     "stop_after_first": stop_after_first,
                                     "excludes": list(excludes)})

    def _tags_with_separator(self, obj, path):
        tags = self._tag_list(obj, path, "tags_with_separator")
        separator = self._string(self._required(obj, "separator", path, "tags_with_separator"),
                                 f"{path}.separator")
        at_least_one = self._boolean(obj, "at_least_one", path, False)
        stop_after_first = self._boolean(obj, "stop_after_first", path, False)
        fmt = TagsWithSeparatorFormat(tags, separator, at_least_one, stop_after_first,
                                      path=path)
        return self._done(fmt, obj, {"tags": [json.loads(t.key) for t in tags],
                                     "separator": separator, "at_least_one": at_least_one,
                                     "stop_after_first": stop_after_first})

    def _unary(self, cls):
        def read(self, obj, path):
            content = self._content(obj, path, cls.type)
            return self._done(cls(content, path=path), obj,
                              {"content": json.loads(content.key)})
        return read

    def _repeat(self, obj, path):
        low = self._integer(self._required(obj, "min", path, "repeat"), f"{path}.min")
        high = self._integer(self._required(obj, "max", path, "repeat"), f"{path}.max")
        if low < 0:
            raise _fail(f"{path}.min", f"must be >= 0, not {low}")
        if high < -1:
            raise _fail(f"{path}.max", f"must be -1 (unbounded) or >= 0, not {high}")
        if high >= 0 and low > high:
            raise _fail(path, f"min ({low}) must be <= max ({high})")
        if low > INT32_MAX:
            raise _fail(f"{path}.min", f"must be <= {INT32_MAX}")
        if high > INT32_MAX:
            high = -1  # XGrammar: a larger max is unbounded (with a warning)
        content = self._content(obj, path, "repeat")
        return self._done(RepeatFormat(low, high, content, path=path), obj,
                          {"min": low, "max": high, "content": json.loads(content.key)})

    def _dispatch(self, obj, path):
        value = self._required(obj, "rules", path, "dispatch")
        if not isinstance(value, list):
            raise _fail(f"{path}.rules", f"must be an array of [pattern, format] pairs, not "
                                         f"{describe_json_value(value)}")
        if not value:
            raise _fail(f"{path}.rules", "dispatch needs at least one rule")
        rules = []
        for i, pair in enumerate(value):
            where = f"{path}.rules[{i}]"
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise _fail(where, "each rule must be a pair [pattern, format]")
            pattern = self._string(pair[0], f"{where}[0]", non_empty=True)
            rules.append((pattern, self.format(pair[1], f"{where}[1]")))
        loop = self._boolean(obj, "loop", path, True)
        excludes = self._strings(obj, "excludes", path, non_empty_items=True)
        fmt = DispatchFormat(tuple(rules), loop, excludes, path=path)
        return self._done(fmt, obj, {"rules": [[p, json.loads(f.key)] for p, f in rules],
                                     "loop": loop, "excludes": list(excludes)})

    # -- token-level formats: tokens are ids or strings, which the writer resolves
    def _token_format(self, obj, path):
        self._object(obj, path, "a token format")
        if "type" in obj and obj["type"] != "token":
            raise _fail(f"{path}.type", f"must be \"token\", not {obj['type']!r}")
        token = self._token(self._required(obj, "token", path, "token"), f"{path}.token")
        return self._done(TokenFormat(token, path=path), obj, {"token": token})

    def _exclude_token(self, obj, path):
        tokens = self._token_list(obj, "exclude_tokens", path)
        return self._done(ExcludeTokenFormat(tokens, path=path), obj,
                          {"exclude_tokens": list(tokens)})

    def _any_tokens(self, obj, path):
        tokens = self._token_list(obj, "exclude_tokens", path)
        max_tokens = self._budget(obj, "max_tokens", path)
        return self._done(AnyTokensFormat(tokens, max_tokens, path=path), obj,
                          {"exclude_tokens": list(tokens), "max_tokens": max_tokens})

    def _token_triggered_tags(self, obj, path):
        triggers = self._token_list(obj, "trigger_tokens", path, required=True)
        if not triggers:
            raise _fail(f"{path}.trigger_tokens", "must not be empty")
        tags = self._tag_list(obj, path, "token_triggered_tags")
        excludes = self._token_list(obj, "exclude_tokens", path)
        at_least_one = self._boolean(obj, "at_least_one", path, False)
        stop_after_first = self._boolean(obj, "stop_after_first", path, False)
        fmt = TokenTriggeredTagsFormat(triggers, tags, excludes, at_least_one,
                                       stop_after_first, path=path)
        return self._done(fmt, obj, {"trigger_tokens": list(triggers),
                                     "tags": [json.loads(t.key) for t in tags],
                                     "exclude_tokens": list(excludes),
                                     "at_least_one": at_least_one,
                                     "stop_after_first": stop_after_first})

    def _token_dispatch(self, obj, path):
        value = self._required(obj, "rules", path, "token_dispatch")
        if not isinstance(value, list) or not value:
            raise _fail(f"{path}.rules", "must be a non-empty array of [token, format] pairs")
        rules = []
        for i, pair in enumerate(value):
            where = f"{path}.rules[{i}]"
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise _fail(where, "each rule must be a pair [token, format]")
            rules.append((self._token(pair[0], f"{where}[0]"),
                          self.format(pair[1], f"{where}[1]")))
        loop = self._boolean(obj, "loop", path, True)
        excludes = self._token_list(obj, "exclude_tokens", path)
        fmt = TokenDispatchFormat(tuple(rules), loop, excludes, path=path)
        return self._done(fmt, obj, {"rules": [[t, json.loads(f.key)] for t, f in rules],
                                     "loop": loop, "exclude_tokens": list(excludes)})

    _READERS: dict = {}


_Reader._READERS = {
    "const_string": _Reader._const_string,
    "json_schema": _Reader._json_schema,
    "any_text": _Reader._any_text,
    "grammar": _Reader._grammar,
    "regex": _Reader._regex,
    "sequence": _Reader._sequence,
    "or": _Reader._or,
    "tag": _Reader._tag,
    "triggered_tags": _Reader._triggered_tags,
    "tags_with_separator": _Reader._tags_with_separator,
    "optional": _Reader._unary(None, OptionalFormat),
    "plus": _Reader._unary(None, PlusFormat),
    "star": _Reader._unary(None, StarFormat),
    "repeat": _Reader._repeat,
    "dispatch": _Reader._dispatch,
    "token": _Reader._token_format,
    "exclude_token": _Reader._exclude_token,
    "any_tokens": _Reader._any_tokens,
    "token_triggered_tags": _Reader._token_triggered_tags,
    "token_dispatch": _Reader._token_dispatch,
}
