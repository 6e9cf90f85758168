"""lowbit.nn.replace_linear on small models: which layers it swaps, that each swapped layer is the module the
documented route builds (bit for bit), and that the model's output stays within the format's error."""

import copy

import pytest

torch = pytest.importorskip("torch")

import backends  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402

CUDA_REASON = backends.torch_cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON)))]
# Relative error (Frobenius) of a small random model's output against the float model: a sanity ceiling well
# above what each format gives here (nf4 ~0.12, fp4 ~0.15, int8 ~0.012, fp8 ~0.045), far below a broken layer's.
CEILING = {"nf4": 0.25, "fp4": 0.3, "int8": 0.04, "fp8": 0.1}
TYPES = {"nf4": lnn.Linear4bit, "fp4": lnn.Linear4bit, "int8": lnn.Linear8bitLt, "fp8": lnn.LinearFP8}


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(96, 160), torch.nn.GELU(), torch.nn.Linear(160, 48))


class Block(torch.nn.Module):
    """A pre-norm transformer block with its output head: attention and MLP projections as nn.Linear."""

    def __init__(self, d=64, heads=4, vocab=50):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        self.up_proj, self.down_proj = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        B, S, D = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(B, S, self.heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, S, D))
        x = x + self.down_proj(torch.nn.functional.gelu(self.up_proj(self.ln2(x))))
        return self.lm_head(x)


def _direct(linear, kind, device):
    """The module the documented route builds: construct, load the float state dict, move (which quantizes)."""
    if kind == "fp8":
        return lnn.LinearFP8.from_linear(linear).to(device)
    bias = linear.bias is not None
    if kind == "int8":
        m = lnn.Linear8bitLt(linear.in_features, linear.out_features, bias, has_fp16_weights=False)
    else:
        m = lnn.Linear4bit(linear.in_features, linear.out_features, bias, quant_type=kind)
    m.load_state_dict(linear.state_dict())
    return m.to(device)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _inputs_of(model, names):
    """Each named layer's input during one forward, captured by hooks."""
    seen = {}
    hooks = [model.get_submodule(n).register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, i[0]))
             for n in names]
    return seen, hooks


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["nf4", "fp4", "int8", "fp8"])
def test_mlp(device, kind):
    ref = _mlp(seed=1).to(device)
    model = lnn.replace_linear(copy.deepcopy(ref), kind)
    assert [type(model[i]) for i in (0, 2)] == [TYPES[kind]] * 2 and isinstance(model[1], torch.nn.GELU)
    x = torch.randn(2, 5, 96, generator=torch.Generator().manual_seed(2)).to(device)
    seen, hooks = _inputs_of(model, ["0", "2"])
    with torch.no_grad():
        y = model(x)
        for h in hooks:
            h.remove()
        for i in ("0", "2"):  # each swapped layer is the module built directly from the float layer
            direct = _direct(ref.get_submodule(i), kind, device)
            assert torch.equal(model.get_submodule(i)(seen[i]), direct(seen[i])), i
        assert _rel(y, ref(x)) < CEILING[kind]
        if kind in ("nf4", "fp4"):  # the float model with the dequantized weights gives the same, to rounding
            deq = copy.deepcopy(ref)
            for i in (0, 2):
                deq[i].weight.copy_(F.dequantize_4bit(model[i].weight, model[i].weight.quant_state))
            assert _rel(y, deq(x)) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["nf4", "int8", "fp8"])
def test_transformer_block(device, kind):
    torch.manual_seed(3)
    ref = Block().to(device)
    model = lnn.replace_linear(copy.deepcopy(ref), kind, compute_dtype=torch.bfloat16)
    swapped = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    assert all(type(getattr(model, n)) is TYPES[kind] for n in swapped)
    assert type(model.lm_head) is torch.nn.Linear and type(model.ln1) is torch.nn.LayerNorm  # skipped by default
    if kind == "nf4":
        assert model.q_proj.compute_dtype == torch.bfloat16
    x = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(4)).to(device)
    with torch.no_grad():
        y = model(x)
        assert y.dtype == torch.float32 and y.shape == (2, 7, 50)
        assert _rel(y, ref(x)) < CEILING[kind]


def test_skip_and_factory():
    model = Block()
    lnn.replace_linear(model, "fp4", skip=["*_proj"])  # globs: only lm_head is left to swap
    assert type(model.lm_head) is lnn.Linear4bit and type(model.q_proj) is torch.nn.Linear
    model = Block()
    lnn.replace_linear(model, "int8", skip=lambda name, m: m.out_features > 64)
    assert type(model.up_proj) is torch.nn.Linear and type(model.down_proj) is lnn.Linear8bitLt
    model = Block()
    made = []

    def factory(name, linear):
        made.append(name)
        return _direct(linear, "nf4", "cpu")

    lnn.replace_linear(model, factory, skip=("lm_head", "o_proj"))
    assert made == ["q_proj", "k_proj", "v_proj", "up_proj", "down_proj"]
    single = lnn.replace_linear(torch.nn.Linear(32, 16), "nf4", skip=())
    assert type(single) is lnn.Linear4bit and single.weight.bnb_quantized
    already = lnn.replace_linear(torch.nn.Sequential(single), "int8", skip=())
    assert already[0] is single  # lowbit modules (Linear subclasses) are left alone


@pytest.mark.parametrize("kind", ["nf4", "fp4", "int8", "fp8"])
def test_load_a_quantized_checkpoint(kind):
    """quantize=False: empty modules on the meta device take a quantized state dict (as a checkpoint holds it)
    with assign=True, and compute what the model that wrote it computes."""
    torch.manual_seed(6)
    written = lnn.replace_linear(Block(), kind)
    checkpoint = {k: v.clone() for k, v in written.state_dict().items()}
    with torch.device("meta"):
        model = Block()
    lnn.replace_linear(model, kind, quantize=False)
    assert all(p.device.type == "meta" for p in model.q_proj.parameters())
    model.load_state_dict(checkpoint, assign=True)
    assert type(model.q_proj.weight) is type(written.q_proj.weight)
    x = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert torch.equal(model(x), written(x))


def test_replace_options_reach_the_modules():
    model = lnn.replace_linear(_mlp(seed=5), "nf4", skip=(), compress_statistics=False, blocksize=128,
                               quant_storage=torch.bfloat16)
    w = model[0].weight
    assert w.dtype == torch.bfloat16 and not w.quant_state.nested and w.quant_state.blocksize == 128
    model = lnn.replace_linear(_mlp(seed=5), "int8", skip=(), threshold=4.0)
    assert model[0].threshold == 4.0 and model[0].weight.requires_grad is False


def test_replace_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of nf4, fp4, int8, fp8"):
        lnn.replace_linear(_mlp(1), "int4")
    with pytest.raises(TypeError, match="kind must be a string or a callable"):
        lnn.replace_linear(_mlp(1), 4)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        lnn.replace_linear({"a": 1})
    with pytest.raises(TypeError, match="skip must hold module names or globs"):
        lnn.replace_linear(_mlp(1), "nf4", skip=[3])
    with pytest.raises(ValueError, match="in_features must be a multiple of 16"):
        lnn.replace_linear(torch.nn.Sequential(torch.nn.Linear(70, 8)), "fp8")
