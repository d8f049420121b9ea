"""The lazy token-mask cache (``GrammarCompiler(mask_cache=...)``): compiling walks no
vocabulary; a node's entry computed on first use equals the eagerly computed one bit for bit,
whatever order the nodes are asked in and from however many threads; what was computed is kept
by serialization and the rest stays lazy; the background build completes the cache; the
device arena (and the CPU batch over it) gets every entry."""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

import gxg
from gxg.batch import GrammarBatch
from gxg.compiler import mask_cache as mask_cache_module
from gxg.grammar_compiler import CompiledGrammar, GrammarCompiler
from grammar_zoo import GRAMMAR_ZOO, info_or_skip, make_info, synthetic_vocab, zoo_grammar
from gxg.testing import Recognizer
from mask_oracles import mask_to_bool, recognizer_mask

ZOO_IDS = [z[0] for z in GRAMMAR_ZOO]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
          "required": ["name"]}


def assert_same_entry(lazy, eager, where):
    assert lazy.store_type == eager.store_type, where
    for part in ("indices", "bitset", "uncertain"):
        np.testing.assert_array_equal(getattr(lazy, part), getattr(eager, part),
                                      err_msg=f"{where}: {part}")


def assert_same_cache(lazy_cache, eager_cache, order):
    """Ask the lazy cache for every node in ``order`` (one by one, then the rest at once)."""
    for node in order[: len(order) // 2]:
        assert_same_entry(lazy_cache.entry(node), eager_cache.entry(node), f"node {node}")
    rest = order[len(order) // 2:]
    for node, entry in zip(rest, lazy_cache.entries_of(rest)):
        assert_same_entry(entry, eager_cache.entry(node), f"node {node}")
    assert lazy_cache.complete


def zoo_compiled(ebnf, sentences, mode):
    info = make_info(synthetic_vocab(sentences))
    return GrammarCompiler(info, mask_cache=mode).compile_grammar(zoo_grammar(ebnf))


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=ZOO_IDS)
def test_lazy_entries_equal_eager_entries_on_the_zoo(name, ebnf, sentences):
    lazy = zoo_compiled(ebnf, sentences, "lazy")
    eager = zoo_compiled(ebnf, sentences, "eager")
    assert lazy.mask_cache.computed_nodes().size == 0 and eager.mask_cache.complete
    order = lazy.mask_cache.nodes.tolist()
    random.Random(name).shuffle(order)
    assert_same_cache(lazy.mask_cache, eager.mask_cache, order)


@pytest.mark.parametrize("vocabulary", ["qwen", "smollm2"])
def test_lazy_entries_equal_eager_entries_on_real_vocabularies(vocabulary):
    info = info_or_skip(vocabulary)
    for make in (lambda c: c.compile_builtin_json_grammar(),
                 lambda c: c.compile_json_schema(SCHEMA)):
        lazy = make(GrammarCompiler(info))
        eager = make(GrammarCompiler(info, mask_cache="eager"))
        order = lazy.mask_cache.nodes.tolist()[::-1]   # the last nodes first
        assert_same_cache(lazy.mask_cache, eager.mask_cache, order)


def test_compiling_lazily_walks_no_vocabulary(monkeypatch):
    calls = []
    original = mask_cache_module.walk_trie_parts
    monkeypatch.setattr(mask_cache_module, "walk_trie_parts",
                        lambda *a: (calls.append(1), original(*a))[1])
    name, ebnf, sentences = GRAMMAR_ZOO[0]
    compiled = zoo_compiled(ebnf, sentences, "lazy")
    assert calls == []
    matcher = gxg.GrammarMatcher(compiled)
    matcher.fill_next_token_bitmask(gxg.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size))
    assert calls and 0 < compiled.mask_cache.computed_nodes().size < len(compiled.mask_cache.nodes)


def masks_along_random_walk(compiled, seed, steps=12):
    info = compiled.tokenizer_info
    rng = random.Random(seed)
    matcher = gxg.GrammarMatcher(compiled)
    masks = []
    for _ in range(steps):
        mask = gxg.allocate_token_bitmask(1, info.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        masks.append(mask.clone())
        allowed = np.flatnonzero(mask_to_bool(mask[0].numpy(), info.vocab_size))
        if not len(allowed):
            break
        token = int(rng.choice(allowed))
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            break
    return masks


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=ZOO_IDS)
def test_matcher_masks_equal_with_either_cache(name, ebnf, sentences):
    lazy = zoo_compiled(ebnf, sentences, "lazy")
    eager = zoo_compiled(ebnf, sentences, "eager")
    for seed in range(3):
        for a, b in zip(masks_along_random_walk(lazy, seed), masks_along_random_walk(eager, seed)):
            assert torch.equal(a, b)


def test_serialization_keeps_what_was_computed_and_the_rest_stays_lazy():
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "arithmetic")
    lazy = zoo_compiled(ebnf, sentences, "lazy")
    eager = zoo_compiled(ebnf, sentences, "eager")
    masks_along_random_walk(lazy, seed=1, steps=1)       # computes the first tops
    computed = lazy.mask_cache.computed_nodes()
    assert 0 < len(computed) < len(lazy.mask_cache.nodes)
    back = CompiledGrammar.deserialize(lazy.serialize(), lazy.tokenizer_info)
    np.testing.assert_array_equal(back.mask_cache.computed_nodes(), computed)
    assert_same_cache(back.mask_cache, eager.mask_cache, back.mask_cache.nodes.tolist())
    full = CompiledGrammar.deserialize(eager.serialize(), eager.tokenizer_info)
    assert full.mask_cache.complete


def test_threads_asking_for_entries_at_once_get_the_eager_entries():
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "nested_arrays")
    lazy = zoo_compiled(ebnf, sentences, "lazy")
    eager = zoo_compiled(ebnf, sentences, "eager")
    nodes = lazy.mask_cache.nodes.tolist()
    results, errors = {}, []

    def ask(seed):
        try:
            order = nodes[:]
            random.Random(seed).shuffle(order)
            results[seed] = [(n, lazy.mask_cache.entry(n)) for n in order]
        except Exception as error:  # reported below: a thread's exception is otherwise lost
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for pairs in results.values():
        for node, entry in pairs:
            assert_same_entry(entry, eager.mask_cache.entry(node), f"node {node}")


def test_the_background_build_completes_the_cache():
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "arithmetic")
    compiled = zoo_compiled(ebnf, sentences, "background")
    eager = zoo_compiled(ebnf, sentences, "eager")
    masks_along_random_walk(compiled, seed=2, steps=5)   # fills meanwhile
    compiled.mask_cache.background.join(timeout=60)
    assert compiled.mask_cache.complete
    assert_same_cache(compiled.mask_cache, eager.mask_cache, compiled.mask_cache.nodes.tolist())


def test_the_arena_gets_every_entry_and_the_cpu_batch_matches_the_matcher():
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "nested_arrays")
    lazy = zoo_compiled(ebnf, sentences, "lazy")
    info = lazy.tokenizer_info
    batch = GrammarBatch(info, device="cpu", max_batch=1)
    batch.bind(0, lazy)
    assert lazy.mask_cache.complete                      # the arena holds every node's row
    mask = torch.zeros((1, (info.vocab_size + 31) // 32), dtype=torch.int32)
    batch.fill_next_token_bitmask(mask)
    assert torch.equal(mask, masks_along_random_walk(lazy, seed=0, steps=1)[0])


@pytest.mark.parametrize("bad", ["Lazy", "", 1])  # None: not given, the default ("lazy")
def test_unknown_cache_modes_are_refused(bad):
    name, ebnf, sentences = GRAMMAR_ZOO[0]
    with pytest.raises(ValueError, match="mask_cache"):
        GrammarCompiler(make_info(synthetic_vocab(sentences)), mask_cache=bad)


AMBIGUOUS = 'root ::= r1\nr1 ::= r2\nr2 ::= (r3 root root "a" root*){0,2}\nr3 ::= root'
AMBIGUOUS_VOCAB = [b"a", b"b", b"aa", b"ab", b"ba", b"bb", b"aab", b"abb", b"bab"]


def test_a_node_too_ambiguous_to_walk_gets_a_conservative_entry():
    """A node whose walk passes the parse-stack limit gets a conservative entry (every token
    uncertain, decided from the real stacks at run time): the eager and the lazy caches
    compile the grammar, the entry is the same in both and stored (the walk is not
    repeated), a batch binds it, and the masks along random walks equal the recognizer's."""
    info = make_info(AMBIGUOUS_VOCAB)
    eager = GrammarCompiler(info, mask_cache="eager", cache_enabled=False).compile_grammar(
        AMBIGUOUS)
    refused = eager.mask_cache.conservative_nodes
    assert refused
    lazy = GrammarCompiler(info, cache_enabled=False).compile_grammar(AMBIGUOUS).mask_cache
    for node in refused:
        a, b = eager.mask_cache.entry(node), lazy.entry(node)
        assert a.store_type == b.store_type
        for part in ("indices", "bitset", "uncertain"):
            np.testing.assert_array_equal(getattr(a, part), getattr(b, part))
    walks = []
    classify = lazy._classify
    lazy._classify = lambda nodes: (walks.append(nodes), classify(nodes))[1]
    lazy.entry(refused[0])
    assert walks == []
    GrammarBatch(info, device="cpu", max_batch=1).bind(0, eager)
    recognizer = Recognizer(zoo_grammar(AMBIGUOUS))
    mask = gxg.allocate_token_bitmask(1, info.vocab_size)
    checked = 0
    for seed in range(4):
        rng, matcher, consumed = random.Random(seed), gxg.GrammarMatcher(eager), b""
        for _ in range(6):
            matcher.fill_next_token_bitmask(mask)  # past its stack ceiling: on Earley sets
            got = mask_to_bool(mask[0].numpy(), info.vocab_size)
            expected = recognizer_mask(recognizer, consumed, info, matcher.stop_token_ids)
            np.testing.assert_array_equal(got, expected, err_msg=repr(consumed))
            if not matcher.on_earley_sets:
                state = matcher.state
                tops = state.pool_node[0, state.tops[0, : state.num_tops[0]]].tolist()
                checked += bool(set(tops) & set(refused))  # a mask that read one
            choices = [t for t in np.flatnonzero(got) if t not in matcher.stop_token_ids]
            if not choices:
                break
            token = int(rng.choice(choices))
            assert matcher.accept_token(token)
            consumed += info.decoded_vocab[token]
    assert checked >= 2


def test_without_a_conservative_entry_a_refused_node_is_an_error_each_time():
    """A classifier without ``conservative``: the node's entry is its GrammarError whenever
    asked for, the walk not repeated; precompute raises it, the background build leaves it."""
    info = make_info(AMBIGUOUS_VOCAB)
    cache = GrammarCompiler(info, cache_enabled=False).compile_grammar(AMBIGUOUS).mask_cache
    cache._fallback = None
    with pytest.raises(gxg.GrammarError, match="too ambiguous"):
        cache.precompute()
    failing = [n for n in cache.nodes.tolist() if n not in cache.computed_nodes()]
    walks = []
    classify = cache._classify
    cache._classify = lambda nodes: (walks.append(nodes), classify(nodes))[1]
    for _ in range(2):
        with pytest.raises(gxg.GrammarError, match="too ambiguous"):
            cache.entry(failing[0])
    assert walks == []


def test_a_fill_whose_node_cannot_be_walked_raises_a_runtime_error():
    name, ebnf, sentences = GRAMMAR_ZOO[0]
    compiled = zoo_compiled(ebnf, sentences, "lazy")

    def refuse(nodes):
        raise gxg.GrammarError("the grammar is too ambiguous (simulated)")

    compiled.mask_cache._classify = refuse
    compiled.mask_cache._fallback = None
    matcher = gxg.GrammarMatcher(compiled)
    mask = gxg.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    with pytest.raises(gxg.GrammarRuntimeError, match="cannot be computed: the grammar is too"):
        matcher.fill_next_token_bitmask(mask)


def test_the_compiler_cache_limit_sees_lazy_caches_grow():
    """cache_limit_bytes counts the entries computed since insertion: the next compile call
    (a hit too) evicts the least recently used grammar when they push it over the limit."""
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "nested_arrays")
    info = make_info(synthetic_vocab(sentences))
    sizes = [GrammarCompiler(info).compile_grammar(g).memory_size_bytes
             for g in ('root ::= "[" [0-9]* "]"', 'root ::= "a"')]
    compiler = GrammarCompiler(info, cache_limit_bytes=sum(sizes))
    grown = compiler.compile_grammar('root ::= "[" [0-9]* "]"')
    compiler.compile_grammar('root ::= "a"')
    grown.mask_cache.precompute()                    # grows past what was counted
    assert grown.memory_size_bytes > sizes[0]
    compiler.compile_grammar('root ::= "a"')         # a hit: the limit is checked again
    assert compiler.compile_grammar('root ::= "[" [0-9]* "]"') is not grown



# strings of bounded length: their runs (``Automaton.run_twin``) share entries; (lo, hi) per
# vocabulary: room for its longest token (6 bytes here, 128 in Qwen's)
RUN_BOUNDS = {"synthetic": [(0, 40), (3, 30)], "qwen": [(0, 300), (3, 200)]}


@pytest.mark.parametrize("vocabulary,bounds",
                         [(v, b) for v, bounds in RUN_BOUNDS.items() for b in bounds])
def test_nodes_of_a_bounded_run_share_entries_equal_to_their_own_walks(vocabulary, bounds):
    """A node inside a bounded run with room for the longest token gets its twin's entry
    (one walk for all of them); it equals the node's own walk bit for bit, for every node of
    the run (a sample of them with Qwen's vocabulary)."""
    from gxg.grammar_compiler import token_trie
    if vocabulary == "qwen":
        info = info_or_skip("qwen")
    else:  # short tokens: most of the run has room
        info = make_info(synthetic_vocab(['"abc"', '"a\\"b\\u00e9"', '"x y z w"', '""',
                                          "é", "中文", '\\n', '"\\u0041']))
    lo, hi = bounds
    schema = {"type": "object", "properties": {"a": {"type": "string", "minLength": lo,
                                                     "maxLength": hi}}, "required": ["a"]}
    compiled = GrammarCompiler(info).compile_json_schema(schema)
    automaton, cache = compiled.automaton, compiled.mask_cache
    longest = token_trie(info).max_depth
    representative = mask_cache_module.run_representatives(automaton, longest)
    assert representative is not None
    sharing = np.flatnonzero(representative != np.arange(automaton.num_nodes))
    assert len(sharing) > (hi - lo - longest) * 5  # every place of the unit, most counts
    own = mask_cache_module.MaskCache(cache.num_sorted, cache.nodes, cache._classify)
    nodes = sharing.tolist()
    if vocabulary == "qwen":
        nodes = random.Random(0).sample(nodes, 12)
    for node in nodes:
        assert cache.entry(node) is cache.entry(int(representative[node]))  # one walk
        assert_same_entry(cache.entry(node), own.entry(node), f"node {node}")
