"""Paged tensors (bitsandbytes' ``get_paged``, ``prefetch_tensor``, ``fill``, ``arange``, ``_mul`` and
``GlobalPageManager``): CUDA managed memory that the driver moves between the GPU and the host, so that
optimizer states larger than free GPU memory still train. The tensors are CUDA tensors of their framework;
every lowbit and framework op reads them where their pages are, and ``prefetch_tensor`` moves the pages
ahead of use. Nothing here waits for the GPU (bitsandbytes' ``fill``/``arange``/``_mul`` synchronize)."""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import numpy as np

from . import _arrays, _lowbit

__all__ = ["GlobalPageManager", "get_paged", "prefetch_tensor", "fill", "arange", "_mul", "elementwise_func"]


def _device_index(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    text = str(device)
    if text == "cuda":
        return getattr(device, "index", None) or 0
    if text.startswith("cuda:"):
        return int(text[len("cuda:"):])
    raise ValueError(f"get_paged: device must be a CUDA device (got {device!r})")


def get_paged(*shape: int, dtype: Any = "float32", device: Any = None) -> Any:
    """An uninitialized tensor of ``shape`` in CUDA managed memory (``fill`` it before use).

    ``dtype``: a framework dtype or its name; ``device``: ``torch.device("cuda", i)``, ``"cuda:i"`` or
    ``i`` (default 0). Returns a PyTorch CUDA tensor (a CuPy array where PyTorch is absent) marked
    ``is_paged = True`` with ``page_deviceid``. Its memory is given back when the tensor is freed
    (``cudaFree``, which waits for the device: keep paged tensors for the run, as optimizer states are).
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    sizes = [_arrays.integer(s, "get_paged", "shape") for s in shape]
    if any(s < 0 for s in sizes):
        raise ValueError(f"get_paged: shape must not be negative (got {tuple(sizes)})")
    index = _device_index(device)
    name = _arrays.dtype_name(dtype)
    raw = _lowbit.empty_managed(sizes, name, index)
    if "torch" in sys.modules or _importable("torch"):
        fw = _arrays.TORCH
    elif _importable("cupy"):
        fw = _arrays.CUPY
    else:
        raise TypeError("get_paged: paged tensors are PyTorch tensors (or CuPy arrays); neither is installed")
    out = fw.wrap(raw, name)
    _mark(out, index)
    return out


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return False


def _mark(out: Any, index: int) -> None:
    try:
        out.is_paged = True
        out.page_deviceid = index
    except AttributeError:  # CuPy arrays take no attributes: GlobalPageManager still lists them
        pass


def prefetch_tensor(A: Any, to_cpu: bool = False, *, stream: Any = None) -> None:
    """Moves the pages of paged tensor ``A`` to its GPU (or to the host with ``to_cpu=True``), ordered on
    ``stream`` (default: the framework's current stream). ValueError when ``A`` is not managed memory."""
    call = _arrays.Call("prefetch_tensor", A, "A", stream)
    if call.device == _arrays.CPU:
        raise ValueError("prefetch_tensor: A must be a paged tensor (CUDA managed memory; got a CPU array)")
    index = getattr(A, "page_deviceid", call.device[1])
    _lowbit.prefetch(call.arg(A, "A", "bytes"), "cpu" if to_cpu else "cuda", 0 if to_cpu else index, call.stream)


def _flat(A: Any) -> Any:
    return A.reshape(-1)


def elementwise_func(func_name: str, A: Any, B: Any, value: Any, prefetch: bool = True) -> None:
    """bitsandbytes' elementwise helpers over (paged) arrays, in place: ``fill`` (``A[:] = value``),
    ``arange`` (``A[i] = i``) and ``_mul`` (``A *= B``), on the framework's current stream."""
    if func_name not in ("fill", "arange", "_mul"):
        raise ValueError(f"elementwise_func: func_name must be 'fill', 'arange' or '_mul' (got {func_name!r})")
    fw = _arrays.framework_of(A, func_name, "A")
    if fw is _arrays.JAX:
        raise TypeError(f"{func_name}: A must be a writable array (JAX arrays are immutable)")
    if prefetch:
        for t in (A, B):
            if t is not None and getattr(t, "is_paged", False):
                prefetch_tensor(t)
    flat = _flat(A)
    if func_name == "fill":
        flat[...] = value
    elif func_name == "arange":
        device = fw.device(A)
        flat[...] = fw.from_numpy(np.arange(flat.shape[0]).astype(_arrays.dtype_name(A.dtype)), device)
    else:
        if B is None:
            raise ValueError("_mul: B must be given")
        flat *= _flat(B)


def fill(A: Any, value: Any, device: Any = None, prefetch: bool = True) -> None:
    """``A[:] = value`` in place (bitsandbytes' ``fill``)."""
    elementwise_func("fill", A, None, value, prefetch)


def arange(A: Any, device: Any = None) -> None:
    """``A[i] = i`` over the flattened ``A`` in place (bitsandbytes' ``arange``)."""
    elementwise_func("arange", A, None, 0)


def _mul(A: Any, B: Any, device: Any = None) -> None:
    """``A *= B`` element by element in place (bitsandbytes' ``_mul``)."""
    elementwise_func("_mul", A, B, 0)


class GlobalPageManager:
    """The paged tensors the optimizers made, for ``prefetch_all`` (bitsandbytes' ``GlobalPageManager``)."""

    _instance: Optional["GlobalPageManager"] = None

    def __init__(self):
        raise RuntimeError("GlobalPageManager: call GlobalPageManager.get_instance()")

    def initialize(self) -> None:
        self.paged_tensors: List[Any] = []

    @classmethod
    def get_instance(cls) -> "GlobalPageManager":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def prefetch_all(self, to_cpu: bool = False) -> None:
        # the first tensors made are used first: prefetched last, they are the likeliest to stay
        for t in self.paged_tensors[::-1]:
            prefetch_tensor(t, to_cpu)
