"""bitsandbytes' COO / CSR / CSC tensors and their functions (``coo_zeros``, ``coo2csr``, ``coo2csc``,
``double_quant``, ``spmm_coo``, ``spmm_coo_very_sparse``) under their own names and arguments.

They are array code on the arrays' own framework (torch tensors on their device, NumPy arrays on the
CPU), not lowbit kernels: bitsandbytes ran them on cuSPARSE and one naive kernel, and LLM.int8 in
lowbit does not go through them (``int8_linear`` keeps the outlier columns dense). Sums are taken in
float32 and rounded once to the output's dtype; ``spmm_coo_very_sparse`` adds into ``out``, as
bitsandbytes' kernel does, and takes any number of entries a row (bitsandbytes' took at most 32).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _arrays
from . import functional as F


def _require(cond: bool, exc: type, msg: str) -> None:
    if not cond:
        raise exc(msg)


def _check_index(op: str, name: str, x: Any, n: int) -> None:
    _require(_arrays.dtype_name(x.dtype) == "int32", TypeError,
             f"{op}: {name} must be int32 (got {_arrays.dtype_name(x.dtype)})")
    _require(len(x.shape) == 1 and x.shape[0] == n, ValueError,
             f"{op}: {name} must have shape [{n}] (got {list(x.shape)})")


def _check_values(op: str, values: Any, nnz: int) -> None:
    _require(_arrays.dtype_name(values.dtype) == "float16", TypeError,
             f"{op}: values must be float16 (got {_arrays.dtype_name(values.dtype)})")
    _require(len(values.shape) == 1 and values.shape[0] == nnz, ValueError,
             f"{op}: values must have shape [{nnz}] (got {list(values.shape)})")


class COOSparseTensor:
    """A ``rows x cols`` matrix of ``nnz`` entries: ``values[i]`` (float16) at ``(rowidx[i], colidx[i])``
    (int32 arrays of one framework)."""

    def __init__(self, rows: int, cols: int, nnz: int, rowidx: Any, colidx: Any, values: Any):
        _check_index("COOSparseTensor", "rowidx", rowidx, nnz)
        _check_index("COOSparseTensor", "colidx", colidx, nnz)
        _check_values("COOSparseTensor", values, nnz)
        self.rows, self.cols, self.nnz = int(rows), int(cols), int(nnz)
        self.rowidx, self.colidx, self.values = rowidx, colidx, values


class CSRSparseTensor:
    """Rows compressed: row ``r``'s entries are ``[rowptr[r], rowptr[r + 1])`` of ``colidx`` and ``values``."""

    def __init__(self, rows: int, cols: int, nnz: int, rowptr: Any, colidx: Any, values: Any):
        _check_index("CSRSparseTensor", "rowptr", rowptr, int(rows) + 1)
        _check_index("CSRSparseTensor", "colidx", colidx, nnz)
        _check_values("CSRSparseTensor", values, nnz)
        self.rows, self.cols, self.nnz = int(rows), int(cols), int(nnz)
        self.rowptr, self.colidx, self.values = rowptr, colidx, values


class CSCSparseTensor:
    """Columns compressed: column ``c``'s entries are ``[colptr[c], colptr[c + 1])`` of ``rowidx`` and ``values``."""

    def __init__(self, rows: int, cols: int, nnz: int, colptr: Any, rowidx: Any, values: Any):
        _check_index("CSCSparseTensor", "colptr", colptr, int(cols) + 1)
        _check_index("CSCSparseTensor", "rowidx", rowidx, nnz)
        _check_values("CSCSparseTensor", values, nnz)
        self.rows, self.cols, self.nnz = int(rows), int(cols), int(nnz)
        self.colptr, self.rowidx, self.values = colptr, rowidx, values


def coo_zeros(rows: int, cols: int, nnz: int, device: Any, dtype: Any = None) -> COOSparseTensor:
    """A COO tensor of ``nnz`` zero entries at (0, 0): torch tensors on ``device`` where torch is installed,
    else NumPy arrays (``device`` "cpu")."""
    try:
        import torch
    except ImportError:
        _require(str(device) == "cpu", ValueError, f"coo_zeros: without torch the device must be 'cpu' (got {device})")
        z = np.zeros(nnz, np.int32)
        return COOSparseTensor(rows, cols, nnz, z, z.copy(), np.zeros(nnz, np.float16))
    z = torch.zeros(nnz, dtype=torch.int32, device=device)
    return COOSparseTensor(rows, cols, nnz, z, z.clone(), torch.zeros(nnz, dtype=dtype or torch.float16, device=device))


def _pointers(idx: Any, n: int) -> Any:
    """[n + 1] int32: the start of each index's run in ``idx`` sorted, then its length."""
    if _arrays.is_torch(idx):
        import torch
        counts = torch.bincount(idx.long(), minlength=n)
        return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).int()
    counts = np.bincount(idx.astype(np.int64), minlength=n)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def _stable_order(idx: Any) -> Any:
    if _arrays.is_torch(idx):
        import torch
        return torch.sort(idx, stable=True).indices
    return np.argsort(idx, kind="stable")


def _check_coo(op: str, cooA: Any) -> None:
    _require(isinstance(cooA, COOSparseTensor), TypeError,
             f"{op}: cooA must be a COOSparseTensor (got {type(cooA).__name__})")


def coo2csr(cooA: COOSparseTensor) -> CSRSparseTensor:
    """The same matrix row-compressed; entries of a row keep their order in ``cooA`` (a stable sort by row,
    nothing moves when ``cooA`` is already sorted by row, as ``double_quant`` writes it)."""
    _check_coo("coo2csr", cooA)
    order = _stable_order(cooA.rowidx)
    return CSRSparseTensor(cooA.rows, cooA.cols, cooA.nnz, _pointers(cooA.rowidx, cooA.rows), cooA.colidx[order],
                           cooA.values[order])


def coo2csc(cooA: COOSparseTensor) -> CSCSparseTensor:
    """The same matrix column-compressed; entries of a column keep their order in ``cooA``."""
    _check_coo("coo2csc", cooA)
    order = _stable_order(cooA.colidx)
    return CSCSparseTensor(cooA.rows, cooA.cols, cooA.nnz, _pointers(cooA.colidx, cooA.cols), cooA.rowidx[order],
                           cooA.values[order])


def double_quant(A: Any, col_stats: Any = None, row_stats: Any = None, out_col: Any = None, out_row: Any = None,
                 threshold: float = 0.0) -> Any:
    """bitsandbytes' ``double_quant``: ``(out_row, out_col, row_stats, col_stats, coo_tensor)``, the first
    four as ``int8_double_quant`` computes them and ``coo_tensor`` the entries with ``|A| >= threshold``
    (float16 values, sorted by row, then column), or None when there are none or ``threshold`` is 0."""
    out_row_, out_col_, rs, cs, _ = F.int8_double_quant(A, col_stats, row_stats, out_col, out_row, threshold)
    if threshold <= 0:
        return out_row_, out_col_, rs, cs, None
    rows, cols = int(np.prod(A.shape[:-1])), int(A.shape[-1])
    flat = A.reshape(rows, cols)
    if _arrays.is_torch(flat):
        import torch
        at = torch.nonzero(flat.abs() >= threshold)
        r, c, v = at[:, 0].int(), at[:, 1].int(), flat[at[:, 0], at[:, 1]].half()
    else:
        r, c = np.nonzero(np.abs(flat) >= threshold)
        r, c, v = r.astype(np.int32), c.astype(np.int32), flat[r, c].astype(np.float16)
    nnz = int(r.shape[0])
    coo = COOSparseTensor(rows, cols, nnz, r, c, v) if nnz > 0 else None
    return out_row_, out_col_, rs, cs, coo


def _check_product(op: str, cooA: Any, B: Any) -> None:
    _check_coo(op, cooA)
    _require(len(B.shape) == 2 and B.shape[0] == cooA.cols, ValueError,
             f"{op}: B must be 2-D with {cooA.cols} rows, cooA's columns (got {list(B.shape)})")


def _row_products(cooA: Any, B: Any, scale: Any = None) -> Any:
    """float32 [rows, N]: sum over the entries of values * B[colidx, :] (* scale[None, :])."""
    if _arrays.is_torch(B):
        import torch
        terms = cooA.values.float()[:, None] * B[cooA.colidx.long()].float()
        if scale is not None:
            terms = terms * scale.float()[None, :]
        acc = torch.zeros(cooA.rows, B.shape[1], dtype=torch.float32, device=B.device)
        return acc.index_add_(0, cooA.rowidx.long(), terms)
    terms = cooA.values.astype(np.float32)[:, None] * np.asarray(B)[cooA.colidx].astype(np.float32)
    if scale is not None:
        terms = terms * np.asarray(scale, np.float32)[None, :]
    acc = np.zeros((cooA.rows, B.shape[1]), np.float32)
    np.add.at(acc, cooA.rowidx, terms)
    return acc


def _cast(x: Any, like: Any) -> Any:
    return x.to(like.dtype) if _arrays.is_torch(x) else x.astype(like.dtype)


def spmm_coo(cooA: COOSparseTensor, B: Any, out: Optional[Any] = None) -> Any:
    """``cooA @ B`` in ``B``'s dtype (``B`` [cols, N], a transposed view allowed), into ``out`` when given."""
    _check_product("spmm_coo", cooA, B)
    result = _row_products(cooA, B)
    if out is None:
        return _cast(result, B)
    _require(tuple(out.shape) == (cooA.rows, B.shape[1]), ValueError,
             f"spmm_coo: out must have shape {[cooA.rows, B.shape[1]]} (got {list(out.shape)})")
    out[...] = _cast(result, out)
    return out


def spmm_coo_very_sparse(cooA: COOSparseTensor, B: Any, dequant_stats: Any = None, out: Optional[Any] = None) -> Any:
    """``out += cooA @ B`` (``out`` float16 [rows, N], zeros when not given). ``B`` float16, or int8 with
    ``dequant_stats`` float32 [N]: then ``B[k, n]`` counts as ``B[k, n] * dequant_stats[n] / 127``
    (an int8 weight's columns of ``int8_vectorwise_quant``)."""
    op = "spmm_coo_very_sparse"
    _check_product(op, cooA, B)
    kind = _arrays.dtype_name(B.dtype)
    _require(kind in ("float16", "int8"), TypeError, f"{op}: B must be float16 or int8 (got {kind})")
    scale = None
    if dequant_stats is not None:
        _require(kind == "int8", ValueError, f"{op}: dequant_stats applies to an int8 B (got {kind})")
        _require(tuple(dequant_stats.shape) == (B.shape[1],), ValueError,
                 f"{op}: dequant_stats must have shape [{B.shape[1]}] (got {list(dequant_stats.shape)})")
        scale = dequant_stats / 127.0
    result = _row_products(cooA, B, scale)
    if out is None:
        return _cast(result, cooA.values)
    _require(tuple(out.shape) == (cooA.rows, B.shape[1]), ValueError,
             f"{op}: out must have shape {[cooA.rows, B.shape[1]]} (got {list(out.shape)})")
    out[...] = _cast(result + (out.float() if _arrays.is_torch(out) else out.astype(np.float32)), out)
    return out
