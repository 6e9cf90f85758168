#!/usr/bin/env python3
"""LLM.int8's column quantization and input gradient on CUDA, as users call them, against what
bitsandbytes runs for the same step, in one process (torch CUDA tensors in and out):
- ``int8_colwise_quant(A, 6.0)`` against the torch ops of the column statistics and codes;
- ``int8_linear_grad_input(g, CB, SCB)`` against fp16 dequantize-then-matmul ``g @ (CB * SCB / 127)``
  (bitsandbytes' MatMul8bitLt backward; not the same summation order: lowbit's is the CPU's).
CUDA-event medians, each call after an L2 flush. GB/s counts the fewest bytes (fp16 in, int8 out).

Usage (on the GPU machine, after a build): python3 scripts/bench_int8_quant.py
"""
import os
import sys

import torch

sys.path.insert(0, os.environ.get("LOWBIT_PYTHON_DIR", "build-gpu/python"))
import lowbit.functional as F  # noqa: E402


def median_us(fn, reps: int = 30) -> float:
    """Median CUDA-event time of fn, each call after an L2 flush."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    for M, K in [(16, 4096), (4096, 4096), (4096, 14336)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.half)

        def torch_cols():
            m = torch.where(a.abs() >= 6.0, 0, a.abs()).amax(0).float()
            return torch.where(a.abs() >= 6.0, 0, torch.round(a.float() * (127 / m))).to(torch.int8), m

        lb = median_us(lambda: F.int8_colwise_quant(a, 6.0))
        tc = median_us(torch_cols)
        print(f"colwise M={M} K={K}: lowbit {lb:.1f} us, torch ops {tc:.1f} us ({tc / lb:.2f}x); "
              f"{M * K * 3 / lb / 1e3:.0f} GB/s", flush=True)
    for M, N, K in [(16, 4096, 4096), (512, 4096, 4096), (4096, 4096, 4096)]:
        CB = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
        SCB = torch.rand(N, device="cuda") + 0.5
        g = torch.randn(M, N, device="cuda", dtype=torch.half)
        lb = median_us(lambda: F.int8_linear_grad_input(g, CB, SCB), reps=10)
        tc = median_us(lambda: g @ (CB.half() * (SCB[:, None] / 127).half()), reps=10)
        print(f"grad_input M={M} N={N} K={K}: lowbit {lb:.1f} us, torch dequant+matmul {tc:.1f} us "
              f"({tc / lb:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
