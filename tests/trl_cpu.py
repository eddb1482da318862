"""Stand-ins for the two CUDA assumptions of TRL 1.16's `AsyncGRPOTrainer`, so it trains on
a CPU in the tests. THE TESTS ONLY: GymBus's product code never uses these; on a GPU the
trainer runs as TRL ships it.

1. `get_peak_flops_per_device` (trl/trainer/utils.py) asks CUDA for the device name, which
   a CPU build of torch refuses: it returns `None` here, which turns off TRL's MFU metric.
2. The packed ("tree") training forward fetches a FlashAttention-3 kernel from the Hub
   (`packing._flash_attn`): here the same variable-length attention in plain torch, each
   segment's queries over its gathered keys with causal masking aligned bottom-right, as
   FlashAttention does when there are fewer queries than keys.

The third assumption, that `vllm` imports in the trainer's environment, holds only for
TRL's default rollout worker; GymBus's `BusRolloutWorker` replaces that worker, so nothing
stands in for it. Call `install()` before making the trainer.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["install", "varlen_attention"]


def varlen_attention(
    q: Any,
    k: Any,
    v: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    window_size: Any = (-1, -1),
    softcap: float | None = None,
    **ignored: Any,
) -> Any:
    """`flash_attn_varlen_func` for TRL's packing: q `(total_q, Hq, D)`, k and v `(total_k,
    Hkv, D)`; segment i is `q[cu_q[i]:cu_q[i+1]]` over `k[cu_k[i]:cu_k[i+1]]`."""
    import torch
    import torch.nn.functional as F

    if softcap or window_size not in ((-1, -1), None):
        raise NotImplementedError("softcap and sliding windows are not stood in for")
    out = torch.empty_like(q)
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    groups = q.shape[1] // k.shape[1]
    for i in range(len(starts_q) - 1):
        queries = q[starts_q[i] : starts_q[i + 1]].transpose(0, 1)
        keys = k[starts_k[i] : starts_k[i + 1]].transpose(0, 1).repeat_interleave(groups, dim=0)
        values = v[starts_k[i] : starts_k[i + 1]].transpose(0, 1).repeat_interleave(groups, dim=0)
        mask = None
        if causal:
            length_q, length_k = queries.shape[1], keys.shape[1]
            rows = torch.arange(length_q).unsqueeze(1)
            mask = torch.arange(length_k).unsqueeze(0) <= rows + (length_k - length_q)
        attended = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=softmax_scale)
        out[starts_q[i] : starts_q[i + 1]] = attended.transpose(0, 1)
    return out


def install() -> None:
    """Patch TRL's async trainer modules (in this process) with the two stand-ins."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    async_grpo_trainer.get_peak_flops_per_device = lambda accelerator, dtype: None  # type: ignore[attr-defined]
    packing._flash_attn = lambda: types.SimpleNamespace(flash_attn_varlen_func=varlen_attention)  # type: ignore[attr-defined]
