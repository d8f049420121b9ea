"""Tool calling with Qwen's vocabulary: gxg's masks equal XGrammar 0.2.8's bit for bit.

Specification: for builtin model formats' structural tags (``get_model_structural_tag``, the
same tag for both engines) with two tools, along Qwen-tokenised tool-call traces — free text,
calls whose arguments follow the tools' schemas, reasoning where the format has it — taken
token by token, and along walks that leave the trace for random allowed tokens (whole UTF-8
ones), gxg's next-token mask equals XGrammar's at every step but for the one documented
difference (gxg/grammar/macros.py): in free text XGrammar also allows tokens that are not
valid UTF-8 (Qwen has 193 such byte tokens, e.g. a lone continuation byte), gxg does not —
so every bit that differs is a token XGrammar allows, gxg refuses, and whose bytes are not
UTF-8 on their own. Both accept the same tokens.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from gxg.grammar.builtin_structural_tag import get_model_structural_tag
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from grammar_zoo import info_or_skip
from mask_oracles import mask_to_bool
from xgrammar_oracle import is_utf8

xgr = pytest.importorskip("xgrammar")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
WEATHER = json.dumps({"city": "Paris", "days": 3})
SEARCH = json.dumps({"query": "pain au levain"})
# (model format, reasoning, traces written in that format)
CASES = [
    ("qwen_3", "disabled", [
        'Let me check. <tool_call>\n{"name": "get_weather", "arguments": ' + WEATHER
        + '}\n</tool_call>',
        'Two calls: <tool_call>\n{"name": "search", "arguments": ' + SEARCH + '}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>']),
    ("qwen_3", "enabled", [
        'The user wants the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
        '"arguments": ' + WEATHER + '}\n</tool_call>']),
    ("llama", "disabled", [
        '{"name": "search", "parameters": ' + SEARCH + '}',
        'I will look. {"name": "get_weather", "parameters": ' + WEATHER + '}']),
]


@pytest.fixture(scope="module")
def qwen():
    from gxg import vocabularies
    info = info_or_skip("qwen")
    tokenizer = vocabularies.qwen_tokenizer()
    xinfo = xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW,
                              vocab_size=info.vocab_size, stop_token_ids=info.stop_token_ids)
    return info, tokenizer, GrammarCompiler(info), xgr.GrammarCompiler(xinfo, cache_enabled=False)


@pytest.mark.parametrize("model, reasoning, traces", CASES,
                         ids=[f"{m}-{r}" for m, r, _ in CASES])
def test_masks_equal_xgrammar_along_tool_call_traces(qwen, model, reasoning, traces):
    info, tokenizer, compiler, xcompiler = qwen
    tag = json.dumps(get_model_structural_tag(model, tools=TOOLS, reasoning=reasoning))
    ours, theirs = compiler.compile_structural_tag(tag), xcompiler.compile_structural_tag(tag)
    rng = random.Random(model + reasoning)
    vocab_size, vocab = info.vocab_size, info.decoded_vocab  # (a new list at each access)
    for walk, trace in enumerate(traces * 2):
        ids = tokenizer.encode(trace, add_special_tokens=False)
        leave_at = None if walk < len(traces) else rng.randrange(1, len(ids))
        def compare(got, want, step):
            for token in np.flatnonzero(got != want).tolist():
                assert want[token] and not got[token] and not is_utf8(vocab[token]), \
                    f"{model} walk {walk} step {step}: token {token} {vocab[token]}"
        walk_both(GrammarMatcher(ours), xgr.GrammarMatcher(theirs), vocab_size, ids, leave_at,
                  rng, compare, lambda got: [t for t in np.flatnonzero(got).tolist()
                                             if is_utf8(vocab[t])])


def walk_both(m, x, vocab_size, trace, leave_at, rng, compare, choose) -> None:
    """Take ``trace`` token by token in gxg's matcher ``m`` and XGrammar's ``x`` (from step
    ``leave_at`` on, a random token of ``choose(mask)`` instead), calling ``compare(gxg mask,
    XGrammar mask, step)`` before each token; both must accept each token alike."""
    a = allocate_token_bitmask(1, vocab_size)
    b = xgr.allocate_token_bitmask(1, vocab_size)
    for step in range(len(trace) + 8):
        m.fill_next_token_bitmask(a)
        x.fill_next_token_bitmask(b)
        got = mask_to_bool(a[0].numpy(), vocab_size)
        compare(got, mask_to_bool(b[0].numpy(), vocab_size), step)
        if step < len(trace) and (leave_at is None or step < leave_at):
            token = trace[step]
            assert got[token], f"trace token {step} not allowed"
        else:
            allowed = choose(got)
            if not allowed:
                break
            token = rng.choice(allowed)
        assert m.accept_token(token) == x.accept_token(token) == True  # noqa: E712
        if m.is_terminated():
            assert x.is_terminated()
            break


# Token-level formats (tests/test_token_items.py): a tag whose begin and end are Qwen's chat
# tokens, triggered by the begin token; free tokens around it. Token-level free parts take any
# token whole, so here the masks must be equal with no exception.
TOKEN_TAG = json.dumps({"type": "structural_tag", "format": {
    "type": "token_triggered_tags", "trigger_tokens": ["<|im_start|>"],
    "tags": [{"type": "tag", "begin": {"type": "token", "token": "<|im_start|>"},
              "content": {"type": "json_schema",
                          "json_schema": TOOLS[0]["function"]["parameters"]},
              "end": {"type": "token", "token": "<|im_end|>"}}]}})


def test_token_level_tags_equal_xgrammar(qwen):
    info, tokenizer, compiler, xcompiler = qwen
    vocab = info.decoded_vocab  # (a new list at each access)
    start, end = vocab.index(b"<|im_start|>"), vocab.index(b"<|im_end|>")
    ours, theirs = compiler.compile_structural_tag(TOKEN_TAG), \
        xcompiler.compile_structural_tag(TOKEN_TAG)
    text = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    trace = text("Checking the weather. ") + [start] + text(WEATHER) + [end] + text(" Sunny.")
    rng = random.Random(7)
    for walk in range(3):
        leave_at = None if walk == 0 else rng.randrange(1, len(trace))
        def compare(got, want, step):
            np.testing.assert_array_equal(got, want, err_msg=f"walk {walk} step {step}")
        walk_both(GrammarMatcher(ours), xgr.GrammarMatcher(theirs), info.vocab_size, trace,
                  leave_at, rng, compare, lambda got: np.flatnonzero(got).tolist())


# A reasoning section under a token budget (any_text with max_tokens: tests/
# test_rule_token_budgets.py) before the tool calls: once the section has its 8 tokens it must
# end at the first token boundary where it can, in both engines. The free text differs only as
# above (XGrammar also allows tokens that are not UTF-8).
BUDGETED_REASONING = json.dumps({"type": "structural_tag", "format": {
    "type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text", "max_tokens": 8},
         "end": "</think>"},
        {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [
            {"type": "tag", "begin": "<tool_call>\n", "content": {
                "type": "json_schema", "json_schema": TOOLS[0]["function"]["parameters"]},
             "end": "\n</tool_call>"}]}]}})


def test_budgeted_reasoning_equals_xgrammar(qwen):
    info, tokenizer, compiler, xcompiler = qwen
    vocab = info.decoded_vocab  # (a new list at each access)
    ours, theirs = compiler.compile_structural_tag(BUDGETED_REASONING), \
        xcompiler.compile_structural_tag(BUDGETED_REASONING)
    text = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    call = text("<think>Weather in Paris.</think>Sure. <tool_call>\n" + WEATHER
                + "\n</tool_call> Done.")
    spent = text("<think>") + text(" one two three four five six seven eight")
    assert len(spent) - len(text("<think>")) == 8
    rng = random.Random(11)
    narrowed = []
    for walk, (trace, leave_at) in enumerate([(call, None), (spent, len(spent))]
                                             + [(call, rng.randrange(1, 6)) for _ in range(4)]):
        def compare(got, want, step):
            if trace is spent and step == len(spent):  # 8 tokens in: the section must end
                narrowed.append(all(vocab[t].startswith(b"<") for t in np.flatnonzero(got)))
            for token in np.flatnonzero(got != want).tolist():
                assert want[token] and not got[token] and not is_utf8(vocab[token]), \
                    f"walk {walk} step {step}: token {token} {vocab[token]}"
        walk_both(GrammarMatcher(ours), xgr.GrammarMatcher(theirs), info.vocab_size, trace,
                  leave_at, rng, compare, lambda got: [t for t in np.flatnonzero(got).tolist()
                                                     if is_utf8(vocab[t])])
    assert narrowed == [True]
