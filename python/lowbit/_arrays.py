"""Arrays in, same arrays out: the framework plumbing under lowbit.functional.

Every array argument crosses into C++ through DLPack without a copy, as the
pair ``(array, as)`` that ``python/src/arrays.h`` describes; every result comes
back as ``(array, dtype, device_type, device_index)`` and is handed to the
framework the call's main input came from, on that input's device. CUDA
results of frameworks that own their GPU memory (PyTorch, CuPy) are allocated
by that framework during the call (``Framework.allocator``): they come back as
its own arrays, counted by its memory statistics and held in its CUDA-graph
pools. Other results are a NumPy array for host memory and a DLPack capsule
for CUDA memory (lowbit's own stream-ordered pool).

A framework is imported here only when an argument already is one of its
arrays (it is then in ``sys.modules``), or when the caller names a CUDA device
for an op without inputs. NumPy is the one hard dependency.
"""

from __future__ import annotations

import operator
import sys
from itertools import repeat
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _lowbit

# Names the C++ side uses for the dtypes NumPy lacks (ml_dtypes' names too).
_BF16 = "bfloat16"
_FP8 = ("float8_e4m3fn", "float8_e5m2")
_EXTENDED = (_BF16,) + _FP8
# Every dtype a lowbit array can have.
_LOWBIT_DTYPE_NAMES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int32",
                       "int64")

# DLPack device types.
_KDLCPU = 1
_KDLCUDA = 2

Device = Tuple[str, int]  # ("cpu", 0) or ("cuda", index)
CPU: Device = ("cpu", 0)

_use_ml_dtypes = True  # tests switch it off to exercise the fallback


def ml_dtypes():
    """The ml_dtypes module when installed (and not switched off), else None."""
    if not _use_ml_dtypes:
        return None
    try:
        import ml_dtypes as mod
    except ImportError:
        return None
    return mod


def is_torch(x: Any) -> bool:
    """Whether x is an object of PyTorch (a tensor, a dtype), without importing torch."""
    return type(x).__module__.startswith("torch")


# ----------------------------------------------------------------- dtypes


def dtype_name(dtype: Any) -> str:
    """The lowbit name ("float32", "bfloat16", ...) of a framework dtype or a string."""
    if isinstance(dtype, str):
        return dtype[len("torch."):] if dtype.startswith("torch.") else dtype
    if is_torch(dtype):
        return str(dtype)[len("torch."):]
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _numpy_dtype(name: str) -> Any:
    """The NumPy dtype for a lowbit name: ml_dtypes' types for bfloat16/fp8
    when installed, else the unsigned integers of their width."""
    if name in _EXTENDED:
        mod = ml_dtypes()
        if mod is not None:
            return np.dtype(getattr(mod, name))
        return np.dtype(np.uint16 if name == _BF16 else np.uint8)
    return np.dtype(name)


# ------------------------------------------------------------- frameworks


class _Capsule:
    """A DLPack capsule of CUDA memory with the methods from_dlpack calls."""

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule: Any, device: Tuple[int, int]):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None):
        # The work producing the memory was enqueued on the consumer's current
        # stream (or the caller's explicit one), so there is nothing to order.
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("lowbit: this result was already imported")
        return capsule

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._device


class Framework:
    """How arrays of one framework go in and come out."""

    name = "?"
    has_streams = False  # False: CUDA results are synchronized before returning

    def device(self, x: Any) -> Device:
        kind, index = x.__dlpack_device__()
        kind = int(kind)
        if kind == _KDLCPU:
            return CPU
        if kind == _KDLCUDA:
            return ("cuda", int(index))
        raise TypeError(f"lowbit: arrays on DLPack device type {kind} are not supported (only CPU and CUDA)")

    def prepare(self, x: Any) -> Tuple[Any, str]:
        """(an object nanobind imports without a copy, the dtype its bits hold or "")."""
        return x, ""

    def prepare_out(self, x: Any, op: str, name: str) -> Tuple[Any, str]:
        """Like prepare, for a buffer the op writes into: never copied."""
        return self.prepare(x)

    def wrap(self, raw: Any, dtype: str) -> Any:
        """An array of this framework over an exported tensor (see module doc)."""
        raise NotImplementedError

    def current_stream(self, x: Any, device: Device) -> int:
        return 0

    def allocator(self, device: Device, stream: int, current: bool) -> Any:
        """alloc(shape, dtype name, device index, stream) -> (array, data
        pointer) allocating on `device` for `stream` (the framework's current
        stream when `current`) with this framework, or None to leave the
        call's CUDA results to lowbit's own allocator."""
        return None

    def dtype(self, name: str) -> Any:
        """This framework's dtype object for a lowbit dtype name."""
        return name

    def from_numpy(self, a: np.ndarray, device: Device) -> Any:
        """A NumPy array's values as an array of this framework on `device`."""
        return self.wrap(_lowbit.to_device((a, ""), device[0], device[1]), a.dtype.name)


def _as_numpy(raw: Any) -> Optional[np.ndarray]:
    return raw if isinstance(raw, np.ndarray) else None


class _NumPy(Framework):
    name = "numpy"

    def device(self, x: Any) -> Device:
        return CPU

    def prepare(self, x: Any) -> Tuple[Any, str]:
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if x.dtype.kind == "V":  # ml_dtypes arrays (kind V): NumPy's DLPack cannot export them
            name = x.dtype.name
            if name in _EXTENDED:
                return x.view(np.uint16 if name == _BF16 else np.uint8), name
        return x, ""

    def prepare_out(self, x: Any, op: str, name: str) -> Tuple[Any, str]:
        if not x.flags.c_contiguous:
            raise ValueError(f"{op}: {name} must be C-contiguous (it is written in place)")
        if not x.flags.writeable:
            raise ValueError(f"{op}: {name} must be writeable (it is written in place)")
        return self.prepare(x)

    def wrap(self, raw: Any, dtype: str) -> Any:
        array = _as_numpy(raw[0])
        if array is None:
            raise TypeError("lowbit: NumPy cannot hold CUDA memory; use a CUDA framework (PyTorch, CuPy)")
        if dtype in _EXTENDED:
            return array.view(_numpy_dtype(dtype))
        return array

    def dtype(self, name: str) -> Any:
        if name in _EXTENDED and ml_dtypes() is None:
            return name  # no NumPy dtype for it: QuantState.dtype stays a name
        return _numpy_dtype(name)

    def from_numpy(self, a: np.ndarray, device: Device) -> Any:
        if device != CPU:
            raise TypeError("lowbit: NumPy cannot hold CUDA memory")
        return a


class _Torch(Framework):
    name = "torch"
    has_streams = True

    def device(self, x: Any) -> Device:
        if x.is_cuda:
            return ("cuda", x.get_device())
        d = x.device
        if d.type == "cpu":
            return CPU
        raise TypeError(f"lowbit: torch tensors on '{d.type}' are not supported (only cpu and cuda)")

    def prepare(self, x: Any) -> Tuple[Any, str]:
        torch = sys.modules["torch"]
        fp8 = _TORCH_FP8 or _torch_fp8()
        # torch's own exporter: Tensor.__dlpack__ would order the legacy
        # default stream after the current one, a wait no op needs (the work
        # is enqueued on the current stream) and one a CUDA graph cannot capture.
        if not x.requires_grad and x.is_contiguous() and not x.is_conj() and not x.is_neg() and x.dtype not in fp8:
            return torch._C._to_dlpack(x), ""  # the common case, checked in one line: it is on every call's path
        if x.requires_grad:
            x = x.detach()
        if x.is_conj():
            x = x.resolve_conj()
        if x.is_neg():
            x = x.resolve_neg()
        if not x.is_contiguous():
            x = x.contiguous()
        name = ""
        if x.dtype in fp8:  # torch's DLPack export of fp8 varies by version: send the bytes
            name = dtype_name(x.dtype)
            x = x.view(torch.uint8)
        return torch._C._to_dlpack(x), name

    def prepare_out(self, x: Any, op: str, name: str) -> Tuple[Any, str]:
        if not x.is_contiguous():
            raise ValueError(f"{op}: {name} must be contiguous (it is written in place)")
        return self.prepare(x)

    def wrap(self, raw: Any, dtype: str) -> Any:
        torch = sys.modules["torch"]
        array, _, kind, index = raw
        if isinstance(array, torch.Tensor):
            return array
        if isinstance(array, np.ndarray):
            t = torch.from_numpy(array)
        else:
            t = torch.from_dlpack(_Capsule(array, (kind, index)))
        if dtype in _EXTENDED:
            t = t.view(getattr(torch, dtype))
        return t

    def current_stream(self, x: Any, device: Device) -> int:
        return int(sys.modules["torch"]._C._cuda_getCurrentRawStream(device[1]))

    def allocator(self, device: Device, stream: int, current: bool) -> Any:
        if current or stream == self.current_stream(None, device):
            return _torch_empty_form(device[1])
        return _on_stream(_torch_alloc, lambda: _torch_stream(stream, device[1]))

    def dtype(self, name: str) -> Any:
        import torch

        return getattr(torch, name)

    def from_numpy(self, a: np.ndarray, device: Device) -> Any:
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a))
        return t if device == CPU else t.to(f"cuda:{device[1]}")


class _CuPy(Framework):
    name = "cupy"
    has_streams = True

    def prepare(self, x: Any) -> Tuple[Any, str]:
        import cupy

        if not x.flags.c_contiguous:
            x = cupy.ascontiguousarray(x)
        return x, ""

    def prepare_out(self, x: Any, op: str, name: str) -> Tuple[Any, str]:
        if not x.flags.c_contiguous:
            raise ValueError(f"{op}: {name} must be C-contiguous (it is written in place)")
        return x, ""

    def wrap(self, raw: Any, dtype: str) -> Any:
        import cupy

        array, _, kind, index = raw
        if isinstance(array, cupy.ndarray):
            return array
        if isinstance(array, np.ndarray):
            raise TypeError("lowbit: CuPy holds CUDA memory only")
        a = cupy.from_dlpack(_Capsule(array, (kind, index)))
        if dtype in _EXTENDED:  # CuPy has no bfloat16/fp8: their bits
            a = a.view(cupy.uint16 if dtype == _BF16 else cupy.uint8)
        return a

    def current_stream(self, x: Any, device: Device) -> int:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)

    def allocator(self, device: Device, stream: int, current: bool) -> Any:
        import cupy

        if current or stream == self.current_stream(None, device):
            return _cupy_alloc
        return _on_stream(_cupy_alloc, lambda: cupy.cuda.ExternalStream(stream, device[1]))

    def dtype(self, name: str) -> Any:
        return name if name in _EXTENDED else np.dtype(name)

    def from_numpy(self, a: np.ndarray, device: Device) -> Any:
        import cupy

        if device == CPU:
            raise TypeError("lowbit: CuPy holds CUDA memory only")
        with cupy.cuda.Device(device[1]):
            return cupy.asarray(a)


class _Jax(Framework):
    name = "jax"

    def prepare(self, x: Any) -> Tuple[Any, str]:
        name = dtype_name(x.dtype)
        if name in _FP8:
            import jax
            import jax.numpy as jnp

            return jax.lax.bitcast_convert_type(x, jnp.uint8), name
        return x, ""

    def prepare_out(self, x: Any, op: str, name: str) -> Tuple[Any, str]:
        raise TypeError(f"{op}: {name}= cannot be a JAX array (JAX arrays are immutable)")

    def wrap(self, raw: Any, dtype: str) -> Any:
        import jax
        import jax.numpy as jnp

        array, _, kind, index = raw
        src = array if isinstance(array, np.ndarray) else _Capsule(array, (kind, index))
        a = jnp.from_dlpack(src) if hasattr(jnp, "from_dlpack") else jax.dlpack.from_dlpack(src)
        if dtype in _EXTENDED:
            a = jax.lax.bitcast_convert_type(a, getattr(jnp, dtype))
        return a

    def dtype(self, name: str) -> Any:
        import jax.numpy as jnp

        return jnp.dtype(name)


class _ArrayAPI(Framework):
    """Any other object with __dlpack__: results through its namespace's
    from_dlpack when it has __array_namespace__, else the raw DLPack object."""

    name = "array-api"

    def __init__(self, example: Any):
        self._namespace = example.__array_namespace__() if hasattr(example, "__array_namespace__") else None

    def wrap(self, raw: Any, dtype: str) -> Any:
        array, _, kind, index = raw
        src = array if isinstance(array, np.ndarray) else _Capsule(array, (kind, index))
        if self._namespace is None:
            return src
        return self._namespace.from_dlpack(src)


# ------------------------------------------------------- framework allocation



_TORCH_FP8: tuple = ()
# lowbit's dtypes but fp8 as torch's: real, so never with the conjugate bit (torch sets it on complex tensors only)
_TORCH_REAL: frozenset = frozenset()
_DTYPE = operator.attrgetter("dtype")


def _torch_fp8() -> tuple:
    global _TORCH_FP8
    import torch

    _TORCH_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    return _TORCH_FP8


def _torch_real() -> frozenset:
    global _TORCH_REAL
    torch = sys.modules["torch"]
    fp8 = _TORCH_FP8 or _torch_fp8()
    _TORCH_REAL = frozenset(getattr(torch, name) for name in _LOWBIT_DTYPE_NAMES) - frozenset(fp8)
    return _TORCH_REAL


# Per device index: (torch.empty, {lowbit dtype name: torch dtype}, the
# torch.device, the index) — the fast allocator form the binding calls itself
# (python/src/arrays.h, CallContext), and what _torch_alloc looks dtypes up in.
_TORCH_EMPTY: dict = {}


def _torch_empty_form(index: int) -> tuple:
    form = _TORCH_EMPTY.get(index)
    if form is None:
        torch = sys.modules["torch"]
        dtypes = {name: getattr(torch, name) for name in _LOWBIT_DTYPE_NAMES}
        form = _TORCH_EMPTY[index] = (torch.empty, dtypes, torch.device("cuda", index), index)
    return form


def _torch_alloc(shape: Tuple[int, ...], dtype: str, index: int, stream: int) -> Tuple[Any, int]:
    """A torch.empty result for a call running on the current stream."""
    empty, dtypes, device, _ = _torch_empty_form(index)
    t = empty(shape, dtype=dtypes[dtype], device=device)
    return t, t.data_ptr()


def _torch_stream(stream: int, index: int) -> Any:
    import torch

    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=torch.device("cuda", index)))


# CuPy has no bfloat16 / fp8: their bits (lowbit's dtype name says what they are).
_CUPY_BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def _cupy_alloc(shape: Tuple[int, ...], dtype: str, index: int, stream: int) -> Tuple[Any, int]:
    import cupy

    with cupy.cuda.Device(index):
        a = cupy.empty(shape, dtype=_CUPY_BITS.get(dtype, dtype))
    return a, a.data.ptr


def _on_stream(alloc: Any, context: Any) -> Any:
    """`alloc` with the framework's current stream set to the call's stream, so
    the framework's allocator orders the memory there."""

    def on_stream(shape: Tuple[int, ...], dtype: str, index: int, stream: int) -> Tuple[Any, int]:
        with context():
            return alloc(shape, dtype, index, stream)

    return on_stream


# What DLPack carries of NumPy's dtypes; other arrays would fail in the binding.
_NUMPY_KINDS = {"b": 1, "i": 8, "u": 8, "f": 8, "c": 16}  # kind -> largest itemsize
_LOWBIT_DTYPES = ", ".join(_LOWBIT_DTYPE_NAMES)


def _check_numpy(a: np.ndarray, op: str, name: str) -> None:
    """A NumPy array the binding can import: native byte order, a number dtype."""
    dt = a.dtype
    if dt.kind not in _NUMPY_KINDS or dt.itemsize > _NUMPY_KINDS[dt.kind]:
        raise TypeError(f"{op}: {name} dtype must be one of {_LOWBIT_DTYPES} (got {dt})")
    if not dt.isnative:
        native = dt.newbyteorder("=")
        order = "big" if dt.byteorder == ">" else "little"
        raise TypeError(
            f"{op}: {name} must be in the machine's byte order (got {order}-endian {native.name}); "
            f"convert it with .astype('{native.name}')"
        )


NUMPY = _NumPy()
TORCH = _Torch()
CUPY = _CuPy()
JAX = _Jax()


def _isinstance_of(x: Any, module: str, attr: str) -> bool:
    mod = sys.modules.get(module)
    return mod is not None and isinstance(x, getattr(mod, attr))


# Array types seen before -> their framework (the lookup is on every call's path).
_KNOWN_TYPES: dict = {}


def framework_of(x: Any, op: str, name: str) -> Framework:
    """The framework of array argument `name`; TypeError for anything else."""
    fw = _KNOWN_TYPES.get(type(x))
    if fw is not None:
        return fw
    if isinstance(x, np.ndarray):
        fw = NUMPY
    elif _isinstance_of(x, "torch", "Tensor"):
        fw = TORCH
    elif _isinstance_of(x, "cupy", "ndarray"):
        fw = CUPY
    elif _isinstance_of(x, "jax", "Array"):
        fw = JAX
    if fw is not None:
        _KNOWN_TYPES[type(x)] = fw
        return fw
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _ArrayAPI(x)
    raise TypeError(
        f"{op}: {name} must be an array with __dlpack__ (NumPy, PyTorch, CuPy, JAX) (got {type(x).__name__})"
    )


# ------------------------------------------------------------------ scalars
# Checked here, so that a bad scalar is reported by its op and name rather
# than by the binding's signature (which nanobind prints on a failed conversion).

_INT_RANGES = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}


def integer(value: Any, op: str, name: str, bits: int = 64) -> int:
    """`value` as a Python int of a signed `bits`-bit range (any int-like: NumPy integers too)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be an integer (got {value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer (got {type(value).__name__} {value!r})") from None
    lo, hi = _INT_RANGES[bits]
    if not lo <= v <= hi:
        raise ValueError(f"{op}: {name} must be a {bits}-bit integer, from {lo} to {hi} (got {v})")
    return v


def real(value: Any, op: str, name: str) -> float:
    """`value` as a float (ints, NumPy scalars and 0-d arrays too)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}: {name} must be a real number (got {type(value).__name__} {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a real number (got {type(value).__name__} {value!r})") from None


def flag(value: Any, op: str, name: str) -> bool:
    """`value` as a bool: True, False, NumPy booleans, or the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v in (0, 1):
        return bool(v)
    raise TypeError(f"{op}: {name} must be True or False (got {type(value).__name__} {value!r})")


def text(value: Any, op: str, name: str) -> str:
    """`value` as a str (no conversion of other types)."""
    if not isinstance(value, str):
        raise TypeError(f"{op}: {name} must be a string (got {type(value).__name__} {value!r})")
    return value


def shape_of(value: Any, op: str, name: str) -> list:
    """A shape (any sequence of integers) as a list of int64 values."""
    try:
        dims = list(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be a sequence of integers (got {type(value).__name__})") from None
    return [integer(d, op, f"{name}[{i}]") for i, d in enumerate(dims)]


# ----------------------------------------------------------- devices, streams


def parse_device(device: Any) -> Tuple[Device, Optional[Framework]]:
    """(device, framework it names or None) for None, "cpu", "cuda", "cuda:N",
    an int N (CUDA ordinal), a torch.device, or an array (its framework and device)."""
    if device is None:
        return CPU, None
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind == "cpu" and not index:
            return CPU, None
        if kind == "cuda" and (not index or index.isdigit()):
            return ("cuda", int(index) if index else _current_cuda_device()), None
        raise ValueError(f"lowbit: device must be 'cpu', 'cuda' or 'cuda:N' (got '{device}')")
    if isinstance(device, int) and not isinstance(device, bool):
        return ("cuda", device), None
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        if device.type == "cpu":
            return CPU, TORCH
        if device.type == "cuda":
            return ("cuda", device.index if device.index is not None else _current_cuda_device()), TORCH
        raise ValueError(f"lowbit: device must be cpu or cuda (got torch.device('{device}'))")
    if hasattr(device, "__dlpack__"):
        fw = framework_of(device, "lowbit", "device")
        return fw.device(device), fw
    raise TypeError(f"lowbit: device must be None, a string, an int, a torch.device or an array (got {device!r})")


def _current_cuda_device() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.current_device())
    return 0


def framework_for(device: Device, hint: Optional[Framework]) -> Framework:
    """The framework results on `device` go to when no input decides: the hint
    (unless it cannot hold that device), NumPy for the CPU, else PyTorch when
    installed, else CuPy."""
    if hint is not None and not (hint is NUMPY and device != CPU) and not (hint is CUPY and device == CPU):
        return hint
    if device == CPU:
        return NUMPY
    for module, fw in (("torch", TORCH), ("cupy", CUPY)):
        try:
            __import__(module)
        except ImportError:
            continue
        return fw
    raise TypeError("lowbit: CUDA arrays need PyTorch or CuPy installed")


def stream_handle(stream: Any) -> Optional[int]:
    """A cudaStream_t handle from an int, a torch.cuda.Stream (cuda_stream), a
    CuPy stream (ptr) or any object with __cuda_stream__; None stays None."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = int(stream.__cuda_stream__()[1])
    elif hasattr(stream, "cuda_stream"):
        handle = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):
        handle = int(stream.ptr)
    else:
        raise TypeError(
            f"lowbit: stream must be an int (cudaStream_t), a torch.cuda.Stream, a CuPy stream or have "
            f"__cuda_stream__ (got {type(stream).__name__})"
        )
    if not 0 <= handle < 2**64:
        raise ValueError(f"lowbit: stream must be a cudaStream_t handle, from 0 to 2**64 - 1 (got {handle})")
    return handle


# ---------------------------------------------------------------- one call


class Call:
    """One op call: the main input fixes the framework, device and stream."""

    def __init__(self, op: str, main: Any, name: str, stream: Any = None):
        self.op = op
        self.fw = framework_of(main, op, name)
        self.device = self.fw.device(main)
        explicit = stream_handle(stream)
        self.sync = False
        if self.device == CPU:
            self.stream = 0
        elif explicit is not None:
            self.stream = explicit
        else:
            self.stream = self.fw.current_stream(main, self.device)
            self.sync = not self.fw.has_streams
        # What the C++ ops take as `stream`: the stream, with the framework's
        # allocator for CUDA results where it has one.
        alloc = None if self.device == CPU else self.fw.allocator(self.device, self.stream, explicit is None)
        self.ctx = self.stream if alloc is None else (self.stream, alloc)

    def arg(self, x: Any, name: str, view_as: str = "") -> Tuple[Any, str]:
        """An input array of any framework, as the C++ side takes it."""
        fw = framework_of(x, self.op, name)
        obj, as_ = fw.prepare(x)
        if fw is NUMPY:
            _check_numpy(obj, self.op, name)
        return obj, view_as or as_

    def opt(self, x: Any, name: str, view_as: str = "") -> Optional[Tuple[Any, str]]:
        return None if x is None else self.arg(x, name, view_as)

    def out(self, x: Any, name: str, view_as: str = "") -> Optional[Tuple[Any, str]]:
        """A buffer the op writes into (bitsandbytes' out=, absmax=), or None."""
        if x is None:
            return None
        fw = framework_of(x, self.op, name)
        obj, as_ = fw.prepare_out(x, self.op, name)
        if fw is NUMPY:
            _check_numpy(obj, self.op, name)
        return obj, view_as or as_

    def many(self, xs: Sequence[Any], name: str, out: bool) -> List[Any]:
        """A list argument (the multi-tensor ops: hundreds of arrays a call), each as arg()/out() takes it, with
        PyTorch tensors of the common kind (contiguous, not fp8, conj or neg) exported directly: the
        per-array checks cost more than the op's launch otherwise."""
        one = self.out if out else self.arg
        if self.fw is not TORCH:
            return [None if x is None else one(x, f"{name}[{i}]") for i, x in enumerate(xs)]
        torch = sys.modules["torch"]
        export, tensor = torch._C._to_dlpack, torch.Tensor
        contiguous, neg = tensor.is_contiguous, tensor.is_neg  # unbound: no lookup per array
        # the exporter takes a tensor that requires grad as it is (the memory detach() would give); a list of the
        # common kind throughout is checked and exported by map(), without bytecode per array, its real dtypes
        # ruling out the conjugate bit
        if all(map(isinstance, xs, repeat(tensor))) and all(map(contiguous, xs)) \
                and (_TORCH_REAL or _torch_real()).issuperset(map(_DTYPE, xs)) and not any(map(neg, xs)):
            return list(zip(map(export, xs), repeat("")))
        fp8 = _TORCH_FP8 or _torch_fp8()
        got: List[Any] = []
        for i, x in enumerate(xs):
            if isinstance(x, tensor) and contiguous(x) and x.dtype not in fp8 and not x.is_conj() and not neg(x):
                got.append((export(x), ""))
            else:
                got.append(None if x is None else one(x, f"{name}[{i}]"))
        return got

    def scalar(self, value: Any, name: str) -> Tuple[Any, str]:
        """A float (or 0-d/1-element array) as a float32 [1] input."""
        if hasattr(value, "__dlpack__"):
            return self.arg(value, name)
        return np.asarray([value], dtype=np.float32), ""

    def result(self, raw: Any) -> Any:
        """An exported tensor as an array of the call's framework."""
        return None if raw is None else self.fw.wrap(raw, raw[1])

    def done(self) -> None:
        """Frameworks without streams (JAX, others) get finished results."""
        if self.sync:
            _lowbit.synchronize(self.stream)
