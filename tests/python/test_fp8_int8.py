"""DeepSeek FP8 block scaling and LLM.int8 row-wise quantization (docs/formats.md)."""

import numpy as np
import pytest

import lowbit.functional as F
import reference as ref
from backends import require_dtype


def _data(rng, shape, dtype="float32", scale=4.0):
    return ref.to_dtype((rng.standard_normal(shape) * scale).astype(np.float32), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("scale_fmt", [None, "ue8m0"])
@pytest.mark.parametrize("shape, block", [((4, 256), 128), ((2, 3, 512), 128), ((5, 64), 32)])
def test_act_quant(backend, rng, dtype, scale_fmt, shape, block):
    require_dtype(backend, dtype)
    require_dtype(backend, "float8_e4m3fn")
    x = _data(rng, shape, dtype)
    x.reshape(-1, block)[0] = 0  # an all-zero block: s = 1e-4 / 448, codes 0
    y, s = F.act_quant(backend.array(x, dtype), block_size=block, scale_fmt=scale_fmt)
    want_y, want_s = ref.act_quant(x, block, scale_fmt == "ue8m0")
    assert backend.is_native(y) and backend.is_native(s)
    assert tuple(y.shape) == shape and tuple(s.shape) == shape[:-1] + (shape[-1] // block,)
    np.testing.assert_array_equal(backend.numpy(s), want_s)
    np.testing.assert_array_equal(backend.numpy(y), want_y)


def test_act_quant_output_dtype_numpy(rng):
    y, _ = F.act_quant(_data(rng, (2, 128)))
    assert y.dtype.name in ("float8_e4m3fn", "uint8")


def test_act_quant_errors(rng):
    x = _data(rng, (2, 100))
    with pytest.raises(ValueError, match="act_quant"):
        F.act_quant(x)
    with pytest.raises(ValueError, match="scale_fmt must be None or 'ue8m0'"):
        F.act_quant(_data(rng, (2, 128)), scale_fmt="e8m0")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(256, 384), (130, 200), (7, 129)])
def test_weight_quant_dequant(backend, rng, dtype, shape):
    require_dtype(backend, dtype)
    require_dtype(backend, "float8_e4m3fn")
    w = _data(rng, shape, dtype, scale=0.05)
    y, s = F.weight_quant(backend.array(w, dtype))
    want_y, want_s = ref.weight_quant(w)
    assert tuple(s.shape) == (-(-shape[0] // 128), -(-shape[1] // 128))
    np.testing.assert_array_equal(backend.numpy(s), want_s)
    np.testing.assert_array_equal(backend.numpy(y), want_y)

    back = F.weight_dequant(y, s, dtype="float32")
    assert backend.is_native(back) and tuple(back.shape) == shape
    np.testing.assert_array_equal(backend.numpy(back), ref.weight_dequant(want_y, want_s))


def test_weight_dequant_from_uint8_bits_and_dtypes(rng):
    w = _data(rng, (200, 300), scale=0.1)
    want_y, want_s = ref.weight_quant(w)
    out = F.weight_dequant(want_y, want_s)  # uint8 bits read as float8_e4m3fn
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, ref.weight_dequant(want_y, want_s))
    half = F.weight_dequant(want_y, want_s, dtype=np.float16)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half.astype(np.float32), ref.to_dtype(ref.weight_dequant(want_y, want_s), "float16"))
    with pytest.raises(ValueError, match="weight_dequant"):
        F.weight_dequant(want_y, want_s[:1])
    with pytest.raises(TypeError, match=r"^weight_dequant: x dtype must be float8_e4m3fn \(or uint8 holding its bits; got float32\)$"):
        F.weight_dequant(w, want_s)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("threshold", [0.0, 6.0])
def test_int8_vectorwise(backend, rng, dtype, threshold):
    require_dtype(backend, dtype)
    a = _data(rng, (3, 17, 96), dtype, scale=2.0)
    a[0, 3, :] = 0  # an all-zero row
    a[1, 2, 5] = 20.0
    a[2, 9, 40] = -7.5
    q, stats, cols = F.int8_vectorwise_quant(backend.array(a, dtype), threshold=threshold)
    want_q, want_stats, want_cols = ref.int8_vectorwise_quant(a, threshold)
    assert backend.is_native(q) and tuple(q.shape) == a.shape
    np.testing.assert_array_equal(backend.numpy(q), want_q)
    np.testing.assert_array_equal(backend.numpy(stats), want_stats)
    if threshold == 0:
        assert cols is None
    else:
        assert backend.is_native(cols)
        np.testing.assert_array_equal(backend.numpy(cols), want_cols)
        assert 5 in want_cols and 40 in want_cols

    back = F.int8_vectorwise_dequant(q, stats)
    assert backend.is_native(back)
    np.testing.assert_array_equal(backend.numpy(back), ref.int8_vectorwise_dequant(want_q, want_stats))


def test_int8_dequant_dtype_and_errors(rng):
    a = _data(rng, (4, 32))
    q, stats, _ = F.int8_vectorwise_quant(a)
    assert F.int8_vectorwise_dequant(q, stats, dtype=np.float16).dtype == np.float16
    with pytest.raises(ValueError, match="row_stats must have 4 elements"):
        F.int8_vectorwise_dequant(q, stats[:3])
    with pytest.raises(ValueError, match="threshold must be finite and >= 0"):
        F.int8_vectorwise_quant(a, threshold=-1.0)
