#!/usr/bin/env python3
"""Host time of lowbit.optim's ``opt.step()`` over many parameters, which the multi-tensor updates batch.

--count parameters of --n fp32 elements, gradients set once, 3 warm-up steps, then the median of --reps
steps (time.perf_counter) of: 'step', until step() returns (on CUDA the kernels are only queued: the host
time; 'step + sync' waits for them too); 'Python alone', the same with the C++ multi-tensor calls replaced
by no-ops (what lowbit.optim and lowbit.functional spend in Python); and 'one tensor', a step of one
parameter of the same total size. On the CPU 'step' includes the updates themselves.

Usage (after a build): python3 scripts/bench_optim_host.py [--device cpu|cuda] [--count 200] [--n 8192]
    [--cls AdamW8bit] [--min-8bit-size 4096] [--reps 30] [--threads N]
lowbit is found as scripts/bench_gemm.py finds it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)


def step_ms(torch, opt, device: str, reps: int, sync: bool) -> float:
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        opt.step()
        if sync and device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def make(torch, lo, args, count: int, n: int):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(n, device=args.device)) for _ in range(count)]
    for p in ps:
        p.grad = torch.randn(n, device=args.device) * 0.01
    kw = {"min_8bit_size": args.min_8bit_size} if "8bit" in args.cls else {}
    return getattr(lo, args.cls)(ps, lr=1e-4, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--cls", default="AdamW8bit")
    ap.add_argument("--min-8bit-size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_optim_host: {where}")
        return 1
    import lowbit.functional as F
    import lowbit.optim as lo

    rows = [("step", step_ms(torch, make(torch, lo, args, args.count, args.n), args.device, args.reps, False))]
    if args.device == "cuda":
        rows.append(("step + sync", step_ms(torch, make(torch, lo, args, args.count, args.n), args.device, args.reps,
                                            True)))
    rows.append(("one tensor", step_ms(torch, make(torch, lo, args, 1, args.count * args.n), args.device, args.reps,
                                       args.device == "cuda")))
    opt = make(torch, lo, args, args.count, args.n)
    names = ("optimizer_update_32bit_multi", "optimizer_update_8bit_blockwise_multi")
    saved = {name: getattr(F._lowbit, name) for name in names}
    try:
        for name in names:
            setattr(F._lowbit, name, lambda *a, **k: None)
        rows.append(("Python alone", step_ms(torch, opt, args.device, args.reps, False)))
    finally:
        for name, fn in saved.items():
            setattr(F._lowbit, name, fn)
    bg.log(f"{args.cls}, {args.count} x {args.n} fp32 on {args.device}, torch threads {torch.get_num_threads()}, "
           f"median of {args.reps} steps")
    bg.log("| what | ms a step |")
    bg.log("|---|---|")
    for name, ms in rows:
        bg.log(f"| {name} | {ms:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
