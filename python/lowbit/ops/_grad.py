"""Autograd of the lowbit matmul ops: the input's (and bias') gradient through the dequantized weight, as
bitsandbytes' ``MatMul4Bit`` takes it; weights are frozen (no gradient), as in QLoRA. The backward formulas call
``torch.ops.lowbit`` ops and torch ops only, so AOTAutograd traces them (torch.compile, torch.export)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

ops = torch.ops.lowbit


def _bias_grad(ctx: Any, index: int, grad: Tensor) -> Optional[Tensor]:
    """The bias' gradient (grad summed over all but the last dim) where the bias needs one."""
    if not ctx.needs_input_grad[index]:
        return None
    return grad.reshape(-1, grad.shape[-1]).sum(0).to(ctx.bias_dtype)


def _bias_dtype(ctx: Any, bias: Optional[Tensor]) -> None:
    ctx.bias_dtype = bias.dtype if bias is not None else None


# --------------------------------------------------------- matmul_4bit, gemv_4bit


def _setup_4bit(ctx, inputs, output):
    B, absmax, blocksize, quant_type, shape, dtype, nested_absmax, nested_code, offset, nested_blocksize = inputs[1:11]
    ctx.save_for_backward(B, absmax, nested_absmax, nested_code, offset)
    ctx.fields = (blocksize, quant_type, shape, dtype, nested_blocksize)
    _bias_dtype(ctx, inputs[11])


def _backward_4bit(ctx, grad):
    B, absmax, nested_absmax, nested_code, offset = ctx.saved_tensors
    blocksize, quant_type, shape, dtype, nested_blocksize = ctx.fields
    grad_A = None
    if ctx.needs_input_grad[0]:
        W = ops.dequantize_4bit(B, absmax, blocksize, quant_type, shape, dtype, nested_absmax, nested_code, offset,
                                nested_blocksize)
        grad_A = torch.matmul(grad, W.to(grad.dtype))
    return (grad_A,) + (None,) * 10 + (_bias_grad(ctx, 11, grad),)


# ------------------------------------------------------------------- int8_linear


def _setup_int8(ctx, inputs, output):
    A, CB, SCB, bias, threshold = inputs
    ctx.save_for_backward(CB, SCB)
    _bias_dtype(ctx, bias)


def _backward_int8(ctx, grad):
    CB, SCB = ctx.saved_tensors
    grad_A = ops.int8_linear_grad_input(grad.contiguous(), CB, SCB) if ctx.needs_input_grad[0] else None
    return grad_A, None, None, _bias_grad(ctx, 3, grad), None


# -------------------------------------------------------------------- fp8_linear


def _setup_fp8(ctx, inputs, output):
    x, weight, weight_scale_inv, bias, scale_fmt = inputs
    ctx.save_for_backward(weight, weight_scale_inv)
    _bias_dtype(ctx, bias)


def _backward_fp8(ctx, grad):
    weight, weight_scale_inv = ctx.saved_tensors
    grad_x = None
    if ctx.needs_input_grad[0]:
        W = ops.weight_dequant(weight, weight_scale_inv, 128, grad.dtype)
        grad_x = torch.matmul(grad, W)
    return grad_x, None, None, _bias_grad(ctx, 3, grad), None


# ------------------------------------------------------------------ bsr_dense_mm


def _setup_bsr(ctx, inputs, output):
    crow, col, values, M, K, dense = inputs
    ctx.save_for_backward(crow, col, values, dense)
    ctx.M, ctx.K = M, K


def _backward_bsr(ctx, grad):
    crow, col, values, dense = ctx.saved_tensors
    want_values, want_dense = ctx.needs_input_grad[2], ctx.needs_input_grad[5]
    g_values, g_dense = ops.bsr_dense_mm_backward(grad, crow, col, values, ctx.M, ctx.K, dense, want_values,
                                                  want_dense)
    return None, None, g_values if want_values else None, None, None, g_dense if want_dense else None


# ------------------------------------------------------------------------ matmul


def _setup_matmul(ctx, inputs, output):
    A, key, N, out_dtype = inputs
    ctx.key, ctx.N, ctx.K, ctx.A_dtype = key, N, A.shape[-1], A.dtype


def _backward_matmul(ctx, grad):
    grad_A = None
    if ctx.needs_input_grad[0]:
        W = ops.matmul_weight(grad, ctx.key, ctx.N, ctx.K)
        grad_A = torch.matmul(grad.to(ctx.A_dtype), W.to(ctx.A_dtype))
    return grad_A, None, None, None


def register() -> None:
    """Registers the backward of each differentiable op (once: the caller checks)."""
    lib = torch.library
    lib.register_autograd("lowbit::matmul_4bit", _backward_4bit, setup_context=_setup_4bit)
    lib.register_autograd("lowbit::gemv_4bit", _backward_4bit, setup_context=_setup_4bit)
    lib.register_autograd("lowbit::int8_linear", _backward_int8, setup_context=_setup_int8)
    lib.register_autograd("lowbit::fp8_linear", _backward_fp8, setup_context=_setup_fp8)
    lib.register_autograd("lowbit::bsr_dense_mm", _backward_bsr, setup_context=_setup_bsr)
    lib.register_autograd("lowbit::matmul", _backward_matmul, setup_context=_setup_matmul)
