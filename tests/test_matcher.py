"""GrammarMatcher on the CPU: masks are exact, and the step semantics are XGrammar's.

Exactness: along random and real token walks over a grammar zoo, the mask from the cache plus
the uncertain-token check equals (a) the brute-force mask (every token walked from every live
stack) and (b) the reference recognizer's answer for every token (``consumed + token`` is a
prefix of the language), with stop tokens allowed iff the input so far is a sentence.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

import gxg
from gxg.compiler.completion import completion_distances
from gxg.grammar_compiler import CompiledGrammar, DeserializeFormatError, GrammarCompiler
from gxg.matcher import (
    GrammarMatcher, GrammarRuntimeError, allocate_token_bitmask, apply_token_bitmask_inplace,
    get_bitmask_shape,
)
from gxg.runtime import RuntimeLimits
from gxg.testing import Recognizer
from gxg.tokenizer import TokenizerInfo, VocabType
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from mask_oracles import OracleRefused, brute_force_mask, mask_to_bool, recognizer_mask


def check_mask(matcher, recognizer, consumed, info):
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    got = mask_to_bool(bitmask[0].numpy(), info.vocab_size)
    brute = brute_force_mask(matcher)
    np.testing.assert_array_equal(got, brute, err_msg=f"cache mask != brute force after "
                                                      f"{consumed!r}")
    expected = recognizer_mask(recognizer, consumed, info, matcher.stop_token_ids)
    np.testing.assert_array_equal(got, expected, err_msg=f"mask != recognizer after "
                                                         f"{consumed!r}")
    return got


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_mask_exact_along_random_walks(name, ebnf, sentences):
    grammar = zoo_grammar(ebnf)
    vocab = synthetic_vocab(sentences)
    info = make_info(vocab)
    compiled = GrammarCompiler(info).compile_grammar(grammar)
    recognizer = Recognizer(grammar)
    rng = random.Random(1234)
    for walk in range(3):
        matcher = GrammarMatcher(compiled)
        consumed = b""
        for step in range(12):
            allowed = check_mask(matcher, recognizer, consumed, info)
            choices = np.nonzero(allowed)[0].tolist()
            if not choices:
                break
            token = rng.choice(choices)
            assert matcher.accept_token(token)
            if token in matcher.stop_token_ids:
                assert matcher.is_terminated()
                break
            consumed += info.decoded_vocab[token]


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_mask_exact_along_real_walks(name, ebnf, sentences):
    """Teacher-forced: each sentence, tokenised greedily, then the stop token."""
    grammar = zoo_grammar(ebnf)
    vocab = synthetic_vocab(sentences)
    info = make_info(vocab)
    compiled = GrammarCompiler(info).compile_grammar(grammar)
    recognizer = Recognizer(grammar)
    index = {token: i for i, token in enumerate(vocab) if token}
    for sentence in sentences:
        matcher = GrammarMatcher(compiled)
        consumed = b""
        for token in greedy_tokenize(sentence.encode(), index):
            check_mask(matcher, recognizer, consumed, info)
            assert matcher.accept_token(token), (sentence, consumed)
            consumed += info.decoded_vocab[token]
        check_mask(matcher, recognizer, consumed, info)
        assert matcher.accept_token(matcher.stop_token_ids[0])
        assert matcher.is_terminated()


def greedy_tokenize(data: bytes, index: dict):
    out, i = [], 0
    while i < len(data):
        for j in range(min(len(data), i + 4), i, -1):
            if data[i:j] in index:
                out.append(index[data[i:j]])
                i = j
                break
        else:
            raise AssertionError(f"cannot tokenize {data[i:]!r}")
    return out


# ----------------------------------------------------------------------------- semantics

@pytest.fixture(scope="module")
def abc():
    vocab = [b"a", b"b", b"c", b"ab", b"abc", b"x", b"", b"</s>"]
    info = TokenizerInfo(vocab, VocabType.RAW, stop_token_ids=[7])
    compiled = GrammarCompiler(info).compile_grammar('root ::= "abc" [0-9]* | "x"')
    return info, compiled


def test_rejected_token_changes_nothing(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled)
    assert not m.accept_token(2)          # "c" cannot start
    assert not m.accept_token(6)          # empty token: special
    assert not m.accept_token(-1) and not m.accept_token(99)
    assert m.accept_token(3)              # "ab"
    with pytest.raises(RuntimeError):
        m.rollback(2)                     # only one step in the history
    m.rollback(1)
    assert m.accept_token(4)              # "abc"


def test_stop_token_only_when_complete_then_terminated(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled)
    assert not m.accept_token(7)
    assert m.accept_token(5)              # "x": complete, nothing may follow
    mask = allocate_token_bitmask(1, info.vocab_size)
    assert m.fill_next_token_bitmask(mask)
    assert mask_to_bool(mask[0].numpy(), info.vocab_size).nonzero()[0].tolist() == [7]
    assert m.accept_token(7) and m.is_terminated()
    assert not m.accept_token(0) and not m.accept_string("a")
    with pytest.raises(RuntimeError):
        m.fill_next_token_bitmask(mask)
    m.rollback(1)                          # rolling back the stop token un-terminates
    assert not m.is_terminated() and m.is_completed()


def test_accept_string_is_one_step_and_may_split_code_points():
    info = TokenizerInfo([], VocabType.RAW)
    compiled = GrammarCompiler(info).compile_grammar('root ::= "é" [a-z]+')
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert m.accept_string(b"\xc3") and m.accept_string(b"\xa9")
    assert not m.is_terminated()
    assert m.accept_string("ab") and m.is_terminated()
    m.rollback(1)
    assert not m.is_terminated()
    assert not m.accept_string("a1")      # rejected strings change nothing
    assert m.accept_string("") and m.accept_string("z") and m.is_terminated()


def test_fork_is_independent(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled)
    assert m.accept_token(0)
    twin = m.fork()
    assert twin.accept_token(1) and not m.accept_token(2)
    assert m.accept_token(1) and m.accept_token(2) and twin.accept_token(2)


def test_jump_forward_string():
    info = TokenizerInfo([], VocabType.RAW)
    compiled = GrammarCompiler(info).compile_grammar('root ::= "abc" [0-9] "xyz"')
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert m.find_jump_forward_string() == "abc"
    assert m.accept_string("abc7")
    assert m.find_jump_forward_string() == "xyz"
    assert m.accept_string("x")           # the probe did not move the matcher


JUMP_VOCAB = ["a", "ab", "abc", "b", "c", "d", "</s>", "x", "xy", "xyz!", "é", "\xc3", "y"]
# (vocabulary, grammar, tokens accepted first, stop ids, forced string, jump-forward tokens):
# each row as XGrammar 0.2.9's GrammarMatcher answers it (checked when written; the tests'
# XGrammar is 0.2.8, which has no find_jump_forward_tokens)
JUMP_CASES = [
    (JUMP_VOCAB, 'root ::= "abcd"', [], None, "abcd", [2, 5]),  # greedy: the longest first
    (JUMP_VOCAB, 'root ::= "abc"', [], None, "abc", [2]),
    (JUMP_VOCAB, 'root ::= "ab" [c-d]', [], None, "ab", []),   # "abc" could follow "ab"
    (JUMP_VOCAB, 'root ::= "xy" [0-9]', [], None, "xy", []),
    (JUMP_VOCAB, 'root ::= "xyy"', [], None, "xyy", [8, 12]),  # only the last is dropped
    (JUMP_VOCAB, 'root ::= "q" "a"', [], None, "qa", []),      # no token for "q"
    (JUMP_VOCAB, 'root ::= "</s>x"', [], [6], "</s>x", []),    # never a stop token
    (JUMP_VOCAB, 'root ::= "a" ("é" | "è")', [], None, "a", []),  # a half character forced
    (JUMP_VOCAB, 'root ::= "dab" "c"?', [], None, "dab", [5]),
    (JUMP_VOCAB, 'root ::= "abcab"', [], None, "abcab", [2]),
    (["b", "a", "a", "c"], 'root ::= "ab"', [], None, "ab", [1, 0]),  # the lowest id
    (["x", "ab", "c", "ab"], 'root ::= "abc"', [], None, "abc", [1, 2]),
    (["a", "b", "ab<end>", "<end>"], 'root ::= "ab"', [], [2], "ab", [0, 1]),
    (JUMP_VOCAB, 'root ::= "a" | "abc"', [0], None, "", []),   # completed
    (JUMP_VOCAB, 'root ::= "abcd"', [1], None, "cd", [4, 5]),
    # a token split "é": the forced bytes start inside it, so no text is forced (not "xyz")
    ([b"\xc3", b"\xa9x", b"a", b"yz"], 'root ::= "\u00e9xyz"', [0], None, "", [1, 3]),
    ([b"\xc3", b"a", b"b"], 'root ::= "ab\u00e9"', [], None, "ab\u00e9", [1, 2, 0]),
]


@pytest.mark.parametrize("vocab, grammar, accepted, stop, forced, tokens", JUMP_CASES)
def test_jump_forward_tokens(vocab, grammar, accepted, stop, forced, tokens):
    info = TokenizerInfo(vocab, VocabType.RAW, stop_token_ids=stop)
    m = GrammarMatcher(GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar))
    for token in accepted:
        assert m.accept_token(token)
    assert m.find_jump_forward_string() == forced
    assert m.find_jump_forward_tokens() == tokens
    for token in tokens:  # the state did not move, and the tokens are accepted in turn
        assert m.accept_token(token)


def _greedy_jump(vocab: list, forced: bytes, excluded: set) -> list:
    """Brute force: at each position the longest (then lowest-id) ordinary token that the
    forced bytes continue with; the last one dropped if a longer ordinary token extends it."""
    ordinary = [(i, t.encode()) for i, t in enumerate(vocab) if t and i not in excluded]
    out, start, last = [], 0, b""
    while True:
        fits = [(len(b), -i, i, b) for i, b in ordinary if forced.startswith(b, start)]
        if not fits:
            break
        _, _, token, last = max(fits)
        out.append(token)
        start += len(last)
    if out and any(b.startswith(last) and len(b) > len(last) for _, b in ordinary):
        out.pop()
    return out


@pytest.mark.parametrize("seed", range(6))
def test_jump_forward_tokens_are_the_greedy_split(seed):
    rng = random.Random(seed)
    letters = ["a", "b", "é", " ", "{"]
    for _ in range(25):
        vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
                 for _ in range(rng.randint(4, 16))] + ["</s>"]
        text = "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))
        tail = rng.choice(["", "[0-9]", '"x"?'])  # nothing more forced, or a choice
        grammar = f"root ::= {json.dumps(text)} {tail}"
        m = GrammarMatcher(GrammarCompiler(TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1]),
                                           cache_enabled=False).compile_grammar(grammar))
        expected = _greedy_jump(vocab, text.encode(), {len(vocab) - 1})
        assert m.find_jump_forward_tokens() == expected, (vocab, grammar)


@pytest.mark.parametrize("mask_cache, dynamic, mode", [
    (None, None, "lazy"), (None, True, "lazy"), (None, False, "eager"),
    ("eager", False, "eager"), ("background", True, "background"), ("eager", None, "eager"),
])
def test_enable_dynamic_compilation_names_the_mask_cache_mode(mask_cache, dynamic, mode):
    info = TokenizerInfo(["a"])
    compiler = GrammarCompiler(info, mask_cache=mask_cache, enable_dynamic_compilation=dynamic)
    assert compiler.mask_cache == mode


@pytest.mark.parametrize("mask_cache, dynamic", [("eager", True), ("lazy", False), (None, 1),
                                                 ("never", None)])
def test_enable_dynamic_compilation_contradictions_are_errors(mask_cache, dynamic):
    with pytest.raises(ValueError):
        GrammarCompiler(TokenizerInfo(["a"]), mask_cache=mask_cache,
                        enable_dynamic_compilation=dynamic)


def test_terminate_without_stop_token(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert m.accept_token(5) and m.is_terminated()
    mask = allocate_token_bitmask(1, info.vocab_size)
    m.fill_next_token_bitmask(mask)       # still works, and still shows the stop token
    assert mask_to_bool(mask[0].numpy(), info.vocab_size)[7]
    assert not m.accept_token(7)


def test_bitmask_shape_checks(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled)
    assert get_bitmask_shape(3, 33) == (3, 2)
    with pytest.raises(ValueError):
        m.fill_next_token_bitmask(torch.zeros((1, 5), dtype=torch.int32))
    with pytest.raises(ValueError):
        m.fill_next_token_bitmask(torch.zeros((1, 1), dtype=torch.int64))
    with pytest.raises(IndexError):
        m.fill_next_token_bitmask(allocate_token_bitmask(2, info.vocab_size), index=2)


@pytest.mark.parametrize("logits_width", [6, 8, 40])
def test_apply_token_bitmask(logits_width):
    bitmask = torch.tensor([[0b101], [-1]], dtype=torch.int32)
    logits = torch.zeros((2, logits_width))
    apply_token_bitmask_inplace(logits, bitmask, vocab_size=min(logits_width, 32))
    row0 = torch.isinf(logits[0]).tolist()
    assert row0[:3] == [False, True, False] and all(row0[3:min(logits_width, 32)])
    assert not torch.isinf(logits[1]).any()
    logits = torch.zeros((2, logits_width))
    apply_token_bitmask_inplace(logits, bitmask, indices=[1])
    assert not torch.isinf(logits).any()


# ----------------------------------------------------------------------------- limits

def test_too_many_parallel_stacks_is_reported():
    info = TokenizerInfo([b"x"], VocabType.RAW)
    # After k x's the number of pending "y" can be 0..k: k+1 different stacks.
    compiled = GrammarCompiler(info).compile_grammar('root ::= "x" root "y" | "x" root | ""')
    m = GrammarMatcher(compiled, limits=RuntimeLimits(max_stacks=3))
    with pytest.raises(GrammarRuntimeError, match="max_stacks=3"):
        for _ in range(4):
            m.accept_token(0)


def test_pool_overflow_is_reported_and_state_kept():
    info = TokenizerInfo([b"[", b"]"], VocabType.RAW)
    compiled = GrammarCompiler(info).compile_grammar('root ::= "[" root? "]"')
    m = GrammarMatcher(compiled, limits=RuntimeLimits(pool_entries=32))
    depth = 0
    with pytest.raises(GrammarRuntimeError, match="stack pool"):
        for depth in range(100):
            assert m.accept_token(0)
    assert depth > 5                      # it got somewhere before the limit
    assert m.accept_token(1)              # the state before the failed step is intact


def test_rollback_beyond_history_is_an_error(abc):
    info, compiled = abc
    m = GrammarMatcher(compiled, max_rollback_tokens=2)
    for token in (0, 1, 2):
        assert m.accept_token(token)
    with pytest.raises(RuntimeError, match="max_rollback_tokens=2"):
        m.rollback(3)
    m.rollback(2)
    assert m.accept_token(1)


# ----------------------------------------------------------------------------- compiled grammar

def test_serialize_round_trip(abc):
    info, compiled = abc
    data = compiled.serialize()
    again = CompiledGrammar.deserialize(data, info)
    assert again.serialize() == data  # before its grammar is parsed (on first read)
    assert again.grammar == compiled.grammar
    assert again.serialize() == data
    m1, m2 = GrammarMatcher(compiled), GrammarMatcher(again)
    for token in (0, 1, 2):
        assert m1.accept_token(token) == m2.accept_token(token)
    a, b = allocate_token_bitmask(1, info.vocab_size), allocate_token_bitmask(1, info.vocab_size)
    m1.fill_next_token_bitmask(a)
    m2.fill_next_token_bitmask(b)
    assert torch.equal(a, b)
    kept, computed = again.completion, completion_distances(compiled.automaton)
    np.testing.assert_array_equal(kept.node_distance, computed.node_distance)
    np.testing.assert_array_equal(kept.rule_length, computed.rule_length)
    assert kept.max_rise == computed.max_rise
    other = TokenizerInfo([b"a", b"b"], VocabType.RAW)
    with pytest.raises(RuntimeError, match="different tokenizer"):
        CompiledGrammar.deserialize(compiled.serialize(), other)


def test_npz_archives_of_earlier_versions_are_still_read(abc):
    """gxg-2 wrote the same header and arrays as a NumPy .npz archive."""
    import io
    import json

    from gxg.grammar_compiler import _unpack
    info, compiled = abc
    header, arrays = _unpack(compiled.serialize())
    buffer = io.BytesIO()
    np.savez(buffer, header=np.frombuffer(json.dumps({**header, "version": "gxg-2"}).encode(),
                                          dtype=np.uint8), **arrays)
    again = CompiledGrammar.deserialize(buffer.getvalue(), info)
    assert again.serialize() == compiled.serialize()


@pytest.mark.parametrize("cut", [3, 20, -5])
def test_damaged_serialized_bytes_are_a_format_error(abc, cut):
    info, compiled = abc
    data = compiled.serialize()
    with pytest.raises(DeserializeFormatError):
        CompiledGrammar.deserialize(data[:cut], info)


def test_compiler_cache_and_empty_vocabulary():
    info = TokenizerInfo([], VocabType.RAW)
    compiler = GrammarCompiler(info)
    first = compiler.compile_grammar('root ::= "a"+')
    assert compiler.compile_grammar('root ::= "a"+') is first
    assert compiler.compile_regex("a+") is compiler.compile_regex("a+")
    compiler.clear_cache()
    assert compiler.compile_grammar('root ::= "a"+') is not first
    m = GrammarMatcher(first, terminate_without_stop_token=True)
    assert m.accept_string("aaa") and m.is_terminated()
    with pytest.raises(ValueError):
        GrammarCompiler("not a tokenizer info")


# ----------------------------------------------------------------------------- property

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from test_passes import small_grammars  # noqa: E402

TINY_VOCAB = [b"a", b"b", b"aa", b"ab", b"ba", b"bb", b"aab", b"abb", b"bab", b"", b"</s>"]


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_grammars(), st.randoms(use_true_random=False))
def test_random_grammars_masks_match_recognizer(grammar, rng):
    """Random grammars with left recursion, nullable rules, repeats and ambiguity: along a
    random walk, every mask equals the recognizer's and the brute force's."""
    info = TokenizerInfo(TINY_VOCAB, VocabType.RAW, stop_token_ids=[len(TINY_VOCAB) - 1])
    try:
        compiled = GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar)
    except gxg.GrammarError as error:
        assert "too ambiguous" in str(error)  # the documented limit, reported
        return
    recognizer = Recognizer(grammar)
    matcher = GrammarMatcher(compiled)
    consumed = b""
    for _ in range(6):
        try:
            allowed = check_mask(matcher, recognizer, consumed, info)
        except GrammarRuntimeError:
            return  # a documented limit (e.g. very many parallel stacks) was reported
        except OracleRefused:
            return  # the brute-force oracle's walk is refused: nothing to compare
        choices = np.nonzero(allowed)[0].tolist()
        if not choices:
            return
        token = rng.choice(choices)
        try:
            assert matcher.accept_token(token)
        except GrammarRuntimeError:
            return
        if token == len(TINY_VOCAB) - 1:
            return
        consumed += TINY_VOCAB[token]


def test_compiler_cache_is_thread_safe_and_compiles_once():
    from concurrent.futures import ThreadPoolExecutor
    import gxg.grammar_compiler as gc
    info = TokenizerInfo([b"a", b"b", b"ab"], VocabType.RAW)
    compiler = GrammarCompiler(info)
    calls = []
    original = gc.compile_grammar_ir

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    gc.compile_grammar_ir = counting
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: compiler.compile_grammar('root ::= ("a" | "b")+'),
                                    range(32)))
    finally:
        gc.compile_grammar_ir = original
    assert all(r is results[0] for r in results)
    assert len(calls) == 1


def test_cache_limit_evicts_least_recently_used():
    info = TokenizerInfo([b"a", b"b"], VocabType.RAW)
    first = GrammarCompiler(info).compile_grammar('root ::= "a"')
    compiler = GrammarCompiler(info, cache_limit_bytes=first.memory_size_bytes)
    a = compiler.compile_grammar('root ::= "a"')
    compiler.compile_grammar('root ::= "b"')          # evicts "a"
    assert compiler.get_cache_size_bytes() <= first.memory_size_bytes
    assert compiler.compile_grammar('root ::= "a"') is not a


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_zoo_grammars_print_and_parse_back(name, ebnf, sentences):
    grammar = zoo_grammar(ebnf)
    assert gxg.Grammar.from_ebnf(str(grammar), root_rule_name=grammar.root_rule_name) == grammar
