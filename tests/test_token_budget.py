"""Token budgets: a generation that may still emit n tokens ends with complete output.

Specification:
* ``CompletionDistances``: a state's distance (the fewest bytes before the root can end) equals
  a breadth-first search over configurations, byte by byte, in every reachable state tried;
* ``fill_next_token_bitmask(remaining_tokens=n)`` equals its definition (``budget_mask``): the
  allowed tokens after which some completion of at most n - 1 bytes exists, or the grammar's
  mask when none does;
* random walks that pick any allowed token under a budget at least the start's distance always
  end complete within it, on synthetic and on real (SmolLM2) vocabularies;
* the batch ops with a ``remaining`` tensor give the matchers' masks; ``GrammarBatch`` counts
  the budget down on accept, gives it back on rollback and restores it on reset; the ops pass
  ``torch.library.opcheck`` with the new argument; on CUDA the budget kernels give the CPU
  reference's masks bit for bit.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import gxg
from gxg.batch import GrammarBatch
from gxg.compiler.completion import NO_RISE_BOUND, completion_distances
from gxg.compiler.stack_walk import StackWalker
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.tokenizer import TokenizerInfo, VocabType
from mask_oracles import budget_mask, mask_to_bool, shortest_completion
from grammar_zoo import GRAMMAR_ZOO, synthetic_vocab, zoo_grammar

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SCHEMA_WITH_REQUIRED_ARRAY = {
    "type": "object",
    "properties": {"name": {"type": "string"},
                   "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                   "note": {"type": "string", "minLength": 20}},
    "required": ["name", "tags"],
}


def every_byte_vocab(sentences, seed=0):
    """The zoo's synthetic vocabulary plus every single byte, so that each byte is a token (what
    byte-level and byte-fallback vocabularies guarantee, and the budget relies on)."""
    vocab = synthetic_vocab(sentences, seed=seed)
    body, tail = vocab[:-2], vocab[-2:]
    return sorted(set(body) | {bytes([b]) for b in range(256)}) + tail


@pytest.fixture(scope="module")
def zoo_compiled():
    sentences = [s for _, _, group in GRAMMAR_ZOO for s in group]
    vocab = every_byte_vocab(sentences)
    info = TokenizerInfo(vocab, VocabType.RAW, vocab_size=len(vocab) + 3,
                         stop_token_ids=[len(vocab) - 1])
    compiler = GrammarCompiler(info)
    compiled = {name: compiler.compile_grammar(zoo_grammar(ebnf)) for name, ebnf, _ in GRAMMAR_ZOO}
    compiled["schema"] = compiler.compile_json_schema(SCHEMA_WITH_REQUIRED_ARRAY)
    return info, compiled


ZOO_NAMES = [name for name, _, _ in GRAMMAR_ZOO] + ["schema"]


def allowed_ids(matcher, info, remaining=None):
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, remaining_tokens=remaining)
    return np.flatnonzero(mask_to_bool(bitmask[0].numpy(), info.vocab_size))


def random_states(compiled, info, seed, count=6, max_steps=8):
    """Matchers in states reached by random allowed tokens (no stop tokens)."""
    rng = random.Random(seed)
    stops = set(info.stop_token_ids)
    for _ in range(count):
        matcher = GrammarMatcher(compiled)
        for _ in range(rng.randrange(max_steps)):
            choices = [t for t in allowed_ids(matcher, info) if t not in stops]
            if not choices:
                break
            assert matcher.accept_token(int(rng.choice(choices)))
        yield matcher


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_distance_is_the_shortest_completion(zoo_compiled, name):
    info, compiled = zoo_compiled
    walker = StackWalker(compiled[name].automaton, escape_bottom=False)
    for matcher in random_states(compiled[name], info, seed=len(name)):
        config = frozenset((stack, False, None) for stack in matcher.state.stacks(0))
        if matcher.state.can_end[0]:
            config |= {((), False, None)}
        assert matcher.completion_distance() == shortest_completion(walker, config, limit=80)


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_budget_mask_is_its_definition(zoo_compiled, name):
    info, compiled = zoo_compiled
    rng = random.Random(7)
    for matcher in random_states(compiled[name], info, seed=3 + len(name), count=4):
        distance = matcher.completion_distance()
        for remaining in sorted({0, 1, 2, distance, distance + 1, distance + rng.randrange(4)}):
            got = np.zeros(info.vocab_size, dtype=bool)
            got[allowed_ids(matcher, info, remaining)] = True
            np.testing.assert_array_equal(got, budget_mask(matcher, remaining),
                                          err_msg=f"{name}: remaining {remaining}")


def run_to_the_end(matcher, info, budget, rng):
    """Pick any allowed token while the budget lasts; returns the bytes and whether the output
    is complete (a stop token was picked or the root can end)."""
    out = b""
    stops = set(info.stop_token_ids)
    for step in range(budget):
        choices = allowed_ids(matcher, info, budget - step)
        if set(choices.tolist()) <= stops:
            break
        token = int(rng.choice(choices))
        assert matcher.accept_token(token)
        if token in stops:
            break
        out += info.decoded_vocab[token]
    return out, matcher.is_completed()


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_random_walks_complete_within_the_budget(zoo_compiled, name):
    info, compiled = zoo_compiled
    start = GrammarMatcher(compiled[name]).completion_distance()
    for seed in range(6):
        rng = random.Random(seed)
        budget = start + rng.randrange(6)
        out, complete = run_to_the_end(GrammarMatcher(compiled[name]), info, budget, rng)
        assert complete, f"{name}: {out!r} incomplete with a budget of {budget}"


def test_a_budget_below_the_distance_leaves_the_grammar_mask(zoo_compiled):
    info, compiled = zoo_compiled
    matcher = GrammarMatcher(compiled["schema"])
    distance = matcher.completion_distance()
    assert distance > 3
    np.testing.assert_array_equal(allowed_ids(matcher, info, 3), allowed_ids(matcher, info))


def test_budget_argument_is_checked(zoo_compiled):
    info, compiled = zoo_compiled
    matcher = GrammarMatcher(compiled["json"])
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    with pytest.raises(ValueError, match="remaining_tokens"):
        matcher.fill_next_token_bitmask(bitmask, remaining_tokens=-1)
    with pytest.raises(TypeError, match="remaining_tokens"):
        matcher.fill_next_token_bitmask(bitmask, remaining_tokens=2.5)


@pytest.mark.parametrize("ebnf,rise", [
    ('root ::= [0-9]{3} "-" [0-9]{4}', 0),           # one path: a byte never adds work
    ('root ::= "a" root "b" | "c"', 1),               # "a" needs one more "b" than "c" does
    ('root ::= "x" | "yyyy"', 2),                     # 1 byte ("x") before, 3 ("yyy") after y
])
def test_max_rise_bounds_one_byte(ebnf, rise):
    from gxg.compiler.automaton import build_automaton
    from gxg.compiler.passes import prepare
    distances = completion_distances(build_automaton(prepare(gxg.Grammar.from_ebnf(ebnf))))
    assert distances.max_rise == rise and distances.max_rise != NO_RISE_BOUND


def _fixpoint_distances(a) -> list:
    """``node_distance`` by brute force: relax d(x) = min(0 if final, 1 + d(target) over byte
    edges and token moves, d(callee start) + d(return) over reference edges) until nothing
    changes."""
    inf = 10 ** 9
    d = [0 if final else inf for final in a.is_final.tolist()]
    changed = True
    while changed:
        changed = False
        for x in range(a.num_nodes):
            options = [d[x]] + [1 + d[t] for t in a.next_node[x].tolist() if t >= 0]
            if a.token_next[x] >= 0:
                options.append(1 + d[int(a.token_next[x])])
            for e in range(int(a.ref_offsets[x]), int(a.ref_offsets[x + 1])):
                options.append(d[int(a.rule_start[a.ref_rule[e]])] + d[int(a.ref_return[e])])
            if min(options) < d[x]:
                d[x], changed = min(options), True
    return d


# every zoo grammar, and rules that derive the empty string (a reference edge whose sum equals
# the distance being settled) and a long chain (many distance levels)
DISTANCE_GRAMMARS = [(name, ebnf) for name, ebnf, _ in GRAMMAR_ZOO] + [
    ("nullable", 'root ::= a "x" a b | b b "y"\na ::= "" | "q" a\nb ::= a a | "z"'),
    ("chain", 'root ::= "{" [a-z]{40} "}" | "[" root "]"'),
]


@pytest.mark.parametrize("name,ebnf", DISTANCE_GRAMMARS, ids=[g[0] for g in DISTANCE_GRAMMARS])
def test_node_distances_by_heap_and_by_level_equal_the_fixpoint(name, ebnf, monkeypatch):
    """``node_distance`` one node at a time (a heap) and a whole distance at a time (numpy)
    both equal the brute-force fixpoint (UNREACHABLE where it stays infinite)."""
    from gxg.compiler import completion
    from gxg.compiler.automaton import build_automaton
    from gxg.compiler.passes import prepare
    automaton = build_automaton(prepare(zoo_grammar(ebnf)))
    expected = np.minimum(_fixpoint_distances(automaton), completion.UNREACHABLE)
    for levels_from in (0, 10 ** 9):
        monkeypatch.setattr(completion, "LEVELS_FROM_NODES", levels_from)
        found = completion_distances(automaton).node_distance
        assert found.tolist() == expected.tolist(), levels_from


# ----------------------------------------------------------------------------- real vocabulary


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("transformers")
    from gxg.vocabularies import tokenizer_info_for
    info = tokenizer_info_for("smollm2")
    compiler = GrammarCompiler(info)
    return info, {"json": compiler.compile_builtin_json_grammar(),
                  "schema": compiler.compile_json_schema(SCHEMA_WITH_REQUIRED_ARRAY)}


@pytest.mark.parametrize("name,budget", [("json", 12), ("json", 40), ("schema", 40)])
def test_real_vocabulary_outputs_complete_and_parse(smollm2, name, budget):
    import json
    info, compiled = smollm2
    for seed in range(4):
        out, complete = run_to_the_end(GrammarMatcher(compiled[name]), info, budget,
                                       random.Random(seed))
        assert complete, f"seed {seed}: {out!r}"
        value = json.loads(out)
        if name == "schema":
            assert isinstance(value["tags"], list) and value["tags"]


# ----------------------------------------------------------------------------- batch and ops


def test_cpu_batch_budgets_match_matchers(zoo_compiled):
    info, compiled = zoo_compiled
    names = ["json", "schema", "arithmetic", "ambiguous"]
    batch = GrammarBatch(info, device="cpu", max_batch=len(names) + 1)
    budgets = [12, 30, 5, None]
    for slot, (name, budget) in enumerate(zip(names, budgets)):
        batch.bind(slot, compiled[name], max_tokens=budget)
    batch.unbind(len(names))
    matchers = [GrammarMatcher(compiled[name]) for name in names]
    left = list(budgets)
    rng = random.Random(0)
    bitmask = torch.zeros((batch.max_batch, (info.vocab_size + 31) // 32), dtype=torch.int32)
    for step in range(10):
        batch.fill_next_token_bitmask(bitmask)
        tokens = []
        for slot, matcher in enumerate(matchers):
            expected = np.zeros(info.vocab_size, dtype=bool)
            if not matcher.is_terminated():
                expected[allowed_ids(matcher, info, left[slot])] = True
            else:
                expected[matcher.stop_token_ids] = True
            got = mask_to_bool(bitmask[slot].numpy(), info.vocab_size)
            np.testing.assert_array_equal(got, expected, err_msg=f"step {step} slot {slot}")
            choices = [t for t in np.flatnonzero(got) if t not in info.stop_token_ids]
            tokens.append(int(rng.choice(choices)) if choices else info.stop_token_ids[0])
        tokens.append(0)
        accepted = batch.accept(torch.tensor(tokens, dtype=torch.int64))
        for slot, matcher in enumerate(matchers):
            if not matcher.is_terminated():
                assert bool(accepted[slot]) == matcher.accept_token(tokens[slot])
            if accepted[slot] and left[slot]:
                left[slot] -= 1
        assert batch.token_budget.tolist() == [-1 if b is None else b for b in left] + [-1]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, cuda])])
def test_a_budget_given_after_steps_without_one_narrows_exactly(zoo_compiled, device):
    """A batch without budgets registers its grammars without their completion distances
    (``register(distances=False)``: a bind computes none); the first budget writes them, for
    every grammar, before a fill reads them, and the CPU ops' tables read before (in the
    steps without a budget) are rebuilt: the masks then equal the matchers' with the budget."""
    info, compiled = zoo_compiled
    names = ZOO_NAMES
    fresh = GrammarCompiler(info).compile_grammar(zoo_grammar(GRAMMAR_ZOO[0][1]))
    batch = GrammarBatch(info, device=device, max_batch=len(names) + 1)
    for slot, name in enumerate(names):
        batch.bind(slot, compiled[name])
    batch.bind(len(names), fresh)
    assert fresh._completion is None  # no budget yet: no distances computed
    matchers = [GrammarMatcher(compiled[name]) for name in names]
    rng = random.Random(0)
    words = (info.vocab_size + 31) // 32
    bitmask = torch.zeros((batch.max_batch, words), dtype=torch.int32, device=device)
    budgets = None
    for step in range(8):
        if step == 2:  # two steps without a budget first (the CPU ops' tables are built)
            budgets = [rng.randrange(2, 7) for _ in names]
            for slot, budget in enumerate(budgets):
                batch.set_token_budget(slot, budget)
            assert fresh._completion is not None
        batch.fill_next_token_bitmask(bitmask)
        got = bitmask.cpu().numpy()
        tokens = []
        for slot, matcher in enumerate(matchers):
            expected = np.zeros(info.vocab_size, dtype=bool)
            if not matcher.is_terminated():
                expected[allowed_ids(matcher, info, budgets and budgets[slot])] = True
            else:
                expected[matcher.stop_token_ids] = True
            row = mask_to_bool(got[slot], info.vocab_size)
            np.testing.assert_array_equal(row, expected,
                                          err_msg=f"step {step} slot {slot} ({names[slot]})")
            choices = [t for t in np.flatnonzero(row) if t not in info.stop_token_ids]
            tokens.append(int(rng.choice(choices)) if choices else info.stop_token_ids[0])
        accepted = batch.accept(torch.tensor(tokens + [0], dtype=torch.int64, device=device))
        for slot, matcher in enumerate(matchers):
            if not matcher.is_terminated():
                assert bool(accepted[slot]) == matcher.accept_token(tokens[slot])
            if budgets and accepted[slot] and budgets[slot]:
                budgets[slot] -= 1


def test_registering_again_with_distances_writes_the_missing_ones(zoo_compiled):
    """A grammar registered without its completion distances gets them when it is registered
    again with them (the default), under the same id."""
    from gxg.arena import DeviceArena
    info, compiled = zoo_compiled
    arena = DeviceArena(info, device="cpu")
    gid = arena.register(compiled["json"], distances=False)
    assert not arena._registered[gid].distances
    assert arena.register(compiled["json"]) == gid
    assert arena._registered[gid].distances
    rows = arena.node_distance[arena.grammar_node_base[gid]:][:compiled["json"].automaton.num_nodes]
    np.testing.assert_array_equal(rows.numpy(), compiled["json"].completion.node_distance)


def test_batch_budget_rollback_and_reset(zoo_compiled):
    info, compiled = zoo_compiled
    batch = GrammarBatch(info, device="cpu", max_batch=2)
    batch.bind(0, compiled["json"], max_tokens=10)
    batch.bind(1, compiled["json"])
    bitmask = torch.zeros((2, (info.vocab_size + 31) // 32), dtype=torch.int32)
    for text in (b"[", b"1"):
        token = info.decoded_vocab.index(text)
        batch.fill_next_token_bitmask(bitmask)
        batch.accept(torch.tensor([token, token]))
    assert batch.token_budget.tolist() == [8, -1]
    batch.rollback(1)
    assert batch.token_budget.tolist() == [9, -1]
    batch.reset([0])
    assert batch.token_budget.tolist() == [10, -1]
    batch.set_token_budget(1, 3)
    assert batch.token_budget.tolist() == [10, 3]
    for bad in (-2, 2 ** 31, 1.5, True):
        with pytest.raises(ValueError, match="max_tokens"):
            batch.set_token_budget(0, bad)


@pytest.mark.parametrize("fused", [False, True], ids=["accept", "accept_tokens"])
def test_a_rollback_gives_back_only_the_tokens_the_budget_counted(zoo_compiled, fused):
    """A budget of 2 and four tokens accepted (the caller ignored the masks): the budget stops
    at 0 and the two tokens past it are undone first, so rolling back one by one gives
    0, 0, 1, 2: the budget a slot had before each of those accepts."""
    info, compiled = zoo_compiled
    batch = GrammarBatch(info, device="cpu", max_batch=1)
    batch.bind(0, compiled["json"], max_tokens=2)
    tokens = [info.decoded_vocab.index(t) for t in (b"[", b"1", b",", b"2")]
    if fused:
        assert batch.accept_tokens(torch.tensor([tokens])).tolist() == [4]
    else:
        for token in tokens:
            assert batch.accept(torch.tensor([token])).tolist() == [True]
    assert batch.token_budget.tolist() == [0]
    given_back = []
    for _ in tokens:
        assert batch.rollback(1).tolist() == [True]
        given_back.append(batch.token_budget.item())
    assert given_back == [0, 0, 1, 2]
    for token in tokens[:3]:  # and after the rollbacks it counts as before
        batch.accept(torch.tensor([token]))
    assert batch.token_budget.tolist() == [0]
    batch.rollback(2)
    assert batch.token_budget.tolist() == [1]


def test_ops_pass_opcheck_with_a_budget(zoo_compiled):
    info, compiled = zoo_compiled
    batch = GrammarBatch(info, device="cpu", max_batch=2)
    batch.bind(0, compiled["json"], max_tokens=4)
    batch.bind(1, compiled["schema"], max_tokens=40)
    bitmask = torch.zeros((2, (info.vocab_size + 31) // 32), dtype=torch.int32)
    logits = torch.randn(2, info.vocab_size)
    arena = batch.arena.op_tensors()
    xg = torch.ops.xg
    tests = ("test_schema", "test_faketensor")
    torch.library.opcheck(xg.fill_next_token_bitmask.default,
                          (batch.runtime, arena, bitmask, batch.token_budget),
                          test_utils=tests)
    torch.library.opcheck(xg.fill_and_apply.default,
                          (batch.runtime, arena, logits, bitmask, batch.token_budget),
                          test_utils=tests)
    with pytest.raises(ValueError, match="remaining must be"):
        xg.fill_next_token_bitmask(batch.runtime, arena, bitmask,
                                   batch.token_budget.to(torch.int64))


# ----------------------------------------------------------------------------- CUDA


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("seed,defines", [
    (0, ()), (1, ()), (2, ()),
    # every walk outgrows the first room and takes the full one
    (3, ("-DBUDGET_SMALL_STACKS=1", "-DBUDGET_SMALL_DEPTH=1")),
])
def test_cuda_budget_masks_match_cpu(zoo_compiled, seed, defines, monkeypatch):
    from gxg.ops import cuda_automaton
    monkeypatch.setattr(cuda_automaton, "KERNEL_DEFINES", defines)
    info, compiled = zoo_compiled
    names = ZOO_NAMES
    rng = random.Random(seed)
    budgets = [rng.randrange(0, 12) for _ in names]
    batches = [GrammarBatch(info, device=d, max_batch=len(names)) for d in ("cpu", "cuda")]
    for batch in batches:
        for slot, name in enumerate(names):
            batch.bind(slot, compiled[name], max_tokens=budgets[slot])
    words = (info.vocab_size + 31) // 32
    for step in range(14):
        masks = []
        for batch in batches:
            bitmask = torch.zeros((len(names), words), dtype=torch.int32, device=batch.device)
            batch.fill_next_token_bitmask(bitmask)
            masks.append(bitmask.cpu().numpy())
        for slot in range(len(names)):
            np.testing.assert_array_equal(mask_to_bool(masks[0][slot], info.vocab_size),
                                          mask_to_bool(masks[1][slot], info.vocab_size),
                                          err_msg=f"step {step} slot {slot} ({names[slot]})")
        tokens = []
        for slot in range(len(names)):
            allowed = np.flatnonzero(mask_to_bool(masks[0][slot], info.vocab_size))
            tokens.append(int(rng.choice(allowed)) if len(allowed) else 0)
        for batch in batches:
            batch.accept(torch.tensor(tokens, dtype=torch.int64, device=batch.device))
        assert batches[0].token_budget.tolist() == batches[1].token_budget.cpu().tolist()
