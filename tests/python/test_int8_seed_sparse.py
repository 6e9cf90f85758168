"""bitsandbytes' older int8 names: batched_igemm, the vector-wise quantization types, dequant_min_max, and
the COO / CSR / CSC tensors with double_quant, coo2csr, coo2csc, spmm_coo and spmm_coo_very_sparse."""

import numpy as np
import pytest

import lowbit
import lowbit.functional as F


def _devices():
    torch = pytest.importorskip("torch")
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() and lowbit.cuda_available() else [])


def test_batched_igemm_is_the_exact_batched_product():
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (3, 5, 40), dtype=np.int8)
    B = rng.integers(-128, 128, (3, 40, 7), dtype=np.int8)
    want = np.einsum("bnk,bkm->bnm", A.astype(np.int64), B.astype(np.int64))
    np.testing.assert_array_equal(F.batched_igemm(A, B), want)
    np.testing.assert_array_equal(F.igemm(A, B), want)  # igemm's 3-D x 3-D batched case
    At, Bt = np.ascontiguousarray(A.transpose(0, 2, 1)), np.ascontiguousarray(B.transpose(0, 2, 1))
    np.testing.assert_array_equal(F.batched_igemm(At, Bt, transposed_A=True, transposed_B=True), want)
    out = np.zeros((3, 5, 7), np.int32)
    assert F.batched_igemm(A, B, out=out) is out
    np.testing.assert_array_equal(out, want)
    assert F.check_matmul(A, B, None, False, False) == (3, 5, 7)
    with pytest.raises(ValueError, match="batched_igemm: expected 3-D A and B"):
        F.batched_igemm(A[0], B[0])
    with pytest.raises(ValueError, match="check_matmul: dimensions do not chain"):
        F.batched_igemm(A, B[:, :39])


def test_vectorwise_types_are_the_seeds_formulas():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 24, generator=g).half()
    C = 127.0
    q, m = F.vectorwise_quant(x, dim=1, quant_type="vector")
    m_want = torch.amax(torch.abs(x), dim=1, keepdim=True)
    assert torch.equal(m, m_want) and torch.equal(q, torch.round(x * (C / m_want)).to(torch.int8))
    q, m = F.vectorwise_quant(x, quant_type="linear")
    assert torch.equal(q, torch.round(x / torch.abs(x).max().float() * 127).to(torch.int8))
    xf = x.float()
    dyna = torch.amax(xf, dim=0, keepdim=True) - torch.amin(xf, dim=0, keepdim=True)
    qx = 255.0 / dyna
    zpx = torch.round(torch.amin(xf, dim=0, keepdim=True) * qx)
    q, s = F.vectorwise_quant(x, dim=0, quant_type="vector-zeropoint")
    assert torch.equal(s, qx) and torch.equal(q, torch.round(qx * xf - zpx) + zpx)
    before = x.clone()
    q, m = F.vectorwise_quant(x, quant_type="truncated-vector")
    assert torch.equal(x, before)  # the seed clipped x in place; lowbit leaves it
    m_want = torch.amax(torch.abs(x), dim=1, keepdim=True) * 0.7
    clipped = torch.where(torch.abs(x) > m_want, m_want * torch.sign(x), x)
    assert torch.equal(m, m_want) and torch.equal(q, torch.round(clipped / m_want * C).to(torch.int8))
    # dequantization and the product's dequantization
    q, m = F.vectorwise_quant(x, quant_type="vector")
    assert torch.equal(F.vectorwise_dequant(q, m), (q / C * m).float())
    y = torch.randn(24, 5, generator=g).half()
    qy, my = F.vectorwise_quant(y, dim=0, quant_type="vector")
    prod = q.float() @ qy.float()
    got = F.vectorwise_mm_dequant(prod, m, my, dtype=torch.float16, quant_type="vector")
    assert torch.equal(got, (prod * (m / C) * (my / C)).half())
    assert ((got.float() - x.float() @ y.float()).norm() / (x.float() @ y.float()).norm()).item() < 0.05
    with pytest.raises(ValueError, match="vectorwise_quant: quant_type must be one of"):
        F.vectorwise_quant(x, quant_type="cubic")
    with pytest.raises(ValueError, match="vectorwise_dequant: quant_type must be one of vector"):
        F.vectorwise_dequant(q, m, quant_type="row")


def test_vectorwise_quant_on_numpy():
    x = np.linspace(-3, 5, 40, dtype=np.float32).reshape(4, 10)
    q, m = F.vectorwise_quant(x, dim=1, quant_type="row")
    np.testing.assert_array_equal(m, np.abs(x).max(axis=1, keepdims=True))
    np.testing.assert_array_equal(q, np.round(x * (127.0 / m)).astype(np.int8))


def test_dequant_min_max_is_the_seeds_formula():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(2)
    xq = torch.randint(-1000, 1000, (4, 6), generator=g).int()
    B = torch.randn(6, 8, generator=g)  # [N, K]: the offset sums each output's weights
    SA = torch.tensor([0.5, 2.0])
    SB = torch.rand(6, generator=g) + 0.5
    want = (xq.float() * (SB / 127) * (SA[1] / 127) + B.float().t().sum(0) * (SA[0] + SA[1])).half()
    assert torch.equal(F.dequant_min_max(xq, None, B, SA, SB), want)


def _dense(coo, np_out=True):
    d = np.zeros((coo.rows, coo.cols), np.float32)
    r, c, v = (np.asarray(t.cpu() if hasattr(t, "cpu") else t) for t in (coo.rowidx, coo.colidx, coo.values))
    np.add.at(d, (r, c), v.astype(np.float32))
    return d


def test_double_quant_returns_the_outliers_as_coo():
    for dev in _devices():
        torch = pytest.importorskip("torch")
        g = torch.Generator().manual_seed(3)
        a = (torch.randn(6, 40, generator=g) * 2).clamp(-5, 5).half()
        a[2, 7], a[4, 1], a[4, 30] = 30.0, -12.0, 9.0
        out_row, out_col, rs, cs, coo = F.double_quant(a.to(dev), threshold=6.0)
        q_row, q_col, rs2, cs2, _ = F.int8_double_quant(a.to(dev), threshold=6.0)
        assert torch.equal(out_row, q_row) and torch.equal(out_col, q_col) and torch.equal(rs, rs2)
        assert coo.rows == 6 and coo.cols == 40 and coo.nnz == 3
        assert coo.rowidx.tolist() == [2, 4, 4] and coo.colidx.tolist() == [7, 1, 30]
        assert coo.values.tolist() == [30.0, -12.0, 9.0] and coo.values.device.type == dev
        assert F.double_quant(a.to(dev))[4] is None  # threshold 0
        assert F.double_quant(a.clamp(-1, 1).to(dev), threshold=6.0)[4] is None  # nothing reaches it


def test_coo2csr_and_coo2csc_compress_the_same_matrix():
    rng = np.random.default_rng(4)
    rows, cols, nnz = 7, 9, 20
    r = rng.integers(0, rows, nnz).astype(np.int32)
    c = rng.integers(0, cols, nnz).astype(np.int32)
    v = rng.standard_normal(nnz).astype(np.float16)
    coo = F.COOSparseTensor(rows, cols, nnz, r, c, v)
    csr, csc = F.coo2csr(coo), F.coo2csc(coo)
    dense = _dense(coo)
    from_csr = np.zeros_like(dense)
    for i in range(rows):
        for j in range(csr.rowptr[i], csr.rowptr[i + 1]):
            from_csr[i, csr.colidx[j]] += np.float32(csr.values[j])
    from_csc = np.zeros_like(dense)
    for j in range(cols):
        for i in range(csc.colptr[j], csc.colptr[j + 1]):
            from_csc[csc.rowidx[i], j] += np.float32(csc.values[i])
    np.testing.assert_array_equal(from_csr, dense)
    np.testing.assert_array_equal(from_csc, dense)
    assert csr.rowptr[-1] == nnz and csc.colptr[-1] == nnz
    z = F.coo_zeros(3, 4, 5, "cpu")
    assert z.nnz == 5 and int(z.values.abs().sum()) == 0 and str(z.rowidx.dtype) == "torch.int32"
    with pytest.raises(TypeError, match="COOSparseTensor: rowidx must be int32"):
        F.COOSparseTensor(rows, cols, nnz, r.astype(np.int64), c, v)
    with pytest.raises(ValueError, match=r"COOSparseTensor: values must have shape \[20\]"):
        F.COOSparseTensor(rows, cols, nnz, r, c, v[:3])
    with pytest.raises(TypeError, match="coo2csr: cooA must be a COOSparseTensor"):
        F.coo2csr(dense)


def test_spmm_coo_is_the_sparse_product():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    rows, cols, nnz, N = 6, 40, 12, 33
    r = np.sort(rng.integers(0, rows, nnz)).astype(np.int32)
    c = rng.integers(0, cols, nnz).astype(np.int32)
    v = rng.standard_normal(nnz).astype(np.float16)
    B = rng.standard_normal((cols, N)).astype(np.float16)
    want = _dense(F.COOSparseTensor(rows, cols, nnz, r, c, v)) @ B.astype(np.float32)
    got = F.spmm_coo(F.COOSparseTensor(rows, cols, nnz, r, c, v), B)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)
    for dev in _devices():
        coo = F.COOSparseTensor(rows, cols, nnz, *(torch.from_numpy(t).to(dev) for t in (r, c, v)))
        Bt = torch.from_numpy(B).to(dev)
        got = F.spmm_coo(coo, Bt)
        np.testing.assert_allclose(got.float().cpu().numpy(), want, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(F.spmm_coo(coo, Bt.t().contiguous().t()).float().cpu().numpy(), want,
                                   rtol=2e-3, atol=2e-3)  # a transposed view of B
        # very sparse: added into out; an int8 B with its column statistics
        out = torch.ones(rows, N, dtype=torch.float16, device=dev)
        assert F.spmm_coo_very_sparse(coo, Bt, out=out) is out
        np.testing.assert_allclose(out.float().cpu().numpy(), want + 1, rtol=2e-3, atol=3e-3)
        Bq = torch.from_numpy(rng.integers(-127, 128, (cols, N)).astype(np.int8)).to(dev)
        stats = torch.from_numpy((rng.random(N) * 3 + 0.1).astype(np.float32)).to(dev)
        got = F.spmm_coo_very_sparse(coo, Bq, dequant_stats=stats)
        wq = Bq.float().cpu().numpy() * stats.cpu().numpy()[None, :] / 127.0
        np.testing.assert_allclose(got.float().cpu().numpy(), _dense(coo) @ wq, rtol=2e-3, atol=3e-3)
    coo = F.COOSparseTensor(rows, cols, nnz, r, c, v)
    with pytest.raises(ValueError, match="spmm_coo: B must be 2-D with 40 rows"):
        F.spmm_coo(coo, B[:39])
    with pytest.raises(TypeError, match="spmm_coo_very_sparse: B must be float16 or int8"):
        F.spmm_coo_very_sparse(coo, B.astype(np.float32))
    with pytest.raises(ValueError, match="spmm_coo_very_sparse: dequant_stats applies to an int8 B"):
        F.spmm_coo_very_sparse(coo, B, dequant_stats=np.ones(N, np.float32))
