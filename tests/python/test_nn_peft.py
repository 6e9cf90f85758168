"""QLoRA with peft on lowbit.nn's modules (CPU, a tiny random Llama loaded by lowbit.nn.from_pretrained): stock peft's
prepare_model_for_kbit_training and get_peft_model take lowbit's Linear4bit (peft wraps it in its plain lora.Linear);
the adapters train with lowbit.optim.PagedAdamW8bit and the loss goes down, step for step as on bitsandbytes' own
Linear4bit; register_peft's layers merge and unmerge by requantizing; all of it with bitsandbytes not importable."""

import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
peft = pytest.importorskip("peft", reason="peft is not installed")
pytest.importorskip("safetensors", reason="safetensors is not installed")

import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402
import lowbit.optim  # noqa: E402
from hf_models import INT8, NF4, VOCAB, bnb_reason, quantized_checkpoint, quiet_transformers, tiny_llama  # noqa: E402

quiet_transformers()
BNB_REASON = bnb_reason()
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STEPS = 30
# Both runs start from the same codes and the same adapters (same seed) and see the same batches; their base layers'
# products differ only in float32 summation order (about 3e-7 relative on the logits, test_nn_hf.py), so the first
# losses agree to ~1e-7. Adam divides each gradient by its running magnitude, and the 8-bit states round to a code,
# so such differences carry into later steps without growing much: 30 steps stayed within 3e-6 relative. 1e-4 leaves
# room and is far below what a wrong base layer or update moves the loss by (it falls by about 0.2 relative here).
TOL_LOSS = 1e-4


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft")
    paths = {"fp32": tiny_llama(root / "fp32")}
    for name, config in (("nf4", NF4), ("int8", INT8)):
        paths[name] = quantized_checkpoint(paths["fp32"], root / name, config, BNB_REASON is None)
    return paths


def _lora(model, register=False, **kwargs):
    """peft's QLoRA recipe on ``model``: prepare_model_for_kbit_training, then LoRA (r 8) on every projection, the
    adapters drawn from seed 0."""
    model = peft.prepare_model_for_kbit_training(model)
    config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM",
                             **kwargs)
    if register:
        lnn.register_peft(config)
    torch.manual_seed(0)
    return peft.get_peft_model(model, config)


def _batch():
    return torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))


def _train(model, steps=STEPS):
    """The losses of ``steps`` steps of PagedAdamW8bit on one batch; 8-bit states for the adapters too (they hold
    512 to 1024 elements, under the default min_8bit_size)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = lowbit.optim.PagedAdamW8bit(params, lr=3e-3, min_8bit_size=256)
    data = _batch()
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(input_ids=data, labels=data).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(opt.state[p]["state1"].dtype == torch.uint8 for p in params)
    return torch.tensor(losses, dtype=torch.float64)


def _lowbit(path, **kwargs):
    return lnn.from_pretrained(transformers.AutoModelForCausalLM, path, **kwargs)


@pytest.fixture(scope="module")
def lowbit_run(ckpt):
    model = _lora(_lowbit(ckpt["nf4"]))
    before = {n: t.clone() for n, t in model.state_dict().items() if "lora_" not in n}
    return model, before, _train(model)


def test_stock_peft_wraps_lowbit_layers(ckpt):
    """No registration: peft wraps Linear4bit (a torch.nn.Linear) in its plain lora.Linear; only the adapters train;
    prepare_model_for_kbit_training upcasts the float parameters and leaves the codes (a bfloat16 quant_storage
    included: peft knows Params4bit by its class name)."""
    base = _lowbit(ckpt["nf4"], dtype=torch.bfloat16)
    codes = {n: m.weight for n, m in base.named_modules() if isinstance(m, lnn.Linear4bit)}
    model = _lora(base)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert type(layer) is peft.tuners.lora.Linear and type(layer.base_layer) is lnn.Linear4bit
    assert layer.base_layer.weight is codes["model.layers.0.self_attn.q_proj"]
    assert all(type(w) is lnn.Params4bit and w.dtype == torch.uint8 for w in codes.values())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * len(TARGETS) * 2
    assert model.base_model.model.model.norm.weight.dtype == torch.float32  # upcast by prepare_model_for_kbit_training

    storage = _lowbit(ckpt["fp32"], quantization_config=dict(NF4, bnb_4bit_quant_storage="bfloat16"),
                      dtype=torch.bfloat16)
    w = storage.model.layers[1].mlp.up_proj.weight
    raw = w.view(torch.uint8).clone()
    peft.prepare_model_for_kbit_training(storage)
    assert storage.model.layers[1].mlp.up_proj.weight is w and w.dtype == torch.bfloat16
    assert torch.equal(w.view(torch.uint8), raw) and storage.model.norm.weight.dtype == torch.float32


def test_qlora_loss_goes_down(lowbit_run):
    model, before, losses = lowbit_run
    assert torch.isfinite(losses).all()
    assert losses[-5:].mean() < 0.9 * losses[:5].mean() and losses[-1] < 0.85 * losses[0]
    after = {n: t for n, t in model.state_dict().items() if "lora_" not in n}
    assert sorted(after) == sorted(before)
    for name, value in before.items():  # the base model, codes and all, is frozen
        assert torch.equal(value, after[name]), name


@pytest.mark.skipif(BNB_REASON is not None, reason=str(BNB_REASON))
def test_qlora_matches_bitsandbytes(ckpt, lowbit_run):
    theirs = transformers.AutoModelForCausalLM.from_pretrained(ckpt["nf4"], device_map="cpu")
    model = _lora(theirs)
    assert type(model.base_model.model.model.layers[0].self_attn.q_proj).__module__ == "peft.tuners.lora.bnb"
    losses = _train(model)
    ours = lowbit_run[2]
    assert ((ours - losses).abs() / losses).max() < TOL_LOSS, (ours, losses)


def test_gradient_checkpointing(ckpt, lowbit_run):
    """transformers' gradient checkpointing recomputes the lowbit layers' forward in the backward: the same steps."""
    model = _lora(_lowbit(ckpt["nf4"]))
    base = model.get_base_model()
    if hasattr(base, "activation_checkpointing_enable"):  # transformers' name from 5.23 on
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert any(getattr(m, "gradient_checkpointing", False) for m in base.modules())
    losses = _train(model, steps=4)
    torch.testing.assert_close(losses, lowbit_run[2][:4], rtol=1e-6, atol=0)


def _reference(base, weight):
    """The module that quantizing ``weight`` [N, K] like ``base``'s weight gives (the documented route)."""
    if isinstance(base, lnn.Linear4bit):
        qs = base.weight.quant_state
        ref = lnn.Linear4bit(base.in_features, base.out_features, False, quant_type=qs.quant_type,
                             compress_statistics=qs.nested)
    else:
        ref = lnn.Linear8bitLt(base.in_features, base.out_features, False, has_fp16_weights=False)
    ref.load_state_dict({"weight": weight})
    return ref.to("cpu")


def _dequantized(base):
    w = base.weight
    if isinstance(base, lnn.Linear4bit):
        return F.dequantize_4bit(w, w.quant_state).float()
    return F.int8_vectorwise_dequant(w, w.SCB).float()


def _same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sorted(sa) == sorted(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", ["nf4", "int8"])
def test_register_peft_merges_by_requantizing(ckpt, name):
    model = _lora(_lowbit(ckpt[name]), register=True)
    layer = model.base_model.model.model.layers[1].mlp.down_proj
    assert type(layer).__name__ == "QuantizedLoraLinear" and isinstance(layer, peft.tuners.lora.Linear)
    _train(model, steps=3)
    model.eval()
    data = _batch()
    with torch.no_grad():
        delta = layer.get_delta_weight("default").float()
        assert delta.abs().max() > 0
        w0 = _dequantized(layer.base_layer)
        with pytest.warns(UserWarning, match="requantizes its weight"):
            model.merge_adapter()
        assert layer.merged and _same(layer.base_layer, _reference(layer.base_layer, w0 + delta))
        merged_logits = model(data).logits
        w1 = _dequantized(layer.base_layer)
        model.unmerge_adapter()
        assert not layer.merged and _same(layer.base_layer, _reference(layer.base_layer, w1 - delta))
        unmerged = model(data).logits
        merged = model.merge_and_unload()
        assert type(merged.model.layers[1].mlp.down_proj) is type(layer.base_layer)
        assert not any("lora_" in n for n in merged.state_dict())
        # merging requantizes: the outputs move by the format's rounding of the sum, not more
        bound = 0.25 if name == "nf4" else 0.05
        assert ((merged_logits - unmerged).norm() / unmerged.norm()).item() < bound
        assert ((merged(data).logits - unmerged).norm() / unmerged.norm()).item() < bound


def test_register_peft_refuses(ckpt):
    with pytest.raises(TypeError, match="register_peft: config must be a peft LoraConfig"):
        lnn.register_peft({"r": 8})
    with pytest.raises(NotImplementedError, match="DoRA .use_dora=True. on lowbit.nn's quantized layers"):
        _lora(_lowbit(ckpt["nf4"]), register=True, use_dora=True)


def test_docs_examples(ckpt, tmp_path, monkeypatch):
    """docs/hf.md's ```python blocks, in order, in one namespace: its checkpoint directories are the tiny model's."""
    import re

    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "hf.md")
    with open(doc) as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.M | re.S)
    assert len(blocks) == 3
    (tmp_path / "llama-fp32").symlink_to(ckpt["fp32"])
    (tmp_path / "llama-nf4").symlink_to(ckpt["nf4"])
    monkeypatch.chdir(tmp_path)
    data = _batch()
    namespace = {"batches": [{"input_ids": data, "attention_mask": torch.ones_like(data), "labels": data}] * 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # merging's rounding; CPU states not paged
        for block in blocks:
            exec(compile(block, doc, "exec"), namespace)  # noqa: S102
    assert namespace["out"].shape == (1, 4 + 16)
    assert type(namespace["again"].model.layers[0].mlp.up_proj) is lnn.Linear4bit
    assert (tmp_path / "llama-nf4-lowbit" / "model.safetensors").exists()
    assert type(namespace["merged"].model.layers[1].self_attn.o_proj) is lnn.Linear4bit


_NO_BNB = r"""
import sys
sys.modules["bitsandbytes"] = None  # import bitsandbytes now raises ImportError
import torch, transformers, peft, lowbit.nn as lnn, lowbit.optim
transformers.utils.logging.set_verbosity_error()
model = lnn.from_pretrained(transformers.AutoModelForCausalLM, sys.argv[1])
model = peft.prepare_model_for_kbit_training(model)
config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=sys.argv[2].split(","),
                         task_type="CAUSAL_LM")
torch.manual_seed(0)
model = peft.get_peft_model(model, lnn.register_peft(config))
opt = lowbit.optim.PagedAdamW8bit([p for p in model.parameters() if p.requires_grad], lr=3e-3, min_8bit_size=256)
data = torch.load(sys.argv[3])
losses = []
for _ in range(3):
    loss = model(input_ids=data, labels=data).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
model.merge_and_unload()
torch.save({"losses": losses, "bitsandbytes": sys.modules["bitsandbytes"]}, sys.argv[4])
"""


def test_without_bitsandbytes(ckpt, lowbit_run, tmp_path):
    torch.save(_batch(), tmp_path / "batch.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1")
    args = [ckpt["nf4"], ",".join(TARGETS), str(tmp_path / "batch.pt"), str(tmp_path / "out.pt")]
    done = subprocess.run([sys.executable, "-c", _NO_BNB, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    assert got["bitsandbytes"] is None
    torch.testing.assert_close(torch.tensor(got["losses"], dtype=torch.float64), lowbit_run[2][:3], rtol=1e-6, atol=0)
