"""The int8 GEMMs from Python (bitsandbytes' int8_linear_matmul, int8_mm_dequant, int8_scaled_mm):
exact int32 products against NumPy's int64 ones, the dequantization formula bit for bit against NumPy
float32 arithmetic, the fused op against the two steps, out= buffers and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
from lowbit import functional as F

SHAPES = [((1,), 1, 1), ((7,), 130, 272), ((3, 5), 64, 100), ((40,), 67, 65), ((2,), 3, 4099), ((0,), 8, 16)]


def _int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _dequant(c, rs, cs, bias, dtype):
    """The documented formula in float32, in its order, rounded once to dtype."""
    v = c.astype(np.float32) * (rs.reshape(-1, 1) * cs.reshape(1, -1)).reshape(c.shape)
    v = v * np.float32(1.0 / (127.0 * 127.0))
    if bias is not None:
        v = v + bias.astype(np.float32)
    return v.astype(dtype)


@pytest.mark.parametrize("lead,N,K", SHAPES)
def test_linear_matmul_is_exact(lead, N, K):
    rng = np.random.default_rng(K)
    a, b = _int8(rng, (*lead, K)), _int8(rng, (N, K))
    got = F.int8_linear_matmul(a, b)
    assert got.dtype == np.int32 and got.shape == (*lead, N)
    np.testing.assert_array_equal(got, (a.astype(np.int64) @ b.astype(np.int64).T).astype(np.int32))
    out = np.full((*lead, N), 7, dtype=np.int32)
    assert F.int8_linear_matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("lead,N,K", SHAPES)
def test_mm_dequant_and_scaled_mm_are_the_formula(lead, N, K, dtype):
    rng = np.random.default_rng(N + K)
    a, b = _int8(rng, (*lead, K)), _int8(rng, (N, K))
    rows = int(np.prod(lead))
    rs = rng.uniform(0.01, 4.0, rows).astype(np.float32)
    cs = rng.uniform(0.01, 4.0, N).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float16)
    c = F.int8_linear_matmul(a, b)
    want = _dequant(c, rs, cs, bias, dtype)
    name = np.dtype(dtype).name
    got = F.int8_mm_dequant(c, rs, cs, bias=bias, dtype=name)
    assert got.dtype == dtype and got.shape == (*lead, N)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    fused = F.int8_scaled_mm(a, b, rs, cs, bias=bias, dtype=name)
    np.testing.assert_array_equal(fused.view(np.uint8), want.view(np.uint8))
    out = np.empty((*lead, N), dtype=dtype)
    assert F.int8_scaled_mm(a, b, rs, cs, bias=bias, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def test_mm_dequant_defaults_to_float16_as_bitsandbytes():
    rng = np.random.default_rng(0)
    c = rng.integers(-(2**20), 2**20, size=(4, 6), dtype=np.int32)
    rs, cs = np.ones(4, np.float32), np.ones(6, np.float32)
    assert F.int8_mm_dequant(c, rs, cs).dtype == np.float16
    assert F.int8_scaled_mm(_int8(rng, (4, 8)), _int8(rng, (6, 8)), rs, cs).dtype == np.float16


def test_torch_bfloat16_out():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (5, 33), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (9, 33), dtype=torch.int8, generator=g)
    rs, cs = torch.rand(5, generator=g) + 0.1, torch.rand(9, generator=g) + 0.1
    got = lowbit.int8_scaled_mm(a, b, rs, cs, dtype=torch.bfloat16)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    c = a.long() @ b.long().t()
    want = (c.float() * (rs[:, None] * cs[None, :]) * torch.tensor(1.0 / 16129.0, dtype=torch.float32)).bfloat16()
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert torch.equal(lowbit.int8_linear_matmul(a, b), c.int())


def test_errors_name_the_argument():
    rng = np.random.default_rng(1)
    a, b = _int8(rng, (4, 32)), _int8(rng, (8, 32))
    with pytest.raises(ValueError, match="int8_linear_matmul: dtype must be int32"):
        F.int8_linear_matmul(a, b, dtype="int64")
    with pytest.raises(ValueError, match="b's last dimension"):
        F.int8_linear_matmul(a, _int8(rng, (8, 31)))
    with pytest.raises(TypeError, match="int8_linear_matmul.*a.*int8.*float32"):
        F.int8_linear_matmul(a.astype(np.float32), b)
    c = F.int8_linear_matmul(a, b)
    with pytest.raises(ValueError, match=r"int8_mm_dequant: row_stats must have shape \[4\]"):
        F.int8_mm_dequant(c, np.ones(3, np.float32), np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"int8_scaled_mm: bias must have shape \[8\]"):
        F.int8_scaled_mm(a, b, np.ones(4, np.float32), np.ones(8, np.float32), bias=np.ones(7, np.float32))


def _devices():
    torch = pytest.importorskip("torch")
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() and lowbit.cuda_available() else [])


@pytest.mark.parametrize("threshold", [0.0, 6.0])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_int8_linear_is_the_steps_and_near_the_float_product(dtype, threshold):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    K, N = 256, 96
    w = torch.randn(N, K, generator=g)
    CB, SCB, _ = F.int8_vectorwise_quant(w)
    a = torch.randn(3, 9, K, generator=g)
    a[..., [5, 100, 200]] *= 15.0  # outlier features
    a = a.to(getattr(torch, dtype))
    bias = torch.randn(N, generator=g).half()
    want_f = a.float() @ (CB.float() * SCB[:, None] / 127.0).T + bias.float()
    results = {}
    for dev in _devices():
        out = F.int8_linear(a.to(dev), CB.to(dev), SCB.to(dev), bias.to(dev), threshold=threshold)
        assert out.dtype == a.dtype and out.shape == (3, 9, N) and out.device.type == dev
        results[dev] = out.cpu()
        # The steps: quantize, fused GEMM, then the outlier columns into the same output.
        q, rs, cols = F.int8_vectorwise_quant(a.to(dev), threshold=threshold)
        steps = F.int8_scaled_mm(q, CB.to(dev), rs, SCB.to(dev), bias.to(dev), dtype=a.dtype)
        if threshold > 0:
            assert cols is not None and {5, 100, 200} <= set(cols.tolist())
            mask = torch.zeros(K, dtype=torch.uint8, device=dev)
            mask[cols] = 1
            assert F.int8_linear_outliers(a.to(dev), mask, CB.to(dev), SCB.to(dev), steps) is steps
        assert torch.equal(steps.cpu(), results[dev])
    err = ((results["cpu"].float() - want_f).norm() / want_f.norm()).item()
    assert err < (0.01 if threshold > 0 else 0.05)
    if "cuda" in results:
        assert torch.equal(results["cpu"], results["cuda"])


def test_int8_linear_configs_give_the_cpus_bits():
    torch = pytest.importorskip("torch")
    if "cuda" not in _devices():
        pytest.skip("no CUDA device: the configs are the CUDA kernels'")
    g = torch.Generator().manual_seed(2)
    K, N = 512, 72
    CB, SCB, _ = F.int8_vectorwise_quant(torch.randn(N, K, generator=g))
    for M in (4, 40):  # the few-rows kernel by default, then the four-launch chain
        a = torch.randn(M, K, generator=g)
        a[:, [3, 300]] *= 20.0
        a = a.half()
        want = F.int8_linear(a, CB, SCB, threshold=6.0)
        configs = ["", "mma_i8_m128_n128_k128_s3"] + (["rows_i8_m16_n32_k256"] if M <= 16 else [])
        for config in configs:
            got = F.int8_linear(a.cuda(), CB.cuda(), SCB.cuda(), threshold=6.0, config=config)
            assert torch.equal(got.cpu(), want), (M, config)
    with pytest.raises(ValueError, match="rows_i8.*at most 32 rows"):
        F.int8_linear(torch.zeros(40, K, device="cuda", dtype=torch.half), CB.cuda(), SCB.cuda(), threshold=6.0,
                      config="rows_i8_m16_n32_k256")


def test_int8_linear_errors_name_the_argument():
    torch = pytest.importorskip("torch")
    CB = torch.zeros(8, 16, dtype=torch.int8)
    SCB = torch.ones(8)
    with pytest.raises(ValueError, match="int8_linear: threshold must be >= 0"):
        F.int8_linear(torch.zeros(2, 16), CB, SCB, threshold=-1.0)
    with pytest.raises(ValueError, match="int8_linear: b's last dimension"):
        F.int8_linear(torch.zeros(2, 15), CB, SCB)
    with pytest.raises(ValueError, match="int8_linear: config 'rows_i8_m16_n32_k256'"):
        F.int8_linear(torch.zeros(2, 16), CB, SCB, config="rows_i8_m16_n32_k256")  # the CPU takes none
    with pytest.raises(TypeError, match="int8_linear_outliers: out dtype must be float32"):
        F.int8_linear_outliers(torch.zeros(2, 16), torch.zeros(16, dtype=torch.uint8), CB, SCB,
                               torch.zeros(2, 8, dtype=torch.float16))


def test_double_quant_and_colrow_absmax_match_numpy():
    rng = np.random.default_rng(3)
    a = np.clip(rng.standard_normal((6, 40)) * 2, -5.0, 5.0).astype(np.float32)
    a[2, 7] = 30.0  # one outlier entry
    q_row, q_col, rs, cs, cols = F.int8_double_quant(a)
    assert cols is None
    np.testing.assert_array_equal(rs, np.abs(a).max(axis=1))
    np.testing.assert_array_equal(cs, np.abs(a).max(axis=0))
    # The columns follow the rows' rule: the transpose's row quantization.
    qt, st, _ = F.int8_vectorwise_quant(np.ascontiguousarray(a.T))
    np.testing.assert_array_equal(q_col, qt.T)
    np.testing.assert_array_equal(cs, st)
    np.testing.assert_array_equal(q_row, F.int8_vectorwise_quant(a)[0])
    # With a threshold: the outlier entry out of both statistics, its column zeroed in out_row, itself in out_col.
    q_row, q_col, rs, cs, cols = F.int8_double_quant(a, threshold=6.0)
    assert list(cols) == [7]
    masked = np.where(np.abs(a) >= 6.0, 0.0, np.abs(a))
    np.testing.assert_array_equal(rs, masked.max(axis=1))
    np.testing.assert_array_equal(cs, masked.max(axis=0))
    assert (q_row[:, 7] == 0).all() and q_col[2, 7] == 0 and q_col[3, 7] != 0
    rs2, cs2, mask = F.get_colrow_absmax(a, threshold=6.0)
    np.testing.assert_array_equal(rs2, rs)
    np.testing.assert_array_equal(cs2, cs)
    np.testing.assert_array_equal(mask, np.abs(a) >= 6.0)
    assert F.get_colrow_absmax(a)[2] is None
    with pytest.raises(ValueError, match="int8_double_quant: col_stats, row_stats, out_col and out_row"):
        F.int8_double_quant(a, row_stats=rs)
    with pytest.raises(ValueError, match="int8_colwise_quant: threshold must be finite and >= 0"):
        F.int8_colwise_quant(a, threshold=-1.0)


def test_int8_linear_grad_input_is_grad_times_the_dequantized_weight():
    rng = np.random.default_rng(5)
    N, K = 48, 40
    w = rng.standard_normal((N, K)).astype(np.float32)
    CB, SCB, _ = F.int8_vectorwise_quant(w)
    g = rng.standard_normal((2, 3, N)).astype(np.float32)
    got = F.int8_linear_grad_input(g, CB, SCB)
    assert got.shape == (2, 3, K) and got.dtype == np.float32
    wd = CB.astype(np.float32) * SCB[:, None] * np.float32(7.874015718698502e-3)
    np.testing.assert_allclose(got, g @ wd, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="int8_linear_grad_input: grad_out's last dimension"):
        F.int8_linear_grad_input(g[..., :-1].copy(), CB, SCB)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_column_quantization_and_grad_input_on_cuda_are_the_cpus(dtype):
    torch = pytest.importorskip("torch")
    if "cuda" not in _devices():
        pytest.skip("no CUDA device")
    g = torch.Generator().manual_seed(7)
    a = (torch.randn(70, 136, generator=g) * 2).to(getattr(torch, dtype))
    a[3, 5], a[60, 100] = 30.0, -9.0
    for threshold in (0.0, 6.0):
        cpu = F.int8_double_quant(a, threshold=threshold)
        gpu = F.int8_double_quant(a.cuda(), threshold=threshold)
        for want, got in zip(cpu, gpu):
            assert (want is None and got is None) or (got.device.type == "cuda" and torch.equal(want, got.cpu()))
        for want, got in zip(F.get_colrow_absmax(a, threshold=threshold),
                             F.get_colrow_absmax(a.cuda(), threshold=threshold)):
            assert (want is None and got is None) or torch.equal(want, got.cpu())
    w = torch.randn(48, 136, generator=g)
    CB, SCB, _ = F.int8_vectorwise_quant(w)
    grad = torch.randn(2, 5, 48, generator=g).to(getattr(torch, dtype))
    want = F.int8_linear_grad_input(grad, CB, SCB)
    got = F.int8_linear_grad_input(grad.cuda(), CB.cuda(), SCB.cuda())
    assert got.device.type == "cuda" and torch.equal(want, got.cpu())


def test_int8_linear_nan_in_activations_counts_as_zero():
    rng = np.random.default_rng(9)
    K, N = 64, 24
    CB, SCB, _ = F.int8_vectorwise_quant(rng.standard_normal((N, K)).astype(np.float32))
    a = rng.standard_normal((5, K)).astype(np.float32)
    a[:, 10] *= 20.0  # an outlier column
    zero = a.copy()
    zero[2, 3] = 0.0
    a[2, 3] = np.nan
    for threshold in (0.0, 6.0):
        np.testing.assert_array_equal(F.int8_linear(a, CB, SCB, threshold=threshold),
                                      F.int8_linear(zero, CB, SCB, threshold=threshold))


def test_the_older_bitsandbytes_names():
    rng = np.random.default_rng(11)
    A, B = _int8(rng, (7, 40)), _int8(rng, (40, 9))
    A64, B64 = A.astype(np.int64), B.astype(np.int64)
    np.testing.assert_array_equal(F.igemm(A, B), A64 @ B64)
    np.testing.assert_array_equal(F.igemm(A, np.ascontiguousarray(B.T).T), A64 @ B64)  # a transposed view
    A3 = _int8(rng, (2, 3, 40))
    np.testing.assert_array_equal(F.igemm(A3, B), A3.astype(np.int64) @ B64)
    X, Y = _int8(rng, (2, 3, 5)), _int8(rng, (2, 3, 6))
    np.testing.assert_array_equal(F.igemm(X, Y), np.einsum("bsi,bso->io", X.astype(np.int64), Y.astype(np.int64)))
    assert F.check_matmul(A, B, None, False, False) == (7, 9)
    assert F.check_matmul(A, A, None, False, True) == (7, 7)
    with pytest.raises(ValueError, match="check_matmul: dimensions do not chain"):
        F.check_matmul(A, A, None, False, False)
    with pytest.raises(TypeError, match="check_matmul: expected int8"):
        F.check_matmul(A.astype(np.float32), B, None, False, False)
    # igemmlt on transform's states, then mm_dequant on its state.
    W = _int8(rng, (9, 40))
    a_t, SA = F.transform(A, "col32")
    w_t, SW = F.transform(W, "col_turing")
    assert SA == ((7, 40), "col32") and a_t is A
    C, SC = F.igemmlt(a_t, w_t, SA, SW)
    np.testing.assert_array_equal(C, A64 @ W.astype(np.int64).T)
    assert SC == ((7, 9), "row")
    rs, cs = rng.uniform(0.5, 2, 7).astype(np.float32), rng.uniform(0.5, 2, 9).astype(np.float32)
    np.testing.assert_array_equal(F.mm_dequant(C, SC, rs, cs), F.int8_mm_dequant(C, rs, cs))
    np.testing.assert_array_equal(F.extract_outliers(A, SA, np.array([3, 0, 17])), A[:, [3, 0, 17]])
    t, st = F.transform(A, "row", transpose=True)
    np.testing.assert_array_equal(t, A.T)
    assert st == ((40, 7), "row")
    with pytest.raises(ValueError, match="transform: to_order must be one of"):
        F.transform(A, "col64")
