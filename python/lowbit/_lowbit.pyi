"""Type stubs of lowbit._lowbit, the nanobind extension (internal: use lowbit.functional).

Array arguments are ``(array, as)`` pairs: an object nanobind imports through
DLPack or the buffer protocol, and ``as`` = "" (the DLPack dtype), a lowbit
dtype name of the same width, or "bytes". Results are ``Exported`` tuples:
(NumPy array for host memory or DLPack capsule for CUDA memory, lowbit dtype
name, DLPack device type, device index).
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

InArray = Tuple[Any, str]
OutArray = Tuple[Any, str]
Exported = Tuple[Any, str, int, int]
NestedIn = Tuple[InArray, InArray, InArray, int]

__version__: str
built_with_cuda: bool

def to_device(array: InArray, device_type: str, device_index: int, stream: int = 0) -> Exported: ...
def synchronize(stream: int = 0) -> None: ...
def cuda_device_count() -> int: ...
def _trace(enable: bool) -> List[Tuple[str, str, int, str]]: ...
def quantize_blockwise(
    A: InArray,
    code: Optional[InArray],
    absmax: Optional[OutArray],
    out: Optional[OutArray],
    blocksize: int,
    nested: bool,
    stream: int = 0,
) -> Dict[str, Any]: ...
def dequantize_blockwise(
    A: InArray,
    absmax: InArray,
    code: InArray,
    blocksize: int,
    nested: Optional[NestedIn],
    out: Optional[OutArray],
    dtype: str,
    stream: int = 0,
) -> Optional[Exported]: ...
def quantize_4bit(
    A: InArray,
    absmax: Optional[OutArray],
    out: Optional[OutArray],
    blocksize: int,
    compress_statistics: bool,
    quant_type: str,
    stream: int = 0,
) -> Dict[str, Any]: ...
def dequantize_4bit(
    A: InArray,
    absmax: InArray,
    quant_type: str,
    blocksize: int,
    nested: Optional[NestedIn],
    shape: Sequence[int],
    out: Optional[OutArray],
    dtype: str,
    stream: int = 0,
) -> Optional[Exported]: ...
def estimate_quantiles(
    A: InArray, out: Optional[OutArray], offset: float, num_quantiles: int, stream: int = 0
) -> Optional[Exported]: ...
def quantile_map(A: InArray, total_bits: int, stream: int = 0) -> Exported: ...
def act_quant(x: InArray, block_size: int, ue8m0: bool, stream: int = 0) -> Tuple[Exported, Exported]: ...
def weight_quant(x: InArray, block_size: int, stream: int = 0) -> Tuple[Exported, Exported]: ...
def weight_dequant(x: InArray, s: InArray, block_size: int, dtype: str, stream: int = 0) -> Exported: ...
def int8_vectorwise_quant(
    A: InArray, threshold: float, stream: int = 0
) -> Tuple[Exported, Exported, Optional[Exported]]: ...
def int8_vectorwise_dequant(A: InArray, stats: InArray, dtype: str, stream: int = 0) -> Exported: ...
def create_dynamic_map(signed: bool, max_exponent_bits: int, total_bits: int) -> List[float]: ...
def create_linear_map(signed: bool, total_bits: int, add_zero: bool) -> List[float]: ...
def create_normal_map(offset: float, use_extra_value: bool) -> List[float]: ...
def create_fp8_map(signed: bool, exponent_bits: int, precision_bits: int, total_bits: int) -> List[float]: ...
def get_4bit_type(typename: str, blocksize: int) -> List[float]: ...
def quant_state_as_dict(
    absmax: InArray,
    code: InArray,
    blocksize: int,
    shape: Sequence[int],
    dtype: str,
    quant_type: str,
    nested: Optional[Tuple[InArray, InArray, int, str, float]],
    packed: bool,
) -> Dict[str, Any]: ...
def quant_state_from_dict(
    tensors: Sequence[Tuple[str, InArray]], values: Dict[str, Any], device_type: str, device_index: int
) -> Dict[str, Any]: ...
