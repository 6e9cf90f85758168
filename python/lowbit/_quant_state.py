"""QuantState: what dequantization needs besides the codes (bitsandbytes' class)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, Optional

import numpy as np

from . import _arrays, _lowbit


def _host(x: Any) -> np.ndarray:
    """A host NumPy copy of any array (for comparisons)."""
    fw = _arrays.framework_of(x, "QuantState", "array")
    obj, as_ = fw.prepare(x)
    raw = _lowbit.to_device((obj, as_), "cpu", 0)
    return _arrays.NUMPY.wrap(raw, raw[1])


def _move(x: Any, device: Any) -> Any:
    """`x` on `device` (None stays None); torch tensors move with torch itself."""
    if x is None:
        return None
    fw = _arrays.framework_of(x, "QuantState.to", "array")
    if fw is _arrays.TORCH:
        return x.to(device)
    dev, hint = _arrays.parse_device(device)
    target = _arrays.framework_for(dev, hint or fw)
    if target is fw and fw.device(x) == dev:
        return x
    obj, as_ = fw.prepare(x)
    raw = _lowbit.to_device((obj, as_), dev[0], dev[1])
    return target.wrap(raw, raw[1])


def _is_8bit_dict(qs_dict: Mapping) -> bool:
    """True for bitsandbytes' dict of an 8-bit state: a ``quant_type`` entry that is None."""
    return any(str(key).split(".")[-1] == "quant_type" and value is None for key, value in qs_dict.items())


def _scalar(x: Any) -> Any:
    """A one-element array as a Python number (read on the host: serialization only); others unchanged."""
    if hasattr(x, "__dlpack__"):
        return _host(x).reshape(-1)[0].item()
    return x.item() if isinstance(x, np.generic) else x


def _copy(x: Any) -> Any:
    """A copy of an array in its own framework (an immutable array is its own copy)."""
    if hasattr(x, "clone"):
        return x.clone()
    return x.copy() if hasattr(x, "copy") else x


class QuantState:
    """Container for the quantization state of blockwise / 4-bit quantization.

    Mirrors ``bitsandbytes.functional.QuantState``: ``absmax`` (float32 per
    block, or uint8 codes when nested), ``code`` (the 256-entry map or the
    16-entry 4-bit table), ``blocksize``, ``shape`` (of the original tensor),
    ``dtype`` (of the original tensor: a torch/NumPy dtype, or a name such as
    ``"bfloat16"`` where NumPy has none), ``quant_type`` (``"nf4"``/``"fp4"``
    for 4-bit, None for 8-bit), and for double quantization ``offset`` (0-d
    float32), ``state2`` (the QuantState of the absmax itself) and ``nested``.
    Arrays are of the framework and on the device of the quantized input.
    """

    valid_quant_types = ("fp4", "nf4")
    valid_qs_type_keys = [f"bitsandbytes__{x}" for x in valid_quant_types]
    valid_qs_keys = [
        "absmax",
        "quant_map",
        "nested_absmax",
        "nested_quant_map",
        "quant_state",
        "quant_type",
        "blocksize",
        "dtype",
        "shape",
        "nested_blocksize",
        "nested_dtype",
        "nested_offset",
    ]

    def __init__(
        self,
        absmax: Any,
        shape: Any = None,
        code: Any = None,
        blocksize: Optional[int] = None,
        quant_type: Optional[str] = None,
        dtype: Any = None,
        offset: Any = None,
        state2: Optional["QuantState"] = None,
    ):
        self.absmax = absmax
        self.shape = shape
        self.code = code
        self.dtype = dtype
        self.blocksize = blocksize
        self.quant_type = quant_type
        self.offset = offset
        self.state2 = state2
        self.nested = state2 is not None

    def __getattr__(self, name: str) -> Any:
        """``bitsandbytes__<quant_type>``: the packed dict's ``quant_state.`` entry, as bitsandbytes gives it, for
        FSDP's state_dict traversal (it reads each key's path with getattr)."""
        if name.startswith("bitsandbytes__") and name[len("bitsandbytes__"):] in self.valid_quant_types:
            packed = self.as_dict(packed=True)
            if "quant_state." + name in packed:
                return packed["quant_state." + name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __getitem__(self, idx: int) -> Any:
        """The old list layout: [absmax, shape, dtype, blocksize, [offset, state2] or None, quant_type]."""
        nested = [self.offset, self.state2] if self.nested else None
        return [self.absmax, self.shape, self.dtype, self.blocksize, nested, self.quant_type][idx]

    @classmethod
    def from_dict(cls, qs_dict: Dict[str, Any], device: Any) -> "QuantState":
        """Rebuild a 4-bit state from its bitsandbytes dict, packed or unpacked.

        ``qs_dict`` is what :meth:`as_dict` (or bitsandbytes, or a checkpoint
        loader) produced: tensors ``absmax``, ``quant_map`` (+ ``nested_absmax``,
        ``nested_quant_map``) and either the packed
        ``quant_state.bitsandbytes__<nf4|fp4>`` JSON bytes or the fields as
        separate entries; keys may share a ``"<weight>."`` prefix. ``device``:
        ``"cpu"``, ``"cuda[:N]"``, a torch.device, or an array to follow.
        Arrays come back in the framework of the dict's tensors (CUDA ones in
        PyTorch, else CuPy, when those were NumPy). Raises ValueError naming
        the missing or malformed key. An 8-bit dict (``quant_type`` None, as
        :meth:`as_dict` gives for 8-bit states) rebuilds an 8-bit state.
        """
        if not isinstance(qs_dict, Mapping):
            raise TypeError(f"QuantState.from_dict: qs_dict must be a dict of the state's entries "
                            f"(got {type(qs_dict).__name__})")
        if _is_8bit_dict(qs_dict):
            return cls._from_8bit_dict(qs_dict, device)
        tensors = []
        values: Dict[str, Any] = {}
        fw = None
        for key, value in qs_dict.items():
            if hasattr(value, "__dlpack__"):
                f = _arrays.framework_of(value, "QuantState.from_dict", key)
                fw = fw or f
                tensors.append((key, f.prepare(value)))
            elif isinstance(value, np.generic):
                values[key] = value.item()
            else:
                values[key] = value
        dev, hint = _arrays.parse_device(device)
        target = _arrays.framework_for(dev, hint or fw)
        r = _lowbit.quant_state_from_dict(tensors, values, dev[0], dev[1])

        def wrap(raw: Any) -> Any:
            return target.wrap(raw, raw[1])

        state2 = None
        offset = None
        if "absmax2" in r:
            state2 = cls(
                absmax=wrap(r["absmax2"]),
                code=wrap(r["code2"]),
                blocksize=r["blocksize2"],
                dtype=target.dtype(r["dtype2"]),
            )
            offset = wrap(r["offset"])
        return cls(
            absmax=wrap(r["absmax"]),
            shape=tuple(r["shape"]),
            code=wrap(r["code"]),
            blocksize=r["blocksize"],
            quant_type=r["quant_type"],
            dtype=target.dtype(r["dtype"]),
            offset=offset,
            state2=state2,
        )

    def as_dict(self, packed: bool = False) -> Dict[str, Any]:
        """The state as bitsandbytes' dict, for ``state_dict`` / safetensors.

        Unpacked: ``quant_type``, ``absmax``, ``blocksize``, ``quant_map``,
        ``dtype`` (a name such as ``"bfloat16"``), ``shape`` (a tuple) and, when
        nested, ``nested_absmax``, ``nested_blocksize``, ``nested_quant_map``,
        ``nested_dtype``, ``nested_offset`` (a float). Packed (``packed=True``):
        only arrays — the non-array fields go into
        ``quant_state.bitsandbytes__<quant_type>``, a uint8 array of UTF-8 JSON
        written byte for byte as bitsandbytes writes it. Arrays are in the
        state's framework, on its device. An 8-bit state (``quant_type`` None)
        gives bitsandbytes' unpacked dict either way (``quant_type: None``,
        ``shape`` None when unknown), as bitsandbytes does.
        """
        if not self.quant_type:
            return self._as_8bit_dict()
        fw = _arrays.framework_of(self.absmax, "QuantState.as_dict", "absmax")
        device = fw.device(self.absmax)
        call = _arrays.Call("QuantState.as_dict", self.absmax, "absmax")
        op = call.op
        nested = None
        if self.nested:
            s2 = self.state2
            nested = (
                call.arg(s2.absmax, "state2.absmax"),
                call.arg(s2.code, "state2.code"),
                _arrays.integer(s2.blocksize, op, "state2.blocksize"),
                _arrays.dtype_name(s2.dtype if s2.dtype is not None else "float32"),
                _arrays.real(self.offset, op, "offset"),
            )
        if self.code is None:
            raise ValueError("QuantState.as_dict: code is required (got None)")
        if self.shape is None:
            raise ValueError("QuantState.as_dict: shape is required (got None)")
        r = _lowbit.quant_state_as_dict(
            call.arg(self.absmax, "absmax"),
            call.arg(self.code, "code"),
            _arrays.integer(self.blocksize, op, "blocksize"),
            _arrays.shape_of(self.shape, op, "shape"),
            _arrays.dtype_name(self.dtype if self.dtype is not None else "float32"),
            _arrays.text(self.quant_type or "", op, "quant_type"),
            nested,
            _arrays.flag(packed, op, "packed"),
        )
        out: Dict[str, Any] = {}
        for key, value in r.items():
            if isinstance(value, tuple) and len(value) == 4 and isinstance(value[1], str):
                if device != _arrays.CPU:
                    value = _lowbit.to_device((value[0], value[1]), device[0], device[1])
                out[key] = fw.wrap(value, value[1])
            else:
                out[key] = value
        return out

    def _as_8bit_dict(self) -> Dict[str, Any]:
        """bitsandbytes' dict of an 8-bit blockwise state: the arrays themselves, the rest as plain values."""
        op = "QuantState.as_dict"
        if self.absmax is None or self.code is None:
            raise ValueError(f"{op}: an 8-bit state needs absmax and code (got absmax={type(self.absmax).__name__}, "
                             f"code={type(self.code).__name__})")
        d: Dict[str, Any] = {
            "quant_type": None,
            "absmax": self.absmax,
            "blocksize": _arrays.integer(self.blocksize, op, "blocksize"),
            "quant_map": self.code,
            "dtype": _arrays.dtype_name(self.dtype if self.dtype is not None else "float32"),
            "shape": tuple(int(v) for v in self.shape) if self.shape is not None else None,
        }
        if self.nested:
            s2 = self.state2
            d.update({
                "nested_absmax": s2.absmax,
                "nested_blocksize": _arrays.integer(s2.blocksize, op, "state2.blocksize"),
                "nested_quant_map": _copy(s2.code),  # not shared, as bitsandbytes: safetensors drops shared arrays
                "nested_dtype": _arrays.dtype_name(s2.dtype if s2.dtype is not None else "float32"),
                "nested_offset": _arrays.real(_scalar(self.offset), op, "offset"),
            })
        return d

    @classmethod
    def _from_8bit_dict(cls, qs_dict: Mapping, device: Any) -> "QuantState":
        """The 8-bit state of bitsandbytes' dict (``quant_type`` None), its arrays moved to ``device``."""
        op = "QuantState.from_dict"
        d = {str(k).split(".")[-1]: v for k, v in qs_dict.items()}
        unknown = sorted(set(d) - set(cls.valid_qs_keys))
        if unknown:
            raise ValueError(f"{op}: unknown key {unknown[0]!r} in an 8-bit state dict (expected {cls.valid_qs_keys})")
        for key in ("absmax", "quant_map", "blocksize", "dtype"):
            if key not in d:
                raise ValueError(f"{op}: an 8-bit state dict needs {key!r} (got keys {sorted(d)})")

        def array(key: str) -> Any:
            if not hasattr(d[key], "__dlpack__"):
                raise TypeError(f"{op}: {key} must be an array (got {type(d[key]).__name__})")
            return _move(d[key], device)

        absmax = array("absmax")
        fw = _arrays.framework_of(absmax, op, "absmax")
        state2 = offset = None
        if "nested_absmax" in d:
            for key in ("nested_quant_map", "nested_blocksize", "nested_offset"):
                if key not in d:
                    raise ValueError(f"{op}: a nested 8-bit state dict needs {key!r} (got keys {sorted(d)})")
            state2 = cls(absmax=array("nested_absmax"), code=array("nested_quant_map"),
                         blocksize=_arrays.integer(d["nested_blocksize"], op, "nested_blocksize"),
                         dtype=fw.dtype(_arrays.text(d.get("nested_dtype", "float32"), op, "nested_dtype")))
            value = np.asarray(_arrays.real(_scalar(d["nested_offset"]), op, "nested_offset"), dtype=np.float32)
            offset = fw.from_numpy(value, fw.device(absmax))
        shape = d.get("shape")
        return cls(absmax=absmax, code=array("quant_map"),
                   blocksize=_arrays.integer(d["blocksize"], op, "blocksize"),
                   dtype=fw.dtype(_arrays.text(d["dtype"], op, "dtype")),
                   shape=tuple(int(v) for v in shape) if shape is not None else None,
                   offset=offset, state2=state2)

    def to(self, device: Any) -> "QuantState":
        """Moves the state's arrays to ``device`` (in place, like bitsandbytes); returns self."""
        self.absmax = _move(self.absmax, device)
        self.code = _move(self.code, device)
        if self.nested:
            self.offset = _move(self.offset, device)
            self.state2.absmax = _move(self.state2.absmax, device)
            self.state2.code = _move(self.state2.code, device)
        return self

    def __eq__(self, other: object) -> bool:
        """Equal fields; arrays compared by value (on the host)."""
        if not isinstance(other, QuantState):
            return False

        def same(a: Any, b: Any) -> bool:
            if a is None or b is None:
                return a is None and b is None
            x, y = _host(a), _host(b)
            return x.shape == y.shape and np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))

        return (
            same(self.absmax, other.absmax)
            and same(self.code, other.code)
            and (tuple(self.shape) if self.shape is not None else None)
            == (tuple(other.shape) if other.shape is not None else None)
            and _arrays.dtype_name(self.dtype) == _arrays.dtype_name(other.dtype)
            and self.blocksize == other.blocksize
            and self.quant_type == other.quant_type
            and (self.offset is None) == (other.offset is None)
            and (self.offset is None or float(self.offset) == float(other.offset))
            and (self.state2 == other.state2 if self.nested else other.state2 is None)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        kind = f"quant_type={self.quant_type!r}" if self.quant_type else "8-bit"
        shape = tuple(self.shape) if self.shape is not None else None
        return (
            f"QuantState({kind}, blocksize={self.blocksize}, shape={shape}, "
            f"dtype={_arrays.dtype_name(self.dtype) if self.dtype is not None else None}, nested={self.nested})"
        )
