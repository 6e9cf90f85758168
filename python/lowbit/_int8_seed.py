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
    3-D x 2-D: the same with ``A``'s last two dims; 3-D x 3-D: ``bsi,bso->io``.
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
        ok = sA[:2] == sB[:2]
        sout = (sA[2], sB[2])
    if not ok:
        raise ValueError(f"check_matmul: dimensions do not chain for A {list(sA)} x B {list(sB)} "
                         f"(transposed: A {transposed_A}, B {transposed_B})")
    if out is not None and tuple(out.shape) != sout:
        raise ValueError(f"check_matmul: out must have shape {list(sout)} (got {list(out.shape)})")
    return sout


def igemm(A: Any, B: Any, out: Any = None, transposed_A: bool = False, transposed_B: bool = False) -> Any:
    """``A @ B`` of int8 arrays in int32, exactly (bitsandbytes' ``igemm``): ``A`` [m, k] or [b, s, k]
    times ``B`` [k, n], a transposed view of either as it is passed; [b, s, i] x [b, s, o] contracts
    ``bsi,bso->io``. ``out`` int32 of the product's shape, or a new array.
    """
    check_matmul(A, B, out, False, False)
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
