"""The per-step ops, registered with ``torch.library`` under the ``xg`` namespace (this
directory installs as ``gxg.ops``; ``import gxg`` registers ``torch.ops.xg`` once torch is
imported).

  xg_ops.py          the ``torch.ops.xg`` ops (reset, accept_token, accept_tokens, draft_paths,
                     rollback, fill_next_token_bitmask, apply_token_bitmask_inplace,
                     fill_and_apply, fill_and_sample): schemas, CPU and CUDA kernels, fake
                     kernels
  reference.py       the CPU reference of the per-step ops on one ``RuntimeState`` slot (the
                     CPU kernels and ``GrammarMatcher`` run it; the CUDA kernels must equal it)
  arena_tables.py    the CPU kernels' host tables, rebuilt from the arena tensors they receive
                     (cached per arena and grammar generation)
  apply_bitmask.py   bitmask -> -inf logits on the CPU (the reference of the apply kernel)
  fill_triton.py     Triton kernel: the dense part of the next-token bitmask
  cuda_automaton.py  launchers of the CUDA C++ automaton kernels (csrc/automaton.cu: reset,
                     accept, rollback, uncertain tokens, token budget), compiled with NVRTC
  apply_triton.py    Triton kernel: apply a bitmask to logits in place
  dependent_launch.py  programmatic dependent launch of the step's kernels while a graph is
                     captured (sm_90+): each may start as the one before it finishes
  draft_paths.py     draft-tree arrays -> each node's path, depth, reach (reference of
                     ``xg::draft_paths``); draft_paths_triton.py: its Triton kernel
  sample_triton.py   Triton kernel: masked sampling (greedy, temperature, top-k, top-p)
"""
