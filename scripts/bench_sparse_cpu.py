#!/usr/bin/env python3
"""Block-sparse products on the CPU: lowbit against torch, as users call them.

``lowbit.sparse.bsr_dense_mm(bsr, x)`` against torch's own ``bsr @ x`` on the same sparse BSR tensor and the dense
``d @ x``, float32, one process, a new output each call; best of rounds of medians (wall time). lowbit's result is
checked against the float64 dense product first.

Usage: python3 scripts/bench_sparse_cpu.py [--threads 2] [--reps 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)
from bench_int8_cpu import best_of, table_header  # noqa: E402
from bench_optim_cpu import cpu_model  # noqa: E402

# (M, K, N, block, density)
CASES = [(1024, 1024, 256, 32, 0.5), (1024, 1024, 256, 32, 0.1), (2048, 2048, 256, 64, 0.5),
         (2048, 2048, 256, 64, 0.1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    warnings.filterwarnings("ignore", message="Sparse BSR tensor support is in beta")
    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_sparse_cpu: {where}")
        return 1
    from lowbit import sparse
    bg.log(f"CPU: {cpu_model()}; {args.threads} threads; torch {torch.__version__}")
    table_header("M x K x N", "block", "density", "lowbit ms", "torch bsr @ x ms (/ lowbit)",
                 "torch dense ms (/ lowbit)", "lowbit rel. error")
    g = torch.Generator().manual_seed(0)
    for M, K, N, blk, density in CASES:
        keep = torch.rand(M // blk, K // blk, generator=g) < density
        d = torch.randn(M, K, generator=g) * keep.repeat_interleave(blk, 0).repeat_interleave(blk, 1)
        bsr = d.to_sparse_bsr((blk, blk))
        x = torch.randn(K, N, generator=g)
        want = d.double() @ x.double()
        err = ((sparse.bsr_dense_mm(bsr, x).double() - want).norm() / want.norm()).item()
        if not err < 1e-5:
            raise SystemExit(f"bench_sparse_cpu.py: bsr_dense_mm error {err:.1e}")
        best = best_of({"lowbit": lambda: sparse.bsr_dense_mm(bsr, x), "torch bsr": lambda: bsr @ x,
                        "torch dense": lambda: d @ x}, args.reps, args.rounds)
        lb = best["lowbit"]
        bg.log(f"| {M} x {K} x {N} | {blk} | {density} | {lb:.2f} | {best['torch bsr']:.2f} "
               f"({best['torch bsr'] / lb:.2f}) | {best['torch dense']:.2f} ({best['torch dense'] / lb:.2f}) | "
               f"{err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
