"""Numeric constraints as grammars (``gxg.grammar.json_numbers``), specified as tables of
(constraints, text, accepted?) decided with the reference recognizer, and hypothesis properties
against a brute-force oracle: exact decimal arithmetic on the spelling.

The contract under test (module docstring of json_numbers.py):
* exactness, always: an accepted text is an RFC 8259 number (for ``integer=True`` one without
  fraction or exponent) whose exact value satisfies every constraint;
* completeness, for the promised spellings: every canonical integer in range (``integer=True``);
  every valid spelling without exponent, and every exponent form ``M e X`` whose mantissa ``M``
  is valid and where X = 0, M = 0, X < 0 with M's side reaching 0 (no multipleOf), or X > 0 with
  M's side unbounded outward (``integer=False``).
"""
from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Dict, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg.grammar.ir import Choice, Grammar, GrammarError, Repeat, Rule, RuleRef, Sequence
from gxg.grammar.ir import iter_subexprs
from gxg.grammar.json_numbers import (RuleCollector, json_integer, json_number,
                                      json_number_language)
from gxg.testing import Recognizer

KEYWORDS = ("minimum", "maximum", "exclusive_minimum", "exclusive_maximum", "multiple_of")
RFC_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


# ----------------------------------------------------------------------------- harness

def build(integer: bool, constraints: Dict) -> Optional[Grammar]:
    """The grammar of the language (root rule "root" plus the helper rules), None if empty."""
    rules = RuleCollector()
    expr = json_number_language(integer=integer, new_rule=rules, **constraints)
    if expr is None:
        return None
    return Grammar((Rule("root", expr),) + rules.rules())


_RECOGNIZERS: Dict = {}


def recognizer(integer: bool, constraints: Dict) -> Optional[Recognizer]:
    key = (integer, tuple(sorted((k, type(v).__name__, repr(v)) for k, v in constraints.items())))
    if key not in _RECOGNIZERS:
        grammar = build(integer, constraints)
        _RECOGNIZERS[key] = None if grammar is None else Recognizer(grammar)
    return _RECOGNIZERS[key]


def accepts(integer: bool, constraints: Dict, text: str) -> bool:
    matcher = recognizer(integer, constraints)
    return matcher is not None and matcher.accepts(text)


def exact(value) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


# ----------------------------------------------------------------------------- the oracle

def valid(integer: bool, constraints: Dict, text: str) -> bool:
    """Brute force: the text is a JSON number of the right form whose exact value satisfies
    every constraint."""
    if not RFC_NUMBER.fullmatch(text):
        return False
    if integer and any(c in text for c in ".eE"):
        return False
    value = Decimal(text)
    checks = {"minimum": lambda b: value >= b, "maximum": lambda b: value <= b,
              "exclusive_minimum": lambda b: value > b, "exclusive_maximum": lambda b: value < b}
    for keyword, check in checks.items():
        if constraints.get(keyword) is not None and not check(exact(constraints[keyword])):
            return False
    step = constraints.get("multiple_of")
    if step is not None and (Fraction(value) / Fraction(exact(step))).denominator != 1:
        return False
    return True


def finite_bounds(constraints: Dict, *keywords):
    return [exact(constraints[k]) for k in keywords
            if constraints.get(k) is not None and exact(constraints[k]).is_finite()]


def promised(integer: bool, constraints: Dict, text: str) -> bool:
    """The valid texts the docstring promises to accept."""
    if not valid(integer, constraints, text):
        return False
    mantissa, _, exponent = text.lower().partition("e")
    if not exponent:
        return True
    if not valid(integer, constraints, mantissa):
        return False
    m, x = Decimal(mantissa), int(exponent)
    if x == 0 or m == 0:
        return True
    lowers = finite_bounds(constraints, "minimum", "exclusive_minimum")
    uppers = finite_bounds(constraints, "maximum", "exclusive_maximum")
    if m > 0:
        reaches_zero, open_outward = all(b <= 0 for b in lowers), not uppers
    else:
        reaches_zero, open_outward = all(b >= 0 for b in uppers), not lowers
    if x < 0:
        return reaches_zero and constraints.get("multiple_of") is None
    return open_outward


def check(integer: bool, constraints: Dict, text: str) -> None:
    accepted = accepts(integer, constraints, text)
    if accepted:
        assert valid(integer, constraints, text), ("accepted but invalid", constraints, text)
    if promised(integer, constraints, text):
        assert accepted, ("promised but rejected", constraints, text)


# ----------------------------------------------------------------------------- tables

INTEGER_TABLE = [
    ({"minimum": 0}, "0", True),
    ({"minimum": 0}, "-0", True),            # value 0: accepted when 0 is in range
    ({"minimum": 0}, "-1", False),
    ({"minimum": 0}, "7", True),
    ({"minimum": 0}, "123456789012345678901234567890", True),
    ({"minimum": 0}, "01", False),
    ({"minimum": 0}, "1.0", False),          # narrowing: integers without fraction
    ({"minimum": 0}, "1e2", False),          # ... and without exponent
    ({"minimum": 0}, "+1", False),
    ({"exclusive_minimum": 0}, "0", False),
    ({"exclusive_minimum": 0}, "-0", False),
    ({"exclusive_minimum": 0}, "1", True),
    ({"minimum": 0.5}, "0", False),          # float bound on integers: minimum 0.5 is >= 1
    ({"minimum": 0.5}, "1", True),
    ({"maximum": -0.5}, "-1", True),
    ({"maximum": -0.5}, "-0", False),
    ({"exclusive_maximum": 2.5}, "2", True),
    ({"exclusive_maximum": 2.5}, "3", False),
    ({"exclusive_maximum": 3}, "3", False),
    ({"minimum": 1, "maximum": 100}, "1", True),
    ({"minimum": 1, "maximum": 100}, "100", True),
    ({"minimum": 1, "maximum": 100}, "55", True),
    ({"minimum": 1, "maximum": 100}, "0", False),
    ({"minimum": 1, "maximum": 100}, "101", False),
    ({"minimum": 1, "maximum": 100}, "1000", False),
    ({"minimum": -100, "maximum": -10}, "-10", True),
    ({"minimum": -100, "maximum": -10}, "-100", True),
    ({"minimum": -100, "maximum": -10}, "-9", False),
    ({"minimum": -100, "maximum": -10}, "-101", False),
    ({"minimum": -100, "maximum": -10}, "10", False),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, str(2**63 - 1), True),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, str(2**63), False),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, str(-2**63), True),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, str(-2**63 - 1), False),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, "9223372036854775799", True),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, "9999999999999999999", False),
    ({"minimum": -2**63, "maximum": 2**63 - 1}, "10000000000000000000", False),
    ({"minimum": 5, "exclusive_minimum": 5}, "5", False),     # both bounds apply
    ({"minimum": 5, "exclusive_minimum": 5}, "6", True),
    ({"maximum": 20, "exclusive_maximum": 10}, "9", True),
    ({"maximum": 20, "exclusive_maximum": 10}, "10", False),
    ({"maximum": 1e308}, "1" + "0" * 308, True),
    ({"maximum": 1e308}, "1" + "0" * 307 + "1", False),
    ({"maximum": float("inf")}, "-5", True),                   # infinite bounds: no bound
]

NUMBER_TABLE = [
    ({"maximum": 1.5}, "1.5", True),
    ({"maximum": 1.5}, "1.50", True),
    ({"maximum": 1.5}, "1.5000", True),
    ({"maximum": 1.5}, "1.4999999999", True),
    ({"maximum": 1.5}, "1.50001", False),
    ({"maximum": 1.5}, "1.5001", False),
    ({"maximum": 1.5}, "2", False),
    ({"maximum": 1.5}, "-1000.5", True),
    ({"maximum": 1.5}, "1.5e0", True),       # zero exponents never change the value
    ({"maximum": 1.5}, "1.5E-00", True),
    ({"maximum": 1.5}, "1e-5", True),        # 0 is in range: negative exponents shrink
    ({"maximum": 1.5}, "15e-1", False),      # narrowing: mantissa 15 is out of range
    ({"maximum": 1.5}, "1e1", False),
    ({"maximum": 1.5}, "-1e300", True),      # the negative side is unbounded
    ({"exclusive_maximum": 10}, "10", False),
    ({"exclusive_maximum": 10}, "10.0", False),
    ({"exclusive_maximum": 10}, "10.000", False),
    ({"exclusive_maximum": 10}, "1e1", False),
    ({"exclusive_maximum": 10}, "9.999", True),
    ({"exclusive_maximum": 10}, "9.999e0", True),
    ({"minimum": 0}, "0", True),
    ({"minimum": 0}, "-0", True),
    ({"minimum": 0}, "-0.0", True),
    ({"minimum": 0}, "-0e5", True),
    ({"minimum": 0}, "0.0", True),
    ({"minimum": 0}, "-1e-9", False),
    ({"minimum": 0}, "-1", False),
    ({"minimum": 0}, "1e400", True),
    ({"minimum": 0}, "1e+16", True),         # json.dumps(1e16)
    ({"minimum": 0}, "1e-05", True),         # json.dumps(0.00001)
    ({"minimum": 0}, "00", False),
    ({"minimum": 0}, "1.", False),
    ({"minimum": 0}, ".5", False),
    ({"minimum": 0}, "1e", False),
    ({"exclusive_minimum": 0}, "0", False),
    ({"exclusive_minimum": 0}, "0.0", False),
    ({"exclusive_minimum": 0}, "0e1", False),
    ({"exclusive_minimum": 0}, "-0", False),
    ({"exclusive_minimum": 0}, "0.000001", True),
    ({"exclusive_minimum": 0}, "1e-5", True),
    ({"exclusive_minimum": 0}, "5E+300", True),
    ({"maximum": 0}, "0", True),
    ({"maximum": 0}, "0e5", True),
    ({"maximum": 0}, "-5e10", True),
    ({"maximum": 0}, "-5e-10", True),
    ({"maximum": 0}, "1e-9", False),
    ({"exclusive_maximum": 0}, "-0.0", False),
    ({"exclusive_maximum": 0}, "-0.0001", True),
    ({"minimum": 0.1}, "0.1", True),
    ({"minimum": 0.1}, "0.09999", False),
    ({"minimum": 0.1}, "0.1000001", True),
    ({"minimum": 0.1}, "1e-0", True),
    ({"minimum": 0.1}, "1e-1", False),       # narrowing: the range does not reach 0
    ({"minimum": 0.1}, "1e5", True),         # unbounded above: positive exponents grow
    ({"minimum": 1.25}, "1.2", False),       # a prefix of the bound's digits is smaller
    ({"minimum": 1.25}, "1.250", True),
    ({"exclusive_maximum": 1.25}, "1.2", True),
    ({"exclusive_maximum": 1.25}, "1.2500", False),
    ({"minimum": 0, "maximum": 1}, "1e-05", True),
    ({"minimum": 0, "maximum": 1}, "0.5E-3", True),
    ({"minimum": 0, "maximum": 1}, "1.0", True),
    ({"minimum": 0, "maximum": 1}, "1.01", False),
    ({"minimum": 0, "maximum": 1}, "1e0", True),
    ({"minimum": 0, "maximum": 1}, "1e1", False),
    ({"minimum": 0, "maximum": 1}, "1e+16", False),
    ({"minimum": -1e-05, "maximum": 1e-05}, "0.00001", True),
    ({"minimum": -1e-05, "maximum": 1e-05}, "-0.00001", True),
    ({"minimum": -1e-05, "maximum": 1e-05}, "0.000011", False),
    ({"minimum": -1e-05, "maximum": 1e-05}, "1e-05", False),   # narrowing: mantissa 1
    ({"minimum": -1e-05, "maximum": 1e-05}, "0.00001e-0", True),
    ({"minimum": -1e-05, "maximum": 1e-05}, "0.00001e-3", True),
    ({"minimum": 0.25, "exclusive_maximum": 0.5}, "0.25", True),
    ({"minimum": 0.25, "exclusive_maximum": 0.5}, "0.4999", True),
    ({"minimum": 0.25, "exclusive_maximum": 0.5}, "0.5", False),
    ({"minimum": 0.25, "exclusive_maximum": 0.5}, "0.2499", False),
    ({"minimum": Decimal("-12.5"), "maximum": Decimal("1234.5")}, "-12.50", True),
    ({"minimum": Decimal("-12.5"), "maximum": Decimal("1234.5")}, "-12.51", False),
    ({"minimum": Decimal("-12.5"), "maximum": Decimal("1234.5")}, "1234.4999", True),
    ({"minimum": Decimal("-12.5"), "maximum": Decimal("1234.5")}, "999", True),
    ({"minimum": Decimal("-12.5"), "maximum": Decimal("1234.5")}, "1235", False),
    ({"minimum": 5e-324, "maximum": 1.7976931348623157e308}, "0." + "0" * 323 + "5", True),
    ({"minimum": 5e-324, "maximum": 1.7976931348623157e308}, "0." + "0" * 323 + "49", False),
    ({"minimum": 5e-324, "maximum": 1.7976931348623157e308}, "5e-324", False),  # narrowing
    ({"minimum": 5e-324, "maximum": 1.7976931348623157e308}, "17976931348623157" + "0" * 292,
     True),
    ({"minimum": 5e-324, "maximum": 1.7976931348623157e308}, "17976931348623157" + "0" * 291
     + "1", False),
]

MULTIPLE_TABLE = [
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "0", True),
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "7", True),
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "994", True),
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "1001", False),  # 7 * 143
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "8", False),
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, "-7", False),
    (True, {"multiple_of": 3}, "-3", True),
    (True, {"multiple_of": 3}, "123456789", True),
    (True, {"multiple_of": 3}, "10", False),
    (True, {"multiple_of": 100}, "100", True),
    (True, {"multiple_of": 100}, "-200", True),
    (True, {"multiple_of": 100}, "1100", True),
    (True, {"multiple_of": 100}, "1010", False),
    (True, {"multiple_of": 100}, "-0", True),
    (True, {"multiple_of": 100, "minimum": 150}, "200", True),
    (True, {"multiple_of": 100, "minimum": 150}, "100", False),
    (True, {"multiple_of": 100, "exclusive_maximum": -150}, "-200", True),
    (True, {"multiple_of": 100, "exclusive_maximum": -150}, "-100", False),
    (True, {"multiple_of": 30}, "60", True),           # 10 * 3: trailing zero and residue
    (True, {"multiple_of": 30}, "63", False),
    (True, {"multiple_of": 30}, "70", False),
    (True, {"multiple_of": 70}, "1470", True),
    (True, {"multiple_of": 70}, "1400", True),
    (True, {"multiple_of": 70}, "147", False),
    (True, {"multiple_of": 0.5}, "7", True),          # every integer is a multiple of 0.5
    (True, {"multiple_of": 2.5}, "5", True),          # integer multiples of 2.5: of 5
    (True, {"multiple_of": 2.5}, "2", False),
    (True, {"multiple_of": 1e300, "minimum": -1e301}, "-1" + "0" * 301, True),
    (True, {"multiple_of": 1e300, "minimum": -1e301}, "-2" + "0" * 301, False),
    (True, {"multiple_of": 1e300, "minimum": -1e301}, "1" + "0" * 299, False),
    (False, {"multiple_of": 0.01}, "1.500", True),     # trailing zeros: still a multiple
    (False, {"multiple_of": 0.01}, "19.99", True),     # exact decimals (jsonschema says no)
    (False, {"multiple_of": 0.01}, "0.010", True),
    (False, {"multiple_of": 0.01}, "0.001", False),
    (False, {"multiple_of": 0.01}, "1.234", False),
    (False, {"multiple_of": 0.01}, "1e2", True),       # unbounded above: X > 0 keeps it
    (False, {"multiple_of": 0.01}, "1e-2", False),     # narrowing: no X < 0 with multipleOf
    (False, {"multiple_of": 0.01}, "0e-7", True),
    (False, {"multiple_of": 0.1}, "0.3", True),
    (False, {"multiple_of": 0.1}, "0.7", True),
    (False, {"multiple_of": 0.1}, "0.35", False),
    (False, {"multiple_of": 0.5}, "2.50", True),
    (False, {"multiple_of": 0.5}, "-0.5", True),
    (False, {"multiple_of": 0.5}, "2.25", False),
    (False, {"multiple_of": 0.25}, "0.75", True),
    (False, {"multiple_of": 0.25}, "0.125", False),
    (False, {"multiple_of": 2.5, "minimum": 0}, "12.5", True),
    (False, {"multiple_of": 2.5, "minimum": 0}, "12.50", True),
    (False, {"multiple_of": 2.5, "minimum": 0}, "13", False),
    (False, {"multiple_of": 2.5, "minimum": 0}, "-2.5", False),
    (False, {"multiple_of": 7}, "14.0", True),
    (False, {"multiple_of": 7}, "14.5", False),
    (False, {"multiple_of": 30}, "60.00", True),
    (False, {"multiple_of": 30}, "63.0", False),
    (False, {"multiple_of": 0.3}, "0.60", True),
    (False, {"multiple_of": 0.3}, "0.63", False),
    (False, {"multiple_of": 10, "minimum": 15}, "20", True),
    (False, {"multiple_of": 10, "minimum": 15}, "10.0", False),
    (False, {"multiple_of": 1}, "3.000", True),
    (False, {"multiple_of": 1}, "3.001", False),
    (False, {"multiple_of": 10, "maximum": 1234.5, "exclusive_minimum": -50}, "1230.0", True),
    (False, {"multiple_of": 10, "maximum": 1234.5, "exclusive_minimum": -50}, "1240", False),
    (False, {"multiple_of": 10, "maximum": 1234.5, "exclusive_minimum": -50}, "-50", False),
    (False, {"multiple_of": 10, "maximum": 1234.5, "exclusive_minimum": -50}, "-40", True),
    (False, {"multiple_of": 0.01, "maximum": 1}, "1.00", True),
    (False, {"multiple_of": 0.01, "maximum": 1}, "1.01", False),
    (False, {"multiple_of": 0.01, "maximum": 1}, "1e0", True),
    (False, {"multiple_of": 0.01, "maximum": 1}, "1e-1", False),
]


@pytest.mark.parametrize("constraints, text, expected", INTEGER_TABLE)
def test_integer_table(constraints, text, expected):
    assert accepts(True, constraints, text) is expected
    check(True, constraints, text)


@pytest.mark.parametrize("constraints, text, expected", NUMBER_TABLE)
def test_number_table(constraints, text, expected):
    assert accepts(False, constraints, text) is expected
    check(False, constraints, text)


@pytest.mark.parametrize("integer, constraints, text, expected", MULTIPLE_TABLE)
def test_multiple_of_table(integer, constraints, text, expected):
    assert accepts(integer, constraints, text) is expected
    check(integer, constraints, text)


EMPTY_TABLE = [
    (True, {"minimum": 0.2, "maximum": 0.8}),
    (True, {"exclusive_minimum": 1, "exclusive_maximum": 2}),
    (False, {"minimum": 2, "maximum": 1}),
    (False, {"exclusive_minimum": 1, "maximum": 1}),
    (False, {"minimum": 1, "exclusive_maximum": 1}),
    (True, {"multiple_of": 7, "minimum": 1, "maximum": 6}),
    (False, {"multiple_of": 0.1, "exclusive_minimum": 0.1, "exclusive_maximum": 0.2}),
    (False, {"minimum": float("inf")}),
    (True, {"maximum": float("-inf")}),
]


@pytest.mark.parametrize("integer, constraints", EMPTY_TABLE)
def test_no_value_in_range_gives_none(integer, constraints):
    assert json_number_language(integer=integer, new_rule=RuleCollector(), **constraints) is None


ERROR_TABLE = [
    ({"minimum": "1"}, "'minimum' must be a number"),
    ({"maximum": True}, "'maximum' must be a number"),
    ({"exclusive_minimum": float("nan")}, "'exclusiveMinimum' must be a number"),
    ({"exclusive_maximum": None, "maximum": [1]}, "'maximum' must be a number"),
    ({"multiple_of": 0}, "'multipleOf' must be a positive number"),
    ({"multiple_of": -0.5}, "'multipleOf' must be a positive number"),
    ({"multiple_of": "2"}, "'multipleOf' must be a positive number"),
    ({"multiple_of": float("inf")}, "unsupported keyword 'multipleOf'"),
    ({"multiple_of": 30001}, "unsupported keyword 'multipleOf'"),
    ({"multiple_of": 19999, "minimum": 0, "maximum": 10**30}, "unsupported keyword 'multipleOf'"),
    ({"minimum": Decimal("1e5000")}, "unsupported keyword 'minimum'"),
]


@pytest.mark.parametrize("constraints, message", ERROR_TABLE)
@pytest.mark.parametrize("integer", [True, False])
def test_impossible_constraints_raise(integer, constraints, message):
    with pytest.raises(GrammarError, match=re.escape(message)):
        json_number_language(integer=integer, new_rule=RuleCollector(), **constraints)


UNCONSTRAINED_TABLE = [
    ("0", True, True), ("-0", True, True), ("-12", True, True), ("012", False, False),
    ("1.5", False, True), ("-0.0e-0", False, True), ("1E+16", False, True), ("1.", False, False),
    (".1", False, False), ("1e", False, False), ("+1", False, False), ("", False, False),
]


@pytest.mark.parametrize("text, integer_ok, number_ok", UNCONSTRAINED_TABLE)
def test_unconstrained_languages(text, integer_ok, number_ok):
    for expr, expected in ((json_integer(), integer_ok), (json_number(), number_ok)):
        assert Recognizer(Grammar((Rule("root", expr),))).accepts(text) is expected
    # No constraint (or an infinite bound, or a vacuous multipleOf) is the plain language.
    assert json_number_language(integer=True, new_rule=RuleCollector()) == json_integer()
    assert json_number_language(integer=True, multiple_of=0.5, maximum=float("inf"),
                                new_rule=RuleCollector()) == json_integer()
    assert json_number_language(integer=False, new_rule=RuleCollector()) == json_number()


# ----------------------------------------------------------------------------- grammar sizes

def alternatives(grammar: Grammar) -> int:
    """Choice alternatives over all rule bodies (a body that is no choice counts one)."""
    total = 0
    for rule in grammar.rules:
        total += sum(len(node.alternatives) for node in iter_subexprs(rule.body)
                     if isinstance(node, Choice)) or 1
    return total


SIZE_TABLE = [  # (integer, constraints, at most this many rules, at most this many alternatives)
    # code_point_dfa.dfa_to_expr puts what nests deeper than MAX_INLINE_DEPTH (24 levels, about
    # 12 digits of a bound) and shared states bigger than 4 nodes into rules of their own.
    (True, {"minimum": 0}, 1, 2),
    (True, {"exclusive_minimum": 1000}, 1, 8),
    (True, {"minimum": 1, "maximum": 100}, 1, 2),
    (True, {"minimum": 0, "maximum": 2**63 - 1}, 2, 40),
    (True, {"minimum": -2**63, "maximum": 2**63 - 1}, 3, 80),
    (False, {"maximum": 1.5}, 1, 12),
    (False, {"minimum": 0}, 1, 8),
    (True, {"multiple_of": 10}, 1, 3),
    (True, {"multiple_of": 100, "minimum": 0, "maximum": 10**6}, 1, 6),
    (True, {"multiple_of": 7, "minimum": 0, "maximum": 1000}, 10, 80),
    (True, {"multiple_of": 7}, 8, 70),
    (False, {"multiple_of": 0.01}, 2, 16),
]


@pytest.mark.parametrize("integer, constraints, max_rules, max_alternatives", SIZE_TABLE)
def test_grammars_stay_small(integer, constraints, max_rules, max_alternatives):
    grammar = build(integer, constraints)
    assert len(grammar.rules) <= max_rules, str(grammar)
    assert alternatives(grammar) <= max_alternatives, str(grammar)
    assert Grammar.from_ebnf(str(grammar)) == grammar  # printable in the EBNF dialect


def test_cyclic_rules_are_right_linear():
    # multipleOf over an unbounded range needs recursive rules; each refers to another only as
    # the last item of an alternative (the runtime runs such calls as tail calls).
    grammar = build(True, {"multiple_of": 7, "minimum": 10})
    assert len(grammar.rules) > 1
    for rule in grammar.rules[1:]:
        body = rule.body
        for alternative in (body.alternatives if isinstance(body, Choice) else (body,)):
            items = alternative.items if isinstance(alternative, Sequence) else (alternative,)
            for item in items[:-1]:
                assert not any(isinstance(n, RuleRef) for n in iter_subexprs(item)), str(grammar)
    matcher = Recognizer(grammar)
    assert matcher.accepts("7" * 60 + "0" * 0) is (int("7" * 60) % 7 == 0)
    assert matcher.accepts(str(7 * 10**40 + 7))
    assert not matcher.accepts(str(7 * 10**40 + 8))


@pytest.mark.parametrize("low, high, written", [
    (1, 99, "[1-9] [0-9]?"), (10, 999, "[1-9] [0-9]{1,2}"), (1, 9, "[1-9]"),
    (10, 99, "[1-9] [0-9]"), (100, 1000, None), (99, 1000, None), (2, 99, None), (1, 98, None),
])
def test_merged_alternatives_keep_the_language(low, high, written):
    # A bound that excludes no integer of its length (1, 10, 99, 999) is written together with
    # the lengths between the bounds: [1, 99] is "[1-9] [0-9]?", not "[1-9] | [1-9] [0-9]".
    grammar = build(True, {"minimum": low, "maximum": high})
    if written is not None:
        assert str(grammar) == f"root ::= {written}\n"
    matcher = Recognizer(grammar)
    for n in range(0, 1100):
        assert matcher.accepts(str(n)) is (low <= n <= high), n
    assert not matcher.accepts("0" + str(low))


def test_rule_collector_protocol():
    rules = RuleCollector(taken=("root", "x"))
    reserved = rules("x", None)
    assert reserved.name == "x_2"
    with pytest.raises(GrammarError):
        rules.rules()  # reserved, not yet defined
    assert rules(reserved, Sequence(())) == reserved
    assert rules("x", Repeat(reserved, 0, 1)).name == "x_3"
    assert [rule.name for rule in rules.rules()] == ["x_2", "x_3"]
    with pytest.raises(GrammarError):
        rules(reserved, Sequence(()))  # defined twice


# ----------------------------------------------------------------------------- properties

small_ints = st.integers(-300, 300)
huge_ints = st.sampled_from([2**63 - 1, -2**63, 2**53, -(2**31), 10**20, -10**20 - 7])
few_digit_decimals = st.builds(lambda n, p: Decimal(n).scaleb(-p), st.integers(-3000, 3000),
                               st.integers(0, 3))
floats = st.sampled_from([0.1, 0.5, 1.5, -2.75, 1e-05, 1e16, -0.0, 0.0, 3.14159, -0.001])
bound_values = st.one_of(small_ints, small_ints, few_digit_decimals, few_digit_decimals, floats,
                         huge_ints)
bounds = st.fixed_dictionaries({}, optional={k: bound_values for k in KEYWORDS[:4]})

# Random spellings, valid or not (exactness must hold for every string).
any_spelling = st.from_regex(r"-?[0-9]{0,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{0,2})?", fullmatch=True)

PERTURBATIONS = [Decimal(0), Decimal(1), Decimal("0.1"), Decimal("0.001"), Decimal("1e-12")]


def spellings(value: Decimal):
    """Several spellings of one value: plain, with trailing zeros, with exponents."""
    with localcontext() as context:
        context.prec = 200
        plain = format(value, "f")
        padded = plain + ("0" if "." in plain else ".0")
        forms = [plain, padded, padded + "00"]
        for x in (-3, -1, 1, 2):
            forms.append(f"{format(value.scaleb(-x), 'f')}e{x}")
        forms.append(f"{plain}E+0")
    return forms


def candidates(data, constraints, integer: bool):
    """Texts near every bound (just inside, on, just outside), plus random ones."""
    values = []
    for keyword in KEYWORDS[:4]:
        if constraints.get(keyword) is None or not exact(constraints[keyword]).is_finite():
            continue
        bound = exact(constraints[keyword])
        for delta in (PERTURBATIONS if not integer else [Decimal(0), Decimal(1), Decimal(2)]):
            values += [bound + delta, bound - delta]
    values += [Decimal(0), Decimal(data.draw(st.integers(-10**6, 10**6))).scaleb(
        -data.draw(st.integers(0, 4)))]
    texts = []
    for value in values:
        if integer:
            value = value.to_integral_value()
            texts.append(format(value, "f"))
        else:
            texts += spellings(value)
    texts += [data.draw(any_spelling) for _ in range(4)]
    texts += ["-0", "0", "1.0", "1e1"]
    return texts


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(constraints=bounds, data=st.data())
def test_integer_bounds_property(constraints, data):
    for text in candidates(data, constraints, integer=True):
        check(True, constraints, text)


@SETTINGS
@given(constraints=bounds, data=st.data())
def test_number_bounds_property(constraints, data):
    for text in candidates(data, constraints, integer=False):
        check(False, constraints, text)


@SETTINGS
@given(step=st.one_of(st.integers(1, 50), st.sampled_from([10, 30, 70, 100, 1000])),
       low=st.one_of(st.none(), st.integers(-400, 400)),
       span=st.one_of(st.none(), st.integers(0, 600)), data=st.data())
def test_integer_multiple_of_property(step, low, span, data):
    constraints = {"multiple_of": step}
    if low is not None:
        constraints["minimum"] = low
    if span is not None:
        constraints["maximum"] = (low if low is not None else 0) + span
    centre = low if low is not None else 0
    texts = [str(centre + i) for i in range(-3, 4)]
    near_multiples = st.builds(lambda n, off: step * n + off, st.integers(-50, 50),
                               st.sampled_from([0, 0, 1, -1]))
    texts += [str(data.draw(near_multiples)) for _ in range(8)]
    if span is not None:
        texts += [str(centre + span + i) for i in (-1, 0, 1)]
    for text in texts:
        check(True, constraints, text)


@SETTINGS
@given(step=st.sampled_from([0.01, 0.1, 0.5, 0.25, 2.5, Decimal("0.05")]),
       constraints=st.fixed_dictionaries({}, optional={
           "minimum": few_digit_decimals, "exclusive_maximum": few_digit_decimals}),
       integer=st.booleans(), data=st.data())
def test_decimal_multiple_of_property(step, constraints, integer, data):
    constraints = dict(constraints, multiple_of=step)
    texts = candidates(data, constraints, integer)
    for _ in range(6):
        multiple = exact(step) * data.draw(st.integers(-2000, 2000))
        texts += spellings(multiple)[:2] + [format(multiple + Decimal("0.001"), "f")]
    for text in texts:
        check(integer, constraints, text)
