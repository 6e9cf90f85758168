"""NF4 / FP4 quantization against the NumPy reference, on every backend."""

import numpy as np
import pytest

import lowbit.functional as F
import reference as ref
from backends import require_dtype, require_writable


def _data(rng, shape, dtype):
    return ref.to_dtype((rng.standard_normal(shape) * 2).astype(np.float32), dtype)


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("blocksize, shape", [(64, (33, 65)), (128, (1001,)), (32, (3,)), (4096, (2, 4097))])
def test_quantize_dequantize(backend, rng, quant_type, dtype, blocksize, shape):
    require_dtype(backend, dtype)
    x = _data(rng, shape, dtype)
    n = x.size
    packed, state = F.quantize_4bit(backend.array(x, dtype), blocksize=blocksize, quant_type=quant_type)
    want_packed, want_absmax = ref.quantize_4bit(x, blocksize, quant_type)
    assert backend.is_native(packed) and tuple(packed.shape) == ((n + 1) // 2, 1)
    np.testing.assert_array_equal(backend.numpy(packed).reshape(-1), want_packed)
    np.testing.assert_array_equal(backend.numpy(state.absmax), want_absmax)
    table = ref.NF4 if quant_type == "nf4" else ref.FP4
    np.testing.assert_allclose(backend.numpy(state.code), table, atol=1e-7)
    assert state.quant_type == quant_type and state.blocksize == blocksize and tuple(state.shape) == shape

    y = F.dequantize_4bit(packed, state)
    assert backend.is_native(y) and tuple(y.shape) == shape
    want_y = ref.to_dtype(ref.dequantize_4bit(want_packed, want_absmax, blocksize, quant_type, n), dtype)
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1), want_y)


def test_nf4_midpoints_take_the_lower_code():
    mids = ((ref.NF4[:-1] + ref.NF4[1:]) * np.float32(0.5)).astype(np.float32)
    x = np.concatenate([[1.0], mids]).astype(np.float32)  # absmax 1: y == x
    packed, _ = F.quantize_nf4(x, blocksize=32)
    codes = ref.unpack(packed, x.size)
    np.testing.assert_array_equal(codes[1:], np.arange(15))


def test_fp4_decision_constants():
    consts = np.array([0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333], np.float32)
    above = np.nextafter(consts, np.float32(1))
    x = np.concatenate([[1.0], consts, above, -above]).astype(np.float32)
    packed, _ = F.quantize_fp4(x, blocksize=32)
    np.testing.assert_array_equal(ref.unpack(packed, x.size), ref.encode_4bit(x, "fp4"))


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_compress_statistics(backend, rng, quant_type):
    x = _data(rng, (64, 300), "float32")
    packed, state = F.quantize_4bit(backend.array(x), blocksize=64, compress_statistics=True, quant_type=quant_type)
    want_packed, absmax = ref.quantize_4bit(x, 64, quant_type)
    np.testing.assert_array_equal(backend.numpy(packed).reshape(-1), want_packed)
    assert state.nested and state.state2.blocksize == 256
    offset = backend.numpy(state.offset)
    np.testing.assert_allclose(offset, absmax.astype(np.float64).mean(), rtol=1e-6)
    code = ref.dynamic_map()
    want_qa, want_absmax2 = ref.quantize_blockwise((absmax - offset).astype(np.float32), code, 256)
    np.testing.assert_array_equal(backend.numpy(state.absmax), want_qa)
    np.testing.assert_array_equal(backend.numpy(state.state2.absmax), want_absmax2)
    restored = ref.nested_absmax(want_qa, code, want_absmax2, 256, offset)
    y = F.dequantize_4bit(packed, state)
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1),
                                  ref.dequantize_4bit(want_packed, restored, 64, quant_type, x.size))


def test_defaults_follow_bitsandbytes(rng):
    x = _data(rng, (256,), "float32")
    _, state = F.quantize_4bit(x)
    assert state.quant_type == "fp4" and state.blocksize == 64 and not state.nested
    packed, state = F.quantize_nf4(x)
    assert state.quant_type == "nf4"
    np.testing.assert_array_equal(F.dequantize_nf4(packed, state), F.dequantize_4bit(packed, state))
    packed, state = F.quantize_fp4(x, blocksize=128)
    np.testing.assert_array_equal(F.dequantize_fp4(packed, state), F.dequantize_4bit(packed, state))


def test_quant_storage(rng):
    x = _data(rng, (16, 64), "float32")
    packed8, state = F.quantize_nf4(x)
    packed32, _ = F.quantize_nf4(x, quant_storage=np.float32)
    assert packed32.dtype == np.float32 and packed32.shape == (128, 1)
    np.testing.assert_array_equal(packed32.view(np.uint8).reshape(-1), packed8.reshape(-1))
    np.testing.assert_array_equal(F.dequantize_4bit(packed32, state), F.dequantize_4bit(packed8, state))
    with pytest.raises(ValueError, match="quant_storage"):
        F.quantize_nf4(x[:1, :5], quant_storage=np.float32)  # 3 bytes


def test_out_absmax_buffers_and_stateless_dequantize(backend, rng):
    require_writable(backend)
    x = _data(rng, (10, 50), "float32")
    out = backend.array(np.zeros((250, 1), np.uint8))
    absmax = backend.array(np.zeros(8, np.float32))
    packed, state = F.quantize_4bit(backend.array(x), absmax=absmax, out=out, quant_type="nf4")
    assert packed is out and state.absmax is absmax
    want_packed, want_absmax = ref.quantize_4bit(x, 64, "nf4")
    np.testing.assert_array_equal(backend.numpy(out).reshape(-1), want_packed)
    y = backend.array(np.zeros((10, 50), np.float32))
    got = F.dequantize_4bit(packed, absmax=absmax, out=y, quant_type="nf4")
    assert got is y
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1),
                                  ref.dequantize_4bit(want_packed, want_absmax, 64, "nf4", 500))
    with pytest.raises(ValueError, match="absmax and out are both required"):
        F.dequantize_4bit(packed, absmax=absmax)


def test_errors(rng):
    x = _data(rng, (100,), "float32")
    with pytest.raises(ValueError, match="quantize_4bit: quant_type must be 'nf4' or 'fp4' \\(got 'int4'\\)"):
        F.quantize_4bit(x, quant_type="int4")
    with pytest.raises(ValueError, match="quantize_4bit: blocksize must be a power of two"):
        F.quantize_4bit(x, blocksize=100)
    packed, state = F.quantize_nf4(x)
    state.shape = (101,)
    with pytest.raises(ValueError, match="dequantize_4bit: input must have 51 elements"):
        F.dequantize_4bit(packed, state)
    state.shape = (100,)
    state.dtype = np.float64
    with pytest.raises(TypeError, match="dequantize_4bit: dtype 'float64' is not a lowbit dtype"):
        F.dequantize_4bit(packed, state)
