"""DeepSeek-V3's block-scaled FP8 linear layer: ``LinearFP8``."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from . import _calls
from ._common import FLOATS, check_sizes

__all__ = ["LinearFP8"]

BLOCK = 128


class LinearFP8(torch.nn.Module):
    """``y = x · Wᵀ + bias`` with W stored as DeepSeek's FP8 checkpoints store it.

    Parameters (frozen) are the checkpoint's names: ``weight`` float8_e4m3fn
    [N, K] and ``weight_scale_inv`` float32 [⌈N/128⌉, ⌈K/128⌉] (the scale of
    each 128x128 tile: ``w = e4m3 · scale_inv``), ``bias`` [N] when asked for.
    The forward quantizes x in 1x128 blocks (``act_quant``) and runs
    ``fp8_gemm``; the output has x's dtype. K must be a multiple of 16 (the
    GEMM's); N is free. A state dict naming the scale ``scale`` (DeepSeek's
    inference code) loads too.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False, device: Any = None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__()
        check_sizes("LinearFP8", in_features=in_features, out_features=out_features)
        if in_features % 16:
            raise ValueError(f"LinearFP8: in_features must be a multiple of 16, as fp8_gemm's K (got {in_features})")
        if dtype is not None and dtype not in FLOATS:
            raise TypeError(f"LinearFP8: dtype (the bias's) must be None, float32, float16 or bfloat16 (got {dtype!r})")
        self.in_features = in_features
        self.out_features = out_features
        scales = (-(-out_features // BLOCK), -(-in_features // BLOCK))
        self.weight = torch.nn.Parameter(
            torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device), requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(torch.ones(scales, dtype=torch.float32, device=device),
                                                   requires_grad=False)
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self._register_load_state_dict_pre_hook(_scale_alias, with_module=True)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "LinearFP8":
        """The FP8 form of a float ``nn.Linear`` (``weight_quant`` in 128x128 tiles), on its device."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"LinearFP8.from_linear: linear must be a torch.nn.Linear (got {type(linear).__name__})")
        w = linear.weight
        bias = linear.bias
        m = cls(linear.in_features, linear.out_features, bias is not None, device="meta",
                dtype=None if bias is None else bias.dtype)
        m.quantize_(w.detach())
        if bias is not None:
            m.bias = torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
        return m

    def quantize_(self, weight: torch.Tensor) -> "LinearFP8":
        """Sets the weight from a float [N, K] tensor (``weight_quant``), on its device; returns self."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(f"LinearFP8.quantize_: weight must have shape [{self.out_features}, {self.in_features}] "
                             f"(got {list(weight.shape)})")
        if weight.dtype not in FLOATS:
            raise TypeError(f"LinearFP8.quantize_: weight must be float32, float16 or bfloat16 (got {weight.dtype})")
        q, s = _calls.weight_quant(weight.contiguous())
        self.weight = torch.nn.Parameter(q, requires_grad=False)
        self.weight_scale_inv = torch.nn.Parameter(s, requires_grad=False)
        return self

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the layer multiplies by, [N, K] in ``dtype``."""
        return _calls.weight_dequant(self.weight, self.weight_scale_inv, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in FLOATS:
            raise TypeError(f"LinearFP8: the input must be float32, float16 or bfloat16 (got {x.dtype})")
        return _calls.fp8_linear(x, self.weight, self.weight_scale_inv, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _scale_alias(module: LinearFP8, state_dict: Dict[str, Any], prefix: str, *args: Any) -> None:
    """DeepSeek's inference code names ``weight_scale_inv`` ``scale``: take it under the checkpoint's name."""
    if prefix + "scale" in state_dict and prefix + "weight_scale_inv" not in state_dict:
        state_dict[prefix + "weight_scale_inv"] = state_dict.pop(prefix + "scale")

