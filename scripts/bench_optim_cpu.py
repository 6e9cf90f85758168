#!/usr/bin/env python3
"""lowbit.optim on the CPU against PyTorch's CPU AdamW (fused and foreach), and bitsandbytes' CPU optimizers
when installed, as users call them: one parameter of 2^22 fp32 elements, its gradient set once, the wall time
of ``opt.step()`` (median of --reps after 2 warm-up steps), torch's thread count as set (--threads).

Usage (after a build): python3 scripts/bench_optim_cpu.py [--threads N] [--reps 10]
lowbit is found as scripts/bench_gemm.py finds it. Prints the CPU model and a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def step_ms(torch, make, n: int, reps: int):
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n) * 0.01
    try:
        opt = make([p])
        opt.step()
        opt.step()
    except Exception as e:  # noqa: BLE001 - a peer without this class on the CPU: an empty cell
        return None, f"{type(e).__name__}"
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--n", type=int, default=1 << 22)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_optim_cpu: {where}")
        return 1
    import lowbit.optim as lo
    try:
        import bitsandbytes as bnb
        peer = bnb.optim
    except Exception:  # noqa: BLE001
        peer = None
    rows = [("torch AdamW (fused)", lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True)),
            ("torch AdamW (foreach)", lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True)),
            ("lowbit AdamW32bit", lambda ps: lo.AdamW32bit(ps, lr=1e-3)),
            ("lowbit AdamW8bit", lambda ps: lo.AdamW8bit(ps, lr=1e-3)),
            ("lowbit Adam8bit, block_wise=False", lambda ps: lo.Adam8bit(ps, lr=1e-3, block_wise=False))]
    if peer is not None:
        rows += [("bitsandbytes AdamW32bit", lambda ps: peer.AdamW32bit(ps, lr=1e-3)),
                 ("bitsandbytes AdamW8bit", lambda ps: peer.AdamW8bit(ps, lr=1e-3))]
    bg.log(f"CPU: {cpu_model()}; {args.threads} threads; torch {torch.__version__}; "
           f"bitsandbytes {'not installed' if peer is None else bnb.__version__}; n = {args.n} fp32")
    results = [(name, *step_ms(torch, make, args.n, args.reps)) for name, make in rows]
    fused = results[0][1]
    bg.log("")
    bg.log("| optimizer | ms a step | torch fused / this |")
    bg.log("|---|---|---|")
    for name, ms, why in results:
        cell = f"{ms:.2f}" if ms is not None else f"— ({why})"
        ratio = f"{fused / ms:.2f}" if ms and fused else "—"
        bg.log(f"| {name} | {cell} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
