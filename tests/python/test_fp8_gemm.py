"""DeepSeek-V3 block-scaled FP8 GEMM and the grouped MoE GEMMs (docs/fp8_gemm.md)."""

import numpy as np
import pytest

import lowbit.functional as F
import reference as ref
from backends import require_dtype

B = 128


def _blocks(n):
    return -(-n // B)


def _codes(rng, shape):
    """Random e4m3 values (no NaN), as float32 (exactly representable)."""
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    codes = np.where((codes & 0x7F) == 0x7F, codes ^ 1, codes).astype(np.uint8)
    return ref.e4m3_decode(codes)


def _scales(rng, shape):
    return (np.exp2(rng.uniform(-2, 2, size=shape)) / (16 * 448)).astype(np.float32)


def _oracle(a, a_s, b, b_s, bias=None):
    """float64 [rows, N] and the magnitude of each element's terms."""
    rows, K = a.shape
    N = b.shape[0]
    out = np.zeros((rows, N))
    mag = np.zeros((rows, N))
    for j in range(_blocks(K)):
        ka = a[:, j * B:(j + 1) * B].astype(np.float64)
        kb = b[:, j * B:(j + 1) * B].astype(np.float64)
        s = a_s[:, j:j + 1].astype(np.float64) * np.repeat(b_s[:, j].astype(np.float64), B)[None, :N]
        out += (ka @ kb.T) * s
        mag += (np.abs(ka) @ np.abs(kb).T) * s
    if bias is not None:
        out += bias
        mag += np.abs(bias)
    return out, mag


# Error bound per unit of the terms' magnitude: fp32 sums on the CPU; on a GPU
# the FP8 tensor cores' narrower accumulation within a K block
# (kFp8TensorCoreError in include/lowbit/ops/fp8_gemm.h).
BOUND = {"cpu": 1e-5, "cuda": 1 / 512}


def _check(got, want, mag, dtype, device="cpu"):
    eps = {"float32": 1e-6, "float16": 1 / 2048, "bfloat16": 1 / 256}[dtype]
    tiny = 2.0**-24 if dtype == "float16" else 1e-30
    tol = BOUND[device] * mag + eps * np.abs(want) + tiny
    bad = np.abs(got.astype(np.float64) - want) > tol
    assert not bad.any(), f"{bad.sum()} elements off; first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lead, N, K", [((1,), 1, 16), ((7,), 130, 272), ((2, 3), 256, 128), ((0,), 64, 128)])
def test_fp8_gemm_matches_float64(backend, rng, out_dtype, lead, N, K):
    require_dtype(backend, out_dtype)
    require_dtype(backend, "float8_e4m3fn")
    a = _codes(rng, lead + (K,))
    a_s = _scales(rng, lead + (_blocks(K),))
    b = _codes(rng, (N, K))
    b_s = _scales(rng, (_blocks(N), _blocks(K)))
    bias = rng.standard_normal(N).astype(np.float32)
    out = F.fp8_gemm(backend.array(a, "float8_e4m3fn"), backend.array(a_s), backend.array(b, "float8_e4m3fn"),
                     backend.array(b_s), out_dtype=out_dtype, bias=backend.array(bias))
    assert backend.is_native(out)
    assert tuple(out.shape) == lead + (N,)
    want, mag = _oracle(a.reshape(-1, K), a_s.reshape(-1, _blocks(K)), b, b_s, bias)
    _check(backend.numpy(out).reshape(-1, N), want, mag, out_dtype, backend.device)


def test_fp8_gemm_from_act_quant_and_weight_quant(rng):
    """The path of a DeepSeek layer: activations through act_quant, a checkpoint weight and its
    weight_scale_inv, fp8_gemm; close to the float32 product."""
    x = rng.standard_normal((16, 512)).astype(np.float32)
    w = (rng.standard_normal((300, 512)) * 0.05).astype(np.float32)
    y, s = F.act_quant(x)
    wq, ws = F.weight_quant(w)
    out = F.fp8_gemm(y, s, wq, ws)
    assert out.dtype == np.float32
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    assert np.linalg.norm(out - exact) / np.linalg.norm(exact) < 0.06


def test_fp8_gemm_uint8_bits_and_out(rng):
    a = _codes(rng, (5, 256))
    b = _codes(rng, (40, 256))
    a_s, b_s = _scales(rng, (5, 2)), _scales(rng, (1, 2))
    out = np.full((5, 40), np.nan, np.float32)
    result = F.fp8_gemm(ref.e4m3_encode(a), a_s, ref.e4m3_encode(b), b_s, out=out)
    assert result is out
    want, mag = _oracle(a, a_s, b, b_s)
    _check(out, want, mag, "float32")


def test_fp8_grouped_gemm_contiguous(backend, rng):
    require_dtype(backend, "float8_e4m3fn")
    E, N, K = 3, 136, 384
    ids = np.array([0, 0, -1, 2, 2, 1, 1, 1, -1, 0], np.int32)
    a = _codes(rng, (len(ids), K))
    a_s = _scales(rng, (len(ids), _blocks(K)))
    b = _codes(rng, (E, N, K))
    b_s = _scales(rng, (E, _blocks(N), _blocks(K)))
    out = backend.numpy(F.fp8_grouped_gemm_contiguous(
        backend.array(a, "float8_e4m3fn"), backend.array(a_s), backend.array(b, "float8_e4m3fn"),
        backend.array(b_s), backend.array(ids), out_dtype="float32"))
    for m, e in enumerate(ids):
        if e < 0:
            assert (out[m] == 0).all()
            continue
        want, mag = _oracle(a[m:m + 1], a_s[m:m + 1], b[e], b_s[e])
        _check(out[m:m + 1], want, mag, "float32", backend.device)


def test_fp8_grouped_gemm_masked(backend, rng):
    require_dtype(backend, "float8_e4m3fn")
    E, max_m, N, K = 3, 4, 72, 256
    counts = np.array([2, 0, 4], np.int32)
    a = _codes(rng, (E, max_m, K))
    a_s = _scales(rng, (E, max_m, _blocks(K)))
    b = _codes(rng, (E, N, K))
    b_s = _scales(rng, (E, _blocks(N), _blocks(K)))
    out = backend.numpy(F.fp8_grouped_gemm_masked(
        backend.array(a, "float8_e4m3fn"), backend.array(a_s), backend.array(b, "float8_e4m3fn"),
        backend.array(b_s), backend.array(counts), out_dtype="float32"))
    assert out.shape == (E, max_m, N)
    for e in range(E):
        c = counts[e]
        want, mag = _oracle(a[e, :c], a_s[e, :c], b[e], b_s[e])
        _check(out[e, :c], want, mag, "float32", backend.device)
        assert (out[e, c:] == 0).all()


def test_fp8_gemm_errors(rng):
    a = ref.e4m3_encode(_codes(rng, (4, 256)))
    b = ref.e4m3_encode(_codes(rng, (40, 256)))
    a_s, b_s = _scales(rng, (4, 2)), _scales(rng, (1, 2))
    with pytest.raises(TypeError, match="fp8_gemm: a dtype must be float8_e4m3fn"):
        F.fp8_gemm(a.astype(np.float32), a_s, b, b_s)
    with pytest.raises(ValueError, match=r"fp8_gemm: b_s must have shape \[1, 2\]"):
        F.fp8_gemm(a, a_s, b, _scales(rng, (2, 2)))
    with pytest.raises(ValueError, match="fp8_gemm: K"):
        F.fp8_gemm(a[:, :100], a_s, b[:, :100], b_s)
    ids = np.array([0, 1, 5, -1], np.int32)
    with pytest.raises(ValueError, match=r"m_indices\[2\] is 5"):
        F.fp8_grouped_gemm_contiguous(a, a_s, b.reshape(1, 40, 256).repeat(2, 0), b_s.reshape(1, 1, 2).repeat(2, 0), ids)
    with pytest.raises(TypeError, match="fp8_gemm: out dtype must be one of"):
        F.fp8_gemm(a, a_s, b, b_s, out_dtype="int8")


def test_fp8_gemm_config_reaches_the_backend(rng):
    a = ref.e4m3_encode(_codes(rng, (4, 256)))
    b = ref.e4m3_encode(_codes(rng, (40, 256)))
    a_s, b_s = _scales(rng, (4, 2)), _scales(rng, (1, 2))
    # The CPU backend has no configs: any name comes back from it, named.
    with pytest.raises(ValueError, match="fp8_gemm: config 'wgmma_e4m3_m128_n128_k128_s5' is not a cpu kernel config"):
        F.fp8_gemm(a, a_s, b, b_s, config="wgmma_e4m3_m128_n128_k128_s5")
    ids = np.zeros(4, np.int32)
    with pytest.raises(ValueError, match="fp8_grouped_gemm_contiguous: config 'x' is not a cpu kernel config"):
        F.fp8_grouped_gemm_contiguous(a, a_s, b.reshape(1, 40, 256), b_s.reshape(1, 1, 2), ids, config="x")
    with pytest.raises(ValueError, match="fp8_grouped_gemm_masked: config 'x' is not a cpu kernel config"):
        F.fp8_grouped_gemm_masked(a.reshape(1, 4, 256), a_s.reshape(1, 4, 2), b.reshape(1, 40, 256),
                                  b_s.reshape(1, 1, 2), np.array([4], np.int32), config="x")
    assert F.fp8_gemm(a, a_s, b, b_s, config="").shape == (4, 40)
