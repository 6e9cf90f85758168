#!/usr/bin/env python3
"""lowbit.Matmul on the CPU for every code width against torch's dense bf16 matmul, one process.

    scripts/bench_matmul_cpu.py [--threads 2] [--m 1,16] [--n 4096] [--k 4096] [--reps 10] [--rounds 3]
        [--types int8,uint8,...] [--dtype bfloat16|float16]

Each row: one W_dtype with group-128 scales, A and out of --dtype (bf16 by default), a new output each call; the
least of --rounds medians of --reps calls (bench_int8_cpu.best_of), torch's dense ``x @ W.T`` in the same dtype at
the same M timed in the same rounds. lowbit is found as bench_gemm.find_lowbit says ($LOWBIT_PYTHON_DIR, else the newest build*/python).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)
from bench_int8_cpu import best_of, table_header  # noqa: E402
from bench_optim_cpu import cpu_model  # noqa: E402

# W_dtype -> (bits, signed) of its random codes (fp8_e4m3: random floats converted)
TYPES = {"int8": (8, True), "uint8": (8, False), "fp8_e4m3": (8, False), "int4": (4, True), "uint4": (4, False),
         "nf4": (4, False), "fp4": (4, False), "int2": (2, True), "uint2": (2, False), "uint1": (1, False)}


def codes(torch, w_dtype: str, N: int, K: int, gen):
    if w_dtype == "fp8_e4m3":
        return (torch.randn(N, K, generator=gen) * 0.1).to(torch.float8_e4m3fn)
    bits, signed = TYPES[w_dtype]
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    values = torch.randint(lo, hi, (N, K), generator=gen, dtype=torch.int16)
    return values.to(torch.int8 if signed else torch.uint8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_matmul_cpu: {where}")
        return 1
    N, K = args.n, args.k
    gen = torch.Generator().manual_seed(3)
    dtype = getattr(torch, args.dtype)
    W = torch.randn(N, K, generator=gen).to(dtype)
    ms_list = [int(m) for m in args.m.split(",")]
    xs = {m: torch.randn(m, K, generator=gen).to(dtype) for m in ms_list}
    bg.log(f"bench_matmul_cpu: {cpu_model()}, {args.threads} threads, torch {torch.__version__}, "
           f"N x K = {N} x {K}, g128, {args.dtype}")
    table_header("W_dtype", *[c for m in ms_list for c in (f"M = {m} ms", "x torch")])
    dense = {}
    with torch.no_grad():
        for w_dtype in args.types.split(","):
            cfg = lowbit.MatmulConfig(N=N, K=K, A_dtype=args.dtype, W_dtype=w_dtype, out_dtype=args.dtype,
                                      group_size=128, with_scaling=True)
            mm = lowbit.Matmul(cfg, device="cpu")
            wp = mm.transform_weight(codes(torch, w_dtype, N, K, gen),
                                     scale=torch.rand(N, K // 128, generator=gen) * 0.01)
            cells = []
            for m in ms_list:
                ms = best_of({"lowbit": lambda m=m: mm(xs[m], wp), "torch": lambda m=m: xs[m] @ W.t()},
                             args.reps, args.rounds)
                dense[m] = min(dense.get(m, float("inf")), ms["torch"])
                cells.append(f"{ms['lowbit']:.3f} | {ms['torch'] / ms['lowbit']:.2f}x")
            bg.log(f"| {w_dtype} | " + " | ".join(cells) + " |")
    bg.log("")
    bg.log(f"torch dense {args.dtype}: " + ", ".join(f"M = {m} {dense[m]:.3f} ms" for m in ms_list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
