"""JSON Schema as XML tool-call parameters: the ``style`` values of a structural tag's
``json_schema`` format other than ``"json"`` (XGrammar 0.2.8), and the deprecated
``qwen_xml_parameter`` format (``style="qwen_xml"``).

In:  ``xml_schema_to_grammar(schema, style, *, any_order=False, max_whitespace_cnt=None,
     excludes=())``; ``schema`` as ``gxg.grammar.json_schema`` takes it.
Out: a ``Grammar`` (root rule ``root``), or a ``GrammarError`` naming the style, the keyword and
     the JSON pointer of what is refused.

The semantics are XGrammar 0.2.8's (``XMLToolCallingConverter`` in its
``cpp/json_schema_converter_ext.cc`` / ``converter_ext/xml_tool_calling.cc``; checked against
the installed package's grammars). A tool call's arguments (the root schema, an object) are a
list of parameters, one per member; each parameter is

    KEY_PREFIX name KEY_SUFFIX [ws VALUE_PREFIX] value PARAMETER_SUFFIX

=================== ================================ ======================= ==================
style               KEY_PREFIX                       KEY_SUFFIX              PARAMETER_SUFFIX
=================== ================================ ======================= ==================
qwen_xml            ``<parameter=``                  ``>``                   ``</parameter>``
minimax_xml         ``<parameter name="``            ``">``                  ``</parameter>``
deepseek_xml        ``<｜DSML｜parameter name="``     ``" string="S">``       ``</｜DSML｜parameter>``
deepseek_v4_1_xml   ``<｜DSML｜ parameter name="``    ``" string="S">``       ``</｜DSML｜ parameter>``
glm_xml             ``<arg_key>``                    ``</arg_key>``          ``</arg_value>``
kimi_k3_xml         ``<|open|>argument key="``       ``" type="T"<|sep|>``   ``<|close|>argument<|sep|>``
=================== ================================ ======================= ==================

(glm_xml's VALUE_PREFIX is ``<arg_value>``, the others have none.) ``ws`` is JSON whitespace
``[ \\n\\r\\t]*`` (at most ``max_whitespace_cnt`` characters). The arguments are ``ws`` before,
between and after the parameters (``ws`` alone when none is required).

* Members: the declared properties in ``properties`` order (optional ones may be left out,
  required ones must appear), then additional properties (``additionalProperties``; by strict
  mode, only when ``properties`` is absent or ``additionalProperties`` says so), whose names are
  ``[a-zA-Z_][a-zA-Z0-9_]*`` (declared names not excluded, as XGrammar), or the parameters of
  ``patternProperties``: a name the pattern matches in full, then a value of its schema (as
  XGrammar writes them). A declared name is
  written as it is (kimi_k3_xml escapes ``&`` and ``"`` as ``&amp;`` / ``&quot;``).
  ``any_order=True``: parameters in any order, each a declared or additional one, at least as
  many as there are required properties; presence and uniqueness are not checked (XGrammar's
  meaning of ``any_order``; this accepts arguments that miss a required property, and is
  announced with a ``JsonSchemaRelaxationWarning`` when the object requires something).
  The root schema ``true`` / ``{}`` / ``{"type": "object"}`` is any parameter list; an
  ``anyOf``/``oneOf`` of object schemas at the root is the choice of their parameter lists.
* Values: a string without ``pattern``/``format``/length is raw text up to the first
  PARAMETER_SUFFIX (``TagDispatch`` free text that excludes it and the ``excludes``); a string
  with ``pattern`` (matched in full, as XGrammar), a known ``format`` (gxg's regular language
  of it, ``gxg.grammar.json_formats``), or ``minLength``/``maxLength`` (any code points, the
  suffix not excluded, as XGrammar) is that raw text between ``ws``; ``enum``/``const`` values
  are raw text: strings as they are, other values as XGrammar's JSON serializer writes them
  (compact; numbers as picojson prints doubles: ``1.0`` is ``1``, ``0.1`` is
  ``0.10000000000000001``) between ``ws``; integers, numbers, booleans, null, arrays and objects
  are JSON (gxg's JSON Schema converter with the structural-tag settings, so its documented
  narrowings hold inside them) between ``ws``; a schema with no assertion is raw text or a
  JSON array or object; ``anyOf``/``oneOf``/type lists are the choice of their branches.
* deepseek styles: ``S`` is ``true`` before a string value (raw text, no ``ws`` around it) and
  ``false`` before any other value (between ``ws``); a value that may be either has both forms.
* kimi_k3_xml: ``T`` is the value's type as the schema pins it (``string``; ``number`` for
  integers and numbers; ``boolean``, ``null``, ``array``, ``object``; an enum/const whose values
  share one type: that type); otherwise (``$ref``, combinators, type lists, mixed enums, no
  schema) any of ``string number integer boolean object array null``.
* ``excludes``: substrings that no free string may contain as written: raw string values,
  additional parameter names, JSON strings nested in values and their keys; declared names and
  enum/const alternatives that contain one are left out. Refused: an exclude that starts or ends
  with whitespace (XGrammar refuses it too).

* minimax_m3_xml (``_MiniMaxM3Writer``, XGrammar 0.2.8's ``MiniMaxM3XMLToolCallingConverter``,
  whose 0.2.8 form only has fixed element names): every value is an element body, the root
  included (any schema, not only an object). With ``M`` the marker ``]<]minimax[>[``: an object
  is its declared properties in order as ``M<name>value M</name>``, an array its items as
  ``M<item>value M</item>`` (``prefixItems``, ``items``, ``minItems``/``maxItems`` as
  XGrammar: a prefix position may be left off once ``minItems`` is met; ``items`` absent: no
  more items), each element after ``ws`` and ``ws`` after the last, nothing at all for none;
  ``minProperties``/``maxProperties`` bound the members; a string is raw text without ``M``;
  integers, numbers, booleans and null are JSON (no ``ws`` around); an enum/const value is
  XGrammar's literal: strings raw, objects and arrays as elements without ``ws``, others as
  picojson writes them; anyOf/oneOf/type lists are the choice of their branches (oneOf as
  anyOf when not provably disjoint, announced as in the JSON converter); ``$ref`` is a rule
  (recursion allowed). ``any_order``: as above, but nothing for no member. Refused, as
  XGrammar refuses them: ``excludes``, an unconstrained schema (``true``, ``{}``, ``items: {}``),
  ``additionalProperties`` other than false, ``patternProperties``, ``propertyNames``, a
  ``required`` name missing from ``properties``, an element name that is empty, blank, starts
  with ``/`` or holds ``>``, a string literal holding ``M``, ``pattern``/``format``/lengths on
  strings, ``minItems`` beyond what the array allows; refused because XGrammar ignores them
  (gxg would honour them): ``not``, ``if``, dependencies, ``contains``, ``uniqueItems``,
  ``unevaluated*``, ``additionalItems``, assertions beside ``anyOf``/``oneOf`` or ``$ref``,
  ``allOf`` of more than one schema, enum/const values that sibling keywords rule out; and
  ``minProperties``/``maxProperties`` with ``any_order``.

* cohere_xml (``_CohereWriter``, XGrammar 0.2.8's ``CohereXMLToolCallingConverter``): every
  value is an element ``<cofl:value[ name="N"] type="T">body</cofl:value>``; the root is a body
  alone (any schema, not only an object). ``T`` follows the branch of the schema the body comes
  from: ``raw`` for a string or a string enum/const value, ``dict`` for an object, ``list`` for
  an array, ``json`` for the rest (integers, numbers, booleans, null, the other enum/const
  values: arrays and objects among them as JSON text). anyOf/oneOf (oneOf as anyOf when not
  provably disjoint, announced as in the JSON converter), a one-schema allOf and type lists are
  the choice of their branches' elements; an unconstrained schema (``true``, ``{}``,
  annotations only) is any of: raw text, a JSON number/boolean/null, any dictionary, any list
  (at the root: any dictionary). Bodies: a string without ``pattern``/``format``/lengths is raw
  text up to ``</cofl:value>``; every other body has ``ws`` around it inside its element: a
  string with one of ``pattern`` (in full), a known ``format`` (gxg's language of it, as above)
  or lengths is that language; integers, numbers, booleans and null are JSON (gxg's JSON
  converter, whose differences from XGrammar hold: integers take ``-0``, number bounds are
  exact where XGrammar's range expressions cap the fraction digits); an enum/const value is its
  literal (strings raw, other values as picojson writes them). An object is its members'
  elements, named (``& < > "`` written as entities), each after ``ws`` and ``ws`` after the last
  (``ws`` alone for none): the declared properties in order (required ones present), then
  additional ones (``additionalProperties``, else ``unevaluatedProperties``; none without either:
  strict mode) whose names are any name but the declared ones (``[^\\0"&<>]`` and the four
  entities), between ``minProperties`` and ``maxProperties`` members in all; the schema
  ``{"type": "object"}`` with only annotations beside it (XGrammar's identity of a schema, its
  cache key) is any dictionary instead (but a closed one as a ``$ref`` target, which then
  closes the later ones too: refused). An array is its items' elements, unnamed, with nothing
  between them: every ``prefixItems`` item, then ``items`` (else ``unevaluatedItems``) ones as
  ``minItems``/``maxItems`` allow; no more items without either (strict mode). ``$ref`` is a
  rule (recursion allowed). Without ``type``, a schema is an object when it has ``properties``,
  ``additionalProperties`` or ``unevaluatedProperties``, an array when it has ``items``,
  ``prefixItems`` or ``unevaluatedItems``, unconstrained when it asserts nothing (XGrammar's
  reading). ``any_order``: each object's members in any order as above, between
  max(``minProperties``, the number of required ones) and ``maxProperties`` of them. Refused, as
  XGrammar refuses them: ``excludes``, a ``required`` name missing from ``properties`` (XGrammar
  mishandles it), a property name holding NUL, ``items`` as a list, a boolean in
  ``prefixItems``, ``maxItems`` below ``minItems`` or the number of ``prefixItems``, ``minItems``
  beyond what the array allows; refused because XGrammar ignores them or writes another
  language (gxg would honour them): ``not``, ``if``, dependencies, ``contains``,
  ``additionalItems``, ``patternProperties``, ``propertyNames``, ``multipleOf`` on a number, an
  unknown ``format`` (XGrammar writes a JSON string), assertions beside ``$ref``, ``anyOf``,
  ``oneOf`` or ``allOf``, ``allOf`` of more than one schema, enum/const values that sibling
  keywords rule out, assertions without ``type``, two of ``pattern``/``format``/lengths on a
  string, a ``$ref`` to ``{"type": "object"}`` (see above).

Refused (``GrammarError``) in the styles other than minimax_m3_xml and cohere_xml (whose
refusals are above): a root that is not an object schema, and at the root
``patternProperties`` beside an ``additionalProperties`` schema, ``propertyNames``,
``minProperties``, ``maxProperties``,
``unevaluatedProperties``, a ``required`` name missing from ``properties``, an enum/const; for a
string parameter: two of ``pattern``/``format``/lengths together (XGrammar honours only one),
an unknown ``format``, lengths with ``excludes`` (XGrammar drops them), complements of strings;
a parameter schema with assertions but no ``type``; an enum/const number that picojson would
print differently from its value's type (integers beyond 64 bits are printed as doubles, as
XGrammar does).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, List, Optional, Sequence as Seq, Tuple

from gxg import compile_budget
from gxg.grammar import code_point_dfa as dfa_ops
from gxg.grammar.combine import rename_refs
from gxg.grammar.ir import (EMPTY, CharClass, Choice, Expr, Grammar, GrammarError, Literal,
                            Repeat, RuleRef, Sequence)
from gxg.grammar.json_schema_analysis import (
    MERGE_BUDGET, JsonSchemaRelaxationWarning, SchemaAnalysis, asserts, check_keyword_types,
    count, declared_types, deep_recursion, escape_token, load_schema, resolve_pointer,
    string_regexes,
)
from gxg.grammar.json_schema_emission import (
    MAX_EXACT_BOUND, GrammarEmitter, _alt, _canonical_spelling, make_format,
)
from gxg.grammar.macros import MacroCall, MacroError, MacroKeyword, MacroValue, expand_macro

__all__ = ["XML_STYLES", "xml_schema_to_grammar"]

XML_STYLES = ("qwen_xml", "minimax_xml", "minimax_m3_xml", "deepseek_xml", "glm_xml",
              "cohere_xml", "kimi_k3_xml", "deepseek_v4_1_xml")
# key prefix, key suffix, value prefix, parameter suffix (XGrammar's XMLWrapper)
_WRAPPERS = {
    "qwen_xml": ("<parameter=", ">", "", "</parameter>"),
    "minimax_xml": ('<parameter name="', '">', "", "</parameter>"),
    "deepseek_xml": ('<\uff5cDSML\uff5cparameter name="', "", "", "</\uff5cDSML\uff5cparameter>"),
    "deepseek_v4_1_xml": ('<\uff5cDSML\uff5c parameter name="', "", "",
                          "</\uff5cDSML\uff5c parameter>"),
    "glm_xml": ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    "kimi_k3_xml": ('<|open|>argument key="', "", "", "<|close|>argument<|sep|>"),
}
_KIMI_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
_PADDING = " \t\n\r"
_OBJECT_KEYWORDS_REFUSED = ("propertyNames", "minProperties", "maxProperties",
                            "unevaluatedProperties", "unevaluatedItems")


def _lit(text: str) -> Literal:
    return Literal(text.encode("utf-8"))


def picojson_text(value: Any, ptr: str) -> str:
    """``value`` as XGrammar's JSON serializer (picojson) writes it: compact, strings in the
    canonical spelling, integers within 64 bits as integers, other numbers as doubles
    (``%.f`` when integral and below 2**53, else ``%.17g``)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int) and -2 ** 63 <= value < 2 ** 63:
        return str(value)
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            raise GrammarError(f"enum/const value {value!r} at {ptr} is no JSON number")
        if number == 0:
            return "0"  # XGrammar prints -0.0 as 0
        if abs(number) < 2 ** 53 and number.is_integer():
            return "%.f" % number
        return "%.17g" % number
    if isinstance(value, str):
        spelling = _canonical_spelling(value)
        if spelling is None:
            raise GrammarError(f"enum/const string at {ptr} holds a lone surrogate")
        return spelling
    if isinstance(value, list):
        return "[" + ",".join(picojson_text(v, ptr) for v in value) + "]"
    return "{" + ",".join(picojson_text(k, ptr) + ":" + picojson_text(v, ptr)
                          for k, v in value.items()) + "}"


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Whitespace:
    """The member format of the parameter list (for ``GrammarEmitter.object_body``): whitespace
    before, between and after the parameters, whitespace alone for none."""

    def __init__(self, ws: Expr):
        self.ws = ws

    def open(self, bracket: str, depth: int) -> Expr:
        return self.ws

    close = open

    def item(self, depth: int) -> Expr:
        return self.ws

    def empty(self, pair: str) -> Expr:
        return self.ws


class _Branch:
    """One way a parameter value may be written: ``string`` (a string value: raw text),
    ``plain`` (exactly the unconstrained raw text), its expression."""

    def __init__(self, expr: Expr, string: bool, plain: bool = False):
        self.expr, self.string, self.plain = expr, string, plain


def xml_schema_to_grammar(schema: Any, style: str, *, any_order: bool = False,
                          max_whitespace_cnt: Optional[int] = None,
                          excludes: Seq[str] = ()) -> Grammar:
    """The Grammar of the tool-call arguments ``schema`` describes, written in ``style`` (see
    the module docstring)."""
    if style not in _WRAPPERS and style not in ("minimax_m3_xml", "cohere_xml"):
        raise GrammarError(f"unknown XML style {style!r}")
    for exclude in excludes:
        if not exclude:
            raise GrammarError("an exclude must be a non-empty string")
        if exclude[0] in _PADDING or exclude[-1] in _PADDING:
            raise GrammarError(f"exclude {exclude!r}: XML styles refuse excludes that start or end "
                               f"with whitespace (as XGrammar)")
    root = load_schema(schema)
    if root is False:
        raise GrammarError("schema 'false' at # matches nothing")
    check_keyword_types(root)
    fmt = make_format(True, None, None, max_whitespace_cnt)
    with deep_recursion():
        schemas = SchemaAnalysis(root, True, True)
        json = GrammarEmitter(schemas, fmt, any_order, False, excludes)
        if style == "minimax_m3_xml":
            if excludes:
                raise GrammarError("excludes are not supported with style 'minimax_m3_xml' "
                                   "(XGrammar refuses them too)")
            m3 = _MiniMaxM3Writer(json, any_order)
            body = m3.value(root, "#")
            if body is None:
                raise GrammarError("schema at # in style 'minimax_m3_xml' admits no value")
            return json.grammar(body)
        if style == "cohere_xml":
            if excludes:
                raise GrammarError("excludes are not supported with style 'cohere_xml' (XGrammar "
                                   "refuses them too)")
            return json.grammar(_CohereWriter(json, any_order).body(root, "#"))
        writer = _XmlWriter(json, style, any_order, tuple(excludes))
        return json.grammar(writer.arguments(root, "#"))


class _XmlWriter:
    def __init__(self, json: GrammarEmitter, style: str, any_order: bool,
                 excludes: Tuple[str, ...]):
        self.json = json
        self.schemas: SchemaAnalysis = json.schemas
        self.style = style
        self.any_order = any_order
        self.excludes = excludes
        # (the recursive styles set their own suffix)
        self.key_prefix, self.key_suffix, self.value_prefix, self.suffix = _WRAPPERS.get(
            style, ("", "", "", ""))
        self.deepseek = style in ("deepseek_xml", "deepseek_v4_1_xml")
        self.kimi = style == "kimi_k3_xml"
        self.ws: Expr = json.fmt.ws
        self.names: dict = {}

    # -- shared rules
    def xml_string(self) -> Expr:
        """Raw text without the parameter suffix and the excludes (XGrammar's ``xml_string``:
        ``TagDispatch(loop_after_dispatch=false, excludes=(...))``)."""
        if "xml_string" in self.names:
            return self.names["xml_string"]
        excludes = list(dict.fromkeys([*self.excludes, self.suffix]))
        call = MacroCall("TagDispatch", (), (
            MacroKeyword("loop_after_dispatch", MacroValue("boolean", False, 0), 0),
            MacroKeyword("excludes", MacroValue(
                "tuple", tuple(MacroValue("string", text, 0) for text in excludes), 0), 0),
        ), 0, 0)
        try:
            expansion = expand_macro(call, self.json.new_rule)
        except MacroError as error:  # pragma: no cover - the call is well formed
            raise GrammarError(f"cannot build the raw string: {error.message}") from None
        for rule in expansion.rules:
            self.json.rules[rule.name] = rule.body
        name = self.json.new_rule("xml_string")
        self.json.rules[name] = expansion.expr
        self.names["xml_string"] = RuleRef(name)
        return self.names["xml_string"]

    def variable_name(self) -> Expr:
        """The name of an additional parameter: ``[a-zA-Z_][a-zA-Z0-9_]*`` without excludes."""
        if "variable_name" in self.names:
            return self.names["variable_name"]
        first = CharClass(((0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)))
        rest = CharClass(((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)))
        expr: Optional[Expr] = Sequence((first, Repeat(rest, 0, None)))
        if self.excludes:
            anything = Repeat(CharClass(((0, 0x10FFFF),)), 0, None)
            dfa = dfa_ops.dfa_from_expr(expr)
            for exclude in self.excludes:
                dfa = dfa_ops.difference(dfa, dfa_ops.dfa_from_expr(
                    Sequence((anything, _lit(exclude), anything))))
    
            def define(ref, body):
                self.json.rules[ref.name] = body
            expr = dfa_ops.dfa_to_expr(dfa, lambda ranges: CharClass(tuple(ranges)),
                                       lambda hint: RuleRef(self.json.new_rule(hint)),
                                       "xml_variable_name", define_rule=define)
        self.names["variable_name"] = None if expr is None else \
            self.json.share(expr, "xml_variable_name")
        return self.names["variable_name"]

    def excluded(self, text: str) -> bool:
        return any(exclude in text for exclude in self.excludes)

    def excluded_value(self, value: Any) -> bool:
        """Whether an enum/const alternative is left out: a string that holds an exclude (as
        raw text), or an array/object with a string or key whose JSON spelling holds one
        (numbers, booleans and null are never filtered, as XGrammar)."""
        if isinstance(value, str):
            return self.excluded(value)
        if isinstance(value, list):
            return any(self.excluded_nested(v) for v in value)
        if isinstance(value, dict):
            return any(self.excluded_nested(k) or self.excluded_nested(v) for k, v in value.items())
        return False

    def excluded_nested(self, value: Any) -> bool:
        if isinstance(value, str):
            spelling = _canonical_spelling(value)
            return spelling is not None and self.excluded(spelling[1:-1])
        return self.excluded_value(value)

    # -- the arguments (XGrammar's level 0)
    def arguments(self, schema: Any, ptr: str) -> Optional[Expr]:
        flat = self.schemas.normal(schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return None
        for keyword in ("anyOf", "oneOf"):
            if keyword in flat:
                return _alt(*[self.arguments(branch, f"{ptr}/{keyword}/{i}")
                              for i, branch in enumerate(self.branches(flat, keyword, ptr))])
        if "enum" in flat or "const" in flat:
            raise self.refuse("enum" if "enum" in flat else "const", ptr,
                              "the arguments must be an object schema")
        if "type" in flat:
            if declared_types(flat, ptr) != ["object"]:
                raise self.refuse("type", ptr, "the arguments must be an object schema "
                                  "(type 'object')")
        elif asserts(flat):
            others = [k for k in flat
                      if k not in ("properties", "required", "additionalProperties")]
            if others:
                raise self.refuse(others[0], ptr, "the arguments must be an object schema "
                                  "(type 'object')")
        return self.parameter_list(flat, ptr)

    def branches(self, flat: dict, keyword: str, ptr: str) -> list:
        """The branches of an anyOf/oneOf (a oneOf made disjoint, or relaxed as gxg's JSON
        converter does), each merged with the sibling assertions."""
        subs = flat[keyword]
        if not subs:
            raise GrammarError(f"'{keyword}' at {ptr} must be a non-empty list")
        siblings = {k: v for k, v in flat.items() if k != keyword}
        if keyword == "oneOf":
            disjoint = self.schemas.disjoint_one_of(subs, ptr)
            if disjoint is None:
                self.schemas.relax_one_of(ptr)
            subs = subs if disjoint is None else disjoint
        if asserts(siblings):
            return [self.schemas.merge(siblings, sub, f"{ptr}/{keyword}/{i}")
                    for i, sub in enumerate(subs)]
        return list(subs)

    def refuse(self, keyword: str, ptr: str, why: str) -> GrammarError:
        return GrammarError(f"unsupported keyword '{keyword}' at {ptr} in style "
                            f"{self.style!r}: {why}")

    def parameter_list(self, flat: dict, ptr: str) -> Optional[Expr]:
        for keyword in _OBJECT_KEYWORDS_REFUSED:
            if keyword in flat:
                raise self.refuse(keyword, ptr, "not supported for the parameter list")
        properties = flat.get("properties", {})
        required = list(dict.fromkeys(flat.get("required", [])))
        missing = [name for name in required if name not in properties]
        if missing:
            raise self.refuse("required", ptr, f"the required name {missing[0]!r} is not in "
                              f"'properties' (XGrammar mishandles it)")
        patterns = flat.get("patternProperties", {})
        if not isinstance(patterns, dict):
            raise self.refuse("patternProperties", ptr, "must be an object")
        if patterns and flat.get("additionalProperties", False) is not False:
            raise self.refuse("patternProperties", ptr, "together with additionalProperties")
        extra_schema = flat.get("additionalProperties", not properties and not patterns)
        members: List[Tuple[Expr, bool]] = []
        for name, sub in properties.items():
            where = f"{ptr}/properties/{escape_token(name)}"
            member = self.parameter(name, sub, where)
            if member is None:
                if name in required:
                    return None
                continue
            members.append((member, name in required))
        extras = []
        if extra_schema is not False:
            extras.append(self.parameter(None, extra_schema, f"{ptr}/additionalProperties"))
        for regex, sub in patterns.items():  # XGrammar: a name of the pattern, its value
            where = f"{ptr}/patternProperties/{escape_token(regex)}"
            extras.append(self.parameter(None, sub, where, key=self.pattern_name(regex, where)))
        extras = [extra for extra in extras if extra is not None]
        extra = self.json.share(_alt(*extras), "xml_additional_parameter") if extras else None
        if self.any_order:
            return self.any_order_list(members, extra, ptr)
        saved, self.json.fmt = self.json.fmt, _Whitespace(self.ws)
        try:
            return self.json.object_body(members, extra, 0, None, 0)
        finally:
            self.json.fmt = saved

    def any_order_list(self, members: List[Tuple[Expr, bool]], extra: Optional[Expr],
                       ptr: str, lo: int = 0, hi: Optional[int] = None) -> Optional[Expr]:
        """XGrammar's any_order: ``ws item (ws item)* ws`` with between max(``lo``, required
        members) and ``hi`` items, each item any declared or additional parameter."""
        needed = max(lo, sum(1 for _, required in members if required))
        if needed:
            warnings.warn(f"any_order at {ptr} in style {self.style!r}: parameters in any order "
                          f"without presence or uniqueness checks (XGrammar's meaning), so a "
                          f"required parameter may be missing", JsonSchemaRelaxationWarning,
                          stacklevel=5)
        items = [expr for expr, _ in members] + ([extra] if extra is not None else [])
        if not items or hi == 0 or (hi is not None and hi < needed):
            return None if needed else self.ws
        item = self.json.share(_alt(*items), "xml_item")
        nonempty = Sequence((self.ws, item, Repeat(Sequence((self.ws, item)), max(0, needed - 1),
                                                   None if hi is None else hi - 1), self.ws))
        return nonempty if needed else Choice((nonempty, self.ws))

    def pattern_name(self, regex: Any, ptr: str) -> Expr:
        """The names a ``patternProperties`` pattern allows: the regex matched in full (as
        XGrammar writes it: its anchors are the whole name's)."""
        if not isinstance(regex, str):
            raise self.refuse("patternProperties", ptr, "a pattern must be a string")
        grammar = self.schemas.regex_grammar(regex, False, "patternProperties", ptr)
        mapping = {rule.name: self.json.new_rule("xml_pattern_name") for rule in grammar.rules}
        for rule in grammar.rules:
            self.json.rules[mapping[rule.name]] = rename_refs(rule.body, mapping)
        return RuleRef(mapping[grammar.root_rule_name])

    # -- one parameter (XGrammar's level 1)
    def parameter(self, name: Optional[str], schema: Any, ptr: str,
                  key: Optional[Expr] = None) -> Optional[Expr]:
        """``KEY_PREFIX name KEY_SUFFIX value SUFFIX``; ``name`` None: an additional one,
        whose name is ``key`` (the names of a ``patternProperties`` pattern) or any variable
        name."""
        if name is None and key is not None:
            key = Sequence((_lit(self.key_prefix), key))
        elif name is None:
            variable = self.variable_name()
            if variable is None:
                return None
            key = Sequence((_lit(self.key_prefix), variable))
        else:
            written = name
            if self.kimi:
                written = name.replace("&", "&amp;").replace('"', "&quot;")
            if self.excluded(written):
                return None
            key = _lit(self.key_prefix + written)
        branches = self.value(schema, ptr)
        if not branches:
            return None
        suffix = _lit(self.suffix)
        if self.deepseek:
            strings = [b.expr for b in branches if b.string]
            others = [b.expr for b in branches if not b.string]
            forms = []
            if strings:
                forms.append(Sequence((key, _lit('" string="true">'), _alt(*strings), suffix)))
            if others:
                forms.append(Sequence((key, _lit('" string="false">'), self.ws, _alt(*others),
                                       self.ws, suffix)))
            return _alt(*forms)
        head: List[Expr] = [key]
        if self.kimi:
            pinned = self.kimi_type(schema)
            head += [_lit('" type="'),
                     _lit(pinned) if pinned else Choice(tuple(_lit(t) for t in _KIMI_TYPES)),
                     _lit('"<|sep|>')]
        else:
            head.append(_lit(self.key_suffix))
        if self.value_prefix:
            head += [self.ws, _lit(self.value_prefix)]
        if len(branches) == 1 and branches[0].plain:
            return Sequence((*head, branches[0].expr, suffix))
        return Sequence((*head, self.ws, _alt(*[b.expr for b in branches]), self.ws, suffix))

    def kimi_type(self, schema: Any) -> Optional[str]:
        """The type attribute XGrammar pins for a declared schema (KimiK3TypeAttr), or None."""
        if not isinstance(schema, dict):
            return None
        if any(k in schema for k in ("$ref", "anyOf", "oneOf", "allOf", "not", "if")):
            return None
        if "const" in schema:
            return _json_type_name(schema["const"])
        if "enum" in schema:
            names = {_json_type_name(v) for v in schema["enum"]}
            return names.pop() if len(names) == 1 else None
        declared = schema.get("type")
        if isinstance(declared, str):
            return "number" if declared == "integer" else declared
        return None

    def value(self, schema: Any, ptr: str) -> List[_Branch]:
        flat = self.schemas.normal(schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return []
        for keyword in ("anyOf", "oneOf"):
            if keyword in flat:
                out: List[_Branch] = []
                for i, branch in enumerate(self.branches(flat, keyword, ptr)):
                    out += self.value(branch, f"{ptr}/{keyword}/{i}")
                return out
        if "enum" in flat or "const" in flat:
            out = []
            for v in self.schemas.enum_values(flat, ptr):
                text = v if isinstance(v, str) else picojson_text(v, ptr)
                if not self.excluded_value(v):
                    out.append(_Branch(_lit(text), isinstance(v, str)))
            return out
        if not asserts(flat):
            if self.deepseek:
                rest = self.json.schema({"type": ["number", "boolean", "null", "array", "object"]},
                                        ptr, 0)
                return [_Branch(self.xml_string(), True, True), _Branch(rest, False)]
            out = [_Branch(self.xml_string(), True, True)]
            for kind in ("array", "object"):
                expr = self.json.schema({"type": kind}, ptr, 0)
                if expr is not None:
                    out.append(_Branch(expr, False))
            return out
        if "type" not in flat:
            first = next(k for k in flat)
            raise self.refuse(first, ptr, "a parameter schema with assertions but no 'type'")
        out = []
        for type_name in declared_types(flat, ptr):
            if type_name == "string":
                branch = self.string_value(flat, ptr)
                if branch is not None:
                    out.append(branch)
                continue
            expr = self.json.typed(flat, type_name, ptr, 0)
            if expr is not None:
                out.append(_Branch(expr, False))
        return out

    def string_value(self, flat: dict, ptr: str) -> Optional[_Branch]:
        for keyword in ("x-gxg-not-strings", "x-gxg-regexes"):
            if keyword in flat:
                raise self.refuse("not", ptr, "complements of strings are not supported")
        lo = count(flat, "minLength", ptr, 0)
        hi = count(flat, "maxLength", ptr, None)
        regexes = string_regexes(flat, ptr)
        if "format" in flat and not any(r[3] == "format" for r in regexes):
            raise self.refuse("format", ptr, f"unknown format {flat['format']!r} (XGrammar "
                              f"would accept any text there)")
        constraints = [r[3] for r in regexes] + (["minLength/maxLength"] if lo or hi is not None
                                                 else [])
        if not constraints:
            return _Branch(self.xml_string(), True, True)
        if len(constraints) > 1:
            raise self.refuse(constraints[1], ptr, f"together with {constraints[0]!r} "
                              f"(XGrammar honours only one of them)")
        if regexes:
            regex, _, _, keyword = regexes[0]
            grammar = self.schemas.regex_grammar(regex, False, keyword, ptr)
            mapping = {rule.name: self.json.new_rule("xml_" + keyword) for rule in grammar.rules}
            for rule in grammar.rules:
                self.json.rules[mapping[rule.name]] = rename_refs(rule.body, mapping)
            return _Branch(RuleRef(mapping[grammar.root_rule_name]), True)
        if self.excludes:
            raise self.refuse("minLength" if lo else "maxLength", ptr,
                              "string lengths together with excludes (XGrammar drops the lengths)")
        if lo > MAX_EXACT_BOUND or (hi is not None and hi > MAX_EXACT_BOUND):
            raise self.refuse("minLength" if lo > MAX_EXACT_BOUND else "maxLength", ptr,
                              f"a length bound above {MAX_EXACT_BOUND}")
        if hi is not None and hi < lo:
            return None
        return _Branch(self.json.share(Repeat(CharClass(((0, 0x10FFFF),)), lo, hi),
                                       "xml_string_characters"), True)


# ----------------------------------------------------------------------------- minimax_m3_xml

_M3 = "]<]minimax[>["
# keywords XGrammar 0.2.8 ignores in minimax_m3_xml (gxg would honour them: a different language)
_M3_IGNORED = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas",
               "dependencies", "contains", "minContains", "maxContains", "uniqueItems",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_M3_OBJECT_REFUSED = ("patternProperties", "propertyNames")


class _MiniMaxM3Writer(_XmlWriter):
    """minimax_m3_xml (XGrammar 0.2.8's ``MiniMaxM3XMLToolCallingConverter``): every value is
    an element body; objects are their members as elements ``M<name>value M</name>`` (``M`` the
    namespace marker ``]<]minimax[>[``), arrays their items as ``M<item>...M</item>``, members
    and items each after ``ws`` with ``ws`` after the last (nothing for none); strings are raw
    text without the marker, other scalars as JSON; enum/const values as XGrammar's literals."""

    def __init__(self, json: GrammarEmitter, any_order: bool):
        super().__init__(json, "minimax_m3_xml", any_order, ())
        self.suffix = _M3
        self.ref_rules: dict = {}

    def element(self, name: str, body: Expr) -> Expr:
        return Sequence((_lit(f"{_M3}<{name}>"), body, _lit(f"{_M3}</{name}>")))

    def check_name(self, name: str, keyword: str, ptr: str) -> None:
        """XGrammar's ValidateElementName (it refuses such names too)."""
        if (not name or name[0] == "/" or ">" in name or _canonical_spelling(name) is None
                or all(c in " \t\n\r\f\v" for c in name)):
            raise self.refuse(keyword, ptr, f"{name!r} is no element name (empty, blank, starting "
                              f"with '/', holding '>' or a lone surrogate)")

    def value(self, schema: Any, ptr: str) -> Optional[Expr]:  # type: ignore[override]
        if schema is True or (isinstance(schema, dict) and not asserts(
                self.schemas.keywords(schema, ptr))):
            raise self.refuse("type", ptr, "an unconstrained schema (XGrammar refuses it)")
        if schema is False:
            return None
        for keyword in _M3_IGNORED:
            if keyword in schema and not (keyword == "uniqueItems" and schema[keyword] is False):
                raise self.refuse(keyword, ptr, "XGrammar ignores it in this style")
        if "$ref" in schema:
            siblings = self.schemas.keywords(schema, ptr)
            del siblings["$ref"]
            if asserts(siblings):
                raise self.refuse("$ref", ptr, "a $ref with sibling assertions")
            return self.ref(schema["$ref"], ptr)
        if "allOf" in schema:
            subs = schema["allOf"]
            siblings = self.schemas.keywords(schema, ptr)
            del siblings["allOf"]
            if not isinstance(subs, list) or len(subs) != 1 or asserts(siblings):
                raise self.refuse("allOf", ptr, "more than one schema (XGrammar falls back to "
                                  "an unconstrained value, which it refuses)")
            return self.value(subs[0], f"{ptr}/allOf/0")
        flat = self.schemas.normal(schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return None
        for keyword in ("anyOf", "oneOf"):
            if keyword in flat:
                subs = flat[keyword]
                if not isinstance(subs, list) or not subs:
                    raise GrammarError(f"'{keyword}' at {ptr} must be a non-empty list")
                siblings = {k: v for k, v in flat.items() if k != keyword}
                if asserts(siblings):
                    raise self.refuse(keyword, ptr, "sibling assertions (XGrammar ignores them)")
                if keyword == "oneOf" and self.schemas.disjoint_one_of(subs, ptr) is None:
                    self.schemas.relax_one_of(ptr)
                return _alt(*[self.value(sub, f"{ptr}/{keyword}/{i}")
                              for i, sub in enumerate(subs)])
        if "enum" in flat or "const" in flat:
            keyword = "enum" if "enum" in flat else "const"
            kept = self.schemas.enum_values(flat, ptr)
            alone = self.schemas.enum_values({keyword: flat[keyword]}, ptr)
            if len(kept) != len(alone):
                raise self.refuse(keyword, ptr, "values its sibling keywords rule out (XGrammar "
                                  "ignores the siblings)")
            return _alt(*[self.literal(v, f"{ptr}/{keyword}") for v in kept])
        if "type" not in flat:
            raise self.refuse(next(iter(flat)), ptr, "a schema with assertions but no 'type'")
        out = []
        for type_name in declared_types(flat, ptr):
            if type_name == "string":
                out.append(self.string(flat, ptr))
            elif type_name == "array":
                out.append(self.array(flat, ptr))
            elif type_name == "object":
                out.append(self.object(flat, ptr))
            else:
                out.append(self.json.typed(flat, type_name, ptr, 0))
        return _alt(*out)

    def ref(self, ref: Any, ptr: str) -> Optional[Expr]:
        if not isinstance(ref, str):
            raise GrammarError(f"$ref at {ptr} must be a string")
        target, target_ptr = resolve_pointer(self.schemas.root, ref, ptr)
        if target_ptr in self.ref_rules:
            name = self.ref_rules[target_ptr]
            if name is None:
                return None
            return RuleRef(name)
        hint = "ref_" + (target_ptr[2:].rsplit("/", 1)[-1] if len(target_ptr) > 2 else "root")
        name = self.json.new_rule(hint)
        self.ref_rules[target_ptr] = name
        body = self.value(target, target_ptr)
        if body is None:
            raise self.refuse("$ref", ptr, f"the schema at {target_ptr} admits no value")
        self.json.rules[name] = body
        return RuleRef(name)

    def literal(self, value: Any, ptr: str) -> Expr:
        """XGrammar's GenerateLiteral: strings raw, objects/arrays as elements (no whitespace),
        other values as picojson writes them."""
        if isinstance(value, str):
            if _M3 in value:
                raise self.refuse("enum", ptr, "a string holding the namespace marker")
            if _canonical_spelling(value) is None:
                raise GrammarError(f"enum/const string at {ptr} holds a lone surrogate")
            return _lit(value)
        if isinstance(value, dict):
            parts = []
            for key, item in value.items():
                self.check_name(key, "enum", ptr)
                parts.append(self.element(key, self.literal(item, ptr)))
            return Sequence(tuple(parts)) if parts else EMPTY
        if isinstance(value, list):
            parts = [self.element("item", self.literal(item, ptr)) for item in value]
            return Sequence(tuple(parts)) if parts else EMPTY
        return _lit(picojson_text(value, ptr))

    def string(self, flat: dict, ptr: str) -> Expr:
        for keyword in ("pattern", "format", "minLength", "maxLength", "x-gxg-regexes",
                        "x-gxg-not-strings"):
            if keyword in flat and not (keyword == "minLength" and flat[keyword] == 0):
                raise self.refuse("not" if keyword.startswith("x-gxg") else keyword, ptr,
                                  "string constraints (XGrammar refuses them, or ignores an "
                                  "unknown format)")
        return self.xml_string()

    def array(self, flat: dict, ptr: str) -> Optional[Expr]:
        prefix_schemas = flat.get("prefixItems", [])
        if not isinstance(prefix_schemas, list):
            raise self.refuse("prefixItems", ptr, "must be a list")
        extra_schema = flat.get("items", False)
        if isinstance(extra_schema, list):
            raise self.refuse("items", ptr, "a list of items (use prefixItems)")
        lo = count(flat, "minItems", ptr, 0)
        hi = count(flat, "maxItems", ptr, None)
        if lo > MAX_EXACT_BOUND or (hi is not None and hi > MAX_EXACT_BOUND):
            raise self.refuse("minItems" if lo > MAX_EXACT_BOUND else "maxItems", ptr,
                              f"an item bound above {MAX_EXACT_BOUND}")
        prefix = []
        for i, sub in enumerate(prefix_schemas):
            body = self.value(sub, f"{ptr}/prefixItems/{i}")
            if body is None:
                raise self.refuse("prefixItems", f"{ptr}/prefixItems/{i}", "a schema no value "
                                  "satisfies")
            prefix.append(self.element("item", self.json.share(body, "m3_item")))
        extra = None
        if extra_schema is not False:
            body = self.value(extra_schema, f"{ptr}/items")
            if body is not None:
                extra = self.element("item", self.json.share(body, "m3_item"))
        if extra is None and lo > len(prefix):
            raise self.refuse("minItems", ptr, "more items than prefixItems allow (XGrammar "
                              "refuses it)")
        ws = self.ws
        if not prefix:
            if extra is None or hi == 0:
                return EMPTY
            nonempty = Sequence((ws, extra, Repeat(Sequence((ws, extra)), max(0, lo - 1),
                                                   None if hi is None else max(0, hi - 1)), ws))
            return Choice((nonempty, EMPTY)) if lo == 0 else nonempty
        n = len(prefix)
        tail: Expr = EMPTY
        if extra is not None:
            tail = Repeat(Sequence((ws, extra)), max(0, lo - n),
                          None if hi is None else max(0, hi - n))
        for index in range(n - 2, -1, -1):
            emitted = index + 1
            body = EMPTY
            if hi is None or emitted < hi:
                body = Sequence((ws, prefix[index + 1], tail))
                if emitted >= lo:
                    body = Choice((body, EMPTY))
            tail = self.json.share(body, "m3_prefix_tail")
        if hi == 0:
            return EMPTY
        nonempty = Sequence((ws, prefix[0], tail, ws))
        return Choice((nonempty, EMPTY)) if lo == 0 else nonempty

    def object(self, flat: dict, ptr: str) -> Optional[Expr]:
        for keyword in _M3_OBJECT_REFUSED:
            if keyword in flat:
                raise self.refuse(keyword, ptr, "dynamic element names are not supported in "
                                  "XGrammar 0.2.8's minimax_m3_xml")
        if flat.get("additionalProperties", False) is not False:
            raise self.refuse("additionalProperties", ptr, "dynamic element names are not "
                              "supported in XGrammar 0.2.8's minimax_m3_xml")
        properties = flat.get("properties", {})
        required = list(dict.fromkeys(flat.get("required", [])))
        missing = [name for name in required if name not in properties]
        if missing:
            raise self.refuse("required", ptr, f"the required name {missing[0]!r} is not in "
                              f"'properties' (XGrammar refuses it)")
        lo = count(flat, "minProperties", ptr, 0)
        hi = count(flat, "maxProperties", ptr, None)
        if self.any_order and (lo or hi is not None):
            raise self.refuse("minProperties" if lo else "maxProperties", ptr,
                              "together with any_order")
        members: List[Tuple[Expr, bool]] = []
        for name, sub in properties.items():
            where = f"{ptr}/properties/{escape_token(name)}"
            self.check_name(name, "properties", where)
            body = self.value(sub, where)
            if body is None:
                if name in required:
                    return None
                continue
            members.append((self.element(name, self.json.share(body, "m3_value")),
                            name in required))
        if self.any_order:
            nonempty = self.any_order_list(members, None, ptr)
            if nonempty is None or nonempty == self.ws:
                return nonempty if nonempty is None else EMPTY
            if isinstance(nonempty, Choice):  # no required member: nothing, or the list
                return Choice((nonempty.alternatives[0], EMPTY))
            return nonempty
        saved, self.json.fmt = self.json.fmt, _M3Whitespace(self.ws)
        try:
            return self.json.object_body(members, None, lo, hi, 0)
        finally:
            self.json.fmt = saved


class _M3Whitespace(_Whitespace):
    def empty(self, pair: str) -> Expr:
        return EMPTY


# ----------------------------------------------------------------------------- cohere_xml

_COHERE_OPEN, _COHERE_CLOSE = "<cofl:value", "</cofl:value>"
_COHERE_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
# what a property name may hold raw: anything but NUL and the characters written as entities
_COHERE_NAME_CHARS = ((0x01, 0x21), (0x23, 0x25), (0x27, 0x3B), (0x3D, 0x3D), (0x3F, 0x10FFFF))
# the type attribute of a value by its schema type (integer, number, boolean, null: "json")
_COHERE_KINDS = {"string": "raw", "object": "dict", "array": "list"}
# keys XGrammar leaves out of a schema's identity (its cache key, which makes the schema
# {"type": "object"} its unconstrained object)
_XGR_ANNOTATIONS = frozenset({"title", "default", "description", "examples", "deprecated",
                              "readOnly", "writeOnly", "$comment", "$schema"})
# keywords XGrammar 0.2.8 ignores in cohere_xml (gxg would honour them: a different language)
_COHERE_IGNORED = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                   "dependencies", "contains", "additionalItems")
# keywords that decide a schema's kind before its type, in XGrammar's order (its SchemaParser)
_COHERE_FIRST = ("$ref", "const", "enum", "anyOf", "oneOf", "allOf")


def cohere_name(name: str, where: str) -> str:
    """A property name as the ``name`` attribute writes it: ``& < > "`` as entities."""
    if "\0" in name or _canonical_spelling(name) is None:
        raise GrammarError(f"property name at {where} holds NUL or a lone surrogate (XGrammar "
                           f"refuses such names in style 'cohere_xml')")
    return "".join(_COHERE_ENTITIES.get(char, char) for char in name)


def cohere_literal(value: Any, ptr: str) -> Tuple[str, str]:
    """(type attribute, text) of an enum/const value (XGrammar's XMLValue): a string raw, any
    other value ``json`` as picojson writes it (objects and arrays too)."""
    if isinstance(value, str):
        if _canonical_spelling(value) is None:
            raise GrammarError(f"enum/const string at {ptr} holds a lone surrogate")
        return "raw", value
    return "json", picojson_text(value, ptr)


def is_plain_object_schema(schema: Any) -> bool:
    """Whether XGrammar takes ``schema`` for its unconstrained object (any parameters): exactly
    ``{"type": "object"}`` once annotations are left out. Any other object schema is closed
    unless ``additionalProperties`` / ``unevaluatedProperties`` open it (strict mode)."""
    return isinstance(schema, dict) and {
        k: v for k, v in schema.items() if k not in _XGR_ANNOTATIONS} == {"type": "object"}


class _CohereWriter(_XmlWriter):
    """cohere_xml (XGrammar 0.2.8's ``CohereXMLToolCallingConverter``): a value is an element
    ``<cofl:value[ name="N"] type="T">body</cofl:value>``; an object's body is its members'
    elements (named), an array's its items' (unnamed); the type attribute follows the branch
    of the schema the body comes from (see the module docstring)."""

    def __init__(self, json: GrammarEmitter, any_order: bool):
        super().__init__(json, "cohere_xml", any_order, ())
        self.suffix = _COHERE_CLOSE
        self.ref_rules: dict = {}

    # -- what XGrammar's parser makes of a schema
    def classify(self, schema: Any, ptr: str) -> Tuple[str, Any]:
        """``("none", _)``, ``("any", _)``, ``("ref", ref)``, ``("literals", values)``,
        ``("options", [(schema, ptr)...])`` (anyOf/oneOf, a one-schema allOf, a type list) or
        ``("typed", (type, schema, keywords))``; what XGrammar ignores is refused."""
        compile_budget.check("the JSON Schema converter", ptr)
        if schema is True:
            return "any", None
        if schema is False:
            return "none", None
        kw = self.schemas.keywords(schema, ptr)
        for keyword in _COHERE_IGNORED:
            if keyword in kw:
                raise self.refuse(keyword, ptr, "XGrammar ignores it in this style")
        first = next((k for k in _COHERE_FIRST if k in kw), None)
        if first in ("const", "enum"):
            kept = self.schemas.enum_values(kw, ptr)
            alone = self.schemas.enum_values({first: kw[first]}, ptr)
            if len(kept) != len(alone):
                raise self.refuse(first, ptr, "values its sibling keywords rule out (XGrammar "
                                  "ignores the siblings)")
            return "literals", alone
        if first is not None:
            if asserts({k: v for k, v in kw.items() if k != first}):
                raise self.refuse(first, ptr, "sibling assertions (XGrammar ignores them)")
            if first == "$ref":
                ref = kw["$ref"]
                if isinstance(ref, str) and is_plain_object_schema(
                        resolve_pointer(self.schemas.root, ref, ptr)[0]):
                    raise self.refuse("$ref", ptr, 'to the schema {"type": "object"} (XGrammar '
                                      "then reads that schema by the order it writes rules in)")
                return "ref", ref
            subs = kw[first]
            if not isinstance(subs, list) or not subs:
                raise GrammarError(f"'{first}' at {ptr} must be a non-empty list")
            if first == "allOf" and len(subs) != 1:
                raise self.refuse("allOf", ptr, "more than one schema (XGrammar falls back to an "
                                  "unconstrained value)")
            if first == "oneOf" and self.schemas.disjoint_one_of(subs, ptr) is None:
                self.schemas.relax_one_of(ptr)
            return "options", [(sub, f"{ptr}/{first}/{i}") for i, sub in enumerate(subs)]
        if "type" in kw:
            types = declared_types(kw, ptr)
            if isinstance(kw["type"], list):
                return "options", [({**schema, "type": name}, ptr) for name in types]
            return "typed", (types[0], schema, kw)
        for inferred, keywords in (("object", ("properties", "additionalProperties",
                                               "unevaluatedProperties")),
                                   ("array", ("items", "prefixItems", "unevaluatedItems"))):
            if any(k in kw for k in keywords):
                return "typed", (inferred, schema, kw)
        if asserts(kw):
            raise self.refuse(next(iter(kw)), ptr, "a schema with assertions but no 'type' "
                              "(XGrammar ignores them)")
        return "any", None

    # -- a value as an element's attributes and body: ' type="T">' body '</cofl:value>'
    def tail(self, schema: Any, ptr: str) -> Optional[Expr]:
        kind, data = self.classify(schema, ptr)
        if kind == "none":
            return None
        if kind == "any":
            return self.any_tail()
        if kind == "ref":
            return self.ref_rule("tail", data, ptr)
        if kind == "options":
            return _alt(*[self.tail(sub, where) for sub, where in data])
        if kind == "literals":
            groups: dict = {}
            for value in data:
                type_name, text = cohere_literal(value, ptr)
                groups.setdefault(type_name, []).append(_lit(text))
            return _alt(*[self.wrap(type_name, Choice(tuple(texts)), False)
                          for type_name, texts in groups.items()])
        type_name, raw, kw = data
        body, plain = self.typed_body(type_name, raw, kw, ptr)
        return None if body is None else self.wrap(_COHERE_KINDS.get(type_name, "json"), body,
                                                   plain)

    def wrap(self, type_name: str, body: Expr, plain: bool) -> Expr:
        """The attribute and body of one branch; a body other than the free raw string has
        whitespace around it."""
        return Sequence((_lit(f' type="{type_name}">'),
                         body if plain else Sequence((self.ws, body, self.ws)),
                         _lit(_COHERE_CLOSE)))

    # -- a body alone (the root: XGrammar's root rule, no element around it)
    def body(self, schema: Any, ptr: str) -> Optional[Expr]:
        kind, data = self.classify(schema, ptr)
        if kind == "none":
            return None
        if kind == "any":
            return self.any_object()  # an unconstrained root is the arguments dictionary
        if kind == "ref":
            return self.ref_rule("body", data, ptr)
        if kind == "options":
            return _alt(*[self.body(sub, where) for sub, where in data])
        if kind == "literals":
            return _alt(*[_lit(cohere_literal(value, ptr)[1]) for value in data])
        return self.typed_body(*data, ptr)[0]

    def ref_rule(self, what: str, ref: Any, ptr: str) -> Expr:
        """The ``tail`` or ``body`` of a $ref target as a rule (recursion allowed)."""
        if not isinstance(ref, str):
            raise GrammarError(f"$ref at {ptr} must be a string")
        target, target_ptr = resolve_pointer(self.schemas.root, ref, ptr)
        if (what, target_ptr) in self.ref_rules:
            return RuleRef(self.ref_rules[(what, target_ptr)])
        hint = "ref_" + (target_ptr[2:].rsplit("/", 1)[-1] if len(target_ptr) > 2 else "root")
        name = self.json.new_rule(f"cohere_{hint}_{what}")
        self.ref_rules[(what, target_ptr)] = name
        expr = getattr(self, what)(target, target_ptr)
        if expr is None:
            raise self.refuse("$ref", ptr, f"the schema at {target_ptr} admits no value")
        self.json.rules[name] = expr
        return RuleRef(name)

    def typed_body(self, type_name: str, raw: Any, kw: dict, ptr: str) -> Tuple[Optional[Expr],
                                                                                 bool]:
        """(body, plain) of a value of one type; plain: the free raw string."""
        if type_name == "string":
            if "format" in kw and not any(r[3] == "format" for r in string_regexes(kw, ptr)):
                raise self.refuse("format", ptr, f"unknown format {kw['format']!r} (XGrammar "
                                  f"writes a JSON string there)")
            branch = self.string_value(kw, ptr)
            return (None, False) if branch is None else (branch.expr, branch.plain)
        if type_name == "object":
            return self.object_body(raw, kw, ptr), False
        if type_name == "array":
            return self.array_body(kw, ptr), False
        if type_name == "number" and "multipleOf" in kw:
            raise self.refuse("multipleOf", ptr, "on a number (XGrammar ignores it)")
        return self.json.typed(kw, type_name, ptr, 0), False

    # -- objects and arrays
    def object_body(self, raw: Any, kw: dict, ptr: str) -> Optional[Expr]:
        if is_plain_object_schema(raw):
            return self.any_object()
        for keyword in ("patternProperties", "propertyNames"):
            if keyword in kw:
                raise self.refuse(keyword, ptr, "not supported in this style (XGrammar matches "
                                  "names against it in its own way)")
        properties = kw.get("properties", {})
        if not isinstance(properties, dict):
            raise GrammarError(f"'properties' at {ptr} must be an object")
        required = list(dict.fromkeys(kw.get("required", [])))
        missing = [name for name in required if name not in properties]
        if missing:
            raise self.refuse("required", ptr, f"the required name {missing[0]!r} is not in "
                              f"'properties' (XGrammar mishandles it)")
        extra_keyword = next((k for k in ("additionalProperties", "unevaluatedProperties")
                              if k in kw), None)
        extra_schema = False if extra_keyword is None else kw[extra_keyword]
        lo = count(kw, "minProperties", ptr, 0)
        hi = count(kw, "maxProperties", ptr, None)
        written_names, members = [], []
        for name, sub in properties.items():
            where = f"{ptr}/properties/{escape_token(name)}"
            written = cohere_name(name, where)
            written_names.append(written)
            tail = self.tail(sub, where)
            if tail is None:
                if name in required:
                    return None
                continue
            members.append((Sequence((_lit(f'{_COHERE_OPEN} name="{written}"'), tail)),
                            name in required))
        extra = None
        if extra_schema is not False:
            tail = self.tail(extra_schema, f"{ptr}/{extra_keyword}")
            key = self.key_excluding(written_names)
            if tail is not None and key is not None:
                extra = self.json.share(Sequence((_lit(f'{_COHERE_OPEN} name="'), key, _lit('"'),
                                                  tail)), "cohere_additional_parameter")
        if self.any_order:
            return self.any_order_list(members, extra, ptr, lo, hi)
        saved, self.json.fmt = self.json.fmt, _Whitespace(self.ws)
        try:
            return self.json.object_body(members, extra, lo, hi, 0)
        finally:
            self.json.fmt = saved

    def array_body(self, kw: dict, ptr: str) -> Optional[Expr]:
        """The items' elements, without whitespace between them: every ``prefixItems`` item,
        then ``items`` (or ``unevaluatedItems``) ones as ``minItems``/``maxItems`` allow; no
        ``items``: no more items (strict mode)."""
        if isinstance(kw.get("items"), list):
            raise self.refuse("items", ptr, "a list of items (XGrammar refuses it; use "
                              "prefixItems)")
        prefix_schemas = kw.get("prefixItems", [])
        if not isinstance(prefix_schemas, list):
            raise GrammarError(f"'prefixItems' at {ptr} must be a list")
        extra_schema = kw["items"] if "items" in kw else kw.get("unevaluatedItems", False)
        lo = count(kw, "minItems", ptr, 0)
        hi = count(kw, "maxItems", ptr, None)
        n = len(prefix_schemas)
        if lo > MAX_EXACT_BOUND or (hi is not None and hi > MAX_EXACT_BOUND):
            raise self.refuse("minItems" if lo > MAX_EXACT_BOUND else "maxItems", ptr,
                              f"an item bound above {MAX_EXACT_BOUND}")
        if hi is not None and (hi < lo or hi < n):
            raise self.refuse("maxItems", ptr, "below minItems or the number of prefixItems "
                              "(XGrammar refuses it)")
        prefix = []
        for i, sub in enumerate(prefix_schemas):
            tail = None if sub is True else self.tail(sub, f"{ptr}/prefixItems/{i}")
            if tail is None:
                raise self.refuse("prefixItems", f"{ptr}/prefixItems/{i}", "a boolean schema or "
                                  "one no value satisfies (XGrammar refuses it)")
            prefix.append(Sequence((_lit(_COHERE_OPEN), tail)))
        extra = None
        if extra_schema is not False:
            tail = self.tail(extra_schema, f"{ptr}/items")
            if tail is not None:
                extra = self.json.share(Sequence((_lit(_COHERE_OPEN), tail)), "cohere_item")
        if extra is None and lo > n:
            raise self.refuse("minItems", ptr, "more items than prefixItems allow (XGrammar "
                              "refuses it)")
        tail_items: Expr = EMPTY
        if extra is not None and hi != n:
            tail_items = Repeat(extra, max(0, lo - n), None if hi is None else hi - n)
        return Sequence((*prefix, tail_items)) if prefix else tail_items

    # -- the unconstrained value (XGrammar's cohere_any_*, xml_object)
    def cohere_key(self) -> RuleRef:
        """A written name: ``[^\\0"&<>]`` or ``&amp; &lt; &gt; &quot;``, at least one."""
        return self.json.helper("cohere_key", self.cohere_key_expr)

    @staticmethod
    def cohere_key_expr() -> Expr:
        return Repeat(Choice((CharClass(_COHERE_NAME_CHARS),
                              *[_lit(entity) for entity in _COHERE_ENTITIES.values()])), 1, None)

    def key_excluding(self, written: List[str]) -> Optional[Expr]:
        """A written name other than those in ``written`` (XGrammar leaves declared names out
        of the additional ones)."""
        names = tuple(dict.fromkeys(name for name in written if name))
        if not names:
            return self.cohere_key()
        if ("key", names) in self.names:
            return self.names[("key", names)]
        dfa = dfa_ops.difference(dfa_ops.dfa_from_expr(self.cohere_key_expr()),
                                 dfa_ops.literal_strings(names))

        def define(ref, body):
            self.json.rules[ref.name] = body
        expr = dfa_ops.dfa_to_expr(dfa, lambda ranges: CharClass(tuple(ranges)),
                                   lambda hint: RuleRef(self.json.new_rule(hint)),
                                   "cohere_additional_key", define_rule=define)
        self.names[("key", names)] = self.json.share(expr, "cohere_additional_key")
        return self.names[("key", names)]

    def any_tail(self) -> RuleRef:
        """The four typed forms of an unconstrained value: raw text, a JSON scalar (number,
        boolean, null), any dictionary, any list."""
        def build() -> Expr:
            scalar = Choice((self.json.number_rule(), _lit("true"), _lit("false"), _lit("null")))
            return Choice((self.wrap("raw", self.xml_string(), True),
                           self.wrap("json", scalar, False),
                           self.wrap("dict", self.any_object(), False),
                           self.wrap("list", self.any_list(), False)))
        return self.json.helper("cohere_any_tail", build)

    def any_object(self) -> RuleRef:
        def build() -> Expr:
            member = Sequence((_lit(f'{_COHERE_OPEN} name="'), self.cohere_key(), _lit('"'),
                               self.any_tail()))
            return Choice((Sequence((self.ws, member, Repeat(Sequence((self.ws, member)), 0, None),
                                     self.ws)), self.ws))
        return self.json.helper("cohere_any_object", build)

    def any_list(self) -> RuleRef:
        return self.json.helper("cohere_any_list", lambda: Repeat(
            Sequence((_lit(_COHERE_OPEN), self.any_tail())), 0, None))
