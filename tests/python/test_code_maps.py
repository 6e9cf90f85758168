"""Code maps, 4-bit tables and quantiles against the references of docs/formats.md."""

import numpy as np
import pytest

import lowbit
import lowbit.functional as F
import reference as ref
from backends import require_dtype


def _close(got, want, atol=0.0):
    """Bit-exact by default: the references replay bitsandbytes' float32 arithmetic."""
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


@pytest.mark.parametrize("signed, max_exponent_bits", [(True, 7), (False, 7), (True, 5), (True, 4)])
def test_dynamic_map(signed, max_exponent_bits):
    _close(F.create_dynamic_map(signed, max_exponent_bits), ref.dynamic_map(signed, max_exponent_bits))


def test_dynamic_map_defaults_are_bitsandbytes_default_code():
    m = F.create_dynamic_map()
    assert m.shape == (256,) and np.all(np.diff(m) >= 0)
    assert m[0] == np.float32(-0.992968738) and m[127] == 0 and m[254] == np.float32(0.992968738) and m[255] == 1
    assert np.count_nonzero(m == 0) == 1
    with pytest.raises(ValueError, match="create_dynamic_map"):
        F.create_dynamic_map(signed=False, max_exponent_bits=5)  # bitsandbytes asserts too


@pytest.mark.parametrize("signed, total_bits, add_zero", [(True, 8, True), (False, 8, True), (True, 8, False),
                                                          (False, 8, False), (True, 4, True), (False, 4, True)])
def test_linear_map(signed, total_bits, add_zero):
    _close(F.create_linear_map(signed, total_bits, add_zero), ref.linear_map(signed, total_bits, add_zero))


@pytest.mark.parametrize("offset, use_extra_value", [(0.9677083, True), (0.9677083, False), (0.99, True)])
def test_normal_map(offset, use_extra_value):
    _close(F.create_normal_map(offset, use_extra_value), ref.normal_map(offset, use_extra_value))


@pytest.mark.parametrize("args", [(True, 5, 2, 8), (True, 4, 3, 8), (False, 5, 3, 8), (True, 2, 1, 4)])
def test_fp8_map(args):
    _close(F.create_fp8_map(*args), ref.fp8_map(*args))


def test_code_map_errors_carry_the_message():
    with pytest.raises(ValueError, match="create_dynamic_map: total_bits"):
        F.create_dynamic_map(total_bits=9)
    with pytest.raises(ValueError, match="create_fp8_map"):
        F.create_fp8_map(True, 5, 5, 8)
    with pytest.raises(ValueError, match="offset"):
        F.create_normal_map(offset=0.2)


@pytest.mark.parametrize(
    "name, table", [("nf4", ref.NF4), ("fp4", ref.FP4), ("int4", ref.INT4), ("fp4_e2m1", ref.FP4_E2M1)]
)
def test_4bit_tables(name, table):
    got = F.get_4bit_type(name)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (16,)
    np.testing.assert_allclose(got, table, rtol=0, atol=1e-7)


def test_af4_needs_blocksize_64():
    assert F.get_4bit_type("af4", blocksize=64).shape == (16,)
    with pytest.raises(ValueError, match="64"):
        F.get_4bit_type("af4", blocksize=128)
    with pytest.raises(ValueError, match=r"^get_4bit_type: typename must be one of nf4, fp4, int4, af4, fp4_e2m1 \(got 'nf5'\)$"):
        F.get_4bit_type("nf5")


def test_get_4bit_type_device(backend):
    """device=an array: the table comes back in that array's framework and device."""
    like = backend.array(np.zeros(4, np.float32))
    got = F.get_4bit_type("nf4", device=like)
    assert backend.is_native(got)
    np.testing.assert_allclose(backend.numpy(got), ref.NF4, atol=1e-7)


def test_get_4bit_type_device_strings():
    assert isinstance(F.get_4bit_type("nf4", device="cpu"), np.ndarray)
    with pytest.raises(ValueError, match="device"):
        F.get_4bit_type("nf4", device="tpu")
    with pytest.raises(TypeError, match="device"):
        F.get_4bit_type("nf4", device=3.5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_estimate_quantiles(backend, rng, dtype):
    require_dtype(backend, dtype)
    x = ref.to_dtype(rng.standard_normal(5000).astype(np.float32), dtype)
    got = F.estimate_quantiles(backend.array(x, dtype))
    assert backend.is_native(got)
    np.testing.assert_allclose(backend.numpy(got), ref.estimate_quantiles(x), rtol=1e-6, atol=1e-7)


def test_estimate_quantiles_offset_and_out(rng):
    x = rng.uniform(-3, 7, size=(40, 25)).astype(np.float32)
    np.testing.assert_allclose(F.estimate_quantiles(x, offset=0.02), ref.estimate_quantiles(x, 0.02), rtol=1e-6)
    out = np.zeros(256, np.float32)
    assert F.estimate_quantiles(x, out=out) is out
    np.testing.assert_allclose(out, ref.estimate_quantiles(x), rtol=1e-6)
    # num_quantiles < 256 with the default offset: offset 1/(2n), n of the 256 picked.
    q = F.estimate_quantiles(x, num_quantiles=255)
    want = ref.estimate_quantiles(x, 1 / 510)[np.linspace(0, 255, 255).astype(np.int64)]
    np.testing.assert_allclose(q, want, rtol=1e-6)


def test_estimate_quantiles_errors():
    with pytest.raises(ValueError, match="at least 256"):
        F.estimate_quantiles(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="num_quantiles"):
        F.estimate_quantiles(np.zeros(300, np.float32), num_quantiles=300)
    with pytest.raises(ValueError, match="out= needs num_quantiles == 256"):
        F.estimate_quantiles(np.zeros(300, np.float32), out=np.zeros(256, np.float32), num_quantiles=16)


def test_create_quantile_map(backend, rng):
    x = rng.standard_normal(4096).astype(np.float32)
    got = F.create_quantile_map(backend.array(x))
    assert backend.is_native(got)
    np.testing.assert_allclose(backend.numpy(got), ref.quantile_map(x), rtol=1e-6, atol=1e-7)


def test_quantile_map_quantizes(rng):
    """A quantile map is a valid code for quantize_blockwise (sorted)."""
    x = rng.standard_normal(4096).astype(np.float32)
    code = lowbit.create_quantile_map(x)
    q, state = lowbit.quantize_blockwise(x, code=code, blocksize=256)
    want, _ = ref.quantize_blockwise(x, code, 256)
    np.testing.assert_array_equal(q, want)
