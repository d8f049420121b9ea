"""Masked sampling from logits: the Triton kernel of ``xg::fill_and_sample`` (its second stage,
after the fill has written the bitmask).

In:  logits float32/float16/bfloat16 [B, L], L >= vocab_size, last dimension contiguous (read,
     never written); bitmask int32 [B, >= ceil(V/32)] (bit t%32 of word t//32 allows token t;
     ids >= vocab_size are never allowed, whatever their bits); per-row temperature float32 [B],
     top_k int32 [B] (<= 0: off), top_p float32 [B] (>= 1: off); seed int64 [1] and offset
     int64 [1] on the device (read only here: the op advances the offset).
Out: tokens int64 [B]: per row, the token that ``ops.reference.sample_masked`` (the documented
     reference: kept sets, ties, noise) picks from the same numbers; -1 where nothing is allowed.

Randomness: counter-based, so a step is a pure function of (logits, bitmask, parameters, seed,
offset) — reproducible, and CUDA-graph safe (no generator state on the host; the captured
kernel reads seed and offset from the device). Token t of row b draws the 32-bit word t % 4 of
Philox4x32-10(counter = (t // 4, b, offset_lo, offset_hi), key = (seed_lo, seed_hi)) (Triton's
``tl.philox_impl``, the Random123 generator); u = ((word >> 9) + 0.5)·2^-23 in (0, 1) is exact in
float32 and the Gumbel noise is g = -log(-log u). The CPU reference computes the same words.

Kernel ``_sample_kernel``
  grid      (B,): program b owns row b and loops over it in blocks of BLOCK tokens (search passes:
            SEARCH_BLOCK). No atomics, no inter-program communication, no scratch memory.
  passes    (a pass reads the row's bitmask words and its allowed logits once)
              greedy (temperature <= 0, or NaN)    1   argmax of the allowed logits
              temperature only                     1   Gumbel-max: argmax of x/T + g
              top-k and/or top-p                   2 + s_k + s_p: a stats pass (count, max,
                                                   key range), the threshold searches, then the
                                                   Gumbel-max pass over tokens >= threshold.
            A search finds the exact threshold key: each pass counts (top-k) or sums the
            weights exp((x - m)/T) (top-p) of the candidates at or above PIVOTS evenly spaced
            pivots of the current key interval, keeps the sub-interval holding the threshold and
            snaps it to the candidates' min/max key; it stops when one key is left. The
            interval shrinks at least PIVOTS-fold a pass, so s <= ceil(b / log2 PIVOTS) for
            b-bit keys: fp32 32 bits -> s <= 8, fp16 19 -> 5, bf16 16 -> 4 (PIVOTS = 16);
            s = 0 when the row's allowed logits have one value; a row with top_k >= (allowed
            count) skips the top-k search. The snapping saves little on real rows: 151k
            normal logits, top_k 50 / top_p 0.9 take s = 6 / 7 (fp32), 5 / 5 (fp16), 4 / 4
            (bf16) with PIVOTS = 16, and 4 / 5, 3 / 3, 3 / 3 with PIVOTS = 64 (4x the compares
            per pass). So top-k + top-p on bf16 is ~10 passes where greedy is 1: a row is
            re-read by the same program, which may hit L2, not yet measured.
  traffic   per pass and row: read 4·ceil(V/32) bytes of bitmask (each word by up to 32 lanes:
            L1 hits) + e·(allowed ids) bytes of logits, e = element size (loads are masked by
            the bitmask: a 32-byte sector with no allowed id is not fetched), at most e·V;
            write 8 bytes per row (the token). The logits are never written.
  compute   Gumbel pass: Philox4x32-10 once per 4 tokens (10 rounds of 2 mul.hi + 2 mul.lo +
            4 xor) and 2 logs per token; search pass: PIVOTS compares and selects per token
            (+ one exp per token for top-p). Blocks with no candidate skip their compute.
  invariants the result is a candidate (allowed, id < V, key >= threshold) or -1 when the row
            allows nothing; ties are broken towards the lowest id (greedy, and equal Gumbel
            scores); -0.0 and +0.0 are one value; the result does not depend on BLOCK,
            SEARCH_BLOCK or PIVOTS (tuning knobs) except through the float32 rounding of the
            top-p masses (summed in block order); counts are exact (V < 2^24).

Order keys: a float's bits mapped to a signed int32 that orders like the float (negative
floats have their 31 low bits flipped), shifted right by KEY_SHIFT bits that are zero in every
value of the logits' dtype (16 for bfloat16, 13 for float16), so half-precision searches cover
fewer key bits. Logits must be finite or -inf; +inf and NaN give unspecified (but allowed, or
-1) tokens.

Set ``TRITON_INTERPRET=1`` before this module is imported to run the kernel on CPU tensors.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from gxg.ops.reference import PHILOX_ROUNDS, TOP_P_FLOOR, check_sample_arguments

SAMPLE_BLOCK = 1024     # tokens per iteration of the argmax/Gumbel and stats passes
SEARCH_BLOCK = 256      # tokens per iteration of a search pass ([SEARCH_BLOCK, PIVOTS] compares)
PIVOTS = 16             # pivots per search pass (power of two >= 2); result independent of it
NUM_WARPS = 4
KEY_SHIFT = {torch.float32: 0, torch.bfloat16: 16, torch.float16: 13}

_INT32_MAX = tl.constexpr(2147483647)
_INT32_MIN = tl.constexpr(-2147483648)


# ----------------------------------------------------------------------------- device code


@triton.jit
def _order_key(x, KEY_SHIFT: tl.constexpr):
    """int32 keys ordered like the float32 values ``x`` (-0.0 and +0.0 share key 0)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = tl.where(x == 0.0, 0, bits)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return key >> KEY_SHIFT


@triton.jit
def _load_block(logits_row, mask_row, start, V, BLOCK: tl.constexpr):
    """Token ids [start, start + BLOCK), which are allowed, and their logits as float32 (-inf
    where not allowed: those sectors are not read)."""
    tokens = start + tl.arange(0, BLOCK)
    inside = tokens < V
    words = tl.load(mask_row + (tokens >> 5), mask=inside, other=0)
    allowed = (((words >> (tokens & 31)) & 1) != 0) & inside
    x = tl.load(logits_row + tokens, mask=allowed, other=float("-inf")).to(tl.float32)
    return tokens, allowed, x


@triton.jit
def _uniforms(start, row, k0, k1, o0, o1, BLOCK: tl.constexpr, ROUNDS: tl.constexpr):
    """u in (0, 1) for tokens [start, start + BLOCK): word t % 4 of Philox(t // 4, row, offset)."""
    groups = (start // 4 + tl.arange(0, BLOCK // 4)).to(tl.uint32)
    zero = groups * 0
    r0, r1, r2, r3 = tl.philox_impl(groups, zero + row.to(tl.uint32), zero + o0, zero + o1,
                                    k0, k1, ROUNDS)
    # [G, 2, 2] with element [g, i, j] = r_{2i+j}: flattened, token 4g + lane gets r_lane.
    words = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (BLOCK,))
    return ((words >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


@triton.jit
def _row_stats(logits_row, mask_row, V, KEY_SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """Allowed count, max allowed logit, min and max allowed key (one pass)."""
    n = tl.full((), 0, tl.int32)
    m = tl.full((), float("-inf"), tl.float32)
    kmin = tl.full((), _INT32_MAX, tl.int32)
    kmax = tl.full((), _INT32_MIN, tl.int32)
    for start in range(0, V, BLOCK):
        tokens, allowed, x = _load_block(logits_row, mask_row, start, V, BLOCK)
        key = _order_key(x, KEY_SHIFT)
        n += tl.sum(allowed.to(tl.int32), axis=0)
        m = tl.maximum(m, tl.max(x, axis=0))
        kmin = tl.minimum(kmin, tl.min(tl.where(allowed, key, _INT32_MAX), axis=0))
        kmax = tl.maximum(kmax, tl.max(tl.where(allowed, key, _INT32_MIN), axis=0))
    return n, m, kmin, kmax


@triton.jit
def _search(logits_row, mask_row, V, lo, hi, m, T, target, MASS: tl.constexpr,
            KEY_SHIFT: tl.constexpr, BLOCK: tl.constexpr, PIVOTS: tl.constexpr):
    """The largest candidate key κ in [lo, hi] with F(κ) >= target, where F(q) sums the weight
    of the allowed tokens with key >= q (keys > hi counted in ``above``) and the weight is 1
    (MASS False: top-k, target = k) or exp((x - m)/T) (MASS True: top-p; ``target`` is then the
    fraction p, multiplied by F(lo) = the kept mass after the first pass).

    Invariant: the answer lies in [lo, hi] and F(lo) >= target. A pass computes F at the
    pivots q_j = lo + ceil(span·j/PIVOTS) (q_0 = lo) and keeps [q_J, q_{J+1} - 1] for the
    largest J with F(q_J) >= target — F(q_J) >= target > F(q_{J+1}) puts weight, hence a
    candidate, in it — intersected with the candidates' key range. If rounding leaves no J
    (top-p: F(lo) recomputed a hair below p·S) every candidate in [lo, hi] is kept."""
    js = tl.arange(0, PIVOTS).to(tl.int64)
    above = tl.full((), 0.0, tl.float32)
    first = tl.full((), 1, tl.int32)
    while lo < hi:
        span = hi - lo
        pivots = lo + (span * js + (PIVOTS - 1)) // PIVOTS
        acc = tl.zeros((PIVOTS,), tl.float32)
        kmin = hi
        kmax = lo
        for start in range(0, V, BLOCK):
            tokens, allowed, x = _load_block(logits_row, mask_row, start, V, BLOCK)
            key = _order_key(x, KEY_SHIFT).to(tl.int64)
            cand = allowed & (key >= lo) & (key <= hi)
            if tl.max(cand.to(tl.int32), axis=0) > 0:
                if MASS:
                    w = tl.exp((x - m) / T)
                else:
                    w = tl.full((BLOCK,), 1.0, tl.float32)
                w = tl.where(cand, w, 0.0)
                ge = key[:, None] >= pivots[None, :]
                acc += tl.sum(tl.where(ge, w[:, None], 0.0), axis=0)
                kmin = tl.minimum(kmin, tl.min(tl.where(cand, key, hi), axis=0))
                kmax = tl.maximum(kmax, tl.max(tl.where(cand, key, lo), axis=0))
        f = above + acc
        if MASS:
            total = tl.sum(tl.where(js == 0, f, 0.0), axis=0)
            target = tl.where(first != 0, target * total, target)
        first = 0
        ok = f >= target
        if tl.max(ok.to(tl.int32), axis=0) > 0:
            j = tl.max(tl.where(ok, js, 0), axis=0)
            last = j == PIVOTS - 1
            q_j = tl.sum(tl.where(js == j, pivots, 0), axis=0)
            q_next = tl.where(last, hi + 1, tl.sum(tl.where(js == j + 1, pivots, 0), axis=0))
            above = tl.where(last, above, tl.sum(tl.where(js == j + 1, f, 0.0), axis=0))
            lo = tl.maximum(q_j, kmin)
            hi = tl.minimum(q_next - 1, kmax)
        else:
            lo = kmin
            hi = kmin
    return lo


@triton.jit
def _argmax_pass(logits_row, mask_row, V, row, T, thr, k0, k1, o0, o1, NOISE: tl.constexpr,
                 KEY_SHIFT: tl.constexpr, BLOCK: tl.constexpr, ROUNDS: tl.constexpr):
    """Lowest id of the max over candidates of x (NOISE False: allowed tokens) or of
    x/T + g (NOISE True: allowed tokens with key >= thr); -1 if there is no candidate."""
    best = tl.full((), float("-inf"), tl.float32)
    best_id = tl.full((), -1, tl.int32)
    for start in range(0, V, BLOCK):
        tokens, allowed, x = _load_block(logits_row, mask_row, start, V, BLOCK)
        if NOISE:
            cand = allowed & (_order_key(x, KEY_SHIFT) >= thr)
        else:
            cand = allowed
        if tl.max(cand.to(tl.int32), axis=0) > 0:
            if NOISE:
                u = _uniforms(start, row, k0, k1, o0, o1, BLOCK, ROUNDS)
                score = tl.math.div_rn(x, T) - tl.log(-tl.log(u))
            else:
                score = x
            score = tl.where(cand, score, float("-inf"))
            top = tl.max(score, axis=0)
            top_id = tl.min(tl.where(cand & (score == top), tokens, _INT32_MAX), axis=0)
            # Blocks come in id order: an equal score in a later block never wins. A block of
            # NaN scores has no maximum (top_id stays INT32_MAX) and is skipped.
            take = (top_id < _INT32_MAX) & ((top > best) | (best_id < 0))
            best = tl.where(take, top, best)
            best_id = tl.where(take, top_id, best_id)
    return best_id


@triton.jit
def _sample_kernel(logits_ptr, logits_stride, bitmask_ptr, bitmask_stride, temperature_ptr,
                   top_k_ptr, top_p_ptr, seed_ptr, offset_ptr, out_ptr, V,
                   KEY_SHIFT: tl.constexpr, BLOCK: tl.constexpr, SEARCH_BLOCK: tl.constexpr,
                   PIVOTS: tl.constexpr, ROUNDS: tl.constexpr, TOP_P_FLOOR: tl.constexpr):
    row = tl.program_id(0)
    logits_row = logits_ptr + row.to(tl.int64) * logits_stride
    mask_row = bitmask_ptr + row.to(tl.int64) * bitmask_stride
    T = tl.load(temperature_ptr + row)
    if T > 0.0:
        k = tl.load(top_k_ptr + row)
        p = tl.load(top_p_ptr + row)
        thr = tl.full((), _INT32_MIN, tl.int64)          # at or below every key: no cut
        if (k > 0) | (p < 1.0):
            n, m, kmin, kmax = _row_stats(logits_row, mask_row, V, KEY_SHIFT, BLOCK)
            lo = kmin.to(tl.int64)
            hi = kmax.to(tl.int64)
            if (k > 0) & (k < n):
                lo = _search(logits_row, mask_row, V, lo, hi, m, T, k.to(tl.float32), False,
                             KEY_SHIFT, SEARCH_BLOCK, PIVOTS)
            if p < 1.0:
                lo = _search(logits_row, mask_row, V, lo, hi, m, T,
                             tl.maximum(p, TOP_P_FLOOR), True, KEY_SHIFT, SEARCH_BLOCK, PIVOTS)
            thr = lo
        seed = tl.load(seed_ptr)
        offset = tl.load(offset_ptr)
        token = _argmax_pass(logits_row, mask_row, V, row, T, thr,
                             (seed & 0xFFFFFFFF).to(tl.uint32),
                             ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32),
                             (offset & 0xFFFFFFFF).to(tl.uint32),
                             ((offset >> 32) & 0xFFFFFFFF).to(tl.uint32),
                             True, KEY_SHIFT, BLOCK, ROUNDS)
    else:
        zero = tl.full((), 0, tl.uint32)
        token = _argmax_pass(logits_row, mask_row, V, row, T, 0, zero, zero, zero, zero,
                             False, KEY_SHIFT, BLOCK, ROUNDS)
    tl.store(out_ptr + row, token.to(tl.int64))


# ----------------------------------------------------------------------------- launcher


def _check_power_of_two(name: str, value: int, least: int) -> None:
    if value < least or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {least}, got {value}")


def sample_masked_triton(logits: torch.Tensor, bitmask: torch.Tensor, temperature: torch.Tensor,
                         top_k: torch.Tensor, top_p: torch.Tensor, seed: torch.Tensor,
                         offset: torch.Tensor, vocab_size: int,
                         out: Optional[torch.Tensor] = None, *, block: int = SAMPLE_BLOCK,
                         search_block: int = SEARCH_BLOCK, pivots: int = PIVOTS,
                         num_warps: int = NUM_WARPS) -> torch.Tensor:
    """One token per row (see module doc); writes ``out`` (int64 [B]) when given, else a new
    tensor, and returns it. Checks are metadata only: no device reads."""
    check_sample_arguments(logits, bitmask, temperature, top_k, top_p, seed, offset, vocab_size)
    _check_power_of_two("block", block, 4)
    _check_power_of_two("search_block", search_block, 1)
    _check_power_of_two("pivots", pivots, 2)
    rows = logits.shape[0]
    if out is None:
        out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    elif out.shape != (rows,) or out.dtype != torch.int64 or out.device != logits.device:
        raise ValueError(f"out must be int64 [{rows}] on {logits.device}")
    if rows == 0:
        return out
    _sample_kernel[(rows,)](logits, logits.stride(0), bitmask, bitmask.stride(0), temperature,
                            top_k, top_p, seed, offset, out, vocab_size,
                            KEY_SHIFT=KEY_SHIFT[logits.dtype], BLOCK=block,
                            SEARCH_BLOCK=search_block, PIVOTS=pivots, ROUNDS=PHILOX_ROUNDS,
                            TOP_P_FLOOR=TOP_P_FLOOR, num_warps=num_warps)
    return out
