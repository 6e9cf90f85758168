#!/usr/bin/env python3
"""bitsandbytes matmul_4bit on its own QuantState: lowbit vs bitsandbytes, and each vs torch's matmul.

The call every bitsandbytes user makes (``Linear4bit``, QLoRA), as users make
it, on the same state: for every Llama projection shape N x K, batch M,
activation dtype (fp16, bf16) and statistics (``compress_statistics`` True, the
QLoRA default, and False), in one process:

- state: ``bitsandbytes.functional.quantize_4bit(W, blocksize=64,
  quant_type="nf4", compress_statistics=...)`` of a random W [N, K] in A's
  dtype: bitsandbytes' own packed weight and ``QuantState`` object.
- ``bnb``: ``bitsandbytes.matmul_4bit(A, packed.t(), quant_state=qs)``
  (its GEMV kernel for one row, else dequantize + torch matmul).
- ``lowbit``: ``lowbit.functional.matmul_4bit(A, packed.t(), quant_state=qs)``
  on that same bitsandbytes object (duck-typed), no ``out=``.
- ``lowbit_out``: the same with ``out=`` a preallocated buffer (no result
  allocation; the dequantize + GEMM path still allocates its workspace per call
  while the library's allocator is cudaMalloc).
- ``torch``: ``A @ Wd.t()`` with Wd the dequantized weight in A's dtype
  (cuBLAS through torch, the unquantized peer).

Each result is checked against float32 (``A.float() @ dequantize_4bit(W).float().t()``)
by relative L2 error; lowbit must stay within CHECK_TOL of A's dtype.

Timing: median of --reps repetitions, each timed alone with CUDA events after
an untimed L2 flush that only reads (torch.sum over max(256 MB, 2 x L2)), as
scripts/bench_gemm.py does. ``--timer do_bench`` uses
``triton.testing.do_bench(..., return_mode="median")`` instead, whose flush
zeroes its buffer: the dirty lines it leaves in L2 are written back during
the timed call (~10-17 us on an H100), which compresses the ratios at M = 1.

Usage (on the GPU machine, bitsandbytes importable, lowbit built):
    python3 scripts/bench_matmul_4bit.py [--shapes 4096x4096,...] [--m 1,16,128,4096]
        [--dtypes float16,bfloat16] [--nested both|true|false] [--reps 20]
lowbit is imported from $LOWBIT_PYTHON_DIR, else the newest build*/python
holding the extension, else an installed lowbit. The CSV goes to
$OUT/bench_matmul_4bit.csv when $OUT is set (or --csv PATH). The last line
starts with "summary:".
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402

SHAPES = "4096x4096,14336x4096,4096x14336,28672x8192,8192x28672"
MS = "1,16,128,4096"
BLOCKSIZE = 64
# Relative L2 error vs float32 allowed per A dtype: the weight rounded once to A's dtype.
CHECK_TOL = {"float16": 2e-3, "bfloat16": 1.5e-2}
# Targets (lowbit / bnb time ratio inverted: speedup) per M.
TARGETS = {1: 1.2, 16: 1.0, 128: 1.0, 4096: 1.0}


# The timer, lowbit's finder and the small helpers are bench_gemm.py's.
log, find_lowbit, parse_ms, rel_err, fmt, geomean = bg.log, bg.find_lowbit, bg.parse_ms, bg.rel_err, bg.fmt, bg.geomean


def parse_shapes(text: str) -> List[Tuple[int, int]]:
    out = []
    for s in text.split(","):
        n, _, k = s.strip().lower().partition("x")
        if not n.isdigit() or not k.isdigit() or int(n) < 1 or int(k) < 1:
            raise argparse.ArgumentTypeError(f"shape must be NxK, got {s!r}")
        out.append((int(n), int(k)))
    return out


class Timer(bg.Timer):
    """bench_gemm.py's Timer (CUDA events after a read-only L2 flush), or triton's do_bench."""

    def __init__(self, torch, reps: int, warmup: int, mode: str):
        super().__init__(torch, reps, warmup)
        self.mode = mode

    def ms(self, fn: Callable[[], object]) -> float:
        if self.mode == "do_bench":
            import triton.testing  # noqa: PLC0415

            return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
        return super().ms(fn)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(SHAPES), help=f"NxK list (default {SHAPES})")
    ap.add_argument("--m", type=parse_ms, default=parse_ms(MS), help=f"batch sizes (default {MS})")
    ap.add_argument("--dtypes", default="float16,bfloat16", help="activation dtypes (default float16,bfloat16)")
    ap.add_argument("--nested", choices=("both", "true", "false"), default="both",
                    help="compress_statistics of the states (default both)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per case, median reported (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    ap.add_argument("--timer", choices=("events", "do_bench"), default="events")
    ap.add_argument("--csv", default=None, help="CSV path (default $OUT/bench_matmul_4bit.csv when $OUT is set)")
    args = ap.parse_args()
    t_start = time.time()

    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bench_matmul_4bit.py skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        log("summary: bench_matmul_4bit.py skipped: torch sees no CUDA device")
        return 0
    try:
        import bitsandbytes as bnb  # noqa: PLC0415
        import bitsandbytes.functional as bnbF  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bench_matmul_4bit.py skipped: bitsandbytes is not importable ({type(e).__name__}: {e})")
        return 0
    lowbit, lowbit_where = find_lowbit()
    if lowbit is None:
        log(f"summary: bench_matmul_4bit.py skipped: {lowbit_where}")
        return 0
    LF = lowbit.functional

    timer = Timer(torch, args.reps, args.warmup, args.timer)
    dtypes = [getattr(torch, d.strip()) for d in args.dtypes.split(",")]
    nesteds = {"both": [True, False], "true": [True], "false": [False]}[args.nested]
    log(f"bench_matmul_4bit.py: {torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA "
        f"{torch.version.cuda}), bitsandbytes {bnb.__version__}; nf4, blocksize {BLOCKSIZE}; "
        + (f"median of {args.reps} reps ({args.warmup} warm-up), L2 flushed ({timer.flush_bytes >> 20} MB read) "
           "before each, CUDA events" if args.timer == "events" else "triton.testing.do_bench, median"))
    log(f"  lowbit: {lowbit_where}")
    log(f"  {'N x K':<11} {'dtype':<8} {'nest':<5} {'M':>5} {'torch_us':>9} {'bnb_us':>9} {'lowbit_us':>9} "
        f"{'lb_out_us':>9} {'lb/bnb':>7} {'lbout/bnb':>9} {'bnb/torch':>9} {'lb/torch':>8}  rel err vs fp32 "
        f"(lowbit, bnb)")
    rows: List[Dict[str, object]] = []
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    maxM = max(args.m)
    for N, K in args.shapes:
        for dt in dtypes:
            dname = str(dt).replace("torch.", "")
            A_all = torch.randn(maxM, K, dtype=dt, device="cuda", generator=gen) * 0.5
            W = torch.randn(N, K, dtype=dt, device="cuda", generator=gen)
            for nested in nesteds:
                packed, qs = bnbF.quantize_4bit(W, blocksize=BLOCKSIZE, quant_type="nf4",
                                                compress_statistics=nested)
                qs32 = copy.copy(qs)  # the same state dequantized to float32: table · absmax, unrounded
                qs32.dtype = torch.float32
                Wd32 = bnbF.dequantize_4bit(packed, qs32)
                Wd = Wd32.to(dt)
                out_buf = torch.empty(maxM, N, dtype=dt, device="cuda")
                for M in args.m:
                    A = A_all[:M]
                    out = out_buf[:M]
                    r: Dict[str, object] = {"N": N, "K": K, "dtype": dname, "nested": nested, "M": M}
                    ref = A.float() @ Wd32.t()
                    got_bnb = bnb.matmul_4bit(A, packed.t(), quant_state=qs)
                    got_lb = LF.matmul_4bit(A, packed.t(), quant_state=qs)
                    r["bnb_err"] = rel_err(torch, got_bnb, ref)
                    r["lowbit_err"] = rel_err(torch, got_lb, ref)
                    out.fill_(float("nan"))
                    LF.matmul_4bit(A, packed.t(), quant_state=qs, out=out)
                    r["lowbit_out_err"] = rel_err(torch, out, ref)
                    del got_bnb, got_lb, ref
                    r["torch_us"] = 1e3 * timer.ms(lambda: torch.matmul(A, Wd.t()))
                    r["bnb_us"] = 1e3 * timer.ms(lambda: bnb.matmul_4bit(A, packed.t(), quant_state=qs))
                    r["lowbit_us"] = 1e3 * timer.ms(lambda: LF.matmul_4bit(A, packed.t(), quant_state=qs))
                    r["lowbit_out_us"] = 1e3 * timer.ms(
                        lambda: LF.matmul_4bit(A, packed.t(), quant_state=qs, out=out))
                    tu, bu, lu, lo = r["torch_us"], r["bnb_us"], r["lowbit_us"], r["lowbit_out_us"]
                    r["lowbit_vs_bnb"] = bu / lu
                    r["lowbit_out_vs_bnb"] = bu / lo
                    r["bnb_vs_torch"] = tu / bu
                    r["lowbit_vs_torch"] = tu / lu
                    tol = CHECK_TOL[dname]
                    r["ok"] = all(r[k] <= tol for k in ("lowbit_err", "lowbit_out_err"))
                    rows.append(r)
                    log(f"  {f'{N}x{K}':<11} {dname:<8} {'yes' if nested else 'no':<5} {M:>5} {tu:>9.1f} {bu:>9.1f} "
                        f"{lu:>9.1f} {lo:>9.1f} {r['lowbit_vs_bnb']:>6.2f}x {r['lowbit_out_vs_bnb']:>8.2f}x "
                        f"{r['bnb_vs_torch']:>8.2f}x {r['lowbit_vs_torch']:>7.2f}x  {fmt(r['lowbit_err'], '.1e')}, "
                        f"{fmt(r['bnb_err'], '.1e')}{'' if r['ok'] else ' FAILED'}")
                del packed, qs, qs32, Wd32, Wd, out_buf
                torch.cuda.empty_cache()
            del A_all, W

    path = args.csv or (os.path.join(os.environ["OUT"], "bench_matmul_4bit.csv") if os.environ.get("OUT") else None)
    if path:
        keys = ["N", "K", "dtype", "nested", "M", "torch_us", "bnb_us", "lowbit_us", "lowbit_out_us", "lowbit_vs_bnb",
                "lowbit_out_vs_bnb", "bnb_vs_torch", "lowbit_vs_torch", "lowbit_err", "lowbit_out_err", "bnb_err", "ok"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow(r)
        log(f"csv: {path}")

    failed = not all(r["ok"] for r in rows)
    parts, met = [], True
    for M in args.m:
        sel = [r for r in rows if r["M"] == M]
        g, lo = geomean([r["lowbit_vs_bnb"] for r in sel]), min(r["lowbit_vs_bnb"] for r in sel)
        g_out = geomean([r["lowbit_out_vs_bnb"] for r in sel])
        g_t = geomean([r["lowbit_vs_torch"] for r in sel])
        g_bt = geomean([r["bnb_vs_torch"] for r in sel])
        target = TARGETS.get(M)
        if target is not None and lo < target:
            met = False
        parts.append(f"M={M} {g:.2f}x (min {lo:.2f}x, out= {g_out:.2f}x; vs torch lowbit {g_t:.2f}x bnb {g_bt:.2f}x)")
    log(f"summary: matmul_4bit lowbit/bnb speedup, geomean over {len(args.shapes)} shapes x dtypes x nested: "
        + "; ".join(parts) + f"; targets {'met' if met else 'NOT met'} (min >= "
        + ", ".join(f"{t}x at M={m}" for m, t in TARGETS.items() if m in args.m) + f"); checks "
        f"{'FAILED' if failed else 'ok'}; {len(rows)} cases, {time.time() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
