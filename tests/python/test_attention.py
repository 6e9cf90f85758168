"""flash_attention and BitBLAS' FlashAtten against attention written out in NumPy float64: grouped-query and
multi-query heads, the bottom-right causal mask (with queries that see no key), the log-sum-exp, K in both
layouts, out= buffers, every float dtype; torch's SDPA where torch is installed; the errors. On a GPU (torch
CUDA tensors): the same against float64 within the dtype's rounding of P and the output, the KV cache
(contiguous and paged) and varlen forms, torch's SDPA."""

from __future__ import annotations

import numpy as np
import pytest

import lowbit
import lowbit.functional as F
from backends import ml_dtypes, torch_cuda_reason


def attention64(q, k, v, causal, scale=None):
    """(out, lse) in float64; k [B, Skv, Hkv, D]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Sq, H, D = q.shape
    Skv, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    if Skv == 0:  # no key: zeros and -inf
        return np.zeros((B, Sq, H, v.shape[3])), np.full((B, H, Sq), -np.inf)
    kk, vv = np.repeat(k, H // Hkv, axis=2), np.repeat(v, H // Hkv, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    if causal:
        allowed = np.arange(Skv)[None, :] <= np.arange(Sq)[:, None] + Skv - Sq
        s = np.where(allowed, s, -np.inf)
    peak = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(peak), peak, 0.0))
    total = e.sum(-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    out = np.einsum("bhij,bjhd->bihd", p, vv)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, np.log(np.where(total[..., 0] > 0, total[..., 0], 1.0)) + peak[..., 0],
                       -np.inf)
    return out, lse


CASES = [  # B, Sq, Skv, H, Hkv, D, causal
    (2, 5, 7, 4, 2, 16, False),
    (1, 6, 6, 3, 3, 32, True),
    (2, 3, 9, 4, 1, 64, True),
    (1, 8, 5, 2, 1, 16, True),  # Sq > Skv: the first three queries see no key
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_Sq{}_Skv{}_H{}_{}_D{}{}".format(*c[:6], "_causal" * c[6]))
def test_matches_float64_attention(case):
    B, Sq, Skv, H, Hkv, D, causal = case
    rng = np.random.default_rng(sum(case))
    q = rng.standard_normal((B, Sq, H, D), dtype=np.float32)
    k = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32)
    v = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32)
    out, lse = F.flash_attention(q, k, v, is_causal=causal, return_lse=True)
    want, want_lse = attention64(q, k, v, causal)
    assert out.dtype == np.float32 and lse.dtype == np.float32 and lse.shape == (B, H, Sq)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-6)
    # k as [B, D, Hkv, Skv], a scale of its own, into buffers.
    o2, l2 = np.empty_like(out), np.empty_like(lse)
    F.flash_attention(q, np.ascontiguousarray(k.transpose(0, 3, 2, 1)), v, causal, 0.25, o2, True, k_layout="bdhs",
                      lse=l2)
    want2, want_lse2 = attention64(q, k, v, causal, 0.25)
    np.testing.assert_allclose(o2, want2, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(l2, want_lse2, rtol=1e-5, atol=1e-6)


def test_16_bit_dtypes_round_once():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 4, 2, 32)).astype(np.float16) for _ in range(3))
    want, _ = attention64(q, k, v, True)
    np.testing.assert_allclose(F.flash_attention(q, k, v, is_causal=True).astype(np.float64), want, rtol=2**-10,
                               atol=1e-6)
    mld = ml_dtypes()
    if mld is not None:
        bf = [x.astype(np.float32).astype(mld.bfloat16) for x in (q, k, v)]
        want, _ = attention64(*bf, False)
        np.testing.assert_allclose(F.flash_attention(*bf).astype(np.float64), want, rtol=2**-7, atol=1e-6)


def test_against_torch_sdpa():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 6, 4, 32, generator=g) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for causal in (False, True):  # Sq == Skv: torch's top-left causal mask is the bottom-right one
        got = F.flash_attention(q, k, v, is_causal=causal)
        want = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_flash_atten_class():
    rng = np.random.default_rng(9)
    cfg = lowbit.FlashAttenConfig(batch=2, heads=3, seq_len=5, dim=16, Q_dtype="float32", K_dtype="float32",
                                  V_dtype="float32", Out_dtype="float32", layout="ntn", is_causal=True)
    fa = lowbit.FlashAtten(cfg)
    assert (fa.batch, fa.heads, fa.seq_len, fa.dim, fa.layout, fa.is_causal, fa.Accu_dtype) == (
        2, 3, 5, 16, "ntn", True, "float32")
    Q = rng.standard_normal((2, 5, 3, 16), dtype=np.float32)
    K = rng.standard_normal((2, 5, 3, 16), dtype=np.float32)
    V = rng.standard_normal((2, 5, 3, 16), dtype=np.float32)
    want, _ = attention64(Q, K, V, True)
    out = np.empty_like(Q)
    assert fa(Q, np.ascontiguousarray(K.transpose(0, 3, 2, 1)), V, output=out) is out
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"FlashAtten.forward: K must be \[2, 16, 3, 5\] for this config \(ntn"):
        fa(Q, K, V)
    with pytest.raises(ValueError, match="layout must be 'nnn' or 'ntn'"):
        lowbit.FlashAttenConfig(1, 1, 1, 8, layout="tnn")
    with pytest.raises(ValueError, match="Accu_dtype must be 'float32'"):
        lowbit.FlashAttenConfig(1, 1, 1, 8, Accu_dtype="float16")
    with pytest.raises(ValueError, match="must be one dtype"):
        lowbit.FlashAttenConfig(1, 1, 1, 8, K_dtype="bfloat16")
    with pytest.raises(ValueError, match="seq_len must be a positive int"):
        lowbit.FlashAttenConfig(1, 1, 0, 8)


def test_errors():
    q = np.zeros((1, 4, 4, 8), np.float32)
    k = np.zeros((1, 6, 2, 8), np.float32)
    with pytest.raises(ValueError, match=r"flash_attention: q's heads must be a multiple of k's"):
        F.flash_attention(q, np.zeros((1, 6, 3, 8), np.float32), np.zeros((1, 6, 3, 8), np.float32))
    with pytest.raises(TypeError, match=r"flash_attention: k .*\(got float16\)"):
        F.flash_attention(q, k.astype(np.float16), k)
    with pytest.raises(ValueError, match="k_layout must be 'bshd' or 'bdhs'"):
        F.flash_attention(q, k, k, k_layout="bhsd")
    with pytest.raises(ValueError, match="scale must be nonzero"):
        F.flash_attention(q, k, k, scale=0.0)
    with pytest.raises(ValueError, match="return_lse with out= needs lse="):
        F.flash_attention(q, k, k, out=np.empty_like(q), return_lse=True)


def _torch_cuda():
    reason = torch_cuda_reason()
    if reason is not None:
        pytest.skip(f"torch CUDA: {reason}")
    import torch
    return torch


_UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}


def assert_gpu_close(got, got_lse, q, k, v, causal, dtype, scale=None):
    """The GPU's out (and lse) against float64 attention: the dtype's rounding of the output and of P (the
    tensor-core kernel rounds P to the dtype before P·V), on the scale of Σ p·|v| (attention over |v|)."""
    want, want_lse = attention64(q, k, v, causal, scale)
    mag, _ = attention64(q, k, np.abs(v), causal, scale)
    u = _UNIT[dtype]
    terms = 2.0**-14 if dtype == "float32" else 4 * u + 2.0**-12
    g = got.float().cpu().numpy().astype(np.float64)
    bound = 2 * u * np.abs(want) + terms * mag + 1e-5
    bad = ~(np.abs(g - want) <= bound)
    assert not bad.any(), f"{bad.sum()} outputs out of bounds, first at {np.argwhere(bad)[0]}"
    if got_lse is not None:
        gl = got_lse.cpu().numpy().astype(np.float64)
        inf = np.isinf(want_lse)
        assert (np.isneginf(gl) == inf).all()
        np.testing.assert_allclose(gl[~inf], want_lse[~inf], rtol=1e-3, atol=1e-3)


CUDA_CASES = [  # B, Sq, Skv, H, Hkv, D, causal, dtype
    (2, 128, 128, 4, 4, 64, False, "float16"),
    (1, 65, 300, 8, 2, 128, True, "bfloat16"),
    (2, 70, 33, 2, 1, 256, True, "float16"),  # Sq > Skv: the first 37 queries see no key
    (1, 40, 50, 4, 2, 40, True, "bfloat16"),  # D 40 runs the 64 instance
    (1, 1, 1000, 16, 2, 128, False, "float16"),  # a decode row: split key ranges
    (1, 20, 30, 2, 2, 32, True, "float32"),  # the SIMT path
]


@pytest.mark.parametrize("case", CUDA_CASES, ids=lambda c: "B{}_Sq{}_Skv{}_H{}_{}_D{}{}_{}".format(
    *c[:6], "_causal" * c[6], c[7]))
def test_cuda_matches_float64_attention(case):
    torch = _torch_cuda()
    B, Sq, Skv, H, Hkv, D, causal, dt = case
    g = torch.Generator().manual_seed(sum(case[:6]))
    dtype = getattr(torch, dt)
    q, k, v = (torch.randn(*s, generator=g).to(dtype) for s in ((B, Sq, H, D), (B, Skv, Hkv, D), (B, Skv, Hkv, D)))
    q64, k64, v64 = (x.float().numpy() for x in (q, k, v))
    out, lse = F.flash_attention(q.cuda(), k.cuda(), v.cuda(), is_causal=causal, return_lse=True)
    assert out.device.type == "cuda" and out.dtype == dtype and lse.shape == (B, H, Sq)
    assert_gpu_close(out, lse, q64, k64, v64, causal, dt)
    # k as [B, D, Hkv, Skv], a scale of its own, into buffers on the GPU.
    o2, l2 = torch.empty_like(out), torch.empty_like(lse)
    F.flash_attention(q.cuda(), k.permute(0, 3, 2, 1).contiguous().cuda(), v.cuda(), causal, 0.25, o2, True,
                      k_layout="bdhs", lse=l2)
    assert_gpu_close(o2, l2, q64, k64, v64, causal, dt, 0.25)


def test_cuda_against_torch_sdpa():
    torch = _torch_cuda()
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 256, 8, 128, generator=g).to("cuda", torch.float16) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for causal in (False, True):
        got = F.flash_attention(q, k, v, is_causal=causal)
        want = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)
        torch.testing.assert_close(got, want, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_cuda_kvcache_paged_and_contiguous(dt):
    """Decode and chunked prefill against caches on the GPU (lengths and pages on the device, one length 0),
    page sizes 16 and 7, each sequence against float64 attention over its first cache_seqlens tokens."""
    torch = _torch_cuda()
    g = torch.Generator().manual_seed(44)
    dtype = getattr(torch, dt)
    B, H, Hkv, D, S_max = 3, 8, 2, 128, 300
    lens = torch.tensor([300, 0, 129], dtype=torch.int32)
    kc = torch.randn(B, S_max, Hkv, D, generator=g).to(dtype)
    vc = torch.randn(B, S_max, Hkv, D, generator=g).to(dtype)
    for Sq in (1, 5):
        q = torch.randn(B, Sq, H, D, generator=g).to(dtype)
        for P in (0, 16, 7):
            if P == 0:
                kk, vv, table = kc, vc, None
            else:
                pages = -(-S_max // P)
                perm = torch.randperm(B * pages, generator=g).to(torch.int32).reshape(B, pages)
                kk = torch.zeros(B * pages, P, Hkv, D, dtype=dtype)
                vv = torch.zeros_like(kk)
                for b in range(B):
                    for j in range(S_max):
                        kk[perm[b, j // P], j % P] = kc[b, j]
                        vv[perm[b, j // P], j % P] = vc[b, j]
                table = perm.cuda()
            for causal in (False, True):
                out, lse = F.flash_attention_kvcache(q.cuda(), kk.cuda(), vv.cuda(), lens.cuda(), table,
                                                     is_causal=causal, return_lse=True)
                for b in range(B):
                    n = int(lens[b])
                    assert_gpu_close(out[b:b + 1], lse[b:b + 1], q[b:b + 1].float().numpy(),
                                     kc[b:b + 1, :n].float().numpy(), vc[b:b + 1, :n].float().numpy(), causal, dt)


def test_cuda_varlen_is_each_sequence():
    torch = _torch_cuda()
    g = torch.Generator().manual_seed(55)
    cq = torch.tensor([0, 100, 100, 163, 164], dtype=torch.int32)
    ck = torch.tensor([0, 120, 130, 130, 1130], dtype=torch.int32)
    H, Hkv, D = 4, 2, 64
    q = torch.randn(int(cq[-1]), H, D, generator=g).half()
    k = torch.randn(int(ck[-1]), Hkv, D, generator=g).half()
    v = torch.randn(int(ck[-1]), Hkv, D, generator=g).half()
    for causal in (False, True):
        out, lse = F.flash_attention_varlen(q.cuda(), k.cuda(), v.cuda(), cq.cuda(), ck.cuda(), is_causal=causal,
                                            return_lse=True)
        assert out.shape == q.shape and lse.shape == (H, int(cq[-1]))
        for b in range(len(cq) - 1):
            qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
            if cq[b + 1] == cq[b]:
                continue
            assert_gpu_close(out[None, qs], lse[None, :, qs], q[None, qs].float().numpy(),
                             k[None, ks].float().numpy(), v[None, ks].float().numpy(), causal, "float16")


def test_kvcache_paged_and_contiguous():
    """Decode against a KV cache: contiguous and paged (shuffled pages) caches give flash_attention's result over
    each sequence's first cache_seqlens tokens."""
    rng = np.random.default_rng(21)
    B, Sq, H, Hkv, D, S_max, P, pages = 3, 2, 4, 2, 16, 11, 4, 3
    lens = np.array([11, 0, 6], np.int32)
    q = rng.standard_normal((B, Sq, H, D), dtype=np.float32)
    kc = rng.standard_normal((B, S_max, Hkv, D), dtype=np.float32)
    vc = rng.standard_normal((B, S_max, Hkv, D), dtype=np.float32)
    perm = rng.permutation(B * pages).astype(np.int32).reshape(B, pages)
    kp = np.zeros((B * pages, P, Hkv, D), np.float32)
    vp = np.zeros_like(kp)
    for b in range(B):
        for j in range(S_max):
            kp[perm[b, j // P], j % P] = kc[b, j]
            vp[perm[b, j // P], j % P] = vc[b, j]
    for causal in (False, True):
        out_c, lse_c = F.flash_attention_kvcache(q, kc, vc, lens, is_causal=causal, return_lse=True)
        out_p = F.flash_attention_kvcache(q, kp, vp, lens, perm, is_causal=causal)
        np.testing.assert_array_equal(out_c, out_p)
        for b in range(B):
            n = int(lens[b])
            want, want_lse = attention64(q[b:b + 1], kc[b:b + 1, :n], vc[b:b + 1, :n], causal)
            np.testing.assert_allclose(out_c[b:b + 1], want, rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(lse_c[b:b + 1], want_lse, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] must be in \[0, 11\] \(got 12\)"):
        F.flash_attention_kvcache(q, kc, vc, np.array([12, 0, 0], np.int32))
    with pytest.raises(ValueError, match=r"block_table\[1, 0\] must be a page of the cache"):
        bad = perm.copy()
        bad[1, 0] = 99
        F.flash_attention_kvcache(q, kp, vp, np.array([1, 1, 1], np.int32), bad)


def test_varlen_is_each_sequence():
    """Sequences of their own lengths packed along the tokens: each one's rows are its own attention."""
    rng = np.random.default_rng(33)
    cq = np.array([0, 4, 4, 9], np.int32)
    ck = np.array([0, 2, 6, 13], np.int32)
    H, Hkv, D = 4, 2, 16
    q = rng.standard_normal((int(cq[-1]), H, D), dtype=np.float32)
    k = rng.standard_normal((int(ck[-1]), Hkv, D), dtype=np.float32)
    v = rng.standard_normal((int(ck[-1]), Hkv, D), dtype=np.float32)
    for causal in (False, True):
        out, lse = F.flash_attention_varlen(q, k, v, cq, ck, is_causal=causal, return_lse=True)
        assert out.shape == q.shape and lse.shape == (H, int(cq[-1]))
        for b in range(len(cq) - 1):
            qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            if cq[b + 1] == cq[b]:
                continue
            want, want_lse = attention64(q[None, qs], k[None, ks], v[None, ks], causal)
            np.testing.assert_allclose(out[qs], want[0], rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(lse[:, qs], want_lse[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\[3\] must be the tokens' total 13 \(got 12\)"):
        F.flash_attention_varlen(q, k, v, cq, np.array([0, 2, 6, 12], np.int32))
