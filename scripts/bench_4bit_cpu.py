#!/usr/bin/env python3
"""4-bit weights on the CPU, as users call them: lowbit's ``matmul_4bit`` straight on a bitsandbytes
state against bitsandbytes in the same process — ``bnb.matmul_4bit`` on the same state and
``bnb.nn.Linear4bit`` in eval (its CPU path, which repacks the weight on the first call) — and torch's
dense bf16 ``x @ W.T`` of the same shape. nf4, blocksize 64, bf16 activations and outputs. Each result
is checked against the dequantized weight's float32 product (relative L2 error). Wall time of a call,
the least of --rounds medians of --reps, the implementations taken in turns.

A second table runs ``lowbit.Matmul`` (BitBLAS' interface) on the same activations: int4 with
group-128 scales, and uint4 with group-128 scales and quantized zeros (GPTQ's format), against the
same bitsandbytes Linear4bit (nf4) and torch rows. A third times the dequantizations, 4-bit (nf4,
blocksize 64) and 8-bit blockwise (blocksize 256), at 2^20 and 2^24 elements against bitsandbytes'
same calls, a new output each call.

Usage (after a build): python3 scripts/bench_4bit_cpu.py [--threads N] [--reps 10] [--rounds 3]
[--m 1,16] lowbit is found as scripts/bench_gemm.py finds it; bitsandbytes is optional.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)
from bench_int8_cpu import best_of, table_header  # noqa: E402
from bench_optim_cpu import cpu_model  # noqa: E402

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]


def bnb_linear(torch, bnb, W):
    """bitsandbytes' Linear4bit (nf4, blocksize 64, bf16 compute) holding W, in eval on the CPU; None without bnb."""
    if not bnb:
        return None
    N, K = W.shape
    lin = bnb.nn.Linear4bit(K, N, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    lin.weight = bnb.nn.Params4bit(W, requires_grad=False, quant_type="nf4", blocksize=64)
    return lin.to("cpu").eval()  # Params4bit quantizes when moved to a device


def copy_bandwidth(torch, reps: int) -> float:
    """A STREAM-style copy in this process: bytes read plus written per second, the best of reps."""
    src = torch.ones(128 << 20, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(max(reps, 3)):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.numel() * src.element_size() / best / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--m", default="1,16")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_4bit_cpu: {where}")
        return 1
    LF = lowbit.functional
    try:
        import bitsandbytes as bnb
        import bitsandbytes.functional as BF
    except ImportError:
        bnb = BF = None
    bg.log(f"bench_4bit_cpu: {cpu_model()}, {args.threads} threads, torch {torch.__version__}, "
           f"bitsandbytes {bnb.__version__ if bnb else 'not installed'}")
    copy_gbs = copy_bandwidth(torch, args.reps)
    bg.log(f"copy: {copy_gbs:.1f} GB/s (torch copy_ of 256 MiB, bytes read + written); `of copy`: the weight's "
           f"bytes (codes and absmax) per second of lowbit's call over it")
    table_header("M", "N x K", "lowbit ms", "bnb matmul_4bit ms", "bnb Linear4bit ms", "torch bf16 ms",
                 "x bnb matmul_4bit", "x bnb Linear4bit", "x torch", "of copy", "lowbit err")
    gen = torch.Generator().manual_seed(0)
    failed = 0
    for N, K in SHAPES:
        W = torch.randn(N, K, generator=gen).to(torch.bfloat16)
        q, st = (BF.quantize_4bit(W, quant_type="nf4", blocksize=64) if BF
                 else LF.quantize_4bit(W, quant_type="nf4", blocksize=64))
        Wd = (BF.dequantize_4bit(q, st) if BF else LF.dequantize_4bit(q, st)).float()
        lin = bnb_linear(torch, bnb, W)
        for M in (int(m) for m in args.m.split(",")):
            x = torch.randn(M, K, generator=gen).to(torch.bfloat16)
            ref = x.float() @ Wd.t()
            got = LF.matmul_4bit(x, q.t(), st)
            err = float((got.float() - ref).norm() / ref.norm())
            failed += not err < 2e-2
            fns = {"lowbit": lambda: LF.matmul_4bit(x, q.t(), st), "torch": lambda: x @ W.t()}
            if bnb:
                fns["bnb"] = lambda: bnb.matmul_4bit(x, q.t(), quant_state=st)
                fns["linear"] = lambda: lin(x)
            with torch.no_grad():
                ms = best_of(fns, args.reps, args.rounds)
            cell = lambda name: f"{ms[name]:.3f}" if name in ms else "—"  # noqa: E731
            ratio = lambda name: f"{ms[name] / ms['lowbit']:.2f}x" if name in ms else "—"  # noqa: E731
            weight_gbs = (N * K / 2 + st.absmax.numel() * st.absmax.element_size()) / (ms["lowbit"] * 1e-3) / 1e9
            bg.log(f"| {M} | {N} x {K} | {cell('lowbit')} | {cell('bnb')} | {cell('linear')} | {cell('torch')} | "
                   f"{ratio('bnb')} | {ratio('linear')} | {ratio('torch')} | {weight_gbs / copy_gbs:.2f} | {err:.1e} |")
    failed += bench_matmul(torch, lowbit, bnb, args)
    if BF:
        bench_dequantize(torch, LF, BF, args)
    return 1 if failed else 0


def bench_dequantize(torch, LF, BF, args) -> None:
    """dequantize_4bit and dequantize_blockwise, lowbit's and bitsandbytes' calls on their own states."""
    bg.log("")
    bg.log("Dequantization, a new output each call (nf4 blocksize 64; 8-bit blockwise blocksize 256):")
    table_header("elements", "out", "lowbit 4-bit ms", "bnb 4-bit ms", "x bnb", "lowbit 8-bit ms", "bnb 8-bit ms",
                 "x bnb")
    gen = torch.Generator().manual_seed(3)
    for log2n in (20, 24):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(1 << log2n, generator=gen).to(dtype)
            x2 = x.reshape(1024, -1)
            lq, lst = LF.quantize_4bit(x2, quant_type="nf4", blocksize=64)
            bq, bst = BF.quantize_4bit(x2, quant_type="nf4", blocksize=64)
            lq8, ls8 = LF.quantize_blockwise(x, blocksize=256)
            bq8, bs8 = BF.quantize_blockwise(x, blocksize=256)
            ms = best_of({"l4": lambda: LF.dequantize_4bit(lq, lst), "b4": lambda: BF.dequantize_4bit(bq, bst),
                          "l8": lambda: LF.dequantize_blockwise(lq8, ls8),
                          "b8": lambda: BF.dequantize_blockwise(bq8, bs8)}, args.reps, args.rounds)
            bg.log(f"| 2^{log2n} | {str(dtype).split('.')[-1]} | {ms['l4']:.3f} | {ms['b4']:.3f} | "
                   f"{ms['b4'] / ms['l4']:.2f}x | {ms['l8']:.3f} | {ms['b8']:.3f} | {ms['b8'] / ms['l8']:.2f}x |")


def bench_matmul(torch, lowbit, bnb, args) -> int:
    """lowbit.Matmul on int4 g128 and GPTQ's uint4 g128 with zeros; returns the count of wrong results."""
    bg.log("")
    bg.log("lowbit.Matmul, bf16 in and out: int4 with group-128 scales, and uint4 with group-128 scales and "
           "quantized zeros (GPTQ); bnb Linear4bit (nf4, blocksize 64) and torch dense bf16 as above:")
    table_header("M", "N x K", "int4 g128 ms", "GPTQ uint4 g128 ms", "bnb Linear4bit ms", "torch bf16 ms",
                 "int4 x bnb", "int4 x torch", "GPTQ x bnb", "GPTQ x torch", "lowbit err")
    gen = torch.Generator().manual_seed(2)
    failed = 0
    for N, K in SHAPES:
        W = torch.randn(N, K, generator=gen).to(torch.bfloat16)
        packed = {}
        for name, w_dtype, zeros in (("int4", "int4", False), ("gptq", "uint4", True)):
            cfg = lowbit.MatmulConfig(N=N, K=K, A_dtype="bfloat16", W_dtype=w_dtype, out_dtype="bfloat16",
                                      group_size=128, with_scaling=True, with_zeros=zeros, zeros_mode="quantized")
            mm = lowbit.Matmul(cfg, device="cpu")
            lo, hi = (0, 16) if zeros else (-8, 8)
            vals = torch.randint(lo, hi, (N, K), generator=gen, dtype=torch.int16).to(torch.uint8 if zeros else torch.int8)
            scale = torch.rand(N, K // 128, generator=gen) * 0.01 + 0.001
            z = torch.randint(0, 16, (N, K // 128), generator=gen, dtype=torch.int16).to(torch.uint8) if zeros else None
            packed[name] = (mm, mm.transform_weight(vals, scale=scale, zeros=z))
        lin = bnb_linear(torch, bnb, W)
        for M in (int(m) for m in args.m.split(",")):
            x = torch.randn(M, K, generator=gen).to(torch.bfloat16)
            err = 0.0
            for mm, wp in packed.values():
                ref = x.float() @ torch.as_tensor(lowbit.dequantize_weight(wp)).float().t()
                got = mm(x, wp)
                err = max(err, float((got.float() - ref).norm() / ref.norm()))
            failed += not err < 2e-2
            fns = {name: (lambda mm=mm, wp=wp: mm(x, wp)) for name, (mm, wp) in packed.items()}
            fns["torch"] = lambda: x @ W.t()
            if lin is not None:
                fns["linear"] = lambda: lin(x)
            with torch.no_grad():
                ms = best_of(fns, args.reps, args.rounds)
            cell = lambda name: f"{ms[name]:.3f}" if name in ms else "—"  # noqa: E731
            ratio = lambda peer, name: f"{ms[peer] / ms[name]:.2f}x" if peer in ms else "—"  # noqa: E731
            bg.log(f"| {M} | {N} x {K} | {cell('int4')} | {cell('gptq')} | {cell('linear')} | {cell('torch')} | "
                   f"{ratio('linear', 'int4')} | {ratio('torch', 'int4')} | {ratio('linear', 'gptq')} | "
                   f"{ratio('torch', 'gptq')} | {err:.1e} |")
    return failed


if __name__ == "__main__":
    sys.exit(main())
