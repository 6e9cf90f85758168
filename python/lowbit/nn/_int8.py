"""bitsandbytes' LLM.int8 modules: ``Int8Params``, ``Linear8bitLt``."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

import torch

from . import _calls
from ._common import FLOATS, check_sizes

__all__ = ["Int8Params", "Linear8bitLt"]


class Int8Params(torch.nn.Parameter):
    """A weight that becomes int8 rows ``CB`` and their absmax ``SCB`` on ``.to(device)`` (bitsandbytes').

    Quantization casts the weight to float16 (as bitsandbytes does, so SCB
    is the same) and applies ``int8_vectorwise_quant``. With
    ``has_fp16_weights`` the weight stays float and is quantized at each
    forward instead. ``CB`` is the parameter's data once quantized.
    """

    def __new__(cls, data: Optional[torch.Tensor] = None, requires_grad: bool = True,
                has_fp16_weights: bool = False, CB: Optional[torch.Tensor] = None,
                SCB: Optional[torch.Tensor] = None, **kwargs: Any) -> "Int8Params":
        self = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        self.has_fp16_weights = has_fp16_weights
        self.SCB = SCB
        return self

    @property
    def CB(self) -> Optional[torch.Tensor]:
        """The int8 rows (the data itself) once quantized, else None."""
        return self.data if self.dtype == torch.int8 else None

    @CB.setter
    def CB(self, value: Optional[torch.Tensor]) -> None:
        if value is not None:
            self.data = value

    def _quantize(self, device: Any) -> "Int8Params":
        """Quantizes the float weight on ``device`` in place (unless has_fp16_weights); returns self."""
        if self.has_fp16_weights:
            self.data = self.data.to(device)
            return self
        w = self.data.contiguous().to(device=device)
        if w.dtype not in FLOATS:
            raise TypeError(f"Int8Params: the weight to quantize must be float32, float16 or bfloat16 (got {w.dtype})")
        CB, SCB = _calls.int8_vectorwise_quant(w.to(torch.float16))
        self.data = CB
        self.SCB = SCB
        return self

    def cpu(self) -> "Int8Params":  # type: ignore[override]
        return self.to(device="cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> "Int8Params":  # type: ignore[override]
        return self.to(device="cuda" if device is None else device, non_blocking=non_blocking)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Int8Params":
        SCB = copy.deepcopy(self.SCB, memo)  # through memo: a module's SCB buffer (the same tensor) stays it
        new = Int8Params(self.data.clone(), self.requires_grad, self.has_fp16_weights, SCB=SCB)
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: Any) -> Any:
        # torch.nn.Parameter's own reduction rebuilds a plain Parameter: keep the class and SCB
        return (Int8Params, (self.data, self.requires_grad, self.has_fp16_weights, None, self.SCB))

    def to(self, *args: Any, **kwargs: Any) -> "Int8Params":  # type: ignore[override]
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        quantized = self.dtype == torch.int8
        if not quantized and not self.has_fp16_weights and device is not None and device.type != "meta":
            return self._quantize(device)
        if quantized:
            dtype = None  # int8 codes are not a value to convert
            if device is not None and self.SCB is not None and self.SCB.device.type != "meta":
                self.SCB = self.SCB.to(device)  # in place: Module._apply keeps this object
        data = torch.Tensor.to(self.data, device=device, dtype=dtype, non_blocking=non_blocking)
        return Int8Params(data, self.requires_grad, self.has_fp16_weights, SCB=self.SCB)


class _State:
    """The few fields of bitsandbytes' ``MatmulLtState`` that callers read."""

    def __init__(self, module: "Linear8bitLt", threshold: float, has_fp16_weights: bool):
        self._module = module
        self.threshold = threshold
        self.has_fp16_weights = has_fp16_weights

    @property
    def CB(self) -> Optional[torch.Tensor]:
        return getattr(self._module.weight, "CB", None)

    @property
    def SCB(self) -> Optional[torch.Tensor]:
        SCB = getattr(self._module.weight, "SCB", None)
        return self._module.SCB if SCB is None else SCB


class Linear8bitLt(torch.nn.Linear):
    """LLM.int8's linear layer with bitsandbytes' arguments; computes through ``int8_linear``.

    ``threshold`` > 0 keeps the input's columns holding a value of that
    magnitude out of the int8 product (computed in float). Load float weights,
    then ``.to(device)`` / ``.cuda()`` / ``.cpu()`` quantizes them (with
    ``has_fp16_weights=False``); or load an int8 state dict
    (``weight``, ``SCB``, ``weight_format``) into any module.

    ``SCB`` lives on the weight (``weight.SCB``, as in bitsandbytes) and is
    also the module's non-persistent buffer ``SCB`` (the same tensor; the state
    dict's ``SCB`` entry is written once, from the weight): ``torch.export``
    traces the module with a fake weight that carries no attributes, and takes
    the buffer as the graph's input. The buffer follows the weight wherever it
    changes (assignment, ``.to()``, loading, an eager forward).
    """

    def __init__(self, input_features: int, output_features: int, bias: bool = True, has_fp16_weights: bool = True,
                 threshold: float = 0.0, index: Any = None, device: Any = None):
        check_sizes("Linear8bitLt", in_features=input_features, out_features=output_features)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0:
            raise ValueError(f"Linear8bitLt: threshold must be a number >= 0 (got {threshold!r})")
        super().__init__(input_features, output_features, bias, device)
        self.state = _State(self, float(threshold), bool(has_fp16_weights))
        self.index = index
        self.register_buffer("SCB", None, persistent=False)
        self.weight = Int8Params(self.weight.data, has_fp16_weights=has_fp16_weights, requires_grad=has_fp16_weights)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "weight":
            self._keep_scb()

    def _keep_scb(self) -> None:
        """The buffer ``SCB`` := the weight's SCB (None where the weight has none)."""
        if "SCB" in self._buffers:  # absent while torch.nn.Linear.__init__ sets the first weight
            self._buffers["SCB"] = getattr(self._parameters.get("weight"), "SCB", None)

    def _apply(self, fn: Any, recurse: bool = True) -> "Linear8bitLt":
        # .to() / .cuda() / .cpu() quantize or move the weight and its SCB; fn's copy of the buffer (or its
        # conversion by .half()) gives way to the weight's own
        result = super()._apply(fn, recurse)
        self._keep_scb()
        return result

    @property
    def threshold(self) -> float:
        return self.state.threshold

    @property
    def has_fp16_weights(self) -> bool:
        return self.state.has_fp16_weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        SCB = getattr(w, "SCB", None)
        if w.dtype == torch.int8:
            if SCB is None:  # torch.export's fake weight carries no attributes: the buffer
                SCB = self.SCB
            elif not torch.compiler.is_compiling() and SCB is not self.SCB:
                self._buffers["SCB"] = SCB  # weight.SCB was replaced in place: the buffer follows
            if SCB is None:
                raise RuntimeError("Linear8bitLt: the int8 weight has no SCB (row absmax); load it with the weight")
            CB = w
        elif self.has_fp16_weights:
            if w.requires_grad and torch.is_grad_enabled():
                raise NotImplementedError(
                    "Linear8bitLt: training the float weight (has_fp16_weights=True) has no backward in lowbit.nn; "
                    "freeze it (weight.requires_grad_(False)) or run under torch.no_grad()")
            CB, SCB = _calls.int8_vectorwise_quant(w.to(torch.float16))
        else:
            raise RuntimeError("Linear8bitLt: the weight is not quantized yet: call .to(device), .cuda() or .cpu() "
                               "after loading float weights (quantization happens there, as in bitsandbytes), "
                               "or load an int8 state dict")
        if x.dtype not in FLOATS:
            raise TypeError(f"Linear8bitLt: the input must be float32, float16 or bfloat16 (got {x.dtype})")
        return _calls.int8_linear(x, CB, SCB, self.bias, self.threshold)

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        SCB = getattr(self.weight, "SCB", None)
        if not self.has_fp16_weights and SCB is not None:
            destination[prefix + "SCB"] = SCB if keep_vars else SCB.detach()
            destination[prefix + "weight_format"] = torch.tensor(0, dtype=torch.uint8)

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any],
                              strict: bool, missing_keys: List[str], unexpected_keys: List[str],
                              error_msgs: List[str]) -> None:
        fmt = state_dict.get(prefix + "weight_format")
        if fmt is not None:
            value = int(fmt.item()) if isinstance(fmt, torch.Tensor) else fmt
            if value not in (0, "row"):
                error_msgs.append(f"Linear8bitLt: {prefix}weight_format must be 0 (row-major; got {value!r})")
                return
        SCB = state_dict.get(prefix + "SCB")
        weight = state_dict.get(prefix + "weight")
        if SCB is not None:
            if weight is None or weight.dtype != torch.int8:
                error_msgs.append(f"Linear8bitLt: {prefix}SCB needs an int8 {prefix}weight beside it "
                                  f"(got {None if weight is None else weight.dtype})")
                return
            if tuple(SCB.shape) != (self.out_features,):
                error_msgs.append(f"Linear8bitLt: {prefix}SCB must have shape [{self.out_features}] "
                                  f"(got {list(SCB.shape)})")
                return
            here = self.weight.device
            device = weight.device if here.type == "meta" else here
            SCB = SCB.detach().to(device=device, dtype=torch.float32, copy=True)
            self.weight = Int8Params(torch.empty(self.out_features, self.in_features, dtype=torch.int8, device=device),
                                     requires_grad=False, has_fp16_weights=False, SCB=SCB)
            self.state.has_fp16_weights = False
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if SCB is not None and not isinstance(self.weight, Int8Params):  # load_state_dict(assign=True)
            self.weight = Int8Params(self.weight.data, requires_grad=False, has_fp16_weights=False,
                                     SCB=SCB.to(self.weight.device))
        self._keep_scb()
        mine = {prefix + "SCB", prefix + "weight_format"}
        unexpected_keys[:] = [k for k in unexpected_keys if k not in mine]

    def extra_repr(self) -> str:
        state = "int8" if self.weight.dtype == torch.int8 else "not quantized"
        return f"{super().extra_repr()}, threshold={self.threshold}, has_fp16_weights={self.has_fp16_weights}, {state}"
