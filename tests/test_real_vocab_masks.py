"""Masks are exact on the four real vocabularies: along teacher-forced JSON documents, the
cache + uncertain-check mask equals the brute-force mask at every step, agrees with the
reference recognizer on sampled tokens, and (Qwen) equals XGrammar's mask bit for bit."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gxg.grammar import Grammar
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.testing import Recognizer
from gxg import vocabularies
from grammar_zoo import info_or_skip
from mask_oracles import brute_force_mask, mask_to_bool

DOCUMENTS = [
    '{"name": "gxg", "tags": ["gpu", "grammar"], "score": -1.5e-3, "ok": true, "none": null}',
    '[{"é": "中文 😀\\n"}, [], {}, 0, 12.0]',
]
GRAMMARS = {
    "json": None,
    "unicode_words": 'root ::= word (" " word)*\nword ::= [a-zA-Zà-ÿ一-龥]+',
}
WORDS = "Grammaire élégante 中文 words àé"


def greedy_tokenize(data: bytes, info):
    """Longest-match tokenisation over the decoded vocabulary (specials and stops excluded)."""
    index = {}
    skip = set(info.special_token_ids) | set(info.stop_token_ids)
    for token_id, token in enumerate(info.decoded_vocab):
        if token and token_id not in skip:
            index.setdefault(token, token_id)
    longest = max(map(len, index))
    out, i = [], 0
    while i < len(data):
        for j in range(min(len(data), i + longest), i, -1):
            if data[i:j] in index:
                out.append(index[data[i:j]])
                i = j
                break
        else:
            raise AssertionError(f"cannot tokenise {data[i:i + 8]!r}")
    return out


@pytest.fixture(scope="module", params=["qwen", "mistral-tekken", "mistral-sp", "smollm2"])
def vocab(request):
    info = info_or_skip(request.param)
    return request.param, info, GrammarCompiler(info)


@pytest.mark.parametrize("grammar_name", list(GRAMMARS))
def test_masks_exact_on_real_vocabulary(vocab, grammar_name):
    name, info, compiler = vocab
    ebnf = GRAMMARS[grammar_name]
    grammar = Grammar.builtin_json_grammar() if ebnf is None else Grammar.from_ebnf(ebnf)
    compiled = compiler.compile_grammar(grammar)
    recognizer = Recognizer(grammar)
    rng = random.Random(5)
    texts = DOCUMENTS if ebnf is None else [WORDS]
    for text in texts:
        matcher = GrammarMatcher(compiled)
        consumed = b""
        tokens = greedy_tokenize(text.encode(), info)
        for step, token in enumerate(tokens + [None]):
            bitmask = allocate_token_bitmask(1, info.vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
            got = mask_to_bool(bitmask[0].numpy(), info.vocab_size)
            if step % 3 == 0 or token is None:  # the brute force costs ~0.1 s a step
                np.testing.assert_array_equal(got, brute_force_mask(matcher),
                                              err_msg=f"{name} after {consumed!r}")
            allowed, refused = np.nonzero(got)[0], np.nonzero(~got)[0]
            sample = np.concatenate([rng.sample(list(allowed), min(40, len(allowed))),
                                     rng.sample(list(refused), min(40, len(refused)))])
            for t in sample.tolist():
                if t in matcher.stop_token_ids or t in info.special_token_ids:
                    continue
                assert got[t] == recognizer.accepts_prefix(consumed + info.decoded_vocab[t]), \
                    (name, consumed, info.decoded_vocab[t])
            if token is None:
                assert recognizer.accepts(consumed)
                assert all(got[matcher.stop_token_ids])
                break
            assert got[token], (name, consumed, info.decoded_vocab[token])
            assert matcher.accept_token(token)
            consumed += info.decoded_vocab[token]


def test_qwen_json_mask_equals_xgrammar():
    xgr = pytest.importorskip("xgrammar")
    info = info_or_skip("qwen")
    compiled = GrammarCompiler(info).compile_builtin_json_grammar()
    xinfo = xgr.TokenizerInfo.from_huggingface(vocabularies.qwen_tokenizer())
    assert xinfo.vocab_size == info.vocab_size
    xcompiled = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_builtin_json_grammar()
    for text in DOCUMENTS:
        ours, theirs = GrammarMatcher(compiled), xgr.GrammarMatcher(xcompiled)
        for token in greedy_tokenize(text.encode(), info):
            a = allocate_token_bitmask(1, info.vocab_size)
            b = xgr.allocate_token_bitmask(1, info.vocab_size)
            ours.fill_next_token_bitmask(a)
            theirs.fill_next_token_bitmask(b)
            np.testing.assert_array_equal(mask_to_bool(a[0].numpy(), info.vocab_size),
                                          mask_to_bool(b[0].numpy(), info.vocab_size))
            assert ours.accept_token(token) and theirs.accept_token(token)
