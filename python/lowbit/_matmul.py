"""The mixed-precision matmul (BitBLAS' ``Matmul``) for arrays of any DLPack framework.

``out[M, N] = A[M, K] · dequant(W)[N, K]ᵀ (+ bias[N])`` with low-bit weights
(int8..int1, uint8..uint1, nf4, fp4, fp4_e2m1, fp8_e4m3, or float16/bfloat16)
and fp16/bf16 activations::

    import lowbit
    config = lowbit.MatmulConfig(N=4096, K=4096, A_dtype="float16", W_dtype="uint4",
                                 with_scaling=True, group_size=128,
                                 with_zeros=True, zeros_mode="quantized")
    mm = lowbit.Matmul(config, device="cuda")
    W = mm.transform_weight(values, scale=scale, zeros=zeros)   # once
    out = mm(A, W)                                             # any M, in A's framework

The C++ side (``include/lowbit/ops/gemm.h``, ``docs/gemm.md``) defines the
formats and checks; errors carry its messages. The packed weight stays a C++
object: ``forward`` hands it to the op as it is.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Dict, Optional, Tuple

from . import _arrays, _lowbit
from ._quant_state import QuantState

MatmulConfig = _lowbit.MatmulConfig
MatmulConfig.__module__ = "lowbit"

Array = Any

__all__ = [
    "Matmul",
    "MatmulConfig",
    "PackedWeight",
    "QuantizedWeight",
    "dequantize_weight",
    "import_awq",
    "import_bnb_4bit",
    "import_gptq",
    "unpack_weight",
]


def _device_of(device: Any) -> Tuple[_arrays.Device, Optional[_arrays.Framework]]:
    """(device, framework it implies) for "cpu", "cuda", "cuda:N", an int, a
    torch.device, an array, or any object whose str() is one of the strings."""
    if device is None or isinstance(device, (str, int)) or hasattr(device, "__dlpack__"):
        return _arrays.parse_device(device)
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        return _arrays.parse_device(device)
    return _arrays.parse_device(str(device))


def _finish_reads(call: _arrays.Call) -> None:
    """The C++ importers and packers read device inputs on the legacy default
    stream: wait for the work the caller's stream has queued on them."""
    if call.device != _arrays.CPU:
        _lowbit.synchronize(call.stream)


def _bits_view(x: Any, want: str) -> str:
    """uint16 arrays stand for bfloat16 (NumPy without ml_dtypes) where `want` is bfloat16."""
    if want == "bfloat16" and _arrays.dtype_name(getattr(x, "dtype", "")) == "uint16":
        return "bfloat16"
    return ""


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _impl_field(name: str, doc: str = "") -> property:
    """A read-only property forwarding to the binding object's field."""
    return property(lambda self: getattr(self._impl, name), doc=doc or f"The packed weight's {name}.")


def _tensor_field(name: str) -> property:
    """A read-only property: the named tensor as an array of the owner's framework (None when absent)."""
    return property(lambda self: self._tensors.get(name), doc=f"The {name} tensor, or None.")


class _Tensors:
    """Lazily exported tensors of a C++ weight object, cached (a CUDA export
    can be imported into a framework only once)."""

    def __init__(self, impl: Any, fw: _arrays.Framework):
        self._impl = impl
        self._fw = fw
        self._cache: Dict[str, Any] = {}

    def get(self, name: str) -> Optional[Array]:
        if name not in self._cache:
            raw = self._impl.tensor(name)
            self._cache[name] = None if raw is None else self._fw.wrap(raw, raw[1])
        return self._cache[name]


class QuantizedWeight:
    """An unpacked weight and its parameters: what importers return,
    :func:`unpack_weight` gives back and :meth:`Matmul.transform_weight` takes.

    Attributes
    ----------
    config : MatmulConfig
        W_dtype, N, K, group_size, scaling, zeros and bias as the weight needs
        them; A_dtype / out_dtype follow the scales' dtype (float16 for
        float32 scales). It is this weight's own config: change A_dtype /
        out_dtype (or M, accum_dtype) in place before making the Matmul.
    weight : array
        [N, K] integer values or codes (int8/uint8), fp8 bits, or the f16/bf16 weight.
    scale, zeros, bias, perm : array or None
        [N, groups] scales, [N, groups] zeros (floats, or integers for
        quantized zeros), [N] bias, int32 [K] act-order permutation.

    Arrays are host arrays, in the framework of the importer's input (NumPy
    for CuPy inputs).
    """

    __slots__ = ("_impl", "_tensors")

    def __init__(self, impl: Any, fw: _arrays.Framework):
        self._impl = impl
        self._tensors = _Tensors(impl, fw)

    @property
    def config(self) -> MatmulConfig:
        return self._impl.config

    @config.setter
    def config(self, value: MatmulConfig) -> None:
        if not isinstance(value, MatmulConfig):
            raise TypeError(f"QuantizedWeight: config must be a lowbit.MatmulConfig (got {type(value).__name__})")
        self._impl.config = value

    weight = _tensor_field("weight")
    scale = _tensor_field("scale")
    zeros = _tensor_field("zeros")
    bias = _tensor_field("bias")
    perm = _tensor_field("perm")

    def __repr__(self) -> str:
        return f"QuantizedWeight(config={self.config!r})"


class PackedWeight:
    """A weight packed by :meth:`Matmul.transform_weight` for its Matmul's device.

    Opaque to the matmul (``forward`` takes it as it is). Its format fields
    (``W_dtype``, ``N``, ``K``, ``group_size``, ``with_scaling``,
    ``with_zeros``, ``zeros_mode``, ``with_bias``, ``layout``), ``device``
    ("cpu", "cuda:0") and ``nbytes`` are readable, and so are its tensors in
    the packed layout (docs/gemm.md draws both). In ``rows`` (the CPU's, and
    CUDA's for the formats ``tiles`` does not take):

    - ``qweight``: uint8 [N, row_bytes], codes as little-endian bit streams;
    - ``scale``: float32 [N, groups] or None;
    - ``zeros``: float32 [N, groups] (original/rescale), int32 [groups, ⌈N·bits/32⌉]
      (quantized) or None;
    - ``bias``: float32 [N] or None; ``perm``: int32 [K] or None.

    In ``tiles``: ``qweight`` uint8 [⌈N/16⌉, ⌈K/(256/bits)⌉·512] (tiles in
    tensor-core fragment order), ``scale`` [groups, N rounded up to 16] in the
    given dtype, ``zeros`` uint8 [groups, N rounded up to 16] (quantized zero
    codes), ``bias`` and ``perm`` as above.

    They are the packed memory itself (no copy), as arrays of the framework
    the weight was given in (or PyTorch / CuPy for a CUDA Matmul given host
    arrays). Writing into them changes the weight.
    """

    __slots__ = ("_impl", "_fw", "_tensors", "_key", "__weakref__")

    def __init__(self, impl: Any, fw: _arrays.Framework):
        self._impl = impl
        self._fw = fw
        self._tensors = _Tensors(impl, fw)
        self._key: Optional[Tuple[int, int, int, str]] = None  # set by _bind: (key, N, K, out dtype)

    W_dtype = _impl_field("W_dtype")
    N = _impl_field("N")
    K = _impl_field("K")
    group_size = _impl_field("group_size")
    with_scaling = _impl_field("with_scaling")
    with_zeros = _impl_field("with_zeros")
    zeros_mode = _impl_field("zeros_mode")
    with_bias = _impl_field("with_bias")
    layout = _impl_field("layout", "The packed layout (\"rows\" or, on CUDA, \"tiles\"; docs/gemm.md).")

    @property
    def nbytes(self) -> int:
        """Bytes of all its tensors."""
        return int(self._impl.nbytes)

    @property
    def device(self) -> str:
        kind, index = self._impl.device
        return "cpu" if kind == "cpu" else f"cuda:{index}"

    qweight = _tensor_field("qweight")
    scale = _tensor_field("scale")
    zeros = _tensor_field("zeros")
    bias = _tensor_field("bias")
    perm = _tensor_field("perm")

    def __repr__(self) -> str:
        parts = [f"{self.W_dtype} [{self.N}, {self.K}]"]
        if self.with_scaling:
            parts.append(f"group_size={self.group_size}")
        if self.with_zeros:
            parts.append(f"zeros_mode={self.zeros_mode!r}")
        if self.with_bias:
            parts.append("bias")
        if self._impl.tensor("perm") is not None:
            parts.append("perm")
        parts += [f"layout={self.layout!r}", f"device={self.device!r}", _fmt_bytes(self.nbytes)]
        return f"PackedWeight({', '.join(parts)})"


class Matmul:
    """BitBLAS' ``Matmul``: a checked :class:`MatmulConfig` bound to a device.

    Parameters
    ----------
    config : MatmulConfig
        Checked here (ValueError / TypeError naming the field otherwise).
    device : str or device
        ``"cpu"`` (default), ``"cuda"``, ``"cuda:N"``, an int (CUDA ordinal),
        a ``torch.device``, or any object whose ``str()`` is one of those.

    Use :meth:`transform_weight` once per weight, then call the Matmul (or
    :meth:`forward`) with activations of any framework on that device.
    """

    def __init__(self, config: MatmulConfig, device: Any = "cpu"):
        if not isinstance(config, MatmulConfig):
            raise TypeError(f"Matmul: config must be a lowbit.MatmulConfig (got {type(config).__name__})")
        self._device, self._hint = _device_of(device)
        if self._device[0] == "cuda":  # as the C ABI's lowbit_matmul_create: refused here, not at the first weight
            count = int(_lowbit.cuda_device_count())
            if count == 0:
                raise RuntimeError(f"Matmul: device cuda:{self._device[1]} is not available (no CUDA device: "
                                   "lowbit was built without CUDA or none is visible)")
            if not 0 <= self._device[1] < count:
                raise ValueError(f"Matmul: device must be a CUDA ordinal below the device count {count} "
                                 f"(got cuda:{self._device[1]})")
        self._impl = _lowbit.Matmul(config, self._device[0], self._device[1])
        self._a_dtype = _arrays.dtype_name(config.A_dtype)  # forward's, kept: config is a copy per access

    @property
    def config(self) -> MatmulConfig:
        """A copy of the checked config (M sorted and deduplicated)."""
        return self._impl.config

    @property
    def device(self) -> str:
        return "cpu" if self._device == _arrays.CPU else f"cuda:{self._device[1]}"

    @property
    def layout(self) -> str:
        """The packed layout of this device's kernels for the format: "rows" on the CPU;
        on CUDA "tiles" for 1/2/4/8-bit integers and 4-bit tables (no zeros or quantized
        zeros, groups of 2^i tiles), "rows" otherwise (docs/gemm.md)."""
        return self._impl.layout

    def prepared_m(self, m: int) -> int:
        """The prepared M that serves m rows (the smallest config.M >= m, else the largest)."""
        return int(self._impl.prepared_m(_arrays.integer(m, "Matmul.prepared_m", "m")))

    def transform_weight(
        self,
        weight: Any,
        scale: Optional[Array] = None,
        zeros: Optional[Array] = None,
        bias: Optional[Array] = None,
        perm: Optional[Array] = None,
    ) -> PackedWeight:
        """Packs a weight once into this device's layout.

        Parameters
        ----------
        weight : array or QuantizedWeight
            [N, K] values as int8/uint8 (codes 0..15 for nf4/fp4/fp4_e2m1,
            uint8 bits or float8_e4m3fn for fp8_e4m3, the float16/bfloat16
            weight itself for unquantized types), or what an importer /
            :func:`unpack_weight` returned (then the other arguments must be None).
        scale : array, optional
            float16/bfloat16/float32 [N, groups] (with_scaling).
        zeros : array, optional
            [N, groups]: the scale's dtype (original, rescale), or integer
            values of W's type (quantized: int8/uint8/int32).
        bias : array, optional
            float16/bfloat16/float32 [N] (with_bias).
        perm : array, optional
            int32/int64 [K]: packed column j multiplies A's column perm[j].

        Inputs may be on any device and of any framework; packing happens on
        the host, and the result is copied to the Matmul's device. Values out
        of W's range are errors naming the element.
        """
        if isinstance(weight, QuantizedWeight):
            if any(x is not None for x in (scale, zeros, bias, perm)):
                raise ValueError(
                    "transform_weight: a QuantizedWeight carries its scale, zeros, bias and perm; "
                    "pass them as None"
                )
            fw = _arrays.framework_for(self._device, self._hint or weight._tensors._fw)
            return _bind(self, PackedWeight(self._impl.transform_quantized(weight._impl), fw))
        call = _arrays.Call("transform_weight", weight, "weight")
        _finish_reads(call)
        w_dtype = self._impl.config.W_dtype
        impl = self._impl.transform_weight(
            call.arg(weight, "weight", _bits_view(weight, w_dtype)),
            call.opt(scale, "scale"),
            call.opt(zeros, "zeros"),
            call.opt(bias, "bias"),
            call.opt(perm, "perm"),
        )
        return _bind(self, PackedWeight(impl, _arrays.framework_for(self._device, self._hint or call.fw)))

    def forward(
        self,
        A: Array,
        W: PackedWeight,
        scale: Any = None,
        zeros: Any = None,
        bias: Any = None,
        output: Optional[Array] = None,
        *,
        stream: Any = None,
    ) -> Array:
        """``out = A · dequant(W)ᵀ (+ bias)``, accumulated in float32.

        Parameters
        ----------
        A : array
            ``config.A_dtype`` (float16/bfloat16) [..., K] on the Matmul's
            device, any DLPack framework. (NumPy without ml_dtypes: a uint16
            array holding bfloat16 bits.)
        W : PackedWeight
            From this Matmul's :meth:`transform_weight`.
        scale, zeros, bias :
            Must be None: BitBLAS passes them here, lowbit packs them into W.
        output : array, optional
            ``config.out_dtype`` [..., N] buffer, written in place and returned.
        stream : optional
            CUDA stream (default: the current stream of A's framework).

        Returns
        -------
        [..., N] of ``config.out_dtype`` in A's framework and on its device.
        """
        if scale is not None or zeros is not None or bias is not None:
            given = [name for name, x in (("scale", scale), ("zeros", zeros), ("bias", bias)) if x is not None]
            raise ValueError(
                f"Matmul.forward: {', '.join(given)} must be None — scale, zeros and bias travel in the "
                f"PackedWeight: pass them to transform_weight instead"
            )
        if not isinstance(W, PackedWeight):
            raise TypeError(
                f"Matmul.forward: W must be a lowbit.PackedWeight from Matmul.transform_weight "
                f"(got {type(W).__name__})"
            )
        call = _arrays.Call("matmul", A, "A", stream)
        try:
            raw = self._impl.forward(call.arg(A, "A", _bits_view(A, self._a_dtype)), W._impl,
                                     call.out(output, "output"), call.ctx)
        except (ValueError, TypeError) as e:
            # The C++ op calls this buffer `out`; here the keyword is `output`.
            if output is not None and str(e).startswith("matmul: out "):
                raise type(e)("matmul: output " + str(e)[len("matmul: out "):]) from None
            raise
        call.done()
        return output if output is not None else call.result(raw)

    __call__ = forward

    def __repr__(self) -> str:
        return f"Matmul({self.config!r}, device={self.device!r})"


# Packed weights by key, for the torch ops (lowbit.ops), whose arguments are tensors and plain scalars: an op
# names its weight by key. Weak references: the registry keeps neither the weight nor its Matmul alive.
_BOUND: Dict[int, Tuple[Any, Any]] = {}
_KEYS = itertools.count(1)


def _bind(mm: Matmul, W: PackedWeight) -> PackedWeight:
    """W with its key in _BOUND (plain Python data, so traced code reads it without calling the binding)."""
    key = next(_KEYS)
    config = mm.config
    W._key = (key, int(W.N), int(W.K), _arrays.dtype_name(config.out_dtype))
    _BOUND[key] = (weakref.ref(mm), weakref.ref(W, lambda _, key=key: _BOUND.pop(key, None)))
    return W


def bound(key: int) -> Tuple[Matmul, PackedWeight]:
    """The Matmul and packed weight of a key (_bind's); ValueError once either is gone."""
    refs = _BOUND.get(key)
    mm, W = (refs[0](), refs[1]()) if refs is not None else (None, None)
    if mm is None or W is None:
        raise ValueError(f"matmul: no live packed weight has key {key} (the PackedWeight or its Matmul was freed)")
    return mm, W


def dequantize_weight(W: PackedWeight) -> Array:
    """The float32 [N, K] weight a packed weight stands for — exactly the values
    every backend multiplies by — in A's column order (perm undone), on the
    host, in the weight's framework (NumPy for CuPy)."""
    if not isinstance(W, PackedWeight):
        raise TypeError(f"dequantize_weight: W must be a lowbit.PackedWeight (got {type(W).__name__})")
    raw = W._impl.dequantize()
    return _arrays.framework_for(_arrays.CPU, W._fw).wrap(raw, raw[1])


def unpack_weight(W: PackedWeight) -> QuantizedWeight:
    """The unpacked form of a packed weight (integer values and codes as
    int8/uint8, fp8 as uint8 bits, scale/zeros/bias as float32), on the host;
    ``Matmul.transform_weight`` takes it back."""
    if not isinstance(W, PackedWeight):
        raise TypeError(f"unpack_weight: W must be a lowbit.PackedWeight (got {type(W).__name__})")
    return QuantizedWeight(W._impl.unpack(), _arrays.framework_for(_arrays.CPU, W._fw))


# ---------------------------------------------------------------- importers


def import_gptq(
    qweight: Array,
    qzeros: Array,
    scales: Array,
    g_idx: Optional[Array] = None,
    bias: Optional[Array] = None,
    bits: int = 4,
    group_size: int = 128,
    zero_plus_one: bool = True,
    zeros_mode: str = "quantized",
) -> QuantizedWeight:
    """A GPTQ checkpoint layer (AutoGPTQ / GPTQModel) as a :class:`QuantizedWeight`.

    ``qweight`` int32 [K·bits/32, N] packed along K, ``qzeros`` int32
    [groups, N·bits/32] packed along N, ``scales`` [groups, N], optional
    ``g_idx`` [K] (act-order: made contiguous through ``perm``) and ``bias``
    [N]. ``bits``: 2, 4 or 8. ``zero_plus_one``: True for checkpoint_format
    ``gptq`` (v1 stores zero − 1), False for ``gptq_v2``. ``zeros_mode``:
    ``"quantized"`` keeps integer zeros; ``"original"`` imports them as exact
    floats (needed when a v1 zero is stored as all ones). Codes and zeros move
    bit for bit; scales keep their dtype.
    """
    call = _arrays.Call("import_gptq", qweight, "qweight")
    _finish_reads(call)
    impl = _lowbit.import_gptq(
        call.arg(qweight, "qweight"), call.arg(qzeros, "qzeros"), call.arg(scales, "scales"),
        call.opt(g_idx, "g_idx"), call.opt(bias, "bias"), _arrays.integer(bits, call.op, "bits", 32), _arrays.integer(group_size, call.op, "group_size"),
        _arrays.flag(zero_plus_one, call.op, "zero_plus_one"), _arrays.text(zeros_mode, call.op, "zeros_mode"),
    )
    return QuantizedWeight(impl, _arrays.framework_for(_arrays.CPU, call.fw))


def import_awq(
    qweight: Array, qzeros: Array, scales: Array, bias: Optional[Array] = None, group_size: int = 128
) -> QuantizedWeight:
    """An AutoAWQ GEMM layer as a :class:`QuantizedWeight`: ``qweight`` int32
    [K, N/8] packed along N (nibble i of word j holds column
    8j + [0, 2, 4, 6, 1, 3, 5, 7][i]), ``qzeros`` int32 [groups, N/8] the same,
    ``scales`` [groups, N]; ``w = (q − z)·s``, 4-bit."""
    call = _arrays.Call("import_awq", qweight, "qweight")
    _finish_reads(call)
    impl = _lowbit.import_awq(
        call.arg(qweight, "qweight"), call.arg(qzeros, "qzeros"), call.arg(scales, "scales"),
        call.opt(bias, "bias"), _arrays.integer(group_size, call.op, "group_size"),
    )
    return QuantizedWeight(impl, _arrays.framework_for(_arrays.CPU, call.fw))


def import_bnb_4bit(packed: Array, quant_state: QuantState, bias: Optional[Array] = None) -> QuantizedWeight:
    """A bitsandbytes ``Linear4bit`` weight (packed codes and its 4-bit
    QuantState of shape [N, K]) as a :class:`QuantizedWeight`: W ``nf4`` /
    ``fp4``, ``group_size = blocksize``, scale = the absmax in float32
    (double quantization undone as bitsandbytes does). It dequantizes to
    exactly ``dequantize_4bit``'s values. The blocksize must divide K; for
    other states use :func:`lowbit.functional.matmul_4bit`."""
    from .functional import _blocksize, _nested_arg

    qs = quant_state
    if not hasattr(qs, "absmax"):
        raise TypeError(f"import_bnb_4bit: quant_state must be a QuantState (got {type(qs).__name__})")
    if qs.shape is None:
        raise ValueError("import_bnb_4bit: quant_state.shape is required (got None)")
    call = _arrays.Call("import_bnb_4bit", packed, "packed")
    _finish_reads(call)
    impl = _lowbit.import_bnb_4bit(
        call.arg(packed, "packed", "bytes"),
        call.arg(qs.absmax, "absmax"),
        _arrays.text(qs.quant_type or "", call.op, "quant_state.quant_type"),
        _blocksize(call, qs, 64),
        _arrays.shape_of(qs.shape, call.op, "quant_state.shape"),
        _arrays.dtype_name(qs.dtype if qs.dtype is not None else "float32"),
        _nested_arg(call, qs),
        call.opt(bias, "bias"),
    )
    return QuantizedWeight(impl, _arrays.framework_for(_arrays.CPU, call.fw))
