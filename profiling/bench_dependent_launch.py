"""What a kernel boundary costs inside a CUDA graph, with and without programmatic dependent
launch (``gxg.ops.dependent_launch``): chains of tiny dependent kernels captured in one graph.

Chains of five kernels, 20 chains per graph: ``ttttt`` five Triton kernels (one program, 1,024
floats incremented), ``rrrrr`` five CUDA kernels compiled by CuPy (one warp, a short chain of
dependent reads, launched through gxg's PDL launcher or CuPy's call), ``trrtr`` mixed as in a
gxg step (dense fill and apply in Triton, the automaton kernels in CUDA). Every kernel starts with
the PDL wait (a no-op without PDL). Reported: µs per kernel, best and median of 5 timings of 50
replays.

Floor: a kernel that does almost nothing; what is left is the launch and the boundary between
two dependent kernels, which PDL lets overlap with the end of the kernel before.

Usage: python profiling/bench_dependent_launch.py [--out FILE]  (needs an sm_90+ GPU)
Writes profiling/results/bench_dependent_launch.json unless --out says otherwise.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

from common import write_json

from gxg.ops import dependent_launch


@triton.jit
def _increment(x_ptr, n, DEPENDENT_LAUNCH: tl.constexpr, BLOCK: tl.constexpr):
    if DEPENDENT_LAUNCH:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, values + 1, mask=offs < n)


CHAIN_SOURCE = r'''
extern "C" __global__ void chain(unsigned long long* x, int steps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  if (threadIdx.x != 0) return;
  unsigned long long v = x[0];
  for (int i = 0; i < steps; ++i) v = x[(v + i) & 7] + 1;  // a short chain of dependent reads
  x[blockIdx.x & 7] = v;
}
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import cupy
    kernel = cupy.RawModule(code=CHAIN_SOURCE, options=("-std=c++17",)).get_function("chain")
    x = torch.zeros(8, dtype=torch.int64, device="cuda")
    y = torch.zeros(1024, dtype=torch.float32, device="cuda")

    def step(kinds: str, pdl: bool) -> None:
        for kind in kinds:
            if kind == "t":
                _increment[(1,)](y, 1024, DEPENDENT_LAUNCH=pdl, BLOCK=1024, launch_pdl=pdl)
            elif pdl:
                dependent_launch.launch(kernel, (1,), (32,),
                                        (np.uint64(x.data_ptr()), np.int32(20)),
                                        torch.cuda.current_stream().cuda_stream)
            else:
                with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                    kernel((1,), (32,), (np.uint64(x.data_ptr()), np.int32(20)))

    rows = []
    for kinds in ("ttttt", "rrrrr", "trrtr"):
        for round_ in (1, 2):
            for pdl in (False, True):
                side = torch.cuda.Stream()
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step(kinds, pdl)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(20):
                        step(kinds, pdl)
                for _ in range(20):
                    graph.replay()
                torch.cuda.synchronize()
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    for _ in range(50):
                        graph.replay()
                    torch.cuda.synchronize()
                    times.append((time.perf_counter() - start) / 50 / 20 / len(kinds) * 1e6)
                times.sort()
                row = {"chain": kinds, "round": round_, "pdl": pdl,
                       "us_per_kernel_best": times[0], "us_per_kernel_median": times[2]}
                rows.append(row)
                print(f"{kinds} round {round_} pdl={pdl}: {times[0]:.2f} us per kernel "
                      f"(median {times[2]:.2f})", flush=True)
    write_json("bench_dependent_launch", {"device": torch.cuda.get_device_name(), "rows": rows},
               Path(args.out) if args.out else None)


if __name__ == "__main__":
    main()
