"""bitsandbytes' older int8 API under its own names and arguments, on lowbit's int8 ops.

lowbit keeps int8 matrices row-major whatever layout a call names: ``transform`` to ``col32``,
``col_turing`` or ``col_ampere`` returns the data as it is with a state that records the order asked
for, and every op here accepts any of those states (cuBLASLt's tile layouts are not needed to be fast,
docs/int8.md). Arrays of any DLPack framework; non-contiguous inputs (transposed views) are copied.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import functional as F
from . import _arrays

ORDERS = ("row", "col32", "col_turing", "col_ampere")


def check_matmul(A: Any, B: Any, out: Any, transposed_A: bool, transposed_B: bool,
                 expected_type: Any = "int8") -> Tuple[int, ...]:
    """The output shape of ``igemm``'s product, or an error: ``TypeError`` for operands not of
    ``expected_type``, ``ValueError`` for dimensions that do not chain. 2-D x 2-D: ``op(A) @ op(B)``;
    3-D x 2-D: the same with ``A``'s last two dims; 3-D x 3-D: the batched product ``op(A[b]) @ op(B[b])``
    where the batches and inner dims agree, else ``bsi,bso->io``.
    """
    want = _arrays.dtype_name(expected_type)
    if _arrays.dtype_name(A.dtype) != want or _arrays.dtype_name(B.dtype) != want:
        raise TypeError(f"check_matmul: expected {want} A and B (got {_arrays.dtype_name(A.dtype)} and "
                        f"{_arrays.dtype_name(B.dtype)})")
    sA, sB = tuple(A.shape), tuple(B.shape)
    ok, sout = False, None
    if len(sA) in (2, 3) and len(sB) == 2:
        rows, k = (sA[-1], sA[-2]) if transposed_A else (sA[-2], sA[-1])
        kb, n = (sB[1], sB[0]) if transposed_B else (sB[0], sB[1])
        ok = k == kb
        sout = (rows, n) if len(sA) == 2 else (sA[0], rows, n)
    elif len(sA) == 3 and len(sB) == 3:
        n, k = (sA[2], sA[1]) if transposed_A else (sA[1], sA[2])
        kb, m = (sB[2], sB[1]) if transposed_B else (sB[1], sB[2])
        if sA[0] == sB[0] and k == kb:  # batched: op(A[b]) @ op(B[b])
            ok, sout = True, (sA[0], n, m)
        else:  # bsi,bso->io
            ok, sout = sA[:2] == sB[:2], (sA[2], sB[2])
    if not ok:
        raise ValueError(f"check_matmul: dimensions do not chain for A {list(sA)} x B {list(sB)} "
                         f"(transposed: A {transposed_A}, B {transposed_B})")
    if out is not None and tuple(out.shape) != sout:
        raise ValueError(f"check_matmul: out must have shape {list(sout)} (got {list(out.shape)})")
    return sout


def igemm(A: Any, B: Any, out: Any = None, transposed_A: bool = False, transposed_B: bool = False) -> Any:
    """``A @ B`` of int8 arrays in int32, exactly (bitsandbytes' ``igemm``): ``A`` [m, k] or [b, s, k]
    times ``B`` [k, n], a transposed view of either as it is passed; [b, n, k] x [b, k, m] is
    ``batched_igemm``, other [b, s, i] x [b, s, o] contract ``bsi,bso->io``. ``out`` int32 of the product's shape, or a new array.
    """
    sout = check_matmul(A, B, out, False, False)
    if len(A.shape) == 3 and len(B.shape) == 3 and len(sout) == 3:
        return batched_igemm(A, B, out)
    if len(A.shape) == 3 and len(B.shape) == 3:
        k = A.shape[0] * A.shape[1]
        return F.int8_linear_matmul(A.reshape(k, A.shape[2]).T, B.reshape(k, B.shape[2]).T, out=out)
    return F.int8_linear_matmul(A, B.T, out=out)


def transform(A: Any, to_order: str, from_order: str = "row", out: Any = None, transpose: bool = False,
              state: Any = None, ld: Any = None) -> Tuple[Any, Tuple[Tuple[int, ...], str]]:
    """bitsandbytes' layout transform: ``(data, (shape, to_order))``. The data stays row-major in every
    order (``A``, its transpose when ``transpose``, copied into ``out`` when given); the state records the
    order so that ``igemmlt`` and ``mm_dequant`` accept it.
    """
    for name, order in (("to_order", to_order), ("from_order", from_order)):
        if order not in ORDERS:
            raise ValueError(f"transform: {name} must be one of {', '.join(ORDERS)} (got {order!r})")
    shape = tuple(state[0]) if state is not None else tuple(A.shape)
    data = A.T if transpose else A
    if transpose:
        shape = shape[::-1]
    if out is not None:
        out[...] = data
        data = out
    return data, (shape, to_order)


def igemmlt(A: Any, B: Any, SA: Any, SB: Any, out: Any = None, Sout: Any = None,
            dtype: Any = "int32") -> Tuple[Any, Tuple[Tuple[int, ...], str]]:
    """bitsandbytes' ``igemmlt``: ``A @ B.T`` in int32 (``A`` [..., K], ``B`` [N, K]) with the states of
    ``transform``; returns ``(out, (shape, "row"))``.
    """
    for name, s in (("SA", SA), ("SB", SB)):
        if s[1] not in ORDERS:
            raise ValueError(f"igemmlt: {name}'s order must be one of {', '.join(ORDERS)} (got {s[1]!r})")
    if len(tuple(SB[0])) != 2:
        raise ValueError(f"igemmlt: B must be 2-D (got {list(SB[0])})")
    result = F.int8_linear_matmul(A, B, out=out, dtype=dtype)
    return result, (tuple(result.shape), "row")


def mm_dequant(A: Any, quant_state: Any, row_stats: Any, col_stats: Any, out: Any = None,
               new_row_stats: Any = None, new_col_stats: Any = None, bias: Any = None) -> Any:
    """bitsandbytes' older ``mm_dequant``: ``int8_mm_dequant(A, row_stats, col_stats, out=out, bias=bias)``
    (float16 out). ``quant_state`` is ``igemmlt``'s; ``new_row_stats`` and ``new_col_stats`` are not
    written (bitsandbytes' kernel left them as they were).
    """
    if quant_state is not None and tuple(quant_state[0]) != tuple(A.shape):
        raise ValueError(f"mm_dequant: quant_state's shape {list(quant_state[0])} is not A's {list(A.shape)}")
    return F.int8_mm_dequant(A, row_stats, col_stats, out=out, bias=bias)


def extract_outliers(A: Any, SA: Any, idx: Any) -> Any:
    """The columns ``idx`` of int8 ``A`` [rows, cols] (bitsandbytes' ``extract_outliers``), as a new
    int8 [rows, len(idx)] array; ``SA`` is ``transform``'s state (any order).
    """
    if SA[1] not in ORDERS:
        raise ValueError(f"extract_outliers: SA's order must be one of {', '.join(ORDERS)} (got {SA[1]!r})")
    if _arrays.dtype_name(A.dtype) != "int8" or len(A.shape) != 2:
        raise ValueError(f"extract_outliers: A must be a 2-D int8 array (got {_arrays.dtype_name(A.dtype)} "
                         f"{list(A.shape)})")
    return A[:, idx]


def batched_igemm(A: Any, B: Any, out: Any = None, transposed_A: bool = False, transposed_B: bool = False) -> Any:
    """``op(A[b]) @ op(B[b])`` for each batch ``b`` of int8 ``A`` [b, n, k] and ``B`` [b, k, m] (``op``: the
    transpose of the last two dims where ``transposed_*``), in int32, exactly; into ``out`` [b, n, m] when
    given. One ``int8_linear_matmul`` a batch.
    """
    if len(A.shape) != 3 or len(B.shape) != 3:
        raise ValueError(f"batched_igemm: expected 3-D A and B (got {list(A.shape)} and {list(B.shape)})")
    sout = check_matmul(A, B, out, transposed_A, transposed_B)
    if len(sout) != 3:
        raise ValueError(f"batched_igemm: the batches or inner dimensions of A {list(A.shape)} and B "
                         f"{list(B.shape)} do not agree")
    results = []
    for b in range(A.shape[0]):
        a = A[b].T if transposed_A else A[b]
        bt = B[b] if transposed_B else B[b].T  # [m, k]: int8_linear_matmul's weight layout
        results.append(F.int8_linear_matmul(a, bt, out=None if out is None else out[b]))
    if out is not None:
        return out
    first = results[0] if results else None
    if first is not None and type(first).__module__.startswith("torch"):
        import torch
        return torch.stack(results)
    import numpy as np
    return np.stack(results) if results else np.zeros(sout, np.int32)


# ----------------------------------------------------------------- the seed's vector-wise quantization types
C = 127.0
VECTORWISE_TYPES = ("linear", "vector", "row", "zeropoint", "vector-zeropoint", "row-zeropoint", "truncated-vector")


class _Ops:
    """The few array operations the formulas below need, on torch tensors or NumPy arrays."""

    def __init__(self, x: Any):
        self.torch = type(x).__module__.startswith("torch")
        if self.torch:
            import torch
            self.m = torch
        else:
            import numpy as np
            self.m = np

    def f32(self, x: Any) -> Any:
        return x.float() if self.torch else x.astype("float32")

    def to(self, x: Any, dtype: Any) -> Any:
        if self.torch:
            return x.to(getattr(self.m, _arrays.dtype_name(dtype)) if not isinstance(dtype, self.m.dtype) else dtype)
        return x.astype(_arrays.dtype_name(dtype))

    def amax(self, x: Any, dim: int) -> Any:
        return x.amax(dim=dim, keepdim=True) if self.torch else x.max(axis=dim, keepdims=True)

    def amin(self, x: Any, dim: int) -> Any:
        return x.amin(dim=dim, keepdim=True) if self.torch else x.min(axis=dim, keepdims=True)

    def round(self, x: Any) -> Any:  # half to even, both
        return self.m.round(x)

    def where(self, c: Any, a: Any, b: Any) -> Any:
        return self.m.where(c, a, b)


def _check_type(op: str, quant_type: str, allowed: Any) -> None:
    if quant_type not in allowed:
        raise ValueError(f"{op}: quant_type must be one of {', '.join(allowed)} (got {quant_type!r})")


def vectorwise_quant(x: Any, dim: int = 1, quant_type: str = "vector") -> Any:
    """The seed's vector-wise quantization of ``x`` (torch or NumPy, its dtype's arithmetic as the seed's
    torch code): ``linear`` (one absmax), ``vector`` / ``row`` (the absmax along ``dim``), the
    ``*zeropoint`` types (an 8-bit range of ``max - min``, returned as floats with their factor) and
    ``truncated-vector`` (values above 0.7 of the absmax clipped first; ``x`` is not changed). Returns
    ``(xq, scale)``.
    """
    _check_type("vectorwise_quant", quant_type, VECTORWISE_TYPES)
    o = _Ops(x)
    if quant_type == "linear":
        max1 = o.f32(abs(x).max())
        return o.to(o.round(x / max1 * 127), "int8"), max1
    if quant_type in ("vector", "row"):
        max1 = o.amax(abs(x), dim)
        return o.to(o.round(x * (C / max1)), "int8"), max1
    if quant_type == "truncated-vector":
        absx = abs(x)
        max1 = o.amax(absx, dim) * 0.7
        clipped = o.where(absx > max1, max1 * o.m.sign(x), x)
        return o.to(o.round(clipped / max1 * C), "int8"), max1
    xf = o.f32(x)
    if quant_type == "zeropoint":
        dyna = xf.max() - xf.min()
        dyna = dyna if float(dyna) != 0 else dyna * 0 + 1
        minx = xf.min()
    else:
        dyna = o.amax(xf, dim) - o.amin(xf, dim)
        dyna = o.where(dyna == 0, dyna * 0 + 1, dyna)
        minx = o.amin(xf, dim)
    qx = 255.0 / dyna
    zpx = o.round(minx * qx)
    return o.round(qx * xf - zpx) + zpx, qx


def vectorwise_dequant(xq: Any, max1: Any, quant_type: str = "vector") -> Any:
    """``xq / 127 * max1`` in float32 (the seed defines the ``vector`` type only)."""
    _check_type("vectorwise_dequant", quant_type, ("vector",))
    return _Ops(xq).f32(xq / C * max1)


def _squeeze3(s: Any, x: Any) -> Any:
    return s[0] if len(s.shape) == 3 and len(x.shape) == 2 else s


def vectorwise_mm_dequant(xq: Any, S1: Any, S2: Any, dtype: Any = "float16", quant_type: str = "vector") -> Any:
    """The product of two ``vectorwise_quant`` results back to ``dtype``, by the seed's formula for
    ``quant_type`` (``linear``, ``zeropoint``, ``row-zeropoint``, ``vector-zeropoint``, ``row``,
    ``vector``, ``truncated-vector``)."""
    _check_type("vectorwise_mm_dequant", quant_type, VECTORWISE_TYPES)
    o = _Ops(xq)
    x = o.f32(xq)
    if quant_type == "linear":
        return o.to(x * (S1 * S2 / (C * C)), dtype)
    if quant_type in ("zeropoint", "row-zeropoint"):
        return o.to(x * (1.0 / (_squeeze3(S1, x) * _squeeze3(S2, x))), dtype)
    S1, S2 = _squeeze3(S1, x), _squeeze3(S2, x)
    if quant_type == "vector-zeropoint":
        x = x * (1.0 / S1)
        return o.to(x * (1.0 / S2.T), dtype)
    if quant_type == "row":
        return o.to(x * (S1 * S2 / (C * C)), dtype)
    x = x * (S1 / C)
    return o.to(x * (S2 / C), dtype)


def dequant_min_max(xq: Any, A: Any, B: Any, SA: Any, SB: Any, dtype: Any = "float16") -> Any:
    """The seed's min-max dequantization of ``xq = A @ B`` (``A`` quantized with ``SA = (min, range)``,
    ``B`` by columns with ``SB``): ``xq * SB / 127 * SA[1] / 127 + sum(B, 0) * (SA[0] + SA[1])``."""
    o = _Ops(xq)
    offset = o.f32(B).T.sum(0) * (SA[0] + SA[1])
    x = o.f32(xq)
    if len(xq.shape) == 2 and len(SB.shape) == 3:
        SB = SB[0]
    x = x * ((SB.T if len(SB.shape) == 2 else SB) / 127)
    x = x * (SA[1] / 127)
    return o.to(x + offset, dtype)
