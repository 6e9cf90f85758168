"""Arrays in, same arrays out: zero-copy, dtype rules, frameworks, errors."""

import threading

import numpy as np
import pytest

import lowbit
import lowbit.functional as F
import reference as ref
from lowbit import _lowbit


def _trace(fn):
    _lowbit._trace(True)
    try:
        result = fn()
    finally:
        records = _lowbit._trace(False)
    return result, records


def _ptr(records, arg, op=""):
    hits = [r[2] for r in records if r[1] == arg and (not op or r[0] == op)]
    assert hits, f"no trace record for {arg} in {records}"
    return hits[0]


def test_numpy_zero_copy_in_and_out(rng):
    x = rng.standard_normal(10000).astype(np.float32)
    (q, state), records = _trace(lambda: F.quantize_blockwise(x, blocksize=256))
    assert _ptr(records, "A", "quantize_blockwise") == x.ctypes.data
    assert _ptr(records, "out") == q.ctypes.data
    assert _ptr(records, "absmax") == state.absmax.ctypes.data
    y, records = _trace(lambda: F.dequantize_blockwise(q, state))
    assert _ptr(records, "A", "dequantize_blockwise") == q.ctypes.data
    assert _ptr(records, "absmax", "dequantize_blockwise") == state.absmax.ctypes.data
    assert _ptr(records, "out") == y.ctypes.data
    assert q.flags.writeable and y.flags.writeable and q.flags.c_contiguous


def test_outputs_outlive_everything_else(rng):
    x = rng.standard_normal(5000).astype(np.float32)
    q, state = F.quantize_nf4(x)
    absmax = state.absmax
    del state
    import gc

    gc.collect()
    assert absmax.shape == (79,) and np.all(absmax > 0)
    q[:] = 0  # writable memory the array owns


def test_read_only_and_strided_inputs(rng):
    x = rng.standard_normal((64, 100)).astype(np.float32)
    ro = x.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(F.quantize_blockwise(ro, blocksize=64)[0], F.quantize_blockwise(x, blocksize=64)[0])
    t = x.T  # not contiguous: quantized as the logical (row-major) array
    q, state = F.quantize_blockwise(t, blocksize=64)
    assert q.shape == (100, 64)
    np.testing.assert_array_equal(q, F.quantize_blockwise(np.ascontiguousarray(t), blocksize=64)[0])


def test_ml_dtypes_in_and_out(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = ref.bf16_round(rng.standard_normal((4, 256)).astype(np.float32))
    y, s = F.act_quant(x.astype(ml_dtypes.bfloat16))
    assert y.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(y.view(np.uint8), ref.act_quant(x)[0])
    q, state = F.quantize_blockwise(x.astype(ml_dtypes.bfloat16), blocksize=256)
    assert state.dtype == np.dtype(ml_dtypes.bfloat16)
    out = F.dequantize_blockwise(q, state)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    # fp8 arrays go in as fp8, and as their uint8 bits
    w, ws = F.weight_quant(x)
    np.testing.assert_array_equal(F.weight_dequant(w, ws), F.weight_dequant(w.view(np.uint8), ws))


def test_without_ml_dtypes_bits_come_back_as_unsigned_ints(rng, no_ml_dtypes):
    x = rng.standard_normal((4, 256)).astype(np.float32)
    y, s = F.act_quant(x)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, ref.act_quant(x)[0])
    q, state = F.quantize_blockwise(x, blocksize=256)
    state.dtype = "bfloat16"
    out = F.dequantize_blockwise(q, state)
    assert out.dtype == np.uint16
    want = ref.dequantize_blockwise(q, ref.dynamic_map(), state.absmax, 256)
    np.testing.assert_array_equal(out.reshape(-1), ref.bf16_bits(want))
    np.testing.assert_array_equal(F.weight_dequant(*F.weight_quant(x)), ref.weight_dequant(*ref.weight_quant(x)))
    with pytest.raises(TypeError, match="quantize_blockwise: A dtype must be one of"):
        F.quantize_blockwise(out)  # uint16 bits are not a float input


class _DLPackOnly:
    """An array of an unknown framework: only the DLPack protocol."""

    def __init__(self, a, namespace=None):
        self._a = a
        self._ns = namespace
        if namespace is not None:
            self.__array_namespace__ = lambda api_version=None: namespace

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_any_dlpack_object(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    q, state = F.quantize_blockwise(_DLPackOnly(x, namespace=np), blocksize=64)
    assert isinstance(q, np.ndarray)
    np.testing.assert_array_equal(q, F.quantize_blockwise(x, blocksize=64)[0])
    q2, _ = F.quantize_blockwise(_DLPackOnly(x), blocksize=64)
    np.testing.assert_array_equal(np.from_dlpack(q2), q)


def test_unsupported_inputs_raise_type_error():
    with pytest.raises(TypeError, match=r"quantize_4bit: A must be an array with __dlpack__ .*\(got list\)"):
        F.quantize_4bit([1.0, 2.0])
    with pytest.raises(TypeError, match="quantize_blockwise: A dtype .*complex64"):
        F.quantize_blockwise(np.zeros(64, np.complex64))
    with pytest.raises(TypeError, match="stream must be"):
        F.quantize_blockwise(np.zeros(64, np.float32), stream="fast")


def test_no_cuda_backend_is_a_runtime_error():
    if _lowbit.built_with_cuda:
        pytest.skip("lowbit is built with CUDA: the missing-backend error cannot happen")
    with pytest.raises(RuntimeError, match="cuda"):
        _lowbit.to_device((np.zeros(4, np.float32), ""), "cuda", 0)


def test_ops_release_the_gil_and_run_concurrently(rng):
    xs = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(4)]
    want = [F.quantize_4bit(x, quant_type="nf4")[0] for x in xs]
    got = [None] * 4

    def work(i):
        got[i] = F.quantize_4bit(xs[i], quant_type="nf4")[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_package_surface():
    names = ["create_dynamic_map", "create_linear_map", "create_normal_map", "create_fp8_map", "create_quantile_map",
             "estimate_quantiles", "get_4bit_type", "quantize_blockwise", "dequantize_blockwise", "quantize_4bit",
             "dequantize_4bit", "quantize_nf4", "quantize_fp4", "dequantize_nf4", "dequantize_fp4", "QuantState",
             "int8_vectorwise_quant", "int8_vectorwise_dequant", "act_quant", "weight_quant", "weight_dequant"]
    for name in names:
        obj = getattr(lowbit, name)
        assert obj is getattr(F, name) and obj.__doc__, name
    assert isinstance(lowbit.__version__, str) and lowbit.cuda_available() in (True, False)


def test_bitsandbytes_signatures():
    """Keyword names and defaults as bitsandbytes' / DeepSeek's (extra ones are keyword-only)."""
    import inspect

    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
                if p.kind is not inspect.Parameter.KEYWORD_ONLY]

    e = inspect.Parameter.empty
    assert params(F.quantize_blockwise) == [("A", e), ("code", None), ("absmax", None), ("out", None),
                                            ("blocksize", 4096), ("nested", False)]
    assert params(F.dequantize_blockwise) == [("A", e), ("quant_state", None), ("absmax", None), ("code", None),
                                              ("out", None), ("blocksize", 4096), ("nested", False)]
    assert params(F.quantize_4bit) == [("A", e), ("absmax", None), ("out", None), ("blocksize", 64),
                                       ("compress_statistics", False), ("quant_type", "fp4"), ("quant_storage", None)]
    assert params(F.dequantize_4bit) == [("A", e), ("quant_state", None), ("absmax", None), ("out", None),
                                         ("blocksize", 64), ("quant_type", "fp4")]
    assert params(F.estimate_quantiles) == [("A", e), ("out", None), ("offset", 1 / 512), ("num_quantiles", 256)]
    assert params(F.get_4bit_type) == [("typename", e), ("device", None), ("blocksize", 64)]
    assert params(F.create_dynamic_map) == [("signed", True), ("max_exponent_bits", 7), ("total_bits", 8)]
    assert params(F.create_normal_map) == [("offset", 0.9677083), ("use_extra_value", True)]
    assert params(F.act_quant) == [("x", e), ("block_size", 128), ("scale_fmt", None)]
    assert params(F.weight_dequant) == [("x", e), ("s", e), ("block_size", 128)]
    assert params(F.int8_vectorwise_quant) == [("A", e), ("threshold", 0.0)]
    assert list(inspect.signature(F.QuantState.as_dict).parameters) == ["self", "packed"]
    assert list(inspect.signature(F.QuantState.from_dict).parameters) == ["qs_dict", "device"]


# ------------------------------------------------------------ PyTorch (CPU)


def test_torch_cpu_dtypes_and_autograd_inputs(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 256, requires_grad=True)
    y, s = F.act_quant(x)
    assert y.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    np.testing.assert_array_equal(y.view(torch.uint8).numpy(), ref.act_quant(x.detach().numpy())[0])
    w, ws = F.weight_quant(x.detach().to(torch.bfloat16))
    assert F.weight_dequant(w, ws).dtype == torch.get_default_dtype()
    assert F.weight_dequant(w, ws, dtype=torch.bfloat16).dtype == torch.bfloat16
    packed, state = F.quantize_nf4(x.detach().to(torch.bfloat16), compress_statistics=True)
    assert state.dtype == torch.bfloat16 and isinstance(state.offset, torch.Tensor)
    assert F.dequantize_nf4(packed, state).dtype == torch.bfloat16
    packed16, _ = F.quantize_nf4(x.detach(), quant_storage=torch.bfloat16)
    assert packed16.dtype == torch.bfloat16 and packed16.shape == (256, 1)
    # zero-copy for torch tensors too
    t = torch.randn(1000)
    (q, st), records = _trace(lambda: F.quantize_blockwise(t, blocksize=64))
    assert _ptr(records, "A", "quantize_blockwise") == t.data_ptr()
    assert _ptr(records, "out") == q.data_ptr()
    d = st.as_dict() if st.quant_type else F.quantize_nf4(t)[1].as_dict(packed=True)
    assert all(isinstance(v, torch.Tensor) for v in d.values())
