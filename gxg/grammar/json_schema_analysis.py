"""JSON Schema analysis: the schema read as data, before any grammar is written.

In:  a schema as ``json.loads`` gives it (a dict or a bool; ``load_schema`` makes one from a JSON
     text or a Pydantic model, ``check_keyword_types`` checks its keywords' value types), and
     for ``SchemaAnalysis`` the options that change what it means (``strict_mode``) or how an
     inexpressible oneOf is answered (``coerce_one_of``).
Out: schemas again, as plain dicts, lists and bools: ``SchemaAnalysis.normal`` (annotations,
     top-level ``$ref``, ``allOf`` and ``not`` / ``if`` / dependencies gone), ``merge`` (allOf
     of two schemas as one), ``negate`` (the complement), ``with_unevaluated``; and answers about
     them: ``satisfies`` (does a JSON value satisfy a schema; ``enum_values``, and
     ``property_schema``: which subschemas judge a property), ``disjoint`` /
     ``disjoint_one_of`` (can a value satisfy two oneOf branches: the branches as disjoint anyOf
     branches, or None), ``type_set`` / ``value_summary`` (the types and finitely many values a
     schema allows), ``resolve_pointer`` ($ref targets), ``string_regexes`` / ``regex_dfa``
     (the decoded-string languages of ``pattern`` and ``format``, as code-point DFAs).
     Errors: ``GrammarError`` naming the keyword and the JSON pointer; a relaxed oneOf is a
     ``JsonSchemaRelaxationWarning``.

Nothing here builds grammar expressions: ``gxg.grammar.json_schema_emission`` writes the grammar
from these answers (it imports this module, never the other way round), and
``gxg.grammar.json_schema`` runs the two; its docstring is the contract (which keywords, how
the combinators compile, what is narrowed or relaxed).
"""
from __future__ import annotations

import contextlib
import json
import re
import sys
import warnings
from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import unquote

from gxg import compile_budget
from gxg.grammar import code_point_dfa as dfa_ops
from gxg.grammar.ir import GrammarError
from gxg.grammar.json_formats import format_pattern
from gxg.grammar.regex import regex_to_grammar


class JsonSchemaRelaxationWarning(UserWarning):
    """The grammar accepts more than the schema allows (see ``gxg.grammar.json_schema``)."""


# ----------------------------------------------------------------------------- keyword tables

# Keys in neither table (annotations such as title or description, containers such as $defs,
# and unknown keys) are ignored, as JSON Schema ignores them.
SUPPORTED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
    "anyOf", "oneOf", "allOf", "$ref", "uniqueItems", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "not", "if", "then", "else", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedItems", "unevaluatedProperties", "contains",
}) | {"x-gxg-regexes", "x-gxg-not-strings", "x-gxg-fraction"}
# Internal keywords (never in user schemas; produced by merging and negation):
#   x-gxg-regexes      list of [regex, search, negated, keyword]: the decoded string must (not)
#                      match each regex (search: anywhere, as 'pattern'; else in full, as 'format')
#   x-gxg-not-strings  list of strings the value must differ from
#   x-gxg-fraction     true: a number that is not an integer, written with a fraction that has a
#                      non-zero digit and no exponent (the complement of type integer, narrowed:
#                      1.5e1 style spellings of non-integers are left out; itself never negated)
UNSUPPORTED = frozenset({
    "minContains", "maxContains", "$dynamicRef", "$recursiveRef", "$recursiveAnchor",
    "extends", "disallow", "divisibleBy",
})
# Rewritten by ``normal`` into anyOf/allOf of simpler schemas before a schema is compiled.
EXPANDED = ("not", "if", "dependentRequired", "dependentSchemas", "dependencies")
NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format", "x-gxg-regexes", "x-gxg-not-strings")
ARRAY_KEYWORDS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
                  "unevaluatedItems")
OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties",
                   "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties")
CONVERTER_RECURSION_LIMIT = 20000
# Normalisations one merge (allOf; one branch of a oneOf's complements) may take before it is
# refused as growing too large, and all the complements of one top-level oneOf together.
MERGE_BUDGET = 2000
COMPLEMENT_BUDGET = 100_000
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")


# ----------------------------------------------------------------------------- JSON values


def json_type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise GrammarError(f"{value!r} is not a JSON value")


def has_type(value: Any, type_name: str) -> bool:
    actual = json_type_of(value)
    return actual == type_name or (type_name == "number" and actual == "integer")


def canonical(value: Any) -> str:
    """A key equal for values JSON Schema calls equal (1 == 1.0; key order irrelevant)."""
    return json.dumps(_integral_floats_as_ints(value), sort_keys=True)


def _integral_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral_floats_as_ints(x) for x in value]
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(x) for k, x in value.items()}
    return value


def exact_decimal(value: Any) -> Decimal:
    """The exact decimal a schema number means (0.1 is one tenth: json.loads made it a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise GrammarError(f"{value!r} is not a number")
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def json_number(value: Decimal) -> Any:
    """A Decimal back as a schema number (int when integral, else the float it came from)."""
    return int(value) if value == value.to_integral_value() else float(value)


# ----------------------------------------------------------------------------- JSON pointers


def escape_token(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def resolve_pointer(root: Any, ref: str, where: str) -> Tuple[Any, str]:
    if ref == "#":
        return root, "#"
    if ref.startswith("#") and not ref.startswith("#/"):
        return _resolve_anchor(root, ref, where)
    if not ref.startswith("#/"):
        raise GrammarError(f"unsupported $ref {ref!r} at {where}: only '#', '#/...' pointers and "
                           f"'#name' anchors")
    node = root
    tokens = []
    for raw in ref[2:].split("/"):
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        tokens.append(token)
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise GrammarError(f"$ref {ref!r} at {where} does not resolve")
    return node, "#/" + "/".join(escape_token(t) for t in tokens)


def _resolve_anchor(root: Any, ref: str, where: str) -> Tuple[Any, str]:
    """``#name``: the one subschema declaring it, as a draft-04/06/07 ``id``/``$id`` of
    ``#name`` or a 2019+ ``$anchor: name`` (values of enum/const/examples are data, not
    searched)."""
    name = unquote(ref[1:])
    found: List[Tuple[Any, str]] = []
    todo: List[Tuple[Any, str]] = [(root, "#")]
    while todo:
        node, pointer = todo.pop()
        if isinstance(node, dict):
            if node.get("id") == ref or node.get("$id") == ref or node.get("$anchor") == name:
                found.append((node, pointer))
            for key, value in node.items():
                if key not in ("enum", "const", "examples", "default"):
                    todo.append((value, f"{pointer}/{escape_token(key)}"))
        elif isinstance(node, list):
            todo.extend((value, f"{pointer}/{i}") for i, value in enumerate(node))
    if len(found) != 1:
        raise GrammarError(f"$ref {ref!r} at {where} "
                           f"{'does not resolve' if not found else 'names more than one subschema'}")
    return found[0]


# ----------------------------------------------------------------------------- keywords as data


def asserts(schema: dict) -> bool:
    return any(k in SUPPORTED or k in UNSUPPORTED for k in schema
               if not (k == "uniqueItems" and schema[k] is False))


def declared_types(schema: dict, ptr: str) -> List[str]:
    declared = schema.get("type", list(JSON_TYPES))
    names = declared if isinstance(declared, list) else [declared]
    for name in names:
        if name not in JSON_TYPES:
            raise GrammarError(f"unknown type {name!r} at {ptr}")
    if "number" in names:  # a number may be an integer; one grammar covers both
        names = [n for n in names if n != "integer"]
    return list(dict.fromkeys(names))


def count(schema: dict, keyword: str, ptr: str, default):
    if keyword not in schema:
        return default
    value = schema[keyword]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GrammarError(f"'{keyword}' at {ptr} must be a non-negative integer")
    return value


def within(size: int, schema: dict, low: str, high: str, ptr: str) -> bool:
    top = count(schema, high, ptr, None)
    return count(schema, low, ptr, 0) <= size and (top is None or size <= top)


def string_regexes(schema: dict, ptr: str) -> List[Tuple[str, bool, bool, str]]:
    """(regex, search, negated, keyword) the decoded string must satisfy: 'pattern' matches
    anywhere (ECMAScript search), a known 'format' in full, unknown formats are ignored (JSON
    Schema: annotations)."""
    out: List[Tuple[str, bool, bool, str]] = []
    if "pattern" in schema:
        if not isinstance(schema["pattern"], str):
            raise GrammarError(f"'pattern' at {ptr} must be a string")
        out.append((schema["pattern"], True, False, "pattern"))
    if "format" in schema:
        name = schema["format"]
        regex = format_pattern(name) if isinstance(name, str) else None
        if regex is not None:
            out.append((regex, False, False, "format"))
    for entry in schema.get("x-gxg-regexes", []):
        out.append(tuple(entry))
    return out


def merged_types(x: Any, y: Any, ptr: str) -> List[str]:
    def expand(t):
        names = set(t if isinstance(t, list) else [t])
        return names | {"integer"} if "number" in names else names
    both = expand(x) & expand(y)
    return [t for t in JSON_TYPES if t in both]


def exclusive_required(branches: list) -> Optional[list]:
    """``oneOf: [{required: [a]}, {required: [b]}, ...]`` (one distinct name each) as
    disjoint anyOf branches: an object with exactly one of the names. A non-object satisfies
    every branch, so with two or more branches no non-object satisfies the oneOf."""
    names = []
    for branch in branches:
        if not isinstance(branch, dict):
            return None
        keys = [k for k in branch if k in SUPPORTED or k in UNSUPPORTED]
        required = branch.get("required")
        if keys != ["required"] or not isinstance(required, list) or len(required) != 1 \
                or not isinstance(required[0], str):
            return None
        names.append(required[0])
    if len(set(names)) != len(names):
        return None
    if len(names) == 1:
        return [{"required": names}]
    return [{"type": "object", "required": [name],
             "properties": {other: False for other in names if other != name}}
            for name in names]


# ----------------------------------------------------------------------------- the analysis


class SchemaAnalysis:
    """The schema reasoning for one root schema: $ref resolution against ``root``, normalising,
    merging and complementing subschemas, checking values against them, and deciding oneOf
    disjointness; ``cache`` keeps the answers that recur (per-pair disjointness, type sets,
    value summaries, oneOf decisions, regex DFAs)."""

    def __init__(self, root: Any, strict_mode: bool, coerce_one_of: bool = True):
        self.root = root
        self.strict = strict_mode
        self.coerce_one_of = coerce_one_of  # an inexpressible oneOf: anyOf (warned) or refused
        self.complement_budget: Optional[List[int]] = None  # shared while a oneOf is made exclusive
        self.uses_refs = '"$ref"' in json.dumps(root)  # nested ids matter only to refs
        # Up to draft-07 a $ref replaces its whole schema object: sibling keywords are ignored.
        draft = root.get("$schema", "") if isinstance(root, dict) else ""
        self.ref_siblings_apply = not (isinstance(draft, str) and
                                       re.search(r"draft-0[3-7]/schema", draft) is not None)
        self.cache: Dict[Any, Any] = {}  # type sets, value summaries, disjointness, regex DFAs

    # -- keywords
    def keywords(self, schema: Any, ptr: str) -> Dict[str, Any]:
        """The JSON Schema keywords of an object schema (annotations and unknown keys dropped),
        after checking that it is an object and that every keyword is supported. Draft-04's
        boolean exclusiveMinimum/exclusiveMaximum become the numeric form; then/else without
        if are dropped (they mean nothing alone)."""
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {ptr} must be an object or a boolean, got {schema!r}")
        self.check_keywords(schema, ptr)
        out = {k: v for k, v in schema.items() if k in SUPPORTED or k in UNSUPPORTED}
        for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(exclusive), bool):
                if out.pop(exclusive) and inclusive in out:
                    out[exclusive] = out.pop(inclusive)
        if "if" not in out:
            out.pop("then", None)
            out.pop("else", None)
        if out.get("uniqueItems") is False:
            del out["uniqueItems"]
        return out

    def check_keywords(self, schema: dict, ptr: str) -> None:
        for keyword, value in schema.items():
            if keyword in UNSUPPORTED:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}")
            if keyword in ("$id", "id") and ptr != "#" and isinstance(value, str) and self.uses_refs \
                    and not value.startswith("#") and '"$ref"' in json.dumps(schema):
                # A nested base URI changes what the '#/...' refs inside it refer to; without a
                # ref below it (or as a plain '#name' anchor) it changes nothing gxg resolves.
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: a base URI for the "
                                   f"$ref inside it")
            if keyword == "uniqueItems" and value is True:
                # Relaxing it would accept arrays with repeated items, which real test suites
                # check; a context-free grammar cannot compare items.
                raise GrammarError(f"unsupported keyword 'uniqueItems' at {ptr}: a grammar cannot "
                                   f"compare array items")
            if keyword == "uniqueItems" and not isinstance(value, bool):
                raise GrammarError(f"'uniqueItems' at {ptr} must be a boolean")

    # -- unevaluatedProperties / unevaluatedItems
    def with_unevaluated(self, siblings: dict, ptr: str) -> Any:
        """The schema with unevaluated* turned into additionalProperties / the array rest of
        every merged branch. Exact after merging allOf/$ref (every subschema's properties are
        evaluated); anyOf/oneOf branches are merged one at a time, so a document valid only
        because two anyOf branches together evaluate its properties is rejected (narrowing).
        Refused where a negation is involved (not, if, dependentSchemas): the properties of a
        failed subschema are not evaluated, but its negation would declare them."""
        compile_budget.check("the JSON Schema converter", ptr)
        props = siblings.pop("unevaluatedProperties", None)
        items = siblings.pop("unevaluatedItems", None)
        keyword = "unevaluatedProperties" if props is not None else "unevaluatedItems"
        if self.reaches_negation(siblings):
            raise GrammarError(f"unsupported keyword '{keyword}' at {ptr} together with "
                               f"not / if / dependentSchemas")
        merged = self.merge(siblings, {}, ptr)

        return self.unevaluated_applied(merged, props, items, ptr)

    def unevaluated_applied(self, schema: Any, props: Any, items: Any, ptr: str) -> Any:
        """``with_unevaluated``'s schema: ``props`` / ``items`` as the additional properties /
        items of every branch of ``schema`` (anyOf / oneOf branches merged with their siblings)."""
        if schema is False:
            return False
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                rest = {k: v for k, v in schema.items() if k != combinator}
                return {**rest, combinator: [
                    self.unevaluated_applied(self.merge(rest, b, ptr), props, items, ptr)
                    for b in schema[combinator]]}
        out = dict(schema)
        if props is not None and "additionalProperties" not in out:
            out["additionalProperties"] = props
        if items is not None:
            if "prefixItems" in out:
                out.setdefault("items", items)
            elif isinstance(out.get("items"), list):
                out.setdefault("additionalItems", items)
            else:
                out.setdefault("items", items)
        return out

    def reaches_negation(self, schema: Any) -> bool:
        seen, todo = set(), [schema]
        while todo:
            node = todo.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in ("not", "if", "dependentSchemas", "dependencies") and not isinstance(value, (str, list)):
                        if key != "dependencies" or any(isinstance(v, dict) for v in value.values()):
                            return True
                    if key == "$ref" and isinstance(value, str) and value not in seen:
                        seen.add(value)
                        try:
                            todo.append(resolve_pointer(self.root, value, "#")[0])
                        except compile_budget.CompileTimeoutError:
                            raise  # a deadline is not an inexpressible schema
                        except GrammarError:
                            pass
                    else:
                        todo.append(value)
            elif isinstance(node, list):
                todo.extend(node)
        return False

    # -- allOf: merging two schemas into one whose instances are those valid for both
    def normal(self, schema: Any, ptr: str, budget: List[int]) -> Any:
        """``schema`` without annotations, top-level $ref, allOf and the EXPANDED keywords
        (False, or a dict; it may hold anyOf/oneOf)."""
        compile_budget.check("the JSON Schema converter", ptr)
        budget[0] -= 1
        if budget[0] < 0:
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate "
                               f"or grows too large")
        if schema is True:
            return {}
        if schema is False:
            return False
        out = self.keywords(schema, ptr)
        if "$ref" in out:
            target, target_ptr = resolve_pointer(self.root, out.pop("$ref"), ptr)
            if not self.ref_siblings_apply:
                return self.normal(target, target_ptr, budget)
            return self.merge2(self.normal(target, target_ptr, budget), out, ptr, budget)
        if "allOf" in out:
            subs = out.pop("allOf")
            if not isinstance(subs, list):
                raise GrammarError(f"'allOf' at {ptr} must be a list")
            merged: Any = self.normal(out, ptr, budget)
            for i, sub in enumerate(subs):
                merged = self.merge2(merged, sub, f"{ptr}/allOf/{i}", budget)
            return merged
        if "not" in out:
            negated = self.negate(out.pop("not"), f"{ptr}/not", budget)
            return self.merge2(out, negated, ptr, budget)
        if "if" in out:
            # if/then/else == anyOf(allOf(if, then), allOf(not if, else)); the branches exclude
            # each other, so nothing is lost by compiling them as alternatives.
            condition, then, otherwise = out.pop("if"), out.pop("then", True), out.pop("else", True)
            negated = self.negate(condition, f"{ptr}/if", budget)
            branches = [self.merge2(condition, then, f"{ptr}/then", budget),
                        self.merge2(negated, otherwise, f"{ptr}/else", budget)]
            return self.merge2(out, {"anyOf": [b for b in branches if b is not False] or [False]}, ptr, budget)
        clauses = self.dependency_clauses(out, ptr)
        if clauses:
            merged = out
            for clause in clauses:
                merged = self.merge2(merged, clause, ptr, budget)
            return merged
        return out

    def dependency_clauses(self, out: dict, ptr: str) -> List[dict]:
        """dependentRequired / dependentSchemas / draft-04 dependencies as anyOf clauses:
        name absent, or name present and the dependency holds (the two exclude each other).
        Removes the keywords from ``out``."""
        clauses = []
        for keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
            table = out.pop(keyword, None)
            if table is None:
                continue
            if not isinstance(table, dict):
                raise GrammarError(f"'{keyword}' at {ptr} must be an object")
            for name, dependency in table.items():
                absent = {"properties": {name: False}}
                if isinstance(dependency, list):
                    if not all(isinstance(d, str) for d in dependency):
                        raise GrammarError(f"'{keyword}' at {ptr}/{escape_token(name)} must list strings")
                    present: Any = {"required": [name] + [d for d in dependency if d != name]}
                elif keyword != "dependentRequired" and isinstance(dependency, (dict, bool)):
                    present = {"allOf": [{"required": [name]}, dependency]}
                else:
                    raise GrammarError(f"'{keyword}' at {ptr}/{escape_token(name)} must be a "
                                       f"{'list' if keyword == 'dependentRequired' else 'list or schema'}")
                clauses.append({"anyOf": [absent, present]})
        return clauses

    def merge(self, a: Any, b: Any, ptr: str, budget: Optional[List[int]] = None) -> Any:
        """allOf(a, b) as one schema; ``budget``: the normalisations it may take (a fresh
        MERGE_BUDGET when None), decremented as it goes."""
        try:
            return self.merge2(a, b, ptr, [MERGE_BUDGET] if budget is None else budget)
        except RecursionError:  # a $ref cycle through allOf keeps unfolding
            raise GrammarError(f"unsupported keyword 'allOf' at {ptr}: the merge does not terminate") from None

    def merge2(self, a: Any, b: Any, ptr: str, budget: List[int]) -> Any:
        a, b = self.normal(a, ptr, budget), self.normal(b, ptr, budget)
        if a is False or b is False:
            return False
        for keyword in ("anyOf", "oneOf"):
            for one, other in ((a, b), (b, a)):
                if keyword in one:
                    # allOf(x, anyOf(b...)) == anyOf(allOf(x, b)...); for oneOf, "exactly one of
                    # (x and b_i)" == x and exactly one b_i. ``other`` may hold its own anyOf /
                    # oneOf: distributing again takes the product of the branches.
                    rest = {k: v for k, v in one.items() if k != keyword}
                    base = self.merge2(rest, other, ptr, budget)
                    if base is False:
                        return False
                    branches, kind = one[keyword], keyword
                    if keyword == "oneOf" and isinstance(branches, list) and branches:
                        # exclusivity decided on the branches as written (see GrammarEmitter.schema)
                        disjoint = self.disjoint_one_of(branches, ptr)
                        if disjoint is not None:
                            branches, kind = disjoint, "anyOf"
                    merged = [self.merge2(base, branch, f"{ptr}/{keyword}/{i}", budget)
                              for i, branch in enumerate(branches)]
                    # A branch that became unsatisfiable can never hold (nor be oneOf's "the
                    # one"), so dropping it keeps the meaning.
                    kept = [m for m in merged if m is not False]
                    return {kind: kept} if kept else False
        out: Dict[str, Any] = {}
        object_keys = ("properties", "additionalProperties", "patternProperties")
        array_keys = ("items", "prefixItems", "additionalItems")
        # every regex of either side must hold, and the second of two different patterns or
        # formats joins them: gathered here, written once after the loop
        regexes = [*a.get("x-gxg-regexes", []), *b.get("x-gxg-regexes", [])]
        for key in list(a) + [k for k in b if k not in a]:
            if key in object_keys or key in array_keys or key == "x-gxg-regexes":
                continue
            if key not in a or key not in b:
                out[key] = a[key] if key in a else b[key]
                continue
            x, y = a[key], b[key]
            if key == "type":
                kinds = merged_types(x, y, ptr)
                if not kinds:
                    return False
                out[key] = kinds
            elif key == "required":
                out[key] = list(dict.fromkeys(list(x) + list(y)))
            elif key == "enum":
                keep = {canonical(v) for v in y}
                out[key] = [v for v in x if canonical(v) in keep]
            elif key == "const":
                if canonical(x) != canonical(y):
                    return False
                out[key] = x
            elif key in ("minLength", "minItems", "minProperties"):
                out[key] = max(x, y)
            elif key in ("maxLength", "maxItems", "maxProperties"):
                out[key] = min(x, y)
            elif key in ("minimum", "exclusiveMinimum"):
                out[key] = x if exact_decimal(x) >= exact_decimal(y) else y
            elif key in ("maximum", "exclusiveMaximum"):
                out[key] = x if exact_decimal(x) <= exact_decimal(y) else y
            elif key == "multipleOf":
                dx, dy = exact_decimal(x), exact_decimal(y)
                if dx > 0 and dy > 0 and (dx % dy == 0 or dy % dx == 0):
                    out[key] = x if dx >= dy else y
                elif canonical(x) != canonical(y):
                    raise GrammarError(f"unsupported keyword 'allOf' merging two different "
                                       f"'multipleOf' at {ptr}")
                else:
                    out[key] = x
            elif key in ("pattern", "format"):
                out[key] = x
                if canonical(x) != canonical(y):  # both must hold: keep the second as internal
                    regexes += string_regexes({key: y}, ptr)
            elif key == "x-gxg-not-strings":
                out[key] = sorted(set(x) | set(y))
            elif key == "uniqueItems":
                out[key] = bool(x or y)
            elif key == "contains" and canonical(x) != canonical(y):
                raise GrammarError(f"unsupported keyword 'contains' at {ptr}: two different "
                                   f"'contains' (two witnesses) in one array")
            elif key == "propertyNames":
                out[key] = self.merge2(x, y, f"{ptr}/propertyNames", budget)
            elif canonical(x) != canonical(y):
                raise GrammarError(f"unsupported keyword 'allOf' merging two different '{key}' at {ptr}")
            else:
                out[key] = x
        if regexes:  # each distinct one once
            out["x-gxg-regexes"] = list({canonical(list(r)): list(r) for r in regexes}.values())
        self.merge_object(a, b, out, ptr, budget)
        self.merge_array(a, b, out, ptr, budget)
        return out

    def merge_object(self, a: dict, b: dict, out: dict, ptr: str, budget: List[int]) -> None:
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        pats_a, pats_b = a.get("patternProperties", {}), b.get("patternProperties", {})
        for value, keyword in ((props_a, "properties"), (props_b, "properties"),
                               (pats_a, "patternProperties"), (pats_b, "patternProperties")):
            if not isinstance(value, dict):
                raise GrammarError(f"'{keyword}' at {ptr} must be an object")
        extra_a, extra_b = "additionalProperties" in a, "additionalProperties" in b
        if (extra_a or extra_b) and not pats_a and not pats_b:
            # Each side judges the names it does not declare with its additionalProperties, so a
            # name declared on one side only meets the other side's additionalProperties, and an
            # undeclared name meets both.
            def side(props: dict, has_extra: bool, extra: Any, name: str) -> Any:
                return props[name] if name in props else (extra if has_extra else True)
            merged = {}
            for name in list(props_a) + [n for n in props_b if n not in props_a]:
                one = side(props_a, extra_a, a.get("additionalProperties"), name)
                two = side(props_b, extra_b, b.get("additionalProperties"), name)
                merged[name] = self.merge2(one, two, f"{ptr}/properties/{escape_token(name)}", budget) \
                    if one is not True and two is not True else (two if one is True else one)
            out["properties"] = merged
            out["additionalProperties"] = self.merge2(a.get("additionalProperties", True),
                                                      b.get("additionalProperties", True),
                                                      f"{ptr}/additionalProperties", budget)
            return
        if extra_a and extra_b:
            raise GrammarError(f"unsupported keyword 'allOf' merging two 'additionalProperties' at {ptr}")
        # additionalProperties of one side judges every name outside its own properties and
        # patterns, so the other side may only constrain names that side already declares.
        for one, other, one_pats, other_pats, has_extra in ((props_a, props_b, pats_a, pats_b, extra_a),
                                                            (props_b, props_a, pats_b, pats_a, extra_b)):
            if has_extra and not (set(other) <= set(one) and set(other_pats) <= set(one_pats)):
                raise GrammarError(f"unsupported keyword 'allOf' merging 'additionalProperties' with "
                                   f"properties declared elsewhere at {ptr}")
        for table_a, table_b, keyword in ((props_a, props_b, "properties"), (pats_a, pats_b, "patternProperties")):
            merged = {}
            for name in list(table_a) + [n for n in table_b if n not in table_a]:
                if name in table_a and name in table_b:
                    merged[name] = self.merge2(table_a[name], table_b[name],
                                               f"{ptr}/{keyword}/{escape_token(name)}", budget)
                else:
                    merged[name] = table_a[name] if name in table_a else table_b[name]
            if merged or keyword in a or keyword in b:
                out[keyword] = merged
        if extra_a or extra_b:
            out["additionalProperties"] = a["additionalProperties"] if extra_a else b["additionalProperties"]

    def merge_array(self, a: dict, b: dict, out: dict, ptr: str, budget: List[int]) -> None:
        keys = ("items", "prefixItems", "additionalItems")
        tuple_a = "prefixItems" in a or "additionalItems" in a or isinstance(a.get("items"), list)
        tuple_b = "prefixItems" in b or "additionalItems" in b or isinstance(b.get("items"), list)
        has_a, has_b = any(k in a for k in keys), any(k in b for k in keys)
        if has_a and has_b:
            if tuple_a or tuple_b:
                raise GrammarError(f"unsupported keyword 'allOf' merging two array item lists at {ptr}")
            out["items"] = self.merge2(a["items"], b["items"], f"{ptr}/items", budget)
            return
        for side in (a, b):
            for key in keys:
                if key in side:
                    out[key] = side[key]

    # -- not: the complement of a schema, as a schema
    def negate(self, schema: Any, ptr: str, budget: List[int]) -> Any:
        """A schema whose instances are exactly the JSON values ``schema`` rejects. A schema is
        the conjunction of its keywords, so its complement is the anyOf of the keywords'
        complements; a keyword that constrains one type is satisfied by every other type, so its
        complement holds only values of that type. Raises naming 'not' where the complement is
        not expressible here (e.g. multipleOf, uniqueItems, items)."""
        if isinstance(schema, dict) and "not" in schema and \
                not asserts({k: v for k, v in schema.items() if k != "not"}):
            return schema["not"]  # not (not x) == x: exact, where negating twice may not be
        flat = self.normal(schema, ptr, budget)
        if flat is False:
            return True
        branches: List[Any] = []
        rest = dict(flat)
        for combinator in ("anyOf", "oneOf"):
            if combinator in rest:
                subs = rest.pop(combinator)
                if combinator == "oneOf" and not self.provably_disjoint(subs):
                    raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of a "
                                       f"oneOf whose branches may overlap")
                every: Any = {}
                for i, sub in enumerate(subs):  # not anyOf(a, b) == allOf(not a, not b)
                    every = self.merge2(every, self.negate(sub, f"{ptr}/{combinator}/{i}", budget),
                                        ptr, budget)
                branches.append(every)
        if "type" in rest:
            kinds = merged_types(rest.pop("type"), list(JSON_TYPES), ptr)
            integer_only = "integer" in kinds and "number" not in kinds
            others = [t for t in JSON_TYPES if t not in kinds and not (integer_only and t == "number")]
            if others:
                branches.append({"type": others})
            if integer_only:
                # numbers that are not integers; narrowed to fractions without exponent
                branches.append({"type": "number", "x-gxg-fraction": True})
        if "enum" in rest or "const" in rest:
            values = rest.pop("enum") if "enum" in rest else [rest["const"]]
            if "const" in rest:
                const = rest.pop("const")
                values = [v for v in values if canonical(v) == canonical(const)]
            branches.extend(self.negate_values(values, ptr))
        for keyword, value in rest.items():
            branches.extend(self.negate_keyword(keyword, value, ptr, budget))
        return {"anyOf": branches} if branches else False

    def negate_values(self, values: list, ptr: str) -> List[Any]:
        """Every JSON value except ``values``."""
        present = {json_type_of(v) for v in values}
        out: List[Any] = []
        numeric = present & {"integer", "number"}
        others = [t for t in JSON_TYPES if t not in present and not (numeric and t in ("integer", "number"))]
        if others:
            out.append({"type": others})
        if "boolean" in present:
            flags = {v for v in values if isinstance(v, bool)}
            out.extend({"const": flag} for flag in (True, False) if flag not in flags)
        if "string" in present:
            out.append({"type": "string", "x-gxg-not-strings": sorted({v for v in values if isinstance(v, str)})})
        if numeric:
            points = sorted({exact_decimal(v) for v in values if json_type_of(v) in ("integer", "number")})
            out.append({"type": "number", "exclusiveMaximum": json_number(points[0])})
            for low, high in zip(points, points[1:]):
                out.append({"type": "number", "exclusiveMinimum": json_number(low),
                            "exclusiveMaximum": json_number(high)})
            out.append({"type": "number", "exclusiveMinimum": json_number(points[-1])})
        if present & {"array", "object"}:
            raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of an array or "
                               f"object constant")
        return out

    def negate_keyword(self, keyword: str, value: Any, ptr: str, budget: List[int]) -> List[Any]:
        def refuse(why: str = "") -> GrammarError:
            return GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of "
                                f"'{keyword}'{why} is not supported")

        def bound() -> int:
            return count({keyword: value}, keyword, ptr, 0)

        if keyword == "minLength":
            return [{"type": "string", "maxLength": bound() - 1}] if bound() > 0 else []
        if keyword == "maxLength":
            return [{"type": "string", "minLength": bound() + 1}]
        if keyword == "minItems":
            return [{"type": "array", "maxItems": bound() - 1}] if bound() > 0 else []
        if keyword == "maxItems":
            return [{"type": "array", "minItems": bound() + 1}]
        if keyword == "minProperties":
            return [{"type": "object", "maxProperties": bound() - 1}] if bound() > 0 else []
        if keyword == "maxProperties":
            return [{"type": "object", "minProperties": bound() + 1}]
        flipped = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
                   "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
        if keyword in flipped:
            return [{"type": "number", flipped[keyword]: value}]
        if keyword in ("pattern", "format", "x-gxg-regexes"):
            regexes = string_regexes({keyword: value}, ptr)
            # not (r1 and r2 ...) == (not r1) or (not r2) ...
            return [{"type": "string", "x-gxg-regexes": [[r, search, not negated, kw]]}
                    for r, search, negated, kw in regexes]
        if keyword == "x-gxg-not-strings":
            return [{"type": "string", "enum": list(value)}] if value else []
        if keyword == "required":
            if not isinstance(value, list):
                raise GrammarError(f"'required' at {ptr} must be a list of strings")
            return [{"type": "object", "properties": {name: False}} for name in dict.fromkeys(value)]
        if keyword == "properties":
            if not isinstance(value, dict):
                raise GrammarError(f"'properties' at {ptr} must be an object")
            out = []
            for name, sub in value.items():
                if sub is True or sub == {}:
                    continue
                negated = self.negate(sub, f"{ptr}/properties/{escape_token(name)}", budget)
                if negated is not False:
                    out.append({"type": "object", "required": [name], "properties": {name: negated}})
            return out
        if keyword in ("additionalProperties", "items", "additionalItems", "propertyNames",
                       "unevaluatedProperties", "unevaluatedItems") and value is True:
            return []
        if keyword == "items" and value is False:
            return [{"type": "array", "minItems": 1}]
        if keyword == "items" and isinstance(value, dict):
            # some item violates the schema: contains (not items)
            negated = self.negate(value, f"{ptr}/items", budget)
            return [] if negated is False else [{"type": "array", "contains": negated}]
        if keyword == "contains":
            negated = self.negate(value, f"{ptr}/contains", budget)
            return [{"type": "array", "items": negated}]  # every item violates it (or none exist)
        if keyword == "uniqueItems" and value is False:
            return []
        if keyword == "x-gxg-fraction":  # its language is narrowed: the complement would widen
            raise GrammarError(f"unsupported keyword 'not' at {ptr}: the complement of 'not' "
                               f"of type integer")
        raise refuse()

    # -- the languages of pattern / format (decoded strings, as DFAs)
    def regex_grammar(self, regex: str, search: bool, keyword: str, ptr: str):
        """The regex front-end's Grammar of the strings ``regex`` matches (anywhere with
        ``search``, else in full): the source of the DFA below and of the emitter's spelling."""
        key = ("regex", regex, search)
        if key not in self.cache:
            try:
                self.cache[key] = regex_to_grammar(regex, search=search, dot_all=False)
            except compile_budget.CompileTimeoutError:
                raise  # a deadline is not an inexpressible schema
            except GrammarError as exc:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: {regex!r}: {exc}") from None
        return self.cache[key]

    def regex_dfa(self, regex: str, search: bool, keyword: str, ptr: str):
        """The decoded strings ``regex`` matches, as a code-point DFA."""
        key = ("dfa", regex, search)
        if key not in self.cache:
            grammar = self.regex_grammar(regex, search, keyword, ptr)
            try:
                self.cache[key] = dfa_ops.dfa_from_grammar(grammar)
            except dfa_ops.DfaTooLarge as exc:
                raise GrammarError(f"unsupported keyword '{keyword}' at {ptr}: {regex!r}: {exc}") from None
        return self.cache[key]

    # -- checking a constant against a schema (enum/const with sibling keywords, property names)
    def satisfies(self, value: Any, schema: Any, ptr: str) -> bool:
        flat = self.normal(schema, ptr, [MERGE_BUDGET])
        if flat is False:
            return False
        rest = dict(flat)
        for combinator in ("anyOf", "oneOf"):
            if combinator in rest:
                results = [self.satisfies(value, b, ptr) for b in rest.pop(combinator)]
                if not (any(results) if combinator == "anyOf" else sum(results) == 1):
                    return False
        kind = json_type_of(value)
        if "type" in rest and not any(has_type(value, t) for t in declared_types(rest, ptr)):
            return False
        if "enum" in rest and canonical(value) not in {canonical(v) for v in rest["enum"]}:
            return False
        if "const" in rest and canonical(value) != canonical(rest["const"]):
            return False
        if kind == "string":
            if not within(len(value), rest, "minLength", "maxLength", ptr):
                return False
            for regex, search, negated, keyword in string_regexes(rest, ptr):
                if self.regex_dfa(regex, search, keyword, ptr).accepts(value) == negated:
                    return False
            if value in rest.get("x-gxg-not-strings", []):
                return False
        if kind in ("integer", "number"):
            number = exact_decimal(value)
            checks = {"minimum": lambda b: number >= b, "maximum": lambda b: number <= b,
                      "exclusiveMinimum": lambda b: number > b, "exclusiveMaximum": lambda b: number < b,
                      "multipleOf": lambda b: b > 0 and number % b == 0}
            for keyword, check in checks.items():
                if keyword in rest and not check(exact_decimal(rest[keyword])):
                    return False
            if rest.get("x-gxg-fraction") and number % 1 == 0:
                return False
        if kind == "array":
            if not within(len(value), rest, "minItems", "maxItems", ptr):
                return False
            prefix = rest.get("prefixItems", rest["items"] if isinstance(rest.get("items"), list) else [])
            rest_key = "additionalItems" if isinstance(rest.get("items"), list) or \
                ("prefixItems" in rest and "items" not in rest) else "items"
            default_rest = not (self.strict and prefix)
            for i, item in enumerate(value):
                sub = prefix[i] if i < len(prefix) else rest.get(rest_key, default_rest)
                if not self.satisfies(item, sub, ptr):
                    return False
            if rest.get("uniqueItems") is True and len({canonical(v) for v in value}) != len(value):
                return False
            if "contains" in rest and not any(self.satisfies(v, rest["contains"], ptr) for v in value):
                return False
        if kind == "object":
            if not within(len(value), rest, "minProperties", "maxProperties", ptr):
                return False
            if any(name not in value for name in rest.get("required", [])):
                return False
            properties, patterns = rest.get("properties", {}), rest.get("patternProperties", {})
            extra = rest.get("additionalProperties", not (self.strict and (properties or patterns)))
            for name, item in value.items():
                if "propertyNames" in rest and not self.satisfies(name, rest["propertyNames"], ptr):
                    return False
                matched = [s for p, s in patterns.items()
                           if self.regex_dfa(p, True, "patternProperties", ptr).accepts(name)]
                subs = ([properties[name]] if name in properties else []) + matched
                for sub in subs or [extra]:
                    if not self.satisfies(item, sub, ptr):
                        return False
        return True

    def enum_values(self, schema: dict, ptr: str) -> list:
        """The values of a (flat) schema's ``enum`` / ``const`` that satisfy its other keywords,
        each once (JSON Schema equality), in the schema's order."""
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise GrammarError(f"'enum' at {ptr} must be a list")
        else:
            values = [schema["const"]]
        others = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if "const" in schema:
            values = [v for v in values if canonical(v) == canonical(schema["const"])]
        kept, seen = [], set()
        for value in values:
            if canonical(value) in seen or not self.satisfies(value, others, ptr):
                continue
            seen.add(canonical(value))
            kept.append(value)
        return kept

    def property_schema(self, name: str, properties: dict, patterns: dict, extra_schema: Any,
                        names_schema: Any, ptr: str) -> Optional[Tuple[Any, str]]:
        """The schema of property ``name`` and its pointer: its 'properties' schema and every
        patternProperties schema whose pattern it matches, merged, or additionalProperties when
        neither applies; None when ``name`` fails propertyNames."""
        if names_schema is not True and not self.satisfies(name, names_schema, f"{ptr}/propertyNames"):
            return None
        subs = []
        if name in properties:
            subs.append((properties[name], f"{ptr}/properties/{escape_token(name)}"))
        for pattern, sub in patterns.items():
            if self.regex_dfa(pattern, True, "patternProperties", ptr).accepts(name):
                subs.append((sub, f"{ptr}/patternProperties/{escape_token(pattern)}"))
        if not subs:
            subs.append((extra_schema, f"{ptr}/additionalProperties"))
        if len(subs) == 1:
            return subs[0]
        merged: Any = subs[0][0]
        for sub, sub_ptr in subs[1:]:
            merged = self.merge(merged, sub, sub_ptr)
        return merged, subs[0][1]

    # -- oneOf disjointness (sufficient conditions only)
    def deref(self, schema: Any, seen=()) -> Any:
        while isinstance(schema, dict) and "$ref" in schema and isinstance(schema["$ref"], str):
            ref = schema["$ref"]
            if ref in seen:
                return True
            seen = seen + (ref,)
            try:
                schema, _ = resolve_pointer(self.root, ref, "#")
            except compile_budget.CompileTimeoutError:
                raise  # a deadline is not an inexpressible schema
            except GrammarError:
                return True
        if isinstance(schema, dict) and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
            return self.deref(schema["allOf"][0], seen)
        return schema

    def type_set(self, schema: Any) -> set:
        """Types the schema's values may have ('number' meaning non-integral numbers). Cached
        per schema object (kept alive by the entry), as ``disjoint`` is."""
        key = ("type_set", id(schema))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not schema:
            hit = self.cache[key] = (schema, self._type_set(schema))
        return hit[1]

    def _type_set(self, schema: Any) -> set:
        schema = self.deref(schema)
        everything = {"null", "boolean", "integer", "number", "string", "array", "object"}
        if schema is False:
            return set()
        if not isinstance(schema, dict):
            return everything
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            if isinstance(values, list):
                return {json_type_of(v) for v in values}
        for keyword in ("anyOf", "oneOf"):
            if isinstance(schema.get(keyword), list):
                return set().union(*[self.type_set(s) for s in schema[keyword]])
        declared = schema.get("type")
        if declared is None:
            return everything
        names = set(declared if isinstance(declared, list) else [declared])
        if "number" in names:
            names.add("integer")
        return names & everything

    def value_summary(self, schema: Any) -> Dict[str, Optional[frozenset]]:
        """The values the schema may have, per type of ``type_set``: the canonical values
        (``canonical``) when they are finitely many, else None. Cached per schema object, so
        a chain of nested anyOf/oneOf is summarised once, level by level (testing a value
        against each level below again made a chain quadratic in its depth)."""
        key = ("value_summary", id(schema))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not schema:
            hit = self.cache[key] = (schema, self._value_summary(schema))
        return hit[1]

    def _value_summary(self, schema: Any) -> Dict[str, Optional[frozenset]]:
        target = self.deref(schema)
        if isinstance(target, dict):
            listed = [target["const"]] if "const" in target else target.get("enum")
            if isinstance(listed, list):
                values: Dict[str, set] = {}
                for value in listed:
                    values.setdefault(json_type_of(value), set()).add(canonical(value))
                return {name: frozenset(found) for name, found in values.items()}
            for keyword in ("anyOf", "oneOf"):  # a value satisfies some branch
                if isinstance(target.get(keyword), list):
                    union: Dict[str, Optional[frozenset]] = {}
                    for branch in target[keyword]:
                        for name, found in self.value_summary(branch).items():
                            known = union.get(name, frozenset())
                            union[name] = None if found is None or known is None else known | found
                    return union
        return dict.fromkeys(self.type_set(schema))

    def value_set(self, schema: Any) -> Optional[set]:
        schema = self.deref(schema)
        if not isinstance(schema, dict):
            return None
        if "const" in schema:
            return {canonical(schema["const"])}
        if isinstance(schema.get("enum"), list):
            return {canonical(v) for v in schema["enum"]}
        return None

    def disjoint(self, a: Any, b: Any) -> bool:
        """No value satisfies both (a sound, incomplete test). Cached per pair of schema
        objects (the entry keeps them alive so their ids stay unique)."""
        key = ("disjoint", id(a), id(b))
        hit = self.cache.get(key)
        if hit is None or hit[0] is not a or hit[1] is not b:
            hit = self.cache[key] = (a, b, self._disjoint(a, b))
        return hit[2]

    def _disjoint(self, a: Any, b: Any) -> bool:
        shared = self.complement_budget
        if shared is not None:  # while complements are built, a check is work like a merge
            shared[0] -= 1
            if shared[0] < 0:
                raise GrammarError("the complements of a oneOf grow too large")
        types_a, types_b = self.type_set(a), self.type_set(b)
        if not types_a & types_b:
            return True
        summary_a, summary_b = self.value_summary(a), self.value_summary(b)
        if all(summary_a[name] is not None and summary_b[name] is not None
               and not summary_a[name] & summary_b[name]
               for name in summary_a.keys() & summary_b.keys()):
            return True  # finitely many values of each common type, none shared
        # A value of anyOf/oneOf(s_1..s_k) satisfies some s_i (sibling keywords only narrow
        # it): disjoint from every s_i is disjoint. Nested oneOfs whose branches are proven
        # apart this way need no complements (which multiply with the nesting depth).
        for one, other in ((a, b), (b, a)):
            one = self.deref(one)
            if isinstance(one, dict):
                for keyword in ("anyOf", "oneOf"):
                    subs = one.get(keyword)
                    if isinstance(subs, list) and subs and \
                            all(self.disjoint(sub, other) for sub in subs):
                        return True
        if types_a == {"object"} == types_b:
            a, b = self.deref(a), self.deref(b)
            props_a, props_b = a.get("properties", {}), b.get("properties", {})
            req_a, req_b = set(a.get("required", [])), set(b.get("required", []))
            if isinstance(props_a, dict) and isinstance(props_b, dict):
                for name in req_a & req_b & set(props_a) & set(props_b):
                    va, vb = self.value_set(props_a[name]), self.value_set(props_b[name])
                    if va is not None and vb is not None and not va & vb:
                        return True
        return False

    def disjoint_one_of(self, branches: list, ptr: str) -> Optional[list]:
        """``oneOf(branches)`` as anyOf branches that no value satisfies two of (same instances),
        or None when exclusivity is not expressible. Cached per branch list (merges meet the
        same oneOf many times; the entry keeps the list alive so its id stays unique)."""
        key = ("disjoint_one_of", id(branches))
        if key not in self.cache or self.cache[key][0] is not branches:
            result = exclusive_required(branches)
            if result is None:
                result = branches if self.provably_disjoint(branches) else \
                    self.exclusive_branches(branches, ptr)
            self.cache[key] = (branches, result)
        return self.cache[key][1]

    def relax_one_of(self, ptr: str) -> None:
        """A oneOf whose exclusivity is not expressible is compiled as anyOf with
        ``coerce_one_of`` (the default with ``strict_mode=True``, as XGrammar does): the grammar
        then also accepts a value that satisfies two branches, announced with a
        ``JsonSchemaRelaxationWarning``. Otherwise (the default of the compliant mode) it is
        refused naming 'oneOf'."""
        if not self.coerce_one_of:
            raise GrammarError(f"unsupported keyword 'oneOf' at {ptr}: its branches may overlap "
                               f"and their complements are not expressible (coerce_one_of=True "
                               f"compiles it as anyOf)")
        warnings.warn(f"oneOf at {ptr} compiled as anyOf: its branches are not provably "
                      f"disjoint, and their complements are not expressible",
                      JsonSchemaRelaxationWarning, stacklevel=4)

    def exclusive_branches(self, branches: list, ptr: str) -> Optional[list]:
        """``oneOf(b_1..b_k)`` as disjoint anyOf branches ``b_i and not b_j (j != i)``, or None
        when a complement is not expressible or the merges grow too large.

        Each branch's merge may take MERGE_BUDGET normalisations; all the complements built
        for one top-level oneOf, those of the oneOfs nested in it included, share
        COMPLEMENT_BUDGET. The complement of a nested oneOf holds the complements of the levels
        below, and merging builds new branch lists (so the per-list cache misses): without the
        shared bound the work multiplied with the depth. Past it the oneOf is not made
        exclusive (None: relaxed to anyOf, or refused in the compliant mode)."""
        top = self.complement_budget is None
        if top:
            self.complement_budget = [COMPLEMENT_BUDGET]
        shared = self.complement_budget
        out = []
        try:
            for i, branch in enumerate(branches):
                allotted = min(MERGE_BUDGET, shared[0])
                if allotted <= 0:
                    return None
                local = [allotted]
                others = [{"not": other} for j, other in enumerate(branches) if j != i]
                try:
                    merged = self.merge({"allOf": [branch] + others}, {}, f"{ptr}/oneOf/{i}",
                                        local)
                finally:
                    shared[0] -= allotted - local[0]
                if merged is not False:
                    out.append(merged)
        except compile_budget.CompileTimeoutError:
            raise  # a deadline is not an inexpressible schema
        except GrammarError:
            return None
        finally:
            if top:
                self.complement_budget = None
        return out or [False]

    def provably_disjoint(self, branches: list) -> bool:
        return all(self.disjoint(branches[i], branches[j])
                   for i in range(len(branches)) for j in range(i + 1, len(branches)))


# ----------------------------------------------------------------------------- loading and checks


def load_schema(schema: Any) -> Any:
    """The schema as a dict or a bool, from a dict, a bool, a JSON text (str or bytes) or a
    Pydantic model class; anything else, or a JSON text of another value, is a GrammarError."""
    if isinstance(schema, (str, bytes)):
        try:
            with deep_recursion():
                schema = json.loads(schema)
        except ValueError as exc:
            raise GrammarError(f"the schema is not valid JSON: {exc}") from exc
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"a schema is a JSON object or a boolean, got "
                               f"{type(schema).__name__} {json.dumps(schema)[:40]}")
        return schema
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()  # a Pydantic model class
    if isinstance(schema, (dict, bool)):
        return schema
    raise GrammarError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model, "
                       f"got {type(schema).__name__}")


@contextlib.contextmanager
def deep_recursion():
    """Python's recursion limit raised to CONVERTER_RECURSION_LIMIT for the block (the converter
    and ``json.dumps`` recurse along the schema: large real schemas nest a few hundred levels,
    each a handful of frames), restored after it; running out even so is a GrammarError, not a
    RecursionError."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, CONVERTER_RECURSION_LIMIT))
    try:
        yield
    except RecursionError:
        raise GrammarError("the schema nests too deeply to convert (more than "
                           f"{CONVERTER_RECURSION_LIMIT} converter frames)") from None
    finally:
        sys.setrecursionlimit(limit)


# keyword -> the JSON types its value may have (checked on every subschema before converting,
# so a wrong one is a GrammarError naming its place, not an exception from deep inside)
_KEYWORD_TYPES = {
    "enum": (list,), "properties": (dict,), "patternProperties": (dict,),
    "anyOf": (list,), "oneOf": (list,), "allOf": (list,), "prefixItems": (list,),
    "not": (dict, bool), "additionalProperties": (dict, bool), "items": (dict, bool, list),
    "additionalItems": (dict, bool), "propertyNames": (dict, bool), "contains": (dict, bool),
    "if": (dict, bool), "then": (dict, bool), "else": (dict, bool),
    "unevaluatedItems": (dict, bool), "unevaluatedProperties": (dict, bool),
    "dependentRequired": (dict,), "dependentSchemas": (dict,), "$ref": (str,),
    "pattern": (str,), "type": (str, list), "required": (list,),
}
# keyword -> the JSON type of each element of its array value
_ELEMENT_TYPES = {"type": str, "required": str}
_JSON_TYPE_NAMES = {list: "an array", dict: "an object", bool: "a boolean", str: "a string"}
# keywords whose value holds subschemas: one (dict), a list of them, or a map of them
_SUBSCHEMA_ONE = ("not", "additionalProperties", "additionalItems", "propertyNames", "contains",
                  "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "items")
_SUBSCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMA_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")


def check_keyword_types(root: Any) -> None:
    """GrammarError naming the JSON pointer of the first keyword whose value has the wrong JSON
    type (``{"not": {"enum": 5}}``: 'enum' at #/not must be an array). Iterative: any depth."""
    pending = [(root, "#")]
    while pending:
        schema, ptr = pending.pop()
        if not isinstance(schema, dict):
            continue
        for key, value in schema.items():
            kinds = _KEYWORD_TYPES.get(key)
            if kinds is not None and (not isinstance(value, kinds) or
                                      (bool not in kinds and isinstance(value, bool))):
                wanted = " or ".join(_JSON_TYPE_NAMES[k] for k in kinds)
                raise GrammarError(f"'{key}' at {ptr} must be {wanted}, got {json.dumps(value)}"
                                   if _shallow(value) else
                                   f"'{key}' at {ptr} must be {wanted}")
            element = _ELEMENT_TYPES.get(key)
            if element is not None and isinstance(value, list):
                bad = next((item for item in value if not isinstance(item, element)), None)
                if bad is not None:
                    raise GrammarError(f"'{key}' at {ptr} must be an array of "
                                       f"{_JSON_TYPE_NAMES[element][2:]}s, got "
                                       f"{json.dumps(bad)[:40]} in it")
        for key in _SUBSCHEMA_ONE:
            if isinstance(schema.get(key), dict):
                pending.append((schema[key], f"{ptr}/{key}"))
        for key in _SUBSCHEMA_LIST:
            if isinstance(schema.get(key), list):
                pending.extend((sub, f"{ptr}/{key}/{i}") for i, sub in enumerate(schema[key]))
        for key in _SUBSCHEMA_MAP:
            if isinstance(schema.get(key), dict):
                pending.extend((sub, f"{ptr}/{key}/{escape_token(name)}")
                               for name, sub in schema[key].items())


def _shallow(value: Any) -> bool:
    return not isinstance(value, (dict, list))
