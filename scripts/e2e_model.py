#!/usr/bin/env python3
"""End-to-end check of lowbit.nn on a small random Llama: against transformers + bitsandbytes and the float model.

    scripts/e2e_model.py [--device cpu|cuda] [--quick] [--no-compile] [--keep DIR] [--hidden 512] [--layers 4]
                         [--vocab 4096] [--new N] [--runs 3] [--dtype T] [--seed 0] [--threads N]

A LlamaForCausalLM with random weights (fixed seed) is saved by ``save_pretrained`` in float16 on CUDA, float32 on
the CPU (where lowbit's kernels compute in float32 whatever the input's dtype; ``--dtype`` overrides), then:

1. NF4 (blocksize 64, double quant, compute dtype = the model's) four ways: (a) transformers' ``load_in_4bit``
   with bitsandbytes, (b) ``lowbit.nn.from_pretrained`` quantizing on load, (c) ``lowbit quantize --format nf4
   --double-quant`` of the saved folder (a transformers model folder: config.json gains bitsandbytes'
   quantization_config) loaded by ``lowbit.nn.from_pretrained``, and (c') the same folder loaded by transformers
   with bitsandbytes. Greedy generation of 32 tokens must give the same tokens in all of them, and the prompt's
   last-position logits must agree within 1e-3 relative L2 pairwise (the same 4-bit codes; double quant's offset
   may differ by an ulp and its 8-bit absmax codes by a step at a near-tie, docs/hf.md, docs/formats.md). Each
   pair's stored states are compared too (4-bit codes, the double quant's 8-bit absmax codes, nested absmax,
   offsets), to tell a difference of codes from one of arithmetic (float16 on the CPU: bitsandbytes' layers
   dequantize to float16 and multiply in float16, lowbit's compute in float32, about 1e-3 apart on the --quick
   model, which fails the check); where tokens differ, the first differing step is printed with the
   reference's top-1/top-2 margin there and the logits' difference there.
2. int8 (``load_in_8bit``: lowbit's ``Linear8bitLt`` through from_pretrained, bitsandbytes' through transformers)
   and fp8-block (``replace_linear(model, "fp8")``: ``LinearFP8``, DeepSeek's 128x128 weight tiles and 1x128
   activation blocks; and ``lowbit quantize --format fp8-block``'s folder loaded into ``LinearFP8`` modules by
   ``replace_linear(..., quantize=False)`` + ``load_state_dict(assign=True)``). The docs bound the error per layer,
   per quantized operand: LLM.int8 half a code step of each row's absmax (activations) and of the weight's row
   absmax after its float16 cast (docs/nn.md, docs/checkpoints.md); e4m3 2^-4 of each value plus half its
   subnormal step (3 mantissa bits; docs/formats.md), the CPU's sums within 1e-5 of the terms' magnitudes and
   CUDA's FP8 tensor cores within 1/512 (docs/fp8_gemm.md). Every quantized layer of the model is checked on its
   own inputs (forward hooks) against its float layer, element by element, within that bound: the worst
   |error| / bound must be <= 1. That bound adds worst cases over K and misses errors of a few percent, so two
   checks follow it per layer: the stored weight (dequantized) within the format's rounding of the float weight,
   element by element (<= 1); and the output's RMS distance from the input times that stored weight within
   0.75-1.25 of what the activations' rounding at the documented steps gives (uniform errors within half a step,
   plus the output's rounding; CUDA's FP8 accumulation bound allowed on top). The logits' relative L2 against the
   float model is printed beside them (the docs give no model-level bound: errors compound through the layers; an
   int8 MLP block at threshold 6 is about 1% from the float one, docs/int8.md), and so is the distance between
   lowbit's and bitsandbytes' int8 logits (not checked: LLM.int8 quantizes each layer's input on the fly, so a
   weight code that ties the other way, or bitsandbytes' float16 cast of float32 activations, flips activation
   codes by whole steps downstream; docs/formats.md, "In a model"). The CLI's fp8 checkpoint must give
   replace_linear's codes, scales and logits.
3. Decode latency per token at batch 1 and 16: a 32-token prompt, then --new greedy tokens through the KV cache,
   timed from the first decode step to the last (CUDA synchronized at both ends); the models take turns, median
   over --runs rounds. A markdown table with ratios: lowbit against bitsandbytes of the same format, and against
   the float model.
4. ``torch.compile(model, fullgraph=True)`` of the lowbit NF4 model (a graph break is an error): greedy decoding
   of 32 tokens on a fixed-size buffer (no cache; causal attention makes the padded tail irrelevant) gives the
   eager model's tokens, and the logits agree within 1e-4 relative L2 in float32 (1e-2 in float16 / bfloat16,
   where inductor's fused elementwise chains skip eager's intermediate roundings). ``--no-compile`` skips it.

bitsandbytes is optional (its rows say 'not installed' or why it cannot run here); so is the CLI ($LOWBIT_CLI,
else the newest build*/tools/lowbit/lowbit, else ``lowbit`` on PATH). lowbit is found as bench_gemm.find_lowbit
says ($LOWBIT_PYTHON_DIR, else the newest build*/python, else the importable one). ``--quick``: a smaller model
(hidden 256, 2 layers, vocabulary 1000), 8 timed tokens, 2 rounds. Defaults: hidden 512, 4 layers, vocabulary
4096, 16 timed tokens on the CPU and 32 on CUDA, 3 rounds. Exit status 1 when a check fails, 0 otherwise
(also when transformers is missing: it says so); the last line is a ``summary:``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import glob
import inspect
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gemm as bg  # noqa: E402  (lowbit's finder)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = 32  # prompt tokens
TOKENS = 32  # greedy tokens compared
BATCHES = (1, 16)
NF4_TOL = 1e-3  # pairwise relative L2 of the NF4 models' last-position logits
# The output noise of an int8 / fp8 layer (against the input times the layer's stored weight) over what the
# activations' rounding at the documented steps gives, as uniform errors within half a step: measured 0.94-1.02 on the
# CPU; the upper limit is taken over that plus the documented accumulation error of CUDA's FP8 tensor cores.
ROUNDING = (0.75, 1.25)
NF4 = dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
INT8 = dict(load_in_8bit=True)

failures: List[str] = []


def log(msg: str = "") -> None:
    bg.log(msg)


def fail(msg: str) -> None:
    failures.append(msg)
    log(f"  FAIL: {msg}")


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# ------------------------------------------------------------------ setup


def find_cli() -> Optional[str]:
    cli = os.environ.get("LOWBIT_CLI")
    if cli:
        if os.path.isfile(cli) and os.access(cli, os.X_OK):
            return cli
        log(f"e2e_model: LOWBIT_CLI={cli} is not an executable file; the CLI's checks are left out")
        return None
    found = glob.glob(os.path.join(ROOT, "build*", "tools", "lowbit", "lowbit"))
    if found:
        return max(found, key=os.path.getmtime)
    return shutil.which("lowbit")


def bnb_probe(torch, device: str) -> Tuple[Any, Optional[str]]:
    """(bitsandbytes, None) where its 4-bit and 8-bit layers run on ``device``, else (None, why not)."""
    try:
        import bitsandbytes as bnb  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 - any failure to import means no bitsandbytes rows
        return None, f"not installed ({type(e).__name__}: {str(e)[:120]})"
    try:
        lin = torch.nn.Linear(64, 8)
        for m in (bnb.nn.Linear4bit(64, 8, quant_type="nf4"), bnb.nn.Linear8bitLt(64, 8, has_fp16_weights=False)):
            m.load_state_dict(lin.state_dict())
            m.to(device)(torch.randn(2, 64, device=device))
    except Exception as e:  # noqa: BLE001
        return None, f"bitsandbytes {bnb.__version__} does not run its 4-bit / 8-bit layers on {device} ({e})"
    return bnb, None


def quiet(transformers) -> None:
    import logging  # noqa: PLC0415

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*inputs will be cast.*")
    warnings.filterwarnings("ignore", message=".*inner dimension.*")
    warnings.filterwarnings("ignore", message=".*compute dtype.*")


class Run:
    """The device, the models and what the sections measured."""

    def __init__(self, torch, transformers, lowbit_nn, args, bnb, bnb_why: Optional[str], cli: Optional[str]):
        self.torch, self.tf, self.lnn, self.args = torch, transformers, lowbit_nn, args
        self.bnb, self.bnb_why, self.cli = bnb, bnb_why, cli
        self.device = args.device
        self.dtype = getattr(torch, args.dtype)
        self.models: Dict[str, Any] = {}
        self.results: Dict[str, Any] = {}

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def build(run: Run, root: str) -> str:
    torch, tf, a = run.torch, run.tf, run.args
    torch.manual_seed(a.seed)
    cfg = tf.LlamaConfig(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                         num_attention_heads=a.hidden // 64, num_key_value_heads=max(1, a.hidden // 128),
                         vocab_size=a.vocab, max_position_embeddings=PROMPT + max(TOKENS, a.new) + 8,
                         bos_token_id=1, eos_token_id=None, pad_token_id=0)  # no EOS: generate is plain greedy
    model = tf.LlamaForCausalLM(cfg).to(run.dtype)
    path = os.path.join(root, "float")
    model.save_pretrained(path)
    run.models["float"] = model.to(run.device).eval()
    n = sum(p.numel() for p in model.parameters())
    log(f"model: Llama, hidden {a.hidden}, intermediate {a.intermediate}, {a.layers} layers, "
        f"{cfg.num_attention_heads} heads ({cfg.num_key_value_heads} kv), vocabulary {a.vocab}, "
        f"{n / 1e6:.1f} M parameters, {a.dtype}, seed {a.seed}; saved to {path}")
    return path


# ------------------------------------------------------------------ loading


def cli_quantize(run: Run, src: str, dst: str, flags: List[str]) -> Optional[str]:
    """``lowbit quantize src dst flags``; the output folder, or None (a failure, or no CLI: said)."""
    if not run.cli:
        log(f"  lowbit quantize {' '.join(flags)}: not run: no lowbit CLI (set LOWBIT_CLI or build lowbit_cli)")
        return None
    t0 = time.perf_counter()
    p = subprocess.run([run.cli, "quantize", src, dst, *flags, "--no-report", "--force"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"lowbit quantize {' '.join(flags)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
        return None
    log(f"  lowbit quantize {' '.join(flags)} -> {dst} ({time.perf_counter() - t0:.1f} s)")
    return dst


def load(run: Run, name: str, fn: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    try:
        run.models[name] = fn().eval()
    except Exception as e:  # noqa: BLE001
        fail(f"{name}: loading failed: {type(e).__name__}: {str(e)[:400]}")
        return
    log(f"  {name:<16} loaded ({time.perf_counter() - t0:.1f} s)")


def load_models(run: Run, path: str, root: str) -> None:
    torch, tf, lnn = run.torch, run.tf, run.lnn
    auto = tf.AutoModelForCausalLM
    nf4 = tf.BitsAndBytesConfig(**NF4, bnb_4bit_compute_dtype=run.dtype)
    log("\n== loading")
    if run.bnb is not None:
        load(run, "bnb-nf4", lambda: auto.from_pretrained(path, quantization_config=nf4, device_map=run.device))
        load(run, "bnb-int8", lambda: auto.from_pretrained(path, quantization_config=tf.BitsAndBytesConfig(**INT8),
                                                           device_map=run.device))
    else:
        log(f"  bitsandbytes: {run.bnb_why}; its models are left out")
    load(run, "lowbit-nf4", lambda: lnn.from_pretrained(auto, path, quantization_config=nf4, device=run.device))
    load(run, "lowbit-int8", lambda: lnn.from_pretrained(auto, path, quantization_config=INT8, device=run.device))
    load(run, "lowbit-fp8", lambda: lnn.replace_linear(copy.deepcopy(run.models["float"]), "fp8"))
    cli_nf4 = cli_quantize(run, path, os.path.join(root, "cli-nf4"), ["--format", "nf4", "--double-quant"])
    if cli_nf4:
        load(run, "cli-nf4", lambda: lnn.from_pretrained(auto, cli_nf4, device=run.device))
        if run.bnb is not None:
            load(run, "cli-nf4-bnb", lambda: auto.from_pretrained(cli_nf4, device_map=run.device))
    cli_fp8 = cli_quantize(run, path, os.path.join(root, "cli-fp8"), ["--format", "fp8-block"])
    if cli_fp8:
        load(run, "cli-fp8", lambda: load_fp8_folder(run, path, cli_fp8))


def load_fp8_folder(run: Run, float_path: str, folder: str):
    """``lowbit quantize --format fp8-block``'s folder as LinearFP8 modules (docs/nn.md, "Replacing a model's
    layers"): the model built from its config (so its computed buffers are real), every Linear but lm_head made
    an empty LinearFP8, then the checkpoint's tensors assigned."""
    import safetensors.torch  # noqa: PLC0415

    torch, tf = run.torch, run.tf
    state = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        state.update(safetensors.torch.load_file(f))
    cfg = tf.AutoConfig.from_pretrained(folder)
    cfg.quantization_config = None
    model = tf.AutoModelForCausalLM.from_config(cfg).to(run.dtype)
    run.lnn.replace_linear(model, "fp8", quantize=False)
    if model.config.tie_word_embeddings and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, assign=True)
    return model.to(run.device)


# ------------------------------------------------------------------ checks


def greedy(run: Run, model, ids) -> Tuple[Any, List[Any]]:
    """32 greedy tokens through generate: (the new tokens [1, 32], the logits of each step)."""
    with run.torch.no_grad():
        out = model.generate(ids, attention_mask=run.torch.ones_like(ids), max_new_tokens=TOKENS, do_sample=False,
                             pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    return out.sequences[:, ids.shape[1]:].cpu(), [x[0].float().cpu() for x in out.logits]


def last_logits(run: Run, model, ids):
    with run.torch.no_grad():
        return model(ids).logits[0, -1].float().cpu()


def divergence(tokens, ref_tokens, logits, ref_logits) -> str:
    """Where two greedy runs part: the step, the reference's top-1/top-2 margin and the logits' difference there."""
    step = int((tokens != ref_tokens).nonzero()[0, 1])
    top = ref_logits[step].topk(2).values
    diff = (logits[step] - ref_logits[step]).abs().max().item()
    return (f"first differs at step {step}: reference's top-1/top-2 margin {(top[0] - top[1]).item():.2e}, "
            f"max |logit difference| there {diff:.2e}")


def check_nf4(run: Run, ids) -> None:
    log(f"\n== nf4: greedy {TOKENS} tokens and last-position logits, pairwise (tolerance {NF4_TOL:.0e})")
    names = [n for n in ("bnb-nf4", "lowbit-nf4", "cli-nf4", "cli-nf4-bnb") if n in run.models]
    gens = {n: greedy(run, run.models[n], ids) for n in names}
    logits = {n: last_logits(run, run.models[n], ids) for n in names}
    ref = last_logits(run, run.models["float"], ids)
    states = {n: {k: v.detach().cpu() for k, v in run.models[n].state_dict().items()} for n in names}
    worst, all_same = 0.0, True
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            r = rel(logits[b], logits[a])
            worst = max(worst, r)
            same = run.torch.equal(gens[a][0], gens[b][0])
            note = "" if same else "; " + divergence(gens[b][0], gens[a][0], gens[b][1], gens[a][1])
            state, equal = nf4_state_diff(run, states[b], states[a])
            if equal:
                who = "the same layers" if kernels(a) == kernels(b) else f"{kernels(b)} layers against {kernels(a)}"
                state = f"stored states equal: {who} computing in {run.args.dtype}"
            else:
                state = "stored states: " + state
            log(f"  {b:<12} vs {a:<12} logits rel {r:.2e}, tokens {'equal' if same else 'DIFFER'}{note}; {state}")
            if not same:
                all_same = False
                fail(f"nf4: {b} and {a} generate different tokens ({note[2:]})")
            if not r <= NF4_TOL:
                fail(f"nf4: {b} vs {a} logits differ by {r:.2e} relative (tolerance {NF4_TOL:.0e}; {state})")
    for n in names:
        log(f"  {n:<12} vs float        logits rel {rel(logits[n], ref):.2e} (the quantization's own error)")
    if names:
        log(f"  tokens ({names[0]}): {gens[names[0]][0][0].tolist()}")
    run.results["nf4"] = {"models": len(names), "worst": worst, "tokens_equal": all_same}
    if "lowbit-nf4" in gens:
        run.results["nf4_tokens"] = gens["lowbit-nf4"][0]


def kernels(name: str) -> str:
    """Whose layers compute an NF4 model: bitsandbytes' for the models transformers loaded, else lowbit's."""
    return "bitsandbytes'" if name.endswith("bnb") or name.startswith("bnb") else "lowbit's"


def nf4_state_diff(run: Run, sa: Dict[str, Any], sb: Dict[str, Any]) -> Tuple[str, bool]:
    """How two NF4 models' state dicts differ (both are bitsandbytes' layout): the 4-bit codes, the 8-bit codes
    of the absmax (double quant), the nested absmax and the offsets (the JSON's nested_offset); and whether they
    are all equal."""
    import json  # noqa: PLC0415

    torch = run.torch
    count = {"4-bit codes": [0, 0], "absmax codes": [0, 0], "nested absmax": [0, 0], "offsets": [0, 0]}
    for k, va in sa.items():
        vb = sb.get(k)
        if vb is None or vb.shape != va.shape:
            continue
        if k.endswith(".weight.absmax"):
            what = "absmax codes"
        elif k.endswith(".weight.nested_absmax"):
            what = "nested absmax"
        elif k.endswith(".weight") and k + ".absmax" in sa:
            what = "4-bit codes"
        elif ".weight.quant_state.bitsandbytes__" in k:
            oa = json.loads(bytes(va.tolist())).get("nested_offset")
            ob = json.loads(bytes(vb.tolist())).get("nested_offset")
            count["offsets"][0] += oa != ob
            count["offsets"][1] += 1
            continue
        else:
            continue
        ua, ub = va.contiguous().view(torch.uint8), vb.contiguous().view(torch.uint8)
        count[what][0] += (ua != ub).sum().item() // (va.element_size() if what == "nested absmax" else 1)
        count[what][1] += va.numel() * (1 if what == "nested absmax" else va.element_size())
    text = ", ".join(f"{what} {d} of {n} differ" for what, (d, n) in count.items() if n)
    return text, count["4-bit codes"][1] > 0 and not any(d for d, _ in count.values())


def _block_amax(torch, v, rows: int, cols: int):
    """Each element's max |v| over its rows x cols tile (ragged edges smaller), shaped like v."""
    n, k = v.shape
    a = torch.nn.functional.pad(v.abs(), (0, -k % cols, 0, -n % rows))
    a = a.reshape(a.shape[0] // rows, rows, a.shape[1] // cols, cols).amax(dim=(1, 3))
    return a.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:n, :k]


def layer_bound(run: Run, fmt: str, x, w, out):
    """The documented error bound of one quantized layer's output (module docstring, section 2), element by
    element, for input x [M, K] and float weight w [N, K] (float64)."""
    torch = run.torch
    mag = x.abs() @ w.abs().T
    if fmt == "int8":
        ex = x.abs().amax(dim=1, keepdim=True).expand_as(x) / 254  # half a step of the row's absmax (outliers: 0)
        w16 = w.abs() * (1 + 2.0**-11)  # the float16 cast first
        ew = 2.0**-11 * w.abs() + 2.0**-24 + w16.amax(dim=1, keepdim=True).expand_as(w) / 254
        accum = 1e-5
    else:  # e4m3: 2^-4 relative plus half the subnormal step of the block's scale
        ex = 2.0**-4 * x.abs() + 2.0**-10 * _block_amax(torch, x, 1, 128).clamp(min=1e-4) / 448
        ew = 2.0**-4 * w.abs() + 2.0**-10 * _block_amax(torch, w, 128, 128).clamp(min=1e-4) / 448
        accum = 1 / 512 if run.device == "cuda" else 1e-5
    bound = ex @ w.abs().T + x.abs() @ ew.T + ex @ ew.T + accum * mag
    unit = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[out.dtype]
    return bound + 2 * unit * (x @ w.T).abs() + 2 * unit * mag


def stored_weight(run: Run, fmt: str, m):
    """(the weight a quantized layer multiplies by, float64 [N, K]; its per-element documented error bound against
    the float weight w, as a function of w)."""
    torch = run.torch
    if fmt == "int8":
        scb = m.weight.SCB.double()[:, None]
        deq = m.weight.data.double() * scb / 127
        # half a code step of the float16 weight's row absmax (SCB), after the float16 cast itself
        return deq, lambda w: scb / 254 * (1 + 2.0**-12) + 2.0**-11 * w.abs() + 2.0**-25
    n, k = m.weight.shape
    s = m.weight_scale_inv.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
    deq = m.weight.to(torch.float32).double() * s
    # e4m3: half an ulp (2^-4 of the value) or, below the normal range, half the subnormal step (2^-10 of the scale)
    return deq, lambda w: 2.0**-4 * w.abs() + 2.0**-10 * s + 2.0**-30


def activation_variance(run: Run, fmt: str, m, x):
    """Each activation's rounding variance (step^2 / 12) under the format's documented quantizer, [M, K]."""
    torch = run.torch
    if fmt == "int8":  # rows in steps of their absmax / 127; the threshold's outlier columns stay float
        cols = (x.abs() >= m.threshold).any(dim=0) if m.threshold > 0 else torch.zeros_like(x[0], dtype=torch.bool)
        amax = x.abs().masked_fill(cols, 0).amax(dim=1, keepdim=True)
        return ((amax / 127) ** 2 / 12).expand_as(x).masked_fill(cols, 0)
    # e4m3 in 1x128 blocks of scale s = max(amax, 1e-4) / 448: a step of 2^(e - 3) * s for |x| / s in [2^e, 2^(e+1)),
    # e >= -6; 2^-9 * s below
    s = _block_amax(torch, x, 1, 128).clamp(min=1e-4) / 448
    e = torch.floor(torch.log2((x.abs() / s).clamp(min=2.0**-6)))
    return (2.0 ** (e - 3) * s) ** 2 / 12


def check_layers(run: Run, name: str, fmt: str, ids) -> Optional[Dict[str, Any]]:
    """Every quantized layer of run.models[name] on the inputs it gets in the model, against its float layer:

    - ``bound``: the worst |output error| / the documented bound (layer_bound), over every layer and element;
    - ``weight``: the worst |stored weight - float weight| / the format's documented rounding of it;
    - ``rounding``: the range over layers of |output - x · stored weightᵀ| (RMS) over what the activations'
      rounding gives at the documented steps (each activation off by a uniform error within half a step) and the
      output's own rounding: about 1 where the layer quantizes its input as documented and nothing else moves its
      output (``rounding_fail``: the first layer outside ROUNDING, CUDA's FP8 accumulation error allowed for);
    - ``rel``: the worst layer's relative L2 against the float layer."""
    torch = run.torch
    model, float_modules = run.models[name], dict(run.models["float"].named_modules())
    kinds = run.lnn.Linear8bitLt if fmt == "int8" else run.lnn.LinearFP8
    seen: List[Tuple[str, Any, Any, Any]] = []
    hooks = [m.register_forward_hook(lambda mod, args, out, n=n: seen.append((n, mod, args[0].detach(),
                                                                               out.detach())))
             for n, m in model.named_modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    if not seen:
        fail(f"{name}: no {kinds.__name__} layer ran")
        return None
    out = {"bound": (0.0, ""), "weight": (0.0, ""), "rounding": (float("inf"), 0.0), "rel": 0.0}
    for n, m, x, y in seen:
        lin = float_modules[n]
        w = lin.weight.detach().double()
        bias = None if lin.bias is None else lin.bias.detach().double()
        x64 = x.reshape(-1, x.shape[-1]).double()
        y64 = y.reshape(-1, y.shape[-1]).double()
        ref = x64 @ w.T + (0 if bias is None else bias)
        ratio = ((y64 - ref).abs() / layer_bound(run, fmt, x64, w, y)).max().item()
        if ratio > out["bound"][0]:
            out["bound"] = (ratio, n)
        deq, w_bound = stored_weight(run, fmt, m)
        ratio = ((deq - w).abs() / w_bound(w)).max().item()
        if ratio > out["weight"][0]:
            out["weight"] = (ratio, n)
        noise = (y64 - (x64 @ deq.T + (0 if bias is None else bias))).norm().item()
        expected = (activation_variance(run, fmt, m, x64) @ (deq**2).T).sum().item()
        unit = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[y.dtype]
        expected = (expected + (unit * y64).norm().item() ** 2 / 3) ** 0.5  # the output's own rounding
        accum = (1 / 512 if fmt == "fp8" and run.device == "cuda" else 1e-5) * (x64.abs() @ deq.abs().T).norm().item()
        r = noise / expected
        out["rounding"] = (min(out["rounding"][0], r), max(out["rounding"][1], r))
        if not ROUNDING[0] * expected <= noise <= ROUNDING[1] * (expected**2 + accum**2) ** 0.5:
            out["rounding_fail"] = out.get("rounding_fail") or (n, r, accum / expected)
        out["rel"] = max(out["rel"], rel(y64, ref))
    return out


def check_formats(run: Run, ids) -> None:
    log("\n== int8 and fp8-block against the float model: each quantized layer within its documented bound")
    ref = last_logits(run, run.models["float"], ids)
    logits = {}
    for name, fmt in (("lowbit-int8", "int8"), ("bnb-int8", "int8"), ("lowbit-fp8", "fp8"), ("cli-fp8", "fp8")):
        if name not in run.models:
            continue
        logits[name] = last_logits(run, run.models[name], ids)
        r = rel(logits[name], ref)
        line = f"  {name:<12} logits rel {r:.2e} vs float"
        if name.startswith("lowbit") or name.startswith("cli"):
            got = check_layers(run, name, fmt, ids)
            if got is not None:
                (bound, where), (wmax, wwhere), (lo, hi) = got["bound"], got["weight"], got["rounding"]
                line += (f"; layers: output error {bound:.3f} of its documented bound ({where}), stored weight "
                         f"{wmax:.3f} of its rounding bound, output noise / activation rounding {lo:.2f}-{hi:.2f}, "
                         f"worst layer rel L2 {got['rel']:.2e}")
                if not bound <= 1:
                    fail(f"{name}: layer {where} exceeds its documented error bound ({bound:.3f} of it)")
                if not wmax <= 1:
                    fail(f"{name}: layer {wwhere}'s stored weight is off the float weight by more than the format's "
                         f"rounding ({wmax:.3f} of it)")
                if "rounding_fail" in got:
                    n, r_n, acc = got["rounding_fail"]
                    fail(f"{name}: layer {n}'s output noise is {r_n:.2f} times what the activations' rounding gives "
                         f"(expected {ROUNDING[0]}-{ROUNDING[1]}; the accumulation's documented error adds up to "
                         f"{acc:.2f} of it)")
                run.results[name] = {"logits": r, "bound": bound, "weight": wmax, "rounding": (lo, hi)}
        else:
            run.results[name] = {"logits": r}
        log(line)
    if "lowbit-int8" in logits and "bnb-int8" in logits:
        r = rel(logits["lowbit-int8"], logits["bnb-int8"])
        run.results["int8-vs-bnb"] = r
        log(f"  lowbit-int8 vs bnb-int8 logits rel {r:.2e} (not a check: LLM.int8 quantizes each layer's input on "
            "the fly, so weight codes that tie the other way (docs/nn.md) and, in a float32 model, bitsandbytes' "
            "float16 cast of the activations flip activation codes by whole steps; docs/formats.md, \"In a model\")")
    if "lowbit-fp8" in logits and "cli-fp8" in logits:
        a, b = dict(run.models["lowbit-fp8"].named_modules()), dict(run.models["cli-fp8"].named_modules())
        codes = total = 0
        for n, m in a.items():
            if isinstance(m, run.lnn.LinearFP8):
                codes += (m.weight.view(run.torch.uint8) != b[n].weight.view(run.torch.uint8)).sum().item()
                codes += (m.weight_scale_inv != b[n].weight_scale_inv).sum().item()
                total += m.weight.numel()
        r = rel(logits["cli-fp8"], logits["lowbit-fp8"])
        run.results["fp8-cli"] = r
        log(f"  cli-fp8 vs lowbit-fp8: {codes} of {total} codes and scales differ, logits rel {r:.2e}")
        if codes or not r <= NF4_TOL:
            fail(f"fp8: lowbit quantize's checkpoint differs from replace_linear's ({codes} codes or scales, "
                 f"logits {r:.2e})")


def decode_ms(run: Run, model, ids, new: int) -> float:
    """Milliseconds per token of ``new`` greedy steps through the KV cache after the prompt ``ids``."""
    torch = run.torch
    # transformers 5.25 renamed the forward's past_key_values (and the output's field) to cache
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        past, nxt = getattr(out, key), out.logits[:, -1].argmax(-1, keepdim=True)
        run.sync()
        t0 = time.perf_counter()
        for _ in range(new):
            out = model(nxt, use_cache=True, **{key: past})
            past, nxt = getattr(out, key), out.logits[:, -1].argmax(-1, keepdim=True)
        run.sync()
        return (time.perf_counter() - t0) * 1e3 / new


def latency(run: Run) -> None:
    torch, a = run.torch, run.args
    names = [n for n in ("float", "lowbit-nf4", "bnb-nf4", "lowbit-int8", "bnb-int8", "lowbit-fp8")
             if n in run.models]
    log(f"\n== decode latency: {PROMPT}-token prompt, then {a.new} tokens through the KV cache; median of "
        f"{a.runs} rounds, the models in turns ({run.device}, {a.dtype})")
    gen = torch.Generator().manual_seed(a.seed + 2)
    ms: Dict[Tuple[str, int], float] = {}
    for batch in BATCHES:
        ids = torch.randint(3, a.vocab, (batch, PROMPT), generator=gen).to(run.device)
        times: Dict[str, List[float]] = {n: [] for n in names}
        for n in names:  # warm-up
            decode_ms(run, run.models[n], ids, 2)
        for _ in range(a.runs):
            for n in names:
                times[n].append(decode_ms(run, run.models[n], ids, a.new))
        for n in names:
            ms[(n, batch)] = statistics.median(times[n])
    fl = "float" + ("16" if run.dtype == torch.float16 else "32" if run.dtype == torch.float32 else "")
    cols = ["model"] + [f"b{b} ms/token" for b in BATCHES] + [f"b{b} x {fl}" for b in BATCHES] + \
        [f"b{b} x bnb" for b in BATCHES]
    log("")
    log("| " + " | ".join(cols) + " |")
    log("|" + "---|" * len(cols))
    for n in names:
        peer = {"lowbit-nf4": "bnb-nf4", "lowbit-int8": "bnb-int8"}.get(n)
        cells = [n] + [f"{ms[(n, b)]:.2f}" for b in BATCHES]
        cells += [f"{ms[('float', b)] / ms[(n, b)]:.2f}x" for b in BATCHES]
        cells += [f"{ms[(peer, b)] / ms[(n, b)]:.2f}x" if (peer, b) in ms else "-" for b in BATCHES]
        log("| " + " | ".join(cells) + " |")
    log(f"(x {fl}: the float model's time / this model's; x bnb: bitsandbytes' model of the same format / lowbit's; "
        "above 1: lowbit faster)")
    if "bnb-nf4" not in run.models:
        log(f"bitsandbytes: {run.bnb_why}")
    run.results["latency"] = ms


def check_compile(run: Run, ids) -> None:
    torch = run.torch
    tol = 1e-4 if run.dtype == torch.float32 else 1e-2
    log(f"\n== torch.compile(lowbit-nf4, fullgraph=True): greedy {TOKENS} tokens on a fixed-size buffer, against "
        f"eager (logits tolerance {tol:.0e})")
    model = run.models["lowbit-nf4"]
    buf = torch.zeros(1, PROMPT + TOKENS, dtype=torch.long, device=run.device)
    buf[:, :PROMPT] = ids

    def decode(fn):
        b = buf.clone()
        with torch.no_grad():
            for i in range(TOKENS):
                b[0, PROMPT + i] = fn(b).logits[0, PROMPT + i - 1].argmax()
            return b[0, PROMPT:].cpu(), fn(b).logits.float().cpu()

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            compiled(input_ids=buf, use_cache=False)
    except Exception as e:  # noqa: BLE001 - a graph break under fullgraph=True, or a compile failure
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        fail(f"compile: {type(e).__name__}: {first}")
        run.results["compile"] = "FAILED"
        return
    compile_s = time.perf_counter() - t0
    tokens, logits = decode(lambda b: compiled(input_ids=b, use_cache=False))
    e_tokens, e_logits = decode(lambda b: model(input_ids=b, use_cache=False))
    r = rel(logits, e_logits)
    same = torch.equal(tokens, e_tokens)
    log(f"  compiled in {compile_s:.1f} s, no graph break; tokens {'equal' if same else 'DIFFER'}, logits rel "
        f"{r:.2e} (all {PROMPT + TOKENS} positions)")
    gen_tokens = run.results.get("nf4_tokens")
    if gen_tokens is not None and not torch.equal(e_tokens, gen_tokens[0]):
        log("  note: eager decoding without the cache gives other tokens than generate with it")
    if not same:
        fail("compile: the compiled model's greedy tokens differ from eager's")
    if not r <= tol:
        fail(f"compile: logits differ from eager's by {r:.2e} relative (tolerance {tol:.0e})")
    run.results["compile"] = f"ok ({compile_s:.0f} s, logits {r:.1e})"


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default=None, choices=("float16", "bfloat16", "float32"),
                    help="the model's dtype (default: float16 on cuda, float32 on cpu)")
    ap.add_argument("--quick", action="store_true", help="a smaller model, 8 timed tokens, 2 rounds")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile check")
    ap.add_argument("--keep", default=None, help="folder for the checkpoints (kept); default: a temporary one")
    ap.add_argument("--hidden", type=int, default=None, help="hidden size, a multiple of 128 (default 512)")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default 4)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary (default 4096)")
    ap.add_argument("--new", type=int, default=None, help="tokens timed per decode run (default: cpu 16, cuda 32)")
    ap.add_argument("--runs", type=int, default=None, help="rounds of decode timing (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's choice)")
    a = ap.parse_args()
    small = a.quick
    a.hidden = a.hidden or (256 if small else 512)
    a.layers = a.layers or (2 if small else 4)
    a.vocab = a.vocab or (1000 if small else 4096)
    a.new = a.new or (8 if small else 32 if a.device == "cuda" else 16)
    a.runs = a.runs or (2 if small else 3)
    a.intermediate = a.hidden * 11 // 4 // 64 * 64
    a.dtype = a.dtype or ("float16" if a.device == "cuda" else "float32")
    if a.hidden % 128:
        ap.error("--hidden must be a multiple of 128")
    t_start = time.perf_counter()

    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: e2e_model skipped: torch is not importable ({e})")
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        log("summary: e2e_model FAILED: --device cuda but torch sees no CUDA device")
        return 1
    try:
        import transformers  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        log(f"summary: e2e_model skipped: transformers is not importable ({type(e).__name__}: {e})")
        return 0
    lowbit, where = bg.find_lowbit()
    if lowbit is None:
        log(f"summary: e2e_model FAILED: {where}")
        return 1
    import lowbit.nn as lnn  # noqa: PLC0415

    quiet(transformers)
    bnb, bnb_why = bnb_probe(torch, a.device)
    run = Run(torch, transformers, lnn, a, bnb, bnb_why, find_cli())
    dev = torch.cuda.get_device_name(0) if a.device == "cuda" else bg_cpu_model()
    log(f"e2e_model: {dev}, {torch.get_num_threads() if a.device == 'cpu' else ''}"
        f"{' threads, ' if a.device == 'cpu' else ', '}torch {torch.__version__}, transformers "
        f"{transformers.__version__}, bitsandbytes {bnb.__version__ if bnb else bnb_why}, lowbit {where}, "
        f"CLI {run.cli or 'not found'}")

    with contextlib.ExitStack() as stack:
        root = a.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="lowbit-e2e-"))
        os.makedirs(root, exist_ok=True)
        path = build(run, root)
        try:
            load_models(run, path, root)
        except Exception as e:  # noqa: BLE001 - what loaded is still checked
            fail(f"loading: {type(e).__name__}: {str(e)[:400]}")
        ids = torch.randint(3, a.vocab, (1, PROMPT), generator=torch.Generator().manual_seed(a.seed + 1))
        ids = ids.to(a.device)
        sections = [("nf4", lambda: check_nf4(run, ids)), ("formats", lambda: check_formats(run, ids)),
                    ("latency", lambda: latency(run))]
        if a.no_compile:
            run.results["compile"] = "skipped (--no-compile)"
        elif "lowbit-nf4" in run.models:
            sections.append(("compile", lambda: check_compile(run, ids)))
        for name, fn in sections:
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - one section's crash is its failure; the others still run
                fail(f"{name}: {type(e).__name__}: {str(e)[:400]}")
            log(f"  ({name}: {time.perf_counter() - t0:.0f} s)")

    res = run.results
    parts = []
    if "nf4" in res:
        k = res["nf4"]["models"]
        if k < 2:
            parts.append(f"nf4 {k} model: nothing to compare it with (no bitsandbytes, no CLI)")
        else:
            same = "equal" if res["nf4"]["tokens_equal"] else "DIFFER"
            parts.append(f"nf4 {k} models: tokens {same}, logits max rel {res['nf4']['worst']:.1e} (tol {NF4_TOL:.0e})")
    for n in ("lowbit-int8", "lowbit-fp8"):
        if n in res:
            lo, hi = res[n]["rounding"]
            parts.append(f"{n} logits rel {res[n]['logits']:.1e} vs float, layers {res[n]['bound']:.2f} of bound, "
                         f"weights {res[n]['weight']:.2f} of rounding, noise {lo:.2f}-{hi:.2f} of rounding")
    lat = res.get("latency", {})
    for b in BATCHES:
        if ("lowbit-nf4", b) in lat:
            s = f"b{b} nf4 {lat[('float', b)] / lat[('lowbit-nf4', b)]:.2f}x float"
            if ("bnb-nf4", b) in lat:
                s += f" {lat[('bnb-nf4', b)] / lat[('lowbit-nf4', b)]:.2f}x bnb"
            parts.append(s)
    parts.append(f"compile {res.get('compile', 'not run')}")
    verdict = f"FAILED ({len(failures)})" if failures else "ok"
    log(f"\nsummary: e2e_model {verdict}; {a.device} {a.dtype}; " + "; ".join(parts) +
        f"; {time.perf_counter() - t_start:.0f} s")
    return 1 if failures else 0


def bg_cpu_model() -> str:
    from bench_optim_cpu import cpu_model  # noqa: PLC0415

    return cpu_model()


if __name__ == "__main__":
    sys.exit(main())
