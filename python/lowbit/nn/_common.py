"""What lowbit.nn's modules share: dtype and argument checks, state-dict key helpers."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

__all__ = ["FLOATS", "check_compute_dtype", "check_sizes", "quant_keys"]

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def check_sizes(op: str, **sizes: Any) -> None:
    """Positive integer sizes (feature counts, table sizes), or a TypeError / ValueError naming the argument."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{op}: {name} must be an int (got {type(value).__name__})")
        if value <= 0:
            raise ValueError(f"{op}: {name} must be positive (got {value})")


def check_compute_dtype(op: str, dtype: Optional[torch.dtype]) -> None:
    if dtype is not None and dtype not in FLOATS:
        raise TypeError(f"{op}: compute_dtype must be None, torch.float32, torch.float16 or torch.bfloat16 "
                        f"(got {dtype!r})")


def quant_keys(state_dict: Dict[str, Any], key: str) -> Dict[str, Any]:
    """The entries ``key.<name>`` of a state dict, by name (a 4-bit weight's QuantState)."""
    start = key + "."
    return {k[len(start):]: v for k, v in state_dict.items() if k.startswith(start)}
