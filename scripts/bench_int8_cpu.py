#!/usr/bin/env python3
"""lowbit's int8 GEMM on the CPU against its peers in the same process, as users call them (torch
tensors in, a new output each call): bitsandbytes' ``int8_linear_matmul`` (torch._int_mm on AVX-512
CPUs) when installed, ``torch._int_mm`` itself, and torch's dense fp32 matmul of the same shape. Every
result is checked against int64 sums. Wall time of a call, the least of --rounds medians of --reps,
the implementations taken in turns (this CPU's clock and neighbours vary).

A second table: the LLM.int8 linear layer (``int8_linear`` at threshold 6 on float32 activations with
4 outlier columns) against bitsandbytes' ``Linear8bitLt`` (has_fp16_weights=False, threshold 6) and
torch's float32 ``linear`` on the same weight, each with its relative error against the float32 layer.

Usage (after a build): python3 scripts/bench_int8_cpu.py [--threads N] [--reps 10] [--rounds 3]
lowbit is found as scripts/bench_gemm.py finds it. Prints the CPU model and a markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)
from bench_optim_cpu import cpu_model  # noqa: E402

SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096),
          (128, 11008, 4096), (128, 4096, 11008)]


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


LINEAR_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (128, 11008, 4096)]


def table_header(*columns: str) -> None:
    """A blank line, then a Markdown table's header and rule."""
    bg.log("")
    bg.log("| " + " | ".join(columns) + " |")
    bg.log("|" + "---|" * len(columns))


def best_of(fns, reps: int, rounds: int):
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            best[name] = min(best[name], median_ms(fn, reps))
    return best


def bench_linear(torch, lowbit, bnb, args) -> None:
    bg.log("")
    bg.log("LLM.int8 linear, threshold 6, float32 activations with 4 outlier columns (|x| ~ 20):")
    table_header("M x N x K", "lowbit ms", "bitsandbytes Linear8bitLt ms (/ lowbit)",
                 "torch fp32 linear ms (/ lowbit)", "lowbit error", "bitsandbytes error")
    g = torch.Generator().manual_seed(1)
    for M, N, K in LINEAR_SHAPES:
        w = torch.randn(N, K, generator=g) * 0.05
        cb, scb, _ = lowbit.int8_vectorwise_quant(w)
        a = torch.randn(M, K, generator=g)
        a[:, torch.randperm(K, generator=g)[:4]] *= 20.0
        ref = torch.nn.functional.linear(a, w)
        fns = {"lowbit": lambda: lowbit.int8_linear(a, cb, scb, threshold=6.0),
               "torch fp32": lambda: torch.nn.functional.linear(a, w)}
        if bnb is not None:
            lin = bnb.nn.Linear8bitLt(K, N, bias=False, has_fp16_weights=False, threshold=6.0)
            lin.weight = bnb.nn.Int8Params(w.clone(), requires_grad=False, has_fp16_weights=False)
            fns["bitsandbytes"] = lambda: lin(a)
        errs = {}
        with torch.no_grad():
            for name in ("lowbit", "bitsandbytes"):
                if name in fns:
                    try:
                        errs[name] = ((fns[name]().float() - ref).norm() / ref.norm()).item()
                    except Exception as e:  # noqa: BLE001 - a peer that cannot run: an empty cell
                        if name == "lowbit":
                            raise
                        bg.log(f"    {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                        del fns[name]
            if not errs["lowbit"] < 2e-2:
                raise SystemExit(f"bench_int8_cpu.py: int8_linear error {errs['lowbit']:.2e} at {M}x{N}x{K}")
            best = best_of(fns, args.reps, args.rounds)

        def cell(name: str) -> str:
            return "—" if name not in best else f"{best[name]:.2f} ({best[name] / best['lowbit']:.2f})"

        bnb_err = f"{errs['bitsandbytes']:.1e}" if "bitsandbytes" in errs else "—"
        bg.log(f"| {M} x {N} x {K} | {best['lowbit']:.2f} | {cell('bitsandbytes')} | {cell('torch fp32')} | "
               f"{errs['lowbit']:.1e} | {bnb_err} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_int8_cpu: {where}")
        return 1
    try:
        import bitsandbytes as bnb
        bnb_mm = bnb.functional.int8_linear_matmul
    except Exception:  # noqa: BLE001 - not installed: its column stays empty
        bnb, bnb_mm = None, None
    bg.log(f"CPU: {cpu_model()}; {args.threads} threads; torch {torch.__version__}; "
           f"bitsandbytes {'not installed' if bnb is None else bnb.__version__}")
    table_header("M x N x K", "lowbit ms", "bitsandbytes ms (/ lowbit)", "torch._int_mm ms (/ lowbit)",
                 "torch fp32 ms (/ lowbit)", "lowbit GOP/s")
    g = torch.Generator().manual_seed(0)
    for M, N, K in SHAPES:
        a = torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g)
        b = torch.randint(-128, 128, (N, K), dtype=torch.int8, generator=g)
        af, bf = a.float(), b.float()
        want = (a.long() @ b.long().t()).int()
        fns = {"lowbit": lambda: lowbit.int8_linear_matmul(a, b), "torch._int_mm": lambda: torch._int_mm(a, b.t()),
               "torch fp32": lambda: af @ bf.t()}
        if bnb_mm is not None:
            fns["bitsandbytes"] = lambda: bnb_mm(a, b)
        for name in ("lowbit", "bitsandbytes", "torch._int_mm"):
            if name in fns:
                try:
                    assert torch.equal(fns[name](), want), f"{name} gives wrong products"
                except Exception as e:  # noqa: BLE001 - a peer that cannot run the shape: an empty cell
                    if name == "lowbit":
                        raise
                    bg.log(f"    {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                    del fns[name]
        best = best_of(fns, args.reps, args.rounds)

        def cell(name: str) -> str:
            if name not in best:
                return "—"
            return f"{best[name]:.2f} ({best[name] / best['lowbit']:.2f})"

        gops = 2.0 * M * N * K / (best["lowbit"] * 1e6)
        bg.log(f"| {M} x {N} x {K} | {best['lowbit']:.2f} | {cell('bitsandbytes')} | {cell('torch._int_mm')} | "
               f"{cell('torch fp32')} | {gops:.0f} |")
    bench_linear(torch, lowbit, bnb, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
