"""bitsandbytes' 4-bit matmul with autograd: ``matmul_4bit`` and ``MatMul4Bit``.

The one place where ``lowbit.bnb`` defines the 4-bit product's gradient (w.r.t. the input, through the
dequantized weight, as bitsandbytes does); a registered custom op with its autograd formula may replace
``MatMul4Bit`` here without changing ``matmul_4bit``.
"""

import warnings as _warnings
from typing import Any as _Any, Optional as _Optional, Tuple as _Tuple

import torch as _torch

from .. import functional as _lf

__all__ = ["MatMul4Bit", "matmul_4bit"]


def _empty_result(A: _torch.Tensor, quant_state: _Any) -> _torch.Tensor:
    """bitsandbytes' result for an input without elements: [..., N] of A's dtype."""
    return _torch.empty((*A.shape[:-1], quant_state.shape[0]), dtype=A.dtype, device=A.device)


class MatMul4Bit(_torch.autograd.Function):
    """``A · dequantize_4bit(B)ᵀ + bias``; backward gives A's gradient (``grad · W``) and the bias's.

    The weight gets no gradient (it is quantized), as in bitsandbytes.
    """

    @staticmethod
    def forward(ctx: _Any, A: _torch.Tensor, B: _torch.Tensor, out: _Optional[_torch.Tensor] = None,
                bias: _Optional[_torch.Tensor] = None, quant_state: _Any = None) -> _torch.Tensor:
        if quant_state is None:
            raise ValueError("MatMul4Bit: quant_state is required (got None); it comes from quantize_4bit")
        B = B.reshape(-1, 1)  # the packed bytes in bitsandbytes' canonical [(N*K+1)//2, 1] view
        ctx.state = quant_state
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.empty = A.numel() == 0
        ctx.a_shape = A.shape
        ctx.save_for_backward(B)
        if ctx.empty:
            return _empty_result(A, quant_state)
        result = _lf.matmul_4bit(A, B, quant_state, bias)
        if out is not None:
            out.copy_(result)
            return out
        return result

    @staticmethod
    def backward(ctx: _Any, grad_output: _torch.Tensor) -> _Tuple[_Any, ...]:
        (B,) = ctx.saved_tensors
        need_a, _, _, need_bias, _ = ctx.needs_input_grad
        grad_a = grad_bias = None
        if need_bias:
            grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0, dtype=ctx.bias_dtype)
        if need_a:
            if ctx.empty:
                grad_a = _torch.zeros(ctx.a_shape, dtype=grad_output.dtype, device=grad_output.device)
            else:
                weight = _lf.dequantize_4bit(B, ctx.state).to(grad_output.dtype)  # [N, K]
                grad_a = _torch.matmul(grad_output, weight)
        return grad_a, None, None, grad_bias, None


def matmul_4bit(A: _torch.Tensor, B: _torch.Tensor, quant_state: _Any, out: _Optional[_torch.Tensor] = None,
                bias: _Optional[_torch.Tensor] = None) -> _torch.Tensor:
    """bitsandbytes' ``matmul_4bit``: ``A [..., K] · W[N, K]ᵀ + bias`` for the 4-bit weight ``B`` of ``quant_state``.

    ``B`` is the packed weight as :func:`lowbit.bnb.functional.quantize_4bit` returns it or its ``.t()``
    (both read alike: the state gives N and K). A state quantized from a ``[K, N]`` weight (``A``'s inner
    size matching ``shape[0]`` only) still works, with bitsandbytes' ``DeprecationWarning``, through the
    dequantized weight. Differentiable w.r.t. ``A`` and ``bias`` (:class:`MatMul4Bit`) when they need it.
    """
    if quant_state is None:
        raise ValueError("matmul_4bit: quant_state is required (got None); it comes from quantize_4bit")
    if quant_state.shape is None or len(quant_state.shape) != 2:
        raise ValueError(f"matmul_4bit: quant_state.shape must be 2-D [N, K] (got {quant_state.shape})")
    if A.device.type == "cpu" and getattr(quant_state, "packing_format_for_cpu", False):
        from .functional import gemv_4bit  # a state bitsandbytes repacked for its CPU kernel

        result = gemv_4bit(A, B, out=out, state=quant_state)
        return result + bias if bias is not None else result
    n, k = quant_state.shape
    if A.shape[-1] == n and A.shape[-1] != k:
        if not _torch.compiler.is_compiling():
            _warnings.warn(
                f"matmul_4bit: weight was quantized from a [K, N] tensor (quant_state.shape={[n, k]}). "
                "Re-quantize from the weight in [N, K] (out_features, in_features) orientation. "
                "This will be an error in a future version.",
                DeprecationWarning,
                stacklevel=2,
            )
        weight = _lf.dequantize_4bit(B.reshape(-1, 1), quant_state).to(A.dtype)  # [K, N]
        result = _torch.nn.functional.linear(A, weight.t(), bias)
        if out is not None:
            out.copy_(result)
            return out
        return result
    needs_grad = _torch.is_grad_enabled() and (A.requires_grad or (bias is not None and bias.requires_grad))
    if needs_grad:
        return MatMul4Bit.apply(A, B, out, bias, quant_state)
    if A.numel() == 0:
        return out if out is not None else _empty_result(A, quant_state)
    return _lf.matmul_4bit(A, B.reshape(-1, 1), quant_state, bias, out=out)
