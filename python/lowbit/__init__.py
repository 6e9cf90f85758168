"""lowbit: low-precision quantization kernels (C++/CUDA) for any DLPack framework.

The ops mirror bitsandbytes' functional API (names, keywords, defaults) plus
DeepSeek-V3's FP8 block quantization; ``lowbit.functional`` holds them and
this package re-exports them::

    import lowbit.functional as F            # instead of bitsandbytes.functional
    packed, state = F.quantize_4bit(w, quant_type="nf4", compress_statistics=True)
    w2 = F.dequantize_4bit(packed, state)

The mixed-precision matmul follows BitBLAS (``MatmulConfig``, ``Matmul``,
``transform_weight``, ``forward``), with importers of GPTQ, AWQ and
bitsandbytes 4-bit weights; ``matmul_4bit`` / ``gemv_4bit`` follow
bitsandbytes::

    mm = lowbit.Matmul(lowbit.MatmulConfig(N=4096, K=4096, W_dtype="int4",
                                           with_scaling=True, group_size=128), device="cuda")
    W = mm.transform_weight(values, scale=scale)
    out = mm(A, W)

Arrays of NumPy, PyTorch, CuPy or JAX, on the CPU or a CUDA GPU, are taken
without a copy; results come back in the same framework on the same device.
See docs/python.md.
"""

from . import _lowbit, functional, sparse
from ._attention import FlashAtten, FlashAttenConfig
from ._matmul import (
    Matmul,
    MatmulConfig,
    PackedWeight,
    QuantizedWeight,
    dequantize_weight,
    import_awq,
    import_bnb_4bit,
    import_gptq,
    unpack_weight,
)
from ._matmul import __all__ as _matmul_all
from .functional import (
    QuantState,
    act_quant,
    create_dynamic_map,
    create_fp8_map,
    create_linear_map,
    create_normal_map,
    create_quantile_map,
    dequantize,
    dequantize_4bit,
    dequantize_blockwise,
    dequantize_fp4,
    dequantize_nf4,
    dequantize_no_absmax,
    estimate_quantiles,
    flash_attention,
    flash_attention_kvcache,
    flash_attention_varlen,
    fp8_gemm,
    fp8_grouped_gemm_contiguous,
    fp8_grouped_gemm_masked,
    gemv_4bit,
    get_4bit_type,
    check_matmul,
    batched_igemm,
    dequant_min_max,
    vectorwise_dequant,
    vectorwise_mm_dequant,
    vectorwise_quant,
    COOSparseTensor,
    CSCSparseTensor,
    CSRSparseTensor,
    coo2csc,
    coo2csr,
    coo_zeros,
    double_quant,
    spmm_coo,
    spmm_coo_very_sparse,
    extract_outliers,
    get_colrow_absmax,
    igemm,
    igemmlt,
    mm_dequant,
    transform,
    int8_colwise_quant,
    int8_double_quant,
    int8_linear,
    int8_linear_grad_input,
    int8_linear_matmul,
    int8_linear_outliers,
    int8_mm_dequant,
    int8_scaled_mm,
    int8_vectorwise_dequant,
    int8_vectorwise_quant,
    matmul_4bit,
    quantize,
    quantize_4bit,
    quantize_blockwise,
    quantize_fp4,
    quantize_nf4,
    quantize_no_absmax,
    weight_dequant,
    weight_quant,
)

__version__: str = _lowbit.__version__


def cuda_available() -> bool:
    """True when lowbit was built with its CUDA backend and sees a CUDA device."""
    return bool(_lowbit.built_with_cuda) and _lowbit.cuda_device_count() > 0


def cuda_device_count() -> int:
    """CUDA devices lowbit sees (0 when built without CUDA)."""
    return int(_lowbit.cuda_device_count())


def synchronize(stream=None) -> None:
    """Waits for the work lowbit enqueued on `stream` (default: the legacy default stream).

    ``stream`` is anything the ops' ``stream=`` takes (an int handle, a
    torch.cuda.Stream, a CuPy stream, an object with ``__cuda_stream__``).
    """
    from ._arrays import stream_handle

    handle = stream_handle(stream)
    _lowbit.synchronize(0 if handle is None else handle)


# The functional names imported above (not the optimizer and paged ones, which stay in lowbit.functional).
__all__ = [n for n in functional.__all__ if n in globals()] + _matmul_all + ["FlashAtten", "FlashAttenConfig", "cuda_available", "cuda_device_count", "synchronize", "functional", "sparse", "__version__"]
