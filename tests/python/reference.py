"""NumPy reference implementations of lowbit's ops, written from docs/formats.md —
independent of the C++ code. float32 arithmetic is spelled out step by step
(np.float32 operations round like single IEEE operations)."""

from __future__ import annotations

import itertools
from statistics import NormalDist

import numpy as np

F32 = np.float32

# ------------------------------------------------------------ float formats


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32 (finite inputs)."""
    b = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(F32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(F32)


def e4m3_decode(bits: np.ndarray) -> np.ndarray:
    """OCP float8_e4m3fn codes -> float32 (S.EEEE.MMM, bias 7, 0x7f/0xff NaN)."""
    b = np.asarray(bits, np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 0x7
    mag = np.where(e == 0, m * 2.0**-9, (1 + m / 8.0) * 2.0 ** (e - 7))
    out = sign * mag
    out = np.where((b & 0x7F) == 0x7F, np.nan, out)
    return out.astype(F32)


_E4M3_POS = e4m3_decode(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)  # codes 0..126, ascending


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float32 -> float8_e4m3fn codes: nearest value, ties to the even code,
    saturating to ±448 (the satfinite rule); NaN -> sign | 0x7f."""
    x = np.asarray(x, F32).astype(np.float64)
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(_E4M3_POS, a, side="left"), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    d_hi = np.abs(_E4M3_POS[hi] - a)
    d_lo = np.abs(a - _E4M3_POS[lo])
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    sign = np.signbit(x).astype(np.int64) << 7
    out = (code | sign).astype(np.uint8)
    return np.where(np.isnan(x), (sign | 0x7F).astype(np.uint8), out)


def to_dtype(x32: np.ndarray, name: str) -> np.ndarray:
    """float32 values converted to `name`, as float32 (the values an output holds)."""
    if name == "float32":
        return np.asarray(x32, F32)
    if name == "float16":
        return np.asarray(x32, F32).astype(np.float16).astype(F32)
    if name == "bfloat16":
        return bf16_round(x32)
    raise ValueError(name)


# ---------------------------------------------------------------- code maps


def _torch_linspace(a, b, steps: int) -> np.ndarray:
    """torch.linspace in float32 (docs/formats.md): step = (b - a) / (steps - 1)
    in fp32; element i = fma(step, i, a) for i < steps / 2, else
    fma(-step, steps - 1 - i, b). The fma is exact in float64 here (a 24-bit
    step times an index of at most 9 bits, plus an fp32), then rounded once."""
    a, b = F32(a), F32(b)
    if steps == 1:
        return np.array([a], F32)
    step = np.float64((b - a) / F32(steps - 1))
    i = np.arange(steps, dtype=np.float64)
    lo = step * i + np.float64(a)
    hi = -step * (steps - 1 - i) + np.float64(b)
    return np.where(i < steps // 2, lo, hi).astype(F32)


def _means(boundaries: np.ndarray) -> np.ndarray:
    return ((boundaries[:-1] + boundaries[1:]) / F32(2.0)).astype(F32)


def dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> np.ndarray:
    """The dynamic map: bitsandbytes' create_dynamic_map with its float32 (torch) arithmetic."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = (
            2 ** (i + non_sign_bits - max_exponent_bits) + 1
            if signed
            else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1
        )
        means = _means(_torch_linspace(0.1, 1, fraction_items))
        scale = F32(10.0 ** (-(max_exponent_bits - 1) + i))
        data += (scale * means).astype(F32).tolist()
        if signed:
            data += (-scale * means).astype(F32).tolist()
    if additional_items > 0:
        means = _means(_torch_linspace(0.1, 1, additional_items + 1))
        scale = F32(10.0 ** (-(max_exponent_bits - 1) + i))
        data += (scale * means).astype(F32).tolist()
        if signed:
            data += (-scale * means).astype(F32).tolist()
    data += [0, 1.0]
    data += [0] * (256 - len(data))
    return np.sort(np.array(data, F32), kind="stable")


def linear_map(signed: bool = True, total_bits: int = 8, add_zero: bool = True) -> np.ndarray:
    sign = -1.0 if signed else 0.0
    total_values = 2**total_bits
    if add_zero or total_bits < 8:
        total_values = 2**total_bits if not signed else 2**total_bits - 1
    values = _torch_linspace(sign, 1.0, total_values)
    gap = 256 - values.size
    if gap == 0:
        return values
    half = values.size // 2
    return np.array(values[:half].tolist() + [0] * gap + values[half:].tolist(), F32)


def normal_map(offset: float = 0.9677083, use_extra_value: bool = True) -> np.ndarray:
    """Φ⁻¹ from Python's statistics.NormalDist (Wichura's AS241), on torch's fp32 linspace."""
    ppf = NormalDist().inv_cdf
    if use_extra_value:
        v1 = [ppf(float(p)) for p in _torch_linspace(offset, 0.5, 9)[:-1]]
        v2 = [0] * (256 - 15)
    else:
        v1 = [ppf(float(p)) for p in _torch_linspace(offset, 0.5, 8)[:-1]]
        v2 = [0] * (256 - 14)
    v3 = [-ppf(float(p)) for p in _torch_linspace(offset, 0.5, 8)[:-1]]
    v = np.sort(np.array(v1 + v2 + v3, np.float64).astype(F32))
    return (v / v.max()).astype(F32)


def fp8_map(signed: bool = True, exponent_bits: int = 5, precision_bits: int = 2, total_bits: int = 8) -> np.ndarray:
    has_sign = 1 if signed else 0
    bias = 2 ** (exponent_bits - 1)
    values = []
    for evalue in range(2**exponent_bits):
        for bit_pattern in itertools.product([0, 1], repeat=precision_bits):
            value = 1 if evalue != 0 else 0
            for i, pval in enumerate(bit_pattern):
                value += pval * 2 ** -(i + 1)
            if evalue == 0:
                value = value * 2**-bias
            else:
                value = value * 2 ** -(evalue - bias - 1)
            values.append(value)
            if signed:
                values.append(-value)
    assert len(values) == 2**total_bits and has_sign in (0, 1)
    values += [0] * (256 - len(values))
    v = np.sort(np.array(values, np.float64))
    return (v / v.max()).astype(F32)


# 4-bit tables (docs/formats.md, "4-bit"; index = code).
NF4 = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
     -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
     0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
     0.7229568362236023, 1.0],
    F32,
)
_FP4_POS = np.array([0, 0.0625, 8, 12, 4, 6, 2, 3], np.float64) / 12
FP4 = np.concatenate([_FP4_POS, -_FP4_POS]).astype(F32)
INT4 = (np.array([7, 6, 5, 4, 3, 2, 1, 0, -0.0, -1, -2, -3, -4, -5, -6, -7]) / 7).astype(F32)
FP4_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], F32)


# ------------------------------------------------------- blockwise (8-bit)


def block_absmax(x: np.ndarray, blocksize: int) -> np.ndarray:
    x = np.asarray(x, F32).reshape(-1)
    nb = -(-x.size // blocksize)
    pad = np.zeros(nb * blocksize, F32)
    pad[: x.size] = np.abs(x)
    return pad.reshape(nb, blocksize).max(axis=1).astype(F32)


def normalize(x: np.ndarray, absmax: np.ndarray, blocksize: int) -> np.ndarray:
    """y = x * (1 / absmax[block]) in float32; an all-zero block gives 0."""
    x = np.asarray(x, F32).reshape(-1)
    with np.errstate(divide="ignore"):
        r = np.where(absmax > 0, F32(1) / absmax, F32(0)).astype(F32)
    return (x * np.repeat(r, blocksize)[: x.size]).astype(F32)


def nearest_code(y: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Index of the nearest map value; an exact midpoint takes the lower code
    (the count of float32 midpoints strictly below y)."""
    mids = ((code[:-1] + code[1:]) * F32(0.5)).astype(F32)
    return np.searchsorted(mids, y, side="left").astype(np.uint8)


def quantize_blockwise(x: np.ndarray, code: np.ndarray, blocksize: int):
    absmax = block_absmax(x, blocksize)
    return nearest_code(normalize(x, absmax, blocksize), code), absmax


def dequantize_blockwise(q: np.ndarray, code: np.ndarray, absmax: np.ndarray, blocksize: int) -> np.ndarray:
    q = np.asarray(q).reshape(-1)
    return (code[q] * np.repeat(absmax, blocksize)[: q.size]).astype(F32)


def nested_absmax(qabsmax, code2, absmax2, blocksize2, offset) -> np.ndarray:
    """Decoded double-quantized absmax: (code2[q] * absmax2[b // bs2]) + offset, each rounded in fp32."""
    return (dequantize_blockwise(qabsmax, code2, absmax2, blocksize2) + F32(offset)).astype(F32)


# -------------------------------------------------------------------- 4-bit

_FP4_CONSTS = np.array([0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333], F32)
_FP4_MAG = np.array([0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011], np.uint8)


def encode_4bit(y: np.ndarray, quant_type: str) -> np.ndarray:
    if quant_type == "nf4":
        return nearest_code(y, NF4)
    sign = (y < 0).astype(np.uint8) << 3
    k = np.searchsorted(_FP4_CONSTS, np.abs(y), side="left")
    return (_FP4_MAG[k] | sign).astype(np.uint8)


def pack(codes: np.ndarray) -> np.ndarray:
    c = np.asarray(codes, np.uint8)
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return ((c[0::2] << 4) | c[1::2]).astype(np.uint8)


def unpack(packed: np.ndarray, n: int) -> np.ndarray:
    p = np.asarray(packed, np.uint8).reshape(-1)
    return np.stack([p >> 4, p & 0xF], axis=1).reshape(-1)[:n]


def quantize_4bit(x: np.ndarray, blocksize: int, quant_type: str):
    absmax = block_absmax(x, blocksize)
    return pack(encode_4bit(normalize(x, absmax, blocksize), quant_type)), absmax


def dequantize_4bit(packed: np.ndarray, absmax: np.ndarray, blocksize: int, quant_type: str, n: int) -> np.ndarray:
    table = NF4 if quant_type == "nf4" else FP4
    return dequantize_blockwise(unpack(packed, n), table, absmax, blocksize)


# ------------------------------------------------------------------- FP8


def _e4m3_scale(amax: np.ndarray, ue8m0: bool) -> np.ndarray:
    s = (np.maximum(amax, F32(1e-4)) / F32(448.0)).astype(F32)
    if ue8m0:
        s = np.exp2(np.ceil(np.log2(s.astype(np.float64)))).astype(F32)
    return s


def act_quant(x: np.ndarray, block: int = 128, ue8m0: bool = False):
    x = np.asarray(x, F32)
    k = x.shape[-1]
    blocks = x.reshape(-1, k // block, block)
    s = _e4m3_scale(np.abs(blocks).max(axis=-1), ue8m0)
    y = e4m3_encode((blocks / s[..., None]).astype(F32))
    return y.reshape(x.shape), s.reshape(x.shape[:-1] + (k // block,))


def weight_quant(w: np.ndarray, block: int = 128):
    w = np.asarray(w, F32)
    n, k = w.shape
    sn, sk = -(-n // block), -(-k // block)
    y = np.zeros((n, k), np.uint8)
    s = np.zeros((sn, sk), F32)
    for i in range(sn):
        for j in range(sk):
            tile = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s[i, j] = _e4m3_scale(np.abs(tile).max(), False)
            y[i * block:(i + 1) * block, j * block:(j + 1) * block] = e4m3_encode((tile / s[i, j]).astype(F32))
    return y, s


def weight_dequant(y_bits: np.ndarray, s: np.ndarray, block: int = 128) -> np.ndarray:
    n, k = y_bits.shape
    full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:n, :k]
    return (e4m3_decode(y_bits) * full).astype(F32)


# ------------------------------------------------------------------- int8


def int8_vectorwise_quant(a: np.ndarray, threshold: float = 0.0):
    a = np.asarray(a, F32)
    rows = a.reshape(-1, a.shape[-1])
    outliers = np.abs(rows) >= F32(threshold) if threshold > 0 else np.zeros(rows.shape, bool)
    stats = np.where(outliers, F32(0), np.abs(rows)).max(axis=1).astype(F32)
    with np.errstate(divide="ignore"):
        factor = np.where(stats > 0, F32(127.0) / stats, F32(0)).astype(F32)
    q = np.clip(np.rint((rows * factor[:, None]).astype(F32)), -127, 127).astype(np.int8)
    cols = np.nonzero(outliers.any(axis=0))[0].astype(np.int64)
    q[:, cols] = 0
    return q.reshape(a.shape), stats, (cols if threshold > 0 else None)


def int8_vectorwise_dequant(q: np.ndarray, stats: np.ndarray) -> np.ndarray:
    rows = np.asarray(q).reshape(-1, q.shape[-1]).astype(F32)
    out = ((rows * stats[:, None]).astype(F32) * F32(7.874015718698502e-3)).astype(F32)
    return out.reshape(q.shape)


# ---------------------------------------------------------------- quantiles


def estimate_quantiles(a: np.ndarray, offset: float = 1 / 512) -> np.ndarray:
    v = np.sort(np.asarray(a, F32).astype(np.float64).reshape(-1))
    p = offset + np.arange(256) * (1 - 2 * offset) / 255
    return np.quantile(v, p).astype(F32)


def quantile_map(a: np.ndarray, total_bits: int = 8) -> np.ndarray:
    nq = 2**total_bits - 1
    q256 = estimate_quantiles(a, 1 / (2 * nq))
    q = q256[np.linspace(0, 255, nq).astype(np.int64)].tolist()
    q += [0] * (256 - len(q))
    q = np.sort(np.array(q, np.float64))
    return (q / np.abs(q).max()).astype(F32)
