#!/usr/bin/env python3
"""Attention on the GPU: lowbit's flash_attention and flash_attention_kvcache against torch's SDPA, as users call them.

Prefill: ``lowbit.functional.flash_attention(q, k, v, is_causal=...)`` on torch tensors [B, S, H, D] (a new output
each call) against ``torch.nn.functional.scaled_dot_product_attention`` on the same memory seen as [B, H, S, D]
(``transpose(1, 2)``, no copy) under ``torch.nn.attention.sdpa_kernel`` with the flash backend and with the cuDNN
backend. fp16, head dims 64, 128 and 256 with H = 2048 / D heads, B x S = 16k tokens (S from 512 to 16384),
causal and not (Sq == Skv: torch's top-left mask is lowbit's bottom-right one). TFLOP/s count 4 B H S^2 D,
halved for causal.

Decode: one query token per sequence (H = 32 query heads, Hkv = 8 kv heads, D = 128, fp16) against a paged KV
cache (P = 16 and 256, pages shuffled) of B = 1, 8, 64 sequences of 4k to 32k tokens:
``flash_attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table)`` against SDPA on the same cache
gathered into contiguous [B, Hkv, L, D] tensors beforehand (the gather untimed: the peer's best case), and
flash-attn's ``flash_attn_with_kvcache`` on the paged cache where flash-attn is importable (its page size
must be a multiple of 256 there). GB/s count the K and V bytes read.

Each repetition is timed by CUDA events around the call alone after an untimed L2 flush, the callables taken
in turns (bench_gemm.Timer.ms_interleaved); the median is reported with each peer's time and lowbit's speedup
over it (peer ms / lowbit ms). Each lowbit result is first checked against SDPA's (the math backend where
the others refuse).

Usage (on the GPU machine, after scripts/gpu-check built build-gpu):
    python3 scripts/bench_attention.py [--dims 64,128,256] [--seqs 512,...,16384] [--tokens 16384]
        [--batches 1,8,64] [--cache 4096,8192,16384,32768] [--pages 16,256] [--reps 20] [--skip-decode]
        [--skip-prefill]
lowbit is found as bench_gemm.py finds it; the CSV goes to $OUT/bench_attention.csv when $OUT is set (or
--csv PATH).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder, the timer, the formatting)

CHECK_TOL = 2e-2  # relative L2 error of lowbit's output against SDPA's (fp16 inputs, fp32 sums on both sides)


def ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x]


def rel_err(torch, got, want) -> float:
    return bg.rel_err(torch, got, want)


def try_time(timer, fns: Dict[str, Callable[[], object]], notes: Dict[str, str]) -> Dict[str, Optional[float]]:
    """Times the callables that run once without raising; the others get None and a note."""
    ok = {}
    for name, fn in fns.items():
        try:
            fn()
            ok[name] = fn
        except Exception as e:  # noqa: BLE001 - a peer refusing a shape is a row without it
            note = f"{name}: {str(e).splitlines()[0][:160]}"
            if notes.get(name) != note:
                notes[name] = note
                bg.log(f"  note: {note}")
    times = timer.ms_interleaved(ok) if ok else {}
    return {name: times.get(name) for name in fns}


def sdpa_backends(torch):
    """{column: context factory} for the SDPA peers this torch has."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {"sdpa_flash": lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out["sdpa_cudnn"] = lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
    return out


def bench_prefill(torch, F, timer, args, rows: List[dict], notes: Dict[str, str]) -> None:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    backends = sdpa_backends(torch)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    bg.log("\n## Prefill (fp16, H = 2048 / D, B x S = %d tokens)\n" % args.tokens)
    bg.log("| D | B x S | causal | lowbit ms | TFLOP/s | SDPA flash ms (lowbit x) | SDPA cuDNN ms (lowbit x) | check |")
    bg.log("|---|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for D in args.dims:
        H = max(1, 2048 // D)
        for S in args.seqs:
            B = max(1, args.tokens // S)
            q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            for causal in (False, True):
                r = {"kind": "prefill", "D": D, "B": B, "S": S, "H": H, "causal": causal}
                got = F.flash_attention(q, k, v, is_causal=causal)
                try:
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        want = sdpa(qt, kt, vt, is_causal=causal).transpose(1, 2)
                except Exception:  # noqa: BLE001 - the math backend as the check's reference
                    with sdpa_kernel(SDPBackend.MATH):
                        want = sdpa(qt.float(), kt.float(), vt.float(), is_causal=causal).transpose(1, 2)
                r["lowbit_err"] = rel_err(torch, got, want)
                del got, want

                def peer(ctx):
                    def call():
                        with ctx():
                            return sdpa(qt, kt, vt, is_causal=causal)
                    return call

                fns = {"lowbit": lambda: F.flash_attention(q, k, v, is_causal=causal)}
                fns.update({name: peer(ctx) for name, ctx in backends.items()})
                t = try_time(timer, fns, notes)
                flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
                lb = t["lowbit"]
                r["lowbit_ms"] = lb
                r["lowbit_tflops"] = flops / (lb * 1e9) if lb else math.nan
                for name in backends:
                    r[f"{name}_ms"] = t.get(name)
                    r[f"lowbit_x_{name}"] = t[name] / lb if (lb and t.get(name)) else math.nan
                r["check"] = "ok" if r["lowbit_err"] <= CHECK_TOL else f"err {r['lowbit_err']:.1e}"
                rows.append(r)
                cells = []
                for name in ("sdpa_flash", "sdpa_cudnn"):
                    ms = r.get(f"{name}_ms")
                    cells.append(f"{bg.fmt(ms, '.3f')} ({bg.ratio(r.get(f'lowbit_x_{name}'))})")
                bg.log(f"| {D} | {B} x {S} | {'yes' if causal else 'no'} | {bg.fmt(lb, '.3f')} | "
                       f"{bg.fmt(r['lowbit_tflops'], '.0f')} | {cells[0]} | {cells[1]} | {r['check']} |")
            del q, k, v, qt, kt, vt
            torch.cuda.empty_cache()


def paged_cache(torch, B: int, L: int, P: int, Hkv: int, D: int, gen):
    """(k_cache, v_cache [pages, P, Hkv, D], block_table [B, L / P] shuffled, k and v gathered [B, Hkv, L, D])."""
    pages = B * (-(-L // P))
    kc = torch.randn(pages, P, Hkv, D, device="cuda", dtype=torch.float16, generator=gen)
    vc = torch.randn(pages, P, Hkv, D, device="cuda", dtype=torch.float16, generator=gen)
    perm = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).reshape(B, -1)
    kg = kc[perm.long()].reshape(B, -1, Hkv, D)[:, :L].transpose(1, 2).contiguous()
    vg = vc[perm.long()].reshape(B, -1, Hkv, D)[:, :L].transpose(1, 2).contiguous()
    return kc, vc, perm, kg, vg


def bench_decode(torch, F, timer, args, rows: List[dict], notes: Dict[str, str]) -> None:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    H, Hkv, D = 32, 8, 128
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - the column is left out
        flash_attn_with_kvcache = None
        bg.log("note: flash-attn is not importable (its decode column is left out)")
    bg.log(f"\n## Decode (fp16, Sq = 1, H = {H}, Hkv = {Hkv}, D = {D}, paged cache)\n")
    bg.log("| B | cache | P | lowbit ms | GB/s | SDPA gathered ms (lowbit x) | flash-attn ms (lowbit x) | check |")
    bg.log("|---|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for B in args.batches:
        for L in args.cache:
            for P in args.pages:
                kc, vc, table, kg, vg = paged_cache(torch, B, L, P, Hkv, D, gen)
                lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
                q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.float16, generator=gen)
                qt = q.transpose(1, 2)
                r = {"kind": "decode", "D": D, "B": B, "S": L, "H": H, "Hkv": Hkv, "P": P, "causal": False}

                def gathered():
                    try:
                        return sdpa(qt, kg, vg, enable_gqa=True)
                    except TypeError:  # torch before enable_gqa: the heads repeated
                        return sdpa(qt, kg.repeat_interleave(H // Hkv, 1), vg.repeat_interleave(H // Hkv, 1))

                got = F.flash_attention_kvcache(q, kc, vc, lens, table)
                r["lowbit_err"] = rel_err(torch, got, gathered().transpose(1, 2))
                del got
                fns = {"lowbit": lambda: F.flash_attention_kvcache(q, kc, vc, lens, table), "sdpa_gathered": gathered}
                if flash_attn_with_kvcache is not None:
                    fns["flash_attn"] = lambda: flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                                        block_table=table)
                t = try_time(timer, fns, notes)
                lb = t["lowbit"]
                nbytes = 2.0 * B * L * Hkv * D * 2
                r["lowbit_ms"] = lb
                r["lowbit_gbps"] = nbytes / (lb * 1e6) if lb else math.nan
                for name in ("sdpa_gathered", "flash_attn"):
                    r[f"{name}_ms"] = t.get(name)
                    r[f"lowbit_x_{name}"] = t[name] / lb if (lb and t.get(name)) else math.nan
                r["check"] = "ok" if r["lowbit_err"] <= CHECK_TOL else f"err {r['lowbit_err']:.1e}"
                rows.append(r)
                cells = [f"{bg.fmt(r.get(f'{n}_ms'), '.4f')} ({bg.ratio(r.get(f'lowbit_x_{n}'))})"
                         for n in ("sdpa_gathered", "flash_attn")]
                bg.log(f"| {B} | {L} | {P} | {bg.fmt(lb, '.4f')} | {bg.fmt(r['lowbit_gbps'], '.0f')} | {cells[0]} | "
                       f"{cells[1]} | {r['check']} |")
                del kc, vc, table, kg, vg, q, qt
                torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", type=ints, default=ints("64,128,256"))
    ap.add_argument("--seqs", type=ints, default=ints("512,1024,2048,4096,8192,16384"))
    ap.add_argument("--tokens", type=int, default=16384, help="B x S of each prefill row")
    ap.add_argument("--batches", type=ints, default=ints("1,8,64"))
    ap.add_argument("--cache", type=ints, default=ints("4096,8192,16384,32768"))
    ap.add_argument("--pages", type=ints, default=ints("16,256"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip-prefill", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--csv", default=None, help="CSV path (default $OUT/bench_attention.csv when $OUT is set)")
    args = ap.parse_args()
    import torch

    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_attention: {where}")
        return 1
    import lowbit.functional as F  # noqa: PLC0415

    timer = bg.Timer(torch, args.reps, warmup=3)
    bg.log(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; lowbit from {where}")
    rows: List[dict] = []
    notes: Dict[str, str] = {}
    if not args.skip_prefill:
        bench_prefill(torch, F, timer, args, rows, notes)
    if not args.skip_decode:
        bench_decode(torch, F, timer, args, rows, notes)

    for kind, peers in (("prefill", ("sdpa_flash", "sdpa_cudnn")), ("decode", ("sdpa_gathered", "flash_attn"))):
        sel = [r for r in rows if r["kind"] == kind]
        if sel:
            means = {p: bg.geomean([r.get(f'lowbit_x_{p}', math.nan) for r in sel]) for p in peers}
            parts = [f"{g:.2f}x {p}" for p, g in means.items() if math.isfinite(g)]  # peers that ran
            if parts:
                bg.log(f"summary {kind}: geomean lowbit speedup " + ", ".join(parts))
    for note in notes.values():
        bg.log(f"note: {note}")

    path = args.csv or (os.path.join(os.environ["OUT"], "bench_attention.csv") if os.environ.get("OUT") else None)
    if path:
        keys = ["kind", "D", "B", "S", "H", "Hkv", "P", "causal", "lowbit_ms", "lowbit_tflops", "lowbit_gbps",
                "sdpa_flash_ms", "lowbit_x_sdpa_flash", "sdpa_cudnn_ms", "lowbit_x_sdpa_cudnn", "sdpa_gathered_ms",
                "lowbit_x_sdpa_gathered", "flash_attn_ms", "lowbit_x_flash_attn", "lowbit_err", "check"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None or (isinstance(r.get(k), float) and not math.isfinite(r[k]))
                                else r[k]) for k in keys})
        bg.log(f"csv: {path}")
    failed = [r for r in rows if not r["lowbit_err"] <= CHECK_TOL]
    if failed:
        bg.log(f"bench_attention: {len(failed)} lowbit results differ from SDPA's by more than {CHECK_TOL}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
