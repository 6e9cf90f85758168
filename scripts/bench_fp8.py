#!/usr/bin/env python3
"""Block-scaled FP8 GEMM on the GPU: lowbit against its peers, as users call them.

DeepSeek-V3's FP8 linear layers: ``a`` e4m3 [M, K] with 1x128 scales (what
``act_quant`` writes), ``b`` e4m3 [N, K] with 128x128 scales (a checkpoint's
``weight_scale_inv``), bf16 out. For every shape, in one process:

- ``lowbit``: ``lowbit.functional.fp8_gemm(a, a_s, b, b_s, out_dtype=bf16)``
  (a new output each call, from torch's allocator).
- ``cublas-block``: ``torch.nn.functional.scaled_mm`` with BlockWise1x128 /
  BlockWise128x128 scaling (cuBLASLt's block scaling; a's scales handed over
  K-major as it requires, the transposition not timed).
- ``cublas-row``: ``torch._scaled_mm`` with rowwise scales (one per row of a
  and of b: a coarser scaling, the fastest FP8 GEMM torch has).
- ``cublas-bf16``: ``torch.mm`` on the bf16 operands.
- ``triton``: DeepSeek-V3's Triton ``fp8_gemm`` (scripts/peers/deepseek_fp8_gemm.py),
  at M = 4096 only: its autotuning compiles every config per (N, K); the
  bench keeps its configs of BLOCK_SIZE_M 64 (the largest; the others are
  slower at this M) unless ``--triton-all``. Output bf16 (the default dtype
  DeepSeek's model sets).

Grouped (mixture of experts), against a loop of ``cublas-block`` calls over
the experts (the counts known on the host, which the loop needs and lowbit does not):

- contiguous: E experts of R rows each in one ``a``, ``m_indices`` per row;
- masked: ``a`` [E, max_m, K] with ``masked_m`` counts on the device.

Each repetition is timed by CUDA events after an untimed L2 flush (the Timer
of scripts/bench_gemm.py), the implementations of a row in turns (a clock
drifting at the power cap weighs on all alike); medians. Every result is checked against a float32
reference of the dequantized operands (relative L2 error). TFLOP/s count
2 M N K; ``peak`` is the fraction of the GPU's dense FP8 peak (989.4 TFLOP/s x 2
on H100/H200 SXM at the boost clock).

Usage (on the GPU machine, after a build with the Python module):
    python3 scripts/bench_fp8.py [--reps 20] [--sections plain,grouped] [--m 64,128,4096]
The CSV goes to $OUT/bench_fp8.csv when $OUT is set (or --csv PATH).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (the Timer and lowbit's finder)

SHAPES = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
CHECK_TOL = 2e-2
PEAK_FP8 = {"H100": 1979e12, "H200": 1979e12, "H800": 1979e12, "H20": 296e12}


def log(msg: str = "") -> None:
    print(msg, flush=True)


def peak_of(name: str) -> Optional[float]:
    for key, v in PEAK_FP8.items():
        if key in name:
            return v
    return None


class Fp8Case:
    """Random e4m3 operands with their block scales, and the float32 reference."""

    def __init__(self, torch, M: int, N: int, K: int, gen, groups: int = 0):
        kb, nb = math.ceil(K / 128), math.ceil(N / 128)
        dev = "cuda"
        self.a = (torch.randn(M, K, generator=gen, device=dev) * 2).to(torch.float8_e4m3fn)
        self.a_s = torch.rand(M, kb, generator=gen, device=dev) * 0.02 + 0.01
        shape_b = (groups, N, K) if groups else (N, K)
        shape_bs = (groups, nb, kb) if groups else (nb, kb)
        self.b = (torch.randn(*shape_b, generator=gen, device=dev) * 2).to(torch.float8_e4m3fn)
        self.b_s = torch.rand(*shape_bs, generator=gen, device=dev) * 0.02 + 0.01

    @staticmethod
    def dequant_a(torch, a, a_s):
        K = a.shape[-1]
        s = a_s.repeat_interleave(128, dim=-1)[..., :K]
        return a.float() * s

    @staticmethod
    def dequant_b(torch, b, b_s):
        N, K = b.shape[-2], b.shape[-1]
        s = b_s.repeat_interleave(128, dim=-2)[..., :N, :].repeat_interleave(128, dim=-1)[..., :K]
        return b.float() * s


def rel_err(torch, got, want) -> float:
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def blockwise_mm(torch):
    """cuBLASLt's block-scaled FP8 GEMM through torch, or None: (fn(a, a_s_kmajor, b, b_s) -> bf16, how)."""
    F = torch.nn.functional
    scaled_mm = getattr(F, "scaled_mm", None)
    stype = getattr(F, "ScalingType", None)
    if scaled_mm is None or stype is None:
        return None, "torch.nn.functional.scaled_mm missing"

    def fn(a, a_s_k, b, b_s):
        return scaled_mm(a, b.t(), a_s_k, stype.BlockWise1x128, b_s.t(), stype.BlockWise128x128,
                         output_dtype=torch.bfloat16)

    return fn, "F.scaled_mm(BlockWise1x128, BlockWise128x128)"


def kmajor(torch, a_s):
    """a_s [M, kb] laid out K-major (column-major), as cuBLASLt's 1x128 scaling wants it."""
    return a_s.t().contiguous().t()


class Bench:
    def __init__(self, torch, lowbit, reps: int, gpu: str):
        self.torch = torch
        self.lb = lowbit
        self.timer = bg.Timer(torch, reps, warmup=3)
        self.rows: List[Dict] = []
        self.peak = peak_of(gpu)
        self.block, self.block_how = blockwise_mm(torch)

    def time_all(self, fns: Dict[str, Optional[Callable[[], object]]]) -> Dict[str, Optional[float]]:
        """Median ms of each callable (None: left out), reps in turns (Timer.ms_interleaved)."""
        live = {name: fn for name, fn in fns.items() if fn is not None}
        try:
            times = self.timer.ms_interleaved(live)
        except Exception as e:  # noqa: BLE001
            log(f"    timing failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            times = {}
        return {name: times.get(name) for name in fns}

    def add(self, kind: str, M: int, N: int, K: int, impls: Dict[str, Optional[float]], flops: float,
            errs: Dict[str, float], note: str = "") -> None:
        row = {"kind": kind, "M": M, "N": N, "K": K, "note": note}
        for name, ms in impls.items():
            row[f"{name}_us"] = None if ms is None else ms * 1e3
            row[f"{name}_tflops"] = None if ms is None else flops / (ms * 1e-3) / 1e12
        for name, e in errs.items():
            row[f"{name}_err"] = e
        self.rows.append(row)
        lb = impls.get("lowbit")
        parts = [f"{kind:10s} M={M:<5d} N={N:<6d} K={K:<6d}"]
        for name, ms in impls.items():
            if ms is None:
                parts.append(f"{name} -")
                continue
            tf = flops / (ms * 1e-3) / 1e12
            rat = "" if name == "lowbit" or lb is None else f" ({ms / lb:.2f}x)"
            parts.append(f"{name} {ms * 1e3:.1f}us {tf:.0f}TF{rat}")
        if lb is not None and self.peak:
            parts.append(f"peak {flops / (lb * 1e-3) / self.peak:.2f}")
        bad = [f"{k} err {v:.1e}" for k, v in errs.items() if not (v <= CHECK_TOL)]
        if bad:
            parts.append("CHECK FAILED: " + ", ".join(bad))
            row["note"] = (note + " CHECK FAILED").strip()
        log("  " + " | ".join(parts))

    def plain(self, ms: List[int], shapes, triton_fn, triton_note: str, configs: List[str]) -> None:
        torch, LF = self.torch, self.lb.functional
        gen = torch.Generator(device="cuda").manual_seed(1)
        log("\n== fp8_gemm (bf16 out): lowbit vs cuBLAS block / row scaled, cuBLAS bf16, DeepSeek's Triton")
        for N, K in shapes:
            for M in ms:
                c = Fp8Case(torch, M, N, K, gen)
                ref = Fp8Case.dequant_a(torch, c.a, c.a_s) @ Fp8Case.dequant_b(torch, c.b, c.b_s).t()
                a_s_k = kmajor(torch, c.a_s)
                a16, b16 = c.a.to(torch.bfloat16), c.b.to(torch.bfloat16)
                row_sa = torch.rand(M, 1, device="cuda") + 0.5
                row_sb = torch.rand(1, N, device="cuda") + 0.5
                fns: Dict[str, Callable[[], object]] = {
                    "lowbit": lambda: LF.fp8_gemm(c.a, c.a_s, c.b, c.b_s, out_dtype=torch.bfloat16),
                    "cublas-block": (lambda: self.block(c.a, a_s_k, c.b, c.b_s)) if self.block else None,
                    "cublas-row": lambda: torch._scaled_mm(c.a, c.b.t(), row_sa, row_sb, out_dtype=torch.bfloat16),
                    "cublas-bf16": lambda: torch.mm(a16, b16.t()),
                }
                if triton_fn is not None and M >= 4096:
                    fns["triton"] = lambda: triton_fn(c.a, c.a_s, c.b, c.b_s)
                for cfg in configs:  # lowbit's kernel configs forced, to compare them
                    fns[cfg] = lambda cfg=cfg: LF.fp8_gemm(c.a, c.a_s, c.b, c.b_s, out_dtype=torch.bfloat16, config=cfg)
                errs = {}
                for name in ("lowbit", "cublas-block", "triton", *configs):
                    if fns.get(name) is None:
                        continue
                    try:
                        errs[name] = rel_err(torch, fns[name](), ref)
                    except Exception as e:  # noqa: BLE001
                        log(f"    {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                        fns[name] = None
                impls = self.time_all(fns)
                self.add("plain", M, N, K, impls, 2.0 * M * N * K, errs, triton_note if "triton" in fns else "")
                del c, ref, a16, b16
        torch.cuda.empty_cache()

    def grouped(self) -> None:
        torch, LF = self.torch, self.lb.functional
        gen = torch.Generator(device="cuda").manual_seed(2)
        log("\n== grouped (bf16 out): lowbit vs a loop of cuBLAS block-scaled calls over the experts")
        for E, R, N, K in [(4, 8192, 4096, 7168), (4, 4096, 4096, 7168), (8, 4096, 4096, 7168),
                           (4, 8192, 7168, 2048), (8, 4096, 7168, 2048)]:
            c = Fp8Case(torch, E * R, N, K, gen, groups=E)
            m_idx = torch.arange(E, device="cuda", dtype=torch.int32).repeat_interleave(R)
            a_s_k = [kmajor(torch, c.a_s[e * R:(e + 1) * R]) for e in range(E)]
            a_parts = [c.a[e * R:(e + 1) * R] for e in range(E)]

            def loop():
                return torch.cat([self.block(a_parts[e], a_s_k[e], c.b[e], c.b_s[e]) for e in range(E)])

            fns = {"lowbit": lambda: LF.fp8_grouped_gemm_contiguous(c.a, c.a_s, c.b, c.b_s, m_idx,
                                                                     out_dtype=torch.bfloat16),
                   "cublas-loop": loop if self.block else None}
            errs = self.grouped_errs(fns, c, [(e * R, (e + 1) * R, e) for e in range(E)])
            impls = self.time_all(fns)
            self.add("contig", E * R, N, K, impls, 2.0 * E * R * N * K, errs, f"{E} experts x {R} rows")
            del c
        for E, max_m, N, K, lo in [(16, 256, 4096, 7168, 64), (16, 256, 7168, 2048, 64), (1, 1024, 4096, 7168, 1024)]:
            c = Fp8Case(torch, E * max_m, N, K, gen, groups=E)
            a3 = c.a.view(E, max_m, K)
            s3 = c.a_s.view(E, max_m, -1)
            # Multiples of 16: cuBLASLt's block scaling refuses other row counts.
            counts = torch.randint(lo // 16, max_m // 16 + 1, (E,), generator=torch.Generator().manual_seed(3),
                                   dtype=torch.int32) * 16
            counts_dev = counts.cuda()
            hc = counts.tolist()
            a_s_k = [kmajor(torch, s3[e, :hc[e]]) for e in range(E)]

            def mloop():
                return [self.block(a3[e, :hc[e]], a_s_k[e], c.b[e], c.b_s[e]) for e in range(E)]

            fns = {"lowbit": lambda: LF.fp8_grouped_gemm_masked(a3, s3, c.b, c.b_s, counts_dev,
                                                                 out_dtype=torch.bfloat16),
                   "cublas-loop": mloop if self.block else None}
            errs = {}
            try:
                got = fns["lowbit"]()
                worst = 0.0
                for e in range(E):
                    ref = Fp8Case.dequant_a(torch, a3[e, :hc[e]], s3[e, :hc[e]]) @ \
                        Fp8Case.dequant_b(torch, c.b[e], c.b_s[e]).t()
                    worst = max(worst, rel_err(torch, got[e, :hc[e]], ref))
                    if hc[e] < max_m and float(got[e, hc[e]:].float().abs().max()) != 0.0:
                        worst = float("inf")
                errs["lowbit"] = worst
            except Exception as e:  # noqa: BLE001
                log(f"    lowbit failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                fns["lowbit"] = None
            impls = self.time_all(fns)
            total = sum(hc)
            self.add("masked", total, N, K, impls, 2.0 * total * N * K, errs, f"{E} experts, max_m {max_m}")
            del c
        torch.cuda.empty_cache()

    def grouped_errs(self, fns, c, runs) -> Dict[str, float]:
        torch = self.torch
        errs = {}
        for name in ("lowbit", "cublas-loop"):
            if fns.get(name) is None:
                continue
            try:
                got = fns[name]()
                worst = 0.0
                for lo, hi, e in runs:
                    ref = Fp8Case.dequant_a(torch, c.a[lo:hi], c.a_s[lo:hi]) @ \
                        Fp8Case.dequant_b(torch, c.b[e], c.b_s[e]).t()
                    worst = max(worst, rel_err(torch, got[lo:hi], ref))
                errs[name] = worst
            except Exception as e:  # noqa: BLE001
                log(f"    {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                fns[name] = None
        return errs


def triton_peer(torch, every_config: bool):
    """DeepSeek's Triton fp8_gemm with bf16 out, or (None, why)."""
    try:
        from peers import deepseek_fp8_gemm as peer  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        return None, f"not installed ({type(e).__name__}: {e})"
    if not every_config:
        peer.fp8_gemm_kernel.configs = [c for c in peer.fp8_gemm_kernel.configs if c.kwargs["BLOCK_SIZE_M"] == 64]

    def fn(a, a_s, b, b_s):
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            return peer.fp8_gemm(a, a_s, b, b_s)
        finally:
            torch.set_default_dtype(before)

    return fn, f"{len(peer.fp8_gemm_kernel.configs)} autotuned configs"


def geomean(v: List[float]) -> float:
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--m", default="64,128,4096")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    ap.add_argument("--sections", default="plain,grouped")
    ap.add_argument("--triton-all", action="store_true", help="autotune the Triton peer over all its 36 configs")
    ap.add_argument("--no-triton", action="store_true", help="leave the Triton peer out (it autotunes per shape)")
    ap.add_argument("--configs", default="", help="comma-separated lowbit kernel configs to time as well")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    t0 = time.time()
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bench_fp8 skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        log("summary: bench_fp8 skipped: torch sees no CUDA device")
        return 0
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        log(f"summary: bench_fp8 FAILED: {where}")
        return 1
    gpu = torch.cuda.get_device_name(0)
    bench = Bench(torch, lowbit, args.reps, gpu)
    tfn, tnote = (None, "left out (--no-triton)") if args.no_triton else triton_peer(torch, args.triton_all)
    log(f"bench_fp8.py: {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), lowbit {lowbit.__version__} "
        f"({where}); cublas-block: {bench.block_how}; triton: {tnote}")
    ms = [int(x) for x in args.m.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    sections = set(args.sections.split(","))
    if "plain" in sections:
        bench.plain(ms, shapes, tfn, tnote, [c for c in args.configs.split(",") if c])
    if "grouped" in sections:
        bench.grouped()
    path = args.csv or (os.path.join(os.environ["OUT"], "bench_fp8.csv") if os.environ.get("OUT") else None)
    if path:
        keys = sorted({k for r in bench.rows for k in r})
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(bench.rows)
    failed = sum(1 for r in bench.rows if "CHECK FAILED" in r["note"] or r.get("lowbit_us") is None)
    parts = []
    for kind, peer, sel in [("plain", "cublas-block", lambda r: r["M"] >= 4096),
                            ("plain", "cublas-block", lambda r: r["M"] < 4096),
                            ("plain", "triton", lambda r: True), ("plain", "cublas-row", lambda r: True),
                            ("plain", "cublas-bf16", lambda r: True),
                            ("contig", "cublas-loop", lambda r: True), ("masked", "cublas-loop", lambda r: True)]:
        v = [r[f"{peer}_us"] / r["lowbit_us"] for r in bench.rows
             if r["kind"] == kind and sel(r) and r.get("lowbit_us") and r.get(f"{peer}_us")]
        if v:
            label = f"{kind}/{peer}" + ("" if kind != "plain" or peer != "cublas-block" else
                                         ("@M4096" if sel({"M": 4096}) else "@M<=128"))
            parts.append(f"{label}={geomean(v):.2f}x(n={len(v)})")
    log(f"summary: fp8 lowbit speedup (geomean, peer time / lowbit time): {' '.join(parts)}")
    best = max((r.get("lowbit_tflops") or 0 for r in bench.rows), default=0)
    log(f"summary: bench_fp8 {gpu}; {len(bench.rows)} rows, {failed} failed; best {best:.0f} TFLOP/s; "
        f"{time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
