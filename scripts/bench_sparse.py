#!/usr/bin/env python3
"""Block-sparse products on the GPU: lowbit against torch's Triton kernels and dense cuBLAS, as users call them.

``lowbit.sparse.bsr_dense_mm(bsr, x)`` against ``torch.sparse._triton_ops.bsr_dense_mm(bsr, x)`` on the same torch
sparse BSR tensor and the dense ``d @ x`` (cuBLAS) on the matrix it holds: one process, a new output each call,
reps in turns after an L2 flush (bench_gemm.Timer). Each lowbit result is checked against the float32 dense product
first. TFLOP/s count the stored blocks' work only (2 M N K x the density kept).

Usage: python3 scripts/bench_sparse.py [--shapes 4096x4096x4096] [--blocks 16,32,64,128]
    [--sparsity 0.5,0.7,0.9,0.95] [--patterns random,banded] [--dtypes fp16,bf16] [--reps 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder, the timer)


def parse_shapes(text: str) -> List[Tuple[int, int, int]]:
    out = []
    for s in text.split(","):
        m, k, n = (int(x) for x in s.lower().split("x"))
        out.append((m, k, n))
    return out


def pattern(torch, kind: str, rows: int, cols: int, density: float, gen):
    """A [rows, cols] block mask: random (each block kept with probability density) or banded (a circulant band of
    round(density * cols) blocks a row)."""
    if kind == "random":
        return torch.rand(rows, cols, generator=gen) < density
    width = max(1, round(density * cols))
    i = torch.arange(rows).unsqueeze(1)
    c = torch.arange(cols).unsqueeze(0)
    return (c - i * cols // rows) % cols < width


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes("4096x4096x4096"))
    ap.add_argument("--blocks", default="16,32,64,128")
    ap.add_argument("--sparsity", default="0.5,0.7,0.9,0.95")
    ap.add_argument("--patterns", default="random,banded")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch
    from torch.sparse import _triton_ops as tops

    warnings.filterwarnings("ignore", message="Sparse BSR tensor support is in beta")
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_sparse: {where}")
        return 1
    from lowbit import sparse
    timer = bg.Timer(torch, args.reps, warmup=3)
    bg.log(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    bg.log("| M x K x N | dtype | block | sparsity | pattern | lowbit ms | TFLOP/s | torch Triton ms (lowbit x) | "
           "dense cuBLAS ms (lowbit x) |")
    bg.log("|---|---|---|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    vs_triton, vs_dense = [], []
    for M, K, N in args.shapes:
        for dname in args.dtypes.split(","):
            dtype = dtypes[dname]
            x = torch.randn(K, N, generator=gen).to("cuda", dtype)
            for blk in (int(b) for b in args.blocks.split(",")):
                for sp in (float(s) for s in args.sparsity.split(",")):
                    for kind in args.patterns.split(","):
                        keep = pattern(torch, kind, M // blk, K // blk, 1.0 - sp, gen)
                        full = keep.repeat_interleave(blk, 0).repeat_interleave(blk, 1)
                        d = (torch.randn(M, K, generator=gen) * full).to("cuda", dtype)
                        bsr = d.to_sparse_bsr((blk, blk))
                        kept = keep.float().mean().item()
                        want = d.float() @ x.float()
                        got = sparse.bsr_dense_mm(bsr, x)
                        err = ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()
                        if not err < 1e-2:
                            raise SystemExit(f"bench_sparse.py: lowbit bsr_dense_mm error {err:.1e} at block {blk}, "
                                             f"sparsity {sp}, {kind}")
                        t = timer.ms_interleaved({
                            "lowbit": lambda: sparse.bsr_dense_mm(bsr, x),
                            "triton": lambda: tops.bsr_dense_mm(bsr, x),
                            "dense": lambda: d @ x,
                        })
                        lb = t["lowbit"]
                        tflops = 2.0 * M * N * K * kept / (lb * 1e9)
                        vs_triton.append(t["triton"] / lb)
                        vs_dense.append(t["dense"] / lb)
                        bg.log(f"| {M} x {K} x {N} | {dname} | {blk} | {sp:.2f} | {kind} | {lb:.3f} | {tflops:.0f} | "
                               f"{t['triton']:.3f} ({t['triton'] / lb:.2f}) | {t['dense']:.3f} ({t['dense'] / lb:.2f}) |")
    bg.log(f"summary: geomean {bg.geomean(vs_triton):.2f}x torch's Triton bsr_dense_mm, {bg.geomean(vs_dense):.2f}x "
           "dense cuBLAS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
