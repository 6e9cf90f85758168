"""lowbit's functional API: bitsandbytes' names, keywords and defaults.

``import lowbit.functional as F`` stands in for ``import bitsandbytes.functional
as F`` for the ops below, plus DeepSeek-V3's FP8 ``act_quant``,
``weight_quant`` and ``weight_dequant``. Differences from bitsandbytes:

- Arrays of any DLPack framework (NumPy, PyTorch, CuPy, JAX) on the CPU or a
  CUDA GPU are taken without a copy; results come back in the framework and
  on the device of the main input (``A`` / ``x``). Non-contiguous inputs are
  made contiguous first (a copy); ``out=``/``absmax=`` buffers must be
  contiguous and are written in place.
- Code maps and ``get_4bit_type`` without a device return NumPy float32 arrays.
- Every op takes a keyword-only ``stream=``: a ``cudaStream_t`` as an int, a
  ``torch.cuda.Stream``, a CuPy stream or any object with ``__cuda_stream__``.
  Left out, CUDA work goes on the current PyTorch (or CuPy) stream of the
  input's device; JAX and other arrays get results already finished.
- bfloat16/fp8 with NumPy: ml_dtypes arrays in and out when ml_dtypes is
  installed, otherwise results hold the raw bits as uint16 (bfloat16) or uint8
  (fp8), and uint8 inputs are read as float8_e4m3fn codes where an op wants them.
- Errors: ValueError for bad arguments, TypeError for unsupported dtypes or
  array types, RuntimeError for device failures, each with lowbit's message
  (scalars and NumPy byte order are checked before the binding is called).

The semantics (rounding, NaN/Inf, layouts) are lowbit's C++ ops: docs/formats.md.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lowbit
from ._paged import GlobalPageManager, _mul, arange, elementwise_func, fill, get_paged, prefetch_tensor
from ._quant_state import QuantState

__all__ = [
    "GlobalPageManager",
    "QuantState",
    "_mul",
    "arange",
    "act_quant",
    "create_dynamic_map",
    "create_fp8_map",
    "create_linear_map",
    "create_normal_map",
    "create_quantile_map",
    "dequantize",
    "dequantize_4bit",
    "dequantize_blockwise",
    "dequantize_fp4",
    "dequantize_nf4",
    "dequantize_no_absmax",
    "elementwise_func",
    "estimate_quantiles",
    "flash_attention",
    "flash_attention_kvcache",
    "flash_attention_varlen",
    "fp8_gemm",
    "int8_linear",
    "int8_linear_grad_input",
    "int8_linear_matmul",
    "int8_linear_outliers",
    "int8_mm_dequant",
    "int8_scaled_mm",
    "fp8_grouped_gemm_contiguous",
    "fp8_grouped_gemm_masked",
    "fill",
    "gemv_4bit",
    "get_4bit_type",
    "get_paged",
    "histogram_scatter_add_2d",
    "check_matmul",
    "extract_outliers",
    "get_colrow_absmax",
    "igemm",
    "igemmlt",
    "mm_dequant",
    "transform",
    "batched_igemm",
    "dequant_min_max",
    "vectorwise_dequant",
    "vectorwise_mm_dequant",
    "vectorwise_quant",
    "COOSparseTensor",
    "CSCSparseTensor",
    "CSRSparseTensor",
    "coo2csc",
    "coo2csr",
    "coo_zeros",
    "double_quant",
    "spmm_coo",
    "spmm_coo_very_sparse",
    "int8_colwise_quant",
    "int8_double_quant",
    "int8_vectorwise_dequant",
    "int8_vectorwise_quant",
    "matmul_4bit",
    "optimizer_update_32bit",
    "optimizer_update_8bit",
    "optimizer_update_32bit_multi",
    "optimizer_update_8bit_blockwise",
    "optimizer_update_8bit_blockwise_multi",
    "percentile_clipping",
    "prefetch_tensor",
    "quantize",
    "quantize_4bit",
    "quantize_blockwise",
    "quantize_fp4",
    "quantize_nf4",
    "quantize_no_absmax",
    "weight_dequant",
    "weight_quant",
]

Array = Any  # an array of any DLPack framework

# --------------------------------------------------------------- code maps


def _f32(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def create_dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> np.ndarray:
    """The dynamic quantization map (bitsandbytes' default 8-bit code).

    A dynamic exponent and a fraction whose bit count shrinks as the exponent
    grows (Dettmers, 8-Bit Approximations for Parallelism in Deep Learning).
    ``signed=False`` gives the unsigned map used for Adam's second state.
    Returns a float32 NumPy array of 256 values, sorted ascending, equal to
    bitsandbytes' values.
    """
    op = "create_dynamic_map"
    return _f32(_lowbit.create_dynamic_map(_arrays.flag(signed, op, "signed"),
                                           _arrays.integer(max_exponent_bits, op, "max_exponent_bits", 32),
                                           _arrays.integer(total_bits, op, "total_bits", 32)))


def create_linear_map(signed: bool = True, total_bits: int = 8, add_zero: bool = True) -> np.ndarray:
    """A linear quantization map: ``linspace(-1 or 0, 1, 2**total_bits [- 1])``.

    With fewer than 8 bits the values are padded with zeros in the middle to
    256 entries (bitsandbytes' layout, not sorted then). Returns float32 NumPy.
    """
    op = "create_linear_map"
    return _f32(_lowbit.create_linear_map(_arrays.flag(signed, op, "signed"),
                                          _arrays.integer(total_bits, op, "total_bits", 32),
                                          _arrays.flag(add_zero, op, "add_zero")))


def create_normal_map(offset: float = 0.9677083, use_extra_value: bool = True) -> np.ndarray:
    """The normal-float map behind NF4: quantiles of N(0, 1), normalized to [-1, 1].

    ``Φ⁻¹(linspace(offset, 0.5, 9))[:-1]`` and the negated 8 (or 7 with
    ``use_extra_value=False``) on the other side, zero padding to 256, sorted,
    divided by the max. Needs no SciPy (lowbit has its own inverse normal CDF).
    Returns float32 NumPy.
    """
    op = "create_normal_map"
    return _f32(_lowbit.create_normal_map(_arrays.real(offset, op, "offset"),
                                          _arrays.flag(use_extra_value, op, "use_extra_value")))


def create_fp8_map(
    signed: bool = True, exponent_bits: int = 5, precision_bits: int = 2, total_bits: int = 8
) -> np.ndarray:
    """bitsandbytes' floating-point map with the given exponent and mantissa bits.

    All values of the format, sorted, padded with zeros to 256, divided by the
    max. ``exponent_bits + precision_bits`` must equal ``total_bits - signed``.
    Returns float32 NumPy.
    """
    op = "create_fp8_map"
    return _f32(_lowbit.create_fp8_map(_arrays.flag(signed, op, "signed"),
                                       _arrays.integer(exponent_bits, op, "exponent_bits", 32),
                                       _arrays.integer(precision_bits, op, "precision_bits", 32),
                                       _arrays.integer(total_bits, op, "total_bits", 32)))


def create_quantile_map(A: Array, total_bits: int = 8, *, stream: Any = None) -> Array:
    """A map from the data: ``estimate_quantiles(A, num_quantiles=2**total_bits - 1)``
    plus 0, padded with zeros to 256, sorted, divided by max |value|.

    ``A`` needs at least 256 values. Returns float32 [256] in A's framework and
    on A's device (bitsandbytes returns a CPU tensor).
    """
    call = _arrays.Call("create_quantile_map", A, "A", stream)
    total_bits = _arrays.integer(total_bits, call.op, "total_bits", 32)
    out = call.result(_lowbit.quantile_map(call.arg(A, "A"), total_bits, call.ctx))
    call.done()
    return out


def estimate_quantiles(
    A: Array,
    out: Optional[Array] = None,
    offset: float = 1 / 512,
    num_quantiles: int = 256,
    *,
    stream: Any = None,
) -> Array:
    """Equally spaced quantiles of A's values.

    The quantiles at probabilities ``linspace(offset, 1 - offset, 256)``, linear
    interpolation between order statistics (NumPy's default method) — exact on
    the CPU, where bitsandbytes approximates. With ``num_quantiles < 256`` and
    the default offset, the offset becomes ``1 / (2 * num_quantiles)`` and
    ``num_quantiles`` of the 256 are returned (bitsandbytes' selection).

    Parameters
    ----------
    A : array
        float32/float16/bfloat16, any shape, at least 256 values.
    out : array, optional
        float32 [256] buffer to fill (only with ``num_quantiles == 256``).
    offset : float
        Distance of the first and last quantile from 0 and 1, in (0, 0.5).
    num_quantiles : int
        1 to 256.

    Returns
    -------
    float32 [num_quantiles] in A's framework and device (``out`` when given).
    """
    call = _arrays.Call("estimate_quantiles", A, "A", stream)
    raw = _lowbit.estimate_quantiles(call.arg(A, "A"), call.out(out, "out"), _arrays.real(offset, call.op, "offset"),
                                     _arrays.integer(num_quantiles, call.op, "num_quantiles", 32), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def histogram_scatter_add_2d(histogram: Array, index1: Array, index2: Array, source: Array, *,
                             stream: Any = None) -> None:
    """``histogram[index1[i], index2[i]] += source[i]`` for every i, in place (bitsandbytes'
    ``histogram_scatter_add_2d``).

    ``histogram``: float32 [maxdim1, maxdim2]; ``index1``, ``index2``: int32, ``source``: float32, all of one
    element count; any DLPack framework, one device (bitsandbytes: CUDA only). An index outside the histogram
    raises ``ValueError`` on the CPU (nothing is added) and is skipped on CUDA, which cannot raise without
    waiting for the device. CUDA adds with atomics in no fixed order: sums agree within float32 rounding.
    """
    call = _arrays.Call("histogram_scatter_add_2d", histogram, "histogram", stream)
    _lowbit.histogram_scatter_add_2d(call.out(histogram, "histogram"), call.arg(index1, "index1"),
                                     call.arg(index2, "index2"), call.arg(source, "source"), call.ctx)
    call.done()


_4BIT_TYPES = ("nf4", "fp4", "int4", "af4", "fp4_e2m1")


def get_4bit_type(typename: str, device: Any = None, blocksize: int = 64) -> Array:
    """The 16 values of a 4-bit data type, indexed by code.

    ``typename``: ``"nf4"``, ``"fp4"`` (bitsandbytes FP4), ``"int4"``, ``"af4"``
    (blocksize 64 only) or ``"fp4_e2m1"`` (OCP, not normalized). Normalized to
    max |value| = 1 like bitsandbytes'.

    ``device``: None (the default, unlike bitsandbytes' CUDA) or ``"cpu"`` give a
    float32 NumPy array; ``"cuda[:N]"`` a PyTorch tensor there (CuPy without
    PyTorch); a torch.device a PyTorch tensor; an array its framework and device.
    """
    op = "get_4bit_type"
    name = _arrays.text(typename, op, "typename")
    if name not in _4BIT_TYPES:  # checked here so that the message names this function's keyword
        raise ValueError(f"{op}: typename must be one of {', '.join(_4BIT_TYPES)} (got {name!r})")
    values = _f32(_lowbit.get_4bit_type(name, _arrays.integer(blocksize, op, "blocksize", 32)))
    dev, hint = _arrays.parse_device(device)
    return _arrays.framework_for(dev, hint).from_numpy(values, dev)


# ------------------------------------------------------ 8-bit blockwise


def _nested_arg(call: _arrays.Call, qs: QuantState) -> Optional[Tuple[Any, Any, Any, int]]:
    if not qs.nested:
        return None
    s2 = qs.state2
    blocksize2 = s2.blocksize if s2.blocksize is not None else 256
    return (_code_arg(call, s2.code, "state2.code"), call.arg(s2.absmax, "state2.absmax"), call.scalar(qs.offset, "offset"),
            _arrays.integer(blocksize2, call.op, "state2.blocksize"))


def _blocksize(call: _arrays.Call, qs: QuantState, default: int) -> int:
    """The state's blocksize (the default where it has none), checked."""
    if qs.blocksize is None:
        return _arrays.integer(default, call.op, "blocksize")
    return _arrays.integer(qs.blocksize, call.op, "quant_state.blocksize")


def _input_dtype(call: _arrays.Call, A: Array, r: dict) -> Any:
    """A's dtype object (torch.bfloat16, np.dtype, ...), or the framework's for its name."""
    dtype = getattr(A, "dtype", None)
    return dtype if dtype is not None else call.fw.dtype(r["dtype"])


# One array per (framework, device, map) that every state made there refers
# to, as bitsandbytes keeps its code maps: no allocation or copy per call.
_SHARED_CODES: dict = {}
_CACHED_FRAMEWORKS = (_arrays.NUMPY, _arrays.TORCH, _arrays.CUPY, _arrays.JAX)


def _shared_code(call: _arrays.Call, name: str) -> Array:
    """The code map `name` ("dynamic", "nf4", "fp4") on the call's device, in its framework."""
    key = (call.fw, call.device, name)
    code = _SHARED_CODES.get(key)
    if code is None:
        code = call.result(_lowbit.shared_code(name, call.device[0], call.device[1]))
        if call.fw in _CACHED_FRAMEWORKS:
            _SHARED_CODES[key] = code
    return code


def _code_arg(call: _arrays.Call, code: Optional[Array], name: str) -> Optional[Tuple[Any, str]]:
    """A code map argument: None for the shared dynamic map (the C++ side has it), else the array."""
    if code is None or code is _SHARED_CODES.get((call.fw, call.device, "dynamic")):
        return None
    return call.arg(code, name)


def _state(call: _arrays.Call, r: dict, absmax: Optional[Array], code: Array, **fields: Any) -> QuantState:
    """The QuantState of a quantize call from the C++ result dict."""
    state_absmax = call.result(r["absmax"]) if r["absmax"] is not None else absmax
    if "offset" not in r:
        return QuantState(absmax=state_absmax, code=code, **fields)
    state2 = QuantState(
        absmax=call.result(r["absmax2"]),
        code=_shared_code(call, "dynamic"),
        blocksize=r["blocksize2"],
        dtype=call.fw.dtype("float32"),
    )
    return QuantState(
        absmax=state_absmax, code=code, offset=call.result(r["offset"]), state2=state2, **fields
    )


def quantize_blockwise(
    A: Array,
    code: Optional[Array] = None,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 4096,
    nested: bool = False,
    *,
    stream: Any = None,
) -> Tuple[Array, QuantState]:
    """Quantize A to 8 bits in blocks of ``blocksize`` values.

    For each block, ``absmax = max |x|``; every value becomes the index of the
    ``code`` entry nearest to ``x / absmax`` (``x * (1 / absmax)`` in float32).

    Parameters
    ----------
    A : array
        float32/float16/bfloat16, any shape.
    code : array, optional
        float32 [256] map sorted ascending (default: the dynamic map, one
        array per device shared by every state); the state refers to it when
        it is on A's device, else to a copy there.
    absmax : array, optional
        float32 [ceil(n / blocksize)] buffer for the block maxima.
    out : array, optional
        uint8 buffer of A's size for the codes.
    blocksize : int
        32, 64, ..., 4096.
    nested : bool
        Quantize the absmax again (double quantization): its mean is taken off
        (``offset``, the absmax buffer is centered in place) and the rest is
        quantized with the dynamic map and the same blocksize (``state2``).

    Returns
    -------
    (uint8 array of A's shape, QuantState) in A's framework and device.
    """
    call = _arrays.Call("quantize_blockwise", A, "A", stream)
    r = _lowbit.quantize_blockwise(
        call.arg(A, "A"), _code_arg(call, code, "code"), call.out(absmax, "absmax"), call.out(out, "out"),
        _arrays.integer(blocksize, call.op, "blocksize"), _arrays.flag(nested, call.op, "nested"), call.ctx,
    )
    q = out if out is not None else call.result(r["out"])
    if code is None:
        code = _shared_code(call, "dynamic")
    elif r["code"] is not None:
        code = call.result(r["code"])
    elif _arrays.framework_of(code, call.op, "code") is not call.fw:  # the state's arrays are A's framework's
        code = call.result(_lowbit.to_device(call.arg(code, "code"), call.device[0], call.device[1], call.stream))
    state = _state(call, r, absmax, code, blocksize=blocksize, shape=r["shape"], dtype=_input_dtype(call, A, r))
    call.done()
    return q, state


_OUT_DTYPES = ("float32", "float16", "bfloat16")


def _out_dtype(op: str, out: Optional[Array], dtype: Any) -> str:
    """The output dtype's name: out's when given (checked here, so the error names out), else dtype's."""
    if out is not None:
        name = _arrays.dtype_name(getattr(out, "dtype", None))
        if name not in _OUT_DTYPES:
            raise TypeError(f"{op}: out dtype must be one of {', '.join(_OUT_DTYPES)} (got {name})")
        return name
    return _arrays.dtype_name(dtype if dtype is not None else "float32")


def dequantize_blockwise(
    A: Array,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[Array] = None,
    code: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 4096,
    nested: bool = False,
    *,
    stream: Any = None,
) -> Array:
    """Dequantize 8-bit blockwise codes: ``out[i] = code[A[i]] * absmax[i // blocksize]``.

    Parameters
    ----------
    A : array
        uint8 codes.
    quant_state : QuantState, optional
        From :func:`quantize_blockwise` (nested absmax restored first). Without
        it, ``absmax`` (float32) is required and ``code`` defaults to the
        dynamic map, ``blocksize`` applies and the output is float32.
    out : array, optional
        float32/float16/bfloat16 buffer of A's size.

    Returns
    -------
    Array of A's shape and the state's dtype (``out`` when given), in A's
    framework and device.
    """
    if quant_state is None:
        if absmax is None:
            raise ValueError("dequantize_blockwise: quant_state or absmax is required (got neither)")
        blocksize = _arrays.integer(blocksize, "dequantize_blockwise", "blocksize")
        quant_state = QuantState(absmax=absmax, code=code, blocksize=blocksize, dtype="float32")
    call = _arrays.Call("dequantize_blockwise", A, "A", stream)
    qs = quant_state
    raw = _lowbit.dequantize_blockwise(
        call.arg(A, "A"),
        call.arg(qs.absmax, "absmax"),
        _code_arg(call, qs.code, "code"),
        _blocksize(call, qs, blocksize),
        _nested_arg(call, qs),
        call.out(out, "out"),
        _out_dtype(call.op, out, qs.dtype),
        call.ctx,
    )
    call.done()
    return out if out is not None else call.result(raw)


# ------------------------------------------------------ 8-bit tensor-wise


def _code_result(call: _arrays.Call, code: Optional[Array], copy: Any) -> Array:
    """The map a tensor-wise state refers to: the shared dynamic map, the C++ side's copy on A's device, or code."""
    if code is None:
        return _shared_code(call, "dynamic")
    if copy is not None:
        return call.result(copy)
    if _arrays.framework_of(code, call.op, "code") is not call.fw:
        return call.result(_lowbit.to_device(call.arg(code, "code"), call.device[0], call.device[1], call.stream))
    return code


def quantize(A: Array, code: Optional[Array] = None, out: Optional[Array] = None, *,
             stream: Any = None) -> Tuple[Array, Tuple[Array, Array]]:
    """Quantize A to 8 bits with one scale for the whole tensor (bitsandbytes' ``quantize``).

    ``absmax = max |A|`` (NaN ignored) and every value becomes the index of the ``code`` entry nearest to
    ``x / absmax`` (float32 division; an all-zero A gives absmax 0 and 0's code). One op on A's device:
    the absmax never goes through the host, and the call does not wait for the device.

    ``A``: float32/float16/bfloat16, any shape. ``code``: float32 [256] sorted ascending (default: the
    signed dynamic map, shared). ``out``: a uint8 buffer of A's size. Returns ``(codes, (absmax, code))``
    with absmax a 0-d float32 array, all in A's framework and device.
    """
    call = _arrays.Call("quantize", A, "A", stream)
    raw, absmax, copy = _lowbit.quantize_tensorwise(call.arg(A, "A"), _code_arg(call, code, "code"),
                                                    call.out(out, "out"), call.ctx)
    q = out if out is not None else call.result(raw)
    state = (call.result(absmax), _code_result(call, code, copy))
    call.done()
    return q, state


def dequantize(A: Array, state: Optional[Tuple[Array, Array]] = None, absmax: Optional[Array] = None,
               code: Optional[Array] = None, out: Optional[Array] = None, *, stream: Any = None) -> Array:
    """Dequantize tensor-wise 8-bit codes (bitsandbytes' ``dequantize``): ``code[A] * absmax`` in float32.

    ``state``: ``(absmax, code)`` from :func:`quantize`; without it ``absmax`` (float32, one element) is
    required and ``code`` defaults to the dynamic map. ``out``: a float32/float16/bfloat16 buffer of A's
    size, written with the product (bitsandbytes writes ``code[A]`` there and returns the product apart).
    Returns the output (``out`` when given) in A's framework and device.
    """
    if state is None:
        if absmax is None:
            raise ValueError("dequantize: state or absmax is required (got neither)")
        state = (absmax, code)
    call = _arrays.Call("dequantize", A, "A", stream)
    raw = _lowbit.dequantize_tensorwise(call.arg(A, "A"), call.scalar(state[0], "absmax"),
                                        _code_arg(call, state[1], "code"), call.out(out, "out"),
                                        _out_dtype(call.op, out, None), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def quantize_no_absmax(A: Array, code: Array, out: Optional[Array] = None, *, stream: Any = None) -> Array:
    """8-bit codes of A without a scale (bitsandbytes' ``quantize_no_absmax``): the nearest ``code`` entry.

    ``A``: float32/float16/bfloat16. ``code``: float32 [256] sorted ascending. A value exactly midway between
    two entries takes the lower one (docs/formats.md). Returns uint8 of A's shape (``out`` when given).
    """
    call = _arrays.Call("quantize_no_absmax", A, "A", stream)
    raw = _lowbit.quantize_no_absmax(call.arg(A, "A"), _code_arg(call, code, "code"), call.out(out, "out"), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def dequantize_no_absmax(A: Array, code: Array, out: Optional[Array] = None, *, stream: Any = None) -> Array:
    """``code[A]`` (bitsandbytes' ``dequantize_no_absmax``): float32 of A's shape, or ``out``
    (float32/float16/bfloat16) when given."""
    call = _arrays.Call("dequantize_no_absmax", A, "A", stream)
    raw = _lowbit.dequantize_no_absmax(call.arg(A, "A"), _code_arg(call, code, "code"), call.out(out, "out"),
                                       _out_dtype(call.op, out, None), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


# ------------------------------------------------------------------- 4-bit


def _storage_view(call: _arrays.Call, packed: Array, quant_storage: Any) -> Array:
    """The packed uint8 [(n+1)//2, 1] codes seen as quant_storage [m, 1] (bitsandbytes)."""
    if quant_storage is None or _arrays.dtype_name(quant_storage) == "uint8":
        return packed
    name = _arrays.dtype_name(quant_storage)
    size = np.dtype(np.uint16 if name == "bfloat16" else np.uint8 if name in _arrays._FP8 else name).itemsize
    nbytes = int(np.prod(packed.shape))
    if nbytes % size:
        raise ValueError(
            f"quantize_4bit: {nbytes} packed bytes do not fill whole {name} elements (quant_storage); "
            f"use uint8 or an element count that does"
        )
    if call.fw is _arrays.TORCH:
        return packed.view(-1).view(call.fw.dtype(name)).view(-1, 1)
    if call.fw is _arrays.NUMPY:
        return packed.reshape(-1).view(_arrays._numpy_dtype(name)).reshape(-1, 1)
    raise TypeError(f"quantize_4bit: quant_storage other than uint8 needs NumPy or PyTorch arrays (got {call.fw.name})")


def quantize_4bit(
    A: Array,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    compress_statistics: bool = False,
    quant_type: str = "fp4",
    quant_storage: Any = None,
    *,
    stream: Any = None,
) -> Tuple[Array, QuantState]:
    """Quantize A to 4-bit NF4 or FP4 in blocks of ``blocksize`` values.

    Per block ``absmax = max |x|``; each ``x * (1 / absmax)`` gets the 4-bit code
    of the nearest NF4 value (the lower one at a midpoint) or bitsandbytes' FP4
    decision tree; two codes per byte, the even element in the high nibble.

    Parameters
    ----------
    A : array
        float32/float16/bfloat16, any shape (n values).
    absmax : array, optional
        float32 [ceil(n / blocksize)] buffer for the block maxima.
    out : array, optional
        Buffer of (n + 1) // 2 bytes for the packed codes (any dtype).
    blocksize : int
        32, 64, ..., 4096.
    compress_statistics : bool
        Double quantization: the absmax is centered (``offset``) and quantized
        to 8 bits with the dynamic map in blocks of 256 (``state2``).
    quant_type : str
        ``"fp4"`` (bitsandbytes' default) or ``"nf4"``.
    quant_storage : dtype, optional
        The dtype the packed bytes are viewed as (default uint8), shape [m, 1].

    Returns
    -------
    (packed [(n + 1) // 2, 1] uint8, QuantState with shape and dtype of A), in
    A's framework and device.
    """
    call = _arrays.Call("quantize_4bit", A, "A", stream)
    r = _lowbit.quantize_4bit(
        call.arg(A, "A"), call.out(absmax, "absmax"), call.out(out, "out", "bytes"),
        _arrays.integer(blocksize, call.op, "blocksize"),
        _arrays.flag(compress_statistics, call.op, "compress_statistics"),
        _arrays.text(quant_type, call.op, "quant_type"), call.ctx,
    )
    packed = out if out is not None else _storage_view(call, call.result(r["out"]), quant_storage)
    state = _state(call, r, absmax, _shared_code(call, quant_type), blocksize=blocksize, shape=r["shape"],
                   dtype=_input_dtype(call, A, r), quant_type=quant_type)
    call.done()
    return packed, state


def quantize_fp4(
    A: Array,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    compress_statistics: bool = False,
    quant_storage: Any = None,
    *,
    stream: Any = None,
) -> Tuple[Array, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="fp4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "fp4", quant_storage, stream=stream)


def quantize_nf4(
    A: Array,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    compress_statistics: bool = False,
    quant_storage: Any = None,
    *,
    stream: Any = None,
) -> Tuple[Array, QuantState]:
    """:func:`quantize_4bit` with ``quant_type="nf4"``."""
    return quantize_4bit(A, absmax, out, blocksize, compress_statistics, "nf4", quant_storage, stream=stream)


def dequantize_4bit(
    A: Array,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    quant_type: str = "fp4",
    *,
    stream: Any = None,
) -> Array:
    """Dequantize packed NF4/FP4 codes: ``out[i] = table[code(i)] * absmax[i // blocksize]``.

    Parameters
    ----------
    A : array
        The packed codes (uint8, or any ``quant_storage`` dtype holding them).
    quant_state : QuantState, optional
        From :func:`quantize_4bit`: gives shape, dtype, blocksize, quant_type
        and the (possibly nested) absmax. Without it, ``absmax`` and ``out``
        are required and ``blocksize``/``quant_type`` apply.
    out : array, optional
        float32/float16/bfloat16 buffer of the original shape.

    Returns
    -------
    The original shape and dtype (``out`` when given), in A's framework and
    device. (bitsandbytes transposes the result when ``A.shape[0] == 1``;
    lowbit does not.)
    """
    if quant_state is None:
        if absmax is None or out is None:
            raise ValueError("dequantize_4bit: without quant_state, absmax and out are both required")
        blocksize = _arrays.integer(blocksize, "dequantize_4bit", "blocksize")
        quant_state = QuantState(
            absmax=absmax, shape=tuple(out.shape), dtype=out.dtype, blocksize=blocksize, quant_type=quant_type
        )
    qs = quant_state
    if qs.shape is None:
        raise ValueError("dequantize_4bit: quant_state.shape is required (got None)")
    call = _arrays.Call("dequantize_4bit", A, "A", stream)
    raw = _lowbit.dequantize_4bit(
        call.arg(A, "A", "bytes"),
        call.arg(qs.absmax, "absmax"),
        _arrays.text(qs.quant_type or quant_type, call.op, "quant_type"),
        _blocksize(call, qs, blocksize),
        _nested_arg(call, qs),
        _arrays.shape_of(qs.shape, call.op, "quant_state.shape"),
        call.out(out, "out"),
        _out_dtype(call.op, out, qs.dtype),
        call.ctx,
    )
    call.done()
    return out if out is not None else call.result(raw)


def dequantize_fp4(
    A: Array,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    *,
    stream: Any = None,
) -> Array:
    """:func:`dequantize_4bit` with ``quant_type="fp4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "fp4", stream=stream)


def dequantize_nf4(
    A: Array,
    quant_state: Optional[QuantState] = None,
    absmax: Optional[Array] = None,
    out: Optional[Array] = None,
    blocksize: int = 64,
    *,
    stream: Any = None,
) -> Array:
    """:func:`dequantize_4bit` with ``quant_type="nf4"``."""
    return dequantize_4bit(A, quant_state, absmax, out, blocksize, "nf4", stream=stream)


# ------------------------------------------------- 4-bit matmul (bitsandbytes)


def _matmul_4bit(op: str, A: Array, B: Array, quant_state: Optional[QuantState], bias: Optional[Array],
                 out: Optional[Array], stream: Any) -> Array:
    qs = quant_state
    if qs is None:
        raise ValueError(f"{op}: the quant state is required (got None); it comes from quantize_4bit")
    if not hasattr(qs, "absmax"):
        raise TypeError(f"{op}: the quant state must be a QuantState (got {type(qs).__name__})")
    if qs.shape is None:
        raise ValueError(f"{op}: quant_state.shape is required (got None)")
    call = _arrays.Call(op, A, "A", stream)
    raw = _lowbit.matmul_4bit(
        op,
        call.arg(A, "A"),
        call.arg(B, "B", "bytes"),
        call.arg(qs.absmax, "absmax"),
        _nested_arg(call, qs),
        _arrays.text(qs.quant_type or "", call.op, "quant_state.quant_type"),
        _blocksize(call, qs, 64),
        _arrays.shape_of(qs.shape, call.op, "quant_state.shape"),
        call.opt(bias, "bias"),
        call.out(out, "out"),
        call.ctx,
    )
    call.done()
    return out if out is not None else call.result(raw)


def matmul_4bit(
    A: Array,
    B: Array,
    quant_state: QuantState,
    bias: Optional[Array] = None,
    *,
    out: Optional[Array] = None,
    stream: Any = None,
) -> Array:
    """bitsandbytes' ``matmul_4bit``: ``A · dequantize_4bit(B, quant_state)ᵀ (+ bias)``.

    Runs on the 4-bit state directly — any K (blocks may cross rows), odd
    N·K, nested absmax — with float32 accumulation:
    ``out = A · (table[code] · absmax[block])ᵀ + bias``. On the CPU the
    weights are the exact float32 products; the CUDA paths round each weight
    (or table value) once to A's dtype, as bitsandbytes does (docs/gemm.md
    gives each path's bound). ``quant_state`` may be bitsandbytes' own
    QuantState: it is read by its attributes.

    Parameters
    ----------
    A : array
        float32/float16/bfloat16 [..., K].
    B : array
        The packed codes from :func:`quantize_4bit` of a weight [N, K] (uint8
        or any quant_storage; ``B.t()`` as bitsandbytes passes it is fine).
    quant_state : QuantState
        Its 4-bit state (shape [N, K], nf4/fp4, possibly nested), on A's device.
    bias : array, optional
        float32/float16/bfloat16 [N].
    out : array, optional
        Buffer of A's dtype, [..., N] (keyword-only here).

    Returns
    -------
    [..., N] of A's dtype, in A's framework and on its device.
    """
    return _matmul_4bit("matmul_4bit", A, B, quant_state, bias, out, stream)


def gemv_4bit(
    A: Array,
    B: Array,
    state: QuantState,
    bias: Optional[Array] = None,
    *,
    out: Optional[Array] = None,
    stream: Any = None,
) -> Array:
    """bitsandbytes' ``gemv_4bit``: :func:`matmul_4bit` for an A holding one
    row ([K], [1, K], [1, 1, K], ...)."""
    return _matmul_4bit("gemv_4bit", A, B, state, bias, out, stream)


# --------------------------------------------------------------- int8


def int8_vectorwise_quant(A: Array, threshold: float = 0.0, *, stream: Any = None) -> Tuple[Array, Array, Optional[Array]]:
    """LLM.int8 row-wise quantization.

    ``row_stats[r] = max |A[r, :]|`` over the non-outlier entries;
    ``out_row = round(A * (127 / row_stats[r]))`` (half to even). With
    ``threshold > 0``, entries with ``|a| >= threshold`` are outliers: their
    columns are zeroed in ``out_row`` and listed in ``outlier_cols``.

    Parameters
    ----------
    A : array
        float32/float16/bfloat16 [..., K]; rows are all leading dimensions.
    threshold : float
        Outlier threshold (0 disables).

    Returns
    -------
    (out_row int8 of A's shape, row_stats float32 [rows], outlier_cols int64
    ascending, or None when threshold is 0), in A's framework and device.
    """
    call = _arrays.Call("int8_vectorwise_quant", A, "A", stream)
    values, stats, cols = _lowbit.int8_vectorwise_quant(call.arg(A, "A"), _arrays.real(threshold, call.op, "threshold"),
                                                        call.ctx)
    result = call.result(values), call.result(stats), call.result(cols)
    call.done()
    return result


def int8_colwise_quant(A: Array, threshold: float = 0.0, *, stream: Any = None) -> Tuple[Array, Array]:
    """LLM.int8 column-wise quantization: each column of ``A`` [..., K] (rows: the leading dimensions) on its
    own absmax, by ``int8_vectorwise_quant``'s rule. With ``threshold > 0`` the entries with ``|a| >=
    threshold`` are left out of their column's absmax and encoded as 0. Returns ``(out_col int8 of A's shape,
    col_stats float32 [K])`` in A's framework and device.
    """
    call = _arrays.Call("int8_colwise_quant", A, "A", stream)
    values, stats = _lowbit.int8_colwise_quant(call.arg(A, "A"), _arrays.real(threshold, call.op, "threshold"),
                                               call.ctx)
    result = call.result(values), call.result(stats)
    call.done()
    return result


def int8_double_quant(A: Array, col_stats: Any = None, row_stats: Any = None, out_col: Any = None,
                      out_row: Any = None, threshold: float = 0.0, *,
                      stream: Any = None) -> Tuple[Array, Array, Array, Array, Optional[Array]]:
    """bitsandbytes' ``int8_double_quant``: ``A`` quantized by rows and by columns.

    Returns ``(out_row, out_col, row_stats, col_stats, outlier_cols)``: ``int8_vectorwise_quant(A, threshold)``
    (outlier columns zeroed in ``out_row``) and ``int8_colwise_quant(A, threshold)`` (outlier entries zeroed in
    ``out_col``). ``col_stats``, ``row_stats``, ``out_col`` and ``out_row`` are bitsandbytes' deprecated
    arguments and must be None. With ``threshold > 0`` the outlier columns are read back to the host (the
    call waits for its kernels, as bitsandbytes' does).
    """
    if any(x is not None for x in (col_stats, row_stats, out_col, out_row)):
        raise ValueError("int8_double_quant: col_stats, row_stats, out_col and out_row are deprecated "
                         "(bitsandbytes') and must be None")
    out_row_, row_stats_, cols = int8_vectorwise_quant(A, threshold, stream=stream)
    out_col_, col_stats_ = int8_colwise_quant(A, threshold, stream=stream)
    return out_row_, out_col_, row_stats_, col_stats_, cols


def get_colrow_absmax(A: Array, row_stats: Any = None, col_stats: Any = None, nnz_block_ptr: Any = None,
                      threshold: float = 0.0, *, stream: Any = None) -> Tuple[Array, Array, Optional[Array]]:
    """bitsandbytes' ``get_colrow_absmax``: ``(row_stats float32 [rows], col_stats float32 [K], outlier_mask)``,
    the absmax of every row and column of ``A`` [..., K] left the entries with ``|a| >= threshold`` out;
    ``outlier_mask`` is that test as a bool [rows, K] array, or None when ``threshold`` is 0. The stats
    given are returned as they are (bitsandbytes computes only the missing ones); ``nnz_block_ptr`` is
    unused, as in bitsandbytes. Nothing is read back to the host.
    """
    if row_stats is None:  # the row statistics alone: the outlier columns are not read back (no wait)
        call = _arrays.Call("get_colrow_absmax", A, "A", stream)
        _, stats, _ = _lowbit.int8_vectorwise_quant(call.arg(A, "A"), _arrays.real(threshold, call.op, "threshold"),
                                                    call.ctx, False)
        row_stats = call.result(stats)
        call.done()
    if col_stats is None:
        _, col_stats = int8_colwise_quant(A, threshold, stream=stream)
    mask = None
    if threshold > 0:
        k = A.shape[-1]
        mask = abs(A.reshape(-1, k)) >= threshold
    return row_stats, col_stats, mask


def int8_vectorwise_dequant(A: Array, stats: Array, *, dtype: Any = None, stream: Any = None) -> Array:
    """LLM.int8 row-wise dequantization: ``A * stats[r] * (1 / 127)`` (float32 math).

    ``A`` int8 [..., K], ``stats`` float32 [rows]. ``dtype``: the output dtype
    (float32 by default, as bitsandbytes; float16/bfloat16 allowed).
    """
    call = _arrays.Call("int8_vectorwise_dequant", A, "A", stream)
    raw = _lowbit.int8_vectorwise_dequant(call.arg(A, "A"), call.arg(stats, "stats"), _out_dtype(call.op, None, dtype),
                                          call.ctx)
    call.done()
    return call.result(raw)


def int8_linear_matmul(A: Array, B: Array, out: Optional[Array] = None, dtype: Any = "int32", *,
                       stream: Any = None) -> Array:
    """LLM.int8's GEMM (bitsandbytes' ``int8_linear_matmul``): ``A @ B.T`` exactly, in int32.

    ``A`` int8 [..., K], ``B`` int8 [N, K] (K at most 131071, so every sum fits int32), both contiguous.
    Returns int32 [..., N], or fills ``out`` (int32) and returns it. ``dtype`` must be int32.
    """
    call = _arrays.Call("int8_linear_matmul", A, "A", stream)
    if _arrays.dtype_name(dtype) != "int32":
        raise ValueError(f"int8_linear_matmul: dtype must be int32 (got {_arrays.dtype_name(dtype)})")
    raw = _lowbit.int8_linear_matmul(call.arg(A, "A"), call.arg(B, "B"), call.out(out, "out"), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def int8_mm_dequant(A: Array, row_stats: Array, col_stats: Array, out: Optional[Array] = None,
                    bias: Optional[Array] = None, *, dtype: Any = None, stream: Any = None) -> Array:
    """Dequantizes an int8 GEMM's result (bitsandbytes' ``int8_mm_dequant``).

    ``out[m, n] = float(A[m, n]) * (row_stats[m] * col_stats[n]) * (1 / 127**2) + bias[n]``, each step in
    float32 in that order, rounded once to the output dtype. ``A`` int32 [..., N]; ``row_stats`` float32
    [rows] and ``col_stats`` float32 [N] (the row absmax of the two operands, as ``int8_vectorwise_quant``
    gives them); ``bias`` float32/float16/bfloat16 [N]. The output is float16 (bitsandbytes'), or ``dtype``,
    or ``out``'s dtype when ``out`` is given.
    """
    call = _arrays.Call("int8_mm_dequant", A, "A", stream)
    raw = _lowbit.int8_mm_dequant(call.arg(A, "A"), call.arg(row_stats, "row_stats"), call.arg(col_stats, "col_stats"),
                                  call.opt(bias, "bias"), call.out(out, "out"),
                                  _out_dtype(call.op, out, dtype if dtype is not None else "float16"), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def int8_scaled_mm(A: Array, B: Array, row_stats: Array, col_stats: Array, bias: Optional[Array] = None,
                   dtype: Any = None, out: Optional[Array] = None, *, stream: Any = None) -> Array:
    """``int8_mm_dequant(int8_linear_matmul(A, B), row_stats, col_stats, bias=bias)`` in one op, the same
    bits (bitsandbytes' ``int8_scaled_mm``): the int32 products never reach memory. Output float16 by
    default, else ``dtype`` (float32/float16/bfloat16), or ``out``'s.
    """
    call = _arrays.Call("int8_scaled_mm", A, "A", stream)
    raw = _lowbit.int8_scaled_mm(call.arg(A, "A"), call.arg(B, "B"), call.arg(row_stats, "row_stats"),
                                 call.arg(col_stats, "col_stats"), call.opt(bias, "bias"), call.out(out, "out"),
                                 _out_dtype(call.op, out, dtype if dtype is not None else "float16"), call.ctx)
    call.done()
    return out if out is not None else call.result(raw)


def int8_linear(A: Array, CB: Array, SCB: Array, bias: Optional[Array] = None, threshold: float = 0.0, *,
                stream: Any = None, config: str = "") -> Array:
    """The LLM.int8 linear layer's forward (bitsandbytes' ``Linear8bitLt`` on an int8 weight): ``A @ W.T + bias``.

    ``A`` float32/float16/bfloat16 [..., K]; ``CB`` int8 [N, K] and ``SCB`` float32 [N], the weight's rows and
    their absmax (``int8_vectorwise_quant`` of the weight, or bitsandbytes' ``Int8Params.CB`` / ``.SCB``);
    ``bias`` [N]. Output in ``A``'s dtype [..., N]. ``A``'s rows are quantized to int8 (``int8_vectorwise_quant``)
    and multiplied by ``CB`` with the dequantization fused (``int8_scaled_mm``); with ``threshold`` > 0 the
    columns of ``A`` holding a value of magnitude >= ``threshold`` are left out of the int8 product and added
    in float32 against the same columns of the dequantized weight (``int8_linear_outliers``). One launch chain:
    the outlier columns are found and used on the device, nothing is read back. Up to 32 rows take one
    kernel after the quantization on CUDA (the config ``rows_i8_...``). ``config``: a kernel config by name
    (docs/int8.md lists the CUDA ones); empty: the backend's choice.
    """
    call = _arrays.Call("int8_linear", A, "A", stream)
    raw = _lowbit.int8_linear(call.arg(A, "A"), call.arg(CB, "CB"), call.arg(SCB, "SCB"), call.opt(bias, "bias"),
                              float(threshold), call.ctx, str(config))
    call.done()
    return call.result(raw)


def int8_linear_grad_input(grad_output: Array, CB: Array, SCB: Array, *, stream: Any = None) -> Array:
    """The input gradient of ``int8_linear`` (bitsandbytes' ``MatMul8bitLt`` backward on an int8 weight):
    ``grad_output @ W`` with ``W[n, k] = CB[n, k] * SCB[n] / 127``, summed in float32 over ascending ``n`` and
    rounded once to ``grad_output``'s dtype. ``grad_output`` [..., N]; returns [..., K]. CPU and CUDA.
    """
    call = _arrays.Call("int8_linear_grad_input", grad_output, "grad_output", stream)
    raw = _lowbit.int8_linear_grad_input(call.arg(grad_output, "grad_output"), call.arg(CB, "CB"),
                                         call.arg(SCB, "SCB"), call.ctx)
    call.done()
    return call.result(raw)


def int8_linear_outliers(A: Array, outlier_mask: Array, CB: Array, SCB: Array, out: Array, *,
                         stream: Any = None) -> Array:
    """LLM.int8's outlier part, in place: for the columns ``k`` where ``outlier_mask[k]`` is set,
    ``out[m, n] += sum_k A[m, k] * CB[n, k] * SCB[n] / 127``, summed in float32 over ascending ``k`` and rounded
    once to ``out``'s dtype (``A``'s). ``outlier_mask`` uint8 [K] (``int8_vectorwise_quant``'s mask) stays on the
    device. Returns ``out``.
    """
    call = _arrays.Call("int8_linear_outliers", A, "A", stream)
    _lowbit.int8_linear_outliers(call.arg(A, "A"), call.arg(outlier_mask, "outlier_mask"), call.arg(CB, "CB"),
                                 call.arg(SCB, "SCB"), call.out(out, "out"), call.ctx)
    call.done()
    return out


# ------------------------------------------------------------ FP8 (DeepSeek)


def act_quant(x: Array, block_size: int = 128, scale_fmt: Optional[str] = None, *, stream: Any = None) -> Tuple[Array, Array]:
    """DeepSeek-V3 activation quantization to FP8 in 1 x ``block_size`` blocks.

    For every ``block_size`` contiguous values of the last dimension:
    ``s = max(amax, 1e-4) / 448`` and ``y = float8_e4m3fn(x / s)`` (round to
    nearest even, saturating at ±448). ``scale_fmt="ue8m0"`` rounds each ``s``
    up to a power of two.

    Parameters
    ----------
    x : array
        float32/float16/bfloat16 [..., K], K divisible by ``block_size``.
    block_size : int
        A power of two from 16 to 1024.
    scale_fmt : str, optional
        None or ``"ue8m0"``.

    Returns
    -------
    (y float8_e4m3fn of x's shape, s float32 [..., K // block_size]) in x's
    framework and device. NumPy without ml_dtypes: y holds the fp8 bits as uint8.
    """
    if scale_fmt not in (None, "ue8m0"):
        raise ValueError(f"act_quant: scale_fmt must be None or 'ue8m0' (got {scale_fmt!r})")
    call = _arrays.Call("act_quant", x, "x", stream)
    y, s = _lowbit.act_quant(call.arg(x, "x"), _arrays.integer(block_size, call.op, "block_size"), scale_fmt == "ue8m0",
                             call.ctx)
    result = call.result(y), call.result(s)
    call.done()
    return result


def weight_quant(x: Array, block_size: int = 128, *, stream: Any = None) -> Tuple[Array, Array]:
    """DeepSeek-V3 weight quantization to FP8 in ``block_size`` x ``block_size`` tiles.

    Per tile ``s = max(amax, 1e-4) / 448``, ``y = float8_e4m3fn(x / s)``; edge
    tiles of N, K not divisible by the block are smaller, not padded.

    Returns
    -------
    (y float8_e4m3fn [N, K], s float32 [ceil(N / block), ceil(K / block)]) in
    x's framework and device — ``s`` is the checkpoint's ``weight_scale_inv``.
    """
    call = _arrays.Call("weight_quant", x, "x", stream)
    y, s = _lowbit.weight_quant(call.arg(x, "x"), _arrays.integer(block_size, call.op, "block_size"), call.ctx)
    result = call.result(y), call.result(s)
    call.done()
    return result


def weight_dequant(x: Array, s: Array, block_size: int = 128, *, dtype: Any = None, stream: Any = None) -> Array:
    """DeepSeek-V3 weight dequantization: ``y[r, c] = float(x[r, c]) * s[r // block, c // block]``.

    Parameters
    ----------
    x : array
        float8_e4m3fn [N, K] (or its bits as uint8); N, K need not divide by the block.
    s : array
        float32 [ceil(N / block_size), ceil(K / block_size)].
    dtype : optional
        Output dtype: float32/float16/bfloat16. Default: torch.get_default_dtype()
        for PyTorch inputs (as DeepSeek's kernel), float32 otherwise.
    """
    call = _arrays.Call("weight_dequant", x, "x", stream)
    if dtype is None and call.fw is _arrays.TORCH:
        import torch

        dtype = torch.get_default_dtype()
    x_dtype = _arrays.dtype_name(getattr(x, "dtype", None))
    if x_dtype not in ("float8_e4m3fn", "uint8"):  # checked here so that the message names x, the keyword
        raise TypeError(f"weight_dequant: x dtype must be float8_e4m3fn (or uint8 holding its bits; got {x_dtype})")
    view_as = "float8_e4m3fn" if x_dtype == "uint8" else ""
    raw = _lowbit.weight_dequant(call.arg(x, "x", view_as), call.arg(s, "s"),
                                 _arrays.integer(block_size, call.op, "block_size"), _out_dtype(call.op, None, dtype), call.ctx)
    call.done()
    return call.result(raw)


# --------------------------------------------------------- FP8 block GEMM


def _fp8_arg(call: _arrays.Call, x: Array, name: str) -> Tuple[Any, str]:
    """An e4m3 operand: float8_e4m3fn, or uint8 holding its bits (NumPy without ml_dtypes)."""
    x_dtype = _arrays.dtype_name(getattr(x, "dtype", None))
    if x_dtype not in ("float8_e4m3fn", "uint8"):  # checked here so that the message names the keyword
        raise TypeError(f"{call.op}: {name} dtype must be float8_e4m3fn (or uint8 holding its bits; got {x_dtype})")
    return call.arg(x, name, "float8_e4m3fn" if x_dtype == "uint8" else "")


def _gemm_out_dtype(call: _arrays.Call, out: Optional[Array], out_dtype: Any) -> str:
    """out's dtype when given; else out_dtype, torch.get_default_dtype() for PyTorch inputs (as DeepSeek's
    fp8_gemm), float32 otherwise."""
    if out_dtype is None and out is None and call.fw is _arrays.TORCH:
        import torch

        out_dtype = torch.get_default_dtype()
    return _out_dtype(call.op, out, out_dtype)


def fp8_gemm(a: Array, a_s: Array, b: Array, b_s: Array, out_dtype: Any = None, bias: Optional[Array] = None,
             out: Optional[Array] = None, *, stream: Any = None, config: str = "") -> Array:
    """DeepSeek-V3 block-scaled FP8 GEMM: ``out = a @ b.T`` with the blocks' scales.

    ``out[m, n] = sum_kb (a[m, kb] . b[n, kb]) * a_s[m, kb] * b_s[n // 128, kb] (+ bias[n])``: each
    128-wide K block's products summed in fp32, scaled, then added.

    Parameters
    ----------
    a : array
        float8_e4m3fn [..., K] (uint8 bits accepted), K a multiple of 16, contiguous.
    a_s : array
        float32 [..., ceil(K / 128)] (act_quant's scales; ue8m0 ones too).
    b : array
        float8_e4m3fn [N, K] (weight_quant's, or a checkpoint's ``weight``).
    b_s : array
        float32 [ceil(N / 128), ceil(K / 128)] (a checkpoint's ``weight_scale_inv``).
    out_dtype : optional
        float32/float16/bfloat16. Default: torch.get_default_dtype() for PyTorch inputs, float32 otherwise.
    bias : array, optional
        float32 [N].
    out : array, optional
        [..., N] written in place (its dtype is the output's); the call then returns ``out``.
    config : str, optional
        A kernel config by name (docs/fp8_gemm.md lists the CUDA ones); empty: the backend's choice.
        Every layout takes it.
    """
    call = _arrays.Call("fp8_gemm", a, "a", stream)
    dtype = _gemm_out_dtype(call, out, out_dtype)
    raw = _lowbit.fp8_gemm(_fp8_arg(call, a, "a"), call.arg(a_s, "a_s"), _fp8_arg(call, b, "b"), call.arg(b_s, "b_s"),
                           call.opt(bias, "bias"), call.out(out, "out"), dtype, call.ctx, config)
    call.done()
    return out if out is not None else call.result(raw)


def fp8_grouped_gemm_contiguous(a: Array, a_s: Array, b: Array, b_s: Array, m_indices: Array, out_dtype: Any = None,
                                out: Optional[Array] = None, *, stream: Any = None, config: str = "") -> Array:
    """Grouped FP8 GEMM for mixture-of-experts, DeepGEMM's contiguous layout.

    Row ``m`` of ``a`` [M, K] belongs to expert ``m_indices[m]`` (int32 [M]; -1 marks a padding row, whose
    output row is zeros): ``out[m] = fp8_gemm(a[m], a_s[m], b[e], b_s[e])`` with ``b`` [E, N, K] and ``b_s``
    [E, ceil(N / 128), ceil(K / 128)]. Returns [M, N] (or fills ``out``).
    """
    call = _arrays.Call("fp8_grouped_gemm_contiguous", a, "a", stream)
    dtype = _gemm_out_dtype(call, out, out_dtype)
    raw = _lowbit.fp8_grouped_gemm_contiguous(_fp8_arg(call, a, "a"), call.arg(a_s, "a_s"), _fp8_arg(call, b, "b"),
                                              call.arg(b_s, "b_s"), call.arg(m_indices, "m_indices"),
                                              call.out(out, "out"), dtype, call.ctx, config)
    call.done()
    return out if out is not None else call.result(raw)


def fp8_grouped_gemm_masked(a: Array, a_s: Array, b: Array, b_s: Array, masked_m: Array, out_dtype: Any = None,
                            out: Optional[Array] = None, *, stream: Any = None, config: str = "") -> Array:
    """Grouped FP8 GEMM for mixture-of-experts, DeepGEMM's masked layout (decode under CUDA graphs).

    ``a`` [E, max_m, K], ``a_s`` [E, max_m, ceil(K / 128)], ``b`` [E, N, K], ``b_s`` [E, ceil(N / 128),
    ceil(K / 128)], ``masked_m`` int32 [E] on a's device: expert ``e``'s first ``masked_m[e]`` rows are
    multiplied, its other output rows are zeros. Returns [E, max_m, N] (or fills ``out``).
    """
    call = _arrays.Call("fp8_grouped_gemm_masked", a, "a", stream)
    dtype = _gemm_out_dtype(call, out, out_dtype)
    raw = _lowbit.fp8_grouped_gemm_masked(_fp8_arg(call, a, "a"), call.arg(a_s, "a_s"), _fp8_arg(call, b, "b"),
                                          call.arg(b_s, "b_s"), call.arg(masked_m, "masked_m"), call.out(out, "out"),
                                          dtype, call.ctx, config)
    call.done()
    return out if out is not None else call.result(raw)


# ------------------------------------------------------------ optimizers


def _gnorm_scale(call: "_arrays.Call", gnorm_scale: Any) -> Tuple[float, Any]:
    """(host gnorm_scale, device clip_scale or None): an array of one float32 stays where it is, read by the
    kernel (no host round trip); a number (or a 0-d NumPy array) goes as it is."""
    if hasattr(gnorm_scale, "__dlpack__") and not (isinstance(gnorm_scale, np.ndarray) and gnorm_scale.ndim == 0):
        return 1.0, call.arg(gnorm_scale, "gnorm_scale")
    return _arrays.real(gnorm_scale, call.op, "gnorm_scale"), None


def _gnorm_scales(call: "_arrays.Call", gnorm_scale: Any) -> Tuple[float, Any]:
    """_gnorm_scale of a multi-tensor update: a number for the list, or a list of per-parameter arrays (None: 1)."""
    if isinstance(gnorm_scale, (list, tuple)):
        return 1.0, call.many(gnorm_scale, "gnorm_scale", out=False)
    return _gnorm_scale(call, gnorm_scale)


def optimizer_update_32bit(optimizer_name: str, g: Array, p: Array, state1: Array, beta1: float, eps: float, step: int,
                           lr: float, state2: Optional[Array] = None, beta2: float = 0.0, weight_decay: float = 0.0,
                           gnorm_scale: float = 1.0, unorm_vec: Optional[Array] = None, max_unorm: float = 0.0,
                           skip_zeros: bool = False, *, beta3: float = 0.0, alpha: float = 0.0,
                           stream: Any = None) -> None:
    """One optimizer step with 32-bit states, in place (bitsandbytes' ``optimizer_update_32bit``).

    ``optimizer_name``: ``adam``, ``momentum``, ``rmsprop``, ``lion``, ``adagrad``, ``lamb``, ``lars`` or
    ``ademamix`` (docs/optim.md gives each rule). ``g`` and ``p``: float32/float16/bfloat16 of one dtype and
    size; ``p`` is updated. ``state1`` float32 (ademamix: twice ``p``'s size, its two first moments),
    ``state2`` float32 for adam, lamb and ademamix; both updated. ``unorm_vec`` float32 [1] receives the
    update's squared norm when ``max_unorm > 0`` (lamb / lars: the update is scaled to at most
    ``max_unorm`` times ``p``'s norm, which is computed here). ``beta3`` and ``alpha`` are ademamix's.
    ``gnorm_scale``: a number, or a float32 array of one element on ``g``'s device that the kernel reads (a
    scale computed on the device, as ``percentile_clipping(..., scale=)`` writes it: no host round trip).
    """
    call = _arrays.Call("optimizer_update_32bit", g, "g", stream)
    host_scale, clip_scale = _gnorm_scale(call, gnorm_scale)
    _lowbit.optimizer_update_32bit(optimizer_name, call.arg(g, "g"), call.out(p, "p"), call.out(state1, "state1"),
                                   float(beta1), float(eps), int(step), float(lr), call.out(state2, "state2"),
                                   float(beta2), float(beta3), float(alpha), float(weight_decay), host_scale,
                                   call.out(unorm_vec, "unorm_vec"), float(max_unorm), bool(skip_zeros), call.ctx,
                                   clip_scale=clip_scale)
    call.done()


def optimizer_update_8bit(optimizer_name: str, g: Array, p: Array, state1: Array, state2: Optional[Array],
                          beta1: float, beta2: float, eps: float, step: int, lr: float, qmap1: Array,
                          qmap2: Optional[Array], max1: Array, max2: Optional[Array], new_max1: Array,
                          new_max2: Optional[Array], weight_decay: float = 0.0, gnorm_scale: float = 1.0,
                          unorm_vec: Optional[Array] = None, max_unorm: float = 0.0, *, stream: Any = None) -> None:
    """One optimizer step with 8-bit tensor-wise states, in place (bitsandbytes' ``optimizer_update_8bit``).

    ``optimizer_name``: ``adam``, ``momentum``, ``rmsprop``, ``lion``, ``lamb`` or ``lars`` (docs/optim.md,
    "8-bit tensor-wise states"). ``g`` and ``p``: float32/float16/bfloat16 of one dtype and size; ``p`` is
    updated. ``state1`` uint8 codes of ``qmap1``, ``state2`` uint8 codes of ``qmap2`` for adam and lamb (None
    for the others, with ``qmap2``, ``max2`` and ``new_max2``); ``max1``, ``max2`` float32 [1], the scales
    the states are stored with; ``new_max1``, ``new_max2`` float32 [1] receive the new states' max |s|,
    which the caller swaps in as the next step's ``max1``/``max2``. ``unorm_vec`` float32 [1] receives the
    update's squared norm (adam, lamb, momentum, lars); with ``max_unorm > 0`` the update is scaled to at
    most ``max_unorm`` times ``p``'s norm, computed on the device (bitsandbytes computes it on the host).
    ``gnorm_scale``: a number or a one-element float32 array on the device, as ``optimizer_update_32bit``.
    """
    call = _arrays.Call("optimizer_update_8bit", g, "g", stream)
    op = call.op
    host_scale, clip_scale = _gnorm_scale(call, gnorm_scale)
    _lowbit.optimizer_update_8bit(
        _arrays.text(optimizer_name, op, "optimizer_name"), call.arg(g, "g"), call.out(p, "p"),
        call.out(state1, "state1"), call.out(state2, "state2"), _arrays.real(beta1, op, "beta1"),
        _arrays.real(beta2, op, "beta2"), _arrays.real(eps, op, "eps"), _arrays.integer(step, op, "step"),
        _arrays.real(lr, op, "lr"), call.arg(qmap1, "qmap1"), call.opt(qmap2, "qmap2"), call.arg(max1, "max1"),
        call.opt(max2, "max2"), call.out(new_max1, "new_max1"), call.out(new_max2, "new_max2"),
        _arrays.real(weight_decay, op, "weight_decay"), host_scale, call.out(unorm_vec, "unorm_vec"),
        _arrays.real(max_unorm, op, "max_unorm"), call.ctx, clip_scale=clip_scale)
    call.done()


def optimizer_update_8bit_blockwise(optimizer_name: str, g: Array, p: Array, state1: Array, state2: Optional[Array],
                                    beta1: float, beta2: float, beta3: float, alpha: float, eps: float, step: int,
                                    lr: float, qmap1: Array, qmap2: Optional[Array], absmax1: Array,
                                    absmax2: Optional[Array], weight_decay: float = 0.0, gnorm_scale: float = 1.0,
                                    skip_zeros: bool = False, *, stream: Any = None) -> None:
    """One optimizer step with 8-bit blockwise states, in place (bitsandbytes' ``optimizer_update_8bit_blockwise``).

    ``optimizer_name``: ``adam``, ``momentum``, ``rmsprop``, ``lion``, ``adagrad`` or ``ademamix``
    (docs/optim.md, "8-bit blockwise states"). ``g`` and ``p``: float32/float16/bfloat16 of one dtype and size;
    ``p`` is updated. ``state1`` uint8 codes of ``qmap1`` (ademamix: twice ``p``'s size), ``state2`` uint8 codes
    of ``qmap2`` for adam and ademamix (None for the others, with ``qmap2`` and ``absmax2``); ``qmap1``,
    ``qmap2`` float32 [256], sorted; ``absmax1``, ``absmax2`` float32, one per block of 256 (``absmax1`` of
    ademamix: twice as many). States and absmax are updated. ``beta3`` and ``alpha`` are ademamix's.
    ``gnorm_scale``: a number or a one-element float32 array on the device, as ``optimizer_update_32bit``.
    """
    call = _arrays.Call("optimizer_update_8bit_blockwise", g, "g", stream)
    op = call.op
    host_scale, clip_scale = _gnorm_scale(call, gnorm_scale)
    _lowbit.optimizer_update_8bit_blockwise(
        _arrays.text(optimizer_name, op, "optimizer_name"), call.arg(g, "g"), call.out(p, "p"),
        call.out(state1, "state1"), call.out(state2, "state2"), _arrays.real(beta1, op, "beta1"),
        _arrays.real(beta2, op, "beta2"), _arrays.real(beta3, op, "beta3"), _arrays.real(alpha, op, "alpha"),
        _arrays.real(eps, op, "eps"), _arrays.integer(step, op, "step"), _arrays.real(lr, op, "lr"),
        call.arg(qmap1, "qmap1"), call.opt(qmap2, "qmap2"), call.out(absmax1, "absmax1"),
        call.out(absmax2, "absmax2"), _arrays.real(weight_decay, op, "weight_decay"), host_scale,
        _arrays.flag(skip_zeros, op, "skip_zeros"), call.ctx, clip_scale=clip_scale)
    call.done()


def _outs(call: "_arrays.Call", xs: Optional[Sequence[Any]], name: str) -> Optional[List[Any]]:
    """A list argument of buffers (None entries kept), or None."""
    return None if xs is None else call.many(xs, name, out=True)


def optimizer_update_32bit_multi(optimizer_name: str, g: Sequence[Array], p: Sequence[Array],
                                 state1: Sequence[Array], beta1: float, eps: float, step: int, lr: float,
                                 state2: Optional[Sequence[Optional[Array]]] = None, beta2: float = 0.0,
                                 weight_decay: float = 0.0, gnorm_scale: float = 1.0,
                                 unorm_vec: Optional[Sequence[Optional[Array]]] = None, max_unorm: float = 0.0,
                                 skip_zeros: bool = False, *, beta3: float = 0.0, alpha: float = 0.0,
                                 stream: Any = None) -> None:
    """``optimizer_update_32bit`` over lists of parameters in one call, in place (docs/optim.md, "Multi-tensor
    updates").

    ``g``, ``p``, ``state1`` (and ``state2``, ``unorm_vec`` where the rule takes them) are lists of one length:
    entry ``i`` is what ``optimizer_update_32bit`` takes for parameter ``i``, under one rule, one ``step`` and
    one set of constants. ``g`` and ``p`` have one dtype over the list; every array is on one device. Each
    parameter ends with the values the single call gives it; on CUDA the list runs as one kernel launch (two
    with ``max_unorm > 0``, each parameter then scaled by its own norms). ``gnorm_scale``: a number for the list,
    or a list of one-element float32 arrays on the device (None entries: 1), one a parameter.
    """
    if len(g) == 0:
        return
    call = _arrays.Call("optimizer_update_32bit_multi", g[0], "g[0]", stream)
    op = call.op
    host_scale, clip_scale = _gnorm_scales(call, gnorm_scale)
    _lowbit.optimizer_update_32bit_multi(
        _arrays.text(optimizer_name, op, "optimizer_name"), call.many(g, "g", out=False),
        _outs(call, p, "p"), _outs(call, state1, "state1"), _arrays.real(beta1, op, "beta1"),
        _arrays.real(eps, op, "eps"), _arrays.integer(step, op, "step"), _arrays.real(lr, op, "lr"),
        _outs(call, state2, "state2"), _arrays.real(beta2, op, "beta2"), _arrays.real(beta3, op, "beta3"),
        _arrays.real(alpha, op, "alpha"), _arrays.real(weight_decay, op, "weight_decay"),
        host_scale, _outs(call, unorm_vec, "unorm_vec"), _arrays.real(max_unorm, op, "max_unorm"),
        _arrays.flag(skip_zeros, op, "skip_zeros"), call.ctx, clip_scale=clip_scale)
    call.done()


def optimizer_update_8bit_blockwise_multi(optimizer_name: str, g: Sequence[Array], p: Sequence[Array],
                                          state1: Sequence[Array], state2: Optional[Sequence[Optional[Array]]],
                                          beta1: float, beta2: float, beta3: float, alpha: float, eps: float,
                                          step: int, lr: float, qmap1: Array, qmap2: Optional[Array],
                                          absmax1: Sequence[Array], absmax2: Optional[Sequence[Optional[Array]]],
                                          weight_decay: float = 0.0, gnorm_scale: float = 1.0,
                                          skip_zeros: bool = False, *, stream: Any = None) -> None:
    """``optimizer_update_8bit_blockwise`` over lists of parameters in one call, in place (docs/optim.md,
    "Multi-tensor updates").

    ``g``, ``p``, ``state1``, ``absmax1`` (and ``state2``, ``absmax2`` for adam and ademamix) are lists of one
    length, entry ``i`` what the single call takes for parameter ``i``; ``qmap1`` and ``qmap2`` are every
    entry's maps. One rule, step and set of constants; ``g`` and ``p`` of one dtype; one device. Each parameter
    ends with the values the single call gives it; on CUDA the list runs as one kernel launch. ``gnorm_scale``:
    a number for the list, or a list of one-element float32 arrays on the device, as
    ``optimizer_update_32bit_multi``.
    """
    if len(g) == 0:
        return
    call = _arrays.Call("optimizer_update_8bit_blockwise_multi", g[0], "g[0]", stream)
    op = call.op
    host_scale, clip_scale = _gnorm_scales(call, gnorm_scale)
    _lowbit.optimizer_update_8bit_blockwise_multi(
        _arrays.text(optimizer_name, op, "optimizer_name"), call.many(g, "g", out=False),
        _outs(call, p, "p"), _outs(call, state1, "state1"), _outs(call, state2, "state2"),
        _arrays.real(beta1, op, "beta1"), _arrays.real(beta2, op, "beta2"), _arrays.real(beta3, op, "beta3"),
        _arrays.real(alpha, op, "alpha"), _arrays.real(eps, op, "eps"), _arrays.integer(step, op, "step"),
        _arrays.real(lr, op, "lr"), call.arg(qmap1, "qmap1"), call.opt(qmap2, "qmap2"), _outs(call, absmax1, "absmax1"),
        _outs(call, absmax2, "absmax2"), _arrays.real(weight_decay, op, "weight_decay"), host_scale,
        _arrays.flag(skip_zeros, op, "skip_zeros"), call.ctx, clip_scale=clip_scale)
    call.done()


def percentile_clipping(grad: Array, gnorm_vec: Array, step: int, percentile: int = 5, *, scale: Optional[Array] = None,
                        stream: Any = None) -> Any:
    """Percentile clipping (bitsandbytes' ``percentile_clipping``): tracks the last 100 gradient norms.

    ``grad``: float32/float16/bfloat16, any shape. ``gnorm_vec``: float32 [100], the squared norms so far
    (zeros before the first step), updated in place: ``grad``'s squared L2 norm goes into every slot at
    ``step`` 1, into slot ``step % 100`` after. Then, from ``gnorm_vec`` read back to the host:
    ``current_gnorm = sqrt(gnorm_vec[step % 100])``, ``clip_value = sqrt(sort(gnorm_vec)[percentile])`` and
    ``gnorm_scale = clip_value / current_gnorm`` when ``current_gnorm > clip_value``, else 1.

    Returns ``(current_gnorm, clip_value, gnorm_scale)`` as float32 NumPy scalars (bitsandbytes returns the
    first two as 0-d tensors on the gradient's device); ``gnorm_scale`` goes to an optimizer update's
    ``gnorm_scale``. Reading ``gnorm_vec`` waits for the stream.

    With ``scale`` (float32, one element, on ``grad``'s device) nothing is read back: the step's
    ``gnorm_scale`` is computed on the device into ``scale`` (the same float32 arithmetic) and ``scale`` is
    returned, for an update's ``gnorm_scale``: a step that never waits for the device.
    """
    if scale is not None:
        _percentile_record(grad, gnorm_vec, step, percentile, stream, scale)
        return scale
    call = _percentile_record(grad, gnorm_vec, step, percentile, stream)
    raw = _lowbit.to_device(call.arg(gnorm_vec, "gnorm_vec"), "cpu", 0, call.stream)  # an input's form, any framework
    return _percentile_scale(np.asarray(_arrays.NUMPY.wrap(raw, raw[1]), dtype=np.float32), step, percentile)


def _percentile_record(grad: Array, gnorm_vec: Array, step: int, percentile: int, stream: Any,
                       scale: Optional[Array] = None) -> "_arrays.Call":
    """percentile_clipping's device step (the norm into gnorm_vec; the step's scale into ``scale`` when given), its
    arguments checked; the call it ran."""
    call = _arrays.Call("percentile_clipping", grad, "grad", stream)
    op = call.op
    step = _arrays.integer(step, op, "step")
    percentile = _arrays.integer(percentile, op, "percentile")
    if not 0 <= percentile < 100:
        raise ValueError(f"{op}: percentile must be from 0 to 99, an index into the 100 sorted norms (got {percentile})")
    _lowbit.percentile_clipping(call.arg(grad, "grad"), call.out(gnorm_vec, "gnorm_vec"), step, call.ctx,
                                scale=call.out(scale, "scale"), percentile=percentile)
    return call


def _percentile_scale(history: np.ndarray, step: int, percentile: int) -> Tuple[np.float32, np.float32, np.float32]:
    """(current_gnorm, clip_value, gnorm_scale) from the 100 squared norms read back."""
    current_gnorm = np.sqrt(history[step % 100])
    clip_value = np.sqrt(np.sort(history)[percentile])
    gnorm_scale = clip_value / current_gnorm if current_gnorm > clip_value else np.float32(1.0)
    return current_gnorm, clip_value, gnorm_scale


# Attention (docs/attention.md).
from ._attention import flash_attention, flash_attention_kvcache, flash_attention_varlen  # noqa: E402

# bitsandbytes' older int8 names (igemm, igemmlt, transform, mm_dequant, ...), on the ops above.
from ._int8_seed import (  # noqa: E402
    batched_igemm, check_matmul, dequant_min_max, extract_outliers, igemm, igemmlt, mm_dequant, transform,
    vectorwise_dequant, vectorwise_mm_dequant, vectorwise_quant)
# Their COO / CSR / CSC tensors and sparse products (array code on the arrays' framework).
from ._sparse_seed import (  # noqa: E402
    COOSparseTensor, CSCSparseTensor, CSRSparseTensor, coo2csc, coo2csr, coo_zeros, double_quant, spmm_coo,
    spmm_coo_very_sparse)
