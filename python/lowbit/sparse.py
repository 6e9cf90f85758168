"""Block-sparse (BSR) products under the names and arguments of PyTorch's ``torch.sparse._triton_ops``
(docs/sparse.md).

A BSR operand is a ``torch`` sparse BSR tensor (``layout=torch.sparse_bsr``) or a :class:`BSR` built from
arrays of any DLPack framework; dense operands and results are arrays of the call's framework (the dense
operand's). The products run on the CPU today (a float64 reference); CUDA is still to come.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lowbit

__all__ = ["BSR", "bsr_dense_addmm", "bsr_dense_mm"]


class BSR:
    """A block-sparse matrix ``[*batch, M, K]`` in torch's BSR layout: block row ``i`` holds the blocks
    ``crow_indices[..., i] .. crow_indices[..., i + 1] - 1``, block ``j`` at block column ``col_indices[..., j]``
    (ascending within a row, no repeats) with values ``values[..., j, :, :]`` (``BM x BK``). Index arrays int32 or
    int64, values float32 / float16 / bfloat16, all of one framework and device."""

    def __init__(self, crow_indices: Any, col_indices: Any, values: Any, shape: Sequence[int]):
        self.crow_indices, self.col_indices, self.values = crow_indices, col_indices, values
        self.shape = tuple(int(s) for s in shape)
        if len(self.shape) < 2:
            raise ValueError(f"BSR: shape must be [*batch, M, K] (got {list(self.shape)})")
        if len(values.shape) != len(self.shape) + 1:
            raise ValueError(f"BSR: values must be [*batch, nnz, BM, BK] for shape {list(self.shape)} "
                             f"(got {list(values.shape)})")

    @property
    def blocksize(self) -> Tuple[int, int]:
        return int(self.values.shape[-2]), int(self.values.shape[-1])

    def to_dense(self) -> Any:
        """The matrix as a dense array of the values' framework."""
        M, K = self.shape[-2:]
        BM, BK = self.blocksize
        batch = self.shape[:-2]
        if type(self.values).__module__.startswith("torch"):
            import torch
            out = torch.zeros(batch + (M, K), dtype=self.values.dtype, device=self.values.device)
            crow, col, vals = self.crow_indices.cpu(), self.col_indices.cpu(), self.values
        else:
            out = np.zeros(batch + (M, K), dtype=self.values.dtype)
            crow, col, vals = np.asarray(self.crow_indices), np.asarray(self.col_indices), self.values
        for b in np.ndindex(*batch):
            for i in range(M // BM):
                for j in range(int(crow[b + (i,)]), int(crow[b + (i + 1,)])):
                    c = int(col[b + (j,)])
                    out[b + (slice(i * BM, (i + 1) * BM), slice(c * BK, (c + 1) * BK))] = vals[b + (j,)]
        return out


def _parts(op: str, bsr: Any) -> Tuple[Any, Any, Any, int, int]:
    """(crow_indices, col_indices, values, M, K) of a BSR operand."""
    if isinstance(bsr, BSR):
        return bsr.crow_indices, bsr.col_indices, bsr.values, bsr.shape[-2], bsr.shape[-1]
    if type(bsr).__module__.startswith("torch"):
        import torch
        if getattr(bsr, "layout", None) == torch.sparse_bsr:
            return bsr.crow_indices(), bsr.col_indices(), bsr.values(), int(bsr.shape[-2]), int(bsr.shape[-1])
    raise TypeError(f"{op}: bsr must be a torch sparse BSR tensor or a lowbit.sparse.BSR "
                    f"(got {type(bsr).__name__}{' ' + str(bsr.layout) if hasattr(bsr, 'layout') else ''})")


def bsr_dense_addmm(input: Any, bsr: Any, dense: Any, *, beta: float = 1, alpha: float = 1, out: Optional[Any] = None,
                    skip_checks: bool = False, max_grid: Any = None, meta: Any = None, stream: Any = None) -> Any:
    """``beta * input + alpha * (bsr @ dense)``: ``dense`` ``[*D, K, N]``, the result
    ``[broadcast(*B, *D), M, N]`` in the values' dtype; ``input`` broadcasts to it and is not read when
    ``beta == 0`` (None allowed then). Into ``out`` when given (returned). ``skip_checks``, ``max_grid`` and
    ``meta`` are the Triton kernel's launch parameters, accepted for compatibility: the index arrays are
    always checked, and lowbit's kernels pick their own parameters.
    """
    op = "bsr_dense_addmm"
    crow, col, values, M, K = _parts(op, bsr)
    call = _arrays.Call(op, dense, "dense", stream)
    raw = _lowbit.bsr_dense_addmm(call.opt(input, "input"), call.arg(crow, "crow_indices"),
                                  call.arg(col, "col_indices"), call.arg(values, "values"), M, K,
                                  call.arg(dense, "dense"), float(beta), float(alpha), call.out(out, "out"), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def bsr_dense_mm(bsr: Any, dense: Any, *, out: Optional[Any] = None, skip_checks: bool = False, max_grid: Any = None,
                 meta: Any = None, stream: Any = None) -> Any:
    """``bsr @ dense`` (``bsr_dense_addmm`` with ``beta = 0``, ``alpha = 1``)."""
    return bsr_dense_addmm(None, bsr, dense, beta=0, alpha=1, out=out, stream=stream)
