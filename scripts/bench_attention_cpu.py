#!/usr/bin/env python3
"""Attention on the CPU: lowbit.functional.flash_attention against torch's SDPA, as users call them.

q, k, v torch tensors [B, S, H, D] (a new output each call) against
``torch.nn.functional.scaled_dot_product_attention`` on the same memory seen as [B, H, S, D]
(``transpose(1, 2)``, no copy), float32 and bfloat16, causal and not (Sq == Skv: both masks agree);
then decode: ``flash_attention_kvcache`` on a paged cache against SDPA on the same cache gathered beforehand.
Medians of wall times after a warm-up, the two calls in turns; torch and lowbit use the same
thread count (--threads, default 2). Each result is checked against SDPA's first.

Usage: python3 scripts/bench_attention_cpu.py [--threads 2] [--reps 7]
lowbit is found as scripts/bench_gemm.py finds it ($LOWBIT_PYTHON_DIR, else the newest build*/python).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)

CASES = [(1, 512, 8, 64, True), (1, 512, 8, 64, False), (4, 256, 8, 64, False), (1, 1024, 8, 128, True),
         (1, 2048, 16, 64, True)]
DECODE = [(1, 4096, 32, 8, 128, 16), (4, 2048, 32, 8, 128, 16), (1, 4096, 32, 32, 128, 16)]


def median_ms(fns, reps):
    times = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] * 1e3 for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    import torch

    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        print(f"bench_attention_cpu: {where}")
        return 1
    import lowbit.functional as F  # noqa: PLC0415

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(f"torch {torch.__version__}; lowbit from {where}; {args.threads} threads")
    print("| dtype | B x S | H x D | causal | lowbit ms | torch SDPA ms | x torch |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for dtype in (torch.float32, torch.bfloat16):
        for B, S, H, D, causal in CASES:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(B, S, H, D, generator=g).to(dtype) for _ in range(3))

            def sdpa():
                return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                        v.transpose(1, 2), is_causal=causal)

            def ours():
                return F.flash_attention(q, k, v, is_causal=causal)

            err = ((ours().float() - sdpa().transpose(1, 2).float()).norm() / sdpa().float().norm()).item()
            bad += err > 2e-2
            lb, tt = median_ms([ours, sdpa], args.reps)
            name = str(dtype).replace("torch.", "")
            print(f"| {name} | {B} x {S} | {H} x {D} | {'yes' if causal else 'no'} | {lb:.2f} | {tt:.2f} | "
                  f"{tt / lb:.2f}x |", flush=True)
    # Decode: one query a sequence against a paged cache (pages shuffled), SDPA on the cache gathered into
    # contiguous [B, Hkv, L, D] tensors beforehand (untimed: the peer's best case), grouped heads broadcast by it.
    print()
    print("| dtype | B | cache | H / Hkv x D | page | lowbit ms | torch SDPA ms | x torch |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        for B, L, H, Hkv, D, P in DECODE:
            g = torch.Generator().manual_seed(1)
            pages = B * L // P
            kc, vc = (torch.randn(pages, P, Hkv, D, generator=g).to(dtype) for _ in range(2))
            table = torch.randperm(pages, generator=g).to(torch.int32).reshape(B, L // P)
            lens = torch.full((B,), L, dtype=torch.int32)
            q = torch.randn(B, 1, H, D, generator=g).to(dtype)
            kg, vg = (c[table.long()].reshape(B, L, Hkv, D).transpose(1, 2).contiguous() for c in (kc, vc))

            def sdpa():
                return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kg, vg, enable_gqa=True)

            def ours():
                return F.flash_attention_kvcache(q, kc, vc, lens, table)

            err = ((ours().float() - sdpa().transpose(1, 2).float()).norm() / sdpa().float().norm()).item()
            bad += err > 2e-2
            lb, tt = median_ms([ours, sdpa], args.reps)
            name = str(dtype).replace("torch.", "")
            print(f"| {name} | {B} | {L} | {H} / {Hkv} x {D} | {P} | {lb:.2f} | {tt:.2f} | {tt / lb:.2f}x |", flush=True)
    if bad:
        print(f"bench_attention_cpu: {bad} results differ from SDPA's by more than 2e-2")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
