"""The automaton's construction in C (csrc/automaton_build.c) equals the Python construction it
replaces: a rule's minimal DFA state for state (random bodies, and the DFAs of real grammars),
the grammar's byte classes and every table; the budget and the deadline stop it as they stop
the Python one; and a DFA the C construction does not take (a subset that cannot complete)
goes to the Python one."""
from __future__ import annotations

import array
import ctypes
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
from gxg.grammar.ir import (CharClass, Choice, Grammar, GrammarError, Literal, Repeat, RuleRef,
                            normalize)
from gxg.grammar.ir import Sequence as Seq

from automaton_tables import assert_same_tables, automaton_tables
from grammar_zoo import GRAMMAR_ZOO, zoo_grammar

REFS = {"x": 0, "y": 1}


@pytest.fixture(autouse=True)
def c_construction():
    if native.library("automaton_build.c", automaton.NATIVE_DEFINES) is None:
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


_PROGRAM_NFA_ARGS = automaton._RULE_DFA_PROGRAM_ARGS[:9] + (ctypes.c_int64, ctypes.c_void_p)


def _program_nfa(key, builder):
    """(status, the NFA as ``gxg_program_nfa`` builds it from the key's program, or None)."""
    kernel = automaton._native("gxg_program_nfa", _PROGRAM_NFA_ARGS, ctypes.c_void_p)
    program = automaton._program(key.items) if isinstance(key, automaton._BodyKey) else key
    arguments, keep = automaton._program_arguments(program, builder)
    status = (ctypes.c_int64 * 3)()
    pointer = kernel(*arguments, len(builder.rule_ids), builder.max_nodes, status)
    if not pointer:
        return status[0], None
    header = (ctypes.c_int32 * 5).from_address(pointer)
    length, num_states, num_byte, num_ref, num_eps = header
    ints = list((ctypes.c_int32 * length).from_address(pointer))[5:]
    automaton._free(pointer)
    nfa = _Nfa()
    nfa.num_states = num_states
    nfa.byte_edges = ints[:4 * num_byte]
    nfa.ref_edges = ints[4 * num_byte:4 * num_byte + 3 * num_ref]
    nfa.epsilon = ints[4 * num_byte + 3 * num_ref:]
    assert len(nfa.epsilon) == 2 * num_eps
    return status[0], nfa


def _nfa_lists(nfa):
    return nfa.num_states, list(nfa.byte_edges), list(nfa.ref_edges), list(nfa.epsilon)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES)
def test_the_nfa_of_a_program_is_the_builders_edge_for_edge(body):
    """``gxg_program_nfa`` places a rule's program (``_body_key``) as ``_NfaBuilder`` places the
    body: the same states and edges in the same order, for bodies with shared subexpressions
    (BACK operations) too; and the DFA built from the program is the one from that NFA."""
    body = normalize(body)  # what a rule holds
    shared = normalize(Seq((body, Choice((body, Literal(b";"))), Repeat(body, 0, None))))
    for expr in (body, shared):
        key, names = automaton._body_key(expr)
        builder = _NfaBuilder("r", names, 500_000, {})
        status, from_program = _program_nfa(key, builder)
        assert status == 0
        expected = builder.build(expr)
        assert _nfa_lists(from_program) == _nfa_lists(expected)
        dfa, subsets, nfa_states = automaton._c_program_dfa(key, len(names), builder, 10**6)
        assert nfa_states == expected.num_states - 2
        _same((dfa, subsets), _python_minimal(expected))


def test_a_program_past_max_nodes_gets_the_builders_message():
    """A program whose NFA would pass max_nodes is left to the builder, which raises its
    message (the innermost repetition too large first)."""
    body = Seq((Literal(b"a"), Repeat(Seq((CharClass(((0x61, 0x7A),)), Literal(b"b"))), 0, 900)))
    key, names = automaton._body_key(body)
    builder = _NfaBuilder("r", names, 1000, {})
    assert _program_nfa(key, builder) == (automaton.C_STATUS["NFA_TOO_LARGE"], None)
    assert automaton._c_program_dfa(key, 0, builder, 10**6) is None
    message = (r"the repetition \(\[a-z\] \"b\"\)\{0,900\} would need 1799 automaton nodes, "
               "more than the limit of 1000")
    with pytest.raises(GrammarError, match=message):
        automaton._rule_dfa("r", body, {}, 1000, {}, {}, 10**6, True)


def _program(*ints):
    """A hand-written program: (its int32 code, the blob b"ab", one class [a])."""
    return array.array("i", ints).tobytes(), b"ab", (CharClass(((0x61, 0x61),)),)


OPS = {name: code for name, (code, _) in automaton.PROGRAM_OPS.items()}
MALFORMED = {
    "empty": (),
    "unknown operation": (99, 0),
    "truncated": (OPS["SEQUENCE"], 2, OPS["REF"], 0),
    "two programs": (OPS["REF"], 0, OPS["REF"], 0),
    "literal past the blob": (OPS["LITERAL"], 1, 5),
    "negative literal": (OPS["LITERAL"], -1, 1),
    "class out of range": (OPS["CLASS"], 1),
    "reference out of range": (OPS["REF"], 1),
    "empty sequence": (OPS["SEQUENCE"], 0),
    "repeat max 0": (OPS["REPEAT"], 0, 0, OPS["REF"], 0),
    "repeat max below min": (OPS["REPEAT"], 3, 2, OPS["REF"], 0),
    "back to itself": (OPS["SEQUENCE"], 2, OPS["REF"], 0, OPS["BACK"], 0),
    "back forward": (OPS["SEQUENCE"], 2, OPS["BACK"], 4, OPS["REF"], 0),
    "back into an operation": (OPS["SEQUENCE"], 2, OPS["LITERAL"], 0, 2, OPS["BACK"], 3),
}


@pytest.mark.parametrize("ints", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_program_is_refused_not_read(ints):
    """The C construction checks a program before it places it (BAD_PROGRAM: the caller then
    builds the rule in Python)."""
    builder = _NfaBuilder("r", {"x": 0}, 1000, {})
    assert _program_nfa(_program(*ints), builder) == (automaton.C_STATUS["BAD_PROGRAM"], None)


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
    return automaton_tables(built)


@pytest.mark.parametrize("name,make", GRAMMARS, ids=[g[0] for g in GRAMMARS])
@pytest.mark.parametrize("pruned", [True, False], ids=["prepared", "raw"])
def test_grammars_get_the_same_automaton(name, make, pruned, monkeypatch):
    """Every table of the automaton (node numbering, byte classes, next_node) is the Python
    construction's, for prepared grammars (rule DFAs and byte classes in C) and raw ones (byte
    classes in C)."""
    grammar = prepare(make()) if pruned else make()
    built_in_c = []  # rule DFAs built from their programs in C, NFA included
    original = automaton._c_program_dfa
    monkeypatch.setattr(automaton, "_c_program_dfa",
                        lambda *a: built_in_c.append(original(*a)) or built_in_c[-1])
    in_c = _tables(grammar, "1")
    c_run = built_in_c[:]  # (the Python run calls it too, and gets None)
    in_python = _tables(grammar, "0")
    assert_same_tables(in_c, in_python)
    # a prepared grammar's rules went through C
    assert (c_run and all(c_run)) or not pruned


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
