#!/usr/bin/env python3
"""bitsandbytes interchange, checked against bitsandbytes itself on a CUDA GPU.

1. States. lowbit's quantize_4bit (nf4/fp4, nested or not, every blocksize,
   fp16/bf16/fp32), quantize_blockwise (8-bit, nested or not) and
   int8_vectorwise_quant (threshold 0 and 6) are decoded by bitsandbytes —
   4-bit states through ``QuantState.as_dict`` / bitsandbytes'
   ``QuantState.from_dict`` (packed and unpacked), 8-bit states as a
   bitsandbytes ``QuantState`` built from lowbit's fields — and must give
   lowbit's own dequantization bit for bit; the reverse (bitsandbytes'
   states, as objects and through ``from_dict``, decoded by lowbit) must give
   bitsandbytes' bit for bit. The codes each library's GPU quantization
   picks are compared and every difference is classified by emulating
   bitsandbytes' encoders (docs/formats.md, "Agreement with bitsandbytes"):
   its 1/absmax (``--use_fast_math``: an approximate reciprocal, up to an
   ulp or two off the correctly rounded one lowbit uses), its 8-bit search's
   tie rule, and the double-quant offset (``torch.mean`` in fp32 against
   lowbit's double-precision tree sum).
2. Checkpoints. A small random fp16 Llama written by ``save_pretrained`` is
   quantized by ``lowbit quantize`` to nf4 (double quant), fp4 and int8,
   loaded by ``AutoModelForCausalLM.from_pretrained(dir, device_map="cuda")``
   and its logits compared with transformers' own bitsandbytes quantization
   of the same model; the files are compared key by key (names, dtypes,
   shapes, values) with what transformers' ``save_pretrained`` writes, and
   the ``quantization_config`` field by field.

Usage (on the GPU machine, after building lowbit_cli and the Python module):
    python3 tests/gpu/bnb_interchange.py [--quick]
lowbit is imported from $LOWBIT_PYTHON_DIR, else the newest build*/python; the
CLI is $LOWBIT_CLI, else the newest build*/tools/lowbit/lowbit. Exit status 0
on pass, and when torch, CUDA or bitsandbytes are missing (it says so);
part 2 is skipped with a message without transformers. The last line is a
'summary:'.
"""

from __future__ import annotations

import argparse
import glob
import importlib.machinery
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Relative L2 difference of the logits, lowbit's checkpoint against
# transformers' own quantization of the same model: nf4 and fp4 about twice
# what was measured on an H100, int8 a quarter above it (9.4e-3: LLM.int8's
# activation quantization amplifies the few codes bitsandbytes' approximate
# GPU reciprocal rounds the other way — moving 10 random codes of 1.6 million
# by one step changes these logits by as much; the int8 files are checked
# code by code instead). docs/formats.md, "Agreement with bitsandbytes".
LOGITS_TOL = {"nf4-dq": 5e-4, "fp4": 4e-3, "int8": 1.2e-2}
# Fraction of codes that may differ from bitsandbytes' GPU quantization (each
# by one step, and each reproduced by the emulated rules), per encoder and
# input dtype: about three times what was measured on 2^24 N(0, 1) values.
CODE_DIFF_TOL = {
    ("nf4", "float16"): 1e-6, ("nf4", "bfloat16"): 1e-6, ("nf4", "float32"): 1e-6,
    ("fp4", "float16"): 5e-5, ("fp4", "bfloat16"): 4e-4, ("fp4", "float32"): 1e-6,
    ("8-bit", "float16"): 4e-4, ("8-bit", "bfloat16"): 3e-3, ("8-bit", "float32"): 5e-6,
    ("int8", "float16"): 2.5e-4,
}
# quantization_config fields lowbit writes differently from transformers'
# save_pretrained, on purpose: lowbit lists the modules it kept (transformers
# writes null and recomputes the same list from the model).
CONFIG_FIELDS_ALLOWED = {"llm_int8_skip_modules"}

failures: List[str] = []


def log(msg: str = "") -> None:
    print(msg, flush=True)


def fail(msg: str) -> None:
    failures.append(msg)
    log(f"  FAIL: {msg}")


def newest(pattern: str) -> Optional[str]:
    found = glob.glob(os.path.join(ROOT, pattern))
    return max(found, key=os.path.getmtime) if found else None


def import_lowbit():
    tree = os.environ.get("LOWBIT_PYTHON_DIR")
    if not tree:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            hit = newest(os.path.join("build*", "python", "lowbit", "_lowbit" + suffix))
            if hit:
                tree = os.path.dirname(os.path.dirname(hit))
                break
    if tree:
        sys.path.insert(0, tree)
    import lowbit  # noqa: PLC0415

    return lowbit


# ------------------------------------------------------------ bit helpers


def bits(torch, t):
    """The raw bits of a float tensor (for bit-for-bit comparisons)."""
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 1: torch.uint8}[t.element_size()])


def same_bits(torch, a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(torch, a), bits(torch, b))


def ulp_step(torch, r, k: int):
    """r moved k representable float32 values (toward +Inf for k > 0)."""
    inf = torch.full_like(r, math.inf)
    for _ in range(abs(k)):
        r = torch.nextafter(r, inf if k > 0 else -inf)
    return r


def unpack_nibbles(torch, packed, n: int):
    p = packed.reshape(-1).view(torch.uint8)
    return torch.stack([p >> 4, p & 15], dim=1).reshape(-1)[:n].long()


# --------------------------------------------- bitsandbytes' encoders, emulated

# dQuantizeNF4's decision constants (csrc/kernels.cu), ascending; each branch is
# a strict '>', so the code is the number of constants below y.
BNB_NF4_THRESHOLDS = [
    -0.8480964004993439, -0.6106329262256622, -0.4599952697753906, -0.33967943489551544,
    -0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
    0.1202552504837513, 0.2035212516784668, 0.2920137718319893, 0.3893125355243683,
    0.5016634166240692, 0.6427869200706482, 0.8614784181118011,
]
# dQuantizeFP4's constants and the magnitude code for each count below |y|.
BNB_FP4_THRESHOLDS = [0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333]
BNB_FP4_CODES = [0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011]


def emu_4bit(torch, y, quant_type: str):
    if quant_type == "nf4":
        t = torch.tensor(BNB_NF4_THRESHOLDS, dtype=torch.float32, device=y.device)
        return (y[:, None] > t[None, :]).sum(1)
    t = torch.tensor(BNB_FP4_THRESHOLDS, dtype=torch.float32, device=y.device)
    k = (y.abs()[:, None] > t[None, :]).sum(1)
    return torch.tensor(BNB_FP4_CODES, device=y.device)[k] + (y < 0).long() * 8


def emu_8bit(torch, y, code):
    """dQuantize<0> of csrc/kernels.cu: a 7-step search from pivot 127, then the
    nearer neighbour by a strict comparison with the midpoint on the side the
    search ended — so an exact midpoint goes to the pivot the search found
    (the lower code above it, the upper code below it)."""
    pivot = torch.full(y.shape, 127, dtype=torch.long, device=y.device)
    upper_p = torch.full_like(pivot, 255)
    lower_p = torch.zeros_like(pivot)
    upper = torch.full_like(y, 1.0)
    lower = torch.full_like(y, -1.0)
    val = code[pivot]
    for step in (64, 32, 16, 8, 4, 2, 1):
        gt = y > val
        lower_p = torch.where(gt, pivot, lower_p)
        lower = torch.where(gt, val, lower)
        upper_p = torch.where(gt, upper_p, pivot)
        upper = torch.where(gt, upper, val)
        pivot = torch.where(gt, pivot + step, pivot - step)
        val = code[pivot]
    upper = torch.where(upper_p == 255, code[255].expand_as(upper), upper)
    lower = torch.where(lower_p == 0, code[0].expand_as(lower), lower)
    gt = y > val
    up = torch.where(y > (upper + val) * 0.5, upper_p, pivot)
    down = torch.where(y < (lower + val) * 0.5, lower_p, pivot)
    return torch.where(gt, up, down)


def lowbit_8bit_rule(torch, y, code):
    """lowbit's rule: the number of fp32 midpoints strictly below y."""
    mid = (code[:-1] + code[1:]) * 0.5
    return torch.searchsorted(mid, y, right=False)


class Agreement:
    """Codes of lowbit vs bitsandbytes for one (encoder, dtype), classified."""

    def __init__(self, name: str):
        self.name = name
        self.n = self.diff = self.max_step = 0
        self.tie = self.recip = self.unexplained = 0
        self.max_k = 0
        self.on_mid = 0

    def add(self, torch, lb_codes, bnb_codes, rank, y_emu, max_k: int, on_mid=None):
        """rank: code -> position in value order (steps); y_emu(k) -> bnb's
        code with the reciprocal/scale moved k ulps."""
        self.n += lb_codes.numel()
        d = lb_codes != bnb_codes
        nd = int(d.sum())
        self.diff += nd
        if nd == 0:
            return
        self.max_step = max(self.max_step, int((rank[lb_codes[d]] - rank[bnb_codes[d]]).abs().max()))
        idx = d.nonzero().view(-1)
        want = bnb_codes[idx]
        e0 = y_emu(0, idx)
        explained = e0 == want
        self.tie += int(explained.sum())
        if on_mid is not None:  # a tie: y itself lies exactly on a midpoint of the map
            self.on_mid += int((explained & on_mid(idx)).sum())
        for k in range(1, max_k + 1):
            for kk in (k, -k):
                hit = (~explained) & (y_emu(kk, idx) == want)
                if hit.any():
                    self.max_k = max(self.max_k, k)
                self.recip += int(hit.sum())
                explained |= hit
        self.unexplained += int((~explained).sum())

    def line(self) -> str:
        frac = self.diff / max(self.n, 1)
        return (f"  {self.name:<22} {self.n:>11} {self.diff:>8} {frac:>9.2e} {self.max_step:>5} "
                f"{self.tie:>6} {self.recip:>6} {self.unexplained:>6}  {'+-' + str(self.max_k) if self.recip else '-'}")


AGREEMENT_HEADER = (f"  {'encoder':<22} {'codes':>11} {'differ':>8} {'fraction':>9} {'step':>5} "
                    f"{'rule':>6} {'recip':>6} {'other':>6}  ulps")


# -------------------------------------------------------------- part 1: states


def check_4bit(torch, lowbit, bnb, x, quant_type: str, blocksize: int, nested: bool, agree: Optional[Agreement]):
    LF, BF = lowbit.functional, bnb.functional
    label = f"4bit {quant_type} bs{blocksize} {'nested ' if nested else ''}{str(x.dtype)[6:]}"
    n = x.numel()
    pl, sl = LF.quantize_4bit(x, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type)
    dl = LF.dequantize_4bit(pl, sl)
    pb, sb = BF.quantize_4bit(x, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type)
    db = BF.dequantize_4bit(pb, sb)
    # lowbit -> bitsandbytes, packed and unpacked dicts.
    for packed in (True, False):
        d = sl.as_dict(packed=packed)
        if packed:
            ref = sb.as_dict(packed=True)
            if sorted(d) != sorted(ref):
                fail(f"{label}: as_dict(packed) keys {sorted(d)} != bitsandbytes' {sorted(ref)}")
            key = f"quant_state.bitsandbytes__{quant_type}"
            jl, jb = json.loads(bytes(d[key].cpu().tolist())), json.loads(bytes(ref[key].cpu().tolist()))
            jl.pop("nested_offset", None), jb.pop("nested_offset", None)
            if jl != jb:
                fail(f"{label}: packed JSON differs: lowbit {jl} bitsandbytes {jb}")
        s = BF.QuantState.from_dict(dict(d), device=x.device)
        got = BF.dequantize_4bit(pl, s)
        if not same_bits(torch, got, dl):
            fail(f"{label}: bitsandbytes decoding lowbit's state ({'packed' if packed else 'unpacked'} dict) "
                 f"!= lowbit's dequantize ({int((bits(torch, got) != bits(torch, dl)).sum())} values differ)")
    # bitsandbytes -> lowbit: the state object as is, and through from_dict.
    for how, state in (("object", sb), ("from_dict", lowbit.QuantState.from_dict(sb.as_dict(packed=True), device="cuda"))):
        got = LF.dequantize_4bit(pb, state)
        if not same_bits(torch, got, db):
            fail(f"{label}: lowbit decoding bitsandbytes' state ({how}) != bitsandbytes' dequantize "
                 f"({int((bits(torch, got) != bits(torch, db)).sum())} values differ)")
    codes_l, codes_b = unpack_nibbles(torch, pl, n), unpack_nibbles(torch, pb, n)
    out = {"codes_differ": int((codes_l != codes_b).sum()), "n": n}
    if not nested:
        if not same_bits(torch, sl.absmax, sb.absmax):
            fail(f"{label}: absmax differs from bitsandbytes'")
    else:
        out.update(nested_stats(torch, x, blocksize, sl, sb))
        out["absmax2_differ"] = int((sl.state2.absmax != sb.state2.absmax).sum())
        out["absmax2_n"] = sl.state2.absmax.numel()
    if agree is not None:
        table = lowbit.functional.get_4bit_type(quant_type)
        rank = torch.as_tensor(table, device=x.device).argsort().argsort()
        # Same absmax (exact) for both: lowbit's r is RN(1 / absmax).
        absmax = (sl.absmax if not nested else _plain_absmax(torch, x, blocksize))
        r0 = torch.where(absmax > 0, 1.0 / absmax, torch.zeros_like(absmax))
        xf = x.reshape(-1).float()
        blk = torch.arange(n, device=x.device) // blocksize

        def y_emu(k, idx):
            return emu_4bit(torch, xf[idx] * ulp_step(torch, r0[blk[idx]], k), quant_type)

        agree.add(torch, codes_l, codes_b, rank, y_emu, 2)
    return out


def nested_stats(torch, x, blocksize, sl, sb) -> Dict[str, Any]:
    """Double quant: the two offsets against their documented rules (lowbit:
    the mean in double, rounded once; bitsandbytes: torch.mean in fp32), and
    whether the nested codes differ at all when the offsets agree."""
    a = _plain_absmax(torch, x, blocksize)
    ol, ob = sl.offset.reshape(1).float(), sb.offset.reshape(1).float()
    return {
        "offset_ulps": int((bits(torch, ol).long() - bits(torch, ob).long()).abs()),
        "lowbit_offset_is_exact_mean": bool(torch.equal(ol, a.double().mean().float().reshape(1))),
        "bnb_offset_is_fp32_mean": bool(torch.equal(ob, a.mean().reshape(1))),
        "qabsmax_differ": int((sl.absmax != sb.absmax).sum()),
    }


def _plain_absmax(torch, x, blocksize):
    n = x.numel()
    pad = (-n) % blocksize
    a = torch.nn.functional.pad(x.reshape(-1).float().abs(), (0, pad)).view(-1, blocksize)
    return a.amax(1)


def check_8bit(torch, lowbit, bnb, x, blocksize: int, nested: bool, agree: Optional[Agreement]):
    LF, BF = lowbit.functional, bnb.functional
    label = f"8bit bs{blocksize} {'nested ' if nested else ''}{str(x.dtype)[6:]}"
    ql, sl = LF.quantize_blockwise(x, blocksize=blocksize, nested=nested)
    dl = LF.dequantize_blockwise(ql, sl)
    qb, sb = BF.quantize_blockwise(x, blocksize=blocksize, nested=nested)
    db = BF.dequantize_blockwise(qb, sb)
    # lowbit -> bitsandbytes: a bitsandbytes QuantState of lowbit's fields.
    s2 = None
    if sl.nested:
        s2 = BF.QuantState(absmax=sl.state2.absmax, code=sl.state2.code, blocksize=sl.state2.blocksize,
                           dtype=torch.float32)
    s = BF.QuantState(absmax=sl.absmax, code=sl.code, blocksize=sl.blocksize, dtype=x.dtype,
                      offset=sl.offset, state2=s2)
    got = BF.dequantize_blockwise(ql, s)
    if not same_bits(torch, got, dl):
        fail(f"{label}: bitsandbytes decoding lowbit's state != lowbit's dequantize "
             f"({int((bits(torch, got) != bits(torch, dl)).sum())} values differ)")
    # bitsandbytes -> lowbit: the object as is, and a lowbit QuantState of its fields.
    s2 = None
    if sb.nested:
        s2 = lowbit.QuantState(absmax=sb.state2.absmax, code=sb.state2.code, blocksize=sb.state2.blocksize,
                               dtype=torch.float32)
    mine = lowbit.QuantState(absmax=sb.absmax, code=sb.code, blocksize=sb.blocksize, dtype=x.dtype,
                             offset=sb.offset, state2=s2)
    for how, state in (("object", sb), ("fields", mine)):
        got = LF.dequantize_blockwise(qb, state)
        if not same_bits(torch, got, db):
            fail(f"{label}: lowbit decoding bitsandbytes' state ({how}) != bitsandbytes' dequantize "
                 f"({int((bits(torch, got) != bits(torch, db)).sum())} values differ)")
    out = {"codes_differ": int((ql != qb).sum()), "n": ql.numel()}
    if not nested and not same_bits(torch, sl.absmax, sb.absmax):
        fail(f"{label}: absmax differs from bitsandbytes'")
    if nested:
        out.update(nested_stats(torch, x, blocksize, sl, sb))
    if agree is not None:
        code = sl.code.float()
        rank = torch.arange(256, device=x.device)
        absmax = _plain_absmax(torch, x, blocksize)
        r0 = torch.where(absmax > 0, 1.0 / absmax, torch.zeros_like(absmax))
        xf = x.reshape(-1).float()
        blk = torch.arange(xf.numel(), device=x.device) // blocksize
        ql_flat, qb_flat = ql.reshape(-1).long(), qb.reshape(-1).long()
        # lowbit's codes must be its own rule on y = x * RN(1/absmax), exactly.
        own = lowbit_8bit_rule(torch, xf * r0[blk], code)
        if not torch.equal(own, ql_flat):
            fail(f"{label}: lowbit's codes differ from its documented rule in {int((own != ql_flat).sum())} places")

        def y_emu(k, idx):
            return emu_8bit(torch, xf[idx] * ulp_step(torch, r0[blk[idx]], k), code)

        mid = (code[:-1] + code[1:]) * 0.5
        agree.add(torch, ql_flat, qb_flat, rank, y_emu, 2, lambda idx: torch.isin(xf[idx] * r0[blk[idx]], mid))
    return out


def check_int8(torch, lowbit, bnb, x, threshold: float, agree: Optional[Agreement]):
    LF, BF = lowbit.functional, bnb.functional
    label = f"int8 threshold {threshold}"
    cl, sl, ol = LF.int8_vectorwise_quant(x, threshold=threshold)
    cb, sb, ob = BF.int8_vectorwise_quant(x.clone(), threshold=threshold)
    if not same_bits(torch, sl, sb):
        fail(f"{label}: row_stats differ from bitsandbytes' ({int((sl != sb).sum())} rows)")
    if (ol is None) != (ob is None) or (ol is not None and not torch.equal(ol.long(), ob.long())):
        fail(f"{label}: outlier columns differ: lowbit {None if ol is None else ol.tolist()[:8]} "
             f"bitsandbytes {None if ob is None else ob.tolist()[:8]}")
    for who, c, s in (("lowbit", cl, sl), ("bitsandbytes", cb, sb)):
        a, b = LF.int8_vectorwise_dequant(c, s), BF.int8_vectorwise_dequant(c, s)
        if not same_bits(torch, a, b):
            fail(f"{label}: int8_vectorwise_dequant of {who}'s codes differs between the libraries")
    if agree is not None:
        xf = x.reshape(-1, x.shape[-1]).float()
        keep = xf.abs() < threshold if threshold > 0 else torch.ones_like(xf, dtype=torch.bool)
        if ob is not None and ob.numel():
            keep[:, ob] = False
        # bitsandbytes: __fdividef(127, absmax) = 127 * (approximate 1 / absmax); k = 0 is
        # the correctly rounded reciprocal (lowbit's op divides once: RN(127 / absmax)).
        r0 = torch.reciprocal(sl.view(-1))
        row = torch.arange(xf.shape[0], device=x.device).repeat_interleave(xf.shape[1])
        xflat, keepflat = xf.reshape(-1), keep.reshape(-1)

        def y_emu(k, idx):
            q = torch.round(xflat[idx] * (ulp_step(torch, r0[row[idx]], k) * 127.0)).clamp(-127, 127).long()
            return torch.where(keepflat[idx], q, torch.zeros_like(q)) + 128

        rank = torch.arange(256, device=x.device)  # codes + 128: the step is the index difference
        agree.add(torch, cl.reshape(-1).long() + 128, cb.reshape(-1).long() + 128, rank, y_emu, 3)


def part_states(torch, lowbit, bnb, quick: bool) -> Dict[str, Any]:
    log("\n== 1. states: lowbit <-> bitsandbytes (bit-for-bit decoding; code agreement)")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    dtypes = [torch.float16, torch.bfloat16, torch.float32]
    shape = (515, 1021)  # odd element count: a partial last block and a half-filled last byte
    results: Dict[str, Any] = {"nested": []}
    n4 = n8 = 0
    for dt in dtypes:
        x = torch.randn(shape, device="cuda", generator=gen).to(dt)
        for qt in ("nf4", "fp4"):
            for bs in (32, 64, 128, 256, 512, 1024, 2048, 4096):
                for nested in (False, True):
                    try:
                        r = check_4bit(torch, lowbit, bnb, x, qt, bs, nested, None)
                        n4 += 1
                        if nested:
                            results["nested"].append((f"4bit {qt} bs{bs} {str(dt)[6:]}", r))
                    except Exception as e:  # noqa: BLE001
                        fail(f"4bit {qt} bs{bs} nested={nested} {dt}: {type(e).__name__}: {e}")
        for bs in (64, 128, 256, 512, 1024, 2048, 4096):
            for nested in (False, True):
                try:
                    r = check_8bit(torch, lowbit, bnb, x, bs, nested, None)
                    n8 += 1
                    if nested:
                        results["nested"].append((f"8bit bs{bs} {str(dt)[6:]}", r))
                except Exception as e:  # noqa: BLE001
                    fail(f"8bit bs{bs} nested={nested} {dt}: {type(e).__name__}: {e}")
    log(f"  interchange: {n4} 4-bit and {n8} 8-bit configurations decoded both ways "
        f"({len(failures)} failures so far)")
    xi = torch.randn(2048, 4096, device="cuda", generator=gen).half()
    xi[::97, ::211] *= 12.0  # outliers for the threshold case
    ni = 0
    for th in (0.0, 6.0):
        try:
            check_int8(torch, lowbit, bnb, xi, th, None)
            ni += 1
        except Exception as e:  # noqa: BLE001
            fail(f"int8 threshold {th}: {type(e).__name__}: {e}")

    # Double quant: offset and second-level absmax against bitsandbytes.
    nested = [r for _, r in results["nested"]]
    off = [r["offset_ulps"] for r in nested]
    a2 = [(r["absmax2_differ"], r["absmax2_n"]) for r in nested if "absmax2_n" in r]
    log(f"  double quant: offset differs from bitsandbytes' in {sum(1 for u in off if u)} of {len(off)} states "
        f"(max {max(off) if off else 0} ulps); second-level absmax differs in {sum(d for d, _ in a2)} of "
        f"{sum(n for _, n in a2)} blocks, nested codes in {sum(r['qabsmax_differ'] for r in nested)} places; "
        f"lowbit's offset is the mean rounded once in {sum(r['lowbit_offset_is_exact_mean'] for r in nested)}, "
        f"bitsandbytes' is torch.mean in fp32 in {sum(r['bnb_offset_is_fp32_mean'] for r in nested)} of {len(nested)}")
    for label, r in results["nested"]:
        if r["offset_ulps"] == 0 and (r["qabsmax_differ"] or r.get("absmax2_differ")):
            fail(f"{label}: same offset as bitsandbytes', yet the nested state differs")
        if not r["lowbit_offset_is_exact_mean"]:
            fail(f"{label}: lowbit's offset is not the mean of the absmax rounded once")

    # Code agreement on larger inputs, classified.
    log("\n  code agreement with bitsandbytes' GPU quantization (2^24 values each unless noted). Each difference is "
        "reproduced by emulating bitsandbytes: 'rule': its rule on lowbit's own y (8-bit: its search puts an "
        "exact midpoint on the pivot side, each checked to lie on a midpoint; int8: 127 * (1 / absmax), two "
        "roundings, where lowbit divides once); 'recip': its rule with 1 / absmax moved by the ulps shown "
        "(the --use_fast_math reciprocal); 'other': unexplained")
    log(AGREEMENT_HEADER)
    big = 1 << (20 if quick else 24)
    agreements: List[Agreement] = []
    for dt in dtypes:
        x = torch.randn(big, device="cuda", generator=gen).to(dt)
        for qt in ("nf4", "fp4"):
            a = Agreement(f"{qt} bs64 {str(dt)[6:]}")
            check_4bit(torch, lowbit, bnb, x, qt, 64, False, a)
            agreements.append(a)
        for bs in (4096, 256):
            a = Agreement(f"8-bit bs{bs} {str(dt)[6:]}")
            check_8bit(torch, lowbit, bnb, x, bs, False, a)
            agreements.append(a)
    for th in (0.0, 6.0):
        a = Agreement(f"int8 th{th:g} float16")
        xi = torch.randn(4096, 4096, device="cuda", generator=gen).half()
        xi[::97, ::211] *= 12.0
        check_int8(torch, lowbit, bnb, xi, th, a)
        agreements.append(a)
    for a in agreements:
        log(a.line())
        kind = (a.name.split(" ")[0], a.name.split(" ")[-1])
        if a.unexplained:
            fail(f"{a.name}: {a.unexplained} code differences not explained by the emulated rules")
        if a.max_step > 1:
            fail(f"{a.name}: codes differ by up to {a.max_step} steps (expected at most 1)")
        if a.diff / max(a.n, 1) > CODE_DIFF_TOL[kind]:
            fail(f"{a.name}: {a.diff / a.n:.2e} of codes differ (tolerance {CODE_DIFF_TOL[kind]:.0e})")
        if a.name.startswith("8-bit") and a.tie != a.on_mid:
            fail(f"{a.name}: {a.tie - a.on_mid} differences put down to the tie rule are not on a midpoint")
    # lowbit's NF4 midpoints against bitsandbytes' constants.
    t = torch.as_tensor(lowbit.functional.get_4bit_type("nf4")).float()
    mid = (t[:-1] + t[1:]) * 0.5
    same = torch.equal(mid, torch.tensor(BNB_NF4_THRESHOLDS, dtype=torch.float32))
    log(f"  nf4: lowbit's fp32 midpoints {'equal' if same else 'DIFFER from'} bitsandbytes' decision constants")
    results["agreements"] = agreements
    return results


# --------------------------------------------------------- part 2: checkpoints


def rel(torch, a, b) -> float:
    a, b = a.float(), b.float()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-30))


def compare_files(torch, lb_dir: str, tf_dir: str, label: str) -> List[str]:
    """Key-by-key differences between lowbit's and transformers' checkpoint."""
    from safetensors.torch import load_file  # noqa: PLC0415

    def load(d):
        out = {}
        for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
            out.update(load_file(f))
        return out

    a, b = load(lb_dir), load(tf_dir)
    notes = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            notes.append(f"only transformers writes {k} ({b[k].dtype} {list(b[k].shape)})")
        elif k not in b:
            notes.append(f"only lowbit writes {k} ({a[k].dtype} {list(a[k].shape)})")
        elif a[k].dtype != b[k].dtype or a[k].shape != b[k].shape:
            notes.append(f"{k}: lowbit {a[k].dtype} {list(a[k].shape)}, transformers {b[k].dtype} {list(b[k].shape)}")
        elif k.endswith("quant_state.bitsandbytes__nf4") or k.endswith("quant_state.bitsandbytes__fp4"):
            ja, jb = json.loads(bytes(a[k].tolist())), json.loads(bytes(b[k].tolist()))
            ja.pop("nested_offset", None), jb.pop("nested_offset", None)
            if ja != jb:
                notes.append(f"{k}: {ja} != {jb}")
    cfg = {}
    for d, who in ((lb_dir, "lowbit"), (tf_dir, "transformers")):
        with open(os.path.join(d, "config.json")) as f:
            cfg[who] = json.load(f)
    qa, qb = cfg["lowbit"].get("quantization_config", {}), cfg["transformers"].get("quantization_config", {})
    for k in sorted(set(qa) | set(qb)):
        if qa.get(k, "<absent>") != qb.get(k, "<absent>"):
            notes.append(f"{'info: ' if k in CONFIG_FIELDS_ALLOWED else ''}quantization_config.{k}: lowbit "
                         f"{qa.get(k, '<absent>')!r}, transformers {qb.get(k, '<absent>')!r}")
    for k in ("dtype", "torch_dtype"):
        if cfg["lowbit"].get(k) != cfg["transformers"].get(k):
            notes.append(f"config.{k}: lowbit {cfg['lowbit'].get(k)!r}, transformers {cfg['transformers'].get(k)!r}")
    # Values of the weight codes and scales shared by both.
    shared = [k for k in a if k in b and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape]
    codes = [k for k in shared if a[k].dtype in (torch.uint8, torch.int8) and a[k].dim() == 2]
    n = sum(a[k].numel() for k in codes)
    if a and codes:
        differ = 0
        for k in codes:
            if a[k].dtype == torch.uint8:  # packed 4-bit: compare nibbles
                differ += int((unpack_nibbles(torch, a[k], 2 * a[k].numel()) != unpack_nibbles(torch, b[k], 2 * b[k].numel())).sum())
            else:
                differ += int((a[k] != b[k]).sum())
        notes.append(f"info: weight codes differing: {differ} of {n * (2 if a[codes[0]].dtype == torch.uint8 else 1)}")
    others = [k for k in shared if k not in codes and a[k].is_floating_point()]
    neq = [k for k in others if not torch.equal(a[k], b[k])]
    notes.append(f"info: {len(others) - len(neq)} of {len(others)} float tensors equal"
                 + (f"; differ: {', '.join(neq[:6])}{' ...' if len(neq) > 6 else ''}" if neq else ""))
    for line in notes:
        log(f"    {label}: {line}")
    return [x for x in notes if not x.startswith("info:")]


def int8_modules(torch, bnb, m_lb, m_tf, gen) -> None:
    """Module by module: type, state and output on the same input (diagnostics)."""
    mods_lb = dict(m_lb.named_modules())
    worst = (0.0, "")
    for name, mt in m_tf.named_modules():
        ml = mods_lb.get(name)
        if ml is None:
            log(f"    int8 module {name}: missing in lowbit's model")
            continue
        if type(ml) is not type(mt):
            log(f"    int8 module {name}: lowbit {type(ml).__name__}, transformers {type(mt).__name__}")
            continue
        if isinstance(mt, bnb.nn.Linear8bitLt):
            for attr in ("threshold", "has_fp16_weights"):
                if getattr(ml.state, attr) != getattr(mt.state, attr):
                    log(f"    int8 module {name}: state.{attr} lowbit {getattr(ml.state, attr)} "
                        f"transformers {getattr(mt.state, attr)}")
            x = torch.randn(8, mt.in_features, device="cuda", generator=gen, dtype=torch.float16)
            with torch.no_grad():
                r = rel(torch, ml(x), mt(x))
            if r > worst[0]:
                worst = (r, name)
    log(f"    int8 modules: worst per-module output difference {worst[0]:.2e} ({worst[1] or '-'})")


def int8_substitutions(torch, lowbit, bnb, m_lb, m_tf, base_dir: str, ids, ref, label: str) -> None:
    """The lowbit model's int8 codes and scales replaced by other sets, and
    its logits against transformers' own (ref): which difference matters."""
    from safetensors.torch import load_file  # noqa: PLC0415

    base: Dict[str, Any] = {}
    for f in glob.glob(os.path.join(base_dir, "*.safetensors")):
        base.update(load_file(f, device="cuda"))
    tf_mods = dict(m_tf.named_modules())
    mods = {n: m for n, m in m_lb.named_modules() if isinstance(m, bnb.nn.Linear8bitLt)}
    with torch.no_grad():  # a forward moves CB/SCB into each module's state
        m_lb(ids), m_tf(ids)

    def now(m):
        return m.state.CB.clone(), m.state.SCB.clone()

    def bnb_rule(w):  # Int8Params: the fp16 cast, then 127 * (1 / absmax)
        w16 = w.half().float()
        a = w16.abs().amax(1)
        return torch.round(w16 * (torch.reciprocal(a) * 127.0)[:, None]).clamp(-127, 127).to(torch.int8), a

    def op_rule(w):  # lowbit's int8_vectorwise_quant on the weight as stored
        c, st, _ = lowbit.functional.int8_vectorwise_quant(w)
        return c, st

    own = {n: now(m) for n, m in mods.items()}
    tf = {n: now(tf_mods[n]) for n in mods}
    sets = {
        "transformers' own codes and SCB": tf,
        "lowbit's file": own,
        "lowbit's op on the stored weight (127 / absmax)": {n: op_rule(base[n + ".weight"]) for n in mods},
        "fp16 cast, 127 * (1 / absmax) (bitsandbytes' rule)": {n: bnb_rule(base[n + ".weight"]) for n in mods},
    }
    gen = torch.Generator(device="cuda")
    gen.manual_seed(11)
    total = sum(c.numel() for c, _ in tf.values())
    for k in (10, 100):  # transformers' own codes with k of them moved one step
        moved = {}
        for n, (c, st) in tf.items():
            c = c.clone().view(-1)
            idx = torch.randint(0, c.numel(), (max(1, round(k * c.numel() / total)),), device="cuda", generator=gen)
            sign = torch.randint(0, 2, idx.shape, device="cuda", generator=gen).to(torch.int16) * 2 - 1
            c[idx] = (c[idx].to(torch.int16) + sign).clamp(-127, 127).to(torch.int8)
            moved[n] = (c.view_as(tf[n][0]), st)
        sets[f"transformers' codes, {k} random ones moved one step"] = moved
    # Every code of lowbit's file that differs from transformers' must be
    # bitsandbytes' rule with 1 / absmax one ulp off (its GPU reciprocal).
    unexplained = 0
    for n in mods:
        w16 = base[n + ".weight"].half().float()
        r0 = torch.reciprocal(w16.abs().amax(1))
        d = (own[n][0] != tf[n][0]).nonzero()
        if d.numel():
            rows, cols = d[:, 0], d[:, 1]
            want = tf[n][0][rows, cols].long()
            ok = torch.zeros_like(want, dtype=torch.bool)
            for k in (-1, 1):
                ok |= torch.round(w16[rows, cols] * (ulp_step(torch, r0[rows], k) * 127.0)).long() == want
            unexplained += int((~ok).sum())
    scb_rows = sum(int((own[n][1] != tf[n][1]).sum()) for n in mods)
    for what, codes in sets.items():
        for n, m in mods.items():
            m.state.CB.copy_(codes[n][0])
            m.state.SCB.copy_(codes[n][1])
        with torch.no_grad():
            lg = m_lb(ids).logits.float()
        dc = sum(int((codes[n][0] != tf[n][0]).sum()) for n in mods)
        ds = sum(int((codes[n][1] != tf[n][1]).sum()) for n in mods)
        r = rel(torch, lg, ref)
        log(f"    {label} with {what}: codes differing from transformers' {dc} of {total}, SCB rows {ds}; "
            f"logits rel. L2 vs transformers {r:.2e}")
        if what.startswith("transformers' own") and r != 0.0:
            fail(f"{label}: with transformers' own codes and SCB the logits still differ ({r:.2e}): "
                 f"something besides the codes (config, kept tensors, modules) differs")
    for n, m in mods.items():
        m.state.CB.copy_(own[n][0])
        m.state.SCB.copy_(own[n][1])
    log(f"    {label}: lowbit's codes differing from transformers' not reproduced by bitsandbytes' rule with its "
        f"reciprocal one ulp off: {unexplained}; SCB rows differing: {scb_rows}")
    if unexplained or scb_rows:
        fail(f"{label}: {unexplained} codes and {scb_rows} SCB rows differ from transformers' beyond its GPU reciprocal")


def part_checkpoints(torch, lowbit, bnb, cli: str, keep: Optional[str]) -> Dict[str, Any]:
    log("\n== 2. checkpoints: lowbit quantize -> transformers from_pretrained, against transformers' own bnb")
    try:
        import transformers  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"  skipped: transformers is not importable ({e})")
        return {"skipped": True}
    import logging  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # "inputs will be cast ... to float16", per call
    warnings.filterwarnings("ignore", message="inner dimension")
    log(f"  transformers {transformers.__version__}; lowbit CLI {cli}")
    out: Dict[str, Any] = {}
    tmp = keep or tempfile.mkdtemp(prefix="lowbit-bnb-")
    bases = {"fp16": os.path.join(tmp, "fp16"), "fp32": os.path.join(tmp, "fp32")}
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=1000, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(bases["fp32"])
    model = model.to(torch.float16)
    model.save_pretrained(bases["fp16"])
    ids = torch.randint(0, cfg.vocab_size, (2, 48), device="cuda")
    model = model.cuda().eval()
    with torch.no_grad():
        ref16 = model(ids).logits.float()
    del model
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)

    # name: (base, lowbit quantize flags, transformers' BitsAndBytesConfig)
    cases = {
        "nf4-dq": ("fp16", ["--format", "nf4", "--double-quant"],
                   dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                        bnb_4bit_compute_dtype=torch.float16)),
        "fp4": ("fp16", ["--format", "fp4"],
                dict(load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_compute_dtype=torch.float16)),
        "int8": ("fp16", ["--format", "int8"], dict(load_in_8bit=True)),
        "int8-fp32": ("fp32", ["--format", "int8"], dict(load_in_8bit=True)),
    }
    for name, (bname, flags, bnb_kwargs) in cases.items():
        base = bases[bname]
        tol = LOGITS_TOL[name.split("-fp32")[0]]
        lb_dir, tf_dir = os.path.join(tmp, f"lowbit-{name}"), os.path.join(tmp, f"transformers-{name}")
        try:
            t0 = time.time()
            p = subprocess.run([cli, "quantize", base, lb_dir, *flags, "--no-report", "--force"],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                fail(f"{name}: lowbit quantize exited {p.returncode}: {p.stderr.strip()[-400:]}")
                continue
            m_tf = AutoModelForCausalLM.from_pretrained(base, quantization_config=BitsAndBytesConfig(**bnb_kwargs),
                                                        device_map="cuda")
            m_lb = AutoModelForCausalLM.from_pretrained(lb_dir, device_map="cuda")
            with torch.no_grad():
                lt = m_tf(ids).logits.float()
                ll = m_lb(ids).logits.float()
            m_tf.save_pretrained(tf_dir)
            m_tf2 = AutoModelForCausalLM.from_pretrained(tf_dir, device_map="cuda")
            with torch.no_grad():
                lt2 = m_tf2(ids).logits.float()
            r = rel(torch, ll, lt)
            out[name] = {"lowbit_vs_transformers": r, "transformers_reload": rel(torch, lt2, lt),
                         "transformers_vs_fp16": rel(torch, lt, ref16), "lowbit_vs_fp16": rel(torch, ll, ref16)}
            log(f"  {name:<9} logits rel. L2: lowbit vs transformers {r:.2e} (tolerance {tol:.1e}); "
                f"transformers saved+reloaded {out[name]['transformers_reload']:.2e}; quantization error vs fp16 "
                f"model: transformers {out[name]['transformers_vs_fp16']:.2e}, lowbit {out[name]['lowbit_vs_fp16']:.2e}; "
                f"dtypes {m_lb.dtype}/{m_tf.dtype} ({time.time() - t0:.1f} s)")
            problems = compare_files(torch, lb_dir, tf_dir, name)
            for pr in problems:
                fail(f"{name}: file differs from transformers' own: {pr}")
            if name.startswith("int8"):
                int8_modules(torch, bnb, m_lb, m_tf2, gen)
                with torch.no_grad():
                    hl = m_lb(ids, output_hidden_states=True).hidden_states
                    ht = m_tf2(ids, output_hidden_states=True).hidden_states
                log("    int8 hidden states rel. L2 by layer: " + " ".join(f"{rel(torch, a, b):.1e}" for a, b in zip(hl, ht)))
                int8_substitutions(torch, lowbit, bnb, m_lb, m_tf2, base, ids, lt, name)
            if not r <= tol:
                fail(f"{name}: logits differ from transformers' own quantization by {r:.2e} (tolerance {tol:.1e})")
            del m_tf, m_lb, m_tf2
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            fail(f"{name}: {type(e).__name__}: {str(e)[:400]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller agreement samples (2^20)")
    ap.add_argument("--keep", default=None, help="folder for the checkpoints (kept); default: a temporary one")
    ap.add_argument("--no-checkpoints", action="store_true")
    args = ap.parse_args()
    t_start = time.time()
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bnb_interchange skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        log("summary: bnb_interchange skipped: torch sees no CUDA device")
        return 0
    try:
        import bitsandbytes as bnb  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bnb_interchange skipped: bitsandbytes is not importable ({type(e).__name__}: {e})")
        return 0
    try:
        lowbit = import_lowbit()
    except Exception as e:  # noqa: BLE001
        log(f"summary: bnb_interchange FAILED: import lowbit failed ({type(e).__name__}: {e})")
        return 1
    cli = os.environ.get("LOWBIT_CLI") or newest(os.path.join("build*", "tools", "lowbit", "lowbit"))
    log(f"bnb_interchange: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, bitsandbytes "
        f"{bnb.__version__}, lowbit {lowbit.__version__} ({os.path.dirname(lowbit.__file__)})")
    states = part_states(torch, lowbit, bnb, args.quick)
    ckpt: Dict[str, Any] = {"skipped": True}
    if args.no_checkpoints:
        log("\n== 2. checkpoints: skipped (--no-checkpoints)")
    elif not cli:
        fail("no lowbit CLI found (set LOWBIT_CLI or build lowbit_cli)")
    else:
        ckpt = part_checkpoints(torch, lowbit, bnb, cli, args.keep)
    agree = " ".join(f"{a.name.replace(' ', ':')}={a.diff / max(a.n, 1):.1e}" for a in states.get("agreements", []))
    logits = " ".join(f"{k}={v['lowbit_vs_transformers']:.1e}" for k, v in ckpt.items() if isinstance(v, dict))
    log(f"\nsummary: bnb_interchange {'FAILED (' + str(len(failures)) + ')' if failures else 'ok'}; "
        f"logits vs transformers+bnb: {logits or 'not run'}; code differences: {agree}; {time.time() - t_start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
