"""Grammar.concat and Grammar.union: a new root over the inputs' roots, rule names made unique,
the languages combined (checked with the reference recognizer), printable and parsable back."""
from __future__ import annotations

import pytest

from gxg.grammar import Grammar, GrammarError
from gxg.testing import grammar_accepts

A = Grammar.from_ebnf('root ::= "a" b\nb ::= "x"')
B = Grammar.from_ebnf('root ::= "b" | "c"')
DIGITS = Grammar.from_ebnf('root ::= [0-9]+', root_rule_name="root")


@pytest.mark.parametrize("combine,grammars,text,expected", [
    ("union", (A, B), "ax", True),           # XGrammar's documented example
    ("union", (A, B), "b", True),
    ("union", (A, B), "axb", False),
    ("union", (A, B), "", False),
    ("concat", (A, B), "axb", True),
    ("concat", (A, B), "axc", True),
    ("concat", (A, B), "ax", False),
    ("concat", (A, B), "bax", False),
    ("concat", (B, B, DIGITS), "bc42", True),
    ("concat", (B, B, DIGITS), "bc", False),
    ("union", (DIGITS,), "7", True),
    ("concat", (DIGITS,), "", False),
])
def test_combined_language(combine, grammars, text, expected):
    grammar = getattr(Grammar, combine)(*grammars)
    assert grammar_accepts(grammar, text) is expected


def test_rule_names_are_made_unique_and_the_result_round_trips():
    both = Grammar.concat(A, A)
    names = both.rule_names
    assert len(names) == len(set(names)) == 1 + 2 * len(A.rules)
    assert both.root_rule_name == "root"
    assert Grammar.from_ebnf(str(both)) == both
    assert grammar_accepts(both, "axax") and not grammar_accepts(both, "ax")


def test_combining_nothing_is_an_error():
    with pytest.raises(GrammarError):
        Grammar.union()
    with pytest.raises(TypeError):
        Grammar.concat(A, "root ::= \"a\"")
