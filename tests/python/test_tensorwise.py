"""Tensor-wise 8-bit quantization through Python (bitsandbytes' quantize, dequantize, quantize_no_absmax,
dequantize_no_absmax): NumPy references from docs/formats.md, and every array backend against NumPy."""

import numpy as np
import pytest

import lowbit.functional as F
from backends import require_dtype, require_writable

F32 = np.float32


def _nearest(y, code):
    """The number of midpoints (code[i] + code[i+1]) * 0.5 strictly below y (NaN as 0): the lower code on a tie."""
    mid = ((code[:-1] + code[1:]) * F32(0.5)).astype(F32)
    y = np.where(np.isnan(y), F32(0), y)
    return (y[..., None] > mid).sum(axis=-1).astype(np.uint8)


def test_quantize_matches_numpy(rng):
    code = F.create_dynamic_map()
    a = (rng.standard_normal((37, 29)) * 3).astype(F32)
    q, (absmax, code_out) = F.quantize(a)
    assert q.shape == a.shape and q.dtype == np.uint8
    assert np.asarray(absmax).shape == () and np.asarray(absmax).dtype == F32
    assert absmax == np.abs(a).max()
    np.testing.assert_array_equal(np.asarray(code_out), code)
    np.testing.assert_array_equal(q, _nearest(a / absmax, code))
    y = F.dequantize(q, (absmax, code_out))
    np.testing.assert_array_equal(y, code[q] * absmax)
    np.testing.assert_array_equal(F.dequantize(q, absmax=absmax), y)


def test_no_absmax_matches_numpy(rng):
    code = F.create_linear_map()
    a = rng.uniform(-1.2, 1.2, 3001).astype(F32)
    mid = (code[:-1] + code[1:]) * F32(0.5)
    a[:255] = mid  # exact midpoints: the lower code
    q = F.quantize_no_absmax(a, code)
    np.testing.assert_array_equal(q, _nearest(a, code))
    distinct = [i for i in range(255) if i == 0 or mid[i - 1] < mid[i]]  # not inside a run of equal values
    np.testing.assert_array_equal(q[distinct], np.array(distinct, np.uint8))
    np.testing.assert_array_equal(F.dequantize_no_absmax(q, code), code[q])


def test_out_buffers_are_written(rng):
    code = F.create_dynamic_map()
    a = rng.standard_normal(100).astype(F32)
    q = np.zeros(100, np.uint8)
    got, (absmax, _) = F.quantize(a, code, out=q)
    assert got is q and np.any(q != 0)
    y = np.zeros(100, F32)
    assert F.dequantize(q, (absmax, code), out=y) is y
    np.testing.assert_array_equal(y, code[q] * absmax)


def test_all_zero_tensor_decodes_to_zero():
    q, (absmax, code) = F.quantize(np.zeros(10, F32))
    assert absmax == 0
    np.testing.assert_array_equal(F.dequantize(q, (absmax, code)), np.zeros(10, F32))


def test_errors_name_the_argument():
    code = F.create_dynamic_map()
    with pytest.raises(ValueError, match="dequantize: state or absmax is required"):
        F.dequantize(np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="quantize_no_absmax: out must have 4 elements"):
        F.quantize_no_absmax(np.zeros(4, F32), code, out=np.zeros(3, np.uint8))
    with pytest.raises(TypeError, match="dequantize_no_absmax: input dtype must be uint8"):
        F.dequantize_no_absmax(np.zeros(4, F32), code)
    with pytest.raises(ValueError, match="quantize_tensorwise: code must be sorted ascending"):
        F.quantize(np.zeros(4, F32), code[::-1].copy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_backend_matches_numpy(backend, rng, dtype):
    """The same calls on each array backend (CUDA on torch-cuda / CuPy): the same codes, absmax and values."""
    require_dtype(backend, dtype)
    require_dtype(backends_numpy(), dtype)  # the reference's arrays
    a = (rng.standard_normal(5003) * 2).astype(F32)
    want_q, (want_absmax, code) = F.quantize(backends_np(dtype, a))
    got_q, (got_absmax, got_code) = F.quantize(backend.array(a, dtype))
    assert backend.is_native(got_q) and backend.is_native(got_absmax) and backend.is_native(got_code)
    np.testing.assert_array_equal(backend.numpy(got_q), want_q)
    assert float(backend.numpy(got_absmax)) == float(want_absmax)
    got_y = F.dequantize(got_q, (got_absmax, got_code))
    np.testing.assert_array_equal(backend.numpy(got_y), F.dequantize(want_q, (want_absmax, code)))
    got_nq = F.quantize_no_absmax(backend.array(a, dtype), backend.array(code))
    np.testing.assert_array_equal(backend.numpy(got_nq), F.quantize_no_absmax(backends_np(dtype, a), code))
    require_writable(backend)
    out = backend.array(np.zeros(5003, F32))
    F.dequantize_no_absmax(got_nq, backend.array(code), out=out)
    np.testing.assert_array_equal(backend.numpy(out), code[backend.numpy(got_nq)])


def backends_numpy():
    from backends import ALL

    return ALL[0]


def backends_np(dtype, a):
    """a as NumPy holds dtype (bfloat16 through ml_dtypes)."""
    return backends_numpy().array(a, dtype)
