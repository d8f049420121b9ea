"""The second level of the mask cache (``ContextPairs``) gives the same mask as walking all of a
top's uncertain tokens: along random walks over the zoo, for every live top (..., r, n), the
tokens accepted for the pair (n, r) plus those of its still-uncertain list that the full stack
accepts equal the node's uncertain tokens that the full stack accepts. This is exactly what the
GPU fill kernel relies on; the CPU runtime computes the same pairs when a stack first needs them
(``HostTables.context_pair``)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gxg.compiler.mask_cache import below_nodes
from gxg.grammar_compiler import GrammarCompiler
from gxg.matcher import GrammarMatcher, allocate_token_bitmask
from gxg.ops.reference import _walk_from_stack
from mask_oracles import mask_to_bool
from grammar_zoo import GRAMMAR_ZOO, make_info, synthetic_vocab, zoo_grammar


@pytest.mark.parametrize("name,ebnf,sentences", GRAMMAR_ZOO, ids=[z[0] for z in GRAMMAR_ZOO])
def test_pairs_equal_full_uncertain_walk(name, ebnf, sentences):
    info = make_info(synthetic_vocab(sentences))
    compiled = GrammarCompiler(info).compile_grammar(zoo_grammar(ebnf))
    pairs = compiled.context_pairs
    layout = compiled.kernel_layout
    below = below_nodes(compiled.automaton)
    rng = random.Random(11)
    checked = 0
    for walk in range(4):
        matcher = GrammarMatcher(compiled)
        tables = matcher._tables
        for step in range(10):
            state = matcher.state
            for entry, stack in zip(state.tops[0, : state.num_tops[0]].tolist(),
                                    state.stacks(0)):
                node = stack[-1]
                r = stack[-2] if len(stack) > 1 else -1
                uncertain = layout.uncertain_tokens[layout.uncertain_offsets[node]:
                                                    layout.uncertain_offsets[node + 1]]
                if len(uncertain) == 0:
                    continue
                rule = int(compiled.automaton.node_rule[node])
                assert r in below[rule], (name, stack)
                lo, hi = pairs.node_pair_offsets[node], pairs.node_pair_offsets[node + 1]
                matches = [q for q in range(lo, hi) if pairs.pair_below[q] == r]
                assert len(matches) == 1
                q = matches[0]
                accepted = set(pairs.pair_acc_tokens[pairs.pair_acc_offsets[q]:
                                                     pairs.pair_acc_offsets[q + 1]].tolist())
                still = pairs.pair_unc_tokens[pairs.pair_unc_offsets[q]:
                                              pairs.pair_unc_offsets[q + 1]]
                assert set(still.tolist()) <= set(uncertain.tolist())
                walked = info.sorted_token_ids[_walk_from_stack(tables, stack, still)]
                got = accepted | set(walked.tolist())
                want = set(info.sorted_token_ids[_walk_from_stack(tables, stack, uncertain)]
                           .tolist())
                assert got == want, (name, stack)
                if r >= 0:  # the CPU runtime's pair, computed when a stack needs it
                    cpu_accepted, cpu_still = tables.context_pair(node, r, uncertain)
                    assert set(cpu_accepted.tolist()) == accepted, (name, stack)
                    np.testing.assert_array_equal(np.sort(cpu_still), np.sort(still))
                checked += 1
            bitmask = allocate_token_bitmask(1, info.vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
            allowed = np.flatnonzero(mask_to_bool(bitmask[0].numpy(), info.vocab_size))
            token = int(rng.choice(allowed)) if len(allowed) else None
            if token is None or token in matcher.stop_token_ids:
                break
            assert matcher.accept_token(token)
    if name in ("json", "arithmetic", "nested_arrays"):
        assert checked > 0  # these grammars do have uncertain tokens
