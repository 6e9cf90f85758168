"""``bitsandbytes.functional`` for ``lowbit.bnb``: bitsandbytes' names, signatures and torch results.

``from lowbit.bnb import functional as F`` in place of ``from bitsandbytes import functional as F``.
The ops are :mod:`lowbit.functional`'s; where bitsandbytes' Python layer differs from it, this module
follows bitsandbytes:

- code maps and ``get_4bit_type`` are torch tensors (``get_4bit_type``'s default device: CUDA when
  torch sees one, else the CPU; bitsandbytes always says CUDA);
- ``blocksize=None`` means 64 in the 4-bit ops, and ``dequantize_4bit`` transposes its result when
  the packed input has one row (bitsandbytes' shim for weights passed as ``B.t()``);
- 8-bit blockwise quantization takes blocksizes 8192 and 16384 too (bitsandbytes allows them on
  the CPU): lowbit's per-code ops on blocks of that size, on any device;
- ``gemv_4bit(A, B, out=None, transposed_A=False, transposed_B=False, state=None)`` is bitsandbytes'
  signature, and it reads states that bitsandbytes repacked for its AVX512-BF16 CPU kernel
  (``_convert_weight_packed_for_cpu``);
- ``QuantState`` is lowbit's, whose ``as_dict`` / ``from_dict`` also carry 8-bit states.
"""

import functools as _functools
from typing import Any as _Any, Optional as _Optional, Tuple as _Tuple

import torch as _torch

from .. import functional as _lf
from ..functional import (  # noqa: F401  (re-exported under bitsandbytes' names)
    GlobalPageManager,
    QuantState,
    _mul,
    batched_igemm,
    check_matmul,
    create_quantile_map,
    dequantize,
    dequantize_no_absmax,
    elementwise_func,
    estimate_quantiles,
    fill,
    get_paged,
    histogram_scatter_add_2d,
    igemm,
    int8_double_quant,
    int8_linear_matmul,
    int8_vectorwise_dequant,
    int8_vectorwise_quant,
    optimizer_update_8bit,
    optimizer_update_8bit_blockwise,
    optimizer_update_32bit,
    percentile_clipping,
    prefetch_tensor,
    quantize,
    quantize_no_absmax,
)
from .utils import pack_dict_to_tensor, unpack_tensor_to_dict

__all__ = [
    "GlobalPageManager", "QuantState", "_mul", "batched_igemm", "check_matmul",
    "create_dynamic_map", "create_fp8_map", "create_linear_map", "create_normal_map", "create_quantile_map",
    "dequantize", "dequantize_4bit", "dequantize_blockwise", "dequantize_fp4", "dequantize_nf4",
    "dequantize_no_absmax", "elementwise_func", "estimate_quantiles", "fill", "gemv_4bit", "get_4bit_type",
    "get_paged", "has_avx512bf16", "histogram_scatter_add_2d", "igemm", "int8_double_quant",
    "int8_linear_matmul", "int8_mm_dequant", "int8_vectorwise_dequant", "int8_vectorwise_quant",
    "optimizer_update_8bit", "optimizer_update_8bit_blockwise", "optimizer_update_32bit",
    "pack_dict_to_tensor", "percentile_clipping", "prefetch_tensor", "quantize", "quantize_4bit",
    "quantize_blockwise", "quantize_fp4", "quantize_nf4", "quantize_no_absmax", "unpack_tensor_to_dict",
]

# ------------------------------------------------------------------ code maps (torch tensors)


def create_linear_map(signed: bool = True, total_bits: int = 8, add_zero: bool = True) -> _torch.Tensor:
    """:func:`lowbit.functional.create_linear_map` as a float32 CPU tensor."""
    return _torch.from_numpy(_lf.create_linear_map(signed, total_bits, add_zero))


def create_normal_map(offset: float = 0.9677083, use_extra_value: bool = True) -> _torch.Tensor:
    """:func:`lowbit.functional.create_normal_map` as a float32 CPU tensor."""
    return _torch.from_numpy(_lf.create_normal_map(offset, use_extra_value))


def create_fp8_map(signed: bool = True, exponent_bits: int = 5, precision_bits: int = 2,
                   total_bits: int = 8) -> _torch.Tensor:
    """:func:`lowbit.functional.create_fp8_map` as a float32 CPU tensor."""
    return _torch.from_numpy(_lf.create_fp8_map(signed, exponent_bits, precision_bits, total_bits))


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> _torch.Tensor:
    """:func:`lowbit.functional.create_dynamic_map` as a float32 CPU tensor."""
    return _torch.from_numpy(_lf.create_dynamic_map(signed, max_exponent_bits, total_bits))


def get_4bit_type(typename: str, device: _Any = None, blocksize: int = 64) -> _torch.Tensor:
    """The 16 values of a 4-bit type as a float32 tensor on ``device`` (default: CUDA if available, else CPU)."""
    if device is None:
        device = "cuda" if _torch.cuda.is_available() else "cpu"
    return _lf.get_4bit_type(typename, device=_torch.device(device), blocksize=blocksize)


# ------------------------------------------------------------------ 8-bit blockwise

_LARGE_BLOCKSIZES = (8192, 16384)  # above lowbit's kernels' 4096, within bitsandbytes' CPU range


def _large_absmax(A: _torch.Tensor, blocksize: int) -> _torch.Tensor:
    """max |x| per block (NaN ignored, as lowbit's kernels), float32 [ceil(n / blocksize)]."""
    x = A.reshape(-1).float().abs()
    x = _torch.where(_torch.isnan(x), _torch.zeros((), dtype=x.dtype, device=x.device), x)
    pad = -x.numel() % blocksize
    if pad:
        x = _torch.nn.functional.pad(x, (0, pad))
    return x.view(-1, blocksize).amax(dim=1)


def _per_element(absmax: _torch.Tensor, n: int, blocksize: int) -> _torch.Tensor:
    return absmax.repeat_interleave(blocksize)[:n]


def _quantize_large(A: _torch.Tensor, code: _Optional[_torch.Tensor], absmax: _Optional[_torch.Tensor],
                    out: _Optional[_torch.Tensor], blocksize: int, nested: bool) -> _Tuple[_torch.Tensor, QuantState]:
    """8-bit blockwise quantization in blocks above 4096: lowbit's rule (the code nearest ``x · (1 / absmax)``,
    the lower one at a midpoint) through its per-code op, the block maxima in torch."""
    if not isinstance(A, _torch.Tensor) or A.dtype not in (_torch.float32, _torch.float16, _torch.bfloat16):
        raise TypeError(f"quantize_blockwise: A must be a float32, float16 or bfloat16 torch.Tensor "
                        f"(got {getattr(A, 'dtype', type(A).__name__)})")
    code = create_dynamic_map().to(A.device) if code is None else code.to(A.device)
    n = A.numel()
    amax = _large_absmax(A, blocksize)
    if absmax is not None:
        amax = absmax.copy_(amax)
    scale = _per_element(amax, n, blocksize)
    recip = _torch.where(scale > 0, 1.0 / scale, _torch.zeros((), dtype=scale.dtype, device=scale.device))
    q = _lf.quantize_no_absmax((A.reshape(-1).float() * recip).reshape(A.shape), code, out)
    state = QuantState(absmax=amax, code=code, blocksize=blocksize, dtype=A.dtype, shape=tuple(A.shape))
    if nested:
        offset = amax.mean()
        qabsmax, state2 = quantize_blockwise(amax - offset, blocksize=blocksize)
        state = QuantState(absmax=qabsmax, code=code, blocksize=blocksize, dtype=A.dtype, shape=tuple(A.shape),
                           offset=offset, state2=state2)
    return q, state


def _dequantize_large(A: _torch.Tensor, qs: QuantState, out: _Optional[_torch.Tensor]) -> _torch.Tensor:
    """``code[A] · absmax[block]`` in float32, rounded once to the state's dtype (lowbit's rule)."""
    absmax = qs.absmax
    if qs.nested:
        absmax = dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
    values = _lf.dequantize_no_absmax(A, qs.code.to(A.device))
    result = (values.reshape(-1) * _per_element(absmax.float(), A.numel(), qs.blocksize)).reshape(A.shape)
    dtype = out.dtype if out is not None else (qs.dtype if qs.dtype is not None else _torch.float32)
    result = result.to(dtype)
    return out.copy_(result) if out is not None else result


def quantize_blockwise(A: _torch.Tensor, code: _Optional[_torch.Tensor] = None,
                       absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                       blocksize: int = 4096, nested: bool = False) -> _Tuple[_torch.Tensor, QuantState]:
    """:func:`lowbit.functional.quantize_blockwise`; blocksizes 32 to 16384 (powers of two)."""
    if blocksize in _LARGE_BLOCKSIZES:
        return _quantize_large(A, code, absmax, out, blocksize, nested)
    return _lf.quantize_blockwise(A, code, absmax, out, blocksize, nested)


def dequantize_blockwise(A: _torch.Tensor, quant_state: _Optional[QuantState] = None,
                         absmax: _Optional[_torch.Tensor] = None, code: _Optional[_torch.Tensor] = None,
                         out: _Optional[_torch.Tensor] = None, blocksize: int = 4096,
                         nested: bool = False) -> _torch.Tensor:
    """:func:`lowbit.functional.dequantize_blockwise`; blocksizes 32 to 16384 (powers of two)."""
    size = quant_state.blocksize if quant_state is not None else blocksize
    if size in _LARGE_BLOCKSIZES:
        if quant_state is None:
            if absmax is None:
                raise ValueError("dequantize_blockwise: quant_state or absmax is required (got neither)")
            code = create_dynamic_map().to(A.device) if code is None else code
            quant_state = QuantState(absmax=absmax, code=code, blocksize=blocksize, dtype=_torch.float32)
        return _dequantize_large(A, quant_state, out)
    return _lf.dequantize_blockwise(A, quant_state, absmax, code, out, blocksize, nested)


# ------------------------------------------------------------------ int8


def int8_mm_dequant(A: _torch.Tensor, row_stats: _torch.Tensor, col_stats: _torch.Tensor,
                    out: _Optional[_torch.Tensor] = None, bias: _Optional[_torch.Tensor] = None) -> _torch.Tensor:
    """:func:`lowbit.functional.int8_mm_dequant`; the statistics may have any shape of their element count
    (``[rows, 1]`` too), as bitsandbytes flattens them."""
    return _lf.int8_mm_dequant(A, row_stats.reshape(-1), col_stats.reshape(-1), out, bias)


# ------------------------------------------------------------------ 4-bit


def quantize_4bit(A: _torch.Tensor, absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                  blocksize: _Optional[int] = None, compress_statistics: bool = False, quant_type: str = "fp4",
                  quant_storage: _Any = _torch.uint8) -> _Tuple[_torch.Tensor, QuantState]:
    """:func:`lowbit.functional.quantize_4bit`; ``blocksize=None`` is 64."""
    return _lf.quantize_4bit(A, absmax, out, 64 if blocksize is None else blocksize, compress_statistics,
                             quant_type, quant_storage)


def quantize_fp4(A: _torch.Tensor, absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                 blocksize: _Optional[int] = None, compress_statistics: bool = False,
                 quant_storage: _Any = _torch.uint8) -> _Tuple[_torch.Tensor, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="fp4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "fp4", quant_storage)


def quantize_nf4(A: _torch.Tensor, absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                 blocksize: _Optional[int] = None, compress_statistics: bool = False,
                 quant_storage: _Any = _torch.uint8) -> _Tuple[_torch.Tensor, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="nf4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "nf4", quant_storage)


def dequantize_4bit(A: _torch.Tensor, quant_state: _Optional[QuantState] = None,
                    absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                    blocksize: _Optional[int] = None, quant_type: str = "fp4") -> _torch.Tensor:
    """:func:`lowbit.functional.dequantize_4bit`; ``blocksize=None`` is 64, and a packed input of one row
    (``B.t()``) gives the result transposed, as bitsandbytes does."""
    result = _lf.dequantize_4bit(A, quant_state, absmax, out, 64 if blocksize is None else blocksize, quant_type)
    return result.t() if A.shape[0] == 1 else result


def dequantize_fp4(A: _torch.Tensor, quant_state: _Optional[QuantState] = None,
                   absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                   blocksize: _Optional[int] = None) -> _torch.Tensor:
    """:func:`dequantize_4bit` with ``quant_type="fp4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "fp4")


def dequantize_nf4(A: _torch.Tensor, quant_state: _Optional[QuantState] = None,
                   absmax: _Optional[_torch.Tensor] = None, out: _Optional[_torch.Tensor] = None,
                   blocksize: _Optional[int] = None) -> _torch.Tensor:
    """:func:`dequantize_4bit` with ``quant_type="nf4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "nf4")


def gemv_4bit(A: _torch.Tensor, B: _torch.Tensor, out: _Optional[_torch.Tensor] = None, transposed_A: bool = False,
              transposed_B: bool = False, state: _Optional[QuantState] = None) -> _torch.Tensor:
    """bitsandbytes' ``gemv_4bit``: ``A · W[N, K]ᵀ`` for the packed 4-bit weight ``B`` of ``state``.

    ``B`` as ``quantize_4bit`` gives it or its ``.t()``; a state repacked by bitsandbytes'
    ``_convert_weight_packed_for_cpu`` is unpacked to the standard layout first (a copy per call).
    ``transposed_A`` / ``transposed_B`` are accepted and unused, as in bitsandbytes.
    """
    if state is None:
        raise ValueError("gemv_4bit: state is required (got None); it comes from quantize_4bit")
    if getattr(state, "packing_format_for_cpu", False):
        B, state = _unpack_cpu_format(B, state)
    return _lf.gemv_4bit(A, B.reshape(-1, 1), state, out=out)


# ------------------------------------------------ bitsandbytes' AVX512-BF16 CPU weight layout

_BLOCK_N = 32


@_functools.lru_cache(maxsize=1)
def has_avx512bf16() -> bool:
    """True when the CPU has AVX512-BF16 (Linux: /proc/cpuinfo), where bitsandbytes repacks 4-bit weights."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and "avx512_bf16" in line.split() for line in f)
    except OSError:
        return False


def _convert_weight_packed_for_cpu(qweight: _torch.Tensor, quant_state: QuantState,
                                   block_n: int = _BLOCK_N) -> _Tuple[_torch.Tensor, QuantState]:
    """bitsandbytes' repacking of a 4-bit weight for its AVX512-BF16 CPU kernel (same bytes, same state edits).

    Returns ``(packed [N, K/2] uint8, quant_state)``; the state is changed in place as bitsandbytes changes
    it (bfloat16 absmax ``[K / blocksize, N]``, not nested, ``packing_format_for_cpu = True``). lowbit's
    kernels read the standard layout; :func:`gemv_4bit` and ``matmul_4bit`` unpack this one.
    """
    if qweight.dtype != _torch.uint8:
        quant_state.original_storage_type = qweight.dtype
        qweight = qweight.view(_torch.uint8)
    n, k = quant_state.shape
    if n % block_n or k % 2 or k % quant_state.blocksize:
        raise ValueError(f"_convert_weight_packed_for_cpu: N must be a multiple of {block_n} and K of 2 and of the "
                         f"blocksize (got shape {list(quant_state.shape)}, blocksize {quant_state.blocksize})")
    quant_state.original_dtype = quant_state.dtype
    quant_state.original_nested = quant_state.nested
    quant_state.original_qshape = qweight.shape
    flat = qweight.reshape(-1)
    codes = _torch.stack((flat >> 4, flat & 0xF), dim=1).reshape(n, k)
    tiles = codes.reshape(n // block_n, block_n, k // 2, 2).transpose(1, 2).reshape(-1, 64)
    packed = ((tiles[:, 32:] << 4) | tiles[:, :32]).reshape(n, k // 2)
    absmax = quant_state.absmax
    if quant_state.nested:
        absmax = _lf.dequantize_blockwise(quant_state.absmax, quant_state.state2) + quant_state.offset
        quant_state.nested = False
        quant_state.state2 = None
        quant_state.offset = None
    quant_state.absmax = absmax.float().reshape(n, k // quant_state.blocksize).t().to(_torch.bfloat16).contiguous()
    quant_state.dtype = _torch.bfloat16
    quant_state.packing_format_for_cpu = True
    return packed, quant_state


def _unpack_cpu_format(packed: _torch.Tensor, state: QuantState) -> _Tuple[_torch.Tensor, QuantState]:
    """The standard packed bytes and a plain state for a weight in bitsandbytes' CPU layout."""
    n, k = state.shape
    p = packed.reshape(n, k // 2).reshape(-1, 32)
    tiles = _torch.cat((p & 0xF, p >> 4), dim=1)  # [low 32, high 32] of each 64-code tile
    codes = tiles.reshape(n // _BLOCK_N, k // 2, _BLOCK_N, 2).transpose(1, 2).reshape(-1)
    standard = ((codes[0::2] << 4) | codes[1::2]).reshape(-1, 1)
    absmax = state.absmax.t().reshape(-1).float()
    plain = QuantState(absmax=absmax, shape=tuple(state.shape), code=state.code, blocksize=state.blocksize,
                       quant_type=state.quant_type, dtype=getattr(state, "original_dtype", state.dtype))
    return standard, plain

