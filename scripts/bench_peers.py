#!/usr/bin/env python3
"""lowbit against the peers its users have, through Python, as users call.

One process, one stream, torch CUDA tensors in and torch tensors out, no
``out=`` and no preallocated buffers unless a column says so; every row is
timed against its peer in the same run:

- quantize_blockwise / dequantize_blockwise (8-bit, blocksize 4096 and 256)
  and quantize_4bit / dequantize_4bit (nf4, blocksize 64) against
  bitsandbytes: 2^28 fp16 values (GPU time, and the fraction of the
  device-to-device copy rate that the bytes read + written reach), and
  4096x4096 and 128x7168 (launch/host-bound: the time per call in a loop);
- act_quant (lowbit.functional) 128x7168 and 4096x7168 bf16 against
  DeepSeek-V3's Triton kernel (scripts/peers/deepseek_act_quant.py);
- int8_vectorwise_quant 4096x4096 fp16, threshold 0 and 6, against bitsandbytes;
- matmul_4bit on a bitsandbytes QuantState (nf4, blocksize 64, double quant,
  fp16), M = 1, 16, 128, 4096 at N x K = 4096x4096 and 28672x8192, against
  bnb.matmul_4bit and torch.matmul on the dequantized fp16 weight (cuBLAS);
- lowbit.Matmul int4 g128 (scripts/bench_gemm.py's construction), M = 1, 128,
  4096, geomean over its 6 Llama shapes, against torch.matmul (cuBLAS fp16)
  and tinygemm (torch.ops.aten._weight_int4pack_mm);
- host overhead: each op at a tiny size (256 values, or one row of 256), the
  wall time per call of loops of 500 calls with no synchronization inside
  (the GPU idles, the host is the bottleneck), with and without ``out=`` where
  the op takes it, beside the peer's call and torch.add(x, 1) (a caching-
  allocator output and one kernel launch: the raw-launch reference).

Timing modes (column 'mode'): 'gpu' = median of CUDA-event times around one
call, each after an untimed read-only L2 flush (scripts/bench_gemm.py's Timer;
fewer repetitions for slow calls); 'loop' = wall time per call of a loop of
calls cycling through enough input copies to exceed twice the L2 cache,
synchronized once at the end; 'host' = as 'loop' on 256 values. lowbit, the
peer and the references of one row are timed in interleaved rounds (5 for
'gpu' and 'loop', 10 for 'host': the median of the rounds for 'gpu', the
fastest round otherwise), so a slow period of the machine falls on all alike. 'lb/peer'
is lowbit's time over the peer's; 'x faster' its inverse (above 1: lowbit is
faster).

Usage (on the GPU machine, after building the Python module, e.g. by
scripts/gpu-check):
    python3 scripts/bench_peers.py [--quick] [--reps 20] [--csv PATH]
lowbit is found as scripts/bench_gemm.py finds it ($LOWBIT_PYTHON_DIR, else
the newest build*/python). bitsandbytes and triton are optional: their rows
say 'not installed'. The table is printed last, then 'summary:' lines; the
CSV goes to $OUT/bench_peers.csv when $OUT is set.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (the Timer, lowbit's finder and the Matmul construction)

BIG = 1 << 28
SMALL = [(4096, 4096), (128, 7168)]
MM4_SHAPES = [(4096, 4096), (28672, 8192)]
MM4_MS = [1, 16, 128, 4096]
MATMUL_MS = [1, 128, 4096]
MATMUL_CHECK_TOL = 2e-2


def log(msg: str = "") -> None:
    print(msg, flush=True)


class Clock:
    def __init__(self, torch, reps: int, budget_s: float):
        self.torch = torch
        self.reps = reps
        self.budget = budget_s
        self.timer = bg.Timer(torch, reps, 3)
        props = torch.cuda.get_device_properties(0)
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 50 << 20)

    def gpu_us_many(self, fns: Dict[str, Optional[Callable[[], Any]]], rounds: int = 5) -> Dict[str, Optional[float]]:
        """gpu_us of each callable (None stays None), the callables timed in
        interleaved rounds: the median over the rounds of each round's
        median, so a slow period of the machine (clocks, the host) falls on
        every contender alike."""
        torch = self.torch
        live = {k: f for k, f in fns.items() if f is not None}
        once = 0.0
        for f in live.values():
            f()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            once = max(once, time.perf_counter() - t0)
        self.timer.reps = max(3, min(self.reps, int(self.budget / rounds / max(once * len(live), 1e-6))))
        self.timer.warmup = 1
        per: Dict[str, List[float]] = {k: [] for k in live}
        for _ in range(rounds):
            for k, f in live.items():
                per[k].append(1e3 * self.timer.ms(f))
        return {k: (statistics.median(per[k]) if k in per else None) for k in fns}

    def loop_us_many(self, fns: Dict[str, Optional[List[Callable[[], Any]]]], calls: int = 200,
                     rounds: int = 5) -> Dict[str, Optional[float]]:
        """loop_us of each list of callables (None stays None) in interleaved
        rounds, the fastest round of each kept (noise only adds time)."""
        torch = self.torch
        live = {k: f for k, f in fns.items() if f is not None}
        for fs in live.values():
            for f in fs[:8]:
                f()
        torch.cuda.synchronize()
        best: Dict[str, float] = {}
        for _ in range(rounds):
            for k, fs in live.items():
                t0 = time.perf_counter()
                for i in range(calls):
                    fs[i % len(fs)]()
                torch.cuda.synchronize()
                best[k] = min(best.get(k, math.inf), (time.perf_counter() - t0) / calls * 1e6)
        return {k: best.get(k) for k in fns}

    def copies(self, nbytes: int) -> int:
        """Input copies whose total exceeds twice the L2 cache (at most 64)."""
        return max(1, min(64, math.ceil(2 * self.l2 / max(nbytes, 1)) + 1))

    def host_loop_us(self, fn: Callable[[], Any], calls: int) -> float:
        """Host µs per call of one loop of calls with no synchronization inside
        (synchronized after, untimed)."""
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        us = (time.perf_counter() - t0) / calls * 1e6
        self.torch.cuda.synchronize()
        return us


class Rows:
    def __init__(self):
        self.rows: List[Dict[str, Any]] = []

    def add(self, op: str, size: str, mode: str, lowbit_us: Optional[float], peer: str, peer_us: Optional[float],
            **extra: Any) -> Dict[str, Any]:
        r = {"op": op, "size": size, "mode": mode, "lowbit_us": lowbit_us, "peer": peer, "peer_us": peer_us}
        r.update(extra)
        self.rows.append(r)
        log("  " + line(r))
        return r


def fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) else format(v, spec)


def line(r: Dict[str, Any]) -> str:
    lb, pr = r.get("lowbit_us"), r.get("peer_us")
    ratio = lb / pr if lb and pr else None
    return (f"{r['op']:<34} {r['size']:<15} {r['mode']:<5} {fmt(lb, '.1f'):>9} {fmt(r.get('out_us'), '.1f'):>8} "
            f"{r['peer']:<16} {fmt(pr, '.1f'):>9} {fmt(ratio, '.2f'):>7} {fmt(1 / ratio if ratio else None, '.2f'):>8} "
            f"{fmt(r.get('lb_of_copy'), '.2f'):>6} {fmt(r.get('peer_of_copy'), '.2f'):>6}  {r.get('note', '')}")


HEADER = (f"{'op':<34} {'size':<15} {'mode':<5} {'lowbit_us':>9} {'out=_us':>8} {'peer':<16} {'peer_us':>9} "
          f"{'lb/peer':>7} {'x faster':>8} {'lb_cp':>6} {'pr_cp':>6}  note")


def attempt(rows: Rows, op: str, size: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        rows.add(op, size, "-", None, "-", None, note=f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}")


# ---------------------------------------------------------------- sections


def quant_ops(torch, LF, BF):
    """(name, bytes(n), lowbit prepare->call, peer prepare->call) for the quantize/dequantize rows:
    each prepare(x) returns the zero-argument call on input x."""

    def q8(bs):
        return (lambda x: (lambda: LF.quantize_blockwise(x, blocksize=bs)),
                (lambda x: (lambda: BF.quantize_blockwise(x, blocksize=bs))) if BF else None)

    def d8(bs):
        def lb(x):
            q, s = LF.quantize_blockwise(x, blocksize=bs)
            return lambda: LF.dequantize_blockwise(q, s)

        def pr(x):
            q, s = BF.quantize_blockwise(x, blocksize=bs)
            return lambda: BF.dequantize_blockwise(q, s)

        return lb, (pr if BF else None)

    def q4():
        return (lambda x: (lambda: LF.quantize_4bit(x, blocksize=64, quant_type="nf4")),
                (lambda x: (lambda: BF.quantize_4bit(x, blocksize=64, quant_type="nf4"))) if BF else None)

    def d4():
        def lb(x):
            p, s = LF.quantize_4bit(x, blocksize=64, quant_type="nf4")
            return lambda: LF.dequantize_4bit(p, s)

        def pr(x):
            p, s = BF.quantize_4bit(x, blocksize=64, quant_type="nf4")
            return lambda: BF.dequantize_4bit(p, s)

        return lb, (pr if BF else None)

    # Bytes read + written, fp16 data.
    return [
        ("quantize_blockwise bs4096", lambda n: 2 * n + n + 4 * n / 4096, *q8(4096)),
        ("dequantize_blockwise bs4096", lambda n: n + 4 * n / 4096 + 2 * n, *d8(4096)),
        ("quantize_blockwise bs256", lambda n: 2 * n + n + 4 * n / 256, *q8(256)),
        ("dequantize_blockwise bs256", lambda n: n + 4 * n / 256 + 2 * n, *d8(256)),
        ("quantize_4bit nf4 bs64", lambda n: 2 * n + n / 2 + 4 * n / 64, *q4()),
        ("dequantize_4bit nf4 bs64", lambda n: n / 2 + 4 * n / 64 + 2 * n, *d4()),
    ]


def section_quant(torch, clock: Clock, rows: Rows, LF, BF, peer_name: str, copy: float, quick: bool) -> None:
    log("\n== quantize / dequantize, lowbit.functional vs bitsandbytes.functional")
    log("  " + HEADER)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    n = BIG >> (4 if quick else 0)
    x = torch.randn(n, dtype=torch.float16, device="cuda", generator=gen)
    for name, nbytes, lb, pr in quant_ops(torch, LF, BF):
        def big():
            t = clock.gpu_us_many({"lb": lb(x), "pr": pr(x) if pr else None})
            lu, pu = t["lb"], t["pr"]
            rows.add(name, f"2^{int(math.log2(n))} f16", "gpu", lu, peer_name, pu,
                     lb_of_copy=nbytes(n) / (lu * 1e3) / copy, peer_of_copy=nbytes(n) / (pu * 1e3) / copy if pu else None)
            torch.cuda.empty_cache()

        attempt(rows, name, "big", big)
    del x
    torch.cuda.empty_cache()
    for shape in SMALL:
        k = clock.copies(2 * shape[0] * shape[1])
        xs = [torch.randn(shape, dtype=torch.float16, device="cuda", generator=gen) for _ in range(k)]
        for name, _, lb, pr in quant_ops(torch, LF, BF):
            def small():
                t = clock.loop_us_many({"lb": [lb(x) for x in xs], "pr": [pr(x) for x in xs] if pr else None})
                lu, pu = t["lb"], t["pr"]
                rows.add(name, f"{shape[0]}x{shape[1]} f16", "loop", lu, peer_name, pu, note=f"{k} input copies")

            attempt(rows, name, f"{shape[0]}x{shape[1]}", small)
        del xs
        torch.cuda.empty_cache()


def section_act_quant(torch, clock: Clock, rows: Rows, LF, peer_fn, peer_name: str, copy: float) -> None:
    log("\n== act_quant bf16, lowbit.functional vs DeepSeek-V3's Triton kernel")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2)
    for shape, mode in (((128, 7168), "loop"), ((4096, 7168), "gpu")):
        def run():
            n = shape[0] * shape[1]
            k = clock.copies(2 * n) if mode == "loop" else 1
            xs = [torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=gen) for _ in range(k)]
            note = ""
            if peer_fn:
                yl, sl = LF.act_quant(xs[0])
                yp, sp = peer_fn(xs[0])
                # The Triton kernel divides with div.full.f32 (approximate), lowbit rounds correctly.
                differ = int((yl.view(torch.uint8) != yp.view(torch.uint8)).sum())
                note = (f"vs the peer: {differ / yl.numel():.1e} of codes, {int((sl != sp).sum()) / sl.numel():.1e} "
                        f"of scales differ (its approximate fp32 division)")
            if mode == "loop":
                t = clock.loop_us_many({"lb": [lambda x=x: LF.act_quant(x) for x in xs],
                                        "pr": [lambda x=x: peer_fn(x) for x in xs] if peer_fn else None})
                lu, pu = t["lb"], t["pr"]
                rows.add("act_quant", f"{shape[0]}x{shape[1]} bf16", mode, lu, peer_name, pu, note=note)
            else:
                nb = 2 * n + n + 4 * n / 128
                t = clock.gpu_us_many({"lb": lambda: LF.act_quant(xs[0]),
                                       "pr": (lambda: peer_fn(xs[0])) if peer_fn else None})
                lu, pu = t["lb"], t["pr"]
                rows.add("act_quant", f"{shape[0]}x{shape[1]} bf16", mode, lu, peer_name, pu,
                         lb_of_copy=nb / (lu * 1e3) / copy, peer_of_copy=nb / (pu * 1e3) / copy if pu else None,
                         note=note)

        attempt(rows, "act_quant", f"{shape}", run)


def section_int8(torch, clock: Clock, rows: Rows, LF, BF, peer_name: str) -> None:
    log("\n== int8_vectorwise_quant 4096x4096 fp16, lowbit.functional vs bitsandbytes.functional")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)
    k = clock.copies(2 * 4096 * 4096)
    xs = [torch.randn(4096, 4096, dtype=torch.float16, device="cuda", generator=gen) for _ in range(k)]
    for x in xs:
        x[::97, ::211] *= 12.0  # a few outlier columns for threshold 6
    for th in (0.0, 6.0):
        def run():
            t = clock.loop_us_many({
                "lb": [lambda x=x: LF.int8_vectorwise_quant(x, threshold=th) for x in xs],
                "pr": [lambda x=x: BF.int8_vectorwise_quant(x, threshold=th) for x in xs] if BF else None})
            lu, pu = t["lb"], t["pr"]
            rows.add(f"int8_vectorwise_quant th={th:g}", "4096x4096 f16", "loop", lu, peer_name, pu,
                     note=f"{k} input copies")

        attempt(rows, f"int8_vectorwise_quant th={th:g}", "4096x4096", run)


def section_matmul_4bit(torch, clock: Clock, rows: Rows, lowbit, bnb, peer_name: str) -> None:
    log("\n== matmul_4bit on a bitsandbytes QuantState (nf4, blocksize 64, double quant, fp16): "
        "lowbit.matmul_4bit vs bnb.matmul_4bit vs torch.matmul on the fp16 weight (cuBLAS)")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4)
    for N, K in MM4_SHAPES:
        W = (0.02 * torch.randn(N, K, device="cuda", generator=gen)).half()
        if bnb is not None:
            B, st = bnb.functional.quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
            W16 = bnb.functional.dequantize_4bit(B, st)
        else:  # lowbit's own state, same layout
            B, st = lowbit.functional.quantize_4bit(W, blocksize=64, compress_statistics=True, quant_type="nf4")
            W16 = lowbit.functional.dequantize_4bit(B, st)
        del W
        A = torch.randn(max(MM4_MS), K, dtype=torch.float16, device="cuda", generator=gen)
        for M in MM4_MS:
            a = A[:M]

            def run():
                ref = torch.matmul(a, W16.t())
                got = lowbit.functional.matmul_4bit(a, B.t(), st)
                err = bg.rel_err(torch, got, ref)
                t = clock.gpu_us_many({
                    "cu": lambda: torch.matmul(a, W16.t()),
                    "lb": lambda: lowbit.functional.matmul_4bit(a, B.t(), st),
                    "pr": (lambda: bnb.matmul_4bit(a, B.t(), quant_state=st)) if bnb is not None else None})
                cu, lu, pu = t["cu"], t["lb"], t["pr"]
                note = f"rel err vs cuBLAS: lowbit {err:.1e}"
                if bnb is not None:
                    note += f", bnb {bg.rel_err(torch, bnb.matmul_4bit(a, B.t(), quant_state=st), ref):.1e}"
                note += f"; x cuBLAS: lowbit {cu / lu:.3f}" + (f", bnb {cu / pu:.3f}" if pu else "")
                if not err <= MATMUL_CHECK_TOL:
                    note += " CHECK FAILED"
                rows.add("matmul_4bit", f"{N}x{K} M={M}", "gpu", lu, peer_name, pu, cublas_us=cu,
                         lb_x_cublas=cu / lu, peer_x_cublas=cu / pu if pu else None, note=note)

            attempt(rows, "matmul_4bit", f"{N}x{K} M={M}", run)
        del A, B, st, W16
        torch.cuda.empty_cache()


def section_matmul(torch, clock: Clock, rows: Rows, lowbit, quick: bool) -> None:
    log("\n== lowbit.Matmul int4 g128 (scripts/bench_gemm.py's weights), as users call (mm(A, W)) and with "
        "output=, vs torch.matmul (cuBLAS fp16) and tinygemm; per shape, then the geomean")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    shapes = bg.parse_shapes(bg.SHAPES)[: 2 if quick else None]
    per: Dict[int, Dict[str, List[float]]] = {M: {"lb": [], "out": [], "cu": [], "tg": []} for M in MATMUL_MS}
    for N, K in shapes:
        try:
            q, zq, scale, W16 = bg.random_int4_weight(torch, N, K, gen)
            mm, W = bg.lowbit_int4_matmul(lowbit, MATMUL_MS, q, scale, zq)
            try:
                packed, sz = bg.pack_tinygemm(torch, q, scale, zq, 8)
            except Exception as e:  # noqa: BLE001
                packed = sz = None
                log(f"  tinygemm: {e}")
            A = torch.randn(max(MATMUL_MS), K, dtype=torch.float16, device="cuda", generator=gen)
            A_bf = A.to(torch.bfloat16)
            out = torch.empty(max(MATMUL_MS), N, dtype=torch.float16, device="cuda")
            for M in MATMUL_MS:
                a, a_bf, o = A[:M], A_bf[:M], out[:M]
                ref = torch.matmul(a, W16.t())
                err = bg.rel_err(torch, mm(a, W), ref)
                t = clock.gpu_us_many({
                    "cu": lambda: torch.matmul(a, W16.t()),
                    "lb": lambda: mm(a, W),
                    "out": lambda: mm(a, W, output=o),
                    "tg": (lambda: torch.ops.aten._weight_int4pack_mm(a_bf, packed, bg.GROUP, sz))
                    if packed is not None else None})
                cu, lu, ou, tu = t["cu"], t["lb"], t["out"], t["tg"]
                for key, v in (("lb", lu), ("out", ou), ("cu", cu), ("tg", tu)):
                    if v:
                        per[M][key].append(v)
                log(f"  {N}x{K} M={M}: cuBLAS {cu:.1f} us, lowbit {lu:.1f} us (out= {ou:.1f}), tinygemm "
                    f"{fmt(tu, '.1f')} us; rel err {err:.1e}{'' if err <= MATMUL_CHECK_TOL else ' CHECK FAILED'}")
            del q, zq, scale, W16, mm, W, packed, sz, A, A_bf, out
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            log(f"  {N}x{K}: error: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    for M in MATMUL_MS:
        p = per[M]
        if len(p["lb"]) != len(p["cu"]) or not p["lb"]:
            rows.add(f"Matmul int4 g128 M={M}", "geomean", "gpu", None, "cuBLAS fp16", None, note="incomplete")
            continue
        g = lambda xs, ys: bg.geomean([y / x for x, y in zip(xs, ys)])  # noqa: E731
        # Geomean speedups expressed as times relative to cuBLAS = 1 us-equivalents: report ratios.
        x_cu, x_cu_out = g(p["lb"], p["cu"]), g(p["out"], p["cu"])
        note = f"x cuBLAS: lowbit {x_cu:.2f}, with output= {x_cu_out:.2f}"
        if len(p["tg"]) == len(p["lb"]):
            note += f"; tinygemm x cuBLAS {g(p['tg'], p['cu']):.2f}; lowbit x tinygemm {g(p['lb'], p['tg']):.2f}"
        gm = lambda xs: bg.geomean(xs)  # noqa: E731
        rows.add(f"Matmul int4 g128 M={M}", f"geomean {len(p['lb'])} sh.", "gpu", gm(p["lb"]), "cuBLAS fp16",
                 gm(p["cu"]), out_us=gm(p["out"]), x_cublas=x_cu, x_cublas_out=x_cu_out, note=note)
        if len(p["tg"]) == len(p["lb"]):
            rows.add(f"Matmul int4 g128 M={M}", f"geomean {len(p['lb'])} sh.", "gpu", gm(p["lb"]), "tinygemm",
                     gm(p["tg"]), out_us=gm(p["out"]))


def section_host(torch, clock: Clock, rows: Rows, lowbit, bnb, peer_fn) -> None:
    log("\n== host time per call at tiny sizes: loops of 500 calls, no synchronization inside, every call timed "
        "once per round over 10 interleaved rounds, the fastest loop kept (the host is noisy: interleaving lets no "
        "call draw a slow period alone); lowbit without / with out=, the peer; torch.add(x, 1) is the raw-launch "
        "reference")
    LF = lowbit.functional
    BF = bnb.functional if bnb is not None else None
    x = torch.randn(256, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    entries: List[Tuple[str, str, str, Dict[str, Optional[Callable[[], Any]]]]] = [
        ("torch.add(x, 1) (reference)", "256 f16", "-",
         {"lb": lambda: torch.add(x, 1), "out": lambda: torch.add(x, 1, out=y), "peer": None})]

    def host(op, size, lb, lb_out, peer, pr):
        entries.append((op, size, peer, {"lb": lb, "out": lb_out, "peer": pr}))

    bnb_name = "bitsandbytes" if BF else "not installed"
    q8o, a8o = torch.empty(256, dtype=torch.uint8, device="cuda"), torch.empty(1, dtype=torch.float32, device="cuda")
    host("quantize_blockwise bs256", "256 f16", lambda: LF.quantize_blockwise(x, blocksize=256),
         lambda: LF.quantize_blockwise(x, blocksize=256, out=q8o, absmax=a8o), bnb_name,
         (lambda: BF.quantize_blockwise(x, blocksize=256)) if BF else None)
    q8, s8 = LF.quantize_blockwise(x, blocksize=256)
    d8o = torch.empty_like(x)
    b8 = BF.quantize_blockwise(x, blocksize=256) if BF else None
    host("dequantize_blockwise bs256", "256 f16", lambda: LF.dequantize_blockwise(q8, s8),
         lambda: LF.dequantize_blockwise(q8, s8, out=d8o), bnb_name,
         (lambda: BF.dequantize_blockwise(*b8)) if BF else None)
    p4o, a4o = torch.empty(128, 1, dtype=torch.uint8, device="cuda"), torch.empty(4, dtype=torch.float32, device="cuda")
    host("quantize_4bit nf4 bs64", "256 f16", lambda: LF.quantize_4bit(x, blocksize=64, quant_type="nf4"),
         lambda: LF.quantize_4bit(x, blocksize=64, quant_type="nf4", out=p4o, absmax=a4o), bnb_name,
         (lambda: BF.quantize_4bit(x, blocksize=64, quant_type="nf4")) if BF else None)
    p4, s4 = LF.quantize_4bit(x, blocksize=64, quant_type="nf4")
    b4 = BF.quantize_4bit(x, blocksize=64, quant_type="nf4") if BF else None
    host("dequantize_4bit nf4 bs64", "256 f16", lambda: LF.dequantize_4bit(p4, s4),
         lambda: LF.dequantize_4bit(p4, s4, out=d8o), bnb_name,
         (lambda: BF.dequantize_4bit(*b4)) if BF else None)
    xb = torch.randn(1, 256, dtype=torch.bfloat16, device="cuda")
    host("act_quant", "1x256 bf16", lambda: LF.act_quant(xb), None,
         "deepseek triton" if peer_fn else "not installed", (lambda: peer_fn(xb)) if peer_fn else None)
    xr = x.view(1, 256)
    host("int8_vectorwise_quant th=0", "1x256 f16", lambda: LF.int8_vectorwise_quant(xr), None, bnb_name,
         (lambda: BF.int8_vectorwise_quant(xr)) if BF else None)
    w = (0.02 * torch.randn(256, 256, device="cuda")).half()
    if BF:
        Bq, st = BF.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    else:
        Bq, st = LF.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    mo = torch.empty(1, 256, dtype=torch.float16, device="cuda")
    host("matmul_4bit nf4 dq", "1x256 @ 256x256", lambda: LF.matmul_4bit(xr, Bq.t(), st),
         lambda: LF.matmul_4bit(xr, Bq.t(), st, out=mo), bnb_name,
         (lambda: bnb.matmul_4bit(xr, Bq.t(), quant_state=st)) if BF else None)

    def matmul_host():
        gen = torch.Generator(device="cuda")
        gen.manual_seed(6)
        q, zq, scale, W16 = bg.random_int4_weight(torch, 256, 256, gen)
        mm, W = bg.lowbit_int4_matmul(lowbit, [1], q, scale, zq)
        host("Matmul int4 g128", "1x256 @ 256x256", lambda: mm(xr, W), lambda: mm(xr, W, output=mo),
             "torch.matmul", lambda: torch.matmul(xr, W16.t()))

    attempt(rows, "Matmul int4 g128", "1x256 @ 256x256", matmul_host)

    # Warm every call up (a failing one is reported and dropped), then time them in interleaved rounds.
    live = []
    for op, size, peer, fns in entries:
        try:
            for fn in fns.values():
                if fn is not None:
                    for _ in range(50):
                        fn()
            torch.cuda.synchronize()
            live.append((op, size, peer, fns))
        except Exception as e:  # noqa: BLE001
            rows.add(op, size, "-", None, "-", None, note=f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    best: Dict[Tuple[int, str], float] = {}
    for _ in range(10):
        for i, (_, _, _, fns) in enumerate(live):
            for key, fn in fns.items():
                if fn is not None:
                    us = clock.host_loop_us(fn, 500)
                    best[(i, key)] = min(best.get((i, key), math.inf), us)
    ref, ref_out = best[(0, "lb")], best[(0, "out")]
    for i, (op, size, peer, fns) in enumerate(live):
        lu, ou, pu = best.get((i, "lb")), best.get((i, "out")), best.get((i, "peer"))
        if i == 0:
            rows.add(op, size, "host", lu, peer, None, out_us=ou)
            continue
        rows.add(op, size, "host", lu, peer, pu, out_us=ou, over_launch=lu - ref,
                 note=f"over torch.add: {lu - ref:.1f} us" + (f", with out= {ou - ref_out:.1f} us" if ou else "")
                 + (f"; without out= {lu - ou:+.1f} us" if ou else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions of a 'gpu' row, at most (default 20)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timed calls per 'gpu' measurement, about")
    ap.add_argument("--quick", action="store_true", help="2^24 values instead of 2^28; 2 Matmul shapes")
    ap.add_argument("--sections", default="quant,act,int8,mm4,matmul,host",
                    help="comma-separated subset of quant,act,int8,mm4,matmul,host")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    t_start = time.time()
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: bench_peers skipped: torch is not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        log("summary: bench_peers skipped: torch sees no CUDA device")
        return 0
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        log(f"summary: bench_peers FAILED: {where}")
        return 1
    try:
        import bitsandbytes as bnb  # noqa: PLC0415
        bnb_v = bnb.__version__
    except Exception as e:  # noqa: BLE001
        bnb, bnb_v = None, f"not installed ({type(e).__name__})"
    try:
        from peers.deepseek_act_quant import act_quant as peer_act_quant  # noqa: PLC0415
        import triton  # noqa: PLC0415
        triton_v = triton.__version__
    except Exception as e:  # noqa: BLE001
        peer_act_quant, triton_v = None, f"not installed ({type(e).__name__})"
    sections = set(args.sections.split(","))
    clock = Clock(torch, args.reps, args.budget)
    copy = clock.timer.copy_gbps()
    gpu = torch.cuda.get_device_name(0)
    log(f"bench_peers.py: {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), bitsandbytes {bnb_v}, "
        f"triton {triton_v}, lowbit {lowbit.__version__} ({where})")
    log(f"  copy (device-to-device, read + write): {copy:.1f} GB/s; L2 {clock.l2 >> 20} MB")
    rows = Rows()
    BF = bnb.functional if bnb is not None else None
    bnb_name = "bitsandbytes" if bnb is not None else "not installed"
    LF = lowbit.functional
    if "quant" in sections:
        section_quant(torch, clock, rows, LF, BF, bnb_name, copy, args.quick)
    if "act" in sections:
        section_act_quant(torch, clock, rows, LF, peer_act_quant, "deepseek triton" if peer_act_quant else "not installed", copy)
    if "int8" in sections:
        section_int8(torch, clock, rows, LF, BF, bnb_name)
    if "mm4" in sections:
        section_matmul_4bit(torch, clock, rows, lowbit, bnb, bnb_name)
    if "matmul" in sections:
        section_matmul(torch, clock, rows, lowbit, args.quick)
    if "host" in sections:
        section_host(torch, clock, rows, lowbit, bnb, peer_act_quant)

    path = args.csv or (os.path.join(os.environ["OUT"], "bench_peers.csv") if os.environ.get("OUT") else None)
    if path:
        keys = sorted({k for r in rows.rows for k in r}, key=lambda k: (k not in HEADER, k))
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows.rows)
    log(f"\n== table ({gpu}; torch {torch.__version__}, bitsandbytes {bnb_v}, triton {triton_v}; copy "
        f"{copy:.0f} GB/s; times in us; lb_cp / pr_cp: fraction of copy bandwidth)")
    log(HEADER)
    for r in rows.rows:
        log(line(r))
    errors = sum(1 for r in rows.rows if str(r.get("note", "")).startswith("error") or "CHECK FAILED" in str(r.get("note", "")))
    ratios = []
    for r in rows.rows:
        if r["lowbit_us"] and r["peer_us"] and r["mode"] != "host":
            what = f"{r['op']}@{r['size']}" + ("" if r["peer"] in ("bitsandbytes", "deepseek triton") else f"/{r['peer']}")
            ratios.append(f"{what.replace(' ', '')}={r['peer_us'] / r['lowbit_us']:.2f}")
    log(f"summary: lowbit x faster than its peer: {' '.join(ratios)}")
    hosts = [f"{r['op'].split(' ')[0].split('(')[0]}={r['lowbit_us']:.1f}/{fmt(r.get('out_us'), '.1f')}/{fmt(r['peer_us'], '.1f')}"
             for r in rows.rows if r["mode"] == "host" and r["lowbit_us"]]
    log(f"summary: host us per call (lowbit / out= / peer): {' '.join(hosts)}")
    log(f"summary: bench_peers {gpu}; {len(rows.rows)} rows, {errors} errors or failed checks; {time.time() - t_start:.0f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
