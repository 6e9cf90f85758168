"""lowbit.nn.from_pretrained on a tiny random Llama: checkpoints quantized by transformers with bitsandbytes (4-bit
NF4 with double quant, LLM.int8) load into lowbit's modules and give bitsandbytes' logits and greedy tokens; float
checkpoints quantize on load as transformers + bitsandbytes would; state dicts round-trip through save_pretrained;
skip modules stay torch.nn.Linear; bad configs and checkpoints are errors naming what is wrong; all of it with
bitsandbytes not importable (a subprocess). The comparisons with bitsandbytes skip where it cannot run on this machine;
the checkpoints are then written by lowbit (quantized on load, saved by save_pretrained: the same layout)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")

import lowbit.nn as lnn  # noqa: E402
from hf_models import FP4, INT8, NF4, bnb_reason, quantized_checkpoint, quiet_transformers, tiny_llama  # noqa: E402

quiet_transformers()

TOKENS = 16  # greedy tokens compared
LINEARS = 14  # q, k, v, o, gate, up, down in each of the 2 layers; lm_head stays float
# lowbit's CPU 4-bit matmul and bitsandbytes' use the same codes and both compute in float32: the logits differ by
# the summation order (about 3e-7 relative here); 1e-3 also covers double quant quantized on load, where the nested
# absmax's offset (a float32 mean) can differ by an ulp between the two (about 1e-4 here).
TOL_4BIT = 1e-3
# LLM.int8 quantizes the activations' rows too: bitsandbytes casts them to float16 first, lowbit quantizes the float32
# values, so a code within float16's rounding of a midpoint rounds apart (one step of a row's absmax / 127): about
# 6e-3 relative on these logits; 2e-2 leaves room, and is far below an error in the weights (which moves them by O(1)).
TOL_INT8 = 2e-2


BNB_REASON = bnb_reason()
needs_bnb = pytest.mark.skipif(BNB_REASON is not None, reason=str(BNB_REASON))


def _bnb_load(path, **kwargs):
    return transformers.AutoModelForCausalLM.from_pretrained(path, device_map="cpu", **kwargs)


def _lowbit(path, **kwargs):
    return lnn.from_pretrained(transformers.AutoModelForCausalLM, path, **kwargs)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The tiny model in float32, and quantized (by transformers + bitsandbytes where bitsandbytes runs here, else by
    lowbit: hf_models.quantized_checkpoint)."""
    root = tmp_path_factory.mktemp("hf")
    paths = {"fp32": tiny_llama(root / "fp32")}
    for name, config in (("nf4", NF4), ("int8", INT8)):
        paths[name] = quantized_checkpoint(paths["fp32"], root / name, config, BNB_REASON is None)
    return paths


@pytest.fixture(scope="module")
def x():
    return torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(3))


def _logits(model, x):
    with torch.no_grad():
        return model(x).logits.float()


def _greedy(model, x):
    with torch.no_grad():
        return model.generate(x[:1], max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False, pad_token_id=0)


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def _kinds(model):
    return {name: type(m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


# ------------------------------------------------------------- checkpoints quantized by transformers + bitsandbytes


@needs_bnb
@pytest.mark.parametrize("name", ["nf4", "int8"])
def test_prequantized_matches_bitsandbytes(ckpt, x, name):
    ours, theirs = _lowbit(ckpt[name]), _bnb_load(ckpt[name])
    kinds = _kinds(ours)
    want = lnn.Linear4bit if name == "nf4" else lnn.Linear8bitLt
    assert sum(k is want for k in kinds.values()) == LINEARS and kinds["lm_head"] is torch.nn.Linear
    if name == "nf4":
        w = ours.model.layers[1].mlp.down_proj.weight
        assert w.quant_type == "nf4" and w.compress_statistics and w.dtype == torch.uint8
    assert _rel(_logits(ours, x), _logits(theirs, x)) < (TOL_4BIT if name == "nf4" else TOL_INT8)
    got = _greedy(ours, x)
    assert got.shape[1] == x.shape[1] + TOKENS
    assert torch.equal(got, _greedy(theirs, x))


@pytest.mark.parametrize("name", ["nf4", "int8"])
def test_state_dict_round_trip(ckpt, x, name, tmp_path):
    """The loaded model's state dict is the checkpoint, tensor for tensor; save_pretrained writes it back with the
    same quantization_config, and that loads to the same logits bit for bit."""
    model = _lowbit(ckpt[name])
    stored = safetensors_torch.load_file(os.path.join(ckpt[name], "model.safetensors"))
    sd = model.state_dict()
    assert sorted(sd) == sorted(stored)
    for key, value in stored.items():
        assert sd[key].dtype == value.dtype and torch.equal(sd[key], value), key
    model.save_pretrained(tmp_path)
    with open(os.path.join(ckpt[name], "config.json")) as a, open(tmp_path / "config.json") as b:
        assert json.load(a)["quantization_config"] == json.load(b)["quantization_config"]
    again = _lowbit(str(tmp_path))
    assert torch.equal(_logits(again, x), _logits(model, x))
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in sd.items())


# ------------------------------------------------------------- float checkpoints quantized on load


@needs_bnb
@pytest.mark.parametrize("config", [NF4, FP4, INT8], ids=["nf4-double", "fp4", "int8"])
def test_quantize_on_load_matches_bitsandbytes(ckpt, x, config):
    bnb_config = transformers.BitsAndBytesConfig(**config)
    ours = _lowbit(ckpt["fp32"], quantization_config=bnb_config)
    theirs = _bnb_load(ckpt["fp32"], quantization_config=bnb_config)
    assert _kinds(ours) == {n: (lnn.Linear8bitLt if "load_in_8bit" in config else lnn.Linear4bit)
                            if n != "lm_head" else torch.nn.Linear for n in _kinds(theirs)}
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert _rel(_logits(ours, x), _logits(theirs, x)) < (TOL_INT8 if "load_in_8bit" in config else TOL_4BIT)
    assert torch.equal(_greedy(ours, x), _greedy(theirs, x))


@pytest.mark.parametrize("config", [NF4, INT8], ids=["nf4-double", "int8"])
def test_quantize_on_load_dict_is_the_config_object(ckpt, x, config):
    """A dict of BitsAndBytesConfig's fields and the object itself quantize alike; config.quantization_config is
    transformers' dict of it."""
    a = _lowbit(ckpt["fp32"], quantization_config=dict(config))
    bnb_config = transformers.BitsAndBytesConfig(**config)
    b = _lowbit(ckpt["fp32"], quantization_config=bnb_config)
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    written = {k: getattr(v, "value", v) for k, v in bnb_config.to_dict().items()}
    assert a.config.quantization_config == b.config.quantization_config == written


@needs_bnb
def test_lowbit_written_checkpoint_loads_in_bitsandbytes(ckpt, x, tmp_path):
    ours = _lowbit(ckpt["fp32"], quantization_config=NF4)
    ours.save_pretrained(tmp_path)
    theirs = _bnb_load(str(tmp_path))
    assert type(theirs.model.layers[0].self_attn.q_proj).__module__.startswith("bitsandbytes")
    st = theirs.state_dict()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, st[key].cpu()), key
    assert _rel(_logits(ours, x), _logits(theirs, x)) < TOL_4BIT


def test_skip_modules(ckpt, x, tmp_path):
    """llm_int8_skip_modules (transformers' patterns: a name, a suffix, a regex to a module boundary) stay
    torch.nn.Linear, on load and after a round trip through save_pretrained; lm_head is quantized when the list
    leaves it out (the list replaces transformers' default, as in transformers)."""
    config = dict(NF4, llm_int8_skip_modules=["o_proj", r"model\.layers\.1\.mlp"])
    model = _lowbit(ckpt["fp32"], quantization_config=config)
    kinds = _kinds(model)
    floats = {n for n, k in kinds.items() if k is torch.nn.Linear}
    assert floats == {"model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.o_proj",
                      "model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj"}
    assert kinds["lm_head"] is lnn.Linear4bit and kinds["model.layers.0.mlp.up_proj"] is lnn.Linear4bit
    float_model = transformers.AutoModelForCausalLM.from_pretrained(ckpt["fp32"])
    assert torch.equal(model.model.layers[1].mlp.up_proj.weight, float_model.model.layers[1].mlp.up_proj.weight)
    model.save_pretrained(tmp_path)
    again = _lowbit(str(tmp_path))
    assert _kinds(again) == kinds
    assert torch.equal(_logits(again, x), _logits(model, x))


def test_tied_embeddings_and_dtype(tmp_path, x):
    """A model whose lm_head shares the embedding: lm_head stays float and tied, on load and after a round trip;
    dtype= converts the float parameters and the weights before they are quantized (the state's dtype);
    quant_storage bfloat16 keeps the codes as bfloat16."""
    path = tiny_llama(tmp_path / "tied", seed=1, tie_word_embeddings=True)
    config = dict(NF4, bnb_4bit_quant_storage="bfloat16")
    model = _lowbit(path, quantization_config=config, dtype=torch.bfloat16)
    assert model.lm_head.weight is model.model.embed_tokens.weight and type(model.lm_head) is torch.nn.Linear
    assert model.model.norm.weight.dtype == torch.bfloat16 and model.model.embed_tokens.weight.dtype == torch.bfloat16
    w = model.model.layers[0].mlp.up_proj.weight
    assert isinstance(w, lnn.Params4bit) and w.dtype == torch.bfloat16 and w.quant_state.dtype == torch.bfloat16
    model.save_pretrained(tmp_path / "q")
    again = _lowbit(str(tmp_path / "q"))
    assert again.lm_head.weight is again.model.embed_tokens.weight
    assert torch.equal(_logits(again, x), _logits(model, x))


@needs_bnb
def test_gpt2_conv1d(x, tmp_path):
    """GPT-2's Conv1D layers (weight [in, out]) become Linear4bit as in transformers: quantized transposed on load,
    stored as a Linear's; both ways bitsandbytes' logits."""
    torch.manual_seed(2)
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=64, bos_token_id=1,
                                     eos_token_id=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "fp32")
    bnb_config = transformers.BitsAndBytesConfig(**NF4)
    ours = _lowbit(str(tmp_path / "fp32"), quantization_config=bnb_config)
    theirs = _bnb_load(str(tmp_path / "fp32"), quantization_config=bnb_config)
    attn = ours.transformer.h[0].attn.c_attn
    assert type(attn) is lnn.Linear4bit and (attn.in_features, attn.out_features) == (64, 192)
    assert type(ours.lm_head) is torch.nn.Linear
    assert _rel(_logits(ours, x), _logits(theirs, x)) < TOL_4BIT
    theirs.save_pretrained(tmp_path / "nf4")
    assert _rel(_logits(_lowbit(str(tmp_path / "nf4")), x), _logits(theirs, x)) < TOL_4BIT


def test_compute_dtype_device_and_config_keywords(ckpt, x):
    model = _lowbit(ckpt["nf4"], compute_dtype=torch.bfloat16, device="cpu", attn_implementation="eager",
                    rms_norm_eps=1e-5)
    assert model.config._attn_implementation == "eager" and model.config.rms_norm_eps == 1e-5
    layer = model.model.layers[0].self_attn.q_proj
    assert layer.compute_dtype == torch.bfloat16 and layer.weight.device.type == "cpu"
    assert model.config.quantization_config["bnb_4bit_compute_dtype"] == "bfloat16"
    assert not model.training
    with pytest.warns(UserWarning, match="already quantized; its own quantization_config is used"):
        _lowbit(ckpt["nf4"], quantization_config=FP4)


# ------------------------------------------------------------- errors


def _variant(ckpt, tmp_path, edit=None, drop=None):
    """A copy of the NF4 checkpoint with its quantization_config edited or one tensor dropped."""
    path = tmp_path / "bad"
    shutil.copytree(ckpt["nf4"], path)
    if edit is not None:
        with open(path / "config.json") as f:
            config = json.load(f)
        edit(config["quantization_config"])
        with open(path / "config.json", "w") as f:
            json.dump(config, f)
    if drop is not None:
        sd = safetensors_torch.load_file(path / "model.safetensors")
        del sd[drop]
        safetensors_torch.save_file(sd, path / "model.safetensors", metadata={"format": "pt"})
    return str(path)


@pytest.mark.parametrize("edit, error, match", [
    (lambda q: q.pop("quant_method"), ValueError, r"quantization_config of .*config.json has no 'quant_method'"),
    (lambda q: q.update(quant_method="gptq"), ValueError, "has quant_method 'gptq'; only bitsandbytes'"),
    (lambda q: [q.pop(k) for k in ("load_in_4bit", "_load_in_4bit")], ValueError,
     "must set exactly one of 'load_in_4bit' and 'load_in_8bit' to true .got neither"),
    (lambda q: q.update(bnb_4bit_quant_type="nf3"), ValueError, r"\['bnb_4bit_quant_type'\] must be 'nf4' or 'fp4'"),
    (lambda q: q.update(bnb_4bit_compute_dtype="float8"), ValueError, r"\['bnb_4bit_compute_dtype'\] must be one of"),
], ids=["no-quant-method", "gptq", "no-load-in", "quant-type", "compute-dtype"])
def test_bad_quantization_config_in_checkpoint(ckpt, tmp_path, edit, error, match):
    with pytest.raises(error, match=match):
        _lowbit(_variant(ckpt, tmp_path, edit=edit))


@pytest.mark.parametrize("drop, error, match", [
    ("model.layers.0.self_attn.q_proj.weight.absmax", ValueError,
     "is 4-bit .* but has no tensor model.layers.0.self_attn.q_proj.weight.absmax"),
    ("model.layers.1.mlp.up_proj.weight.quant_state.bitsandbytes__nf4", ValueError,
     "has no tensor model.layers.1.mlp.up_proj.weight.quant_state.bitsandbytes__nf4"),
    ("model.layers.0.mlp.down_proj.weight", ValueError, "has no tensor model.layers.0.mlp.down_proj.weight$"),
    ("model.layers.0.self_attn.k_proj.weight.nested_absmax", RuntimeError,
     "quant state of model.layers.0.self_attn.k_proj.weight does not load: .*nested_absmax"),
    ("model.norm.weight", ValueError, "has no tensor for model.norm.weight"),
], ids=["absmax", "quant-state", "weight", "nested-absmax", "norm"])
def test_missing_tensor(ckpt, tmp_path, drop, error, match):
    with pytest.raises(error, match=match):
        _lowbit(_variant(ckpt, tmp_path, drop=drop))


def test_bad_arguments(ckpt, tmp_path):
    fp32 = ckpt["fp32"]
    with pytest.raises(ValueError, match="config.json in .* has no quantization_config .a float checkpoint.: pass "
                                         "quantization_config="):
        _lowbit(fp32)
    with pytest.raises(ValueError, match=r"quantization_config has unknown keys \['bnb_4bit_quant_typ'\]"):
        _lowbit(fp32, quantization_config={"load_in_4bit": True, "bnb_4bit_quant_typ": "nf4"})
    with pytest.raises(ValueError, match="exactly one of 'load_in_4bit' and 'load_in_8bit' to true .got both"):
        _lowbit(fp32, quantization_config={"load_in_4bit": True, "load_in_8bit": True})
    with pytest.raises(ValueError, match="has quant_method 'awq'"):
        _lowbit(fp32, quantization_config={"quant_method": "awq", "load_in_4bit": True})
    with pytest.raises(TypeError, match="quantization_config must be a dict or a transformers BitsAndBytesConfig"):
        _lowbit(fp32, quantization_config=4)
    with pytest.raises(TypeError, match=r"\['llm_int8_skip_modules'\] must be a list of module names"):
        _lowbit(fp32, quantization_config=dict(INT8, llm_int8_skip_modules="lm_head"))
    with pytest.raises(NotImplementedError, match="llm_int8_has_fp16_weight"):
        _lowbit(fp32, quantization_config=dict(INT8, llm_int8_has_fp16_weight=True))
    with pytest.raises(TypeError, match=r"unknown keyword arguments \['hiden_size'\]"):
        _lowbit(ckpt["nf4"], hiden_size=32)
    with pytest.raises(TypeError, match="model_class must be a transformers model class"):
        lnn.from_pretrained(torch.nn.Linear, ckpt["nf4"])
    with pytest.raises(FileNotFoundError, match="is not a directory .download a hub checkpoint first"):
        _lowbit(str(tmp_path / "nowhere"))
    with pytest.raises(TypeError, match="dtype must be None, torch.float32"):
        _lowbit(ckpt["nf4"], dtype=torch.int8)
    with pytest.raises(TypeError, match="compute_dtype must be None, torch.float32"):
        _lowbit(ckpt["nf4"], compute_dtype=torch.float64)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(os.path.join(ckpt["nf4"], "config.json"), empty / "config.json")
    with pytest.raises(FileNotFoundError, match="holds neither model.safetensors nor model.safetensors.index.json"):
        _lowbit(str(empty))
    quantized = tmp_path / "unlabelled"
    shutil.copytree(ckpt["nf4"], quantized)
    shutil.copy(os.path.join(fp32, "config.json"), quantized / "config.json")
    with pytest.raises(ValueError, match="holds quantized tensors .* but its config.json has no quantization_config"):
        _lowbit(str(quantized), quantization_config=NF4)


def test_sharded_checkpoint(ckpt, x, tmp_path):
    model = _lowbit(ckpt["nf4"])
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and not (tmp_path / "model.safetensors").exists()
    assert torch.equal(_logits(_lowbit(str(tmp_path)), x), _logits(model, x))


# ------------------------------------------------------------- without bitsandbytes

_NO_BNB = r"""
import sys
sys.modules["bitsandbytes"] = None  # import bitsandbytes now raises ImportError
import torch, transformers, lowbit.nn as lnn
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
paths, x, out = sys.argv[1:4], torch.load(sys.argv[4]), sys.argv[5]
result = {}
with torch.no_grad():
    for path in paths[:2]:
        model = lnn.from_pretrained(transformers.AutoModelForCausalLM, path)
        result[path] = model(x).logits
    config = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_use_double_quant=True)
    model = lnn.from_pretrained(transformers.LlamaForCausalLM, paths[2], quantization_config=config)
    result["on-load"] = model(x).logits
result["bitsandbytes"] = sys.modules["bitsandbytes"]
torch.save(result, out)
"""


def test_without_bitsandbytes(ckpt, x, tmp_path):
    """from_pretrained in a process where bitsandbytes cannot be imported: the same logits, bit for bit."""
    torch.save(x, tmp_path / "x.pt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1")
    args = [ckpt["nf4"], ckpt["int8"], ckpt["fp32"], str(tmp_path / "x.pt"), str(tmp_path / "out.pt")]
    done = subprocess.run([sys.executable, "-c", _NO_BNB, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    assert got["bitsandbytes"] is None
    assert torch.equal(got[ckpt["nf4"]], _logits(_lowbit(ckpt["nf4"]), x))
    assert torch.equal(got[ckpt["int8"]], _logits(_lowbit(ckpt["int8"]), x))
    assert torch.equal(got["on-load"], _logits(_lowbit(ckpt["fp32"], quantization_config=NF4), x))
