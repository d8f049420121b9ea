"""Speculative decoding end to end: time per output token with the grammar off, with gxg's draft
masks and verification inside the step's CUDA graph, and with XGrammar's host path — the
speculative mode of ``e2e_decode.py`` (``e2e_decode.py --speculative ...`` runs this file).

What it measures. One speculative step of a batch of B rows, a chain draft of k tokens:
  draft    a small draft model (``--draft-layers`` of the target's shape, its own embedding and
           head, like an EAGLE/MTP head) proposes k tokens per row, one forward each, unmasked;
  verify   the target (Llama-3-8B's shape, ``e2e_decode.Llama``) runs the row's last token and
           the k draft tokens in one forward (k + 1 positions per row, per-row positions);
  mask     row j of the verify logits is masked with the grammar's mask after the row's last
           token and draft tokens 1..j (the draft masks);
  sample   the target samples a token at every position from the masked logits;
  accept   the longest prefix whose draft tokens equal the target's, plus the target's next
           token ("bonus"), is the step's output: a + 1 tokens; the grammar takes them.
Configurations, in the same run:
  off       draft + verify + sample + accepted lengths, one CUDA graph per step, no grammar;
  off_sync  the same plus the tokens and lengths to the host and a synchronisation (what any
            engine with a host-side grammar pays anyway: the baseline of ``xgrammar``);
  gxg       off + ``gxg.DraftMasks.fill`` (the k + 1 masks of every row from copies of its
            state), the apply kernel on the B (k + 1) rows of logits, ``accept_tokens`` of the
            accepted prefix (one launch, counts on the device) and a reset of the rows that
            finished — all in the same ONE graph;
  xgrammar  XGrammar 0.2.8's path as a serving engine runs it: the draft graph, the draft
            tokens to the host, the verify graph launched; while it runs, the host fills every
            row's k + 1 masks with ``GrammarMatcher.traverse_draft_tree`` (rows one after the
            other: 0.2.8 has no batched traversal) into a pinned buffer; host-to-device copy,
            XGrammar's ``apply_token_bitmask_inplace``, a small graph (sampling, lengths, next
            input), tokens and lengths to the host (a synchronisation), ``accept_token`` of each
            row's accepted prefix, a reset of the matchers that finished.

Reported per (B, k, grammar, configuration): ms per step, output tokens per step (all rows),
ms per output token, mean draft tokens accepted per row and step, and the grammar's overhead
per step in % of ``off`` (xgrammar: also of ``off_sync``) — equal to its overhead per output
token when the same tokens are accepted. Random weights never agree, so the target takes an
allowed draft token with probability ``--agree`` (0.7 by default; 0 turns it off) and samples
otherwise — in every configuration, through the same masks (``target_tokens``). The draft is
unconstrained, so with a grammar fewer of its tokens survive (on a schema, often none): tokens
per step differ between grammar on and off, which is why the per-step overhead is the number
to compare; the grammar's work per step hardly depends on how many are accepted (every row's
k + 1 masks are filled; only the path accepts stop at the first rejected draft token).
Counted too: finished requests, gxg runtime-limit errors and rejected tokens (a rejection of a
token sampled from a masked row is a mask bug: rejected must equal errors).

Floors to write down before reading the table: the verify forward reads the weights once (15.2
GB at bf16) and does 2 x 8.0 G x B (k + 1) FLOP of matmuls, so it is memory-bound at small
B (k + 1) (~5 ms on an H100) and compute-bound at large (B = 256, k = 8: 2,304 tokens, 37 TFLOP,
~50-80 ms); the draft adds k forwards of one layer and its 1.2 GB head (~0.5 ms each). gxg's
work: the state copies (B (k + 1) slot states), the path accepts, one fill of B (k + 1) rows and
the apply pass over B (k + 1) x 152 K fp32 logits (1.4 GB at B = 256, k = 8: ~0.5 ms at HBM
speed); under 1 % of the step at B = 256 by these numbers, and ~2 % of a 5 ms step at B = 1
if the fixed ~30 launches of the draft masks cost ~100 us.

Usage (GPU machine):
  python profiling/e2e_speculative.py [--batches 1 16 64 256] [--drafts 2 4 8] [--steps 30]
CPU smoke test: the toy-model flags of e2e_decode.py (--device cpu --layers 1 --hidden 64 ...).
Prints a table and writes JSON (profiling/results/e2e_speculative.json or --out).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_decode as base  # noqa: E402
from common import import_xgrammar, print_table, write_json  # noqa: E402

from gxg import layout, vocabularies  # noqa: E402
from gxg.arena import ArenaCapacity  # noqa: E402
from gxg.batch import GrammarBatch  # noqa: E402
from gxg.draft_masks import DraftMasks  # noqa: E402

CONFIGS = ("off", "off_sync", "gxg", "xgrammar")
STATS = ("tokens", "accepted_drafts", "finished", "errors", "rejected")


class SpecState:
    """A chain draft of k tokens per row: the tree arrays (node 0 = the row's last output
    token, node j = draft token j), per-row positions, device counters (``STATS``); and the
    host-side count of steps since the last new requests (``generated``, as
    ``e2e_decode.DecodeState``'s: ``e2e_decode.measure`` runs both)."""

    def __init__(self, batch: int, k: int, prompt_len: int, max_len: int, device: torch.device):
        self.k, self.n = k, k + 1
        self.prompt_len, self.max_len, self.device = prompt_len, max_len, device
        i64 = dict(dtype=torch.int64, device=device)
        self.tree_tokens = torch.zeros((batch, self.n), **i64)
        chain = torch.cat([torch.arange(1, self.n, **i64), torch.full((1,), -1, **i64)])
        self.next_token = chain.unsqueeze(0).expand(batch, self.n).contiguous()
        self.next_sibling = torch.full((batch, self.n), -1, **i64)
        self.start = torch.full((batch,), prompt_len, **i64)
        self.counts = torch.zeros((len(STATS), batch), **i64)
        self.generated = 0

    def new_requests(self) -> None:
        self.start.fill_(self.prompt_len)
        self.generated = 0

    def at_length_bound(self) -> bool:
        """A step writes up to k + 1 positions per row; the host does not read the rows'
        positions (no synchronisation), so it bounds them by (generated + 1) (k + 1)."""
        return self.prompt_len + (self.generated + 1) * self.n > self.max_len

    def count(self, name: str, value: torch.Tensor) -> None:
        self.counts[STATS.index(name)].add_(value.to(torch.int64))

    def advance(self, targets: torch.Tensor, produced: torch.Tensor) -> None:
        """The row's last output token and its position move by the ``produced`` tokens."""
        last = targets.gather(1, (produced - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        self.tree_tokens[:, 0] = torch.where(produced > 0, last, self.tree_tokens[:, 0])
        self.start.add_(produced)
        self.count("tokens", produced)


def draft(model: base.Llama, st: SpecState, sample) -> None:
    """k forwards of the draft model, each one token per row, unmasked."""
    token = st.tree_tokens[:, :1]
    for j in range(st.k):
        logits = model.forward_rows(token, st.start + j)[:, 0]
        token = sample(logits).unsqueeze(1)
        st.tree_tokens[:, j + 1:j + 2].copy_(token)


def target_tokens(logits: torch.Tensor, st: SpecState, sample, agree: float,
                  bitmask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """targets [B, k + 1]: a token sampled at every verify position from the (masked) logits;
    with ``agree`` > 0, position j takes draft token j + 1 instead with probability ``agree``
    where the mask allows it (a simulated target that agrees with the draft that often:
    random weights never do). The result is always a token the masks allow."""
    b, n, v = logits.shape
    targets = sample(logits.view(b * n, v)).view(b, n)
    if agree <= 0:
        return targets
    proposed = torch.cat([st.tree_tokens[:, 1:], targets[:, -1:]], dim=1)
    take = torch.rand((b, n), device=logits.device) < agree
    take[:, -1] = False  # the last position has no draft token
    if bitmask is not None:
        words = bitmask.gather(2, (proposed >> 5).unsqueeze(2)).squeeze(2)
        take &= ((words >> (proposed & 31).to(torch.int32)) & 1).bool()
    return torch.where(take, proposed, targets)


def accepted_drafts(st: SpecState, targets: torch.Tensor) -> torch.Tensor:
    """a [B]: how many leading draft tokens equal the target's tokens at their positions."""
    return (targets[:, :st.k] == st.tree_tokens[:, 1:]).to(torch.int64).cumprod(1).sum(1)


def off_step(target, drafter, st: SpecState, sample, agree: float) -> Callable[[], None]:
    def step():
        with base.nvtx("draft"):
            draft(drafter, st, sample)
        with base.nvtx("verify"):
            logits = target.forward_rows(st.tree_tokens, st.start)
        with base.nvtx("sample"):
            targets = target_tokens(logits, st, sample, agree)
        a = accepted_drafts(st, targets)
        st.count("accepted_drafts", a)
        st.advance(targets, a + 1)
    return step


def gxg_step(target, drafter, st: SpecState, sample, agree: float, batch: GrammarBatch,
             masks: DraftMasks, bitmask: torch.Tensor) -> Callable[[], None]:
    def step():
        with base.nvtx("draft"):
            draft(drafter, st, sample)
        with base.nvtx("verify"):
            logits = target.forward_rows(st.tree_tokens, st.start)
        b, n, v = logits.shape
        with base.nvtx("gxg draft masks"):
            masks.fill(st.next_token, st.next_sibling, st.tree_tokens, bitmask)
            torch.ops.xg.apply_token_bitmask_inplace(logits.view(b * n, v),
                                                     bitmask.view(b * n, -1))
        with base.nvtx("sample"):
            targets = target_tokens(logits, st, sample, agree, bitmask)
        a = accepted_drafts(st, targets)
        with base.nvtx("gxg accept_tokens"):
            produced = batch.accept_tokens(targets, a + 1).to(torch.int64)
        with base.nvtx("gxg reset finished"):
            errored = batch.error_codes() != 0
            finished = batch.is_terminated() | errored
            st.count("accepted_drafts", a)
            st.count("finished", finished)
            st.count("errors", errored)
            st.count("rejected", (produced < a + 1) & ~finished)
            batch.reset(finished)
        st.advance(targets, produced)
    return step


def run_graph_config(step_fn, st: SpecState, args, new_requests, use_graph: bool,
                     sync_tokens: bool = False) -> Dict[str, object]:
    st.new_requests()  # the capture's warm-up steps must stay inside the KV cache
    step = base.Step(step_fn, use_graph)
    pinned = st.device.type == "cuda"
    tokens_host = torch.empty(st.tree_tokens.shape, dtype=torch.int64, pin_memory=pinned)
    starts_host = torch.empty(st.start.shape, dtype=torch.int64, pin_memory=pinned)

    def step_and_sync():  # off_sync: what a host-side grammar needs every step
        step()
        tokens_host.copy_(st.tree_tokens, non_blocking=True)
        starts_host.copy_(st.start, non_blocking=True)
        base.synchronize(st.device)
    result = base.measure(step_and_sync if sync_tokens else step, st, args.steps, args.warmup,
                     new_requests)
    result.update(zip(STATS, st.counts.sum(dim=1).tolist()))
    return result


def run_xgrammar(xgr, xcompiled, target, drafter, st: SpecState, sample, args,
                 use_graph: bool) -> Dict[str, object]:
    """XGrammar's path (module docstring), measured per step."""
    b, n = st.tree_tokens.shape
    cuda = st.device.type == "cuda"
    words = layout.bitmask_words(target.cfg.vocab)
    masks_host = torch.zeros((b, n, words), dtype=torch.int32, pin_memory=cuda)
    masks_dev = torch.zeros((b, n, words), dtype=torch.int32, device=st.device) \
        if cuda else masks_host
    tree_host = torch.empty((b, n), dtype=torch.int64, pin_memory=cuda)
    next_token = st.next_token[0].cpu()
    next_sibling = st.next_sibling[0].cpu()
    targets_dev = torch.zeros((b, n), dtype=torch.int64, device=st.device)
    lengths_dev = torch.zeros(b, dtype=torch.int64, device=st.device)
    targets_host = torch.empty((b, n), dtype=torch.int64, pin_memory=cuda)
    lengths_host = torch.empty(b, dtype=torch.int64, pin_memory=cuda)
    matchers = [xgr.GrammarMatcher(xcompiled) for _ in range(b)]
    st.new_requests()
    draft_step = base.Step(lambda: draft(drafter, st, sample), use_graph)
    verify = base.Step(lambda: target.forward_rows(st.tree_tokens, st.start), use_graph)
    if verify.result is None:
        verify()  # eager: the tail's first call needs logits

    def tail():
        targets = target_tokens(verify.result, st, sample, args.agree, masks_dev)
        a = accepted_drafts(st, targets)
        st.count("accepted_drafts", a)
        targets_dev.copy_(targets)
        lengths_dev.copy_(a + 1)
        st.advance(targets, a + 1)  # on the device as if all were accepted (they must be)
    tail_step = base.Step(tail, use_graph)
    host = {"tokens": 0, "finished": 0, "rejected": 0}
    drafted = torch.cuda.Event() if cuda else None

    def step():
        with base.nvtx("draft"):
            draft_step()
            tree_host.copy_(st.tree_tokens, non_blocking=True)
            if cuda:
                drafted.record()
        with base.nvtx("verify"):
            verify()                               # a graph launch: returns while it runs
        if cuda:
            drafted.synchronize()
        with base.nvtx("xgr traverse_draft_tree"):
            for row, matcher in enumerate(matchers):
                matcher.traverse_draft_tree(next_token, next_sibling, tree_host[row],
                                            masks_host[row])
        with base.nvtx("xgr copy + apply"):
            if cuda:
                masks_dev.copy_(masks_host, non_blocking=True)
            xgr.apply_token_bitmask_inplace(verify.result.view(b * n, -1),
                                            masks_dev.view(b * n, words))
        tail_step()
        with base.nvtx("tokens to host"):
            targets_host.copy_(targets_dev, non_blocking=True)
            lengths_host.copy_(lengths_dev, non_blocking=True)
            base.synchronize(st.device)
        with base.nvtx("xgr accept"):
            rows, lengths = targets_host.tolist(), lengths_host.tolist()
            for matcher, row, length in zip(matchers, rows, lengths):
                for token in row[:length]:
                    if not matcher.accept_token(token):
                        host["rejected"] += 1
                        break
                    host["tokens"] += 1
                    if matcher.is_terminated():
                        host["finished"] += 1
                        matcher.reset()
                        break

    def new_requests():
        for matcher in matchers:
            matcher.reset()

    result = base.measure(step, st, args.steps, args.warmup, new_requests,
                     zero_counts=lambda: host.update(tokens=0, finished=0, rejected=0))
    result.update(zip(STATS, st.counts.sum(dim=1).tolist()))
    result.update(host, errors=0)  # what the host's matchers accepted (XGrammar's own count)
    return result


# ----------------------------------------------------------------------------- driver


def run_batch_size(b: int, k: int, target, drafter, info, grammars, xgr, args, device,
                   use_graph: bool) -> List[Dict[str, object]]:
    """Every configuration at batch size b and draft length k; a failure is recorded."""
    sample = base.make_sampler(args.sampler, args.temperature)
    st = SpecState(b, k, args.prompt_len, args.max_len, device)
    rows: List[Dict[str, object]] = []

    def attempt(config: str, grammar: Optional[str], run: Callable[[], Dict[str, object]]):
        if config not in args.configs:
            return
        result = base.recorded(f"B={b} k={k} {grammar or '-'} {config}", run)
        result.update(batch=b, draft=k, grammar=grammar, config=config)
        if "ms_per_step" in result:
            steps_tokens = result["tokens"] / args.steps
            result["tokens_per_step"] = steps_tokens
            result["ms_per_token"] = result["ms_per_step"] / max(steps_tokens, 1e-9)
            result["accepted_drafts_per_row"] = result["accepted_drafts"] / (args.steps * b)
        print(result.get("error") or f"{result['ms_per_step']:.3f} ms/step, "
              f"{result['tokens_per_step']:.2f} tokens/step", flush=True)
        rows.append(result)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    nothing = lambda: None  # noqa: E731
    plain = lambda: off_step(target, drafter, st, sample, args.agree)  # noqa: E731
    attempt("off", None, lambda: run_graph_config(plain(), st, args, nothing, use_graph))
    attempt("off_sync", None, lambda: run_graph_config(plain(), st, args, nothing, use_graph,
                                                       sync_tokens=True))
    if "gxg" in args.configs:
        batch = GrammarBatch(info, device=device, max_batch=b,
                             capacity=ArenaCapacity.to_hold([g["gxg"] for g in grammars],
                                                               ArenaCapacity(max_grammars=2)),
                             lazy_masks=False)  # steady state: every entry at bind
        masks = DraftMasks(batch, st.n)
        bitmask = torch.zeros((b, st.n, layout.bitmask_words(info.vocab_size)),
                              dtype=torch.int32, device=device)
    for grammar in grammars:
        name = grammar["name"]
        if "gxg" in args.configs:
            for slot in range(b):
                batch.bind(slot, grammar["gxg"])
            attempt("gxg", name, lambda: run_graph_config(
                gxg_step(target, drafter, st, sample, args.agree, batch, masks, bitmask), st, args,
                lambda: batch.reset(), use_graph))
        if xgr is not None and grammar["xgr"] is not None:
            attempt("xgrammar", name, lambda: run_xgrammar(
                xgr, grammar["xgr"], target, drafter, st, sample, args, use_graph))
    return rows


def summary_rows(results: List[Dict[str, object]], grammars, batches, drafts):
    def get(config, b, k, grammar=None, key="ms_per_step"):
        for r in results:
            if (r["config"], r["batch"], r["draft"], r["grammar"]) == (config, b, k, grammar):
                return r.get(key)
        return None

    def pct(x, ref):
        return None if x is None or ref is None else (x - ref) / ref * 100

    table = []
    for b in batches:
        for k in drafts:
            off, off_sync = get("off", b, k), get("off_sync", b, k)
            for grammar in grammars:
                name = grammar["name"]
                gxg, xg = get("gxg", b, k, name), get("xgrammar", b, k, name)
                table.append({
                    "B": b, "k": k, "grammar": name, "off ms": off, "off+sync ms": off_sync,
                    "gxg ms": gxg, "gxg %": pct(gxg, off), "xgr ms": xg, "xgr %": pct(xg, off),
                    "xgr % vs sync": pct(xg, off_sync),
                    "off ms/tok": get("off", b, k, None, "ms_per_token"),
                    "gxg ms/tok": get("gxg", b, k, name, "ms_per_token"),
                    "xgr ms/tok": get("xgrammar", b, k, name, "ms_per_token"),
                    "tok/step off/gxg/xgr": "/".join(
                        f"{v:.1f}" if v is not None else "-" for v in (
                            get("off", b, k, None, "tokens_per_step"),
                            get("gxg", b, k, name, "tokens_per_step"),
                            get("xgrammar", b, k, name, "tokens_per_step"))),
                    "errors": get("gxg", b, k, name, "errors"),
                    "rejected gxg/xgr": f"{get('gxg', b, k, name, 'rejected')}/"
                                        f"{get('xgrammar', b, k, name, 'rejected')}"})
    return table


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--drafts", type=int, nargs="+", default=[2, 4, 8],
                        help="draft lengths k (a chain of k tokens; k + 1 verify positions)")
    parser.add_argument("--draft-layers", type=int, default=1)
    parser.add_argument("--agree", type=float, default=0.7,
                        help="simulated agreement: the target takes an allowed draft token with "
                             "this probability (0: sample only; random weights never agree)")
    parser.add_argument("--grammars", nargs="+", choices=["json", "schema"],
                        default=["json", "schema"])
    parser.add_argument("--schema", default=str(base.DEFAULT_SCHEMA))
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--sampler", choices=["sample", "greedy"], default="sample")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs")
    base.add_model_arguments(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.max_len - args.prompt_len < (max(args.drafts) + 1) * 4:
        parser.error("--max-len must exceed --prompt-len by 4 (k + 1) or more")
    return args


def main(argv=None) -> Dict[str, object]:
    args = parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    base._NVTX = cuda
    use_graph = cuda and not args.eager
    torch.manual_seed(args.seed)
    cfg = base.model_config(args)
    draft_cfg = replace(cfg, layers=args.draft_layers)
    xgr = import_xgrammar() if "xgrammar" in args.configs else None
    info = vocabularies.tokenizer_info_for("qwen", vocab_size=cfg.vocab)
    xinfo = base.xgrammar_tokenizer_info(xgr, info) if xgr is not None else None
    grammars = base.compile_grammars(args, info, xgr, xinfo)
    t = time.perf_counter()
    target = base.Llama(cfg, max(args.batches), args.max_len, device, args.init_std)
    drafter = base.Llama(draft_cfg, max(args.batches), args.max_len, device, args.init_std)
    base.synchronize(device)
    print(f"target {cfg.parameters() / 1e9:.2f} B, draft {draft_cfg.parameters() / 1e9:.2f} B "
          f"parameters, built in {time.perf_counter() - t:.1f} s; graphs: {use_graph}",
          flush=True)
    results = []
    for b in args.batches:
        for k in args.drafts:
            results += run_batch_size(b, k, target, drafter, info, grammars, xgr, args, device,
                                      use_graph)
    table = summary_rows(results, grammars, args.batches, args.drafts)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"\ndevice: {device_name}; {'CUDA graphs' if use_graph else 'eager'}; target "
          f"{cfg.layers} layers, hidden {cfg.hidden}, vocab {cfg.vocab}; draft "
          f"{draft_cfg.layers} layer(s); max_len {args.max_len}, prompt {args.prompt_len}; "
          f"{args.steps} steps; sampler {args.sampler}")
    print_table(table, list(table[0].keys()) if table else ["B"])
    payload = {"device": device_name, "versions": base.versions(), "graphs": use_graph,
               "settings": dict(vars(args)),
               "model": {**asdict(cfg), "parameters": cfg.parameters()},
               "draft_model": {**asdict(draft_cfg), "parameters": draft_cfg.parameters()},
               "grammars": [{"name": g["name"], "compile_s": g["compile_s"]} for g in grammars],
               "results": results, "table": table, "wall_s": time.perf_counter() - started}
    out = write_json("e2e_speculative", payload, Path(args.out) if args.out else None)
    print(f"wrote {out} ({payload['wall_s']:.0f} s)")
    return payload


if __name__ == "__main__":
    main()
