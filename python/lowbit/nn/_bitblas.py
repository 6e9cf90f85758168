"""BitBLAS' ``Linear`` over :class:`lowbit.Matmul`: low-bit weights times fp16/bf16 activations."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from .._matmul import Matmul, MatmulConfig, PackedWeight, import_gptq, unpack_weight
from . import _calls
from ._common import check_sizes

__all__ = ["Linear"]

_FLOAT_W = ("float16", "bfloat16")
_GPTQ_BITS = {"uint2": 2, "uint4": 4, "uint8": 8}


class Linear(torch.nn.Module):
    """BitBLAS' ``bitblas.Linear``: ``out = A · dequant(W)ᵀ (+ bias)`` through :class:`lowbit.Matmul`.

    The constructor takes BitBLAS' arguments; the weight arrives through
    :meth:`load_and_transform_weight` (unpacked values, scales, zeros, bias)
    or :meth:`repack_from_gptq`. ``enable_tuning``, ``fast_decoding`` and
    ``propagate_b`` are BitBLAS' code-generation switches: accepted, without
    effect (lowbit's kernels are prebuilt). The input is cast to ``A_dtype``
    (as BitBLAS casts to float16); the output has ``out_dtype``. The state
    dict holds the weight unpacked (one value per byte, so it loads on any
    device): ``qweight`` [N, K] (``weight`` for a float16/bfloat16 W),
    ``scales``, ``zeros``, ``bias``, ``perm`` as given.
    """

    opt_M = [16, 32, 64, 128, 256, 512]

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        A_dtype: str = "float16",
        W_dtype: str = "float16",
        accum_dtype: str = "float16",
        out_dtype: str = "float16",
        group_size: Optional[int] = -1,
        with_scaling: Optional[bool] = None,
        with_zeros: bool = False,
        zeros_mode: Optional[str] = None,
        opt_M: Union[int, Sequence[int]] = opt_M,
        enable_tuning: bool = True,
        fast_decoding: Optional[bool] = None,
        propagate_b: bool = False,
        device: Any = None,
    ):
        super().__init__()
        check_sizes("Linear", in_features=in_features, out_features=out_features)
        self.in_features = in_features
        self.out_features = out_features
        self.config = MatmulConfig(
            M=opt_M, N=out_features, K=in_features, A_dtype=A_dtype, W_dtype=W_dtype, accum_dtype=accum_dtype,
            out_dtype=out_dtype, with_bias=bool(bias), group_size=-1 if group_size is None else group_size,
            with_scaling=bool(with_scaling), with_zeros=bool(with_zeros), zeros_mode=zeros_mode or "original",
        )
        self.register_buffer("_where", torch.empty(0, device=device), persistent=False)
        self._mm = Matmul(self.config, self._where.device)
        self.config = self._mm.config
        self._packed: Optional[PackedWeight] = None
        self._dtypes: Dict[str, torch.dtype] = {}

    @property
    def packed_weight(self) -> Optional[PackedWeight]:
        """The packed weight (None before one is loaded)."""
        return self._packed

    def _a_dtype(self) -> torch.dtype:
        return getattr(torch, self.config.A_dtype)

    def forward(self, A: torch.Tensor, output: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self._packed is None:
            raise RuntimeError("Linear: no weight yet: call load_and_transform_weight or repack_from_gptq, "
                               "or load a state dict")
        want = self._a_dtype()
        if A.dtype != want:
            if not want.is_floating_point or not A.dtype.is_floating_point:
                raise TypeError(f"Linear: the input must be {want} (A_dtype; got {A.dtype})")
            A = A.to(want)
        return _calls.matmul(self._mm, A, self._packed, output)

    def load_and_transform_weight(self, weight: torch.Tensor, scales: Optional[torch.Tensor] = None,
                                  zeros: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                                  perm: Optional[torch.Tensor] = None) -> None:
        """Packs the unpacked weight [N, K] with its scales / zeros [N, groups], bias [N] and act-order perm [K]."""
        c = self.config
        for name, value, wanted in (("scales", scales, c.with_scaling), ("zeros", zeros, c.with_zeros),
                                    ("bias", bias, c.with_bias)):
            if (value is not None) != bool(wanted):
                made = {"scales": "with_scaling", "zeros": "with_zeros", "bias": "bias"}[name]
                raise ValueError(f"Linear.load_and_transform_weight: {name} {'given' if value is not None else 'missing'}"
                                 f" but the module was made with {made}={bool(wanted)}")
        self._packed = self._mm.transform_weight(weight, scale=scales, zeros=zeros, bias=bias, perm=perm)
        self._dtypes = {k: v.dtype for k, v in (("weight", weight), ("scales", scales), ("zeros", zeros),
                                                ("bias", bias)) if v is not None}

    def repack_from_gptq(self, gptq_module: Any) -> None:
        """Takes a GPTQ layer's ``qweight``, ``qzeros``, ``scales`` (``g_idx``, ``bias``) — AutoGPTQ's v1 layout."""
        c = self.config
        bits = _GPTQ_BITS.get(c.W_dtype)
        if bits is None or not c.with_scaling or not c.with_zeros or c.zeros_mode == "rescale":
            raise ValueError("Linear.repack_from_gptq: needs W_dtype uint2/uint4/uint8, with_scaling, with_zeros and "
                             f"zeros_mode 'original' or 'quantized' (got W_dtype={c.W_dtype!r}, with_scaling="
                             f"{c.with_scaling}, with_zeros={c.with_zeros}, zeros_mode={c.zeros_mode!r})")
        bias = getattr(gptq_module, "bias", None) if c.with_bias else None
        if c.with_bias and bias is None:
            raise ValueError("Linear.repack_from_gptq: the module was made with bias=True but gptq_module has no bias")
        qw = import_gptq(gptq_module.qweight, gptq_module.qzeros, gptq_module.scales,
                         getattr(gptq_module, "g_idx", None), bias, bits, c.group_size, True, c.zeros_mode)
        self._packed = self._mm.transform_weight(qw)
        self._dtypes = {"scales": gptq_module.scales.dtype}
        if c.zeros_mode == "original":
            self._dtypes["zeros"] = gptq_module.scales.dtype
        if bias is not None:
            self._dtypes["bias"] = bias.dtype

    def _apply(self, fn: Any, recurse: bool = True) -> "Linear":
        before = self._where.device
        super()._apply(fn, recurse)
        after = self._where.device
        if after != before and after.type != "meta":
            self._mm = Matmul(self.config, after)
            if self._packed is not None:
                self._packed = self._mm.transform_weight(unpack_weight(self._packed))
        return self

    def _entries(self) -> Dict[str, Optional[torch.Tensor]]:
        """The unpacked weight under its state-dict names, in the dtypes it was given in."""
        u = unpack_weight(self._packed)
        wkey = "weight" if self.config.W_dtype in _FLOAT_W else "qweight"
        out = {wkey: u.weight, "scales": u.scale, "zeros": u.zeros, "bias": u.bias, "perm": u.perm}
        for key, dtype in self._dtypes.items():
            key = wkey if key == "weight" else key
            if out[key] is not None and dtype.is_floating_point and out[key].dtype != dtype:
                out[key] = out[key].to(dtype)  # exact: the values came in this dtype
        return out

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self._packed is not None:
            for key, value in self._entries().items():
                if value is not None:
                    destination[prefix + key] = value

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any],
                              strict: bool, missing_keys: List[str], unexpected_keys: List[str],
                              error_msgs: List[str]) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        names = ("weight" if self.config.W_dtype in _FLOAT_W else "qweight", "scales", "zeros", "bias", "perm")
        got = {n: state_dict.get(prefix + n) for n in names}
        unexpected_keys[:] = [k for k in unexpected_keys if k[len(prefix):] not in names]
        if got[names[0]] is None:
            missing_keys.append(prefix + names[0])
            return
        try:
            self.load_and_transform_weight(got[names[0]], got["scales"], got["zeros"], got["bias"], got["perm"])
        except (ValueError, TypeError) as e:
            error_msgs.append(f"Linear: {prefix}{names[0]}: {e}")

    def extra_repr(self) -> str:
        c = self.config
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={c.with_bias}, "
                f"A_dtype={c.A_dtype}, W_dtype={c.W_dtype}, group_size={c.group_size}, "
                f"device={self._mm.device}, loaded={self._packed is not None}")
