"""Type stubs of the lowbit package (the functions are typed in lowbit/functional.py and
lowbit/_matmul.py; MatmulConfig in lowbit/_lowbit.pyi)."""

from typing import Any, List

from . import functional as functional
from . import sparse as sparse
from ._attention import FlashAtten as FlashAtten
from ._attention import FlashAttenConfig as FlashAttenConfig
from ._matmul import Matmul as Matmul
from ._matmul import MatmulConfig as MatmulConfig
from ._matmul import PackedWeight as PackedWeight
from ._matmul import QuantizedWeight as QuantizedWeight
from ._matmul import dequantize_weight as dequantize_weight
from ._matmul import import_awq as import_awq
from ._matmul import import_bnb_4bit as import_bnb_4bit
from ._matmul import import_gptq as import_gptq
from ._matmul import unpack_weight as unpack_weight
from .functional import QuantState as QuantState
from .functional import act_quant as act_quant
from .functional import flash_attention as flash_attention
from .functional import flash_attention_kvcache as flash_attention_kvcache
from .functional import flash_attention_varlen as flash_attention_varlen
from .functional import fp8_gemm as fp8_gemm
from .functional import fp8_grouped_gemm_contiguous as fp8_grouped_gemm_contiguous
from .functional import fp8_grouped_gemm_masked as fp8_grouped_gemm_masked
from .functional import create_dynamic_map as create_dynamic_map
from .functional import create_fp8_map as create_fp8_map
from .functional import create_linear_map as create_linear_map
from .functional import create_normal_map as create_normal_map
from .functional import create_quantile_map as create_quantile_map
from .functional import dequantize as dequantize
from .functional import dequantize_4bit as dequantize_4bit
from .functional import dequantize_blockwise as dequantize_blockwise
from .functional import dequantize_fp4 as dequantize_fp4
from .functional import dequantize_nf4 as dequantize_nf4
from .functional import dequantize_no_absmax as dequantize_no_absmax
from .functional import estimate_quantiles as estimate_quantiles
from .functional import gemv_4bit as gemv_4bit
from .functional import get_4bit_type as get_4bit_type
from .functional import check_matmul as check_matmul
from .functional import batched_igemm as batched_igemm
from .functional import dequant_min_max as dequant_min_max
from .functional import vectorwise_dequant as vectorwise_dequant
from .functional import vectorwise_mm_dequant as vectorwise_mm_dequant
from .functional import vectorwise_quant as vectorwise_quant
from .functional import COOSparseTensor as COOSparseTensor
from .functional import CSCSparseTensor as CSCSparseTensor
from .functional import CSRSparseTensor as CSRSparseTensor
from .functional import coo2csc as coo2csc
from .functional import coo2csr as coo2csr
from .functional import coo_zeros as coo_zeros
from .functional import double_quant as double_quant
from .functional import spmm_coo as spmm_coo
from .functional import spmm_coo_very_sparse as spmm_coo_very_sparse
from .functional import extract_outliers as extract_outliers
from .functional import get_colrow_absmax as get_colrow_absmax
from .functional import igemm as igemm
from .functional import igemmlt as igemmlt
from .functional import mm_dequant as mm_dequant
from .functional import transform as transform
from .functional import int8_colwise_quant as int8_colwise_quant
from .functional import int8_double_quant as int8_double_quant
from .functional import int8_linear as int8_linear
from .functional import int8_linear_grad_input as int8_linear_grad_input
from .functional import int8_linear_matmul as int8_linear_matmul
from .functional import int8_linear_outliers as int8_linear_outliers
from .functional import int8_mm_dequant as int8_mm_dequant
from .functional import int8_scaled_mm as int8_scaled_mm
from .functional import int8_vectorwise_dequant as int8_vectorwise_dequant
from .functional import int8_vectorwise_quant as int8_vectorwise_quant
from .functional import matmul_4bit as matmul_4bit
from .functional import quantize as quantize
from .functional import quantize_4bit as quantize_4bit
from .functional import quantize_blockwise as quantize_blockwise
from .functional import quantize_fp4 as quantize_fp4
from .functional import quantize_nf4 as quantize_nf4
from .functional import quantize_no_absmax as quantize_no_absmax
from .functional import weight_dequant as weight_dequant
from .functional import weight_quant as weight_quant

__version__: str
__all__: List[str]

def cuda_available() -> bool:
    """True when lowbit was built with its CUDA backend and sees a CUDA device."""

def cuda_device_count() -> int:
    """CUDA devices lowbit sees (0 when built without CUDA)."""

def synchronize(stream: Any = None) -> None:
    """Waits for the work lowbit enqueued on `stream` (default: the legacy default stream)."""
