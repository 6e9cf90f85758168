"""Every lowbit kernel call of lowbit.nn's modules, in one file, so that one place decides what runs them.

The matmuls and the embeddings' row dequantization run as ``torch.ops.lowbit``
custom ops (:mod:`lowbit.ops`, the functional ops of the same names): they
trace under ``torch.compile(fullgraph=True)`` and ``torch.export``, replay in
CUDA graphs, and the matmuls give the input and bias their gradients through
the dequantized weight (weights stay frozen). The quantization at load time
calls :mod:`lowbit.functional` directly, except int8's, which a forward runs
too.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .. import functional as F
from .. import ops
from .._matmul import Matmul, PackedWeight
from .._quant_state import QuantState

__all__ = ["dequantize_4bit", "embedding_4bit", "embedding_int8", "fp8_linear", "int8_linear",
           "int8_vectorwise_dequant", "int8_vectorwise_quant", "matmul", "matmul_4bit", "quantize_4bit",
           "weight_dequant", "weight_quant"]

_FP8_BLOCK = 128  # the FP8 GEMM's scale block, fixed by its kernels


# ----------------------------------------------------------------- 4-bit


def quantize_4bit(w: torch.Tensor, blocksize: int, compress_statistics: bool, quant_type: str,
                  quant_storage: torch.dtype) -> Tuple[torch.Tensor, QuantState]:
    """The packed codes [m, 1] (viewed as quant_storage) and their state."""
    return F.quantize_4bit(w, blocksize=blocksize, compress_statistics=compress_statistics, quant_type=quant_type,
                           quant_storage=quant_storage)


def dequantize_4bit(packed: torch.Tensor, quant_state: QuantState) -> torch.Tensor:
    return F.dequantize_4bit(packed, quant_state)


def embedding_4bit(input: torch.Tensor, packed: torch.Tensor, quant_state: QuantState, num_embeddings: int,
                   embedding_dim: int) -> torch.Tensor:
    """The rows ``input`` of a 4-bit table [num_embeddings, embedding_dim], dequantized in the state's dtype.

    Where the blocksize divides embedding_dim (and absmax is not nested) only the gathered rows' blocks are
    dequantized; otherwise the whole table is, as bitsandbytes does.
    """
    qs = quant_state
    blocksize = qs.blocksize
    if embedding_dim % blocksize != 0 or qs.state2 is not None:
        table = ops.dequantize_4bit(packed, qs)
        return torch.nn.functional.embedding(input, table.view(num_embeddings, embedding_dim))
    half = embedding_dim // 2
    # the codes are bytes whatever quant_storage holds them; padding past the table is never gathered
    codes = packed.reshape(-1).view(torch.uint8)[: num_embeddings * half].view(num_embeddings, half)
    blocks = embedding_dim // blocksize
    rows = torch.nn.functional.embedding(input.reshape(-1), codes)
    absmax = torch.nn.functional.embedding(input.reshape(-1), qs.absmax.view(num_embeddings, blocks))
    n = rows.shape[0]
    if n == 0:
        return torch.empty(*input.shape, embedding_dim, dtype=qs.dtype, device=packed.device)
    part = QuantState(absmax=absmax.reshape(-1), shape=(n, embedding_dim), code=qs.code, blocksize=blocksize,
                      quant_type=qs.quant_type, dtype=qs.dtype)
    return ops.dequantize_4bit(rows.reshape(-1, 1), part).view(*input.shape, embedding_dim)


def matmul_4bit(x: torch.Tensor, packed: torch.Tensor, quant_state: QuantState,
                bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x · dequantize_4bit(packed)ᵀ + bias`` in x's dtype."""
    return ops.matmul_4bit(x, packed, quant_state, bias)


# ----------------------------------------------------------------- int8


def int8_vectorwise_quant(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(CB int8 [N, K], SCB float32 [N]) of a weight; the op, as ``Linear8bitLt`` with ``has_fp16_weights``
    quantizes its weight at each forward (threshold 0: no outlier columns, nothing read back)."""
    CB, SCB, _ = ops.int8_vectorwise_quant(w)
    return CB, SCB


def int8_vectorwise_dequant(CB: torch.Tensor, SCB: torch.Tensor) -> torch.Tensor:
    """The float32 weight ``CB · SCB / 127`` of int8 rows CB [N, K] and their absmax SCB [N]."""
    return ops.int8_vectorwise_dequant(CB, SCB, dtype=torch.float32)


def embedding_int8(input: torch.Tensor, CB: torch.Tensor, SCB: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The rows ``input`` of an int8 table ``CB`` [V, D] with row absmax ``SCB`` [V], as ``CB · SCB / 127`` in
    float32 math, then ``dtype``; only the gathered rows are dequantized."""
    dim = CB.shape[1]
    flat = input.reshape(-1)
    rows = torch.nn.functional.embedding(flat, CB)
    stats = torch.nn.functional.embedding(flat, SCB.view(-1, 1)).view(-1)
    out_dtype = dtype if dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32
    out = ops.int8_vectorwise_dequant(rows, stats, dtype=out_dtype)
    return out.to(dtype).view(*input.shape, dim)


def int8_linear(x: torch.Tensor, CB: torch.Tensor, SCB: torch.Tensor, bias: Optional[torch.Tensor],
                threshold: float) -> torch.Tensor:
    """LLM.int8's ``x · (CB · SCB / 127)ᵀ + bias`` in x's dtype, outlier columns above threshold in float."""
    return ops.int8_linear(x, CB, SCB, bias, threshold)


# ------------------------------------------------------------------ FP8


def weight_quant(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 [N, K], float32 scales [⌈N/128⌉, ⌈K/128⌉]) of a weight."""
    return F.weight_quant(w, _FP8_BLOCK)


def weight_dequant(weight: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return F.weight_dequant(weight, scale_inv, _FP8_BLOCK, dtype=dtype)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale_inv: torch.Tensor,
               bias: Optional[torch.Tensor]) -> torch.Tensor:
    """DeepSeek's FP8 linear: ``act_quant(x)`` in 1x128 blocks (K padded with zeros to the block), then
    ``fp8_gemm``; x's dtype out."""
    return ops.fp8_linear(x, weight, weight_scale_inv, bias)


# ------------------------------------------------------ mixed-precision matmul


def matmul(mm: Matmul, x: torch.Tensor, packed: PackedWeight, output: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x · dequant(packed)ᵀ (+ its bias)`` in the config's out_dtype (into ``output`` when given)."""
    return ops.matmul(mm, x, packed, output)
