"""lowbit.sparse: bsr_dense_mm / bsr_dense_addmm on torch sparse BSR tensors and lowbit.sparse.BSR, against
the dense product in float64; out=, broadcast batches and input, beta 0 over a NaN input, and errors."""

import numpy as np
import pytest

from lowbit import sparse as S


def _block_sparse(rng, M, K, BM, BK, density, batch=()):
    """A dense float32 matrix with whole BM x BK blocks zero, the same pattern in every batch."""
    keep = rng.random((M // BM, K // BK)) < density
    mask = np.kron(keep, np.ones((BM, BK), bool))
    return (rng.standard_normal(batch + (M, K)) * mask).astype(np.float32)


def _bsr_of(d, BM, BK):
    """lowbit.sparse.BSR of a NumPy matrix (every batch holding its own blocks of the shared pattern)."""
    M, K = d.shape[-2:]
    batch = d.shape[:-2]
    blocks = d.reshape(batch + (M // BM, BM, K // BK, BK))
    nz = np.abs(blocks).reshape(-1, M // BM, BM, K // BK, BK).max(axis=(0, 2, 4)) > 0
    rows, cols = np.nonzero(nz)
    crow = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int32)
    vals = blocks[..., rows, :, cols, :]  # [nnz, *batch, BM, BK] (advanced indices first)
    vals = np.ascontiguousarray(np.moveaxis(vals, 0, len(batch)))
    tile = lambda a: np.ascontiguousarray(np.broadcast_to(a, batch + a.shape))  # noqa: E731
    return S.BSR(tile(crow), tile(cols.astype(np.int32)), vals, d.shape)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bsr_dense_mm_on_torch_bsr_is_the_dense_product(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    d = torch.from_numpy(_block_sparse(rng, 64, 96, 16, 32, 0.5)).to(getattr(torch, dtype))
    x = torch.from_numpy(rng.standard_normal((96, 24)).astype(np.float32)).to(d.dtype)
    bsr = d.to_sparse_bsr((16, 32))
    got = S.bsr_dense_mm(bsr, x)
    assert isinstance(got, torch.Tensor) and got.dtype == d.dtype and got.shape == (64, 24)
    want = d.double() @ x.double()
    mag = d.double().abs() @ x.double().abs()  # the fp32 sums' error scale: (K + 8) units of fp32 of it
    tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    assert ((got.double() - want).abs() <= tol * (want.abs() + 1) + 104 * 2.0 ** -24 * mag).all()
    out = torch.empty(64, 24, dtype=d.dtype)
    assert S.bsr_dense_mm(bsr, x, out=out) is out and torch.equal(out, got)


def test_bsr_dense_addmm_broadcasts_batches_and_input():
    rng = np.random.default_rng(2)
    d = _block_sparse(rng, 32, 48, 16, 16, 0.6, batch=(2, 1))
    x = rng.standard_normal((3, 48, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    got = S.bsr_dense_addmm(bias, _bsr_of(d, 16, 16), x, beta=0.5, alpha=-2.0)
    want = -2.0 * (d.astype(np.float64) @ x.astype(np.float64)) + 0.5 * bias
    assert got.shape == (2, 3, 32, 8)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(_bsr_of(d, 16, 16).to_dense(), d)


def test_beta_zero_leaves_a_nan_input_unread():
    rng = np.random.default_rng(3)
    d = _block_sparse(rng, 32, 32, 16, 16, 0.7)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    nan = np.full((32, 4), np.nan, np.float32)
    got = S.bsr_dense_addmm(nan, _bsr_of(d, 16, 16), x, beta=0.0)
    np.testing.assert_allclose(got, d.astype(np.float64) @ x, rtol=1e-6, atol=1e-5)


def test_errors_name_the_argument():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    vals = rng.standard_normal((2, 16, 16)).astype(np.float32)
    crow = np.array([0, 2, 2], np.int32)
    with pytest.raises(ValueError, match="bsr_dense_addmm: bsr.col_indices of block row 0 .* ascending without repeats"):
        S.bsr_dense_mm(S.BSR(crow, np.array([1, 0], np.int32), vals, (32, 32)), x)
    with pytest.raises(ValueError, match=r"bsr_dense_addmm: bsr.col_indices\[1\] .* in \[0, 2\) \(got 5\)"):
        S.bsr_dense_mm(S.BSR(crow, np.array([0, 5], np.int32), vals, (32, 32)), x)
    with pytest.raises(ValueError, match=r"dense's rows \(16\) must equal bsr's K \(32\)"):
        S.bsr_dense_mm(S.BSR(crow, np.array([0, 1], np.int32), vals, (32, 32)), x[:16])
    with pytest.raises(ValueError, match="input is needed when beta is not 0"):
        S.bsr_dense_addmm(None, S.BSR(crow, np.array([0, 1], np.int32), vals, (32, 32)), x)
    with pytest.raises(TypeError, match="bsr_dense_mm: bsr must be a torch sparse BSR tensor or a lowbit.sparse.BSR"):
        S.bsr_dense_mm(x, x)
    with pytest.raises(ValueError, match="BSR: values must be"):
        S.BSR(crow, np.array([0, 1], np.int32), vals[0], (32, 32))


def test_sampled_addmm_keeps_the_pattern_and_broadcasts():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    d = torch.from_numpy(_block_sparse(rng, 64, 96, 16, 32, 0.5))
    mask = d != 0
    bsr = d.to_sparse_bsr((16, 32))
    m1 = torch.from_numpy(rng.standard_normal((2, 64, 20)).astype(np.float32))
    m2 = torch.from_numpy(rng.standard_normal((20, 96)).astype(np.float32))
    got = S.sampled_addmm(bsr, m1, m2, beta=0.5, alpha=2.0)
    assert got.layout == torch.sparse_bsr and got.shape == (2, 64, 96)
    assert torch.equal(got.col_indices()[1], bsr.col_indices())
    want = (2.0 * (m1.double() @ m2.double()) + 0.5 * d.double()) * mask
    assert torch.allclose(got.to_dense().double(), want, rtol=1e-6, atol=1e-5)
    # NumPy arrays in a lowbit BSR give a lowbit BSR; beta 0 leaves a NaN input unread
    b = S.BSR(bsr.crow_indices().numpy(), bsr.col_indices().numpy(), bsr.values().numpy().copy(), (64, 96))
    b.values[0, 0, 0] = np.nan
    got = S.sampled_addmm(b, m1[0].numpy(), m2.numpy(), beta=0.0)
    assert isinstance(got, S.BSR) and not np.isnan(got.values).any()
    np.testing.assert_allclose(got.to_dense(), ((m1[0].double() @ m2.double()) * mask).numpy(), rtol=1e-6, atol=1e-5)


def test_bsr_softmax_normalizes_each_rows_stored_elements():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    d = torch.from_numpy(_block_sparse(rng, 64, 96, 16, 32, 0.4))
    mask = (d != 0).reshape(4, 16, 3, 32).any(dim=(1, 3)).repeat_interleave(16, 0).repeat_interleave(32, 1)
    bsr = d.to_sparse_bsr((16, 32))
    got = S.bsr_softmax(bsr, max_row_nnz=64)
    want = torch.softmax(d.double().masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0) * mask
    assert got.layout == torch.sparse_bsr and torch.allclose(got.to_dense().double(), want, atol=1e-7)


def test_attention_with_a_bsr_mask_is_torchs_with_the_dense_mask():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(7)
    L, Sk, E = 64, 96, 32
    q, k = torch.randn(2, L, E, generator=g), torch.randn(2, Sk, E, generator=g)
    v = torch.randn(2, Sk, 16, generator=g)
    keep = torch.rand(4, 3, generator=g) < 0.6
    keep[:, 0] = True  # every query row attends somewhere
    dense_mask = keep.repeat_interleave(16, 0).repeat_interleave(32, 1)
    bsr = dense_mask.to_sparse_bsr((16, 32))  # a boolean mask: its values are not read
    additive = torch.zeros(L, Sk).masked_fill(~dense_mask, float("-inf"))
    for scale in (None, 0.3):
        got = S.scaled_dot_product_attention(q, k, v, bsr, scale=scale)
        want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                attn_mask=additive.double(), scale=scale)
        assert got.shape == (2, L, 16) and torch.allclose(got.double(), want, atol=1e-5)
    dropped = S.scaled_dot_product_attention(q, k, v, bsr, dropout_p=0.5)
    assert dropped.shape == (2, L, 16) and torch.isfinite(dropped).all()
    with pytest.raises(ValueError, match="is_causal == True is not supported"):
        S.scaled_dot_product_attention(q, k, v, bsr, is_causal=True)
    with pytest.raises(ValueError, match="attn_mask == None is not supported"):
        S.scaled_dot_product_attention(q, k, v, None)


def test_bsr_dense_mm_gradients_are_the_dense_products():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    d = torch.from_numpy(_block_sparse(rng, 64, 96, 16, 32, 0.5, batch=(2,)))
    crow, col, vals = (torch.from_numpy(np.asarray(a)) for a in
                       (lambda b: (b.crow_indices, b.col_indices, b.values))(_bsr_of(d.numpy(), 16, 32)))
    vals = vals.clone().requires_grad_(True)
    x = torch.from_numpy(rng.standard_normal((96, 8)).astype(np.float32)).requires_grad_(True)  # broadcast batch
    y = S.bsr_dense_mm(S.BSR(crow, col, vals, (2, 64, 96)), x)
    w = torch.from_numpy(rng.standard_normal((2, 64, 8)).astype(np.float32))
    (y * w).sum().backward()
    dd = d.double().requires_grad_(True)
    xx = x.detach().double().requires_grad_(True)
    ((dd @ xx) * w.double()).sum().backward()
    assert torch.allclose(x.grad.double(), xx.grad, atol=1e-4)
    # the values' gradient: the dense gradient at each stored block
    want = torch.stack([torch.stack([dd.grad[b, 16 * i:16 * i + 16, 32 * int(col[b, j]):32 * int(col[b, j]) + 32]
                                     for i in range(4) for j in range(int(crow[b, i]), int(crow[b, i + 1]))])
                        for b in range(2)])
    assert torch.allclose(vals.grad.double(), want, atol=1e-4)
    with pytest.raises(NotImplementedError, match="no gradient into a sparse BSR tensor"):
        S.bsr_dense_mm(d[0].to_sparse_bsr((16, 32)).requires_grad_(True), x)


def test_int8_bsr_times_int8_dense_is_exact_int32():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    mask = np.kron(rng.random((3, 2)) < 0.6, np.ones((16, 32), bool))
    d = torch.from_numpy((rng.integers(-128, 128, (48, 64)) * mask).astype(np.int8))
    x = torch.from_numpy(rng.integers(-128, 128, (64, 10)).astype(np.int8))
    got = S.bsr_dense_mm(d.to_sparse_bsr((16, 32)), x)
    assert got.dtype == torch.int32 and torch.equal(got.long(), d.long() @ x.long())
    bias = torch.from_numpy(rng.integers(-1000, 1000, 10).astype(np.int32))
    got = S.bsr_dense_addmm(bias, d.to_sparse_bsr((16, 32)), x, beta=2, alpha=-1)
    assert torch.equal(got.long(), 2 * bias.long() - d.long() @ x.long())
    with pytest.raises(ValueError, match="alpha must be an integer for int8 operands"):
        S.bsr_dense_addmm(bias, d.to_sparse_bsr((16, 32)), x, alpha=0.5)


@pytest.mark.parametrize("fmt", ["bsr_strided_mm_compressed", "bsr_strided_mm", "scatter_mm"])
def test_bsr_scatter_mm_is_the_dense_product_in_every_format(fmt):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    d = torch.from_numpy(_block_sparse(rng, 64, 96, 16, 16, 0.4))
    d[16:32] = 0  # an empty block row
    bsr = d.to_sparse_bsr((16, 16))
    x = torch.from_numpy(rng.standard_normal((2, 96, 64)).astype(np.float32))
    data = S.bsr_scatter_mm_indices_data(bsr, x, indices_format=fmt, SPLIT_N=4)
    assert data[0] == fmt and all(t.dtype == torch.int32 for t in data[1:] if isinstance(t, torch.Tensor))
    got = S.bsr_scatter_mm(bsr, x, indices_data=data)
    want = d.double() @ x.double()
    assert got.shape == (2, 64, 64) and got.dtype == torch.float32
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)
    out = torch.full((2, 64, 64), float("nan"))
    assert S.bsr_scatter_mm(bsr, x, indices_data=data, out=out) is out and torch.allclose(out.double(), want, atol=1e-5)
    # NumPy arrays through lowbit.sparse.BSR: the same product.
    nb = S.BSR(bsr.crow_indices().numpy(), bsr.col_indices().numpy(), bsr.values().numpy(), (64, 96))
    got_np = S.bsr_scatter_mm(nb, x.numpy(), indices_data=S.bsr_scatter_mm_indices_data(nb, x.numpy(),
                                                                                        indices_format=fmt))
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-5, atol=1e-5)


def test_scatter_mm_adds_into_accumulators_and_checks_its_indices():
    rng = np.random.default_rng(12)
    blocks = rng.standard_normal((3, 2, 3)).astype(np.float32)
    others = rng.standard_normal((2, 3, 4)).astype(np.float32)
    acc = rng.standard_normal((3, 2, 4)).astype(np.float32)
    c, pq = np.array([0, 2, 2, 3], np.int32), np.array([[0, 1], [2, 0], [1, 1]], np.int32)
    products = np.zeros((3, 2, 4))
    products[0] = blocks[0].astype(np.float64) @ others[1] + blocks[2].astype(np.float64) @ others[0]
    products[2] = blocks[1].astype(np.float64) @ others[1]
    want = acc.astype(np.float64) + products
    got = S.scatter_mm(blocks, others, ("scatter_mm", c, pq), accumulators=acc)
    assert got is acc
    np.testing.assert_allclose(acc, want, rtol=1e-6, atol=1e-6)
    fresh = S.scatter_mm(blocks, others, ("scatter_mm", c, pq))  # zeros to start from: the products alone
    assert fresh.shape == (3, 2, 4) and fresh.dtype == np.float32
    np.testing.assert_allclose(fresh, products, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"scatter_mm: pq\[:, 1\]\[0\] = 7 must be a block of others in \[0, 2\)"):
        S.scatter_mm(blocks, others, ("scatter_mm", c, np.array([[0, 7], [2, 0], [1, 1]], np.int32)))
    with pytest.raises(ValueError, match="scatter_mm: indices_data\\[0\\] must name the format"):
        S.scatter_mm(blocks, others, ("bsr_dense", c, pq))
    with pytest.raises(ValueError, match="the scatter_mm format's indices_data holds 3 items"):
        S.scatter_mm(blocks, others, ("scatter_mm", c))
    with pytest.raises(ValueError, match="accumulators must be contiguous"):
        S.scatter_mm(blocks, others, ("scatter_mm", c, pq), accumulators=np.zeros((3, 4, 2), np.float32).transpose(0, 2, 1))


@pytest.mark.parametrize("block", [(16, 32), (64, 64), (128, 128)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bsr_dense_mm_on_cuda_is_the_cpus(block, dtype):
    """Each CUDA kernel (mma.sync for 16 x 32, wgmma on sm_90 for 64 and 128) on a CUDA torch BSR tensor: a CUDA
    tensor out, the CPU's result within fp32 sums, out= filled in place."""
    from backends import torch_cuda_reason
    reason = torch_cuda_reason()
    if reason is not None:
        pytest.skip(f"torch CUDA: {reason}")
    import torch
    BM, BK = block
    rng = np.random.default_rng(7)
    d = torch.from_numpy(_block_sparse(rng, 4 * BM, 3 * BK, BM, BK, 0.5)).to(getattr(torch, dtype))
    x = torch.from_numpy(rng.standard_normal((3 * BK, 200)).astype(np.float32)).to(d.dtype)
    want = S.bsr_dense_mm(d.to_sparse_bsr(block), x).double()
    bsr, xg = d.cuda().to_sparse_bsr(block), x.cuda()
    got = S.bsr_dense_mm(bsr, xg)
    assert got.is_cuda and got.dtype == d.dtype and got.shape == (4 * BM, 200)
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    assert ((got.cpu().double() - want).abs() <= tol * (want.abs() + 1)).all()
    out = torch.empty_like(got)
    assert S.bsr_dense_mm(bsr, xg, out=out) is out and torch.equal(out, got)


def test_attention_and_gradients_on_cuda_are_the_cpus():
    """The composed attention (sampled_addmm, bsr_softmax, bsr_dense_mm) and bsr_dense_mm's gradients on CUDA
    tensors: CUDA results, the CPU's values within fp32 rounding."""
    from backends import torch_cuda_reason
    reason = torch_cuda_reason()
    if reason is not None:
        pytest.skip(f"torch CUDA: {reason}")
    import torch
    g = torch.Generator().manual_seed(9)
    L, Sk, E = 128, 192, 64
    q, k, v = torch.randn(2, L, E, generator=g), torch.randn(2, Sk, E, generator=g), torch.randn(2, Sk, 32, generator=g)
    keep = torch.rand(L // 64, Sk // 64, generator=g) < 0.6
    keep[:, 0] = True
    mask = keep.repeat_interleave(64, 0).repeat_interleave(64, 1)
    fmask = mask.float()  # a float mask: torch's dense-to-BSR conversion of a boolean CUDA tensor is not relied on
    want = S.scaled_dot_product_attention(q, k, v, fmask.to_sparse_bsr((64, 64)))
    got = S.scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), fmask.cuda().to_sparse_bsr((64, 64)))
    assert got.is_cuda and torch.allclose(got.cpu(), want, atol=1e-4)

    rng = np.random.default_rng(10)
    d = torch.from_numpy(_block_sparse(rng, 128, 128, 64, 64, 0.5))
    bsr = d.to_sparse_bsr((64, 64))
    x = torch.from_numpy(rng.standard_normal((128, 16)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((128, 16)).astype(np.float32))
    grads = []
    for dev in ("cpu", "cuda"):
        vals = bsr.values().to(dev).clone().requires_grad_(True)
        xd = x.to(dev, copy=True).requires_grad_(True)  # a copy: x itself stays without grad
        y = S.bsr_dense_mm(S.BSR(bsr.crow_indices().to(dev), bsr.col_indices().to(dev), vals, (128, 128)), xd)
        (y * w.to(dev)).sum().backward()
        grads.append((vals.grad.cpu(), xd.grad.cpu()))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-4) and torch.allclose(grads[0][1], grads[1][1], atol=1e-4)
