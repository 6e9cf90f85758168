"""``bitsandbytes.utils`` for ``lowbit.bnb``: the helpers bitsandbytes' state dicts and tests use."""

import json as _json
from typing import Any as _Any, Dict as _Dict

import torch as _torch

__all__ = ["pack_dict_to_tensor", "unpack_tensor_to_dict", "sync_gpu"]


def pack_dict_to_tensor(source_dict: _Dict[str, _Any]) -> _torch.Tensor:
    """The dict as a uint8 tensor of its UTF-8 JSON, as bitsandbytes stores a 4-bit state's plain fields."""
    return _torch.tensor(list(_json.dumps(source_dict).encode("utf-8")), dtype=_torch.uint8)


def unpack_tensor_to_dict(tensor_data: _torch.Tensor) -> _Dict[str, _Any]:
    """The dict :func:`pack_dict_to_tensor` packed (reads the tensor on the host: loading only)."""
    if not isinstance(tensor_data, _torch.Tensor) or tensor_data.dtype != _torch.uint8:
        raise TypeError(f"unpack_tensor_to_dict: tensor_data must be a uint8 torch.Tensor "
                        f"(got {getattr(tensor_data, 'dtype', type(tensor_data).__name__)})")
    return _json.loads(bytes(tensor_data.cpu().numpy()).decode("utf-8"))


def sync_gpu(t: _torch.Tensor) -> None:
    """Waits for the device of ``t`` (CUDA or XPU; nothing on the CPU), for timing and tests."""
    if t.device.type == "cuda":
        _torch.cuda.synchronize(t.device)
    elif t.device.type == "xpu":
        _torch.xpu.synchronize(t.device)
