#!/usr/bin/env python3
"""lowbit.optim against PyTorch's fused AdamW and bitsandbytes' optimizers, as users call them.

One parameter of 2^28 (268M) elements, fp32 and bf16, its gradient set once;
each row times ``opt.step()`` (CUDA events around the call, after an L2 flush,
median of the repetitions: scripts/bench_gemm.py's Timer) for lowbit.optim's
class, the bitsandbytes class of the same name and, for the AdamW rows,
``torch.optim.AdamW(fused=True)`` (32-bit states), all in one process on one
stream. 'floor' is the time the bytes the update must move (reads and writes
of p, g and the states; the 8-bit scales are under 1%) take at the
device-to-device copy rate measured in the same run; 'of copy' is floor over
lowbit's time. The multi-tensor row steps 200 tensors of mixed sizes
(2^28 elements in all) against the one tensor of the same total size.

Usage (on the GPU machine after a build, e.g. by scripts/gpu-check):
    python3 scripts/bench_optim.py [--quick] [--reps 10] [--csv PATH]
bitsandbytes is optional (its columns say 'not installed'). The table is
printed last, then 'summary:' lines; the CSV goes to $OUT/bench_optim.csv
when $OUT is set.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (the Timer and lowbit's finder)

# (class name, states, bytes per state element, constructor keywords)
ROWS = [
    ("AdamW8bit", 2, 1, {}), ("AdamW32bit", 2, 4, {}),
    ("SGD8bit", 1, 1, {"momentum": 0.9}), ("RMSprop8bit", 1, 1, {}), ("Lion8bit", 1, 1, {}),
    ("Adagrad8bit", 1, 1, {}), ("AdEMAMix8bit", 3, 1, {}),
    ("SGD32bit", 1, 4, {"momentum": 0.9}), ("Lion32bit", 1, 4, {}), ("AdEMAMix32bit", 3, 4, {}),
    ("LAMB8bit", 2, 1, {}), ("LARS8bit", 1, 1, {"momentum": 0.9}),
]


def moved_bytes(n: int, elem: int, states: int, state_bytes: int) -> int:
    """Bytes one update must read and write: g and p read, p written, each state read and written."""
    return n * (3 * elem + 2 * states * state_bytes)


def time_step(timer, torch, make, params) -> Optional[float]:
    try:
        opt = make(params)
    except Exception as e:  # noqa: BLE001 - a peer without this class or dtype: an empty cell
        bg.log(f"    ({type(e).__name__}: {e})")
        return None
    try:
        ms = timer.ms(opt.step)
    except Exception as e:  # noqa: BLE001
        bg.log(f"    step failed ({type(e).__name__}: {e})")
        ms = None
    del opt
    gc.collect()
    torch.cuda.empty_cache()
    return ms


def fresh_params(torch, sizes: List[int], dtype) -> List[Any]:
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.randn(n, device="cuda", dtype=dtype) * 0.1)
        p.grad = torch.randn(n, device="cuda", dtype=dtype) * 0.01
        params.append(p)
    return params


def peer_child(rows: List[str], n: int, reps: int) -> int:
    """Times bitsandbytes' rows ('name:dtype'), printing 'ROW name dtype ms' as each ends."""
    import torch
    import bitsandbytes as bnb

    timer = bg.Timer(torch, reps, 2)
    kws = {name: kw for name, _, _, kw in ROWS}
    params, params_dtype = None, None
    for row in rows:
        name, dtype_name = row.split(":")
        print(f"START {name} {dtype_name}", flush=True)
        if params_dtype != dtype_name:
            params = None
            gc.collect()
            torch.cuda.empty_cache()
            params, params_dtype = fresh_params(torch, [n], getattr(torch, dtype_name)), dtype_name
        ms = time_step(timer, torch, lambda ps: getattr(bnb.optim, name)(ps, lr=1e-4, **kws[name]), params) \
            if hasattr(bnb.optim, name) else None
        print(f"ROW {name} {dtype_name} {ms if ms is not None else '-'}", flush=True)
    return 0


def peer_times(rows: List[str], n: int, reps: int) -> Dict[str, Any]:
    """bitsandbytes' times by 'name:dtype', each child process restarted after one crashes (its row: 'crashed')."""
    out: Dict[str, Any] = {}
    left = list(rows)
    while left:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--peer-child", ",".join(left), "--n", str(n),
                               "--reps", str(reps)], capture_output=True, text=True, timeout=600)
        current = None
        for line in proc.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["START"]:
                current = f"{parts[1]}:{parts[2]}"
            elif parts[:1] == ["ROW"]:
                out[f"{parts[1]}:{parts[2]}"] = None if parts[3] == "-" else float(parts[3])
                current = None
        done = [r for r in left if r in out]
        left = [r for r in left if r not in out]
        if current is not None:
            out[current] = "crashed"
            left.remove(current)
            tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            bg.log(f"    bitsandbytes {current} crashed: {tail}")
        elif not done:
            bg.log(f"    bitsandbytes child failed: {proc.stderr.strip()[-300:]}")
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2^24 elements and the AdamW rows only")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--peer-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_child:
        return peer_child(args.peer_child.split(","), args.n, args.reps)
    import torch

    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        bg.log(f"bench_optim: {where}")
        return 1
    import lowbit.optim as lo
    try:
        import bitsandbytes as bnb
        peer_name = f"bitsandbytes {bnb.__version__} (timed in a child process)"
        have_peer = True
    except Exception as e:  # noqa: BLE001
        peer_name, have_peer = f"not installed ({type(e).__name__})", False
    timer = bg.Timer(torch, args.reps, 2)
    copy = timer.copy_gbps()
    n = 1 << (24 if args.quick else 28)
    bg.log(f"device: {torch.cuda.get_device_name(0)}; lowbit at {where}; peer: {peer_name}")
    bg.log(f"copy (device-to-device, read + write): {copy:.1f} GB/s; n = {n}")
    rows: List[Dict[str, Any]] = []
    chosen = ROWS[:2] if args.quick else ROWS
    # bitsandbytes first, in its own process: a crash of its kernels must not take lowbit's rows with it
    peer = peer_times([f"{r[0]}:{d}" for d in ("float32", "bfloat16") for r in chosen], n, args.reps) if have_peer \
        else {}
    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        elem = torch.tensor([], dtype=dtype).element_size()
        params = fresh_params(torch, [n], dtype)
        fused = time_step(timer, torch, lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True), params)
        for name, states, state_bytes, kw in chosen:
            lb = time_step(timer, torch, lambda ps: getattr(lo, name)(ps, lr=1e-4, **kw), params)
            pb = peer.get(f"{name}:{dtype_name}")
            floor = moved_bytes(n, elem, states, state_bytes) / (copy * 1e6)
            row = dict(rule=name, dtype=dtype_name, n=n, lowbit_ms=lb, peer_ms=pb,
                       torch_fused_ms=fused if name.startswith("AdamW") else None, floor_ms=floor,
                       of_copy=floor / lb if lb else None, one_tensor_ms=None)
            rows.append(row)
            cell = pb if isinstance(pb, str) else bg.fmt(pb, ".3f")
            bg.log(f"  {name:<14} {dtype_name:<8} lowbit {bg.fmt(lb, '.3f')} ms  bnb {cell} ms  floor {floor:.3f} ms")
        del params
        gc.collect()
        torch.cuda.empty_cache()
    # 200 tensors of mixed sizes against one tensor of their total size
    sizes, left, k = [], n, 0
    while len(sizes) < 199:
        s = max(1 << 10, (n // 200) * (1 + (k % 7)) // 4 + 37 * k)
        sizes.append(s)
        left -= s
        k += 1
    sizes.append(max(left, 1 << 10))
    total = sum(sizes)
    many = time_step(timer, torch, lambda ps: lo.AdamW8bit(ps, lr=1e-4), fresh_params(torch, sizes, torch.float32))
    gc.collect()
    torch.cuda.empty_cache()
    one = time_step(timer, torch, lambda ps: lo.AdamW8bit(ps, lr=1e-4), fresh_params(torch, [total], torch.float32))
    floor = moved_bytes(total, 4, 2, 1) / (copy * 1e6)
    rows.append(dict(rule="AdamW8bit x200 tensors", dtype="float32", n=total, lowbit_ms=many, peer_ms=None,
                     torch_fused_ms=None, floor_ms=floor, of_copy=floor / many if many else None, one_tensor_ms=one))

    out = args.csv or (os.path.join(os.environ["OUT"], "bench_optim.csv") if os.environ.get("OUT") else None)
    if out:
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    bg.log("")
    bg.log(f"{'rule':<24} {'dtype':<9} {'lowbit ms':>10} {'bnb ms':>8} {'x bnb':>6} {'fused ms':>9} {'x fused':>7} "
           f"{'floor ms':>9} {'of copy':>7}")
    for r in rows:
        crashed = isinstance(r["peer_ms"], str)
        if crashed:
            r["peer_ms"] = None
        xb = r["peer_ms"] / r["lowbit_ms"] if r["peer_ms"] and r["lowbit_ms"] else None
        xf = r["torch_fused_ms"] / r["lowbit_ms"] if r["torch_fused_ms"] and r["lowbit_ms"] else None
        peer_cell = "crashed" if crashed else bg.fmt(r["peer_ms"], ".3f")
        bg.log(f"{r['rule']:<24} {r['dtype']:<9} {bg.fmt(r['lowbit_ms'], '.3f'):>10} {peer_cell:>8} "
               f"{bg.fmt(xb, '.2f'):>6} {bg.fmt(r['torch_fused_ms'], '.3f'):>9} {bg.fmt(xf, '.2f'):>7} "
               f"{r['floor_ms']:.3f}     {bg.fmt(r['of_copy'], '.2f'):>7}")
    a8 = next((r for r in rows if r["rule"] == "AdamW8bit" and r["dtype"] == "float32"), None)
    if a8 and a8["lowbit_ms"]:
        bg.log(f"summary: AdamW8bit fp32 2^{n.bit_length() - 1}: {a8['lowbit_ms']:.3f} ms, "
               f"{a8['of_copy']:.2f} of copy; x{bg.fmt(a8['peer_ms'] and a8['peer_ms'] / a8['lowbit_ms'], '.2f')} "
               f"bnb, x{bg.fmt(a8['torch_fused_ms'] and a8['torch_fused_ms'] / a8['lowbit_ms'], '.2f')} torch fused")
    m = rows[-1]
    if m["lowbit_ms"] and m["one_tensor_ms"]:
        bg.log(f"summary: AdamW8bit over 200 tensors {m['lowbit_ms']:.3f} ms vs one tensor of their size "
               f"{m['one_tensor_ms']:.3f} ms ({m['lowbit_ms'] / m['one_tensor_ms']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
