"""``register_peft``: peft LoRA layers over lowbit.nn's quantized linears that merge and unmerge through lowbit.

Stock peft already trains LoRA adapters on these modules: without bitsandbytes' classes to match, its dispatch wraps
any ``torch.nn.Linear`` subclass in its plain ``lora.Linear``, whose forward is the base layer's plus the adapter's.
What it cannot do there is merge: ``lora.Linear.merge`` adds the adapter's delta to ``weight.data``, which here holds
packed codes. The classes below, registered through peft's custom-module dispatch
(``LoraConfig._register_custom_module``), dequantize the weight, add the delta and quantize the sum again.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional

import torch

from . import _calls
from ._4bit import Linear4bit, Params4bit, _is_dtensor
from ._int8 import Int8Params, Linear8bitLt

__all__ = ["register_peft"]

_OP = "lowbit.nn.register_peft"
_CLASSES: Dict[type, type] = {}


def _dequantized(base: torch.nn.Module) -> torch.Tensor:
    """The float32 weight [N, K] a quantized layer multiplies by."""
    w = base.weight
    if _is_dtensor(w) or (isinstance(base, Linear4bit) and not isinstance(w, Params4bit)):
        # FSDP2 holds a DTensor of the codes there, or the parameter it gathered, which it puts back after
        raise RuntimeError(f"{_OP}: merging into a layer sharded by FSDP2 is not supported (its weight is FSDP's "
                           f"{type(w).__name__} of packed codes): gather the full state dict (torch.distributed."
                           "checkpoint.state_dict.get_model_state_dict with full_state_dict=True), load it into an "
                           "unsharded model and merge there")
    if isinstance(base, Linear4bit):
        return _calls.dequantize_4bit(w, base._state()).float()
    if w.dtype != torch.int8 or getattr(w, "SCB", None) is None:
        raise RuntimeError(f"{_OP}: merging into Linear8bitLt needs its int8 weight and SCB (got a {w.dtype} weight)")
    return _calls.int8_vectorwise_dequant(w, w.SCB)


def _requantize(base: torch.nn.Module, w: torch.Tensor) -> None:
    """Sets the layer's weight to ``w`` [N, K] quantized as the weight it replaces (format, blocksize, double quant,
    storage; the original weight's dtype), on the layer's device."""
    old = base.weight
    device = old.device
    if isinstance(base, Linear4bit):
        qs = base._state()
        base.weight = Params4bit(w.to(qs.dtype), False, blocksize=qs.blocksize, compress_statistics=qs.nested,
                                 quant_type=qs.quant_type, quant_storage=old.dtype, module=base)._quantize(device)
    else:
        base.weight = Int8Params(w, requires_grad=False, has_fp16_weights=False)._quantize(device)


def _lora_classes() -> Dict[type, type]:
    """The LoRA classes for Linear4bit and Linear8bitLt (made on first use: importing lowbit.nn imports no peft)."""
    if _CLASSES:
        return _CLASSES
    try:
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.tuners_utils import check_adapters_to_merge
    except ImportError as e:
        raise ImportError(f"{_OP} needs peft: pip install peft") from e

    class QuantizedLoraLinear(LoraLinear):
        """peft's LoRA ``Linear`` over a lowbit.nn ``Linear4bit`` / ``Linear8bitLt``: the same forward (the base
        layer's output plus the adapters'); ``merge`` / ``unmerge`` requantize the base weight with the adapter's
        delta added / taken away, which rounds as quantizing any weight does (peft warns the same for bitsandbytes'
        layers). DoRA, which peft computes from a bitsandbytes weight, is refused."""

        def resolve_lora_variant(self, **kwargs: Any) -> Any:
            # peft passes config= (older releases: use_dora=)
            if kwargs.get("use_dora", getattr(kwargs.get("config"), "use_dora", False)):
                raise NotImplementedError(f"{_OP}: DoRA (use_dora=True) on lowbit.nn's quantized layers is not "
                                          "supported: peft dequantizes their weight through bitsandbytes")
            return super().resolve_lora_variant(**kwargs)

        def _plain(self, adapter: str) -> None:
            variant = getattr(self, "lora_variant", {}).get(adapter)
            if variant is not None:
                raise NotImplementedError(f"{_OP}: merging adapter {adapter!r}, a LoRA variant "
                                          f"({type(variant).__name__}), into a quantized layer is not supported")

        def _bias_delta(self, adapter: str) -> Optional[torch.Tensor]:
            if not getattr(self, "lora_bias", {}).get(adapter, False):
                return None
            if getattr(self.get_base_layer(), "bias", None) is None:
                raise RuntimeError("Impossible to merge LoRA with `lora_bias=True` because the base layer has no bias.")
            return self.lora_B[adapter].bias * self.scaling[adapter]

        def merge(self, safe_merge: bool = False, adapter_names: Optional[List[str]] = None) -> None:
            for adapter in check_adapters_to_merge(self, adapter_names):
                if adapter not in self.lora_A.keys():
                    continue
                self._plain(adapter)
                base = self.get_base_layer()
                w = _dequantized(base) + self.get_delta_weight(adapter).to(torch.float32)
                warnings.warn("Merging a LoRA adapter into a quantized layer requantizes its weight: the outputs "
                              "change by the quantization's rounding", stacklevel=2)
                bias_delta = self._bias_delta(adapter)
                if safe_merge and not (torch.isfinite(w).all() and (bias_delta is None
                                                                    or torch.isfinite(bias_delta).all())):
                    raise ValueError(f"NaNs detected in the merged weights. The adapter {adapter} seems to be broken")
                _requantize(base, w)
                if bias_delta is not None:
                    base.bias.data += bias_delta.to(base.bias.dtype)
                self.merged_adapters.append(adapter)

        def unmerge(self) -> None:
            if not self.merged:
                warnings.warn("Already unmerged. Nothing to do.", stacklevel=2)
                return
            while self.merged_adapters:
                adapter = self.merged_adapters.pop()
                if adapter not in self.lora_A.keys():
                    continue
                self._plain(adapter)
                base = self.get_base_layer()
                _requantize(base, _dequantized(base) - self.get_delta_weight(adapter).to(torch.float32))
                bias_delta = self._bias_delta(adapter)
                if bias_delta is not None:
                    base.bias.data -= bias_delta.to(base.bias.dtype)

        def __repr__(self) -> str:
            return "lowbit." + super().__repr__()

    QuantizedLoraLinear.__qualname__ = "QuantizedLoraLinear"
    _CLASSES.update({Linear4bit: QuantizedLoraLinear, Linear8bitLt: QuantizedLoraLinear})
    return _CLASSES


def register_peft(config: Any) -> Any:
    """Registers lowbit's LoRA layer for :class:`Linear4bit` and :class:`Linear8bitLt` on a peft ``LoraConfig``;
    returns the config.

    Training needs no registration (stock peft wraps these modules in its
    plain ``lora.Linear``); registered, ``merge_adapter`` / ``unmerge_adapter``
    / ``merge_and_unload`` requantize the base weight with the adapter's delta
    instead of failing on the packed codes. Uses peft's custom-module dispatch
    (``LoraConfig._register_custom_module``); DoRA is refused with a
    NotImplementedError.
    """
    register = getattr(config, "_register_custom_module", None)
    if not callable(register):
        raise TypeError(f"{_OP}: config must be a peft LoraConfig (got {type(config).__name__})")
    register(dict(_lora_classes()))
    return config
