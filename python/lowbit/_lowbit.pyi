"""Type stubs of lowbit._lowbit, the nanobind extension (internal: use lowbit.functional).

Array arguments are ``(array, as)`` pairs: an object nanobind imports through
DLPack or the buffer protocol, and ``as`` = "" (the DLPack dtype), a lowbit
dtype name of the same width, or "bytes". Results are ``Exported`` tuples:
(the framework's own array where the call's ``alloc`` made it, else a NumPy
array for host memory or a DLPack capsule for CUDA memory, lowbit dtype name,
DLPack device type, device index). An op's ``stream`` is a ``CallStream``: the
cudaStream_t as an int, or (stream, alloc) with alloc(shape, dtype name,
device index, stream) -> (array, data pointer) allocating the call's CUDA
results and scratch with the caller's framework, or alloc = (factory,
{dtype name: dtype}, device, device index) that the binding calls as
factory(*sizes, dtype=, device=) (torch.empty on the current stream). A code
map argument of None is the shared dynamic map (``shared_code``).
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

InArray = Tuple[Any, str]
OutArray = Tuple[Any, str]
Exported = Tuple[Any, str, int, int]
NestedIn = Tuple[Optional[InArray], InArray, InArray, int]
CallStream = Union[int, Tuple[int, Any]]

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
    stream: CallStream = 0,
) -> Dict[str, Any]: ...
def dequantize_blockwise(
    A: InArray,
    absmax: InArray,
    code: Optional[InArray],
    blocksize: int,
    nested: Optional[NestedIn],
    out: Optional[OutArray],
    dtype: str,
    stream: CallStream = 0,
) -> Optional[Exported]: ...
def quantize_no_absmax(
    A: InArray, code: Optional[InArray], out: Optional[OutArray], stream: CallStream = 0
) -> Optional[Exported]: ...
def dequantize_no_absmax(
    A: InArray, code: Optional[InArray], out: Optional[OutArray], dtype: str, stream: CallStream = 0
) -> Optional[Exported]: ...
def quantize_tensorwise(
    A: InArray, code: Optional[InArray], out: Optional[OutArray], stream: CallStream = 0
) -> Tuple[Optional[Exported], Exported, Optional[Exported]]: ...
def dequantize_tensorwise(
    A: InArray,
    absmax: InArray,
    code: Optional[InArray],
    out: Optional[OutArray],
    dtype: str,
    stream: CallStream = 0,
) -> Optional[Exported]: ...
def quantize_4bit(
    A: InArray,
    absmax: Optional[OutArray],
    out: Optional[OutArray],
    blocksize: int,
    compress_statistics: bool,
    quant_type: str,
    stream: CallStream = 0,
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
    stream: CallStream = 0,
) -> Optional[Exported]: ...
def estimate_quantiles(
    A: InArray, out: Optional[OutArray], offset: float, num_quantiles: int, stream: CallStream = 0
) -> Optional[Exported]: ...
def quantile_map(A: InArray, total_bits: int, stream: CallStream = 0) -> Exported: ...
def histogram_scatter_add_2d(histogram: OutArray, index1: InArray, index2: InArray, source: InArray,
                             stream: CallStream = 0) -> None: ...
def fp8_gemm(a: InArray, a_s: InArray, b: InArray, b_s: InArray, bias: Optional[InArray], out: Optional[OutArray],
             out_dtype: str, stream: CallStream = 0) -> Optional[Exported]: ...
def fp8_grouped_gemm_contiguous(a: InArray, a_s: InArray, b: InArray, b_s: InArray, m_indices: InArray,
                                out: Optional[OutArray], out_dtype: str, stream: CallStream = 0) -> Optional[Exported]: ...
def fp8_grouped_gemm_masked(a: InArray, a_s: InArray, b: InArray, b_s: InArray, masked_m: InArray,
                            out: Optional[OutArray], out_dtype: str, stream: CallStream = 0) -> Optional[Exported]: ...
def int8_linear_matmul(a: InArray, b: InArray, out: Optional[OutArray], stream: CallStream = 0) -> Optional[Exported]: ...
def int8_mm_dequant(a: InArray, row_stats: InArray, col_stats: InArray, bias: Optional[InArray], out: Optional[OutArray],
                    out_dtype: str, stream: CallStream = 0) -> Optional[Exported]: ...
def int8_scaled_mm(a: InArray, b: InArray, row_stats: InArray, col_stats: InArray, bias: Optional[InArray],
                   out: Optional[OutArray], out_dtype: str, stream: CallStream = 0) -> Optional[Exported]: ...
def int8_linear(a: InArray, b: InArray, b_stats: InArray, bias: Optional[InArray], threshold: float,
                stream: CallStream = 0, config: str = "") -> Exported: ...
def int8_linear_grad_input(grad_out: InArray, b: InArray, b_stats: InArray, stream: CallStream = 0) -> Exported: ...
def int8_linear_outliers(a: InArray, outlier_mask: InArray, b: InArray, b_stats: InArray, out: OutArray,
                         stream: CallStream = 0) -> None: ...
def bsr_dense_addmm(input: Optional[InArray], crow_indices: InArray, col_indices: InArray, values: InArray, M: int,
                    K: int, dense: InArray, beta: float, alpha: float, out: Optional[OutArray],
                    stream: CallStream = 0) -> Optional[Exported]: ...
def sampled_addmm(crow_indices: InArray, col_indices: InArray, values: InArray, M: int, N: int, mat1: InArray,
                  mat2: InArray, beta: float, alpha: float, out_values: Optional[OutArray],
                  stream: CallStream = 0) -> Optional[Exported]: ...
def bsr_softmax(crow_indices: InArray, col_indices: InArray, values: InArray, M: int, K: int,
                stream: CallStream = 0) -> Exported: ...
def scatter_mm(format: str, blocks: InArray, others: InArray, c_indices: InArray, pq: Optional[InArray],
               r_offsets: Optional[InArray], p_offsets: Optional[InArray], q_offsets: Optional[InArray], split_n: int,
               accumulators: OutArray, stream: CallStream = 0) -> None: ...
def flash_attention(q: InArray, k: InArray, v: InArray, causal: bool, scale: float, k_layout: str, return_lse: bool,
                    out: Optional[OutArray], lse: Optional[OutArray],
                    stream: CallStream = 0) -> Optional[Tuple[Exported, Optional[Exported]]]: ...
def flash_attention_kvcache(q: InArray, k_cache: InArray, v_cache: InArray, cache_seqlens: InArray,
                            block_table: Optional[InArray], causal: bool, scale: float, return_lse: bool,
                            out: Optional[OutArray], lse: Optional[OutArray],
                            stream: CallStream = 0) -> Optional[Tuple[Exported, Optional[Exported]]]: ...
def flash_attention_varlen(q: InArray, k: InArray, v: InArray, cu_seqlens_q: InArray, cu_seqlens_k: InArray,
                           causal: bool, scale: float, return_lse: bool, out: Optional[OutArray],
                           lse: Optional[OutArray],
                           stream: CallStream = 0) -> Optional[Tuple[Exported, Optional[Exported]]]: ...
def act_quant(x: InArray, block_size: int, ue8m0: bool, stream: CallStream = 0) -> Tuple[Exported, Exported]: ...
def weight_quant(x: InArray, block_size: int, stream: CallStream = 0) -> Tuple[Exported, Exported]: ...
def weight_dequant(x: InArray, s: InArray, block_size: int, dtype: str, stream: CallStream = 0) -> Exported: ...
def int8_colwise_quant(A: InArray, threshold: float, stream: CallStream = 0) -> Tuple[Exported, Exported]: ...
def int8_vectorwise_quant(
    A: InArray, threshold: float, stream: CallStream = 0, outlier_cols: bool = True
) -> Tuple[Exported, Exported, Optional[Exported]]: ...
def int8_vectorwise_dequant(A: InArray, stats: InArray, dtype: str, stream: CallStream = 0) -> Exported: ...
def shared_code(name: str, device_type: str, device_index: int) -> Exported: ...
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

# ------------------------------------------------------------------ matmul

DTypeLike = Any  # a dtype name ("float16"), or a framework dtype (torch.float16, numpy.float16)

class MatmulConfig:
    """BitBLAS' MatmulConfig (public as lowbit.MatmulConfig): out[M, N] = A[M, K] . dequant(W)[N, K]^T (+ bias).

    Dtypes are given as names (or framework dtypes) and read back as names;
    W_dtype=None means "same as A_dtype" (an unquantized float16/bfloat16
    weight), as in BitBLAS. Names are checked when set; the fields as a whole
    by check() and by Matmul(config). Attributes are writable.
    """

    M: List[int]
    N: int
    K: int
    A_dtype: str
    W_dtype: str
    accum_dtype: str
    out_dtype: str
    layout: str
    with_bias: bool
    group_size: int
    with_scaling: bool
    with_zeros: bool
    zeros_mode: str
    def __init__(
        self,
        M: Union[None, int, Sequence[int]] = None,
        N: Optional[int] = None,
        K: Optional[int] = None,
        *,
        A_dtype: DTypeLike = "float16",
        W_dtype: Optional[DTypeLike] = None,
        accum_dtype: DTypeLike = "float32",
        out_dtype: DTypeLike = "float16",
        layout: str = "nt",
        with_bias: bool = False,
        group_size: int = -1,
        with_scaling: bool = False,
        with_zeros: bool = False,
        zeros_mode: str = "original",
    ) -> None: ...
    def check(self) -> None: ...
    def groups(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __copy__(self) -> MatmulConfig: ...
    def __deepcopy__(self, memo: Any) -> MatmulConfig: ...

class QuantizedWeight:
    """The C++ unpacked weight (lowbit.QuantizedWeight wraps it)."""

    config: MatmulConfig
    def tensor(self, name: str) -> Optional[Exported]: ...

class PackedWeight:
    """The C++ packed weight (lowbit.PackedWeight wraps it)."""

    @property
    def W_dtype(self) -> str: ...
    @property
    def N(self) -> int: ...
    @property
    def K(self) -> int: ...
    @property
    def group_size(self) -> int: ...
    @property
    def with_scaling(self) -> bool: ...
    @property
    def with_zeros(self) -> bool: ...
    @property
    def zeros_mode(self) -> str: ...
    @property
    def with_bias(self) -> bool: ...
    @property
    def layout(self) -> str: ...
    @property
    def device(self) -> Tuple[str, int]: ...
    @property
    def nbytes(self) -> int: ...
    def tensor(self, name: str) -> Optional[Exported]: ...
    def dequantize(self) -> Exported: ...
    def unpack(self) -> QuantizedWeight: ...

class Matmul:
    """The C++ Matmul (lowbit.Matmul wraps it)."""

    def __init__(self, config: MatmulConfig, device_type: str, device_index: int) -> None: ...
    @property
    def config(self) -> MatmulConfig: ...
    @property
    def device(self) -> Tuple[str, int]: ...
    @property
    def layout(self) -> str: ...
    def prepared_m(self, m: int) -> int: ...
    def transform_weight(
        self,
        weight: InArray,
        scale: Optional[InArray],
        zeros: Optional[InArray],
        bias: Optional[InArray],
        perm: Optional[InArray],
    ) -> PackedWeight: ...
    def transform_quantized(self, weight: QuantizedWeight) -> PackedWeight: ...
    def forward(self, A: InArray, W: PackedWeight, out: Optional[OutArray], stream: CallStream = 0) -> Optional[Exported]: ...

def import_gptq(
    qweight: InArray,
    qzeros: InArray,
    scales: InArray,
    g_idx: Optional[InArray],
    bias: Optional[InArray],
    bits: int,
    group_size: int,
    zero_plus_one: bool,
    zeros_mode: str,
) -> QuantizedWeight: ...
def import_awq(
    qweight: InArray, qzeros: InArray, scales: InArray, bias: Optional[InArray], group_size: int
) -> QuantizedWeight: ...
def import_bnb_4bit(
    packed: InArray,
    absmax: InArray,
    quant_type: str,
    blocksize: int,
    shape: Sequence[int],
    dtype: str,
    nested: Optional[NestedIn],
    bias: Optional[InArray],
) -> QuantizedWeight: ...
def matmul_4bit(
    op: str,
    A: InArray,
    B: InArray,
    absmax: InArray,
    nested: Optional[NestedIn],
    quant_type: str,
    blocksize: int,
    shape: Sequence[int],
    bias: Optional[InArray],
    out: Optional[OutArray],
    stream: CallStream = 0,
) -> Optional[Exported]: ...
def optimizer_update_8bit(
    optimizer_name: str,
    g: InArray,
    p: OutArray,
    state1: OutArray,
    state2: Optional[OutArray],
    beta1: float,
    beta2: float,
    eps: float,
    step: int,
    lr: float,
    qmap1: InArray,
    qmap2: Optional[InArray],
    max1: InArray,
    max2: Optional[InArray],
    new_max1: OutArray,
    new_max2: Optional[OutArray],
    weight_decay: float,
    gnorm_scale: float,
    unorm_vec: Optional[OutArray],
    max_unorm: float,
    stream: CallStream = 0,
) -> None: ...
def optimizer_update_32bit_multi(optimizer_name: str, g: List[InArray], p: List[OutArray], state1: List[OutArray],
                                 beta1: float, eps: float, step: int, lr: float,
                                 state2: Optional[List[Optional[OutArray]]], beta2: float, beta3: float, alpha: float,
                                 weight_decay: float, gnorm_scale: float, unorm_vec: Optional[List[Optional[OutArray]]],
                                 max_unorm: float, skip_zeros: bool, stream: CallStream = 0) -> None: ...
def optimizer_update_8bit_blockwise_multi(optimizer_name: str, g: List[InArray], p: List[OutArray],
                                          state1: List[OutArray], state2: Optional[List[Optional[OutArray]]],
                                          beta1: float, beta2: float, beta3: float, alpha: float, eps: float,
                                          step: int, lr: float, qmap1: InArray, qmap2: Optional[InArray],
                                          absmax1: List[OutArray], absmax2: Optional[List[Optional[OutArray]]],
                                          weight_decay: float, gnorm_scale: float, skip_zeros: bool,
                                          stream: CallStream = 0) -> None: ...
