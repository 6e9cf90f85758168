"""Block-sparse (BSR) products under the names and arguments of PyTorch's ``torch.sparse._triton_ops``
(docs/sparse.md).

A BSR operand is a ``torch`` sparse BSR tensor (``layout=torch.sparse_bsr``) or a :class:`BSR` built from
arrays of any DLPack framework; dense operands and results are arrays of the call's framework (the dense
operand's), BSR results of the BSR operand's kind. The ops run on the CPU today (a float64 reference);
CUDA is still to come.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lowbit

__all__ = ["BSR", "bsr_dense_addmm", "bsr_dense_mm", "bsr_scatter_mm", "bsr_scatter_mm_indices_data", "bsr_softmax",
           "sampled_addmm", "scaled_dot_product_attention", "scatter_mm", "scatter_mm_meta"]


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
        out = _zeros(self.values, batch + (M, K))
        crow, col, vals = _host(self.crow_indices), _host(self.col_indices), self.values
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
    if _arrays.is_torch(bsr):
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
    """``bsr @ dense`` (``bsr_dense_addmm`` with ``beta = 0``, ``alpha = 1``). Differentiable with respect to
    ``dense`` and the BSR's values when they are torch tensors that require grad (a ``BSR`` of such values; torch's
    autograd takes no gradient into a sparse BSR tensor itself): the values' gradient is ``sampled_addmm`` of the
    output's gradient and ``dense^T`` at the BSR's blocks, ``dense``'s the transposed BSR times the output's
    gradient.
    """
    crow, col, values, M, K = _parts("bsr_dense_mm", bsr)
    if _is_torch_bsr(bsr) and _needs_grad(bsr):
        raise NotImplementedError("bsr_dense_mm: torch's autograd takes no gradient into a sparse BSR tensor; give "
                                  "lowbit.sparse.BSR(bsr.crow_indices(), bsr.col_indices(), values, bsr.shape) with "
                                  "values that require grad instead")
    if out is None and _needs_grad(values, dense):
        return _bsr_dense_mm_function()(values, dense, crow, col, M, K, stream)
    return bsr_dense_addmm(None, bsr, dense, beta=0, alpha=1, out=out, stream=stream)


def _needs_grad(*xs: Any) -> bool:
    if not any(_arrays.is_torch(x) for x in xs):
        return False
    import torch
    return torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in xs)


def _sum_to(x: Any, shape: Sequence[int]) -> Any:
    """x summed over the leading dims that broadcasting added or repeated to make it from ``shape``."""
    shape = tuple(shape)
    while x.dim() > len(shape):
        x = x.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and x.shape[i] != 1:
            x = x.sum(i, keepdim=True)
    return x


def _transposed(crow: Any, col: Any, values: Any, M: int, K: int) -> BSR:
    """The BSR of the transpose [*, K, M] (torch arrays, batch by batch): block (i, c) moves to (c, i)."""
    import torch
    BM, BK = int(values.shape[-2]), int(values.shape[-1])
    rows, cols = M // BM, K // BK
    batch = tuple(values.shape[:-3])
    crow2, col2, vals2 = crow.reshape(-1, rows + 1), col.reshape(-1, col.shape[-1]), values.reshape((-1,) + tuple(values.shape[-3:]))
    out_crow, out_col, out_vals = [], [], []
    nnz = int(col2.shape[-1])
    for b in range(crow2.shape[0]):  # sizes from the shapes alone (output_size, scatter_add): no device read-back
        counts = (crow2[b, 1:] - crow2[b, :-1]).long()
        row_of = torch.repeat_interleave(torch.arange(rows, device=crow.device), counts, output_size=nnz)
        c = col2[b].long()
        order = torch.sort(c * rows + row_of, stable=True).indices
        out_col.append(row_of[order].to(crow.dtype))
        out_vals.append(vals2[b][order].transpose(-2, -1))
        per_col = torch.zeros(cols, dtype=torch.long, device=crow.device).scatter_add_(0, c, torch.ones_like(c))
        out_crow.append(torch.cat([per_col.new_zeros(1), per_col.cumsum(0)]).to(crow.dtype))
    stack = lambda xs: torch.stack(xs).reshape(batch + tuple(xs[0].shape))  # noqa: E731
    return BSR(stack(out_crow), stack(out_col), stack(out_vals).contiguous(), batch + (K, M))


_FUNCTION = None


def _bsr_dense_mm_function() -> Any:
    """bsr_dense_mm as a torch.autograd.Function (built on first use: torch is optional)."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION
    import torch

    class BsrDenseMm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, dense, crow, col, M, K, stream):  # noqa: N805 - torch's signature
            ctx.save_for_backward(values, dense, crow, col)
            ctx.M, ctx.K, ctx.stream = M, K, stream
            shape = tuple(values.shape[:-3]) + (M, K)
            return bsr_dense_addmm(None, BSR(crow, col, values.detach(), shape), dense.detach(), beta=0,
                                   stream=stream)

        @staticmethod
        def backward(ctx, grad):  # noqa: N805
            values, dense, crow, col = ctx.saved_tensors
            M, K = ctx.M, ctx.K
            grad = grad.contiguous()
            g_values = g_dense = None
            if ctx.needs_input_grad[0]:
                pattern = BSR(crow, col, values.detach(), tuple(values.shape[:-3]) + (M, K))
                g = sampled_addmm(pattern, grad, dense.detach().transpose(-2, -1), beta=0.0, stream=ctx.stream)
                g_values = _sum_to(g.values, values.shape)
            if ctx.needs_input_grad[1]:
                t = _transposed(crow, col, values.detach(), M, K)
                g_dense = _sum_to(bsr_dense_addmm(None, t, grad, beta=0, stream=ctx.stream), dense.shape)
            return g_values, g_dense, None, None, None, None, None

    _FUNCTION = BsrDenseMm.apply
    return _FUNCTION


def _is_torch_bsr(x: Any) -> bool:
    return _arrays.is_torch(x) and str(getattr(x, "layout", "")) == "torch.sparse_bsr"


def _with_values(like: Any, values: Any) -> Any:
    """A BSR of the kind of ``like`` (a checked BSR operand) with its pattern, the indices broadcast to the values'
    batch dims, and ``values``."""
    crow, col, _, M, K = _parts("lowbit.sparse", like)
    batch = tuple(values.shape[:-3])
    if _arrays.is_torch(values):
        crow = crow.expand(batch + tuple(crow.shape[-1:])).contiguous()
        col = col.expand(batch + tuple(col.shape[-1:])).contiguous()
    else:
        crow = np.ascontiguousarray(np.broadcast_to(np.asarray(crow), batch + tuple(crow.shape[-1:])))
        col = np.ascontiguousarray(np.broadcast_to(np.asarray(col), batch + tuple(col.shape[-1:])))
    if _is_torch_bsr(like):
        import torch
        return torch.sparse_bsr_tensor(crow, col, values, size=batch + (M, K))
    return BSR(crow, col, values, batch + (M, K))


def sampled_addmm(input: Any, mat1: Any, mat2: Any, *, beta: float = 1.0, alpha: float = 1.0, out: Optional[Any] = None,
                  skip_checks: bool = False, max_grid: Any = None, stream: Any = None) -> Any:
    """SDDMM: a BSR with ``input``'s pattern whose stored elements are ``beta * input + alpha * (mat1 @ mat2)``
    there (only those products computed). ``mat1`` ``[*, M, K]``, ``mat2`` ``[*, K, N]``, batch dims broadcast
    with ``input``'s; ``input``'s values are not read when ``beta == 0``. Returns a BSR of ``input``'s kind
    (``out``, a BSR of the result's shape and pattern, is filled and returned when given). ``skip_checks`` and
    ``max_grid`` are the Triton kernel's, accepted without effect.
    """
    op = "sampled_addmm"
    crow, col, values, M, N = _parts(op, input)
    call = _arrays.Call(op, mat1, "mat1", stream)
    out_values = None if out is None else _parts(op, out)[2]
    raw = _lowbit.sampled_addmm(call.arg(crow, "crow_indices"), call.arg(col, "col_indices"),
                                call.arg(values, "values"), M, N, call.arg(mat1, "mat1"), call.arg(mat2, "mat2"),
                                float(beta), float(alpha), call.out(out_values, "out"), call.ctx)
    call.done()
    return out if out is not None else _with_values(input, call.result(raw))


def bsr_softmax(input: Any, max_row_nnz: Optional[int] = None, *, stream: Any = None) -> Any:
    """The softmax of each row over its stored elements (absent ones count as -inf), as a BSR of ``input``'s
    kind and pattern. ``max_row_nnz`` is the Triton kernel's tuning bound, accepted without effect."""
    op = "bsr_softmax"
    crow, col, values, M, K = _parts(op, input)
    call = _arrays.Call(op, values, "values", stream)
    raw = _lowbit.bsr_softmax(call.arg(crow, "crow_indices"), call.arg(col, "col_indices"), call.arg(values, "values"),
                              M, K, call.ctx)
    call.done()
    return _with_values(input, call.result(raw))


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None, *, stream: Any = None) -> Any:
    """Attention restricted to a block-sparse mask (the seed's ``_scaled_dot_product_attention``):
    ``softmax(scale * query @ key^T at attn_mask's blocks) @ value``, ``query`` ``[*, L, E]``, ``key``
    ``[*, S, E]``, ``value`` ``[*, S, Ev]``, ``attn_mask`` a BSR ``[*, L, S]`` (its values are not read: a
    boolean torch BSR is fine). ``scale`` defaults to ``1 / sqrt(E)`` and is applied inside the products (one
    rounding where the seed scales the rounded scores). ``dropout_p`` drops softmax values with that probability
    (torch's dropout on torch tensors, NumPy's generator otherwise) and rescales the rest. ``is_causal`` is not
    supported, as in the seed.
    """
    op = "scaled_dot_product_attention"
    if is_causal:
        raise ValueError(f"{op}: is_causal == True is not supported (give the causal pattern as attn_mask)")
    if attn_mask is None:
        raise ValueError(f"{op}: attn_mask == None is not supported (a BSR mask is required)")
    E = int(query.shape[-1])
    if scale == 0.0 or (scale is None and E == 0):
        raise ValueError(f"{op}: scale == {scale} with E == {E} divides by zero")
    factor = 1.0 / float(np.sqrt(E)) if scale is None else float(scale)
    values = _parts(op, attn_mask)[2]
    torch_arrays = _arrays.is_torch(query)
    if _arrays.dtype_name(values.dtype) != _arrays.dtype_name(query.dtype):  # a boolean mask: any values will do
        values = values.to(query.dtype) if torch_arrays else np.asarray(values).astype(query.dtype)
    mask = _with_values(attn_mask, values)
    key_t = key.transpose(-2, -1) if torch_arrays else np.swapaxes(key, -2, -1)
    scores = sampled_addmm(mask, query, key_t, beta=0.0, alpha=factor, stream=stream)
    probs = bsr_softmax(scores, stream=stream)
    if dropout_p > 0.0:
        crow_p, col_p, v, _, _ = _parts(op, probs)
        if torch_arrays:
            import torch
            v = torch.nn.functional.dropout(v, p=dropout_p, training=True)
        else:
            keep = np.random.default_rng().random(v.shape) >= dropout_p
            v = (v * keep / (1.0 - dropout_p)).astype(v.dtype)
        probs = _with_values(probs, v)
    return bsr_dense_mm(probs, value, stream=stream)


# ------------------------------------------------------------------ scatter_mm

_FORMATS = ("scatter_mm", "bsr_strided_mm", "bsr_strided_mm_compressed")


def _zeros(like: Any, shape: Sequence[int]) -> Any:
    """Zeros of ``like``'s framework, dtype and device."""
    if _arrays.is_torch(like):
        import torch
        return torch.zeros(tuple(shape), dtype=like.dtype, device=like.device)
    return np.zeros(tuple(shape), dtype=like.dtype)


def _host(x: Any) -> np.ndarray:
    """An index array's values on the host (a copy from the device for CUDA arrays)."""
    return x.detach().cpu().numpy() if _arrays.is_torch(x) else np.asarray(x)


def _int32_like(values: Any, like: Any) -> Any:
    """Host index values as an int32 array of ``like``'s framework, on its device."""
    v = np.ascontiguousarray(np.asarray(values, dtype=np.int64).astype(np.int32))
    if _arrays.is_torch(like):
        import torch
        return torch.from_numpy(v).to(device=like.device)
    return v


def _contiguous(x: Any) -> bool:
    return x.is_contiguous() if _arrays.is_torch(x) else bool(np.asarray(x).flags.c_contiguous)


def scatter_mm(blocks: Any, others: Any, indices_data: Sequence[Any], *, accumulators: Optional[Any] = None,
               stream: Any = None) -> Any:
    """Scattered matrix products added into ``accumulators`` (returned; zeros of the right shape when not given),
    as ``torch.sparse._triton_ops.scatter_mm`` documents them. ``blocks`` ``[P, Ms, Ks]``; ``indices_data[0]``
    names the format (docs/sparse.md spells each out as a loop):

    - ``("scatter_mm", c_offsets, pq)``: ``accumulators[r] += blocks[p] @ others[q]`` for ``(p, q) = pq[g]``,
      ``g`` in ``c_offsets[r] .. c_offsets[r + 1] - 1``; ``others`` ``[Q, Ks, Ns]``.
    - ``("bsr_strided_mm", c_indices, r_offsets, p_offsets, q_offsets, meta)`` and
      ``("bsr_strided_mm_compressed", c_indices, r_offsets, q_offsets, meta)``: output blocks at element offsets
      ``r_offsets`` of ``accumulators`` ``[*, M, N]`` add products of ``blocks`` with panels of ``others``
      ``[*, K, N]`` at element offsets ``q_offsets``, ``Ns = N / meta["SPLIT_N"]`` columns wide.

    Each output block sums its products in float64 onto its old value, rounded once. Without ``accumulators`` the
    strided formats' ``M`` is ``Ms + (max(r_offsets) + 1) // N``, as torch computes it (read on the host).
    """
    op = "scatter_mm"
    if not isinstance(indices_data, (tuple, list)) or not indices_data or indices_data[0] not in _FORMATS:
        head = indices_data[0] if isinstance(indices_data, (tuple, list)) and indices_data else indices_data
        raise ValueError(f"{op}: indices_data[0] must name the format, one of {', '.join(_FORMATS)} (got {head!r})")
    fmt = indices_data[0]
    expected = {"scatter_mm": 3, "bsr_strided_mm": 6, "bsr_strided_mm_compressed": 5}[fmt]
    if len(indices_data) != expected:
        raise ValueError(f"{op}: the {fmt} format's indices_data holds {expected} items (got {len(indices_data)})")
    if len(blocks.shape) != 3:
        raise ValueError(f"{op}: blocks must be [P, Ms, Ks] (got {list(blocks.shape)})")
    Ms = int(blocks.shape[1])
    if accumulators is not None and not _contiguous(accumulators):
        raise ValueError(f"{op}: accumulators must be contiguous (they are written in place)")
    pq = r_offsets = p_offsets = q_offsets = None
    split_n = 1
    others_shape = tuple(int(d) for d in others.shape)
    if fmt == "scatter_mm":
        c_indices, pq = indices_data[1:]
        if accumulators is None:
            accumulators = _zeros(blocks, (int(c_indices.shape[0]) - 1, Ms, others_shape[-1]))
        acc, oth = accumulators, others
    else:
        if fmt == "bsr_strided_mm":
            c_indices, r_offsets, p_offsets, q_offsets, meta = indices_data[1:]
        else:
            c_indices, r_offsets, q_offsets, meta = indices_data[1:]
        split_n = int(meta["SPLIT_N"])
        if len(others_shape) < 2:
            raise ValueError(f"{op}: others must be [*, K, N] (got {list(others_shape)})")
        N = others_shape[-1]
        if accumulators is None:
            top = int(_host(r_offsets).max()) if int(r_offsets.shape[0]) else -1
            accumulators = _zeros(blocks, others_shape[:-2] + (Ms + (top + 1) // max(N, 1), N))
        # [*, K, N] as [B, K, N]: the leading dims are one batch dim (views, no copies).
        acc = accumulators.reshape((-1,) + tuple(accumulators.shape[-2:]))
        oth = others.reshape((-1,) + others_shape[-2:])
    call = _arrays.Call(op, blocks, "blocks", stream)
    _lowbit.scatter_mm(fmt, call.arg(blocks, "blocks"), call.arg(oth, "others"), call.arg(c_indices, "c_indices"),
                       call.opt(pq, "pq"), call.opt(r_offsets, "r_offsets"), call.opt(p_offsets, "p_offsets"),
                       call.opt(q_offsets, "q_offsets"), split_n, call.out(acc, "accumulators"), call.ctx)
    call.done()
    return accumulators


def scatter_mm_meta(M: int, K: int, N: int, Ms: int, Ks: int, GROUP_SIZE: Optional[int] = None,
                    TILE_M: Optional[int] = None, TILE_N: Optional[int] = None, SPLIT_N: Optional[int] = None,
                    num_warps: Optional[int] = None, num_stages: Optional[int] = None, **extra: Any) -> dict:
    """torch's launch parameters of a BSR scatter_mm (its defaults; lowbit's kernels read only ``SPLIT_N``, the
    column parts of an output block row)."""
    if SPLIT_N is None:
        SPLIT_N = {16: 1, 32: 2, 64: 4, 128: 8, 256: 16, 512: 8, 1024: 16, 4096: 32, 8192: 64}.get(N, 16)
        if Ms >= 512 and N >= 2048:
            SPLIT_N = 1
    Ns = N // SPLIT_N
    if TILE_M is None:
        TILE_M = min(64 if Ns < 512 else 32, Ms)
    if TILE_N is None:
        TILE_N = min(64 if Ns < 512 else 32, Ns)
    num_stages = num_stages or 1
    if num_warps is None:
        num_warps = {16: 1, 32: 1, 64: 2}.get(Ms, 4) if min(M, N) >= 1024 else \
            ({16: 1, 32: 4}.get(Ms, 4) if min(M, N) == 256 else {16: 1, 32: 2}.get(Ms, 4))
    GROUP_SIZE = GROUP_SIZE or 4
    for name, small, big in (("TILE_M", TILE_M, Ms), ("TILE_N", TILE_N, Ns), ("Ms", Ms, M), ("Ns", Ns, N),
                             ("Ks", Ks, K)):
        if small > big:
            raise ValueError(f"scatter_mm_meta: {name} = {small} must not exceed {big}")
    return dict(TILE_M=TILE_M, TILE_N=TILE_N, GROUP_SIZE=GROUP_SIZE, num_stages=num_stages, num_warps=num_warps,
                SPLIT_N=SPLIT_N, **extra)


def bsr_scatter_mm_indices_data(bsr: Any, other: Any, indices_format: str = "bsr_strided_mm_compressed",
                                **meta_input: Any) -> tuple:
    """The ``indices_data`` of ``bsr @ other`` for ``scatter_mm`` in ``indices_format`` (torch's
    ``bsr_scatter_mm_indices_data``): built on the host from the BSR's index arrays, returned as arrays of its
    framework and device (int32), with the ``scatter_mm_meta`` dict for the strided formats. ``bsr`` is 2-D."""
    op = "bsr_scatter_mm_indices_data"
    crow, col, values, M, K = _parts(op, bsr)
    if len(values.shape) != 3:
        raise ValueError(f"{op}: bsr must be 2-D (got a batch of {list(values.shape[:-3])})")
    if indices_format not in _FORMATS:
        raise ValueError(f"{op}: indices_format must be one of {', '.join(_FORMATS)} (got {indices_format!r})")
    Ms, Ks = int(values.shape[-2]), int(values.shape[-1])
    if int(other.shape[-2]) != K:
        raise ValueError(f"{op}: other's K ({int(other.shape[-2])}) must equal the BSR's ({K})")
    N = int(other.shape[-1])
    nbatches = int(np.prod([int(d) for d in other.shape[:-2]], dtype=np.int64))
    meta = scatter_mm_meta(M, K, N, Ms, Ks, **meta_input)
    SPLIT_N = meta["SPLIT_N"]
    crow_h, col_h = _host(crow).astype(np.int64), _host(col).astype(np.int64)
    index = lambda v: _int32_like(v, crow)  # noqa: E731
    if indices_format == "scatter_mm":
        if Ms != Ks or N % Ms:
            raise ValueError(f"{op}: the scatter_mm format needs square blocks and N a multiple of them "
                             f"(got {Ms} x {Ks}, N {N})")
        Ns = Ms
        c, pq = [0], []
        for b in range(nbatches):
            for m in range(M // Ms):
                r0, r1 = int(crow_h[m]), int(crow_h[m + 1])
                for n in range(N // Ns):
                    c.append(c[-1] + r1 - r0)
                    pq.extend([p, (int(col_h[p]) + b * (K // Ks)) * (N // Ns) + n] for p in range(r0, r1))
        return indices_format, index(c), index(np.asarray(pq, dtype=np.int64).reshape(-1, 2))
    Ns = N // SPLIT_N
    rows = [m for m in range(M // Ms) if crow_h[m + 1] > crow_h[m]]
    q = [np.tile(col_h[crow_h[m]:crow_h[m + 1]] * (Ks * N), SPLIT_N)
         + np.repeat(np.arange(SPLIT_N) * Ns, crow_h[m + 1] - crow_h[m]) for m in rows]
    q_offsets = np.concatenate(q) if q else np.zeros(0, np.int64)
    r_offsets = (np.asarray(rows, np.int64)[:, None] * (Ms * N) + np.arange(SPLIT_N) * Ns).reshape(-1)
    if indices_format == "bsr_strided_mm_compressed":
        return indices_format, index(crow_h), index(r_offsets), index(q_offsets), dict(meta, is_compressed=True)
    p = [np.tile(np.arange(crow_h[m], crow_h[m + 1]), SPLIT_N) for m in rows]
    p_offsets = np.concatenate(p) if p else np.zeros(0, np.int64)
    counts = np.repeat(np.diff(crow_h)[rows], SPLIT_N)
    c_indices = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return (indices_format, index(c_indices), index(r_offsets), index(p_offsets), index(q_offsets),
            dict(meta, is_compressed=False))


def bsr_scatter_mm(bsr: Any, other: Any, indices_data: Optional[tuple] = None, out: Optional[Any] = None, *,
                   stream: Any = None) -> Any:
    """``bsr @ other`` through ``scatter_mm`` (torch's ``bsr_scatter_mm``): ``bsr`` 2-D ``[M, K]``, ``other``
    ``[*, K, N]``, the result ``[*, M, N]`` (into ``out`` when given, returned). ``indices_data`` from
    ``bsr_scatter_mm_indices_data`` (built here in the compressed format when not given)."""
    op = "bsr_scatter_mm"
    crow, col, values, M, K = _parts(op, bsr)
    if len(values.shape) != 3:
        raise ValueError(f"{op}: bsr must be 2-D (got a batch of {list(values.shape[:-3])})")
    if indices_data is None:
        indices_data = bsr_scatter_mm_indices_data(bsr, other, indices_format="bsr_strided_mm_compressed")
    shape = tuple(int(d) for d in other.shape[:-2]) + (M, int(other.shape[-1]))
    if out is None:
        out = _zeros(values, shape)
    else:
        out[...] = 0
    if indices_data[0] != "scatter_mm":
        return scatter_mm(values, other, indices_data, accumulators=out, stream=stream)
    # The scatter_mm format multiplies square blocks by Ks x Ms blocks of other, into Ms x Ms blocks of out.
    Ms, Ks = int(values.shape[-2]), int(values.shape[-1])
    N = int(other.shape[-1])
    B = int(np.prod(shape[:-2], dtype=np.int64))
    # indices_data's q = (b * K/Ks + kb) * N/Ms + n: other[b, kb*Ks:(kb+1)*Ks, n*Ms:(n+1)*Ms].
    o = other.reshape(B, K // Ks, Ks, N // Ms, Ms)
    o = o.permute(0, 1, 3, 2, 4).contiguous() if _arrays.is_torch(o) else np.ascontiguousarray(np.transpose(o, (0, 1, 3, 2, 4)))
    o = o.reshape(-1, Ks, Ms)
    acc = scatter_mm(values, o, indices_data, stream=stream)
    # Block r = (b * M/Ms + m) * N/Ms + n of acc is out[b, m*Ms:(m+1)*Ms, n*Ms:(n+1)*Ms].
    a = acc.reshape(B, M // Ms, N // Ms, Ms, Ms)
    a = a.permute(0, 1, 3, 2, 4) if _arrays.is_torch(a) else np.transpose(a, (0, 1, 3, 2, 4))
    out[...] = a.reshape(shape)
    return out
