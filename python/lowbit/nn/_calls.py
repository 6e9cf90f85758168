"""Every lowbit kernel call of lowbit.nn's modules, in one file, so that one place decides what runs them.

The bodies call :mod:`lowbit.functional`, which has no autograd: a call whose
inputs need gradients is refused here (``_no_grad_inputs``) rather than
silently returning a result without a ``grad_fn``. A trainable bias gets its
gradient by being added outside the kernel.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .. import functional as F
from .._matmul import Matmul, PackedWeight
from .._quant_state import QuantState

__all__ = ["dequantize_4bit", "fp8_linear", "int8_linear", "int8_vectorwise_quant", "matmul", "matmul_4bit",
           "quantize_4bit", "weight_dequant", "weight_quant"]

_FP8_BLOCK = 128  # the FP8 GEMM's scale block, fixed by its kernels


def _no_grad_inputs(op: str, **tensors: Optional[torch.Tensor]) -> None:
    """Refuses inputs that need a gradient, since these calls do not record one."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad:
            raise NotImplementedError(
                f"{op}: {name} requires grad, but this lowbit.nn call has no backward yet; "
                f"run it under torch.no_grad() or freeze {name}"
            )


def _split_bias(bias: Optional[torch.Tensor]) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(bias for the kernel, bias to add afterwards): a bias that needs a gradient is added by torch."""
    if bias is not None and bias.requires_grad and torch.is_grad_enabled():
        return None, bias
    return bias, None


def _add(y: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return y if bias is None else y + bias.to(y.dtype)


# ----------------------------------------------------------------- 4-bit


def quantize_4bit(w: torch.Tensor, blocksize: int, compress_statistics: bool, quant_type: str,
                  quant_storage: torch.dtype) -> Tuple[torch.Tensor, QuantState]:
    """The packed codes [m, 1] (viewed as quant_storage) and their state."""
    return F.quantize_4bit(w, blocksize=blocksize, compress_statistics=compress_statistics, quant_type=quant_type,
                           quant_storage=quant_storage)


def dequantize_4bit(packed: torch.Tensor, quant_state: QuantState) -> torch.Tensor:
    return F.dequantize_4bit(packed, quant_state)


def matmul_4bit(x: torch.Tensor, packed: torch.Tensor, quant_state: QuantState,
                bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x · dequantize_4bit(packed)ᵀ + bias`` in x's dtype."""
    _no_grad_inputs("Linear4bit", input=x)
    fused, later = _split_bias(bias)
    return _add(F.matmul_4bit(x, packed, quant_state, fused), later)


# ----------------------------------------------------------------- int8


def int8_vectorwise_quant(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(CB int8 [N, K], SCB float32 [N]) of a weight."""
    CB, SCB, _ = F.int8_vectorwise_quant(w)
    return CB, SCB


def int8_linear(x: torch.Tensor, CB: torch.Tensor, SCB: torch.Tensor, bias: Optional[torch.Tensor],
                threshold: float) -> torch.Tensor:
    """LLM.int8's ``x · (CB · SCB / 127)ᵀ + bias`` in x's dtype, outlier columns above threshold in float."""
    _no_grad_inputs("Linear8bitLt", input=x)
    fused, later = _split_bias(bias)
    return _add(F.int8_linear(x, CB, SCB, fused, threshold), later)


# ------------------------------------------------------------------ FP8


def weight_quant(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [N, K], float32 scales [⌈N/128⌉, ⌈K/128⌉]) of a weight."""
    return F.weight_quant(w, _FP8_BLOCK)


def weight_dequant(weight: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return F.weight_dequant(weight, scale_inv, _FP8_BLOCK, dtype=dtype)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:
    """DeepSeek's FP8 linear: ``act_quant(x)`` in 1x128 blocks, then ``fp8_gemm``; x's dtype out.

    K that is not a multiple of 128 is padded with zeros for the activation
    scales (a zero does not change a block's amax) and the codes cut back to K.
    """
    _no_grad_inputs("LinearFP8", input=x)
    K = x.shape[-1]
    pad = -K % _FP8_BLOCK
    a, a_s = F.act_quant(torch.nn.functional.pad(x, (0, pad)) if pad else x, _FP8_BLOCK)
    if pad:
        a = a[..., :K].contiguous()
    fused, later = _split_bias(bias)
    if fused is not None and fused.dtype != torch.float32:
        fused = fused.float()
    return _add(F.fp8_gemm(a, a_s, weight, weight_scale_inv, out_dtype=x.dtype, bias=fused), later)


# ------------------------------------------------------ mixed-precision matmul


def matmul(mm: Matmul, x: torch.Tensor, packed: PackedWeight, output: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x · dequant(packed)ᵀ (+ its bias)`` in the config's out_dtype (into ``output`` when given)."""
    _no_grad_inputs("Linear", input=x)
    return mm(x, packed, output=output)
