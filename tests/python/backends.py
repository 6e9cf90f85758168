"""The array backends the suite runs each op on: NumPy, PyTorch (CPU, CUDA),
CuPy and JAX when installed. Each turns NumPy test data into its arrays and
back, and says why it is skipped when it cannot run here."""

from __future__ import annotations

import importlib
from typing import Any, Optional

import numpy as np

import lowbit

F32 = np.float32


def _module(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return None


def ml_dtypes():
    return _module("ml_dtypes")


def torch_cuda_reason() -> Optional[str]:
    """Why torch CUDA cases cannot run here, or None when they can."""
    torch = _module("torch")
    if torch is None:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if not lowbit._lowbit.built_with_cuda:
        return "lowbit was built without its CUDA backend (LOWBIT_CUDA=OFF or no nvcc)"
    if lowbit.cuda_device_count() == 0:
        return "lowbit sees no CUDA device"
    return None


class Backend:
    name = "?"
    device = "cpu"
    writable = True  # can be an out= / absmax= buffer

    def skip_reason(self) -> Optional[str]:
        return None

    def array(self, a: np.ndarray, dtype: str = "") -> Any:
        """NumPy data as this backend's array; dtype bfloat16/float16/float8_e4m3fn
        converts float32 values (exactly representable ones, in the tests)."""
        raise NotImplementedError

    def numpy(self, a: Any) -> np.ndarray:
        """Values as NumPy: float types as float32, fp8 as its uint8 bits, ints as they are."""
        raise NotImplementedError

    def is_native(self, a: Any) -> bool:
        raise NotImplementedError

    def supports(self, dtype: str) -> bool:
        return True


class NumPyBackend(Backend):
    name = "numpy"

    def supports(self, dtype: str) -> bool:
        return dtype not in ("bfloat16", "float8_e4m3fn") or ml_dtypes() is not None

    def array(self, a, dtype=""):
        a = np.asarray(a)
        if dtype in ("bfloat16", "float8_e4m3fn"):
            return a.astype(F32).astype(getattr(ml_dtypes(), dtype))
        return a.astype(dtype) if dtype else a

    def numpy(self, a):
        a = np.asarray(a)
        if a.dtype.name == "bfloat16":
            return a.astype(F32)
        if a.dtype.name.startswith("float8"):
            return a.view(np.uint8)
        if a.dtype == np.float16:
            return a.astype(F32)
        return a

    def is_native(self, a):
        return isinstance(a, np.ndarray)


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, device: str):
        self.device = device
        self.name = f"torch-{device}"

    def skip_reason(self):
        if _module("torch") is None:
            return "PyTorch is not installed"
        return torch_cuda_reason() if self.device == "cuda" else None

    def array(self, a, dtype=""):
        import torch

        a = np.asarray(a)
        if dtype == "float8_e4m3fn":
            from reference import e4m3_encode

            t = torch.from_numpy(e4m3_encode(a.astype(F32))).view(torch.float8_e4m3fn)
        elif dtype:
            t = torch.from_numpy(np.ascontiguousarray(a.astype(F32) if dtype == "bfloat16" else a.astype(dtype)))
            t = t.to(getattr(torch, dtype))
        else:
            t = torch.from_numpy(np.ascontiguousarray(a))
        return t.to(self.device)

    def numpy(self, a):
        import torch

        a = a.detach().cpu()
        if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return a.view(torch.uint8).numpy()
        if a.dtype in (torch.bfloat16, torch.float16):
            return a.float().numpy()
        return a.numpy()

    def is_native(self, a):
        import torch

        return isinstance(a, torch.Tensor) and a.device.type == self.device


class CuPyBackend(Backend):
    name = "cupy-cuda"
    device = "cuda"

    def skip_reason(self):
        cupy = _module("cupy")
        if cupy is None:
            return "CuPy is not installed"
        try:
            if cupy.cuda.runtime.getDeviceCount() == 0:
                return "no CUDA device for CuPy"
        except Exception as e:  # noqa: BLE001
            return f"CuPy cannot reach a CUDA device ({e})"
        if not lowbit._lowbit.built_with_cuda:
            return "lowbit was built without its CUDA backend"
        return None

    def supports(self, dtype):
        return dtype not in ("bfloat16", "float8_e4m3fn")

    def array(self, a, dtype=""):
        import cupy

        a = np.asarray(a)
        return cupy.asarray(a.astype(dtype) if dtype else a)

    def numpy(self, a):
        import cupy

        h = cupy.asnumpy(a)
        return h.astype(F32) if h.dtype == np.float16 else h

    def is_native(self, a):
        import cupy

        return isinstance(a, cupy.ndarray)


class JaxBackend(Backend):
    name = "jax-cpu"
    writable = False

    def skip_reason(self):
        return None if _module("jax") is not None else "JAX is not installed"

    def array(self, a, dtype=""):
        import jax

        a = np.asarray(a)
        cpu = jax.devices("cpu")[0]  # every array on the CPU, also where JAX has a GPU
        if dtype == "float8_e4m3fn":
            import jax.numpy as jnp
            from reference import e4m3_encode

            codes = jax.device_put(e4m3_encode(a.astype(F32)), cpu)
            return jax.lax.bitcast_convert_type(codes, jnp.float8_e4m3fn)
        if dtype:
            import jax.numpy as jnp

            return jax.device_put(a.astype(F32), cpu).astype(getattr(jnp, dtype))
        return jax.device_put(a, cpu)

    def numpy(self, a):
        import jax
        import jax.numpy as jnp

        if a.dtype in (jnp.bfloat16, jnp.float16):
            a = a.astype(jnp.float32)
        elif a.dtype == jnp.float8_e4m3fn:
            a = jax.lax.bitcast_convert_type(a, jnp.uint8)
        return np.asarray(a)

    def is_native(self, a):
        import jax

        return isinstance(a, jax.Array)


ALL = [NumPyBackend(), TorchBackend("cpu"), TorchBackend("cuda"), CuPyBackend(), JaxBackend()]


def require_dtype(backend: Backend, dtype: str) -> None:
    """Skips the case when the backend cannot hold `dtype`, saying why."""
    if not backend.supports(dtype):
        import pytest

        pytest.skip(f"{backend.name} has no {dtype} arrays here (NumPy needs ml_dtypes)")


def require_writable(backend: Backend) -> None:
    """Skips out= buffer cases for immutable arrays (JAX), after checking they are refused."""
    if backend.writable:
        return
    import pytest

    import lowbit.functional as F

    with pytest.raises(TypeError, match="immutable"):
        F.quantize_blockwise(backend.array(np.zeros(64, F32)), out=backend.array(np.zeros(64, np.uint8)))
    pytest.skip(f"{backend.name} arrays are immutable: no out= buffers (refused with TypeError, checked)")
