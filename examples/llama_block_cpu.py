#!/usr/bin/env python3
"""A Llama-style transformer block with 4-bit weights on the CPU, through ``lowbit.Matmul``.

The block (random weights): RMSNorm, the q/k/v/o projections, rotary
position embeddings, causal attention, a residual; RMSNorm, the gated MLP
(gate, up, SiLU, down), a residual. Its seven linear weights are quantized
to 4 bits — nf4 through bitsandbytes' ``quantize_4bit`` and
``lowbit.import_bnb_4bit`` (blocks of 64), or int4 with groups of 128 — and
run through ``lowbit.Matmul`` on bf16 activations: a prompt of ``--seq``
tokens, then one decoded token.

Checked against the same block in float32 on the dequantized weights
(``lowbit.dequantize_weight``: the error of the kernels and of bf16
activations only; exit 1 above 2%), and reported against the bf16 block on
the original weights (the quantization's own error), with each forward's
time next to torch's bf16 block.

Usage: python3 examples/llama_block_cpu.py [--format nf4|int4] [--hidden 512] [--heads 8]
    [--intermediate 1408] [--seq 16] [--threads N]
Needs torch (CPU); without it the example says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import lowbit
from lowbit import functional as F


def quantize(torch, w, fmt: str):
    """The packed weight for ``w`` [N, K] (float32) and its Matmul on the CPU, bf16 in and out."""
    N, K = w.shape
    if fmt == "nf4":
        packed, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
        qw = lowbit.import_bnb_4bit(packed, state)
        cfg = qw.config
        cfg.A_dtype = cfg.out_dtype = "bfloat16"
        mm = lowbit.Matmul(cfg)
        return mm, mm.transform_weight(qw)
    scale = w.reshape(N, K // 128, 128).abs().amax(-1) / 7.0
    values = torch.clamp(torch.round(w / scale.repeat_interleave(128, 1)), -8, 7).to(torch.int8)
    cfg = lowbit.MatmulConfig(N=N, K=K, A_dtype="bfloat16", W_dtype="int4", out_dtype="bfloat16",
                              with_scaling=True, group_size=128)
    mm = lowbit.Matmul(cfg)
    return mm, mm.transform_weight(values, scale=scale)


class Block:
    """The block's weights, and its forward with any linear map ``lin(name, x)``."""

    NAMES = ("q", "k", "v", "o", "gate", "up", "down")

    def __init__(self, torch, hidden: int, heads: int, intermediate: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden), "o": (hidden, hidden),
                  "gate": (intermediate, hidden), "up": (intermediate, hidden), "down": (hidden, intermediate)}
        self.w = {n: torch.randn(*s, generator=g) * s[1] ** -0.5 for n, s in shapes.items()}
        self.norm1 = 1.0 + 0.1 * torch.randn(hidden, generator=g)
        self.norm2 = 1.0 + 0.1 * torch.randn(hidden, generator=g)
        self.heads, self.hidden = heads, hidden

    def forward(self, torch, x, lin, start: int, cache: dict):
        """x [T, hidden] at positions start.. ; cache holds the keys and values of the earlier positions."""
        T, D = x.shape
        H, Dh = self.heads, self.hidden // self.heads

        def rms(v, gain):
            v32 = v.float()
            return (v32 * torch.rsqrt(v32.pow(2).mean(-1, keepdim=True) + 1e-6) * gain).to(x.dtype)

        def rope(t):  # [H, T, Dh], rotated by each position's angle
            pos = torch.arange(start, start + T, dtype=torch.float32)
            freq = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=torch.float32) / Dh)
            ang = pos[:, None] * freq[None, :]
            cos, sin = ang.cos(), ang.sin()
            t1, t2 = t.float()[..., 0::2], t.float()[..., 1::2]
            return torch.stack((t1 * cos - t2 * sin, t1 * sin + t2 * cos), -1).flatten(-2).to(t.dtype)

        h = rms(x, self.norm1)
        q, k, v = (lin(n, h).reshape(T, H, Dh).transpose(0, 1) for n in ("q", "k", "v"))
        q, k = rope(q), rope(k)
        k = torch.cat([cache["k"], k], 1) if "k" in cache else k
        v = torch.cat([cache["v"], v], 1) if "v" in cache else v
        cache["k"], cache["v"] = k, v
        S = k.shape[1]
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)  # query i sees keys <= i + S - T
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + lin("o", att.transpose(0, 1).reshape(T, D))
        h = rms(x, self.norm2)
        return x + lin("down", torch.nn.functional.silu(lin("gate", h)) * lin("up", h))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=("nf4", "int4"), default="nf4")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("llama_block_cpu.py: skipped: needs torch")
        return 0
    if args.hidden % 128 or args.intermediate % 128 or args.hidden % args.heads:
        raise SystemExit("llama_block_cpu.py: hidden and intermediate must be multiples of 128 (int4 groups), "
                         "hidden of heads")
    if args.threads:
        torch.set_num_threads(args.threads)
    block = Block(torch, args.hidden, args.heads, args.intermediate)
    mats = {n: quantize(torch, w, args.format) for n, w in block.w.items()}
    deq = {n: lowbit.dequantize_weight(W).float() for n, (_, W) in mats.items()}
    bf16 = {n: w.to(torch.bfloat16) for n, w in block.w.items()}
    lins = {
        "lowbit": lambda n, x: mats[n][0](x, mats[n][1]),
        "float32 dequantized": lambda n, x: (x.float() @ deq[n].T).to(x.dtype),
        "torch bf16": lambda n, x: x @ bf16[n].T,
    }
    g = torch.Generator().manual_seed(1)
    prompt = torch.randn(args.seq, args.hidden, generator=g).to(torch.bfloat16)
    token = torch.randn(1, args.hidden, generator=g).to(torch.bfloat16)
    out, times = {}, {}
    for name, lin in lins.items():
        x32 = name == "float32 dequantized"
        cache: dict = {}
        p = block.forward(torch, prompt.float() if x32 else prompt, lin, 0, cache)
        d = block.forward(torch, token.float() if x32 else token, lin, args.seq, cache)
        out[name] = (p.float(), d.float())
        if not x32:  # best of 5: the prompt, then one token against its cache
            tp, td = [], []
            for _ in range(5):
                c: dict = {}
                t0 = time.perf_counter()
                block.forward(torch, prompt, lin, 0, c)
                t1 = time.perf_counter()
                block.forward(torch, token, lin, args.seq, c)
                tp.append(t1 - t0)
                td.append(time.perf_counter() - t1)
            times[name] = (min(tp) * 1e3, min(td) * 1e3)

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    ref = out["float32 dequantized"]
    kernel_err = max(rel(out["lowbit"][i], ref[i]) for i in range(2))
    quant_err = max(rel(out["lowbit"][i], out["torch bf16"][i]) for i in range(2))
    print(f"Llama-style block, hidden {args.hidden}, {args.heads} heads, MLP {args.intermediate}, "
          f"{args.format} weights, a {args.seq}-token prompt then 1 token, {torch.get_num_threads()} threads")
    print(f"  error against float32 on the dequantized weights (kernels + bf16 activations): {kernel_err:.2e}")
    print(f"  error against the bf16 block on the original weights (the quantization):      {quant_err:.2e}")
    for i, what in enumerate(("prompt", "token")):
        lb, tb = times["lowbit"][i], times["torch bf16"][i]
        print(f"  {what} forward: lowbit {lb:.2f} ms, torch bf16 {tb:.2f} ms (torch / lowbit {tb / lb:.2f})")
    if not kernel_err <= 0.02:
        print("llama_block_cpu.py: the 4-bit block is off by more than 2%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
