#!/usr/bin/env python3
"""An LLM.int8 checkpoint through lowbit's int8 linear layer.

1. Writes a small float32 checkpoint (two linear layers of an MLP block and
   their biases) as safetensors.
2. Quantizes it with ``lowbit quantize --format int8``: each layer's
   ``weight`` becomes int8 and ``SCB`` its row absmax (bitsandbytes'
   ``Linear8bitLt`` layout, docs/checkpoints.md).
3. Reads the quantized file back and runs the block with
   ``lowbit.functional.int8_linear`` at threshold 6 on activations with a few
   outlier features, against the same block in float32.

Usage: python3 examples/int8_linear.py [--cli PATH] [--device cpu|cuda] [--work DIR]
The CLI is --cli, else $LOWBIT_CLI, else ``lowbit`` on PATH. Needs numpy;
torch only for --device cuda. Prints the error and exits 1 above 2%.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

import lowbit
from lowbit import functional as F

DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8}


def write_safetensors(path: str, tensors: dict) -> None:
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        code = next(k for k, v in DTYPES.items() if v == t.dtype)
        data = np.ascontiguousarray(t).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def read_safetensors(path: str) -> dict:
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.environ.get("LOWBIT_CLI") or shutil.which("lowbit"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--work", default=None, help="folder for the two checkpoints (default: a temporary one)")
    args = ap.parse_args()
    if not args.cli:
        print("int8_linear.py: no lowbit CLI (pass --cli or set LOWBIT_CLI)")
        return 1
    rng = np.random.default_rng(0)
    hidden, inner, tokens = 256, 688, 24
    model = {
        "mlp.up_proj.weight": (rng.standard_normal((inner, hidden)) * 0.05).astype(np.float32),
        "mlp.up_proj.bias": (rng.standard_normal(inner) * 0.1).astype(np.float32),
        "mlp.down_proj.weight": (rng.standard_normal((hidden, inner)) * 0.05).astype(np.float32),
        "mlp.down_proj.bias": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
    }
    work = args.work or tempfile.mkdtemp(prefix="lowbit-int8-")
    os.makedirs(work, exist_ok=True)
    src, dst = os.path.join(work, "model.safetensors"), os.path.join(work, "model-int8.safetensors")
    write_safetensors(src, model)
    subprocess.run([args.cli, "quantize", src, dst, "--format", "int8", "--device", "cpu", "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    q = read_safetensors(dst)
    for layer in ("mlp.up_proj", "mlp.down_proj"):
        print(f"{layer}: weight {q[layer + '.weight'].dtype} {q[layer + '.weight'].shape}, "
              f"SCB {q[layer + '.SCB'].dtype} {q[layer + '.SCB'].shape}")

    # Activations with three outlier features, as large models have them.
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    x[:, [7, 90, 200]] *= 25.0

    def block(x, linear):
        h = linear(x, "mlp.up_proj")
        return linear(np.maximum(h, 0).astype(np.float32), "mlp.down_proj")

    def float_linear(x, name):
        return x @ model[name + ".weight"].T + model[name + ".bias"]

    if args.device == "cuda":
        import torch
        dev = {k: torch.from_numpy(v).cuda() for k, v in q.items()}

        def int8_layer(x, name):
            xt = torch.from_numpy(np.ascontiguousarray(x)).cuda()
            y = F.int8_linear(xt, dev[name + ".weight"], dev[name + ".SCB"], dev[name + ".bias"], threshold=6.0)
            return y.cpu().numpy()
    else:
        def int8_layer(x, name):
            return np.asarray(F.int8_linear(np.ascontiguousarray(x), q[name + ".weight"], q[name + ".SCB"],
                                            q[name + ".bias"], threshold=6.0))

    want, got = block(x, float_linear), block(x, int8_layer)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    print(f"lowbit {lowbit.__version__}, {args.device}: relative error of the int8 block against float32: {err:.2e}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if err < 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
