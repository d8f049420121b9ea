"""Specification of the automaton builder (gxg.compiler.automaton, pipeline stage 2).

What is checked:

* table invariants on every automaton built here (dtypes, shapes, CSR, rule contiguity, start
  nodes first, byte classes coarsest and ordered, every node reachable, rules minimal);
* UTF-8 lowering: for random code-point classes, every code point's encoding (from Python's
  encoder) is accepted iff it is in the class, and counting accepted strings per length proves
  that nothing else (overlong forms, surrogates, invalid bytes) is accepted;
* minimisation, nullability and FIRST sets on hand-made tables;
* errors: left recursion (direct, indirect, hidden behind a nullable prefix) and the node
  limit (repetitions, determinisation blow-up);
* language equality: a reference walker over the tables, written here from the PDA semantics
  in the module docstring (scan, push with tail calls, pop, closure), against the Earley
  recognizer of gxg.testing on a zoo of grammars and random ones, over all short strings and
  random longer sentences and their mutations.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

import numpy as np
import pytest

from gxg.compiler.automaton import Automaton, build_automaton, utf8_byte_sequences
from gxg.compiler.passes import wrap_root
from gxg.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
)
from gxg.testing import Recognizer

# ----------------------------------------------------------------------------- helpers


def ebnf(text: str, root: str = "root") -> Grammar:
    return Grammar.from_ebnf(text, root_rule_name=root)


def build(grammar: Grammar, **options) -> Automaton:
    """The automaton of ``grammar`` behind a root wrapper, checked against every invariant."""
    automaton = build_automaton(wrap_root(grammar), **options)
    check_invariants(automaton)
    return automaton


def build_ebnf(text: str, **options) -> Automaton:
    return build(ebnf(text), **options)


def rule_size(automaton: Automaton, name: str) -> int:
    return len(automaton.rule_nodes(automaton.rule_id(name)))


def first_bytes(automaton: Automaton, name: str) -> bytes:
    return bytes(np.flatnonzero(automaton.rule_first[automaton.rule_id(name)]).tolist())


# ----------------------------------------------------------------------------- reference walker

Stack = Tuple[int, ...]  # bottom .. top


class Walker:
    """Sets of stacks advanced byte by byte, exactly as the automaton's docstring says."""

    MAX_DEPTH = 200  # a guard: closure must terminate; deeper stacks mean it does not

    def __init__(self, automaton: Automaton):
        a = automaton
        self.a = a
        self.refs = [a.refs(node) for node in range(a.num_nodes)]
        self.final = a.is_final.tolist()
        self.pure_return = a.is_pure_return.tolist()
        self.scannable = a.is_scannable.tolist()
        self.start_of = a.rule_start.tolist()
        self.next = a.next_node.tolist()
        self.klass = a.byte_class.tolist()

    def closure(self, stacks: Iterable[Stack]) -> FrozenSet[Stack]:
        seen = set(stacks)
        todo = list(seen)
        while todo:
            stack = todo.pop()
            assert len(stack) <= self.MAX_DEPTH, "closure does not terminate"
            top = stack[-1]
            successors = []
            for rule, ret in self.refs[top]:  # push (predict)
                if self.pure_return[ret]:
                    successors.append(stack[:-1] + (self.start_of[rule],))  # tail call
                else:
                    successors.append(stack[:-1] + (ret, self.start_of[rule]))
            if self.final[top] and len(stack) > 1:  # pop (complete)
                successors.append(stack[:-1])
            for successor in successors:
                if successor not in seen:
                    seen.add(successor)
                    todo.append(successor)
        return frozenset(seen)

    def start(self) -> FrozenSet[Stack]:
        return self.closure([(self.start_of[self.a.root_rule],)])

    def step(self, stacks: FrozenSet[Stack], byte: int) -> FrozenSet[Stack]:
        moved = []
        for stack in stacks:
            target = self.next[stack[-1]][self.klass[byte]]
            if target >= 0:
                moved.append(stack[:-1] + (target,))
        return self.closure(moved)

    def accepting(self, stacks: FrozenSet[Stack]) -> bool:
        """The root rule has completed: a one-entry stack whose top is final."""
        return any(len(stack) == 1 and self.final[stack[0]] for stack in stacks)

    def alive(self, stacks: FrozenSet[Stack]) -> bool:
        """The input so far is a prefix of a sentence (pruning makes every stack completable)."""
        return self.accepting(stacks) or any(self.scannable[stack[-1]] for stack in stacks)

    def run(self, data: bytes) -> FrozenSet[Stack]:
        stacks = self.start()
        for byte in data:
            stacks = self.step(stacks, byte)
        return stacks

    def accepts(self, data: bytes) -> bool:
        return self.accepting(self.run(data))

    def is_prefix(self, data: bytes) -> bool:
        return self.alive(self.run(data))


class LanguageCheck:
    """Compares the walker with the reference recognizer byte by byte."""

    def __init__(self, grammar: Grammar, automaton: Optional[Automaton] = None):
        if automaton is None:
            automaton = build(grammar)
        else:
            check_invariants(automaton)
        self.automaton = automaton
        self.walker = Walker(self.automaton)
        self.recognizer = Recognizer(grammar)
        self.checked = 0

    def compare_along(self, data: bytes) -> None:
        """Same answer on every prefix of ``data`` (prefix-ness and acceptance)."""
        stacks = self.walker.start()
        state = self.recognizer.start()
        for position in range(len(data) + 1):
            expected = (state.alive, state.alive and state.accepting)
            actual = (self.walker.alive(stacks), self.walker.accepting(stacks))
            self.checked += 1
            assert actual == expected, (
                f"{data[:position]!r}: walker (prefix, accepts) = {actual}, "
                f"recognizer = {expected}")
            if position == len(data) or not state.alive:
                return
            stacks = self.walker.step(stacks, data[position])
            state.feed(data[position])

    def exhaustive(self, alphabet: bytes, max_length: int) -> None:
        """Every string over ``alphabet`` up to ``max_length`` (depth-first, sharing prefixes;
        once both sides say "dead", extensions are dead too and are skipped)."""
        def visit(stacks, state, depth, text):
            expected = (state.alive, state.alive and state.accepting)
            actual = (self.walker.alive(stacks), self.walker.accepting(stacks))
            self.checked += 1
            assert actual == expected, (
                f"{text!r}: walker (prefix, accepts) = {actual}, recognizer = {expected}")
            if depth == max_length or not state.alive:
                return
            for byte in alphabet:
                child = state.copy()
                child.feed(byte)
                visit(self.walker.step(stacks, byte), child, depth + 1, text + bytes([byte]))
        visit(self.walker.start(), self.recognizer.start(), 0, b"")

    def random_sentences(self, grammar: Grammar, rng: random.Random, count: int,
                         alphabet: bytes) -> None:
        """Random sentences, each also mutated (a byte deleted, inserted, replaced)."""
        for _ in range(count):
            sentence = generate(grammar, rng)
            if sentence is None:
                continue
            self.compare_along(sentence)
            for _ in range(3):
                self.compare_along(mutate(sentence, rng, alphabet))


# ----------------------------------------------------------------------------- sentence generator


def generate(grammar: Grammar, rng: random.Random, budget: int = 60) -> Optional[bytes]:
    """A random sentence of ``grammar`` (None if a few tries exceed the size budget)."""
    rules = {rule.name: rule.body for rule in grammar.rules}

    class TooBig(Exception):
        pass

    def gen(expr: Expr, out: bytearray, depth: int) -> None:
        if len(out) > budget or depth > 40:
            raise TooBig
        if isinstance(expr, Literal):
            out += expr.data
        elif isinstance(expr, CharClass):
            ranges = expr.effective_ranges()
            if not ranges:
                raise TooBig  # matches nothing
            lo, hi = rng.choice(ranges)
            out += chr(rng.randint(lo, hi)).encode("utf-8")
        elif isinstance(expr, RuleRef):
            gen(rules[expr.name], out, depth + 1)
        elif isinstance(expr, Sequence):
            for item in expr.items:
                gen(item, out, depth + 1)
        elif isinstance(expr, Choice):
            gen(rng.choice(expr.alternatives), out, depth + 1)
        elif isinstance(expr, Repeat):
            high = expr.min + 3 if expr.max is None else min(expr.max, expr.min + 3)
            for _ in range(rng.randint(expr.min, high)):
                gen(expr.expr, out, depth + 1)

    for _ in range(20):
        out = bytearray()
        try:
            gen(rules[grammar.root_rule_name], out, 0)
        except TooBig:
            continue
        return bytes(out)
    return None


def mutate(data: bytes, rng: random.Random, alphabet: bytes) -> bytes:
    position = rng.randint(0, len(data))
    kind = rng.randrange(3)
    if kind == 0 and data:
        position = min(position, len(data) - 1)
        return data[:position] + data[position + 1:]
    if kind == 1 or not data:
        return data[:position] + bytes([rng.choice(alphabet)]) + data[position:]
    position = min(position, len(data) - 1)
    return data[:position] + bytes([rng.choice(alphabet)]) + data[position + 1:]


# ----------------------------------------------------------------------------- invariants


def check_invariants(a: Automaton) -> None:
    N, C, R = a.num_nodes, a.num_classes, a.num_rules
    expected_dtypes = {
        "byte_class": (np.uint8, (256,)), "next_node": (np.int32, (N, C)),
        "ref_offsets": (np.int32, (N + 1,)), "ref_rule": (np.int32, None),
        "ref_return": (np.int32, None), "is_final": (np.bool_, (N,)),
        "is_scannable": (np.bool_, (N,)), "is_pure_return": (np.bool_, (N,)),
        "node_rule": (np.int32, (N,)), "rule_start": (np.int32, (R,)),
        "rule_nullable": (np.bool_, (R,)), "rule_first": (np.bool_, (R, 256)),
        "rule_lookahead": (np.int32, (R,)),
        "run_twin": (np.int32, (N,)), "run_room": (np.int32, (N,)),
    }
    for field, (dtype, shape) in expected_dtypes.items():
        array = getattr(a, field)
        assert array.dtype == dtype, field
        if shape is not None:
            assert array.shape == shape, field
    assert isinstance(a.rule_names, tuple) and len(set(a.rule_names)) == R
    assert isinstance(a.root_rule, int) and 0 <= a.root_rule < R

    # CSR
    E = int(a.ref_offsets[-1])
    assert a.ref_offsets[0] == 0 and np.all(np.diff(a.ref_offsets) >= 0)
    assert a.ref_rule.shape == (E,) and a.ref_return.shape == (E,)
    assert np.all((0 <= a.ref_rule) & (a.ref_rule < R))
    assert np.all((0 <= a.ref_return) & (a.ref_return < N))
    sources = np.repeat(np.arange(N), np.diff(a.ref_offsets))
    assert np.array_equal(a.node_rule[a.ref_return], a.node_rule[sources]), \
        "a return node lies in the caller's rule"
    for node in range(N):
        callees = [rule for rule, _ in a.refs(node)]
        assert callees == sorted(set(callees)), "at most one edge per rule, sorted by rule"

    # rules: contiguous, start first, non-empty
    assert np.all(np.diff(a.node_rule) >= 0)
    assert np.array_equal(a.rule_start, np.searchsorted(a.node_rule, np.arange(R)))
    assert np.all(np.bincount(a.node_rule, minlength=R) >= 1)

    # byte edges stay inside the rule
    assert np.all((a.next_node >= -1) & (a.next_node < N))
    rows, columns = np.nonzero(a.next_node >= 0)
    assert np.array_equal(a.node_rule[a.next_node[rows, columns]], a.node_rule[rows])

    # flags
    assert np.array_equal(a.is_scannable, (a.next_node >= 0).any(axis=1))
    assert np.array_equal(a.is_pure_return,
                          a.is_final & ~a.is_scannable & (np.diff(a.ref_offsets) == 0))

    # byte classes: all used, numbered by smallest byte, coarsest (no two columns equal)
    assert set(a.byte_class.tolist()) == set(range(C))
    first_byte_of_class = [int(np.flatnonzero(a.byte_class == k)[0]) for k in range(C)]
    assert first_byte_of_class == sorted(first_byte_of_class)
    columns_seen = {a.next_node[:, k].tobytes() for k in range(C)}
    assert len(columns_seen) == C, "two classes that no edge distinguishes"

    # the root and the lookahead rules are referenced by nothing
    referenced = set(a.ref_rule.tolist())
    assert a.root_rule not in referenced
    for rule in range(R):
        lookahead = int(a.rule_lookahead[rule])
        if lookahead >= 0:
            assert lookahead not in referenced and a.rule_lookahead[lookahead] == -1

    # every node is reachable from its rule's start
    for rule in range(R):
        nodes = a.rule_nodes(rule)
        seen = {nodes.start}
        todo = [nodes.start]
        while todo:
            node = todo.pop()
            successors = set(a.next_node[node][a.next_node[node] >= 0].tolist())
            successors |= {ret for _, ret in a.refs(node)}
            for successor in successors - seen:
                seen.add(successor)
                todo.append(successor)
        assert seen == set(nodes), f"unreachable nodes in rule {a.rule_names[rule]!r}"

    assert_rules_minimal(a)


def assert_rules_minimal(a: Automaton) -> None:
    """Moore refinement per rule: every node of a rule ends in a block of its own."""
    for rule in range(a.num_rules):
        nodes = list(a.rule_nodes(rule))
        block = {node: int(a.is_final[node]) for node in nodes}
        while True:
            signatures = {
                node: (block[node],
                       tuple(block.get(t, -1) if t >= 0 else -1 for t in a.next_node[node]),
                       tuple((callee, block[ret]) for callee, ret in a.refs(node)))
                for node in nodes}
            numbering: Dict[tuple, int] = {}
            refined = {node: numbering.setdefault(signature, len(numbering))
                       for node, signature in signatures.items()}
            if len(numbering) == len(set(block.values())):
                break
            block = refined
        assert len(set(block.values())) == len(nodes), \
            f"rule {a.rule_names[rule]!r} is not minimal"


# ----------------------------------------------------------------------------- UTF-8


def _all_code_points_by_length() -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """For each UTF-8 length: (code points, their encodings from Python's encoder [n, L])."""
    spans = {1: (0, 0x7F), 2: (0x80, 0x7FF), 3: (0x800, 0xFFFF), 4: (0x10000, 0x10FFFF)}
    out = {}
    for length, (lo, hi) in spans.items():
        points = np.arange(lo, hi + 1)
        points = points[(points < 0xD800) | (points > 0xDFFF)]
        text = "".join(map(chr, points.tolist()))
        encoded = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).reshape(-1, length)
        out[length] = (points, encoded)
    return out


ENCODINGS = _all_code_points_by_length()


def random_class(rng: random.Random) -> CharClass:
    """Ranges with endpoints near the interesting UTF-8 boundaries, or anywhere."""
    interesting = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xD800, 0xDFFF, 0xE000,
                   0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF]
    ranges = []
    for _ in range(rng.randint(1, 4)):
        a = rng.choice(interesting) + rng.randint(-2, 2) if rng.random() < 0.6 \
            else rng.randint(0, 0x10FFFF)
        b = a + rng.choice([0, 1, 63, 64, 65, 4095, 4096, rng.randint(0, 0x10FFFF)])
        a, b = min(max(a, 0), 0x10FFFF), min(max(b, 0), 0x10FFFF)
        ranges.append((min(a, b), max(a, b)))
    return CharClass(tuple(ranges), negated=rng.random() < 0.3)


def class_automaton(char_class: CharClass) -> Automaton:
    """``root ::= <class>`` alone: its rule is the root, so rule 0 is just the class's DFA."""
    automaton = build_automaton(Grammar((Rule("root", char_class),)))
    check_invariants(automaton)
    return automaton


def run_dfa(a: Automaton, encoded: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Vectorised walk of rule 0 from its start: (final after all bytes, any proper prefix
    final)."""
    state = np.full(encoded.shape[0], a.rule_start[0], dtype=np.int64)
    early_final = np.zeros(encoded.shape[0], dtype=bool)
    for position in range(encoded.shape[1]):
        if position:
            early_final |= (state >= 0) & a.is_final[np.maximum(state, 0)]
        classes = a.byte_class[encoded[:, position]]
        state = np.where(state >= 0, a.next_node[np.maximum(state, 0), classes], -1)
    return (state >= 0) & a.is_final[np.maximum(state, 0)], early_final


def accepted_string_counts(a: Automaton, max_length: int) -> List[int]:
    """How many byte strings of each length 0..max_length rule 0 accepts (rule 0 has no
    references here, so this is a plain DFA path count)."""
    class_sizes = np.bincount(a.byte_class, minlength=a.num_classes)
    counts = np.zeros(a.num_nodes, dtype=np.int64)
    counts[a.rule_start[0]] = 1
    rows, classes = np.nonzero(a.next_node >= 0)
    targets = a.next_node[rows, classes]
    result = []
    for _ in range(max_length + 1):
        result.append(int(counts[a.is_final].sum()))
        following = np.zeros_like(counts)
        np.add.at(following, targets, counts[rows] * class_sizes[classes])
        counts = following
    return result


def test_utf8_byte_sequences_match_the_encoder():
    rng = random.Random(7)
    cases = [(0, 0x10FFFF), (0x80, 0x80), (0x7FF, 0x800), (0xD7FF, 0xE000), (0xFFFF, 0x10000),
             (0x10FFFF, 0x10FFFF), (0x1234, 0x5678)]
    cases += [tuple(sorted((rng.randint(0, 0x10FFFF), rng.randint(0, 0x10FFFF))))
              for _ in range(30)]
    for lo, hi in cases:
        sequences = utf8_byte_sequences(lo, hi)
        expected = 0
        for length, (points, encoded) in ENCODINGS.items():
            inside = (points >= lo) & (points <= hi)
            expected += int(inside.sum())
            # every encoding of an in-range code point matches exactly one sequence, and
            # no encoding of an out-of-range code point matches any
            matches = np.zeros(len(points), dtype=np.int64)
            for sequence in sequences:
                if len(sequence) != length:
                    continue
                hit = np.ones(len(points), dtype=bool)
                for position, (byte_lo, byte_hi) in enumerate(sequence):
                    hit &= (encoded[:, position] >= byte_lo) & (encoded[:, position] <= byte_hi)
                matches += hit
            assert np.array_equal(matches, inside.astype(np.int64)), (hex(lo), hex(hi), length)
        # and the sequences describe no other string (overlong, surrogate, invalid)
        described = sum(int(np.prod([b - a + 1 for a, b in sequence])) for sequence in sequences)
        assert described == expected, (hex(lo), hex(hi))


@pytest.mark.parametrize("seed", range(12))
def test_class_lowering_is_exact_utf8(seed):
    rng = random.Random(seed)
    char_class = random_class(rng) if seed else CharClass((), negated=True)  # seed 0: [^]
    a = class_automaton(char_class)
    ranges = char_class.effective_ranges()
    expected_counts = [0]
    for length, (points, encoded) in ENCODINGS.items():
        inside = np.zeros(len(points), dtype=bool)
        for lo, hi in ranges:
            inside |= (points >= lo) & (points <= hi)
        accepted, early_final = run_dfa(a, encoded)
        assert np.array_equal(accepted, inside), f"length {length}"
        assert not early_final.any(), "a proper prefix of an encoding completes the class"
        expected_counts.append(int(inside.sum()))
    # Every in-class encoding is accepted and the counts agree, so nothing else is accepted.
    assert accepted_string_counts(a, 5) == expected_counts + [0]


def test_invalid_utf8_is_rejected_by_any_code_point():
    a = class_automaton(CharClass((), negated=True))
    walker = Walker(a)
    for bad in [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",
                b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
                b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8", b"\xff", b"\xc3", b"a\x80"]:
        assert not walker.accepts(bad), bad
    assert not walker.is_prefix(b"\xed\xa0") and walker.is_prefix(b"\xed\x9f")
    assert not walker.is_prefix(b"\xf4\x90") and walker.is_prefix(b"\xf4\x8f\xbf")
    for good in ["\x00", "\x7f", "\x80", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff",
                 "\U00010000", "\U0010ffff"]:
        assert walker.accepts(good.encode("utf-8")), repr(good)


def test_empty_class_matches_nothing():
    a = build(Grammar((Rule("root", Choice((Literal(b"a"), Sequence(
        (Literal(b"b"), CharClass(((0, 0x10FFFF),), negated=True)))))),)))
    walker = Walker(a)
    assert walker.accepts(b"a")
    assert not walker.is_prefix(b"b"), "a dead branch must not keep a prefix alive"


# ----------------------------------------------------------------------------- hand tables


def test_json_tables():
    a = build(Grammar.builtin_json_grammar())
    assert a.rule_names[a.root_rule] == "root_wrapper" and a.root_rule == 0
    assert a.rule_start[a.root_rule] == 0
    for name in ("ws",):
        assert a.rule_nullable[a.rule_id(name)]
    for name in ("root", "value", "object", "array", "string", "number", "character"):
        assert not a.rule_nullable[a.rule_id(name)], name
    assert first_bytes(a, "root") == b"[{"
    assert first_bytes(a, "value") == b'"-0123456789[fnt{'
    assert first_bytes(a, "ws") == b"\t\n\r "
    assert first_bytes(a, "number") == b"-0123456789"
    assert rule_size(a, "ws") == 1
    assert rule_size(a, "escape") == 6  # start, after u, three hex digits, final
    walker = Walker(a)
    assert walker.accepts(b'{"a": [1, 2.5e-3, true, null, "\\u00e9x"]}')
    assert not walker.accepts(b'{"a": 01}') and not walker.accepts(b'"a"')
    assert walker.is_prefix(b'{"a": [1') and not walker.is_prefix(b'{"a" 1')


def test_nullable_and_first_sets():
    a = build_ebnf(r"""
        root ::= a b "z"
        a ::= "x"?
        b ::= c | "y"
        c ::= a "w" | ""
        d ::= e "d" e
        e ::= ""
        f ::= g
        g ::= "g" | f2
        f2 ::= "k" f2 | "k"
    """)
    nullable = {name: bool(a.rule_nullable[a.rule_id(name)]) for name in
                ("root", "a", "b", "c", "d", "e", "f", "g", "f2")}
    assert nullable == {"root": False, "a": True, "b": True, "c": True, "d": False,
                        "e": True, "f": False, "g": False, "f2": False}
    assert first_bytes(a, "a") == b"x"
    assert first_bytes(a, "c") == b"wx"
    assert first_bytes(a, "b") == b"wxy"
    assert first_bytes(a, "root") == b"wxyz"
    assert first_bytes(a, "e") == b""
    assert first_bytes(a, "d") == b"d"
    assert first_bytes(a, "f") == b"gk"


def test_first_ignores_what_cannot_complete():
    # "b" x: x derives nothing, so "b" starts no sentence
    grammar = Grammar((
        Rule("root", Choice((Literal(b"a"), Sequence((Literal(b"b"), RuleRef("x")))))),
        Rule("x", Sequence((Literal(b"c"), RuleRef("x")))),
    ))
    a = build(grammar)
    assert first_bytes(a, "root") == b"a"
    assert first_bytes(a, "x") == b"" and not a.rule_nullable[a.rule_id("x")]
    assert rule_size(a, "x") == 1, "a rule that derives nothing keeps only its start node"
    assert a.refs(a.rule_start[a.rule_id("root")]) == []


def test_minimisation_merges_equivalent_nodes():
    assert rule_size(build_ebnf('root ::= "a" | "a"'), "root") == 2
    assert rule_size(build_ebnf('root ::= "ab" | "ac"'), "root") == 3
    assert rule_size(build_ebnf('root ::= ("a" | "b")*'), "root") == 1
    assert rule_size(build_ebnf('root ::= ("ab")* "a"'), "root") == 2
    assert rule_size(build_ebnf('root ::= "a"{3,6}'), "root") == 7
    assert rule_size(build_ebnf('root ::= ("x" | "y")* "x" | "x"'), "root") == 2
    # a ref edge is a letter: two equal edges from one node collapse into one
    a = build_ebnf('root ::= "x" s | "x" s "" \ns ::= "1"')
    assert rule_size(a, "root") == 3


def _moore_blocks(moves: List[Dict[int, int]], final: List[bool]) -> List[int]:
    """Brute-force equivalence of a partial DFA's states (no sink: a missing move differs from
    every move): refine by (block, letter -> target block) until nothing splits."""
    block = [int(f) for f in final]
    while True:
        signatures = [(block[s], tuple(sorted((c, block[t]) for c, t in moves[s].items())))
                      for s in range(len(moves))]
        number = {sig: i for i, sig in enumerate(dict.fromkeys(signatures))}
        refined = [number[sig] for sig in signatures]
        if len(set(refined)) == len(set(block)):
            return refined
        block = refined


def _random_dfa(rng: random.Random, states: int, long_cycles: bool):
    """A random partial DFA over 3 letters whose states are all reachable from 0: a forward
    edge to a later state or a self-loop (a back edge too when ``long_cycles``)."""
    moves: List[Dict[int, int]] = [{} for _ in range(states)]
    for state in range(1, states):  # a spanning tree from 0 keeps everything reachable
        parent = rng.randrange(state)
        free = [c for c in range(3) if c not in moves[parent]]
        if free:
            moves[parent][rng.choice(free)] = state
        else:
            moves[rng.randrange(state)].setdefault(3 + state, state)  # a letter of its own
    for state in range(states):
        for letter in range(3):
            if letter in moves[state] or rng.random() < 0.4:
                continue
            roll = rng.random()
            if roll < 0.3:
                moves[state][letter] = state
            elif roll < 0.9 and state + 1 < states:
                moves[state][letter] = rng.randrange(state + 1, states)
            elif long_cycles and state > 0:
                moves[state][letter] = rng.randrange(state)
    final = [rng.random() < 0.4 for _ in range(states)]
    return moves, final


@pytest.mark.parametrize("long_cycles", [False, True])
def test_minimisation_blocks_equal_brute_force(long_cycles):
    """Revuz's one pass (acyclic but for self-loops) and Hopcroft's refinement (any DFA)
    give the blocks of a brute-force refinement, on random DFAs with many equal states."""
    from gxg.compiler.automaton import (_acyclic_blocks, _acyclic_post_order, _breadth_first,
                                        _coarsest_partition)
    rng = random.Random(1234 + long_cycles)
    one_pass = 0
    for _ in range(400):
        moves, final = _random_dfa(rng, rng.randrange(1, 14), long_cycles)
        expected = _moore_blocks(moves, final)
        post_order = _acyclic_post_order(moves, 0)
        found = [_coarsest_partition(moves, final, _breadth_first(moves, 0))]
        if post_order is not None:
            one_pass += 1
            assert sorted(post_order) == list(range(len(moves)))
            found.append(_acyclic_blocks(post_order, moves, final))
        for blocks in found:
            pairs = {(expected[s], blocks[s]) for s in range(len(moves))}
            assert len(pairs) == len(set(expected)) == len(set(blocks[s] for s in range(len(moves))))
    assert one_pass > (300 if not long_cycles else 20)


def test_lists_make_next_node_rows_on_first_use():
    """``Automaton.lists.next_node[n]`` is row n of ``next_node`` as a list, made when first
    asked for and kept (the same list object later); rows never asked for are not made."""
    a = build_ebnf('root ::= "ab" [0-9]* | "x" r\nr ::= "yz"')
    rows = a.lists.next_node
    assert len(rows) == 0
    for node in reversed(range(a.num_nodes)):
        assert rows[node] == a.next_node[node].tolist()
        assert all(type(target) is int for target in rows[node])
    assert rows[1] is rows[1] and len(rows) == a.num_nodes


@pytest.mark.parametrize("ebnf_grammar_text", [
    'root ::= "ab" [0-9]* | "x" r\nr ::= "yz"',
    'root ::= a "," a | b\na ::= "[" (a | b)* "]"\nb ::= [a-z]+ c?\nc ::= "!" root?',
    'root ::= Token(1, 2) r | "q"\nr ::= "z" (= "q")',
    'root ::= r "x"\nr[max_tokens=2] ::= [a-c]*',
])
def test_lists_hold_each_nodes_facts(ebnf_grammar_text):
    """``Automaton.lists``, the per-node Python lists the walks index, against their definitions
    node by node: references, plain nodes, callers and the flags (token and counter nodes
    included, which ``check_invariants`` does not know)."""
    a = build_automaton(wrap_root(ebnf(ebnf_grammar_text)))
    lists = a.lists
    for node in range(a.num_nodes):
        refs = tuple(a.refs(node))
        assert lists.refs[node] == refs
        assert lists.is_plain[node] is bool(a.is_scannable[node] and not a.is_final[node]
                                            and not refs and a.token_next[node] < 0)
        assert lists.is_final[node] is bool(a.is_final[node])
        assert lists.token_next[node] == a.token_next[node]
    callers = {}
    for node in range(a.num_nodes):
        for rule, ret in a.refs(node):
            callers.setdefault(rule, set()).add(ret)
    assert lists.callers == {rule: sorted(rets) for rule, rets in callers.items()}


def test_equivalent_rules_stay_separate():
    a = build_ebnf('root ::= "x" p | "x" q\np ::= "1"\nq ::= "1"')
    assert a.num_rules == 4  # the wrapper, root, p, q
    assert rule_size(a, "p") == 2 and rule_size(a, "q") == 2
    node = a.next_node[a.rule_start[a.rule_id("root")], a.byte_class[ord("x")]]
    callees = [a.rule_names[rule] for rule, _ in a.refs(node)]
    assert callees == ["p", "q"]
    returns = {ret for _, ret in a.refs(node)}
    assert len(returns) == 1 and a.is_pure_return[returns.pop()]


def test_nodes_are_numbered_rule_by_rule_breadth_first():
    a = build_ebnf('root ::= "abc" t\nt ::= "x" | "yz"')
    root = a.rule_id("root")
    nodes = list(a.rule_nodes(root))
    chain = [nodes[0]]
    for byte in b"abc":
        chain.append(a.step_byte(chain[-1], byte))
    assert chain == nodes[:4]
    t = a.rule_id("t")
    start = a.rule_start[t]
    after_x, after_y = a.step_byte(start, ord("x")), a.step_byte(start, ord("y"))
    assert list(a.rule_nodes(t)) == [start, start + 1, start + 2]
    assert sorted([after_x, after_y]) == [start + 1, start + 2]  # breadth-first


def test_lookahead_is_an_unreferenced_extra_rule():
    grammar = ebnf('root ::= a "c"\na ::= "a"+ (= "c" [0-9])')
    a = build(grammar)
    rule_a = a.rule_id("a")
    lookahead = int(a.rule_lookahead[rule_a])
    assert lookahead >= 0 and a.rule_names[lookahead] == "a#lookahead"
    assert a.rule_lookahead[a.rule_id("root")] == -1
    assert lookahead not in set(a.ref_rule.tolist())
    assert first_bytes(a, "a#lookahead") == b"c"
    nodes = a.rule_nodes(lookahead)
    assert len(nodes) == 3 and not a.rule_nullable[lookahead]
    # the lookahead does not change the language
    assert Walker(a).accepts(b"aac")


def test_byte_classes_are_the_coarsest_partition():
    a = build_ebnf('root ::= [a-c] "x" | [x-z] "x"')
    # a-c and x-z lead to the same node: one class; "x" is also distinguished by the 2nd edge
    classes = a.byte_class
    assert classes[ord("a")] == classes[ord("c")] == classes[ord("y")] == classes[ord("z")]
    assert classes[ord("x")] != classes[ord("a")]
    assert classes[0] == classes[ord("d")] == classes[255]
    assert a.num_classes == 3


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("text, cycle", [
    ('root ::= a\na ::= a "x" | "y"', "a -> a"),
    ('root ::= a\na ::= b "x" | "y"\nb ::= a "z" | "w"', "a -> b -> a"),
    ('root ::= a\na ::= n a "x" | "y"\nn ::= "q"?', "a -> a"),
    ('root ::= a\na ::= n* b | "y"\nn ::= "q"\nb ::= a "!"', "a -> b -> a"),
])
def test_left_recursion_is_reported(text, cycle):
    with pytest.raises(GrammarError, match=f"left recursion remains: .*{cycle}"):
        build_ebnf(text)


def test_right_and_middle_recursion_are_fine():
    for text in ['root ::= "(" root ")" | ""', 'root ::= "a" root | "b"',
                 'root ::= a\na ::= "x"? b\nb ::= "y" a | "z"']:
        build_ebnf(text)


def test_passes_remove_left_recursion_before_building():
    passes = pytest.importorskip("gxg.compiler.passes")
    if not hasattr(passes, "prepare"):
        pytest.skip("passes.prepare not written yet")
    grammar = ebnf('root ::= root "+" t | t\nt ::= t "*" f | f\nf ::= [0-9] | "(" root ")"')
    automaton = build_automaton(passes.prepare(grammar))
    check_invariants(automaton)
    walker = Walker(automaton)
    recognizer = Recognizer(grammar)
    for text in ["1", "1+2*3", "(1+2)*3", "1+", "(1", "1**2", "((2))*(3+4)"]:
        assert walker.accepts(text.encode()) == recognizer.accepts(text), text


def test_repetition_size_limit():
    with pytest.raises(GrammarError, match=r"rule 'root'.*\"ab\"\{300000\}.*would need 599999 "):
        build_ebnf('root ::= "x" "ab"{300000}')
    # the innermost repetition that is too large is named
    with pytest.raises(GrammarError, match=r"repetition \(\"abc\"\{300\}\)\{600\} would need"):
        build_ebnf('root ::= ("abc"{300}){600}')
    with pytest.raises(GrammarError, match=r"repetition \"abc\"\{300\} would need 899 "):
        build_ebnf('root ::= ("abc"{300}){600}', max_nodes=500)
    with pytest.raises(GrammarError, match=r"rule 'item'"):
        build_ebnf('root ::= item\nitem ::= [a-z]{5,}', max_nodes=4)
    # (built without the invariant checks: their minimality check is quadratic on a long chain)
    a = build_automaton(wrap_root(ebnf('root ::= "ab"{1000}')))
    assert rule_size(a, "root") == 2001


def test_grammar_size_limit():
    text = "root ::= " + " | ".join(f'r{i}' for i in range(20)) + "\n" + "\n".join(
        f'r{i} ::= "{"x" * 30}"' for i in range(20))
    build_ebnf(text, max_nodes=700)
    with pytest.raises(GrammarError, match=r"grammar needs more than 500 .*rules before 'r\d+'"):
        build_ebnf(text, max_nodes=500)


def test_determinisation_blow_up_is_limited():
    with pytest.raises(GrammarError, match=r"rule 'root': determinising it needs more than 1998 automaton nodes"):
        build_ebnf('root ::= [ab]* "a" [ab]{12}', max_nodes=2000)
    a = build_ebnf('root ::= [ab]* "a" [ab]{6}')
    assert rule_size(a, "root") == 2 ** 7


# ----------------------------------------------------------------------------- language equality

ZOO = {
    "nested arrays": (r'root ::= "[" (root ("," root)*)? "]"', b"[],x"),
    "arithmetic, right recursive": (r"""
        root ::= term ("+" root)?
        term ::= factor ("*" term)?
        factor ::= [0-9] | "(" root ")"
    """, b"1+*()"),
    "arithmetic with repeats": (r"""
        root ::= term (("+" | "-") term)*
        term ::= factor (("*" | "/") factor)*
        factor ::= "-"? ([0-9]+ | "(" root ")")
    """, b"12+-*()"),
    "unicode classes": (r'root ::= [α-ω]+ "|" [^a-z\u00e9]{1,2}',
                        "αω|aé€".encode() + b"\x80\xbf\xc0\xff"),
    "bounded repeats": (r'root ::= "a"{2,4} "b"{0,2} ("cd"){1} [x-y]{3}', b"abcdxy"),
    "nullable heavy": (r"""
        root ::= a b c d
        a ::= "x"?
        b ::= a a
        c ::= (a | "")*
        d ::= (b "y")* b
    """, b"xyz"),
    "b* b*": ('root ::= b* b*\nb ::= "x" | "yy"', b"xyz"),
    "tail recursion": ('root ::= "a" root | ""', b"ab"),
    "ambiguous": ('root ::= a a\na ::= "x" | "xx"', b"xy"),
    "mutual recursion": ('root ::= "(" b ")" | "z"\nb ::= root root?', b"()z"),
    "shared prefixes": ('root ::= ("ab" | "a" | "abc")* "."', b"abc."),
    "dead alternatives": ('root ::= "a" | "b" x\nx ::= "c" x', b"abc"),
    "lookahead": ('root ::= a "c" | a "d"\na ::= "a"+ (= "c")', b"acd"),
    "nullable recursion": ('root ::= "(" root ")" root | ""', b"()"),
    "repeat of nullable": ('root ::= ("a"? "b"?)* "c"', b"abc"),
    "escapes and strings": (r"""
        root ::= "\"" ch* "\""
        ch ::= [^"\\] | "\\" ["\\n]
    """, b'"\\na'),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_language_matches_recognizer(name):
    text, alphabet = ZOO[name]
    grammar = ebnf(text)
    check = LanguageCheck(grammar)
    max_length = 8 if len(alphabet) <= 3 else 6 if len(alphabet) <= 4 else \
        5 if len(alphabet) <= 6 else 4
    check.exhaustive(alphabet, max_length)
    check.random_sentences(grammar, random.Random(name), 40, alphabet)
    assert check.checked > 50


@pytest.mark.parametrize("name", sorted(ZOO))
def test_language_after_prepare_matches_recognizer(name):
    """The same, through the real pipeline (passes.prepare inlines rules and removes left
    recursion, so the automaton differs)."""
    passes = pytest.importorskip("gxg.compiler.passes")
    if not hasattr(passes, "prepare"):
        pytest.skip("passes.prepare not written yet")
    text, alphabet = ZOO[name]
    grammar = ebnf(text)
    check = LanguageCheck(grammar, build_automaton(passes.prepare(grammar)))
    check.exhaustive(alphabet, 4)
    check.random_sentences(grammar, random.Random(name), 20, alphabet)


def test_the_language_check_notices_a_broken_table():
    grammar = ebnf(ZOO["nested arrays"][0])
    check = LanguageCheck(grammar)
    check.exhaustive(b"[],", 4)
    a = check.automaton
    broken_final = a.is_final.copy()
    broken_final[a.step_byte(a.rule_start[a.rule_id("root")], ord("["))] = True
    check.walker = Walker(dataclasses.replace(a, is_final=broken_final))
    with pytest.raises(AssertionError, match="walker"):
        check.exhaustive(b"[],", 4)


def test_json_language_matches_recognizer():
    grammar = Grammar.builtin_json_grammar()
    check = LanguageCheck(grammar)
    alphabet = b'{}[],:" 1-.e\\ut'
    check.exhaustive(alphabet, 3)
    rng = random.Random(3)
    check.random_sentences(grammar, rng, 60, alphabet + b"\nfalsenu0Ab\x00")
    for text in [b'{"a":{"b":[1,{"c":null}]},"d":"\\u12aF\\n"}', b'[ -0.5E+10 , "\xc3\xa9" ]',
                 b'[1,]', b'{"a" : tru}', b'["\x01"]', b'{"k": "\\x"}', b'[\xed\xa0\x80]']:
        check.compare_along(text)


# -- random grammars


def random_grammar(rng: random.Random) -> Grammar:
    names = [f"r{i}" for i in range(rng.randint(1, 4))]
    atoms = [Literal(b"a"), Literal(b"b"), Literal(b"ab"), Literal(b""),
             CharClass(((ord("a"), ord("b")),)), CharClass(((ord("b"), ord("c")),), True)]

    def expr(depth: int) -> Expr:
        kind = rng.random()
        if depth > 2 or kind < 0.35:
            return rng.choice(atoms + [RuleRef(rng.choice(names))] * 2)
        if kind < 0.6:
            return Sequence(tuple(expr(depth + 1) for _ in range(rng.randint(2, 3))))
        if kind < 0.85:
            return Choice(tuple(expr(depth + 1) for _ in range(rng.randint(2, 3))))
        low = rng.randint(0, 2)
        high = rng.choice([None, low, low + 1, low + 2])
        return Repeat(expr(depth + 1), low, high)

    rules = tuple(Rule(name, expr(0), expr(1) if rng.random() < 0.2 else None)
                  for name in names)
    return Grammar(rules, names[0])


def test_random_grammars_match_recognizer():
    rng = random.Random(2024)
    built = 0
    attempts = 0
    while built < 120 and attempts < 1000:
        attempts += 1
        grammar = random_grammar(rng)
        try:
            check = LanguageCheck(grammar)
        except GrammarError as error:
            assert "left recursion remains" in str(error)
            continue
        built += 1
        check.exhaustive(b"abc", 5)
        check.random_sentences(grammar, rng, 5, b"abcd")
    assert built == 120


def test_utf8_sequences_for_a_single_range_are_sorted_and_disjoint():
    sequences = utf8_byte_sequences(0, 0x10FFFF)
    assert sequences == sorted(sequences, key=lambda s: (len(s), s))
    assert [len(s) for s in sequences] == [1, 2, 3, 3, 3, 3, 4, 4, 4]
    assert sequences[2:6] == [((0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)),
                              ((0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)),
                              ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)),
                              ((0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF))]


# ----------------------------------------------------------------------------- rule DFA cache


def same_tables(a: Automaton, b: Automaton) -> bool:
    for field in dataclasses.fields(Automaton):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def renamed(grammar: Grammar, prefix: str) -> Grammar:
    """The same grammar with every rule renamed and the non-root rules in reverse order, so
    that every reference has another rule id."""
    from gxg.grammar.combine import rename_refs
    mapping = {rule.name: prefix + rule.name for rule in grammar.rules}
    rules = [Rule(mapping[r.name], rename_refs(r.body, mapping),
                  rename_refs(r.lookahead, mapping), r.max_tokens) for r in grammar.rules]
    return Grammar((rules[0], *reversed(rules[1:])), mapping[grammar.root_rule_name])


# A JSON Schema front end's grammar shares subtrees between rules and inside one rule (the
# units of a key trie): the cache's keys must see through the sharing.
EXTRA_KEYS_SCHEMA = {"type": "object", "additionalProperties": {"type": "integer"},
                     "properties": {"alpha": {"type": "string"}, "alps": {"type": "boolean"}}}
CACHE_CASES = sorted(ZOO) + ["builtin JSON", "JSON Schema with extra keys"]


def prepared(name: str) -> Grammar:
    from gxg.compiler.passes import prepare
    if name == "builtin JSON":
        return prepare(Grammar.builtin_json_grammar())
    if name == "JSON Schema with extra keys":
        return prepare(Grammar.from_json_schema(EXTRA_KEYS_SCHEMA, strict_mode=False))
    return prepare(ebnf(ZOO[name][0]))


@pytest.mark.parametrize("name", CACHE_CASES)
def test_cached_rule_dfas_equal_fresh_builds(name):
    """A build whose rules all come from the cache, filled by a grammar with other rule names
    and ids, has exactly the tables of a build with an empty cache."""
    from gxg.compiler.automaton import clear_rule_dfa_cache
    grammar = prepared(name)
    assert grammar.pruned
    clear_rule_dfa_cache()
    cold = build_automaton(grammar)
    clear_rule_dfa_cache()
    build_automaton(prepared_other := prepare_renamed(grammar))
    warm = build_automaton(grammar)
    assert same_tables(cold, warm)
    clear_rule_dfa_cache()
    assert same_tables(build_automaton(prepared_other), build_automaton(prepared_other))


def prepare_renamed(grammar: Grammar) -> Grammar:
    from gxg.compiler.passes import prepare
    return prepare(renamed(grammar, "other_"))


def random_body(rng: random.Random, met: List[Expr], depth: int = 0) -> Expr:
    """A random rule body over a small alphabet (so that equal bodies recur), reusing an
    expression met before (the same object) now and then, as front ends share subtrees."""
    if met and rng.random() < 0.3:
        return rng.choice(met)
    kind = rng.choice(["lit", "class", "ref"] if depth >= 3 else
                      ["lit", "class", "ref", "seq", "alt", "rep"])
    if kind == "lit":
        return Literal(rng.choice([b"a", b"b", b""]))
    if kind == "class":
        return CharClass(((0x61, rng.choice([0x61, 0x7A])),), negated=rng.random() < 0.3)
    if kind == "ref":
        return RuleRef(rng.choice(["x", "y", "z"]))
    parts = tuple(random_body(rng, met, depth + 1) for _ in range(rng.choice([2, 3])))
    expr = (Sequence(parts) if kind == "seq" else Choice(parts) if kind == "alt"
            else Repeat(parts[0], rng.choice([0, 1]), rng.choice([None, 2])))
    met.append(expr)
    return expr


def refs_numbered(expr: Expr) -> Expr:
    """``expr`` with its rule references renamed r0, r1, ... in order of first use."""
    from gxg.grammar.combine import rename_refs
    from gxg.grammar.ir import iter_rule_refs
    first_use = dict.fromkeys(iter_rule_refs(expr))
    return rename_refs(expr, {name: f"r{k}" for k, name in enumerate(first_use)})


def test_equal_rule_dfa_cache_keys_are_equal_bodies():
    """The rule DFA cache's key writes a subtree met before in the body as a back reference:
    two bodies with one key are still the same body up to the rules' names (so they have one
    DFA), however their subtrees are shared; and sharing does not make unequal bodies equal."""
    from gxg.compiler.automaton import _body_key
    rng = random.Random(7)
    by_key: Dict[tuple, Expr] = {}
    collisions = 0
    for _ in range(3000):
        body = random_body(rng, [])
        key, names = _body_key(body)
        assert len(names) == len(set(names))
        canonical = refs_numbered(body)
        if key in by_key:
            collisions += 1
            assert by_key[key] == canonical
        by_key[key] = canonical
    assert collisions > 100  # the alphabet is small enough for the property to be exercised
    shared = Sequence((Literal(b"a"), Choice((Literal(b"b"), RuleRef("x")))))
    twice = Sequence((shared, shared))
    other = Sequence((shared, Sequence((Literal(b"a"), Choice((Literal(b"b"), RuleRef("y")))))))
    assert _body_key(twice)[0] != _body_key(other)[0]
    first, second = Repeat(Literal(b"a"), 0, None), Choice((Literal(b"a"), Literal(b"b")))
    assert (_body_key(Sequence((first, second, first)))[0]
            != _body_key(Sequence((first, second, second)))[0])  # which subtree is met again
    copied = Sequence((shared, Sequence((Literal(b"a"), Choice((Literal(b"b"), RuleRef("x")))))))
    assert _body_key(copied)[1] == _body_key(twice)[1] == {"x": 0}


def test_cached_rule_dfa_keeps_the_node_limits():
    """A rule found in the cache is held to this build's limits: the same errors as without."""
    from gxg.compiler.automaton import clear_rule_dfa_cache
    from gxg.compiler.passes import prepare
    grammar = prepare(ebnf('root ::= [ab]* "a" [ab]{6}'))
    clear_rule_dfa_cache()
    build_automaton(grammar)  # 128 states after determinising, in the cache now
    with pytest.raises(GrammarError, match=r"determinising it needs more than"):
        build_automaton(grammar, max_nodes=100)
    long = prepare(ebnf('root ::= "x" ("ab"{40} | "c")'))
    build_automaton(long)
    with pytest.raises(GrammarError, match=r"would need \d+ automaton nodes, more than the"):
        build_automaton(long, max_nodes=50)


def test_pruned_grammars_skip_the_dead_part_check_without_changing_tables():
    """prepare's output is pruned (remove_dead_rules); building it as if it were not (the
    automaton's own productivity check, no rule DFA cache) gives the same tables. A grammar
    with dead parts is not marked until the pass has removed them."""
    from gxg.compiler.passes import prepare, remove_dead_rules
    from gxg.compiler.automaton import clear_rule_dfa_cache
    raw = ebnf(ZOO["dead alternatives"][0])
    assert not raw.pruned
    assert remove_dead_rules(raw).pruned and remove_dead_rules(raw) != raw
    for name in CACHE_CASES:
        grammar = prepared(name)
        clear_rule_dfa_cache()
        assert same_tables(build_automaton(grammar),
                           build_automaton(dataclasses.replace(grammar, pruned=False))), name
    assert not prepare(ebnf('root ::= "x" root')).pruned  # the empty language: MATCHES_NOTHING


def test_the_collector_is_paused_and_restored_after():
    """``gc_paused`` (compiles, the vocabulary walks): off inside, nested and overlapping
    pauses (threads) share one, the collector's state before the first comes back after the
    last, also when the block raises, and a collector the caller had turned off stays off."""
    import gc
    import threading
    from gxg.compiler.automaton import gc_paused
    was = gc.isenabled()
    try:
        gc.enable()
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(ValueError):
            with gc_paused():
                raise ValueError("a compile that fails")
        assert gc.isenabled()
        inside, leave = threading.Barrier(2), threading.Event()

        def pause_in_thread():
            with gc_paused():
                inside.wait()
                leave.wait()
        thread = threading.Thread(target=pause_in_thread, daemon=True)
        try:
            with gc_paused():  # this pause first, then the thread's
                thread.start()
                inside.wait(timeout=10)
            assert not gc.isenabled()  # the thread's pause is still under way
        finally:
            leave.set()
            thread.join(timeout=10)
        assert gc.isenabled()
        gc.disable()
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def canonical_dfa(dfa) -> tuple:
    """A rule DFA's language as a canonical form: its states breadth-first from the start over
    the bytes in order, each as (final, the target's number per byte). Two minimal DFAs have
    one form iff they accept one language (with references, none here)."""
    letter_of = np.searchsorted(np.asarray(dfa.cuts), np.arange(256), side="right") - 1
    number, order, rows = {0: 0}, [0], []
    for state in order:  # grows while iterating
        row = []
        for byte in range(256):
            target = dfa.moves[state].get(int(letter_of[byte]), -1)
            if target >= 0 and target not in number:
                number[target] = len(order)
                order.append(target)
            row.append(number.get(target, -1))
        rows.append((dfa.final[state], tuple(row)))
    return tuple(rows)


def json_char_unit():
    from gxg.grammar.json_schema_emission import _ALL, _unit
    return _unit(_ALL)


# (unit, (lo, hi), closing): a JSON string's character (escapes and surrogate pairs one unit),
# a class, a prefix-free choice of multi-byte strings, a nested repetition
BOUNDED_RUNS = [(json_char_unit, (0, 8), b'"'), (json_char_unit, (3, 12), b'"'),
                (json_char_unit, (12, 12), b'"'), (json_char_unit, (0, 40), b'",'),
                (lambda: CharClass(((0x61, 0x7A),)), (2, 9), b"0"),
                (lambda: Choice((Literal(b"ab"), Literal(b"c"), Literal(b"de"))), (1, 10), b"!"),
                (lambda: Sequence((Literal(b"x"), Repeat(CharClass(((0x30, 0x39),)), 1, 2),
                                   Literal(b";"))), (0, 9), b"."),
                (lambda: CharClass(((0x80, 0x10FFFF),)), (0, 8), b"z")]


@pytest.mark.parametrize("native_setting", ["1", "0"], ids=["c", "python"])
@pytest.mark.parametrize("make_unit,bounds,closing", BOUNDED_RUNS)
def test_bounded_runs_are_built_as_the_usual_build(make_unit, bounds, closing, native_setting,
                                                   monkeypatch):
    """``open unit{lo,hi} close`` built as a chain of the unit's DFA (``_bounded_run_dfa``)
    accepts what the usual build (unrolled, determinised, minimised) accepts, with as many
    states: it is that rule's minimal DFA, and the very DFA ``_minimise`` gives (numbered
    breadth-first with moves in letter order: in C, and in Python without it)."""
    from gxg.compiler.automaton import (_bounded_run_dfa, _breadth_first, _determinise,
                                        _minimise, _NfaBuilder)
    monkeypatch.setenv("GXG_NATIVE", native_setting)  # the breadth-first numbering in C or not
    body = Sequence((Literal(b'"'), Repeat(make_unit(), *bounds), Literal(closing)))
    builder = _NfaBuilder("r", {}, 500_000, {})
    chain = _bounded_run_dfa(body, builder, 10**6)
    assert chain is not None
    usual = _minimise(_determinise(builder.build(body), "r", 10**6, 500_000))
    assert chain.num_states == usual.num_states
    assert canonical_dfa(chain) == canonical_dfa(usual)
    assert _breadth_first(chain.moves, 0) == list(range(chain.num_states))
    # numbered as _minimise numbers: the same DFA, state for state, moves in letter order
    assert chain == usual
    assert [list(move) for move in chain.moves] == [sorted(move) for move in chain.moves]


@pytest.mark.parametrize("body", [
    # a unit that is a prefix of another unit: after "a" the chain could not tell them apart
    Sequence((Literal(b'"'), Repeat(Choice((Literal(b"a"), Literal(b"ab"))), 0, 9),
              Literal(b'"'))),
    # the closing byte could also start a unit
    Sequence((Literal(b'"'), Repeat(CharClass(((0x61, 0x7A),)), 0, 9), Literal(b"q"))),
    # a unit that loops back to its start
    Sequence((Literal(b'"'), Repeat(Repeat(Literal(b"ab"), 1, None), 0, 9), Literal(b'"'))),
    # a unit with a rule reference; fewer copies than the chain is for; no closing literal
    Sequence((Literal(b'"'), Repeat(RuleRef("x"), 0, 9), Literal(b'"'))),
    Sequence((Literal(b'"'), Repeat(CharClass(((0x61, 0x7A),)), 0, 7), Literal(b'"'))),
    Sequence((Literal(b'"'), Repeat(CharClass(((0x61, 0x7A),)), 0, 9), RuleRef("x"))),
])
def test_bounded_runs_of_other_shapes_take_the_usual_build(body):
    from gxg.compiler.automaton import _bounded_run_dfa, _NfaBuilder
    assert _bounded_run_dfa(body, _NfaBuilder("r", {"x": 1}, 500_000, {}), 10**6) is None


def test_a_json_string_of_bounded_length_is_built_as_a_chain():
    """``maxLength`` strings take the chain (the rule DFA cache then holds it), and the
    automaton is the one the usual build gives (same tables)."""
    from gxg.compiler import automaton
    from gxg.compiler.passes import prepare
    grammar = prepare(Grammar.from_json_schema({"type": "string", "maxLength": 300}))
    automaton.clear_rule_dfa_cache()
    original = automaton._bounded_run_dfa
    chains = []
    try:
        automaton._bounded_run_dfa = lambda *args, **kwargs: chains.append(
            original(*args, **kwargs)) or chains[-1]
        chained = build_automaton(grammar)
    finally:
        automaton._bounded_run_dfa = original
    built = [chain for chain in chains if chain is not None]
    assert len(built) == 1 and built[0].num_states > 300 * 10  # the string rule
    automaton.clear_rule_dfa_cache()
    try:
        automaton._bounded_run_dfa = lambda *args, **kwargs: None
        usual = build_automaton(grammar)
    finally:
        automaton._bounded_run_dfa = original
    automaton.clear_rule_dfa_cache()
    assert chained.num_nodes == usual.num_nodes > 300 * 10
    assert canonical_automaton(chained) == canonical_automaton(usual)


def canonical_automaton(a: Automaton) -> list:
    """Per rule, its nodes breadth-first from its start over the bytes in order and then its
    references, each as (final, the target's number per byte, (callee, return's number) per
    reference): equal for two automata that differ only in how each rule numbers its nodes."""
    forms = []
    for rule in range(a.num_rules):
        number, order, rows = {int(a.rule_start[rule]): 0}, [int(a.rule_start[rule])], []
        for node in order:  # grows while iterating
            targets = a.next_node[node][a.byte_class].tolist()
            refs = sorted(a.refs(node))
            for target in targets + [ret for _, ret in refs]:
                if target >= 0 and target not in number:
                    number[target] = len(order)
                    order.append(target)
            rows.append((bool(a.is_final[node]), tuple(number.get(t, -1) for t in targets),
                         tuple((callee, number[ret]) for callee, ret in refs)))
        forms.append(rows)
    return forms
