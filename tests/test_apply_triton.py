"""The Triton apply kernel equals the CPU reference (ops/apply_bitmask.py) bit for bit: random
masks (all-zero, all-one and mixed words), fp32/fp16/bf16, widths that are and are not
multiples of the block, indices, narrower and wider logits. Runs under TRITON_INTERPRET=1 on a
machine without CUDA (tests/conftest.py sets it) and on the GPU where there is one."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from gxg.ops.apply_bitmask import apply_token_bitmask_inplace_cpu  # noqa: E402
from gxg.ops.apply_triton import apply_token_bitmask_inplace_triton  # noqa: E402
from mask_oracles import random_bitmask  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vocab,logits_width,block_words", [
    (2048, 2048, 64), (3000, 3000, 64), (100, 100, 2), (4100, 4200, 16), (4100, 4000, 16),
])
@pytest.mark.parametrize("with_indices", [False, True])
def test_apply_matches_cpu_reference(dtype, vocab, logits_width, block_words, with_indices):
    g = torch.Generator().manual_seed(vocab + logits_width + block_words)
    rows = 3
    bitmask = random_bitmask(rows, (vocab + 31) // 32, g)
    logits = torch.randn(rows, logits_width, generator=g).to(dtype)
    indices = [2, 0] if with_indices else None
    expected = logits.clone()
    with pytest.warns(UserWarning) if 32 * bitmask.shape[1] < logits_width else _nothing():
        apply_token_bitmask_inplace_cpu(expected, bitmask, indices=indices)
    got = logits.clone().to(DEVICE)
    with pytest.warns(UserWarning) if 32 * bitmask.shape[1] < logits_width else _nothing():
        apply_token_bitmask_inplace_triton(got, bitmask.to(DEVICE), indices=indices,
                                           block_words=block_words)
    assert torch.equal(got.cpu(), expected)


def test_vocab_size_argument_and_1d():
    logits = torch.zeros(70)
    bitmask = torch.tensor([0, 0, 0], dtype=torch.int32)
    apply_token_bitmask_inplace_triton(logits.to(DEVICE), bitmask.to(DEVICE), vocab_size=40)
    expected = torch.zeros(70)
    apply_token_bitmask_inplace_cpu(expected, bitmask, vocab_size=40)
    got = logits.to(DEVICE)
    apply_token_bitmask_inplace_triton(got, bitmask.to(DEVICE), vocab_size=40)
    assert torch.equal(got.cpu(), expected)
    with pytest.raises(ValueError):
        apply_token_bitmask_inplace_triton(got, bitmask.to(DEVICE), vocab_size=97)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
