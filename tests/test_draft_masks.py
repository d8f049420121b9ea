"""``gxg.draft_masks.DraftMasks``: every draft node's mask for every slot, on the batch's device.

Specification: for B slots, each some tokens into a zoo grammar, and a random draft tree per slot
(grown as a drafter would: mostly allowed tokens, some tokens of the real continuation, some
random ids), row (b, i) equals what ``GrammarMatcher.traverse_draft_tree`` writes for that
slot's state into rows that start at zero — the mask after the path's tokens, zero for a node
whose token is rejected or terminates and, where the traversal leaves rows alone (below such a
node, and nodes no path reaches), zero. The batch's state is unchanged. On the CPU in CI; on
CUDA, the same rows (marked gpu).
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

import gxg
from draft_trees import grow_trees, qwen_json_walks, spell
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar
from mask_oracles import mask_to_bool
from gxg.batch import GrammarBatch
from gxg.draft_masks import DraftMasks
from gxg.grammar_compiler import GrammarCompiler

NODES = 12
SLOTS = 4


def pad(tree, n):
    """XGrammar's arrays padded to n nodes (the extra nodes are reached by no link)."""
    out = []
    for array, fill in zip(tree, (-1, -1, 0)):
        extra = torch.full((n - array.shape[0],), fill, dtype=torch.int64)
        out.append(torch.cat([array, extra]))
    return out


def accept_prefixes(batch, prefixes, device):
    """Slot b takes ``prefixes[b]`` (one accept_tokens call); all must be accepted."""
    longest = max(1, max(len(prefix) for prefix in prefixes))
    rows = torch.zeros((len(prefixes), longest), dtype=torch.int64)
    for slot, prefix in enumerate(prefixes):
        rows[slot, : len(prefix)] = torch.tensor(prefix, dtype=torch.int64)
    lengths = torch.tensor([len(prefix) for prefix in prefixes])
    assert batch.accept_tokens(rows.to(device), lengths.to(device)).tolist() == lengths.tolist()


def expected_rows(compiled, prefix, tree, words):
    matcher = gxg.GrammarMatcher(compiled)
    assert all(matcher.accept_token(t) for t in prefix)
    rows = torch.zeros((tree[0].shape[0], words), dtype=torch.int32)
    assert matcher.traverse_draft_tree(*tree, rows)
    return rows


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_draft_masks_equal_the_host_traversal(name, ebnf, sentences, device):
    info = make_info(synthetic_vocab(sentences))
    compiled = GrammarCompiler(info).compile_grammar(zoo_grammar(ebnf))
    words = (info.vocab_size + 31) // 32
    pairs = list(grow_trees(compiled, info.vocab_size, spell(info, sentences), seed=name,
                            count=SLOTS, size=NODES, width=3))
    batch = GrammarBatch(info, device=device, max_batch=SLOTS)
    for slot, (prefix, _) in enumerate(pairs):
        batch.bind(slot, compiled)
    accept_prefixes(batch, [prefix for prefix, _ in pairs], device)
    trees = [pad(tree, NODES) for _, tree in pairs]
    arrays = [torch.stack([t[k] for t in trees]).to(device) for k in range(3)]
    before = batch.host_state()
    drafts = DraftMasks(batch, NODES)
    bitmask = torch.full((SLOTS, NODES, words), 7, dtype=torch.int32, device=device)
    drafts.fill(*arrays, bitmask)
    after = batch.host_state()
    for slot, (prefix, tree) in enumerate(pairs):
        assert after.stacks(slot) == before.stacks(slot)
        want = expected_rows(compiled, prefix, pad(tree, NODES), words)
        np.testing.assert_array_equal(bitmask[slot].cpu().numpy(), want.numpy(),
                                      err_msg=f"{name} slot {slot}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_qwen_trees_equal_the_host_traversal_and_xgrammar(device):
    """Builtin JSON with Qwen's vocabulary, trees grown from real documents: the host traversal
    row for row, and XGrammar 0.2.8's traversal on every row it writes (vocabulary bits)."""
    info, tokenizer, compiled, walks = qwen_json_walks()
    words = (info.vocab_size + 31) // 32
    pairs = list(grow_trees(compiled, info.vocab_size, walks, seed=5, count=SLOTS, size=NODES))
    batch = GrammarBatch(info, device=device, max_batch=SLOTS)
    for slot in range(SLOTS):
        batch.bind(slot, compiled)
    accept_prefixes(batch, [prefix for prefix, _ in pairs], device)
    trees = [pad(tree, NODES) for _, tree in pairs]
    arrays = [torch.stack([t[k] for t in trees]).to(device) for k in range(3)]
    rows = DraftMasks(batch, NODES).fill(*arrays, torch.zeros((SLOTS, NODES, words),
                                                              dtype=torch.int32, device=device))
    rows = rows.cpu()
    try:
        import xgrammar as xgr
    except ImportError:
        xgr = None
    if xgr is not None:
        xinfo = xgr.TokenizerInfo.from_huggingface(tokenizer)
        xcompiled = xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_builtin_json_grammar()
    for slot, (prefix, tree) in enumerate(pairs):
        want = expected_rows(compiled, prefix, pad(tree, NODES), words)
        np.testing.assert_array_equal(rows[slot].numpy(), want.numpy(), err_msg=f"slot {slot}")
        if xgr is None:
            continue
        theirs = xgr.GrammarMatcher(xcompiled)
        assert all(theirs.accept_token(t) for t in prefix)
        their_rows = torch.full((NODES, rows.shape[2]), 7, dtype=torch.int32)
        assert theirs.traverse_draft_tree(*pad(tree, NODES), their_rows)
        for node in range(NODES):
            if (their_rows[node] == 7).all():
                continue  # a row XGrammar leaves alone
            np.testing.assert_array_equal(mask_to_bool(rows[slot, node].numpy(), info.vocab_size),
                                          mask_to_bool(their_rows[node].numpy(), info.vocab_size),
                                          err_msg=f"slot {slot} node {node}")
    if xgr is None:
        pytest.skip("xgrammar is not installed: compared with the host traversal only")


def test_bad_arguments_are_refused():
    name, ebnf, sentences = GRAMMAR_ZOO[0]
    info = make_info(synthetic_vocab(sentences))
    compiled = GrammarCompiler(info).compile_grammar(zoo_grammar(ebnf))
    batch = GrammarBatch(info, device="cpu", max_batch=2)
    batch.bind(0, compiled)
    drafts = DraftMasks(batch, 3)
    words = (info.vocab_size + 31) // 32
    good = [torch.full((2, 3), -1, dtype=torch.int64) for _ in range(2)] + \
        [torch.zeros((2, 3), dtype=torch.int64)]
    with pytest.raises(ValueError, match="draft_tokens"):
        drafts.fill(*good[:2], torch.zeros((2, 4), dtype=torch.int64),
                    torch.zeros((2, 3, words), dtype=torch.int32))
    with pytest.raises(ValueError, match="bitmask"):
        drafts.fill(*good, torch.zeros((2, 3, words + 1), dtype=torch.int32))
    with pytest.raises(ValueError, match="num_nodes"):
        DraftMasks(batch, 0)
    other = GrammarBatch(info, device="cpu", max_batch=2)
    with pytest.raises(ValueError, match="same arena"):
        other.copy_slots_from(batch, torch.zeros(2, dtype=torch.int64))
    rows = drafts.fill(*good, torch.zeros((2, 3, words), dtype=torch.int32))
    # the unbound slot: everything at its root, zero at the nodes no link reaches
    assert rows[1, 0].eq(-1).all() and rows[1, 1:].eq(0).all()


def gpu_case(*values):
    return pytest.param(*values, marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")])


def zoo_json_walks():
    """(info, compiled, walks) of the zoo's JSON grammar over its synthetic vocabulary."""
    name, ebnf, sentences = next(z for z in GRAMMAR_ZOO if z[0] == "json")
    info = make_info(synthetic_vocab(sentences))
    return info, GrammarCompiler(info).compile_grammar(zoo_grammar(ebnf)), spell(info, sentences)


@pytest.mark.parametrize("mode,device,source", [
    ("compile", "cpu", "zoo"), gpu_case("graph", "cuda", "zoo"), gpu_case("graph", "cuda", "qwen"),
    gpu_case("compile", "cuda", "qwen")])
def test_captured_or_compiled_fills_equal_the_eager_cpu_rows(mode, device, source):
    """A fill captured once in a CUDA graph with fixed buffers and replayed, or compiled with
    torch.compile(fullgraph=True) and called, for new trees and new batch states: the rows an
    eager CPU batch writes for the same states and trees."""
    if source == "qwen":
        info, _, compiled, walks = qwen_json_walks()
    else:
        info, compiled, walks = zoo_json_walks()
    words = (info.vocab_size + 31) // 32
    batches = {"cpu": GrammarBatch(info, device="cpu", max_batch=SLOTS)}
    batches["run"] = GrammarBatch(info, device=device, max_batch=SLOTS)
    for batch in batches.values():
        for slot in range(SLOTS):
            batch.bind(slot, compiled)
    drafts = {d: DraftMasks(b, NODES) for d, b in batches.items()}
    static = [torch.full((SLOTS, NODES), -1, dtype=torch.int64, device=device) for _ in range(2)]
    static.append(torch.zeros((SLOTS, NODES), dtype=torch.int64, device=device))
    bitmask = torch.zeros((SLOTS, NODES, words), dtype=torch.int32, device=device)
    if mode == "graph":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            drafts["run"].fill(*static, bitmask)  # warm-up
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            drafts["run"].fill(*static, bitmask)
        run = graph.replay
    else:
        compiled_fill = torch.compile(lambda *a: drafts["run"].fill(*a), fullgraph=True)
        run = lambda: compiled_fill(*static, bitmask)  # noqa: E731
    for round_ in range(3):
        pairs = list(grow_trees(compiled, info.vocab_size, walks, seed=f"{mode}{round_}",
                                count=SLOTS, size=NODES, width=3))
        for key, batch in batches.items():
            batch.reset()
            accept_prefixes(batch, [prefix for prefix, _ in pairs], batch.device)
        trees = [pad(tree, NODES) for _, tree in pairs]
        arrays = [torch.stack([t[k] for t in trees]) for k in range(3)]
        expected = drafts["cpu"].fill(*arrays, torch.zeros((SLOTS, NODES, words),
                                                           dtype=torch.int32))
        for buffer, array in zip(static, arrays):
            buffer.copy_(array)
        run()
        torch.testing.assert_close(bitmask.cpu(), expected, rtol=0, atol=0)
