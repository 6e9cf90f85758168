"""bitsandbytes' 4-bit modules: ``Params4bit``, ``Linear4bit``, ``LinearNF4``, ``LinearFP4``."""

from __future__ import annotations

import copy
import sys
import warnings
from typing import Any, Dict, List, Optional

import torch

from .._quant_state import QuantState
from . import _calls
from ._common import FLOATS, check_compute_dtype, check_sizes, quant_keys

__all__ = ["Linear4bit", "LinearFP4", "LinearNF4", "Params4bit"]

_QUANT_TYPES = ("fp4", "nf4")
_BLOCKSIZES = tuple(2**i for i in range(5, 13))  # 32 .. 4096, what quantize_4bit takes
_slow_warned: set = set()


def _is_dtensor(t: Any) -> bool:
    """True for a DTensor (FSDP2's sharded parameter); no import: none exists before torch.distributed.tensor is."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return dtensor is not None and isinstance(t, dtensor)


def _state_property(name: str, get: Any) -> property:
    """A read-only view of the QuantState's field ``name`` (FSDP resolves ``weight.absmax`` by getattr)."""

    def fget(self: "Params4bit") -> Any:
        qs = self.__dict__.get("quant_state")
        value = get(qs) if qs is not None else None
        if value is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return value

    return property(fget, doc=f"The quant state's {name} (AttributeError before quantization).")


class Params4bit(torch.nn.Parameter):
    """A weight that becomes 4-bit codes (nf4/fp4) on ``.to(device)``, ``.cuda()`` or ``.cpu()``, as bitsandbytes'.

    Before quantization it holds the float weight [N, K]; after, the packed
    codes [m, 1] as ``quant_storage`` (uint8, or a float dtype so FSDP can
    shard them with the float parameters) and ``quant_state``. Moving a
    quantized parameter moves the codes and the state and never casts the
    codes' storage (``.to(dtype)``, ``.half()`` leave it as it is).
    """

    def __new__(
        cls,
        data: Optional[torch.Tensor] = None,
        requires_grad: bool = False,
        quant_state: Optional[QuantState] = None,
        blocksize: Optional[int] = None,
        compress_statistics: bool = True,
        quant_type: str = "fp4",
        quant_storage: torch.dtype = torch.uint8,
        module: Optional["Linear4bit"] = None,
        bnb_quantized: bool = False,
        **kwargs: Any,
    ) -> "Params4bit":
        blocksize = 64 if blocksize is None else blocksize
        if quant_type not in _QUANT_TYPES:
            raise ValueError(f"Params4bit: quant_type must be 'fp4' or 'nf4' (got {quant_type!r})")
        if blocksize not in _BLOCKSIZES:
            raise ValueError(f"Params4bit: blocksize must be a power of two from 32 to 4096 (got {blocksize!r})")
        if not isinstance(quant_storage, torch.dtype):
            raise TypeError(f"Params4bit: quant_storage must be a torch.dtype (got {quant_storage!r})")
        self = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        self.blocksize = blocksize
        self.compress_statistics = compress_statistics
        self.quant_type = quant_type
        self.quant_state = quant_state
        self.quant_storage = quant_storage
        self.bnb_quantized = bnb_quantized
        self.module = module
        return self

    absmax = _state_property("absmax", lambda qs: qs.absmax)
    code = _state_property("code", lambda qs: qs.code)
    quant_map = _state_property("quant_map", lambda qs: qs.code)
    offset = _state_property("offset", lambda qs: qs.offset)
    state2 = _state_property("state2", lambda qs: qs.state2)
    nested_absmax = _state_property("nested_absmax", lambda qs: qs.state2 and qs.state2.absmax)
    nested_quant_map = _state_property("nested_quant_map", lambda qs: qs.state2 and qs.state2.code)
    nested_blocksize = _state_property("nested_blocksize", lambda qs: qs.state2 and qs.state2.blocksize)
    nested_dtype = _state_property("nested_dtype", lambda qs: qs.state2 and qs.state2.dtype)
    nested_offset = _state_property("nested_offset", lambda qs: qs.offset)

    def _fields(self) -> Dict[str, Any]:
        return {k: self.__dict__.get(k) for k in ("blocksize", "compress_statistics", "quant_type", "quant_state",
                                                  "quant_storage", "bnb_quantized", "module")}

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Params4bit":
        fields = self._fields()
        fields["quant_state"] = copy.deepcopy(fields["quant_state"], memo)
        fields["module"] = copy.deepcopy(fields["module"], memo)
        new = Params4bit(self.data.clone(), self.requires_grad, **fields)
        memo[id(self)] = new
        return new

    def __copy__(self) -> "Params4bit":
        return Params4bit(self.data, self.requires_grad, **self._fields())

    def __reduce_ex__(self, protocol: Any) -> Any:
        # torch.nn.Parameter's own reduction rebuilds a plain Parameter: keep the class and the fields
        return (Params4bit, (self.data, self.requires_grad), self._fields())

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """As a Parameter (no subclass results), but ``torch.chunk`` / ``torch.split`` give Params4bit pieces with
        the fields, as bitsandbytes' do."""
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **(kwargs or {}))
        if func in (torch.chunk, torch.split) and isinstance(args[0], Params4bit):
            whole = args[0]
            return tuple(Params4bit(piece, whole.requires_grad, **whole._fields()) for piece in result)
        return result

    @classmethod
    def from_prequantized(cls, data: torch.Tensor, quantized_stats: Dict[str, Any], requires_grad: bool = False,
                          device: Any = "cuda", module: Optional["Linear4bit"] = None, **kwargs: Any) -> "Params4bit":
        """A quantized parameter from packed codes and their state dict (the ``weight.*`` entries)."""
        qs = QuantState.from_dict(quantized_stats, device=torch.device(device))
        self = cls(data.to(device), requires_grad, quant_state=qs, blocksize=qs.blocksize,
                   compress_statistics=qs.nested, quant_type=qs.quant_type, quant_storage=data.dtype,
                   module=module, bnb_quantized=True)
        if module is not None:
            module.quant_state = qs
            module.quant_storage = data.dtype
        return self

    def _quantize(self, device: Any) -> "Params4bit":
        """Quantizes the float weight on ``device`` in place; returns self."""
        w = self.data.contiguous().to(device)
        if w.dtype not in FLOATS:
            raise TypeError(f"Params4bit: the weight to quantize must be float32, float16 or bfloat16 "
                            f"(got {w.dtype}); convert it first")
        packed, qs = _calls.quantize_4bit(w, self.blocksize, self.compress_statistics, self.quant_type,
                                          self.quant_storage)
        self.data = packed
        self.quant_state = qs
        if self.module is not None:
            self.module.quant_state = qs
            self.module.quant_storage = packed.dtype
        self.bnb_quantized = True
        return self

    def cpu(self) -> "Params4bit":  # type: ignore[override]
        return self.to(device="cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> "Params4bit":  # type: ignore[override]
        return self.to(device="cuda" if device is None else device, non_blocking=non_blocking)

    def to(self, *args: Any, **kwargs: Any) -> "Params4bit":  # type: ignore[override]
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and device.type != "meta" and not self.bnb_quantized:
            return self._quantize(device)
        if self.bnb_quantized:
            dtype = None  # the codes' storage is not a value to convert
            if device is not None and self.quant_state is not None:
                self.quant_state.to(device)
        data = torch.Tensor.to(self.data, device=device, dtype=dtype, non_blocking=non_blocking)
        return Params4bit(data, self.requires_grad, **self._fields())

    def _keep_storage(self, convert: str) -> "Params4bit":
        return self if self.bnb_quantized else getattr(torch.Tensor, convert)(self)

    def half(self, *args: Any, **kwargs: Any) -> "Params4bit":  # type: ignore[override]
        return self._keep_storage("half")

    def float(self, *args: Any, **kwargs: Any) -> "Params4bit":  # type: ignore[override]
        return self._keep_storage("float")

    def bfloat16(self, *args: Any, **kwargs: Any) -> "Params4bit":  # type: ignore[override]
        return self._keep_storage("bfloat16")

    def double(self, *args: Any, **kwargs: Any) -> "Params4bit":  # type: ignore[override]
        return self._keep_storage("double")


class Linear4bit(torch.nn.Linear):
    """QLoRA's 4-bit linear layer with bitsandbytes' arguments; computes through ``matmul_4bit``.

    Load float weights (``load_state_dict`` of a float model), then
    ``.to(device)`` / ``.cuda()`` / ``.cpu()`` quantizes them; or load a 4-bit
    state dict (bitsandbytes' layout) directly. ``compute_dtype`` None
    computes in the input's dtype. ``blocksize`` is lowbit's addition
    (keyword-only; bitsandbytes fixes 64 here).
    """

    def __init__(
        self,
        input_features: int,
        output_features: int,
        bias: bool = True,
        compute_dtype: Optional[torch.dtype] = None,
        compress_statistics: bool = True,
        quant_type: str = "fp4",
        quant_storage: torch.dtype = torch.uint8,
        device: Any = None,
        *,
        blocksize: int = 64,
    ):
        check_sizes("Linear4bit", in_features=input_features, out_features=output_features)
        check_compute_dtype("Linear4bit", compute_dtype)
        super().__init__(input_features, output_features, bias, device)
        self.weight = Params4bit(self.weight.data, requires_grad=False, blocksize=blocksize,
                                 compress_statistics=compress_statistics, quant_type=quant_type,
                                 quant_storage=quant_storage, module=self)
        self.compute_dtype = compute_dtype
        self.compute_type_is_set = compute_dtype is not None
        self.quant_state: Optional[QuantState] = None
        self.quant_storage = quant_storage

    def _state(self) -> QuantState:
        """The weight's QuantState, or the module's where a wrapper replaced the parameter (FSDP2 puts a plain
        parameter in its place, sharded or gathered): the forward reads it without changing the module."""
        w = self.weight
        qs = (w.quant_state if isinstance(w, Params4bit) else None) or self.quant_state
        qs = qs or getattr(w, "quant_state", None)
        if qs is None:
            raise RuntimeError(
                "Linear4bit: the weight is not quantized yet: call .to(device), .cuda() or .cpu() after loading "
                "float weights (quantization happens there, as in bitsandbytes), or load a 4-bit state dict"
            )
        return qs

    def _packed(self) -> torch.Tensor:
        """The packed codes to compute with. A parameter a wrapper put in place of the Params4bit must be the whole
        weight in the module's quant_storage: FSDP2 gathers its shards before the forward, and a
        MixedPrecisionPolicy casts float parameters to its param_dtype as it gathers them, which would change
        the codes' bits."""
        w = self.weight
        if isinstance(w, Params4bit):
            return w
        if _is_dtensor(w):
            raise RuntimeError(
                "Linear4bit: the weight is a sharded DTensor: FSDP2 gathers it only in the forward of the module "
                "that fully_shard was applied to (this layer or one holding it); call the model through that module"
            )
        if w.dtype != self.quant_storage:
            raise RuntimeError(
                f"Linear4bit: the packed weight arrived as {w.dtype} but its codes are stored as "
                f"{self.quant_storage}: something cast them (FSDP2's MixedPrecisionPolicy casts float parameters to "
                f"its param_dtype when it gathers them); quantize with quant_storage equal to the param_dtype "
                f"(torch.bfloat16 for both, as FSDP-QLoRA does) or with quant_storage=torch.uint8, which is not cast"
            )
        return w

    def _expose_state(self, entries: Dict[str, Any], qs: QuantState) -> None:
        """Puts the state dict's quant-state entries on a weight that a wrapper put in place of the Params4bit
        (FSDP2's sharded DTensor), under the names their keys give (``weight.absmax``, ``weight.quant_map``,
        ``weight.quant_state`` ...): torch.distributed.checkpoint.state_dict resolves every key of a model's
        state dict by getattr from the model, which the Params4bit's properties answer when it is in place."""
        w = self.weight
        for key, value in entries.items():
            name = key.split(".")[0]
            setattr(w, name, qs if name == "quant_state" else value)

    def _rewrap(self) -> None:
        """Makes a replaced weight a Params4bit again, with the module's state (after assign=True loading)."""
        w, qs = self.weight, self.quant_state
        self.weight = Params4bit(w.data, w.requires_grad, quant_state=qs, blocksize=qs.blocksize,
                                 compress_statistics=qs.nested, quant_type=qs.quant_type, quant_storage=w.dtype,
                                 module=self, bnb_quantized=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qs = self._state()
        dtype = self.compute_dtype or x.dtype
        if dtype not in FLOATS:
            raise TypeError(f"Linear4bit: the input must be float32, float16 or bfloat16 (got {x.dtype}); "
                            "set compute_dtype or convert the input")
        if dtype == torch.float32 and x.device.type == "cuda" and "cuda" not in _slow_warned:
            _slow_warned.add("cuda")
            warnings.warn(
                "Linear4bit: computing in float32 on CUDA takes the dequantize + float32 GEMM path, not the fused "
                "4-bit kernel (float16/bfloat16 only); set compute_dtype=torch.bfloat16 (or float16) for speed",
                stacklevel=2,
            )
        y = _calls.matmul_4bit(x.to(dtype), self._packed(), qs, self.bias)
        return y.to(x.dtype)

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        w = self.weight
        qs = (w.quant_state if isinstance(w, Params4bit) else None) or self.quant_state
        if qs is not None:
            entries = qs.as_dict(packed=True)
            for key, value in entries.items():
                destination[prefix + "weight." + key] = value
            if not isinstance(w, Params4bit):
                self._expose_state(entries, qs)

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any],
                              strict: bool, missing_keys: List[str], unexpected_keys: List[str],
                              error_msgs: List[str]) -> None:
        wkey = prefix + "weight"
        stats = quant_keys(state_dict, wkey)
        packed = state_dict.get(wkey)
        if stats and packed is not None:
            here = self.weight.device
            device = packed.device if here.type == "meta" else here
            try:
                qs = QuantState.from_dict(stats, device=device)
            except ValueError as e:
                error_msgs.append(f"Linear4bit: the quant state of {wkey} does not load: {e}")
                return
            if tuple(qs.shape) != (self.out_features, self.in_features):
                error_msgs.append(f"Linear4bit: {wkey} holds a weight of shape {list(qs.shape)}, this module's is "
                                  f"[{self.out_features}, {self.in_features}]")
                return
            if _is_dtensor(self.weight):
                # FSDP2's sharded parameter stays in place (FSDP holds it); the codes are copied into its shards
                w = self.weight
                if packed.dtype != w.dtype or tuple(packed.shape) != tuple(w.shape):
                    error_msgs.append(
                        f"Linear4bit: {wkey} holds packed codes {list(packed.shape)} as {packed.dtype}, but this "
                        f"module's weight is sharded by FSDP2 as {list(w.shape)} {w.dtype}, whose storage cannot "
                        f"change: load a dict quantized with quant_storage={w.dtype}, or "
                        "load it before sharding")
                    return
            else:
                self.weight = Params4bit(torch.empty_like(packed, device=device), False, quant_state=qs,
                                         blocksize=qs.blocksize, compress_statistics=qs.nested,
                                         quant_type=qs.quant_type, quant_storage=packed.dtype, module=self,
                                         bnb_quantized=True)
            self.quant_state = qs
            self.quant_storage = packed.dtype
        elif packed is not None and packed.dim() == 2 and packed.shape[1] == 1 and self.in_features != 1:
            error_msgs.append(f"Linear4bit: {wkey} holds packed 4-bit codes {list(packed.shape)} but the state dict "
                              f"has no {wkey}.quant_state.bitsandbytes__nf4 (or __fp4) entry to decode them")
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if stats and self.quant_state is not None and not isinstance(self.weight, Params4bit):
            if _is_dtensor(self.weight):
                self._expose_state(self.quant_state.as_dict(packed=True), self.quant_state)
            else:
                self._rewrap()  # load_state_dict(assign=True) put the tensor itself in place
        mine = {wkey + "." + k for k in stats}
        unexpected_keys[:] = [k for k in unexpected_keys if k not in mine]

    def extra_repr(self) -> str:
        w = self.weight
        kind = getattr(w, "quant_type", "?")
        state = "quantized" if getattr(w, "bnb_quantized", False) else "not quantized"
        return f"{super().extra_repr()}, quant_type={kind}, compute_dtype={self.compute_dtype}, {state}"


class LinearFP4(Linear4bit):
    """:class:`Linear4bit` with ``quant_type="fp4"``."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True,
                 compute_dtype: Optional[torch.dtype] = None, compress_statistics: bool = True,
                 quant_storage: torch.dtype = torch.uint8, device: Any = None, *, blocksize: int = 64):
        super().__init__(input_features, output_features, bias, compute_dtype, compress_statistics, "fp4",
                         quant_storage, device, blocksize=blocksize)


class LinearNF4(Linear4bit):
    """:class:`Linear4bit` with ``quant_type="nf4"`` (QLoRA's normal-float codes)."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True,
                 compute_dtype: Optional[torch.dtype] = None, compress_statistics: bool = True,
                 quant_storage: torch.dtype = torch.uint8, device: Any = None, *, blocksize: int = 64):
        super().__init__(input_features, output_features, bias, compute_dtype, compress_statistics, "nf4",
                         quant_storage, device, blocksize=blocksize)
