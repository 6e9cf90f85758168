"""8-bit blockwise quantization against the NumPy reference, on every backend."""

import numpy as np
import pytest

import lowbit.functional as F
import reference as ref
from backends import require_dtype, require_writable

DTYPES = ["float32", "float16", "bfloat16"]


def _data(rng, shape, dtype, scale=3.0):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    return ref.to_dtype(x, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("blocksize, shape", [(4096, (3, 3001)), (256, (1000,)), (64, (7, 33)), (32, (5,))])
def test_quantize_dequantize(backend, rng, dtype, blocksize, shape):
    require_dtype(backend, dtype)
    x = _data(rng, shape, dtype)
    code = ref.dynamic_map()
    q, state = F.quantize_blockwise(backend.array(x, dtype), blocksize=blocksize)
    want_q, want_absmax = ref.quantize_blockwise(x, code, blocksize)
    assert backend.is_native(q) and tuple(q.shape) == shape
    np.testing.assert_array_equal(backend.numpy(q).reshape(-1), want_q)
    np.testing.assert_array_equal(backend.numpy(state.absmax), want_absmax)
    np.testing.assert_allclose(backend.numpy(state.code), code, atol=1e-7)
    assert state.blocksize == blocksize and tuple(state.shape) == shape and not state.nested
    assert state.quant_type is None

    y = F.dequantize_blockwise(q, state)
    assert backend.is_native(y) and tuple(y.shape) == shape
    want_y = ref.to_dtype(ref.dequantize_blockwise(want_q, code, want_absmax, blocksize), dtype)
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1), want_y)


@pytest.mark.parametrize("blocksize", [64, 256])
def test_nested(backend, rng, blocksize):
    x = _data(rng, (20, 700), "float32")
    code = ref.dynamic_map()
    q, state = F.quantize_blockwise(backend.array(x), blocksize=blocksize, nested=True)
    want_q, absmax = ref.quantize_blockwise(x, code, blocksize)
    np.testing.assert_array_equal(backend.numpy(q).reshape(-1), want_q)
    assert state.nested and state.state2 is not None and state.state2.blocksize == blocksize

    offset = backend.numpy(state.offset)
    assert offset.shape == () and offset.dtype == np.float32
    np.testing.assert_allclose(offset, absmax.astype(np.float64).mean(), rtol=1e-6)
    # absmax - offset (float32), quantized again with the dynamic map.
    centered = (absmax - offset).astype(np.float32)
    want_qa, want_absmax2 = ref.quantize_blockwise(centered, code, blocksize)
    np.testing.assert_array_equal(backend.numpy(state.absmax), want_qa)
    np.testing.assert_array_equal(backend.numpy(state.state2.absmax), want_absmax2)

    restored = ref.nested_absmax(want_qa, code, want_absmax2, blocksize, offset)
    y = F.dequantize_blockwise(q, state)
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1),
                                  ref.dequantize_blockwise(want_q, code, restored, blocksize))
    assert np.abs(backend.numpy(y) - x).max() < 0.2


def test_all_zero_block_decodes_to_zero():
    x = np.zeros(512, np.float32)
    x[300:] = np.linspace(-1, 1, 212, dtype=np.float32)
    q, state = F.quantize_blockwise(x, blocksize=256)
    assert state.absmax[0] == 0
    y = F.dequantize_blockwise(q, state)
    assert np.all(y[:256] == 0) and not np.any(np.isnan(y))


def test_custom_code_and_out_dtype(rng):
    x = _data(rng, (3000,), "float32")
    code = F.create_linear_map(signed=True)
    q, state = F.quantize_blockwise(x, code=code, blocksize=128)
    want_q, absmax = ref.quantize_blockwise(x, code, 128)
    np.testing.assert_array_equal(q, want_q)
    assert state.code is code  # on A's device already: the state refers to it, as bitsandbytes' does
    np.testing.assert_array_equal(state.code, code)
    state.dtype = np.float16
    y = F.dequantize_blockwise(q, state)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y.astype(np.float32), ref.to_dtype(ref.dequantize_blockwise(q, code, absmax, 128),
                                                                      "float16"))


def test_states_share_the_default_code_maps(backend, rng):
    """Every state made on a device refers to one copy of each code map (no
    allocation or copy per call); a code elsewhere is copied to A's device."""
    x = backend.array(_data(rng, (1000,), "float32"))
    _, s1 = F.quantize_blockwise(x, blocksize=256)
    _, s2 = F.quantize_blockwise(x, blocksize=256, nested=True)
    assert s1.code is s2.code and s2.state2.code is s1.code
    np.testing.assert_array_equal(backend.numpy(s1.code), F.create_dynamic_map())
    for quant_type in ("nf4", "fp4"):
        _, a = F.quantize_4bit(x, quant_type=quant_type, compress_statistics=True)
        _, b = F.quantize_4bit(x, quant_type=quant_type)
        assert a.code is b.code and a.state2.code is s1.code
        np.testing.assert_array_equal(backend.numpy(a.code), F.get_4bit_type(quant_type))
    host_code = F.create_linear_map(signed=True)
    q, s3 = F.quantize_blockwise(x, code=host_code, blocksize=256)
    if backend.device != "cpu":
        assert s3.code is not host_code
        assert backend.numpy(F.dequantize_blockwise(q, s3)).shape == (1000,)
    np.testing.assert_array_equal(backend.numpy(s3.code), host_code)


def test_out_and_absmax_buffers_are_written_in_place(backend, rng):
    require_writable(backend)
    x = _data(rng, (2, 1000), "float32")
    out = backend.array(np.zeros((2, 1000), np.uint8))
    absmax = backend.array(np.zeros(8, np.float32))
    q, state = F.quantize_blockwise(backend.array(x), absmax=absmax, out=out, blocksize=256)
    assert q is out and state.absmax is absmax
    want_q, want_absmax = ref.quantize_blockwise(x, ref.dynamic_map(), 256)
    np.testing.assert_array_equal(backend.numpy(out).reshape(-1), want_q)
    np.testing.assert_array_equal(backend.numpy(absmax), want_absmax)
    y = backend.array(np.zeros((2, 1000), np.float32))
    assert F.dequantize_blockwise(q, state, out=y) is y
    np.testing.assert_array_equal(backend.numpy(y).reshape(-1),
                                  ref.dequantize_blockwise(want_q, ref.dynamic_map(), want_absmax, 256))


def test_dequantize_without_state(rng):
    """bitsandbytes' absmax= / code= / blocksize= form: float32 output, dynamic map by default."""
    x = _data(rng, (5000,), "float32")
    q, state = F.quantize_blockwise(x, blocksize=1024)
    y = F.dequantize_blockwise(q, absmax=state.absmax, blocksize=1024)
    np.testing.assert_array_equal(y, F.dequantize_blockwise(q, state))
    with pytest.raises(ValueError, match="quant_state or absmax"):
        F.dequantize_blockwise(q)


def test_errors_carry_the_cpp_message(rng):
    x = _data(rng, (1000,), "float32")
    with pytest.raises(ValueError, match=r"quantize_blockwise: blocksize must be a power of two from 32 to 4096 \(got 48\)"):
        F.quantize_blockwise(x, blocksize=48)
    with pytest.raises(TypeError, match=r"quantize_blockwise: A dtype .*\(got float64\)"):
        F.quantize_blockwise(x.astype(np.float64))
    with pytest.raises(TypeError, match=r"input dtype must be one of float32, float16, bfloat16 \(got int8\)"):
        F.quantize_blockwise(x.astype(np.int8))
    with pytest.raises(ValueError, match="code must be sorted ascending"):
        F.quantize_blockwise(x, code=F.create_linear_map(True, 4))
    with pytest.raises(ValueError, match="code must have 256 elements"):
        F.quantize_blockwise(x, code=np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="out must have 1000 elements"):
        F.quantize_blockwise(x, out=np.zeros(999, np.uint8))
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        F.quantize_blockwise(x, out=np.zeros(2000, np.uint8)[::2])
    q, state = F.quantize_blockwise(x, blocksize=256)
    with pytest.raises(ValueError, match=r"absmax must have 3 elements \(got 4"):
        F.dequantize_blockwise(q[:700], state)
    with pytest.raises(TypeError, match="dequantize_blockwise: A .*must be an array with __dlpack__"):
        F.dequantize_blockwise(list(q), state)
