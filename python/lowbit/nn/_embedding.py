"""bitsandbytes' embeddings: ``StableEmbedding``, ``Embedding``, ``Embedding8bit``, ``Embedding4bit``,
``EmbeddingFP4``, ``EmbeddingNF4``."""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional

import torch

from .._quant_state import QuantState
from ..optim import GlobalOptimManager
from . import _calls
from ._4bit import _BLOCKSIZES, _QUANT_TYPES, Params4bit
from ._common import check_sizes
from ._int8 import Int8Params

__all__ = ["Embedding", "Embedding4bit", "Embedding8bit", "EmbeddingFP4", "EmbeddingNF4", "StableEmbedding"]


def _check_input(op: str, input: torch.Tensor) -> None:
    """Integer indices (their range is torch's embedding's to check: reading it here would wait for the device)."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"{op}: the input must be a tensor of indices (got {type(input).__name__})")
    if input.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: the input must hold int64 or int32 indices (got {input.dtype})")


def _no_save(op: str) -> None:
    raise NotImplementedError(f"{op}: saving a state dict is not implemented (as in bitsandbytes); save the float "
                              "torch.nn.Embedding and quantize again after loading it")


class _Embedding32bitStates(torch.nn.Embedding):
    """A float embedding whose weight keeps 32-bit optimizer states under lowbit.optim, Xavier-initialised."""

    _op = "Embedding"

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int], max_norm: Optional[float],
                 norm_type: float, scale_grad_by_freq: bool, sparse: bool, _weight: Optional[torch.Tensor],
                 device: Any, dtype: Any):
        check_sizes(self._op, num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if _weight is not None and tuple(_weight.shape) != (num_embeddings, embedding_dim):
            raise ValueError(f"{self._op}: _weight must have shape [{num_embeddings}, {embedding_dim}] "
                             f"(got {list(_weight.shape)})")
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, device=device, dtype=dtype)
        GlobalOptimManager.get_instance().register_module_override(self, "weight", {"optim_bits": 32})

    def reset_parameters(self) -> None:
        torch.nn.init.xavier_uniform_(self.weight)
        self._fill_padding_idx_with_zero()

    def _lookup(self, input: torch.Tensor) -> torch.Tensor:
        _check_input(self._op, input)
        return torch.nn.functional.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                                             self.scale_grad_by_freq, self.sparse)


class StableEmbedding(_Embedding32bitStates):
    """bitsandbytes' ``StableEmbedding``: an embedding followed by a LayerNorm computed in the default dtype.

    The weight is Xavier-uniform initialised and registered with
    ``lowbit.optim.GlobalOptimManager`` for 32-bit optimizer states (an 8-bit
    optimizer keeps this weight's states in float32). The output has the
    weight's dtype.
    """

    _op = "StableEmbedding"

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Optional[torch.Tensor] = None, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, device, dtype)
        self.norm = torch.nn.LayerNorm(embedding_dim, device=device)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        emb = self._lookup(input).to(torch.get_default_dtype())  # the norm runs in full precision
        return self.norm(emb).to(self.weight.dtype)


class Embedding(_Embedding32bitStates):
    """bitsandbytes' ``Embedding``: ``torch.nn.Embedding`` with Xavier-uniform initialisation whose weight is
    registered with ``lowbit.optim.GlobalOptimManager`` for 32-bit optimizer states."""

    _op = "Embedding"

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Optional[torch.Tensor] = None, device: Any = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                         _weight, device, None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self._lookup(input)


class Embedding8bit(torch.nn.Embedding):
    """bitsandbytes' ``Embedding8bit``: int8 rows with a per-row absmax, dequantized row by row on lookup.

    Load float weights (``load_state_dict`` of a ``torch.nn.Embedding``),
    then ``.to(device)`` / ``.cuda()`` / ``.cpu()`` quantizes them (an
    :class:`Int8Params`, as in ``Linear8bitLt``). The output has the dtype
    the module was built with. Saving a state dict raises
    ``NotImplementedError``, as in bitsandbytes.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device: Any = None, dtype: Any = None):
        check_sizes("Embedding8bit", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        super().__init__(num_embeddings, embedding_dim, device=device, dtype=dtype)
        self.dtype = self.weight.data.dtype
        self.weight = Int8Params(self.weight.data, has_fp16_weights=False, requires_grad=False)

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        _no_save("Embedding8bit")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        w = self.weight
        SCB = getattr(w, "SCB", None)
        if w.dtype != torch.int8 or SCB is None:
            raise RuntimeError("Embedding8bit: the weight is not quantized yet: call .to(device), .cuda() or .cpu() "
                               "after loading float weights (quantization happens there, as in bitsandbytes)")
        if tuple(w.shape) != (self.num_embeddings, self.embedding_dim) or tuple(SCB.shape) != (self.num_embeddings,):
            raise RuntimeError(f"Embedding8bit: the int8 weight must be [{self.num_embeddings}, {self.embedding_dim}] "
                               f"with SCB [{self.num_embeddings}] (got {list(w.shape)} and {list(SCB.shape)})")
        _check_input("Embedding8bit", input)
        return _calls.embedding_int8(input, w.data, SCB, self.dtype)

    def extra_repr(self) -> str:
        state = "int8" if self.weight.dtype == torch.int8 else "not quantized"
        return f"{super().extra_repr()}, dtype={self.dtype}, {state}"


class Embedding4bit(torch.nn.Embedding):
    """bitsandbytes' ``Embedding4bit``: rows in 4-bit codes (nf4/fp4) with a float absmax per block.

    Load float weights, then ``.to(device)`` / ``.cuda()`` / ``.cpu()``
    quantizes them (a :class:`Params4bit`, as in ``Linear4bit``; absmax is
    not nested). Where the blocksize divides ``embedding_dim`` a lookup
    dequantizes the gathered rows only; otherwise it dequantizes the whole
    table (a warning says so at construction, as bitsandbytes'). The output
    has the dtype the module was built with. ``blocksize`` is lowbit's
    addition (keyword-only; bitsandbytes fixes 64). Saving a state dict
    raises ``NotImplementedError``, as in bitsandbytes.
    """

    _op = "Embedding4bit"

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None, quant_type: str = "fp4",
                 quant_storage: torch.dtype = torch.uint8, device: Any = None, *, blocksize: int = 64):
        check_sizes(self._op, num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if quant_type not in _QUANT_TYPES:
            raise ValueError(f"{self._op}: quant_type must be 'fp4' or 'nf4' (got {quant_type!r})")
        if isinstance(blocksize, bool) or blocksize not in _BLOCKSIZES:
            raise ValueError(f"{self._op}: blocksize must be a power of two from 32 to 4096 (got {blocksize!r})")
        if not isinstance(quant_storage, torch.dtype):
            raise TypeError(f"{self._op}: quant_storage must be a torch.dtype (got {quant_storage!r})")
        super().__init__(num_embeddings, embedding_dim, device=device, dtype=dtype)
        self.dtype = self.weight.data.dtype
        self.quant_state: Optional[QuantState] = None
        self.weight = Params4bit(self.weight.data, requires_grad=False, blocksize=blocksize, compress_statistics=False,
                                 quant_type=quant_type, quant_storage=quant_storage, module=self)
        if embedding_dim % blocksize != 0:
            warnings.warn(f"{self._op}: embedding_dim {embedding_dim} is not a multiple of the blocksize "
                          f"{blocksize}: each lookup dequantizes the whole table (slow inference)",
                          stacklevel=2 if type(self).__init__ is Embedding4bit.__init__ else 3)  # the caller's line

    def _state(self) -> QuantState:
        """The weight's QuantState, put back from the module's where a wrapper dropped it (FSDP), as bitsandbytes."""
        w = self.weight
        qs = getattr(w, "quant_state", None)
        if qs is None and self.quant_state is not None and isinstance(w, Params4bit):
            w.quant_state = qs = self.quant_state
        qs = qs or self.quant_state
        if qs is None:
            raise RuntimeError(f"{self._op}: the weight is not quantized yet: call .to(device), .cuda() or .cpu() "
                               "after loading float weights (quantization happens there, as in bitsandbytes)")
        return qs

    def _save_to_state_dict(self, destination: Dict[str, Any], prefix: str, keep_vars: bool) -> None:
        _no_save(self._op)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        qs = self._state()
        if tuple(qs.shape) != (self.num_embeddings, self.embedding_dim):
            raise RuntimeError(f"{self._op}: the quantized weight is {list(qs.shape)}, this module's table is "
                               f"[{self.num_embeddings}, {self.embedding_dim}]")
        _check_input(self._op, input)
        out = _calls.embedding_4bit(input, self.weight.data, qs, self.num_embeddings, self.embedding_dim)
        return out.to(self.dtype)

    def extra_repr(self) -> str:
        w = self.weight
        state = "quantized" if getattr(w, "bnb_quantized", False) else "not quantized"
        return f"{super().extra_repr()}, quant_type={getattr(w, 'quant_type', '?')}, dtype={self.dtype}, {state}"


class EmbeddingFP4(Embedding4bit):
    """:class:`Embedding4bit` with ``quant_type="fp4"``."""

    _op = "EmbeddingFP4"

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None,
                 quant_storage: torch.dtype = torch.uint8, device: Any = None, *, blocksize: int = 64):
        super().__init__(num_embeddings, embedding_dim, dtype, "fp4", quant_storage, device, blocksize=blocksize)


class EmbeddingNF4(Embedding4bit):
    """:class:`Embedding4bit` with ``quant_type="nf4"`` (QLoRA's normal-float codes)."""

    _op = "EmbeddingNF4"

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Any = None,
                 quant_storage: torch.dtype = torch.uint8, device: Any = None, *, blocksize: int = 64):
        super().__init__(num_embeddings, embedding_dim, dtype, "nf4", quant_storage, device, blocksize=blocksize)
