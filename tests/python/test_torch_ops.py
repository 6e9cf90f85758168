"""lowbit.ops: the lowbit:: torch custom ops. Each op passes torch.library.opcheck (schema, fake tensors, autograd
registration, AOT dispatch with dynamic shapes) on ragged shapes; gives the functional call's bits and, for the
matmuls, a float64 reference's values; the differentiable ones give the float64 gradient through the dequantized
weight; a model of 4-bit, int8, FP8 and Matmul layers compiles with fullgraph=True (no graph break), exports and
gives eager's bits; CUDA cases (and the CUDA-graph replay) skip, saying why, without a GPU."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lowbit  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.ops as ops  # noqa: E402
from backends import torch_cuda_reason  # noqa: E402

_cuda_reason = torch_cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(_cuda_reason is not None,
                                                                 reason=f"torch CUDA: {_cuda_reason}"))]
lib = torch.ops.lowbit


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(seed, *shape, device="cpu", dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=_gen(seed)) * scale).to(device=device, dtype=dtype)


def _close(got, ref, bound, tol):
    """|got - ref| <= tol * bound elementwise (bound: the sum of the products' magnitudes), in float64."""
    err = (got.double() - ref).abs()
    assert got.shape == ref.shape
    assert bool((err <= tol * bound + 1e-30).all()), f"max error {err.max():.3g}, bound {(tol * bound).max():.3g}"


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _opcheck(op, args, kwargs=None):
    """opcheck's every test; with an fp8 input all but test_schema (its mutation check calls allclose, which
    torch lacks for fp8 on the CPU), whose check is done here on the inputs' bytes instead."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not any(t.dtype in _FP8 for t in tensors):
        torch.library.opcheck(op, args, kwargs or {})
        return
    before = [t.detach().clone() for t in tensors]
    torch.library.opcheck(op, args, kwargs or {},
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    op(*args, **(kwargs or {}))
    for b, t in zip(before, tensors):
        assert torch.equal(b.view(torch.uint8), t.detach().view(torch.uint8)), f"{op} wrote into an input"


def _qs_args(qs):
    """(absmax, blocksize, quant_type, shape, dtype, nested absmax, nested code, offset, nested blocksize)."""
    if qs.nested:
        nested = (qs.state2.absmax, qs.state2.code, qs.offset, qs.state2.blocksize)
    else:
        nested = (None, None, None, 256)
    return (qs.absmax, qs.blocksize, qs.quant_type, list(qs.shape), qs.dtype) + nested


# ------------------------------------------------------------------------ registration


def test_every_op_is_registered_in_the_lowbit_namespace():
    for name in ops.OPS:
        assert isinstance(getattr(lib, name), torch._ops.OpOverloadPacket), name


def test_import_lowbit_does_not_import_torch():
    code = "import sys, lowbit; print('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(lowbit.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_importing_again_is_fine():
    importlib.reload(importlib.import_module("lowbit.ops._defs"))
    importlib.reload(ops)
    A = _randn(1, 3, 40)
    p, qs = F.quantize_4bit(_randn(2, 9, 40), quant_type="nf4")
    assert torch.equal(ops.matmul_4bit(A, p, qs), F.matmul_4bit(A, p, qs))


# ----------------------------------------------------------------------------- 4-bit


_TOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_4bit_ops(device, dtype, nested, quant_type):
    W = _randn(1, 17, 33, device=device, dtype=dtype)  # blocks cross rows, an odd element count
    A = _randn(2, 2, 5, 33, device=device, dtype=dtype)
    bias = _randn(3, 17, device=device, dtype=dtype)
    _opcheck(lib.quantize_4bit, (W, 64, nested, quant_type))
    p, qs = ops.quantize_4bit(W, blocksize=64, compress_statistics=nested, quant_type=quant_type)
    p_f, qs_f = F.quantize_4bit(W, blocksize=64, compress_statistics=nested, quant_type=quant_type)
    assert torch.equal(p, p_f) and torch.equal(qs.absmax, qs_f.absmax)
    if nested:
        assert torch.equal(qs.offset, qs_f.offset) and torch.equal(qs.state2.absmax, qs_f.state2.absmax)
        assert torch.equal(qs.state2.code, qs_f.state2.code)
    assert torch.equal(qs.code, qs_f.code)
    _opcheck(lib.dequantize_4bit, (p,) + _qs_args(qs))
    Wd = ops.dequantize_4bit(p, qs)
    assert torch.equal(Wd, F.dequantize_4bit(p_f, qs_f))
    quantize, dequantize = (ops.quantize_nf4, ops.dequantize_nf4) if quant_type == "nf4" else \
        (ops.quantize_fp4, ops.dequantize_fp4)
    p2, qs2 = quantize(W, blocksize=64, compress_statistics=nested)
    assert torch.equal(p2, p) and torch.equal(dequantize(p2, qs2), Wd)
    for op, fn, wrapper in ((lib.matmul_4bit, F.matmul_4bit, ops.matmul_4bit),
                            (lib.gemv_4bit, F.gemv_4bit, ops.gemv_4bit)):
        a = A if op is lib.matmul_4bit else A[:1, :1]
        _opcheck(op, (a.clone().requires_grad_(), p) + _qs_args(qs) + (bias.clone().requires_grad_(),))
        out = wrapper(a, p.t(), qs, bias)  # B.t() as bitsandbytes passes it
        assert torch.equal(out, fn(a, p_f, qs_f, bias))
        ref = a.double() @ Wd.double().T + bias.double()
        _close(out, ref, a.double().abs() @ Wd.double().abs().T + bias.double().abs(), _TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_4bit_quant_storage_and_out(device):
    W = _randn(4, 16, 64, device=device)
    p, qs = ops.quantize_4bit(W, quant_type="nf4", quant_storage=torch.bfloat16)
    p_f, qs_f = F.quantize_4bit(W, quant_type="nf4", quant_storage=torch.bfloat16)
    assert p.dtype == torch.bfloat16 and torch.equal(p.view(torch.uint8), p_f.view(torch.uint8))
    out = torch.empty(16, 64, device=device)
    assert ops.dequantize_4bit(p, qs, out=out) is out and torch.equal(out, F.dequantize_4bit(p_f, qs_f))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nested", [False, True])
def test_blockwise_ops(device, nested):
    A = _randn(5, 7, 45, device=device, dtype=torch.float16)
    _opcheck(lib.quantize_blockwise, (A, None, 64, nested))
    q, qs = ops.quantize_blockwise(A, blocksize=64, nested=nested)
    q_f, qs_f = F.quantize_blockwise(A, blocksize=64, nested=nested)
    assert torch.equal(q, q_f) and torch.equal(qs.absmax, qs_f.absmax) and torch.equal(qs.code, qs_f.code)
    args = (q, qs.absmax, qs.code, 64, torch.float16) + (_qs_args(qs)[5:] if nested else (None, None, None, 256))
    _opcheck(lib.dequantize_blockwise, args)
    assert torch.equal(ops.dequantize_blockwise(q, qs), F.dequantize_blockwise(q_f, qs_f))
    code = torch.as_tensor(F.create_linear_map()).to(device)
    _opcheck(lib.quantize_blockwise, (A, code, 128, False))
    q, qs = ops.quantize_blockwise(A, code=code, blocksize=128)
    assert qs.code is code and torch.equal(q, F.quantize_blockwise(A, code=code, blocksize=128)[0])


# ------------------------------------------------------------------------------ int8


def _int8_weight(seed, N, K, device):
    CB, SCB, _ = F.int8_vectorwise_quant(_randn(seed, N, K, device=device))
    return CB, SCB


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_int8_ops(device, dtype):
    A = _randn(1, 2, 5, 37, device=device, dtype=dtype)
    A[0, 1, 3] = 9.0  # an outlier column at threshold 6
    CB, SCB = _int8_weight(2, 19, 37, device)
    bias = _randn(3, 19, device=device, dtype=dtype)
    for threshold in (0.0, 6.0):
        _opcheck(lib.int8_vectorwise_quant, (A, threshold))
        got, want = ops.int8_vectorwise_quant(A, threshold), F.int8_vectorwise_quant(A, threshold)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert (got[2] is None) == (want[2] is None) and (got[2] is None or torch.equal(got[2], want[2]))
        _opcheck(lib.int8_linear, (A.clone().requires_grad_(), CB, SCB, bias.clone().requires_grad_(), threshold))
        assert torch.equal(ops.int8_linear(A, CB, SCB, bias, threshold), F.int8_linear(A, CB, SCB, bias, threshold))
    # float64 reference: A's int8 rows times the int8 weight, scaled (no outliers)
    A = _randn(4, 6, 37, device=device, dtype=dtype)
    Aq, stats, _ = F.int8_vectorwise_quant(A)
    Ad = Aq.double() * stats.double()[:, None] / 127
    Wd = CB.double() * SCB.double()[:, None] / 127
    _close(ops.int8_linear(A, CB, SCB, bias), Ad @ Wd.T + bias.double(), Ad.abs() @ Wd.abs().T + bias.double().abs(),
           _TOL[dtype])
    g = _randn(5, 6, 19, device=device, dtype=dtype)
    _opcheck(lib.int8_linear_grad_input, (g, CB, SCB))
    assert torch.equal(ops.int8_linear_grad_input(g, CB, SCB), F.int8_linear_grad_input(g, CB, SCB))
    _opcheck(lib.int8_vectorwise_dequant, (Aq, stats, dtype))
    assert torch.equal(ops.int8_vectorwise_dequant(Aq, stats, dtype=dtype),
                       F.int8_vectorwise_dequant(Aq, stats, dtype=dtype))
    _opcheck(lib.int8_linear_matmul, (Aq, CB))
    C = ops.int8_linear_matmul(Aq, CB)
    assert C.dtype == torch.int32 and torch.equal(C, F.int8_linear_matmul(Aq, CB))
    assert torch.equal(C.double(), Aq.double() @ CB.double().T)  # exact: the sums fit int32
    _opcheck(lib.int8_mm_dequant, (C, stats, SCB, bias, dtype))
    assert torch.equal(ops.int8_mm_dequant(C, stats, SCB, bias=bias, dtype=dtype),
                       F.int8_mm_dequant(C, stats, SCB, bias=bias, dtype=dtype))
    assert ops.int8_mm_dequant(C, stats, SCB).dtype == torch.float16
    _opcheck(lib.int8_scaled_mm, (Aq, CB, stats, SCB, bias, torch.float32))
    for dtype in (None, torch.bfloat16):
        assert torch.equal(ops.int8_scaled_mm(Aq, CB, stats, SCB, bias, dtype),
                           F.int8_scaled_mm(Aq, CB, stats, SCB, bias, dtype))


# ------------------------------------------------------------------------------- FP8


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_ops(device):
    x = _randn(1, 2, 3, 256, device=device, dtype=torch.bfloat16)
    w = _randn(2, 130, 256, device=device)  # N not a multiple of the block
    bias = _randn(3, 130, device=device)
    _opcheck(lib.weight_quant, (w, 128))
    wq, ws = ops.weight_quant(w)
    wq_f, ws_f = F.weight_quant(w)
    assert torch.equal(wq.view(torch.uint8), wq_f.view(torch.uint8)) and torch.equal(ws, ws_f)
    _opcheck(lib.weight_dequant, (wq, ws, 128, torch.float32))
    assert torch.equal(ops.weight_dequant(wq, ws, dtype=torch.float32), F.weight_dequant(wq, ws, dtype=torch.float32))
    for fmt in (None, "ue8m0"):
        _opcheck(lib.act_quant, (x, 128, fmt))
        y, s = ops.act_quant(x, 128, fmt)
        y_f, s_f = F.act_quant(x, 128, fmt)
        assert torch.equal(y.view(torch.uint8), y_f.view(torch.uint8)) and torch.equal(s, s_f)
    y, s = ops.act_quant(x)
    _opcheck(lib.fp8_gemm, (y, s, wq, ws, torch.float32, bias))
    got = ops.fp8_gemm(y, s, wq, ws, torch.float32, bias)
    assert torch.equal(got, F.fp8_gemm(y, s, wq, ws, torch.float32, bias))
    xd = y.double() * s.double().repeat_interleave(128, -1)
    Wd = F.weight_dequant(wq, ws, dtype=torch.float32).double()
    # CUDA: the FP8 tensor cores' accumulation, kFp8TensorCoreError = 1/512 of the terms' magnitudes (docs/fp8_gemm.md)
    tol = 1e-5 if device == "cpu" else 1 / 512
    _close(got, xd @ Wd.T + bias.double(), xd.abs() @ Wd.abs().T + bias.double().abs(), tol)
    _opcheck(lib.fp8_linear, (x.float().requires_grad_(), wq, ws, bias.clone().requires_grad_(), None))
    lin = ops.fp8_linear(x, wq, ws, bias)
    assert lin.dtype == x.dtype and torch.equal(lin, F.fp8_gemm(y, s, wq, ws, x.dtype, bias))
    # K = 208: act_quant's last block padded with zeros, the codes cut back; a bfloat16 bias goes in as float32
    w2q, w2s = F.weight_quant(_randn(4, 130, 208, device=device))
    x2 = _randn(5, 3, 208, device=device, dtype=torch.bfloat16)
    y2, s2 = F.act_quant(torch.nn.functional.pad(x2, (0, 48)))
    want = F.fp8_gemm(y2[..., :208].contiguous(), s2, w2q, w2s, x2.dtype, bias)
    _opcheck(lib.fp8_linear, (x2, w2q, w2s, bias.bfloat16(), None))
    assert torch.equal(ops.fp8_linear(x2, w2q, w2s, bias.bfloat16()), F.fp8_gemm(y2[..., :208].contiguous(), s2, w2q,
                                                                               w2s, x2.dtype, bias.bfloat16().float()))
    assert torch.equal(ops.fp8_linear(x2, w2q, w2s, bias), want)


# ------------------------------------------------------------------------- attention


@pytest.mark.parametrize("device", DEVICES)
def test_attention_ops(device):
    q, k, v = _randn(1, 2, 5, 4, 24, device=device), _randn(2, 2, 7, 2, 24, device=device), \
        _randn(3, 2, 7, 2, 20, device=device)
    for causal, lse in ((False, False), (True, True)):
        _opcheck(lib.flash_attention, (q, k, v, causal, None, "bshd", lse))
        got, want = ops.flash_attention(q, k, v, causal, return_lse=lse), F.flash_attention(q, k, v, causal,
                                                                                              return_lse=lse)
        for g, w in zip(got if lse else (got,), want if lse else (want,)):
            assert torch.equal(g, w)
    kc, vc = _randn(4, 2, 9, 2, 24, device=device), _randn(5, 2, 9, 2, 20, device=device)
    seqlens = torch.tensor([9, 4], dtype=torch.int32, device=device)
    _opcheck(lib.flash_attention_kvcache, (q[:, :2], kc, vc, seqlens, None, True, 0.3, False))
    assert torch.equal(ops.flash_attention_kvcache(q[:, :2], kc, vc, seqlens, is_causal=True, scale=0.3),
                       F.flash_attention_kvcache(q[:, :2], kc, vc, seqlens, is_causal=True, scale=0.3))
    qv, kv, vv = q.reshape(10, 4, 24), k.reshape(14, 2, 24), v.reshape(14, 2, 20)
    cu_q = torch.tensor([0, 3, 10], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 8, 14], dtype=torch.int32, device=device)
    _opcheck(lib.flash_attention_varlen, (qv, kv, vv, cu_q, cu_k, True, None, True))
    got = ops.flash_attention_varlen(qv, kv, vv, cu_q, cu_k, True, return_lse=True)
    want = F.flash_attention_varlen(qv, kv, vv, cu_q, cu_k, True, return_lse=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# --------------------------------------------------------------------------- sparse


def _bsr(seed, M, K, BM, BK, device):
    dense = _randn(seed, M, K)
    keep = torch.rand(M // BM, K // BK, generator=_gen(seed + 1)) < 0.5
    dense = dense * keep.repeat_interleave(BM, 0).repeat_interleave(BK, 1)
    t = dense.to_sparse_bsr((BM, BK))  # its values() is a view of t, which dynamo cannot wrap: copies
    return (t.crow_indices().to(device), t.col_indices().to(device), t.values().clone().to(device), dense.to(device))


@pytest.mark.parametrize("device", DEVICES)
def test_bsr_dense_mm(device):
    crow, col, values, dense_a = _bsr(1, 12, 20, 4, 5, device)
    B = _randn(3, 20, 7, device=device)
    _opcheck(lib.bsr_dense_mm, (crow, col, values.clone().requires_grad_(), 12, 20, B.clone().requires_grad_()))
    bsr = lowbit.sparse.BSR(crow, col, values, (12, 20))
    got = ops.bsr_dense_mm(bsr, B)
    assert torch.equal(got, lowbit.sparse.bsr_dense_mm(bsr, B))
    _close(got, dense_a.double() @ B.double(), dense_a.double().abs() @ B.double().abs(), 1e-5)
    _opcheck(lib.bsr_dense_mm_backward, (_randn(4, 12, 7, device=device), crow, col, values, 12, 20, B, True, True))


# ---------------------------------------------------------------------------- Matmul


def _matmul(seed, N, K, device, W_dtype="int4"):
    config = lowbit.MatmulConfig(N=N, K=K, A_dtype="float16", W_dtype=W_dtype, with_scaling=True, group_size=32)
    mm = lowbit.Matmul(config, device=device)
    rng = np.random.default_rng(seed)
    values = torch.from_numpy(rng.integers(-8, 8, (N, K)).astype(np.int8))
    scale = torch.from_numpy(rng.random((N, K // 32)).astype(np.float16) + 0.5)
    return mm, mm.transform_weight(values, scale=scale)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_op(device):
    mm, W = _matmul(1, 24, 96, device)
    A = _randn(2, 2, 5, 96, device=device, dtype=torch.float16)
    key, N, K, out_dtype = W._key
    _opcheck(lib.matmul, (A.clone().requires_grad_(), key, N, torch.float16))
    got = ops.matmul(mm, A, W)
    assert torch.equal(got, mm(A, W))
    Wd = torch.as_tensor(lowbit.dequantize_weight(W)).double().to(device)
    _close(got, A.double() @ Wd.T, A.double().abs() @ Wd.abs().T, 2e-3)  # float16 output
    _opcheck(lib.matmul_weight, (A, key, N, K))
    assert torch.equal(ops._ops.matmul_weight(A, key, N, K).double(), Wd)


# ------------------------------------------------------------------------- gradients


def _grad_check(fn, x, W64, bias=None, tol=1e-5):
    """fn's gradient in x (and bias) against float64's: grad @ W and the sum of grad over rows."""
    x = x.detach().clone().requires_grad_()
    b = bias.detach().clone().requires_grad_() if bias is not None else None
    y = fn(x, b)
    g = _randn(99, *y.shape, device=y.device, dtype=y.dtype)
    y.backward(g)
    _close(x.grad, g.double() @ W64, g.double().abs() @ W64.abs(), tol)
    if b is not None:
        gb = g.double().reshape(-1, g.shape[-1])
        _close(b.grad, gb.sum(0), gb.abs().sum(0), tol)


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_through_the_dequantized_weight(device):
    W = _randn(1, 17, 33, device=device)
    p, qs = ops.quantize_4bit(W, quant_type="nf4", compress_statistics=True)
    W64 = F.dequantize_4bit(p, qs).double()
    bias = _randn(2, 17, device=device)
    x = _randn(3, 2, 3, 33, device=device)
    _grad_check(lambda x, b: ops.matmul_4bit(x, p.t(), qs, b), x, W64, bias)
    _grad_check(lambda x, b: ops.gemv_4bit(x, p, qs, b), x[0, 0], W64, bias)
    CB, SCB = _int8_weight(4, 19, 37, device)
    _grad_check(lambda x, b: ops.int8_linear(x, CB, SCB, b, 6.0), _randn(5, 4, 37, device=device),
                CB.double() * SCB.double()[:, None] / 127, _randn(6, 19, device=device))
    wq, ws = F.weight_quant(_randn(7, 130, 256, device=device))
    _grad_check(lambda x, b: ops.fp8_linear(x, wq, ws, b), _randn(8, 3, 256, device=device),
                F.weight_dequant(wq, ws, dtype=torch.float32).double(), _randn(9, 130, device=device))
    mm, Wm = _matmul(10, 24, 64, device)
    Wm64 = torch.as_tensor(lowbit.dequantize_weight(Wm)).double().to(device)
    _grad_check(lambda x, b: ops.matmul(mm, x, Wm), _randn(11, 5, 64, device=device, dtype=torch.float16), Wm64,
                tol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_bsr_gradients(device):
    crow, col, values, dense_a = _bsr(1, 12, 20, 4, 5, device)
    values = values.clone().requires_grad_()
    B = _randn(3, 20, 7, device=device, dtype=torch.float32).requires_grad_()
    y = ops.bsr_dense_mm(lowbit.sparse.BSR(crow, col, values, (12, 20)), B)
    g = _randn(4, 12, 7, device=device)
    y.backward(g)
    g64, B64 = g.double(), B.detach().double()
    _close(B.grad, dense_a.double().T @ g64, dense_a.double().abs().T @ g64.abs(), 1e-5)
    rows = torch.repeat_interleave(torch.arange(3, device=device), (crow[1:] - crow[:-1]).long())
    for j in range(values.shape[0]):  # block (i, c): grad's rows of i times B's rows of c, transposed
        i, c = int(rows[j]), int(col[j])
        ref = g64[4 * i:4 * i + 4] @ B64[5 * c:5 * c + 5].T
        _close(values.grad[j], ref, g64[4 * i:4 * i + 4].abs() @ B64[5 * c:5 * c + 5].abs().T, 1e-5)


def test_gradcheck_of_the_linear_ops():
    """torch.autograd.gradcheck (finite differences) of the ops linear in their inputs, in float32 (the ops take no
    float64): matmul_4bit in A and bias, bsr_dense_mm in the values and dense."""
    p, qs = ops.quantize_4bit(_randn(1, 7, 33), quant_type="fp4", compress_statistics=True)
    A, bias = _randn(2, 3, 33).requires_grad_(), _randn(3, 7).requires_grad_()
    kw = dict(eps=1e-2, atol=2e-3, rtol=2e-3, fast_mode=False)
    with pytest.warns(UserWarning, match="double precision"):
        assert torch.autograd.gradcheck(lambda a, b: ops.matmul_4bit(a, p, qs, b), (A, bias), **kw)
    crow, col, values, _ = _bsr(4, 8, 10, 4, 5, "cpu")
    assert 0 < values.shape[0] < 4
    values, B = values.requires_grad_(), _randn(5, 10, 3).requires_grad_()
    with pytest.warns(UserWarning, match="double precision"):
        assert torch.autograd.gradcheck(lambda v, b: ops.bsr_dense_mm(lowbit.sparse.BSR(crow, col, v, (8, 10)), b),
                                        (values, B), **kw)


# ------------------------------------------------------------- compile, export, graphs


class _Model(torch.nn.Module):
    """Two 4-bit layers (nf4 double-quantized, fp4), an int8 layer with outliers, an FP8 layer and a Matmul."""

    def __init__(self, device):
        super().__init__()
        self.p1, self.q1 = F.quantize_4bit(_randn(1, 48, 40, device=device), quant_type="nf4",
                                           compress_statistics=True)
        self.b1 = torch.nn.Parameter(_randn(2, 48, device=device))
        self.p2, self.q2 = F.quantize_4bit(_randn(3, 40, 48, device=device), quant_type="fp4")
        self.CB, self.SCB = _int8_weight(4, 128, 40, device)
        self.wq, self.ws = F.weight_quant(_randn(5, 64, 128, device=device))
        self.mm, self.W = _matmul(6, 24, 64, device)

    def forward(self, x):
        h = torch.relu(ops.matmul_4bit(x, self.p1.t(), self.q1, self.b1))
        h = ops.matmul_4bit(h, self.p2.t(), self.q2)
        h = ops.int8_linear(h, self.CB, self.SCB, None, 2.5)
        h = ops.fp8_linear(h, self.wq, self.ws)
        return ops.matmul(self.mm, h.half(), self.W)


@pytest.mark.parametrize("device", DEVICES)
def test_model_compiles_without_graph_breaks(device):
    torch._dynamo.reset()
    model = _Model(device)
    x = _randn(7, 5, 40, device=device)
    eager = model(x)
    assert torch._dynamo.explain(model)(x).graph_break_count == 0
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    assert torch.equal(compiled(x), eager)
    x2 = _randn(8, 3, 40, device=device)
    assert torch.equal(compiled(x2), model(x2))
    xg = x.clone().requires_grad_()
    compiled(xg).float().sum().backward()
    xe = x.clone().requires_grad_()
    model(xe).float().sum().backward()
    assert torch.equal(xg.grad, xe.grad) and torch.isfinite(xg.grad).all()


def _every_op(x, w, q, k, v, seqlens, bsr, dense):
    """A call of each op's wrapper (their results, flattened), for tracing them all in one graph."""
    p, qs = ops.quantize_4bit(w, quant_type="nf4", compress_statistics=True)
    b, bs = ops.quantize_blockwise(w, blocksize=256, nested=True)
    xq, xs = ops.act_quant(x)
    wq, ws = ops.weight_quant(w)
    Aq, stats, _ = ops.int8_vectorwise_quant(x)
    CB, SCB, _ = ops.int8_vectorwise_quant(w)
    return (p, ops.dequantize_4bit(p, qs), ops.gemv_4bit(x[:1], p, qs), b, ops.dequantize_blockwise(b, bs),
            ops.weight_dequant(wq, ws, dtype=torch.float32), ops.fp8_gemm(xq, xs, wq, ws, torch.float32),
            ops.int8_scaled_mm(Aq, CB, stats, SCB), ops.int8_linear_grad_input(x[:, :130], CB[:, :130], SCB),
            ops.flash_attention(q, k, v, True), ops.flash_attention_kvcache(q, k, v, seqlens, is_causal=True),
            ops.flash_attention_varlen(q[0], k[0], v[0], seqlens[:2] * 0 + torch.tensor([0, 5], dtype=torch.int32,
                                       device=q.device), seqlens[:2] * 0 + torch.tensor([0, 7], dtype=torch.int32,
                                       device=q.device)),
            ops.bsr_dense_mm(bsr, dense))


@pytest.mark.parametrize("device", DEVICES)
def test_every_op_traces_in_one_graph(device):
    torch._dynamo.reset()
    args = (_randn(1, 3, 256, device=device), _randn(2, 130, 256, device=device), _randn(3, 1, 5, 4, 24, device=device),
            _randn(4, 1, 7, 2, 24, device=device), _randn(5, 1, 7, 2, 20, device=device),
            torch.tensor([7], dtype=torch.int32, device=device),
            lowbit.sparse.BSR(*_bsr(6, 12, 20, 4, 5, device)[:3], (12, 20)), _randn(7, 20, 7, device=device))
    eager = _every_op(*args)
    explained = torch._dynamo.explain(_every_op)(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(_every_op, fullgraph=True)(*args)
    for i, (g, w) in enumerate(zip(compiled, eager)):
        assert g.dtype == w.dtype and torch.equal(g.view(torch.uint8), w.view(torch.uint8)), f"output {i}"


@pytest.mark.parametrize("device", DEVICES)
def test_model_exports(device):
    model = _Model(device)
    x = _randn(7, 5, 40, device=device)
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    names = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"lowbit.matmul_4bit.default", "lowbit.int8_linear.default", "lowbit.fp8_linear.default",
            "lowbit.matmul.default"} <= names
    assert torch.equal(ep.module()(x), model(x))
    x2 = _randn(8, 9, 40, device=device)
    assert torch.equal(ep.module()(x2), model(x2))


@pytest.mark.skipif(_cuda_reason is not None, reason=f"torch CUDA: {_cuda_reason}")
def test_cuda_graph_replay():
    torch._dynamo.reset()
    model = _Model("cuda")
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for seed in range(4):  # warm-up, record, then replays with fresh inputs
        x = _randn(seed, 5, 40, device="cuda")
        assert torch.equal(compiled(x), model(x))
    static = _randn(9, 5, 40, device="cuda")
    model(static)  # warm-up off the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(static)
    fresh = _randn(10, 5, 40, device="cuda")
    static.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, model(fresh))


# ------------------------------------------------------------------------ bad inputs


def test_bad_inputs_give_lowbits_errors():
    p, qs = F.quantize_4bit(_randn(1, 9, 40), quant_type="nf4")
    with pytest.raises(ValueError, match="matmul_4bit: .*"):
        ops.matmul_4bit(_randn(2, 3, 41), p, qs)  # K mismatch
    with pytest.raises(ValueError, match="matmul_4bit: the quant state is required"):
        ops.matmul_4bit(_randn(2, 3, 40), p, None)
    with pytest.raises(ValueError, match="act_quant: last dimension of input \\(100\\) must be divisible"):
        ops.act_quant(_randn(3, 2, 100))
    CB, SCB = _int8_weight(4, 8, 16, "cpu")
    with pytest.raises(TypeError, match="int8_linear"):
        ops.int8_linear(_randn(5, 2, 16), CB.float(), SCB)
    with pytest.raises(ValueError, match="quantize_4bit: absmax must be None"):
        ops.quantize_4bit(_randn(6, 4, 4), absmax=torch.empty(1))
    with pytest.raises(TypeError, match="matmul: W must be a lowbit.PackedWeight"):
        ops.matmul(None, _randn(7, 2, 64, dtype=torch.float16), object())
    mm, W = _matmul(8, 24, 64, "cpu")
    key, N, _, _ = W._key
    del mm, W
    with pytest.raises(ValueError, match=f"matmul: no live packed weight has key {key}"):
        lib.matmul(_randn(9, 2, 64, dtype=torch.float16), key, N, torch.float16)
