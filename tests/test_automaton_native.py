"""The automaton's construction in C (csrc/automaton_build.c) equals the Python construction it
replaces: a rule's minimal DFA state for state (random bodies, and the DFAs of real grammars),
the grammar's byte classes and every table; the budget and the deadline stop it as they stop
the Python one; and a DFA the C construction does not take (a subset that cannot complete)
goes to the Python one."""
from __future__ import annotations

import os
import time
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gxg import compile_budget, native
from gxg.compiler import automaton
from gxg.compiler.automaton import (_determinise, _minimal_dfa, _minimise, _Nfa, _NfaBuilder,
                                    build_automaton, clear_rule_dfa_cache)
from gxg.compiler.passes import prepare
from gxg.grammar.ir import CharClass, Choice, Grammar, GrammarError, Literal, Repeat, RuleRef
from gxg.grammar.ir import Sequence as Seq

from grammar_zoo import GRAMMAR_ZOO, zoo_grammar

REFS = {"x": 0, "y": 1}


@pytest.fixture(autouse=True)
def c_construction():
    if native.library("automaton_build.c") is None:
        pytest.skip("no C compiler here: the automaton is built in Python only")


def _python_minimal(nfa: _Nfa, name: str = "r", budget: int = 10**6):
    dfa = _determinise(nfa, name, budget, 500_000)
    return _minimise(dfa), dfa.num_states


def _same(c_built, python_built):
    (c_dfa, c_subsets), (py_dfa, py_subsets) = c_built, python_built
    assert c_subsets == py_subsets
    assert c_dfa.cuts == py_dfa.cuts
    assert c_dfa.final == py_dfa.final
    assert c_dfa.moves == py_dfa.moves
    assert [list(move) for move in c_dfa.moves] == [list(move) for move in py_dfa.moves]
    np.testing.assert_array_equal(c_dfa.flat.byte, py_dfa.flat.byte)
    assert c_dfa.flat.refs == py_dfa.flat.refs


# ------------------------------------------------------------------ random rule bodies

LEAVES = st.one_of(
    st.text(alphabet="abc;", max_size=3).map(lambda text: Literal(text.encode())),
    st.sampled_from(["é", "€", "😀", "ab"]).map(lambda text: Literal(text.encode())),
    st.lists(st.tuples(st.integers(0x20, 0x7E), st.integers(0, 3)), min_size=1, max_size=3)
      .map(lambda pairs: CharClass(tuple(sorted((lo, lo + width) for lo, width in pairs)))),
    st.sampled_from([CharClass(((0x80, 0x10FFFF),)), CharClass(((0x61, 0x7A), (0x3B1, 0x3C9))),
                     CharClass(((0x30, 0x39),), negated=True)]),
    st.sampled_from([RuleRef("x"), RuleRef("y")]),
)


def _compound(children):
    bounds = st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 3))).filter(
        lambda b: b[1] is None or b[1] >= b[0])
    return st.one_of(
        st.lists(children, min_size=2, max_size=4).map(lambda items: Seq(tuple(items))),
        st.lists(children, min_size=2, max_size=4).map(lambda items: Choice(tuple(items))),
        st.tuples(children, bounds).map(lambda a: Repeat(a[0], a[1][0], a[1][1])),
    )


BODIES = st.recursive(LEAVES, _compound, max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES)
def test_random_bodies_give_the_python_dfa_state_for_state(body):
    """Subset construction, minimisation and breadth-first numbering in C give the DFA the
    Python construction gives: same cuts, finality, moves in the same order, subset count."""
    nfa = _NfaBuilder("r", REFS, 500_000, {}).build(body)
    _same(_minimal_dfa(nfa, len(REFS), "r", 10**6, 500_000), _python_minimal(nfa))


# ------------------------------------------------------------------ whole grammars

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                      "age": {"type": "integer", "minimum": 0},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
     "required": ["name"]},
    {"type": "string", "pattern": "^[a-z]{2,5}(-[0-9]+)*$"},
    {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "null"},
               {"type": "array", "items": {"type": "string", "format": "date"}}]},
    {"type": "object", "additionalProperties": {"type": "string", "minLength": 3}},
]

GRAMMARS = [(name, lambda ebnf=ebnf: zoo_grammar(ebnf)) for name, ebnf, _ in GRAMMAR_ZOO] + [
    (f"schema{k}", lambda schema=schema: Grammar.from_json_schema(schema, strict_mode=False))
    for k, schema in enumerate(SCHEMAS)]


def _tables(grammar: Grammar, setting: str) -> dict:
    clear_rule_dfa_cache()  # no DFA from the other construction
    with mock.patch.dict(os.environ, {"GXG_NATIVE": setting}):
        try:
            built = build_automaton(grammar)
        except GrammarError as error:  # left recursion in a raw grammar: the same message
            return {"error": str(error)}
        finally:
            clear_rule_dfa_cache()
    return {name: value for name, value in vars(built).items() if not name.startswith("_")}


@pytest.mark.parametrize("name,make", GRAMMARS, ids=[g[0] for g in GRAMMARS])
@pytest.mark.parametrize("pruned", [True, False], ids=["prepared", "raw"])
def test_grammars_get_the_same_automaton(name, make, pruned, monkeypatch):
    """Every table of the automaton (node numbering, byte classes, next_node) is the Python
    construction's, for prepared grammars (rule DFAs and byte classes in C) and raw ones (byte
    classes in C)."""
    grammar = prepare(make()) if pruned else make()
    calls = []
    original = automaton._c_minimal_dfa
    monkeypatch.setattr(automaton, "_c_minimal_dfa",
                        lambda *a: calls.append(1) or original(*a))
    in_c, in_python = _tables(grammar, "1"), _tables(grammar, "0")
    assert in_c.keys() == in_python.keys()
    for table, value in in_c.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, in_python[table], err_msg=table)
        else:
            assert value == in_python[table], table
    assert calls or not pruned  # a prepared grammar's rules went through C


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.data())
def test_breadth_first_numbering_in_c_is_the_python_one(num_states, data):
    """``_breadth_first_flat`` (a bounded run's numbering) in C and in Python: the reachable
    states, breadth-first, each state's moves in letter order, whatever order the moves come
    in."""
    moves = data.draw(st.lists(st.tuples(st.integers(0, num_states - 1), st.integers(-3, 9),
                                         st.integers(0, num_states - 1)), max_size=120))
    moves = list({(source, letter): target for source, letter, target in moves}.items())
    flat = np.array([(s, l, t) for (s, l), t in moves], dtype=np.int64).reshape(-1, 3)
    in_c = automaton._breadth_first_flat(num_states, flat)
    with mock.patch.dict(os.environ, {"GXG_NATIVE": "0"}):
        in_python = automaton._breadth_first_flat(num_states, flat)
    np.testing.assert_array_equal(in_c, in_python)
    by_dicts = [dict(sorted((l, t) for (s, l), t in moves if s == state))
                for state in range(num_states)]
    assert in_python.tolist() == automaton._breadth_first(by_dicts, 0)


# ------------------------------------------------------------------ limits and fallback

BLOW_UP = Seq((Repeat(CharClass(((0x61, 0x62),)), 0, None), Literal(b"a"),
               Repeat(CharClass(((0x61, 0x62),)), 12, 12)))  # 2^13 subsets


def test_the_budget_stops_it_with_the_python_message():
    nfa = _NfaBuilder("r", {}, 500_000, {}).build(BLOW_UP)
    with pytest.raises(GrammarError) as from_c:
        _minimal_dfa(nfa, 0, "r", 1000, 500_000)
    with pytest.raises(GrammarError) as from_python:
        _python_minimal(nfa, budget=1000)
    assert str(from_c.value) == str(from_python.value)
    assert "the rules before 'r' use 499000" in str(from_c.value)


def test_the_deadline_stops_it():
    nfa = _NfaBuilder("r", {}, 500_000, {}).build(BLOW_UP)
    with compile_budget.within(0.001):
        time.sleep(0.002)
        with pytest.raises(compile_budget.CompileTimeoutError, match="in the automaton, at r"):
            _minimal_dfa(nfa, 0, "r", 10**6, 500_000)


def test_a_subset_that_cannot_complete_goes_to_the_python_construction(monkeypatch):
    """The C construction takes trim DFAs only (Valmari's partition needs them); a state that
    cannot complete is built in Python, with the same result as without C."""
    nfa = _Nfa()
    stuck = nfa.new_state()
    nfa.byte_edges += (0, 0x61, 0x61, 1, 0, 0x62, 0x62, stuck)
    python_calls = []
    monkeypatch.setattr(automaton, "_determinise",
                        lambda *a: python_calls.append(1) or _determinise(*a))
    built = _minimal_dfa(nfa, 0, "r", 10**6, 500_000)
    assert python_calls == [1]
    _same(built, _python_minimal(nfa))
    assert built[0].num_states == 3
