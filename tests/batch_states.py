"""Comparing two batches' runtime states field by field (the CUDA ops against the CPU ops)."""
from __future__ import annotations

import numpy as np

from gxg.batch import GrammarBatch
from gxg.runtime import RuntimeState


def compare_states(cpu: GrammarBatch, gpu: GrammarBatch, where: str) -> None:
    """Every state field equal: the live pool entries and tops, the pool index in full (the
    kernels keep the same hash-consing index as the reference, slot for slot), the scalars;
    the history ring only through the rollbacks the runs make."""
    a, b = cpu.host_state(), gpu.host_state()
    for name in RuntimeState.FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if name in ("pool_node", "pool_parent"):
            for slot in range(cpu.max_batch):
                size = int(a.pool_size[slot])
                np.testing.assert_array_equal(x[slot, :size], y[slot, :size],
                                              err_msg=f"{where}: {name} slot {slot}")
        elif name == "tops":
            for slot in range(cpu.max_batch):
                n = int(a.num_tops[slot])
                np.testing.assert_array_equal(x[slot, :n], y[slot, :n], err_msg=where)
        elif name.startswith("hist_") and name not in ("hist_len", "hist_head"):
            continue  # compared through rollbacks
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"{where}: {name}")
