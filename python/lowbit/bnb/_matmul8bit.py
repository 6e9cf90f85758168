"""bitsandbytes' LLM.int8 matmul with autograd: ``matmul`` and ``MatmulLtState``.

``matmul(A, B, state=...)`` is ``A · Bᵀ + bias`` with B [N, K] held as int8 rows (``state.CB``) and their
absmax (``state.SCB``): A's rows are quantized to int8 and multiplied by CB (``lowbit.functional.int8_linear``),
the columns of A holding a value of magnitude ≥ ``state.threshold`` in float32 (LLM.int8's decomposition).
"""

import dataclasses as _dataclasses
from typing import Any as _Any, Optional as _Optional, Tuple as _Tuple

import torch as _torch

from .. import functional as _lf

__all__ = ["MatMul8bitLt", "MatmulLtState", "matmul"]


@_dataclasses.dataclass
class MatmulLtState:
    """bitsandbytes' state of an LLM.int8 matmul: the int8 weight and its options (the same fields)."""

    force_no_igemmlt: bool = False
    CB: _Optional[_torch.Tensor] = None
    SB: _Optional[_torch.Tensor] = None
    SCB: _Optional[_torch.Tensor] = None
    SBt: _Optional[_torch.Tensor] = None
    CBt: _Optional[_torch.Tensor] = None
    subB: _Optional[_torch.Tensor] = None
    outlier_pool: _Any = None
    has_accumulated_gradients = False
    threshold = 0.0
    idx: _Optional[_torch.Tensor] = None
    is_training = True
    has_fp16_weights = True
    use_pool = False

    def reset_grads(self) -> None:
        """Drops the quantized weight, so that the next forward quantizes B again."""
        self.CB = self.SB = self.SCB = self.SBt = self.CBt = None


def _quantize_weight(B: _torch.Tensor, state: MatmulLtState) -> None:
    """state.CB / state.SCB from B [N, K] (fp16 first, as bitsandbytes), when B is the float weight."""
    has_grad = getattr(B, "grad", None) is not None
    if (state.is_training and not has_grad) or state.CB is None or state.SCB is None:
        state.reset_grads()
        state.CB, state.SCB, _ = _lf.int8_vectorwise_quant(B.detach().contiguous().to(_torch.float16))


class MatMul8bitLt(_torch.autograd.Function):
    """LLM.int8's ``A · Bᵀ + bias``; backward: A's gradient ``grad · dequant(CB)``, the bias's, and B's
    (``gradᵀ · A``) where the float weight needs one."""

    @staticmethod
    def forward(ctx: _Any, A: _torch.Tensor, B: _torch.Tensor, out: _Optional[_torch.Tensor] = None,
                bias: _Optional[_torch.Tensor] = None, state: _Optional[MatmulLtState] = None) -> _torch.Tensor:
        state = state or MatmulLtState()
        if state.has_fp16_weights or state.CB is None:
            _quantize_weight(B, state)
        ctx.state = state
        ctx.a_dtype, ctx.a_shape = A.dtype, A.shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.save_for_backward(A if ctx.needs_input_grad[1] else None)
        n = state.CB.shape[0]
        if A.numel() == 0:
            result = _torch.empty((*A.shape[:-1], n), dtype=A.dtype, device=A.device)
        else:
            result = _lf.int8_linear(A, state.CB, state.SCB, None if bias is None else bias.to(A.dtype),
                                     float(state.threshold))
        if out is not None:
            out.copy_(result)
            return out
        return result

    @staticmethod
    def backward(ctx: _Any, grad_output: _torch.Tensor) -> _Tuple[_Any, ...]:
        (A,) = ctx.saved_tensors
        need_a, need_b, _, need_bias, _ = ctx.needs_input_grad
        state = ctx.state
        n = grad_output.shape[-1]
        grad_a = grad_b = grad_bias = None
        rows = grad_output.reshape(-1, n)
        if need_bias:
            grad_bias = rows.sum(0, dtype=ctx.bias_dtype)
        if need_b:
            grad_b = rows.t().to(A.dtype) @ A.reshape(-1, A.shape[-1])
        if need_a:
            if rows.shape[0] == 0:
                grad_a = _torch.zeros(ctx.a_shape, dtype=ctx.a_dtype, device=grad_output.device)
            elif grad_output.device.type == "cpu":
                grad_a = _lf.int8_linear_grad_input(grad_output.contiguous(), state.CB, state.SCB).to(ctx.a_dtype)
            else:  # the dequantized weight's product, as bitsandbytes computes it
                weight = state.CB.to(ctx.a_dtype).mul_(state.SCB.unsqueeze(1).mul(1.0 / 127.0).to(ctx.a_dtype))
                grad_a = _torch.matmul(grad_output.to(ctx.a_dtype), weight)
        return grad_a, grad_b, None, grad_bias, None


def matmul(A: _torch.Tensor, B: _torch.Tensor, out: _Optional[_torch.Tensor] = None,
           state: _Optional[MatmulLtState] = None, threshold: float = 0.0,
           bias: _Optional[_torch.Tensor] = None) -> _torch.Tensor:
    """bitsandbytes' ``matmul``: LLM.int8's ``A · Bᵀ + bias`` for B [N, K] (a ``.t()`` view of a [K, N]
    tensor too), quantizing B into ``state`` unless ``state.has_fp16_weights`` is False and ``state.CB`` is set;
    ``threshold > 0`` sets ``state.threshold`` (outlier columns of A in float32)."""
    state = state or MatmulLtState()
    if threshold > 0.0:
        state.threshold = threshold
    return MatMul8bitLt.apply(A, B, out, bias, state)
