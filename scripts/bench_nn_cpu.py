#!/usr/bin/env python3
"""lowbit.nn's Linear4bit on the CPU against bitsandbytes' Linear4bit and torch's dense bf16 Linear, one process.

    scripts/bench_nn_cpu.py [--threads 2] [--m 1,16] [--n 4096] [--k 4096] [--reps 20] [--rounds 3]

Each row: nf4 (blocksize 64, double quant) weights, bf16 input and compute, inference mode; the least of
--rounds medians of --reps calls (bench_int8_cpu.best_of), each making a new output. Also
lowbit.functional.matmul_4bit on the module's state, so the module's cost over the bare call (the custom-op
layer) shows. bitsandbytes' column says 'not installed' where it is absent. lowbit is found as
bench_gemm.find_lowbit says ($LOWBIT_PYTHON_DIR, else the newest build*/python).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)
from bench_int8_cpu import best_of, table_header  # noqa: E402
from bench_optim_cpu import cpu_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_nn_cpu: {where}")
        return 1
    import lowbit.functional as F
    import lowbit.nn as lnn
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
        bnb = theirs = None
    bg.log(f"bench_nn_cpu: {cpu_model()}, {args.threads} threads, torch {torch.__version__}, "
           f"bitsandbytes {bnb.__version__ if bnb else 'not installed'}")
    table_header("M", "N x K", "lowbit.nn ms", "functional ms", "bnb Linear4bit ms", "torch bf16 ms", "x bnb",
                 "x torch")
    with torch.inference_mode():
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, args.k, dtype=torch.bfloat16)
            state = ours.weight.quant_state
            fns = {"nn": lambda: ours(x), "functional": lambda: F.matmul_4bit(x, ours.weight, state),
                   "torch": lambda: dense(x)}
            if theirs is not None:
                fns["bnb"] = lambda: theirs(x)
            ms = best_of(fns, args.reps, args.rounds)
            bcell, bratio = ("not installed", "-")
            if "bnb" in ms:
                bcell, bratio = f"{ms['bnb']:.3f}", f"{ms['bnb'] / ms['nn']:.2f}x"
            bg.log(f"| {m} | {args.n} x {args.k} | {ms['nn']:.3f} | {ms['functional']:.3f} | {bcell} | "
                   f"{ms['torch']:.3f} | {bratio} | {ms['torch'] / ms['nn']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
