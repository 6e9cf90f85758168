"""lowbit's ops as PyTorch custom ops (``torch.ops.lowbit``), for models under ``torch.compile``,
``torch.export`` and CUDA graphs (docs/torch.md).

``import lowbit.ops`` registers them (it imports torch; ``import lowbit`` does not). The functions here take
and return what ``lowbit.functional``'s of the same name do — a ``QuantState``, a ``Matmul`` and its
``PackedWeight``, a BSR — and call the op with those objects' fields, so::

    import lowbit.ops as ops
    out = ops.matmul_4bit(A, packed, quant_state, bias)    # torch.ops.lowbit.matmul_4bit(A, packed, absmax, ...)

``matmul_4bit``, ``gemv_4bit``, ``matmul``, ``int8_linear``, ``fp8_linear`` and ``bsr_dense_mm`` are
differentiable in their activations (and bias; the BSR's values too): the gradient runs through the
dequantized weight, which gets none.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import sparse as _sparse
from .._matmul import Matmul, PackedWeight
from .._quant_state import QuantState
from . import _defs, _grad

_grad.register()

__all__ = [
    "act_quant", "bsr_dense_mm", "dequantize_4bit", "dequantize_blockwise", "dequantize_fp4", "dequantize_nf4",
    "flash_attention", "flash_attention_kvcache", "flash_attention_varlen", "fp8_gemm", "fp8_linear", "gemv_4bit",
    "int8_linear", "int8_linear_grad_input", "int8_linear_matmul", "int8_mm_dequant", "int8_scaled_mm",
    "int8_vectorwise_dequant", "int8_vectorwise_quant", "matmul", "matmul_4bit", "quantize_4bit",
    "quantize_blockwise", "quantize_fp4", "quantize_nf4", "weight_dequant", "weight_quant",
]

OPS = _defs.OPS
_ops = torch.ops.lowbit


def _no_buffers(op: str, **given: Any) -> None:
    """Buffers the op cannot fill (a custom op returns new tensors): refused by name."""
    names = [name for name, x in given.items() if x is not None]
    if names:
        raise ValueError(f"{op}: {', '.join(names)} must be None with lowbit.ops (its ops return new tensors; "
                         f"lowbit.functional takes buffers)")


def _into(out: Optional[Tensor], result: Tensor) -> Tensor:
    """result, or out filled with it (the functional call's out=)."""
    if out is None:
        return result
    return out.copy_(result)


def _state_fields(op: str, qs: Any) -> tuple:
    """(absmax, blocksize, nested absmax, nested code, offset, nested blocksize) of a QuantState."""
    if qs is None:
        raise ValueError(f"{op}: the quant state is required (got None); it comes from quantize_4bit")
    if not hasattr(qs, "absmax"):
        raise TypeError(f"{op}: the quant state must be a QuantState (got {type(qs).__name__})")
    if getattr(qs, "nested", False):
        s2 = qs.state2
        return qs.absmax, s2.absmax, s2.code, qs.offset, s2.blocksize if s2.blocksize is not None else 256
    return qs.absmax, None, None, None, 256


def _dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, str(dtype).replace("torch.", ""))


def _shape(op: str, qs: Any) -> list:
    if qs.shape is None:
        raise ValueError(f"{op}: quant_state.shape is required (got None)")
    return list(qs.shape)


# ------------------------------------------------------------------ 4-bit


def quantize_4bit(A: Tensor, absmax: None = None, out: None = None, blocksize: int = 64,
                  compress_statistics: bool = False, quant_type: str = "fp4",
                  quant_storage: Any = None) -> Tuple[Tensor, QuantState]:
    """``lowbit.functional.quantize_4bit`` as the op ``lowbit::quantize_4bit`` (no absmax=/out= buffers)."""
    _no_buffers("quantize_4bit", absmax=absmax, out=out)
    packed, amax, code, offset, amax2, code2 = _ops.quantize_4bit(A, blocksize, compress_statistics, quant_type)
    state2 = None
    if compress_statistics:
        state2 = QuantState(absmax=amax2, code=code2, blocksize=256, dtype=torch.float32)
    qs = QuantState(absmax=amax, shape=tuple(A.shape), code=code, blocksize=blocksize, quant_type=quant_type,
                    dtype=A.dtype, offset=offset if compress_statistics else None, state2=state2)
    if quant_storage is not None and quant_storage != torch.uint8:
        packed = packed.view(-1).view(quant_storage).view(-1, 1)
    return packed, qs


def quantize_fp4(A: Tensor, absmax: None = None, out: None = None, blocksize: int = 64,
                 compress_statistics: bool = False, quant_storage: Any = None) -> Tuple[Tensor, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="fp4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "fp4", quant_storage)


def quantize_nf4(A: Tensor, absmax: None = None, out: None = None, blocksize: int = 64,
                 compress_statistics: bool = False, quant_storage: Any = None) -> Tuple[Tensor, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="nf4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "nf4", quant_storage)


def dequantize_4bit(A: Tensor, quant_state: Optional[QuantState] = None, absmax: Optional[Tensor] = None,
                    out: Optional[Tensor] = None, blocksize: int = 64, quant_type: str = "fp4") -> Tensor:
    """``lowbit.functional.dequantize_4bit`` as the op ``lowbit::dequantize_4bit``."""
    if quant_state is None:
        if absmax is None or out is None:
            raise ValueError("dequantize_4bit: without quant_state, absmax and out are both required")
        quant_state = QuantState(absmax=absmax, shape=tuple(out.shape), dtype=out.dtype, blocksize=blocksize,
                                 quant_type=quant_type)
    qs = quant_state
    amax, amax2, code2, offset, bs2 = _state_fields("dequantize_4bit", qs)
    dtype = out.dtype if out is not None else _dtype(qs.dtype if qs.dtype is not None else torch.float32)
    r = _ops.dequantize_4bit(A, amax, qs.blocksize or blocksize, qs.quant_type or quant_type,
                             _shape("dequantize_4bit", qs), dtype, amax2, code2, offset, bs2)
    return _into(out, r)


def dequantize_fp4(A: Tensor, quant_state: Optional[QuantState] = None, absmax: Optional[Tensor] = None,
                   out: Optional[Tensor] = None, blocksize: int = 64) -> Tensor:
    """:func:`dequantize_4bit` with ``quant_type="fp4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "fp4")


def dequantize_nf4(A: Tensor, quant_state: Optional[QuantState] = None, absmax: Optional[Tensor] = None,
                   out: Optional[Tensor] = None, blocksize: int = 64) -> Tensor:
    """:func:`dequantize_4bit` with ``quant_type="nf4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "nf4")


def _matmul_4bit(op: Any, name: str, A: Tensor, B: Tensor, qs: Any, bias: Optional[Tensor],
                 out: Optional[Tensor]) -> Tensor:
    amax, amax2, code2, offset, bs2 = _state_fields(name, qs)
    dtype = _dtype(qs.dtype if qs.dtype is not None else torch.float32)
    r = op(A, B, amax, qs.blocksize or 64, qs.quant_type or "", _shape(name, qs), dtype, amax2, code2, offset, bs2,
           bias)
    return _into(out, r)


def matmul_4bit(A: Tensor, B: Tensor, quant_state: QuantState, bias: Optional[Tensor] = None, *,
                out: Optional[Tensor] = None) -> Tensor:
    """``lowbit.functional.matmul_4bit`` as the op ``lowbit::matmul_4bit``; differentiable in A and bias."""
    return _matmul_4bit(_ops.matmul_4bit, "matmul_4bit", A, B, quant_state, bias, out)


def gemv_4bit(A: Tensor, B: Tensor, state: QuantState, bias: Optional[Tensor] = None, *,
              out: Optional[Tensor] = None) -> Tensor:
    """``lowbit.functional.gemv_4bit`` as the op ``lowbit::gemv_4bit``; differentiable in A and bias."""
    return _matmul_4bit(_ops.gemv_4bit, "gemv_4bit", A, B, state, bias, out)


# ------------------------------------------------------- 8-bit blockwise


def quantize_blockwise(A: Tensor, code: Optional[Tensor] = None, absmax: None = None, out: None = None,
                       blocksize: int = 4096, nested: bool = False) -> Tuple[Tensor, QuantState]:
    """``lowbit.functional.quantize_blockwise`` as the op ``lowbit::quantize_blockwise`` (no absmax=/out=)."""
    _no_buffers("quantize_blockwise", absmax=absmax, out=out)
    q, amax, code_out, offset, amax2, code2 = _ops.quantize_blockwise(A, code, blocksize, nested)
    state2 = QuantState(absmax=amax2, code=code2, blocksize=256, dtype=torch.float32) if nested else None
    qs = QuantState(absmax=amax, shape=tuple(A.shape), code=code_out if code is None else code, blocksize=blocksize,
                    dtype=A.dtype, offset=offset if nested else None, state2=state2)
    return q, qs


def dequantize_blockwise(A: Tensor, quant_state: Optional[QuantState] = None, absmax: Optional[Tensor] = None,
                         code: Optional[Tensor] = None, out: Optional[Tensor] = None, blocksize: int = 4096,
                         nested: bool = False) -> Tensor:
    """``lowbit.functional.dequantize_blockwise`` as the op ``lowbit::dequantize_blockwise``."""
    if quant_state is None:
        if absmax is None:
            raise ValueError("dequantize_blockwise: quant_state or absmax is required (got neither)")
        quant_state = QuantState(absmax=absmax, code=code, blocksize=blocksize, dtype=torch.float32)
    qs = quant_state
    amax, amax2, code2, offset, bs2 = _state_fields("dequantize_blockwise", qs)
    dtype = out.dtype if out is not None else _dtype(qs.dtype if qs.dtype is not None else torch.float32)
    r = _ops.dequantize_blockwise(A, amax, qs.code, qs.blocksize or blocksize, dtype, amax2, code2, offset, bs2)
    return _into(out, r)


# ------------------------------------------------------------------ int8


def int8_vectorwise_quant(A: Tensor, threshold: float = 0.0) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """``lowbit.functional.int8_vectorwise_quant`` through ``lowbit::int8_vectorwise_quant``, whose third output
    is a bool [K] outlier mask; with ``threshold > 0`` it becomes the int64 column list here (``nonzero``: a
    read-back, as in the functional call and bitsandbytes)."""
    values, stats, mask = _ops.int8_vectorwise_quant(A, threshold)
    return values, stats, torch.nonzero(mask).flatten() if threshold > 0 else None


def int8_linear(A: Tensor, CB: Tensor, SCB: Tensor, bias: Optional[Tensor] = None, threshold: float = 0.0) -> Tensor:
    """``lowbit.functional.int8_linear`` as the op ``lowbit::int8_linear``; differentiable in A (through
    ``int8_linear_grad_input``) and bias."""
    return _ops.int8_linear(A, CB, SCB, bias, threshold)


def int8_linear_grad_input(grad_output: Tensor, CB: Tensor, SCB: Tensor) -> Tensor:
    """``lowbit.functional.int8_linear_grad_input`` as the op ``lowbit::int8_linear_grad_input``."""
    return _ops.int8_linear_grad_input(grad_output, CB, SCB)


def int8_vectorwise_dequant(A: Tensor, stats: Tensor, *, dtype: Any = None) -> Tensor:
    """``lowbit.functional.int8_vectorwise_dequant`` as the op ``lowbit::int8_vectorwise_dequant`` (float32 by
    default)."""
    return _ops.int8_vectorwise_dequant(A, stats, _dtype(dtype) if dtype is not None else torch.float32)


def int8_linear_matmul(A: Tensor, B: Tensor, out: Optional[Tensor] = None, dtype: Any = torch.int32) -> Tensor:
    """``lowbit.functional.int8_linear_matmul`` as the op ``lowbit::int8_linear_matmul`` (int32 only)."""
    if _dtype(dtype) != torch.int32:
        raise ValueError(f"int8_linear_matmul: dtype must be int32 (got {dtype})")
    return _into(out, _ops.int8_linear_matmul(A, B))


def int8_mm_dequant(A: Tensor, row_stats: Tensor, col_stats: Tensor, out: Optional[Tensor] = None,
                    bias: Optional[Tensor] = None, *, dtype: Any = None) -> Tensor:
    """``lowbit.functional.int8_mm_dequant`` as the op ``lowbit::int8_mm_dequant`` (float16 by default)."""
    dtype = out.dtype if out is not None else (_dtype(dtype) if dtype is not None else torch.float16)
    return _into(out, _ops.int8_mm_dequant(A, row_stats, col_stats, bias, dtype))


def int8_scaled_mm(A: Tensor, B: Tensor, row_stats: Tensor, col_stats: Tensor, bias: Optional[Tensor] = None,
                   dtype: Any = None, out: Optional[Tensor] = None) -> Tensor:
    """``lowbit.functional.int8_scaled_mm`` as the op ``lowbit::int8_scaled_mm`` (float16 by default)."""
    dtype = out.dtype if out is not None else (_dtype(dtype) if dtype is not None else torch.float16)
    return _into(out, _ops.int8_scaled_mm(A, B, row_stats, col_stats, bias, dtype))


# ------------------------------------------------------------------- FP8


def act_quant(x: Tensor, block_size: int = 128, scale_fmt: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """``lowbit.functional.act_quant`` as the op ``lowbit::act_quant``."""
    return _ops.act_quant(x, block_size, scale_fmt)


def weight_quant(x: Tensor, block_size: int = 128) -> Tuple[Tensor, Tensor]:
    """``lowbit.functional.weight_quant`` as the op ``lowbit::weight_quant``."""
    return _ops.weight_quant(x, block_size)


def weight_dequant(x: Tensor, s: Tensor, block_size: int = 128, *, dtype: Any = None) -> Tensor:
    """``lowbit.functional.weight_dequant`` as the op ``lowbit::weight_dequant`` (torch's default dtype by
    default, as DeepSeek's kernel)."""
    return _ops.weight_dequant(x, s, block_size, _dtype(dtype) if dtype is not None else torch.get_default_dtype())


def fp8_gemm(a: Tensor, a_s: Tensor, b: Tensor, b_s: Tensor, out_dtype: Any = None, bias: Optional[Tensor] = None,
             out: Optional[Tensor] = None) -> Tensor:
    """``lowbit.functional.fp8_gemm`` as the op ``lowbit::fp8_gemm`` (torch's default dtype by default)."""
    if out is not None:
        dtype = out.dtype
    else:
        dtype = _dtype(out_dtype) if out_dtype is not None else torch.get_default_dtype()
    return _into(out, _ops.fp8_gemm(a, a_s, b, b_s, dtype, bias))


def fp8_linear(x: Tensor, weight: Tensor, weight_scale_inv: Tensor, bias: Optional[Tensor] = None,
               scale_fmt: Optional[str] = None) -> Tensor:
    """DeepSeek-V3's FP8 ``linear``: ``fp8_gemm(*act_quant(x, 128, scale_fmt), weight, weight_scale_inv)`` in
    x's dtype, plus ``bias`` [N] (as float32) inside the GEMM; x's K may be any multiple of 16 (zeros pad the
    last block for act_quant). Differentiable in x (through ``weight_dequant``) and bias."""
    return _ops.fp8_linear(x, weight, weight_scale_inv, bias, scale_fmt)


# ------------------------------------------------------------- attention


def flash_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False, scale: Optional[float] = None,
                    out: Optional[Tensor] = None, return_lse: bool = False, *, k_layout: str = "bshd",
                    lse: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """``lowbit.functional.flash_attention`` as the op ``lowbit::flash_attention`` (forward only)."""
    o, l_ = _ops.flash_attention(q, k, v, is_causal, scale, k_layout, return_lse)
    return _attention_result("flash_attention", o, l_, out, lse, return_lse)


def flash_attention_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
                            block_table: Optional[Tensor] = None, is_causal: bool = False,
                            scale: Optional[float] = None, out: Optional[Tensor] = None, return_lse: bool = False, *,
                            lse: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """``lowbit.functional.flash_attention_kvcache`` as the op ``lowbit::flash_attention_kvcache``."""
    o, l_ = _ops.flash_attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale,
                                         return_lse)
    return _attention_result("flash_attention_kvcache", o, l_, out, lse, return_lse)


def flash_attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           is_causal: bool = False, scale: Optional[float] = None, out: Optional[Tensor] = None,
                           return_lse: bool = False, *,
                           lse: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """``lowbit.functional.flash_attention_varlen`` as the op ``lowbit::flash_attention_varlen``."""
    o, l_ = _ops.flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, is_causal, scale, return_lse)
    return _attention_result("flash_attention_varlen", o, l_, out, lse, return_lse)


def _attention_result(op: str, o: Tensor, l_: Tensor, out: Optional[Tensor], lse: Optional[Tensor],
                      return_lse: bool) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    if lse is not None and out is None:
        raise ValueError(f"{op}: lse= needs out= (without out, return_lse=True returns a new one)")
    o = _into(out, o)
    if not return_lse:
        return o
    return o, _into(lse, l_)


# ---------------------------------------------------------------- sparse


def bsr_dense_mm(bsr: Any, dense: Tensor, *, out: Optional[Tensor] = None, skip_checks: bool = False,
                 max_grid: Any = None, meta: Any = None) -> Tensor:
    """``lowbit.sparse.bsr_dense_mm`` as the op ``lowbit::bsr_dense_mm`` (on the BSR's crow/col indices,
    values and shape): differentiable in ``dense`` and in the values of a ``lowbit.sparse.BSR``."""
    crow, col, values, M, K = _sparse._parts("bsr_dense_mm", bsr)
    return _into(out, _ops.bsr_dense_mm(crow, col, values, M, K, dense))


# ------------------------------------------------------ mixed-precision matmul


def matmul(mm: Matmul, A: Tensor, W: PackedWeight, output: Optional[Tensor] = None) -> Tensor:
    """``mm(A, W)`` (``Matmul.forward``) as the op ``lowbit::matmul``, which names W by its key; differentiable
    in A (through the dequantized weight). ``mm`` is the Matmul that packed W."""
    key = getattr(W, "_key", None)
    if key is None:
        raise TypeError(f"matmul: W must be a lowbit.PackedWeight from Matmul.transform_weight "
                        f"(got {type(W).__name__})")
    k, N, _, out_dtype = key
    return _into(output, _ops.matmul(A, k, N, _dtype(out_dtype)))
