"""The ``lowbit::`` torch custom ops: each runs the lowbit functional call on real tensors and has a fake
implementation that gives its outputs' shapes, dtypes and devices from the inputs' alone.

Signatures take tensors and plain scalars only: a QuantState is passed as its fields (the nested ones None
when it is not nested), a packed Matmul weight as its key (``PackedWeight._key``). Results are the tensors the
functional call returns: allocated by torch's allocator on CUDA (the binding's framework allocator), on the
current stream. Optional outputs that a call does not make are empty tensors, so every op has one schema.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .. import _lowbit, _matmul, functional as F, sparse as _sparse
from .._arrays import Call
from .._quant_state import QuantState

NS = "lowbit"
_NONE: Tuple[()] = ()


def _op(name: str):
    """torch.library.custom_op, or the op already defined under the name (this module imported again: a
    reload, or sys.modules cleared), so that importing twice is fine."""
    existing = getattr(torch._library.custom_ops, "OPDEFS", {}).get(f"{NS}::{name}")
    if existing is not None:
        return lambda fn: existing
    return torch.library.custom_op(f"{NS}::{name}", mutates_args=_NONE)


def _empty(like: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The stand-in for an output the call does not make."""
    return like.new_empty((0,), dtype=dtype)


def _nested(quant_type: Optional[str], absmax: Tensor, blocksize: int, shape: Sequence[int], dtype: torch.dtype,
            nested_absmax: Optional[Tensor], nested_code: Optional[Tensor], offset: Optional[Tensor],
            nested_blocksize: int, code: Optional[Tensor] = None) -> QuantState:
    """The QuantState the flattened fields stand for."""
    state2 = None
    if nested_absmax is not None:
        state2 = QuantState(absmax=nested_absmax, code=nested_code, blocksize=nested_blocksize, dtype=torch.float32)
    return QuantState(absmax=absmax, shape=tuple(shape), code=code, blocksize=blocksize, quant_type=quant_type,
                      dtype=dtype, offset=offset, state2=state2)


# ------------------------------------------------------------------ 4-bit


@_op("quantize_4bit")
def quantize_4bit(A: Tensor, blocksize: int, compress_statistics: bool,
                  quant_type: str) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(packed uint8 [(n + 1) // 2, 1], absmax, code [16], offset [], nested absmax, nested code [256])."""
    packed, qs = F.quantize_4bit(A, blocksize=blocksize, compress_statistics=compress_statistics,
                                 quant_type=quant_type)
    if not qs.nested:
        return packed, qs.absmax, qs.code.clone(), _empty(A), _empty(A), _empty(A)
    return packed, qs.absmax, qs.code.clone(), qs.offset, qs.state2.absmax, qs.state2.code.clone()


@quantize_4bit.register_fake
def _(A, blocksize, compress_statistics, quant_type):
    n = A.numel()
    blocks = -(-n // blocksize)
    packed = A.new_empty(((n + 1) // 2, 1), dtype=torch.uint8)
    code = A.new_empty((16,), dtype=torch.float32)
    if not compress_statistics:
        return packed, A.new_empty((blocks,), dtype=torch.float32), code, _empty(A), _empty(A), _empty(A)
    return (packed, A.new_empty((blocks,), dtype=torch.uint8), code, A.new_empty((), dtype=torch.float32),
            A.new_empty((-(-blocks // 256),), dtype=torch.float32), A.new_empty((256,), dtype=torch.float32))


@_op("dequantize_4bit")
def dequantize_4bit(A: Tensor, absmax: Tensor, blocksize: int, quant_type: str, shape: List[int], dtype: torch.dtype,
                    nested_absmax: Optional[Tensor], nested_code: Optional[Tensor], offset: Optional[Tensor],
                    nested_blocksize: int) -> Tensor:
    qs = _nested(quant_type, absmax, blocksize, shape, dtype, nested_absmax, nested_code, offset, nested_blocksize)
    return F.dequantize_4bit(A, qs)


@dequantize_4bit.register_fake
def _(A, absmax, blocksize, quant_type, shape, dtype, nested_absmax, nested_code, offset, nested_blocksize):
    return A.new_empty(tuple(shape), dtype=dtype)


def _matmul_4bit_impl(fn, A, B, absmax, blocksize, quant_type, shape, dtype, nested_absmax, nested_code, offset,
                      nested_blocksize, bias):
    qs = _nested(quant_type, absmax, blocksize, shape, dtype, nested_absmax, nested_code, offset, nested_blocksize)
    return fn(A, B, qs, bias)


def _matmul_4bit_fake(A, B, absmax, blocksize, quant_type, shape, dtype, nested_absmax, nested_code, offset,
                      nested_blocksize, bias):
    return A.new_empty(tuple(A.shape[:-1]) + (shape[0],))


@_op("matmul_4bit")
def matmul_4bit(A: Tensor, B: Tensor, absmax: Tensor, blocksize: int, quant_type: str, shape: List[int],
                dtype: torch.dtype, nested_absmax: Optional[Tensor], nested_code: Optional[Tensor],
                offset: Optional[Tensor], nested_blocksize: int, bias: Optional[Tensor]) -> Tensor:
    return _matmul_4bit_impl(F.matmul_4bit, A, B, absmax, blocksize, quant_type, shape, dtype, nested_absmax,
                             nested_code, offset, nested_blocksize, bias)


@_op("gemv_4bit")
def gemv_4bit(A: Tensor, B: Tensor, absmax: Tensor, blocksize: int, quant_type: str, shape: List[int],
              dtype: torch.dtype, nested_absmax: Optional[Tensor], nested_code: Optional[Tensor],
              offset: Optional[Tensor], nested_blocksize: int, bias: Optional[Tensor]) -> Tensor:
    return _matmul_4bit_impl(F.gemv_4bit, A, B, absmax, blocksize, quant_type, shape, dtype, nested_absmax,
                             nested_code, offset, nested_blocksize, bias)


matmul_4bit.register_fake(_matmul_4bit_fake)
gemv_4bit.register_fake(_matmul_4bit_fake)


# ------------------------------------------------------- 8-bit blockwise


@_op("quantize_blockwise")
def quantize_blockwise(A: Tensor, code: Optional[Tensor], blocksize: int,
                       nested: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(codes uint8 of A's shape, absmax, code [256] (empty when given), offset [], nested absmax, nested code)."""
    q, qs = F.quantize_blockwise(A, code=code, blocksize=blocksize, nested=nested)
    code_out = qs.code.clone() if code is None else _empty(A)
    if not qs.nested:
        return q, qs.absmax, code_out, _empty(A), _empty(A), _empty(A)
    return q, qs.absmax, code_out, qs.offset, qs.state2.absmax, qs.state2.code.clone()


@quantize_blockwise.register_fake
def _(A, code, blocksize, nested):
    blocks = -(-A.numel() // blocksize)
    f32 = torch.float32
    q = A.new_empty(A.shape, dtype=torch.uint8)
    code_out = A.new_empty((256,), dtype=f32) if code is None else _empty(A)
    if not nested:
        return q, A.new_empty((blocks,), dtype=f32), code_out, _empty(A), _empty(A), _empty(A)
    return (q, A.new_empty((blocks,), dtype=torch.uint8), code_out, A.new_empty((), dtype=f32),
            A.new_empty((-(-blocks // 256),), dtype=f32), A.new_empty((256,), dtype=f32))


@_op("dequantize_blockwise")
def dequantize_blockwise(A: Tensor, absmax: Tensor, code: Optional[Tensor], blocksize: int, dtype: torch.dtype,
                         nested_absmax: Optional[Tensor], nested_code: Optional[Tensor], offset: Optional[Tensor],
                         nested_blocksize: int) -> Tensor:
    qs = _nested(None, absmax, blocksize, A.shape, dtype, nested_absmax, nested_code, offset, nested_blocksize,
                 code=code)
    return F.dequantize_blockwise(A, qs)


@dequantize_blockwise.register_fake
def _(A, absmax, code, blocksize, dtype, nested_absmax, nested_code, offset, nested_blocksize):
    return A.new_empty(A.shape, dtype=dtype)


# ------------------------------------------------------------------ int8


@_op("int8_vectorwise_quant")
def int8_vectorwise_quant(A: Tensor, threshold: float) -> Tuple[Tensor, Tensor, Tensor]:
    """(int8 of A's shape, row_stats [rows], outlier mask bool [K]): the mask, not the columns, so that no
    output's shape depends on the data and nothing is read back."""
    call = Call("int8_vectorwise_quant", A, "A")
    values, stats, _ = _lowbit.int8_vectorwise_quant(call.arg(A, "A"), float(threshold), call.ctx, False)
    K = A.shape[-1] if A.dim() else 1
    if threshold > 0:
        mask = (A.reshape(-1, K).abs() >= threshold).any(0)
    else:
        mask = torch.zeros((K,), dtype=torch.bool, device=A.device)
    result = call.result(values), call.result(stats), mask
    call.done()
    return result


@int8_vectorwise_quant.register_fake
def _(A, threshold):
    K = A.shape[-1] if A.dim() else 1
    rows = A.numel() // K if K else 0
    return (A.new_empty(A.shape, dtype=torch.int8), A.new_empty((rows,), dtype=torch.float32),
            A.new_empty((K,), dtype=torch.bool))


@_op("int8_linear")
def int8_linear(A: Tensor, CB: Tensor, SCB: Tensor, bias: Optional[Tensor], threshold: float) -> Tensor:
    return F.int8_linear(A, CB, SCB, bias, threshold)


@int8_linear.register_fake
def _(A, CB, SCB, bias, threshold):
    return A.new_empty(tuple(A.shape[:-1]) + (CB.shape[0],))


@_op("int8_linear_grad_input")
def int8_linear_grad_input(grad_output: Tensor, CB: Tensor, SCB: Tensor) -> Tensor:
    return F.int8_linear_grad_input(grad_output, CB, SCB)


@int8_linear_grad_input.register_fake
def _(grad_output, CB, SCB):
    return grad_output.new_empty(tuple(grad_output.shape[:-1]) + (CB.shape[-1],))


@_op("int8_linear_matmul")
def int8_linear_matmul(A: Tensor, B: Tensor) -> Tensor:
    return F.int8_linear_matmul(A, B)


@int8_linear_matmul.register_fake
def _(A, B):
    return A.new_empty(tuple(A.shape[:-1]) + (B.shape[0],), dtype=torch.int32)


@_op("int8_mm_dequant")
def int8_mm_dequant(A: Tensor, row_stats: Tensor, col_stats: Tensor, bias: Optional[Tensor],
                    dtype: torch.dtype) -> Tensor:
    return F.int8_mm_dequant(A, row_stats, col_stats, bias=bias, dtype=dtype)


@int8_mm_dequant.register_fake
def _(A, row_stats, col_stats, bias, dtype):
    return A.new_empty(A.shape, dtype=dtype)


@_op("int8_vectorwise_dequant")
def int8_vectorwise_dequant(A: Tensor, stats: Tensor, dtype: torch.dtype) -> Tensor:
    return F.int8_vectorwise_dequant(A, stats, dtype=dtype)


@int8_vectorwise_dequant.register_fake
def _(A, stats, dtype):
    return A.new_empty(A.shape, dtype=dtype)


@_op("int8_scaled_mm")
def int8_scaled_mm(A: Tensor, B: Tensor, row_stats: Tensor, col_stats: Tensor, bias: Optional[Tensor],
                   dtype: torch.dtype) -> Tensor:
    return F.int8_scaled_mm(A, B, row_stats, col_stats, bias, dtype)


@int8_scaled_mm.register_fake
def _(A, B, row_stats, col_stats, bias, dtype):
    return A.new_empty(tuple(A.shape[:-1]) + (B.shape[0],), dtype=dtype)


# ------------------------------------------------------------------- FP8


@_op("act_quant")
def act_quant(x: Tensor, block_size: int, scale_fmt: Optional[str]) -> Tuple[Tensor, Tensor]:
    return F.act_quant(x, block_size, scale_fmt)


@act_quant.register_fake
def _(x, block_size, scale_fmt):
    shape = tuple(x.shape)
    return (x.new_empty(shape, dtype=torch.float8_e4m3fn),
            x.new_empty(shape[:-1] + (shape[-1] // block_size,), dtype=torch.float32))


@_op("weight_quant")
def weight_quant(x: Tensor, block_size: int) -> Tuple[Tensor, Tensor]:
    return F.weight_quant(x, block_size)


@weight_quant.register_fake
def _(x, block_size):
    N, K = x.shape[-2], x.shape[-1]
    return (x.new_empty((N, K), dtype=torch.float8_e4m3fn),
            x.new_empty((-(-N // block_size), -(-K // block_size)), dtype=torch.float32))


@_op("weight_dequant")
def weight_dequant(x: Tensor, s: Tensor, block_size: int, dtype: torch.dtype) -> Tensor:
    return F.weight_dequant(x, s, block_size, dtype=dtype)


@weight_dequant.register_fake
def _(x, s, block_size, dtype):
    return x.new_empty(x.shape, dtype=dtype)


@_op("fp8_gemm")
def fp8_gemm(a: Tensor, a_s: Tensor, b: Tensor, b_s: Tensor, out_dtype: torch.dtype, bias: Optional[Tensor]) -> Tensor:
    return F.fp8_gemm(a, a_s, b, b_s, out_dtype, bias)


@fp8_gemm.register_fake
def _(a, a_s, b, b_s, out_dtype, bias):
    return a.new_empty(tuple(a.shape[:-1]) + (b.shape[0],), dtype=out_dtype)


@_op("fp8_linear")
def fp8_linear(x: Tensor, weight: Tensor, weight_scale_inv: Tensor, bias: Optional[Tensor],
               scale_fmt: Optional[str]) -> Tensor:
    """DeepSeek's FP8 Linear: x quantized by act_quant (blocks of 128), times the block-scaled weight; x's dtype.
    A K that is not a multiple of 128 is padded with zeros for act_quant (a zero leaves a block's amax as it is)
    and the codes cut back to K; the bias goes into the GEMM as float32."""
    K = x.shape[-1]
    pad = -K % 128
    y, s = F.act_quant(torch.nn.functional.pad(x, (0, pad)) if pad else x, 128, scale_fmt)
    if pad:
        y = y[..., :K].contiguous()
    if bias is not None and bias.dtype != torch.float32:
        bias = bias.float()
    return F.fp8_gemm(y, s, weight, weight_scale_inv, x.dtype, bias)


@fp8_linear.register_fake
def _(x, weight, weight_scale_inv, bias, scale_fmt):
    return x.new_empty(tuple(x.shape[:-1]) + (weight.shape[0],))


# ------------------------------------------------------------- attention


@_op("flash_attention")
def flash_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: Optional[float], k_layout: str,
                    return_lse: bool) -> Tuple[Tensor, Tensor]:
    """(out, lse float32 [B, H, Sq], or empty without return_lse)."""
    r = F.flash_attention(q, k, v, is_causal, scale, return_lse=return_lse, k_layout=k_layout)
    return r if return_lse else (r, _empty(q))


@flash_attention.register_fake
def _(q, k, v, is_causal, scale, k_layout, return_lse):
    B, Sq, H, _ = q.shape
    lse = q.new_empty((B, H, Sq), dtype=torch.float32) if return_lse else _empty(q)
    return q.new_empty((B, Sq, H, v.shape[-1])), lse


@_op("flash_attention_kvcache")
def flash_attention_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
                            block_table: Optional[Tensor], is_causal: bool, scale: Optional[float],
                            return_lse: bool) -> Tuple[Tensor, Tensor]:
    r = F.flash_attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale,
                                  return_lse=return_lse)
    return r if return_lse else (r, _empty(q))


@flash_attention_kvcache.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale, return_lse):
    B, Sq, H, _ = q.shape
    lse = q.new_empty((B, H, Sq), dtype=torch.float32) if return_lse else _empty(q)
    return q.new_empty((B, Sq, H, v_cache.shape[-1])), lse


@_op("flash_attention_varlen")
def flash_attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           is_causal: bool, scale: Optional[float], return_lse: bool) -> Tuple[Tensor, Tensor]:
    """(out [total_q, H, Dv], lse float32 [H, total_q] or empty)."""
    r = F.flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, is_causal, scale, return_lse=return_lse)
    return r if return_lse else (r, _empty(q))


@flash_attention_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, is_causal, scale, return_lse):
    total, H, _ = q.shape
    lse = q.new_empty((H, total), dtype=torch.float32) if return_lse else _empty(q)
    return q.new_empty((total, H, v.shape[-1])), lse


# ---------------------------------------------------------------- sparse


@_op("bsr_dense_mm")
def bsr_dense_mm(crow_indices: Tensor, col_indices: Tensor, values: Tensor, M: int, K: int, dense: Tensor) -> Tensor:
    bsr = _sparse.BSR(crow_indices, col_indices, values, tuple(values.shape[:-3]) + (M, K))
    return _sparse.bsr_dense_addmm(None, bsr, dense, beta=0, alpha=1)


def _bsr_out_shape(values: Tensor, M: int, dense: Tensor) -> Tuple[int, ...]:
    batch = torch.broadcast_shapes(tuple(values.shape[:-3]), tuple(dense.shape[:-2]))
    return tuple(batch) + (M, dense.shape[-1])


@bsr_dense_mm.register_fake
def _(crow_indices, col_indices, values, M, K, dense):
    return values.new_empty(_bsr_out_shape(values, M, dense))


@_op("bsr_dense_mm_backward")
def bsr_dense_mm_backward(grad: Tensor, crow_indices: Tensor, col_indices: Tensor, values: Tensor, M: int, K: int,
                          dense: Tensor, values_grad: bool, dense_grad: bool) -> Tuple[Tensor, Tensor]:
    """(gradient of the values, of dense): sampled_addmm of grad and denseᵀ at the blocks; the transposed BSR
    times grad (each empty when not asked for). One op: the transposition's sizes depend on the indices."""
    g_values, g_dense = _empty(values, values.dtype), _empty(dense, dense.dtype)
    grad = grad.contiguous()
    if values_grad:
        pattern = _sparse.BSR(crow_indices, col_indices, values, tuple(values.shape[:-3]) + (M, K))
        g = _sparse.sampled_addmm(pattern, grad, dense.transpose(-2, -1), beta=0.0)
        g_values = _sparse._sum_to(g.values, values.shape).contiguous()
    if dense_grad:
        t = _sparse._transposed(crow_indices, col_indices, values, M, K)
        g_dense = _sparse._sum_to(_sparse.bsr_dense_addmm(None, t, grad, beta=0), dense.shape).contiguous()
    return g_values, g_dense


@bsr_dense_mm_backward.register_fake
def _(grad, crow_indices, col_indices, values, M, K, dense, values_grad, dense_grad):
    g_values = values.new_empty(values.shape) if values_grad else _empty(values, values.dtype)
    g_dense = dense.new_empty(dense.shape) if dense_grad else _empty(dense, dense.dtype)
    return g_values, g_dense


# ------------------------------------------------------ mixed-precision matmul


@_op("matmul")
def matmul(A: Tensor, key: int, N: int, out_dtype: torch.dtype) -> Tensor:
    """``Matmul.forward(A, W)`` for the packed weight of ``key`` (``PackedWeight._key``)."""
    mm, W = _matmul.bound(key)
    return mm.forward(A, W)


@matmul.register_fake
def _(A, key, N, out_dtype):
    return A.new_empty(tuple(A.shape[:-1]) + (N,), dtype=out_dtype)


_DEQUANTIZED: dict = {}  # key -> the packed weight dequantized on the host (float32 [N, K]; pinned with CUDA)


@_op("matmul_weight")
def matmul_weight(like: Tensor, key: int, N: int, K: int) -> Tensor:
    """The float32 [N, K] weight of ``key`` as a new tensor on ``like``'s device. The host copy is made once per
    weight and kept there (in pinned memory for a CUDA device, so the copy to the device is asynchronous and a
    CUDA graph can hold it): no device memory stays held between backward passes."""
    mm, W = _matmul.bound(key)
    host = _DEQUANTIZED.get(key)
    if host is None:
        for stale in [k for k in _DEQUANTIZED if k not in _matmul._BOUND]:  # weights freed since
            del _DEQUANTIZED[stale]
        host = torch.as_tensor(_matmul.dequantize_weight(W))
        if like.is_cuda:
            host = host.pin_memory()
        _DEQUANTIZED[key] = host
    if like.device.type == "cpu":
        return host.clone()
    if not host.is_pinned():  # made by a CPU call first
        host = _DEQUANTIZED[key] = host.pin_memory()
    return host.to(like.device, non_blocking=True)


@matmul_weight.register_fake
def _(like, key, N, K):
    return like.new_empty((N, K), dtype=torch.float32)


OPS = ("quantize_4bit", "dequantize_4bit", "matmul_4bit", "gemv_4bit", "quantize_blockwise", "dequantize_blockwise",
       "int8_vectorwise_quant", "int8_vectorwise_dequant", "int8_linear", "int8_linear_grad_input",
       "int8_linear_matmul", "int8_mm_dequant", "int8_scaled_mm", "act_quant", "weight_quant", "weight_dequant",
       "fp8_gemm", "fp8_linear", "flash_attention", "flash_attention_kvcache", "flash_attention_varlen",
       "bsr_dense_mm", "bsr_dense_mm_backward", "matmul", "matmul_weight")
