"""Tool-calling grammars (structural tags, TagDispatch) on the batch ops: CPU and CUDA.

Specification: for grammars of free text with triggered tool calls — a Qwen-style structural
tag with two tools whose arguments follow JSON Schemas, the same as a TagDispatch EBNF grammar
with an exclude, and a tag whose content is free text up to its end — along runs that mostly
follow real tool-call traces token by token (so the calls and their arguments are reached) and
sometimes take any allowed token, with rollbacks:
* on the CPU (CI), the batch's masks and stacks equal one GrammarMatcher per slot;
* on CUDA (marked gpu), the CUDA ops' masks equal the CPU ops' bit for bit and the states
  field for field, eagerly and replayed from a CUDA graph.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from gxg.batch import GrammarBatch
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher
from gxg.runtime import RuntimeLimits
from gxg.tokenizer import TokenizerInfo, VocabType
from batch_states import (accept_against_matchers, capture_accept_then_fill,
                          check_masks_against_matchers, compare_states, run_with_rollbacks)
from grammar_zoo import synthetic_vocab
from mask_oracles import mask_to_bool

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer"}},
           "required": ["city"]}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def qwen_call(name):
    return '<tool_call>\n{"name": "' + name + '", "arguments": '


QWEN_TOOLS = json.dumps({"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool_call>"],
    "tags": [{"begin": qwen_call(name), "content": {"type": "json_schema", "json_schema": schema},
              "end": "}\n</tool_call>"} for name, schema in (("weather", WEATHER),
                                                             ("search", SEARCH))]}})
THINK_THEN_ANSWER = json.dumps({"type": "structural_tag", "format": {"type": "sequence",
    "elements": [{"type": "tag", "begin": "<think>", "content": {"type": "any_text"},
                  "end": "</think>"},
                 {"type": "any_text", "excludes": ["<think>"]}]}})
DISPATCH = ('root ::= TagDispatch(("<tool_call>", call), excludes=("<|im_end|>",))\n'
            'call ::= "{\\"name\\": \\"" [a-z]+ "\\"}" "</tool_call>"')

TRACES = [
    'Let me look. <tool_call>\n{"name": "weather", "arguments": {"city": "Paris", "days": 3}}\n'
    '</tool_call> It is sunny.',
    '<tool_call>\n{"name": "search", "arguments": {"query": "gxg"}}\n</tool_call>',
    '<think>the user wants rain data</think>It rains in Oslo <tool_call> maybe',
    'Sure <tool_call>{"name": "weather"}</tool_call> done <tool_call>{"name": "x"}</tool_call>',
]


@pytest.fixture(scope="module")
def world():
    vocab = synthetic_vocab(TRACES + ["plain text, with words and <|im_end|> marks"], seed=4)
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + 3,
                         stop_token_ids=[len(vocab) - 1])
    compiler = GrammarCompiler(info)
    grammars = [compiler.compile_structural_tag(QWEN_TOOLS),
                compiler.compile_structural_tag(THINK_THEN_ANSWER),
                compiler.compile_grammar(DISPATCH)]
    return info, vocab, grammars


def steered_tokens(rows: np.ndarray, info, vocab, done, rng) -> list:
    """One token per slot from its mask: mostly the longest allowed token that continues the
    slot's trace (``done[slot]``: the part of TRACES[slot % 4] taken so far), else a random
    allowed token (id 0 where none is)."""
    tokens = []
    for slot, row in enumerate(rows):
        allowed = np.flatnonzero(mask_to_bool(row, info.vocab_size))
        trace = TRACES[slot % len(TRACES)].encode()
        rest = trace[len(done[slot]):]
        fitting = [t for t in allowed if t < len(vocab) and vocab[t] and
                   rest.startswith(vocab[t])]
        if fitting and rng.random() < 0.85:
            token = max(fitting, key=lambda t: len(vocab[t]))
            done[slot] += vocab[token]
        else:
            token = int(rng.choice(allowed)) if len(allowed) else 0
            done[slot] = b"" if rng.random() < 0.5 else done[slot]
        tokens.append(int(token))
    return tokens


def test_cpu_batch_equals_one_matcher_per_slot(world):
    info, vocab, grammars = world
    batch = GrammarBatch(info, device="cpu", max_batch=6)
    matchers = [GrammarMatcher(grammars[slot % 3]) for slot in range(6)]
    for slot in range(6):
        batch.bind(slot, grammars[slot % 3])
    rng = random.Random(1)
    done = [b""] * 6
    bitmask = torch.zeros((6, (info.vocab_size + 31) // 32), dtype=torch.int32)
    calls = 0
    for step in range(60):
        batch.fill_next_token_bitmask(bitmask)
        check_masks_against_matchers(bitmask, matchers, info.vocab_size, f"step {step}")
        tokens = steered_tokens(bitmask.numpy(), info, vocab, done, rng)
        accept_against_matchers(batch, matchers, tokens)
        calls += sum(b"</tool_call>" in d for d in done)
    assert calls > 0  # the runs did reach the end of a tool call


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cuda_ops_equal_the_cpu_ops(world, seed):
    info, vocab, grammars = world
    batches = [GrammarBatch(info, device=d, max_batch=7, limits=RuntimeLimits(history=8))
               for d in ("cpu", "cuda")]
    logs = [[], []]

    def recorder(i):
        def check(what, bitmask):
            logs[i].append((what, bitmask.cpu().numpy().copy()))
        return check
    for i, batch in enumerate(batches):
        done = [b""] * batch.max_batch
        run_with_rollbacks(batch, grammars, 40, seed,
                           lambda rows, rng, done=done: steered_tokens(rows, info, vocab, done, rng),
                           recorder(i))
    for step, ((what, m0), (_, m1)) in enumerate(zip(*logs)):
        np.testing.assert_array_equal(m0, m1, err_msg=f"{what} {step}")
    compare_states(*batches, where="end")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replays_equal_the_cpu_ops(world):
    """fill + accept captured once, replayed with each step's tokens (chosen from the CPU
    batch's masks): the same masks as the CPU batch at every step."""
    info, vocab, grammars = world
    b, words = 6, (info.vocab_size + 31) // 32
    cpu = GrammarBatch(info, device="cpu", max_batch=b)
    gpu = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False)
    for batch in (cpu, gpu):
        for slot in range(b):
            batch.bind(slot, grammars[slot % 3])
    tokens = torch.zeros(b, dtype=torch.int64, device="cuda")
    bitmask = torch.zeros((b, words), dtype=torch.int32, device="cuda")
    warm = GrammarBatch(info, device="cuda", max_batch=b, eager_graphs=False)
    for slot in range(b):
        warm.bind(slot, grammars[slot % 3])
    graph = capture_accept_then_fill(gpu, warm, tokens, bitmask)
    rng, done = random.Random(3), [b""] * b
    cpu_mask = torch.zeros((b, words), dtype=torch.int32)
    for step in range(50):
        cpu.fill_next_token_bitmask(cpu_mask)
        np.testing.assert_array_equal(bitmask.cpu().numpy(), cpu_mask.numpy(), err_msg=str(step))
        chosen = steered_tokens(cpu_mask.numpy(), info, vocab, done, rng)
        cpu.accept(torch.tensor(chosen))
        tokens.copy_(torch.tensor(chosen))
        graph.replay()
    compare_states(cpu, gpu, where="after the replays")


def test_a_long_free_text_span_keeps_the_state_small(world):
    """2,000 tokens of free text between triggers: one stack all along; each token adds one
    pool entry (the history's tops must survive for rollback), and compaction keeps the pool
    within its limit — it stays bounded by the history ring, not by the span."""
    info, vocab, grammars = world
    limits = RuntimeLimits(pool_entries=256, history=64)
    batch = GrammarBatch(info, device="cpu", max_batch=1, limits=limits)
    batch.bind(0, grammars[0])
    text = [t for t, piece in enumerate(vocab) if piece in (b" a", b" and", b" do", b" in")]
    assert text, "the synthetic vocabulary has no plain-text tokens"
    rng = random.Random(0)
    sizes = []
    for step in range(2000):
        assert bool(batch.accept(torch.tensor([rng.choice(text)]))[0]), step
        state = batch.host_state()
        sizes.append((int(state.pool_size[0]), int(state.num_tops[0]), int(state.hist_len[0])))
    assert max(size for size, _, _ in sizes) <= 3 * 256 // 4 + 1
    assert min(size for size, _, _ in sizes[100:]) <= 64 + 8  # compacted to about the history
    assert {tops for _, tops, _ in sizes} == {1}
    assert sizes[-1][2] == 64
    assert bool(batch.rollback(torch.tensor([64]))[0])   # the whole history still rolls back
