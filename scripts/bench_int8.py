#!/usr/bin/env python3
"""int8 GEMMs on the GPU: lowbit against its peers, as users call them.

For every Llama projection shape N x K and batch M, in one process, a new
output each call (torch's allocator):

- ``int8_linear_matmul`` (int32 out): lowbit's against ``torch._int_mm(a, b.t())``
  (cuBLASLt; needs M > 16) and bitsandbytes' ``int8_linear_matmul`` when installed.
- ``int8_scaled_mm`` (fp16 out, the dequantization fused): lowbit's against the
  two-step calls users make without it: ``torch._int_mm`` then the dequantization
  in torch, and bitsandbytes' ``int8_linear_matmul`` + ``int8_mm_dequant``;
  and ``torch._int_mm`` alone (the issue's bar: the dequantization for free).
- ``fp16``: ``torch.mm`` on fp16 operands of the same shape (cuBLAS), for scale.

Each repetition is timed by CUDA events after an untimed L2 flush, a row's
implementations in turns (scripts/bench_gemm.py's Timer); medians. lowbit's
int32 results are checked equal to torch._int_mm's (or to int64 sums on the
CPU for M <= 16), the fp16 ones against a float32 reference. TOP/s count
2 M N K; ``peak`` is the fraction of the GPU's dense int8 peak (1979 TOP/s on
H100/H200 SXM).

Usage (on the GPU machine, after a build with the Python module):
    python3 scripts/bench_int8.py [--reps 20] [--m 16,128,256,1024,4096] [--shapes NxK,...]
The CSV goes to $OUT/bench_int8.csv when $OUT is set (or --csv PATH).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (the Timer and lowbit's finder)

PEAK_INT8 = {"H100": 1979e12, "H200": 1979e12, "H800": 1979e12}
# int8_linear's four-launch chain on sm_90 (quantization, wgmma GEMM, outlier tiles) at its small-M tile.
GEMM_CHAIN = "wgmma_i8_m64_n32_k128_s8"


def log(msg: str = "") -> None:
    print(msg, flush=True)


def peak_of(name: str) -> Optional[float]:
    return next((v for k, v in PEAK_INT8.items() if k in name), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--m", type=bg.parse_ms, default=bg.parse_ms("16,128,256,1024,4096"))
    ap.add_argument("--shapes", type=bg.parse_shapes, default=bg.parse_shapes(bg.SHAPES))
    ap.add_argument("--csv", default=None)
    ap.add_argument("--linear-only", action="store_true", help="only the LLM.int8 linear table")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        log("bench_int8.py: no CUDA device")
        return 1
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        log(f"bench_int8.py: {where}")
        return 1
    LF = lowbit.functional
    try:
        import bitsandbytes as bnb
        BF = bnb.functional
        bnb_ver = bnb.__version__
    except Exception as e:  # noqa: BLE001 - not installed: its columns stay empty
        BF, bnb_ver = None, f"not available ({type(e).__name__})"
    gpu = torch.cuda.get_device_name(0)
    peak = peak_of(gpu)
    timer = bg.Timer(torch, args.reps, args.warmup)
    log(f"bench_int8.py: {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), lowbit {lowbit.__version__}, "
        f"bitsandbytes {bnb_ver}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows: List[Dict[str, object]] = []
    inv = 1.0 / (127.0 * 127.0)

    log("")
    log("| M | N x K | lowbit int32 ms | _int_mm / lowbit | bnb / lowbit | fp16 / lowbit | TOP/s | peak "
        "| scaled_mm ms | _int_mm+dequant / scaled | bnb 2-step / scaled | _int_mm alone / scaled |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for N, K in [] if args.linear_only else args.shapes:
        b = torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=gen)
        cs = torch.rand(N, device="cuda", generator=gen) * 4 + 0.01
        bh = torch.randn(N, K, dtype=torch.float16, device="cuda", generator=gen)
        for M in args.m:
            a = torch.randint(-127, 128, (M, K), dtype=torch.int8, device="cuda", generator=gen)
            rs = torch.rand(M, device="cuda", generator=gen) * 4 + 0.01
            ah = torch.randn(M, K, dtype=torch.float16, device="cuda", generator=gen)
            int_mm_ok = M > 16 and K % 8 == 0 and N % 8 == 0
            # Correctness first: exact sums, and the dequantization against float32.
            got = LF.int8_linear_matmul(a, b)
            want = torch._int_mm(a, b.t()) if int_mm_ok else (a.double() @ b.double().t()).to(torch.int32)
            if not torch.equal(got, want):
                log(f"bench_int8.py: int8_linear_matmul differs at M={M} N={N} K={K}")
                return 1
            scaled = LF.int8_scaled_mm(a, b, rs, cs)
            ref = (want.double() * (rs[:, None].double() * cs[None, :].double()) * inv)
            err = ((scaled.double() - ref).norm() / ref.norm()).item()
            if not err < 1e-3:
                log(f"bench_int8.py: int8_scaled_mm error {err:.2e} at M={M} N={N} K={K}")
                return 1

            fns: Dict[str, Callable[[], object]] = {
                "lowbit": lambda: LF.int8_linear_matmul(a, b),
                "lowbit_scaled": lambda: LF.int8_scaled_mm(a, b, rs, cs),
                "fp16": lambda: torch.mm(ah, bh.t()),
            }
            if int_mm_ok:
                fns["int_mm"] = lambda: torch._int_mm(a, b.t())
                fns["int_mm_dequant"] = lambda: (torch._int_mm(a, b.t()).float() * (rs[:, None] * cs[None, :]) *
                                                 inv).half()
            if BF is not None:
                fns["bnb"] = lambda: BF.int8_linear_matmul(a, b)
                fns["bnb_2step"] = lambda: BF.int8_mm_dequant(BF.int8_linear_matmul(a, b), rs, cs)
            ms = timer.ms_interleaved(fns)
            lb, lbs = ms["lowbit"], ms["lowbit_scaled"]
            tops = 2.0 * M * N * K / (lb * 1e-3) / 1e12
            row = {"M": M, "N": N, "K": K, "gpu": gpu, **{f"{k}_ms": v for k, v in ms.items()}, "tops": tops,
                   "peak": tops * 1e12 / peak if peak else None}
            rows.append(row)

            def r(key: str, base: float) -> str:
                return f"{ms[key] / base:.2f}x" if key in ms else "-"

            log(f"| {M} | {N}x{K} | {lb:.4f} | {r('int_mm', lb)} | {r('bnb', lb)} | {r('fp16', lb)} | {tops:.0f} | "
                f"{bg.fmt(row['peak'], '.2f')} | {lbs:.4f} | {r('int_mm_dequant', lbs)} | {r('bnb_2step', lbs)} | "
                f"{r('int_mm', lbs)} |")

    def geo(key: str, base: str, pick: Callable[[Dict[str, object]], bool]) -> str:
        v = [float(x[f"{key}_ms"]) / float(x[f"{base}_ms"]) for x in rows if pick(x) and f"{key}_ms" in x]
        return f"{bg.geomean(v):.2f}x over {len(v)}" if v else "-"

    log("")
    big = lambda x: int(x["M"]) >= 256  # noqa: E731
    every = lambda x: True  # noqa: E731
    # Peer time over lowbit's (above 1: lowbit faster); gpu-check and BENCHMARKS.md read these lines.
    log(f"summary: int8_linear_matmul vs torch._int_mm, M >= 256: {geo('int_mm', 'lowbit', big)}")
    log(f"summary: int8_linear_matmul vs torch._int_mm, every M: {geo('int_mm', 'lowbit', every)}")
    log(f"summary: int8_scaled_mm vs torch._int_mm alone, M >= 256: {geo('int_mm', 'lowbit_scaled', big)}")
    log(f"summary: int8_scaled_mm vs torch._int_mm + torch dequant: {geo('int_mm_dequant', 'lowbit_scaled', every)}")
    log(f"summary: int8_linear_matmul vs bitsandbytes: {geo('bnb', 'lowbit', every)}")
    log(f"summary: int8_scaled_mm vs bitsandbytes int8_linear_matmul + int8_mm_dequant: "
        f"{geo('bnb_2step', 'lowbit_scaled', every)}")
    log(f"summary: int8_linear_matmul vs cuBLAS fp16: {geo('fp16', 'lowbit', every)}")

    llm_rows = bench_llm_int8(torch, LF, bnb if BF is not None else None, timer, gen, args, peak)

    path = args.csv or (os.path.join(os.environ["OUT"], "bench_int8.csv") if os.environ.get("OUT") else None)
    if path:
        keys = sorted({k for x in rows for k in x})
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        keys = sorted({k for x in llm_rows for k in x})
        with open(os.path.join(os.path.dirname(path) or ".", "bench_int8_linear.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(llm_rows)
    return 0


def bench_llm_int8(torch, LF, bnb, timer, gen, args, peak) -> List[Dict[str, object]]:
    """The LLM.int8 linear layer at threshold 6 on activations with a few outlier feature columns: lowbit's
    ``int8_linear`` against ``torch.nn.functional.linear`` on fp16 (cuBLAS) and bitsandbytes'
    ``Linear8bitLt`` (``has_fp16_weights=False``), every call from fp16 activations to fp16 output."""
    log("")
    log("LLM.int8 linear, threshold 6, fp16 activations with 4 outlier columns (|x| ~ 20):")
    log("")
    log("| M | N x K | lowbit ms | fp16 / lowbit | bnb Linear8bitLt / lowbit | error vs fp16 |")
    log("|---|---|---|---|---|---|")
    out: List[Dict[str, object]] = []
    for N, K in args.shapes:
        w = torch.randn(N, K, dtype=torch.float16, device="cuda", generator=gen) * 0.05
        CB, SCB, _ = LF.int8_vectorwise_quant(w)
        lin = None
        if bnb is not None:
            lin = bnb.nn.Linear8bitLt(K, N, bias=False, has_fp16_weights=False, threshold=6.0)
            lin.weight = bnb.nn.Int8Params(w.cpu(), requires_grad=False, has_fp16_weights=False)
            lin = lin.cuda()
        cols = torch.randperm(K, generator=torch.Generator().manual_seed(N + K))[:4].cuda()
        for M in sorted(set(args.m) | {1}):
            a = torch.randn(M, K, dtype=torch.float16, device="cuda", generator=gen)
            a[:, cols] *= 20.0
            with torch.no_grad():
                got = LF.int8_linear(a, CB, SCB, threshold=6.0)
                ref = torch.nn.functional.linear(a, w)
                err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err < 2e-2:
                    log(f"bench_int8.py: int8_linear error {err:.2e} at M={M} N={N} K={K}")
                    raise SystemExit(1)
                fns: Dict[str, Callable[[], object]] = {"lowbit": lambda: LF.int8_linear(a, CB, SCB, threshold=6.0)}
                if M <= 32:  # the few-rows kernel's rows: the GEMM chain too, for the choice between them
                    fns["lowbit_gemm"] = lambda: LF.int8_linear(a, CB, SCB, threshold=6.0, config=GEMM_CHAIN)
                fns["fp16"] = lambda: torch.nn.functional.linear(a, w)
                if lin is not None:  # last: its host time is the longest of the round's callables
                    fns["bnb"] = lambda: lin(a)
                ms = timer.ms_interleaved(fns)
            row = {"M": M, "N": N, "K": K, **{f"{k}_ms": v for k, v in ms.items()}, "err": err}
            out.append(row)
            lb = ms["lowbit"]
            bn = f"{ms['bnb'] / lb:.2f}x" if "bnb" in ms else "-"
            gemm = f" (GEMM chain {ms['lowbit_gemm']:.4f})" if "lowbit_gemm" in ms else ""
            log(f"| {M} | {N}x{K} | {lb:.4f}{gemm} | {ms['fp16'] / lb:.2f}x | {bn} | {err:.1e} |")
        del w, CB, SCB, lin
        torch.cuda.empty_cache()

    def geo(key: str, pick: Callable[[Dict[str, object]], bool]) -> str:
        v = [float(x[f"{key}_ms"]) / float(x["lowbit_ms"]) for x in out if pick(x) and f"{key}_ms" in x]
        return f"{bg.geomean(v):.2f}x over {len(v)}" if v else "-"

    log("")
    log(f"summary: int8_linear (threshold 6) vs cuBLAS fp16 at 4096^3: "
        f"{geo('fp16', lambda x: (x['M'], x['N'], x['K']) == (4096, 4096, 4096))}")
    log(f"summary: int8_linear (threshold 6) vs cuBLAS fp16 at M = 16: {geo('fp16', lambda x: x['M'] == 16)}")
    log(f"summary: int8_linear (threshold 6) vs cuBLAS fp16, every M: {geo('fp16', lambda x: True)}")
    for m in sorted({int(x["M"]) for x in out}):
        log(f"summary: int8_linear (threshold 6) vs bitsandbytes Linear8bitLt at M = {m}: "
            f"{geo('bnb', lambda x, m=m: x['M'] == m)}")
    return out


if __name__ == "__main__":
    sys.exit(main())
