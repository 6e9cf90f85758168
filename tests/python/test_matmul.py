"""lowbit.MatmulConfig / Matmul / PackedWeight, the GPTQ / AWQ / bitsandbytes
importers and functional.matmul_4bit / gemv_4bit, against NumPy float64
references written here from the unpacked inputs (docs/gemm.md: each
dequantization step rounded to float32, then a float64 dot product).

Devices: "cpu" with NumPy arrays always; "cuda" with torch CUDA tensors when
torch sees a GPU and lowbit reports a CUDA device. While lowbit has no CUDA
matmul kernels, a CUDA forward raises lowbit's no-backend error and the case
is skipped with that message.

Tolerance (tests/cpp/harness/compare.h): |got − want| ≤ rel·|want| +
terms·Σ|a·w| + abs with rel one unit roundoff of the output dtype (and the
float32 rounding before it), terms = (K + 2)·2⁻²⁴, abs half the output's
smallest subnormal; on CUDA one unit roundoff of A's dtype more in terms.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import numpy as np
import pytest

import lowbit
import lowbit.functional as F
import reference as ref
from backends import ml_dtypes, torch_cuda_reason
from lowbit import _lowbit

F32 = np.float32
F64 = np.float64

INT_RANGE = {
    "int8": (-128, 127), "int4": (-8, 7), "int2": (-2, 1), "int1": (-1, 1),
    "uint8": (0, 255), "uint4": (0, 15), "uint2": (0, 3), "uint1": (0, 1),
}
BITS = {"int8": 8, "int4": 4, "int2": 2, "int1": 1, "uint8": 8, "uint4": 4, "uint2": 2, "uint1": 1,
        "nf4": 4, "fp4": 4, "fp4_e2m1": 4, "fp8_e4m3": 8, "float16": 16, "bfloat16": 16}
TABLES = {"nf4": ref.NF4, "fp4": ref.FP4, "fp4_e2m1": ref.FP4_E2M1}
W_TYPES = list(BITS)
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
HALF_SUBNORMAL = {"float16": 2.0**-25, "bfloat16": 2.0**-134, "float32": 2.0**-150}


# ------------------------------------------------------------------ devices


class Dev:
    """Arrays of one device: NumPy on the CPU, torch tensors on CUDA."""

    def __init__(self, name: str):
        self.name = name

    def array(self, x: Any, dtype: Optional[str] = None) -> Any:
        """NumPy data on this device; float dtypes convert values that are
        exactly representable there (the tests round them first)."""
        x = np.asarray(x)
        if self.name == "cuda":
            import torch

            if dtype is None:
                return torch.from_numpy(np.ascontiguousarray(x)).cuda()
            return torch.from_numpy(np.ascontiguousarray(x.astype(F32))).to("cuda", getattr(torch, dtype))
        if dtype is None:
            return x
        if dtype == "bfloat16":
            if ml_dtypes() is None:
                pytest.skip("NumPy needs ml_dtypes for bfloat16 arrays")
            return x.astype(F32).astype(ml_dtypes().bfloat16)
        return x.astype(dtype)

    def numpy(self, x: Any) -> np.ndarray:
        """Values as NumPy (floats as float64)."""
        if not isinstance(x, np.ndarray):  # torch
            x = x.detach().cpu()
            x = x.float().numpy() if x.is_floating_point() else x.numpy()
        if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
            return x.astype(F64)
        return x


@pytest.fixture(params=["cpu", "cuda"])
def dev(request):
    if request.param == "cuda":
        reason = torch_cuda_reason()
        if reason is not None:
            pytest.skip(f"cuda: {reason}")
    return Dev(request.param)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype` (returned as float32)."""
    x = np.asarray(x, F32)
    if dtype == "float16":
        return x.astype(np.float16).astype(F32)
    if dtype == "bfloat16":
        return ref.bf16_round(x)
    return x


def assert_close(got: np.ndarray, want: np.ndarray, mag: np.ndarray, K: int, out_dtype: str, a_dtype: str,
                 device: str, what: str = "") -> None:
    rel = UNIT_ROUNDOFF[out_dtype] * 1.01 + 2.0**-24
    # CUDA: W rounded to A's dtype up to three times (the wgmma kernel scales in A's dtype; docs/gemm.md).
    terms = (K + 2) * 2.0**-24 + (3 * UNIT_ROUNDOFF[a_dtype] if device == "cuda" else 0.0)
    # CPU on bf16 A: weights rounded to bf16 once (the few-rows kernel's 4-bit table, the large-M path's panels;
    # docs/gemm.md).
    if device == "cpu" and a_dtype == "bfloat16":
        terms += UNIT_ROUNDOFF[a_dtype]
    bound = rel * np.abs(want) + terms * mag + HALF_SUBNORMAL[out_dtype] * 1.01
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    err = np.abs(got - want)
    bad = ~(err <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / np.maximum(bound, 1e-300), 0)), err.shape)
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} elements out of bounds; worst at {i}: got {got[i]!r}, "
                    f"want {want[i]!r}, |err| {err[i]:.3g} > bound {bound[i]:.3g}")


def matmul_reference(a: np.ndarray, w: np.ndarray, bias: Optional[np.ndarray]):
    """(A · wᵀ + bias, Σ|a·w| + |bias|) in float64; a [..., K], w [N, K]."""
    a64, w64 = a.astype(F64), w.astype(F64)
    want = a64 @ w64.T
    mag = np.abs(a64) @ np.abs(w64).T
    if bias is not None:
        want = want + bias.astype(F64)
        mag = mag + np.abs(bias.astype(F64))
    return want, mag


# ------------------------------------------------------------ weight inputs


@dataclasses.dataclass
class Case:
    wtype: str
    scaling: bool
    group: int
    zeros: Optional[str]  # None, "original", "rescale", "quantized"
    M: int
    N: int
    K: int
    a_dtype: str
    out_dtype: str
    scale_dtype: str
    bias: bool
    perm: bool
    seed: int

    @property
    def id(self) -> str:
        kind = "noscale" if not self.scaling else (self.zeros or "scale")
        short = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
        return (f"{self.wtype}-{kind}-g{self.group}-M{self.M}-N{self.N}-K{self.K}-A{short[self.a_dtype]}"
                f"-out{short[self.out_dtype]}{'-bias' if self.bias else ''}{'-perm' if self.perm else ''}")


def _cases() -> List[Case]:
    cases = []
    i = 0
    ks = {-1: [37, 100, 129, 64, 250], 32: [32, 96, 160, 256], 128: [128, 256, 384]}
    for wt in W_TYPES:
        variants = [(False, -1, None)] + [(True, g, None) for g in (-1, 32, 128)]
        if wt in INT_RANGE:
            variants += [(True, g, z) for g in (-1, 32, 128) for z in ("original", "rescale", "quantized")]
        for scaling, g, z in variants:
            kl = ks[g]
            cases.append(Case(
                wtype=wt, scaling=scaling, group=g, zeros=z,
                M=[1, 3, 16, 33][i % 4],
                N=[1, 7, 19, 40, 67][i % 5],
                K=kl[(i // 5) % len(kl)],
                a_dtype=["float16", "bfloat16"][(i // 4) % 2],
                out_dtype=["float16", "bfloat16", "float32"][i % 3],
                scale_dtype=["float16", "bfloat16", "float32"][(i // 2) % 3],
                bias=(i // 3) % 2 == 1,
                perm=i % 7 == 3,
                seed=1000 + i,
            ))
            i += 1
    return cases


CASES = _cases()


@dataclasses.dataclass
class Weight:
    weight: np.ndarray  # what transform_weight takes
    weight_dtype: Optional[str]  # float dtype to convert it to, or None (ints / bits as they are)
    values: np.ndarray  # float32 value of each code
    w: np.ndarray  # float32 dequantized [N, K], packed column order
    scale: Optional[np.ndarray] = None  # float32 values (of scale_dtype)
    scale_dtype: str = "float32"
    zeros: Optional[np.ndarray] = None  # quantized: integers; else float32 values of scale_dtype
    zeros_dtype: Optional[str] = None  # float dtype for original/rescale zeros
    bias: Optional[np.ndarray] = None
    bias_dtype: str = "float32"
    perm: Optional[np.ndarray] = None


def random_weight(rng: np.random.Generator, c: Case) -> Weight:
    """Random unpacked inputs over W's whole range and their dequantized
    float32 weight by docs/gemm.md's rules (each step rounded to float32)."""
    N, K, wt = c.N, c.K, c.wtype
    if wt in INT_RANGE:
        lo, hi = INT_RANGE[wt]
        v = rng.choice([-1, 1], size=(N, K)) if wt == "int1" else rng.integers(lo, hi + 1, size=(N, K))
        weight, wdt = v.astype(np.int8 if lo < 0 else np.uint8), None
        values = v.astype(F32)
        top = float(max(-lo, hi))
    elif wt in TABLES:
        weight, wdt = rng.integers(0, 16, size=(N, K)).astype(np.uint8), None
        values = TABLES[wt][weight].astype(F32)
        top = 6.0 if wt == "fp4_e2m1" else 1.0
    elif wt == "fp8_e4m3":
        bits = rng.integers(0, 256, size=(N, K)).astype(np.uint8)
        bits[(bits & 0x7F) == 0x7F] = 0x3C  # no NaN
        weight, wdt = bits, None
        values = ref.e4m3_decode(bits).astype(F32)
        top = 448.0
    else:  # float16 / bfloat16: the weight itself
        values = rounded(rng.standard_normal((N, K)).astype(F32) * 0.5, wt)
        weight, wdt = values, wt
        top = 1.0
    out = Weight(weight=weight, weight_dtype=wdt, values=values, w=values)
    G = K // c.group if c.group > 0 else 1
    gl = c.group if c.group > 0 else K
    if c.scaling:
        s = rng.uniform(0.25 / top, 1.5 / top, size=(N, G)).astype(F32)
        s.reshape(-1)[::3] *= -1
        out.scale = rounded(s, c.scale_dtype)
        out.scale_dtype = c.scale_dtype
        S = np.repeat(out.scale, gl, axis=1)
        if c.zeros is None:
            out.w = values * S
        elif c.zeros == "quantized":
            lo, hi = INT_RANGE[wt]
            z = rng.choice([-1, 1], size=(N, G)) if wt == "int1" else rng.integers(lo, hi + 1, size=(N, G))
            out.zeros = z.astype(np.int8 if lo < 0 else (np.uint8 if c.seed % 2 else np.int32))
            out.w = (values - np.repeat(z, gl, axis=1).astype(F32)) * S  # v − z exact: GPTQ's (q − z)·s
        else:
            lo, hi = INT_RANGE[wt]
            zl, zh = (-1.0, 1.0) if c.zeros == "rescale" else (float(lo), float(hi))
            out.zeros = rounded(rng.uniform(zl, zh, size=(N, G)).astype(F32), c.scale_dtype)
            out.zeros_dtype = c.scale_dtype
            Z = np.repeat(out.zeros, gl, axis=1)
            out.w = (values - Z) * S if c.zeros == "original" else values * S - Z
    if c.bias:
        out.bias_dtype = ["float32", "bfloat16", "float16"][c.seed % 3]
        out.bias = rounded(rng.standard_normal(N).astype(F32), out.bias_dtype)
    if c.perm:
        out.perm = rng.permutation(K).astype(np.int32 if c.seed % 2 else np.int64)
    assert out.w.dtype == F32
    return out


def config_of(c: Case) -> lowbit.MatmulConfig:
    return lowbit.MatmulConfig(
        M=[1, 16, 64], N=c.N, K=c.K, A_dtype=c.a_dtype, W_dtype=c.wtype, accum_dtype="float32",
        out_dtype=c.out_dtype, with_bias=c.bias, group_size=c.group, with_scaling=c.scaling,
        with_zeros=c.zeros is not None, zeros_mode=c.zeros or "original",
    )


def transform(dev: Dev, mm: lowbit.Matmul, wt: Weight) -> lowbit.PackedWeight:
    """mm.transform_weight on `dev`'s arrays of the weight's inputs."""
    return mm.transform_weight(
        dev.array(wt.weight, wt.weight_dtype),
        scale=None if wt.scale is None else dev.array(wt.scale, wt.scale_dtype),
        zeros=None if wt.zeros is None else dev.array(wt.zeros, wt.zeros_dtype),
        bias=None if wt.bias is None else dev.array(wt.bias, wt.bias_dtype),
        perm=None if wt.perm is None else dev.array(wt.perm),
    )


def in_a_order(w: np.ndarray, perm: Optional[np.ndarray]) -> np.ndarray:
    """The dequantized weight with columns in A's order: W[n, perm[j]] = w[n, j]."""
    if perm is None:
        return w
    out = np.empty_like(w)
    out[:, perm] = w
    return out


# -------------------------------------------------------------- the sweep


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matmul_matches_reference(dev, case):
    c = case
    rng = np.random.default_rng(c.seed)
    wt = random_weight(rng, c)
    mm = lowbit.Matmul(config_of(c), device=dev.name)
    W = transform(dev, mm, wt)
    assert W.device == mm.device

    # The values every backend multiplies by: exactly the test's own dequantization.
    np.testing.assert_array_equal(dev.numpy(lowbit.dequantize_weight(W)), in_a_order(wt.w, wt.perm).astype(F64))

    a = rounded(rng.uniform(-1, 1, size=(c.M, c.K)).astype(F32), c.a_dtype)
    out = mm(dev.array(a, c.a_dtype), W)
    assert dev.numpy(out).shape == (c.M, c.N)
    a_cols = a if wt.perm is None else a[:, wt.perm]  # packed column j multiplies A[:, perm[j]]
    want, mag = matmul_reference(a_cols, wt.w, wt.bias)
    assert_close(dev.numpy(out), want, mag, c.K, c.out_dtype, c.a_dtype, dev.name, c.id)
    if dev.name == "cuda":
        import torch

        assert isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == getattr(torch, c.out_dtype)
    else:
        assert isinstance(out, np.ndarray) and out.dtype.name == c.out_dtype


# ------------------------------------------------------------- the API


def _int4_setup(dev: Dev, N=5, K=64, M=2, bias=True, rng=None):
    rng = rng or np.random.default_rng(7)
    c = Case("int4", True, 32, None, M, N, K, "float16", "float16", "float16", bias, False, 7)
    wt = random_weight(rng, c)
    mm = lowbit.Matmul(config_of(c), device=dev.name)
    return c, wt, mm, transform(dev, mm, wt)


def test_config_fields_defaults_and_repr():
    c = lowbit.MatmulConfig(N=4096, K=1024)
    assert c.M == [1, 16, 32, 64, 128, 256, 512, 1024]
    assert (c.N, c.K, c.A_dtype, c.W_dtype, c.accum_dtype, c.out_dtype) == (
        4096, 1024, "float16", "float16", "float32", "float16")
    assert (c.layout, c.with_bias, c.group_size, c.with_scaling, c.with_zeros, c.zeros_mode) == (
        "nt", False, -1, False, False, "original")
    assert repr(c) == (
        "MatmulConfig(M=[1, 16, 32, 64, 128, 256, 512, 1024], N=4096, K=1024, A_dtype='float16', "
        "W_dtype='float16', accum_dtype='float32', out_dtype='float16', layout='nt', with_bias=False, "
        "group_size=-1, with_scaling=False, with_zeros=False, zeros_mode='original')")
    # W_dtype follows A_dtype (BitBLAS); int M; BitBLAS' fp8 spelling; dtype objects.
    assert lowbit.MatmulConfig(N=1, K=1, A_dtype="bfloat16").W_dtype == "bfloat16"
    assert lowbit.MatmulConfig(16, 8, 32).M == [16]
    assert lowbit.MatmulConfig(N=1, K=1, W_dtype="e4m3_float8").W_dtype == "fp8_e4m3"
    assert lowbit.MatmulConfig(N=1, K=1, A_dtype=np.float16, out_dtype=np.dtype("float32")).out_dtype == "float32"
    q = lowbit.MatmulConfig(M=(1, 4), N=8, K=64, W_dtype="uint4", with_scaling=True, group_size=32, with_zeros=True,
                            zeros_mode="quantized")
    assert q.M == [1, 4] and q.groups() == 2 and q.W_dtype == "uint4" and q.zeros_mode == "quantized"
    assert q == lowbit.MatmulConfig(M=[1, 4], N=8, K=64, W_dtype="uint4", with_scaling=True, group_size=32,
                                    with_zeros=True, zeros_mode="quantized")
    assert q != c and q != "q"
    import copy

    q2 = copy.copy(q)
    q2.A_dtype, q2.N = "bfloat16", 16
    assert (q.A_dtype, q.N, q2.A_dtype, q2.N) == ("float16", 8, "bfloat16", 16)
    q.check()


def test_config_errors():
    with pytest.raises(TypeError, match=r"^MatmulConfig: W_dtype 'int3' is not a weight type \(int8, int4, .*nf4"):
        lowbit.MatmulConfig(N=8, K=64, W_dtype="int3")
    with pytest.raises(ValueError, match=r"^MatmulConfig: zeros_mode must be 'original', 'rescale' or 'quantized' "
                                         r"\(got 'zero'\)$"):
        lowbit.MatmulConfig(N=8, K=64, zeros_mode="zero")
    with pytest.raises(ValueError, match=r"^MatmulConfig: N is required \(got None\)$"):
        lowbit.MatmulConfig(K=64)
    with pytest.raises(TypeError, match=r"^MatmulConfig: A_dtype 'float17' is not a dtype name"):
        lowbit.MatmulConfig(N=8, K=64, A_dtype="float17")
    c = lowbit.MatmulConfig(N=8, K=64, W_dtype="int4", with_scaling=True, group_size=48)
    with pytest.raises(ValueError, match=r"^matmul: group_size must be -1 or a positive multiple of 32 \(got 48\)$"):
        lowbit.Matmul(c)
    with pytest.raises(ValueError, match=r"multiple of 32 \(got 48\)"):
        c.check()
    with pytest.raises(TypeError, match="must be a lowbit.MatmulConfig"):
        lowbit.Matmul({"N": 8})
    with pytest.raises(TypeError, match=r"^matmul: A_dtype must be one of float16, bfloat16, int8 \(got float32\)$"):
        lowbit.Matmul(lowbit.MatmulConfig(N=8, K=64, A_dtype="float32", W_dtype="int4"))


def test_a_cuda_device_that_is_not_there_is_refused_by_the_constructor():
    c = lowbit.MatmulConfig(N=64, K=64, W_dtype="int4", with_scaling=True, group_size=32)
    if lowbit.cuda_device_count() == 0:
        for device in ("cuda", "cuda:3", 5):
            with pytest.raises(RuntimeError, match=r"^Matmul: device cuda:\d+ is not available \(no CUDA device"):
                lowbit.Matmul(c, device=device)
    else:
        with pytest.raises(ValueError, match=r"^Matmul: device must be a CUDA ordinal below the device count"):
            lowbit.Matmul(c, device=lowbit.cuda_device_count())


def test_forward_errors():
    dev = Dev("cpu")
    c, wt, mm, W = _int4_setup(dev, N=5, K=64)
    a = np.zeros((2, 64), np.float16)
    with pytest.raises(TypeError, match=r"^matmul: A dtype must be the config's A_dtype float16 \(got float32\)$"):
        mm(a.astype(F32), W)
    with pytest.raises(ValueError, match=r"^matmul: A's last dimension must equal K = 64 \(got A \[2, 65\]\)$"):
        mm(np.zeros((2, 65), np.float16), W)
    with pytest.raises(ValueError, match=r"^Matmul.forward: scale must be None .*pass them to transform_weight"):
        mm(a, W, wt.scale)
    with pytest.raises(ValueError, match=r"^Matmul.forward: zeros, bias must be None"):
        mm.forward(a, W, zeros=np.zeros(1), bias=np.zeros(1))
    with pytest.raises(TypeError, match=r"^Matmul.forward: W must be a lowbit.PackedWeight .*\(got ndarray\)$"):
        mm(a, wt.weight)
    with pytest.raises(TypeError, match=r"^matmul: output dtype must be the config's out_dtype float16 \(got float32\)$"):
        mm(a, W, output=np.zeros((2, 5), F32))
    with pytest.raises(ValueError, match=r"^matmul: output must have shape \[2, 5\]"):
        mm(a, W, output=np.zeros((2, 6), np.float16))
    _, _, _, W8 = _int4_setup(dev, N=8, K=64)
    with pytest.raises(ValueError, match=r"^matmul: the packed weight's N \(8\) differs from the config's \(5\)$"):
        mm(a, W8)
    bad = wt.weight.copy()
    bad[1, 2] = 9
    with pytest.raises(ValueError, match=r"^transform_weight: weight values of int4 must be in \[-8, 7\] "
                                         r"\(got 9 at \[1, 2\]\)$"):
        mm.transform_weight(bad, wt.scale.astype(np.float16), bias=wt.bias)
    with pytest.raises(ValueError, match=r"^transform_weight: a QuantizedWeight carries"):
        mm.transform_weight(lowbit.unpack_weight(W), wt.scale)
    with pytest.raises(ValueError, match=r"device must be"):
        lowbit.Matmul(config_of(c), device="tpu")


def test_output_buffer_leading_dims_and_zero_copy():
    dev = Dev("cpu")
    c, wt, mm, W = _int4_setup(dev, N=6, K=96, M=1)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, size=(2, 3, 96)).astype(np.float16)
    out = mm(a, W)
    assert out.shape == (2, 3, 6) and out.dtype == np.float16
    np.testing.assert_array_equal(out.reshape(6, 6), mm(a.reshape(6, 96), W))
    buf = np.full((2, 3, 6), np.nan, np.float16)
    _lowbit._trace(True)
    try:
        r = mm.forward(a, W, output=buf)
    finally:
        records = _lowbit._trace(False)
    assert r is buf
    np.testing.assert_array_equal(buf, out)
    ptrs = {(op, arg): p for op, arg, p, _ in records}
    assert ptrs[("matmul", "A")] == a.ctypes.data  # read in place
    assert ptrs[("matmul", "out")] == buf.ctypes.data  # written in place
    # The returned array is the memory the op wrote.
    _lowbit._trace(True)
    try:
        out2 = mm(a, W)
    finally:
        records = _lowbit._trace(False)
    assert ("", "out", out2.ctypes.data, "cpu") in records
    assert mm.prepared_m(6) == 16 and mm.prepared_m(1) == 1 and mm.prepared_m(100) == 64
    assert mm.device == "cpu" and mm.layout == "rows" and "Matmul(MatmulConfig(" in repr(mm)


class _DeviceLike:
    def __str__(self):
        return "cpu"


@pytest.mark.parametrize("wtype,zeros", [("uint4", "quantized"), ("int2", "original"), ("uint1", "rescale"),
                                         ("nf4", None), ("fp8_e4m3", None), ("int8", "quantized")])
def test_packed_weight_layout_and_round_trip(wtype, zeros):
    c = Case(wtype, True, 32, zeros, 3, 11, 160, "bfloat16", "float32", "bfloat16", True, True, 11)
    rng = np.random.default_rng(11)
    wt = random_weight(rng, c)
    mm = lowbit.Matmul(config_of(c), device=_DeviceLike())
    W = transform(Dev("cpu"), mm, wt)
    b = BITS[wtype]
    row_bytes = -(-((c.K * b + 7) // 8) // 16) * 16
    G = c.K // 32
    assert (W.W_dtype, W.N, W.K, W.group_size, W.with_scaling, W.with_zeros, W.with_bias, W.layout, W.device) == (
        wtype, 11, 160, 32, True, zeros is not None, True, "rows", "cpu")
    assert W.qweight.dtype == np.uint8 and W.qweight.shape == (11, row_bytes)
    assert W.scale.dtype == F32 and W.scale.shape == (11, G)
    np.testing.assert_array_equal(W.scale, wt.scale)
    assert W.bias.dtype == F32 and W.bias.shape == (11,)
    assert W.perm.dtype == np.int32 and W.perm.shape == (160,)
    np.testing.assert_array_equal(W.perm, wt.perm)
    if zeros == "quantized":
        assert W.zeros.dtype == np.int32 and W.zeros.shape == (G, -(-11 * b // 32))
    elif zeros:
        assert W.zeros.dtype == F32 and W.zeros.shape == (11, G)
    else:
        assert W.zeros is None
    assert W.qweight is W.qweight  # exported once, cached
    assert W.nbytes >= W.qweight.nbytes + W.scale.nbytes
    assert "PackedWeight(" in repr(W) and "perm" in repr(W)
    # The rows layout: element k of a row in bits [k*b, k*b + b), LSB first.
    codes = wt.weight.astype(np.int64) & ((1 << b) - 1)
    if wtype == "int1":
        codes = (wt.weight > 0).astype(np.int64)
    bitpos = np.arange(c.K) * b
    got = np.zeros_like(codes)
    for j in range(b):
        byte = W.qweight[:, (bitpos + j) // 8].astype(np.int64)
        got |= ((byte >> ((bitpos + j) % 8)) & 1) << j
    np.testing.assert_array_equal(got, codes)
    # unpack_weight gives the inputs back; transform_weight takes them again.
    q = lowbit.unpack_weight(W)
    assert q.config.W_dtype == wtype and q.config.N == 11 and q.config.K == 160
    np.testing.assert_array_equal(q.weight.astype(np.int64), wt.weight.astype(np.int64))
    np.testing.assert_array_equal(q.perm, wt.perm)
    W2 = mm.transform_weight(q)
    np.testing.assert_array_equal(W2.qweight, W.qweight)
    np.testing.assert_array_equal(lowbit.dequantize_weight(W2), lowbit.dequantize_weight(W))


def test_bfloat16_bits_without_ml_dtypes(no_ml_dtypes):
    """NumPy without ml_dtypes: uint16 arrays hold bfloat16 A (and weights), results come back as uint16 bits."""
    rng = np.random.default_rng(5)
    N, K, M = 9, 64, 4
    w = rounded(rng.standard_normal((N, K)).astype(F32), "bfloat16")
    mm = lowbit.Matmul(lowbit.MatmulConfig(N=N, K=K, A_dtype="bfloat16", W_dtype="bfloat16", out_dtype="bfloat16"))
    W = mm.transform_weight(ref.bf16_bits(w))
    a = rounded(rng.uniform(-1, 1, (M, K)).astype(F32), "bfloat16")
    out = mm(ref.bf16_bits(a), W)
    assert out.dtype == np.uint16 and out.shape == (M, N)
    want, mag = matmul_reference(a, w, None)
    assert_close(ref.bf16_from_bits(out).astype(F64), want, mag, K, "bfloat16", "bfloat16", "cpu")


# ------------------------------------------------------------- importers


def pack_along(codes: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """GPTQ packing: element i of `axis` in bits (i % (32/bits))·bits of word i // (32/bits); int32."""
    per = 32 // bits
    codes = np.moveaxis(codes.astype(np.uint64), axis, 0)
    n = codes.shape[0]
    words = np.zeros(((n + per - 1) // per,) + codes.shape[1:], np.uint64)
    for i in range(n):
        words[i // per] |= codes[i] << np.uint64((i % per) * bits)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), 0, axis)


@pytest.mark.parametrize("bits,group,v2,act_order", [
    (4, 128, False, False), (4, 32, False, True), (2, -1, True, False), (8, 32, True, True), (2, 64, False, False),
])
def test_import_gptq(dev, bits, group, v2, act_order):
    rng = np.random.default_rng(bits * 100 + group)
    N, K = 24, 256
    gs = group if group > 0 else K
    G = K // gs
    q = rng.integers(0, 1 << bits, size=(N, K))
    z = rng.integers(0, (1 << bits) - 1, size=(G, N))  # zeros; v1 stores z − 1 (0 → all ones, avoided here: z ≥ 1)
    z = np.maximum(z, 1)
    s = rounded(rng.uniform(0.01, 0.05, size=(G, N)).astype(F32), "float16")
    g_idx = rng.permutation(np.arange(K) // gs).astype(np.int32) if act_order else None
    qweight = pack_along(q.T, bits, 0)  # [K·bits/32, N]
    qzeros = pack_along(z if v2 else z - 1, bits, 1)  # [G, N·bits/32]
    bias = rounded(rng.standard_normal(N).astype(F32), "float16")
    qw = lowbit.import_gptq(dev.array(qweight), dev.array(qzeros), dev.array(s, "float16"),
                            g_idx=None if g_idx is None else dev.array(g_idx), bias=dev.array(bias, "float16"),
                            bits=bits, group_size=group, zero_plus_one=not v2)
    cfg = qw.config
    assert (cfg.W_dtype, cfg.N, cfg.K, cfg.group_size, cfg.with_zeros, cfg.zeros_mode, cfg.A_dtype) == (
        f"uint{bits}", N, K, group, True, "quantized", "float16")
    assert (qw.perm is not None) == act_order
    # The checkpoint's own formula: w[n, k] = (q[n, k] − z[g(k), n]) · s[g(k), n], in float32.
    gk = g_idx if act_order else np.arange(K) // gs
    w_ref = (q - z[gk, :].T).astype(F32) * s[gk, :].T
    cfg.A_dtype = "bfloat16"  # the imported config is the weight's own: change it before making the Matmul
    mm = lowbit.Matmul(qw.config, device=dev.name)
    assert mm.config.A_dtype == "bfloat16"
    W = mm.transform_weight(qw)
    np.testing.assert_array_equal(dev.numpy(lowbit.dequantize_weight(W)), w_ref.astype(F64))
    a = rounded(rng.uniform(-1, 1, size=(3, K)).astype(F32), "bfloat16")
    out = mm(dev.array(a, "bfloat16"), W)
    want, mag = matmul_reference(a, w_ref, bias)
    assert_close(dev.numpy(out), want, mag, K, "float16", "bfloat16", dev.name)


def test_import_gptq_v1_all_ones_zero():
    bits, N, K = 4, 8, 64
    q = np.zeros((N, K), np.int64)
    stored = np.full((1, N), 15)  # v1: zero − 1 stored all ones → zero 16
    s = np.ones((1, N), np.float16)
    args = (pack_along(q.T, bits, 0), pack_along(stored, bits, 1), s)
    with pytest.raises(ValueError, match=r"^import_gptq: zero point 16 at \[0, 0\] does not fit uint4 .*"
                                         r"import with zeros_mode = original$"):
        lowbit.import_gptq(*args, group_size=-1)
    qw = lowbit.import_gptq(*args, group_size=-1, zeros_mode="original")
    assert qw.config.zeros_mode == "original" and qw.zeros.dtype == np.float16
    W = lowbit.Matmul(qw.config).transform_weight(qw)
    np.testing.assert_array_equal(lowbit.dequantize_weight(W), np.full((N, K), -16.0, F32))
    with pytest.raises(ValueError, match=r"^import_gptq: zeros_mode must be 'original', 'rescale' or 'quantized'"):
        lowbit.import_gptq(*args, zeros_mode="zero")


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_pack(codes: np.ndarray) -> np.ndarray:
    """AutoAWQ GEMM: [rows, N] codes → int32 [rows, N/8], nibble i of word j = column 8j + AWQ_ORDER[i]."""
    rows, n = codes.shape
    words = np.zeros((rows, n // 8), np.uint64)
    for i, col in enumerate(AWQ_ORDER):
        words |= codes[:, col::8].astype(np.uint64) << np.uint64(4 * i)
    return words.astype(np.uint32).view(np.int32)


def test_import_awq(dev):
    rng = np.random.default_rng(21)
    N, K, gs = 32, 128, 64
    G = K // gs
    q = rng.integers(0, 16, size=(K, N))
    z = rng.integers(0, 16, size=(G, N))
    s = rounded(rng.uniform(0.01, 0.05, size=(G, N)).astype(F32), "float16")
    qw = lowbit.import_awq(dev.array(awq_pack(q)), dev.array(awq_pack(z)), dev.array(s, "float16"), group_size=gs)
    assert (qw.config.W_dtype, qw.config.zeros_mode, qw.config.group_size, qw.bias) == ("uint4", "quantized", gs, None)
    gk = np.arange(K) // gs
    w_ref = (q.T - z[gk, :].T).astype(F32) * s[gk, :].T
    mm = lowbit.Matmul(qw.config, device=dev.name)
    W = mm.transform_weight(qw)
    np.testing.assert_array_equal(dev.numpy(lowbit.dequantize_weight(W)), w_ref.astype(F64))
    a = rounded(rng.uniform(-1, 1, size=(16, K)).astype(F32), "float16")
    out = mm(dev.array(a, "float16"), W)
    want, mag = matmul_reference(a, w_ref, None)
    assert_close(dev.numpy(out), want, mag, K, "float16", "float16", dev.name)


@pytest.mark.parametrize("quant_type,nested", [("nf4", False), ("fp4", True), ("nf4", True)])
def test_import_bnb_4bit(dev, quant_type, nested):
    rng = np.random.default_rng(31)
    N, K = 20, 192
    w = rng.standard_normal((N, K)).astype(F32)
    packed, state = F.quantize_4bit(dev.array(w, "float32"), blocksize=64, quant_type=quant_type,
                                    compress_statistics=nested)
    bias = rng.standard_normal(N).astype(F32)
    qw = lowbit.import_bnb_4bit(packed, state, bias=dev.array(bias))
    assert (qw.config.W_dtype, qw.config.group_size, qw.config.with_bias, qw.config.A_dtype) == (
        quant_type, 64, True, "float16")
    deq = dev.numpy(F.dequantize_4bit(packed, state))  # bitsandbytes' values
    mm = lowbit.Matmul(qw.config, device=dev.name)
    W = mm.transform_weight(qw)
    np.testing.assert_array_equal(dev.numpy(lowbit.dequantize_weight(W)), deq)
    a = rounded(rng.uniform(-1, 1, size=(5, K)).astype(F32), "float16")
    out = mm(dev.array(a, "float16"), W)
    want, mag = matmul_reference(a, deq.astype(F32), bias)
    assert_close(dev.numpy(out), want, mag, K, "float16", "float16", dev.name)


def test_import_bnb_4bit_errors():
    w = np.ones((4, 96), F32)
    packed, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
    with pytest.raises(ValueError, match=r"^import_bnb_4bit: the blocksize 64 must divide K \(got K = 96\)"):
        lowbit.import_bnb_4bit(packed, state)
    with pytest.raises(TypeError, match="must be a QuantState"):
        lowbit.import_bnb_4bit(packed, {"absmax": 1})


# ---------------------------------------------------- matmul_4bit / gemv_4bit


@pytest.mark.parametrize("a_dtype,quant_type,nested,bias", [
    ("float32", "nf4", False, True), ("float16", "fp4", True, False), ("bfloat16", "nf4", True, True),
])
def test_matmul_4bit(dev, a_dtype, quant_type, nested, bias):
    rng = np.random.default_rng(41)
    N, K = 13, 101  # blocks cross rows, N·K odd
    w = rng.standard_normal((N, K)).astype(F32)
    packed, state = F.quantize_4bit(dev.array(w, "float32"), blocksize=64, quant_type=quant_type,
                                    compress_statistics=nested)
    deq = dev.numpy(F.dequantize_4bit(packed, state)).astype(F32)
    b = rounded(rng.standard_normal(N).astype(F32), a_dtype) if bias else None
    bias_arr = None if b is None else dev.array(b, a_dtype)
    for shape in [(7, K), (2, 3, K)]:
        a = rounded(rng.uniform(-1, 1, size=shape).astype(F32), a_dtype)
        out = F.matmul_4bit(dev.array(a, a_dtype), packed.T, quant_state=state, bias=bias_arr)
        got = dev.numpy(out)
        want, mag = matmul_reference(a, deq, b)
        assert_close(got, want, mag, K, a_dtype, a_dtype, dev.name, f"matmul_4bit {shape}")
    # gemv_4bit: one row, in any leading shape; out= written in place.
    a = rounded(rng.uniform(-1, 1, size=(1, 1, K)).astype(F32), a_dtype)
    want, mag = matmul_reference(a, deq, b)
    out = lowbit.gemv_4bit(dev.array(a, a_dtype), packed, state, bias_arr)
    assert_close(dev.numpy(out), want, mag, K, a_dtype, a_dtype, dev.name, "gemv_4bit")
    buf = dev.array(np.zeros((1, 1, N), F32), a_dtype)
    assert F.gemv_4bit(dev.array(a, a_dtype), packed, state, bias_arr, out=buf) is buf
    assert_close(dev.numpy(buf), want, mag, K, a_dtype, a_dtype, dev.name, "gemv_4bit out=")


@pytest.mark.parametrize("a_dtype,nested", [("float16", True), ("bfloat16", False)])
def test_matmul_4bit_on_a_foreign_state(dev, a_dtype, nested):
    """A state object of another library (bitsandbytes' QuantState) is read by its
    attributes alone; K = 256 takes the CUDA fused kernel up to M = 64, the
    dequantize + GEMM path above."""
    import types

    rng = np.random.default_rng(43)
    N, K = 40, 256
    w = rng.standard_normal((N, K)).astype(F32)
    packed, state = F.quantize_4bit(dev.array(w, "float32"), blocksize=64, quant_type="nf4",
                                    compress_statistics=nested)
    deq = dev.numpy(F.dequantize_4bit(packed, state)).astype(F32)
    state2 = None
    if nested:
        state2 = types.SimpleNamespace(absmax=state.state2.absmax, code=state.state2.code,
                                       blocksize=state.state2.blocksize, dtype="float32")
    foreign = types.SimpleNamespace(absmax=state.absmax, shape=tuple(state.shape), code=state.code,
                                    dtype=state.dtype, blocksize=64, quant_type="nf4", offset=state.offset,
                                    state2=state2, nested=nested)
    for M in (1, 16, 40, 80):
        a = rounded(rng.uniform(-1, 1, size=(M, K)).astype(F32), a_dtype)
        out = F.matmul_4bit(dev.array(a, a_dtype), packed.T, quant_state=foreign)
        want, mag = matmul_reference(a, deq, None)
        assert_close(dev.numpy(out), want, mag, K, a_dtype, a_dtype, dev.name, f"matmul_4bit foreign state M={M}")


def test_matmul_4bit_errors():
    w = np.ones((6, 64), F32)
    packed, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
    with pytest.raises(ValueError, match=r"^gemv_4bit: A must hold one row \(got \[2, 64\]; matmul_4bit takes any"):
        F.gemv_4bit(np.zeros((2, 64), F32), packed, state)
    with pytest.raises(ValueError, match=r"^matmul_4bit: A's last dimension must equal the weight's K = 64 "
                                         r"\(got A \[2, 63\]\)$"):
        F.matmul_4bit(np.zeros((2, 63), F32), packed, state)
    with pytest.raises(ValueError, match=r"^matmul_4bit: the quant state is required"):
        F.matmul_4bit(np.zeros((2, 64), F32), packed, None)
    flat_packed, flat_state = F.quantize_4bit(np.ones(64, F32), quant_type="nf4")
    with pytest.raises(ValueError, match=r"^matmul_4bit: quant state shape must be a weight's \[N, K\] \(got 1 dims\)"):
        F.matmul_4bit(np.zeros((2, 64), F32), flat_packed, flat_state)
    with pytest.raises(TypeError, match=r"^matmul_4bit: A dtype must be one of float32, float16, bfloat16.*"
                                        r"\(got float64\)$"):
        F.matmul_4bit(np.zeros((2, 64)), packed, state)


# ------------------------------------------------------------- frameworks


def test_torch_cpu_tensors_in_and_out():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(51)
    N, K = 10, 64
    v = rng.integers(-8, 8, size=(N, K)).astype(np.int8)
    s = rounded(rng.uniform(0.1, 0.2, size=(N, 2)).astype(F32), "bfloat16")
    mm = lowbit.Matmul(lowbit.MatmulConfig(N=N, K=K, A_dtype=torch.bfloat16, W_dtype="int4", out_dtype="float32",
                                           with_scaling=True, group_size=32), device=torch.device("cpu"))
    W = mm.transform_weight(torch.from_numpy(v), scale=torch.from_numpy(s).to(torch.bfloat16))
    assert isinstance(W.qweight, torch.Tensor) and W.qweight.dtype == torch.uint8
    a = torch.from_numpy(rounded(rng.uniform(-1, 1, (4, K)).astype(F32), "bfloat16")).to(torch.bfloat16)
    out = mm(a, W)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (4, N)
    w = v.astype(F32) * np.repeat(s, 32, axis=1)
    want, mag = matmul_reference(a.float().numpy(), w, None)
    assert_close(out.numpy().astype(F64), want, mag, K, "float32", "bfloat16", "cpu")
    assert isinstance(lowbit.dequantize_weight(W), torch.Tensor)


def test_docs_example_runs():
    """docs/python.md's Matmul example, as written."""
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                        "python.md")
    if not os.path.exists(path):
        pytest.skip("docs/python.md is not beside the tests")
    text = open(path, encoding="utf-8").read()
    section = text[text.index("\n## Matmul\n"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("```", start)]
    exec(compile(code, "docs/python.md (Matmul)", "exec"), {})


def test_w8a8_is_the_exact_int32_product(dev):
    """A_dtype int8 (BitBLAS' W8A8): int8 A times an int8 weight, the exact int32 product on every backend; W_dtype
    defaults to int8, as BitBLAS' defaults to A_dtype."""
    rng = np.random.default_rng(88)
    N, K = 40, 144
    cfg = lowbit.MatmulConfig(N=N, K=K, A_dtype="int8", accum_dtype="int32", out_dtype="int32")
    assert cfg.W_dtype == "int8"
    mm = lowbit.Matmul(cfg, device=dev.name)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    W = mm.transform_weight(dev.array(w))
    for M in (1, 7, 70):
        A = rng.integers(-128, 128, (M, K), dtype=np.int8)
        got = dev.numpy(mm(dev.array(A), W))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, A.astype(np.int64) @ w.astype(np.int64).T)
    with pytest.raises(ValueError, match="W_dtype must be int8"):
        lowbit.Matmul(lowbit.MatmulConfig(N=N, K=K, A_dtype="int8", W_dtype="int4", accum_dtype="int32",
                                          out_dtype="int32", with_scaling=True))
