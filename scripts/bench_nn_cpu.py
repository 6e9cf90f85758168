#!/usr/bin/env python3
"""lowbit.nn's Linear4bit on the CPU against bitsandbytes' Linear4bit and torch's dense bf16 Linear, one process.

    LOWBIT_PYTHON_DIR=build/python scripts/bench_nn_cpu.py [--threads 2] [--m 1,16] [--n 4096] [--k 4096]

Each row: nf4 (blocksize 64, double quant) weights, bf16 input and compute, inference mode; the least of three
means over --reps calls, each making a new output. Also lowbit.functional.matmul_4bit on the module's state,
so the module's cost over the bare call (the custom-op layer) shows. bitsandbytes' column says 'not installed'
where it is absent.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if os.environ.get("LOWBIT_PYTHON_DIR"):
    sys.path.insert(0, os.environ["LOWBIT_PYTHON_DIR"])

import torch  # noqa: E402

import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402


def best_ms(call, reps: int) -> float:
    call()
    call()
    means = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        means.append((time.perf_counter() - start) / reps)
    return min(means) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dense = torch.nn.Linear(args.k, args.n, bias=False).to(torch.bfloat16)
    ours = lnn.Linear4bit(args.k, args.n, bias=False, quant_type="nf4", compute_dtype=torch.bfloat16)
    ours.load_state_dict(dense.state_dict())
    ours = ours.cpu()
    try:
        import bitsandbytes as bnb
        theirs = bnb.nn.Linear4bit(args.k, args.n, bias=False, quant_type="nf4", compute_dtype=torch.bfloat16)
        theirs.load_state_dict(dense.state_dict())
        theirs = theirs.cpu()
    except ImportError:
        theirs = None
    print("| M | N x K | lowbit.nn ms | functional ms | bnb Linear4bit ms | torch bf16 ms | x bnb | x torch |")
    print("|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, args.k, dtype=torch.bfloat16)
            state = ours.weight.quant_state
            a = best_ms(lambda: ours(x), args.reps)
            f = best_ms(lambda: F.matmul_4bit(x, ours.weight, state), args.reps)
            d = best_ms(lambda: dense(x), args.reps)
            b = best_ms(lambda: theirs(x), args.reps) if theirs is not None else None
            bcell, bratio = (f"{b:.3f}", f"{b / a:.2f}x") if b is not None else ("not installed", "-")
            print(f"| {m} | {args.n} x {args.k} | {a:.3f} | {f:.3f} | {bcell} | {d:.3f} | {bratio} | {d / a:.2f}x |")


if __name__ == "__main__":
    main()
