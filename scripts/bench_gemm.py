#!/usr/bin/env python3
"""W4A16 GEMM on the GPU: lowbit vs torch's cuBLAS fp16 vs torch's tinygemm int4.

The companion of ``lowbit bench gemm`` (the C++ bench, which times lowbit's
primitive against cuBLAS in one process): this script adds torch's int4 peer,
tinygemm (``torch.ops.aten._weight_int4pack_mm``, what torchao's int4
weight-only and gpt-fast use), over the same Llama shapes and batch sizes,
int4 with groups of 128.

For every shape N x K and batch M, in one process, on one stream:

- ``cublas``: ``torch.mm(A, W.t(), out=...)``, A f16 [M, K], W f16 [N, K]
  (the dequantized int4 weight), torch's default cuBLAS settings.
- ``lowbit``: ``lowbit.Matmul`` through its Python API, W_dtype uint4, groups
  of 128, f16 scales, quantized (GPTQ-style) zeros: ``w = (q - z) * s``;
  ``mm(A, W, output=out)``. Skipped with a message when the bindings lack
  ``lowbit.Matmul`` or no CUDA matmul backend is registered.
- ``tinygemm``: ``_weight_int4pack_mm(A_bf16, packed, 128, scales_and_zeros)``.
  Its CUDA kernel takes bfloat16 only (``A``, ``scales_and_zeros`` and the
  output; ATen's int4mm.cu checks ``A.dtype() == kBFloat16``), so it gets A
  rounded to bf16 — the same bytes per element as the f16 peers. The weight is
  packed by ``_convert_weight_to_int4pack(uint8 [N, K/2], innerKTiles=8)``
  (two 4-bit values a byte, even k in the high nibble; torch < 2.5 took
  int32 [N, K] values instead, tried second). tinygemm dequantizes
  ``(q - 8) * scale + zero``; the same weights use ``zero = (8 - z) * s``,
  stored ``[K/128, N, 2]`` (scale, zero) in bf16.

Each repetition is timed on its own with CUDA events around only the op,
after an untimed L2 flush: a read-only ``torch.sum`` over a buffer of
max(256 MB, 2 x L2), zeroed once. It must only read: a write (``zero_()``)
leaves ~L2-size of dirty lines whose write-back the next, timed op pays
(~10-17 us on an H100; cuBLAS's 4096x4096 GEMV read 22 us instead of ~12).
The median is reported. Each result is first checked against cuBLAS (relative
L2 error; tinygemm's bf16 rounding of A and of the scales gives ~3e-3).

Usage (on the GPU machine, after scripts/gpu-check built build-gpu):
    python3 scripts/bench_gemm.py [--shapes 4096x4096,...] [--m 1,16,...] [--reps 20]
lowbit is imported from $LOWBIT_PYTHON_DIR, else the newest build*/python
holding the extension, else an installed lowbit. The CSV goes to
$OUT/bench_gemm_torch.csv when $OUT is set (or --csv PATH).
"""

from __future__ import annotations

import argparse
import csv
import glob
import importlib.machinery
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = "4096x4096,14336x4096,4096x14336,8192x8192,28672x8192,8192x28672"
MS = "1,16,32,64,128,256,4096"
GROUP = 128
CHECK_TOL = 2e-2


def log(msg: str) -> None:
    print(msg, flush=True)


def find_lowbit() -> Tuple[Optional[object], str]:
    """(module, where) — or (None, why not)."""
    tree = os.environ.get("LOWBIT_PYTHON_DIR")
    if not tree:
        found = []
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            found += glob.glob(os.path.join(ROOT, "build*", "python", "lowbit", "_lowbit" + suffix))
        if found:
            tree = os.path.dirname(os.path.dirname(max(found, key=os.path.getmtime)))
    if tree:
        sys.path.insert(0, tree)
    try:
        import lowbit  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 - any import failure means "no lowbit column"
        return None, f"import lowbit failed ({type(e).__name__}: {e})"
    where = os.path.dirname(os.path.abspath(lowbit.__file__))
    if not hasattr(lowbit, "Matmul") or not hasattr(lowbit, "MatmulConfig"):
        return None, f"lowbit at {where} has no Matmul (the matmul's Python bindings are not in this build)"
    return lowbit, where


def parse_shapes(text: str) -> List[Tuple[int, int]]:
    out = []
    for s in text.split(","):
        n, _, k = s.strip().lower().partition("x")
        if not n.isdigit() or not k.isdigit() or int(n) < 1 or int(k) < 1:
            raise argparse.ArgumentTypeError(f"shape must be NxK, got {s!r}")
        if int(k) % GROUP:
            raise argparse.ArgumentTypeError(f"K must be a multiple of {GROUP}, got {s!r}")
        out.append((int(n), int(k)))
    return out


def parse_ms(text: str) -> List[int]:
    ms = sorted({int(x) for x in text.split(",")})
    if ms[0] < 1:
        raise argparse.ArgumentTypeError("M must be >= 1")
    return ms


class Timer:
    """Median ms of a callable over reps, each rep timed by its own CUDA events
    after an untimed L2 flush that only reads (so it leaves L2 clean)."""

    def __init__(self, torch, reps: int, warmup: int):
        self.torch = torch
        self.reps = reps
        self.warmup = warmup
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 << 20)
        self.flush_bytes = max(256 << 20, 2 * l2)
        # Written once here; each flush reads it all into a device scalar (same
        # stream, no host sync), evicting the last op's lines, dirty ones too.
        self.flush = torch.zeros(self.flush_bytes // 4, dtype=torch.float32, device="cuda")
        self.flush_sum = torch.zeros((), dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()

    def ms(self, fn: Callable[[], object]) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends):
            torch.sum(self.flush, 0, out=self.flush_sum)  # 1-D: a 0-dim result
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    def ms_interleaved(self, fns: Dict[str, Callable[[], object]]) -> Dict[str, float]:
        """Median ms of each callable, their reps taken in turns (one rep of
        each per round), so a clock that drifts over the run (a GPU at its
        power cap warming up) weighs on every callable alike. Each round
        starts with a spin kernel long enough for the host to queue the
        whole round behind it: a short kernel's time is then the GPU's, not
        the wait for a launch behind another callable's host work."""
        torch = self.torch
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        torch.cuda.synchronize()
        events = {name: [] for name in fns}
        for _ in range(self.reps):
            torch.cuda._sleep(400_000 * len(fns))  # about 0.2 ms of host time a callable
            for name, fn in fns.items():
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.sum(self.flush, 0, out=self.flush_sum)
                s.record()
                fn()
                e.record()
                events[name].append((s, e))
        torch.cuda.synchronize()
        return {name: statistics.median(s.elapsed_time(e) for s, e in ev) for name, ev in events.items()}

    def copy_gbps(self, nbytes: int = 1 << 30) -> float:
        """Device-to-device copy bandwidth (read + write), like ``lowbit bench``."""
        torch = self.torch
        a = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0x5A)
        b = torch.empty_like(a)
        ms = self.ms(lambda: b.copy_(a))
        return 2.0 * nbytes / (ms * 1e6)


def rel_err(torch, got, want) -> float:
    g, w = got.float(), want.float()
    if not torch.isfinite(g).all():
        return math.nan
    return float(torch.linalg.vector_norm(g - w) / torch.linalg.vector_norm(w).clamp_min(1e-30))


def random_int4_weight(torch, N: int, K: int, gen):
    """(q, zq, scale, W16): uint4 codes [N, K], quantized zeros [N, K/128], f16
    scales [N, K/128] and the dequantized f16 weight ``(q - z) * s`` [N, K] —
    cuBLAS's operand and the checks' reference."""
    G = K // GROUP
    q = torch.randint(0, 16, (N, K), dtype=torch.uint8, device="cuda", generator=gen)
    zq = torch.randint(0, 16, (N, G), dtype=torch.uint8, device="cuda", generator=gen)
    scale = (0.005 + 0.01 * torch.rand(N, G, device="cuda", generator=gen)).to(torch.float16)
    W16 = ((q.view(N, G, GROUP).float() - zq.float()[:, :, None]) * scale.float()[:, :, None]).view(N, K).half()
    return q, zq, scale, W16


def lowbit_int4_matmul(lowbit, ms: List[int], q, scale, zq):
    """(Matmul, packed weight): lowbit's uint4 g128 matmul with f16 scales and
    quantized zeros for the batch sizes ``ms``, its weight transformed once."""
    N, K = q.shape
    cfg = lowbit.MatmulConfig(M=ms, N=N, K=K, A_dtype="float16", W_dtype="uint4", accum_dtype="float32",
                              out_dtype="float16", with_scaling=True, group_size=GROUP, with_zeros=True,
                              zeros_mode="quantized")
    mm = lowbit.Matmul(cfg, device="cuda")
    return mm, mm.transform_weight(q, scale=scale, zeros=zq)


def pack_tinygemm(torch, q, scale, zq, inner_k_tiles: int):
    """(packed weight, scales_and_zeros) for _weight_int4pack_mm; raises when this torch lacks it."""
    N, K = q.shape
    G = K // GROUP
    # tinygemm: w = (q - 8) * s + zero, so zero = (8 - z) * s gives (q - z) * s.
    s32 = scale.float()
    zero = (8.0 - zq.float()) * s32
    sz = torch.stack([s32.t(), zero.t()], dim=2).to(torch.bfloat16).contiguous()  # [G, N, 2]
    assert sz.shape == (G, N, 2)
    errors = []
    try:  # torch >= 2.5: uint8 [N, K/2], even k in the high nibble
        q8 = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8).contiguous()
        return torch.ops.aten._convert_weight_to_int4pack(q8, inner_k_tiles), sz
    except Exception as e:  # noqa: BLE001
        errors.append(f"uint8 [N, K/2]: {e}")
    try:  # older torch: int32 [N, K] values
        return torch.ops.aten._convert_weight_to_int4pack(q.to(torch.int32).contiguous(), inner_k_tiles), sz
    except Exception as e:  # noqa: BLE001
        errors.append(f"int32 [N, K]: {e}")
    raise RuntimeError("_convert_weight_to_int4pack failed: " + "; ".join(errors))


def fmt(v: Optional[float], f: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, f)


def ratio(v: Optional[float]) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.2f}x"


def geomean(v: List[float]) -> float:
    v = [x for x in v if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(SHAPES), help=f"NxK list (default {SHAPES})")
    ap.add_argument("--m", type=parse_ms, default=parse_ms(MS), help=f"batch sizes (default {MS})")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per case, median reported (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    ap.add_argument("--inner-k-tiles", type=int, default=8, choices=(2, 4, 8), help="tinygemm packing (default 8)")
    ap.add_argument("--no-lowbit", action="store_true")
    ap.add_argument("--no-tinygemm", action="store_true")
    ap.add_argument("--csv", default=None, help="CSV path (default $OUT/bench_gemm_torch.csv when $OUT is set)")
    args = ap.parse_args()
    t_start = time.time()

    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"bench_gemm.py: skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        log("bench_gemm.py: skipped: torch sees no CUDA device")
        return 0

    lowbit, lowbit_where = (None, "--no-lowbit") if args.no_lowbit else find_lowbit()
    timer = Timer(torch, args.reps, args.warmup)
    dev = torch.cuda.get_device_name(0)
    log(f"bench_gemm.py: {dev}, torch {torch.__version__} (CUDA {torch.version.cuda}); int4 groups of {GROUP}; "
        f"median of {args.reps} reps ({args.warmup} warm-up), L2 flushed ({timer.flush_bytes >> 20} MB read by "
        f"torch.sum: leaves L2 clean) before each, CUDA events")
    log(f"  lowbit: {lowbit_where}")
    log("  tinygemm: " + ("off (--no-tinygemm)" if args.no_tinygemm else
                          f"torch.ops.aten._weight_int4pack_mm, bf16 A/scales/out, innerKTiles {args.inner_k_tiles}"))
    copy = timer.copy_gbps()
    log(f"  copy (device-to-device, read + write of 1024 MB): {copy:.1f} GB/s")

    header = (f"  {'N x K':<11} {'M':>5} {'cuBLAS_us':>9} {'lowbit_us':>9} {'tiny_us':>9} {'lowbit/cuBLAS':>13} "
              f"{'tiny/cuBLAS':>11} {'lowbit/tiny':>11} {'lb_floor':>8}  check (rel err vs cuBLAS)")
    log(header)
    rows: List[Dict[str, object]] = []
    notes: Dict[str, str] = {}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    maxM = max(args.m)
    for N, K in args.shapes:
        G = K // GROUP
        A = torch.randn(maxM, K, dtype=torch.float16, device="cuda", generator=gen)
        A_bf = A.to(torch.bfloat16)
        q, zq, scale, W16 = random_int4_weight(torch, N, K, gen)
        out_ref = torch.empty(maxM, N, dtype=torch.float16, device="cuda")
        out_lb = torch.empty_like(out_ref)

        mm = W = None
        lb_note = None
        if lowbit is not None:
            try:
                mm, W = lowbit_int4_matmul(lowbit, args.m, q, scale, zq)
            except Exception as e:  # noqa: BLE001
                lb_note = f"lowbit setup: {type(e).__name__}: {e}"
        packed = sz = None
        tg_note = None
        if not args.no_tinygemm:
            try:
                packed, sz = pack_tinygemm(torch, q, scale, zq, args.inner_k_tiles)
            except Exception as e:  # noqa: BLE001
                tg_note = f"tinygemm: {e}"
        torch.cuda.synchronize()

        for M in args.m:
            a, a_bf, o_ref, o_lb = A[:M], A_bf[:M], out_ref[:M], out_lb[:M]
            r: Dict[str, object] = {"N": N, "K": K, "M": M}
            r["cublas_us"] = 1e3 * timer.ms(lambda: torch.mm(a, W16.t(), out=o_ref))
            torch.mm(a, W16.t(), out=o_ref)
            checks = []
            if mm is not None and lb_note is None:
                try:
                    o_lb.fill_(float("nan"))
                    mm(a, W, output=o_lb)
                    r["lowbit_err"] = rel_err(torch, o_lb, o_ref)
                    checks.append(f"lowbit {fmt(r['lowbit_err'], '.1e')}")
                    if not r["lowbit_err"] <= CHECK_TOL:
                        checks[-1] += " FAILED"
                    r["lowbit_us"] = 1e3 * timer.ms(lambda: mm(a, W, output=o_lb))
                except Exception as e:  # noqa: BLE001
                    msg = str(e).splitlines()[0]
                    lb_note = ("no CUDA matmul backend registered: " if "no backend" in msg else "lowbit: ") + msg
            if packed is not None:
                try:
                    o_tg = torch.ops.aten._weight_int4pack_mm(a_bf, packed, GROUP, sz)
                    r["tinygemm_err"] = rel_err(torch, o_tg, o_ref)
                    checks.append(f"tinygemm {fmt(r['tinygemm_err'], '.1e')}")
                    if not r["tinygemm_err"] <= CHECK_TOL:
                        checks[-1] += " FAILED"
                    r["tinygemm_us"] = 1e3 * timer.ms(
                        lambda: torch.ops.aten._weight_int4pack_mm(a_bf, packed, GROUP, sz))
                except Exception as e:  # noqa: BLE001
                    tg_note = f"tinygemm: {str(e).splitlines()[0]}"
                    packed = None
            for what, note in (("lowbit", lb_note), ("tinygemm", tg_note)):
                if note and notes.get(what) != note:
                    notes[what] = note
                    log(f"  note: {note} (column skipped)")
            cb, lb, tg = r.get("cublas_us"), r.get("lowbit_us"), r.get("tinygemm_us")
            r["lowbit_speedup_vs_cublas"] = cb / lb if lb else math.nan
            r["tinygemm_speedup_vs_cublas"] = cb / tg if tg else math.nan
            r["lowbit_speedup_vs_tinygemm"] = tg / lb if (lb and tg) else math.nan
            # lowbit's memory floor: 4-bit codes + f16 scales + 4-bit zeros + A + out, at the copy rate.
            floor_bytes = N * K / 2 + N * G * 2 + N * G / 2 + M * K * 2 + M * N * 2
            r["lowbit_of_floor"] = (floor_bytes / (copy * 1e3)) / lb if lb else math.nan
            r["check"] = ", ".join(checks) if checks else "-"
            rows.append(r)
            log(f"  {f'{N}x{K}':<11} {M:>5} {fmt(cb, '.2f'):>9} {fmt(lb, '.2f'):>9} {fmt(tg, '.2f'):>9} "
                f"{ratio(r['lowbit_speedup_vs_cublas']):>13} {ratio(r['tinygemm_speedup_vs_cublas']):>11} "
                f"{ratio(r['lowbit_speedup_vs_tinygemm']):>11} {fmt(r['lowbit_of_floor'], '.3f'):>8}  {r['check']}")
        del A, A_bf, q, zq, scale, W16, out_ref, out_lb, mm, W, packed, sz
        torch.cuda.empty_cache()

    for note in notes.values():
        log(f"note: {note}")
    path = args.csv or (os.path.join(os.environ["OUT"], "bench_gemm_torch.csv") if os.environ.get("OUT") else None)
    if path:
        keys = ["N", "K", "M", "cublas_us", "lowbit_us", "tinygemm_us", "lowbit_speedup_vs_cublas",
                "tinygemm_speedup_vs_cublas", "lowbit_speedup_vs_tinygemm", "lowbit_of_floor", "lowbit_err",
                "tinygemm_err", "check"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if isinstance(r.get(k), float) and not math.isfinite(r[k]) else r.get(k, ""))
                            for k in keys})
        log(f"csv: {path}")

    # A lowbit mismatch fails the run; a tinygemm mismatch (the peer's packing
    # here) is reported, and its times are not to be trusted.
    failed = any(not r.get("lowbit_err", 0.0) <= CHECK_TOL for r in rows)
    tg_failed = any(not r.get("tinygemm_err", 0.0) <= CHECK_TOL for r in rows)
    for label, key in (("lowbit/cuBLAS", "lowbit_speedup_vs_cublas"), ("tinygemm/cuBLAS", "tinygemm_speedup_vs_cublas"),
                       ("lowbit/tinygemm", "lowbit_speedup_vs_tinygemm")):
        parts = [f"M={M} {geomean([r[key] for r in rows if r['M'] == M]):.2f}x" for M in args.m
                 if math.isfinite(geomean([r[key] for r in rows if r["M"] == M]))]
        if parts:
            log(f"summary: {label:<16} speedup (geomean over shapes): " + " ".join(parts))
    log(f"summary: copy {copy:.1f} GB/s; {len(rows)} cases; lowbit "
        f"{'timed' if any('lowbit_us' in r for r in rows) else 'not timed (' + notes.get('lowbit', lowbit_where) + ')'}"
        f"; tinygemm {'timed' if any('tinygemm_us' in r for r in rows) else 'not timed'}; "
        f"checks: lowbit {'FAILED' if failed else 'ok'}, tinygemm {'FAILED' if tg_failed else 'ok'}; "
        f"{time.time() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
