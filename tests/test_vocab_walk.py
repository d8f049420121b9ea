"""The vocabulary walk (``gxg.compiler.vocab_walk``): the trie walk with run skipping gives, for
every start and every token, the state a byte-by-byte walk of the token gives; the run tables
(``RunBreaks``) meet their definition on vocabularies with broken UTF-8, runs of spaces and
repeated tokens, by both of their ways (a table over the vocabulary, a search over few tokens).
"""
from __future__ import annotations

import os
import random
from unittest import mock

import numpy as np
import pytest

import gxg
from gxg.compiler.automaton import build_automaton
from gxg.compiler.passes import prepare
from gxg.compiler.stack_walk import StackWalker
from gxg.compiler.vocab_walk import (DEAD, NO_LOOP, RunBreaks, TokenTrie, VocabularyWalk,
                                     walk_trie)
from gxg.compiler import vocab_walk
from gxg.grammar_compiler import token_trie
from grammar_zoo import GRAMMAR_ZOO, info_or_skip, make_info, synthetic_vocab, zoo_grammar

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string",
                                                             "pattern": "^[a-z]+$"}},
                         "note": {"type": "string", "maxLength": 3}},
          "required": ["name"]}
# (name, grammar): strings, runs of spaces and digits, characters outside ASCII, free text
GRAMMARS = [
    ("json", lambda: gxg.Grammar.builtin_json_grammar()),
    ("schema", lambda: gxg.Grammar.from_json_schema(SCHEMA)),
    ("spaces", lambda: gxg.Grammar.from_ebnf('root ::= "{" [ \\t\\n]* ("x" [ ]*)? "}"')),
    ("free_text", lambda: gxg.Grammar.from_ebnf('root ::= [^<]* "<end>"')),
    ("letters", lambda: gxg.Grammar.from_ebnf('root ::= [a-zé中]+ ("," [0-9]+)*')),
    # every character leaves the loop of [a-z ]* alive, but none comes back to it
    ("leave_on_character",
     lambda: gxg.Grammar.from_ebnf('root ::= [a-z ]* [^\\x00-\\x7f] "x"')),
    # a chain of states, none looping, alive on most prefixes: the dense levels
    ("bounded", lambda: gxg.Grammar.from_ebnf('root ::= [^"]{0,16} "\\""')),
]


def runs_vocab(seed=0):
    """Tokens that stress run skipping: long space runs with and without a tail, strings with
    quotes and escapes, whole and broken UTF-8, a repeated token and an empty one."""
    rng = random.Random(seed)
    tokens = {bytes([b]) for b in range(256)}
    for k in range(2, 40):
        tokens.update({b" " * k, b" " * k + b"x", b"\n" + b" " * k, b"\t" * k})
    pieces = ["abc", "\u00e9t\u00e9", "\u4e2d\u6587", "\U0001f600", '"', "\\n", "12", " ", ":"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 5)))
        data = text.encode()
        cut = rng.randrange(len(data) + 1)
        tokens.update({data, data[:cut], data[cut:]})  # cuts break characters
    vocab = sorted(t for t in tokens if t)
    # repeats of earlier tokens (one inside strings, two that start JSON values), an empty
    # token, the stop token
    return vocab + [vocab[100], b'"', b"{", b"", b"</s>"]


def _vocabulary(name):
    if name == "runs":
        return make_info(runs_vocab())
    if name == "zoo":
        return make_info(synthetic_vocab([s for z in GRAMMAR_ZOO for s in z[2]]))
    return info_or_skip(name)


def _brute_force_breaks(data: bytes, bits: np.ndarray, utf8: bool):
    """next_break of every position of one token, by its definition, in plain Python."""
    whole, tail = [False] * len(data), [False] * len(data)
    i = 0
    while i < len(data):
        for length in (2, 3, 4):
            piece = data[i: i + length]
            if data[i] >= 0x80 and len(piece) == length:
                try:
                    if len(piece.decode("utf-8")) == 1:
                        whole[i: i + length] = [True] * length
                        tail[i + 1: i + length] = [True] * (length - 1)
                        i += length - 1
                        break
                except UnicodeDecodeError:
                    pass
        i += 1

    def is_break(q):
        if utf8 and data[q] >= 0x80:
            return not whole[q]
        return not bits[data[q]]
    out = []
    for p in range(len(data)):
        if utf8 and tail[p]:
            out.append(p)
            continue
        q = p
        while q < len(data) and not is_break(q):
            q += 1
        out.append(q)
    return out


@pytest.mark.parametrize("utf8", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_run_breaks_meet_their_definition(seed, utf8):
    rng = np.random.default_rng(seed)
    info = make_info(runs_vocab(seed))
    trie = token_trie(info)
    bits = rng.random(256) < [0.9, 0.5, 0.1][seed]
    bits[0x80:] = bits[0x80:] & ~utf8  # a utf8 key's high bytes are decided per character
    key = (np.packbits(bits).tobytes(), utf8)
    runs = RunBreaks(trie.runs.data, trie.token_offsets)
    tokens = np.flatnonzero(trie.token_lengths > 0)
    positions = np.concatenate([np.arange(trie.token_offsets[t], trie.token_ends[t])
                                for t in tokens])
    owners = np.repeat(tokens, trie.token_lengths[tokens])
    expected = np.concatenate([
        np.array(_brute_force_breaks(bytes(trie.runs.data[trie.token_offsets[t]:
                                                          trie.token_ends[t]]), bits, utf8))
        + trie.token_offsets[t] for t in tokens])
    ends = trie.token_ends[owners]
    by_table = np.minimum(runs.table(key)[positions], ends)
    few = positions[:: 7]  # the search over few tokens
    by_search = np.minimum(runs._search(key, few, owners[:: 7]), ends[:: 7])
    if utf8:
        by_search = np.where(runs.utf8_tail[few], few, by_search)
    np.testing.assert_array_equal(by_table, expected)
    np.testing.assert_array_equal(by_search, expected[:: 7])


def _final_states(walk, trie, start):
    """Token -> final state from ``start``, by the trie walk and byte by byte (in numpy)."""
    origin, tokens, final = walk_trie(walk, trie, np.array([start], dtype=np.int32))
    assert (origin == 0).all() and len(np.unique(tokens)) == len(tokens)
    by_trie = dict(zip(tokens.tolist(), final.tolist()))
    everything = np.flatnonzero(trie.token_lengths > 0)
    with mock.patch.dict(os.environ, {"GXG_NATIVE": "0"}):  # the walks in numpy
        by_bytes = walk.walk_pairs(np.full(len(everything), start, np.int32), everything)
    alive = by_bytes != DEAD
    return by_trie, dict(zip(everything[alive].tolist(), by_bytes[alive].tolist()))


@pytest.mark.parametrize("walker", ["numpy", "c"])
@pytest.mark.parametrize("vocabulary", ["zoo", "runs", "qwen", "smollm2"])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_trie_walk_equals_the_byte_by_byte_walk(vocabulary, name, make_grammar, walker,
                                                monkeypatch):
    """From every scannable node, the trie walk (in numpy, or below its first level in C:
    csrc/vocab_walk.c) gives every token the final state of a byte-by-byte walk in numpy."""
    if walker == "c":
        _native_or_skip()
    else:
        monkeypatch.setenv("GXG_NATIVE", "0")
    info = _vocabulary(vocabulary)
    trie = token_trie(info)
    automaton = build_automaton(prepare(make_grammar()))
    walk = VocabularyWalk(StackWalker(automaton, escape_bottom=True), info.token_bytes,
                          info.token_offsets)
    used = {"whole": 0, "tokens": 0, "below_native": 0, "dense": 0}
    for part in used:
        original = getattr(vocab_walk, f"_walk_{part}")

        def spy(*args, _original=original, _part=part):
            used[_part] += 1
            return _original(*args)
        monkeypatch.setattr(vocab_walk, f"_walk_{part}", spy)
    for node in np.flatnonzero(automaton.is_scannable).tolist():
        start = walk.intern(walk.walker.initial((node,), as_top=True))
        by_trie, by_bytes = _final_states(walk, trie, start)
        assert by_trie == by_bytes, f"node {node}"
    if name in ("json", "schema", "free_text") and vocabulary in ("qwen", "smollm2"):
        assert used["whole"] > 0  # inside strings: whole-vocabulary runs
    if name == "spaces" and vocabulary != "zoo":  # space prefixes leave the trie
        assert used["tokens" if walker == "numpy" else "below_native"] > 0
    if name == "bounded" and vocabulary in ("qwen", "smollm2"):
        assert used["dense"] > 0  # most prefixes alive: whole levels (numpy) either way
    assert name == "bounded" or any(key_id != NO_LOOP for key_id in walk.skip_ids.tolist())


# a lookahead: a step also advances the lookahead's stacks, whose tops read the byte too
LOOKAHEAD = ("lookahead", lambda: gxg.Grammar.from_ebnf(
    'root ::= (key [0-9a-z]+ ",")* "."\nkey ::= "\\"" [a-z]+ "\\"" (= [0-9])'))


@pytest.mark.parametrize("escape_bottom", [True, False])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS + [LOOKAHEAD],
                         ids=[g[0] for g in GRAMMARS + [LOOKAHEAD]])
def test_every_transition_the_walk_fills_is_the_step_by_that_byte(name, make_grammar,
                                                                  escape_bottom):
    """The walk's table is filled a byte class at a time, and dead bytes all at once
    (``_mark_dead_bytes``): each entry the trie walks filled equals a separate walker's step
    by that byte alone."""
    info = make_info(runs_vocab())
    trie = token_trie(info)
    automaton = build_automaton(prepare(make_grammar()))
    oracle = StackWalker(automaton, escape_bottom=escape_bottom)
    rng = np.random.default_rng(0)
    for node in np.flatnonzero(automaton.is_scannable).tolist():
        # a walk per start: which bytes a state is first asked for depends on the walk
        walker = StackWalker(automaton, escape_bottom=escape_bottom)
        walk = VocabularyWalk(walker, info.token_bytes, info.token_offsets)
        walk_trie(walk, trie, np.array([walk.intern(walker.initial((node,)))], np.int32))
        table = walk._transition[: len(walk.configs) * 256].reshape(-1, 256)
        filled = np.argwhere(table != vocab_walk.UNKNOWN)
        filled = filled[filled[:, 0] != DEAD]
        for state, byte in filled[rng.permutation(len(filled))[:2_000]].tolist():
            assert walk.configs[table[state, byte]] == oracle.step(walk.configs[state], byte), \
                (node, state, byte)


@pytest.mark.parametrize("context_expansion", [True, False])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS + [LOOKAHEAD],
                         ids=[g[0] for g in GRAMMARS + [LOOKAHEAD]])
def test_a_step_of_grouped_classes_is_the_step_by_each_byte(name, make_grammar,
                                                           context_expansion):
    """``StackWalker.step_classes`` (classes that move a configuration's elements alike share
    one closure) gives, for every class, the step by each byte of that class; None (step each
    class) only where an element carries a lookahead. Without context expansion the escapes
    are ANYTHING elements, which every byte keeps."""
    automaton = build_automaton(prepare(make_grammar()))
    walker = StackWalker(automaton, escape_bottom=True, context_expansion=context_expansion)
    classes = range(int(automaton.byte_class.max()) + 1)
    members = [np.flatnonzero(automaton.byte_class == c).tolist() for c in classes]
    configs = {walker.initial((node,)) for node in np.flatnonzero(automaton.is_scannable)}
    for config in list(configs):  # and one byte on: configurations inside rules
        configs.update(walker.step(config, byte) for byte in range(256))
    grouped_somewhere = False
    for config in configs:
        groups = walker.step_classes(config, classes)
        if groups is None:
            assert any(lookahead is not None for _, _, lookahead in config)
            continue
        assert sorted(c for group, _ in groups for c in group) == list(classes)
        grouped_somewhere |= any(len(group) > 1 for group, _ in groups)
        for group, stepped in groups:
            for cls in group:
                for byte in members[cls]:
                    assert stepped == walker.step(config, byte), (config, byte)
    assert grouped_somewhere


@pytest.mark.parametrize("name,make_grammar", GRAMMARS + [LOOKAHEAD],
                         ids=[g[0] for g in GRAMMARS + [LOOKAHEAD]])
def test_close_returns_plain_elements_as_the_walk_would(name, make_grammar):
    """``close`` returns elements whose tops are all plain as they are, without the walk: for
    the elements of every configuration one byte on from every scannable node, and for each
    element alone, it equals the walk of the push, pop and escape moves. Where the automaton
    has tops that scan but are final or call a rule (which only the walk closes rightly), some
    of these elements have one."""
    automaton = build_automaton(prepare(make_grammar()))
    walker = StackWalker(automaton, escape_bottom=True)
    configs = {walker.initial((node,)) for node in np.flatnonzero(automaton.is_scannable)}
    for config in list(configs):
        configs.update(walker.step(config, byte) for byte in range(256))
    element_sets = {frozenset([element]) for config in configs for element in config}
    element_sets |= configs
    scanning_but_not_plain = 0
    for elements in element_sets:
        assert walker.close(list(elements)) == walker._walk_closure(list(elements)), elements
        scanning_but_not_plain += any(
            stack and stack[-1] >= 0 and automaton.is_scannable[stack[-1]]
            and not automaton.lists.is_plain[stack[-1]] for stack, _, _ in elements)
    plain = np.array(automaton.lists.is_plain, dtype=bool)
    assert scanning_but_not_plain or not (automaton.is_scannable & ~plain).any()


# two loops live at once, in two rules (recursive: not inlined): a byte that one of them
# leaves is no loop
TWO_LOOPS = ("two_loops", lambda: gxg.Grammar.from_ebnf(
    'root ::= a "1" | b "2"\na ::= [a-f]* ("z" | "(" a ")")\nb ::= [a-c]* ("y" | "[" b "]")'))


@pytest.mark.parametrize("name,make_grammar", GRAMMARS + [TWO_LOOPS],
                         ids=[g[0] for g in GRAMMARS + [TWO_LOOPS]])
def test_loops_read_off_plain_tops_are_loops(name, make_grammar):
    """A configuration whose tops are all plain nodes has its loop bytes read off
    ``next_node`` (``_plain_loops``): each is a byte the configuration's step maps back onto
    itself. A loop byte that moves some top elsewhere while the configuration comes back
    whole is missed (walks then only break there): not in the grammars of the other tests,
    but in two_loops (")" after nested calls). Where every top's characters lead it back to
    itself through plain nodes (``_node_characters_loop``), every multi-byte character maps
    the configuration onto itself."""
    info = make_info(runs_vocab())
    automaton = build_automaton(prepare(make_grammar()))
    oracle = StackWalker(automaton, escape_bottom=True)
    read_off = characters_read_off = 0
    # every scannable node, and every rule's start (a call's closure: tops of several rules)
    starts = set(np.flatnonzero(automaton.is_scannable).tolist()) | set(
        automaton.rule_start.tolist())
    for node in sorted(starts):
        walker = StackWalker(automaton, escape_bottom=True)
        walk = VocabularyWalk(walker, info.token_bytes, info.token_offsets)
        walk_trie(walk, token_trie(info), np.array([walk.intern(walker.initial((node,)))],
                                                  np.int32))
        for state in range(1, len(walk.configs)):
            tops = walk._plain_tops(state)
            if tops is None:
                continue
            loops = walk._plain_loops(state, tops)
            read_off += 1
            config = walk.configs[state]
            truth = np.array([oracle.step(config, byte) == config for byte in range(256)])
            assert not (loops & ~truth).any(), (node, state)  # never a false loop
            if name != "two_loops":
                assert (loops == truth).all(), (node, state)
            if all(map(walk._node_characters_loop, tops)):
                characters_read_off += 1
                for character in SAMPLE_CHARACTERS:  # never a false character loop
                    assert oracle.walk(config, character.encode()) == config, \
                        (node, state, character)
    assert read_off > 0
    # strings loop on characters (the answer can be yes)
    assert characters_read_off > 0 or name not in ("json", "schema", "free_text")


# multi-byte characters of every UTF-8 sequence shape: the ends of each range and a sample
SAMPLE_CHARACTERS = ["\u0080", "\u00e9", "\u07ff", "\u0800", "\u0fff", "\u1000", "\u4e2d",
                     "\ucfff", "\ud000", "\ud7ff", "\ue000", "\uffff", "\U00010000",
                     "\U0001f600", "\U0003ffff", "\U00040000", "\U000fffff", "\U00100000",
                     "\U0010ffff"] + [chr(c) for c in random.Random(0).sample(
                         [c for c in range(0x80, 0x110000, 97) if not 0xD800 <= c < 0xE000], 60)]


def test_walk_of_a_repeated_token_takes_its_twin_result():
    info = make_info(runs_vocab())
    trie = token_trie(info)
    assert trie.has_duplicates
    automaton = build_automaton(prepare(gxg.Grammar.from_ebnf('root ::= [^<]* "<end>"')))
    walk = VocabularyWalk(StackWalker(automaton, escape_bottom=True), info.token_bytes,
                          info.token_offsets)
    start = walk.intern(walk.walker.initial((int(np.flatnonzero(automaton.is_scannable)[0]),),
                                            as_top=True))
    origin, tokens, final = walk_trie(walk, trie, np.array([start], dtype=np.int32))
    repeats = np.flatnonzero(trie.duplicate_of >= 0)
    found = dict(zip(tokens.tolist(), final.tolist()))
    for token in repeats.tolist():
        assert found[token] == found[int(trie.duplicate_of[token])]


@pytest.mark.parametrize("vocabulary", ["runs", "qwen"])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_pair_walk_skipping_runs_equals_the_byte_by_byte_walk(vocabulary, name, make_grammar,
                                                             monkeypatch):
    """``walk_pairs`` with the vocabulary's RunBreaks (the CPU runtime's uncertain-token
    check, from full stacks) gives every (state, token) pair's byte-by-byte final state."""
    monkeypatch.setattr(vocab_walk, "RUNS_MIN_PAIRS", 0)  # skip runs however few the pairs
    info = _vocabulary(vocabulary)
    trie = token_trie(info)
    automaton = build_automaton(prepare(make_grammar()))
    walk = VocabularyWalk(StackWalker(automaton, escape_bottom=False), info.token_bytes,
                          info.token_offsets)
    everything = np.flatnonzero(trie.token_lengths >= 0)
    for node in np.flatnonzero(automaton.is_scannable).tolist():
        start = walk.intern(walk.walker.initial((node,)))
        states = np.full(len(everything), start, np.int32)
        walk.runs = None
        by_bytes = walk.walk_pairs(states, everything)
        walk.runs = trie.runs
        np.testing.assert_array_equal(walk.walk_pairs(states, everything), by_bytes,
                                      err_msg=f"node {node}")
    assert name == "bounded" or any(key_id != NO_LOOP for key_id in walk.skip_ids.tolist())


@pytest.mark.parametrize("name,make_grammar", GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_masks_over_a_vocabulary_with_a_repeated_token_equal_the_brute_force(name,
                                                                            make_grammar):
    """Entries give a repeated token its twin's class, on both ways an entry is built (few
    tokens: sorted lists; many: one class per token)."""
    from gxg.grammar_compiler import GrammarCompiler
    from gxg.matcher import GrammarMatcher
    from mask_oracles import brute_force_mask, matcher_mask
    info = make_info(runs_vocab())
    compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(make_grammar())
    matcher = GrammarMatcher(compiled)
    rng = random.Random(name)
    for _ in range(6):
        mask = matcher_mask(matcher, info.vocab_size)
        np.testing.assert_array_equal(mask, brute_force_mask(matcher))
        allowed = [t for t in np.flatnonzero(mask).tolist() if t not in matcher.stop_token_ids]
        if not allowed:
            break
        assert matcher.accept_token(rng.choice(allowed))


def _native_or_skip():
    from gxg import native
    if native.library("vocab_walk.c") is None:
        pytest.skip("no C compiler here: the walks run in numpy only")


def _walked_configs(walk, trie, start):
    """Token -> final configuration from ``start`` by the trie walk, and by the pair walk
    (configurations, not state numbers: two walks may intern states in another order)."""
    origin, tokens, final = walk_trie(walk, trie, np.array([start], dtype=np.int32))
    everything = np.flatnonzero(trie.token_lengths > 0)
    by_pairs = walk.walk_pairs(np.full(len(everything), start, np.int32), everything)
    alive = by_pairs != DEAD
    return ({t: walk.configs[s] for t, s in zip(tokens.tolist(), final.tolist())},
            {t: walk.configs[s] for t, s in zip(everything[alive].tolist(),
                                               by_pairs[alive].tolist())})


@pytest.mark.parametrize("break_tables", ["read", "scanned"])
@pytest.mark.parametrize("min_pairs", [0, 1 << 30])  # pair walks skipping runs, or not
@pytest.mark.parametrize("vocabulary", ["runs", "qwen"])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS + [LOOKAHEAD],
                         ids=[g[0] for g in GRAMMARS + [LOOKAHEAD]])
def test_the_c_walk_equals_the_numpy_walk(vocabulary, name, make_grammar, min_pairs,
                                          break_tables, monkeypatch):
    """csrc/vocab_walk.c (``gxg.native``) walks the pairs that the trie walk hands to runs
    and the pair walks: from every scannable node, every token ends in the configuration the
    numpy walk (``GXG_NATIVE=0``) gives, and the same tokens die; a run's end read off the
    loop key's break table where it is built, or scanned byte by byte."""
    _native_or_skip()
    if break_tables == "scanned":
        monkeypatch.setattr(RunBreaks, "built_table", lambda self, key: None)
    monkeypatch.setattr(vocab_walk, "RUNS_MIN_PAIRS", min_pairs)
    monkeypatch.setattr(vocab_walk, "C_MIN_PAIRS", 0)  # the C pair walk however few the pairs
    info = _vocabulary(vocabulary)
    trie = token_trie(info)
    automaton = build_automaton(prepare(make_grammar()))
    walks = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("GXG_NATIVE", setting)
        walk = VocabularyWalk(StackWalker(automaton, escape_bottom=True), info.token_bytes,
                              info.token_offsets, runs=trie.runs)
        walks[setting] = [_walked_configs(walk, trie, walk.intern(
            walk.walker.initial((node,), as_top=True)))
            for node in np.flatnonzero(automaton.is_scannable).tolist()]
    assert walks["1"] == walks["0"]


@pytest.mark.parametrize("limit,value", [("C_STACK_ROOM", 256), ("C_WORK_PER_CALL", 1)])
@pytest.mark.parametrize("name,make_grammar", GRAMMARS[:2], ids=[g[0] for g in GRAMMARS[:2]])
def test_one_c_walk_from_every_node_at_once_equals_the_numpy_walks(name, make_grammar, limit,
                                                                     value, monkeypatch):
    """All scannable nodes as the starts of one trie walk, with the C walk's stack cut to one
    trie node's children, or its work per call to one item: items outgrow the call, wait, and
    the next call goes on; every (start, token) ends where the numpy walk of that start alone
    ends."""
    _native_or_skip()
    monkeypatch.setattr(vocab_walk, limit, value)
    calls = []
    kernel = vocab_walk._trie_kernel()
    monkeypatch.setattr(vocab_walk, "_trie_kernel",
                        lambda: lambda *args: calls.append(args[0]) or kernel(*args))
    info = _vocabulary("qwen")
    trie = token_trie(info)
    automaton = build_automaton(prepare(make_grammar()))
    nodes = np.flatnonzero(automaton.is_scannable).tolist()
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("GXG_NATIVE", setting)
        walk = VocabularyWalk(StackWalker(automaton, escape_bottom=True), info.token_bytes,
                              info.token_offsets, runs=trie.runs)
        starts = np.array([walk.intern(walk.walker.initial((node,), as_top=True))
                           for node in nodes], dtype=np.int32)
        if setting == "1":
            origin, tokens, final = walk_trie(walk, trie, starts)
        else:  # one start at a time
            parts = [walk_trie(walk, trie, starts[i:i + 1]) for i in range(len(starts))]
            origin = np.concatenate([np.full(len(p[0]), i) for i, p in enumerate(parts)])
            tokens = np.concatenate([p[1] for p in parts])
            final = np.concatenate([p[2] for p in parts])
        results[setting] = {(o, t): walk.configs[s]
                            for o, t, s in zip(origin.tolist(), tokens.tolist(), final.tolist())}
    assert len(calls) > 50  # the stack overflowed again and again
    assert results["1"] == results["0"]
