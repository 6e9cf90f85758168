"""bitsandbytes' 4-bit matmul with autograd: ``matmul_4bit`` and ``MatMul4Bit``, through the custom op.

The product and its gradient are those of ``lowbit::matmul_4bit`` (:func:`lowbit.ops.matmul_4bit`): the op's
registered autograd gives the input ``grad · dequantize_4bit(B)`` and the bias its summed gradient, as
bitsandbytes' ``MatMul4Bit`` does, and its fake implementation lets ``torch.compile(fullgraph=True)`` and
``torch.export`` trace a model calling ``matmul_4bit`` without a graph break.
"""

import warnings as _warnings
from typing import Any as _Any, Optional as _Optional

import torch as _torch

from .. import ops as _ops
from .functional import _unpack_cpu_format

__all__ = ["MatMul4Bit", "matmul_4bit"]


def _product(A: _torch.Tensor, B: _torch.Tensor, quant_state: _Any, out: _Optional[_torch.Tensor],
             bias: _Optional[_torch.Tensor]) -> _torch.Tensor:
    """``A · W[N, K]ᵀ + bias`` through ``lowbit::matmul_4bit``; B packed or its ``.t()`` (a view either way)."""
    return _ops.matmul_4bit(A, B.reshape(-1, 1), quant_state, bias, out=out)


class MatMul4Bit:
    """bitsandbytes' ``MatMul4Bit``: ``MatMul4Bit.apply(A, B, out=None, bias=None, quant_state=None)`` is
    ``A · dequantize_4bit(B)ᵀ + bias``, differentiable w.r.t. A and the bias.

    Not a ``torch.autograd.Function`` of its own: ``apply`` calls the op ``lowbit::matmul_4bit``, whose registered
    autograd gives A's gradient (``grad · W``) and the bias's (``grad`` summed over every leading dimension); the
    weight gets none (it is quantized), as in bitsandbytes.
    """

    @staticmethod
    def apply(A: _torch.Tensor, B: _torch.Tensor, out: _Optional[_torch.Tensor] = None,
              bias: _Optional[_torch.Tensor] = None, quant_state: _Any = None) -> _torch.Tensor:
        if quant_state is None:
            raise ValueError("MatMul4Bit: quant_state is required (got None); it comes from quantize_4bit")
        return _product(A, B, quant_state, out, bias)


def matmul_4bit(A: _torch.Tensor, B: _torch.Tensor, quant_state: _Any, out: _Optional[_torch.Tensor] = None,
                bias: _Optional[_torch.Tensor] = None) -> _torch.Tensor:
    """bitsandbytes' ``matmul_4bit``: ``A [..., K] · W[N, K]ᵀ + bias`` for the 4-bit weight ``B`` of ``quant_state``.

    ``B`` is the packed weight as :func:`lowbit.bnb.functional.quantize_4bit` returns it or its ``.t()``
    (both read alike: the state gives N and K). Every path runs on ``torch.ops.lowbit`` ops, so a model calling
    this traces under ``torch.compile(fullgraph=True)``; A and ``bias`` get their gradients from the ops'
    autograd. A state quantized from a ``[K, N]`` weight (``A``'s inner size matching ``shape[0]`` only) still
    works, with bitsandbytes' ``DeprecationWarning`` (not while compiling), through the dequantized weight; a
    weight in bitsandbytes' CPU layout (``packing_format_for_cpu``) is unpacked to the standard one on each call.
    """
    if quant_state is None:
        raise ValueError("matmul_4bit: quant_state is required (got None); it comes from quantize_4bit")
    if quant_state.shape is None or len(quant_state.shape) != 2:
        raise ValueError(f"matmul_4bit: quant_state.shape must be 2-D [N, K] (got {quant_state.shape})")
    if A.device.type == "cpu" and getattr(quant_state, "packing_format_for_cpu", False):
        packed, plain = _unpack_cpu_format(B, quant_state)  # a state bitsandbytes repacked for its CPU kernel
        return _product(A, packed, plain, out, bias)
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
        weight = _ops.dequantize_4bit(B.reshape(-1, 1), quant_state).to(A.dtype)  # [K, N]
        result = _torch.nn.functional.linear(A, weight.t(), bias)
        return result if out is None else out.copy_(result)
    return _product(A, B, quant_state, out, bias)
