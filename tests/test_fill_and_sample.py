"""``xg::fill_and_sample`` (``GrammarBatch.fill_and_sample``) and its sampler.

* Reference (``ops/reference.py``): Philox4x32-10 known-answer vectors; greedy equals argmax of
  the logits ``fill_and_apply`` masked, on real batch states (grammars, unbound, terminated and
  failed slots), fp32/fp16/bf16, logits as wide as and wider than the vocabulary; sampled tokens
  stay in the allowed ∩ top-k ∩ top-p set computed independently (float64, no sorting);
  top_k = 1 and a tiny top_p are greedy; the draws follow the renormalised masked softmax
  (chi-square, fixed seed, with a negative control that must fail).
* Triton (``ops/sample_triton.py``), under TRITON_INTERPRET=1 on CPU tensors where there is no
  CUDA device: the same token as the reference in every row (empty masks, all-ones masks with
  padding bits, ties, ±0, -inf, every mode), for several block sizes and pivot counts.
* The op: offset advanced in place, reproducible, logits never written, scalars cached, fake
  kernel and ``torch.compile`` (aot_eager) on the CPU.
* GPU (marked gpu): the CUDA op against the CPU op, and a CUDA-graph replay against eager.
"""
from __future__ import annotations

import os
import warnings

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gxg.batch import GrammarBatch  # noqa: E402
from gxg.ops import reference  # noqa: E402
from gxg.runtime import RuntimeLimits  # noqa: E402
from mask_oracles import mask_to_bool, random_bitmask  # noqa: E402
from grammar_zoo import zoo_world  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
xg = torch.ops.xg

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
GRAMMARS = ["json", "arithmetic", "ambiguous", "nested_arrays"]
MODES = {
    "temperature": dict(temperature=0.8),
    "top_k": dict(temperature=1.0, top_k=3),
    "top_p": dict(temperature=1.3, top_p=0.7),
    "top_k_top_p": dict(temperature=0.6, top_k=6, top_p=0.9),
}


@pytest.fixture(scope="module")
def world():
    info, compiled = zoo_world(GRAMMARS, seed=5)
    assert info.vocab_size % 32 != 0
    return info, compiled


def make_batch(info, compiled, device="cpu") -> GrammarBatch:
    """8 slots: json fresh, arithmetic after "1", ambiguous fresh, nested arrays after "[",
    json after "[1", unbound, arithmetic terminated, arithmetic failed (rollback too far)."""
    batch = GrammarBatch(info, device=device, max_batch=8, limits=RuntimeLimits(history=8))
    for slot, name in enumerate(["json", "arithmetic", "ambiguous", "nested_arrays", "json",
                                 None, "arithmetic", "arithmetic"]):
        if name is None:
            batch.unbind(slot)
        else:
            batch.bind(slot, compiled[name])
    tok = {text: info.decoded_vocab.index(text) for text in (b"#", b"1", b"[", b"7")}
    stop = info.stop_token_ids[0]

    def accept(texts_or_ids):
        ids = [tok[t] if isinstance(t, bytes) else t for t in texts_or_ids]
        return batch.accept(torch.tensor(ids, dtype=torch.int64, device=device)).tolist()

    # "#" is rejected by every grammar here: those slots stay where they are.
    accept([b"#", b"1", b"#", b"[", b"[", b"#", b"7", b"7"])
    accept([b"#", b"#", b"#", b"#", b"1", b"#", stop, b"7"])
    batch.rollback(torch.tensor([0] * 7 + [9], dtype=torch.int64, device=device))
    assert batch.is_terminated().tolist()[6] and int(batch.error_codes()[7]) != 0
    return batch


def random_logits(rows, width, dtype, seed, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, width, generator=g) * scale).to(dtype)


def allowed_of(bitmask: torch.Tensor, vocab_size: int) -> np.ndarray:
    return np.stack([mask_to_bool(row, vocab_size) for row in bitmask.cpu().numpy()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return a.dtype == b.dtype and torch.equal(a.cpu().view(ints), b.cpu().view(ints))


def row_tensors(rows, temperature=0.0, top_k=0, top_p=1.0, seed=0, offset=0, device="cpu"):
    def full(v, dtype):
        return torch.as_tensor(v, dtype=dtype).expand(rows).contiguous().to(device)
    return (full(temperature, torch.float32), full(top_k, torch.int32),
            full(top_p, torch.float32), torch.tensor([seed], dtype=torch.int64, device=device),
            torch.tensor([offset], dtype=torch.int64, device=device))


def independent_kept(x: torch.Tensor, allowed: np.ndarray, temperature, top_k=0, top_p=1.0):
    """bool [V]: allowed ∩ top-k ∩ top-p from the definitions (float64, pairwise, no sort):
    kept by top-k iff fewer than k allowed ids have a strictly larger logit; by top-p iff the
    top-k-kept mass strictly above is < p of the top-k-kept mass."""
    ids = torch.from_numpy(np.flatnonzero(allowed))
    xa = x[ids].double()
    keep = torch.ones(len(ids), dtype=torch.bool)
    greater = xa[None, :] > xa[:, None]               # [i, j]: x_j > x_i
    if 0 < top_k < len(ids):
        keep &= greater.sum(1) < top_k
    if top_p < 1.0 and len(ids):
        w = torch.exp((xa - xa.max()) / temperature) * keep
        keep &= (greater * w[None, :]).sum(1) < max(top_p, reference.TOP_P_FLOOR) * w.sum()
    out = np.zeros(len(allowed), dtype=bool)
    out[ids[keep].numpy()] = True
    return out


def exact_probabilities(x: torch.Tensor, kept: np.ndarray, temperature) -> np.ndarray:
    z = x.double()[torch.from_numpy(kept)] / temperature
    p = np.zeros(len(kept))
    p[kept] = torch.softmax(z, 0).numpy()
    return p


# ----------------------------------------------------------------------------- reference


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32_10."""
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2,
              (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for counter, key, expected in cases:
        assert tuple(int(v) for v in reference.philox4x32(*counter, *key)) == expected
    u = reference.sample_uniforms(-1, 2 ** 40 + 3, 7, np.arange(4096))
    assert u.dtype == np.float32 and u.min() > 0 and u.max() < 1
    assert abs(float(u.mean()) - 0.5) < 0.02 and len(np.unique(u)) > 4000


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extra", [0, 37])
def test_greedy_is_argmax_of_fill_and_apply(world, dtype, extra):
    info, compiled = world
    vocab = info.vocab_size
    batch = make_batch(info, compiled)
    logits = random_logits(batch.max_batch, vocab + extra, dtype, seed=extra + 1)
    logits[:, vocab:] = 1e4                           # past the vocabulary: never drawn
    masked = logits.clone()
    with warnings.catch_warnings():                   # wider logits than the bitmask covers
        warnings.simplefilter("ignore")
        applied = batch.fill_and_apply(masked).clone()
    before = logits.clone()
    tokens = batch.fill_and_sample(logits)
    assert same_bits(logits, before)                  # never written
    assert torch.equal(batch._bitmask, applied)       # the same fill
    assert tokens.dtype == torch.int64 and tokens.shape == (batch.max_batch,)
    assert torch.equal(tokens, masked[:, :vocab].float().argmax(dim=-1))
    accepted = batch.accept(tokens).tolist()
    assert accepted[:6] == [True] * 6 and accepted[6:] == [False, False]


@pytest.mark.parametrize("mode", list(MODES))
def test_sampled_tokens_stay_in_the_kept_set(world, mode):
    info, compiled = world
    vocab, params = info.vocab_size, MODES[mode]
    batch = make_batch(info, compiled)
    logits = random_logits(batch.max_batch, vocab, torch.float32, seed=11)
    allowed = allowed_of(batch.fill_next_token_bitmask(batch._bitmask.clone()), vocab)
    kept = [independent_kept(logits[b], allowed[b], params["temperature"],
                             params.get("top_k", 0), params.get("top_p", 1.0))
            for b in range(batch.max_batch)]
    draws = [batch.fill_and_sample(logits, **params).tolist() for _ in range(25)]
    assert int(batch.sample_offset) == 25
    for step in draws:
        for b, token in enumerate(step):
            assert 0 <= token < vocab and kept[b][token], (mode, b, token)
    distinct = [len({step[b] for step in draws}) for b in range(batch.max_batch)]
    assert max(distinct) > 1                          # the offset does change the draws
    for b in range(batch.max_batch):                  # a one-token kept set is a fixed draw
        if kept[b].sum() == 1:
            assert distinct[b] == 1


def test_top_k_one_and_small_top_p_are_greedy(world):
    info, compiled = world
    batch = make_batch(info, compiled)
    logits = random_logits(batch.max_batch, info.vocab_size, torch.float32, seed=3)
    greedy = batch.fill_and_sample(logits)
    for params in (dict(temperature=0.7, top_k=1), dict(temperature=1.5, top_p=1e-6),
                   dict(temperature=1.0, top_p=0.0), dict(temperature=0.9, top_k=1, top_p=0.5)):
        for _ in range(3):
            assert torch.equal(batch.fill_and_sample(logits, **params), greedy), params


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square goodness of fit; bins expecting < 5 draws are pooled."""
    n = counts.sum()
    expected = probs * n
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        if obs[-1]:
            return 0.0                        # a draw where the distribution has no mass
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


@pytest.mark.parametrize("mode", list(MODES))
def test_distribution_matches_the_renormalised_masked_softmax(mode):
    """6,000 draws of one row (each copy of the row has its own Philox stream) against the exact
    distribution; a wrong distribution (other temperature, or no cut) must be rejected."""
    params = MODES[mode]
    vocab, rows = 40, 6000
    g = torch.Generator().manual_seed(17)
    x = torch.randn(vocab, generator=g) * 1.2
    allowed = np.zeros(vocab, dtype=bool)
    allowed[torch.randperm(vocab, generator=g)[:14].numpy()] = True
    padded = np.append(allowed, np.zeros(64 - vocab, dtype=bool))
    bitmask = torch.from_numpy(np.packbits(padded, bitorder="little").view(np.int32).copy())
    T, k, p = params["temperature"], params.get("top_k", 0), params.get("top_p", 1.0)
    tokens = reference.sample_masked(x.expand(rows, vocab), bitmask.expand(rows, 2).contiguous(),
                                     *row_tensors(rows, T, k, p, seed=2024, offset=9), vocab)
    counts = np.bincount(tokens.numpy(), minlength=vocab)
    kept = independent_kept(x, allowed, T, k, p)
    assert counts[~kept].sum() == 0
    assert chi_square_p_value(counts, exact_probabilities(x, kept, T)) > 1e-4
    wrong = (exact_probabilities(x, kept, 1.6 * T) if mode == "temperature"
             else exact_probabilities(x, allowed, T))
    assert chi_square_p_value(counts, wrong) < 1e-6


# ----------------------------------------------------------------------------- Triton


# (temperature, top_k, top_p) per row, and what the row's logits or mask look like
SAMPLER_ROWS = [
    (1.0, 0, 1.0),        # 0  nothing allowed -> -1
    (0.0, 0, 1.0),        # 1  greedy, everything allowed (padding bits set past V)
    (0.7, 5, 0.9),        # 2  a single allowed token
    (1.0, 3, 1.0),        # 3  values on a coarse grid: the top-k cut falls inside a tie
    (0.5, 0, 0.8),        # 4  some allowed logits are -inf
    (1.0, 4, 0.5),        # 5  every allowed logit is -inf: the lowest allowed id
    (0.0, 0, 1.0),        # 6  greedy over -0.0 / +0.0 ties
    (1.0, 1, 1.0),        # 7  top-1
    (1.2, 0, 0.0),        # 8  top_p 0: the top value's ties
    (0.9, 1000, 1.0),     # 9  k >= allowed count: no cut
    (1.0, 0, 1.0),        # 10 plain temperature
    (2.0, 10, 0.95),      # 11 top-k then top-p
    (0.3, 0, 0.5),        # 12 top-p
    (1.0, 7, 1.0),        # 13 top-k
    (float("nan"), 5, 0.5),  # 14 NaN temperature: greedy
    (1e-3, 0, 0.9),       # 15 tiny temperature
]


def sampler_case(dtype, extra, seed, vocab=150):
    g = torch.Generator().manual_seed(seed)
    rows = len(SAMPLER_ROWS)
    words = (vocab + 31) // 32
    x = torch.randn(rows, vocab + extra, generator=g) * 3
    bitmask = random_bitmask(rows, words, g)
    bitmask[0] = 0
    bitmask[1] = -1
    bitmask[2] = 0
    bitmask[2, 3] = 1 << 7
    x[3] = torch.round(x[3] * 2) / 2
    x[4, ::3] = float("-inf")
    x[5] = float("-inf")
    x[6] = torch.where(torch.rand(vocab + extra, generator=g) < 0.5, 0.0, -0.0)
    x[6, :10] = -1.0
    x[:, vocab:] = 1e4                                # past the vocabulary: never drawn
    temperature = torch.tensor([r[0] for r in SAMPLER_ROWS], dtype=torch.float32)
    top_k = torch.tensor([r[1] for r in SAMPLER_ROWS], dtype=torch.int32)
    top_p = torch.tensor([r[2] for r in SAMPLER_ROWS], dtype=torch.float32)
    return x.to(dtype), bitmask, temperature, top_k, top_p


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extra,block,search_block,pivots", [
    (0, 64, 32, 16), (37, 32, 16, 4),
])
def test_triton_sampler_matches_reference(dtype, extra, block, search_block, pivots):
    from gxg.ops.sample_triton import sample_masked_triton
    vocab = 150
    logits, bitmask, temperature, top_k, top_p = sampler_case(dtype, extra, seed=extra + 5)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for seed, offset in ((0, 0), (-5, 2 ** 33 + 1)):
        seed_t = torch.tensor([seed], dtype=torch.int64)
        offset_t = torch.tensor([offset], dtype=torch.int64)
        expected = reference.sample_masked(logits, bitmask, temperature, top_k, top_p, seed_t,
                                           offset_t, vocab)
        got = sample_masked_triton(*(t.to(device) for t in (logits, bitmask, temperature, top_k,
                                                            top_p, seed_t, offset_t)), vocab,
                                   block=block, search_block=search_block, pivots=pivots)
        assert got.cpu().tolist() == expected.tolist(), (seed, offset)
        assert expected[0] == -1 and expected[2] == 3 * 32 + 7
        assert expected[5] == int(np.flatnonzero(mask_to_bool(bitmask[5].numpy(), vocab))[0])
        allowed = allowed_of(bitmask, vocab)
        for b, token in enumerate(expected.tolist()[1:], start=1):
            assert 0 <= token < vocab and allowed[b, token]


def test_triton_sampler_on_a_batch_mask(world):
    """The kernel on the mask a real batch fills, every mode, against the reference."""
    from gxg.ops.sample_triton import sample_masked_triton
    info, compiled = world
    batch = make_batch(info, compiled)
    bitmask = batch.fill_next_token_bitmask(batch._bitmask.clone())
    logits = random_logits(batch.max_batch, info.vocab_size, torch.bfloat16, seed=8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for params in [dict(temperature=0.0)] + list(MODES.values()):
        args = row_tensors(batch.max_batch, params["temperature"], params.get("top_k", 0),
                           params.get("top_p", 1.0), seed=3, offset=1)
        expected = reference.sample_masked(logits, bitmask, *args, info.vocab_size)
        got = sample_masked_triton(logits.to(device), bitmask.to(device),
                                   *(t.to(device) for t in args), info.vocab_size, block=128)
        assert got.cpu().tolist() == expected.tolist(), params


def test_triton_sampler_rejects_bad_arguments():
    from gxg.ops.sample_triton import sample_masked_triton
    logits = torch.zeros(2, 40)
    bitmask = torch.zeros(2, 2, dtype=torch.int32)
    args = row_tensors(2)
    with pytest.raises(ValueError):
        sample_masked_triton(logits, bitmask, *args, 41)                 # wider than logits
    with pytest.raises(ValueError):
        sample_masked_triton(logits, bitmask[:, :1], *args, 40)          # too few words
    with pytest.raises(TypeError):
        sample_masked_triton(logits.to(torch.int32), bitmask, *args, 40)
    with pytest.raises(ValueError):
        sample_masked_triton(logits, bitmask, args[0], args[1].long(), *args[2:], 40)
    with pytest.raises(ValueError):
        sample_masked_triton(logits, bitmask, *args, 40, pivots=3)


# ----------------------------------------------------------------------------- the op


def test_op_offset_seed_and_reproducibility(world):
    info, compiled = world
    batch = make_batch(info, compiled)
    logits = random_logits(batch.max_batch, info.vocab_size, torch.float32, seed=4, scale=0.5)
    params = dict(temperature=1.0)
    first = [batch.fill_and_sample(logits, **params) for _ in range(6)]
    assert int(batch.sample_offset) == 6
    assert any(not torch.equal(first[0], t) for t in first[1:])
    batch.sample_offset.zero_()
    assert all(torch.equal(a, batch.fill_and_sample(logits, **params)) for a in first)
    batch.sample_offset.zero_()
    other = [batch.fill_and_sample(logits, seed=99, **params) for _ in range(6)]
    assert any(not torch.equal(a, b) for a, b in zip(first, other))
    # an int seed, a seed tensor and the batch's own seed tensor holding it draw alike
    batch.sample_offset.zero_()
    batch.sample_seed.fill_(99)
    assert all(torch.equal(a, batch.fill_and_sample(logits, **params)) for a in other)
    batch.sample_offset.zero_()
    seed = torch.tensor([99], dtype=torch.int64)
    assert torch.equal(other[0], batch.fill_and_sample(logits, seed=seed, **params))


def test_op_per_row_tensors_scalars_and_bitmask(world):
    info, compiled = world
    batch = make_batch(info, compiled)
    b = batch.max_batch
    logits = random_logits(b, info.vocab_size + 3, torch.float16, seed=6)
    temperature = torch.tensor([0.0, 0.5, 1.0, 0.0, 2.0, 1.0, 0.0, 0.0])
    top_k = torch.tensor([0, 2, 0, 0, 5, 3, 0, 0])                      # int64: cast
    top_p = torch.full((b,), 0.8)
    tokens = batch.fill_and_sample(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    args = (temperature, top_k.to(torch.int32), top_p, batch.sample_seed,
            torch.zeros(1, dtype=torch.int64))
    assert torch.equal(tokens, reference.sample_masked(logits, batch._bitmask, *args,
                                                       info.vocab_size))
    # scalars: one cached constant per value; a caller's bitmask receives the fill
    mine = torch.zeros_like(batch._bitmask)
    batch.fill_and_sample(logits, temperature=0.5, top_k=4, bitmask=mine)
    cached = dict(batch._sample_constants)
    batch.fill_and_sample(logits, temperature=0.5, top_k=4, bitmask=mine)
    assert batch._sample_constants == cached and len(cached) == 3
    assert torch.equal(mine, batch._bitmask)
    with pytest.raises(ValueError):
        batch.fill_and_sample(logits, temperature=torch.zeros(b + 1))
    with pytest.raises(ValueError):
        batch.fill_and_sample(logits[:, :-4])                            # narrower than V


def test_op_row_with_nothing_allowed_gives_minus_one(world):
    """Cannot happen for a slot (terminated and failed slots allow their stop tokens); the
    sampler's answer for it is -1, which accept rejects."""
    info, compiled = world
    batch = make_batch(info, compiled)
    assert reference.sample_masked(torch.zeros(1, 40), torch.zeros(1, 2, dtype=torch.int32),
                                   *row_tensors(1, 1.0), 40).tolist() == [-1]
    tokens = torch.full((batch.max_batch,), -1, dtype=torch.int64)
    assert batch.accept(tokens).tolist() == [False] * 5 + [True, False, False]  # unbound: True


def test_op_fake_kernel_and_compile(world):
    from torch._subclasses.fake_tensor import FakeTensorMode
    info, compiled = world
    batch = make_batch(info, compiled)
    logits = random_logits(batch.max_batch, info.vocab_size, torch.float32, seed=2)
    args = row_tensors(batch.max_batch, 0.7, 3, 0.9)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (logits, batch._bitmask) + args]
        out = xg.fill_and_sample(mode.from_tensor(batch.runtime),
                                 mode.from_tensor(batch._arena_tensors), *fake, info.vocab_size)
        assert out.shape == (batch.max_batch,) and out.dtype == torch.int64

    # torch.compile (aot_eager: the fake kernel, the mutations) on a warmed-up batch matches
    # eager over steps that accept the drawn tokens
    eager_batch = make_batch(info, compiled)
    step_of(batch, logits, accept=False)              # warm-up: creates the cached constants
    batch.sample_offset.zero_()
    compiled_step = torch.compile(lambda lg: step_of(batch, lg), backend="aot_eager",
                                  fullgraph=True)
    expected = [step_of(eager_batch, logits) for _ in range(3)]
    got = [compiled_step(logits) for _ in range(3)]
    for (t0, a0), (t1, a1) in zip(expected, got):
        assert torch.equal(t0, t1) and torch.equal(a0, a1)
    assert int(batch.sample_offset) == 3


def step_of(batch, logits, accept=True):
    tokens = batch.fill_and_sample(logits, temperature=0.7, top_k=3, top_p=0.9)
    return (tokens, batch.accept(tokens)) if accept else tokens


# ----------------------------------------------------------------------------- CUDA


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_op_matches_cpu_op(world, dtype):
    """Same batch state on both devices; greedy must match exactly, sampled rows may differ
    only through last-ulp differences of the GPU's log/exp (near-ties): at most 2%."""
    info, compiled = world
    cpu, gpu = make_batch(info, compiled, "cpu"), make_batch(info, compiled, "cuda")
    mismatches = total = 0
    for step in range(10):
        logits = random_logits(cpu.max_batch, info.vocab_size + 5, dtype, seed=100 + step)
        for params in [dict(temperature=0.0)] + list(MODES.values()):
            t_cpu = cpu.fill_and_sample(logits, **params)
            t_gpu = gpu.fill_and_sample(logits.cuda(), **params)
            assert torch.equal(cpu._bitmask, gpu._bitmask.cpu())
            if params["temperature"] == 0.0:
                assert torch.equal(t_cpu, t_gpu.cpu())
            mismatches += int((t_cpu != t_gpu.cpu()).sum())
            total += cpu.max_batch
    assert int(gpu.sample_offset) == int(cpu.sample_offset)
    assert mismatches <= 0.02 * total


@cuda
@pytest.mark.gpu
def test_cuda_sampler_large_vocab_matches_reference():
    from gxg.ops.sample_triton import sample_masked_triton
    vocab, rows = 151_000, 32
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(rows, vocab + 64, generator=g) * 4).to(torch.bfloat16)
    bitmask = random_bitmask(rows, (vocab + 31) // 32, g)
    mismatches = 0
    for T, k, p in [(0.0, 0, 1.0), (0.8, 0, 1.0), (1.0, 50, 1.0), (1.0, 0, 0.9),
                    (0.7, 40, 0.95)]:
        args = row_tensors(rows, T, k, p, seed=1, offset=2)
        expected = reference.sample_masked(logits, bitmask, *args, vocab)
        got = sample_masked_triton(logits.cuda(), bitmask.cuda(),
                                   *(t.cuda() for t in args), vocab).cpu()
        if T == 0.0:
            assert torch.equal(got, expected)
        mismatches += int((got != expected).sum())
    assert mismatches <= 2


@cuda
@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager(world):
    info, compiled = world
    eager, graphed = make_batch(info, compiled, "cuda"), make_batch(info, compiled, "cuda")
    logits = random_logits(eager.max_batch, info.vocab_size, torch.bfloat16, seed=1).cuda()
    params = dict(temperature=0.8, top_k=5, top_p=0.9)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graphed.fill_and_sample(logits, **params)    # warm-up: kernels, cached constants
    torch.cuda.current_stream().wait_stream(stream)
    graphed.sample_offset.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens = graphed.fill_and_sample(logits, **params)
    replayed, expected = [], []
    for _ in range(6):
        graph.replay()
        replayed.append(tokens.clone())
        expected.append(eager.fill_and_sample(logits, **params))
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(replayed, expected))
    assert int(graphed.sample_offset) == int(eager.sample_offset) == 6
    assert len({tuple(t.tolist()) for t in replayed}) > 1
