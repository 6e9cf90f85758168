#!/usr/bin/env python3
"""lowbit.Matmul on the CPU for every code width against torch's dense bf16 matmul, one process.

    LOWBIT_PYTHON_DIR=build/python scripts/bench_matmul_cpu.py [--threads 2] [--m 1,16] [--n 4096] [--k 4096]

Each row: one W_dtype with group-128 scales, bf16 A and out, a new output each call; the least of three means
over --reps calls. torch's column is its dense bf16 ``x @ W.T`` at the same M, timed in the same process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if os.environ.get("LOWBIT_PYTHON_DIR"):
    sys.path.insert(0, os.environ["LOWBIT_PYTHON_DIR"])

import torch  # noqa: E402

import lowbit  # noqa: E402

# W_dtype -> (bits, signed) of its random codes (fp8_e4m3: random floats converted)
TYPES = {"int8": (8, True), "uint8": (8, False), "fp8_e4m3": (8, False), "int4": (4, True), "uint4": (4, False),
         "nf4": (4, False), "int2": (2, True), "uint2": (2, False), "uint1": (1, False)}


def best_ms(call, reps: int) -> float:
    call()
    means = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        means.append((time.perf_counter() - start) / reps)
    return min(means) * 1e3


def codes(w_dtype: str, N: int, K: int, gen: torch.Generator) -> torch.Tensor:
    if w_dtype == "fp8_e4m3":
        return (torch.randn(N, K, generator=gen) * 0.1).to(torch.float8_e4m3fn)
    bits, signed = TYPES[w_dtype]
    if signed:
        return torch.randint(-(1 << (bits - 1)), 1 << (bits - 1), (N, K), generator=gen, dtype=torch.int16).to(torch.int8)
    return torch.randint(0, 1 << bits, (N, K), generator=gen, dtype=torch.int16).to(torch.uint8)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--m", default="1,16")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--types", default=",".join(TYPES))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    N, K = args.n, args.k
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(N, K, generator=gen).to(torch.bfloat16)
    ms_list = [int(m) for m in args.m.split(",")]
    print(f"bench_matmul_cpu: {args.threads} threads, torch {torch.__version__}, N x K = {N} x {K}, g128, bf16")
    print()
    print("| W_dtype | " + " | ".join(f"M = {m} ms | x torch" for m in ms_list) + " |")
    print("|---|" + "---|---|" * len(ms_list))
    xs = {m: torch.randn(m, K, generator=gen).to(torch.bfloat16) for m in ms_list}
    with torch.no_grad():
        dense = {m: best_ms(lambda m=m: xs[m] @ W.t(), args.reps) for m in ms_list}
        for w_dtype in args.types.split(","):
            cfg = lowbit.MatmulConfig(N=N, K=K, A_dtype="bfloat16", W_dtype=w_dtype, out_dtype="bfloat16",
                                      group_size=128, with_scaling=True)
            mm = lowbit.Matmul(cfg, device="cpu")
            wp = mm.transform_weight(codes(w_dtype, N, K, gen), scale=torch.rand(N, K // 128, generator=gen) * 0.01)
            cells = []
            for m in ms_list:
                t = best_ms(lambda m=m: mm(xs[m], wp), args.reps)
                cells.append(f"{t:.3f} | {dense[m] / t:.2f}x")
            print(f"| {w_dtype} | " + " | ".join(cells) + " |")
    print()
    print("torch dense bf16: " + ", ".join(f"M = {m} {dense[m]:.3f} ms" for m in ms_list))


if __name__ == "__main__":
    main()
