"""Apply a token bitmask to logits in place: the CPU implementation (the documented reference).

In:  logits float[B, V_logits] (or [V_logits]), bitmask int32[B', W] (or [W]); optional
     ``indices`` (rows to mask; row i of the bitmask applies to row i of the logits) and
     ``vocab_size``.
Out: logits with -inf wherever the token's bit is 0, for token ids < the effective width:
     ``vocab_size`` if given (must be ≤ both widths), else min(V_logits, 32·W). Ids at or past
     the effective width are left untouched (XGrammar does the same, with a warning when the
     bitmask is narrower than the logits).
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence, Union

import torch


def unpack_bitmask(bitmask: torch.Tensor, width: int) -> torch.Tensor:
    """bool[..., width]: True where the bit of token id is 1 (allowed)."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*bitmask.shape[:-1], -1)[..., :width].bool()


def apply_arguments(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: Optional[int],
                    has_indices: bool):
    """Checked 2-D views of ``logits`` and ``bitmask`` and the effective width; shared by the
    CPU reference and the Triton kernel so both accept and refuse the same calls."""
    if bitmask.dtype != torch.int32:
        raise TypeError(f"bitmask must be int32, got {bitmask.dtype}")
    if logits.device != bitmask.device:
        raise ValueError(f"logits on {logits.device} but bitmask on {bitmask.device}")
    logits2 = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bitmask2 = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    if logits2.dim() != 2 or bitmask2.dim() != 2:
        raise ValueError("logits and bitmask must be 1-D or 2-D")
    mask_width = 32 * bitmask2.shape[1]
    if vocab_size is None:
        width = min(logits2.shape[1], mask_width)
        if mask_width < logits2.shape[1]:
            warnings.warn(f"bitmask covers {mask_width} tokens but logits have "
                          f"{logits2.shape[1]}; ids from {mask_width} on are left unmasked")
    else:
        if vocab_size > logits2.shape[1] or vocab_size > mask_width:
            raise ValueError(f"vocab_size {vocab_size} exceeds the logits width "
                             f"{logits2.shape[1]} or the bitmask width {mask_width}")
        width = vocab_size
    if not has_indices and logits2.shape[0] != bitmask2.shape[0]:
        raise ValueError(f"batch sizes differ: logits {logits2.shape[0]}, bitmask "
                         f"{bitmask2.shape[0]} (pass indices to mask some rows)")
    return logits2, bitmask2, width


def apply_token_bitmask_inplace_cpu(logits: torch.Tensor, bitmask: torch.Tensor, *,
                                    vocab_size: Optional[int] = None,
                                    indices: Optional[Union[Sequence[int], torch.Tensor]] = None
                                    ) -> None:
    logits2, bitmask2, width = apply_arguments(logits, bitmask, vocab_size, indices is not None)
    if indices is None:
        rows = torch.arange(logits2.shape[0])
    else:
        rows = torch.as_tensor(indices, dtype=torch.long).reshape(-1).cpu()
        bad = (rows < 0) | (rows >= logits2.shape[0]) | (rows >= bitmask2.shape[0])
        if bool(bad.any()):
            raise IndexError(f"indices out of range: {rows[bad].tolist()}")
    if len(rows) == 0 or width == 0:
        return
    allowed = unpack_bitmask(bitmask2[rows.to(bitmask2.device)], width)
    view = logits2[rows, :width]
    logits2[rows, :width] = view.masked_fill(~allowed, float("-inf"))
