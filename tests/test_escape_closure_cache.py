"""The escape-closure cache of ``StackWalker`` (``_escape_closure``): every closure and every
token mask is exactly what the walk without the cache gives.

The reference is ``brute_close`` below: the closure as it was before the cache, each escape
walked element by element into every call site and on through tail-called callers. For every
grammar of the zoo, hand-written grammars with many call sites, tail-call chains and cycles
through the callers, JSON-Schema shapes of the same kind and random grammars, configurations
are explored byte by byte from every scannable node (mask-cache mode, with and without
lookahead), from the root (full-stack mode), from context-pair stacks (r, n) and without
context expansion; at each, ``close`` must equal ``brute_close``. The mask cache's entries are
compared bit for bit with those of a walker whose ``close`` is ``brute_close``. A closure too
large for ``MAX_CLOSURE_ELEMENTS`` is still an error, also when most of it comes from a cached
escape.
"""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import gxg
from gxg.compiler import stack_walk
from gxg.compiler.automaton import build_automaton
from gxg.compiler.mask_cache import below_nodes, build_mask_cache
from gxg.compiler.passes import prepare
from gxg.compiler.stack_walk import ANYTHING, END, StackWalker
from gxg.grammar_compiler import token_trie
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from test_passes import small_grammars


def brute_close(walker: StackWalker, elements):
    """The closure without the cache: every escape's call sites pushed and walked again."""
    seen, keep, work = set(), [], list(elements)
    while work:
        element = work.pop()
        if element in seen:
            continue
        seen.add(element)
        if len(seen) > stack_walk.MAX_CLOSURE_ELEMENTS:
            raise gxg.GrammarError("the grammar is too ambiguous (brute force)")
        stack, escaped, lookahead = element
        if not stack or stack is ANYTHING:
            keep.append(element)
            continue
        top = stack[-1]
        if walker._scannable[top]:
            keep.append(element)
        below = stack[:-1]
        for rule, ret in walker._refs[top]:
            frame = below if walker._pure_return[ret] else below + (ret,)
            work.append((frame + (walker._start[rule],), escaped, lookahead))
        if walker._final[top]:
            if below:
                work.append((below, escaped, lookahead))
                continue
            if escaped or walker.escape_bottom:
                work.extend(walker._escape(walker._node_rule[top], escaped, lookahead))
            if not escaped:
                work.append((END, False, None))
    return frozenset(keep)


def advanced(walker: StackWalker, config, byte: int):
    """The elements of ``config`` after one byte, before the closure (as ``step`` does)."""
    out = []
    for stack, escaped, lookahead in config:
        if not stack:
            continue
        if stack is ANYTHING:
            out.append((stack, escaped, lookahead))
            continue
        target = walker._next[stack[-1]][walker._class[byte]]
        if target < 0:
            continue
        if lookahead is not None:
            lookahead = stack_walk._satisfied_or(walker._lookahead_walker.step(lookahead, byte))
            if lookahead == stack_walk.EMPTY_CONFIG:
                continue
        out.append((stack[:-1] + (target,), escaped, lookahead))
    return out


def class_bytes(automaton):
    """One byte per byte class (a step depends only on the class)."""
    first = {}
    for byte, cls in enumerate(automaton.byte_class.tolist()):
        first.setdefault(cls, byte)
    return sorted(first.values())


def check_walks(walker: StackWalker, starts, max_configs: int = 400) -> int:
    """``close`` equals ``brute_close`` on the start stacks and on every configuration reached
    from them byte by byte (breadth first, at most ``max_configs``); returns how many closures
    were compared."""
    bytes_ = class_bytes(walker.automaton)
    queue, known, compared = deque(), set(), 0
    for stack in starts:
        elements = [(tuple(stack), False, None)]
        config = walker.close(elements)
        assert config == brute_close(walker, elements), f"start {stack}"
        compared += 1
        if config not in known:
            known.add(config)
            queue.append(config)
    while queue and len(known) < max_configs:
        config = queue.popleft()
        for byte in bytes_:
            elements = advanced(walker, config, byte)
            got = walker.close(elements)
            assert got == brute_close(walker, elements), f"byte {byte} from {sorted(config)}"
            compared += 1
            if got and got not in known:
                known.add(got)
                queue.append(got)
    return compared


def check_automaton(automaton, max_configs: int = 400) -> None:
    nodes = np.nonzero(automaton.is_scannable)[0].tolist()
    for options in ({}, {"use_lookahead": False}, {"context_expansion": False}):
        walker = StackWalker(automaton, escape_bottom=True, **options)
        assert check_walks(walker, [(n,) for n in nodes], max_configs) >= len(nodes)
    # context pairs: (r, n) with r a node that can sit below n's rule
    below = below_nodes(automaton)
    walker = StackWalker(automaton, escape_bottom=True, use_lookahead=False)
    pairs = [(r, n) for n in nodes for r in sorted(below[int(automaton.node_rule[n])]) if r >= 0]
    check_walks(walker, pairs[:200], max_configs)
    # full-stack mode (the runtime's host walk), from the root
    walker = StackWalker(automaton, escape_bottom=False)
    check_walks(walker, [(int(automaton.rule_start[automaton.root_rule]),)], max_configs)


def automaton_of(grammar):
    return build_automaton(prepare(grammar))


# rules called from many places, tail-call chains, cycles through the callers
HAND_WRITTEN = {
    "many_call_sites": 'root ::= a "," a ";" a a "." a "!" a? a\na ::= "x" b\nb ::= "y" | ""',
    "tail_chain": 'root ::= "<" r1\nr1 ::= "a" r2?\nr2 ::= "b" r3?\nr3 ::= "c" r4?\n'
                  'r4 ::= "d" r5?\nr5 ::= "e"*',
    "tail_chain_shared": 'root ::= r1 | "(" r3 ")" | r2 "," r4\nr1 ::= "a" r2\nr2 ::= "b" r3 | "b"\n'
                         'r3 ::= "c" r4 | "c"\nr4 ::= "d" r1 | "d"',
    "recursive_callers": 'root ::= x\nx ::= "(" y ")" x? | "a" y\ny ::= "b" x | "c" | "d" y',
    "mutual_tail_cycle": 'root ::= p\np ::= "p" q | "p"\nq ::= "q" p | "q" r\nr ::= "r" p?',
    "nullable_tails": 'root ::= s s s\ns ::= t?\nt ::= "t" s',
    "lookahead_callers": 'root ::= k "=" k ";" k\nk ::= [a-z]+ (= [=;])',
}
SCHEMAS = {
    "half_required_compliant": ({"type": "object",
                                 "properties": {f"p{i}": {"type": "integer"} for i in range(12)},
                                 "required": [f"p{i}" for i in range(0, 12, 2)]},
                                {"strict_mode": False, "any_order": True}),
    "prefix_items": ({"type": "array", "prefixItems": [{"type": "integer"}] * 12,
                      "items": False}, {}),
    "nested": ({"type": "object", "properties": {
        "a": {"type": "array", "items": {"$ref": "#"}},
        "b": {"anyOf": [{"type": "string"}, {"$ref": "#"}]}}}, {}),
}


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_closures_equal_the_uncached_ones_on_the_zoo(name, ebnf, sentences):
    check_automaton(automaton_of(zoo_grammar(ebnf)))


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_closures_equal_the_uncached_ones_on_call_sites_chains_and_cycles(name):
    check_automaton(automaton_of(gxg.Grammar.from_ebnf(HAND_WRITTEN[name])))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_closures_equal_the_uncached_ones_on_json_schema_shapes(name):
    schema, options = SCHEMAS[name]
    check_automaton(automaton_of(gxg.Grammar.from_json_schema(schema, **options)), 150)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars())
def test_closures_equal_the_uncached_ones_on_random_grammars(grammar):
    try:
        automaton = automaton_of(grammar)
    except gxg.GrammarError:
        return
    try:
        check_automaton(automaton, 60)
    except gxg.GrammarError as error:  # the limit: the brute force must have refused too
        assert "too ambiguous" in str(error)


def entries(automaton, trie):
    cache = build_mask_cache(automaton, trie)
    return [(int(e.store_type), e.indices.tolist(), e.bitset.tolist(), e.uncertain.tolist())
            for e in cache.entries]


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_mask_cache_entries_equal_the_uncached_ones(name, ebnf, sentences, monkeypatch):
    automaton = automaton_of(zoo_grammar(ebnf))
    trie = token_trie(make_info(synthetic_vocab(sentences)))
    cached = entries(automaton, trie)
    monkeypatch.setattr(StackWalker, "close", brute_close)
    assert cached == entries(automaton, trie)


def test_hand_written_mask_cache_entries_equal_the_uncached_ones(monkeypatch):
    for ebnf in HAND_WRITTEN.values():
        automaton = automaton_of(gxg.Grammar.from_ebnf(ebnf))
        trie = token_trie(make_info(synthetic_vocab(["x,y;xyxy.x!xy", "<abcdeee", "(ab)c",
                                                     "pqrpq", "ttt", "ab=c;d"])))
        cached = entries(automaton, trie)
        with monkeypatch.context() as patch:
            patch.setattr(StackWalker, "close", brute_close)
            assert cached == entries(automaton, trie), ebnf


def test_a_cached_escape_larger_than_the_limit_is_still_an_error(monkeypatch):
    """A rule with 40 call sites: its escape closure has 40 elements. Under a limit of 30 the
    node that completes the rule is refused (by the cached closure as by the brute force);
    under 100 both give the same closure."""
    automaton = automaton_of(gxg.Grammar.from_ebnf('root ::= ' + ' ","'.join(['a'] * 40) +
                                                   '\na ::= "x" a?'))
    x_node = int(automaton.rule_start[automaton.rule_id("a")])
    elements = [((x_node,), False, None)]
    monkeypatch.setattr(stack_walk, "MAX_CLOSURE_ELEMENTS", 100)
    walker = StackWalker(automaton, escape_bottom=True)
    after_x = advanced(walker, walker.initial((x_node,)), ord("x"))
    assert len(walker.close(after_x)) > 30
    assert walker.close(after_x) == brute_close(walker, after_x)
    monkeypatch.setattr(stack_walk, "MAX_CLOSURE_ELEMENTS", 30)
    for fresh in (False, True):  # taken from the cache, and computed afresh
        if fresh:
            walker = StackWalker(automaton, escape_bottom=True)
        with pytest.raises(gxg.GrammarError, match="too ambiguous"):
            walker.close(after_x)
        with pytest.raises(gxg.GrammarError):
            brute_close(walker, after_x)
    assert walker.close(elements) == brute_close(walker, elements)  # small: no error
