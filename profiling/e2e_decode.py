"""End-to-end decode loop: time per output token with the grammar off, with gxg inside the step's
CUDA graph, and with XGrammar's CPU path — on a Llama-3-8B-shaped model with the Qwen vocabulary.

What it measures. One decode step of a batch of B rows (one new token per row) is
  forward -> grammar mask -> sampling -> grammar accept -> the token becomes the next input.
Per batch size (1, 16, 64, 256) and grammar (the builtin JSON grammar and one MaskBench schema),
in the same run:

  off       forward + torch sampling, one CUDA graph replayed per step (the baseline);
  off_sync  the same, plus the copy of the tokens to the host and a synchronisation every step
            (what any engine with a host-side grammar pays anyway: the baseline of `xgrammar`);
  gxg       forward + ``GrammarBatch.fill_and_apply`` + torch sampling + ``accept`` + reset of
            the rows that finished (``batch.reset(bool mask)``), all in ONE CUDA graph;
  gxg_fused forward + ``GrammarBatch.fill_and_sample`` (mask and sample in one op that never
            writes the logits) + ``accept`` + reset, one CUDA graph; only when that method
            exists (``hasattr``), skipped otherwise;
  xgrammar  the serving-engine CPU path: the forward graph is launched, and while the GPU runs
            it the host fills XGrammar's bitmask for every row (``BatchGrammarMatcher``'s thread
            pool, into a pinned int32 buffer); then host-to-device copy, XGrammar's
            ``apply_token_bitmask_inplace``, a small graph (sampling + next input), tokens to
            the host (a synchronisation), ``batch_accept_token`` and a reset of the finished
            matchers on the host.

Reported per configuration: ms per step (wall clock over ``--steps`` steps after ``--warmup``;
CUDA events too), ms per output token (= ms per step / B) and the grammar's overhead in % of
``off`` (and, for xgrammar, of ``off_sync``). Also per run: requests that finished (stop
token accepted, or a gxg runtime-limit error), gxg runtime-limit errors, and tokens rejected by
accept. Tokens are sampled from masked logits, so a rejection happens only in a row with an
error (its mask allows only the stop token, which accept refuses): rejected == errors for gxg,
0 for XGrammar; anything else is a mask bug.

How. The model is written here in plain torch (no download): Llama-3-8B's shape — hidden 4096,
32 layers, 32 query heads, 8 KV heads, head dim 128, SwiGLU 14,336, RMSNorm, RoPE (theta 5e5)
— with the model vocabulary 151,936 (Qwen's padded head; the grammar's TokenizerInfo has the
tokenizer's 151,851 ids and ``vocab_size`` 151,936, so ids past the tokenizer are never
allowed); random bf16 weights (normal, std ``--init-std``) created on the device; logits in
fp32 (as serving engines sample them). A static KV cache [layers, B, kv_heads, max_len,
head_dim] filled with random values stands for a ``--prompt-len`` prompt (prefill is not
measured); the decode step writes K and V at a position held in a device tensor and attends
over the whole cache with a length mask (static shapes: the step is capturable). Rows run
``max_len - prompt_len`` steps per "request"; at that bound (a host-side counter) the position
and every grammar row are reset between replays. Inside a request, a row whose grammar
finished (or hit a runtime limit) is reset by the step itself: ``GrammarBatch.reset`` with a
device bool mask is one CUDA kernel reading the mask on the device (no host synchronisation),
so it is captured with the rest of the step. The gxg steps also count finished, errored and
rejected rows on the device (4 tiny kernels, a few us of the measured overhead).

Random weights produce random tokens; the grammar forces the structure (most masks are
permissive inside strings, narrow elsewhere). Sampling: ``--sampler sample`` (default) is
Gumbel-max at ``--temperature`` (argmax(logits/T - log E), E ~ Exp(1): the distribution of
softmax sampling, capturable); ``greedy`` is argmax.

Two numbers to expect (write them down before reading the table):
  * the forward pass is memory-bound: every step reads the weights once, 15.2 GB (8.2 B
    parameters in bf16, less the embedding table of which only B rows are read), plus the KV
    cache: the masked attention reads all max_len positions, B x 32 layers x 8 heads x 512 x
    128 x 2 (K, V) x 2 bytes = B x 67 MB (17.2 GB at B = 256). At ~3 TB/s of HBM (H100 SXM
    3.35 TB/s peak) that is ~5 ms per step at B = 1 and ~11 ms at B = 256;
  * the grammar's work per step is small in bytes: gxg reads the cached accept rows and writes
    B x 19 KB of bitmask, writes -inf into up to B x 608 KB of fp32 logits (155 MB at B = 256,
    ~50 us at HBM speed), and walks the automaton in accept (~15-20 us of dependent loads at any
    B, profiling/RESULTS.md); bench_step.py measured 26-111 us per step for B = 1..256 on an
    H200, i.e. ~0.5-1 % of the steps above. XGrammar's fill is CPU work (~0.1 ms at B = 1 to
    ~2 ms at B = 256 with 8 threads), overlapped with the forward pass, but its copy, apply,
    host synchronisation and host-side accept sit on the critical path every step.

nvtx: ranges around forward, fill/apply, sample, accept, reset, and XGrammar's fill, copy,
apply, tokens-to-host and accept (torch.cuda.nvtx). Ranges inside a captured graph are not
replayed, so graph runs show one range per replayed step; ``--eager`` runs every step without
graphs (slower: launch-bound) so that an Nsight Systems trace shows the parts:
  nsys profile -t cuda,nvtx -o e2e python profiling/e2e_decode.py --eager --batches 64 --steps 20

Usage (GPU machine; the MaskBench schema must be in device_data/, see --schema):
  python profiling/e2e_decode.py [--batches 1 16 64 256] [--steps 200] [--max-len 512]
Speculative decoding (draft masks, verification; profiling/e2e_speculative.py has its flags):
  python profiling/e2e_decode.py --speculative [--drafts 2 4 8] [--batches 1 16 64 256]
CPU smoke test (toy model, a few steps, no graphs):
  python profiling/e2e_decode.py --device cpu --layers 1 --hidden 64 --heads 4 --kv-heads 2 \\
      --intermediate 128 --max-len 32 --prompt-len 8 --batches 1 2 --steps 3 --warmup 1
Prints a table and writes JSON (profiling/results/e2e_decode.json or --out).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import inspect
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (MASKBENCH, REPO, import_xgrammar, percentile, print_table,  # noqa: E402
                    write_json)

from gxg import vocabularies  # noqa: E402
from gxg.arena import ArenaCapacity  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.grammar_compiler import GrammarCompiler  # noqa: E402

SCHEMA_NAME = "Github_medium---o28612.json"   # nested objects, numbers, strings, arrays
DEFAULT_SCHEMA = REPO / "device_data" / "maskbench" / SCHEMA_NAME
QWEN_MODEL_VOCAB = 151936                     # Qwen models' head: 151,851 ids padded to 64·k
CONFIGS = ("off", "off_sync", "gxg", "gxg_fused", "xgrammar")


# ----------------------------------------------------------------------------- nvtx, sync

_NVTX = False  # set in main: torch.cuda.nvtx needs a CUDA build and device


@contextlib.contextmanager
def nvtx(name: str):
    if not _NVTX:
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelConfig:
    """Llama-3-8B's shape by default (vocabulary: Qwen's padded head)."""
    hidden: int = 4096
    layers: int = 32
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 14336
    vocab: int = QWEN_MODEL_VOCAB
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    def layer_parameters(self) -> int:
        attention = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim \
            + self.heads * self.head_dim * self.hidden
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + 2 * self.vocab * self.hidden + self.hidden

    def bytes_per_step(self, batch: int, max_len: int) -> Dict[str, int]:
        """bf16 bytes one decode step must read: the weights (all but the embedding table, of
        which B rows) and the whole static KV cache (the masked attention reads every slot)."""
        weights = (self.parameters() - self.vocab * self.hidden + batch * self.hidden) * 2
        kv = batch * self.layers * self.kv_heads * max_len * self.head_dim * 2 * 2
        return {"weights": weights, "kv_cache": kv, "total": weights + kv}


@dataclass
class Layer:
    attn_norm: torch.Tensor   # [hidden]
    wqkv: torch.Tensor        # [(heads + 2 kv_heads) head_dim, hidden]: q, k, v stacked
    wo: torch.Tensor          # [hidden, heads head_dim]
    mlp_norm: torch.Tensor    # [hidden]
    w_gate_up: torch.Tensor   # [2 intermediate, hidden]: gate, up stacked
    w_down: torch.Tensor      # [hidden, intermediate]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, Llama's rotate-half form; x [B, heads, head_dim], cos/sin [1, hd/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Llama:
    """A decode-only Llama with random weights and a static KV cache, in plain torch.

    ``forward(input_ids [B] int64, pos [1] int64) -> logits [B, vocab] fp32`` decodes one token
    per row at position ``pos`` (a device tensor: the same graph serves every position); B may
    be any size up to ``max_batch`` (the cache's first B rows are used).
    """

    def __init__(self, cfg: ModelConfig, max_batch: int, max_len: int, device: torch.device,
                 init_std: float = 0.02, dtype=torch.bfloat16):
        self.cfg, self.max_len = cfg, max_len
        kind = dict(device=device, dtype=dtype)

        def weight(*shape):
            return torch.empty(shape, **kind).normal_(0.0, init_std)

        qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
        self.embed = weight(cfg.vocab, cfg.hidden)
        self.layers = [Layer(torch.ones(cfg.hidden, **kind), weight(qkv, cfg.hidden),
                             weight(cfg.hidden, cfg.heads * cfg.head_dim),
                             torch.ones(cfg.hidden, **kind),
                             weight(2 * cfg.intermediate, cfg.hidden),
                             weight(cfg.hidden, cfg.intermediate))
                       for _ in range(cfg.layers)]
        self.norm = torch.ones(cfg.hidden, **kind)
        self.lm_head = weight(cfg.vocab, cfg.hidden)
        cache = (cfg.layers, max_batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k_cache = torch.empty(cache, **kind).normal_()   # a "prompt" of random K and V
        self.v_cache = torch.empty(cache, **kind).normal_()
        half = torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float32)
        inv_freq = cfg.rope_theta ** (-half / cfg.head_dim)
        angles = torch.arange(max_len, device=device, dtype=torch.float32)[:, None] * inv_freq
        self.cos, self.sin = angles.cos(), angles.sin()         # [max_len, head_dim / 2]
        self.positions = torch.arange(max_len, device=device)

    def forward(self, input_ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        x = F.embedding(input_ids, self.embed)                   # [B, hidden]
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)
        visible = self.positions <= pos                          # [max_len]: cache to attend
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, cfg.norm_eps)
            x = x + self._attention(i, layer, h, cos, sin, visible, pos)
            h = rms_norm(x, layer.mlp_norm, cfg.norm_eps)
            gate, up = F.linear(h, layer.w_gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        return F.linear(rms_norm(x, self.norm, cfg.norm_eps), self.lm_head).float()

    def forward_rows(self, input_ids: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """``input_ids`` [B, T] int64, ``start`` [B] int64 -> logits [B, T, vocab] fp32: row b's
        T tokens at positions start[b] .. start[b] + T - 1 (clamped to the cache), each
        attending to the cache up to its own position (a verify pass of speculative decoding;
        per-row positions, static shapes: capturable)."""
        cfg = self.cfg
        b, t = input_ids.shape
        x = F.embedding(input_ids, self.embed)                   # [B, T, hidden]
        pos = (start.unsqueeze(1) + torch.arange(t, device=start.device)).clamp_(
            max=self.max_len - 1)                                # [B, T]
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [B, T, 1, hd/2]
        visible = self.positions <= pos.unsqueeze(2)             # [B, T, max_len]
        rows = torch.arange(b, device=start.device).unsqueeze(1).expand(b, t)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, cfg.norm_eps)
            x = x + self._attention_rows(i, layer, h, cos, sin, visible, rows, pos)
            h = rms_norm(x, layer.mlp_norm, cfg.norm_eps)
            gate, up = F.linear(h, layer.w_gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        return F.linear(rms_norm(x, self.norm, cfg.norm_eps), self.lm_head).float()

    def _attention_rows(self, i, layer, h, cos, sin, visible, rows, pos):
        cfg = self.cfg
        b, t = pos.shape
        nh, nkv, hd = cfg.heads, cfg.kv_heads, cfg.head_dim
        group = nh // nkv
        q, k, v = F.linear(h, layer.wqkv).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = rope(q.view(b, t, nh, hd), cos, sin)
        k = rope(k.view(b, t, nkv, hd), cos, sin)
        k_cache, v_cache = self.k_cache[i, :b], self.v_cache[i, :b]   # [B, nkv, max_len, hd]
        k_cache[rows, :, pos] = k                                 # [B, T, nkv, hd] at (b, pos)
        v_cache[rows, :, pos] = v.view(b, t, nkv, hd)
        q = q.view(b, t, nkv, group, hd).permute(0, 2, 1, 3, 4).reshape(b, nkv, t * group, hd)
        scores = torch.matmul(q, k_cache.transpose(-1, -2)).float() * hd ** -0.5
        scores = scores.view(b, nkv, t, group, -1).masked_fill(
            ~visible.view(b, 1, t, 1, -1), float("-inf"))
        out = torch.matmul(scores.view(b, nkv, t * group, -1).softmax(dim=-1).to(h.dtype),
                           v_cache)                               # [B, nkv, T group, hd]
        out = out.view(b, nkv, t, group, hd).permute(0, 2, 1, 3, 4).reshape(b, t, nh * hd)
        return F.linear(out, layer.wo)

    def _attention(self, i, layer, h, cos, sin, visible, pos):
        cfg, b = self.cfg, h.shape[0]
        nh, nkv, hd = cfg.heads, cfg.kv_heads, cfg.head_dim
        q, k, v = F.linear(h, layer.wqkv).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = rope(q.view(b, nh, hd), cos, sin)
        k = rope(k.view(b, nkv, hd), cos, sin)
        k_cache, v_cache = self.k_cache[i, :b], self.v_cache[i, :b]   # [B, nkv, max_len, hd]
        k_cache.index_copy_(2, pos, k.unsqueeze(2))
        v_cache.index_copy_(2, pos, v.view(b, nkv, 1, hd))
        # grouped-query attention without copying the cache: the nh/nkv query heads that share
        # a KV head are that head's "query rows" (Llama's repeat_kv order: head j -> j // group)
        q = q.view(b, nkv, nh // nkv, hd)
        scores = torch.matmul(q, k_cache.transpose(-1, -2)).float() * hd ** -0.5
        scores = scores.masked_fill(~visible, float("-inf"))     # [B, nkv, group, max_len]
        out = torch.matmul(scores.softmax(dim=-1).to(h.dtype), v_cache)
        return F.linear(out.reshape(b, nh * hd), layer.wo)


# ----------------------------------------------------------------------------- one step


def make_sampler(kind: str, temperature: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """logits [B, V] (-inf where masked) -> tokens [B] int64; no host synchronisation."""
    if kind == "greedy":
        return lambda logits: torch.argmax(logits, dim=-1)

    def gumbel_max(logits):
        log_e = torch.empty_like(logits).exponential_().log_()   # -log E is Gumbel(0, 1)
        return torch.argmax(logits / temperature - log_e, dim=-1)
    return gumbel_max


class DecodeState:
    """The step's device inputs (next token per row, shared position), grammar counters, and
    the host-side count of steps since the last "new requests"."""

    def __init__(self, batch: int, prompt_len: int, max_len: int, device: torch.device):
        self.prompt_len, self.max_len, self.device = prompt_len, max_len, device
        self.input_ids = torch.zeros(batch, dtype=torch.int64, device=device)
        self.pos = torch.full((1,), prompt_len, dtype=torch.int64, device=device)
        # per row: requests finished (stop token accepted or runtime-limit error), errors,
        # tokens rejected by accept
        self.counts = torch.zeros((3, batch), dtype=torch.int32, device=device)
        self.generated = 0

    def advance(self, tokens: torch.Tensor) -> None:
        with nvtx("next input"):
            self.input_ids.copy_(tokens)
            self.pos.add_(1)

    def count(self, finished: torch.Tensor, errored: torch.Tensor,
              accepted: torch.Tensor) -> None:
        self.counts[0].add_(finished)
        self.counts[1].add_(errored)
        self.counts[2].add_(~accepted)

    def new_requests(self) -> None:
        """Start every row over at the prompt's end (between replays: a host write)."""
        self.pos.fill_(self.prompt_len)
        self.generated = 0

    def at_length_bound(self) -> bool:
        return self.prompt_len + self.generated >= self.max_len


class Step:
    """A step function as a CUDA graph (warmed up on a side stream, then captured) or eager.
    ``result`` is what the function returned: for a graph, the static tensor each replay
    rewrites."""

    def __init__(self, fn: Callable[[], object], use_graph: bool, warmup: int = 2):
        self.fn, self.graph = fn, None
        self.result = None
        if not use_graph:
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):  # JIT compiles, cuBLAS workspaces, lazy allocations
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.result = fn()

    def __call__(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            self.result = self.fn()
        return self.result


def plain_step(model: Llama, st: DecodeState, sample) -> Callable[[], None]:
    def step():
        with nvtx("forward"):
            logits = model.forward(st.input_ids, st.pos)
        with nvtx("sample"):
            tokens = sample(logits)
        st.advance(tokens)
    return step


def gxg_step(model: Llama, st: DecodeState, batch: GrammarBatch, sample,
             fused: Optional[Callable] = None) -> Callable[[], None]:
    """forward -> mask (+ sample) -> accept -> reset the rows that finished -> next input."""
    def step():
        with nvtx("forward"):
            logits = model.forward(st.input_ids, st.pos)
        if fused is not None:
            with nvtx("gxg fill_and_sample"):
                tokens = fused(logits)
        else:
            with nvtx("gxg fill_and_apply"):
                batch.fill_and_apply(logits)
            with nvtx("sample"):
                tokens = sample(logits)
        with nvtx("gxg accept"):
            accepted = batch.accept(tokens)
        with nvtx("gxg reset finished"):
            errored = batch.error_codes() != 0
            finished = batch.is_terminated() | errored
            st.count(finished, errored, accepted)
            batch.reset(finished)  # one kernel reading the mask on the device: capturable
        st.advance(tokens)
    return step


def fused_sampler(batch: GrammarBatch, sampler: str, temperature: float, seed: int):
    """``batch.fill_and_sample`` with the arguments it takes, or None where it does not exist."""
    if not hasattr(batch, "fill_and_sample"):
        return None
    params = inspect.signature(batch.fill_and_sample).parameters
    kwargs = {}
    if "temperature" in params:
        kwargs["temperature"] = 0.0 if sampler == "greedy" else temperature
    if "seed" in params:
        kwargs["seed"] = seed
    return lambda logits: batch.fill_and_sample(logits, **kwargs)


# ----------------------------------------------------------------------------- timing


def measure(run_step: Callable[[], None], st: DecodeState, steps: int, warmup: int,
            new_requests: Callable[[], None], per_step: bool = False,
            zero_counts: Optional[Callable[[], None]] = None) -> Dict[str, object]:
    """Run ``warmup`` then ``steps`` steps; a new batch of requests whenever the KV cache is
    full. Wall clock (synchronised at both ends) and CUDA events over the timed steps; with
    ``per_step`` also the host time of each step (meaningful where a step synchronises)."""
    def guarded():
        if st.at_length_bound():
            st.new_requests()
            new_requests()
        st.generated += 1
        with nvtx("step"):
            run_step()

    st.new_requests()
    new_requests()
    for _ in range(warmup):
        guarded()
    st.counts.zero_()
    if zero_counts is not None:
        zero_counts()
    cuda = st.device.type == "cuda"
    synchronize(st.device)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    times = []
    t0 = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        guarded()
        if per_step:
            times.append(time.perf_counter() - t)
    if cuda:
        end.record()
    synchronize(st.device)
    wall = time.perf_counter() - t0
    out = {"ms_per_step": wall / steps * 1e3,
           "gpu_ms_per_step": start.elapsed_time(end) / steps if cuda else None}
    if per_step:
        out.update(p50_ms=percentile(times, 50) * 1e3, p90_ms=percentile(times, 90) * 1e3)
    return out


def run_graph_config(name: str, step_fn, st: DecodeState, args, new_requests, use_graph: bool,
                     sync_tokens: bool = False) -> Dict[str, object]:
    st.new_requests()  # the capture's warm-up steps must stay inside the KV cache
    step = Step(step_fn, use_graph)
    host = torch.empty(st.input_ids.shape, dtype=torch.int64,
                       pin_memory=st.device.type == "cuda")

    def step_and_sync():  # off_sync: tokens to the host every step, as a host grammar needs
        step()
        with nvtx("tokens to host"):
            host.copy_(st.input_ids, non_blocking=True)
            synchronize(st.device)
    with nvtx(f"{name} B={st.input_ids.shape[0]}"):
        result = measure(step_and_sync if sync_tokens else step, st, args.steps, args.warmup,
                         new_requests)
    result["finished"], result["errors"], result["rejected"] = st.counts.sum(dim=1).tolist()
    return result


# ----------------------------------------------------------------------------- XGrammar


def xgrammar_tokenizer_info(xgr, info):
    """XGrammar's TokenizerInfo for the same vocabulary (as bench_step.py builds it)."""
    return xgr.TokenizerInfo(info.decoded_vocab, xgr.VocabType.RAW,
                             vocab_size=info.vocab_size, stop_token_ids=info.stop_token_ids)


def run_xgrammar(xgr, xcompiled, model: Llama, st: DecodeState, sample, args,
                 use_graph: bool) -> Dict[str, object]:
    """The serving-engine CPU path (see the module docstring), measured per step."""
    b = st.input_ids.shape[0]
    cuda = st.device.type == "cuda"
    words = (model.cfg.vocab + 31) // 32
    mask_host = torch.empty((b, words), dtype=torch.int32, pin_memory=cuda)
    mask_dev = torch.empty((b, words), dtype=torch.int32, device=st.device) if cuda else mask_host
    tokens_host = torch.empty(b, dtype=torch.int64, pin_memory=cuda)
    matchers = [xgr.GrammarMatcher(xcompiled) for _ in range(b)]
    batcher = xgr.BatchGrammarMatcher(args.xgr_threads)
    st.new_requests()  # the capture's warm-up steps must stay inside the KV cache
    forward = Step(lambda: model.forward(st.input_ids, st.pos), use_graph)
    if forward.result is None:
        forward()  # eager: the tail's first call needs logits

    def tail():
        with nvtx("sample"):
            tokens = sample(forward.result)
        st.advance(tokens)
    tail_step = Step(tail, use_graph)
    stats = {"finished": 0, "errors": 0, "rejected": 0}

    def step():
        with nvtx("forward"):
            forward()                    # a graph launch: returns while the GPU works
        with nvtx("xgr fill"):
            batcher.batch_fill_next_token_bitmask(matchers, mask_host)
        with nvtx("xgr copy"):
            if cuda:
                mask_dev.copy_(mask_host, non_blocking=True)
        with nvtx("xgr apply"):
            xgr.apply_token_bitmask_inplace(forward.result, mask_dev)
        tail_step()
        with nvtx("tokens to host"):
            tokens_host.copy_(st.input_ids, non_blocking=True)
            synchronize(st.device)
        with nvtx("xgr accept"):
            accepted = xgr.BatchGrammarMatcher.batch_accept_token(matchers,
                                                                  tokens_host.tolist())
        with nvtx("xgr reset finished"):
            stats["rejected"] += accepted.count(False)
            for matcher in matchers:
                if matcher.is_terminated():
                    matcher.reset()
                    stats["finished"] += 1

    def new_requests():
        for matcher in matchers:
            matcher.reset()

    with nvtx(f"xgrammar B={b}"):
        result = measure(step, st, args.steps, args.warmup, new_requests, per_step=True,
                         zero_counts=lambda: stats.update(finished=0, rejected=0))
    result.update(stats, xgr_threads=args.xgr_threads)
    return result


# ----------------------------------------------------------------------------- grammars


def load_schema(path: Path) -> dict:
    """A MaskBench file ({"schema", "tests"}) or a plain JSON Schema file."""
    if not path.is_file():
        fallback = MASKBENCH / path.name
        if not fallback.is_file():
            raise SystemExit(f"schema file {path} is missing: copy it there, e.g. cp "
                             f"../shared/maskbench/data/{SCHEMA_NAME} device_data/maskbench/ "
                             "(or pass --schema FILE, or --grammars json)")
        path = fallback
    doc = json.loads(path.read_text())
    return doc["schema"] if isinstance(doc, dict) and "tests" in doc else doc


def grammar_label(path: Path) -> str:
    return "schema:" + path.stem.split("---")[-1]


def compile_grammars(args, info, xgr, xinfo) -> List[Dict[str, object]]:
    """[{name, gxg: CompiledGrammar, xgr: compiled or None, compile_s}] for --grammars."""
    compiler = GrammarCompiler(info)
    xcompiler = xgr.GrammarCompiler(xinfo) if xgr is not None else None
    out = []
    for kind in args.grammars:
        t = time.perf_counter()
        if kind == "json":
            name = "builtin_json"
            compiled = compiler.compile_builtin_json_grammar()
            xcompiled = xcompiler.compile_builtin_json_grammar() if xcompiler else None
        else:
            schema = load_schema(Path(args.schema))
            name = grammar_label(Path(args.schema))
            compiled = compiler.compile_json_schema(schema, any_whitespace=True,
                                                    strict_mode=False)
            xcompiled = (xcompiler.compile_json_schema(json.dumps(schema), any_whitespace=True,
                                                       strict_mode=False)
                         if xcompiler else None)
        out.append({"name": name, "gxg": compiled, "xgr": xcompiled,
                    "compile_s": time.perf_counter() - t})
        print(f"compiled {name} in {out[-1]['compile_s']:.2f} s", flush=True)
    return out


# ----------------------------------------------------------------------------- driver


def recorded(label: str, run: Callable[[], Dict[str, object]]) -> Dict[str, object]:
    """``run()``'s result, or {"error": ...} when it raises (the traceback is printed): a
    failing configuration is recorded, the others still run."""
    print(f"{label} ...", end=" ", flush=True)
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - keep the other configurations' numbers
        traceback.print_exc()
        return {"error": f"{type(error).__name__}: {error}"}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model's shape (Llama-3-8B's by default), weights' scale and the KV cache."""
    defaults = ModelConfig()
    for field in ("layers", "hidden", "heads", "kv_heads", "intermediate"):
        parser.add_argument("--" + field.replace("_", "-"), type=int,
                            default=getattr(defaults, field))
    parser.add_argument("--head-dim", type=int, default=None, help="default hidden / heads")
    parser.add_argument("--init-std", type=float, default=0.02)
    parser.add_argument("--max-len", type=int, default=512, help="KV cache length")
    parser.add_argument("--prompt-len", type=int, default=128)


def model_config(args) -> ModelConfig:
    return ModelConfig(hidden=args.hidden, layers=args.layers, heads=args.heads,
                       kv_heads=args.kv_heads, head_dim=args.head_dim or args.hidden // args.heads,
                       intermediate=args.intermediate)


def run_batch_size(b: int, model: Llama, info, grammars, xgr, args, device,
                   use_graph: bool) -> List[Dict[str, object]]:
    """Every configuration at batch size b; a failing configuration is recorded, not fatal."""
    sample = make_sampler(args.sampler, args.temperature)
    st = DecodeState(b, args.prompt_len, args.max_len, device)
    rows: List[Dict[str, object]] = []

    def attempt(config: str, grammar: Optional[str], run: Callable[[], Dict[str, object]]):
        if config not in args.configs:
            return
        result = recorded(f"B={b} {grammar or '-'} {config}", run)
        result.update(batch=b, grammar=grammar, config=config)
        if "ms_per_step" in result:
            result["ms_per_token"] = result["ms_per_step"] / b
        print(result.get("error") or f"{result['ms_per_step']:.3f} ms/step", flush=True)
        rows.append(result)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the finished graphs' pools

    no_grammar = lambda: None  # noqa: E731
    attempt("off", None, lambda: run_graph_config(
        "off", plain_step(model, st, sample), st, args, no_grammar, use_graph))
    attempt("off_sync", None, lambda: run_graph_config(
        "off_sync", plain_step(model, st, sample), st, args, no_grammar, use_graph,
        sync_tokens=True))
    if {"gxg", "gxg_fused"} & set(args.configs):
        batch = GrammarBatch(info, device=device, max_batch=b,
                             capacity=ArenaCapacity.to_hold([g["gxg"] for g in grammars],
                                                               ArenaCapacity(max_grammars=2)),
                             lazy_masks=False)  # steady state: every entry at bind
    for grammar in grammars:
        name = grammar["name"]
        if {"gxg", "gxg_fused"} & set(args.configs):
            for slot in range(b):
                batch.bind(slot, grammar["gxg"])
            reset_all = lambda: batch.reset()  # noqa: E731
            attempt("gxg", name, lambda: run_graph_config(
                "gxg", gxg_step(model, st, batch, sample), st, args, reset_all, use_graph))
            fused = fused_sampler(batch, args.sampler, args.temperature, args.seed)
            if fused is not None:
                attempt("gxg_fused", name, lambda: run_graph_config(
                    "gxg_fused", gxg_step(model, st, batch, sample, fused), st, args,
                    reset_all, use_graph))
        if xgr is not None and grammar["xgr"] is not None:
            attempt("xgrammar", name, lambda: run_xgrammar(
                xgr, grammar["xgr"], model, st, sample, args, use_graph))
    return rows


def summary_rows(results: List[Dict[str, object]], grammars, batches) -> List[Dict[str, object]]:
    """One table row per (batch, grammar): ms per step, overhead % of off, ms per token."""
    def get(config, b, grammar=None, key="ms_per_step"):
        for r in results:
            if (r["config"], r["batch"], r["grammar"]) == (config, b, grammar):
                return r.get(key)
        return None

    def ms(config, b, grammar=None):
        return get(config, b, grammar)

    def pct(x, base):
        return None if x is None or base is None else (x - base) / base * 100

    table = []
    for b in batches:
        off, off_sync = ms("off", b), ms("off_sync", b)
        for grammar in grammars:
            name = grammar["name"]
            gxg, fused, xg = ms("gxg", b, name), ms("gxg_fused", b, name), ms("xgrammar", b, name)
            table.append({"B": b, "grammar": name, "off ms": off, "off+sync ms": off_sync,
                          "gxg ms": gxg, "gxg %": pct(gxg, off),
                          "fused ms": fused, "fused %": pct(fused, off),
                          "xgr ms": xg, "xgr %": pct(xg, off), "xgr % vs sync": pct(xg, off_sync),
                          "off ms/tok": None if off is None else off / b,
                          "gxg ms/tok": None if gxg is None else gxg / b,
                          "xgr ms/tok": None if xg is None else xg / b,
                          "done gxg/xgr": f"{get('gxg', b, name, 'finished')}/"
                                          f"{get('xgrammar', b, name, 'finished')}",
                          "errors": sum(get(c, b, name, "errors") or 0
                                        for c in ("gxg", "gxg_fused")),
                          "rejected": sum(get(c, b, name, "rejected") or 0
                                          for c in ("gxg", "gxg_fused", "xgrammar"))})
    return table


def versions() -> Dict[str, Optional[str]]:
    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for package in ("triton", "xgrammar", "transformers"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    try:
        import cupy
        out["cupy"] = cupy.__version__
    except ImportError:
        out["cupy"] = None
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--grammars", nargs="+", choices=["json", "schema"],
                        default=["json", "schema"])
    parser.add_argument("--schema", default=str(DEFAULT_SCHEMA),
                        help="MaskBench file or JSON Schema (default: device_data/maskbench/"
                             f"{SCHEMA_NAME}; falls back to ../shared/maskbench/data/)")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=200, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sampler", choices=["sample", "greedy"], default="sample")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--xgr-threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="BatchGrammarMatcher threads (default: half the cores, as "
                             "XGrammar's 'auto')")
    parser.add_argument("--eager", action="store_true",
                        help="no CUDA graphs: every step launched op by op (for nsys traces)")
    add_model_arguments(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.max_len - args.prompt_len < 4:
        parser.error("--max-len must exceed --prompt-len by 4 or more (graph warm-up steps)")
    return args


def main(argv=None) -> Dict[str, object]:
    global _NVTX
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--speculative" in argv:  # the speculative mode lives in its own file
        argv.remove("--speculative")
        import e2e_speculative
        return e2e_speculative.main(argv)
    args = parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    _NVTX = cuda
    use_graph = cuda and not args.eager
    torch.manual_seed(args.seed)
    cfg = model_config(args)
    xgr = import_xgrammar() if "xgrammar" in args.configs else None
    info = vocabularies.tokenizer_info_for("qwen", vocab_size=cfg.vocab)
    xinfo = xgrammar_tokenizer_info(xgr, info) if xgr is not None else None
    grammars = compile_grammars(args, info, xgr, xinfo)
    t = time.perf_counter()
    model = Llama(cfg, max(args.batches), args.max_len, device, args.init_std)
    synchronize(device)
    print(f"model: {cfg.parameters() / 1e9:.2f} B parameters, built in "
          f"{time.perf_counter() - t:.1f} s; graphs: {use_graph}", flush=True)
    results = []
    for b in args.batches:
        results += run_batch_size(b, model, info, grammars, xgr, args, device, use_graph)
    table = summary_rows(results, grammars, args.batches)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"\ndevice: {device_name}; {'CUDA graphs' if use_graph else 'eager'}; "
          f"model {cfg.layers} layers, hidden {cfg.hidden}, vocab {cfg.vocab}; "
          f"max_len {args.max_len}, prompt {args.prompt_len}; {args.steps} steps; "
          f"sampler {args.sampler}")
    for b in args.batches:
        need = cfg.bytes_per_step(b, args.max_len)
        off = next((r.get("ms_per_step") for r in results
                    if r["config"] == "off" and r["batch"] == b), None)
        rate = f", {need['total'] / (off / 1e3) / 1e9:.3g} GB/s at 'off'" if off else ""
        print(f"B={b}: bytes per step {need['total'] / 1e9:.2f} GB (weights "
              f"{need['weights'] / 1e9:.2f}, KV {need['kv_cache'] / 1e9:.2f}){rate}")
    print_table(table, list(table[0].keys()) if table else ["B"])
    payload = {"device": device_name, "versions": versions(), "graphs": use_graph,
               "settings": {k: v for k, v in vars(args).items()},
               "model": {**asdict(cfg), "parameters": cfg.parameters(),
                         "bytes_per_step": {b: cfg.bytes_per_step(b, args.max_len)
                                            for b in args.batches}},
               "grammars": [{"name": g["name"], "compile_s": g["compile_s"]} for g in grammars],
               "fill_and_sample": hasattr(GrammarBatch, "fill_and_sample"),
               "results": results, "table": table,
               "wall_s": time.perf_counter() - started}
    out = write_json("e2e_decode", payload, Path(args.out) if args.out else None)
    print(f"wrote {out} ({payload['wall_s']:.0f} s)")
    return payload


if __name__ == "__main__":
    main()
